//! Grouping and the aggregates: each keeps a state per group that
//! folds rows (at the nodes), merges other states (at the entry node) and
//! finishes into the answer. States travel as arrow columns.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryBuilder, Decimal128Array, Float64Array,
    Int64Array, ListBuilder, PrimitiveArray, StringViewArray,
};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Decimal128Type, Float64Type, Int64Type, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow::row::{OwnedRow, RowConverter, SortField};
use hashbrown::{HashMap, HashSet};

use crate::error::{QueryError, Result};
use crate::expr::{canonical, cast, AggFunc};

/// Groups one query may hold at a node or at the entry node.
pub const MAX_GROUPS: usize = 10_000_000;

/// Rows in to group numbers out.
pub(crate) struct Groups {
    /// None: no GROUP BY, every row is group 0.
    converter: Option<RowConverter>,
    /// Keys of these types are looked up by [`fast_key`], not by the row
    /// format (which encodes a whole batch of rows before the first
    /// lookup: a fifth of TPC-H Q1's time in a profile).
    fast: bool,
    index: HashMap<Box<[u8]>, u32>,
    keys: Vec<OwnedRow>,
    key_bytes: usize,
    count: usize,
}

impl Groups {
    /// Groups over keys of these (canonical) types.
    pub(crate) fn new(key_types: &[DataType]) -> Result<Groups> {
        let converter = if key_types.is_empty() {
            None
        } else {
            let fields = key_types
                .iter()
                .map(|t| SortField::new(t.clone()))
                .collect();
            Some(RowConverter::new(fields).map_err(|e| QueryError::compute("group keys", e))?)
        };
        let count = usize::from(converter.is_none());
        let fast = !key_types.is_empty()
            && key_types.iter().all(|t| {
                matches!(
                    t,
                    DataType::Utf8View
                        | DataType::Int64
                        | DataType::Date32
                        | DataType::Decimal128(..)
                )
            });
        Ok(Groups {
            converter,
            fast,
            index: HashMap::new(),
            keys: Vec::new(),
            key_bytes: 0,
            count,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Bytes the groups' keys hold.
    pub(crate) fn held_bytes(&self) -> usize {
        self.key_bytes * 2 + self.keys.len() * 48
    }

    /// The group number of each of `rows` rows with key columns `keys`,
    /// new groups made as met.
    pub(crate) fn assign(&mut self, keys: &[ArrayRef], rows: usize) -> Result<Vec<u32>> {
        let Some(converter) = &self.converter else {
            return Ok(vec![0; rows]);
        };
        if self.fast {
            return self.assign_fast(keys, rows);
        }
        let encoded = converter
            .convert_columns(keys)
            .map_err(|e| QueryError::compute("group keys", e))?;
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            let row = encoded.row(i);
            let bytes = row.as_ref();
            let g = match self.index.get(bytes) {
                Some(&g) => g,
                None => {
                    if self.count >= MAX_GROUPS {
                        return Err(QueryError::Limit(format!(
                            "more than {MAX_GROUPS} groups; group by fewer distinct keys"
                        )));
                    }
                    let g = self.count as u32;
                    self.index.insert(bytes.into(), g);
                    self.keys.push(row.owned());
                    self.key_bytes += bytes.len();
                    self.count += 1;
                    g
                }
            };
            out.push(g);
        }
        Ok(out)
    }

    /// [`Groups::assign`] for keys [`fast_key`] encodes: a row's key is
    /// put in row format only when it makes a new group.
    fn assign_fast(&mut self, keys: &[ArrayRef], rows: usize) -> Result<Vec<u32>> {
        let columns = keys
            .iter()
            .map(KeyColumn::new)
            .collect::<Result<Vec<_>>>()?;
        let mut buf = Vec::with_capacity(64);
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            buf.clear();
            for c in &columns {
                c.encode(i, &mut buf);
            }
            let g = match self.index.get(buf.as_slice()) {
                Some(&g) => g,
                None => {
                    if self.count >= MAX_GROUPS {
                        return Err(QueryError::Limit(format!(
                            "more than {MAX_GROUPS} groups; group by fewer distinct keys"
                        )));
                    }
                    let converter = self.converter.as_ref().ok_or_else(|| {
                        QueryError::Invalid("grouping keys with no row converter".into())
                    })?;
                    let one: Vec<ArrayRef> = keys.iter().map(|k| k.slice(i, 1)).collect();
                    let row = converter
                        .convert_columns(&one)
                        .map_err(|e| QueryError::compute("group keys", e))?
                        .row(0)
                        .owned();
                    let g = self.count as u32;
                    self.key_bytes += buf.len() + row.as_ref().len();
                    self.index.insert(buf.as_slice().into(), g);
                    self.keys.push(row);
                    self.count += 1;
                    g
                }
            };
            out.push(g);
        }
        Ok(out)
    }

    /// The key columns (named `#k0`, `#k1`, ...) with their fields, one
    /// row per group in group order.
    pub(crate) fn key_fields(&self) -> Result<(Vec<arrow::datatypes::Field>, Vec<ArrayRef>)> {
        let columns = self.key_columns()?;
        let fields = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                arrow::datatypes::Field::new(format!("#k{i}"), c.data_type().clone(), true)
            })
            .collect();
        Ok((fields, columns))
    }

    /// The key columns, one row per group in group order.
    pub(crate) fn key_columns(&self) -> Result<Vec<ArrayRef>> {
        match &self.converter {
            None => Ok(Vec::new()),
            Some(c) => c
                .convert_rows(self.keys.iter().map(OwnedRow::row))
                .map_err(|e| QueryError::compute("group keys", e)),
        }
    }
}

