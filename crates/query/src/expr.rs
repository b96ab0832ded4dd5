//! Expressions over a batch of rows, evaluated with arrow's compute
//! kernels, and the type rules that make their operands meet.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Decimal64Array, Float64Array,
    Int64Array, RecordBatch, Scalar, StringArray, UInt32Array,
};
use arrow::array::{AsArray, PrimitiveArray};
use arrow::compute::kernels::{boolean, cmp, comparison, numeric};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Decimal128Type, Decimal64Type, DecimalType};

use crate::error::{QueryError, Result};

/// The deepest expression evaluated: deeper SQL is refused, so a hostile
/// query cannot exhaust the stack.
pub const MAX_EXPR_DEPTH: usize = 64;

/// A literal value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    /// An exact decimal: its digits and scale.
    Decimal(i128, u8, i8),
    Float(f64),
    Str(String),
    /// Days since 1970-01-01.
    Date(i32),
}

impl Lit {
    pub(crate) fn array(&self) -> Result<ArrayRef> {
        Ok(match self {
            Lit::Null => arrow::array::new_null_array(&DataType::Null, 1),
            Lit::Bool(b) => Arc::new(BooleanArray::from(vec![*b])),
            Lit::Int(i) => Arc::new(Int64Array::from(vec![*i])),
            Lit::Decimal(v, p, s) => Arc::new(
                Decimal128Array::from(vec![*v])
                    .with_precision_and_scale(*p, *s)
                    .map_err(|e| QueryError::compute("a decimal literal", e))?,
            ),
            Lit::Float(f) => Arc::new(Float64Array::from(vec![*f])),
            Lit::Str(s) => Arc::new(StringArray::from(vec![s.as_str()])),
            Lit::Date(d) => Arc::new(Date32Array::from(vec![*d])),
        })
    }
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AggFunc {
    CountStar,
    Count,
    CountDistinct,
    Sum,
    Min,
    Max,
    Avg,
}

/// An expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// A column of the batch, by name.
    Column(String),
    Lit(Lit),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Negate(Box<Expr>),
    IsNull(Box<Expr>, bool),
    /// `expr [NOT] LIKE pattern`, case-insensitive for ILIKE.
    Like {
        expr: Box<Expr>,
        pattern: Box<Expr>,
        negated: bool,
        case_insensitive: bool,
    },
    Cast(Box<Expr>, DataType),
    /// An aggregate call; only in a query's items, HAVING and ORDER BY,
    /// replaced by a column of the aggregated batch before evaluation.
    Agg(AggFunc, Option<Box<Expr>>),
}

impl Expr {
    pub(crate) fn binary(op: BinOp, l: Expr, r: Expr) -> Expr {
        Expr::Binary(op, Box::new(l), Box::new(r))
    }

