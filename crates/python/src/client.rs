//! `quarry.connect()` and the `Client` class: every method checks its
//! arguments with the GIL held, then waits on the cluster without it.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString, PyTuple};
use quarry_client::{BucketName, ClusterFile, Compute, Condition, ObjectKey, Objects};

use crate::compute;
use crate::convert::to_python;
use crate::errors::Failure;
use crate::kv::{self, KvTable};
use crate::objects::{self, ObjectInfo, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};
use crate::runtime::wait;
use quarry_jobs::GrepOptions;

/// Connects to a cluster as the CLI does: through `address` (`host:port`
/// of one node) when given, else through the cluster file `cluster`, else
/// `$QUARRY_CLUSTER`, else `./.quarry/cluster.toml`.
///
/// >>> import quarry
/// >>> client = quarry.connect(cluster=".quarry/cluster.toml")
/// >>> client.buckets()
/// []
#[pyfunction]
#[pyo3(signature = (address=None, cluster=None))]
pub fn connect(
    py: Python<'_>,
    address: Option<String>,
    cluster: Option<PathBuf>,
) -> PyResult<Client> {
    if address.is_some() && cluster.is_some() {
        return Err(Failure::invalid("give an address or a cluster file, not both").into());
    }
    let connected = wait(py, async move {
        let client = match address {
            Some(addr) => quarry_client::Client::connect(&addr).await?,
            None => {
                let path = ClusterFile::locate(cluster.as_deref());
                let file = ClusterFile::load(&path)?;
                quarry_client::Client::connect_cluster(&file).await?
            }
        };
        let objects = client.objects().await?;
        Ok((client, objects))
    })?;
    let (client, objects) = connected;
    Ok(Client {
        compute: client.compute(),
        objects: Arc::new(objects),
        client,
    })
}

/// A connection to a Quarry cluster (from `quarry.connect`). Safe to share
/// between threads; calls from several threads run at once.
#[pyclass(frozen, module = "quarry._quarry")]
pub struct Client {
    client: quarry_client::Client,
    objects: Arc<Objects>,
    compute: Compute,
}

/// What `put` stores, sorted out with the GIL held.
enum PutSource<'py> {
    Bytes(&'py [u8]),
    Owned(Vec<u8>),
    Path(PathBuf),
    Stream(Bound<'py, PyAny>),
}

fn put_source<'py>(data: &'py Bound<'py, PyAny>) -> PyResult<PutSource<'py>> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(PutSource::Bytes(b.as_bytes()));
    }
    if let Ok(b) = data.cast::<PyByteArray>() {
        return Ok(PutSource::Owned(b.to_vec()));
    }
    if data.cast::<PyString>().is_ok() || data.hasattr("__fspath__")? {
        return Ok(PutSource::Path(data.extract::<PathBuf>()?));
    }
    if data.hasattr("read")? {
        return Ok(PutSource::Stream(data.clone()));
    }
    if let Ok(view) = data.call_method0("__bytes__") {
        return Ok(PutSource::Owned(view.extract::<Vec<u8>>()?));
    }
    let type_name = data.get_type().name()?;
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "put takes bytes, a path or a binary file-like object, not {type_name}"
    )))
}

/// Patterns: one string or a list of them.
fn patterns(pattern: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(one) = pattern.extract::<String>() {
        return Ok(vec![one]);
    }
    pattern.extract::<Vec<String>>()
}

fn strings(args: &Bound<'_, PyTuple>) -> PyResult<Vec<String>> {
    args.iter().map(|a| a.extract::<String>()).collect()
}

#[pymethods]
impl Client {
    fn __repr__(&self) -> String {
        format!("<quarry.Client via {}>", self.client.entry_addr())
    }

    /// The address of the node this client entered the cluster through.
    ///
    /// >>> client.entry_addr
    /// '127.0.0.1:7400'
    #[getter]
    fn entry_addr(&self) -> String {
        self.client.entry_addr().to_string()
    }

