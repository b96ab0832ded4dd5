//! `quarry-store-api` — objects as a client and the nodes both see them.
//!
//! An object is a *manifest* ([`Manifest`]: bucket, key, version, size,
//! chunking and the list of its chunks) whose chunks are named by the
//! SHA-256 of their bytes ([`Fingerprint`]) and placed by rendezvous
//! hashing ([`Placement`]): a chunk on the node its fingerprint names, a
//! manifest on the node hash(bucket, key) names. This crate owns what a
//! client computes on its side — names ([`BucketName`], [`ObjectKey`]),
//! chunking ([`Chunking`], [`Chunker`], [`AsyncChunker`]), fingerprints,
//! placement, the manifest format — the store's call encoding
//! ([`RemoteNode`] over a [`StoreTransport`] at the caller, [`serve_call`]
//! at the node), and the object operations written once over any
//! [`StoreNode`] ([`ObjectStore`]: put, get, list, delete in the order that
//! keeps every manifest's chunks present, and the orphan collector).
//!
//! One node's tables and chunk bytes (its [`StoreNode`] in a node) are in
//! `quarry-store`; a client needs only this crate. `docs/store.md` has the
//! formats.
//!
//! ```
//! use quarry_store_api::{BucketName, Chunking, Fingerprint, ObjectKey, Placement};
//!
//! let data = vec![7u8; 10_000];
//! // Fixed 4 KiB chunks, as (offset, length): two whole ones and a tail.
//! let cuts = Chunking::fixed(4096)?.split(&data);
//! assert_eq!(cuts, vec![(0, 4096), (4096, 4096), (8192, 1808)]);
//! // The same bytes have the same name, so they are stored once.
//! let (a, b) = (&data[..4096], &data[4096..8192]);
//! assert_eq!(Fingerprint::of(a), Fingerprint::of(b));
//! // Where things live is computed, not looked up.
//! let placement = Placement::new([1, 2, 3, 4])?;
//! let bucket = BucketName::new("photos")?;
//! let owner = placement.manifest_node(&bucket, &ObjectKey::new("a.raw")?);
//! assert!(placement.members().contains(&owner));
//! # Ok::<(), quarry_store_api::StoreError>(())
//! ```
#![deny(missing_docs)]

mod bucket;
mod chunking;
mod cluster;
mod error;
mod fingerprint;
mod manifest;
mod name;
mod ops;
mod parquet_cut;
mod parquet_select;
mod placement;
mod put_pipeline;
mod remote;
mod usage;

pub use bucket::{finish as finish_record, open as open_record, seal as seal_record};
pub use bucket::{BucketConfig, RECORD_FORMAT};
pub use chunking::{
    check_chunk_len, AsyncChunker, Chunk, Chunker, Chunking, CutOutcome, MAX_CHUNK_SIZE,
    MIN_CHUNK_SIZE,
};
pub use cluster::{
    ColumnRead, ObjectStore, OrphanReport, BUCKET_CONFIG_TTL, DEFAULT_PUT_DEADLINE_MS,
    MAX_COLUMN_READ_BYTES, MAX_SMALL_OBJECT_BYTES,
};
pub use error::{Result, StoreError};
pub use fingerprint::{chunk_crc32c, chunk_crc32c_of_parts, Fingerprint};
pub use manifest::{
    ChunkRef, ChunkRole, ChunkSlice, Manifest, ParquetLayout, Reader as RecordReader,
    FLAG_CHUNK_AT_MANIFEST_NODE, MANIFEST_FORMAT_VERSION, MANIFEST_MAGIC, MAX_COLUMN_PATHS_BYTES,
    MAX_COLUMN_PATH_BYTES, MAX_MANIFEST_BYTES, MAX_MANIFEST_CHUNKS, MAX_NOTE_BYTES,
    MAX_PARQUET_COLUMNS,
};
pub use name::{BucketName, ObjectKey, MAX_BUCKET_LEN, MAX_KEY_LEN, MAX_KEY_SEGMENT_LEN};
pub use ops::{
    now_ms, ChunkInfo, ChunkLocation, ChunkPut, ChunkRelease, Condition, ManifestPut,
    ManifestWithChunk, SmallPut,
};
pub use parquet_cut::PAGE_GROUP_MAX_BYTES;
pub use parquet_select::{
    ColumnFilter, ColumnPlan, ColumnSelectError, CompareOp, FilterValue, MAX_COLUMN_FILTERS,
};
pub use placement::{bucket_point, manifest_point, NodeId, Placement};
pub use remote::{
    check_small_put, serve_call, serve_call_pieces, RemoteNode, StoreNode, StoreTransport,
    MAX_PAGE_ITEMS, MAX_READ_CHUNKS, MAX_READ_CHUNKS_BYTES,
};
pub use usage::{BucketUsage, Usage};
