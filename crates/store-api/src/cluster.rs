//! The object operations over a set of nodes: chunking, placement, the
//! order of steps that keeps every manifest's chunks present, reads with
//! byte ranges, listing, accounting, and the orphan collector.
//!
//! The nodes are anything that implements [`StoreNode`]: [`NodeStore`]s in
//! this process, or [`crate::RemoteNode`]s across the fabric; the calls and
//! their order are the same.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{FuturesUnordered, Stream, StreamExt, TryStreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::bucket::BucketConfig;
use crate::chunking::{AsyncChunker, Chunking, CutOutcome};
use crate::error::{Result, StoreError};
use crate::fingerprint::Fingerprint;
use crate::manifest::{ChunkRef, ChunkRole, Manifest};
use crate::name::{BucketName, ObjectKey};
use crate::ops::{now_ms, Condition, ManifestWithChunk};
use crate::parquet_select::{ColumnFilter, ColumnPlan};
use crate::placement::{NodeId, Placement};
use crate::put_pipeline::ChunkPuts;
use crate::remote::{StoreNode, MAX_PAGE_ITEMS};
use crate::usage::Usage;

/// Default longest time from a put's first chunk reference to its manifest
/// commit: 10 minutes.
pub const DEFAULT_PUT_DEADLINE_MS: u64 = 10 * 60 * 1000;

/// Default bound on the chunk bytes a put or a read has in flight to the
/// nodes at once: 32 MiB (eight 1 MiB chunks a node on a 4-node cluster
/// keep every node's device busy, and it bounds the memory a transfer
/// holds).
pub const DEFAULT_IN_FLIGHT_BYTES: u64 = 32 << 20;

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

/// Objects over a set of nodes.
pub struct ObjectStore<N> {
    placement: Placement,
    nodes: BTreeMap<NodeId, Arc<N>>,
    put_deadline_ms: u64,
    in_flight_bytes: u64,
    /// Bucket settings seen lately, so a small put or a head of a missing
    /// key does not ask the bucket's node every time (see
    /// [`BUCKET_CONFIG_TTL`]).
    bucket_configs: Mutex<HashMap<BucketName, (Instant, BucketConfig)>>,
}

/// How long a bucket's settings, once read, are trusted without asking its
/// node again. A bucket's chunking never changes while it exists, so the
/// cache can only be wrong about a bucket deleted (and maybe re-created)
/// by another client within this time: a put then lands in the deleted
/// bucket, as it can anyway when it races with the delete (see
/// [`ObjectStore::delete_bucket`]), and a re-created bucket's first puts
/// are cut with the old chunking, which their manifests record. Short, so
/// such a window closes fast; long enough that a stream of small puts asks
/// the bucket's node once a second instead of once per object.
pub const BUCKET_CONFIG_TTL: Duration = Duration::from_secs(1);
/// Most bucket settings cached at once (the cache is emptied when full).
const MAX_CACHED_BUCKETS: usize = 1024;

/// Largest object put in one call with its chunk kept on its manifest's
/// node ([`Manifest::with_chunk_at_manifest_node`]): an object of one
/// chunk up to this size. Such an object costs one call to put and one to
/// get, instead of two each; its chunk dedups only against chunks on that
/// node. 64 KiB: a small file's size (the tree `quarry bench small`
/// copies holds 5-15 KB files), while objects of one chunk larger than
/// this (up to the default 1 MiB chunk) stay placed by fingerprint, where
/// dedup across keys pays and a second call costs little beside moving
/// their bytes.
pub const MAX_SMALL_OBJECT_BYTES: usize = 64 << 10;

/// Releases a put or delete keeps in flight at once.
const RELEASES_IN_FLIGHT: usize = 32;
/// Most chunk reads a stream keeps in flight, whatever the byte bound.
const MAX_READS_IN_FLIGHT: usize = 256;

/// Bytes `offset .. offset + len` (cut at the end) of an object whose
/// whole bytes `data` came with its manifest `m`.
fn slice_of_whole(m: &Manifest, data: &Bytes, offset: u64, len: u64) -> Result<Bytes> {
    if data.len() as u64 != m.size() {
        let fingerprint = m
            .chunks()
            .first()
            .map_or(Fingerprint([0; 32]), |c| c.fingerprint);
        return Err(StoreError::InvalidChunk {
            fingerprint,
            reason: format!(
                "{} bytes came with the manifest of {}/{} version {}, which says {}",
                data.len(),
                m.bucket(),
                m.key(),
                m.version(),
                m.size()
            ),
        });
    }
    if offset > m.size() {
        return Err(StoreError::RangeOutOfBounds {
            offset,
            size: m.size(),
        });
    }
    let end = offset.saturating_add(len).min(m.size());
    Ok(data.slice(offset as usize..end as usize))
}

