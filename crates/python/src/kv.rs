//! `Client.kv()` and the `KvTable` class: one tenant's key-value tables
//! over `quarry_client::KvTables`, with memcached's semantics, Minerva's
//! batches (one call per node whatever the number of keys) and Multes++'s
//! large values and arrays. Keys and values are checked and copied with the
//! GIL held, so a call never carries what a node would refuse; every wait
//! on the cluster releases it.

use bytes::Bytes;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString};
use quarry_client::{Expiry, FailKind, Item, ItemKind, KvAnswer, KvOp, KvTables, StoreMode};
use quarry_kv_api::{check_key, ClusterFigures, MAX_SECRET_BYTES, MAX_VALUE_BYTES};
use serde_json::Value;

use crate::convert::to_python;
use crate::errors::{fail_kind, Failure, Kind};
use crate::runtime::wait;

/// Most keys (or indices, or pairs) one batched call takes. The batch is
/// split per node into calls of at most 8192 operations anyway; this bounds
/// what one Python call holds twice, as arguments and as answers.
pub const MAX_BATCH_KEYS: usize = 65_536;

/// Most value bytes one `set_many` or `array_set` copies out of Python
/// objects before sending.
pub const MAX_BATCH_BYTES: usize = 1 << 30;

/// The tables of `tenant`, for `Client.kv`.
pub fn tables(
    py: Python<'_>,
    client: &quarry_client::Client,
    tenant: &str,
    secret: &str,
) -> PyResult<KvTable> {
    // Checked here: the call encoding takes a longer secret and the node
    // then refuses every call as malformed, far from the cause.
    if secret.len() > MAX_SECRET_BYTES {
        return Err(Failure::invalid(format!(
            "a secret of {} bytes; the limit is {MAX_SECRET_BYTES}",
            secret.len()
        ))
        .into());
    }
    let tables = wait(py, async move { Ok(client.kv(tenant, secret).await?) })?;
    Ok(KvTable { tables })
}

/// An item as `get_item` finds it.
///
/// >>> item = table.get_item("user:1")
/// >>> item.value, item.flags, item.expires_unix_secs
/// (b'ada', 0, None)
#[pyclass(frozen, get_all, skip_from_py_object, module = "quarry._quarry")]
pub struct KvItem {
    /// The value.
    value: Py<PyBytes>,
    /// The 32 opaque bits stored with it (memcached's flags).
    flags: u32,
    /// Its CAS value: unique among the versions of this key (for `cas`).
    cas: u64,
    /// When it expires, in seconds since the Unix epoch; `None`: never.
    expires_unix_secs: Option<u64>,
}

#[pymethods]
impl KvItem {
    fn __repr__(&self, py: Python<'_>) -> String {
        let value = self.value.bind(py).as_bytes();
        let shown = String::from_utf8_lossy(&value[..value.len().min(32)]).into_owned();
        format!(
            "KvItem(value=<{} bytes: {shown:?}>, flags={}, cas={}, expires_unix_secs={:?})",
            value.len(),
            self.flags,
            self.cas,
            self.expires_unix_secs
        )
    }
}

/// One tenant's key-value tables (from `Client.kv`). Safe to share between
/// threads.
#[pyclass(frozen, module = "quarry._quarry")]
pub struct KvTable {
    tables: KvTables,
}

/// A key from `str` (its UTF-8) or `bytes`/`bytearray`, 1-250 bytes.
fn key_bytes(key: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    let bytes = if let Ok(s) = key.cast::<PyString>() {
        Bytes::copy_from_slice(s.to_cow()?.as_bytes())
    } else if let Ok(b) = key.cast::<PyBytes>() {
        Bytes::copy_from_slice(b.as_bytes())
    } else if let Ok(b) = key.cast::<PyByteArray>() {
        Bytes::from(b.to_vec())
    } else {
        let type_name = key.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "a key is str or bytes, not {type_name}"
        )));
    };
    // Checked here: an empty or over-long key is not encodable in a call.
    check_key(&bytes).map_err(Failure::from)?;
    Ok(bytes)
}

