//! Chosen columns of a Parquet object: from its footer, the byte ranges
//! that hold those columns' pages ([`ColumnPlan::ranges`]), and a valid
//! Parquet file of only those columns made from the fetched bytes
//! ([`ColumnPlan::assemble`]): the pages as stored, a new footer whose
//! offsets point at them. Stored page by page (the `parquet` chunking),
//! the ranges are whole chunks, so a reader fetches nothing else.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use parquet::file::metadata::{
    ColumnChunkMetaData, FileMetaData, ParquetMetaData, ParquetMetaDataReader,
    ParquetMetaDataWriter, RowGroupMetaData,
};
use parquet::schema::types::{SchemaDescriptor, Type};

/// The footer's trailer: its length (4 bytes) and `PAR1`.
const TRAILER_BYTES: usize = 8;
const MAGIC: &[u8; 4] = b"PAR1";
/// Most filters one column read takes (each is checked against every row
/// group's statistics).
pub const MAX_COLUMN_FILTERS: usize = 64;
/// The key-value entry in which writers keep an Arrow schema of every
/// column; a file of fewer columns must not carry it.
const ARROW_SCHEMA_KEY: &str = "ARROW:schema";

/// Why chosen columns cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ColumnSelectError {
    /// No column was asked for.
    #[error("name at least one column")]
    NoColumns,
    /// The footer does not parse.
    #[error("the Parquet footer does not parse: {0}")]
    Footer(String),
    /// A name is not one of the file's top-level columns.
    #[error("no column {name:?}; the file has {available}")]
    NoSuchColumn {
        /// The name asked for.
        name: String,
        /// The file's top-level column names.
        available: String,
    },
    /// The footer places a column chunk outside the file's data.
    #[error("column {column} of row group {row_group} lies at bytes {range:?}, outside the file's data (0..{data_end})")]
    OutOfFile {
        /// The row group.
        row_group: usize,
        /// The leaf column's path.
        column: String,
        /// Where the footer says it is.
        range: Range<i64>,
        /// Where the footer starts.
        data_end: u64,
    },
    /// The fetched pieces do not match the ranges planned.
    #[error("fetched {got:?} bytes for ranges of {want:?}")]
    Fetched {
        /// Lengths fetched.
        got: Vec<usize>,
        /// Lengths planned.
        want: Vec<u64>,
    },
    /// A filter that cannot be applied.
    #[error("filter: {0}")]
    Filter(String),
    /// The new footer cannot be built or written.
    #[error("writing the footer of the chosen columns: {0}")]
    Write(String),
}

type Result<T> = std::result::Result<T, ColumnSelectError>;

/// A comparison of a column with a value, as pyarrow's `filters` write
/// it: a row group whose footer statistics prove no row can pass is not
/// read. Rows of the row groups read are not filtered here (the reader
/// filters them exactly).
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnFilter {
    /// A top-level column of a primitive type.
    pub column: String,
    /// The comparison.
    pub op: CompareOp,
    /// The value compared with.
    pub value: FilterValue,
}

/// How a [`ColumnFilter`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl std::str::FromStr for CompareOp {
    type Err = ColumnSelectError;
    fn from_str(text: &str) -> Result<CompareOp> {
        Ok(match text {
            "=" | "==" => CompareOp::Eq,
            "!=" => CompareOp::Ne,
            "<" => CompareOp::Lt,
            "<=" => CompareOp::Le,
            ">" => CompareOp::Gt,
            ">=" => CompareOp::Ge,
            other => {
                return Err(ColumnSelectError::Filter(format!(
                    "unknown comparison {other:?} (=, ==, !=, <, <=, >, >=)"
                )))
            }
        })
    }
}

/// The value of a [`ColumnFilter`].
#[derive(Debug, Clone, PartialEq)]
pub enum FilterValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string (compared with byte-array columns byte by byte).
    Str(String),
}

/// What to fetch for chosen columns, and how to make a file of them.
#[derive(Debug)]
pub struct ColumnPlan {
    metadata: ParquetMetaData,
    schema: Arc<SchemaDescriptor>,
    /// Leaf column indices chosen, in file order.
    leaves: Vec<usize>,
    /// Row groups read (not ruled out by the filters), in file order.
    kept: Vec<usize>,
    /// Per row group, per chosen leaf, the column chunk's bytes.
    ranges: Vec<Range<u64>>,
}