    /// Calls `f` on this expression and every expression inside it.
    pub(crate) fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Column(_) | Expr::Lit(_) | Expr::Agg(_, None) => {}
            Expr::Binary(_, l, r) => {
                l.visit(f);
                r.visit(f);
            }
            Expr::Not(e) | Expr::Negate(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.visit(f),
            Expr::Agg(_, Some(e)) => e.visit(f),
            Expr::Like { expr, pattern, .. } => {
                expr.visit(f);
                pattern.visit(f);
            }
        }
    }

    /// This expression with every part for which `f` answers `Some`
    /// replaced by the answer (outermost first).
    pub(crate) fn rewrite(&self, f: &mut impl FnMut(&Expr) -> Option<Expr>) -> Expr {
        if let Some(new) = f(self) {
            return new;
        }
        let mut go = |e: &Expr| Box::new(e.rewrite(f));
        match self {
            Expr::Column(_) | Expr::Lit(_) | Expr::Agg(_, None) => self.clone(),
            Expr::Binary(op, l, r) => {
                let l = go(l);
                Expr::Binary(*op, l, go(r))
            }
            Expr::Not(e) => Expr::Not(go(e)),
            Expr::Negate(e) => Expr::Negate(go(e)),
            Expr::IsNull(e, n) => Expr::IsNull(go(e), *n),
            Expr::Cast(e, t) => Expr::Cast(go(e), t.clone()),
            Expr::Agg(a, Some(e)) => Expr::Agg(*a, Some(go(e))),
            Expr::Like {
                expr,
                pattern,
                negated,
                case_insensitive,
            } => {
                let expr = go(expr);
                Expr::Like {
                    expr,
                    pattern: go(pattern),
                    negated: *negated,
                    case_insensitive: *case_insensitive,
                }
            }
        }
    }

    /// Whether an aggregate call is inside.
    pub(crate) fn has_agg(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| found |= matches!(e, Expr::Agg(..)));
        found
    }

    /// The columns it reads, each once, in the order met.
    pub(crate) fn columns(&self, out: &mut Vec<String>) {
        self.visit(&mut |e| {
            if let Expr::Column(c) = e {
                if !out.contains(c) {
                    out.push(c.clone());
                }
            }
        });
    }

    /// Its value over `batch`: an array of the batch's length, or a
    /// one-row array when it reads no column.
    pub(crate) fn eval(&self, batch: &RecordBatch) -> Result<Value> {
        Ok(match self {
            Expr::Column(name) => {
                let a = batch
                    .column_by_name(name)
                    .ok_or_else(|| QueryError::Invalid(format!("no column {name:?} here")))?;
                // A GROUP BY key read as a dictionary is its strings
                // everywhere else.
                Value::Array(match a.data_type() {
                    DataType::Dictionary(_, values) => cast(a, values)?,
                    _ => a.clone(),
                })
            }
            Expr::Lit(l) => Value::Scalar(l.array()?),
            Expr::Binary(op, l, r) => binary(*op, l.eval(batch)?, r.eval(batch)?)?,
            Expr::Not(e) => {
                let v = e.eval(batch)?;
                let b = as_bool(&v, "NOT")?;
                v.same_shape(Arc::new(
                    boolean::not(&b).map_err(|e| QueryError::compute("NOT", e))?,
                ))
            }
            Expr::Negate(e) => {
                let v = e.eval(batch)?;
                let out = numeric::neg(v.array()).map_err(|e| QueryError::compute("-x", e))?;
                v.same_shape(out)
            }
            Expr::IsNull(e, negated) => {
                let v = e.eval(batch)?;
                let a = v.array();
                let out = if *negated {
                    arrow::compute::is_not_null(a.as_ref())
                } else {
                    arrow::compute::is_null(a.as_ref())
                }
                .map_err(|e| QueryError::compute("IS NULL", e))?;
                v.same_shape(Arc::new(out))
            }
            Expr::Like {
                expr,
                pattern,
                negated,
                case_insensitive,
            } => like(
                expr.eval(batch)?,
                pattern.eval(batch)?,
                *negated,
                *case_insensitive,
            )?,
            Expr::Cast(e, to) => {
                let v = e.eval(batch)?;
                let out = cast(v.array(), to)?;
                v.same_shape(out)
            }
            Expr::Agg(..) => {
                return Err(QueryError::Invalid(
                    "an aggregate where rows are filtered (WHERE or GROUP BY)".into(),
                ))
            }
        })
    }

    /// [`Expr::eval`], reusing the values of operations `memo` holds from
    /// other expressions over the same batch (TPC-H Q1 computes
    /// `l_extendedprice * (1 - l_discount)` for two sums) and adding its
    /// own.
    pub(crate) fn eval_shared(&self, batch: &RecordBatch, memo: &mut Memo) -> Result<ArrayRef> {
        let v = self.eval_memo(batch, memo)?;
        v.into_array(batch.num_rows())
    }

    fn eval_memo(&self, batch: &RecordBatch, memo: &mut Memo) -> Result<Value> {
        let Expr::Binary(op, l, r) = self else {
            return self.eval(batch);
        };
        if let Some((_, v)) = memo.iter().find(|(e, _)| e == self) {
            return Ok(v.clone());
        }
        let v = binary(*op, l.eval_memo(batch, memo)?, r.eval_memo(batch, memo)?)?;
        if memo.len() < MAX_MEMO {
            memo.push((self.clone(), v.clone()));
        }
        Ok(v)
    }

    /// Its value over `batch` as an array of the batch's length.
    pub(crate) fn eval_array(&self, batch: &RecordBatch) -> Result<ArrayRef> {
        self.eval(batch)?.into_array(batch.num_rows())
    }

    /// Its value over `batch` as a boolean array of the batch's length.
    pub(crate) fn eval_predicate(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let v = self.eval(batch)?;
        let b = as_bool(&v, "a condition")?;
        match v {
            Value::Array(_) => Ok(b),
            Value::Scalar(_) => {
                let a: ArrayRef = Arc::new(b);
                let wide = broadcast(&a, batch.num_rows())?;
                Ok(as_bool(&Value::Array(wide), "a condition")?)
            }
        }
    }
}

