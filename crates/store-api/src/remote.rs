//! One node's store operations wherever the node is: the [`StoreNode`]
//! trait, its in-process implementation ([`NodeStore`]), and the call
//! encoding that carries it between processes ([`serve_call`] on the node,
//! [`RemoteNode`] over a [`StoreTransport`] at the caller).
//!
//! A call is `op:u8` and the op's fields; an answer is `0` and the op's
//! result, or `1` and an encoded [`StoreError`], so a refused conditional put
//! is still a [`StoreError::VersionMismatch`] at the caller. Integers are
//! little-endian; strings are `len:u16` + UTF-8; every length is checked
//! against the bytes present before anything is allocated.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use crate::bucket::BucketConfig;
use crate::chunking::{check_chunk_len, MAX_CHUNK_SIZE};
use crate::error::{Result, StoreError};
use crate::fingerprint::{chunk_crc32c, Fingerprint};
use crate::manifest::{Manifest, Reader};
use crate::name::{BucketName, ObjectKey};
use crate::ops::{
    ChunkInfo, ChunkLocation, ChunkPut, ChunkRelease, Condition, ManifestPut, ManifestWithChunk,
    SmallPut,
};
use crate::placement::NodeId;
use crate::usage::{BucketUsage, Usage};
use quarry_proto::ByteWriter;

/// Most items one listing call returns (manifests, chunks, buckets); a
/// caller pages on with the cursor it got.
pub const MAX_PAGE_ITEMS: usize = 1000;

/// Most chunks one [`RemoteNode::read_chunks`] call reads.
pub const MAX_READ_CHUNKS: usize = 32;

/// Most bytes one [`RemoteNode::read_chunks`] answer carries: a node
/// refuses a read past it (the caller sums the lengths its manifest gives).
pub const MAX_READ_CHUNKS_BYTES: u64 = 16 << 20;