impl ColumnPlan {
    /// Plans the top-level columns `columns` of a Parquet file of
    /// `file_len` bytes whose last `footer.len()` bytes are `footer` (the
    /// file metadata, its length and `PAR1`).
    pub fn new(footer: &[u8], file_len: u64, columns: &[String]) -> Result<ColumnPlan> {
        ColumnPlan::filtered(footer, file_len, columns, &[])
    }

    /// [`ColumnPlan::new`], reading only the row groups whose statistics
    /// let every one of `filters` pass some row.
    pub fn filtered(
        footer: &[u8],
        file_len: u64,
        columns: &[String],
        filters: &[ColumnFilter],
    ) -> Result<ColumnPlan> {
        if columns.is_empty() {
            return Err(ColumnSelectError::NoColumns);
        }
        if filters.len() > MAX_COLUMN_FILTERS {
            return Err(ColumnSelectError::Filter(format!(
                "{} filters, at most {MAX_COLUMN_FILTERS} are taken",
                filters.len()
            )));
        }
        let metadata = decode_footer(footer)?;
        let data_end = file_len.saturating_sub(footer.len() as u64);
        let root = metadata.file_metadata().schema();
        let fields = root.get_fields();
        let mut chosen: Vec<Arc<Type>> = Vec::new();
        for name in columns {
            let Some(field) = fields.iter().find(|f| f.name() == name) else {
                let available: Vec<&str> = fields.iter().map(|f| f.name()).collect();
                return Err(ColumnSelectError::NoSuchColumn {
                    name: name.clone(),
                    available: available.join(", "),
                });
            };
            if !chosen.iter().any(|c| Arc::ptr_eq(c, field)) {
                chosen.push(Arc::clone(field));
            }
        }
        // File order, whatever order they were asked in.
        chosen.sort_by_key(|c| fields.iter().position(|f| Arc::ptr_eq(f, c)));
        let names: Vec<&str> = chosen.iter().map(|c| c.name()).collect();
        let descr = metadata.file_metadata().schema_descr();
        let leaves: Vec<usize> = (0..descr.num_columns())
            .filter(|&i| {
                let column = descr.column(i);
                let top = column.path().parts().first().cloned();
                top.is_some_and(|p| names.contains(&p.as_str()))
            })
            .collect();
        let pruned = Type::group_type_builder(root.name())
            .with_fields(chosen)
            .build()
            .map_err(|e| ColumnSelectError::Write(e.to_string()))?;
        let schema = Arc::new(SchemaDescriptor::new(Arc::new(pruned)));
        let filter_leaves = filters
            .iter()
            .map(|f| filter_leaf(descr, f))
            .collect::<Result<Vec<usize>>>()?;
        let mut ranges = Vec::new();
        let mut kept = Vec::new();
        for (g, rg) in metadata.row_groups().iter().enumerate() {
            let ruled_out = filters
                .iter()
                .zip(&filter_leaves)
                .any(|(f, &leaf)| rules_out(rg.column(leaf), f));
            if ruled_out {
                continue;
            }
            kept.push(g);
            for &leaf in &leaves {
                ranges.push(chunk_range(rg.column(leaf), g, data_end)?);
            }
        }
        Ok(ColumnPlan {
            metadata,
            schema,
            leaves,
            kept,
            ranges,
        })
    }

    /// The object's byte ranges to fetch, in order: per row group, the
    /// chosen columns' chunks.
    pub fn ranges(&self) -> &[Range<u64>] {
        &self.ranges
    }

    /// Row groups in the file.
    pub fn row_groups(&self) -> usize {
        self.metadata.num_row_groups()
    }

    /// Row groups read: those the filters did not rule out.
    pub fn row_groups_read(&self) -> usize {
        self.kept.len()
    }

