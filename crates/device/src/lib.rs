//! `quarry-device` — layer 1 of Quarry: one node's raw page store.
//!
//! This crate owns everything between a page address and the medium: the
//! geometry (buses x chips x blocks x pages), the NAND rules (program once
//! between erases, pages of a block in order, bad blocks refused), per-block
//! write pointers, erase counts and the bad-block table (persisted in
//! `DATA_DIR/device.meta`), the per-page error-correcting code (RS(255,243),
//! interleaved, CRC-32C fast path — see [`SlotLayout`]), and three backends:
//! `file` (a file or block device, O_DIRECT + io_uring), `mem` (DRAM) and
//! `nand` (an emulated flash array with RFSA's per-bus scheduler, a timing
//! model and wear-dependent bit errors — see [`NandTiming`]).
//!
//! **Pages programmed in pieces.** [`Device::program_sectors`] is NAND's
//! partial-page program: a page's first program writes its first sectors
//! and its OOB and leaves it *open*; later programs add the sectors after,
//! in order, until the page is full or the block's next page is
//! programmed, the block erased, or the device reopened. Each program
//! writes only its sectors' bytes and the spare area (two writes on the
//! file backends), and the page header says it was programmed in pieces,
//! so sectors never programmed read as erased (0xFF) rather than as
//! damage, bit errors in them included; a sector whose data landed
//! without its codes (a torn program) is damage, which
//! [`Device::read_page_pieces`] names instead of failing the read, so a
//! log with checksummed records can keep what came before a program cut
//! short. It is for logs of records
//! much smaller than a page: in a timing of 8 KiB pages over a buffered
//! file, 2 KiB records took 6.5-8.9 us each as four programs a page against
//! 13.0-17.2 us as a page each (two runs, one thread; docs/benchmarks.md,
//! "Ninth run").
//!
//! ```
//! use bytes::Bytes;
//! use quarry_device::{BackendKind, Device, DeviceConfig, PageAddr};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let config = DeviceConfig { backend: BackendKind::Mem, ..DeviceConfig::default() };
//! // The mem backend keeps nothing on disk, so the data directory is unused.
//! let device = Device::open(&config, std::path::Path::new("unused"))?;
//! let page = PageAddr { bus: 0, chip: 1, block: 2, page: 0 };
//! let data = Bytes::from(vec![7u8; device.geometry().page_size_bytes as usize]);
//! device.program_page(page, data.clone(), Bytes::from_static(b"oob")).await?;
//! let read = device.read_page(page).await?;
//! assert_eq!(read.data, data);
//! assert_eq!(&read.oob[..3], b"oob");
//! assert!(!read.erased);
//! device.close().await?;
//! # Ok::<(), quarry_device::DeviceError>(())
//! # }).unwrap();
//! ```
#![deny(missing_docs)]

mod buf;
mod config;
mod device;
mod ecc;
mod error;
mod flush;
mod io;
mod meta;
mod nand;
mod rs;
mod stream;

pub use config::{DeviceConfig, EccMode};
pub use device::{
    geometry_of, preset_geometry, Device, FetchedPages, OpenOptions, DEFAULT_MAX_INFLIGHT,
    MAX_READ_RUN_BYTES,
};
pub use ecc::{
    SlotLayout, ECC_CORRECTABLE_BYTES, ECC_MAX_DATA_BYTES, ECC_PARITY_BYTES, HEADER_BYTES,
};
pub use error::DeviceError;
pub use nand::{NandTiming, EARLY_WAKE, SPIN_MARGIN};
pub use stream::{StreamReader, MAX_STREAM_READS};
// The addresses, the geometry and the summaries live in the bottom crate,
// which the wire formats share; named here as they always were.
pub use quarry_geometry::{
    parse_fields, AddrParseError, BackendKind, BlockAddr, DeviceInfo, Geometry, GeometryError,
    PageAddr, PageRead, Preset, MAX_BLOCKS_PER_CHIP, MAX_BUSES, MAX_CHIPS_PER_BUS,
    MAX_OOB_SIZE_BYTES, MAX_PAGES_PER_BLOCK, MAX_PAGE_SIZE_BYTES, MIN_BLOCKS_PER_CHIP_FOR_CAPACITY,
};

#[cfg(test)]
mod send_sync {
    fn assert_send_sync<T: Send + Sync>() {}
    #[test]
    fn device_is_send_sync() {
        assert_send_sync::<crate::Device>();
    }
}
