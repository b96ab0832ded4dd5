use std::io;
use std::path::PathBuf;

use crate::{BlockAddr, PageAddr};

/// Everything a device operation can fail with. Each variant names what was
/// wrong so the message can go to the user unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The configured geometry is unusable.
    #[error("invalid geometry: {reason}")]
    InvalidGeometry {
        /// Which field and why.
        reason: String,
    },
    /// An address names a bus, chip, block or page the device does not have.
    #[error("address {addr} out of range: {field} {value} > {max} (valid: {valid})")]
    AddressOutOfRange {
        /// The address as given.
        addr: String,
        /// The offending field (`bus`, `chip`, `block`, `page`).
        field: &'static str,
        /// Its value.
        value: u32,
        /// The largest valid value of that field.
        max: u32,
        /// All valid ranges, for the message.
        valid: String,
    },
    /// NAND rule: a page is programmed once between erases.
    #[error("page {addr} is already programmed; erase block {} first", addr.block_addr())]
    AlreadyProgrammed {
        /// The page.
        addr: PageAddr,
    },
    /// NAND rule: the pages of a block are programmed in order.
    #[error("page {addr} programmed out of order: block {} expects page {expected} next", addr.block_addr())]
    OutOfOrder {
        /// The page.
        addr: PageAddr,
        /// The next page the block accepts.
        expected: u32,
    },
    /// A partial-page program's sectors do not fit the page, or are not
    /// whole sectors.
    #[error(
        "sectors {first_sector}.. of page {addr}: {bytes} bytes is not a whole number of \
         {sector_bytes}-byte sectors that fits the page's {sectors}"
    )]
    SectorRange {
        /// The page.
        addr: PageAddr,
        /// The first sector asked for.
        first_sector: u32,
        /// The bytes given.
        bytes: usize,
        /// Bytes of a sector.
        sector_bytes: usize,
        /// Sectors of a page.
        sectors: usize,
    },
    /// A partial-page program of more sectors to a page that does not take
    /// them.
    #[error("page {addr} takes no sectors here: {reason}")]
    PageNotOpen {
        /// The page.
        addr: PageAddr,
        /// Why.
        reason: String,
    },
    /// The block is in the bad-block table.
    #[error("block {block} is bad")]
    BadBlock {
        /// The block.
        block: BlockAddr,
    },
    /// The page's data is damaged beyond what its error-correcting code can repair.
    #[error("page {addr} is uncorrectable: {detail}")]
    Uncorrectable {
        /// The page.
        addr: PageAddr,
        /// What the decoder found.
        detail: String,
    },
    /// Page data must be exactly one page long.
    #[error("page data is {got} bytes, the page size is {expected} bytes")]
    PageSize {
        /// The device's page size.
        expected: u32,
        /// What was given.
        got: usize,
    },
    /// OOB data must fit in the spare area.
    #[error("OOB data is {got} bytes, at most {max} bytes fit")]
    OobSize {
        /// The device's OOB size.
        max: u32,
        /// What was given.
        got: usize,
    },
    /// The block has operations in flight that an erase would race with.
    #[error("block {block} is busy: {reason}")]
    BlockBusy {
        /// The block.
        block: BlockAddr,
        /// What is in flight.
        reason: String,
    },
    /// Too many operations in flight on this device.
    #[error("device queue full ({limit} operations in flight)")]
    QueueFull {
        /// The bound that was hit.
        limit: usize,
    },
    /// The backing store has no room for the device (e.g. ENOSPC).
    #[error("no space for the device at {path}: {source}")]
    NoSpace {
        /// The backing file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The backing store failed.
    #[error("I/O error {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: io::Error,
    },
    /// The persisted metadata (erase counts, bad blocks) is unreadable or does not
    /// match the configuration.
    #[error("device metadata {path}: {reason}")]
    Metadata {
        /// The metadata file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The device configuration is unusable.
    #[error("invalid device configuration: {reason}")]
    Config {
        /// What was wrong.
        reason: String,
    },
    /// The device has been shut down.
    #[error("device is closed")]
    Closed,
}

impl From<quarry_geometry::GeometryError> for DeviceError {
    fn from(e: quarry_geometry::GeometryError) -> Self {
        use quarry_geometry::GeometryError as G;
        match e {
            G::InvalidGeometry { reason } => DeviceError::InvalidGeometry { reason },
            G::AddressOutOfRange {
                addr,
                field,
                value,
                max,
                valid,
            } => DeviceError::AddressOutOfRange {
                addr,
                field,
                value,
                max,
                valid,
            },
            // GeometryError is non-exhaustive; a kind added there reads as
            // an unusable geometry until the device names it.
            other => DeviceError::InvalidGeometry {
                reason: other.to_string(),
            },
        }
    }
}