/// A failed release leaves a count too high, for the orphan collector; it
/// is not the caller's failure, so it is only logged.
fn note_failed_release(e: &StoreError) {
    tracing::warn!("a chunk release failed and left an orphan reference for `quarry gc`: {e}");
}

impl<N: StoreNode> ObjectStore<N> {
    /// The store over `nodes` (their ids are the members).
    pub fn new(nodes: impl IntoIterator<Item = Arc<N>>) -> Result<Self> {
        let nodes: BTreeMap<_, _> = nodes.into_iter().map(|n| (n.id(), n)).collect();
        Ok(Self {
            placement: Placement::new(nodes.keys().copied())?,
            nodes,
            put_deadline_ms: DEFAULT_PUT_DEADLINE_MS,
            in_flight_bytes: DEFAULT_IN_FLIGHT_BYTES,
            bucket_configs: Mutex::new(HashMap::new()),
        })
    }

    /// Sets the put deadline (see [`Self::collect_orphans`]).
    pub fn set_put_deadline_ms(&mut self, ms: u64) {
        self.put_deadline_ms = ms;
    }

    /// Sets the bound on chunk bytes in flight per transfer (at least one
    /// chunk is always allowed).
    pub fn set_in_flight_bytes(&mut self, bytes: u64) {
        self.in_flight_bytes = bytes.max(1);
    }

    /// The placement over the members.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// A member node.
    pub fn node(&self, id: NodeId) -> Result<&Arc<N>> {
        self.nodes.get(&id).ok_or(StoreError::UnknownNode(id))
    }

