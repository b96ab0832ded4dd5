use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{BlockAddr, Geometry};

/// Which medium holds the pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// A regular file or block device (O_DIRECT where possible).
    #[default]
    File,
    /// DRAM; nothing survives a restart.
    Mem,
    /// An emulated NAND array with a timing and bit-error model.
    Nand,
}

/// Flash chips described by the seed papers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// BlueDBM's SLC boards.
    Bluedbm,
    /// RFSA's MLC boards.
    Rfsa,
}

/// What a page read returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRead {
    /// Exactly `page_size_bytes` of data (all 0xFF for an erased page).
    pub data: Bytes,
    /// Exactly `oob_size_bytes` of OOB (all 0xFF for an erased page).
    pub oob: Bytes,
    /// True when the page has not been programmed since its block was erased.
    pub erased: bool,
    /// Bytes the error-correcting code repaired on this read.
    pub corrected_bytes: u32,
}

/// A summary of the device for `quarry status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Backend in use.
    pub backend: BackendKind,
    /// Preset, if any.
    pub preset: Option<Preset>,
    /// Geometry.
    pub geometry: Geometry,
    /// Whether O_DIRECT is in effect (file backend).
    pub direct_io: bool,
    /// Blocks in the bad-block table.
    pub bad_blocks: Vec<BlockAddr>,
    /// Smallest erase count over good blocks.
    pub erase_count_min: u32,
    /// Largest erase count over good blocks.
    pub erase_count_max: u32,
    /// Mean erase count over good blocks.
    pub erase_count_mean: f64,
    /// Pages currently programmed.
    pub programmed_pages: u64,
    /// What moves the bytes: `io_uring` or `threads` (file backend), `memory`,
    /// or `nand-emulator`.
    #[serde(default)]
    pub io_engine: String,
}
