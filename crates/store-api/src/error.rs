//! The store's typed errors.

use crate::fingerprint::Fingerprint;
use crate::placement::NodeId;

/// Everything that can go wrong in the store. Each variant names the input
/// or the object it is about, so a message alone says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A bucket name broke a naming rule.
    #[error("invalid bucket name {name:?}: {reason}")]
    InvalidBucket {
        /// The offending name (lossy UTF-8, cut to 80 characters).
        name: String,
        /// Which rule it broke.
        reason: String,
    },
    /// An object key broke a naming rule.
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key (lossy UTF-8, cut to 80 characters).
        key: String,
        /// Which rule it broke.
        reason: String,
    },
    /// Chunking parameters outside their bounds.
    #[error("invalid chunking parameters: {0}")]
    InvalidChunking(String),
    /// An encoded manifest (or table record) that does not decode.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What was being decoded (`manifest`, `chunk record`, ...).
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A conditional put or delete whose condition did not hold.
    #[error("version mismatch on {bucket}/{key}: expected {}, current {}", show_version(*.expected), show_version(*.current))]
    VersionMismatch {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// The version the caller required (`None`: that the object be absent).
        expected: Option<u64>,
        /// The version actually current (`None`: absent).
        current: Option<u64>,
    },
    /// The bucket does not exist.
    #[error("no such bucket {0:?}")]
    NoSuchBucket(String),
    /// The bucket already exists.
    #[error("bucket {0:?} already exists")]
    BucketExists(String),
    /// The bucket still holds objects.
    #[error("bucket {0:?} is not empty")]
    BucketNotEmpty(String),
    /// The object does not exist.
    #[error("no such object {bucket}/{key}")]
    NoSuchObject {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
    },
    /// A chunk that a manifest (or caller) names is not in the chunk table.
    #[error("chunk {0} is missing")]
    ChunkMissing(Fingerprint),
    /// A release of a chunk for a bucket that holds no reference to it.
    #[error("chunk {fingerprint} has no reference from bucket {bucket:?} to release")]
    NotReferenced {
        /// The chunk.
        fingerprint: Fingerprint,
        /// The bucket.
        bucket: String,
    },
    /// A chunk that is empty or longer than [`crate::MAX_CHUNK_SIZE`], or
    /// whose length disagrees with the chunk table.
    #[error("invalid chunk {fingerprint}: {reason}")]
    InvalidChunk {
        /// The chunk.
        fingerprint: Fingerprint,
        /// What is wrong.
        reason: String,
    },
    /// A put that took longer than the store allows between referencing its
    /// first chunk and committing its manifest (the orphan collector relies
    /// on that bound); its references were released.
    #[error("put of {bucket}/{key} took {elapsed_ms} ms, over the {limit_ms} ms limit; retry")]
    PutExpired {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// How long it took.
        elapsed_ms: u64,
        /// The limit.
        limit_ms: u64,
    },
    /// Data sent as a chunk does not hash to the fingerprint it was sent under.
    #[error("chunk data hashes to {actual}, not to the fingerprint {claimed} it was sent under")]
    FingerprintMismatch {
        /// The fingerprint the caller named.
        claimed: Fingerprint,
        /// The SHA-256 of the bytes.
        actual: Fingerprint,
    },
    /// A byte range that starts past the end of the object.
    #[error("range starts at byte {offset}, past the end of the {size}-byte object")]
    RangeOutOfBounds {
        /// The requested start.
        offset: u64,
        /// The object's size.
        size: u64,
    },
    /// An object needs more chunks than one manifest may hold.
    #[error("object needs more than {limit} chunks; use larger chunks")]
    TooManyChunks {
        /// The limit ([`crate::MAX_MANIFEST_CHUNKS`]).
        limit: usize,
    },
    /// A placement over no members.
    #[error("placement needs at least one member node")]
    NoMembers,
    /// A node id that is not a member.
    #[error("node {0} is not a member of the cluster")]
    UnknownNode(NodeId),
    /// An object changed while it was being read (a chunk of the version
    /// being read was released by a newer version); read again.
    #[error("{bucket}/{key} changed from version {read} while it was being read")]
    Changed {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// The version the read started on.
        read: u64,
    },
    /// Columns of an object cannot be read: it is not Parquet stored page
    /// by page, its footer does not parse, or no column has a name asked.
    #[error("{object}: {reason}")]
    Columns {
        /// `BUCKET/KEY`.
        object: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading the object's bytes from the caller failed.
    #[error("reading the object's data: {0}")]
    Io(#[from] std::io::Error),
    /// The table or chunk backend failed.
    #[error("storage backend: {0}")]
    Backend(String),
    /// A node failed a call with an error that has no variant of its own
    /// across the wire (a full device, a damaged chunk); the message is the
    /// node's.
    #[error("node {node}: {message}")]
    Remote {
        /// The node that failed the call.
        node: NodeId,
        /// Its error message.
        message: String,
    },
    /// A call could not be delivered to a node or its answer not brought
    /// back (unreachable, timed out, refused by the protocol).
    #[error("cannot reach the store of node {node}: {reason}")]
    Transport {
        /// The node called.
        node: NodeId,
        /// What went wrong.
        reason: String,
    },
}

fn show_version(v: Option<u64>) -> String {
    match v {
        Some(v) => format!("version {v}"),
        None => "absent".to_string(),
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Cuts a name to 80 characters for an error message.
pub(crate) fn shown(name: &str) -> String {
    let mut s: String = name.chars().take(80).collect();
    if s.len() < name.len() {
        s.push('…');
    }
    s
}