    /// The member nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<N>> {
        self.nodes.values()
    }

    fn chunk_node(&self, fp: &Fingerprint) -> &N {
        &self.nodes[&self.placement.chunk_node(fp)]
    }

    fn manifest_node(&self, bucket: &BucketName, key: &ObjectKey) -> &N {
        &self.nodes[&self.placement.manifest_node(bucket, key)]
    }

    /// The node that holds chunk `fp` of the object `m` describes: its
    /// manifest's node if `m` keeps its chunk there, else the node the
    /// fingerprint names.
    fn chunk_home(&self, m: &Manifest, fp: &Fingerprint) -> &N {
        &self.nodes[&self.placement.chunk_holder(m, fp)]
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
        self.remember_bucket(bucket, config);
        Ok(config)
    }

    /// A bucket's settings, as its node holds them now.
    pub async fn bucket(&self, bucket: &BucketName) -> Result<BucketConfig> {
        let config = self.nodes[&self.placement.bucket_node(bucket)]
            .bucket(bucket)
            .await?;
        match config {
            Some(config) => {
                self.remember_bucket(bucket, config);
                Ok(config)
            }
            None => {
                self.forget_bucket(bucket);
                Err(StoreError::NoSuchBucket(bucket.to_string()))
            }
        }
    }

    /// A bucket's settings, from the cache if read within
    /// [`BUCKET_CONFIG_TTL`], else from its node.
    pub async fn bucket_cached(&self, bucket: &BucketName) -> Result<BucketConfig> {
        let cached = self
            .bucket_configs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(bucket)
            .filter(|(at, _)| at.elapsed() < BUCKET_CONFIG_TTL)
            .map(|(_, config)| *config);
        match cached {
            Some(config) => Ok(config),
            None => self.bucket(bucket).await,
        }
    }

    fn remember_bucket(&self, bucket: &BucketName, config: BucketConfig) {
        let mut cache = self
            .bucket_configs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_CACHED_BUCKETS {
            cache.clear();
        }
        cache.insert(bucket.clone(), (Instant::now(), config));
    }

    fn forget_bucket(&self, bucket: &BucketName) {
        self.bucket_configs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(bucket);
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
        self.forget_bucket(bucket);
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
    /// A failure before 2 releases what 1 took; so does a commit the
    /// manifest's node refused, but not one whose answer was lost (it may
    /// have been applied). A crash before 2, or
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
        let config = self.bucket_cached(bucket).await?;
        let mut chunker = AsyncChunker::new(source, config.chunking)?;
        if let Some(chunk) = chunker.take_single(MAX_SMALL_OBJECT_BYTES).await? {
            let outcome = chunker.outcome();
            return self
                .put_small(bucket, key, outcome, chunk.data, condition)
                .await;
        }
        // Fail fast on a condition that already fails (it is checked again,
        // atomically, at the commit).
        if !matches!(condition, Condition::Always) {
            let current = self
                .manifest_node(bucket, key)
                .get_manifest(bucket, key)
                .await?;
            condition.check(bucket, key, current.as_ref().map(Manifest::version))?;
        }
        // Every chunk whose put succeeded: what a failure must release.
        let mut taken: Vec<ChunkRef> = Vec::new();
        let mut commit_sent = false;
        let started = Instant::now();
        let result = async {
            let node_of = |fp: &Fingerprint| self.chunk_node(fp);
            let puts = ChunkPuts {
                bucket,
                node_of: &node_of,
                in_flight_bytes_max: self.in_flight_bytes,
                chunks_max: crate::MAX_MANIFEST_CHUNKS,
            };
            let refs = puts.run(&mut chunker, &mut taken).await?;
            debug_assert_eq!(taken.len(), refs.len());
            let elapsed_ms = started.elapsed().as_millis() as u64;
            if elapsed_ms > self.put_deadline_ms {
                return Err(StoreError::PutExpired {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    elapsed_ms,
                    limit_ms: self.put_deadline_ms,
                });
            }
            let outcome = chunker.outcome();
            let manifest = Manifest::new(
                bucket.clone(),
                key.clone(),
                0,
                now_ms(),
                outcome.chunking,
                refs,
            )?;
            let manifest = with_outcome(manifest, outcome, bucket, key)?;
            commit_sent = true;
            self.manifest_node(bucket, key)
                .put_manifest(manifest, condition)
                .await
        }
        .await;
        match result {
            Ok(put) => {
                if let Some(old) = put.replaced {
                    self.release_manifest_chunks(&old).await;
                }
                Ok(put.manifest)
            }
            // The commit was sent and its answer lost: it may have been
            // applied, and then the chunks are the object's. Keep the
            // references (at worst orphans, for the collector); releasing
            // them could leave a committed manifest naming freed chunks.
            Err(e @ StoreError::Transport { .. }) if commit_sent => Err(e),
            Err(e) => {
                self.release_all(bucket, &taken).await;
                Err(e)
            }
        }
    }

    /// A put of an object of one chunk of at most
    /// [`MAX_SMALL_OBJECT_BYTES`], in one call: the manifest's node keeps
    /// the chunk and commits the manifest in one step (nothing to undo on
    /// failure: the step is atomic), and releases a replaced version's
    /// chunk when that was kept there too.
    async fn put_small(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        outcome: CutOutcome,
        data: Bytes,
        condition: Condition,
    ) -> Result<Manifest> {
        let chunk = ChunkRef {
            fingerprint: Fingerprint::of(&data),
            len: data.len() as u32,
        };
        let manifest = Manifest::new(
            bucket.clone(),
            key.clone(),
            0,
            now_ms(),
            outcome.chunking,
            vec![chunk],
        )?
        .with_chunk_at_manifest_node()?;
        let manifest = with_outcome(manifest, outcome, bucket, key)?;
        let put = self
            .manifest_node(bucket, key)
            .put_with_chunk(manifest, condition, data)
            .await?;
        if let Some(old) = put.replaced.filter(|_| !put.replaced_released) {
            self.release_manifest_chunks(&old).await;
        }
        Ok(put.manifest)
    }

    /// Releases the references a replaced or deleted version `m` held,
    /// each at the node that holds the chunk.
    async fn release_manifest_chunks(&self, m: &Manifest) {
        let at = m
            .chunks()
            .iter()
            .map(|c| (self.chunk_home(m, &c.fingerprint), c.fingerprint));
        self.release_at(m.bucket(), at).await;
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

    /// Releases one reference per entry (chunks placed by fingerprint),
    /// several at a time; failures leave orphans (counts too high) for the
    /// collector, never missing chunks.
    async fn release_all(&self, bucket: &BucketName, chunks: &[ChunkRef]) {
        let at = chunks
            .iter()
            .map(|c| (self.chunk_node(&c.fingerprint), c.fingerprint));
        self.release_at(bucket, at).await;
    }

    /// Releases one reference to each chunk at the node given with it,
    /// several at a time (see [`Self::release_all`]).
    async fn release_at<'a>(
        &'a self,
        bucket: &BucketName,
        chunks: impl Iterator<Item = (&'a N, Fingerprint)>,
    ) {
        let mut pending = FuturesUnordered::new();
        for (node, fingerprint) in chunks {
            if pending.len() == RELEASES_IN_FLIGHT {
                if let Some(Err(e)) = pending.next().await {
                    note_failed_release(&e);
                }
            }
            pending.push(node.release_chunk(bucket, fingerprint));
        }
        while let Some(released) = pending.next().await {
            if let Err(e) = released {
                note_failed_release(&e);
            }
        }
    }

    /// The current manifest of an object.
    pub async fn head(&self, bucket: &BucketName, key: &ObjectKey) -> Result<Manifest> {
        if let Some(m) = self
            .manifest_node(bucket, key)
            .get_manifest(bucket, key)
            .await?
        {
            return Ok(m);
        }
        // Say which is missing: the bucket, or the object in it.
        self.bucket_cached(bucket).await?;
        Err(StoreError::NoSuchObject {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    /// The current manifest of an object and, when its one chunk is kept
    /// with it, that chunk's bytes: a small object's get in one call.
    pub async fn head_with_chunk(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> Result<ManifestWithChunk> {
        if let Some(found) = self
            .manifest_node(bucket, key)
            .get_with_chunk(bucket, key)
            .await?
        {
            return Ok(found);
        }
        // Say which is missing: the bucket, or the object in it.
        self.bucket_cached(bucket).await?;
        Err(StoreError::NoSuchObject {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    /// A whole object, in memory (its size is the caller's bound: large
    /// objects go through [`Self::get_to`] or byte ranges).
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
        let (m, pieces) = self.get_range_pieces(bucket, key, offset, len).await?;
        Ok((m, quarry_proto::join_pieces(&pieces)))
    }

    /// The top-level `columns` of a Parquet object stored page by page
    /// (`parquet` or `auto` chunking), as a valid Parquet file of only
    /// them: its footer and those columns' pages are read, nothing else
    /// (`bytes_read` says how much). Row groups whose footer statistics
    /// rule out every row for one of `filters` are not read. All from one
    /// version of the object.
    pub async fn get_columns(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        columns: &[String],
        filters: &[ColumnFilter],
    ) -> Result<ColumnRead> {
        let m = self.head(bucket, key).await?;
        let not_parquet = |reason: String| StoreError::Columns {
            object: format!("{bucket}/{key}"),
            reason,
        };
        let Some(layout) = m.parquet_layout() else {
            return Err(not_parquet(
                "not stored page by page (a bucket with parquet or auto chunking keeps \
                 Parquet files so); read it whole"
                    .into(),
            ));
        };
        let mut offset = 0u64;
        let mut footer = None;
        for (chunk, role) in m.chunks().iter().zip(&layout.roles) {
            if *role == ChunkRole::Footer {
                footer = Some((offset, u64::from(chunk.len)));
            }
            offset += u64::from(chunk.len);
        }
        let Some((footer_at, footer_len)) = footer else {
            return Err(not_parquet("its manifest names no footer".into()));
        };
        let m = &m;
        let read = |at: u64, len: u64| async move {
            let pieces: Vec<Bytes> = self.stream_manifest(m, at, len)?.try_collect().await?;
            Ok::<Bytes, StoreError>(quarry_proto::join_pieces(&pieces))
        };
        let footer = read(footer_at, footer_len).await?;
        let plan = ColumnPlan::filtered(&footer, m.size(), columns, filters)
            .map_err(|e| not_parquet(e.to_string()))?;
        let chosen_bytes: u64 = plan.ranges().iter().map(|r| r.end - r.start).sum();
        if chosen_bytes > MAX_COLUMN_READ_BYTES {
            return Err(not_parquet(format!(
                "the columns asked hold {chosen_bytes} bytes, more than a column read \
                 assembles in memory ({MAX_COLUMN_READ_BYTES}); ask for fewer columns"
            )));
        }
        // Column chunks are fetched several at a time, in order.
        let fetches: Vec<_> = plan
            .ranges()
            .iter()
            .map(|range| read(range.start, range.end - range.start))
            .collect();
        let fetched: Vec<Bytes> = futures::stream::iter(fetches)
            .buffered(COLUMN_CHUNKS_IN_FLIGHT)
            .try_collect()
            .await?;
        let bytes_read = footer_len + chosen_bytes;
        let file = plan
            .assemble(&fetched)
            .map_err(|e| not_parquet(e.to_string()))?;
        Ok(ColumnRead {
            file,
            bytes_read,
            object_bytes: m.size(),
            row_groups: plan.row_groups(),
            row_groups_read: plan.row_groups_read(),
        })
    }

    /// [`ObjectStore::get_range`] as the chunks' bytes in order, not joined
    /// into one buffer: a reader that serves the range a piece at a time
    /// (the mount's read-ahead) makes no copy of it.
    pub async fn get_range_pieces(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(Manifest, Vec<Bytes>)> {
        let mut last = 0;
        for _ in 0..3 {
            let found = self.head_with_chunk(bucket, key).await?;
            let m = found.manifest;
            last = m.version();
            if let Some(data) = found.chunk {
                let bytes = slice_of_whole(&m, &data, offset, len)?;
                return Ok((m, vec![bytes]));
            }
            let read: Result<Vec<Bytes>> =
                self.stream_manifest(&m, offset, len)?.try_collect().await;
            match read {
                Ok(pieces) => return Ok((m, pieces)),
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

    /// Bytes `offset .. offset + len` of the version `m` describes (cut at
    /// its end), as a stream of pieces in order, fetched several chunks
    /// ahead (up to the in-flight bound). If a newer version releases a
    /// chunk of `m` meanwhile, the stream ends with
    /// [`StoreError::ChunkMissing`].
    pub fn stream_manifest<'a>(
        &'a self,
        m: &'a Manifest,
        offset: u64,
        len: u64,
    ) -> Result<impl Stream<Item = Result<Bytes>> + Send + 'a> {
        let pieces = m.locate(offset, len)?;
        let max_chunk = m
            .chunks()
            .iter()
            .map(|c| u64::from(c.len))
            .max()
            .unwrap_or(1);
        let ahead = (self.in_flight_bytes / max_chunk.max(1)).clamp(1, MAX_READS_IN_FLIGHT as u64);
        let fetches = pieces.into_iter().map(move |p| async move {
            let fingerprint = p.chunk.fingerprint;
            let data = self
                .chunk_home(m, &fingerprint)
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
            Ok(data.slice(start..start + p.len as usize))
        });
        Ok(futures::stream::iter(fetches).buffered(ahead as usize))
    }

    /// Writes bytes `offset .. offset + len` of an object (cut at its end)
    /// to `out` as they arrive, all from one version, and returns that
    /// version's manifest. Memory stays within the in-flight bound however
    /// large the object. A newer version that releases a chunk of the one
    /// being read fails the read with [`StoreError::Changed`] (the bytes
    /// already written stay written).
    pub async fn get_to<W: AsyncWrite + Unpin>(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        offset: u64,
        len: u64,
        out: &mut W,
    ) -> Result<Manifest> {
        let m = self.head(bucket, key).await?;
        let failed = {
            let mut stream = self.stream_manifest(&m, offset, len)?;
            let mut failed = None;
            while let Some(piece) = stream.next().await {
                match piece {
                    Ok(bytes) => out.write_all(&bytes).await?,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            failed
        };
        if let Some(e) = failed {
            match e {
                StoreError::ChunkMissing(fp) => {
                    if self.head(bucket, key).await?.version() != m.version() {
                        return Err(StoreError::Changed {
                            bucket: bucket.to_string(),
                            key: key.to_string(),
                            read: m.version(),
                        });
                    }
                    return Err(StoreError::ChunkMissing(fp));
                }
                e => return Err(e),
            }
        }
        out.flush().await?;
        Ok(m)
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
        self.release_manifest_chunks(&m).await;
        Ok(m)
    }

    /// Up to `limit` current manifests of `bucket` with keys starting with
    /// `prefix`, after `after`, in key order (gathered from every node, one
    /// page of at most [`MAX_PAGE_ITEMS`] per node per round).
    pub async fn list(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<Vec<Manifest>> {
        let mut out: Vec<Manifest> = Vec::new();
        let mut cursor = after.cloned();
        while out.len() < limit {
            let want = (limit - out.len()).min(MAX_PAGE_ITEMS);
            let mut round: Vec<Manifest> = Vec::new();
            let mut any_full = false;
            // Every node at once: a listing (and the mount's lookup of a
            // missing name, which asks whether it is a directory) waits for
            // the slowest node once, not for each in turn.
            let pages = futures::future::try_join_all(
                self.nodes
                    .values()
                    .map(|n| n.list_manifests(bucket, prefix, cursor.as_ref(), want)),
            )
            .await?;
            for page in pages {
                any_full |= page.len() == want;
                round.extend(page);
            }
            round.sort_by(|a, b| a.key().cmp(b.key()));
            // Keys past the cut are fetched again next round, after the cursor.
            let cut = round.len() > want;
            round.truncate(want);
            let Some(last) = round.last() else { break };
            cursor = Some(last.key().clone());
            out.extend(round);
            // A node that returned fewer than asked had nothing more after
            // the cursor; if none filled its page and nothing was cut, the
            // listing is complete.
            if !any_full && !cut {
                break;
            }
        }
        Ok(out)
    }

    /// The cluster's space figures (the sum over nodes).
    pub async fn usage(&self) -> Result<Usage> {
        let mut total = Usage::default();
        for n in self.nodes.values() {
            total.merge(&n.usage().await?);
        }
        Ok(total)
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
        // Keyed by the node that holds the chunk: a chunk kept with a small
        // object's manifest lives there, and the same bytes may also live
        // where their fingerprint places them.
        let mut expected: HashMap<(NodeId, Fingerprint), BTreeMap<BucketName, u64>> =
            HashMap::new();
        for n in self.nodes.values() {
            // One page of manifests at a time: the mark keeps only counts.
            let mut cursor = None;
            loop {
                let (page, next) = n.manifests_page(cursor, MAX_PAGE_ITEMS).await?;
                for m in &page {
                    report.manifests += 1;
                    for c in m.chunks() {
                        let home = if m.chunk_at_manifest_node() {
                            n.id()
                        } else {
                            self.placement.chunk_node(&c.fingerprint)
                        };
                        *expected
                            .entry((home, c.fingerprint))
                            .or_default()
                            .entry(m.bucket().clone())
                            .or_default() += 1;
                    }
                }
                match next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        let mut seen = HashMap::new();
        for n in self.nodes.values() {
            let mut after = None;
            loop {
                let page = n.chunks_page(after, MAX_PAGE_ITEMS).await?;
                let Some((last, _)) = page.last() else { break };
                after = Some(*last);
                for (fp, info) in page {
                    let want = expected.get(&(n.id(), fp)).cloned().unwrap_or_default();
                    let too_high = info
                        .refs
                        .iter()
                        .any(|(b, &c)| c > want.get(b).copied().unwrap_or(0));
                    if too_high {
                        if let Some(r) = n.lower_refs(fp, want, cutoff).await? {
                            report.chunks_lowered += 1;
                            if r.freed.is_some() {
                                report.chunks_freed += 1;
                            }
                        }
                    }
                    seen.insert((n.id(), fp), info.refs);
                }
            }
        }
        for ((node, fp), want) in &expected {
            let have = seen.get(&(*node, *fp));
            let short = want
                .iter()
                .any(|(b, &w)| have.and_then(|h| h.get(b)).copied().unwrap_or(0) < w);
            if short {
                report.dangling.push(*fp);
            }
        }
        report.dangling.sort();
        report.dangling.dedup();
        Ok(report)
    }
}

/// Records how a put's object was cut: the Parquet layout, and the warning
/// (logged too) for a file that looked like Parquet and was not cut as one.
fn with_outcome(
    manifest: Manifest,
    outcome: CutOutcome,
    bucket: &BucketName,
    key: &ObjectKey,
) -> Result<Manifest> {
    let mut manifest = manifest;
    if let Some(layout) = outcome.layout {
        manifest = manifest.with_parquet_layout(layout)?;
    }
    if let Some(note) = outcome.note {
        tracing::warn!("put {bucket}/{key}: {note}");
        manifest = manifest.with_note(&note);
    }
    Ok(manifest)
}

/// Most bytes of column chunks one [`ObjectStore::get_columns`] reads
/// (it builds the file in memory).
pub const MAX_COLUMN_READ_BYTES: u64 = 4 << 30;
/// Column chunks [`ObjectStore::get_columns`] fetches at once.
const COLUMN_CHUNKS_IN_FLIGHT: usize = 8;

/// What [`ObjectStore::get_columns`] read.
#[derive(Debug, Clone)]
pub struct ColumnRead {
    /// A Parquet file of the chosen columns.
    pub file: Vec<u8>,
    /// Bytes read from the cluster: the footer and the chosen pages.
    pub bytes_read: u64,
    /// The whole object's size.
    pub object_bytes: u64,
    /// Row groups in the file.
    pub row_groups: usize,
    /// Row groups read (the rest were ruled out by the filters).
    pub row_groups_read: usize,
}
