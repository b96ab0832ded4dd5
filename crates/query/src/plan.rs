//! A query bound to one Parquet file: the columns and row groups it
//! reads, and its evaluation over row groups into a partial result.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::agg::{accumulator, arg_type, Accumulator, Groups};
use crate::error::{QueryError, Result};
use crate::expr::{canonical, cast, AggFunc, BinOp, Expr, Lit, Memo};
use crate::sql::{parse, Order, Select, WILDCARD};

/// Rows decoded at a time.
const BATCH_ROWS: usize = 8192;

/// The least share of a batch (3 of 4) its WHERE must keep for an
/// aggregate to fold the batch in place rather than copy the kept rows
/// out: below it, the copy costs less than evaluating the dropped rows.
const IN_PLACE_KEPT_OF: [usize; 2] = [3, 4];

/// A parsed query, ready to bind to files.
#[derive(Debug, Clone)]
pub struct Query {
    select: Select,
}

impl Query {
    /// Parses `sql` (the subset docs/query.md lists; anything else is
    /// [`QueryError::Unsupported`] naming it).
    pub fn parse(sql: &str) -> Result<Query> {
        Ok(Query {
            select: parse(sql)?,
        })
    }

    /// The FROM string: `bucket/key` or `bucket/pattern`.
    pub fn source(&self) -> &str {
        &self.select.source
    }

    /// The query bound to object `object`, a Parquet file of `file_len`
    /// bytes whose tail (metadata, its length, `PAR1`) is `footer`.
    pub fn bind(&self, object: &str, footer: &[u8], file_len: u64) -> Result<FilePlan> {
        let bad = |reason: String| QueryError::Object {
            object: object.to_string(),
            reason,
        };
        let metadata = Arc::new(decode_footer(footer).map_err(&bad)?);
        let reader = ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::new())
            .map_err(|e| bad(format!("its schema does not convert to arrow: {e}")))?;
        let schema = reader.schema().clone();
        let shape = Shape::compile(&self.select, &schema, object)?;
        // A hint the reader refuses (a column it cannot read as a
        // dictionary, say) leaves the file's own types, which the
        // expressions take as well.
        let reader = read_types(&shape, &schema, &metadata)
            .and_then(|hint| {
                let options = ArrowReaderOptions::new().with_schema(hint);
                ArrowReaderMetadata::try_new(metadata.clone(), options).ok()
            })
            .unwrap_or(reader);
        let mut roots: Vec<usize> = Vec::new();
        for name in &shape.columns {
            if let Ok(i) = schema.index_of(name) {
                roots.push(i);
            }
        }
        roots.sort_unstable();
        let data_end = file_len.saturating_sub(footer.len() as u64);
        let plan = FilePlan {
            object: object.to_string(),
            metadata,
            reader,
            schema,
            roots,
            shape,
            data_end,
        };
        plan.check_ranges()?;
        Ok(plan)
    }
}

/// The types the reader decodes the file's columns to, when any differs
/// from arrow's default (None when none does):
/// - a string column that is a GROUP BY key becomes a dictionary (Parquet
///   stores strings so, and the codes group without hashing each row's
///   string);
/// - a decimal stored as a 32- or 64-bit integer becomes a `Decimal64`:
///   arrow's default widens every value to 128 bits on the way in, a pass
///   that costs as much as the comparisons a WHERE makes afterwards, and
///   128-bit compares cost twice what 64-bit ones do. The expressions
///   compare `Decimal64`s as they are and widen them where they compute.
fn read_types(shape: &Shape, schema: &SchemaRef, metadata: &ParquetMetaData) -> Option<SchemaRef> {
    let keys = match &shape.kind {
        Kind::Aggregate { keys, .. } => keys.as_slice(),
        _ => &[],
    };
    let descr = metadata.file_metadata().schema_descr();
    // A root that is one integer leaf, by its index among the roots.
    let mut integer_root = vec![false; schema.fields().len()];
    for leaf in 0..descr.num_columns() {
        let column = descr.column(leaf);
        let root = descr.get_column_root_idx(leaf);
        let integer = matches!(
            column.physical_type(),
            parquet::basic::Type::INT32 | parquet::basic::Type::INT64
        );
        if let Some(slot) = integer_root.get_mut(root) {
            *slot = integer && column.path().parts().len() == 1;
        }
    }
    let mut changed = false;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(&integer_root)
        .map(|(f, &integer)| {
            let is_key = keys.contains(&Expr::Column(f.name().clone()));
            let hint = match f.data_type() {
                DataType::Utf8 | DataType::Utf8View if is_key => Some(DataType::Dictionary(
                    Box::new(DataType::Int32),
                    Box::new(DataType::Utf8),
                )),
                DataType::Decimal128(p, s) if integer && *p <= DECIMAL64_MAX_PRECISION => {
                    Some(DataType::Decimal64(*p, *s))
                }
                _ => None,
            };
            match hint {
                Some(t) => {
                    changed = true;
                    f.as_ref().clone().with_data_type(t)
                }
                None => f.as_ref().clone(),
            }
        })
        .collect();
    changed.then(|| Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())))
}

