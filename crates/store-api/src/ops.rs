//! What a node's store operations take and answer, and the clock they
//! stamp records with.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Result, StoreError};
use crate::manifest::Manifest;
use crate::name::{BucketName, ObjectKey};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Where a chunk's bytes are: `pages` consecutive logical pages of a volume
/// space, from `first_page` (the volume layer's `LogicalPage { space, index }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkLocation {
    /// The volume space.
    pub space: u32,
    /// Its first logical page.
    pub first_page: u64,
    /// How many pages it spans.
    pub pages: u32,
}

/// When a put or delete applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Condition {
    /// Always.
    #[default]
    Always,
    /// Only if the object does not exist.
    IfAbsent,
    /// Only if the object's current version is this one.
    IfVersion(u64),
}

impl Condition {
    /// Whether the condition holds for a key whose current version is
    /// `current`; the error names the key and both versions.
    pub fn check(self, bucket: &BucketName, key: &ObjectKey, current: Option<u64>) -> Result<()> {
        let expected = match self {
            Condition::Always => return Ok(()),
            Condition::IfAbsent => None,
            Condition::IfVersion(v) => Some(v),
        };
        if expected == current {
            Ok(())
        } else {
            Err(StoreError::VersionMismatch {
                bucket: bucket.to_string(),
                key: key.to_string(),
                expected,
                current,
            })
        }
    }
}

/// What a node's `put_chunk` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPut {
    /// True if the bytes were written (first copy); false if an existing
    /// chunk gained a reference.
    pub stored: bool,
    /// The reference count afterwards.
    pub refcount: u64,
}

/// What a node's `release_chunk` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRelease {
    /// The reference count afterwards.
    pub refcount: u64,
    /// At zero: the extent that was freed (and trimmed).
    pub freed: Option<ChunkLocation>,
}

/// A chunk table entry, as seen from outside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Where its bytes are.
    pub location: ChunkLocation,
    /// Its length.
    pub len: u32,
    /// Total references.
    pub refcount: u64,
    /// References per bucket.
    pub refs: BTreeMap<BucketName, u64>,
    /// When a reference was last added (ms since the epoch).
    pub touched_unix_ms: u64,
}

/// What a node's `put_manifest` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestPut {
    /// The manifest as committed (with its version).
    pub manifest: Manifest,
    /// The version it replaced: the caller must release its chunks.
    pub replaced: Option<Manifest>,
}

/// What a node's `put_with_chunk` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmallPut {
    /// The manifest as committed (with its version).
    pub manifest: Manifest,
    /// The version it replaced.
    pub replaced: Option<Manifest>,
    /// Whether the node released the replaced version's chunk itself (it
    /// does when that chunk was held with the manifest too); if not, the
    /// caller must release the replaced version's chunks.
    pub replaced_released: bool,
}

/// What a node's `get_with_chunk` found for a key: its current manifest
/// and, when the manifest's one chunk is held with it, that chunk's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestWithChunk {
    /// The current manifest.
    pub manifest: Manifest,
    /// The bytes of its one chunk, when it is held with the manifest.
    pub chunk: Option<bytes::Bytes>,
}
