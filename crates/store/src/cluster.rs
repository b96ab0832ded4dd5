//! The object operations over a set of nodes: chunking, placement, the
//! order of steps that keeps every manifest's chunks present, reads with
//! byte ranges, listing, accounting, and the orphan collector.
//!
//! Today the nodes are [`NodeStore`]s in this process; over the fabric the
//! same calls become requests to the node that placement names, in the same
//! order.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncRead;

use crate::chunking::{AsyncChunker, Chunking};
use crate::data::{ChunkStore, MemChunkStore};
use crate::error::{Result, StoreError};
use crate::fingerprint::Fingerprint;
use crate::manifest::{ChunkRef, Manifest};
use crate::name::{BucketName, ObjectKey};
use crate::node::{now_ms, Condition, NodeStore};
use crate::placement::{NodeId, Placement};
use crate::records::BucketConfig;
use crate::table::{MemTableStore, TableStore};
use crate::usage::Usage;

/// Default longest time from a put's first chunk reference to its manifest
/// commit: 10 minutes.
pub const DEFAULT_PUT_DEADLINE_MS: u64 = 10 * 60 * 1000;

/// What [`ObjectStore::collect_orphans`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrphanReport {
    /// Live manifests counted.
    pub manifests: u64,
    /// Chunk records whose counts were lowered.
    pub chunks_lowered: u64,
    /// Of those, chunks that reached zero and were freed.
    pub chunks_freed: u64,
    /// Chunks that live manifests name but no node holds, or holds with
    /// fewer references than the manifests make. Must never happen at rest;
    /// a delete racing with the collector can list a chunk here falsely, so
    /// it is reported for a second look, not repaired.
    pub dangling: Vec<Fingerprint>,
}

/// An [`ObjectStore`] whose nodes keep everything in memory.
pub type MemObjectStore = ObjectStore<Arc<MemTableStore>, Arc<MemChunkStore>>;

impl MemObjectStore {
    /// A store over nodes `ids`, each with in-memory tables and 8 KiB pages.
    pub async fn in_memory(ids: impl IntoIterator<Item = NodeId>) -> Result<Self> {
        let mut nodes = Vec::new();
        for id in ids {
            let (node, _) = NodeStore::open(
                id,
                Arc::new(MemTableStore::new()),
                Arc::new(MemChunkStore::default()),
            )
            .await?;
            nodes.push(Arc::new(node));
        }
        Self::new(nodes)
    }
}

/// Objects over a set of nodes.
pub struct ObjectStore<T, C> {
    placement: Placement,
    nodes: BTreeMap<NodeId, Arc<NodeStore<T, C>>>,
    put_deadline_ms: u64,
}

impl<T: TableStore, C: ChunkStore> ObjectStore<T, C> {
    /// The store over `nodes` (their ids are the members).
    pub fn new(nodes: impl IntoIterator<Item = Arc<NodeStore<T, C>>>) -> Result<Self> {
        let nodes: BTreeMap<_, _> = nodes.into_iter().map(|n| (n.id(), n)).collect();
        Ok(Self {
            placement: Placement::new(nodes.keys().copied())?,
            nodes,
            put_deadline_ms: DEFAULT_PUT_DEADLINE_MS,
        })
    }

    /// Sets the put deadline (see [`Self::collect_orphans`]).
    pub fn set_put_deadline_ms(&mut self, ms: u64) {
        self.put_deadline_ms = ms;
    }

    /// The placement over the members.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// A member node.
    pub fn node(&self, id: NodeId) -> Result<&Arc<NodeStore<T, C>>> {
        self.nodes.get(&id).ok_or(StoreError::UnknownNode(id))
    }