    /// One tenant's key-value tables: the `default` tenant of a cluster
    /// with no tenants configured, or `tenant` with its `secret` (checked
    /// by the nodes at the first call; a wrong one raises `Denied`). The
    /// same tables every node's memcached port serves.
    ///
    /// >>> table = client.kv()
    /// >>> table.set("user:1", b"ada")
    /// 1
    /// >>> table.get("user:1")
    /// b'ada'
    #[pyo3(signature = (tenant="default", secret=""))]
    fn kv(&self, py: Python<'_>, tenant: &str, secret: &str) -> PyResult<KvTable> {
        kv::tables(py, &self.client, tenant, secret)
    }

    /// Makes a bucket (`quarry mb`). `chunking` is `"fixed"`,
    /// `"fixed:SIZE"`, `"fastcdc"` or `"fastcdc:MIN,AVG,MAX"` (sizes with
    /// K, M, G suffixes); `chunk_size` (bytes) sets the fixed size.
    ///
    /// >>> client.make_bucket("logs", chunking="fastcdc")
    /// >>> client.make_bucket("raw", chunk_size=64 * 1024)
    #[pyo3(signature = (name, chunking="fixed", chunk_size=None))]
    fn make_bucket(
        &self,
        py: Python<'_>,
        name: &str,
        chunking: &str,
        chunk_size: Option<u64>,
    ) -> PyResult<()> {
        let bucket = BucketName::new(name).map_err(Failure::from)?;
        let chunking = objects::parse_chunking(chunking, chunk_size)?;
        let store = &self.objects;
        wait(py, async move {
            store.create_bucket(&bucket, chunking).await?;
            Ok(())
        })?;
        Ok(())
    }

    /// The buckets (`quarry ls --json`): a list of dicts with `bucket`,
    /// `chunking` and `created_unix_ms`.
    ///
    /// >>> [b["bucket"] for b in client.buckets()]
    /// ['logs', 'raw']
    fn buckets(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = wait(py, objects::buckets(&self.objects))?;
        to_python(py, &value)
    }

    /// Removes an empty bucket (`quarry rb`).
    ///
    /// >>> client.remove_bucket("raw")
    fn remove_bucket(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let bucket = BucketName::new(name).map_err(Failure::from)?;
        let store = &self.objects;
        wait(py, async move { Ok(store.delete_bucket(&bucket).await?) })?;
        Ok(())
    }

    /// Stores `data` as `bucket/key` (`quarry put`) and returns its
    /// `ObjectInfo`. `data` is `bytes`/`bytearray`, a path (`str` or
    /// `os.PathLike`: the file is read), or a binary file-like object (read
    /// in 1 MiB pieces, never whole). `if_absent`: only if no object has the
    /// key; `if_version`: only if the current version is this one.
    ///
    /// >>> client.put("logs", "a.txt", b"hello\nworld\n").size
    /// 12
    /// >>> with open("big.bin", "rb") as f:
    /// ...     info = client.put("logs", "big.bin", f)
    #[pyo3(signature = (bucket, key, data, *, if_absent=false, if_version=None))]
    fn put(
        &self,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        data: &Bound<'_, PyAny>,
        if_absent: bool,
        if_version: Option<u64>,
    ) -> PyResult<ObjectInfo> {
        let (bucket, key) = objects::names(bucket, key)?;
        let condition: Condition = objects::condition(if_absent, if_version)?;
        let store = &self.objects;
        let manifest = match put_source(data)? {
            PutSource::Bytes(bytes) => wait(py, async move {
                Ok(store.put_bytes(&bucket, &key, bytes, condition).await?)
            })?,
            PutSource::Owned(bytes) => wait(py, async move {
                Ok(store.put_bytes(&bucket, &key, &bytes, condition).await?)
            })?,
            PutSource::Path(path) => wait(py, async move {
                let file = std::fs::File::open(&path).map_err(|e| {
                    let kind = match e.kind() {
                        std::io::ErrorKind::NotFound => crate::errors::Kind::NotFound,
                        _ => crate::errors::Kind::Other,
                    };
                    Failure::new(kind, format!("cannot open {}: {e}", path.display()))
                })?;
                let source = quarry_client::file_source(file);
                Ok(store.put(&bucket, &key, source, condition).await?)
            })?,
            PutSource::Stream(stream) => {
                crate::put_stream::put_file_like(py, store, bucket, key, &stream, condition)?
            }
        };
        Ok(ObjectInfo::from(&manifest))
    }