/// One node's store operations, in this process or across the fabric. The
/// object operations ([`crate::ObjectStore`]) are written once over this.
pub trait StoreNode: Send + Sync + 'static {
    /// The node's id.
    fn id(&self) -> NodeId;

    /// Stores a chunk for `bucket` (or counts one more reference). The
    /// caller computed `fingerprint` from `data`; a node across the fabric
    /// checks them against the CRC-32C the writer sent with them.
    fn put_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
        data: Bytes,
    ) -> impl Future<Output = Result<ChunkPut>> + Send;

    /// Drops one of `bucket`'s references to a chunk.
    fn release_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
    ) -> impl Future<Output = Result<ChunkRelease>> + Send;

    /// A chunk's bytes, checked against the CRC-32C their record kept (or
    /// their fingerprint, for records from before) and, across the fabric,
    /// against the CRC-32C the node sent with them.
    fn read_chunk(&self, fingerprint: Fingerprint) -> impl Future<Output = Result<Bytes>> + Send;

    /// [`StoreNode::read_chunk`] as pieces whose concatenation is the
    /// bytes, with their CRC-32C, which the answer carries so the reader can
    /// check them after the network. A node that reads a chunk from pages
    /// hands back the pages' bytes as they came off the device, so the
    /// answer goes out without joining them; one that checked the bytes
    /// against the CRC their record kept returns that one rather than
    /// summing the chunk a second time.
    fn read_chunk_pieces(
        &self,
        fingerprint: Fingerprint,
    ) -> impl Future<Output = Result<(u32, Vec<Bytes>)>> + Send {
        async move {
            let data = self.read_chunk(fingerprint).await?;
            Ok((chunk_crc32c(&data), vec![data]))
        }
    }

    /// The current manifest of a key held here.
    fn get_manifest(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Option<Manifest>>> + Send;

    /// Commits a manifest as the key's next version if `condition` holds.
    fn put_manifest(
        &self,
        manifest: Manifest,
        condition: Condition,
    ) -> impl Future<Output = Result<ManifestPut>> + Send;

    /// Deletes a key's manifest if `condition` holds; returns it.
    fn delete_manifest(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> impl Future<Output = Result<Manifest>> + Send;

    /// Stores a small object in one step: `data`, the one chunk `manifest`
    /// names, is kept on this node with the manifest (stored once, else its
    /// count raised), and the manifest is committed as the key's next
    /// version if `condition` holds, both in one commit. `manifest` must be
    /// [`Manifest::with_chunk_at_manifest_node`]. A replaced version whose
    /// chunk was kept here too is released here; otherwise the caller
    /// releases the replaced version's chunks.
    fn put_with_chunk(
        &self,
        manifest: Manifest,
        condition: Condition,
        data: Bytes,
    ) -> impl Future<Output = Result<SmallPut>> + Send;

    /// The current manifest of a key held here and, when its one chunk is
    /// kept here with it, that chunk's bytes (a small object's get in one
    /// call).
    fn get_with_chunk(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Option<ManifestWithChunk>>> + Send;

    /// Up to `limit` (at most [`MAX_PAGE_ITEMS`]) current manifests of
    /// `bucket` here with keys starting with `prefix`, after `after`.
    fn list_manifests(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Manifest>>> + Send;

    /// Records a bucket (on the node its name places it on).
    fn create_bucket(
        &self,
        bucket: &BucketName,
        config: BucketConfig,
    ) -> impl Future<Output = Result<()>> + Send;

    /// A bucket's settings, if the bucket is recorded here.
    fn bucket(
        &self,
        bucket: &BucketName,
    ) -> impl Future<Output = Result<Option<BucketConfig>>> + Send;

    /// Deletes a bucket's record.
    fn delete_bucket(&self, bucket: &BucketName) -> impl Future<Output = Result<()>> + Send;

    /// The buckets recorded here.
    fn buckets(&self) -> impl Future<Output = Result<Vec<(BucketName, BucketConfig)>>> + Send;

    /// This node's space figures.
    fn usage(&self) -> impl Future<Output = Result<Usage>> + Send;

    /// Up to `limit` current manifests of every bucket, after the opaque
    /// `cursor` (`None`: from the start); returns them and the cursor to go
    /// on from (`None`: that was the end).
    fn manifests_page(
        &self,
        cursor: Option<Vec<u8>>,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<Manifest>, Option<Vec<u8>>)>> + Send;

    /// Up to `limit` chunk table entries after `after`, by fingerprint.
    fn chunks_page(
        &self,
        after: Option<Fingerprint>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Fingerprint, ChunkInfo)>>> + Send;

    /// Lowers a chunk's reference counts to `expected` if no reference was
    /// added since `touched_before_ms` (the orphan collector's sweep).
    fn lower_refs(
        &self,
        fingerprint: Fingerprint,
        expected: BTreeMap<BucketName, u64>,
        touched_before_ms: u64,
    ) -> impl Future<Output = Result<Option<ChunkRelease>>> + Send;
}

impl<N: StoreNode> StoreNode for Arc<N> {
    fn id(&self) -> NodeId {
        (**self).id()
    }
    fn put_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
        data: Bytes,
    ) -> impl Future<Output = Result<ChunkPut>> + Send {
        (**self).put_chunk(bucket, fingerprint, data)
    }
    fn release_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
    ) -> impl Future<Output = Result<ChunkRelease>> + Send {
        (**self).release_chunk(bucket, fingerprint)
    }
    fn read_chunk(&self, fingerprint: Fingerprint) -> impl Future<Output = Result<Bytes>> + Send {
        (**self).read_chunk(fingerprint)
    }
    fn read_chunk_pieces(
        &self,
        fingerprint: Fingerprint,
    ) -> impl Future<Output = Result<(u32, Vec<Bytes>)>> + Send {
        (**self).read_chunk_pieces(fingerprint)
    }
    fn get_manifest(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Option<Manifest>>> + Send {
        (**self).get_manifest(bucket, key)
    }
    fn put_manifest(
        &self,
        manifest: Manifest,
        condition: Condition,
    ) -> impl Future<Output = Result<ManifestPut>> + Send {
        (**self).put_manifest(manifest, condition)
    }
    fn delete_manifest(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> impl Future<Output = Result<Manifest>> + Send {
        (**self).delete_manifest(bucket, key, condition)
    }
    fn put_with_chunk(
        &self,
        manifest: Manifest,
        condition: Condition,
        data: Bytes,
    ) -> impl Future<Output = Result<SmallPut>> + Send {
        (**self).put_with_chunk(manifest, condition, data)
    }
    fn get_with_chunk(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Option<ManifestWithChunk>>> + Send {
        (**self).get_with_chunk(bucket, key)
    }
    fn list_manifests(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Manifest>>> + Send {
        (**self).list_manifests(bucket, prefix, after, limit)
    }
    fn create_bucket(
        &self,
        bucket: &BucketName,
        config: BucketConfig,
    ) -> impl Future<Output = Result<()>> + Send {
        (**self).create_bucket(bucket, config)
    }
    fn bucket(
        &self,
        bucket: &BucketName,
    ) -> impl Future<Output = Result<Option<BucketConfig>>> + Send {
        (**self).bucket(bucket)
    }
    fn delete_bucket(&self, bucket: &BucketName) -> impl Future<Output = Result<()>> + Send {
        (**self).delete_bucket(bucket)
    }
    fn buckets(&self) -> impl Future<Output = Result<Vec<(BucketName, BucketConfig)>>> + Send {
        (**self).buckets()
    }
    fn usage(&self) -> impl Future<Output = Result<Usage>> + Send {
        (**self).usage()
    }
    fn manifests_page(
        &self,
        cursor: Option<Vec<u8>>,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<Manifest>, Option<Vec<u8>>)>> + Send {
        (**self).manifests_page(cursor, limit)
    }
    fn chunks_page(
        &self,
        after: Option<Fingerprint>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Fingerprint, ChunkInfo)>>> + Send {
        (**self).chunks_page(after, limit)
    }
    fn lower_refs(
        &self,
        fingerprint: Fingerprint,
        expected: BTreeMap<BucketName, u64>,
        touched_before_ms: u64,
    ) -> impl Future<Output = Result<Option<ChunkRelease>>> + Send {
        (**self).lower_refs(fingerprint, expected, touched_before_ms)
    }
}

/// Carries encoded store calls to a node and brings back its answer bytes
/// (the client implements it over the protocol's service calls).
pub trait StoreTransport: Send + Sync + 'static {
    /// Sends `body` to node `node`'s store; `idempotent` calls may be sent
    /// again on another path if a link dies. Failures to deliver are
    /// [`StoreError::Transport`].
    fn call(
        &self,
        node: NodeId,
        idempotent: bool,
        body: Bytes,
    ) -> impl Future<Output = Result<Bytes>> + Send;
}

/// A node's store across a [`StoreTransport`].
pub struct RemoteNode<X> {
    id: NodeId,
    transport: Arc<X>,
}

impl<X: StoreTransport> RemoteNode<X> {
    /// Node `id` reached through `transport`.
    pub fn new(id: NodeId, transport: Arc<X>) -> Self {
        Self { id, transport }
    }

    /// The bytes of up to [`MAX_READ_CHUNKS`] chunks this node holds, in
    /// one call, in the order asked; each is checked against the CRC-32C
    /// the node sent with it. Together they must hold at most
    /// [`MAX_READ_CHUNKS_BYTES`], or the node refuses the read.
    pub async fn read_chunks(&self, fingerprints: &[Fingerprint]) -> Result<Vec<Bytes>> {
        let count = fingerprints.len();
        if count == 0 || count > MAX_READ_CHUNKS {
            return Err(StoreError::Malformed {
                what: "a read of chunks",
                reason: format!("{count} chunks asked (1 to {MAX_READ_CHUNKS} a call)"),
            });
        }
        let mut w = Writer::starting(Op::ReadChunks as u8);
        w.u16(count as u16);
        for fp in fingerprints {
            w.fingerprint(fp);
        }
        let read = self
            .rpc(true, w, |r, answer| {
                let answered = usize::from(r.u16()?);
                if answered != count {
                    return Err(r.malformed(format!(
                        "{answered} chunks answered where {count} were asked"
                    )));
                }
                let mut out = Vec::with_capacity(count);
                for _ in 0..count {
                    out.push((r.u32()?, r.bytes(answer)?));
                }
                Ok(out)
            })
            .await?;
        let mut out = Vec::with_capacity(count);
        for (&fp, (crc, data)) in fingerprints.iter().zip(read) {
            check_crc(fp, crc, &data, "arrived damaged")?;
            out.push(data);
        }
        Ok(out)
    }

    /// Sends one call and decodes its answer: the status, then `parse`
    /// (given the reader and the answer bytes, for zero-copy slices), then
    /// the check that nothing trails.
    async fn rpc<T>(
        &self,
        idempotent: bool,
        body: Writer,
        parse: impl FnOnce(&mut Reader<'_>, &Bytes) -> Result<T>,
    ) -> Result<T> {
        let answer = self
            .transport
            .call(self.id, idempotent, Bytes::from(body.0))
            .await?;
        let mut r = Reader::new("store answer", &answer);
        r.answer_status(self.id)?;
        let value = parse(&mut r, &answer)?;
        r.end()?;
        Ok(value)
    }
}

/// The store call opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Op {
    PutChunk = 1,
    ReleaseChunk = 2,
    ReadChunk = 3,
    GetManifest = 4,
    PutManifest = 5,
    DeleteManifest = 6,
    ListManifests = 7,
    CreateBucket = 8,
    Bucket = 9,
    DeleteBucket = 10,
    Buckets = 11,
    Usage = 12,
    ManifestsPage = 13,
    ChunksPage = 14,
    LowerRefs = 15,
    PutWithChunk = 16,
    GetWithChunk = 17,
    ReadChunks = 18,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        use Op::*;
        Some(match b {
            1 => PutChunk,
            2 => ReleaseChunk,
            3 => ReadChunk,
            4 => GetManifest,
            5 => PutManifest,
            6 => DeleteManifest,
            7 => ListManifests,
            8 => CreateBucket,
            9 => Bucket,
            10 => DeleteBucket,
            11 => Buckets,
            12 => Usage,
            13 => ManifestsPage,
            14 => ChunksPage,
            15 => LowerRefs,
            16 => PutWithChunk,
            17 => GetWithChunk,
            18 => ReadChunks,
            _ => return None,
        })
    }
}

/// The writer of store calls and answers: the protocol's field codec, with
/// the store's fields of [`StoreFields`].
type Writer = ByteWriter;

/// The store's own fields, written on top of the protocol's field codec.
trait StoreFields {
    fn blob(&mut self, v: &[u8]) -> &mut Self;
    fn str(&mut self, v: &str) -> &mut Self;
    fn fingerprint(&mut self, f: &Fingerprint) -> &mut Self;
    fn bucket(&mut self, b: &BucketName) -> &mut Self;
    fn key(&mut self, k: &ObjectKey) -> &mut Self;
    fn condition(&mut self, c: Condition) -> &mut Self;
    fn opt_u64(&mut self, v: Option<u64>) -> &mut Self;
    fn manifest(&mut self, m: &Manifest) -> &mut Self;
    fn bucket_config(&mut self, c: &BucketConfig) -> &mut Self;
    fn refs(&mut self, refs: &BTreeMap<BucketName, u64>) -> &mut Self;
    fn release(&mut self, r: &ChunkRelease) -> &mut Self;
    fn location(&mut self, l: &ChunkLocation) -> &mut Self;
    fn bucket_usage(&mut self, u: &BucketUsage) -> &mut Self;
}

impl StoreFields for ByteWriter {
    fn blob(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32).raw(v)
    }
    fn str(&mut self, v: &str) -> &mut Self {
        self.blob(v.as_bytes())
    }
    fn fingerprint(&mut self, f: &Fingerprint) -> &mut Self {
        self.raw(&f.0)
    }
    fn bucket(&mut self, b: &BucketName) -> &mut Self {
        self.str(b.as_str())
    }
    fn key(&mut self, k: &ObjectKey) -> &mut Self {
        self.str(k.as_str())
    }
    fn condition(&mut self, c: Condition) -> &mut Self {
        match c {
            Condition::Always => self.u8(0),
            Condition::IfAbsent => self.u8(1),
            Condition::IfVersion(v) => self.u8(2).u64(v),
        }
    }
    fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(v) => self.u8(1).u64(v),
        }
    }
    fn manifest(&mut self, m: &Manifest) -> &mut Self {
        self.blob(&m.encode())
    }
    fn bucket_config(&mut self, c: &BucketConfig) -> &mut Self {
        self.blob(&c.encode())
    }
    fn refs(&mut self, refs: &BTreeMap<BucketName, u64>) -> &mut Self {
        self.u32(refs.len() as u32);
        for (b, n) in refs {
            self.bucket(b).u64(*n);
        }
        self
    }
    fn release(&mut self, r: &ChunkRelease) -> &mut Self {
        self.u64(r.refcount);
        match r.freed {
            None => self.u8(0),
            Some(l) => self.u8(1).location(&l),
        }
    }
    fn location(&mut self, l: &ChunkLocation) -> &mut Self {
        self.u32(l.space).u64(l.first_page).u32(l.pages)
    }
    fn bucket_usage(&mut self, u: &BucketUsage) -> &mut Self {
        self.u64(u.objects)
            .u64(u.logical_bytes)
            .u64(u.stored_bytes)
            .u64(u.chunks)
    }
}

