//! The kernels' typed errors.

/// What went wrong in a kernel or a command.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The kernel's arguments are wrong (the message says which and why).
    #[error("bad kernel arguments: {0}")]
    BadArguments(String),
    /// A part of another kernel was handed to this one (a bug or a
    /// malformed message).
    #[error("a {got} part was given to the {expected} kernel")]
    WrongPart {
        /// The kernel.
        expected: &'static str,
        /// The part's kernel.
        got: &'static str,
    },
    /// Parts that do not belong together: the left does not end where the
    /// right starts.
    #[error(
        "parts do not join: the left ends at byte {left_end}, the right starts at {right_start}"
    )]
    Disjoint {
        /// End offset of the left part.
        left_end: u64,
        /// Start offset of the right part.
        right_start: u64,
    },
    /// The kernel cannot do this (joining SHA-256 states computed apart).
    #[error("{0}")]
    Unsupported(String),
}
