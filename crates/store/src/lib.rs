//! `quarry-store` — layer 5 of Quarry: what users name.
//!
//! An object is a *manifest*: bucket, key, version, size, creation time,
//! chunking parameters and the list of its chunks. A chunk is named by the
//! SHA-256 of its bytes ([`Fingerprint`]), stored once on the node its
//! fingerprint names and reference-counted (Multes++ Algorithm 1,
//! generalised from values to chunks); the manifest lives on the node that
//! hash(bucket, key) names ([`Placement`]: rendezvous hashing, so a change of
//! members moves little). Putting the same bytes twice costs no chunk space;
//! releasing the last reference deletes the chunk's record and trims its
//! pages, so the store, which knows what is dead, drives the flash garbage
//! collector (RFSA).
//!
//! What a client shares with the nodes — names ([`BucketName`],
//! [`ObjectKey`]), placement, chunking ([`Chunking`], [`Chunker`],
//! [`AsyncChunker`]), the manifest format ([`Manifest`]), the call encoding
//! ([`RemoteNode`], [`serve_call`]) and the object operations over a set of
//! nodes in the order that keeps every manifest's chunks present
//! ([`ObjectStore`], with the orphan collector) — is `quarry-store-api`'s,
//! re-exported here. This crate owns a node's side: its tables
//! ([`NodeStore`]: chunk table, manifest table with atomic and conditional
//! replace, bucket records, [`Usage`]), in-memory object stores
//! ([`mem_object_store`]) and the dedup benchmark ([`bench::dedup`]).
//! Persistence sits behind two traits: [`TableStore`] (small records,
//! atomic commits) and [`ChunkStore`] (chunk bytes on logical pages); both
//! have in-memory implementations, and persistent ones over the volume
//! layer's space manager ([`VolumeTableStore`], [`VolumeChunkStore`],
//! [`open_volume_node`]). `docs/store.md` has the formats and the crash
//! reasoning.
//!
//! ```
//! use quarry_store::{mem_object_store, BucketName, Chunking, Condition, ObjectKey};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = mem_object_store([1, 2, 3, 4]).await?;
//! let bucket = BucketName::new("photos")?;
//! store.create_bucket(&bucket, Chunking::fixed(4096)?).await?;
//!
//! let data = vec![7u8; 20_000];
//! let a = store.put_bytes(&bucket, &ObjectKey::new("a.raw")?, &data, Condition::Always).await?;
//! let b = store.put_bytes(&bucket, &ObjectKey::new("b.raw")?, &data, Condition::IfAbsent).await?;
//! assert_eq!((a.version(), a.chunks().len()), (1, 5));
//!
//! // Two objects of 20 000 bytes; the distinct chunks are one of 4096 bytes
//! // of sevens and the 3616-byte tail.
//! let df = store.usage().await?;
//! assert_eq!((df.logical_bytes, df.stored_bytes), (40_000, 4096 + 3616));
//!
//! // Replace b only if it is still version 1; a stale writer is refused.
//! let key = ObjectKey::new("b.raw")?;
//! store.put_bytes(&bucket, &key, b"new", Condition::IfVersion(b.version())).await?;
//! let stale = store.put_bytes(&bucket, &key, b"x", Condition::IfVersion(1)).await;
//! assert!(stale.unwrap_err().to_string().contains("expected version 1, current version 2"));
//!
//! let (_, bytes) = store.get_range(&bucket, &ObjectKey::new("a.raw")?, 4090, 10).await?;
//! assert_eq!(&bytes[..], &[7u8; 10]);
//! # Ok::<(), quarry_store::StoreError>(())
//! # }).unwrap();
//! ```
#![deny(missing_docs)]

pub mod bench;
mod data;
mod mem;
mod node;
mod records;
mod table;
mod volume_backed;

pub use data::{ChunkCheck, ChunkStore, MemChunkStore};
pub use mem::{mem_object_store, MemObjectStore};
pub use node::{NodeStore, Recovery};
// What a client shares with the nodes lives in quarry-store-api, which a
// client links without this crate; named here as it always was.
pub use quarry_store_api::{
    bucket_point, chunk_crc32c, manifest_point, serve_call, serve_call_pieces, AsyncChunker,
    BucketConfig, BucketName, BucketUsage, Chunk, ChunkInfo, ChunkLocation, ChunkPut, ChunkRef,
    ChunkRelease, ChunkSlice, Chunker, Chunking, Condition, Fingerprint, Manifest, ManifestPut,
    ManifestWithChunk, NodeId, ObjectKey, ObjectStore, OrphanReport, Placement, RemoteNode, Result,
    SmallPut, StoreError, StoreNode, StoreTransport, Usage, BUCKET_CONFIG_TTL,
    DEFAULT_PUT_DEADLINE_MS, FLAG_CHUNK_AT_MANIFEST_NODE, MANIFEST_FORMAT_VERSION, MANIFEST_MAGIC,
    MAX_BUCKET_LEN, MAX_CHUNK_SIZE, MAX_KEY_LEN, MAX_KEY_SEGMENT_LEN, MAX_MANIFEST_CHUNKS,
    MAX_PAGE_ITEMS, MAX_READ_CHUNKS, MAX_READ_CHUNKS_BYTES, MAX_SMALL_OBJECT_BYTES, MIN_CHUNK_SIZE,
};
pub use table::{Batch, MemTableStore, Op, OwnedRecords, Table, TableOwner, TableStore};
pub use volume_backed::{
    open_volume_node, ChunkPageSpan, VolumeChunkConfig, VolumeChunkStats, VolumeChunkStore,
    VolumeNodeStore, VolumeObjectStore, VolumeStoreConfig, VolumeTableConfig, VolumeTableStats,
    VolumeTableStore, CHUNK_HEADER_BYTES, CHUNK_MAGIC, CHUNK_TAG_BYTES, DEFAULT_CHUNK_SPACE,
    DEFAULT_LOG_SPACE, DEFAULT_SNAPSHOT_SPACE, MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_TABLE_KEY_BYTES,
    MAX_TABLE_VALUE_BYTES,
};
