//! Where the store keeps its small records: the [`TableStore`] trait, and
//! [`MemTableStore`], the in-memory one.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use quarry_store_api::{Result, StoreError};

/// The tables of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Bucket name -> bucket record (its chunking, creation time).
    Buckets,
    /// (bucket, key) -> the current manifest, or a tombstone holding the
    /// last version of a deleted object.
    Manifests,
    /// Fingerprint -> chunk record (location, length, reference counts).
    Chunks,
    /// (tenant, key) -> a durable key-value item (`quarry-kv`).
    KvItems,
    /// (tenant, fingerprint) -> a deduplicated key-value value (`quarry-kv`).
    KvValues,
}

impl Table {
    /// Every table, in order of [`Self::index`].
    pub(crate) const ALL: [Table; 5] = [
        Table::Buckets,
        Table::Manifests,
        Table::Chunks,
        Table::KvItems,
        Table::KvValues,
    ];

    /// 0, 1, 2, 3, 4: the table's place in [`Self::ALL`] (and its byte in the
    /// volume-backed log and snapshots).
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One change of a [`Batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Set `key` to `value`.
    Put {
        /// The table.
        table: Table,
        /// The record's key.
        key: Vec<u8>,
        /// The record.
        value: Bytes,
    },
    /// Remove `key` (nothing happens if it is absent).
    Delete {
        /// The table.
        table: Table,
        /// The record's key.
        key: Vec<u8>,
    },
}

/// Changes committed together: after a crash either all of them are there
/// or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a put.
    pub fn put(&mut self, table: Table, key: impl Into<Vec<u8>>, value: impl Into<Bytes>) {
        self.ops.push(Op::Put {
            table,
            key: key.into(),
            value: value.into(),
        });
    }
    /// Adds a delete.
    pub fn delete(&mut self, table: Table, key: impl Into<Vec<u8>>) {
        self.ops.push(Op::Delete {
            table,
            key: key.into(),
        });
    }
    /// The changes, in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }
    /// The changes, taken.
    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }
}

/// Persistence of a node's tables: get, ordered scan, and an atomic,
/// crash-safe commit of a batch of puts and deletes.
///
/// What an implementation must guarantee (the volume-backed one included):
/// - **Atomic, durable commits.** When `commit` returns `Ok`, every change of
///   the batch survives a crash; if the process dies before, after restart
///   either all of the batch is visible or none of it. Never part.
/// - **Read your writes.** A `get` or `scan` that starts after a `commit`
///   returned sees it. Concurrent commits of different keys may be applied
///   in any order; the store itself serialises commits that touch the same
///   key (it holds a lock on the key across read-modify-commit).
/// - **Ordered scans.** `scan` returns records of one table whose key starts
///   with `prefix` and sorts after `after`, in ascending byte order of key.
///   A scan concurrent with commits may or may not see each of them, but sees
///   every record that was committed before it started and not changed since.
/// - **Small records.** Keys are at most a few KiB; values at most
///   [`crate::MAX_MANIFEST_CHUNKS`] x 36 bytes plus a header (a manifest),
///   usually tens of bytes.
pub trait TableStore: Send + Sync + 'static {
    /// The record under `key`, if any.
    fn get(&self, table: Table, key: &[u8]) -> impl Future<Output = Result<Option<Bytes>>> + Send;

    /// Applies `batch` atomically and durably.
    fn commit(&self, batch: Batch) -> impl Future<Output = Result<()>> + Send;

    /// Waits until a batch handed to [`submit`](Self::submit) would find
    /// room in the store's queue, so the caller can then submit under a
    /// lock of its own without waiting there.
    fn room(&self) -> impl Future<Output = Result<()>> + Send;

    /// Hands `batch` in to be committed after every batch handed in
    /// before it, and returns what waits for its commit. The hand-in
    /// happens in this call, not when the future is first polled, so a
    /// caller that submits under a lock of its own gets the lock's order
    /// as the commit order. Once a submitted batch fails, every batch
    /// submitted after it fails too: a submitter keeps changes in memory
    /// ahead of the store, and a later batch may build on the failed one.
    fn submit(&self, batch: Batch) -> impl Future<Output = Result<()>> + Send + '_;

    /// Waits until every batch submitted before this call is committed or
    /// has failed (the horizon is taken in this call).
    fn settled(&self) -> impl Future<Output = Result<()>> + Send + '_;

    /// Up to `limit` records with keys starting with `prefix` and greater
    /// than `after`, in key order.
    fn scan(
        &self,
        table: Table,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, Bytes)>>> + Send;

    /// Hands the records under `owner`'s claims to `owner`, which keeps
    /// them in memory already (the key-value tenants' tables): from now on
    /// only `owner` writes its claimed tables, the store logs its batches
    /// but keeps no second copy, and a snapshot takes those records from
    /// [`TableOwner::capture`]. Reads of a claimed table are then refused.
    /// At most one owner. A store that keeps no snapshots keeps its copy
    /// (and may be handed over again).
    fn hand_over(&self, owner: Arc<dyn TableOwner>) -> impl Future<Output = Result<()>> + Send;
}

/// Records a snapshot takes from a [`TableOwner`], in any order.
pub type OwnedRecords = Box<dyn Iterator<Item = (Table, Vec<u8>, Bytes)> + Send>;

/// Who keeps some tables' records itself (see [`TableStore::hand_over`]).
pub trait TableOwner: Send + Sync + 'static {
    /// The tables it writes, and the key prefixes of its records there;
    /// records of those tables under other prefixes (left by an owner's
    /// earlier configuration) stay with the store.
    fn claims(&self) -> (Vec<Table>, Vec<Vec<u8>>);

    /// A copy of its records at one moment: it calls `drain` once, holding
    /// whatever orders its submits (so none is made meanwhile), and copies
    /// its records before letting go. `drain` takes every batch handed in
    /// and not yet written, which the store writes before the snapshot, so
    /// the copy is exactly what the log holds once they are written.
    fn capture(&self, drain: &mut dyn FnMut()) -> OwnedRecords;
}

impl<T: TableStore> TableStore for Arc<T> {
    fn get(&self, table: Table, key: &[u8]) -> impl Future<Output = Result<Option<Bytes>>> + Send {
        (**self).get(table, key)
    }
    fn commit(&self, batch: Batch) -> impl Future<Output = Result<()>> + Send {
        (**self).commit(batch)
    }
    fn room(&self) -> impl Future<Output = Result<()>> + Send {
        (**self).room()
    }
    fn submit(&self, batch: Batch) -> impl Future<Output = Result<()>> + Send + '_ {
        (**self).submit(batch)
    }
    fn settled(&self) -> impl Future<Output = Result<()>> + Send + '_ {
        (**self).settled()
    }
    fn scan(
        &self,
        table: Table,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, Bytes)>>> + Send {
        (**self).scan(table, prefix, after, limit)
    }
    fn hand_over(&self, owner: Arc<dyn TableOwner>) -> impl Future<Output = Result<()>> + Send {
        (**self).hand_over(owner)
    }
}

/// Memory a record is counted with beyond its key and value (map node,
/// `Bytes` and `Vec` headers).
const RECORD_OVERHEAD: u64 = 64;

/// What a record is counted with in [`TableMap::bytes`].
pub(crate) fn record_bytes(key: &[u8], value: &[u8]) -> u64 {
    record_bytes_of(key.len(), value.len())
}

fn record_bytes_of(key_bytes: usize, value_bytes: usize) -> u64 {
    key_bytes as u64 + value_bytes as u64 + RECORD_OVERHEAD
}

/// The tables as ordered maps in memory, one per [`Table`], with the memory
/// they take: what both [`MemTableStore`] and the volume-backed store hold
/// (the latter behind its log). Lookups borrow the key: no allocation per
/// `get` or `scan`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TableMap {
    maps: [BTreeMap<Vec<u8>, Bytes>; 5],
    /// Keys + values + [`RECORD_OVERHEAD`] a record.
    bytes: u64,
}

impl TableMap {
    pub fn get(&self, table: Table, key: &[u8]) -> Option<Bytes> {
        self.maps[table.index()].get(key).cloned()
    }

    /// Up to `limit` records of `table` whose keys start with `prefix` and
    /// sort after `after`, in key order.
    pub fn scan(
        &self,
        table: Table,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Bytes)> {
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        self.maps[table.index()]
            .range::<[u8], _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn put(&mut self, table: Table, key: Vec<u8>, value: Bytes) {
        self.bytes += record_bytes(&key, &value);
        let key_bytes = key.len();
        // One descent of the tree: the old record's key is this key.
        if let Some(old) = self.maps[table.index()].insert(key, value) {
            self.bytes -= record_bytes_of(key_bytes, old.len());
        }
    }

    pub fn delete(&mut self, table: Table, key: &[u8]) {
        if let Some((k, old)) = self.maps[table.index()].remove_entry(key) {
            self.bytes -= record_bytes(&k, &old);
        }
    }

    /// Applies the changes of `batch` to tables not `owned`, in order.
    pub fn apply_unowned(&mut self, batch: Batch, owned: &[bool; 5]) {
        for op in batch.into_ops() {
            match op {
                Op::Put { table, key, value } if !owned[table.index()] => {
                    self.put(table, key, value);
                }
                Op::Delete { table, key } if !owned[table.index()] => self.delete(table, &key),
                _ => {}
            }
        }
    }

    /// Drops the records of `table` under any of `prefixes`.
    pub fn drop_prefixes(&mut self, table: Table, prefixes: &[Vec<u8>]) {
        let mut freed = 0;
        self.maps[table.index()].retain(|k, v| {
            let claimed = prefixes.iter().any(|p| k.starts_with(p));
            if claimed {
                freed += record_bytes(k, v);
            }
            !claimed
        });
        self.bytes -= freed;
    }

    /// Applies every change of `batch`, in order.
    pub fn apply(&mut self, batch: Batch) {
        self.apply_unowned(batch, &[false; 5]);
    }

    /// Records in `table`.
    pub fn len(&self, table: Table) -> usize {
        self.maps[table.index()].len()
    }

    /// Records in all tables.
    pub fn records(&self) -> usize {
        self.maps.iter().map(BTreeMap::len).sum()
    }

    /// The memory the records are counted with.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The records after `after` (every record with `None`), by table then
    /// key: a walk resumed where it stopped.
    pub fn iter_after<'a>(
        &'a self,
        after: Option<(Table, &'a [u8])>,
    ) -> impl Iterator<Item = (Table, &'a [u8], &'a Bytes)> + 'a {
        Table::ALL
            .into_iter()
            .zip(&self.maps)
            .flat_map(move |(t, m)| {
                let skip = matches!(after, Some((at, _)) if t < at);
                let from = match after {
                    Some((at, key)) if t == at => Bound::Excluded(key),
                    _ => Bound::Unbounded,
                };
                m.range::<[u8], _>((from, Bound::Unbounded))
                    .take(if skip { 0 } else { usize::MAX })
                    .map(move |(k, v)| (t, k.as_slice(), v))
            })
    }
}

/// Tables in memory: one ordered map (`TableMap`) behind a lock. A commit applies
/// the whole batch under the write lock, so it is atomic; "durable" here
/// means "for as long as this value lives", which is what tests of crash
/// ordering need: drop the node's store, open a new one over the same
/// `MemTableStore`, and it sees exactly the committed batches. Commits can be
/// made to fail after a count ([`Self::fail_commits_after`]) to simulate a
/// crash between two steps.
#[derive(Debug)]
pub struct MemTableStore {
    tables: RwLock<TableMap>,
    /// Commits left before they start failing (`u64::MAX`: never).
    commits_left: AtomicU64,
}

impl Default for MemTableStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemTableStore {
    /// Empty tables.
    pub fn new() -> Self {
        Self {
            tables: RwLock::default(),
            commits_left: AtomicU64::new(u64::MAX),
        }
    }

    /// Lets `n` more commits succeed, then fails every later one with a
    /// backend error (as a crashed node would never make them). `None`
    /// undoes it.
    pub fn fail_commits_after(&self, n: Option<u64>) {
        self.commits_left
            .store(n.unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, TableMap> {
        self.tables.read().expect("table lock")
    }

    /// Number of records in `table`.
    pub fn len(&self, table: Table) -> usize {
        self.read().len(table)
    }

    /// Whether every table is empty.
    pub fn is_empty(&self) -> bool {
        self.read().records() == 0
    }
}

impl TableStore for MemTableStore {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.read().get(table, key))
    }

    async fn commit(&self, batch: Batch) -> Result<()> {
        self.apply_now(batch)
    }

    async fn room(&self) -> Result<()> {
        Ok(())
    }

    fn submit(&self, batch: Batch) -> impl Future<Output = Result<()>> + Send + '_ {
        std::future::ready(self.apply_now(batch))
    }

    fn settled(&self) -> impl Future<Output = Result<()>> + Send + '_ {
        std::future::ready(Ok(()))
    }

    async fn scan(
        &self,
        table: Table,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Bytes)>> {
        Ok(self.read().scan(table, prefix, after, limit))
    }

    async fn hand_over(&self, owner: Arc<dyn TableOwner>) -> Result<()> {
        let (tables, _) = owner.claims();
        // It keeps its copy (it has no snapshots to take from an owner),
        // so a store opened again over it (a restart in a test) can be
        // handed over again.
        if tables.is_empty() {
            return Err(StoreError::Backend("an owner claiming no table".into()));
        }
        Ok(())
    }
}

impl MemTableStore {
    /// A commit, made in the call (nothing is queued).
    fn apply_now(&self, batch: Batch) -> Result<()> {
        let refused = self
            .commits_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| match left {
                0 => None,
                u64::MAX => Some(u64::MAX),
                n => Some(n - 1),
            })
            .is_err();
        if refused {
            return Err(StoreError::Backend(
                "commit refused (simulated crash)".into(),
            ));
        }
        self.tables.write().expect("table lock").apply(batch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn mem_tables_commit_get_scan() {
        let t = MemTableStore::new();
        let mut b = Batch::new();
        for k in ["a/1", "a/2", "a/3", "b/1"] {
            b.put(Table::Manifests, k.as_bytes(), Bytes::from(k.to_string()));
        }
        b.put(Table::Chunks, b"a/9".to_vec(), Bytes::from_static(b"x"));
        t.commit(b).await.unwrap();
        assert_eq!(
            t.get(Table::Manifests, b"a/2").await.unwrap().unwrap(),
            &b"a/2"[..]
        );
        assert!(t.get(Table::Buckets, b"a/2").await.unwrap().is_none());
        let keys = |v: Vec<(Vec<u8>, Bytes)>| {
            v.into_iter()
                .map(|(k, _)| String::from_utf8(k).unwrap())
                .collect::<Vec<_>>()
        };
        let all = t.scan(Table::Manifests, b"a/", None, 10).await.unwrap();
        assert_eq!(keys(all), ["a/1", "a/2", "a/3"]);
        let page = t
            .scan(Table::Manifests, b"a/", Some(b"a/1"), 1)
            .await
            .unwrap();
        assert_eq!(keys(page), ["a/2"]);
        let mut b = Batch::new();
        b.delete(Table::Manifests, b"a/2".to_vec());
        t.commit(b).await.unwrap();
        assert_eq!(t.len(Table::Manifests), 3);
        t.fail_commits_after(Some(0));
        assert!(t.commit(Batch::new()).await.is_err());
        t.fail_commits_after(None);
        t.commit(Batch::new()).await.unwrap();
    }
}