/// Values of operations already computed over one batch.
pub(crate) type Memo = Vec<(Expr, Value)>;

/// Operations one batch's memo keeps.
const MAX_MEMO: usize = 64;

/// An expression's value.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// One value per row.
    Array(ArrayRef),
    /// One value for every row (a one-row array).
    Scalar(ArrayRef),
}

impl Value {
    fn array(&self) -> &ArrayRef {
        match self {
            Value::Array(a) | Value::Scalar(a) => a,
        }
    }

    fn is_scalar(&self) -> bool {
        matches!(self, Value::Scalar(_))
    }

    /// `out` with this value's shape.
    fn same_shape(&self, out: ArrayRef) -> Value {
        match self {
            Value::Array(_) => Value::Array(out),
            Value::Scalar(_) => Value::Scalar(out),
        }
    }

    fn into_array(self, rows: usize) -> Result<ArrayRef> {
        match self {
            Value::Array(a) => Ok(a),
            Value::Scalar(a) => broadcast(&a, rows),
        }
    }

    fn datum(&self) -> Box<dyn arrow::array::Datum + '_> {
        match self {
            Value::Array(a) => Box::new(a),
            Value::Scalar(a) => Box::new(Scalar::new(a)),
        }
    }
}

/// A one-row array repeated `rows` times.
fn broadcast(a: &ArrayRef, rows: usize) -> Result<ArrayRef> {
    let at = UInt32Array::from(vec![0u32; rows]);
    arrow::compute::take(a.as_ref(), &at, None).map_err(|e| QueryError::compute("a constant", e))
}

fn as_bool(v: &Value, what: &str) -> Result<BooleanArray> {
    let a = v.array();
    match a.data_type() {
        DataType::Boolean => Ok(a
            .as_any()
            .downcast_ref::<BooleanArray>()
            .cloned()
            .ok_or_else(|| QueryError::Type(format!("{what}: not a boolean array")))?),
        DataType::Null => Ok(BooleanArray::new_null(a.len())),
        other => Err(QueryError::Type(format!(
            "{what} must be true or false, not a value of type {other}"
        ))),
    }
}

/// Casts that fail on a value that does not fit, rather than making it
/// NULL: a wrong answer is worse than an error.
pub(crate) fn cast(a: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    if a.data_type() == to {
        return Ok(a.clone());
    }
    let options = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    cast_with_options(a.as_ref(), to, &options)
        .map_err(|e| QueryError::compute(format!("a cast from {} to {to}", a.data_type()), e))
}

/// What a value's type is, for the type rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Null,
    Int,
    Float,
    Decimal(u8, i8),
    Str,
    Date,
    Timestamp,
    Bool,
    Other,
}

fn class(t: &DataType) -> Class {
    use DataType::*;
    match t {
        Null => Class::Null,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Class::Int,
        Float16 | Float32 | Float64 => Class::Float,
        Decimal64(p, s) | Decimal128(p, s) => Class::Decimal(*p, *s),
        Utf8 | LargeUtf8 | Utf8View => Class::Str,
        Date32 | Date64 => Class::Date,
        Timestamp(..) => Class::Timestamp,
        Boolean => Class::Bool,
        _ => Class::Other,
    }
}

/// The type that values of `t` take in keys, aggregates and results: one
/// type per class, so files that store a column as int32 and as int64
/// merge.
pub(crate) fn canonical(t: &DataType) -> DataType {
    match class(t) {
        Class::Int => DataType::Int64,
        Class::Float => DataType::Float64,
        Class::Str => DataType::Utf8View,
        Class::Date => DataType::Date32,
        Class::Decimal(p, s) => DataType::Decimal128(p, s),
        _ => t.clone(),
    }
}

/// The decimal an integer fits in.
const INT_AS_DECIMAL: DataType = DataType::Decimal128(20, 0);

