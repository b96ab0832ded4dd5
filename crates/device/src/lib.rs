//! PLACEHOLDER lib.rs — the device helper replaces this file.
#![deny(missing_docs)]

mod addr;
mod config;
mod error;
mod geometry;

pub use addr::{parse_fields, AddrParseError, BlockAddr, PageAddr};
pub use config::{BackendKind, DeviceConfig, Preset};
pub use error::DeviceError;
pub use geometry::{
    Geometry, MAX_BLOCKS_PER_CHIP, MAX_BUSES, MAX_CHIPS_PER_BUS, MAX_OOB_SIZE_BYTES,
    MAX_PAGES_PER_BLOCK, MAX_PAGE_SIZE_BYTES,
};

use std::path::Path;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

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
}

/// One node's page device. Cheap to share behind an `Arc`; every method may be
/// called concurrently from many tasks.
pub struct Device {
    _private: (),
}

impl Device {
    /// Opens (or creates) the device described by `config`, keeping metadata in
    /// `data_dir`.
    pub fn open(_config: &DeviceConfig, _data_dir: &Path) -> Result<Device, DeviceError> {
        todo!()
    }
    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        todo!()
    }
    /// Summary for status reports.
    pub fn info(&self) -> DeviceInfo {
        todo!()
    }
    /// Reads one page; corrects what the ECC can, returns an uncorrectable page as an error.
    pub async fn read_page(&self, _addr: PageAddr) -> Result<PageRead, DeviceError> {
        todo!()
    }
    /// Programs one page with data (exactly one page) and OOB (at most `oob_size_bytes`).
    pub async fn program_page(&self, _addr: PageAddr, _data: Bytes, _oob: Bytes) -> Result<(), DeviceError> {
        todo!()
    }
    /// Erases one block.
    pub async fn erase_block(&self, _addr: BlockAddr) -> Result<(), DeviceError> {
        todo!()
    }
    /// Persists metadata and stops the device's threads.
    pub async fn close(&self) -> Result<(), DeviceError> {
        todo!()
    }
}