    /// The bytes of `bucket/key` (`quarry get`), or of the half-open range
    /// `[start, end)` of it (`end` past the object stops at its end).
    ///
    /// >>> client.get("logs", "a.txt")
    /// b'hello\nworld\n'
    /// >>> client.get("logs", "a.txt", range=(6, 11))
    /// b'world'
    #[pyo3(signature = (bucket, key, range=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        bucket: &str,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (bucket, key) = objects::names(bucket, key)?;
        let store = &self.objects;
        let data = wait(py, async move {
            objects::get(store, &bucket, &key, range).await
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// Many half-open byte ranges in one call, as a list of `bytes` in the
    /// order asked: each object's manifest is read once and the ranges are
    /// fetched concurrently (fsspec's `cat_ranges` is this call). A range
    /// is cut at its object's end, as a slice is.
    ///
    /// >>> client.get_ranges([("logs", "a.txt", 0, 5), ("logs", "a.txt", 6, 11)])
    /// [b'hello', b'world']
    fn get_ranges<'py>(
        &self,
        py: Python<'py>,
        ranges: Vec<(String, String, u64, u64)>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let requests = ranges
            .iter()
            .map(|(b, k, start, end)| {
                let (bucket, key) = objects::names(b, k)?;
                if end < start {
                    return Err(Failure::invalid(format!(
                        "range ({start}, {end}) of {b}/{k}: end {end} is before start {start}"
                    )));
                }
                Ok((bucket, key, *start, *end))
            })
            .collect::<Result<Vec<_>, Failure>>()?;
        let store = &self.objects;
        let got = wait(py, objects::get_ranges(store, requests))?;
        Ok(got.iter().map(|b| PyBytes::new(py, b)).collect())
    }

    /// The top-level `columns` of a Parquet object stored page by page
    /// (`quarry get --columns`): a Parquet file of only them, as `bytes`,
    /// read from their pages and the footer, skipping the row groups whose
    /// statistics rule out every row for one of `filters` (`(column, op,
    /// value)` with op one of `=`, `==`, `!=`, `<`, `<=`, `>`, `>=`; rows of
    /// the row groups read are not filtered); and the bytes and row groups
    /// read.
    ///
    /// >>> data, read, groups = client.get_columns("flights", "2013.parquet", ["carrier"])
    /// >>> read < client.stat("flights", "2013.parquet").size
    /// True
    #[pyo3(signature = (bucket, key, columns, filters=Vec::new()))]
    fn get_columns<'py>(
        &self,
        py: Python<'py>,
        bucket: &str,
        key: &str,
        columns: Vec<String>,
        filters: Vec<(String, String, Bound<'py, PyAny>)>,
    ) -> PyResult<(Bound<'py, PyBytes>, u64, usize)> {
        let (bucket, key) = objects::names(bucket, key)?;
        let filters = filters
            .iter()
            .map(|(column, op, value)| objects::column_filter(column, op, value))
            .collect::<Result<Vec<_>, Failure>>()?;
        let store = &self.objects;
        let read = wait(py, async {
            store
                .get_columns(&bucket, &key, &columns, &filters)
                .await
                .map_err(Failure::from)
        })?;
        Ok((
            PyBytes::new(py, &read.file),
            read.bytes_read,
            read.row_groups_read,
        ))
    }

    /// Writes `bucket/key` to the file `path` (`quarry get BUCKET/KEY
    /// PATH`): streamed, and renamed into place only once whole.
    ///
    /// >>> client.get_to_file("logs", "big.bin", "/tmp/big.bin").size
    /// 4194304
    fn get_to_file(
        &self,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        path: PathBuf,
    ) -> PyResult<ObjectInfo> {
        let (bucket, key) = objects::names(bucket, key)?;
        let store = &self.objects;
        let manifest = wait(py, async move {
            objects::get_to_file(store, &bucket, &key, &path).await
        })?;
        Ok(ObjectInfo::from(&manifest))
    }

    /// What `quarry stat` says about `bucket/key`.
    ///
    /// >>> info = client.stat("logs", "a.txt")
    /// >>> (info.size, info.version, info.chunk_count)
    /// (12, 1, 1)
    fn stat(&self, py: Python<'_>, bucket: &str, key: &str) -> PyResult<ObjectInfo> {
        let (bucket, key) = objects::names(bucket, key)?;
        let store = &self.objects;
        let manifest = wait(py, async move { Ok(store.head(&bucket, &key).await?) })?;
        Ok(ObjectInfo::from(&manifest))
    }

    /// The objects of `bucket` whose keys start with `prefix`, in key
    /// order, at most `limit` of them (`quarry ls BUCKET/PREFIX`); from
    /// after the key `start_after` on, for the next page.
    ///
    /// >>> [o.key for o in client.ls("logs", prefix="a")]
    /// ['a.txt']
    #[pyo3(signature = (bucket, prefix="", limit=DEFAULT_LIST_LIMIT, start_after=None))]
    fn ls(
        &self,
        py: Python<'_>,
        bucket: &str,
        prefix: &str,
        limit: usize,
        start_after: Option<&str>,
    ) -> PyResult<Vec<ObjectInfo>> {
        if limit > MAX_LIST_LIMIT {
            return Err(Failure::invalid(format!(
                "limit {limit} is more than one listing returns ({MAX_LIST_LIMIT}); \
                 list page by page with start_after"
            ))
            .into());
        }
        let bucket = BucketName::new(bucket).map_err(Failure::from)?;
        let after = start_after
            .map(ObjectKey::new)
            .transpose()
            .map_err(Failure::from)?;
        let store = &self.objects;
        let list = wait(py, async move {
            Ok(store.list(&bucket, prefix, after.as_ref(), limit).await?)
        })?;
        Ok(list.iter().map(ObjectInfo::from).collect())
    }

    /// Deletes `bucket/key` (`quarry rm`); returns what was deleted.
    /// `if_version`: only if the current version is still this one.
    ///
    /// >>> client.rm("logs", "a.txt").version
    /// 1
    #[pyo3(signature = (bucket, key, *, if_version=None))]
    fn rm(
        &self,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        if_version: Option<u64>,
    ) -> PyResult<ObjectInfo> {
        let (bucket, key) = objects::names(bucket, key)?;
        let condition = if_version.map_or(Condition::Always, Condition::IfVersion);
        let store = &self.objects;
        let manifest = wait(py, async move {
            Ok(store.delete(&bucket, &key, condition).await?)
        })?;
        Ok(ObjectInfo::from(&manifest))
    }

    /// Logical and stored bytes and the dedup ratio per bucket and for the
    /// cluster (`quarry df --json`).
    ///
    /// >>> client.df()["cluster"]["logical_bytes"]
    /// 4194316
    fn df(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = wait(py, objects::df(&self.objects))?;
        to_python(py, &value)
    }

    /// Searches objects near the data as `quarry grep --json` does and
    /// returns its answer (a dict: `results`, one per target, with
    /// `matching_lines` and `lines`; `bytes_scanned`, ...). `pattern` is a
    /// string or a list of them; targets are `BUCKET/KEY`,
    /// `BUCKET/PREFIX*`, `BUCKET/`, `volume:NAME[@OFFSET[+LEN]]` or
    /// `linear:FIRST+PAGES`. The switches are GNU grep's: `fixed` (-F),
    /// `extended` (-E), `ignore_case` (-i), `invert` (-v), `word` (-w),
    /// `line` (-x), `count` (-c), `only_matching` (-o), `max_count` (-m),
    /// `before_context` (-B), `after_context` (-A).
    ///
    /// >>> client.grep("world", "logs/a.txt")["results"][0]["output"]["matching_lines"]
    /// 1
    #[pyo3(signature = (
        pattern, *targets, fixed=false, extended=false, ignore_case=false, invert=false,
        word=false, line=false, count=false, only_matching=false, max_count=None,
        before_context=0, after_context=0, time_limit_ms=None, memory_limit_bytes=None,
        result_limit_bytes=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn grep(
        &self,
        py: Python<'_>,
        pattern: &Bound<'_, PyAny>,
        targets: &Bound<'_, PyTuple>,
        fixed: bool,
        extended: bool,
        ignore_case: bool,
        invert: bool,
        word: bool,
        line: bool,
        count: bool,
        only_matching: bool,
        max_count: Option<u64>,
        before_context: u64,
        after_context: u64,
        time_limit_ms: Option<u64>,
        memory_limit_bytes: Option<u64>,
        result_limit_bytes: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let options = GrepOptions {
            patterns: patterns(pattern)?,
            fixed,
            extended,
            ignore_case,
            invert,
            word,
            whole_line: line,
            count,
            list: None,
            only_matching,
            max_count,
            before_context: Some(before_context),
            after_context: Some(after_context),
        };
        let job = compute::grep_job(options)?;
        let targets = compute::targets(&strings(targets)?)?;
        let limits = compute::limits(time_limit_ms, memory_limit_bytes, result_limit_bytes);
        let c = &self.compute;
        let value = wait(py, compute::run(c, job, targets, limits))?;
        to_python(py, &value)
    }

    /// Counts lines, words and bytes near the data as `quarry wc --json`
    /// does. `word` counts one word, `top` returns the K most frequent
    /// words; `words` (default: unless `word` or `top` is given) counts
    /// words at all.
    ///
    /// >>> client.wc("logs/a.txt")["results"][0]["output"]["lines"]
    /// 2
    #[pyo3(signature = (
        *targets, words=None, word=None, top=None, time_limit_ms=None,
        memory_limit_bytes=None, result_limit_bytes=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn wc(
        &self,
        py: Python<'_>,
        targets: &Bound<'_, PyTuple>,
        words: Option<bool>,
        word: Option<String>,
        top: Option<u32>,
        time_limit_ms: Option<u64>,
        memory_limit_bytes: Option<u64>,
        result_limit_bytes: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let job = quarry_client::Job::Scan(quarry_client::KernelSpec::Wc(compute::wc_spec(
            words, word, top,
        )));
        let targets = compute::targets(&strings(targets)?)?;
        let limits = compute::limits(time_limit_ms, memory_limit_bytes, result_limit_bytes);
        let c = &self.compute;
        let value = wait(py, compute::run(c, job, targets, limits))?;
        to_python(py, &value)
    }

    /// Runs SQL over Parquet objects where their pages live (`quarry
    /// query`): filters and partial aggregates at the nodes, only the
    /// answer crosses to the client, as a `pyarrow.Table`. With
    /// `stats=True`, also what the query read and moved: a dict of
    /// `rows`, `objects`, `row_groups`, `row_groups_read`,
    /// `bytes_from_devices`, `bytes_between_nodes` and `bytes_to_client`.
    ///
    /// >>> t = client.query("SELECT carrier, count(*) AS n FROM 'flights/2013/*.parquet' GROUP BY carrier")
    /// >>> t.to_pandas().shape[1]
    /// 2
    #[pyo3(signature = (sql, stats=false, time_limit_ms=None, memory_limit_bytes=None, result_limit_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn query(
        &self,
        py: Python<'_>,
        sql: &str,
        stats: bool,
        time_limit_ms: Option<u64>,
        memory_limit_bytes: Option<u64>,
        result_limit_bytes: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let limits = compute::limits(time_limit_ms, memory_limit_bytes, result_limit_bytes);
        let c = &self.compute;
        let (ipc, moved) = wait(py, compute::query(c, sql.to_string(), limits))?;
        let stream = py
            .import("pyarrow.ipc")?
            .call_method1("open_stream", (PyBytes::new(py, &ipc),))?;
        let table = stream.call_method0("read_all")?.unbind();
        if !stats {
            return Ok(table);
        }
        let moved = to_python(py, &moved)?;
        Ok(PyTuple::new(py, [table, moved])?.into_any().unbind())
    }