/// A key column read for [`Groups::assign_fast`]: each value encoded as
/// a validity byte then its bytes (strings with their length first), so
/// two rows' encodings are equal exactly when their keys are.
enum KeyColumn<'a> {
    Str(&'a StringViewArray),
    I64(&'a PrimitiveArray<Int64Type>),
    I32(&'a PrimitiveArray<Date32Type>),
    I128(&'a PrimitiveArray<Decimal128Type>),
}

impl<'a> KeyColumn<'a> {
    fn new(a: &'a ArrayRef) -> Result<KeyColumn<'a>> {
        Ok(match a.data_type() {
            DataType::Utf8View => KeyColumn::Str(a.as_string_view()),
            DataType::Int64 => KeyColumn::I64(primitive::<Int64Type>(a)?),
            DataType::Date32 => KeyColumn::I32(primitive::<Date32Type>(a)?),
            DataType::Decimal128(..) => KeyColumn::I128(primitive::<Decimal128Type>(a)?),
            other => {
                return Err(QueryError::Invalid(format!(
                    "a group key of type {other} on the fast path"
                )))
            }
        })
    }

    fn encode(&self, i: usize, buf: &mut Vec<u8>) {
        let valid = match self {
            KeyColumn::Str(a) => a.is_valid(i),
            KeyColumn::I64(a) => a.is_valid(i),
            KeyColumn::I32(a) => a.is_valid(i),
            KeyColumn::I128(a) => a.is_valid(i),
        };
        buf.push(u8::from(valid));
        if !valid {
            return;
        }
        match self {
            KeyColumn::Str(a) => {
                let v = a.value(i).as_bytes();
                buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
                buf.extend_from_slice(v);
            }
            KeyColumn::I64(a) => buf.extend_from_slice(&a.value(i).to_le_bytes()),
            KeyColumn::I32(a) => buf.extend_from_slice(&a.value(i).to_le_bytes()),
            KeyColumn::I128(a) => buf.extend_from_slice(&a.value(i).to_le_bytes()),
        }
    }
}

/// An aggregate's per-group state.
pub(crate) trait Accumulator: Send {
    /// Folds rows: `groups[i]` is row `i`'s group; `arg` is the argument
    /// (None for count(*)).
    fn update(&mut self, groups: &[u32], groups_len: usize, arg: Option<&ArrayRef>) -> Result<()>;
    /// Folds states made by [`Accumulator::state`] elsewhere.
    fn merge(&mut self, groups: &[u32], groups_len: usize, state: &[ArrayRef]) -> Result<()>;
    /// The state, one row per group.
    fn state(&self) -> Result<Vec<ArrayRef>>;
    /// The answer, one row per group.
    fn finish(&self) -> Result<ArrayRef>;
    /// Bytes held.
    fn held_bytes(&self) -> usize;
    /// Makes room for `groups_len` groups (groups no row reached yet).
    fn resize(&mut self, groups_len: usize);
}

/// An accumulator for `func` over arguments of type `arg` (None for
/// count(*)); what type the argument is cast to before [`Accumulator::update`]
/// is [`arg_type`].
pub(crate) fn accumulator(func: AggFunc, arg: Option<&DataType>) -> Result<Box<dyn Accumulator>> {
    let arg = arg.map(canonical);
    let bad = |what: &str| {
        Err(QueryError::Type(format!(
            "{what} does not take a value of type {}",
            arg.as_ref().map_or("none".into(), |t| t.to_string())
        )))
    };
    Ok(match (func, arg.as_ref()) {
        (AggFunc::CountStar | AggFunc::Count, _) => Box::new(Count::default()),
        (AggFunc::CountDistinct, Some(t)) => Box::new(CountDistinct::new(t)?),
        (AggFunc::Sum | AggFunc::Avg, Some(t)) => {
            let kind = match t {
                DataType::Int64 => SumKind::Exact(0),
                DataType::Decimal128(_, s) => SumKind::Exact(*s),
                DataType::Float64 => SumKind::Float,
                DataType::Null => SumKind::Exact(0),
                _ => return bad(if func == AggFunc::Sum { "sum" } else { "avg" }),
            };
            Box::new(Sum::new(kind, func == AggFunc::Avg))
        }
        (AggFunc::Min | AggFunc::Max, Some(t)) => {
            let min = func == AggFunc::Min;
            match t {
                DataType::Int64 => Box::new(MinMax::<Int64Type>::new(t, min)),
                DataType::Float64 => Box::new(MinMax::<Float64Type>::new(t, min)),
                DataType::Decimal128(..) => Box::new(MinMax::<Decimal128Type>::new(t, min)),
                DataType::Date32 => Box::new(MinMax::<Date32Type>::new(t, min)),
                DataType::Timestamp(TimeUnit::Second, _) => {
                    Box::new(MinMax::<TimestampSecondType>::new(t, min))
                }
                DataType::Timestamp(TimeUnit::Millisecond, _) => {
                    Box::new(MinMax::<TimestampMillisecondType>::new(t, min))
                }
                DataType::Timestamp(TimeUnit::Microsecond, _) => {
                    Box::new(MinMax::<TimestampMicrosecondType>::new(t, min))
                }
                DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                    Box::new(MinMax::<TimestampNanosecondType>::new(t, min))
                }
                DataType::Utf8View => Box::new(StrMinMax::new(min)),
                DataType::Null => Box::new(MinMax::<Int64Type>::new(&DataType::Int64, min)),
                _ => return bad(if min { "min" } else { "max" }),
            }
        }
        (_, None) => return Err(QueryError::Invalid("an aggregate with no argument".into())),
    })
}

/// The type an aggregate's argument is cast to before it folds rows.
pub(crate) fn arg_type(t: &DataType) -> DataType {
    match canonical(t) {
        DataType::Null => DataType::Int64,
        other => other,
    }
}

fn grow<T: Clone>(v: &mut Vec<T>, len: usize, fill: T) {
    if v.len() < len {
        v.resize(len, fill);
    }
}

fn state_at(state: &[ArrayRef], i: usize) -> Result<&ArrayRef> {
    state
        .get(i)
        .ok_or_else(|| QueryError::Partial(format!("an aggregate state lacks column {i}")))
}

#[derive(Default)]
struct Count {
    counts: Vec<i64>,
}

impl Accumulator for Count {
    fn update(&mut self, groups: &[u32], groups_len: usize, arg: Option<&ArrayRef>) -> Result<()> {
        grow(&mut self.counts, groups_len, 0);
        match arg {
            Some(a) if a.null_count() > 0 => {
                for (i, &g) in groups.iter().enumerate() {
                    self.counts[g as usize] += i64::from(a.is_valid(i));
                }
            }
            _ => {
                for &g in groups {
                    self.counts[g as usize] += 1;
                }
            }
        }
        Ok(())
    }

    fn merge(&mut self, groups: &[u32], groups_len: usize, state: &[ArrayRef]) -> Result<()> {
        grow(&mut self.counts, groups_len, 0);
        let counts = primitive::<Int64Type>(state_at(state, 0)?)?;
        for (i, &g) in groups.iter().enumerate() {
            self.counts[g as usize] += counts.value(i);
        }
        Ok(())
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.finish()?])
    }

    fn finish(&self) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from(self.counts.clone())))
    }

    fn held_bytes(&self) -> usize {
        self.counts.len() * 8
    }

    fn resize(&mut self, groups_len: usize) {
        grow(&mut self.counts, groups_len, 0);
    }
}