/// The most digits a `Decimal64` holds.
const DECIMAL64_MAX_PRECISION: u8 = 18;

const MAGIC: &[u8; 4] = b"PAR1";

fn decode_footer(footer: &[u8]) -> std::result::Result<ParquetMetaData, String> {
    if footer.len() < 8 || &footer[footer.len() - 4..] != MAGIC {
        return Err("not a Parquet file: no PAR1 at its end".into());
    }
    let len_at = footer.len() - 8;
    let mut len_bytes = [0u8; 4];
    len_bytes.copy_from_slice(&footer[len_at..len_at + 4]);
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len > len_at {
        return Err("its footer's metadata length runs past the footer".into());
    }
    // The crate panics on some damaged metadata: a footer that panics
    // the decoder does not parse.
    let metadata = &footer[len_at - len..len_at];
    std::panic::catch_unwind(|| ParquetMetaDataReader::decode_metadata(metadata))
        .map_err(|_| "its footer's metadata does not decode".to_string())?
        .map_err(|e| format!("its footer's metadata does not decode: {e}"))
}

/// A query bound to one file.
#[derive(Debug)]
pub struct FilePlan {
    object: String,
    metadata: Arc<ParquetMetaData>,
    reader: ArrowReaderMetadata,
    schema: SchemaRef,
    /// Top-level columns read, in file order.
    roots: Vec<usize>,
    shape: Shape,
    data_end: u64,
}

impl FilePlan {
    /// Row groups in the file.
    pub fn row_groups_total(&self) -> usize {
        self.metadata.num_row_groups()
    }

    /// The row groups worth reading: those whose footer statistics do not
    /// rule out every row for the WHERE clause.
    pub fn row_groups(&self) -> Result<Vec<usize>> {
        let all: Vec<usize> = (0..self.row_groups_total()).collect();
        let Some(filter) = &self.shape.filter else {
            return Ok(all);
        };
        let mut keep = vec![true; all.len()];
        for conjunct in conjuncts(filter) {
            self.prune(conjunct, &mut keep)?;
        }
        Ok(all.into_iter().filter(|&g| keep[g]).collect())
    }

    /// The file's byte ranges row group `row_group` needs (one per column
    /// chunk read), in file order.
    pub fn ranges(&self, row_group: usize) -> Result<Vec<Range<u64>>> {
        let rg = self.metadata.row_groups().get(row_group).ok_or_else(|| {
            QueryError::Invalid(format!(
                "{}: no row group {row_group} (it has {})",
                self.object,
                self.row_groups_total()
            ))
        })?;
        let descr = self.metadata.file_metadata().schema_descr();
        let mut out = Vec::new();
        for leaf in 0..descr.num_columns() {
            if !self.roots.contains(&descr.get_column_root_idx(leaf)) {
                continue;
            }
            let c = rg.column(leaf);
            let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
            let end = start.saturating_add(c.compressed_size());
            if start < MAGIC.len() as i64 || end < start || end as u64 > self.data_end {
                return Err(QueryError::Object {
                    object: self.object.clone(),
                    reason: format!(
                        "row group {row_group} column {} claims bytes {start}..{end}, outside \
                         the file's data (..{})",
                        c.column_path().string(),
                        self.data_end
                    ),
                });
            }
            out.push(start as u64..end as u64);
        }
        Ok(out)
    }