/// A value from anything bytes-like: `bytes`, `bytearray`, or whatever a
/// `memoryview` takes (the buffer API itself is outside the stable ABI
/// before Python 3.11).
fn value_bytes(value: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    if let Ok(b) = value.cast::<PyByteArray>() {
        return Ok(Bytes::from(b.to_vec()));
    }
    let memoryview = value.py().import("builtins")?.getattr("memoryview")?;
    match memoryview.call1((value,)) {
        Ok(view) => {
            let copy = view.call_method0("tobytes")?;
            Ok(Bytes::copy_from_slice(copy.cast::<PyBytes>()?.as_bytes()))
        }
        Err(_) => {
            let type_name = value.get_type().name()?;
            Err(PyTypeError::new_err(format!(
                "a value is bytes-like (bytes, bytearray, memoryview), not {type_name}"
            )))
        }
    }
}

/// A value for one item: at most memcached's item size.
fn item_value(value: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    let bytes = value_bytes(value)?;
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(Failure::invalid(format!(
            "a value of {} bytes; one item holds at most {MAX_VALUE_BYTES} bytes (1 MiB, \
             memcached's item size): store it with set_large",
            bytes.len()
        ))
        .into());
    }
    Ok(bytes)
}

/// `ttl` seconds from now; 0: never ([`Expiry::after_secs`]).
fn expiry(ttl_secs: u64) -> Result<Expiry, Failure> {
    Expiry::after_secs(ttl_secs)
        .ok_or_else(|| Failure::invalid(format!("a ttl of {ttl_secs} seconds is past any time")))
}

fn shown(key: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(key))
}

/// The name of an answer, for an error: never its value, which may be a
/// megabyte.
fn answer_name(a: &KvAnswer) -> &'static str {
    match a {
        KvAnswer::Value(_) => "a value",
        KvAnswer::Miss => "a miss",
        KvAnswer::Stored { .. } => "stored",
        KvAnswer::NotStored => "not stored",
        KvAnswer::Exists => "exists",
        KvAnswer::NotFound => "not found",
        KvAnswer::Deleted => "deleted",
        KvAnswer::Touched => "touched",
        KvAnswer::Number { .. } => "a number",
        KvAnswer::Failed { .. } => "a failure",
    }
}

/// A refusal as its exception; any other answer the operation cannot have
/// as a format error.
fn failure(answer: KvAnswer, op: &str) -> Failure {
    match answer {
        KvAnswer::Failed { kind, message } => Failure::new(fail_kind(kind), message),
        other => Failure::new(
            Kind::Kv,
            format!("{op} was answered {}", answer_name(&other)),
        ),
    }
}

/// A plain item; a large value's head or an array's directory is refused,
/// since its bytes are not the value stored.
fn plain(key: &[u8], item: Item) -> Result<Item, Failure> {
    let read_with = match item.kind {
        ItemKind::Plain => return Ok(item),
        ItemKind::LargeHead => "a large value: read it with get_large",
        ItemKind::ArrayDirectory => "an array: read it with array_get",
    };
    Err(Failure::new(
        Kind::Kv,
        format!("key {} holds {read_with}", shown(key)),
    ))
}

fn store_op(key: Bytes, value: Bytes, mode: StoreMode, flags: u32, expiry: Expiry) -> KvOp {
    KvOp::Store {
        key,
        mode,
        flags,
        expiry,
        kind: ItemKind::Plain,
        value,
    }
}

/// Keys of a batch, with the objects they came from (the answer's dict is
/// keyed by what the caller gave).
fn batch_keys<'py>(keys: &Bound<'py, PyAny>) -> PyResult<(Vec<Bound<'py, PyAny>>, Vec<Bytes>)> {
    if keys.cast::<PyString>().is_ok() || keys.cast::<PyBytes>().is_ok() {
        return Err(PyTypeError::new_err(
            "get_many takes an iterable of keys, not one key",
        ));
    }
    let mut objects = Vec::new();
    let mut bytes = Vec::new();
    for key in keys.try_iter()? {
        let key = key?;
        if objects.len() == MAX_BATCH_KEYS {
            return Err(too_many("keys"));
        }
        bytes.push(key_bytes(&key)?);
        objects.push(key);
    }
    Ok((objects, bytes))
}

