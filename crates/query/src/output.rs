//! The answer written out: a text table, CSV, JSON lines, Parquet or an
//! Arrow IPC stream.

use arrow::array::RecordBatch;

use crate::error::{QueryError, Result};

/// How an answer is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A text table for people.
    Table,
    /// CSV with a header line; NULL is an empty field.
    Csv,
    /// One JSON object per row (JSON lines).
    Json,
    /// A Parquet file.
    Parquet,
    /// An Arrow IPC stream (what pyarrow.ipc.open_stream reads).
    Arrow,
}

impl std::str::FromStr for Format {
    type Err = QueryError;
    fn from_str(text: &str) -> Result<Format> {
        Ok(match text {
            "table" => Format::Table,
            "csv" => Format::Csv,
            "json" => Format::Json,
            "parquet" => Format::Parquet,
            "arrow" => Format::Arrow,
            other => {
                return Err(QueryError::Invalid(format!(
                    "unknown output format {other:?} (table, csv, json, parquet, arrow)"
                )))
            }
        })
    }
}

impl Format {
    /// Whether the output is bytes for a program rather than text.
    pub fn is_binary(self) -> bool {
        matches!(self, Format::Parquet | Format::Arrow)
    }
}

/// `batch` written in `format`.
pub fn write(batch: &RecordBatch, format: Format) -> Result<Vec<u8>> {
    let fail = |e: &dyn std::fmt::Display| QueryError::compute(format!("the {format:?} output"), e);
    let mut out = Vec::new();
    match format {
        Format::Table => {
            let text = arrow::util::pretty::pretty_format_batches(std::slice::from_ref(batch))
                .map_err(|e| fail(&e))?;
            out.extend_from_slice(text.to_string().as_bytes());
            out.push(b'\n');
        }
        Format::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            w.write(batch).map_err(|e| fail(&e))?;
        }
        Format::Json => {
            let mut w = arrow::json::LineDelimitedWriter::new(&mut out);
            w.write(batch).map_err(|e| fail(&e))?;
            w.finish().map_err(|e| fail(&e))?;
        }
        Format::Parquet => {
            let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None)
                .map_err(|e| fail(&e))?;
            w.write(batch).map_err(|e| fail(&e))?;
            w.close().map_err(|e| fail(&e))?;
        }
        Format::Arrow => out = crate::merge::encode(batch)?,
    }
    Ok(out)
}
