//! The SQL subset, parsed with `sqlparser` into this crate's [`Expr`]s:
//! anything outside it is an error naming what is not supported.

use arrow::datatypes::DataType;
use sqlparser::ast::{
    self, BinaryOperator, CastKind, DateTimeField, DuplicateTreatment, ExactNumberInfo,
    FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, LimitClause, OrderByKind,
    SelectItem, SetExpr, Statement, TableFactor, UnaryOperator, Value as SqlValue,
};
use sqlparser::dialect::DuckDbDialect;
use sqlparser::parser::Parser;

use crate::error::{QueryError, Result};
use crate::expr::{AggFunc, BinOp, Expr, Lit, MAX_EXPR_DEPTH};

/// Longest SQL text taken.
pub const MAX_SQL_BYTES: usize = 64 << 10;

/// Most items in a SELECT list, GROUP BY or ORDER BY.
pub const MAX_ITEMS: usize = 256;

/// How rows are ordered by one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Order {
    pub descending: bool,
    pub nulls_first: bool,
}

/// A parsed query, before it meets a file's schema.
#[derive(Debug, Clone)]
pub(crate) struct Select {
    /// `bucket/key` or `bucket/pattern` from the FROM clause.
    pub source: String,
    /// Output expressions with their names.
    pub items: Vec<(Expr, String)>,
    pub filter: Option<Expr>,
    pub group_by: Vec<Expr>,
    pub having: Option<Expr>,
    pub order_by: Vec<(Expr, Order)>,
    pub limit: Option<u64>,
    pub offset: u64,
}

fn unsupported(what: impl Into<String>) -> QueryError {
    QueryError::Unsupported(what.into())
}

/// Parses `sql` into a [`Select`].
pub(crate) fn parse(sql: &str) -> Result<Select> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(QueryError::Limit(format!(
            "the SQL is {} bytes, more than the {MAX_SQL_BYTES} taken",
            sql.len()
        )));
    }
    let statements = Parser::new(&DuckDbDialect {})
        .with_recursion_limit(MAX_EXPR_DEPTH)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| QueryError::Parse(e.to_string()))?;
    let query = match statements.as_slice() {
        [Statement::Query(q)] => q,
        [] => return Err(QueryError::Parse("no statement".into())),
        [_] => return Err(unsupported("a statement other than SELECT")),
        _ => return Err(unsupported("more than one statement")),
    };
    if query.with.is_some() {
        return Err(unsupported("WITH (common table expressions)"));
    }
    if query.fetch.is_some() || !query.locks.is_empty() || !query.pipe_operators.is_empty() {
        return Err(unsupported("FETCH, FOR UPDATE or pipe operators"));
    }
    let select = match query.body.as_ref() {
        SetExpr::Select(s) => s,
        SetExpr::Query(_) => return Err(unsupported("a parenthesized subquery")),
        SetExpr::SetOperation { op, .. } => return Err(unsupported(format!("{op}"))),
        other => return Err(unsupported(format!("{other}"))),
    };
    let source = source(select)?;
    if select.distinct.is_some() {
        return Err(unsupported(
            "SELECT DISTINCT (count(DISTINCT x) is supported)",
        ));
    }
    if select.top.is_some() || select.into.is_some() || !select.lateral_views.is_empty() {
        return Err(unsupported("TOP, INTO or LATERAL VIEW"));
    }
    if select.qualify.is_some() || !select.named_window.is_empty() {
        return Err(unsupported("window functions (QUALIFY, WINDOW)"));
    }
    if select.prewhere.is_some() || !select.cluster_by.is_empty() || !select.sort_by.is_empty() {
        return Err(unsupported("PREWHERE, CLUSTER BY or SORT BY"));
    }
    if select.projection.len() > MAX_ITEMS {
        return Err(QueryError::Limit(format!(
            "{} items in the SELECT list, at most {MAX_ITEMS}",
            select.projection.len()
        )));
    }
    let mut items = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) => items.push((expr(e)?, e.to_string())),
            SelectItem::ExprWithAlias { expr: e, alias } => {
                items.push((expr(e)?, alias.value.clone()))
            }
            SelectItem::Wildcard(_) => items.push((Expr::Column(WILDCARD.into()), WILDCARD.into())),
            other => return Err(unsupported(format!("the SELECT item {other}"))),
        }
    }
    let filter = select.selection.as_ref().map(expr).transpose()?;
    if filter.as_ref().is_some_and(Expr::has_agg) {
        return Err(QueryError::Invalid(
            "an aggregate in WHERE (filter groups with HAVING)".into(),
        ));
    }
    let group_by = group_by(&select.group_by, &items)?;
    let having = select.having.as_ref().map(expr).transpose()?;
    let order_by = order_by(query, &items)?;
    let (limit, offset) = limit(query.limit_clause.as_ref())?;
    Ok(Select {
        source,
        items,
        filter,
        group_by,
        having,
        order_by,
        limit,
        offset,
    })
}