impl Reader<'_> {
    fn blob(&mut self) -> Result<&[u8]> {
        let len = self.u32()? as usize;
        Ok(self.take(len)?)
    }
    /// A length-prefixed field as a zero-copy slice of `source`, the
    /// buffer this reader reads.
    fn bytes(&mut self, source: &Bytes) -> Result<Bytes> {
        let len = self.u32()? as usize;
        Ok(self.slice_of(source, len)?)
    }
    fn string(&mut self) -> Result<String> {
        let what = self.what();
        let b = self.blob()?;
        String::from_utf8(b.to_vec()).map_err(|e| StoreError::Malformed {
            what,
            reason: format!("a string is not UTF-8: {e}"),
        })
    }
    fn fingerprint(&mut self) -> Result<Fingerprint> {
        Ok(Fingerprint(self.array()?))
    }
    fn bucket(&mut self) -> Result<BucketName> {
        BucketName::from_bytes(self.blob()?)
    }
    fn key(&mut self) -> Result<ObjectKey> {
        ObjectKey::from_bytes(self.blob()?)
    }
    fn condition(&mut self) -> Result<Condition> {
        Ok(match self.u8()? {
            0 => Condition::Always,
            1 => Condition::IfAbsent,
            2 => Condition::IfVersion(self.u64()?),
            other => return Err(self.malformed(format!("condition byte {other}"))),
        })
    }
    fn opt_u64(&mut self) -> Result<Option<u64>> {
        self.optional(Reader::u64)
    }
    /// A flag byte, then the value when it is 1.
    fn optional<T>(&mut self, read: impl FnOnce(&mut Self) -> Result<T>) -> Result<Option<T>> {
        Ok(if self.flag()? {
            Some(read(self)?)
        } else {
            None
        })
    }
    /// A count, then that many manifests.
    fn manifests(&mut self) -> Result<Vec<Manifest>> {
        let n = self.count(4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.manifest()?);
        }
        Ok(out)
    }
    fn manifest(&mut self) -> Result<Manifest> {
        Manifest::decode(self.blob()?)
    }
    fn bucket_config(&mut self) -> Result<BucketConfig> {
        BucketConfig::decode(self.blob()?)
    }
    fn refs(&mut self) -> Result<BTreeMap<BucketName, u64>> {
        let n = self.count(13)?;
        let mut refs = BTreeMap::new();
        for _ in 0..n {
            let b = self.bucket()?;
            refs.insert(b, self.u64()?);
        }
        Ok(refs)
    }
    fn location(&mut self) -> Result<ChunkLocation> {
        Ok(ChunkLocation {
            space: self.u32()?,
            first_page: self.u64()?,
            pages: self.u32()?,
        })
    }
    fn release(&mut self) -> Result<ChunkRelease> {
        let refcount = self.u64()?;
        let freed = self.optional(Reader::location)?;
        Ok(ChunkRelease { refcount, freed })
    }
    fn bucket_usage(&mut self) -> Result<BucketUsage> {
        Ok(BucketUsage {
            objects: self.u64()?,
            logical_bytes: self.u64()?,
            stored_bytes: self.u64()?,
            chunks: self.u64()?,
        })
    }
    fn end(&self) -> Result<()> {
        Ok(self.0.end()?)
    }
    /// Reads the answer's status byte; an error answer becomes its error.
    fn answer_status(&mut self, node: NodeId) -> Result<()> {
        match self.u8()? {
            0 => Ok(()),
            1 => Err(decode_error(self, node)?),
            other => Err(self.malformed(format!("answer status byte {other}"))),
        }
    }
}