    fn check_ranges(&self) -> Result<()> {
        for g in 0..self.row_groups_total() {
            self.ranges(g)?;
        }
        Ok(())
    }

    /// Clears `keep[g]` for row groups where `conjunct` (one part of an
    /// AND) is false for every row by the statistics. Only simple
    /// comparisons of a column of numbers or dates with a constant prune;
    /// anything else keeps every row group.
    fn prune(&self, conjunct: &Expr, keep: &mut [bool]) -> Result<()> {
        let Expr::Binary(op, l, r) = conjunct else {
            return Ok(());
        };
        let (column, op, lit) = match (l.as_ref(), r.as_ref()) {
            (Expr::Column(c), Expr::Lit(v)) => (c, *op, v),
            (Expr::Lit(v), Expr::Column(c)) => (c, flip(*op), v),
            _ => return Ok(()),
        };
        let Ok(field) = self.schema.field_with_name(column) else {
            return Ok(());
        };
        let prunable = matches!(
            canonical(field.data_type()),
            DataType::Int64 | DataType::Float64 | DataType::Decimal128(..) | DataType::Date32
        );
        if !prunable || *lit == Lit::Null {
            return Ok(());
        }
        let descr = self.metadata.file_metadata().schema_descr();
        let Ok(stats) = StatisticsConverter::try_new(column, &self.schema, descr) else {
            return Ok(());
        };
        let groups = self.metadata.row_groups().iter();
        let (Ok(mins), Ok(maxes)) = (
            stats.row_group_mins(groups.clone()),
            stats.row_group_maxes(groups),
        ) else {
            return Ok(());
        };
        let bounds = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("min", mins.data_type().clone(), true),
                Field::new("max", maxes.data_type().clone(), true),
            ])),
            vec![mins, maxes],
        )
        .map_err(|e| QueryError::compute("row group statistics", e))?;
        let col = |c: &str| Expr::Column(c.into());
        let v = || Expr::Lit(lit.clone());
        // Some row may pass: the condition on the bounds.
        let may_pass = match op {
            BinOp::Gt | BinOp::Ge => Expr::binary(op, col("max"), v()),
            BinOp::Lt | BinOp::Le => Expr::binary(op, col("min"), v()),
            BinOp::Eq => Expr::binary(
                BinOp::And,
                Expr::binary(BinOp::Le, col("min"), v()),
                Expr::binary(BinOp::Ge, col("max"), v()),
            ),
            _ => return Ok(()),
        };
        let Ok(passes) = may_pass.eval_predicate(&bounds) else {
            return Ok(());
        };
        for (g, k) in keep.iter_mut().enumerate() {
            // Unknown (no statistics) keeps the row group.
            if arrow::array::Array::is_valid(&passes, g) && !passes.value(g) {
                *k = false;
            }
        }
        Ok(())
    }

    /// Evaluates the query over `row_groups` of the file, whose column
    /// chunks ([`FilePlan::ranges`]) are in `data`, into a partial result
    /// (Arrow IPC) for [`crate::Merger`]. Memory held for groups or rows is
    /// bounded by `memory_bytes`.
    pub fn evaluate(
        &self,
        row_groups: &[usize],
        data: Vec<(u64, Bytes)>,
        memory_bytes: u64,
    ) -> Result<Vec<u8>> {
        let mut state = self.shape.start(&self.schema)?;
        if !row_groups.is_empty() {
            let file = SparseFile::new(&self.object, data, self.data_end);
            let mask = ProjectionMask::roots(
                self.metadata.file_metadata().schema_descr(),
                self.roots.iter().copied(),
            );
            let reader =
                ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.reader.clone())
                    .with_projection(mask)
                    .with_row_groups(row_groups.to_vec())
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| self.fault(e))?;
            for batch in reader {
                let batch = batch.map_err(|e| self.fault(e))?;
                self.fold_filtered(&mut state, &batch)?;
                let held = state.held_bytes();
                if held as u64 > memory_bytes {
                    return Err(QueryError::Limit(format!(
                        "the query holds {held} bytes of groups or rows at a node, more than \
                         its memory limit of {memory_bytes}; aggregate, filter or LIMIT more"
                    )));
                }
                if state.full(&self.shape) {
                    break;
                }
            }
        }
        let partial = state.partial(&self.shape)?;
        crate::merge::encode(&partial)
    }

    /// Folds the rows of `batch` the WHERE clause keeps. A GROUP BY or
    /// aggregate that keeps most rows folds them in place and passes the
    /// rest by; otherwise the kept rows are copied out first.
    fn fold_filtered(&self, state: &mut Fold, batch: &RecordBatch) -> Result<()> {
        let Some(f) = &self.shape.filter else {
            return state.fold(&self.shape, batch, None).map(drop);
        };
        let keep = crate::filter::keep_mask(f, batch)?;
        let (kept, rows) = (keep.true_count(), batch.num_rows());
        if kept == 0 {
            return Ok(());
        }
        if kept == rows {
            return state.fold(&self.shape, batch, None).map(drop);
        }
        // A fold in place evaluates the aggregates' arguments over the
        // dropped rows too; if that fails (a cast or an overflow in a row
        // the WHERE clause drops), the batch is folded again filtered.
        if state.folds_in_place()
            && kept * IN_PLACE_KEPT_OF[1] >= rows * IN_PLACE_KEPT_OF[0]
            && state.fold(&self.shape, batch, Some(keep.values()))?
        {
            return Ok(());
        }
        let filtered = arrow::compute::filter_record_batch(batch, &keep)
            .map_err(|e| QueryError::compute("WHERE", e))?;
        state.fold(&self.shape, &filtered, None).map(drop)
    }

    fn fault(&self, e: impl std::fmt::Display) -> QueryError {
        QueryError::Object {
            object: self.object.clone(),
            reason: format!("its Parquet data does not decode: {e}"),
        }
    }

    pub(crate) fn shape(&self) -> &Shape {
        &self.shape
    }
}