fn primitive<T: ArrowPrimitiveType>(a: &ArrayRef) -> Result<&PrimitiveArray<T>> {
    a.as_primitive_opt::<T>().ok_or_else(|| {
        QueryError::Partial(format!(
            "a column of type {} where {} was expected",
            a.data_type(),
            T::DATA_TYPE
        ))
    })
}

#[derive(Clone, Copy, PartialEq)]
enum SumKind {
    /// Integers and decimals, summed exactly in i128 at this scale.
    Exact(i8),
    Float,
}

/// sum, and avg (a sum and a count).
struct Sum {
    kind: SumKind,
    avg: bool,
    exact: Vec<i128>,
    float: Vec<f64>,
    /// Values summed per group (a group with none sums to NULL).
    counts: Vec<i64>,
}

impl Sum {
    fn new(kind: SumKind, avg: bool) -> Sum {
        Sum {
            kind,
            avg,
            exact: Vec::new(),
            float: Vec::new(),
            counts: Vec::new(),
        }
    }

    fn grow(&mut self, len: usize) {
        match self.kind {
            SumKind::Exact(_) => grow(&mut self.exact, len, 0),
            SumKind::Float => grow(&mut self.float, len, 0.0),
        }
        grow(&mut self.counts, len, 0);
    }

    fn add_exact(&mut self, g: usize, v: i128) -> Result<()> {
        self.exact[g] = self.exact[g]
            .checked_add(v)
            .ok_or_else(|| QueryError::compute("sum", "it overflows 128 bits"))?;
        Ok(())
    }