/// The name `*` stands for until the file's columns are known.
pub(crate) const WILDCARD: &str = "*";

fn source(select: &ast::Select) -> Result<String> {
    let [from] = select.from.as_slice() else {
        return Err(if select.from.is_empty() {
            QueryError::Invalid("no FROM: name the objects, FROM 'bucket/key.parquet'".into())
        } else {
            unsupported("more than one table in FROM (joins)")
        });
    };
    if !from.joins.is_empty() {
        return Err(unsupported("JOIN"));
    }
    match &from.relation {
        TableFactor::Table {
            name, args: None, ..
        } => {
            let parts = &name.0;
            let [part] = parts.as_slice() else {
                return Err(QueryError::Invalid(format!(
                    "FROM {name}: name the objects as one quoted string, \
                     FROM 'bucket/key.parquet' or 'bucket/prefix*.parquet'"
                )));
            };
            let Some(ident) = part.as_ident() else {
                return Err(unsupported(format!("FROM {name}")));
            };
            Ok(ident.value.clone())
        }
        TableFactor::Table { name, .. } => Err(unsupported(format!("the table function {name}"))),
        TableFactor::Derived { .. } => Err(unsupported("a subquery in FROM")),
        other => Err(unsupported(format!("FROM {other}"))),
    }
}

fn group_by(g: &GroupByExpr, items: &[(Expr, String)]) -> Result<Vec<Expr>> {
    let exprs = match g {
        GroupByExpr::All(_) => return Err(unsupported("GROUP BY ALL")),
        GroupByExpr::Expressions(exprs, modifiers) => {
            if !modifiers.is_empty() {
                return Err(unsupported("GROUP BY modifiers (ROLLUP, CUBE, TOTALS)"));
            }
            exprs
        }
    };
    if exprs.len() > MAX_ITEMS {
        return Err(QueryError::Limit(format!(
            "{} GROUP BY keys, at most {MAX_ITEMS}",
            exprs.len()
        )));
    }
    exprs
        .iter()
        .map(|e| {
            let parsed = expr(e)?;
            let resolved = by_item(&parsed, items, "GROUP BY")?;
            if resolved.has_agg() {
                return Err(QueryError::Invalid(format!(
                    "GROUP BY {e}: an aggregate cannot be a group key"
                )));
            }
            Ok(resolved)
        })
        .collect()
}

/// `e` as GROUP BY and ORDER BY read it: an ordinal names a SELECT item,
/// a bare name that is an item's alias (and not a column) names it too.
fn by_item(e: &Expr, items: &[(Expr, String)], clause: &str) -> Result<Expr> {
    if let Expr::Lit(Lit::Int(n)) = e {
        let at = usize::try_from(*n)
            .ok()
            .filter(|&n| n >= 1 && n <= items.len());
        let Some(at) = at else {
            return Err(QueryError::Invalid(format!(
                "{clause} {n}: there are {} SELECT items",
                items.len()
            )));
        };
        return Ok(items[at - 1].0.clone());
    }
    if let Expr::Column(name) = e {
        if let Some((item, _)) = items
            .iter()
            .find(|(item, alias)| alias == name && item != e)
        {
            return Ok(item.clone());
        }
    }
    Ok(e.clone())
}

