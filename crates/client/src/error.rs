use std::path::PathBuf;

use quarry_proto::LinearSpaceError;
use quarry_proto::{GlobalPageAddr, ProtoError, Status};

/// Everything a client call can fail with; each message names what was wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No node of the cluster could be reached.
    #[error("cannot reach the cluster: {tried}")]
    NoEntryNode {
        /// Each address tried and why it failed.
        tried: String,
    },
    /// The connection or a frame failed.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The cluster answered with an error.
    #[error("{message}")]
    Remote {
        /// Machine-readable class.
        status: Status,
        /// The node's explanation.
        message: String,
    },
    /// The cluster answered with a message that does not fit the request.
    #[error("unexpected answer to {request}: {answer}")]
    UnexpectedAnswer {
        /// The request kind.
        request: &'static str,
        /// The answer received.
        answer: String,
    },
    /// A compute command or call failed (the message says why: a limit, a
    /// missing object, a dead node, bad kernel arguments).
    #[error("{0}")]
    Compute(String),
    /// The cluster file could not be found or read.
    #[error("cluster file {path}: {reason}")]
    ClusterFile {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The linear page space could not be built, or a linear page lies
    /// outside it.
    #[error(transparent)]
    LinearSpace(#[from] LinearSpaceError),
    /// One page of a linear read or write failed.
    #[error("linear page {linear} ({addr}): {reason}")]
    LinearPage {
        /// The linear page number.
        linear: u64,
        /// Its global address.
        addr: GlobalPageAddr,
        /// What went wrong. Not a `#[source]`: the message already contains
        /// it, and error reports that print the chain would say it twice.
        reason: Box<ClientError>,
    },
    /// A linear request asked for more pages than one call moves.
    #[error("{count} pages in one linear request, more than the limit of {limit}")]
    TooManyPages {
        /// Pages asked for.
        count: u64,
        /// The limit.
        limit: u64,
    },
    /// A linear request's queue depth is out of bounds.
    #[error("queue depth {queue_depth} is outside 1..={limit}")]
    InvalidQueueDepth {
        /// The queue depth asked for.
        queue_depth: usize,
        /// The largest allowed.
        limit: usize,
    },
    /// An object store operation failed.
    #[error(transparent)]
    Store(#[from] quarry_store_api::StoreError),
    /// A block volume operation failed.
    #[error(transparent)]
    Volume(#[from] quarry_volume_api::BlockVolumeError),
    /// A key-value operation failed.
    #[error(transparent)]
    Kv(#[from] quarry_kv_api::KvError),
    /// A local runtime could not be built (blocking client).
    #[error("cannot start the client runtime: {0}")]
    Runtime(std::io::Error),
}

impl ClientError {
    /// The remote status, when the cluster answered with an error (also for
    /// the page of a linear request that failed).
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Remote { status, .. } => Some(*status),
            ClientError::LinearPage { reason, .. } => reason.status(),
            _ => None,
        }
    }
}