/// Error kinds carried in error answers; the rest travel as `Remote` with
/// their message.
mod kind {
    pub const VERSION_MISMATCH: u8 = 1;
    pub const NO_SUCH_BUCKET: u8 = 2;
    pub const BUCKET_EXISTS: u8 = 3;
    pub const BUCKET_NOT_EMPTY: u8 = 4;
    pub const NO_SUCH_OBJECT: u8 = 5;
    pub const CHUNK_MISSING: u8 = 6;
    pub const NOT_REFERENCED: u8 = 7;
    pub const FINGERPRINT_MISMATCH: u8 = 8;
    pub const INVALID_BUCKET: u8 = 9;
    pub const INVALID_KEY: u8 = 10;
    pub const INVALID_CHUNKING: u8 = 11;
    pub const OTHER: u8 = 255;
}

fn encode_error(e: &StoreError) -> Vec<u8> {
    let mut w = Writer::starting(1);
    match e {
        StoreError::VersionMismatch {
            bucket,
            key,
            expected,
            current,
        } => {
            w.u8(kind::VERSION_MISMATCH)
                .str(bucket)
                .str(key)
                .opt_u64(*expected)
                .opt_u64(*current);
        }
        StoreError::NoSuchBucket(b) => {
            w.u8(kind::NO_SUCH_BUCKET).str(b);
        }
        StoreError::BucketExists(b) => {
            w.u8(kind::BUCKET_EXISTS).str(b);
        }
        StoreError::BucketNotEmpty(b) => {
            w.u8(kind::BUCKET_NOT_EMPTY).str(b);
        }
        StoreError::NoSuchObject { bucket, key } => {
            w.u8(kind::NO_SUCH_OBJECT).str(bucket).str(key);
        }
        StoreError::ChunkMissing(f) => {
            w.u8(kind::CHUNK_MISSING).fingerprint(f);
        }
        StoreError::NotReferenced {
            fingerprint,
            bucket,
        } => {
            w.u8(kind::NOT_REFERENCED)
                .fingerprint(fingerprint)
                .str(bucket);
        }
        StoreError::FingerprintMismatch { claimed, actual } => {
            w.u8(kind::FINGERPRINT_MISMATCH)
                .fingerprint(claimed)
                .fingerprint(actual);
        }
        StoreError::InvalidBucket { name, reason } => {
            w.u8(kind::INVALID_BUCKET).str(name).str(reason);
        }
        StoreError::InvalidKey { key, reason } => {
            w.u8(kind::INVALID_KEY).str(key).str(reason);
        }
        StoreError::InvalidChunking(reason) => {
            w.u8(kind::INVALID_CHUNKING).str(reason);
        }
        other => {
            w.u8(kind::OTHER).str(&other.to_string());
        }
    }
    w.0
}

