//! The entry node's half: partial results merged, then HAVING, ORDER BY,
//! LIMIT and the output items.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{lexsort_to_indices, SortColumn, SortOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::agg::{Accumulator, Groups};
use crate::error::{QueryError, Result};
use crate::expr::{cast, Expr};
use crate::plan::{new_groups, FilePlan, Kind, Shape};
use crate::sql::Order;

/// Largest partial result decoded, and largest answer assembled.
pub const MAX_PARTIAL_BYTES: usize = 1 << 30;

/// A batch as an Arrow IPC stream.
pub(crate) fn encode(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, &batch.schema())
        .map_err(|e| QueryError::compute("a partial result", e))?;
    w.write(batch)
        .map_err(|e| QueryError::compute("a partial result", e))?;
    w.finish()
        .map_err(|e| QueryError::compute("a partial result", e))?;
    drop(w);
    Ok(out)
}

/// The batches of an Arrow IPC stream, joined into one.
pub fn decode_ipc(bytes: &[u8]) -> Result<RecordBatch> {
    if bytes.len() > MAX_PARTIAL_BYTES {
        return Err(QueryError::Limit(format!(
            "a result of {} bytes, more than {MAX_PARTIAL_BYTES}",
            bytes.len()
        )));
    }
    let reader =
        StreamReader::try_new(bytes, None).map_err(|e| QueryError::Partial(e.to_string()))?;
    let schema = reader.schema();
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| QueryError::Partial(e.to_string()))?;
    arrow::compute::concat_batches(&schema, &batches)
        .map_err(|e| QueryError::Partial(e.to_string()))
}

/// Merges the partial results of every row group of every file into the
/// answer.
pub struct Merger {
    shape: Shape,
    /// The schema every partial must have: files whose columns differ in
    /// type cannot be merged into one answer.
    expected: SchemaRef,
    state: MergeState,
    memory_bytes: u64,
}

enum MergeState {
    Groups {
        groups: Groups,
        accs: Vec<Box<dyn Accumulator>>,
    },
    Rows {
        batches: Vec<RecordBatch>,
        bytes: usize,
    },
}

impl Merger {
    /// A merger for `plan`'s query (the first file's plan: the others'
    /// partials must match it), holding at most `memory_bytes`.
    pub fn new(plan: &FilePlan, memory_bytes: u64) -> Result<Merger> {
        let empty = decode_ipc(&plan.evaluate(&[], Vec::new(), memory_bytes)?)?;
        let shape = plan.shape().clone();
        let state = match &shape.kind {
            Kind::Aggregate {
                key_types, aggs, ..
            } => {
                let (groups, accs) = new_groups(key_types, aggs)?;
                MergeState::Groups { groups, accs }
            }
            Kind::Rows { .. } => MergeState::Rows {
                batches: Vec::new(),
                bytes: 0,
            },
        };
        let mut merger = Merger {
            shape,
            expected: empty.schema(),
            state,
            memory_bytes,
        };
        merger.add_batch(&empty, "the plan")?;
        Ok(merger)
    }

    /// Adds a partial result ([`FilePlan::evaluate`]) of object `object`.
    pub fn add(&mut self, partial: &[u8], object: &str) -> Result<()> {
        let batch = decode_ipc(partial)?;
        self.add_batch(&batch, object)
    }

    fn add_batch(&mut self, batch: &RecordBatch, object: &str) -> Result<()> {
        let same = batch.schema().fields().len() == self.expected.fields().len()
            && batch
                .schema()
                .fields()
                .iter()
                .zip(self.expected.fields())
                .all(|(a, b)| a.data_type() == b.data_type());
        if !same {
            return Err(QueryError::Object {
                object: object.to_string(),
                reason: format!(
                    "its columns' types differ from the first object's ({} vs {}): the objects \
                     of one query must agree",
                    describe(&batch.schema()),
                    describe(&self.expected)
                ),
            });
        }
        let keys_len = match &self.shape.kind {
            Kind::Aggregate { keys, .. } => keys.len(),
            Kind::Rows { .. } => 0,
        };
        match &mut self.state {
            MergeState::Groups { groups, accs } => {
                let columns = batch.columns();
                let ids = groups.assign_ids(&columns[..keys_len], batch.num_rows(), None)?;
                let mut at = keys_len;
                for (j, acc) in accs.iter_mut().enumerate() {
                    let prefix = format!("#s{j}_");
                    let n = batch
                        .schema()
                        .fields()
                        .iter()
                        .filter(|f| f.name().starts_with(&prefix))
                        .count();
                    acc.merge(&ids, groups.len(), &columns[at..at + n])?;
                    at += n;
                }
            }
            MergeState::Rows { batches, bytes } => {
                *bytes += batch.get_array_memory_size();
                batches.push(batch.clone());
            }
        }
        let held = self.held_bytes();
        if held as u64 > self.memory_bytes {
            return Err(QueryError::Limit(format!(
                "the answer holds {held} bytes at the entry node, more than the query's memory \
                 limit of {}; aggregate, filter or LIMIT more",
                self.memory_bytes
            )));
        }
        Ok(())
    }

