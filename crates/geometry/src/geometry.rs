use serde::{Deserialize, Serialize};

use crate::{BlockAddr, GeometryError, PageAddr};

/// Largest page the device accepts; bounds every page buffer in the system.
pub const MAX_PAGE_SIZE_BYTES: u32 = 64 * 1024;
/// Largest spare (OOB) area a caller may store beside a page.
pub const MAX_OOB_SIZE_BYTES: u32 = 1024;
/// Bounds on each geometry dimension so that capacity arithmetic never overflows
/// and per-block tables stay small enough to hold in memory.
pub const MAX_BUSES: u32 = 64;
/// See [`MAX_BUSES`].
pub const MAX_CHIPS_PER_BUS: u32 = 64;
/// See [`MAX_BUSES`].
pub const MAX_BLOCKS_PER_CHIP: u32 = 1 << 16;
/// See [`MAX_BUSES`].
pub const MAX_PAGES_PER_BLOCK: u32 = 1 << 12;

/// The shape of one node's page array: buses x chips per bus x blocks per chip x
/// pages per block, each page `page_size_bytes` of data plus `oob_size_bytes` of
/// caller-visible spare area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Geometry {
    /// Independent buses (channels); operations on different buses overlap.
    pub buses: u32,
    /// Chips (dies) sharing one bus.
    pub chips_per_bus: u32,
    /// Erase blocks per chip.
    pub blocks_per_chip: u32,
    /// Pages per erase block, programmed in order.
    pub pages_per_block: u32,
    /// Data bytes per page (default 8 KiB).
    pub page_size_bytes: u32,
    /// Caller-visible out-of-band bytes per page.
    pub oob_size_bytes: u32,
}

impl Default for Geometry {
    fn default() -> Self {
        Geometry {
            buses: 4,
            chips_per_bus: 4,
            blocks_per_chip: 64,
            pages_per_block: 64,
            page_size_bytes: 8192,
            oob_size_bytes: 64,
        }
    }
}

/// The fewest erase blocks per chip a capacity may leave: the space manager
/// keeps blocks of each chip open and in reserve for cleaning.
pub const MIN_BLOCKS_PER_CHIP_FOR_CAPACITY: u32 = 8;

impl Geometry {
    /// This geometry with as many blocks per chip as hold `capacity_bytes`
    /// of pages (rounded down to whole blocks on every chip). The error says
    /// which capacities this shape allows.
    pub fn with_capacity(self, capacity_bytes: u64) -> Result<Geometry, GeometryError> {
        // Bytes of one block on every chip: the step a capacity moves in.
        let row = self.chips() * u64::from(self.pages_per_block) * u64::from(self.page_size_bytes);
        let (min, max) = (
            row * u64::from(MIN_BLOCKS_PER_CHIP_FOR_CAPACITY),
            row * u64::from(MAX_BLOCKS_PER_CHIP),
        );
        if row == 0 || capacity_bytes < min || capacity_bytes > max {
            return Err(GeometryError::InvalidGeometry {
                reason: format!(
                    "capacity_bytes = {capacity_bytes}: a device of {} chips with {} pages of \
                     {} bytes per block holds {min}..={max} bytes (in steps of {row})",
                    self.chips(),
                    self.pages_per_block,
                    self.page_size_bytes
                ),
            });
        }
        let blocks = u32::try_from(capacity_bytes / row).unwrap_or(MAX_BLOCKS_PER_CHIP);
        Ok(Geometry {
            blocks_per_chip: blocks,
            ..self
        })
    }

