//! The rows a WHERE clause keeps, as one mask.
//!
//! Most WHERE clauses are ANDs of a column compared with a constant
//! (TPC-H Q6: five of them over three columns). Evaluated one comparison
//! at a time, each is a pass over its column into a new boolean array,
//! and each AND another pass and array. Here the comparisons of one
//! integer-like column fold into one range, tested in one pass that ANDs
//! into the mask in place; whatever else the clause holds is evaluated as
//! an expression and ANDed in.

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Decimal128Type, Decimal64Type, Int32Type, Int64Type,
};

use crate::error::Result;
use crate::expr::{lossless, BinOp, Expr};
use crate::plan::flip;

/// The rows of `batch` that `filter` is TRUE for (FALSE and NULL drop a
/// row, as SQL's WHERE does), as a mask without nulls.
pub(crate) fn keep_mask(filter: &Expr, batch: &RecordBatch) -> Result<BooleanArray> {
    let mut conjuncts = Vec::new();
    split_and(filter, &mut conjuncts);
    let mut ranges: Vec<(&str, Range)> = Vec::new();
    let mut rest: Vec<&Expr> = Vec::new();
    for c in conjuncts {
        match bound(c, batch) {
            Some((column, b)) => match ranges.iter_mut().find(|(name, _)| *name == column) {
                Some((_, range)) => range.narrow(b),
                None => {
                    let mut range = Range::ALL;
                    range.narrow(b);
                    ranges.push((column, range));
                }
            },
            None => rest.push(c),
        }
    }
    let rows = batch.num_rows();
    let mut mask: Option<BooleanBuffer> = None;
    let mut and = |m: BooleanBuffer| {
        mask = Some(match mask.take() {
            Some(old) => &old & &m,
            None => m,
        });
    };
    for (column, range) in &ranges {
        // `bound` found the column, so it is there.
        if let Some(a) = batch.column_by_name(column) {
            and(in_range(a, range));
        }
    }
    for c in rest {
        let b = c.eval_predicate(batch)?;
        let b = if b.null_count() > 0 {
            arrow::compute::prep_null_mask_filter(&b)
        } else {
            b
        };
        and(b.values().clone());
    }
    Ok(BooleanArray::new(
        mask.unwrap_or_else(|| BooleanBuffer::new_set(rows)),
        None,
    ))
}

fn split_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::Binary(BinOp::And, l, r) => {
            split_and(l, out);
            split_and(r, out);
        }
        other => out.push(other),
    }
}

/// The values a column may take, both ends included, as 128-bit integers
/// (every type taken here fits); empty when `low > high`.
#[derive(Debug, Clone, Copy)]
struct Range {
    low: i128,
    high: i128,
}

impl Range {
    const ALL: Range = Range {
        low: i128::MIN,
        high: i128::MAX,
    };

    fn narrow(&mut self, b: Range) {
        self.low = self.low.max(b.low);
        self.high = self.high.min(b.high);
    }
}

/// `column op constant` (either way round) over a column of an integer
/// type that the constant converts to without loss, as the column's name
/// and the range it keeps; None for any other conjunct, which is then
/// evaluated as an expression.
fn bound<'a>(conjunct: &'a Expr, batch: &RecordBatch) -> Option<(&'a str, Range)> {
    let Expr::Binary(op, l, r) = conjunct else {
        return None;
    };
    let (column, op, lit) = match (l.as_ref(), r.as_ref()) {
        (Expr::Column(c), Expr::Lit(v)) => (c, *op, v),
        (Expr::Lit(v), Expr::Column(c)) => (c, flip(*op), v),
        _ => return None,
    };
    let a = batch.column_by_name(column)?;
    let t = a.data_type();
    if !integer_like(t) {
        return None;
    }
    // The constant as the expression path would compare it: in the
    // column's type when that loses nothing (else that path widens both,
    // and so is left to it).
    let k = lossless(&lit.array().ok()?, t)?;
    let k = native(&k)?;
    let range = match op {
        BinOp::Eq => Range { low: k, high: k },
        BinOp::Lt => Range {
            low: i128::MIN,
            high: k.checked_sub(1)?,
        },
        BinOp::Le => Range {
            low: i128::MIN,
            high: k,
        },
        BinOp::Gt => Range {
            low: k.checked_add(1)?,
            high: i128::MAX,
        },
        BinOp::Ge => Range {
            low: k,
            high: i128::MAX,
        },
        _ => return None,
    };
    Some((column.as_str(), range))
}

fn integer_like(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int32
            | DataType::Int64
            | DataType::Date32
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
    )
}

