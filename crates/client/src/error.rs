use std::path::PathBuf;

use quarry_proto::{ProtoError, Status};

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
    /// The cluster file could not be found or read.
    #[error("cluster file {path}: {reason}")]
    ClusterFile {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A local runtime could not be built (blocking client).
    #[error("cannot start the client runtime: {0}")]
    Runtime(std::io::Error),
}

impl ClientError {
    /// The remote status, when the cluster answered with an error.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Remote { status, .. } => Some(*status),
            _ => None,
        }
    }
}