fn order_by(query: &ast::Query, items: &[(Expr, String)]) -> Result<Vec<(Expr, Order)>> {
    let Some(order) = &query.order_by else {
        return Ok(Vec::new());
    };
    let exprs = match &order.kind {
        OrderByKind::Expressions(exprs) => exprs,
        OrderByKind::All(_) => return Err(unsupported("ORDER BY ALL")),
    };
    if exprs.len() > MAX_ITEMS {
        return Err(QueryError::Limit(format!(
            "{} ORDER BY keys, at most {MAX_ITEMS}",
            exprs.len()
        )));
    }
    if order.interpolate.is_some() {
        return Err(unsupported("ORDER BY ... INTERPOLATE"));
    }
    exprs
        .iter()
        .map(|o| {
            if o.with_fill.is_some() {
                return Err(unsupported("ORDER BY ... WITH FILL"));
            }
            let descending = match &o.options.sort {
                None | Some(ast::OrderBySort::Asc) => false,
                Some(ast::OrderBySort::Desc) => true,
                Some(other) => return Err(unsupported(format!("ORDER BY ... {other:?}"))),
            };
            let e = by_item(&expr(&o.expr)?, items, "ORDER BY")?;
            // DuckDB's default: NULLs last, whichever the direction.
            let nulls_first = o.options.nulls_first.unwrap_or(false);
            Ok((
                e,
                Order {
                    descending,
                    nulls_first,
                },
            ))
        })
        .collect()
}

fn limit(clause: Option<&LimitClause>) -> Result<(Option<u64>, u64)> {
    let count = |e: &ast::Expr, what: &str| -> Result<u64> {
        match expr(e)? {
            Expr::Lit(Lit::Int(n)) if n >= 0 => Ok(n as u64),
            _ => Err(QueryError::Invalid(format!(
                "{what} {e}: a count of rows, a whole number >= 0"
            ))),
        }
    };
    match clause {
        None => Ok((None, 0)),
        Some(LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) => {
            if !limit_by.is_empty() {
                return Err(unsupported("LIMIT ... BY"));
            }
            let limit = limit.as_ref().map(|e| count(e, "LIMIT")).transpose()?;
            let offset = offset
                .as_ref()
                .map(|o| count(&o.value, "OFFSET"))
                .transpose()?
                .unwrap_or(0);
            Ok((limit, offset))
        }
        Some(LimitClause::OffsetCommaLimit { offset, limit }) => {
            Ok((Some(count(limit, "LIMIT")?), count(offset, "OFFSET")?))
        }
    }
}

/// One SQL expression as an [`Expr`].
fn expr(e: &ast::Expr) -> Result<Expr> {
    use ast::Expr as E;
    Ok(match e {
        E::Identifier(id) => Expr::Column(id.value.clone()),
        E::CompoundIdentifier(parts) => {
            return Err(unsupported(format!(
                "the qualified name {} (name columns without a table or struct path)",
                parts
                    .iter()
                    .map(|p| p.value.as_str())
                    .collect::<Vec<_>>()
                    .join(".")
            )))
        }
        E::Value(v) => Expr::Lit(value(&v.value)?),
        E::TypedString(t) => typed_string(&t.data_type, &t.value.value)?,
        E::Nested(inner) => expr(inner)?,
        E::BinaryOp { left, op, right } => binary(left, op, right)?,
        E::UnaryOp { op, expr: inner } => match op {
            UnaryOperator::Not => Expr::Not(Box::new(expr(inner)?)),
            UnaryOperator::Minus => match expr(inner)? {
                Expr::Lit(Lit::Int(i)) => Expr::Lit(Lit::Int(-i)),
                Expr::Lit(Lit::Decimal(v, p, s)) => Expr::Lit(Lit::Decimal(-v, p, s)),
                Expr::Lit(Lit::Float(f)) => Expr::Lit(Lit::Float(-f)),
                other => Expr::Negate(Box::new(other)),
            },
            UnaryOperator::Plus => expr(inner)?,
            other => return Err(unsupported(format!("the operator {other}"))),
        },
        E::IsNull(inner) => Expr::IsNull(Box::new(expr(inner)?), false),
        E::IsNotNull(inner) => Expr::IsNull(Box::new(expr(inner)?), true),
        E::Between {
            expr: inner,
            negated,
            low,
            high,
        } => {
            let v = expr(inner)?;
            let both = Expr::binary(
                BinOp::And,
                Expr::binary(BinOp::Ge, v.clone(), expr(low)?),
                Expr::binary(BinOp::Le, v, expr(high)?),
            );
            if *negated {
                Expr::Not(Box::new(both))
            } else {
                both
            }
        }
        E::In {
            expr: inner,
            target,
            negated,
            ..
        } => match target {
            ast::InTarget::List(list) => in_list(inner, list, *negated)?,
            ast::InTarget::Subquery(_) => return Err(unsupported("IN (subquery)")),
            other => return Err(unsupported(format!("IN {other:?}"))),
        },
        E::Like {
            negated,
            any,
            expr: inner,
            pattern,
            escape_char,
        }
        | E::ILike {
            negated,
            any,
            expr: inner,
            pattern,
            escape_char,
        } => {
            if *any || escape_char.is_some() {
                return Err(unsupported("LIKE ANY or LIKE ... ESCAPE"));
            }
            Expr::Like {
                expr: Box::new(expr(inner)?),
                pattern: Box::new(expr(pattern)?),
                negated: *negated,
                case_insensitive: matches!(e, E::ILike { .. }),
            }
        }
        E::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr: inner,
            data_type,
            format: None,
        } => Expr::Cast(Box::new(expr(inner)?), sql_type(data_type)?),
        E::Function(f) => function(f)?,
        E::Interval(_) => {
            return Err(unsupported(
                "an INTERVAL outside DATE 'YYYY-MM-DD' + INTERVAL 'n' DAY|MONTH|YEAR",
            ))
        }
        E::Subquery(_) | E::Exists { .. } => return Err(unsupported("a subquery")),
        E::Case { .. } => return Err(unsupported("CASE")),
        other => return Err(unsupported(format!("the expression {other}"))),
    })
}

