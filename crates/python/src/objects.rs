//! Buckets and objects: what `quarry mb/rb/put/get/ls/rm/stat/df` do, as
//! functions the Python methods call inside [`crate::runtime::wait`].

use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use quarry_client::{BucketName, Chunking, Condition, Manifest, ObjectKey, Objects};
use serde_json::Value;

use crate::errors::Failure;

/// Most bytes one `get` returns as a Python `bytes`: an object larger than
/// this goes to a file (`get_to_file`), not into memory.
pub const MAX_GET_BYTES: u64 = 4 << 30;

/// Objects `ls` returns unless told (the CLI's `--limit` default).
pub const DEFAULT_LIST_LIMIT: usize = 10_000;
/// Most objects one `ls` returns; more are listed page by page
/// (`start_after`).
pub const MAX_LIST_LIMIT: usize = 1_000_000;

/// What `stat` says about an object (its manifest, without the chunk
/// list).
///
/// >>> info = client.stat("logs", "a.txt")
/// >>> info.size, info.version
/// (12, 1)
#[pyclass(frozen, get_all, skip_from_py_object, module = "quarry._quarry")]
#[derive(Clone, Debug)]
pub struct ObjectInfo {
    /// The bucket.
    pub bucket: String,
    /// The key.
    pub key: String,
    /// The object's version (1 for the first put of the key, then up).
    pub version: u64,
    /// Its size in bytes.
    pub size: u64,
    /// When this version was stored, in milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// How it is cut into chunks, as `quarry stat` says it.
    pub chunking: String,
    /// How many chunks it has.
    pub chunk_count: usize,
}

#[pymethods]
impl ObjectInfo {
    fn __repr__(&self) -> String {
        format!(
            "ObjectInfo(bucket={:?}, key={:?}, version={}, size={}, created_unix_ms={}, chunking={:?}, chunk_count={})",
            self.bucket, self.key, self.version, self.size, self.created_unix_ms, self.chunking, self.chunk_count
        )
    }

    fn __eq__(&self, other: &ObjectInfo) -> bool {
        (&self.bucket, &self.key, self.version, self.size)
            == (&other.bucket, &other.key, other.version, other.size)
            && self.created_unix_ms == other.created_unix_ms
    }
}

impl From<&Manifest> for ObjectInfo {
    fn from(m: &Manifest) -> ObjectInfo {
        ObjectInfo {
            bucket: m.bucket().to_string(),
            key: m.key().to_string(),
            version: m.version(),
            size: m.size(),
            created_unix_ms: m.created_unix_ms(),
            chunking: quarry_jobs::describe_chunking(&m.chunking()),
            chunk_count: m.chunks().len(),
        }
    }
}

/// Checks a bucket name and a key.
pub fn names(bucket: &str, key: &str) -> Result<(BucketName, ObjectKey), Failure> {
    Ok((BucketName::new(bucket)?, ObjectKey::new(key)?))
}

/// A put's condition from `if_absent` and `if_version`.
pub fn condition(if_absent: bool, if_version: Option<u64>) -> Result<Condition, Failure> {
    match (if_absent, if_version) {
        (true, Some(_)) => Err(Failure::invalid(
            "if_absent and if_version exclude each other",
        )),
        (true, None) => Ok(Condition::IfAbsent),
        (false, Some(v)) => Ok(Condition::IfVersion(v)),
        (false, None) => Ok(Condition::Always),
    }
}

/// The chunking `quarry mb --chunking` takes (`fixed`, `fixed:SIZE`,
/// `fastcdc[:MIN,AVG,MAX]`, `parquet[:...]`, `auto[:...]`;
/// `quarry_jobs::parse_chunking`); `chunk_size` sets a fixed size.
pub fn parse_chunking(text: &str, chunk_size: Option<u64>) -> Result<Chunking, Failure> {
    match chunk_size {
        None => Ok(quarry_jobs::parse_chunking(text)?),
        Some(bytes) if text == "fixed" => {
            let size = u32::try_from(bytes)
                .map_err(|_| Failure::invalid(format!("chunk_size {bytes}: too large")))?;
            Ok(Chunking::fixed(size)?)
        }
        Some(_) => Err(Failure::invalid(format!(
            "chunk_size goes with chunking=\"fixed\" alone, not with {text:?}"
        ))),
    }
}