fn decode_error(r: &mut Reader<'_>, node: NodeId) -> Result<StoreError> {
    let e = match r.u8()? {
        kind::VERSION_MISMATCH => StoreError::VersionMismatch {
            bucket: r.string()?,
            key: r.string()?,
            expected: r.opt_u64()?,
            current: r.opt_u64()?,
        },
        kind::NO_SUCH_BUCKET => StoreError::NoSuchBucket(r.string()?),
        kind::BUCKET_EXISTS => StoreError::BucketExists(r.string()?),
        kind::BUCKET_NOT_EMPTY => StoreError::BucketNotEmpty(r.string()?),
        kind::NO_SUCH_OBJECT => StoreError::NoSuchObject {
            bucket: r.string()?,
            key: r.string()?,
        },
        kind::CHUNK_MISSING => StoreError::ChunkMissing(r.fingerprint()?),
        kind::NOT_REFERENCED => StoreError::NotReferenced {
            fingerprint: r.fingerprint()?,
            bucket: r.string()?,
        },
        kind::FINGERPRINT_MISMATCH => StoreError::FingerprintMismatch {
            claimed: r.fingerprint()?,
            actual: r.fingerprint()?,
        },
        kind::INVALID_BUCKET => StoreError::InvalidBucket {
            name: r.string()?,
            reason: r.string()?,
        },
        kind::INVALID_KEY => StoreError::InvalidKey {
            key: r.string()?,
            reason: r.string()?,
        },
        kind::INVALID_CHUNKING => StoreError::InvalidChunking(r.string()?),
        kind::OTHER => StoreError::Remote {
            node,
            message: r.string()?,
        },
        other => return Err(r.malformed(format!("error kind {other}"))),
    };
    r.end()?;
    Ok(e)
}

/// Checks the chunk bytes a one-call get brought: the manifest keeps its
/// one chunk with it, the length is that chunk's, and the bytes pass the
/// CRC-32C the node sent.
fn check_chunk_answer(m: &Manifest, crc: u32, data: Bytes) -> Result<Bytes> {
    let bad = |reason: String| StoreError::Malformed {
        what: "small object get answer",
        reason,
    };
    let chunk = match m.chunks() {
        [chunk] if m.chunk_at_manifest_node() => *chunk,
        _ => {
            return Err(bad(format!(
                "chunk bytes came with a manifest of {}/{} that does not keep its chunk with it",
                m.bucket(),
                m.key()
            )))
        }
    };
    if data.len() != chunk.len as usize {
        return Err(bad(format!(
            "{} bytes came for a chunk of {} bytes",
            data.len(),
            chunk.len
        )));
    }
    check_crc(chunk.fingerprint, crc, &data, "arrived damaged")?;
    Ok(data)
}

/// Checks a chunk's bytes against the CRC-32C that came with them.
fn check_crc(fingerprint: Fingerprint, expected: u32, data: &[u8], what: &str) -> Result<()> {
    let actual = chunk_crc32c(data);
    if actual != expected {
        return Err(StoreError::InvalidChunk {
            fingerprint,
            reason: format!(
                "its {} bytes {what}: CRC-32C {actual:08x}, sent as {expected:08x}",
                data.len()
            ),
        });
    }
    Ok(())
}

/// Runs one encoded store call against a node's store and encodes its
/// answer (errors included: the answer is always bytes to send back).
pub async fn serve_call<N: StoreNode>(node: &N, call: Bytes) -> Bytes {
    // A caller that wants one buffer (a kernel's call to its own node)
    // pays the one copy a gather would have made.
    quarry_proto::join_pieces(&serve_call_pieces(node, call).await)
}

/// [`serve_call`] with the answer as pieces whose concatenation is the
/// answer: a chunk read answers with the pages' bytes as the device read
/// them, which a connection writes out by a vectored write, never joined
/// at this node.
pub async fn serve_call_pieces<N: StoreNode>(node: &N, call: Bytes) -> Vec<Bytes> {
    match serve(node, call).await {
        Ok(answer) => answer,
        Err(e) => vec![Bytes::from(encode_error(&e))],
    }
}

async fn serve<N: StoreNode>(node: &N, call: Bytes) -> Result<Vec<Bytes>> {
    let mut r = Reader::new("store call", &call);
    let op_byte = r.u8()?;
    let op =
        Op::from_u8(op_byte).ok_or_else(|| r.malformed(format!("unknown store op {op_byte}")))?;
    let mut w = Writer::starting(0);
    match op {
        Op::ReadChunk => return serve_read_chunk(node, &mut r).await,
        Op::ReadChunks => return serve_read_chunks(node, &mut r).await,
        Op::PutChunk | Op::ReleaseChunk | Op::ChunksPage | Op::LowerRefs => {
            serve_chunk_call(node, op, &mut r, &call, &mut w).await?
        }
        Op::GetManifest
        | Op::PutManifest
        | Op::DeleteManifest
        | Op::ListManifests
        | Op::ManifestsPage => serve_manifest_call(node, op, &mut r, &mut w).await?,
        Op::PutWithChunk | Op::GetWithChunk => {
            serve_small_call(node, op, &mut r, &call, &mut w).await?
        }
        Op::CreateBucket | Op::Bucket | Op::DeleteBucket | Op::Buckets | Op::Usage => {
            serve_bucket_call(node, op, &mut r, &mut w).await?
        }
    }
    Ok(vec![Bytes::from(w.0)])
}

/// The answer to a chunk read: `0`, the bytes' CRC-32C (the reader checks
/// them against it after the network), their length, then the bytes as the
/// pieces the node read them in.
async fn serve_read_chunk<N: StoreNode>(node: &N, r: &mut Reader<'_>) -> Result<Vec<Bytes>> {
    let fp = r.fingerprint()?;
    r.end()?;
    let (crc, pieces) = node.read_chunk_pieces(fp).await?;
    let len_bytes = u32::try_from(pieces.iter().map(Bytes::len).sum::<usize>())
        .map_err(|_| r.malformed("a chunk longer than 4 GiB".to_string()))?;
    let mut answer = Vec::with_capacity(pieces.len() + 1);
    let mut head = Writer::starting(0);
    head.u32(crc).u32(len_bytes);
    answer.push(Bytes::from(head.0));
    answer.extend(pieces);
    Ok(answer)
}