    /// A Parquet file of the chosen columns from `fetched`, one piece per
    /// range of [`ColumnPlan::ranges`].
    pub fn assemble(&self, fetched: &[Bytes]) -> Result<Vec<u8>> {
        let lens: Vec<u64> = self.ranges.iter().map(|r| r.end - r.start).collect();
        if fetched.len() != lens.len()
            || fetched.iter().zip(&lens).any(|(f, &l)| f.len() as u64 != l)
        {
            return Err(ColumnSelectError::Fetched {
                got: fetched.iter().map(Bytes::len).collect(),
                want: lens,
            });
        }
        let write = |e: parquet::errors::ParquetError| ColumnSelectError::Write(e.to_string());
        let mut out = Vec::with_capacity(lens.iter().sum::<u64>() as usize + 4096);
        out.extend_from_slice(MAGIC);
        let mut pieces = fetched.iter().zip(&self.ranges);
        let mut row_groups = Vec::new();
        for (g, &index) in self.kept.iter().enumerate() {
            let rg = self.metadata.row_group(index);
            let mut columns = Vec::with_capacity(self.leaves.len());
            for &leaf in &self.leaves {
                let (bytes, range) = pieces
                    .next()
                    .ok_or_else(|| ColumnSelectError::Write("fewer pieces than chunks".into()))?;
                let delta = out.len() as i64 - range.start as i64;
                out.extend_from_slice(bytes);
                columns.push(moved(rg.column(leaf), delta).map_err(write)?);
            }
            let total_byte_size = columns
                .iter()
                .map(ColumnChunkMetaData::uncompressed_size)
                .sum();
            let first = columns
                .first()
                .map(|c| c.dictionary_page_offset().unwrap_or(c.data_page_offset()));
            let mut built = RowGroupMetaData::builder(Arc::clone(&self.schema))
                .set_num_rows(rg.num_rows())
                .set_total_byte_size(total_byte_size)
                .set_column_metadata(columns)
                .set_ordinal(i32::try_from(g).unwrap_or(i32::MAX));
            if let Some(offset) = first {
                built = built.set_file_offset(offset);
            }
            row_groups.push(built.build().map_err(write)?);
        }
        let file = self.metadata.file_metadata();
        let key_value = file.key_value_metadata().map(|kv| {
            kv.iter()
                .filter(|e| e.key != ARROW_SCHEMA_KEY)
                .cloned()
                .collect::<Vec<_>>()
        });
        let column_orders = file.column_orders().map(|orders| {
            self.leaves
                .iter()
                .filter_map(|&i| orders.get(i).copied())
                .collect()
        });
        let num_rows = row_groups.iter().map(RowGroupMetaData::num_rows).sum();
        let file_metadata = FileMetaData::new(
            file.version(),
            num_rows,
            file.created_by().map(str::to_string),
            key_value,
            Arc::clone(&self.schema),
            column_orders,
        );
        let metadata = ParquetMetaData::new(file_metadata, row_groups);
        ParquetMetaDataWriter::new(&mut out, &metadata)
            .with_preserve_page_index_locations(false)
            .finish()
            .map_err(write)?;
        Ok(out)
    }
}

/// The file metadata of a footer (metadata, length, `PAR1`).
fn decode_footer(footer: &[u8]) -> Result<ParquetMetaData> {
    let bad = |why: &str| ColumnSelectError::Footer(why.to_string());
    if footer.len() < TRAILER_BYTES || &footer[footer.len() - 4..] != MAGIC {
        return Err(bad("no PAR1 at the end"));
    }
    let len_at = footer.len() - TRAILER_BYTES;
    let mut len_bytes = [0u8; 4];
    len_bytes.copy_from_slice(&footer[len_at..len_at + 4]);
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len > len_at {
        return Err(bad("the metadata length runs past the footer"));
    }
    // The crate panics on some damaged metadata (negative offsets): a
    // decode that panics is a footer that does not parse.
    let metadata = &footer[len_at - len..len_at];
    std::panic::catch_unwind(|| ParquetMetaDataReader::decode_metadata(metadata))
        .map_err(|_| bad("the metadata decoder panicked"))?
        .map_err(|e| ColumnSelectError::Footer(e.to_string()))
}

