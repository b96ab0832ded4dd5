//! `quarry-geometry` — the bottom of Quarry: the plain types every other
//! crate shares about one node's pages.
//!
//! It owns page and block addresses (`bus:chip:block:page`) and their text
//! form, a device's [`Geometry`] and its bounds, the device summary a node
//! reports ([`DeviceInfo`]) and what a page read returns ([`PageRead`]),
//! and the one way every layer replaces a small file durably
//! ([`write_file_durably`]).
//! The device (which stores pages) and the wire formats (which carry
//! addresses and pages) both build on it, so a client that only talks to a
//! cluster compiles none of the device.
//!
//! ```
//! use quarry_geometry::{Geometry, PageAddr};
//!
//! let geometry = Geometry::default();
//! let addr: PageAddr = "1:2:3:4".parse()?;
//! geometry.check_page(addr)?;
//! assert_eq!(geometry.page_at(geometry.page_index(addr)), addr);
//! let outside: PageAddr = "9:0:0:0".parse()?;
//! assert!(geometry.check_page(outside).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod addr;
mod durable;
mod error;
mod geometry;
mod info;

pub use addr::{parse_fields, AddrParseError, BlockAddr, PageAddr};
pub use durable::{write_file_durably, DurableWriteError};
pub use error::GeometryError;
pub use geometry::{
    Geometry, MAX_BLOCKS_PER_CHIP, MAX_BUSES, MAX_CHIPS_PER_BUS, MAX_OOB_SIZE_BYTES,
    MAX_PAGES_PER_BLOCK, MAX_PAGE_SIZE_BYTES, MIN_BLOCKS_PER_CHIP_FOR_CAPACITY,
};
pub use info::{BackendKind, DeviceInfo, PageRead, Preset};