    /// Runs any kernel near the data and returns its result as
    /// `quarry run` prints it: `kernel` and `args` as on its command line
    /// (the kernel's arguments, then the targets).
    ///
    /// >>> client.run("checksum", "logs/a.txt")["results"][0]["output"]["bytes"]
    /// 12
    #[pyo3(signature = (kernel, *args, time_limit_ms=None, memory_limit_bytes=None, result_limit_bytes=None))]
    fn run(
        &self,
        py: Python<'_>,
        kernel: &str,
        args: &Bound<'_, PyTuple>,
        time_limit_ms: Option<u64>,
        memory_limit_bytes: Option<u64>,
        result_limit_bytes: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let (job, targets) = compute::parse_run(kernel, &strings(args)?)?;
        let limits = compute::limits(time_limit_ms, memory_limit_bytes, result_limit_bytes);
        let c = &self.compute;
        let value = wait(py, compute::run(c, job, targets, limits))?;
        to_python(py, &value)
    }

    /// Submits a kernel as `run` does but returns at once with the
    /// command's number (`quarry run --detach`); follow it with `status`,
    /// `wait`, `result` and `cancel`.
    ///
    /// >>> id = client.submit("wc", "logs/")
    /// >>> client.wait(id)["state"]
    /// 'done'
    #[pyo3(signature = (kernel, *args, time_limit_ms=None, memory_limit_bytes=None, result_limit_bytes=None))]
    fn submit(
        &self,
        py: Python<'_>,
        kernel: &str,
        args: &Bound<'_, PyTuple>,
        time_limit_ms: Option<u64>,
        memory_limit_bytes: Option<u64>,
        result_limit_bytes: Option<u64>,
    ) -> PyResult<u64> {
        let (job, targets) = compute::parse_run(kernel, &strings(args)?)?;
        let limits = compute::limits(time_limit_ms, memory_limit_bytes, result_limit_bytes);
        let c = &self.compute;
        Ok(wait(py, compute::submit(c, job, targets, limits))?)
    }

