use std::io;

use crate::Tag;

/// Why a frame could not be encoded or decoded, or why a session failed. Each
/// variant names what was wrong (the peer, the size, the limit) so the message
/// can be shown to a user unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The peer actively refused the connection (nothing listens there).
    #[error("connection to {addr} refused")]
    ConnectRefused {
        /// The address dialled.
        addr: String,
    },
    /// Connecting failed for another reason (unresolvable name, no route, ...).
    #[error("connection to {addr} failed: {source}")]
    Connect {
        /// The address dialled.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// The connection was not established within the connect timeout.
    #[error("connection to {addr} timed out after {timeout_ms} ms")]
    ConnectTimeout {
        /// The address dialled.
        addr: String,
        /// The bound that was hit.
        timeout_ms: u64,
    },
    /// A frame did not start with the protocol's magic number.
    #[error("bad frame magic 0x{found:04x}, expected 0x{expected:04x} (not a Quarry peer?)")]
    BadMagic {
        /// What arrived.
        found: u16,
        /// [`crate::MAGIC`].
        expected: u16,
    },
    /// A frame announced a body longer than any valid frame can have.
    #[error("frame body of {body_len_bytes} bytes exceeds limit {limit_bytes}")]
    BodyTooLarge {
        /// The announced (or attempted) body length.
        body_len_bytes: u64,
        /// [`crate::MAX_BODY_BYTES`].
        limit_bytes: u32,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame: {got_bytes} of {expected_bytes} bytes received")]
    Truncated {
        /// Bytes of the frame that arrived.
        got_bytes: usize,
        /// Bytes the frame should have had (at least the header).
        expected_bytes: usize,
    },
    /// The frame's version byte names a protocol this build does not speak.
    #[error("protocol version {found} is not supported (this build speaks version {supported})")]
    UnsupportedVersion {
        /// The version that arrived.
        found: u8,
        /// [`crate::PROTOCOL_VERSION`].
        supported: u8,
    },
    /// The opcode is not defined (or not valid in this direction).
    #[error("unknown opcode 0x{opcode:02x} ({context})")]
    UnknownOpcode {
        /// The opcode byte.
        opcode: u8,
        /// Where it arrived (request or answer).
        context: &'static str,
    },
    /// A frame's header was valid but its body was not.
    #[error("malformed {what} body: {reason}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// A message is too large to be encoded within the protocol's limits.
    #[error("{what} of {len} exceeds limit {limit}")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// Its length (bytes or entries).
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// Reading or writing the connection failed.
    #[error("I/O error on connection to {peer}: {source}")]
    Io {
        /// The peer address.
        peer: String,
        /// The OS error.
        source: io::Error,
    },
    /// Reading the connection failed (the codec's I/O error; the session
    /// reports it as [`ProtoError::ConnectionLost`] naming the peer).
    #[error("reading the connection failed: {0}")]
    Read(#[from] io::Error),
    /// The connection went away while the request was in flight.
    #[error("connection to {peer} lost: {reason}")]
    ConnectionLost {
        /// The peer address.
        peer: String,
        /// Why it was lost.
        reason: String,
    },
    /// No answer arrived within the request timeout.
    #[error("request (tag 0x{tag:08x}) to {peer} timed out after {timeout_ms} ms")]
    Timeout {
        /// The peer address.
        peer: String,
        /// The request's tag (freed; a late answer is discarded).
        tag: Tag,
        /// The bound that was hit.
        timeout_ms: u64,
    },
    /// Every tag stayed taken for the whole request timeout.
    #[error("no free tag on connection to {peer}: {max_in_flight} requests stayed in flight for {timeout_ms} ms")]
    NoFreeTag {
        /// The peer address.
        peer: String,
        /// The in-flight bound.
        max_in_flight: usize,
        /// How long the request waited.
        timeout_ms: u64,
    },
    /// The session limits are unusable.
    #[error("invalid session limits: {reason}")]
    InvalidLimits {
        /// Which field and why.
        reason: String,
    },
}

impl ProtoError {
    /// True when the error means the connection is unusable (every later request
    /// on it fails too), as opposed to one request failing.
    pub fn is_connection_error(&self) -> bool {
        matches!(
            self,
            ProtoError::ConnectRefused { .. }
                | ProtoError::Connect { .. }
                | ProtoError::ConnectTimeout { .. }
                | ProtoError::BadMagic { .. }
                | ProtoError::BodyTooLarge { .. }
                | ProtoError::Truncated { .. }
                | ProtoError::UnsupportedVersion { .. }
                | ProtoError::Io { .. }
                | ProtoError::Read(_)
                | ProtoError::ConnectionLost { .. }
        )
    }
}