/// The one value of a one-row array of an [`integer_like`] type; None if
/// it is NULL (a comparison with NULL keeps no row: the expression path
/// says so).
fn native(a: &ArrayRef) -> Option<i128> {
    if a.len() != 1 || a.is_null(0) {
        return None;
    }
    Some(match a.data_type() {
        DataType::Int32 => i128::from(a.as_primitive::<Int32Type>().value(0)),
        DataType::Date32 => i128::from(a.as_primitive::<Date32Type>().value(0)),
        DataType::Int64 => i128::from(a.as_primitive::<Int64Type>().value(0)),
        DataType::Decimal64(..) => i128::from(a.as_primitive::<Decimal64Type>().value(0)),
        DataType::Decimal128(..) => a.as_primitive::<Decimal128Type>().value(0),
        _ => return None,
    })
}

/// The rows of `a` (an [`integer_like`] array) whose value lies in
/// `range`; a NULL row is not.
fn in_range(a: &ArrayRef, range: &Range) -> BooleanBuffer {
    let kept = match a.data_type() {
        DataType::Int32 => range_mask::<Int32Type>(a, range),
        DataType::Date32 => range_mask::<Date32Type>(a, range),
        DataType::Int64 => range_mask::<Int64Type>(a, range),
        DataType::Decimal64(..) => range_mask::<Decimal64Type>(a, range),
        _ => range_mask::<Decimal128Type>(a, range),
    };
    match a.nulls() {
        Some(valid) => &kept & valid.inner(),
        None => kept,
    }
}

/// The rows of `a`, an array of `T`, whose value lies in `range`.
fn range_mask<T>(a: &ArrayRef, range: &Range) -> BooleanBuffer
where
    T: ArrowPrimitiveType,
    T::Native: TryFrom<i128> + Ord + Copy,
{
    let values = a.as_primitive::<T>().values();
    if range.low > range.high {
        return BooleanBuffer::new_unset(values.len());
    }
    // The ends in the column's own type: an end past the type's reach
    // is no limit on that side.
    let low = T::Native::try_from(range.low).ok();
    let high = T::Native::try_from(range.high).ok();
    match (low, high) {
        (Some(lo), Some(hi)) => pack(values, |v| (v >= lo) & (v <= hi)),
        (Some(lo), None) if range.high > 0 => pack(values, |v| v >= lo),
        (None, Some(hi)) if range.low < 0 => pack(values, |v| v <= hi),
        (None, None) if range.low < 0 && range.high > 0 => BooleanBuffer::new_set(values.len()),
        // Both ends on one side of the type's reach: no value lies between.
        _ => BooleanBuffer::new_unset(values.len()),
    }
}

