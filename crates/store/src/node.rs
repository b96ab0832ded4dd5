//! One node's part of the store: its chunk table (Multes++ Algorithm 1,
//! generalised to chunks), its manifest table and its bucket records, over
//! a [`TableStore`] and a [`ChunkStore`].

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::Mutex as AsyncMutex;

use crate::data::{ChunkCheck, ChunkStore};
use crate::records::{manifest_key, manifest_prefix, ChunkRecord, KeyRecord};
use crate::table::{Batch, Table, TableStore};
use quarry_store_api::check_chunk_len;
use quarry_store_api::Fingerprint;
use quarry_store_api::Manifest;
use quarry_store_api::NodeId;
use quarry_store_api::Usage;
use quarry_store_api::{
    check_small_put, now_ms, BucketConfig, ChunkInfo, ChunkLocation, ChunkPut, ChunkRelease,
    Condition, ManifestPut, ManifestWithChunk, SmallPut, StoreNode, MAX_PAGE_ITEMS,
};
use quarry_store_api::{BucketName, ObjectKey};
use quarry_store_api::{Result, StoreError};

/// Lock stripes per table: a put or release holds the stripe of its
/// fingerprint (or key) across read, change and commit, so two updates of
/// one record never interleave, and updates of different records rarely wait.
const STRIPES: usize = 1024;
/// Records per page of a full-table scan.
const SCAN_PAGE: usize = 1024;

impl From<ChunkRecord> for ChunkInfo {
    fn from(r: ChunkRecord) -> Self {
        Self {
            location: r.location,
            len: r.len,
            refcount: r.refcount(),
            refs: r.refs,
            touched_unix_ms: r.touched_unix_ms,
        }
    }
}

/// A chunk reference added to a batch not yet committed
/// ([`NodeStore::stage_chunk`]): what to undo if the commit fails and what
/// to count once it succeeds.
struct StagedChunk {
    /// The extent written for a chunk new here (trimmed if the commit
    /// fails).
    written: Option<ChunkLocation>,
    len: u32,
    /// The first reference of its bucket.
    first_in_bucket: bool,
}

/// How many times a one-call get reads the manifest again when the chunk
/// kept with it was released under it by a newer version.
const GET_WITH_CHUNK_TRIES: usize = 3;

/// What [`NodeStore::open`] found and repaired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Chunk records.
    pub chunks: u64,
    /// Live manifests.
    pub manifests: u64,
    /// Extents no chunk record named (written before a crash prevented the
    /// record's commit, or left when a crash came between a record's
    /// deletion and its trim), now trimmed.
    pub orphan_extents_trimmed: u64,
}

/// One node's tables and chunk bytes.
pub struct NodeStore<T, C> {
    id: NodeId,
    tables: T,
    data: C,
    chunk_locks: Box<[AsyncMutex<()>]>,
    key_locks: Box<[AsyncMutex<()>]>,
    usage: Mutex<Usage>,
}