fn too_many(what: &str) -> PyErr {
    Failure::invalid(format!(
        "more than {MAX_BATCH_KEYS} {what} in one call; split the batch"
    ))
    .into()
}

/// `(key, value)` pairs from a mapping or an iterable of pairs.
fn batch_items(items: &Bound<'_, PyAny>) -> PyResult<Vec<(Bytes, Bytes)>> {
    let pairs = match items.cast::<PyDict>() {
        Ok(dict) => dict.items().into_any(),
        Err(_) if items.hasattr("keys")? => items.call_method0("items")?,
        Err(_) => items.clone(),
    };
    let mut out = Vec::new();
    let mut total_bytes = 0usize;
    for pair in pairs.try_iter()? {
        if out.len() == MAX_BATCH_KEYS {
            return Err(too_many("items"));
        }
        let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
        let value = item_value(&value)?;
        total_bytes += value.len();
        if total_bytes > MAX_BATCH_BYTES {
            return Err(batch_too_large());
        }
        out.push((key_bytes(&key)?, value));
    }
    Ok(out)
}

fn batch_too_large() -> PyErr {
    Failure::invalid(format!(
        "more than {MAX_BATCH_BYTES} bytes of values in one call; split the batch"
    ))
    .into()
}

/// The figures of `quarry kv stats --json`: each summed over the nodes
/// (`durable`, a flag, is the nodes' flag, not a sum), and `dedup_ratio`,
/// logical bytes over stored bytes (1 when nothing is stored).
fn stats_json(tenant: &str, figures: &ClusterFigures, per_node: bool) -> Value {
    let by_node = &figures.by_node;
    let mut doc = serde_json::Map::new();
    doc.insert("tenant".into(), tenant.into());
    for (name, value) in &figures.total {
        doc.insert(name.clone(), (*value).into());
    }
    doc.insert(
        "dedup_ratio".into(),
        serde_json::json!(figures.dedup_ratio()),
    );
    if per_node {
        let nodes: serde_json::Map<String, Value> = by_node
            .iter()
            .map(|(id, figures)| {
                let one: serde_json::Map<String, Value> = figures
                    .iter()
                    .map(|(k, v)| (k.clone(), (*v).into()))
                    .collect();
                (id.to_string(), one.into())
            })
            .collect();
        doc.insert("nodes".into(), nodes.into());
    }
    Value::Object(doc)
}

impl KvTable {
    /// Runs one operation where its key lives.
    fn one(&self, py: Python<'_>, op: KvOp) -> Result<KvAnswer, Failure> {
        let tables = &self.tables;
        wait(py, async move {
            Ok(tables
                .run(vec![op])
                .await
                .pop()
                .unwrap_or(KvAnswer::Failed {
                    kind: FailKind::Internal,
                    message: "no answer".to_string(),
                }))
        })
    }

    /// A conditional store (add, replace, append, prepend): whether it
    /// stored.
    fn store_if(&self, py: Python<'_>, op: KvOp, name: &str) -> PyResult<bool> {
        match self.one(py, op)? {
            KvAnswer::Stored { .. } => Ok(true),
            KvAnswer::NotStored => Ok(false),
            other => Err(failure(other, name).into()),
        }
    }

    fn arith(
        &self,
        py: Python<'_>,
        key: Bytes,
        decrement: bool,
        delta: u64,
    ) -> PyResult<Option<u64>> {
        let op = KvOp::Arith {
            key,
            decrement,
            delta,
            vivify: None,
            cas: None,
        };
        match self.one(py, op)? {
            KvAnswer::Number { value, .. } => Ok(Some(value)),
            KvAnswer::NotFound => Ok(None),
            other => Err(failure(other, if decrement { "decr" } else { "incr" }).into()),
        }
    }