    fn exact_type(&self) -> DataType {
        match self.kind {
            SumKind::Exact(s) => DataType::Decimal128(38, s),
            SumKind::Float => DataType::Float64,
        }
    }

    fn sums(&self) -> Result<ArrayRef> {
        let valid = |i: usize| self.counts[i] > 0;
        Ok(match self.kind {
            SumKind::Exact(_) => Arc::new(
                (0..self.exact.len())
                    .map(|i| valid(i).then_some(self.exact[i]))
                    .collect::<Decimal128Array>()
                    .with_data_type(self.exact_type()),
            ),
            SumKind::Float => Arc::new(
                (0..self.float.len())
                    .map(|i| valid(i).then_some(self.float[i]))
                    .collect::<Float64Array>(),
            ),
        })
    }
}

impl Accumulator for Sum {
    fn update(&mut self, groups: &[u32], groups_len: usize, arg: Option<&ArrayRef>) -> Result<()> {
        self.grow(groups_len);
        let Some(a) = arg else {
            return Err(QueryError::Invalid("sum of nothing".into()));
        };
        let nulls = a.null_count() > 0;
        match (self.kind, a.data_type()) {
            (SumKind::Exact(_), DataType::Int64) => {
                let values = primitive::<Int64Type>(a)?;
                for (i, &g) in groups.iter().enumerate() {
                    if !nulls || values.is_valid(i) {
                        self.add_exact(g as usize, i128::from(values.value(i)))?;
                        self.counts[g as usize] += 1;
                    }
                }
            }
            (SumKind::Exact(_), DataType::Decimal128(..)) => {
                let values = primitive::<Decimal128Type>(a)?;
                for (i, &g) in groups.iter().enumerate() {
                    if !nulls || values.is_valid(i) {
                        self.add_exact(g as usize, values.value(i))?;
                        self.counts[g as usize] += 1;
                    }
                }
            }
            (SumKind::Float, DataType::Float64) => {
                let values = primitive::<Float64Type>(a)?;
                for (i, &g) in groups.iter().enumerate() {
                    if !nulls || values.is_valid(i) {
                        self.float[g as usize] += values.value(i);
                        self.counts[g as usize] += 1;
                    }
                }
            }
            (_, DataType::Null) => {}
            (_, other) => {
                return Err(QueryError::Type(format!(
                    "sum of a {other} where {:?} was planned",
                    self.exact_type()
                )))
            }
        }
        Ok(())
    }