    fn held_bytes(&self) -> usize {
        match &self.state {
            MergeState::Groups { groups, accs } => {
                groups.held_bytes() + accs.iter().map(|a| a.held_bytes()).sum::<usize>()
            }
            MergeState::Rows { bytes, .. } => *bytes,
        }
    }

    /// The answer: HAVING, ORDER BY, OFFSET and LIMIT applied, its
    /// columns named as the SELECT list names them.
    pub fn finish(self) -> Result<RecordBatch> {
        let shape = &self.shape;
        let merged = match self.state {
            MergeState::Groups { groups, mut accs } => {
                let (mut fields, mut columns) = groups.key_fields()?;
                for (j, acc) in accs.iter_mut().enumerate() {
                    acc.resize(groups.len());
                    let a = acc.finish()?;
                    fields.push(Field::new(format!("#a{j}"), a.data_type().clone(), true));
                    columns.push(a);
                }
                let options =
                    arrow::array::RecordBatchOptions::new().with_row_count(Some(groups.len()));
                let b = RecordBatch::try_new_with_options(
                    Arc::new(Schema::new(fields)),
                    columns,
                    &options,
                )
                .map_err(|e| QueryError::compute("the groups", e))?;
                match &shape.having {
                    None => b,
                    Some(h) => {
                        let keep = h.eval_predicate(&b)?;
                        arrow::compute::filter_record_batch(&b, &keep)
                            .map_err(|e| QueryError::compute("HAVING", e))?
                    }
                }
            }
            MergeState::Rows { batches, .. } => {
                arrow::compute::concat_batches(&self.expected, &batches)
                    .map_err(|e| QueryError::compute("the rows", e))?
            }
        };
        let cut = sort_and_cut(&merged, &shape.order, shape.offset, shape.limit)?;
        let mut fields = Vec::new();
        let mut columns = Vec::new();
        for (e, name) in &shape.items {
            let a = e.eval_array(&cut)?;
            // Strings leave as plain UTF-8, what every reader takes.
            let a = match a.data_type() {
                DataType::Utf8View | DataType::LargeUtf8 => cast(&a, &DataType::Utf8)?,
                _ => a,
            };
            fields.push(Field::new(name, a.data_type().clone(), true));
            columns.push(a);
        }
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(cut.num_rows()));
        RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
            .map_err(|e| QueryError::compute("the answer", e))
    }
}

fn describe(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.data_type().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `batch` sorted by `order` (stable), then rows `offset..offset+limit`.
pub(crate) fn sort_and_cut(
    batch: &RecordBatch,
    order: &[(Expr, Order)],
    offset: u64,
    limit: Option<u64>,
) -> Result<RecordBatch> {
    let rows = batch.num_rows() as u64;
    let sorted = if order.is_empty() || rows < 2 {
        batch.clone()
    } else {
        let keys = order
            .iter()
            .map(|(e, o)| {
                Ok(SortColumn {
                    values: e.eval_array(batch)?,
                    options: Some(SortOptions {
                        descending: o.descending,
                        nulls_first: o.nulls_first,
                    }),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let indices =
            lexsort_to_indices(&keys, None).map_err(|e| QueryError::compute("ORDER BY", e))?;
        take_rows(batch, &indices)?
    };
    let start = offset.min(rows);
    let len = limit.map_or(rows - start, |l| l.min(rows - start));
    Ok(sorted.slice(start as usize, len as usize))
}

fn take_rows(batch: &RecordBatch, indices: &UInt32Array) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| arrow::compute::take(c.as_ref(), indices, None))
        .collect::<std::result::Result<Vec<ArrayRef>, _>>()
        .map_err(|e| QueryError::compute("ORDER BY", e))?;
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(indices.len()));
    RecordBatch::try_new_with_options(batch.schema(), columns, &options)
        .map_err(|e| QueryError::compute("ORDER BY", e))
}