/// The types both operands of `op` take.
fn operand_types(op: BinOp, l: &DataType, r: &DataType) -> Result<(DataType, DataType)> {
    use Class as C;
    let (cl, cr) = (class(l), class(r));
    let same = |t: DataType| Ok((t.clone(), t));
    let bad = || {
        Err(QueryError::Type(format!(
            "{op:?} does not take a {l} and a {r}"
        )))
    };
    match (op, cl, cr) {
        (BinOp::And | BinOp::Or, C::Bool | C::Null, C::Bool | C::Null) => same(DataType::Boolean),
        (BinOp::And | BinOp::Or, ..) => bad(),
        (_, C::Null, C::Null) => same(DataType::Int64),
        (_, C::Null, _) => same(r.clone()),
        (_, _, C::Null) => same(l.clone()),
        (BinOp::Div, C::Int | C::Float | C::Decimal(..), C::Int | C::Float | C::Decimal(..)) => {
            same(DataType::Float64)
        }
        (_, C::Float, C::Int | C::Float | C::Decimal(..))
        | (_, C::Int | C::Decimal(..), C::Float) => same(DataType::Float64),
        (_, C::Int, C::Int) => same(DataType::Int64),
        (BinOp::Add | BinOp::Sub | BinOp::Mul, C::Decimal(..), C::Int) => {
            Ok((l.clone(), INT_AS_DECIMAL))
        }
        (BinOp::Add | BinOp::Sub | BinOp::Mul, C::Int, C::Decimal(..)) => {
            Ok((INT_AS_DECIMAL, r.clone()))
        }
        (BinOp::Add | BinOp::Sub | BinOp::Mul, C::Decimal(..), C::Decimal(..)) => {
            Ok((l.clone(), r.clone()))
        }
        (_, C::Decimal(..) | C::Int, C::Decimal(..) | C::Int) => {
            let scale = |c: Class| if let C::Decimal(_, s) = c { s } else { 0 };
            same(DataType::Decimal128(38, scale(cl).max(scale(cr))))
        }
        (op, C::Str, C::Str) if op.is_comparison() => {
            if l == r {
                same(l.clone())
            } else {
                same(DataType::Utf8View)
            }
        }
        (op, C::Date, C::Date | C::Str) | (op, C::Str, C::Date) if op.is_comparison() => {
            same(DataType::Date32)
        }
        (op, C::Timestamp, C::Str) if op.is_comparison() => same(l.clone()),
        (op, C::Str, C::Timestamp) if op.is_comparison() => same(r.clone()),
        (op, C::Timestamp, C::Timestamp) if op.is_comparison() && l == r => same(l.clone()),
        (op, C::Bool, C::Bool) if op.is_comparison() => same(DataType::Boolean),
        _ => bad(),
    }
}

/// A one-row value cast to `to` if that loses nothing (it casts back to
/// itself).
pub(crate) fn lossless(v: &ArrayRef, to: &DataType) -> Option<ArrayRef> {
    let there = cast(v, to).ok()?;
    let back = cast(&there, v.data_type()).ok()?;
    (back.as_ref() == v.as_ref()).then_some(there)
}

/// Operands made to meet: a constant is cast to the other side's type
/// when that loses nothing (the column stays as it is, which is what
/// makes `l_discount BETWEEN 0.05 AND 0.07` cheap), else both take the
/// type rules' types.
fn meet(op: BinOp, l: Value, r: Value) -> Result<(Value, Value)> {
    let (lt, rt) = (l.array().data_type().clone(), r.array().data_type().clone());
    if lt == rt && op != BinOp::Div {
        return Ok((l, r));
    }
    if op.is_comparison() && class(&lt) != Class::Null && class(&rt) != Class::Null {
        if r.is_scalar() && !l.is_scalar() {
            if let Some(c) = lossless(r.array(), &lt) {
                return Ok((l, Value::Scalar(c)));
            }
        }
        if l.is_scalar() && !r.is_scalar() {
            if let Some(c) = lossless(l.array(), &rt) {
                return Ok((Value::Scalar(c), r));
            }
        }
    }
    let (to_l, to_r) = operand_types(op, &lt, &rt)?;
    let l2 = l.same_shape(cast(l.array(), &to_l)?);
    let r2 = r.same_shape(cast(r.array(), &to_r)?);
    Ok((l2, r2))
}