    /// A command's status (a `quarry jobs --json` row: `id`, `kernel`,
    /// `state`, `bytes_done`, `bytes_total`, ...).
    ///
    /// >>> client.status(id)["state"]
    /// 'running'
    fn status(&self, py: Python<'_>, id: u64) -> PyResult<Py<PyAny>> {
        let value = wait(py, compute::status(&self.compute, id))?;
        to_python(py, &value)
    }

    /// Waits until the command is done, failed or cancelled, or
    /// `timeout_ms` has passed; returns its status then.
    ///
    /// >>> client.wait(id, timeout_ms=10_000)["state"]
    /// 'done'
    #[pyo3(signature = (id, timeout_ms=60_000))]
    fn wait(&self, py: Python<'_>, id: u64, timeout_ms: u64) -> PyResult<Py<PyAny>> {
        let value = wait(py, compute::wait(&self.compute, id, timeout_ms))?;
        to_python(py, &value)
    }

    /// Cancels a command (`quarry cancel`); returns its status.
    ///
    /// >>> client.cancel(id)["state"]
    /// 'cancelled'
    fn cancel(&self, py: Python<'_>, id: u64) -> PyResult<Py<PyAny>> {
        let value = wait(py, compute::cancel(&self.compute, id))?;
        to_python(py, &value)
    }

    /// A done command's result, as `run` returns it.
    ///
    /// >>> client.result(id)["results"][0]["output"]["lines"]
    /// 2
    fn result(&self, py: Python<'_>, id: u64) -> PyResult<Py<PyAny>> {
        let value = wait(py, compute::result(&self.compute, id))?;
        to_python(py, &value)
    }

    /// Every command the entry node holds (`quarry jobs --json`).
    ///
    /// >>> [j["state"] for j in client.jobs()]
    /// ['done']
    fn jobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = wait(py, compute::jobs(&self.compute))?;
        to_python(py, &value)
    }
}
