//! Grouping and the aggregates: each keeps a state per group that
//! folds rows (at the nodes), merges other states (at the entry node) and
//! finishes into the answer. States travel as arrow columns.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryBuilder, Decimal128Array, DictionaryArray,
    Float64Array, Int64Array, ListBuilder, PrimitiveArray, StringArray, StringViewArray,
};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Decimal128Type, Decimal64Type, Float64Type,
    Int32Type, Int64Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use arrow::row::{OwnedRow, RowConverter, SortField};
use hashbrown::{HashMap, HashSet};

use crate::error::{QueryError, Result};
use crate::expr::{canonical, cast, AggFunc};

/// Groups one query may hold at a node or at the entry node.
pub const MAX_GROUPS: usize = 10_000_000;

/// The group of a row the WHERE clause dropped: the accumulators pass it
/// by. Rows are dropped this way, not copied out, when most of a batch
/// passes (TPC-H Q1 keeps 98%), so the kept rows are never copied.
pub(crate) const SKIP: u32 = u32::MAX;

/// Most groups for which a batch's rows are also listed group by group
/// ([`Assigned::by_group`]): with few groups, every row adds to the same
/// few slots, and each add to a slot in memory waits for the last one;
/// summing a group's rows in registers does not wait.
const LISTED_GROUPS_MAX: usize = 4096;

/// Interleaved tables [`Assigned::new`] counts and lists rows in.
const LANES: usize = 4;

/// Most combinations of dictionary codes one batch's group numbers are
/// remembered for ([`Groups::assign_fast`]).
const CODE_MEMO_MAX: usize = 1 << 16;

/// One batch's rows by group, what the accumulators fold.
pub(crate) struct Assigned {
    /// Each row's group, or [`SKIP`].
    pub(crate) ids: Vec<u32>,
    /// Rows of this batch in each group (one entry per group so far).
    pub(crate) rows_per_group: Vec<i64>,
    /// With at most [`LISTED_GROUPS_MAX`] groups: the batch's kept rows
    /// ordered by group, group `g`'s being `listed[starts[g]..starts[g + 1]]`.
    listed: Vec<u32>,
    starts: Vec<u32>,
}

impl Assigned {
    fn new(ids: Vec<u32>, groups_len: usize) -> Assigned {
        if groups_len > LISTED_GROUPS_MAX {
            let mut rows_per_group = vec![0i64; groups_len];
            for &g in &ids {
                if g != SKIP {
                    rows_per_group[g as usize] += 1;
                }
            }
            return Assigned {
                ids,
                rows_per_group,
                listed: Vec::new(),
                starts: Vec::new(),
            };
        }
        // Rows are counted and listed in LANES interleaved tables (row i
        // in lane i % LANES): consecutive rows of one group then add to
        // different slots, and no add waits for the one before it, as
        // it would with few groups and one table. A group's rows are
        // listed lane by lane, an order its exact sums do not depend on.
        let slot = |g: u32, i: usize| g as usize * LANES + i % LANES;
        let mut counts = vec![0u32; groups_len * LANES];
        for (i, &g) in ids.iter().enumerate() {
            if g != SKIP {
                counts[slot(g, i)] += 1;
            }
        }
        let rows_per_group = counts
            .chunks_exact(LANES)
            .map(|lanes| lanes.iter().map(|&n| i64::from(n)).sum())
            .collect();
        let mut starts = Vec::with_capacity(groups_len + 1);
        let mut next = vec![0u32; groups_len * LANES];
        let mut at = 0u32;
        for (lanes, nexts) in counts.chunks_exact(LANES).zip(next.chunks_exact_mut(LANES)) {
            starts.push(at);
            for (n, start) in lanes.iter().zip(nexts) {
                *start = at;
                at += n;
            }
        }
        starts.push(at);
        let mut listed = vec![0u32; at as usize];
        for (i, &g) in ids.iter().enumerate() {
            if g != SKIP {
                let at = &mut next[slot(g, i)];
                listed[*at as usize] = i as u32;
                *at += 1;
            }
        }
        Assigned {
            ids,
            rows_per_group,
            listed,
            starts,
        }
    }

    fn groups_len(&self) -> usize {
        self.rows_per_group.len()
    }

    /// Each group's rows, when the batch lists them.
    fn by_group(&self) -> Option<impl Iterator<Item = &[u32]>> {
        (!self.starts.is_empty()).then(|| {
            self.starts
                .windows(2)
                .map(|w| &self.listed[w[0] as usize..w[1] as usize])
        })
    }
}