/// The answer to a read of several chunks: `0`, their count, then for each
/// in the order asked, as [`serve_read_chunk`] answers one: its CRC-32C,
/// its length and its bytes.
async fn serve_read_chunks<N: StoreNode>(node: &N, r: &mut Reader<'_>) -> Result<Vec<Bytes>> {
    let count = usize::from(r.u16()?);
    if count == 0 || count > MAX_READ_CHUNKS {
        return Err(r.malformed(format!(
            "a read of {count} chunks (1 to {MAX_READ_CHUNKS} a call)"
        )));
    }
    let mut fingerprints = Vec::with_capacity(count);
    for _ in 0..count {
        fingerprints.push(r.fingerprint()?);
    }
    r.end()?;
    let reads =
        futures::future::try_join_all(fingerprints.iter().map(|&fp| node.read_chunk_pieces(fp)))
            .await?;
    let total: u64 = reads
        .iter()
        .flat_map(|(_, pieces)| pieces.iter().map(|p| p.len() as u64))
        .sum();
    if total > MAX_READ_CHUNKS_BYTES {
        return Err(r.malformed(format!(
            "a read of {count} chunks holding {total} bytes (at most {MAX_READ_CHUNKS_BYTES} a \
             call)"
        )));
    }
    let mut answer = Vec::with_capacity(1 + 2 * count);
    let mut head = Writer::starting(0);
    head.u16(count as u16);
    answer.push(Bytes::from(head.0));
    for (crc, pieces) in reads {
        let len_bytes: usize = pieces.iter().map(Bytes::len).sum();
        let mut head = Writer::default();
        head.u32(crc).u32(len_bytes as u32);
        answer.push(Bytes::from(head.0));
        answer.extend(pieces);
    }
    Ok(answer)
}

/// Runs a call on the node's chunk table, writing its answer to `w`.
async fn serve_chunk_call<N: StoreNode>(
    node: &N,
    op: Op,
    r: &mut Reader<'_>,
    call: &Bytes,
    w: &mut Writer,
) -> Result<()> {
    match op {
        Op::PutChunk => {
            let bucket = r.bucket()?;
            let fp = r.fingerprint()?;
            let crc = r.u32()?;
            let data = r.bytes(call)?;
            r.end()?;
            // The writer hashed these bytes to name them and took their
            // CRC-32C in the same pass over them; the CRC proves they
            // crossed the network intact, at a tenth of hashing again
            // (a put is hashed once: docs/store.md, "Checks").
            check_chunk_len(fp, &data)?;
            check_crc(fp, crc, &data, "arrived damaged")?;
            let put = node.put_chunk(&bucket, fp, data).await?;
            w.flag(put.stored).u64(put.refcount);
        }
        Op::ReleaseChunk => {
            let bucket = r.bucket()?;
            let fp = r.fingerprint()?;
            r.end()?;
            w.release(&node.release_chunk(&bucket, fp).await?);
        }
        Op::ChunksPage => {
            let after = r.optional(Reader::fingerprint)?;
            let limit = r.u32()? as usize;
            r.end()?;
            let list = StoreNode::chunks_page(node, after, limit).await?;
            w.u32(list.len() as u32);
            for (f, info) in &list {
                w.fingerprint(f)
                    .location(&info.location)
                    .u32(info.len)
                    .u64(info.touched_unix_ms)
                    .refs(&info.refs);
            }
        }
        Op::LowerRefs => {
            let fp = r.fingerprint()?;
            let expected = r.refs()?;
            let before = r.u64()?;
            r.end()?;
            match node.lower_refs(fp, expected, before).await? {
                None => w.u8(0),
                Some(rel) => w.u8(1).release(&rel),
            };
        }
        other => {
            return Err(r.malformed(format!("{other:?} is not a chunk table call")));
        }
    }
    Ok(())
}

/// Runs a call on the node's manifest table, writing its answer to `w`.
async fn serve_manifest_call<N: StoreNode>(
    node: &N,
    op: Op,
    r: &mut Reader<'_>,
    w: &mut Writer,
) -> Result<()> {
    match op {
        Op::GetManifest => {
            let bucket = r.bucket()?;
            let key = r.key()?;
            r.end()?;
            match node.get_manifest(&bucket, &key).await? {
                None => w.u8(0),
                Some(m) => w.u8(1).manifest(&m),
            };
        }
        Op::PutManifest => {
            let m = r.manifest()?;
            let condition = r.condition()?;
            r.end()?;
            let put = node.put_manifest(m, condition).await?;
            w.manifest(&put.manifest);
            match &put.replaced {
                None => w.u8(0),
                Some(old) => w.u8(1).manifest(old),
            };
        }
        Op::DeleteManifest => {
            let bucket = r.bucket()?;
            let key = r.key()?;
            let condition = r.condition()?;
            r.end()?;
            w.manifest(&node.delete_manifest(&bucket, &key, condition).await?);
        }
        Op::ListManifests => {
            let bucket = r.bucket()?;
            let prefix = r.string()?;
            let after = r.optional(Reader::key)?;
            let limit = r.u32()? as usize;
            r.end()?;
            let list =
                StoreNode::list_manifests(node, &bucket, &prefix, after.as_ref(), limit).await?;
            w.u32(list.len() as u32);
            for m in &list {
                w.manifest(m);
            }
        }
        Op::ManifestsPage => {
            let cursor = r.optional(|r| Ok(r.blob()?.to_vec()))?;
            let limit = r.u32()? as usize;
            r.end()?;
            let (list, next) = StoreNode::manifests_page(node, cursor, limit).await?;
            w.u32(list.len() as u32);
            for m in &list {
                w.manifest(m);
            }
            match next {
                None => w.u8(0),
                Some(c) => w.u8(1).blob(&c),
            };
        }
        other => {
            return Err(r.malformed(format!("{other:?} is not a manifest table call")));
        }
    }
    Ok(())
}

