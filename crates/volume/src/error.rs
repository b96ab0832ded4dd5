//! Typed errors of the space manager.

use std::io;
use std::path::PathBuf;

use quarry_device::{DeviceError, PageAddr};

use crate::LogicalPage;

/// Everything the space manager can fail with. Each variant names what was
/// wrong so the message can go to the user unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// The device's spare area cannot hold the per-page record.
    #[error(
        "the device's OOB area is {have} bytes per page; the space manager needs at least {need} \
         (owner space, logical index, sequence number, checksum); use a geometry with \
         oob_size_bytes >= {need}"
    )]
    OobTooSmall {
        /// The geometry's `oob_size_bytes`.
        have: u32,
        /// Bytes the OOB record takes.
        need: u32,
    },
    /// The geometry or configuration cannot be managed.
    #[error("invalid space manager configuration: {reason}")]
    Config {
        /// Which setting and why.
        reason: String,
    },
    /// Page data must be exactly one page long.
    #[error("page data is {got} bytes, the page size is {expected} bytes")]
    PageSize {
        /// The device's page size.
        expected: u32,
        /// What was given.
        got: usize,
    },
    /// A write of a new logical page would exceed what the device can hold
    /// while keeping room for garbage collection. Nothing stored is lost; a
    /// trim or an overwrite of a live page still succeeds.
    #[error(
        "no space for logical page {page}: {live_pages} pages are live and {pending_pages} being \
         written, the volume holds at most {capacity_pages} pages ({capacity_bytes} bytes); the \
         device has {device_pages} pages of {page_size} bytes in {good_blocks} good blocks, \
         {reserved_blocks} of them kept free for garbage collection; trim pages to make room"
    )]
    NoSpace {
        /// The page that was to be written.
        page: LogicalPage,
        /// Logical pages that hold data.
        live_pages: u64,
        /// New pages being written right now.
        pending_pages: u64,
        /// The most logical pages the volume will hold.
        capacity_pages: u64,
        /// `capacity_pages` in bytes.
        capacity_bytes: u64,
        /// Physical pages of the device (good and bad).
        device_pages: u64,
        /// Bytes per page.
        page_size: u32,
        /// Blocks not retired.
        good_blocks: u64,
        /// Blocks garbage collection keeps free for itself.
        reserved_blocks: u64,
    },
    /// Garbage collection could not free a block within the bound on how long
    /// a write may be held.
    #[error(
        "garbage collection freed no block after {steps} steps ({free_blocks} free blocks, \
         {reserved_blocks} reserved); the write was not stored"
    )]
    GcStalled {
        /// Victims collected while the write waited.
        steps: u32,
        /// Free blocks at the end.
        free_blocks: u64,
        /// Blocks reserved for garbage collection.
        reserved_blocks: u64,
    },
    /// Programs of a page failed on several blocks in a row (each was retired).
    #[error("writing {page}: programs failed on {attempts} blocks in a row; last: {last}")]
    ProgramFailed {
        /// The page being written (or moved).
        page: LogicalPage,
        /// Blocks tried.
        attempts: u32,
        /// The last device error.
        last: String,
    },
    /// A page read back did not hold what the mapping says it holds: the
    /// data is not returned.
    #[error("logical page {page} at {addr}: {reason}")]
    Corrupt {
        /// The logical page asked for.
        page: LogicalPage,
        /// Where the mapping pointed.
        addr: PageAddr,
        /// What did not match.
        reason: String,
    },
    /// The device failed an operation the manager could not work around.
    #[error("device error while {context}: {source}")]
    Device {
        /// What the manager was doing.
        context: String,
        /// The device's error.
        source: DeviceError,
    },
    /// The checkpoint or a trim log is unreadable or does not match the device.
    #[error("volume metadata {path}: {reason}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A file of the data directory could not be read or written.
    #[error("I/O error {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: io::Error,
    },
    /// Another space manager has the data directory open.
    #[error("{path} is locked by another space manager (another process has this volume open)")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// An internal consistency check failed (a bug: please report it).
    #[error("space manager invariant violated: {reason}")]
    Invariant {
        /// Which check and what it found.
        reason: String,
    },
    /// The manager has been closed.
    #[error("the space manager is closed")]
    Closed,
}

impl VolumeError {
    pub(crate) fn device(context: impl Into<String>, source: DeviceError) -> VolumeError {
        match source {
            DeviceError::Closed => VolumeError::Closed,
            source => VolumeError::Device {
                context: context.into(),
                source,
            },
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> VolumeError {
        VolumeError::Io {
            context: context.into(),
            source,
        }
    }
}
