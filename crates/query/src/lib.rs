//! `quarry-query` — SQL near the data (layer 6, beside the kernels).
//!
//! This crate owns the query half of Multes++'s offload: a SQL subset
//! ([`Query::parse`], with `sqlparser`), bound to one Parquet file's footer
//! ([`Query::bind`] gives a [`FilePlan`]: the column chunks to read, the row
//! groups the statistics leave), evaluated over any set of row groups into
//! a partial result ([`FilePlan::evaluate`]: filter, then partial
//! aggregates or rows, with arrow's compute kernels), and the partials of
//! every row group of every file merged into the answer ([`Merger`]),
//! which [`write`] turns into a table, CSV, JSON, Parquet or Arrow IPC. It
//! knows nothing of nodes or chunks: the engine in `quarry-kernels` decides
//! where each row group is evaluated and moves the bytes.
//!
//! ```
//! use std::sync::Arc;
//! use arrow::array::{Int64Array, RecordBatch, StringArray};
//! use arrow::datatypes::{DataType, Field, Schema};
//! use quarry_query::{write, Format, Merger, Query};
//!
//! // A Parquet file of two row groups.
//! let schema = Arc::new(Schema::new(vec![
//!     Field::new("city", DataType::Utf8, false),
//!     Field::new("n", DataType::Int64, false),
//! ]));
//! let rows = RecordBatch::try_new(schema.clone(), vec![
//!     Arc::new(StringArray::from(vec!["a", "b", "a", "c"])),
//!     Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
//! ])?;
//! let mut file = Vec::new();
//! let props = parquet::file::properties::WriterProperties::builder()
//!     .set_max_row_group_row_count(Some(2)).build();
//! let mut w = parquet::arrow::ArrowWriter::try_new(&mut file, schema, Some(props))?;
//! w.write(&rows)?;
//! w.close()?;
//!
//! let query = Query::parse("SELECT city, sum(n) AS total FROM 'b/f.parquet' \
//!                           WHERE n > 1 GROUP BY city ORDER BY total DESC")?;
//! assert_eq!(query.source(), "b/f.parquet");
//! let footer_len = 8 + u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into()?) as usize;
//! let plan = query.bind("b/f.parquet", &file[file.len() - footer_len..], file.len() as u64)?;
//! let mut merger = Merger::new(&plan, 1 << 20)?;
//! // Each row group evaluated on its own (as two nodes would), then merged.
//! for g in plan.row_groups()? {
//!     let data = plan.ranges(g)?.into_iter()
//!         .map(|r| (r.start, bytes::Bytes::copy_from_slice(&file[r.start as usize..r.end as usize])))
//!         .collect();
//!     merger.add(&plan.evaluate(&[g], data, 1 << 20)?, "b/f.parquet")?;
//! }
//! let answer = merger.finish()?;
//! let csv = String::from_utf8(write(&answer, Format::Csv)?)?;
//! assert_eq!(csv, "city,total\nc,4\na,3\nb,2\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod agg;
mod error;
mod expr;
mod filter;
mod merge;
mod output;
mod plan;
mod sql;

pub use agg::MAX_GROUPS;
pub use error::{QueryError, Result};
pub use expr::MAX_EXPR_DEPTH;
pub use merge::{decode_ipc, Merger, MAX_PARTIAL_BYTES};
pub use output::{write, Format};
pub use plan::{FilePlan, Query};
pub use sql::{MAX_ITEMS, MAX_SQL_BYTES};