/// `op` with its operands swapped: `a < b` is `b > a`.
pub(crate) fn flip(op: BinOp) -> BinOp {
    match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        other => other,
    }
}

fn conjuncts(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Binary(BinOp::And, l, r) => {
            let mut out = conjuncts(l);
            out.extend(conjuncts(r));
            out
        }
        other => vec![other],
    }
}

/// The bytes of a file a run holds: the column chunks it reads, nothing
/// else. A read outside them is an error, not zeros.
struct SparseFile {
    object: String,
    ranges: Vec<(u64, Bytes)>,
    len: u64,
}

impl SparseFile {
    fn new(object: &str, mut ranges: Vec<(u64, Bytes)>, len: u64) -> SparseFile {
        ranges.sort_by_key(|(at, _)| *at);
        SparseFile {
            object: object.to_string(),
            ranges,
            len,
        }
    }

    /// The fetched range that starts at or before `start`, the nearest.
    fn range_at(&self, start: u64) -> Option<usize> {
        let i = self.ranges.partition_point(|(at, _)| *at <= start);
        i.checked_sub(1)
    }

    /// The pieces covering `start..start + len`, the first and last cut
    /// to it: several when the range crosses from one fetched chunk into
    /// the next (a page cut over chunks).
    fn pieces(&self, start: u64, len: u64) -> parquet::errors::Result<Vec<Bytes>> {
        let missing = || {
            parquet::errors::ParquetError::General(format!(
                "{}: bytes {start}..+{len} were not fetched for this run",
                self.object
            ))
        };
        let first = self.range_at(start).ok_or_else(missing)?;
        let end = start.checked_add(len).ok_or_else(missing)?;
        let mut out = Vec::new();
        let mut at = start;
        for (piece_at, bytes) in &self.ranges[first..] {
            let piece_end = piece_at + bytes.len() as u64;
            if *piece_at > at || piece_end <= at {
                // A gap: the next piece does not continue the range.
                break;
            }
            let to = piece_end.min(end);
            out.push(bytes.slice((at - piece_at) as usize..(to - piece_at) as usize));
            at = to;
            if at == end {
                return Ok(out);
            }
        }
        if len == 0 {
            return Ok(out);
        }
        Err(missing())
    }