    /// Checks every dimension against its bound; the error names the field.
    pub fn validate(&self) -> Result<(), GeometryError> {
        let check = |field: &'static str, value: u32, min: u32, max: u32| {
            if value < min || value > max {
                Err(GeometryError::InvalidGeometry {
                    reason: format!("{field} = {value}, must be in {min}..={max}"),
                })
            } else {
                Ok(())
            }
        };
        check("buses", self.buses, 1, MAX_BUSES)?;
        check("chips_per_bus", self.chips_per_bus, 1, MAX_CHIPS_PER_BUS)?;
        check(
            "blocks_per_chip",
            self.blocks_per_chip,
            1,
            MAX_BLOCKS_PER_CHIP,
        )?;
        check(
            "pages_per_block",
            self.pages_per_block,
            1,
            MAX_PAGES_PER_BLOCK,
        )?;
        check(
            "page_size_bytes",
            self.page_size_bytes,
            512,
            MAX_PAGE_SIZE_BYTES,
        )?;
        check("oob_size_bytes", self.oob_size_bytes, 0, MAX_OOB_SIZE_BYTES)?;
        if !self.page_size_bytes.is_multiple_of(512) {
            return Err(GeometryError::InvalidGeometry {
                reason: format!(
                    "page_size_bytes = {} must be a multiple of 512",
                    self.page_size_bytes
                ),
            });
        }
        Ok(())
    }

    /// Chips in the whole device.
    pub fn chips(&self) -> u64 {
        u64::from(self.buses) * u64::from(self.chips_per_bus)
    }

    /// Erase blocks in the whole device.
    pub fn blocks(&self) -> u64 {
        self.chips() * u64::from(self.blocks_per_chip)
    }

    /// Pages in the whole device.
    pub fn pages(&self) -> u64 {
        self.blocks() * u64::from(self.pages_per_block)
    }

    /// Data capacity in bytes (OOB excluded).
    pub fn capacity_bytes(&self) -> u64 {
        self.pages() * u64::from(self.page_size_bytes)
    }

    /// Returns an error naming the offending field and the valid range when the
    /// page address lies outside this geometry.
    pub fn check_page(&self, addr: PageAddr) -> Result<(), GeometryError> {
        self.check_block(addr.block_addr())?;
        if addr.page >= self.pages_per_block {
            return Err(self.out_of_range(
                "page",
                addr.page,
                self.pages_per_block,
                addr.to_string(),
            ));
        }
        Ok(())
    }

    /// Block-level counterpart of [`Geometry::check_page`].
    pub fn check_block(&self, addr: BlockAddr) -> Result<(), GeometryError> {
        // The address is spelled out only for an error: every page read and
        // program passes here, and formatting it each time was 0.8% of a
        // node serving durable key-value sets (docs/benchmarks.md).
        if addr.bus >= self.buses {
            return Err(self.out_of_range("bus", addr.bus, self.buses, addr.to_string()));
        }
        if addr.chip >= self.chips_per_bus {
            return Err(self.out_of_range("chip", addr.chip, self.chips_per_bus, addr.to_string()));
        }
        if addr.block >= self.blocks_per_chip {
            return Err(self.out_of_range(
                "block",
                addr.block,
                self.blocks_per_chip,
                addr.to_string(),
            ));
        }
        Ok(())
    }

    fn out_of_range(
        &self,
        field: &'static str,
        value: u32,
        count: u32,
        addr: String,
    ) -> GeometryError {
        GeometryError::AddressOutOfRange {
            addr,
            field,
            value,
            max: count - 1,
            valid: self.valid_ranges(),
        }
    }

    /// The valid address ranges, as `bus 0..=3, chip 0..=7, ...`, for error messages.
    pub fn valid_ranges(&self) -> String {
        format!(
            "bus 0..={}, chip 0..={}, block 0..={}, page 0..={}",
            self.buses - 1,
            self.chips_per_bus - 1,
            self.blocks_per_chip - 1,
            self.pages_per_block - 1
        )
    }

    /// Dense index of a block, bus-major; used for per-block tables.
    pub fn block_index(&self, addr: BlockAddr) -> u64 {
        debug_assert!(self.check_block(addr).is_ok());
        (u64::from(addr.bus) * u64::from(self.chips_per_bus) + u64::from(addr.chip))
            * u64::from(self.blocks_per_chip)
            + u64::from(addr.block)
    }

    /// Inverse of [`Geometry::block_index`].
    pub fn block_at(&self, index: u64) -> BlockAddr {
        debug_assert!(index < self.blocks());
        let block = (index % u64::from(self.blocks_per_chip)) as u32;
        let chip_index = index / u64::from(self.blocks_per_chip);
        BlockAddr {
            bus: (chip_index / u64::from(self.chips_per_bus)) as u32,
            chip: (chip_index % u64::from(self.chips_per_bus)) as u32,
            block,
        }
    }

    /// Dense index of a page: block index times pages per block plus page.
    pub fn page_index(&self, addr: PageAddr) -> u64 {
        self.block_index(addr.block_addr()) * u64::from(self.pages_per_block) + u64::from(addr.page)
    }

    /// Inverse of [`Geometry::page_index`].
    pub fn page_at(&self, index: u64) -> PageAddr {
        debug_assert!(index < self.pages());
        let ppb = u64::from(self.pages_per_block);
        self.block_at(index / ppb).page((index % ppb) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_out_of_range_is_named_with_its_field() {
        let g = Geometry::default();
        let at = |bus, chip, block, page| PageAddr {
            bus,
            chip,
            block,
            page,
        };
        g.check_page(at(3, 3, 63, 63))
            .expect("the last page is in range");
        for (addr, field, text) in [
            (at(4, 0, 0, 0), "bus", "4:0:0"),
            (at(0, 4, 0, 0), "chip", "0:4:0"),
            (at(0, 0, 64, 0), "block", "0:0:64"),
            (at(0, 0, 0, 64), "page", "0:0:0:64"),
        ] {
            match g.check_page(addr) {
                Err(GeometryError::AddressOutOfRange {
                    addr: named,
                    field: f,
                    ..
                }) => {
                    assert_eq!(f, field);
                    assert!(named.starts_with(text), "{named} names {text}");
                }
                other => panic!("{addr:?}: expected {field} out of range, got {other:?}"),
            }
        }
    }
}