    fn item(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<Item>> {
        let key = key_bytes(key)?;
        let tables = &self.tables;
        let got = wait(py, async { Ok(tables.get(&key).await?) })?;
        Ok(got.map(|item| plain(&key, item)).transpose()?)
    }
}

#[pymethods]
impl KvTable {
    fn __repr__(&self) -> String {
        format!(
            "<quarry.KvTable tenant={:?} over {} nodes>",
            self.tables.tenant().as_str(),
            self.tables.members().len()
        )
    }

    /// The tenant whose keys these are.
    ///
    /// >>> client.kv().tenant
    /// 'default'
    #[getter]
    fn tenant(&self) -> String {
        self.tables.tenant().to_string()
    }

    /// The nodes keys are placed over.
    ///
    /// >>> table.nodes
    /// [0, 1, 2]
    #[getter]
    fn nodes(&self) -> Vec<u16> {
        self.tables.members().to_vec()
    }

    /// The node `key` lives on (its point ranked over the nodes).
    ///
    /// >>> table.node_of("user:1") in table.nodes
    /// True
    fn node_of(&self, key: &Bound<'_, PyAny>) -> PyResult<u16> {
        Ok(self.tables.node_of(&key_bytes(key)?))
    }

    /// The value under `key` (`str` or `bytes`), or `None`. A key that
    /// holds a large value or an array raises `KvError` naming the method
    /// that reads it.
    ///
    /// >>> table.set("user:1", b"ada")
    /// 1
    /// >>> table.get("user:1")
    /// b'ada'
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        Ok(self.item(py, key)?.map(|i| PyBytes::new(py, &i.value)))
    }