impl<T: TableStore, C: ChunkStore> NodeStore<T, C> {
    /// Opens node `id`'s store: reads the tables to rebuild the space
    /// figures, and trims extents that no chunk record names. Nothing else
    /// may use `tables` or `data` while this runs.
    pub async fn open(id: NodeId, tables: T, data: C) -> Result<(Self, Recovery)> {
        let store = Self {
            id,
            tables,
            data,
            chunk_locks: (0..STRIPES).map(|_| AsyncMutex::new(())).collect(),
            key_locks: (0..STRIPES).map(|_| AsyncMutex::new(())).collect(),
            usage: Mutex::default(),
        };
        let mut recovery = Recovery::default();
        let mut usage = Usage::default();
        let mut named = HashSet::new();
        for (fp, rec) in store.chunk_records().await? {
            recovery.chunks += 1;
            usage.chunks += 1;
            usage.stored_bytes += u64::from(rec.len);
            for b in rec.refs.keys() {
                let u = usage.bucket(b);
                u.chunks += 1;
                u.stored_bytes += u64::from(rec.len);
            }
            named.insert((rec.location, fp));
        }
        for (location, fp) in store.data.extents().await? {
            if !named.contains(&(location, fp)) {
                store.data.trim(location).await?;
                recovery.orphan_extents_trimmed += 1;
            }
        }
        store
            .for_each_manifest(|m| {
                recovery.manifests += 1;
                let u = usage.bucket(m.bucket());
                u.objects += 1;
                u.logical_bytes += m.size();
                usage.objects += 1;
                usage.logical_bytes += m.size();
            })
            .await?;
        *store.usage.lock().expect("usage lock") = usage;
        Ok((store, recovery))
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The chunk bytes' store.
    pub fn data(&self) -> &C {
        &self.data
    }

    /// The tables.
    pub fn tables(&self) -> &T {
        &self.tables
    }

    fn chunk_lock(&self, fp: &Fingerprint) -> &AsyncMutex<()> {
        &self.chunk_locks[(fp.prefix_u64() % STRIPES as u64) as usize]
    }

    fn key_lock(&self, key: &[u8]) -> &AsyncMutex<()> {
        &self.key_locks[crc32c::crc32c(key) as usize % STRIPES]
    }

    /// Updates the space figures; a closure that lowers a bucket's figures
    /// prunes it (so a commit costs O(log buckets), not a walk of them all).
    fn with_usage(&self, f: impl FnOnce(&mut Usage)) {
        f(&mut self.usage.lock().expect("usage lock"));
    }

    async fn chunk_record(&self, fp: &Fingerprint) -> Result<Option<ChunkRecord>> {
        match self.tables.get(Table::Chunks, &fp.0).await? {
            Some(v) => Ok(Some(ChunkRecord::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Calls `f` on every record of `table`, in key order, reading the
    /// table a page of [`SCAN_PAGE`] records at a time; stops at the first
    /// error `f` returns.
    async fn for_each_record(
        &self,
        table: Table,
        mut f: impl FnMut(Vec<u8>, Bytes) -> Result<()>,
    ) -> Result<()> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self
                .tables
                .scan(table, &[], after.as_deref(), SCAN_PAGE)
                .await?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last.clone());
            for (k, v) in page {
                f(k, v)?;
            }
        }
    }

    /// Calls `f` on every current manifest here, in table order, holding
    /// one page of records at a time.
    pub(crate) async fn for_each_manifest(&self, mut f: impl FnMut(Manifest)) -> Result<()> {
        self.for_each_record(Table::Manifests, |_, v| {
            if let KeyRecord::Live(m) = KeyRecord::decode(&v)? {
                f(m);
            }
            Ok(())
        })
        .await
    }

    async fn chunk_records(&self) -> Result<Vec<(Fingerprint, ChunkRecord)>> {
        let mut out = Vec::new();
        self.for_each_record(Table::Chunks, |k, v| {
            let fp = Fingerprint(k.as_slice().try_into().map_err(|_| StoreError::Malformed {
                what: "chunk table key",
                reason: format!("{} bytes, not 32", k.len()),
            })?);
            out.push((fp, ChunkRecord::decode(&v)?));
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Up to `limit` current manifests of every bucket after the opaque
    /// `cursor` (a manifest table key), and the cursor to go on from
    /// (`None` at the end). Deleted keys' tombstones are skipped, so a page
    /// may hold fewer than `limit` before the end.
    pub async fn manifests_page(
        &self,
        cursor: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<(Vec<Manifest>, Option<Vec<u8>>)> {
        let page = self
            .tables
            .scan(Table::Manifests, &[], cursor.as_deref(), limit.max(1))
            .await?;
        let next = if page.len() < limit.max(1) {
            None
        } else {
            page.last().map(|(k, _)| k.clone())
        };
        let mut out = Vec::with_capacity(page.len());
        for (_, v) in page {
            if let KeyRecord::Live(m) = KeyRecord::decode(&v)? {
                out.push(m);
            }
        }
        Ok((out, next))
    }

    /// Up to `limit` chunk table entries after `after`, by fingerprint.
    pub async fn chunks_page(
        &self,
        after: Option<Fingerprint>,
        limit: usize,
    ) -> Result<Vec<(Fingerprint, ChunkInfo)>> {
        let page = self
            .tables
            .scan(
                Table::Chunks,
                &[],
                after.as_ref().map(|f| &f.0[..]),
                limit.max(1),
            )
            .await?;
        let mut out = Vec::with_capacity(page.len());
        for (k, v) in page {
            let fp = Fingerprint(k.as_slice().try_into().map_err(|_| StoreError::Malformed {
                what: "chunk table key",
                reason: format!("{} bytes, not 32", k.len()),
            })?);
            out.push((fp, ChunkRecord::decode(&v)?.into()));
        }
        Ok(out)
    }

    /// Stores a chunk for `bucket`, or counts one more reference if it is
    /// already here (Algorithm 1: "store once, else count + 1"). The bytes
    /// are hashed again here: this is the entry for bytes that come with a
    /// fingerprint from elsewhere (over the fabric, a writer's), and a node
    /// never files data under a fingerprint it does not hash to (every
    /// object naming that fingerprint would read the wrong bytes). New
    /// chunks are written before their record is committed, so a crash
    /// leaves at worst an unnamed extent (trimmed at the next open), never a
    /// record without bytes.
    pub async fn put_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
        data: Bytes,
    ) -> Result<ChunkPut> {
        check_chunk_len(fingerprint, &data)?;
        let actual = Fingerprint::of(&data);
        if actual != fingerprint {
            return Err(StoreError::FingerprintMismatch {
                claimed: fingerprint,
                actual,
            });
        }
        self.put_hashed_chunk(bucket, fingerprint, data).await
    }

    /// [`Self::put_chunk`] without hashing again, for a caller in this
    /// process that computed `fingerprint` from these very bytes (the
    /// object store, which hashes each chunk once to place it), and for
    /// `serve_call`, whose bytes passed the CRC-32C their writer sent.
    pub(crate) async fn put_hashed_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
        data: Bytes,
    ) -> Result<ChunkPut> {
        check_chunk_len(fingerprint, &data)?;
        // No assertion that `data` hashes to `fingerprint`: across the
        // fabric this is reached with a writer's claim that only a CRC-32C
        // checked (docs/store.md, "Checks"), so a wrong one must not panic
        // the node, in debug builds either.
        let _guard = self.chunk_lock(&fingerprint).lock().await;
        if let Some(rec) = self.chunk_record(&fingerprint).await? {
            if rec.len as usize != data.len() {
                return Err(StoreError::InvalidChunk {
                    fingerprint,
                    reason: format!(
                        "{} bytes, but the chunk table holds it with {} (damaged record?)",
                        data.len(),
                        rec.len
                    ),
                });
            }
            let refcount = self.add_ref(bucket, fingerprint, rec).await?;
            return Ok(ChunkPut {
                stored: false,
                refcount,
            });
        }
        let rec = self.write_new_chunk(bucket, fingerprint, data).await?;
        let (location, len) = (rec.location, rec.len);
        let mut batch = Batch::new();
        batch.put(Table::Chunks, fingerprint.0.to_vec(), rec.encode());
        if let Err(e) = self.tables.commit(batch).await {
            // Best effort: if this does not happen either, the next open
            // trims the unnamed extent.
            let _ = self.data.trim(location).await;
            return Err(e);
        }
        self.with_usage(|u| {
            u.chunks += 1;
            u.stored_bytes += u64::from(len);
            let b = u.bucket(bucket);
            b.chunks += 1;
            b.stored_bytes += u64::from(len);
        });
        Ok(ChunkPut {
            stored: true,
            refcount: 1,
        })
    }

    /// Adds a reference to `rec` (the caller holds the chunk's lock).
    async fn add_ref(
        &self,
        bucket: &BucketName,
        fp: Fingerprint,
        mut rec: ChunkRecord,
    ) -> Result<u64> {
        let count = rec.refs.entry(bucket.clone()).or_insert(0);
        *count += 1;
        let first_in_bucket = *count == 1;
        rec.touched_unix_ms = now_ms();
        let mut batch = Batch::new();
        batch.put(Table::Chunks, fp.0.to_vec(), rec.encode());
        self.tables.commit(batch).await?;
        if first_in_bucket {
            self.with_usage(|u| {
                let b = u.bucket(bucket);
                b.chunks += 1;
                b.stored_bytes += u64::from(rec.len);
            });
        }
        Ok(rec.refcount())
    }

    /// Counts one more reference to a chunk that is already here, without
    /// its bytes (a writer that knows the fingerprint asks this first and
    /// sends the bytes only on `None`).
    pub async fn ref_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
    ) -> Result<Option<u64>> {
        let _guard = self.chunk_lock(&fingerprint).lock().await;
        match self.chunk_record(&fingerprint).await? {
            Some(rec) => Ok(Some(self.add_ref(bucket, fingerprint, rec).await?)),
            None => Ok(None),
        }
    }

    /// Drops one of `bucket`'s references to a chunk. At zero the record is
    /// deleted first, then the extent trimmed (a crash between leaves an
    /// unnamed extent, trimmed at the next open).
    pub async fn release_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
    ) -> Result<ChunkRelease> {
        let _guard = self.chunk_lock(&fingerprint).lock().await;
        let mut rec = self
            .chunk_record(&fingerprint)
            .await?
            .ok_or(StoreError::ChunkMissing(fingerprint))?;
        let Some(count) = rec.refs.get_mut(bucket) else {
            return Err(StoreError::NotReferenced {
                fingerprint,
                bucket: bucket.to_string(),
            });
        };
        *count -= 1;
        let last_in_bucket = *count == 0;
        if last_in_bucket {
            rec.refs.remove(bucket);
        }
        let emptied = if last_in_bucket {
            vec![bucket.clone()]
        } else {
            Vec::new()
        };
        self.commit_lowered(emptied, fingerprint, rec).await
    }

    /// Commits a record whose counts were lowered; deletes and trims it at
    /// zero. `emptied` are the buckets whose count reached zero.
    async fn commit_lowered(
        &self,
        emptied: Vec<BucketName>,
        fingerprint: Fingerprint,
        rec: ChunkRecord,
    ) -> Result<ChunkRelease> {
        let mut batch = Batch::new();
        let refcount = rec.refcount();
        if refcount == 0 {
            batch.delete(Table::Chunks, fingerprint.0.to_vec());
        } else {
            batch.put(Table::Chunks, fingerprint.0.to_vec(), rec.encode());
        }
        self.tables.commit(batch).await?;
        let len = u64::from(rec.len);
        self.with_usage(|u| {
            for name in &emptied {
                let b = u.bucket(name);
                b.chunks -= 1;
                b.stored_bytes -= len;
                u.prune(name);
            }
            if refcount == 0 {
                u.chunks -= 1;
                u.stored_bytes -= len;
            }
        });
        let freed = if refcount == 0 {
            // The record is gone; if the trim fails the extent is unnamed
            // and the next open trims it.
            let _ = self.data.trim(rec.location).await;
            Some(rec.location)
        } else {
            None
        };
        Ok(ChunkRelease { refcount, freed })
    }

    /// The orphan collector's step: lowers the chunk's per-bucket counts to
    /// at most `expected` (references counted in live manifests), but only
    /// if no reference was added since `touched_before_ms`. Never raises a
    /// count. Returns what changed, if anything.
    pub async fn lower_refs(
        &self,
        fingerprint: Fingerprint,
        expected: &BTreeMap<BucketName, u64>,
        touched_before_ms: u64,
    ) -> Result<Option<ChunkRelease>> {
        let _guard = self.chunk_lock(&fingerprint).lock().await;
        let Some(mut rec) = self.chunk_record(&fingerprint).await? else {
            return Ok(None);
        };
        if rec.touched_unix_ms >= touched_before_ms {
            return Ok(None);
        }
        let mut changed = false;
        let mut emptied = Vec::new();
        rec.refs.retain(|b, count| {
            let want = expected.get(b).copied().unwrap_or(0);
            if want < *count {
                *count = want;
                changed = true;
            }
            if *count == 0 {
                emptied.push(b.clone());
            }
            *count > 0
        });
        if !changed {
            return Ok(None);
        }
        self.commit_lowered(emptied, fingerprint, rec)
            .await
            .map(Some)
    }

    /// A chunk's bytes, checked against the CRC-32C their record kept (or
    /// their fingerprint, for records from before).
    pub async fn read_chunk(&self, fingerprint: Fingerprint) -> Result<Bytes> {
        let (rec, check) = self.chunk_to_read(fingerprint).await?;
        match self
            .data
            .read(&fingerprint, rec.location, rec.len, check)
            .await
        {
            Ok(b) => Ok(b),
            Err(e) => Err(self.read_failed(fingerprint, &rec, e).await),
        }
    }

    /// A chunk's bytes as the pieces the chunk store read them in, and
    /// their CRC-32C: the one their record kept, which the read checked
    /// them against, or (records from before CRCs, checked by SHA-256)
    /// summed here.
    pub async fn read_chunk_pieces(&self, fingerprint: Fingerprint) -> Result<(u32, Vec<Bytes>)> {
        let (rec, check) = self.chunk_to_read(fingerprint).await?;
        match self
            .data
            .read_pieces(&fingerprint, rec.location, rec.len, check)
            .await
        {
            Ok(pieces) => Ok((answer_crc(check, &rec, &pieces), pieces)),
            Err(e) => Err(self.read_failed(fingerprint, &rec, e).await),
        }
    }

    /// The record of a chunk to read, and the check its bytes must pass.
    async fn chunk_to_read(&self, fingerprint: Fingerprint) -> Result<(ChunkRecord, ChunkCheck)> {
        let rec = self
            .chunk_record(&fingerprint)
            .await?
            .ok_or(StoreError::ChunkMissing(fingerprint))?;
        let check = rec
            .data_crc32c
            .map_or(ChunkCheck::Sha256, ChunkCheck::Crc32c);
        Ok((rec, check))
    }

    /// What a failed read of `rec` reports: a chunk released between the
    /// lookup and the read is missing (the chunk store refuses the location
    /// if another chunk took it since); anything else is the read's error.
    async fn read_failed(
        &self,
        fingerprint: Fingerprint,
        rec: &ChunkRecord,
        e: StoreError,
    ) -> StoreError {
        match self.chunk_record(&fingerprint).await {
            Ok(now) if now.as_ref().map(|r| r.location) != Some(rec.location) => {
                StoreError::ChunkMissing(fingerprint)
            }
            Ok(_) => e,
            Err(lookup) => lookup,
        }
    }

    /// A chunk's table entry.
    pub async fn chunk(&self, fingerprint: Fingerprint) -> Result<Option<ChunkInfo>> {
        Ok(self.chunk_record(&fingerprint).await?.map(ChunkInfo::from))
    }

    /// Every chunk table entry, by fingerprint.
    pub async fn chunks(&self) -> Result<Vec<(Fingerprint, ChunkInfo)>> {
        Ok(self
            .chunk_records()
            .await?
            .into_iter()
            .map(|(f, r)| (f, r.into()))
            .collect())
    }

    async fn key_record(&self, table_key: &[u8]) -> Result<Option<KeyRecord>> {
        match self.tables.get(Table::Manifests, table_key).await? {
            Some(v) => Ok(Some(KeyRecord::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// The current manifest of an object.
    pub async fn get_manifest(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> Result<Option<Manifest>> {
        match self.key_record(&manifest_key(bucket, key)).await? {
            Some(KeyRecord::Live(m)) => Ok(Some(m)),
            _ => Ok(None),
        }
    }

    /// Makes `manifest` the object's current version if `condition` holds,
    /// in one commit (readers see the old or the new manifest). Its version
    /// is set here: one more than the last, even across deletes. The caller
    /// must already hold a reference on every chunk it lists, and must
    /// release the replaced version's chunks afterwards.
    pub async fn put_manifest(
        &self,
        mut manifest: Manifest,
        condition: Condition,
    ) -> Result<ManifestPut> {
        let tkey = manifest_key(manifest.bucket(), manifest.key());
        let _guard = self.key_lock(&tkey).lock().await;
        let current = self.key_record(&tkey).await?;
        let live = match &current {
            Some(KeyRecord::Live(m)) => Some(m.clone()),
            _ => None,
        };
        condition.check(
            manifest.bucket(),
            manifest.key(),
            live.as_ref().map(Manifest::version),
        )?;
        manifest.set_version(current.as_ref().map_or(0, KeyRecord::version) + 1);
        let mut batch = Batch::new();
        batch.put(
            Table::Manifests,
            tkey,
            KeyRecord::Live(manifest.clone()).encode(),
        );
        self.tables.commit(batch).await?;
        self.count_manifest_replaced(&manifest, live.as_ref());
        Ok(ManifestPut {
            manifest,
            replaced: live,
        })
    }

    /// Counts a committed manifest and uncounts the live one it replaced.
    fn count_manifest_replaced(&self, manifest: &Manifest, live: Option<&Manifest>) {
        self.with_usage(|u| {
            if let Some(old) = live {
                let b = u.bucket(old.bucket());
                b.objects -= 1;
                b.logical_bytes -= old.size();
                u.objects -= 1;
                u.logical_bytes -= old.size();
            }
            let b = u.bucket(manifest.bucket());
            b.objects += 1;
            b.logical_bytes += manifest.size();
            u.objects += 1;
            u.logical_bytes += manifest.size();
            if let Some(old) = live {
                u.prune(old.bucket());
            }
        });
    }

    /// Stores a small object in one step (see
    /// [`StoreNode::put_with_chunk`]): under the key's lock, then the
    /// chunk's (nothing takes them the other way round), the condition is
    /// checked, a new chunk's bytes are written, and the chunk record and
    /// the manifest are committed in one batch, so a crash leaves both or
    /// neither (and at worst an unnamed extent, trimmed at the next open).
    /// The caller computed the chunk's fingerprint from `data` (across the
    /// fabric the bytes were checked against the CRC-32C sent with them).
    pub async fn put_with_chunk(
        &self,
        mut manifest: Manifest,
        condition: Condition,
        data: Bytes,
    ) -> Result<SmallPut> {
        let chunk = check_small_put(&manifest, &data)?;
        // No assertion that `data` hashes to the fingerprint: see
        // `put_hashed_chunk`.
        let bucket = manifest.bucket().clone();
        let tkey = manifest_key(&bucket, manifest.key());
        let key_guard = self.key_lock(&tkey).lock().await;
        let chunk_guard = self.chunk_lock(&chunk.fingerprint).lock().await;
        let current = self.key_record(&tkey).await?;
        let live = match &current {
            Some(KeyRecord::Live(m)) => Some(m.clone()),
            _ => None,
        };
        condition.check(
            &bucket,
            manifest.key(),
            live.as_ref().map(Manifest::version),
        )?;
        manifest.set_version(current.as_ref().map_or(0, KeyRecord::version) + 1);
        let mut batch = Batch::new();
        let staged = self
            .stage_chunk(&bucket, chunk.fingerprint, data, &mut batch)
            .await?;
        batch.put(
            Table::Manifests,
            tkey,
            KeyRecord::Live(manifest.clone()).encode(),
        );
        if let Err(e) = self.tables.commit(batch).await {
            if let Some(location) = staged.written {
                // Best effort: else the next open trims the unnamed extent.
                let _ = self.data.trim(location).await;
            }
            return Err(e);
        }
        self.count_staged_chunk(&bucket, &staged);
        self.count_manifest_replaced(&manifest, live.as_ref());
        drop(chunk_guard);
        drop(key_guard);
        // The replaced version's chunk, if it was kept here too, is
        // released here: the new one is counted already, so a chunk both
        // share never passes through zero. A failed release leaves a count
        // too high, for the orphan collector (never retried: a release
        // whose answer was lost may have been applied).
        let replaced_released = match &live {
            Some(old) if old.chunk_at_manifest_node() => {
                for c in old.chunks() {
                    let _ = self.release_chunk(old.bucket(), c.fingerprint).await;
                }
                true
            }
            _ => false,
        };
        Ok(SmallPut {
            manifest,
            replaced: live,
            replaced_released,
        })
    }

    /// Adds one of `bucket`'s references to chunk `fingerprint` to `batch`:
    /// to its record if the chunk is here, else to a new record after
    /// writing `data`. The caller holds the chunk's lock until the batch is
    /// committed, then counts it with [`Self::count_staged_chunk`].
    async fn stage_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
        data: Bytes,
        batch: &mut Batch,
    ) -> Result<StagedChunk> {
        if let Some(mut rec) = self.chunk_record(&fingerprint).await? {
            if rec.len as usize != data.len() {
                return Err(StoreError::InvalidChunk {
                    fingerprint,
                    reason: format!(
                        "{} bytes, but the chunk table holds it with {} (damaged record?)",
                        data.len(),
                        rec.len
                    ),
                });
            }
            let count = rec.refs.entry(bucket.clone()).or_insert(0);
            *count += 1;
            let first_in_bucket = *count == 1;
            rec.touched_unix_ms = now_ms();
            batch.put(Table::Chunks, fingerprint.0.to_vec(), rec.encode());
            return Ok(StagedChunk {
                written: None,
                len: rec.len,
                first_in_bucket,
            });
        }
        let rec = self.write_new_chunk(bucket, fingerprint, data).await?;
        batch.put(Table::Chunks, fingerprint.0.to_vec(), rec.encode());
        Ok(StagedChunk {
            written: Some(rec.location),
            len: rec.len,
            first_in_bucket: true,
        })
    }

    /// Writes a chunk not yet here and returns the record that names it,
    /// with one reference from `bucket`; the caller commits the record.
    async fn write_new_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
        data: Bytes,
    ) -> Result<ChunkRecord> {
        let len = data.len() as u32;
        // Taken before the write, of the bytes as they came: a read checks
        // the same bytes against it, at a tenth of what hashing costs.
        let data_crc32c = quarry_store_api::chunk_crc32c(&data);
        let location = self.data.write(&fingerprint, data).await?;
        Ok(ChunkRecord {
            location,
            len,
            refs: BTreeMap::from([(bucket.clone(), 1)]),
            touched_unix_ms: now_ms(),
            data_crc32c: Some(data_crc32c),
        })
    }

    /// Counts a staged chunk reference once its batch is committed.
    fn count_staged_chunk(&self, bucket: &BucketName, staged: &StagedChunk) {
        let len = u64::from(staged.len);
        self.with_usage(|u| {
            if staged.written.is_some() {
                u.chunks += 1;
                u.stored_bytes += len;
            }
            if staged.first_in_bucket {
                let b = u.bucket(bucket);
                b.chunks += 1;
                b.stored_bytes += len;
            }
        });
    }

    /// The current manifest of a key and, if it keeps its one chunk here,
    /// that chunk's bytes. A newer version that released the chunk between
    /// the two reads makes it read the manifest again (a few times, then
    /// [`StoreError::ChunkMissing`]).
    pub async fn get_with_chunk(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> Result<Option<ManifestWithChunk>> {
        let mut missing = None;
        for _ in 0..GET_WITH_CHUNK_TRIES {
            let Some(manifest) = self.get_manifest(bucket, key).await? else {
                return Ok(None);
            };
            let chunk = match manifest.chunks() {
                [c] if manifest.chunk_at_manifest_node() => c.fingerprint,
                _ => {
                    return Ok(Some(ManifestWithChunk {
                        manifest,
                        chunk: None,
                    }))
                }
            };
            match self.read_chunk(chunk).await {
                Ok(data) => {
                    return Ok(Some(ManifestWithChunk {
                        manifest,
                        chunk: Some(data),
                    }))
                }
                Err(StoreError::ChunkMissing(fp)) => missing = Some(fp),
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::ChunkMissing(
            missing.unwrap_or(Fingerprint([0; 32])),
        ))
    }

    /// Deletes an object if `condition` holds, leaving a tombstone with its
    /// last version. Returns the deleted manifest: the caller must release
    /// its chunks.
    pub async fn delete_manifest(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> Result<Manifest> {
        let tkey = manifest_key(bucket, key);
        let _guard = self.key_lock(&tkey).lock().await;
        let Some(KeyRecord::Live(m)) = self.key_record(&tkey).await? else {
            return Err(StoreError::NoSuchObject {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        };
        condition.check(bucket, key, Some(m.version()))?;
        let mut batch = Batch::new();
        batch.put(
            Table::Manifests,
            tkey,
            KeyRecord::Deleted {
                last_version: m.version(),
            }
            .encode(),
        );
        self.tables.commit(batch).await?;
        self.with_usage(|u| {
            let b = u.bucket(bucket);
            b.objects -= 1;
            b.logical_bytes -= m.size();
            u.objects -= 1;
            u.logical_bytes -= m.size();
            u.prune(bucket);
        });
        Ok(m)
    }

    /// Up to `limit` current manifests of `bucket` here whose keys start
    /// with `prefix` and sort after `after`, in key order.
    pub async fn list_manifests(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<Vec<Manifest>> {
        let tprefix = manifest_prefix(bucket, prefix);
        let mut cursor = after.map(|k| manifest_key(bucket, k));
        let mut out = Vec::new();
        while out.len() < limit {
            let page = self
                .tables
                .scan(
                    Table::Manifests,
                    &tprefix,
                    cursor.as_deref(),
                    SCAN_PAGE.min((limit - out.len()).saturating_add(16)),
                )
                .await?;
            let Some((last, _)) = page.last() else { break };
            cursor = Some(last.clone());
            for (_, v) in page {
                if let KeyRecord::Live(m) = KeyRecord::decode(&v)? {
                    if out.len() < limit {
                        out.push(m);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Every current manifest here, of every bucket (for the orphan
    /// collector's mark phase).
    pub async fn all_manifests(&self) -> Result<Vec<Manifest>> {
        let mut out = Vec::new();
        self.for_each_manifest(|m| out.push(m)).await?;
        Ok(out)
    }

    /// Records a new bucket.
    pub async fn create_bucket(&self, bucket: &BucketName, config: BucketConfig) -> Result<()> {
        config.chunking.validate()?;
        let key = bucket.as_str().as_bytes();
        let _guard = self.key_lock(key).lock().await;
        if self.tables.get(Table::Buckets, key).await?.is_some() {
            return Err(StoreError::BucketExists(bucket.to_string()));
        }
        let mut batch = Batch::new();
        batch.put(Table::Buckets, key.to_vec(), config.encode());
        self.tables.commit(batch).await
    }

    /// A bucket's record.
    pub async fn bucket(&self, bucket: &BucketName) -> Result<Option<BucketConfig>> {
        match self
            .tables
            .get(Table::Buckets, bucket.as_str().as_bytes())
            .await?
        {
            Some(v) => Ok(Some(BucketConfig::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Removes a bucket's record.
    pub async fn delete_bucket(&self, bucket: &BucketName) -> Result<()> {
        let key = bucket.as_str().as_bytes();
        let _guard = self.key_lock(key).lock().await;
        if self.tables.get(Table::Buckets, key).await?.is_none() {
            return Err(StoreError::NoSuchBucket(bucket.to_string()));
        }
        let mut batch = Batch::new();
        batch.delete(Table::Buckets, key.to_vec());
        self.tables.commit(batch).await
    }

    /// The bucket records held here.
    pub async fn buckets(&self) -> Result<Vec<(BucketName, BucketConfig)>> {
        let mut out = Vec::new();
        self.for_each_record(Table::Buckets, |k, v| {
            out.push((BucketName::from_bytes(&k)?, BucketConfig::decode(&v)?));
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// This node's space figures (kept up to date with every commit).
    pub fn usage(&self) -> Usage {
        self.usage.lock().expect("usage lock").clone()
    }
}

/// The CRC-32C sent with a chunk's bytes: the record's, which the chunk
/// store checked exactly these bytes against (its `read` contract), or
/// summed here for records from before CRCs.
fn answer_crc(check: ChunkCheck, rec: &ChunkRecord, pieces: &[Bytes]) -> u32 {
    match check {
        ChunkCheck::Crc32c(crc)
            if pieces.iter().map(Bytes::len).sum::<usize>() == rec.len as usize =>
        {
            crc
        }
        _ => quarry_store_api::chunk_crc32c_of_parts(pieces.iter().map(|p| &p[..])),
    }
}

impl<T: TableStore, C: ChunkStore> StoreNode for NodeStore<T, C> {
    fn id(&self) -> NodeId {
        NodeStore::id(self)
    }
    async fn put_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
        data: Bytes,
    ) -> Result<ChunkPut> {
        // In this process the caller hashed these very bytes.
        self.put_hashed_chunk(bucket, fingerprint, data).await
    }
    async fn release_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
    ) -> Result<ChunkRelease> {
        NodeStore::release_chunk(self, bucket, fingerprint).await
    }
    async fn read_chunk(&self, fingerprint: Fingerprint) -> Result<Bytes> {
        NodeStore::read_chunk(self, fingerprint).await
    }
    async fn read_chunk_pieces(&self, fingerprint: Fingerprint) -> Result<(u32, Vec<Bytes>)> {
        NodeStore::read_chunk_pieces(self, fingerprint).await
    }
    async fn get_manifest(&self, bucket: &BucketName, key: &ObjectKey) -> Result<Option<Manifest>> {
        NodeStore::get_manifest(self, bucket, key).await
    }
    async fn put_manifest(&self, manifest: Manifest, condition: Condition) -> Result<ManifestPut> {
        NodeStore::put_manifest(self, manifest, condition).await
    }
    async fn delete_manifest(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> Result<Manifest> {
        NodeStore::delete_manifest(self, bucket, key, condition).await
    }
    async fn put_with_chunk(
        &self,
        manifest: Manifest,
        condition: Condition,
        data: Bytes,
    ) -> Result<SmallPut> {
        // In this process the caller hashed these very bytes.
        NodeStore::put_with_chunk(self, manifest, condition, data).await
    }
    async fn get_with_chunk(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> Result<Option<ManifestWithChunk>> {
        NodeStore::get_with_chunk(self, bucket, key).await
    }
    async fn list_manifests(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<Vec<Manifest>> {
        let limit = limit.min(MAX_PAGE_ITEMS);
        NodeStore::list_manifests(self, bucket, prefix, after, limit).await
    }
    async fn create_bucket(&self, bucket: &BucketName, config: BucketConfig) -> Result<()> {
        NodeStore::create_bucket(self, bucket, config).await
    }
    async fn bucket(&self, bucket: &BucketName) -> Result<Option<BucketConfig>> {
        NodeStore::bucket(self, bucket).await
    }
    async fn delete_bucket(&self, bucket: &BucketName) -> Result<()> {
        NodeStore::delete_bucket(self, bucket).await
    }
    async fn buckets(&self) -> Result<Vec<(BucketName, BucketConfig)>> {
        NodeStore::buckets(self).await
    }
    async fn usage(&self) -> Result<Usage> {
        Ok(NodeStore::usage(self))
    }
    async fn manifests_page(
        &self,
        cursor: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<(Vec<Manifest>, Option<Vec<u8>>)> {
        NodeStore::manifests_page(self, cursor, limit.min(MAX_PAGE_ITEMS)).await
    }
    async fn chunks_page(
        &self,
        after: Option<Fingerprint>,
        limit: usize,
    ) -> Result<Vec<(Fingerprint, ChunkInfo)>> {
        NodeStore::chunks_page(self, after, limit.min(MAX_PAGE_ITEMS)).await
    }
    async fn lower_refs(
        &self,
        fingerprint: Fingerprint,
        expected: BTreeMap<BucketName, u64>,
        touched_before_ms: u64,
    ) -> Result<Option<ChunkRelease>> {
        NodeStore::lower_refs(self, fingerprint, &expected, touched_before_ms).await
    }
}