fn binary(op: BinOp, l: Value, r: Value) -> Result<Value> {
    let scalar = l.is_scalar() && r.is_scalar();
    // A column read as 64-bit decimals (see `plan::read_types`) is
    // compared as it is, and computed with in 128 bits, as every other
    // decimal is.
    let (l, r) = if op.is_comparison() {
        (l, r)
    } else {
        let (l, r) = if matches!(op, BinOp::Add | BinOp::Sub) {
            decimal_constant(l, r)
        } else {
            (l, r)
        };
        let fast = match decimal64_fast(op, &l, &r)? {
            Some(out) => Some(out),
            None => decimal_mixed(op, &l, &r)?,
        };
        if let Some(out) = fast {
            return Ok(if scalar {
                Value::Scalar(out)
            } else {
                Value::Array(out)
            });
        }
        (widen(l)?, widen(r)?)
    };
    let rows = match (&l, &r) {
        (Value::Array(a), _) | (_, Value::Array(a)) => a.len(),
        _ => 1,
    };
    let (l, r) = meet(op, l, r)?;
    let what = || format!("{op:?}");
    let out: ArrayRef = match op {
        BinOp::And | BinOp::Or => {
            let la = as_bool(&Value::Array(l.into_array(rows)?), "AND/OR")?;
            let ra = as_bool(&Value::Array(r.into_array(rows)?), "AND/OR")?;
            let out = if op == BinOp::And {
                boolean::and_kleene(&la, &ra)
            } else {
                boolean::or_kleene(&la, &ra)
            };
            Arc::new(out.map_err(|e| QueryError::compute(what(), e))?)
        }
        _ => {
            let (ld, rd) = (l.datum(), r.datum());
            let (ld, rd) = (ld.as_ref(), rd.as_ref());
            let cmp_out = |f: fn(
                &dyn arrow::array::Datum,
                &dyn arrow::array::Datum,
            )
                -> std::result::Result<BooleanArray, arrow::error::ArrowError>|
             -> Result<ArrayRef> {
                Ok(Arc::new(
                    f(ld, rd).map_err(|e| QueryError::compute(what(), e))?,
                ))
            };
            if let Some(out) = decimal_fast(op, &l, &r)? {
                return Ok(if scalar {
                    Value::Scalar(out)
                } else {
                    Value::Array(out)
                });
            }
            match op {
                BinOp::Add => numeric::add(ld, rd).map_err(|e| QueryError::compute(what(), e))?,
                BinOp::Sub => numeric::sub(ld, rd).map_err(|e| QueryError::compute(what(), e))?,
                BinOp::Mul => numeric::mul(ld, rd).map_err(|e| QueryError::compute(what(), e))?,
                BinOp::Div => numeric::div(ld, rd).map_err(|e| QueryError::compute(what(), e))?,
                BinOp::Eq => cmp_out(cmp::eq)?,
                BinOp::Ne => cmp_out(cmp::neq)?,
                BinOp::Lt => cmp_out(cmp::lt)?,
                BinOp::Le => cmp_out(cmp::lt_eq)?,
                BinOp::Gt => cmp_out(cmp::gt)?,
                BinOp::Ge => cmp_out(cmp::gt_eq)?,
                BinOp::And | BinOp::Or => unreachable!("handled above"),
            }
        }
    };
    Ok(if scalar {
        Value::Scalar(out)
    } else {
        Value::Array(out)
    })
}

/// `l op r` for two decimals whose values all fit 64 bits, without the
/// per-row overflow checks arrow makes: the product of two 64-bit values
/// fits 128 bits, and so does their sum (one widening multiply or add a
/// row, where a checked 128-bit multiply is several). The result has the
/// type arrow's kernel gives. None when the fast path does not apply.
fn decimal_fast(op: BinOp, l: &Value, r: &Value) -> Result<Option<ArrayRef>> {
    let Some((lp, rp, precision, scale)) = decimal_operands::<Decimal128Type>(op, l, r) else {
        return Ok(None);
    };
    let out = match op {
        BinOp::Mul => fits_64(l, r, lp, rp, |a, b| {
            i128::from(a as i64) * i128::from(b as i64)
        }),
        BinOp::Add => fits_64(l, r, lp, rp, i128::wrapping_add),
        _ => fits_64(l, r, lp, rp, i128::wrapping_sub),
    };
    let Some(out) = out else {
        return Ok(None);
    };
    let out = out
        .with_precision_and_scale(precision, scale)
        .map_err(|e| QueryError::compute(format!("{op:?}"), e))?;
    Ok(Some(Arc::new(out)))
}