/// Runs a small object's one-call put or get, writing its answer to `w`.
async fn serve_small_call<N: StoreNode>(
    node: &N,
    op: Op,
    r: &mut Reader<'_>,
    call: &Bytes,
    w: &mut Writer,
) -> Result<()> {
    match op {
        Op::PutWithChunk => {
            let m = r.manifest()?;
            let condition = r.condition()?;
            let crc = r.u32()?;
            let data = r.bytes(call)?;
            r.end()?;
            let chunk = check_small_put(&m, &data)?;
            // As for a chunk put: the CRC proves the bytes crossed the
            // network intact; the writer hashed them to name them.
            check_crc(chunk.fingerprint, crc, &data, "arrived damaged")?;
            let put = node.put_with_chunk(m, condition, data).await?;
            w.manifest(&put.manifest);
            match &put.replaced {
                None => w.u8(0),
                Some(old) => w.u8(1).manifest(old),
            };
            w.flag(put.replaced_released);
        }
        Op::GetWithChunk => {
            let bucket = r.bucket()?;
            let key = r.key()?;
            r.end()?;
            match node.get_with_chunk(&bucket, &key).await? {
                None => {
                    w.u8(0);
                }
                Some(found) => {
                    w.u8(1).manifest(&found.manifest);
                    match &found.chunk {
                        None => w.u8(0),
                        // The reader checks the bytes against this after
                        // the network.
                        Some(data) => w.u8(1).u32(chunk_crc32c(data)).blob(data),
                    };
                }
            }
        }
        other => {
            return Err(r.malformed(format!("{other:?} is not a small object call")));
        }
    }
    Ok(())
}

/// Checks that `data` is what a one-call put of `m` must carry: `m` keeps
/// its one chunk with it, and `data` has that chunk's length. Returns the
/// chunk's reference.
pub fn check_small_put(m: &Manifest, data: &[u8]) -> Result<crate::manifest::ChunkRef> {
    let bad = |reason: String| StoreError::Malformed {
        what: "small object put",
        reason,
    };
    if !m.chunk_at_manifest_node() {
        return Err(bad(format!(
            "the manifest of {}/{} does not keep its chunk with it",
            m.bucket(),
            m.key()
        )));
    }
    let [chunk] = m.chunks() else {
        return Err(bad(format!("{} chunks, not one", m.chunks().len())));
    };
    check_chunk_len(chunk.fingerprint, data)?;
    if data.len() != chunk.len as usize {
        return Err(bad(format!(
            "{} bytes sent for a chunk of {} bytes",
            data.len(),
            chunk.len
        )));
    }
    Ok(*chunk)
}

/// Runs a call on the node's bucket and accounting, writing its answer to `w`.
async fn serve_bucket_call<N: StoreNode>(
    node: &N,
    op: Op,
    r: &mut Reader<'_>,
    w: &mut Writer,
) -> Result<()> {
    match op {
        Op::CreateBucket => {
            let bucket = r.bucket()?;
            let config = r.bucket_config()?;
            r.end()?;
            node.create_bucket(&bucket, config).await?;
        }
        Op::Bucket => {
            let bucket = r.bucket()?;
            r.end()?;
            match node.bucket(&bucket).await? {
                None => w.u8(0),
                Some(c) => w.u8(1).bucket_config(&c),
            };
        }
        Op::DeleteBucket => {
            let bucket = r.bucket()?;
            r.end()?;
            node.delete_bucket(&bucket).await?;
        }
        Op::Buckets => {
            r.end()?;
            let list = node.buckets().await?;
            w.u32(list.len() as u32);
            for (b, c) in &list {
                w.bucket(b).bucket_config(c);
            }
        }
        Op::Usage => {
            r.end()?;
            let u = node.usage().await?;
            w.u32(u.buckets.len() as u32);
            for (b, bu) in &u.buckets {
                w.bucket(b).bucket_usage(bu);
            }
            w.u64(u.objects)
                .u64(u.logical_bytes)
                .u64(u.stored_bytes)
                .u64(u.chunks);
        }
        other => {
            return Err(r.malformed(format!("{other:?} is not a bucket and accounting call")));
        }
    }
    Ok(())
}