    fn merge(&mut self, groups: &[u32], groups_len: usize, state: &[ArrayRef]) -> Result<()> {
        self.grow(groups_len);
        let sums = state_at(state, 0)?;
        let counts = primitive::<Int64Type>(state_at(state, 1)?)?;
        for (i, &g) in groups.iter().enumerate() {
            self.counts[g as usize] += counts.value(i);
        }
        match self.kind {
            SumKind::Exact(_) => {
                let sums = primitive::<Decimal128Type>(sums)?;
                for (i, &g) in groups.iter().enumerate() {
                    if sums.is_valid(i) {
                        self.add_exact(g as usize, sums.value(i))?;
                    }
                }
            }
            SumKind::Float => {
                let sums = primitive::<Float64Type>(sums)?;
                for (i, &g) in groups.iter().enumerate() {
                    if sums.is_valid(i) {
                        self.float[g as usize] += sums.value(i);
                    }
                }
            }
        }
        Ok(())
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok(vec![
            self.sums()?,
            Arc::new(Int64Array::from(self.counts.clone())),
        ])
    }

    fn finish(&self) -> Result<ArrayRef> {
        if self.avg {
            let out: Float64Array = (0..self.counts.len())
                .map(|i| {
                    let n = self.counts[i];
                    (n > 0).then(|| match self.kind {
                        SumKind::Exact(s) => {
                            self.exact[i] as f64 / 10f64.powi(i32::from(s)) / n as f64
                        }
                        SumKind::Float => self.float[i] / n as f64,
                    })
                })
                .collect();
            return Ok(Arc::new(out));
        }
        match self.kind {
            // An integer sum answers a BIGINT, or an error when it does
            // not fit: never a wrapped value.
            SumKind::Exact(0) => {
                let sums = self.sums()?;
                cast(&sums, &DataType::Int64)
                    .map_err(|_| QueryError::compute("sum", "it does not fit a BIGINT"))
            }
            _ => self.sums(),
        }
    }

    fn held_bytes(&self) -> usize {
        self.exact.len() * 16 + self.float.len() * 8 + self.counts.len() * 8
    }

    fn resize(&mut self, groups_len: usize) {
        self.grow(groups_len);
    }
}

struct MinMax<T: ArrowPrimitiveType> {
    values: Vec<Option<T::Native>>,
    data_type: DataType,
    min: bool,
}

impl<T: ArrowPrimitiveType> MinMax<T> {
    fn new(data_type: &DataType, min: bool) -> MinMax<T> {
        MinMax {
            values: Vec::new(),
            data_type: data_type.clone(),
            min,
        }
    }

    fn fold(&mut self, groups: &[u32], a: &PrimitiveArray<T>) {
        let nulls = a.null_count() > 0;
        for (i, &g) in groups.iter().enumerate() {
            if nulls && a.is_null(i) {
                continue;
            }
            let v = a.value(i);
            let slot = &mut self.values[g as usize];
            let better = match slot {
                None => true,
                Some(old) => {
                    let ord = v.partial_cmp(old);
                    if self.min {
                        ord == Some(std::cmp::Ordering::Less)
                    } else {
                        ord == Some(std::cmp::Ordering::Greater)
                    }
                }
            };
            if better {
                *slot = Some(v);
            }
        }
    }
}

impl<T: ArrowPrimitiveType> Accumulator for MinMax<T>
where
    T::Native: PartialOrd,
{
    fn update(&mut self, groups: &[u32], groups_len: usize, arg: Option<&ArrayRef>) -> Result<()> {
        grow(&mut self.values, groups_len, None);
        let Some(a) = arg else {
            return Err(QueryError::Invalid("min/max of nothing".into()));
        };
        if a.data_type() == &DataType::Null {
            return Ok(());
        }
        let a = primitive::<T>(a)?;
        self.fold(groups, a);
        Ok(())
    }

    fn merge(&mut self, groups: &[u32], groups_len: usize, state: &[ArrayRef]) -> Result<()> {
        grow(&mut self.values, groups_len, None);
        let a = primitive::<T>(state_at(state, 0)?)?;
        self.fold(groups, a);
        Ok(())
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.finish()?])
    }

    fn finish(&self) -> Result<ArrayRef> {
        let a: PrimitiveArray<T> = self.values.iter().copied().collect();
        Ok(Arc::new(a.with_data_type(self.data_type.clone())))
    }

    fn held_bytes(&self) -> usize {
        self.values.len() * std::mem::size_of::<Option<T::Native>>()
    }

    fn resize(&mut self, groups_len: usize) {
        grow(&mut self.values, groups_len, None);
    }
}

struct StrMinMax {
    values: Vec<Option<String>>,
    held: usize,
    min: bool,
}

impl StrMinMax {
    fn new(min: bool) -> StrMinMax {
        StrMinMax {
            values: Vec::new(),
            held: 0,
            min,
        }
    }