fn in_list(inner: &ast::Expr, list: &[ast::Expr], negated: bool) -> Result<Expr> {
    if list.is_empty() || list.len() > MAX_ITEMS {
        return Err(QueryError::Invalid(format!(
            "IN takes 1 to {MAX_ITEMS} values, not {}",
            list.len()
        )));
    }
    let v = expr(inner)?;
    let mut any: Option<Expr> = None;
    for item in list {
        let eq = Expr::binary(BinOp::Eq, v.clone(), expr(item)?);
        any = Some(match any {
            None => eq,
            Some(prev) => Expr::binary(BinOp::Or, prev, eq),
        });
    }
    let any = any.ok_or_else(|| QueryError::Invalid("IN with no values".into()))?;
    Ok(if negated {
        Expr::Not(Box::new(any))
    } else {
        any
    })
}

fn binary(left: &ast::Expr, op: &BinaryOperator, right: &ast::Expr) -> Result<Expr> {
    let op = match op {
        BinaryOperator::Plus => BinOp::Add,
        BinaryOperator::Minus => BinOp::Sub,
        BinaryOperator::Multiply => BinOp::Mul,
        BinaryOperator::Divide => BinOp::Div,
        BinaryOperator::Eq => BinOp::Eq,
        BinaryOperator::NotEq => BinOp::Ne,
        BinaryOperator::Lt => BinOp::Lt,
        BinaryOperator::LtEq => BinOp::Le,
        BinaryOperator::Gt => BinOp::Gt,
        BinaryOperator::GtEq => BinOp::Ge,
        BinaryOperator::And => BinOp::And,
        BinaryOperator::Or => BinOp::Or,
        other => return Err(unsupported(format!("the operator {other}"))),
    };
    let l = expr(left)?;
    if let (BinOp::Add | BinOp::Sub, Expr::Lit(Lit::Date(d)), ast::Expr::Interval(i)) =
        (op, &l, right)
    {
        let sign = if op == BinOp::Add { 1 } else { -1 };
        return Ok(Expr::Lit(Lit::Date(shift_date(*d, i, sign)?)));
    }
    Ok(Expr::binary(op, l, expr(right)?))
}