    /// `start..start + len` as one buffer: a slice of the fetched chunk
    /// when one holds it all (pages are chunks under `parquet` chunking),
    /// else the pieces copied together.
    fn find(&self, start: u64, len: u64) -> parquet::errors::Result<Bytes> {
        let mut pieces = self.pieces(start, len)?;
        if pieces.len() == 1 {
            return Ok(pieces.swap_remove(0));
        }
        let mut joined = Vec::with_capacity(len as usize);
        for p in &pieces {
            joined.extend_from_slice(p);
        }
        debug_assert_eq!(joined.len() as u64, len);
        Ok(Bytes::from(joined))
    }
}

/// How far past its start a [`PiecesReader`] reaches into the chunks that
/// continue its own.
const HEADER_READ_MAX_BYTES: u64 = 1 << 20;

/// The bytes from an offset to the end of the fetched range it is in,
/// read across the chunks that continue it without copying them (a page
/// header can be cut over two chunks).
struct PiecesReader {
    pieces: std::collections::VecDeque<Bytes>,
}

impl std::io::Read for PiecesReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(front) = self.pieces.front_mut() {
            if front.is_empty() {
                self.pieces.pop_front();
                continue;
            }
            let n = buf.len().min(front.len());
            buf[..n].copy_from_slice(&front[..n]);
            bytes::Buf::advance(front, n);
            return Ok(n);
        }
        Ok(0)
    }
}

impl parquet::file::reader::Length for SparseFile {
    fn len(&self) -> u64 {
        self.len
    }
}

impl parquet::file::reader::ChunkReader for SparseFile {
    type T = PiecesReader;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let missing = || {
            parquet::errors::ParquetError::General(format!(
                "{}: byte {start} was not fetched for this run",
                self.object
            ))
        };
        let first = self.range_at(start).ok_or_else(missing)?;
        let (at, bytes) = &self.ranges[first];
        let from = (start - at) as usize;
        if from > bytes.len() {
            return Err(missing());
        }
        let mut pieces = std::collections::VecDeque::from([bytes.slice(from..)]);
        let mut end = at + bytes.len() as u64;
        for (next_at, next) in &self.ranges[first + 1..] {
            // A page header is read from here: it is far shorter.
            if *next_at != end || end - start >= HEADER_READ_MAX_BYTES {
                break;
            }
            pieces.push_back(next.clone());
            end += next.len() as u64;
        }
        Ok(PiecesReader { pieces })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.find(start, length as u64)
    }
}

/// A query in the form that runs: what the nodes compute and what the
/// entry node does with it.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// Columns read from the file.
    pub columns: Vec<String>,
    pub filter: Option<Expr>,
    pub kind: Kind,
    /// Output items over the final batch, with their names.
    pub items: Vec<(Expr, String)>,
    pub having: Option<Expr>,
    pub order: Vec<(Expr, Order)>,
    pub limit: Option<u64>,
    pub offset: u64,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// GROUP BY or aggregates: the nodes send groups' states.
    Aggregate {
        keys: Vec<Expr>,
        key_types: Vec<DataType>,
        aggs: Vec<(AggFunc, Option<Expr>, Option<DataType>)>,
        /// For each aggregate, the earlier one whose state it shares
        /// ([`shared_sums`]).
        shared: Vec<Option<usize>>,
    },
    /// Rows: the nodes send the rows' columns (`#iN` items, `#oN` hidden
    /// order keys).
    Rows { columns: Vec<Expr> },
}

