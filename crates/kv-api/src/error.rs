use thiserror::Error;

/// What can go wrong with a key-value call, on either side of the wire.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KvError {
    /// A tenant name breaks the rules (1-64 bytes of `A-Z a-z 0-9 _ - .`).
    #[error("invalid tenant name {name:?}: {reason}")]
    InvalidTenant {
        /// The name, cut to 80 characters.
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// A key breaks the rules.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// A value, batch or call beyond a limit.
    #[error("{0}")]
    TooLarge(String),
    /// A call or answer that does not decode.
    #[error("malformed key-value {what}: {reason}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The node refused the tenant's credentials.
    #[error("tenant {0:?} is not known here or its secret is wrong")]
    Denied(String),
    /// The call did not reach its node, or its answer did not come back.
    #[error("key-value call to node {node} failed: {message}")]
    Transport {
        /// The node called.
        node: u16,
        /// What the transport said.
        message: String,
    },
    /// The node refused the operation.
    #[error("{message}")]
    Failed {
        /// Why, as a kind.
        kind: crate::FailKind,
        /// Why, for people.
        message: String,
    },
    /// A request that cannot be right whatever the cluster holds (an array
    /// index past its end, an array read of a key holding a value).
    #[error("{0}")]
    Invalid(String),
    /// An answer that breaks the large-value or array format.
    #[error("{0}")]
    Format(String),
}

impl From<quarry_proto::CodecError> for KvError {
    fn from(e: quarry_proto::CodecError) -> Self {
        KvError::Malformed {
            what: e.what,
            reason: e.reason,
        }
    }
}

/// Results of key-value calls.
pub type Result<T, E = KvError> = std::result::Result<T, E>;
