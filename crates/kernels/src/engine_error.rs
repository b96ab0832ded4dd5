//! The engine's typed errors.

use quarry_proto::NodeId;

use crate::error::KernelError;
use crate::job::CommandId;
use crate::wire::{Failure, FailureKind};

/// What went wrong with a command or a call to the compute service.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    /// A message could not be decoded.
    #[error("malformed compute message: {0}")]
    Malformed(String),
    /// The call's arguments are wrong.
    #[error("{0}")]
    BadRequest(String),
    /// A kernel refused its arguments or its parts.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// No such command on this node.
    #[error(
        "no command {id} on node {node} (finished commands are kept for a while, then dropped)"
    )]
    NoSuchCommand {
        /// The command.
        id: CommandId,
        /// The node asked.
        node: NodeId,
    },
    /// The command has no result to read.
    #[error("command {id} has no result: {state}")]
    NotDone {
        /// The command.
        id: CommandId,
        /// Its state.
        state: String,
    },
    /// The node runs and queues as many commands as it takes.
    #[error("node {node} holds {commands} unfinished commands, its limit; retry when some finish")]
    Busy {
        /// The node.
        node: NodeId,
        /// Its limit.
        commands: usize,
    },
    /// A command exceeded one of its limits.
    #[error("{what} limit exceeded: {detail}")]
    Limit {
        /// `time`, `memory` or `result size`.
        what: &'static str,
        /// By how much, where.
        detail: String,
    },
    /// A node's answer does not fit one protocol message (the entry node
    /// then runs the segments in smaller runs).
    #[error("node {node}: {message}")]
    TooLarge {
        /// The node.
        node: NodeId,
        /// Why.
        message: String,
    },
    /// A target does not exist or cannot be read.
    #[error("{0}")]
    Target(String),
    /// Reading data on a node failed.
    #[error("node {node}: {message}")]
    Storage {
        /// The node.
        node: NodeId,
        /// What failed.
        message: String,
    },
    /// Another node failed or could not be reached.
    #[error("node {node}: {message}")]
    Remote {
        /// The node.
        node: NodeId,
        /// What it said, or why it could not be reached.
        message: String,
    },
}

impl ComputeError {
    /// The error as it crosses the wire.
    pub fn to_failure(&self) -> Failure {
        let kind = match self {
            ComputeError::Malformed(_) | ComputeError::BadRequest(_) | ComputeError::Kernel(_) => {
                FailureKind::BadRequest
            }
            ComputeError::NoSuchCommand { .. } => FailureKind::NoSuchCommand,
            ComputeError::NotDone { .. } => FailureKind::NotDone,
            ComputeError::Busy { .. } => FailureKind::Busy,
            ComputeError::TooLarge { .. } => FailureKind::TooLarge,
            _ => FailureKind::Internal,
        };
        Failure {
            kind,
            message: self.to_string(),
        }
    }
}

impl From<quarry_kernels_api::Malformed> for ComputeError {
    fn from(e: quarry_kernels_api::Malformed) -> Self {
        ComputeError::Malformed(e.0)
    }
}