    /// The member nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<NodeStore<T, C>>> {
        self.nodes.values()
    }

    fn chunk_node(&self, fp: &Fingerprint) -> &NodeStore<T, C> {
        &self.nodes[&self.placement.chunk_node(fp)]
    }

    fn manifest_node(&self, bucket: &BucketName, key: &ObjectKey) -> &NodeStore<T, C> {
        &self.nodes[&self.placement.manifest_node(bucket, key)]
    }

    /// Creates a bucket whose objects are cut with `chunking`.
    pub async fn create_bucket(
        &self,
        bucket: &BucketName,
        chunking: Chunking,
    ) -> Result<BucketConfig> {
        let config = BucketConfig {
            chunking,
            created_unix_ms: now_ms(),
        };
        let node = &self.nodes[&self.placement.bucket_node(bucket)];
        node.create_bucket(bucket, config).await?;
        Ok(config)
    }

    /// A bucket's settings.
    pub async fn bucket(&self, bucket: &BucketName) -> Result<BucketConfig> {
        self.nodes[&self.placement.bucket_node(bucket)]
            .bucket(bucket)
            .await?
            .ok_or_else(|| StoreError::NoSuchBucket(bucket.to_string()))
    }

    /// Every bucket, by name.
    pub async fn buckets(&self) -> Result<Vec<(BucketName, BucketConfig)>> {
        let mut all = Vec::new();
        for n in self.nodes.values() {
            all.extend(n.buckets().await?);
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    /// Deletes an empty bucket. (A put racing with this may leave an object
    /// in a deleted bucket; re-creating the bucket shows it again.)
    pub async fn delete_bucket(&self, bucket: &BucketName) -> Result<()> {
        self.bucket(bucket).await?;
        if !self.list(bucket, "", None, 1).await?.is_empty() {
            return Err(StoreError::BucketNotEmpty(bucket.to_string()));
        }
        self.nodes[&self.placement.bucket_node(bucket)]
            .delete_bucket(bucket)
            .await
    }

    /// Stores an object read from `source`, as a new version of `key` if
    /// `condition` holds. The steps, in this order:
    /// 1. each chunk is put on the node its fingerprint names (stored once,
    ///    else its count raised);
    /// 2. the manifest is committed on the node the key names (conditional,
    ///    atomic);
    /// 3. the replaced version's chunks are released.
    ///
    /// A failure before 2 releases what 1 took. A crash before 2, or
    /// between 2 and 3, leaves counts too high (orphans, for
    /// [`Self::collect_orphans`]), never a manifest naming a missing chunk:
    /// a shared chunk is counted up before it is counted down, so it never
    /// passes through zero.
    pub async fn put<R: AsyncRead + Unpin>(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        source: R,
        condition: Condition,
    ) -> Result<Manifest> {
        let config = self.bucket(bucket).await?;
        // Fail fast on a condition that already fails (it is checked again,
        // atomically, at the commit).
        if !matches!(condition, Condition::Always) {
            let current = self
                .manifest_node(bucket, key)
                .get_manifest(bucket, key)
                .await?;
            condition.check(bucket, key, current.as_ref().map(Manifest::version))?;
        }
        let mut chunker = AsyncChunker::new(source, config.chunking)?;
        let mut refs: Vec<ChunkRef> = Vec::new();
        let started = Instant::now();
        let result = async {
            while let Some(chunk) = chunker.next_chunk().await? {
                if refs.len() == crate::MAX_MANIFEST_CHUNKS {
                    return Err(StoreError::TooManyChunks {
                        limit: crate::MAX_MANIFEST_CHUNKS,
                    });
                }
                // Hashed once, here: the fingerprint places the chunk, and
                // the node in this process takes it as computed from these
                // bytes (over the fabric the node's `put_chunk` verifies).
                let fingerprint = Fingerprint::of(&chunk.data);
                let len = chunk.data.len() as u32;
                self.chunk_node(&fingerprint)
                    .put_hashed_chunk(bucket, fingerprint, chunk.data)
                    .await?;
                refs.push(ChunkRef { fingerprint, len });
            }
            let elapsed_ms = started.elapsed().as_millis() as u64;
            if elapsed_ms > self.put_deadline_ms {
                return Err(StoreError::PutExpired {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    elapsed_ms,
                    limit_ms: self.put_deadline_ms,
                });
            }
            let manifest = Manifest::new(
                bucket.clone(),
                key.clone(),
                0,
                now_ms(),
                config.chunking,
                refs.clone(),
            )?;
            self.manifest_node(bucket, key)
                .put_manifest(manifest, condition)
                .await
        }
        .await;
        match result {
            Ok(put) => {
                if let Some(old) = put.replaced {
                    self.release_all(bucket, old.chunks()).await;
                }
                Ok(put.manifest)
            }
            Err(e) => {
                self.release_all(bucket, &refs).await;
                Err(e)
            }
        }
    }

    /// [`Self::put`] of bytes in memory.
    pub async fn put_bytes(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        data: &[u8],
        condition: Condition,
    ) -> Result<Manifest> {
        self.put(bucket, key, data, condition).await
    }

    /// Releases one reference per entry; failures leave orphans (counts
    /// too high) for the collector, never missing chunks.
    async fn release_all(&self, bucket: &BucketName, chunks: &[ChunkRef]) {
        for c in chunks {
            let _ = self
                .chunk_node(&c.fingerprint)
                .release_chunk(bucket, c.fingerprint)
                .await;
        }
    }

    /// The current manifest of an object.
    pub async fn head(&self, bucket: &BucketName, key: &ObjectKey) -> Result<Manifest> {
        self.manifest_node(bucket, key)
            .get_manifest(bucket, key)
            .await?
            .ok_or_else(|| StoreError::NoSuchObject {
                bucket: bucket.to_string(),
                key: key.to_string(),
            })
    }

    /// A whole object.
    pub async fn get(&self, bucket: &BucketName, key: &ObjectKey) -> Result<(Manifest, Bytes)> {
        self.get_range(bucket, key, 0, u64::MAX).await
    }

    /// Bytes `offset .. offset + len` of an object (cut at its end), all
    /// from one version. If a newer version released a chunk while this
    /// read was under way, the read starts again on the newer version (up
    /// to three times, then [`StoreError::Changed`]).
    pub async fn get_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(Manifest, Bytes)> {
        let mut last = 0;
        for _ in 0..3 {
            let m = self.head(bucket, key).await?;
            last = m.version();
            match self.read_range(&m, offset, len).await {
                Ok(b) => return Ok((m, b)),
                Err(StoreError::ChunkMissing(fp)) => {
                    let now = self.head(bucket, key).await?;
                    if now.version() == m.version() {
                        return Err(StoreError::ChunkMissing(fp));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Changed {
            bucket: bucket.to_string(),
            key: key.to_string(),
            read: last,
        })
    }

    async fn read_range(&self, m: &Manifest, offset: u64, len: u64) -> Result<Bytes> {
        let pieces = m.locate(offset, len)?;
        let total: u64 = pieces.iter().map(|p| u64::from(p.len)).sum();
        let mut out = BytesMut::with_capacity(total as usize);
        for p in pieces {
            let fingerprint = p.chunk.fingerprint;
            let data = self
                .chunk_node(&fingerprint)
                .read_chunk(fingerprint)
                .await?;
            // The chunk table's length and the manifest's agree unless one
            // of them is damaged: an error then, not a panic.
            if data.len() != p.chunk.len as usize {
                return Err(StoreError::InvalidChunk {
                    fingerprint,
                    reason: format!(
                        "{} bytes at its node, {} in the manifest of {}/{} version {}",
                        data.len(),
                        p.chunk.len,
                        m.bucket(),
                        m.key(),
                        m.version()
                    ),
                });
            }
            let start = p.offset_in_chunk as usize;
            out.extend_from_slice(&data[start..start + p.len as usize]);
        }
        Ok(out.freeze())
    }

    /// Deletes an object if `condition` holds: the manifest goes first (a
    /// tombstone keeps its version), then its chunks are released.
    pub async fn delete(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> Result<Manifest> {
        let m = self
            .manifest_node(bucket, key)
            .delete_manifest(bucket, key, condition)
            .await?;
        self.release_all(bucket, m.chunks()).await;
        Ok(m)
    }

    /// Up to `limit` current manifests of `bucket` with keys starting with
    /// `prefix`, after `after`, in key order (gathered from every node).
    pub async fn list(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<Vec<Manifest>> {
        let mut all = Vec::new();
        for n in self.nodes.values() {
            all.extend(n.list_manifests(bucket, prefix, after, limit).await?);
        }
        all.sort_by(|a, b| a.key().cmp(b.key()));
        all.truncate(limit);
        Ok(all)
    }

    /// The cluster's space figures (the sum over nodes).
    pub fn usage(&self) -> Usage {
        let mut total = Usage::default();
        for n in self.nodes.values() {
            total.merge(&n.usage());
        }
        total
    }

    /// Finds chunk references no live manifest makes (left by a crash or a
    /// failed release) and drops them, freeing chunks that reach zero.
    ///
    /// Mark: count the references every live manifest makes, per chunk and
    /// bucket. Sweep: lower every chunk record's counts to those, but only
    /// records with no reference added in the last `2 x put deadline`: a put
    /// that referenced a chunk before that either committed its manifest
    /// before the mark began (so the mark counted it) or expired and
    /// released its references. Counts are never raised; a chunk with fewer
    /// references than the manifests make is reported as dangling.
    pub async fn collect_orphans(&self) -> Result<OrphanReport> {
        let cutoff = now_ms().saturating_sub(self.put_deadline_ms.saturating_mul(2));
        let mut report = OrphanReport::default();
        let mut expected: HashMap<Fingerprint, BTreeMap<BucketName, u64>> = HashMap::new();
        for n in self.nodes.values() {
            // One page of manifests at a time: the mark keeps only counts.
            n.for_each_manifest(|m| {
                report.manifests += 1;
                for c in m.chunks() {
                    *expected
                        .entry(c.fingerprint)
                        .or_default()
                        .entry(m.bucket().clone())
                        .or_default() += 1;
                }
            })
            .await?;
        }
        let mut seen = HashMap::new();
        for n in self.nodes.values() {
            for (fp, info) in n.chunks().await? {
                let want = expected.get(&fp).cloned().unwrap_or_default();
                let too_high = info
                    .refs
                    .iter()
                    .any(|(b, &c)| c > want.get(b).copied().unwrap_or(0));
                if too_high {
                    if let Some(r) = n.lower_refs(fp, &want, cutoff).await? {
                        report.chunks_lowered += 1;
                        if r.freed.is_some() {
                            report.chunks_freed += 1;
                        }
                    }
                }
                seen.insert(fp, info.refs);
            }
        }
        for (fp, want) in &expected {
            let have = seen.get(fp);
            let short = want
                .iter()
                .any(|(b, &w)| have.and_then(|h| h.get(b)).copied().unwrap_or(0) < w);
            if short {
                report.dangling.push(*fp);
            }
        }
        report.dangling.sort();
        Ok(report)
    }
}