    /// The value under `key` and its CAS value (memcached's `gets`), for
    /// `cas`; or `None`.
    ///
    /// >>> value, cas = table.gets("user:1")
    /// >>> table.cas("user:1", b"ada lovelace", cas)
    /// True
    fn gets<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, u64)>> {
        Ok(self
            .item(py, key)?
            .map(|i| (PyBytes::new(py, &i.value), i.cas)))
    }

    /// The item under `key` with its flags, CAS value and expiry; or
    /// `None`.
    ///
    /// >>> table.set("user:2", b"bob", flags=7, ttl=60)
    /// 2
    /// >>> table.get_item("user:2").flags
    /// 7
    fn get_item(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<KvItem>> {
        Ok(self.item(py, key)?.map(|i| KvItem {
            value: PyBytes::new(py, &i.value).unbind(),
            flags: i.flags,
            cas: i.cas,
            expires_unix_secs: match i.expiry {
                Expiry::Never => None,
                Expiry::At(t) => Some(t),
            },
        }))
    }

    /// Stores `value` (bytes-like, at most 1 MiB; larger: `set_large`)
    /// under `key` whatever is there (memcached's `set`); returns the new
    /// CAS value. `flags`: 32 opaque bits kept with it; `ttl`: seconds
    /// until it expires (0: never).
    ///
    /// >>> cas = table.set("greeting", b"hello", ttl=3600)
    #[pyo3(signature = (key, value, *, flags=0, ttl=0))]
    fn set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        flags: u32,
        ttl: u64,
    ) -> PyResult<u64> {
        let op = store_op(
            key_bytes(key)?,
            item_value(value)?,
            StoreMode::Set,
            flags,
            expiry(ttl)?,
        );
        match self.one(py, op)? {
            KvAnswer::Stored { cas } => Ok(cas),
            other => Err(failure(other, "set").into()),
        }
    }

    /// Stores only if `key` is absent (memcached's `add`); whether it
    /// stored.
    ///
    /// >>> table.add("greeting", b"hi")
    /// False
    #[pyo3(signature = (key, value, *, flags=0, ttl=0))]
    fn add(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        flags: u32,
        ttl: u64,
    ) -> PyResult<bool> {
        let op = store_op(
            key_bytes(key)?,
            item_value(value)?,
            StoreMode::Add,
            flags,
            expiry(ttl)?,
        );
        self.store_if(py, op, "add")
    }

    /// Stores only if `key` is present (memcached's `replace`); whether it
    /// stored.
    ///
    /// >>> table.replace("nobody", b"x")
    /// False
    #[pyo3(signature = (key, value, *, flags=0, ttl=0))]
    fn replace(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        flags: u32,
        ttl: u64,
    ) -> PyResult<bool> {
        let op = store_op(
            key_bytes(key)?,
            item_value(value)?,
            StoreMode::Replace,
            flags,
            expiry(ttl)?,
        );
        self.store_if(py, op, "replace")
    }

    /// Adds `value` after the present value, keeping its flags and expiry
    /// (memcached's `append`); whether the key was there.
    ///
    /// >>> table.append("greeting", b", world")
    /// True
    fn append(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let op = store_op(
            key_bytes(key)?,
            item_value(value)?,
            StoreMode::Append,
            0,
            Expiry::Never,
        );
        self.store_if(py, op, "append")
    }

    /// Adds `value` before the present value (memcached's `prepend`);
    /// whether the key was there.
    ///
    /// >>> table.prepend("greeting", b"oh, ")
    /// True
    fn prepend(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let op = store_op(
            key_bytes(key)?,
            item_value(value)?,
            StoreMode::Prepend,
            0,
            Expiry::Never,
        );
        self.store_if(py, op, "prepend")
    }

    /// Stores only if the item is still the version `cas` names (from
    /// `gets` or `set`): `True` stored, `False` another version is there
    /// (memcached's `EXISTS`), `None` no item (`NOT_FOUND`).
    ///
    /// >>> value, cas = table.gets("greeting")
    /// >>> table.cas("greeting", b"bye", cas), table.cas("greeting", b"again", cas)
    /// (True, False)
    #[pyo3(signature = (key, value, cas, *, flags=0, ttl=0))]
    fn cas(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        cas: u64,
        flags: u32,
        ttl: u64,
    ) -> PyResult<Option<bool>> {
        let op = store_op(
            key_bytes(key)?,
            item_value(value)?,
            StoreMode::Cas(cas),
            flags,
            expiry(ttl)?,
        );
        match self.one(py, op)? {
            KvAnswer::Stored { .. } => Ok(Some(true)),
            KvAnswer::Exists => Ok(Some(false)),
            KvAnswer::NotFound => Ok(None),
            other => Err(failure(other, "cas").into()),
        }
    }

    /// Deletes `key` (a plain item; a large value or an array:
    /// `delete_large`); whether it was there.
    ///
    /// >>> table.delete("greeting"), table.delete("greeting")
    /// (True, False)
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        let tables = &self.tables;
        Ok(wait(py, async move { Ok(tables.delete(&key).await?) })?)
    }

    /// Adds `delta` to the decimal number stored under `key` (memcached's
    /// `incr`: 64 bits, wrapping); the new number, or `None` when the key
    /// is absent. A value that is not a number raises `NonNumeric`.
    ///
    /// >>> table.set("hits", b"41")
    /// 7
    /// >>> table.incr("hits")
    /// 42
    #[pyo3(signature = (key, delta=1))]
    fn incr(&self, py: Python<'_>, key: &Bound<'_, PyAny>, delta: u64) -> PyResult<Option<u64>> {
        self.arith(py, key_bytes(key)?, false, delta)
    }

    /// Subtracts `delta`, stopping at 0 (memcached's `decr`); the new
    /// number, or `None` when the key is absent.
    ///
    /// >>> table.decr("hits", 50)
    /// 0
    #[pyo3(signature = (key, delta=1))]
    fn decr(&self, py: Python<'_>, key: &Bound<'_, PyAny>, delta: u64) -> PyResult<Option<u64>> {
        self.arith(py, key_bytes(key)?, true, delta)
    }

    /// Sets the item's expiry to `ttl` seconds from now (0: never;
    /// memcached's `touch`); whether the key was there.
    ///
    /// >>> table.touch("hits", 60)
    /// True
    fn touch(&self, py: Python<'_>, key: &Bound<'_, PyAny>, ttl: u64) -> PyResult<bool> {
        let op = KvOp::Touch {
            key: key_bytes(key)?,
            expiry: expiry(ttl)?,
        };
        match self.one(py, op)? {
            KvAnswer::Touched => Ok(true),
            KvAnswer::NotFound => Ok(false),
            other => Err(failure(other, "touch").into()),
        }
    }

    /// The values under `keys` (at most 65,536), fetched in one call per
    /// node whatever their number: a dict from each key found, as given,
    /// to its value; misses are left out.
    ///
    /// >>> table.get_many(["user:1", "user:2", "nobody"])
    /// {'user:1': b'ada lovelace', 'user:2': b'bob'}
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (objects, keys) = batch_keys(keys)?;
        let tables = &self.tables;
        let keys = &keys;
        let got = wait(py, async move { Ok(tables.get_many(keys).await?) })?;
        let found = PyDict::new(py);
        for ((object, key), item) in objects.iter().zip(keys).zip(got) {
            if let Some(item) = item {
                let item = plain(key, item)?;
                found.set_item(object, PyBytes::new(py, &item.value))?;
            }
        }
        Ok(found)
    }

    /// Stores many values (a mapping, or `(key, value)` pairs; at most
    /// 65,536 and 1 GiB), in one call per node whatever their number; the
    /// new CAS values, in order.
    ///
    /// >>> len(table.set_many({f"k{i}": b"v" for i in range(1000)}, ttl=600))
    /// 1000
    #[pyo3(signature = (items, *, ttl=0))]
    fn set_many(&self, py: Python<'_>, items: &Bound<'_, PyAny>, ttl: u64) -> PyResult<Vec<u64>> {
        let items = batch_items(items)?;
        let at = expiry(ttl)?;
        let tables = &self.tables;
        Ok(wait(
            py,
            async move { Ok(tables.set_many(items, at).await?) },
        )?)
    }

    /// Stores a value of any size (up to 4 GiB) under `key` (at most 236
    /// bytes): up to 1 MiB as one item, beyond as 1 MiB slices written in
    /// one batch behind a head; the old value's slices are deleted after.
    ///
    /// >>> table.set_large("video", b"x" * (5 << 20))
    #[pyo3(signature = (key, value, *, flags=0, ttl=0))]
    fn set_large(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        flags: u32,
        ttl: u64,
    ) -> PyResult<()> {
        let (key, value, at) = (key_bytes(key)?, value_bytes(value)?, expiry(ttl)?);
        let tables = &self.tables;
        Ok(wait(py, async move {
            Ok(tables.set_large(&key, value, flags, at).await?)
        })?)
    }

    /// The value under `key` whatever its size (a large value's slices
    /// fetched in one batch and joined), or `None`.
    ///
    /// >>> len(table.get_large("video"))
    /// 5242880
    fn get_large<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = key_bytes(key)?;
        let tables = &self.tables;
        let got = wait(py, async move { Ok(tables.get_large(&key).await?) })?;
        Ok(got.map(|v| PyBytes::new(py, &v)))
    }

    /// Deletes `key` and whatever it names (a large value's slices, an
    /// array's elements); whether it was there.
    ///
    /// >>> table.delete_large("video")
    /// True
    fn delete_large(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        let tables = &self.tables;
        Ok(wait(
            py,
            async move { Ok(tables.delete_large(&key).await?) },
        )?)
    }

    /// Stores `elements` (bytes-like, each at most 1 MiB; at most 1,048,576
    /// of them and 1 GiB in all) as an array under `key`: each element an
    /// item, then a directory value naming them.
    ///
    /// >>> table.array_set("frames", [b"f0", b"f1", b"f2"])
    #[pyo3(signature = (key, elements, *, ttl=0))]
    fn array_set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        elements: &Bound<'_, PyAny>,
        ttl: u64,
    ) -> PyResult<()> {
        let (key, at) = (key_bytes(key)?, expiry(ttl)?);
        let mut values = Vec::new();
        let mut total_bytes = 0usize;
        for element in elements.try_iter()? {
            if values.len() == quarry_kv_api::MAX_ARRAY_ELEMENTS as usize {
                return Err(Failure::invalid(format!(
                    "an array of more than {} elements",
                    quarry_kv_api::MAX_ARRAY_ELEMENTS
                ))
                .into());
            }
            let value = item_value(&element?)?;
            total_bytes += value.len();
            if total_bytes > MAX_BATCH_BYTES {
                return Err(batch_too_large());
            }
            values.push(value);
        }
        let tables = &self.tables;
        Ok(wait(py, async move {
            Ok(tables.array_set(&key, values, at).await?)
        })?)
    }

    /// Element `index` (from 0) of the array under `key`, or `None` when
    /// there is no array; an index past its end raises `KvError`.
    ///
    /// >>> table.array_get("frames", 1)
    /// b'f1'
    fn array_get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        index: u32,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = key_bytes(key)?;
        let tables = &self.tables;
        let got = wait(py, async move { Ok(tables.array_get(&key, index).await?) })?;
        Ok(got.map(|v| PyBytes::new(py, &v)))
    }

    /// Elements `indices` (at most 65,536) of the array under `key`, in
    /// that order, read in one batch; `None` when there is no array.
    ///
    /// >>> table.array_get_many("frames", [2, 0])
    /// [b'f2', b'f0']
    fn array_get_many<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        indices: Vec<u32>,
    ) -> PyResult<Option<Vec<Bound<'py, PyBytes>>>> {
        if indices.len() > MAX_BATCH_KEYS {
            return Err(too_many("indices"));
        }
        let key = key_bytes(key)?;
        let tables = &self.tables;
        let indices = &indices;
        let got = wait(py, async move {
            Ok(tables.array_get_many(&key, indices).await?)
        })?;
        Ok(got.map(|values| values.iter().map(|v| PyBytes::new(py, v)).collect()))
    }

    /// The number of elements of the array under `key`, or `None`.
    ///
    /// >>> table.array_len("frames")
    /// 3
    fn array_len(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
        let key = key_bytes(key)?;
        let tables = &self.tables;
        Ok(wait(py, async move { Ok(tables.array_len(&key).await?) })?)
    }

    /// The tenant's figures summed over the nodes, as `quarry kv stats
    /// --json` prints them: memcached's counters (`get_hits`, `curr_items`,
    /// ...), `logical_bytes` and `stored_bytes` (after dedup) and
    /// `dedup_ratio`; with `nodes=True` each node's too, by node id.
    ///
    /// >>> table.stats()["dedup_ratio"] >= 1.0
    /// True
    #[pyo3(signature = (nodes=false))]
    fn stats(&self, py: Python<'_>, nodes: bool) -> PyResult<Py<PyAny>> {
        let tables = &self.tables;
        let figures = wait(py, async move { Ok(tables.figures().await?) })?;
        to_python(py, &stats_json(tables.tenant().as_str(), &figures, nodes))
    }

    /// Drops every item of the tenant on every node (memcached's
    /// `flush_all`); with `delay`, those stored until `delay` seconds from
    /// now, then.
    ///
    /// >>> table.flush_all()
    /// >>> table.get("user:1") is None
    /// True
    #[pyo3(signature = (delay=0))]
    fn flush_all(&self, py: Python<'_>, delay: u64) -> PyResult<()> {
        let at = expiry(delay)?;
        let tables = &self.tables;
        Ok(wait(py, async move { Ok(tables.flush_all(at).await?) })?)
    }
}