/// The buckets as `quarry ls --json` lists them.
pub async fn buckets(store: &Objects) -> Result<Value, Failure> {
    Ok(quarry_jobs::buckets_json(&store.buckets().await?))
}

/// Usage as `quarry df --json` prints it.
pub async fn df(store: &Objects) -> Result<Value, Failure> {
    Ok(quarry_jobs::usage_json(&store.usage().await?))
}

/// `(offset, length)` of the half-open byte range `[start, end)` of an
/// object of `size` bytes (`end` past the object stops at its end; no
/// range: the whole object). A range must start inside a non-empty
/// object, as an HTTP range must.
pub fn byte_span(
    range: Option<(u64, u64)>,
    size: u64,
    bucket: &BucketName,
    key: &ObjectKey,
) -> Result<(u64, u64), Failure> {
    let Some((start, end)) = range else {
        return Ok((0, size));
    };
    if end < start {
        return Err(Failure::invalid(format!(
            "range ({start}, {end}): end {end} is before start {start}"
        )));
    }
    if start > size || (start == size && size > 0) {
        return Err(Failure::invalid(format!(
            "--range starts at byte {start}, past the end of {bucket}/{key} ({size} bytes)"
        )));
    }
    Ok((start, end.min(size) - start))
}

/// Reads `[offset, offset + len)` of an object into memory (at most
/// [`MAX_GET_BYTES`]).
pub async fn get(
    store: &Objects,
    bucket: &BucketName,
    key: &ObjectKey,
    range: Option<(u64, u64)>,
) -> Result<bytes::Bytes, Failure> {
    let head = store.head(bucket, key).await?;
    let (offset, len) = byte_span(range, head.size(), bucket, key)?;
    if len > MAX_GET_BYTES {
        return Err(Failure::invalid(format!(
            "{bucket}/{key}: {len} bytes asked for, more than get returns in memory \
             ({MAX_GET_BYTES}); use get_to_file"
        )));
    }
    let (_, data) = store.get_range(bucket, key, offset, len).await?;
    Ok(data)
}

