//! The mount's typed errors, and how store errors become errno values for
//! the kernel.

use std::path::PathBuf;

use fuser::Errno;
use quarry_store_api::StoreError;

/// What can go wrong setting up, running or tearing down a mount. (Errors
/// of single file operations go to the calling program as errno values,
/// with the reason logged through `tracing`.)
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// A [`crate::MountOptions`] setting outside its bounds.
    #[error("invalid mount option {name}: {reason}")]
    InvalidOption {
        /// The setting.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The mount point does not exist or is not a directory.
    #[error("mount point {path}: {reason}")]
    MountPoint {
        /// The mount point.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `/dev/fuse` or the kernel refused the mount.
    #[error("mounting at {path}: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The error from the FUSE library or kernel.
        source: std::io::Error,
    },
    /// The file system could not be unmounted (for example it is busy); it
    /// was detached lazily, and its session ends when the last open file
    /// under it is closed.
    #[error("unmounting {path}: {source}; detached lazily instead")]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// Why the plain unmount failed.
        source: std::io::Error,
    },
    /// The FUSE session thread ended with an error or panicked.
    #[error("the FUSE session at {path} ended with an error: {source}")]
    Session {
        /// The mount point.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The mount's own async runtime or signal handling could not start.
    #[error("starting the mount's runtime: {0}")]
    Runtime(std::io::Error),
}

/// Shorthand for results of this crate.
pub type Result<T, E = MountError> = std::result::Result<T, E>;

/// The result of one file operation: an errno for the kernel on failure.
pub(crate) type FsResult<T> = std::result::Result<T, Errno>;

/// The errno for a store error met while doing `op` on `path`. Failures
/// that are the caller's (no such name, bad name, not empty) are logged at
/// debug level; the rest (backend, network, damaged data) at warn level
/// with the full reason, since the program sees only `EIO`.
pub(crate) fn store_errno(op: &str, path: &dyn std::fmt::Display, e: &StoreError) -> Errno {
    let errno = match e {
        StoreError::NoSuchBucket(_) | StoreError::NoSuchObject { .. } => Errno::ENOENT,
        StoreError::InvalidBucket { .. } | StoreError::InvalidKey { .. } => Errno::EINVAL,
        StoreError::BucketExists(_) => Errno::EEXIST,
        StoreError::BucketNotEmpty(_) => Errno::ENOTEMPTY,
        // A put that had to find the key absent found it present.
        StoreError::VersionMismatch { expected: None, .. } => Errno::EEXIST,
        // The version this handle was based on is gone: NFS's answer.
        StoreError::VersionMismatch { .. } | StoreError::Changed { .. } => Errno::ESTALE,
        StoreError::TooManyChunks { .. } => Errno::EFBIG,
        _ => Errno::EIO,
    };
    if errno == Errno::EIO {
        tracing::warn!(op, %path, error = %e, "store operation failed");
    } else {
        tracing::debug!(op, %path, error = %e, "store operation refused");
    }
    errno
}

/// The errno for a local I/O error (the spool file), logged.
pub(crate) fn io_errno(op: &str, path: &dyn std::fmt::Display, e: &std::io::Error) -> Errno {
    tracing::warn!(op, %path, error = %e, "local spool I/O failed");
    match e.raw_os_error() {
        Some(code) if code == libc::ENOSPC || code == libc::EDQUOT => Errno::ENOSPC,
        _ => Errno::EIO,
    }
}