/// Rows in to group numbers out.
pub(crate) struct Groups {
    /// None: no GROUP BY, every row is group 0.
    converter: Option<RowConverter>,
    /// Keys of these types are looked up by [`KeyColumn`]'s encoding, not
    /// by the row format (which encodes a whole batch of rows before the
    /// first lookup: a fifth of TPC-H Q1's time in a profile).
    fast: bool,
    /// The keys' canonical types (what a dictionary key is cast to when
    /// it makes a new group).
    key_types: Vec<DataType>,
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
            key_types: key_types.to_vec(),
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

    /// The group of each of `rows` rows with key columns `keys`, new
    /// groups made as met, with the batch's rows by group for the
    /// accumulators; a row `keep` leaves out is [`SKIP`]ped and makes no
    /// group.
    pub(crate) fn assign(
        &mut self,
        keys: &[ArrayRef],
        rows: usize,
        keep: Option<&BooleanBuffer>,
    ) -> Result<Assigned> {
        let ids = self.assign_ids(keys, rows, keep)?;
        Ok(Assigned::new(ids, self.count))
    }

    /// [`Groups::assign`]'s group of each row alone (the entry node's
    /// merge needs no more).
    pub(crate) fn assign_ids(
        &mut self,
        keys: &[ArrayRef],
        rows: usize,
        keep: Option<&BooleanBuffer>,
    ) -> Result<Vec<u32>> {
        debug_assert!(keep.is_none_or(|k| k.len() == rows));
        let kept = |i: usize| keep.is_none_or(|k| k.value(i));
        let Some(converter) = &self.converter else {
            return Ok((0..rows).map(|i| if kept(i) { 0 } else { SKIP }).collect());
        };
        if self.fast {
            return self.assign_fast(keys, rows, keep);
        }
        // A key read as a dictionary is grouped here as its strings.
        let keys = keys
            .iter()
            .zip(&self.key_types)
            .map(|(k, t)| cast(k, t))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let encoded = converter
            .convert_columns(&keys)
            .map_err(|e| QueryError::compute("group keys", e))?;
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            if !kept(i) {
                out.push(SKIP);
                continue;
            }
            let row = encoded.row(i);
            let bytes = row.as_ref();
            let g = match self.index.get(bytes) {
                Some(&g) => g,
                None => {
                    self.check_room()?;
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

    fn check_room(&self) -> Result<()> {
        if self.count >= MAX_GROUPS {
            return Err(QueryError::Limit(format!(
                "more than {MAX_GROUPS} groups; group by fewer distinct keys"
            )));
        }
        Ok(())
    }

    /// [`Groups::assign`] for keys [`KeyColumn`] encodes: a row's key is
    /// put in row format only when it makes a new group. When every key
    /// is a dictionary (string keys are read so), a batch's rows are
    /// grouped by their codes, and each combination of codes is looked
    /// up once a batch.
    fn assign_fast(
        &mut self,
        keys: &[ArrayRef],
        rows: usize,
        keep: Option<&BooleanBuffer>,
    ) -> Result<Vec<u32>> {
        let columns = keys
            .iter()
            .map(KeyColumn::new)
            .collect::<Result<Vec<_>>>()?;
        let (codes, combinations) = combined_codes(&columns, rows);
        let mut buf = Vec::with_capacity(64);
        if !codes.is_empty() {
            let mut memo = vec![SKIP; combinations];
            // Every key a dictionary: a row's group is its codes' entry in
            // `memo`. Each combination a kept row has is looked up by its
            // strings at its first such row; then every row takes its
            // combination's group in one pass without branches, and the
            // dropped rows are marked.
            let mut resolve = |i: usize, code: u32| -> Result<()> {
                let slot = &mut memo[code as usize];
                if *slot == SKIP {
                    *slot = self.group_of_row(&columns, keys, i, &mut buf)?;
                }
                Ok(())
            };
            match keep {
                None => {
                    for (i, &code) in codes.iter().enumerate() {
                        resolve(i, code)?;
                    }
                }
                Some(k) => {
                    for i in k.set_indices() {
                        resolve(i, codes[i])?;
                    }
                }
            }
            let mut ids: Vec<u32> = codes.iter().map(|&code| memo[code as usize]).collect();
            if let Some(k) = keep {
                for i in (!k).set_indices() {
                    ids[i] = SKIP;
                }
            }
            return Ok(ids);
        }
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            if keep.is_some_and(|k| !k.value(i)) {
                out.push(SKIP);
                continue;
            }
            buf.clear();
            for c in &columns {
                c.encode(i, &mut buf);
            }
            let g = match self.index.get(buf.as_slice()) {
                Some(&g) => g,
                None => self.new_group(keys, i, &buf)?,
            };
            out.push(g);
        }
        Ok(out)
    }

    /// Row `i`'s group, found (or made) by its keys' encoding.
    #[cold]
    fn group_of_row(
        &mut self,
        columns: &[KeyColumn<'_>],
        keys: &[ArrayRef],
        i: usize,
        buf: &mut Vec<u8>,
    ) -> Result<u32> {
        buf.clear();
        for c in columns {
            c.encode(i, buf);
        }
        match self.index.get(buf.as_slice()) {
            Some(&g) => Ok(g),
            None => self.new_group(keys, i, buf),
        }
    }

    /// A group for row `i` of `keys`, whose fast encoding is `encoded`.
    fn new_group(&mut self, keys: &[ArrayRef], i: usize, encoded: &[u8]) -> Result<u32> {
        self.check_room()?;
        let converter = self
            .converter
            .as_ref()
            .ok_or_else(|| QueryError::Invalid("grouping keys with no row converter".into()))?;
        let one = keys
            .iter()
            .zip(&self.key_types)
            .map(|(k, t)| cast(&k.slice(i, 1), t))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let row = converter
            .convert_columns(&one)
            .map_err(|e| QueryError::compute("group keys", e))?
            .row(0)
            .owned();
        let g = self.count as u32;
        self.key_bytes += encoded.len() + row.as_ref().len();
        self.index.insert(encoded.into(), g);
        self.keys.push(row);
        self.count += 1;
        Ok(g)
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

/// Each row's dictionary codes combined into one number below
/// [`CODE_MEMO_MAX`] (a column's code is its dictionary key, or the
/// dictionary's length for a NULL key), or nothing when a key is no
/// dictionary or the combinations are too many; and how many
/// combinations there are.
fn combined_codes(columns: &[KeyColumn<'_>], rows: usize) -> (Vec<u32>, usize) {
    let mut dictionaries = Vec::with_capacity(columns.len());
    let mut combinations = 1usize;
    for c in columns {
        let KeyColumn::Dict(d, values) = c else {
            return (Vec::new(), 0);
        };
        combinations = combinations.saturating_mul(values.len() + 1);
        dictionaries.push((*d, *values));
    }
    if combinations > CODE_MEMO_MAX {
        return (Vec::new(), 0);
    }
    let mut codes = vec![0u32; rows];
    let mut stride = 1u32;
    for (d, values) in dictionaries {
        let keys = d.keys().values();
        debug_assert_eq!(keys.len(), rows);
        match d.nulls() {
            None => {
                for (code, &k) in codes.iter_mut().zip(keys.iter()) {
                    *code += k as u32 * stride;
                }
            }
            Some(n) => {
                for (i, (code, &k)) in codes.iter_mut().zip(keys.iter()).enumerate() {
                    let k = if n.is_valid(i) {
                        k as u32
                    } else {
                        values.len() as u32
                    };
                    *code += k * stride;
                }
            }
        }
        stride *= values.len() as u32 + 1;
    }
    debug_assert!(codes.iter().all(|&c| (c as usize) < combinations));
    (codes, combinations)
}

/// A key column read for [`Groups::assign_fast`]: each value encoded as
/// a validity byte then its bytes (strings with their length first), so
/// two rows' encodings are equal exactly when their keys are.
enum KeyColumn<'a> {
    Str(&'a StringViewArray),
    /// A string column read as a dictionary: its keys and values.
    Dict(&'a DictionaryArray<Int32Type>, &'a StringArray),
    I64(&'a PrimitiveArray<Int64Type>),
    I32(&'a PrimitiveArray<Date32Type>),
    I128(&'a PrimitiveArray<Decimal128Type>),
}

impl<'a> KeyColumn<'a> {
    fn new(a: &'a ArrayRef) -> Result<KeyColumn<'a>> {
        Ok(match a.data_type() {
            DataType::Utf8View => KeyColumn::Str(a.as_string_view()),
            DataType::Dictionary(k, v)
                if k.as_ref() == &DataType::Int32 && v.as_ref() == &DataType::Utf8 =>
            {
                let d = a.as_dictionary::<Int32Type>();
                let values = d.values().as_string::<i32>();
                // Checked once here so that no row's code can run past them.
                if arrow::compute::max(d.keys())
                    .is_some_and(|k| k < 0 || k as usize >= values.len())
                {
                    return Err(QueryError::Partial(format!(
                        "a dictionary key past its {} values",
                        values.len()
                    )));
                }
                KeyColumn::Dict(d, values)
            }
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
            KeyColumn::Dict(d, values) => {
                d.is_valid(i) && values.is_valid(d.keys().value(i) as usize)
            }
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
            // Encoded as the same string in a StringViewArray would be, so
            // a key meets its group whichever way its batch was read.
            KeyColumn::Dict(d, values) => {
                let v = values.value(d.keys().value(i) as usize).as_bytes();
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
    /// Folds one batch's rows: `rows.ids[i]` is row `i`'s group (or
    /// [`SKIP`]); `arg` is the argument (None for count(*)).
    fn update(&mut self, rows: &Assigned, arg: Option<&ArrayRef>) -> Result<()>;
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
    /// Whether [`Accumulator::update`] folds an argument of type `t` as it
    /// is, rather than cast to the planned type ([`arg_type`]) first.
    fn takes_as_is(&self, _t: &DataType) -> bool {
        false
    }
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
                DataType::Int64 => SumKind::Int,
                DataType::Decimal128(_, s) => SumKind::Exact(*s),
                DataType::Float64 => SumKind::Float,
                DataType::Null => SumKind::Int,
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
    fn update(&mut self, rows: &Assigned, arg: Option<&ArrayRef>) -> Result<()> {
        grow(&mut self.counts, rows.groups_len(), 0);
        match arg {
            Some(a) if a.null_count() > 0 => {
                for (i, &g) in rows.ids.iter().enumerate() {
                    if g != SKIP {
                        self.counts[g as usize] += i64::from(a.is_valid(i));
                    }
                }
            }
            _ => {
                for (c, n) in self.counts.iter_mut().zip(&rows.rows_per_group) {
                    *c += n;
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

fn sum_overflows() -> QueryError {
    QueryError::compute("sum", "it overflows 128 bits")
}

/// Adds each row's value to its group's sum in `sums`, exactly. A batch
/// that lists its rows by group is summed a group at a time in two
/// registers.
fn add_exact<T: Copy + Into<i128>>(
    sums: &mut [i128],
    rows: &Assigned,
    values: &[T],
    nulls: Option<&arrow::buffer::NullBuffer>,
) -> Result<()> {
    debug_assert_eq!(rows.ids.len(), values.len());
    match (rows.by_group(), nulls) {
        (Some(groups), None) => {
            for (sum, listed) in sums.iter_mut().zip(groups) {
                let (mut a, mut b, mut overflowed) = (0i128, 0i128, false);
                let mut pairs = listed.chunks_exact(2);
                for pair in &mut pairs {
                    let (x, o1) = a.overflowing_add(values[pair[0] as usize].into());
                    let (y, o2) = b.overflowing_add(values[pair[1] as usize].into());
                    (a, b) = (x, y);
                    overflowed |= o1 | o2;
                }
                for &i in pairs.remainder() {
                    let (x, o) = a.overflowing_add(values[i as usize].into());
                    a = x;
                    overflowed |= o;
                }
                if overflowed {
                    return Err(sum_overflows());
                }
                *sum = sum
                    .checked_add(a)
                    .and_then(|s| s.checked_add(b))
                    .ok_or_else(sum_overflows)?;
            }
        }
        _ => {
            for (i, (&g, &v)) in rows.ids.iter().zip(values).enumerate() {
                if g != SKIP && nulls.is_none_or(|n| n.is_valid(i)) {
                    let s = &mut sums[g as usize];
                    *s = s.checked_add(v.into()).ok_or_else(sum_overflows)?;
                }
            }
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum SumKind {
    /// Integers, summed exactly in i128; the answer is a BIGINT.
    Int,
    /// Decimals, summed exactly in i128 at this scale.
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
            SumKind::Int | SumKind::Exact(_) => grow(&mut self.exact, len, 0),
            SumKind::Float => grow(&mut self.float, len, 0.0),
        }
        grow(&mut self.counts, len, 0);
    }

    fn add_exact(&mut self, g: usize, v: i128) -> Result<()> {
        self.exact[g] = self.exact[g].checked_add(v).ok_or_else(sum_overflows)?;
        Ok(())
    }

    fn exact_type(&self) -> DataType {
        match self.kind {
            SumKind::Int => DataType::Decimal128(38, 0),
            SumKind::Exact(s) => DataType::Decimal128(38, s),
            SumKind::Float => DataType::Float64,
        }
    }

    fn sums(&self) -> Result<ArrayRef> {
        let valid = |i: usize| self.counts[i] > 0;
        Ok(match self.kind {
            SumKind::Int | SumKind::Exact(_) => Arc::new(
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
    /// 64-bit decimals of the planned scale are added into the 128-bit
    /// sums as they are: a cast would widen every row first.
    fn takes_as_is(&self, t: &DataType) -> bool {
        matches!((self.kind, t), (SumKind::Exact(planned), DataType::Decimal64(_, s)) if planned == *s)
    }

    fn update(&mut self, rows: &Assigned, arg: Option<&ArrayRef>) -> Result<()> {
        self.grow(rows.groups_len());
        let Some(a) = arg else {
            return Err(QueryError::Invalid("sum of nothing".into()));
        };
        let nulls = a.logical_nulls().filter(|n| n.null_count() > 0);
        match (self.kind, a.data_type()) {
            (SumKind::Int, DataType::Int64) => {
                let values = primitive::<Int64Type>(a)?.values();
                add_exact(&mut self.exact, rows, values, nulls.as_ref())?;
            }
            (SumKind::Exact(_), DataType::Decimal128(..)) => {
                let values = primitive::<Decimal128Type>(a)?.values();
                add_exact(&mut self.exact, rows, values, nulls.as_ref())?;
            }
            (SumKind::Exact(_), DataType::Decimal64(..)) if self.takes_as_is(a.data_type()) => {
                let values = primitive::<Decimal64Type>(a)?.values();
                add_exact(&mut self.exact, rows, values, nulls.as_ref())?;
            }
            (SumKind::Float, DataType::Float64) => {
                let values = primitive::<Float64Type>(a)?.values();
                for (i, &g) in rows.ids.iter().enumerate() {
                    if g != SKIP && nulls.as_ref().is_none_or(|n| n.is_valid(i)) {
                        self.float[g as usize] += values[i];
                    }
                }
            }
            (_, DataType::Null) => return Ok(()),
            (_, other) => {
                return Err(QueryError::Type(format!(
                    "sum of a {other} where {:?} was planned",
                    self.exact_type()
                )))
            }
        }
        match &nulls {
            None => {
                for (c, n) in self.counts.iter_mut().zip(&rows.rows_per_group) {
                    *c += n;
                }
            }
            Some(n) => {
                for (i, &g) in rows.ids.iter().enumerate() {
                    if g != SKIP && n.is_valid(i) {
                        self.counts[g as usize] += 1;
                    }
                }
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
            SumKind::Int | SumKind::Exact(_) => {
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
                        SumKind::Int => self.exact[i] as f64 / n as f64,
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
            SumKind::Int => {
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
            if g == SKIP || (nulls && a.is_null(i)) {
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
    fn update(&mut self, rows: &Assigned, arg: Option<&ArrayRef>) -> Result<()> {
        grow(&mut self.values, rows.groups_len(), None);
        let Some(a) = arg else {
            return Err(QueryError::Invalid("min/max of nothing".into()));
        };
        if a.data_type() == &DataType::Null {
            return Ok(());
        }
        let a = primitive::<T>(a)?;
        self.fold(&rows.ids, a);
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
            if g == SKIP || a.is_null(i) {
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

impl StrMinMax {
    fn fold_strings(&mut self, groups: &[u32], groups_len: usize, a: &ArrayRef) -> Result<()> {
        grow(&mut self.values, groups_len, None);
        let a = a
            .as_string_view_opt()
            .ok_or_else(|| QueryError::Partial(format!("min/max of a {}", a.data_type())))?;
        self.fold(groups, a);
        Ok(())
    }
}

impl Accumulator for StrMinMax {
    fn update(&mut self, rows: &Assigned, arg: Option<&ArrayRef>) -> Result<()> {
        let Some(a) = arg else {
            return Err(QueryError::Invalid("min/max of nothing".into()));
        };
        self.fold_strings(&rows.ids, rows.groups_len(), a)
    }

    fn merge(&mut self, groups: &[u32], groups_len: usize, state: &[ArrayRef]) -> Result<()> {
        self.fold_strings(groups, groups_len, state_at(state, 0)?)
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
    fn update(&mut self, rows: &Assigned, arg: Option<&ArrayRef>) -> Result<()> {
        grow(&mut self.sets, rows.groups_len(), HashSet::new());
        let Some(a) = arg else {
            return Err(QueryError::Invalid("count(DISTINCT) of nothing".into()));
        };
        let encoded = self
            .converter
            .convert_columns(std::slice::from_ref(a))
            .map_err(|e| QueryError::compute("count(DISTINCT)", e))?;
        for (i, &g) in rows.ids.iter().enumerate() {
            if g != SKIP && a.is_valid(i) {
                self.insert(g, encoded.row(i).as_ref());
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