    fn fold(&mut self, groups: &[u32], a: &StringViewArray) {
        for (i, &g) in groups.iter().enumerate() {
            if a.is_null(i) {
                continue;
            }
            let v = a.value(i);
            let slot = &mut self.values[g as usize];
            let better = match slot {
                None => true,
                Some(old) => (self.min && v < old.as_str()) || (!self.min && v > old.as_str()),
            };
            if better {
                self.held = self.held + v.len() - slot.as_ref().map_or(0, String::len);
                *slot = Some(v.to_string());
            }
        }
    }
}

impl Accumulator for StrMinMax {
    fn update(&mut self, groups: &[u32], groups_len: usize, arg: Option<&ArrayRef>) -> Result<()> {
        grow(&mut self.values, groups_len, None);
        let Some(a) = arg else {
            return Err(QueryError::Invalid("min/max of nothing".into()));
        };
        let a = a
            .as_string_view_opt()
            .ok_or_else(|| QueryError::Partial(format!("min/max of a {}", a.data_type())))?;
        self.fold(groups, a);
        Ok(())
    }

    fn merge(&mut self, groups: &[u32], groups_len: usize, state: &[ArrayRef]) -> Result<()> {
        self.update(groups, groups_len, Some(state_at(state, 0)?))
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.finish()?])
    }

    fn finish(&self) -> Result<ArrayRef> {
        Ok(Arc::new(StringViewArray::from_iter(
            self.values.iter().map(Option::as_deref),
        )))
    }

    fn held_bytes(&self) -> usize {
        self.held + self.values.len() * 24
    }

    fn resize(&mut self, groups_len: usize) {
        grow(&mut self.values, groups_len, None);
    }
}

/// count(DISTINCT x): the set of values per group, as their row encoding.
struct CountDistinct {
    converter: RowConverter,
    sets: Vec<HashSet<Box<[u8]>>>,
    held: usize,
}

impl CountDistinct {
    fn new(t: &DataType) -> Result<CountDistinct> {
        Ok(CountDistinct {
            converter: RowConverter::new(vec![SortField::new(t.clone())])
                .map_err(|e| QueryError::compute("count(DISTINCT)", e))?,
            sets: Vec::new(),
            held: 0,
        })
    }

    fn insert(&mut self, g: u32, value: &[u8]) {
        let set = &mut self.sets[g as usize];
        if !set.contains(value) {
            self.held += value.len() + 24;
            set.insert(value.into());
        }
    }
}

impl Accumulator for CountDistinct {
    fn update(&mut self, groups: &[u32], groups_len: usize, arg: Option<&ArrayRef>) -> Result<()> {
        grow(&mut self.sets, groups_len, HashSet::new());
        let Some(a) = arg else {
            return Err(QueryError::Invalid("count(DISTINCT) of nothing".into()));
        };
        let rows = self
            .converter
            .convert_columns(std::slice::from_ref(a))
            .map_err(|e| QueryError::compute("count(DISTINCT)", e))?;
        for (i, &g) in groups.iter().enumerate() {
            if a.is_valid(i) {
                self.insert(g, rows.row(i).as_ref());
            }
        }
        Ok(())
    }

    fn merge(&mut self, groups: &[u32], groups_len: usize, state: &[ArrayRef]) -> Result<()> {
        grow(&mut self.sets, groups_len, HashSet::new());
        let lists = state_at(state, 0)?
            .as_list_opt::<i32>()
            .ok_or_else(|| QueryError::Partial("count(DISTINCT) state is not a list".into()))?;
        for (i, &g) in groups.iter().enumerate() {
            let values = lists.value(i);
            let values = values
                .as_any()
                .downcast_ref::<BinaryArray>()
                .ok_or_else(|| QueryError::Partial("count(DISTINCT) values not binary".into()))?;
            for v in values.iter().flatten() {
                self.insert(g, v);
            }
        }
        Ok(())
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        let mut lists = ListBuilder::new(BinaryBuilder::new());
        for set in &self.sets {
            for v in set {
                lists.values().append_value(v);
            }
            lists.append(true);
        }
        Ok(vec![Arc::new(lists.finish())])
    }

    fn finish(&self) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter_values(
            self.sets.iter().map(|s| s.len() as i64),
        )))
    }

    fn held_bytes(&self) -> usize {
        self.held + self.sets.len() * 48
    }

    fn resize(&mut self, groups_len: usize) {
        grow(&mut self.sets, groups_len, HashSet::new());
    }
}