fn unknown_column(name: &str, object: &str, schema: &Schema) -> QueryError {
    QueryError::NoSuchColumn {
        name: name.to_string(),
        object: object.to_string(),
        available: schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

impl Shape {
    fn compile(select: &Select, schema: &SchemaRef, object: &str) -> Result<Shape> {
        let mut items = Vec::new();
        for (e, name) in &select.items {
            if *e == Expr::Column(WILDCARD.into()) {
                for f in schema.fields() {
                    items.push((Expr::Column(f.name().clone()), f.name().clone()));
                }
            } else {
                items.push((e.clone(), name.clone()));
            }
        }
        let mut columns = Vec::new();
        let all = items
            .iter()
            .map(|(e, _)| e)
            .chain(&select.filter)
            .chain(&select.group_by)
            .chain(&select.having)
            .chain(select.order_by.iter().map(|(e, _)| e));
        for e in all {
            e.columns(&mut columns);
        }
        // An ORDER BY or HAVING name that is an output alias is not a
        // file column.
        columns.retain(|c| schema.index_of(c).is_ok() || !items.iter().any(|(_, n)| n == c));
        if let Some(c) = columns.iter().find(|c| schema.index_of(c).is_err()) {
            return Err(unknown_column(c, object, schema));
        }
        let empty = RecordBatch::new_empty(schema.clone());
        let aggregate = !select.group_by.is_empty()
            || items.iter().any(|(e, _)| e.has_agg())
            || select.having.as_ref().is_some_and(Expr::has_agg)
            || select.order_by.iter().any(|(e, _)| e.has_agg());
        if let Some(f) = &select.filter {
            f.eval_predicate(&empty)?;
        }
        let base = Shape {
            columns,
            filter: select.filter.clone(),
            kind: Kind::Rows {
                columns: Vec::new(),
            },
            items: Vec::new(),
            having: None,
            order: Vec::new(),
            limit: select.limit,
            offset: select.offset,
        };
        if aggregate {
            Shape::aggregate(base, select, items, &empty)
        } else {
            Shape::rows(base, select, items, &empty)
        }
    }

    fn aggregate(
        mut base: Shape,
        select: &Select,
        items: Vec<(Expr, String)>,
        empty: &RecordBatch,
    ) -> Result<Shape> {
        let keys = select.group_by.clone();
        let key_types = keys
            .iter()
            .map(|k| Ok(canonical(k.eval_array(empty)?.data_type())))
            .collect::<Result<Vec<_>>>()?;
        let mut aggs: Vec<(AggFunc, Option<Expr>, Option<DataType>)> = Vec::new();
        let mut found: Vec<Expr> = Vec::new();
        let sources = items
            .iter()
            .map(|(e, _)| e)
            .chain(&select.having)
            .chain(select.order_by.iter().map(|(e, _)| e));
        for e in sources {
            e.visit(&mut |x| {
                if matches!(x, Expr::Agg(..)) && !found.contains(x) {
                    found.push(x.clone());
                }
            });
        }
        for a in &found {
            let Expr::Agg(func, arg) = a else { continue };
            let t = match arg {
                Some(e) => Some(arg_type(e.eval_array(empty)?.data_type())),
                None => None,
            };
            accumulator(*func, t.as_ref())?;
            aggs.push((*func, arg.as_deref().cloned(), t));
        }
        let post = |e: &Expr, what: &str| -> Result<Expr> {
            let out = e.rewrite(&mut |x| {
                if let Some(i) = keys.iter().position(|k| k == x) {
                    return Some(Expr::Column(format!("#k{i}")));
                }
                found
                    .iter()
                    .position(|a| a == x)
                    .map(|j| Expr::Column(format!("#a{j}")))
            });
            let mut left = Vec::new();
            out.columns(&mut left);
            if let Some(c) = left.iter().find(|c| !c.starts_with('#')) {
                return Err(QueryError::Invalid(format!(
                    "{what}: column {c:?} must be in GROUP BY or inside an aggregate"
                )));
            }
            Ok(out)
        };
        base.items = items
            .iter()
            .map(|(e, n)| Ok((post(e, n)?, n.clone())))
            .collect::<Result<_>>()?;
        base.having = select
            .having
            .as_ref()
            .map(|h| post(h, "HAVING"))
            .transpose()?;
        base.order = select
            .order_by
            .iter()
            .map(|(e, o)| Ok((post(e, "ORDER BY")?, *o)))
            .collect::<Result<_>>()?;
        let shared = shared_sums(&aggs);
        base.kind = Kind::Aggregate {
            keys,
            key_types,
            aggs,
            shared,
        };
        Ok(base)
    }

    fn rows(
        mut base: Shape,
        select: &Select,
        items: Vec<(Expr, String)>,
        empty: &RecordBatch,
    ) -> Result<Shape> {
        if select.having.is_some() {
            return Err(QueryError::Invalid(
                "HAVING without GROUP BY or an aggregate".into(),
            ));
        }
        let mut columns = Vec::new();
        for (i, (e, _)) in items.iter().enumerate() {
            e.eval(empty)?;
            columns.push(e.clone());
            base.items
                .push((Expr::Column(format!("#i{i}")), items[i].1.clone()));
        }
        for (e, o) in &select.order_by {
            let at = match columns.iter().position(|c| c == e) {
                Some(i) => i,
                None => {
                    e.eval(empty)?;
                    columns.push(e.clone());
                    columns.len() - 1
                }
            };
            base.order.push((Expr::Column(format!("#i{at}")), *o));
        }
        base.kind = Kind::Rows { columns };
        Ok(base)
    }

    /// A node's state before any row.
    fn start(&self, schema: &SchemaRef) -> Result<Fold> {
        Ok(match &self.kind {
            Kind::Aggregate {
                key_types, aggs, ..
            } => {
                let (groups, accs) = new_groups(key_types, aggs)?;
                Fold::Groups { groups, accs }
            }
            // The first batch has no rows: it gives the partial its
            // schema when no row passes.
            Kind::Rows { columns } => Fold::Rows {
                batches: vec![rows_batch(
                    columns,
                    &RecordBatch::new_empty(schema.clone()),
                )?],
                rows: 0,
                bytes: 0,
            },
        })
    }
}

/// Empty groups and accumulators for a GROUP BY's keys and aggregates.
pub(crate) fn new_groups(
    key_types: &[DataType],
    aggs: &[(AggFunc, Option<Expr>, Option<DataType>)],
) -> Result<(Groups, Vec<Box<dyn Accumulator>>)> {
    let accs = aggs
        .iter()
        .map(|(f, _, t)| accumulator(*f, t.as_ref()))
        .collect::<Result<_>>()?;
    Ok((Groups::new(key_types)?, accs))
}

/// What a node folds rows into.
enum Fold {
    Groups {
        groups: Groups,
        accs: Vec<Box<dyn Accumulator>>,
    },
    Rows {
        batches: Vec<RecordBatch>,
        rows: u64,
        bytes: usize,
    },
}

impl Fold {
    /// Whether [`Fold::fold`] takes a mask of the rows to fold.
    fn folds_in_place(&self) -> bool {
        matches!(self, Fold::Groups { .. })
    }

    /// Folds `batch`'s rows, or only those `keep` has (groups only).
    /// False, with nothing folded, when an expression fails over the
    /// whole batch under a mask: the caller folds the kept rows alone.
    fn fold(
        &mut self,
        shape: &Shape,
        batch: &RecordBatch,
        keep: Option<&BooleanBuffer>,
    ) -> Result<bool> {
        match (self, &shape.kind) {
            (
                Fold::Groups { groups, accs },
                Kind::Aggregate {
                    keys,
                    key_types,
                    aggs,
                    shared,
                },
            ) => {
                let mut memo = Memo::new();
                let evaluated = key_arrays(keys, key_types, batch, &mut memo).and_then(|keys| {
                    let args = aggs
                        .iter()
                        .zip(shared)
                        .zip(accs.iter())
                        .map(|(((_, arg, t), same), acc)| match (arg, t, same) {
                            (Some(e), Some(t), None) => {
                                let a = e.eval_shared(batch, &mut memo)?;
                                Ok(Some(if acc.takes_as_is(a.data_type()) {
                                    a
                                } else {
                                    cast(&a, t)?
                                }))
                            }
                            _ => Ok(None),
                        })
                        .collect::<Result<Vec<Option<ArrayRef>>>>()?;
                    Ok((keys, args))
                });
                let (keys, args) = match evaluated {
                    Ok(v) => v,
                    Err(_) if keep.is_some() => return Ok(false),
                    Err(e) => return Err(e),
                };
                let rows = groups.assign(&keys, batch.num_rows(), keep)?;
                for ((acc, arg), same) in accs.iter_mut().zip(&args).zip(shared) {
                    if same.is_none() {
                        acc.update(&rows, arg.as_ref())?;
                    }
                }
                Ok(true)
            }
            (_, Kind::Rows { .. }) if keep.is_some() => {
                Err(QueryError::Invalid("rows folded under a mask".into()))
            }
            (
                Fold::Rows {
                    batches,
                    rows,
                    bytes,
                },
                Kind::Rows { columns },
            ) => {
                let out = rows_batch(columns, batch)?;
                *rows += out.num_rows() as u64;
                *bytes += out.get_array_memory_size();
                batches.push(out);
                Ok(true)
            }
            _ => Err(QueryError::Invalid("a plan and its state disagree".into())),
        }
    }

    fn held_bytes(&self) -> usize {
        match self {
            Fold::Groups { groups, accs } => {
                groups.held_bytes() + accs.iter().map(|a| a.held_bytes()).sum::<usize>()
            }
            Fold::Rows { bytes, .. } => *bytes,
        }
    }

    /// Whether no more rows can change the answer (a LIMIT with no ORDER
    /// BY is met).
    fn full(&self, shape: &Shape) -> bool {
        match (self, shape.limit) {
            (Fold::Rows { rows, .. }, Some(limit)) if shape.order.is_empty() => {
                *rows >= limit.saturating_add(shape.offset)
            }
            _ => false,
        }
    }

    fn partial(self, shape: &Shape) -> Result<RecordBatch> {
        match self {
            Fold::Groups { groups, mut accs } => {
                let (mut fields, mut columns) = groups.key_fields()?;
                let shared: &[Option<usize>] = match &shape.kind {
                    Kind::Aggregate { shared, .. } => shared,
                    Kind::Rows { .. } => &[],
                };
                for acc in &mut accs {
                    acc.resize(groups.len());
                }
                for j in 0..accs.len() {
                    // A sum and an avg of one argument keep the same state.
                    let from = shared.get(j).copied().flatten().unwrap_or(j);
                    for (m, s) in accs[from].state()?.into_iter().enumerate() {
                        fields.push(Field::new(
                            format!("#s{j}_{m}"),
                            s.data_type().clone(),
                            true,
                        ));
                        columns.push(s);
                    }
                }
                batch(fields, columns, groups.len())
            }
            Fold::Rows { batches, .. } => {
                let schema = batches
                    .first()
                    .map(RecordBatch::schema)
                    .ok_or_else(|| QueryError::Invalid("rows with no schema".into()))?;
                let all = arrow::compute::concat_batches(&schema, &batches)
                    .map_err(|e| QueryError::compute("rows", e))?;
                // A node keeps only the rows that can be in the answer.
                let keep = shape.limit.map(|l| l.saturating_add(shape.offset));
                crate::merge::sort_and_cut(&all, &shape.order, 0, keep)
            }
        }
    }
}

/// For each aggregate, the earlier one whose state it shares: sum and avg
/// of the same argument both keep a sum and a count per group (TPC-H Q1
/// has two such pairs), so the rows are folded once for both.
fn shared_sums(aggs: &[(AggFunc, Option<Expr>, Option<DataType>)]) -> Vec<Option<usize>> {
    let sum_like = |f: AggFunc| matches!(f, AggFunc::Sum | AggFunc::Avg);
    aggs.iter()
        .enumerate()
        .map(|(j, (f, arg, t))| {
            aggs[..j].iter().position(|(f2, arg2, t2)| {
                sum_like(*f) && sum_like(*f2) && arg.is_some() && arg == arg2 && t == t2
            })
        })
        .collect()
}

/// A batch's GROUP BY keys in their canonical types, except that a key
/// column read as a dictionary stays one (the groups read its codes).
fn key_arrays(
    keys: &[Expr],
    key_types: &[DataType],
    batch: &RecordBatch,
    memo: &mut Memo,
) -> Result<Vec<ArrayRef>> {
    keys.iter()
        .zip(key_types)
        .map(|(k, t)| {
            if let (Expr::Column(name), DataType::Utf8View) = (k, t) {
                if let Some(a) = batch.column_by_name(name) {
                    if matches!(a.data_type(), DataType::Dictionary(..)) {
                        return Ok(a.clone());
                    }
                }
            }
            cast(&k.eval_shared(batch, memo)?, t)
        })
        .collect()
}

fn batch(fields: Vec<Field>, columns: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(|e| QueryError::compute("a partial result", e))
}

fn rows_batch(columns: &[Expr], batch: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut arrays = Vec::new();
    for (i, e) in columns.iter().enumerate() {
        let a = e.eval_array(batch)?;
        let a = cast(&a, &canonical(a.data_type()))?;
        fields.push(Field::new(format!("#i{i}"), a.data_type().clone(), true));
        arrays.push(a);
    }
    self::batch(fields, arrays, batch.num_rows())
}