/// `DATE d ± INTERVAL 'n' unit`, computed once here.
fn shift_date(days: i32, interval: &ast::Interval, sign: i64) -> Result<i32> {
    let text = match interval.value.as_ref() {
        ast::Expr::Value(v) => match &v.value {
            SqlValue::SingleQuotedString(s) | SqlValue::Number(s, _) => s.clone(),
            other => return Err(unsupported(format!("the interval {other}"))),
        },
        other => return Err(unsupported(format!("the interval {other}"))),
    };
    let mut words = text.split_whitespace();
    let n: i64 = words
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| QueryError::Invalid(format!("INTERVAL '{text}': a whole number first")))?;
    let unit_word = words.next().map(str::to_ascii_lowercase);
    let unit = match (&interval.leading_field, unit_word.as_deref()) {
        (Some(DateTimeField::Day | DateTimeField::Days), None) | (None, Some("day" | "days")) => {
            'd'
        }
        (Some(DateTimeField::Month | DateTimeField::Months), None)
        | (None, Some("month" | "months")) => 'm',
        (Some(DateTimeField::Year | DateTimeField::Years), None)
        | (None, Some("year" | "years")) => 'y',
        _ => {
            return Err(unsupported(format!(
                "INTERVAL '{text}' (DAY, MONTH or YEAR)"
            )))
        }
    };
    let date = chrono_free::from_days(days);
    let shifted = match unit {
        'd' => i64::from(days) + sign * n,
        'm' => chrono_free::add_months(date, sign * n),
        _ => chrono_free::add_months(date, sign * n * 12),
    };
    i32::try_from(shifted).map_err(|_| QueryError::Invalid(format!("INTERVAL '{text}' overflows")))
}

/// Civil dates from days since 1970 and back (Howard Hinnant's
/// algorithms), so date literals need no date crate.
pub(crate) mod chrono_free {
    /// (year, month 1-12, day 1-31) of a day number.
    pub fn from_days(z: i32) -> (i64, i64, i64) {
        let z = i64::from(z) + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let y = yoe + era * 400;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        (if m <= 2 { y + 1 } else { y }, m, d)
    }

    /// The day number of a civil date.
    pub fn to_days(y: i64, m: i64, d: i64) -> i64 {
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = if m > 2 { m - 3 } else { m + 9 };
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    fn days_in_month(y: i64, m: i64) -> i64 {
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        to_days(ny, nm, 1) - to_days(y, m, 1)
    }

    /// `date` moved by `months`, the day clamped to the month's last (as
    /// SQL engines do: Jan 31 + 1 month is Feb 28 or 29).
    pub fn add_months((y, m, d): (i64, i64, i64), months: i64) -> i64 {
        let total = y * 12 + (m - 1) + months;
        let (ny, nm) = (total.div_euclid(12), total.rem_euclid(12) + 1);
        to_days(ny, nm, d.min(days_in_month(ny, nm)))
    }

    /// Parses `YYYY-MM-DD`.
    pub fn parse(text: &str) -> Option<i32> {
        let mut parts = text.trim().splitn(3, '-');
        let y: i64 = parts.next()?.parse().ok()?;
        let m: i64 = parts.next()?.parse().ok()?;
        let d: i64 = parts.next()?.parse().ok()?;
        if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
            return None;
        }
        i32::try_from(to_days(y, m, d)).ok()
    }
}

fn typed_string(t: &ast::DataType, v: &SqlValue) -> Result<Expr> {
    let SqlValue::SingleQuotedString(text) = v else {
        return Err(unsupported(format!("the literal {t} {v}")));
    };
    match t {
        ast::DataType::Date => chrono_free::parse(text)
            .map(|d| Expr::Lit(Lit::Date(d)))
            .ok_or_else(|| QueryError::Invalid(format!("DATE '{text}': not a date YYYY-MM-DD"))),
        other => Ok(Expr::Cast(
            Box::new(Expr::Lit(Lit::Str(text.clone()))),
            sql_type(other)?,
        )),
    }
}

fn value(v: &SqlValue) -> Result<Lit> {
    Ok(match v {
        SqlValue::Number(text, _) => number(text)?,
        SqlValue::SingleQuotedString(s) => Lit::Str(s.clone()),
        SqlValue::Boolean(b) => Lit::Bool(*b),
        SqlValue::Null => Lit::Null,
        other => return Err(unsupported(format!("the literal {other}"))),
    })
}