/// A 64-bit decimal as the 128-bit decimal of the same precision and
/// scale; any other value as it is.
fn widen(v: Value) -> Result<Value> {
    match v.array().data_type() {
        DataType::Decimal64(p, s) => {
            let to = DataType::Decimal128(*p, *s);
            let out = cast(v.array(), &to)?;
            Ok(v.same_shape(out))
        }
        _ => Ok(v),
    }
}

/// A decimal column plus or minus a constant: the constant cast to the
/// column's type when that loses nothing (else both as they are). The
/// result's type is the same either way, and the rows then need no
/// rescaling: a 64-bit column takes its fast path, a 128-bit one
/// `decimal_fast` or arrow's kernel without a rescaled copy.
fn decimal_constant(l: Value, r: Value) -> (Value, Value) {
    let to_array_type = |array: &Value, constant: &Value| {
        let t = array.array().data_type();
        (matches!(class(t), Class::Decimal(..)) && !array.is_scalar() && constant.is_scalar())
            .then(|| lossless(constant.array(), t).map(Value::Scalar))
            .flatten()
    };
    if let Some(c) = to_array_type(&l, &r) {
        return (l, c);
    }
    if let Some(c) = to_array_type(&r, &l) {
        return (c, r);
    }
    (l, r)
}

/// `l op r` for two 64-bit decimals (each an array or a one-row scalar),
/// with the result type and values [`decimal_fast`] gives the same
/// operands widened to 128 bits. No row can overflow: a product of two
/// 64-bit values fits 128 bits, and so does a sum. None when the fast
/// path does not apply.
fn decimal64_fast(op: BinOp, l: &Value, r: &Value) -> Result<Option<ArrayRef>> {
    let Some((lp, rp, precision, scale)) = decimal_operands::<Decimal64Type>(op, l, r) else {
        return Ok(None);
    };
    let out = match op {
        BinOp::Mul => each_pair(l, r, lp, rp, |a, b| i128::from(a) * i128::from(b)),
        BinOp::Add => each_pair(l, r, lp, rp, |a, b| i128::from(a) + i128::from(b)),
        _ => each_pair(l, r, lp, rp, |a, b| i128::from(a) - i128::from(b)),
    };
    let Some((values, nulls)) = out else {
        return Ok(None);
    };
    decimal_out(op, values, nulls, precision, scale).map(Some)
}

/// `f` over the rows of two 64-bit decimals (arrays, or one-row
/// scalars), with the rows' nulls; None when a scalar is null or the
/// arrays' lengths differ.
fn each_pair(
    l: &Value,
    r: &Value,
    lp: &Decimal64Array,
    rp: &Decimal64Array,
    f: impl Fn(i64, i64) -> i128,
) -> Option<(Vec<i128>, Option<arrow::buffer::NullBuffer>)> {
    let constant = |a: &Decimal64Array| a.is_valid(0).then(|| a.value(0));
    Some(match (l.is_scalar(), r.is_scalar()) {
        (false, true) => {
            let k = constant(rp)?;
            let values = lp.values().iter().map(|&a| f(a, k)).collect();
            (values, lp.nulls().cloned())
        }
        (true, false) => {
            let k = constant(lp)?;
            let values = rp.values().iter().map(|&b| f(k, b)).collect();
            (values, rp.nulls().cloned())
        }
        _ => {
            if lp.len() != rp.len() {
                return None;
            }
            let values = lp
                .values()
                .iter()
                .zip(rp.values().iter())
                .map(|(&a, &b)| f(a, b))
                .collect();
            (
                values,
                arrow::buffer::NullBuffer::union(lp.nulls(), rp.nulls()),
            )
        }
    })
}

