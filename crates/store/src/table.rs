//! Where the store keeps its small records: the [`TableStore`] trait, and
//! [`MemTableStore`], the in-memory one.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use bytes::Bytes;

use crate::error::{Result, StoreError};

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

    /// Up to `limit` records with keys starting with `prefix` and greater
    /// than `after`, in key order.
    fn scan(
        &self,
        table: Table,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, Bytes)>>> + Send;
}

impl<T: TableStore> TableStore for std::sync::Arc<T> {
    fn get(&self, table: Table, key: &[u8]) -> impl Future<Output = Result<Option<Bytes>>> + Send {
        (**self).get(table, key)
    }
    fn commit(&self, batch: Batch) -> impl Future<Output = Result<()>> + Send {
        (**self).commit(batch)
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
}

/// Tables in memory: a `BTreeMap` per table behind a lock. A commit applies
/// the whole batch under the write lock, so it is atomic; "durable" here
/// means "for as long as this value lives", which is what tests of crash
/// ordering need: drop the node's store, open a new one over the same
/// `MemTableStore`, and it sees exactly the committed batches. Commits can be
/// made to fail after a count ([`Self::fail_commits_after`]) to simulate a
/// crash between two steps.
#[derive(Debug, Default)]
pub struct MemTableStore {
    tables: RwLock<BTreeMap<(Table, Vec<u8>), Bytes>>,
    /// Commits left before they start failing (`u64::MAX`: never).
    commits_left: AtomicU64,
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

    /// Number of records in `table`.
    pub fn len(&self, table: Table) -> usize {
        self.tables
            .read()
            .expect("table lock")
            .keys()
            .filter(|(t, _)| *t == table)
            .count()
    }

    /// Whether every table is empty.
    pub fn is_empty(&self) -> bool {
        self.tables.read().expect("table lock").is_empty()
    }
}

impl TableStore for MemTableStore {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self
            .tables
            .read()
            .expect("table lock")
            .get(&(table, key.to_vec()))
            .cloned())
    }

    async fn commit(&self, batch: Batch) -> Result<()> {
        let left = self.commits_left.load(Ordering::SeqCst);
        if left == 0 {
            return Err(StoreError::Backend(
                "commit refused (simulated crash)".into(),
            ));
        }
        if left != u64::MAX {
            self.commits_left.fetch_sub(1, Ordering::SeqCst);
        }
        let mut tables = self.tables.write().expect("table lock");
        for op in batch.into_ops() {
            match op {
                Op::Put { table, key, value } => {
                    tables.insert((table, key), value);
                }
                Op::Delete { table, key } => {
                    tables.remove(&(table, key));
                }
            }
        }
        Ok(())
    }

    async fn scan(
        &self,
        table: Table,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Bytes)>> {
        use std::ops::Bound;
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded((table, a.to_vec())),
            _ => Bound::Included((table, prefix.to_vec())),
        };
        let tables = self.tables.read().expect("table lock");
        Ok(tables
            .range((start, Bound::Unbounded))
            .take_while(|((t, k), _)| *t == table && k.starts_with(prefix))
            .take(limit)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect())
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