/// `keep` of each value, 64 to a word. The tests fill a row of 64 bytes
/// (a loop the compiler vectorises: shifting each test's bit into a word
/// in turn does not), and one multiply gathers each 8 bytes' low bits.
fn pack<N: Copy>(values: &[N], keep: impl Fn(N) -> bool) -> BooleanBuffer {
    // Byte i of x (0 or 1) lands at bit 56 + i of x * GATHER.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let mut words: Vec<u64> = Vec::with_capacity(values.len().div_ceil(64));
    let mut chunks = values.chunks_exact(64);
    for chunk in &mut chunks {
        let mut flags = [0u8; 64];
        for (flag, &v) in flags.iter_mut().zip(chunk) {
            *flag = u8::from(keep(v));
        }
        let mut word = 0u64;
        for (i, eight) in flags.chunks_exact(8).enumerate() {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(eight);
            word |= (u64::from_le_bytes(bytes).wrapping_mul(GATHER) >> 56) << (8 * i);
        }
        words.push(word);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = 0u64;
        for (bit, &v) in rest.iter().enumerate() {
            word |= u64::from(keep(v)) << bit;
        }
        words.push(word);
    }
    BooleanBuffer::new(arrow::buffer::Buffer::from_vec(words), 0, values.len())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Date32Array, Decimal128Array, Decimal64Array, Int32Array, Int64Array};
    use arrow::datatypes::{Field, Schema};
    use proptest::prelude::*;

    use super::*;
    use crate::expr::Lit;

    /// A batch of one column of each type taken here, with NULLs, whose
    /// values crowd the type's ends and the constants the tests use.
    fn batch(seeds: &[(i64, bool)]) -> RecordBatch {
        let pick = |i: usize| seeds[i % seeds.len()];
        let rows = seeds.len();
        let opt = |i: usize, f: &dyn Fn(i64) -> i128| {
            let (v, null) = pick(i);
            (!null).then(|| f(v))
        };
        let i32s =
            Int32Array::from_iter((0..rows).map(|i| opt(i, &|v| v as i128).map(|v| v as i32)));
        let i64s = Int64Array::from_iter(
            (0..rows).map(|i| opt(i * 7 + 1, &|v| v as i128).map(|v| v as i64)),
        );
        let dates = Date32Array::from_iter(
            (0..rows).map(|i| opt(i * 3 + 2, &|v| v as i128).map(|v| v as i32)),
        );
        let d64 = Decimal64Array::from_iter(
            (0..rows).map(|i| opt(i * 5 + 3, &|v| v as i128).map(|v| v as i64)),
        )
        .with_precision_and_scale(15, 2)
        .unwrap();
        let d128 = Decimal128Array::from_iter(
            (0..rows).map(|i| opt(i * 11 + 4, &|v| v as i128 * 1_000_000_007)),
        )
        .with_precision_and_scale(38, 3)
        .unwrap();
        let schema = Schema::new(vec![
            Field::new("i32", DataType::Int32, true),
            Field::new("i64", DataType::Int64, true),
            Field::new("date", DataType::Date32, true),
            Field::new("d64", DataType::Decimal64(15, 2), true),
            Field::new("d128", DataType::Decimal128(38, 3), true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(i32s),
                Arc::new(i64s),
                Arc::new(dates),
                Arc::new(d64),
                Arc::new(d128),
            ],
        )
        .unwrap()
    }

    fn column() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["i32", "i64", "date", "d64", "d128"])
    }

    fn literal() -> impl Strategy<Value = Lit> {
        prop_oneof![
            (-40i64..40).prop_map(Lit::Int),
            prop::sample::select(vec![
                i64::MIN,
                i64::MAX,
                i32::MIN as i64,
                i32::MAX as i64,
                i32::MAX as i64 + 1
            ])
            .prop_map(Lit::Int),
            // Scales 0 to 4: some convert to a column's scale, some do not.
            (-4000i128..4000, 0i8..5).prop_map(|(v, s)| Lit::Decimal(v, 38, s)),
            (-40i32..40).prop_map(Lit::Date),
            Just(Lit::Null),
            Just(Lit::Str("1970-01-05".into())),
            Just(Lit::Float(2.5)),
        ]
    }

    fn op() -> impl Strategy<Value = BinOp> {
        prop::sample::select(vec![
            BinOp::Eq,
            BinOp::Ne,
            BinOp::Lt,
            BinOp::Le,
            BinOp::Gt,
            BinOp::Ge,
        ])
    }

    /// A comparison of a column with a constant, either way round.
    fn comparison() -> impl Strategy<Value = Expr> {
        (column(), op(), literal(), any::<bool>()).prop_map(|(c, op, lit, flipped)| {
            let (c, lit) = (Expr::Column(c.into()), Expr::Lit(lit));
            if flipped {
                Expr::binary(op, lit, c)
            } else {
                Expr::binary(op, c, lit)
            }
        })
    }

    /// An AND of comparisons, with an OR now and then (evaluated whole).
    fn filter() -> impl Strategy<Value = Expr> {
        prop::collection::vec((comparison(), prop::option::of(comparison())), 1..6).prop_map(
            |parts| {
                parts
                    .into_iter()
                    .map(|(c, or)| match or {
                        Some(o) => Expr::binary(BinOp::Or, c, o),
                        None => c,
                    })
                    .reduce(|a, b| Expr::binary(BinOp::And, a, b))
                    .expect("at least one part")
            },
        )
    }

    fn seeds() -> impl Strategy<Value = Vec<(i64, bool)>> {
        let value = prop_oneof![
            -50i64..50,
            prop::sample::select(vec![
                i64::MIN,
                i64::MAX,
                i32::MIN as i64,
                i32::MAX as i64,
                0
            ]),
        ];
        prop::collection::vec((value, prop::bool::weighted(0.1)), 1..300)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The mask keeps exactly the rows the expression is TRUE for,
        /// whenever the expression evaluates at all.
        #[test]
        fn the_mask_keeps_the_rows_the_expression_is_true_for(
            seeds in seeds(),
            f in filter(),
        ) {
            let b = batch(&seeds);
            let Ok(whole) = f.eval_predicate(&b) else {
                // A comparison the types refuse: the mask must refuse too
                // or keep what it can; it never decides a type error away.
                return Ok(());
            };
            let want = if whole.nulls().is_some() {
                arrow::compute::prep_null_mask_filter(&whole)
            } else {
                whole
            };
            let got = keep_mask(&f, &b).unwrap();
            prop_assert_eq!(got.null_count(), 0);
            prop_assert_eq!(got.values(), want.values(), "{:?}", f);
        }
    }

    #[test]
    fn a_range_past_the_types_reach_keeps_all_or_nothing() {
        let b = batch(&[
            (i32::MIN as i64, false),
            (0, false),
            (i32::MAX as i64, false),
            (5, true),
        ]);
        let cmp = |op, v| Expr::binary(op, Expr::Column("i32".into()), Expr::Lit(Lit::Int(v)));
        let kept = |f: &Expr| keep_mask(f, &b).unwrap().true_count();
        assert_eq!(kept(&cmp(BinOp::Ge, i64::MIN)), 3);
        assert_eq!(kept(&cmp(BinOp::Le, i64::MAX)), 3);
        assert_eq!(kept(&cmp(BinOp::Gt, i32::MAX as i64)), 0);
        assert_eq!(kept(&cmp(BinOp::Lt, i32::MIN as i64)), 0);
        let empty = Expr::binary(BinOp::And, cmp(BinOp::Gt, 5), cmp(BinOp::Lt, 3));
        assert_eq!(kept(&empty), 0);
    }
}