/// The precision and scale of `l op r` for decimals of (`p1`, `s1`) and
/// (`p2`, `s2`), as arrow's 128-bit kernel gives them; None for an
/// operation the fast paths leave to that kernel.
fn decimal_result(op: BinOp, p1: u8, s1: i8, p2: u8, s2: i8) -> Option<(u8, i8)> {
    match op {
        BinOp::Mul => match s1.checked_add(s2) {
            Some(s) if s <= DECIMAL128_MAX_SCALE => {
                Some((p1.saturating_add(p2 + 1).min(DECIMAL128_MAX_PRECISION), s))
            }
            _ => None,
        },
        // Equal scales: arrow would rescale neither side.
        BinOp::Add | BinOp::Sub if s1 == s2 => {
            let whole = (i16::from(p1) - i16::from(s1)).max(i16::from(p2) - i16::from(s2));
            let p = (i16::from(s1) + whole + 1).min(i16::from(DECIMAL128_MAX_PRECISION));
            Some((p as u8, s1))
        }
        _ => None,
    }
}

/// Each value of `a` as its low and high 64 bits (little-endian), so a
/// check of every value is a pass of 64-bit operations the compiler
/// vectorises; None if the buffer is not 8-byte aligned (`typed_data`
/// panics on one decoded in place from a frame, say: such an array takes
/// the checked kernel).
fn words(a: &Decimal128Array) -> Option<&[i64]> {
    let buffer = a.values().inner();
    (buffer.as_ptr().align_offset(std::mem::align_of::<i64>()) == 0)
        .then(|| buffer.typed_data::<i64>())
}

/// Whether every value [`words`] gave fits 64 bits: its high half is its
/// low half's sign.
fn all_fit(w: &[i64]) -> bool {
    w.chunks_exact(2)
        .fold(true, |ok, p| ok & (p[1] == p[0] >> 63))
}

/// `l op r` for a 64-bit decimal array and a 128-bit one whose values
/// all fit 64 bits (checked in one pass), with the result type and
/// values of [`decimal_fast`] over both widened: TPC-H Q1's
/// `l_extendedprice * (1 - l_discount)` multiplies a column by a
/// computed array, and the column need not be widened first. None when
/// the fast path does not apply.
fn decimal_mixed(op: BinOp, l: &Value, r: &Value) -> Result<Option<ArrayRef>> {
    if l.is_scalar() || r.is_scalar() {
        return Ok(None);
    }
    let (la, ra) = (l.array(), r.array());
    let (p1, s1, p2, s2, narrow_left) = match (la.data_type(), ra.data_type()) {
        (DataType::Decimal64(p1, s1), DataType::Decimal128(p2, s2)) => (*p1, *s1, *p2, *s2, true),
        (DataType::Decimal128(p1, s1), DataType::Decimal64(p2, s2)) => (*p1, *s1, *p2, *s2, false),
        _ => return Ok(None),
    };
    let Some((precision, scale)) = decimal_result(op, p1, s1, p2, s2) else {
        return Ok(None);
    };
    let (narrow, wide) = if narrow_left { (la, ra) } else { (ra, la) };
    let (Some(narrow), Some(wide)) = (
        narrow.as_any().downcast_ref::<Decimal64Array>(),
        wide.as_any().downcast_ref::<Decimal128Array>(),
    ) else {
        return Ok(None);
    };
    let Some(w) = words(wide) else {
        return Ok(None);
    };
    if narrow.len() != wide.len() || !all_fit(w) {
        return Ok(None);
    }
    let pairs = narrow.values().iter().zip(w.chunks_exact(2));
    let values: Vec<i128> = match (op, narrow_left) {
        (BinOp::Mul, _) => pairs
            .map(|(&a, b)| i128::from(a) * i128::from(b[0]))
            .collect(),
        (BinOp::Add, _) => pairs
            .map(|(&a, b)| i128::from(a) + i128::from(b[0]))
            .collect(),
        (_, true) => pairs
            .map(|(&a, b)| i128::from(a) - i128::from(b[0]))
            .collect(),
        (_, false) => pairs
            .map(|(&a, b)| i128::from(b[0]) - i128::from(a))
            .collect(),
    };
    let nulls = arrow::buffer::NullBuffer::union(narrow.nulls(), wide.nulls());
    decimal_out(op, values, nulls, precision, scale).map(Some)
}

/// Both operands of `op` as decimal arrays of type `T`, with the
/// precision and scale of the result ([`decimal_result`]); None when
/// either is not a `T` or arrow's kernel is left the operation.
fn decimal_operands<'a, T: DecimalType>(
    op: BinOp,
    l: &'a Value,
    r: &'a Value,
) -> Option<(&'a PrimitiveArray<T>, &'a PrimitiveArray<T>, u8, i8)> {
    let lp = l.array().as_primitive_opt::<T>()?;
    let rp = r.array().as_primitive_opt::<T>()?;
    let (precision, scale) =
        decimal_result(op, lp.precision(), lp.scale(), rp.precision(), rp.scale())?;
    Some((lp, rp, precision, scale))
}