/// A number literal: an integer, an exact decimal (`0.05`), or a float
/// (`1e3`), as DuckDB reads them.
fn number(text: &str) -> Result<Lit> {
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Lit::Int(i));
    }
    let bad = || QueryError::Invalid(format!("the number {text}"));
    if !text.contains(['e', 'E']) {
        if let Some((whole, frac)) = text.split_once('.') {
            let digits = format!("{whole}{frac}");
            let scale = i8::try_from(frac.len()).map_err(|_| bad())?;
            let precision = digits
                .trim_start_matches('0')
                .len()
                .max(scale as usize)
                .max(1);
            if let (Ok(v), true) = (digits.parse::<i128>(), precision <= 38) {
                return Ok(Lit::Decimal(v, precision as u8, scale));
            }
        }
    }
    text.parse::<f64>().map(Lit::Float).map_err(|_| bad())
}

/// A SQL type name as an arrow type.
fn sql_type(t: &ast::DataType) -> Result<DataType> {
    use ast::DataType as T;
    Ok(match t {
        T::BigInt(_) | T::Int64 | T::Int(_) | T::Integer(_) | T::SmallInt(_) | T::TinyInt(_) => {
            DataType::Int64
        }
        T::Double(_) | T::DoublePrecision | T::Float(_) | T::Float64 | T::Real | T::Float8 => {
            DataType::Float64
        }
        T::Varchar(_) | T::Text | T::String(_) | T::Char(_) => DataType::Utf8,
        T::Date => DataType::Date32,
        T::Boolean | T::Bool => DataType::Boolean,
        T::Decimal(info) | T::Numeric(info) => match info {
            ExactNumberInfo::PrecisionAndScale(p, s) => {
                let p = u8::try_from(*p).ok().filter(|p| (1..=38).contains(p));
                let s = i8::try_from(*s).ok().filter(|s| *s >= 0);
                match (p, s) {
                    (Some(p), Some(s)) if s as u8 <= p => DataType::Decimal128(p, s),
                    _ => return Err(QueryError::Invalid(format!("the type {t}"))),
                }
            }
            ExactNumberInfo::Precision(p) => {
                let p = u8::try_from(*p).ok().filter(|p| (1..=38).contains(p));
                DataType::Decimal128(p.ok_or_else(|| QueryError::Invalid(format!("{t}")))?, 0)
            }
            ExactNumberInfo::None => DataType::Decimal128(18, 3),
        },
        other => return Err(unsupported(format!("the type {other}"))),
    })
}

fn function(f: &ast::Function) -> Result<Expr> {
    let name = f.name.to_string().to_ascii_lowercase();
    if f.filter.is_some() || f.over.is_some() || !f.within_group.is_empty() {
        return Err(unsupported(format!(
            "{name}(...) with FILTER, OVER or WITHIN GROUP (window functions)"
        )));
    }
    let FunctionArguments::List(list) = &f.args else {
        return Err(unsupported(format!("the function {name}")));
    };
    if !list.clauses.is_empty() {
        return Err(unsupported(format!(
            "{name}(...) with ORDER BY or LIMIT inside"
        )));
    }
    let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
    let func = match name.as_str() {
        "count" => AggFunc::Count,
        "sum" => AggFunc::Sum,
        "min" => AggFunc::Min,
        "max" => AggFunc::Max,
        "avg" | "mean" => AggFunc::Avg,
        _ => {
            return Err(unsupported(format!(
                "the function {name} (the functions: count, sum, min, max, avg)"
            )))
        }
    };
    let arg = match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] if func == AggFunc::Count => None,
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => Some(expr(e)?),
        _ => {
            return Err(QueryError::Invalid(format!(
                "{name} takes one argument: {}",
                f
            )))
        }
    };
    if arg.as_ref().is_some_and(Expr::has_agg) {
        return Err(QueryError::Invalid(format!(
            "an aggregate inside an aggregate: {f}"
        )));
    }
    let func = match (func, distinct, &arg) {
        (AggFunc::Count, false, None) => AggFunc::CountStar,
        (AggFunc::Count, true, Some(_)) => AggFunc::CountDistinct,
        (AggFunc::Min | AggFunc::Max, _, _) => func,
        (_, true, _) => return Err(unsupported(format!("{name}(DISTINCT ...)"))),
        _ => func,
    };
    Ok(Expr::Agg(func, arg.map(Box::new)))
}