/// Writes an object to `path` as `quarry get BUCKET/KEY PATH` does: to a
/// temporary file beside it, renamed over `path` once whole, so a failed
/// get leaves no half-written file under the name.
pub async fn get_to_file(
    store: &Objects,
    bucket: &BucketName,
    key: &ObjectKey,
    path: &Path,
) -> Result<Manifest, Failure> {
    use tokio::io::AsyncWriteExt;
    if path.is_dir() {
        return Err(Failure::invalid(format!(
            "{} is a directory",
            path.display()
        )));
    }
    let tmp = temporary_beside(path);
    let io = |what: &str, p: &Path, e: std::io::Error| {
        Failure::new(
            crate::errors::Kind::Other,
            format!("{what} {}: {e}", p.display()),
        )
    };
    let file = tokio::fs::File::create(&tmp)
        .await
        .map_err(|e| io("cannot create", &tmp, e))?;
    let mut out = tokio::io::BufWriter::with_capacity(1 << 20, file);
    let got = store.get_to(bucket, key, 0, u64::MAX, &mut out).await;
    let finished = match got {
        Ok(m) => match out.flush().await {
            Ok(()) => Ok(m),
            Err(e) => Err(io("cannot write", &tmp, e)),
        },
        Err(e) => Err(e.into()),
    };
    let renamed = finished.and_then(|m| {
        std::fs::rename(&tmp, path)
            .map(|()| m)
            .map_err(|e| io(&format!("cannot rename {} to", tmp.display()), path, e))
    });
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

fn temporary_beside(path: &Path) -> PathBuf {
    path.with_file_name(format!(
        ".{}.quarry-get-{}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into()),
        std::process::id()
    ))
}

/// Most ranges one `get_ranges` call takes.
pub const MAX_BATCH_RANGES: usize = 65_536;
/// Objects headed, and ranges fetched, at once by `get_ranges`.
const BATCH_IN_FLIGHT: usize = 16;

/// One range of a batch: bucket, key, and the half-open `[start, end)`.
pub type RangeRequest = (BucketName, ObjectKey, u64, u64);

/// Reads many half-open byte ranges, of one object or many, in one call:
/// each object's manifest is read once, then every range's chunks are
/// fetched with up to [`BATCH_IN_FLIGHT`] ranges in flight. A range is
/// cut at its object's end (past it: empty), as a Python slice is. At most
/// [`MAX_GET_BYTES`] in all.
pub async fn get_ranges(
    store: &Objects,
    requests: Vec<RangeRequest>,
) -> Result<Vec<bytes::Bytes>, Failure> {
    use futures::{StreamExt, TryStreamExt};
    use std::collections::HashMap;
    if requests.len() > MAX_BATCH_RANGES {
        return Err(Failure::invalid(format!(
            "{} ranges in one call, more than {MAX_BATCH_RANGES}",
            requests.len()
        )));
    }
    // Owned names and indices into `heads`: the futures take no borrowed
    // arguments, which a `Send` future over a stream cannot name.
    let mut distinct: Vec<(BucketName, ObjectKey)> = requests
        .iter()
        .map(|(b, k, _, _)| (b.clone(), k.clone()))
        .collect();
    distinct
        .sort_unstable_by(|a, b| (a.0.as_str(), a.1.as_str()).cmp(&(b.0.as_str(), b.1.as_str())));
    distinct.dedup_by(|a, b| a.0.as_str() == b.0.as_str() && a.1.as_str() == b.1.as_str());
    let heads: Vec<Manifest> = futures::stream::iter(distinct.clone())
        .map(|(b, k)| async move { Ok::<_, Failure>(store.head(&b, &k).await?) })
        .buffered(BATCH_IN_FLIGHT)
        .try_collect()
        .await?;
    let index: HashMap<(&str, &str), usize> = distinct
        .iter()
        .enumerate()
        .map(|(i, (b, k))| ((b.as_str(), k.as_str()), i))
        .collect();
    let mut total = 0u64;
    let mut spans = Vec::with_capacity(requests.len());
    for (b, k, start, end) in &requests {
        let at = index[&(b.as_str(), k.as_str())];
        let size = heads[at].size();
        let (start, end) = ((*start).min(size), (*end).min(size));
        let len = end.saturating_sub(start);
        total = total.saturating_add(len);
        spans.push((at, start, len));
    }
    if total > MAX_GET_BYTES {
        return Err(Failure::invalid(format!(
            "{total} bytes asked for in one call, more than it returns in memory ({MAX_GET_BYTES})"
        )));
    }
    let heads = &heads;
    futures::stream::iter(spans)
        .map(|(at, start, len)| async move {
            let mut out = Vec::with_capacity(len as usize);
            let mut pieces = store.stream_manifest(&heads[at], start, len)?;
            while let Some(piece) = pieces.next().await {
                out.extend_from_slice(&piece?);
            }
            Ok::<_, Failure>(bytes::Bytes::from(out))
        })
        .buffered(BATCH_IN_FLIGHT)
        .try_collect()
        .await
}

/// A pyarrow-style filter `(column, op, value)`; the value an `int`, a
/// `float` or a `str`.
pub fn column_filter(
    column: &str,
    op: &str,
    value: &pyo3::Bound<'_, pyo3::PyAny>,
) -> Result<quarry_client::ColumnFilter, Failure> {
    use pyo3::types::{PyAnyMethods, PyBool, PyFloat, PyInt, PyString};
    let op = op
        .parse::<quarry_client::CompareOp>()
        .map_err(|e| Failure::invalid(e.to_string()))?;
    let value = if value.is_instance_of::<PyBool>() {
        return Err(Failure::invalid(format!(
            "filter on {column:?}: booleans are not compared by statistics"
        )));
    } else if value.is_instance_of::<PyInt>() {
        quarry_client::FilterValue::Int(
            value
                .extract::<i64>()
                .map_err(|e| Failure::invalid(format!("filter on {column:?}: {e}")))?,
        )
    } else if value.is_instance_of::<PyFloat>() {
        quarry_client::FilterValue::Float(
            value
                .extract::<f64>()
                .map_err(|e| Failure::invalid(format!("filter on {column:?}: {e}")))?,
        )
    } else if value.is_instance_of::<PyString>() {
        quarry_client::FilterValue::Str(
            value
                .extract::<String>()
                .map_err(|e| Failure::invalid(format!("filter on {column:?}: {e}")))?,
        )
    } else {
        return Err(Failure::invalid(format!(
            "filter on {column:?}: the value must be an int, a float or a str"
        )));
    };
    Ok(quarry_client::ColumnFilter {
        column: column.to_string(),
        op,
        value,
    })
}