impl<X: StoreTransport> StoreNode for RemoteNode<X> {
    fn id(&self) -> NodeId {
        self.id
    }
    async fn put_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
        data: Bytes,
    ) -> Result<ChunkPut> {
        if data.is_empty() || data.len() > MAX_CHUNK_SIZE as usize {
            return Err(StoreError::InvalidChunk {
                fingerprint,
                reason: format!("{} bytes, not in 1..={MAX_CHUNK_SIZE}", data.len()),
            });
        }
        let mut w = Writer::starting(Op::PutChunk as u8);
        w.bucket(bucket)
            .fingerprint(&fingerprint)
            .u32(chunk_crc32c(&data))
            .blob(&data);
        self.rpc(false, w, |r, _| {
            Ok(ChunkPut {
                stored: r.flag()?,
                refcount: r.u64()?,
            })
        })
        .await
    }
    async fn release_chunk(
        &self,
        bucket: &BucketName,
        fingerprint: Fingerprint,
    ) -> Result<ChunkRelease> {
        let mut w = Writer::starting(Op::ReleaseChunk as u8);
        w.bucket(bucket).fingerprint(&fingerprint);
        self.rpc(false, w, |r, _| r.release()).await
    }
    async fn read_chunk(&self, fingerprint: Fingerprint) -> Result<Bytes> {
        let mut w = Writer::starting(Op::ReadChunk as u8);
        w.fingerprint(&fingerprint);
        let (crc, data) = self
            .rpc(true, w, |r, answer| Ok((r.u32()?, r.bytes(answer)?)))
            .await?;
        // The node checked the bytes against their record when it read
        // them; the CRC it sent checks them again here, after the network.
        check_crc(fingerprint, crc, &data, "arrived damaged")?;
        Ok(data)
    }
    async fn get_manifest(&self, bucket: &BucketName, key: &ObjectKey) -> Result<Option<Manifest>> {
        let mut w = Writer::starting(Op::GetManifest as u8);
        w.bucket(bucket).key(key);
        self.rpc(true, w, |r, _| r.optional(Reader::manifest)).await
    }
    async fn put_manifest(&self, manifest: Manifest, condition: Condition) -> Result<ManifestPut> {
        let mut w = Writer::starting(Op::PutManifest as u8);
        w.manifest(&manifest).condition(condition);
        self.rpc(false, w, |r, _| {
            Ok(ManifestPut {
                manifest: r.manifest()?,
                replaced: r.optional(Reader::manifest)?,
            })
        })
        .await
    }
    async fn delete_manifest(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> Result<Manifest> {
        let mut w = Writer::starting(Op::DeleteManifest as u8);
        w.bucket(bucket).key(key).condition(condition);
        self.rpc(false, w, |r, _| r.manifest()).await
    }
    async fn put_with_chunk(
        &self,
        manifest: Manifest,
        condition: Condition,
        data: Bytes,
    ) -> Result<SmallPut> {
        check_small_put(&manifest, &data)?;
        let mut w = Writer::starting(Op::PutWithChunk as u8);
        w.manifest(&manifest)
            .condition(condition)
            .u32(chunk_crc32c(&data))
            .blob(&data);
        self.rpc(false, w, |r, _| {
            Ok(SmallPut {
                manifest: r.manifest()?,
                replaced: r.optional(Reader::manifest)?,
                replaced_released: r.flag()?,
            })
        })
        .await
    }
    async fn get_with_chunk(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> Result<Option<ManifestWithChunk>> {
        let mut w = Writer::starting(Op::GetWithChunk as u8);
        w.bucket(bucket).key(key);
        let found = self
            .rpc(true, w, |r, answer| {
                r.optional(|r| {
                    let manifest = r.manifest()?;
                    let chunk = r.optional(|r| Ok((r.u32()?, r.bytes(answer)?)))?;
                    Ok((manifest, chunk))
                })
            })
            .await?;
        let Some((manifest, chunk)) = found else {
            return Ok(None);
        };
        let chunk = match chunk {
            None => None,
            Some((crc, data)) => Some(check_chunk_answer(&manifest, crc, data)?),
        };
        Ok(Some(ManifestWithChunk { manifest, chunk }))
    }
    async fn list_manifests(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<Vec<Manifest>> {
        let mut w = Writer::starting(Op::ListManifests as u8);
        w.bucket(bucket).str(prefix);
        match after {
            None => w.u8(0),
            Some(k) => w.u8(1).key(k),
        };
        w.u32(limit.min(MAX_PAGE_ITEMS) as u32);
        self.rpc(true, w, |r, _| r.manifests()).await
    }
    async fn create_bucket(&self, bucket: &BucketName, config: BucketConfig) -> Result<()> {
        let mut w = Writer::starting(Op::CreateBucket as u8);
        w.bucket(bucket).bucket_config(&config);
        self.rpc(false, w, |_, _| Ok(())).await
    }
    async fn bucket(&self, bucket: &BucketName) -> Result<Option<BucketConfig>> {
        let mut w = Writer::starting(Op::Bucket as u8);
        w.bucket(bucket);
        self.rpc(true, w, |r, _| r.optional(Reader::bucket_config))
            .await
    }
    async fn delete_bucket(&self, bucket: &BucketName) -> Result<()> {
        let mut w = Writer::starting(Op::DeleteBucket as u8);
        w.bucket(bucket);
        self.rpc(false, w, |_, _| Ok(())).await
    }
    async fn buckets(&self) -> Result<Vec<(BucketName, BucketConfig)>> {
        self.rpc(true, Writer::starting(Op::Buckets as u8), |r, _| {
            let n = r.count(8)?;
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let b = r.bucket()?;
                out.push((b, r.bucket_config()?));
            }
            Ok(out)
        })
        .await
    }
    async fn usage(&self) -> Result<Usage> {
        self.rpc(true, Writer::starting(Op::Usage as u8), |r, _| {
            let n = r.count(36)?;
            let mut u = Usage::default();
            for _ in 0..n {
                let b = r.bucket()?;
                u.buckets.insert(b, r.bucket_usage()?);
            }
            u.objects = r.u64()?;
            u.logical_bytes = r.u64()?;
            u.stored_bytes = r.u64()?;
            u.chunks = r.u64()?;
            Ok(u)
        })
        .await
    }
    async fn manifests_page(
        &self,
        cursor: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<(Vec<Manifest>, Option<Vec<u8>>)> {
        let mut w = Writer::starting(Op::ManifestsPage as u8);
        match &cursor {
            None => w.u8(0),
            Some(c) => w.u8(1).blob(c),
        };
        w.u32(limit.min(MAX_PAGE_ITEMS) as u32);
        self.rpc(true, w, |r, _| {
            let list = r.manifests()?;
            let next = r.optional(|r| Ok(r.blob()?.to_vec()))?;
            Ok((list, next))
        })
        .await
    }
    async fn chunks_page(
        &self,
        after: Option<Fingerprint>,
        limit: usize,
    ) -> Result<Vec<(Fingerprint, ChunkInfo)>> {
        let mut w = Writer::starting(Op::ChunksPage as u8);
        match &after {
            None => w.u8(0),
            Some(f) => w.u8(1).fingerprint(f),
        };
        w.u32(limit.min(MAX_PAGE_ITEMS) as u32);
        self.rpc(true, w, |r, _| {
            let n = r.count(32 + 16 + 12 + 4)?;
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let f = r.fingerprint()?;
                let location = r.location()?;
                let len = r.u32()?;
                let touched_unix_ms = r.u64()?;
                let refs = r.refs()?;
                out.push((
                    f,
                    ChunkInfo {
                        location,
                        len,
                        refcount: refs.values().sum(),
                        refs,
                        touched_unix_ms,
                    },
                ));
            }
            Ok(out)
        })
        .await
    }
    async fn lower_refs(
        &self,
        fingerprint: Fingerprint,
        expected: BTreeMap<BucketName, u64>,
        touched_before_ms: u64,
    ) -> Result<Option<ChunkRelease>> {
        let mut w = Writer::starting(Op::LowerRefs as u8);
        w.fingerprint(&fingerprint)
            .refs(&expected)
            .u64(touched_before_ms);
        self.rpc(false, w, |r, _| r.optional(Reader::release)).await
    }
}