/// A fast path's values as the 128-bit decimal array of its type.
fn decimal_out(
    op: BinOp,
    values: Vec<i128>,
    nulls: Option<arrow::buffer::NullBuffer>,
    precision: u8,
    scale: i8,
) -> Result<ArrayRef> {
    let out = Decimal128Array::new(values.into(), nulls)
        .with_precision_and_scale(precision, scale)
        .map_err(|e| QueryError::compute(format!("{op:?}"), e))?;
    Ok(Arc::new(out))
}

/// `f` over the rows of `l` and `r` (arrays, or one-row scalars), after
/// a pass that checks every value fits 64 bits; None if one does not, or
/// if a buffer is not 8-byte aligned (the caller then takes arrow's
/// checked kernel).
fn fits_64(
    l: &Value,
    r: &Value,
    lp: &Decimal128Array,
    rp: &Decimal128Array,
    f: impl Fn(i128, i128) -> i128,
) -> Option<Decimal128Array> {
    let fits = |v: i128| ((v >> 64) as i64) == ((v as i64) >> 63);
    let constant = |a: &Decimal128Array| a.is_valid(0).then(|| a.value(0)).filter(|&k| fits(k));
    let values: Vec<i128> = match (l.is_scalar(), r.is_scalar()) {
        (false, true) => {
            let k = constant(rp)?;
            let w = words(lp)?;
            if !all_fit(w) {
                return None;
            }
            w.chunks_exact(2).map(|a| f(i128::from(a[0]), k)).collect()
        }
        (true, false) => {
            let k = constant(lp)?;
            let w = words(rp)?;
            if !all_fit(w) {
                return None;
            }
            w.chunks_exact(2).map(|b| f(k, i128::from(b[0]))).collect()
        }
        _ => {
            let (lw, rw) = (words(lp)?, words(rp)?);
            if lp.len() != rp.len() || !all_fit(lw) || !all_fit(rw) {
                return None;
            }
            lw.chunks_exact(2)
                .zip(rw.chunks_exact(2))
                .map(|(a, b)| f(i128::from(a[0]), i128::from(b[0])))
                .collect()
        }
    };
    let nulls = match (l.is_scalar(), r.is_scalar()) {
        (false, true) => lp.nulls().cloned(),
        (true, false) => rp.nulls().cloned(),
        _ => arrow::buffer::NullBuffer::union(lp.nulls(), rp.nulls()),
    };
    Some(Decimal128Array::new(values.into(), nulls))
}

const DECIMAL128_MAX_SCALE: i8 = 38;
const DECIMAL128_MAX_PRECISION: u8 = 38;

fn like(v: Value, pattern: Value, negated: bool, case_insensitive: bool) -> Result<Value> {
    if class(v.array().data_type()) != Class::Str && class(v.array().data_type()) != Class::Null {
        return Err(QueryError::Type(format!(
            "LIKE takes a string, not a {}",
            v.array().data_type()
        )));
    }
    let scalar = v.is_scalar() && pattern.is_scalar();
    let to = v.array().data_type().clone();
    let to = if to == DataType::Null {
        DataType::Utf8
    } else {
        to
    };
    let v = v.same_shape(cast(v.array(), &to)?);
    let pattern = pattern.same_shape(cast(pattern.array(), &to)?);
    let (ld, rd) = (v.datum(), pattern.datum());
    let out = match (negated, case_insensitive) {
        (false, false) => comparison::like(ld.as_ref(), rd.as_ref()),
        (true, false) => comparison::nlike(ld.as_ref(), rd.as_ref()),
        (false, true) => comparison::ilike(ld.as_ref(), rd.as_ref()),
        (true, true) => comparison::nilike(ld.as_ref(), rd.as_ref()),
    }
    .map_err(|e| QueryError::compute("LIKE", e))?;
    let out: ArrayRef = Arc::new(out);
    Ok(if scalar {
        Value::Scalar(out)
    } else {
        Value::Array(out)
    })
}