/// Where a column chunk lies, checked to be inside the file's data.
fn chunk_range(c: &ColumnChunkMetaData, row_group: usize, data_end: u64) -> Result<Range<u64>> {
    let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
    let end = start.saturating_add(c.compressed_size());
    let inside = start >= MAGIC.len() as i64 && end >= start && end as u64 <= data_end;
    if !inside {
        return Err(ColumnSelectError::OutOfFile {
            row_group,
            column: c.column_path().string(),
            range: start..end,
            data_end,
        });
    }
    Ok(start as u64..end as u64)
}

/// A column chunk's metadata with its pages moved by `delta` bytes and no
/// page index or bloom filter (they are not copied).
fn moved(c: &ColumnChunkMetaData, delta: i64) -> parquet::errors::Result<ColumnChunkMetaData> {
    c.clone()
        .into_builder()
        .set_data_page_offset(c.data_page_offset() + delta)
        .set_dictionary_page_offset(c.dictionary_page_offset().map(|o| o + delta))
        .set_index_page_offset(c.index_page_offset().map(|o| o + delta))
        .set_offset_index_offset(None)
        .set_offset_index_length(None)
        .set_column_index_offset(None)
        .set_column_index_length(None)
        .set_bloom_filter_offset(None)
        .set_bloom_filter_length(None)
        .build()
}

/// The leaf of a filter's column: a top-level primitive column.
fn filter_leaf(descr: &SchemaDescriptor, f: &ColumnFilter) -> Result<usize> {
    (0..descr.num_columns())
        .find(|&i| descr.column(i).path().parts() == [f.column.clone()])
        .ok_or_else(|| {
            ColumnSelectError::Filter(format!(
                "no top-level primitive column {:?} to filter on",
                f.column
            ))
        })
}

/// Whether the chunk's statistics prove no row passes `f`.
fn rules_out(c: &ColumnChunkMetaData, f: &ColumnFilter) -> bool {
    use parquet::file::statistics::Statistics as S;
    use std::cmp::Ordering;
    let Some(stats) = c.statistics() else {
        return false;
    };
    // (min against value, max against value)
    let bounds: Option<(Ordering, Ordering)> = match (stats, &f.value) {
        (S::Int32(s), v) => num_bounds(
            s.min_opt().map(|&x| f64::from(x)),
            s.max_opt().map(|&x| f64::from(x)),
            v,
        ),
        (S::Int64(s), FilterValue::Int(v)) => match (s.min_opt(), s.max_opt()) {
            (Some(lo), Some(hi)) => Some((lo.cmp(v), hi.cmp(v))),
            _ => None,
        },
        (S::Int64(s), v) => num_bounds(
            s.min_opt().map(|&x| x as f64),
            s.max_opt().map(|&x| x as f64),
            v,
        ),
        (S::Float(s), v) => num_bounds(
            s.min_opt().map(|&x| f64::from(x)),
            s.max_opt().map(|&x| f64::from(x)),
            v,
        ),
        (S::Double(s), v) => num_bounds(s.min_opt().copied(), s.max_opt().copied(), v),
        (S::ByteArray(s), FilterValue::Str(v)) => match (s.min_opt(), s.max_opt()) {
            (Some(lo), Some(hi)) => {
                Some((lo.data().cmp(v.as_bytes()), hi.data().cmp(v.as_bytes())))
            }
            _ => None,
        },
        _ => None,
    };
    let Some((lo, hi)) = bounds else {
        return false;
    };
    match f.op {
        CompareOp::Eq => lo == Ordering::Greater || hi == Ordering::Less,
        CompareOp::Ne => false,
        CompareOp::Lt => lo != Ordering::Less,
        CompareOp::Le => lo == Ordering::Greater,
        CompareOp::Gt => hi != Ordering::Greater,
        CompareOp::Ge => hi == Ordering::Less,
    }
}

/// Min and max of a numeric column against a numeric value.
fn num_bounds(
    min: Option<f64>,
    max: Option<f64>,
    value: &FilterValue,
) -> Option<(std::cmp::Ordering, std::cmp::Ordering)> {
    let v = match value {
        FilterValue::Int(i) => *i as f64,
        FilterValue::Float(x) => *x,
        FilterValue::Str(_) => return None,
    };
    Some((min?.partial_cmp(&v)?, max?.partial_cmp(&v)?))
}
