//! Page slot layout and the per-page error-correcting code.
//!
//! Every page is stored in a fixed-size *slot*: the page data, then a spare
//! area holding a header, the caller's OOB bytes, CRC-32Cs and Reed-Solomon
//! parity, then zero padding up to a multiple of 512 bytes (so O_DIRECT works):
//!
//! ```text
//! [0, page)                        page data, sectors of 1 KiB (512 B for odd pages)
//! header (24 B)                    magic "QPG1", version, flags, erase count, page index
//! caller OOB (oob_size_bytes)      padded with 0xFF
//! meta CRC-32C (4 B)               over header + OOB
//! sector CRC-32Cs (4 B each)       one per data sector
//! meta parity                      RS parity of (header, OOB, meta CRC)
//! sector parity                    RS parity of (sector data, sector CRC), per sector
//! zero padding                     to a multiple of 512
//! ```
//!
//! **Code.** RS(255,243) over GF(2^8) (12 parity bytes, corrects 6 bad bytes
//! per codeword) — the configuration RFSA §III.C.2 uses. Each protected unit (a
//! data sector with its CRC, or the meta region) is split into
//! `ceil(len / 243)` codewords, *interleaved*: byte `i` of the unit belongs to
//! codeword `i % n`; parity byte `p` of codeword `j` is stored at
//! `parity[p * n + j]`. A burst of up to `6 n` consecutive bad bytes therefore
//! costs each codeword at most 6 errors (n = 5 for a 1 KiB sector, so a
//! 30-byte burst is always corrected; random errors: up to 6 per codeword).
//!
//! **Fast path.** A read first checks the CRC-32C of every sector at once:
//! CRC-32C is linear (`crc(a ‖ b) = shift_|b|(crc(a)) ^ crc(b)`), so the
//! stored sector CRCs chained with [`SectorShift`] must equal the CRC of the
//! whole data, computed in one pass. Over pages fresh from memory one
//! `crc-fast` call per 64 KiB ran 8-11 GiB/s here, 64 `crc32c` calls per
//! 1 KiB 7-8; on a node streaming into a kernel both are bound by memory,
//! and its CPU per 2 MiB read stayed at about 0.5 ms, 0.4 once each page
//! was checked right before its fold (`docs/benchmarks.md`, "The reader's
//! own ring"). Only a page that fails
//! is checked sector by sector; a sector whose CRC does not match is run
//! through the RS decoder and its CRC verified again after correction, so a
//! mis-correction is reported as uncorrectable, never returned as data.
//!
//! **Measured cost** (this machine, AMD EPYC VM, release build, by a
//! timing loop since replaced by `quarry bench device`'s ECC rows, which
//! measure the same cost through the device at QD32,
//! 8 KiB page + 64 B OOB, 41 codewords, own codec in `rs.rs`): encode ≈ 28 us
//! per page; CRC check of a clean page ≈ 0.8-1.2 us (including a 9 KiB copy);
//! a read with 2 bit errors in two sectors ≈ 30 us (≈ 14 us per dirty 1 KiB
//! sector); worst case, all 8 sectors dirty ≈ 116 us. The `reed-solomon` 0.2
//! crate measured 170 us encode, 68 us per dirty sector, hence `rs.rs`.

use crate::rs::Rs;
use crate::{DeviceError, EccMode, Geometry};

/// RS parity bytes per codeword (RFSA's RS(255,243)).
pub const ECC_PARITY_BYTES: usize = 12;
/// Largest number of protected bytes in one codeword.
pub const ECC_MAX_DATA_BYTES: usize = 255 - ECC_PARITY_BYTES;
/// Bad bytes each codeword corrects.
pub const ECC_CORRECTABLE_BYTES: usize = ECC_PARITY_BYTES / 2;
/// Bytes of the per-page header in the spare area.
pub const HEADER_BYTES: usize = 24;
const MAX_CODEWORDS_PER_UNIT: usize = 8;

const MAGIC: [u8; 4] = *b"QPG1";
const VERSION: u8 = 1;
const FLAG_PROGRAMMED: u8 = 1;
/// The page was programmed a few sectors at a time ([`Ecc::encode_sectors`]):
/// sectors never programmed read as erased (0xFF), not as damage.
const FLAG_PARTIAL: u8 = 2;

/// Where each part of a page lives inside its slot in the backing store.
///
/// Page `i` (dense index, [`Geometry::page_index`]) occupies bytes
/// `[i * slot_size, (i + 1) * slot_size)` of the backing file; its data starts
/// at the beginning of the slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotLayout {
    /// Data bytes per page.
    pub page_size: usize,
    /// Caller OOB bytes per page.
    pub oob_size: usize,
    /// Data bytes per CRC sector.
    pub sector_size: usize,
    /// Data sectors per page.
    pub sectors: usize,
    /// Offset of the header in the slot.
    pub header_offset: usize,
    /// Offset of the caller OOB in the slot.
    pub oob_offset: usize,
    /// Offset of the meta CRC (header + OOB).
    pub meta_crc_offset: usize,
    /// Offset of the table of sector CRCs.
    pub sector_crc_offset: usize,
    /// Offset of the meta region's parity.
    pub meta_parity_offset: usize,
    /// Offset of the first data sector's parity.
    pub sector_parity_offset: usize,
    /// Bytes of the slot actually used (page + spare); what a NAND bus would
    /// transfer for one page.
    pub used_bytes: usize,
    /// Slot size: `used_bytes` rounded up to a multiple of 512.
    pub slot_size: usize,
    meta_len: usize,
    meta_codewords: usize,
    sector_codewords: usize,
}

fn codewords(len: usize) -> usize {
    len.div_ceil(ECC_MAX_DATA_BYTES)
}

impl SlotLayout {
    /// Lays out slots for `geometry`. The spare area (everything but the data)
    /// must fit in `max(page_size / 8, 512)` bytes — the spare budget of a
    /// NAND page — or the geometry is refused with an error naming the sizes.
    pub fn new(geometry: &Geometry) -> Result<SlotLayout, DeviceError> {
        SlotLayout::build(geometry, true)
    }

    /// The layout of a device that keeps CRC-32Cs only (`ecc = "crc"`): the
    /// same as [`new`](Self::new) without room for RS parity, so a slot of a
    /// 64 KiB page is 64.5 KiB rather than 68.5 KiB — 6% fewer bytes for
    /// every read to move.
    pub fn crc_only(geometry: &Geometry) -> Result<SlotLayout, DeviceError> {
        SlotLayout::build(geometry, false)
    }

    /// The layout for `mode`.
    pub fn for_mode(geometry: &Geometry, mode: EccMode) -> Result<SlotLayout, DeviceError> {
        match mode {
            EccMode::Rs => SlotLayout::new(geometry),
            EccMode::Crc => SlotLayout::crc_only(geometry),
        }
    }

    fn build(geometry: &Geometry, parity: bool) -> Result<SlotLayout, DeviceError> {
        geometry.validate()?;
        let page_size = geometry.page_size_bytes as usize;
        let oob_size = geometry.oob_size_bytes as usize;
        let sector_size = if page_size.is_multiple_of(1024) {
            1024
        } else {
            512
        };
        let sectors = page_size / sector_size;
        let header_offset = page_size;
        let oob_offset = header_offset + HEADER_BYTES;
        let meta_crc_offset = oob_offset + oob_size;
        let sector_crc_offset = meta_crc_offset + 4;
        let meta_parity_offset = sector_crc_offset + 4 * sectors;
        let meta_len = HEADER_BYTES + oob_size + 4;
        let meta_codewords = codewords(meta_len);
        let sector_codewords = codewords(sector_size + 4);
        let (sector_parity_offset, used_bytes) = if parity {
            let sector_parity_offset = meta_parity_offset + meta_codewords * ECC_PARITY_BYTES;
            (
                sector_parity_offset,
                sector_parity_offset + sectors * sector_codewords * ECC_PARITY_BYTES,
            )
        } else {
            // No parity regions: both start, empty, where the CRCs end.
            (meta_parity_offset, meta_parity_offset)
        };
        let spare = used_bytes - page_size;
        let budget = (page_size / 8).max(512);
        if spare > budget {
            return Err(DeviceError::InvalidGeometry {
                reason: format!(
                    "oob_size_bytes = {oob_size} does not fit: the spare area needs {spare} bytes \
                     (header {HEADER_BYTES} + OOB {oob_size} + CRCs + RS parity) but a \
                     {page_size}-byte page has {budget} (page/8, at least 512); the largest OOB \
                     that fits is about {}",
                    oob_size.saturating_sub(spare - budget + ECC_PARITY_BYTES)
                ),
            });
        }
        let slot_size = used_bytes.div_ceil(512) * 512;
        Ok(SlotLayout {
            page_size,
            oob_size,
            sector_size,
            sectors,
            header_offset,
            oob_offset,
            meta_crc_offset,
            sector_crc_offset,
            meta_parity_offset,
            sector_parity_offset,
            used_bytes,
            slot_size,
            meta_len,
            meta_codewords,
            sector_codewords,
        })
    }

    /// Byte offset of slot `page_index` in the backing store; the page's data
    /// starts here.
    pub fn slot_offset(&self, page_index: u64) -> u64 {
        page_index * self.slot_size as u64
    }

    /// Byte offset of a page's OOB bytes in the backing store.
    pub fn oob_offset_bytes(&self, page_index: u64) -> u64 {
        self.slot_offset(page_index) + self.oob_offset as u64
    }
}

/// The header stored in every programmed slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub erase_count: u32,
    pub page_index: u64,
    /// Programmed in pieces (NAND partial-page programs).
    pub partial: bool,
}

/// Result of decoding a slot.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub header: Header,
    pub corrected_bytes: u32,
}

/// Encoder/decoder for one slot layout. Cheap to share (immutable).
pub(crate) struct Ecc {
    layout: SlotLayout,
    rs: Rs,
    /// Chains sector CRCs into the CRC of the whole data.
    shift: SectorShift,
    /// RS parity is written and used to correct; otherwise the parity
    /// region is zeros and a CRC mismatch is uncorrectable.
    correcting: bool,
}

/// Which protected unit of a slot: the meta region or data sector `k`.
#[derive(Clone, Copy)]
enum Unit {
    Meta,
    Sector(usize),
}

impl Ecc {
    #[cfg(test)]
    pub(crate) fn new(layout: SlotLayout) -> Ecc {
        Ecc::with_correction(layout, true)
    }

    /// An `Ecc` that writes and uses RS parity (`correcting`) or only
    /// CRC-32Cs.
    pub(crate) fn with_correction(layout: SlotLayout, correcting: bool) -> Ecc {
        assert!(
            !correcting || layout.sector_parity_offset > layout.meta_parity_offset,
            "a correcting code needs a layout with room for parity"
        );
        Ecc {
            shift: SectorShift::new(layout.sector_size),
            layout,
            rs: Rs::new(),
            correcting,
        }
    }

    pub(crate) fn layout(&self) -> &SlotLayout {
        &self.layout
    }

    fn unit_len(&self, unit: Unit) -> usize {
        match unit {
            Unit::Meta => self.layout.meta_len,
            Unit::Sector(_) => self.layout.sector_size + 4,
        }
    }

    fn unit_codewords(&self, unit: Unit) -> usize {
        match unit {
            Unit::Meta => self.layout.meta_codewords,
            Unit::Sector(_) => self.layout.sector_codewords,
        }
    }

    /// Slot offset of logical byte `i` of a unit.
    #[inline]
    fn unit_offset(&self, unit: Unit, i: usize) -> usize {
        match unit {
            Unit::Meta => self.layout.header_offset + i,
            Unit::Sector(k) => {
                let s = self.layout.sector_size;
                if i < s {
                    k * s + i
                } else {
                    self.layout.sector_crc_offset + 4 * k + (i - s)
                }
            }
        }
    }

    fn parity_base(&self, unit: Unit) -> usize {
        match unit {
            Unit::Meta => self.layout.meta_parity_offset,
            Unit::Sector(k) => {
                self.layout.sector_parity_offset
                    + k * self.layout.sector_codewords * ECC_PARITY_BYTES
            }
        }
    }

    /// Fills `slot` (exactly `slot_size` bytes) with `data`, the header, `oob`
    /// padded with 0xFF, CRCs and parity. Every byte of the slot is written.
    pub(crate) fn encode(&self, slot: &mut [u8], data: &[u8], oob: &[u8], header: Header) {
        assert_eq!(data.len(), self.layout.page_size, "page data length");
        self.encode_from(slot, 0, data, Some((oob, header)));
    }

    /// Writes the header (flagged partial as `header` says), `oob` padded
    /// with 0xFF, and their CRC into `slot`.
    fn encode_meta(&self, slot: &mut [u8], oob: &[u8], header: Header) {
        let l = &self.layout;
        let h = &mut slot[l.header_offset..l.oob_offset];
        h[0..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[5] = FLAG_PROGRAMMED | if header.partial { FLAG_PARTIAL } else { 0 };
        h[6..8].copy_from_slice(&[0, 0]);
        h[8..12].copy_from_slice(&header.erase_count.to_le_bytes());
        h[12..16].copy_from_slice(&[0; 4]);
        h[16..24].copy_from_slice(&header.page_index.to_le_bytes());
        slot[l.oob_offset..l.oob_offset + oob.len()].copy_from_slice(oob);
        slot[l.oob_offset + oob.len()..l.meta_crc_offset].fill(0xFF);
        let meta_crc = crc32c::crc32c(&slot[l.header_offset..l.meta_crc_offset]);
        slot[l.meta_crc_offset..l.meta_crc_offset + 4].copy_from_slice(&meta_crc.to_le_bytes());
    }

    /// Programs sectors `first..first + data.len() / sector_size` of the
    /// open page held in `slot` (NAND's partial-page program): their data,
    /// CRCs and parity. With `meta` (the page's first program, which must
    /// start at sector 0) the slot is cleared to erased first and the
    /// header, marked partial, and `meta`'s OOB are written with their CRC
    /// and parity. Bytes of other sectors are left as they are: those
    /// programmed before keep their codes, the rest stay erased.
    pub(crate) fn encode_sectors(
        &self,
        slot: &mut [u8],
        first: usize,
        data: &[u8],
        meta: Option<(&[u8], Header)>,
    ) {
        assert!(
            meta.is_none_or(|(_, h)| h.partial),
            "a page programmed in pieces says so"
        );
        self.encode_from(slot, first, data, meta);
    }

    /// Sectors `first..` of `slot` from `data`, with their CRCs and parity;
    /// with `meta` (from sector 0) everything after `data` cleared to the
    /// erased state first, then the header, OOB and their codes. The
    /// encoding of a whole page and of a page's pieces alike.
    fn encode_from(
        &self,
        slot: &mut [u8],
        first: usize,
        data: &[u8],
        meta: Option<(&[u8], Header)>,
    ) {
        let l = &self.layout;
        assert_eq!(slot.len(), l.slot_size, "slot buffer length");
        assert!(
            data.len().is_multiple_of(l.sector_size) && !data.is_empty(),
            "whole sectors"
        );
        let count = data.len() / l.sector_size;
        assert!(first + count <= l.sectors, "sectors within the page");
        let end = (first + count) * l.sector_size;
        if let Some((oob, header)) = meta {
            assert_eq!(first, 0, "a page's first program starts at sector 0");
            assert!(oob.len() <= l.oob_size, "oob length");
            slot[end..].fill(0);
            self.encode_meta(slot, oob, header);
            if self.correcting {
                self.encode_unit(slot, Unit::Meta);
            }
        }
        slot[first * l.sector_size..end].copy_from_slice(data);
        for k in first..first + count {
            let crc = crc32c_fast(&slot[k * l.sector_size..(k + 1) * l.sector_size]);
            let at = l.sector_crc_offset + 4 * k;
            slot[at..at + 4].copy_from_slice(&crc.to_le_bytes());
            if self.correcting {
                self.encode_unit(slot, Unit::Sector(k));
            }
        }
    }

    /// Whether sector `k` of a page programmed in pieces was never
    /// programmed: its data, CRC and parity all zero but for at most
    /// [`ECC_CORRECTABLE_BYTES`] bytes (bit errors in an erased sector, which
    /// a controller reads as erased too). Such a sector reads as an erased
    /// page does, all 0xFF.
    fn clear_if_erased(&self, slot: &mut [u8], k: usize) -> bool {
        let l = &self.layout;
        let data = k * l.sector_size..(k + 1) * l.sector_size;
        let crc = l.sector_crc_offset + 4 * k..l.sector_crc_offset + 4 * k + 4;
        let parity_len = l.sector_codewords * ECC_PARITY_BYTES;
        let parity = if self.correcting {
            let base = l.sector_parity_offset + k * parity_len;
            base..base + parity_len
        } else {
            0..0
        };
        let set = [data.clone(), crc, parity]
            .into_iter()
            .map(|r| slot[r].iter().filter(|&&b| b != 0).count())
            .sum::<usize>();
        if set > ECC_CORRECTABLE_BYTES {
            return false;
        }
        slot[data].fill(0xFF);
        true
    }

    fn encode_unit(&self, slot: &mut [u8], unit: Unit) {
        let len = self.unit_len(unit);
        let n = self.unit_codewords(unit);
        let base = self.parity_base(unit);
        assert!(n <= MAX_CODEWORDS_PER_UNIT, "codewords per unit");
        // All n interleaved codewords are encoded in one sequential pass.
        let mut regs = [0u128; MAX_CODEWORDS_PER_UNIT];
        match unit {
            Unit::Meta => {
                let bytes = &slot[self.layout.header_offset..self.layout.header_offset + len];
                for chunk in bytes.chunks(n) {
                    for (j, &b) in chunk.iter().enumerate() {
                        self.rs.feed(&mut regs[j], b);
                    }
                }
            }
            Unit::Sector(k) => {
                let s = self.layout.sector_size;
                let mut j = 0;
                for &b in &slot[k * s..(k + 1) * s] {
                    self.rs.feed(&mut regs[j], b);
                    j += 1;
                    if j == n {
                        j = 0;
                    }
                }
                let at = self.layout.sector_crc_offset + 4 * k;
                for &b in &slot[at..at + 4] {
                    self.rs.feed(&mut regs[j], b);
                    j += 1;
                    if j == n {
                        j = 0;
                    }
                }
            }
        }
        for (j, &reg) in regs[..n].iter().enumerate() {
            for p in 0..ECC_PARITY_BYTES {
                slot[base + p * n + j] = Rs::parity_byte(reg, p);
            }
        }
    }

    /// Repairs one unit in place. Returns the bytes changed, or why it failed.
    fn correct_unit(&self, slot: &mut [u8], unit: Unit) -> Result<u32, String> {
        if !self.correcting {
            return Err(
                "CRC mismatch, and this device keeps no correction code (ecc = \"crc\")".into(),
            );
        }
        let len = self.unit_len(unit);
        let n = self.unit_codewords(unit);
        let base = self.parity_base(unit);
        let mut msg = [0u8; 255];
        let mut fixed = 0u32;
        for j in 0..n {
            let mut m = 0;
            let mut i = j;
            while i < len {
                msg[m] = slot[self.unit_offset(unit, i)];
                m += 1;
                i += n;
            }
            for p in 0..ECC_PARITY_BYTES {
                msg[m + p] = slot[base + p * n + j];
            }
            let total = m + ECC_PARITY_BYTES;
            let mut buf = msg;
            let Some(count) = self.rs.correct(&mut buf[..total]) else {
                return Err(format!(
                    "codeword {j} has more than {ECC_CORRECTABLE_BYTES} bad bytes"
                ));
            };
            if count == 0 {
                continue;
            }
            let mut i = j;
            let mut q = 0;
            while i < len {
                let at = self.unit_offset(unit, i);
                if slot[at] != buf[q] {
                    slot[at] = buf[q];
                    fixed += 1;
                }
                q += 1;
                i += n;
            }
            for p in 0..ECC_PARITY_BYTES {
                let at = base + p * n + j;
                if slot[at] != buf[m + p] {
                    slot[at] = buf[m + p];
                    fixed += 1;
                }
            }
        }
        Ok(fixed)
    }

    fn meta_ok(&self, slot: &[u8]) -> bool {
        let l = &self.layout;
        let stored = u32::from_le_bytes(
            slot[l.meta_crc_offset..l.meta_crc_offset + 4]
                .try_into()
                .unwrap_or([0; 4]),
        );
        crc32c::crc32c(&slot[l.header_offset..l.meta_crc_offset]) == stored
    }

    /// Whether every sector's data matches its stored CRC: the CRC of all
    /// the data, in one pass, against the stored CRCs chained.
    fn sectors_ok(&self, slot: &[u8]) -> bool {
        let l = &self.layout;
        let stored = |k: usize| {
            let at = l.sector_crc_offset + 4 * k;
            u32::from_le_bytes(slot[at..at + 4].try_into().unwrap_or([0; 4]))
        };
        let chained = (1..l.sectors).fold(stored(0), |crc, k| self.shift.apply(crc) ^ stored(k));
        crc32c_fast(&slot[..l.sectors * l.sector_size]) == chained
    }

    fn sector_ok(&self, slot: &[u8], k: usize) -> bool {
        let l = &self.layout;
        let at = l.sector_crc_offset + 4 * k;
        let stored = u32::from_le_bytes(slot[at..at + 4].try_into().unwrap_or([0; 4]));
        crc32c::crc32c(&slot[k * l.sector_size..(k + 1) * l.sector_size]) == stored
    }

    fn parse_header(&self, slot: &[u8]) -> Result<Header, String> {
        let h = &slot[self.layout.header_offset..self.layout.oob_offset];
        if h[0..4] != MAGIC {
            return Err("no page header (slot never programmed or overwritten)".into());
        }
        if h[4] != VERSION {
            return Err(format!("page header version {} (expected {VERSION})", h[4]));
        }
        if h[5] & FLAG_PROGRAMMED == 0 {
            return Err("page header not marked programmed".into());
        }
        let mut ec = [0u8; 4];
        ec.copy_from_slice(&h[8..12]);
        let mut pi = [0u8; 8];
        pi.copy_from_slice(&h[16..24]);
        Ok(Header {
            erase_count: u32::from_le_bytes(ec),
            page_index: u64::from_le_bytes(pi),
            partial: h[5] & FLAG_PARTIAL != 0,
        })
    }

    /// Checks and repairs only the header + OOB region (used to probe slots
    /// during recovery).
    pub(crate) fn decode_meta(&self, slot: &mut [u8]) -> Result<Header, String> {
        assert_eq!(slot.len(), self.layout.slot_size, "slot buffer length");
        if !self.meta_ok(slot) {
            self.correct_unit(slot, Unit::Meta)?;
            if !self.meta_ok(slot) {
                return Err("header/OOB CRC mismatch after correction".into());
            }
        }
        self.parse_header(slot)
    }

    /// The slot's header when every CRC holds (nothing to correct), without
    /// writing the slot; `None` when something needs [`decode`](Self::decode).
    pub(crate) fn verify(&self, slot: &[u8]) -> Option<Header> {
        if slot.len() != self.layout.slot_size || !self.meta_ok(slot) || !self.sectors_ok(slot) {
            return None;
        }
        self.parse_header(slot).ok()
    }

    /// The header and OOB region checked and repaired, as the first step of
    /// a whole decode: the header and the bytes corrected.
    fn decode_header(&self, slot: &mut [u8]) -> Result<(Header, u32), String> {
        assert_eq!(slot.len(), self.layout.slot_size, "slot buffer length");
        let mut corrected = 0u32;
        if !self.meta_ok(slot) {
            corrected += self
                .correct_unit(slot, Unit::Meta)
                .map_err(|e| format!("header/OOB: {e}"))?;
            if !self.meta_ok(slot) {
                return Err("header/OOB CRC mismatch after correction".into());
            }
        }
        Ok((self.parse_header(slot)?, corrected))
    }

    /// Verifies the whole slot, correcting what the code can. On success the
    /// slot holds the corrected data and OOB.
    pub(crate) fn decode(&self, slot: &mut [u8]) -> Result<Decoded, String> {
        let (header, mut corrected) = self.decode_header(slot)?;
        if self.sectors_ok(slot) {
            return Ok(Decoded {
                header,
                corrected_bytes: corrected,
            });
        }
        for k in 0..self.layout.sectors {
            if !self.sector_ok(slot, k) {
                if header.partial && self.clear_if_erased(slot, k) {
                    continue;
                }
                corrected += self
                    .correct_unit(slot, Unit::Sector(k))
                    .map_err(|e| format!("sector {k}: {e}"))?;
                if !self.sector_ok(slot, k) {
                    return Err(format!("sector {k}: CRC mismatch after correction"));
                }
            }
        }
        Ok(Decoded {
            header,
            corrected_bytes: corrected,
        })
    }

    /// [`decode`](Self::decode) that goes on past a damaged sector of a page
    /// programmed in pieces: a sector that fails its check after correction
    /// is left as read (or part corrected) and named in the list returned.
    /// Whether its bytes matter, a program cut short or damage, is the
    /// caller's to tell: a log whose records carry checksums can. The header
    /// and OOB must hold, and any other page decodes as `decode` does.
    pub(crate) fn decode_pieces(&self, slot: &mut [u8]) -> Result<(Decoded, Vec<u32>), String> {
        let (header, mut corrected) = self.decode_header(slot)?;
        if !header.partial {
            return self.decode(slot).map(|d| (d, Vec::new()));
        }
        let mut damaged = Vec::new();
        if !self.sectors_ok(slot) {
            for k in 0..self.layout.sectors {
                if self.sector_ok(slot, k) || self.clear_if_erased(slot, k) {
                    continue;
                }
                match self.correct_unit(slot, Unit::Sector(k)) {
                    Ok(n) if self.sector_ok(slot, k) => corrected += n,
                    _ => damaged.push(k as u32),
                }
            }
        }
        Ok((
            Decoded {
                header,
                corrected_bytes: corrected,
            },
            damaged,
        ))
    }
}

/// CRC-32C of `data` with the fastest code this CPU has (folding with
/// carry-less multiplies): at 64 KiB a call, the rate of memory.
fn crc32c_fast(data: &[u8]) -> u32 {
    // The 32-bit CRC comes back in a u64; the high half is zero.
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// `crc(a) -> the part of crc(a ‖ b) that a contributes`, for any `b` of
/// `len` bytes: multiplication by `x^(8 len)` modulo CRC-32C's polynomial,
/// a linear map on 32 bits, kept as one table per byte of its input.
struct SectorShift {
    table: [[u32; 256]; 4],
}

impl SectorShift {
    fn new(len: usize) -> SectorShift {
        let mut table = [[0u32; 256]; 4];
        for (i, row) in table.iter_mut().enumerate() {
            for (b, entry) in row.iter_mut().enumerate() {
                // Combining with a CRC of zero leaves the shift alone.
                *entry = crc32c::crc32c_combine((b as u32) << (8 * i), 0, len);
            }
        }
        SectorShift { table }
    }

    fn apply(&self, crc: u32) -> u32 {
        let [b0, b1, b2, b3] = crc.to_le_bytes();
        self.table[0][usize::from(b0)]
            ^ self.table[1][usize::from(b1)]
            ^ self.table[2][usize::from(b2)]
            ^ self.table[3][usize::from(b3)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sector_crcs_chain_into_the_crc_of_the_whole_data() {
        for sector in [512usize, 1024] {
            let shift = SectorShift::new(sector);
            let data: Vec<u8> = (0..64 * sector).map(|i| (i * 7 + i / 991) as u8).collect();
            let chained = data
                .chunks(sector)
                .map(crc32c::crc32c)
                .reduce(|crc, next| shift.apply(crc) ^ next)
                .unwrap_or(0);
            assert_eq!(chained, crc32c::crc32c(&data));
            assert_eq!(crc32c_fast(&data), crc32c::crc32c(&data));
        }
    }

    proptest! {
        /// A flipped bit anywhere in the data fails the one-pass check, and
        /// the sector-by-sector check behind it still names or mends it.
        #[test]
        fn one_pass_check_fails_on_any_flipped_bit(byte in 0usize..8192, bit in 0u8..8, seed in 0u8..4) {
            for correcting in [true, false] {
                let layout = if correcting {
                    SlotLayout::new(&Geometry { page_size_bytes: 8192, oob_size_bytes: 64, ..Geometry::default() })
                } else {
                    SlotLayout::crc_only(&Geometry { page_size_bytes: 8192, oob_size_bytes: 64, ..Geometry::default() })
                };
                let e = Ecc::with_correction(layout.expect("layout"), correcting);
                let (slot, data, _) = encoded(&e, seed);
                prop_assert!(e.sectors_ok(&slot));
                let mut bad = slot.clone();
                bad[byte] ^= 1 << bit;
                prop_assert!(!e.sectors_ok(&bad));
                match e.decode(&mut bad) {
                    Ok(d) => {
                        prop_assert!(correcting);
                        prop_assert_eq!(d.corrected_bytes, 1);
                        prop_assert_eq!(&bad[..8192], &data[..]);
                    }
                    Err(why) => {
                        prop_assert!(!correcting);
                        prop_assert!(why.contains(&format!("sector {}", byte / 1024)), "{}", why);
                    }
                }
            }
        }
    }

    fn ecc(page: u32, oob: u32) -> Ecc {
        let g = Geometry {
            page_size_bytes: page,
            oob_size_bytes: oob,
            ..Geometry::default()
        };
        Ecc::new(SlotLayout::new(&g).expect("layout"))
    }

    #[test]
    fn crc_only_detects_damage_and_never_corrects() {
        let g = Geometry::default();
        let e = Ecc::with_correction(SlotLayout::new(&g).expect("layout"), false);
        let l = e.layout().clone();
        let data: Vec<u8> = (0..l.page_size).map(|i| i as u8).collect();
        // A slot full of stale bytes: the encoder writes every byte of it.
        let mut slot = vec![0xA5u8; l.slot_size];
        e.encode(
            &mut slot,
            &data,
            b"oob",
            Header {
                erase_count: 3,
                page_index: 9,
                partial: false,
            },
        );
        assert!(slot[l.meta_parity_offset..].iter().all(|&b| b == 0));
        let mut clean = slot.clone();
        let decoded = e.decode(&mut clean).expect("a clean slot decodes");
        assert_eq!(decoded.corrected_bytes, 0);
        assert_eq!(&clean[..l.page_size], &data[..]);
        slot[100] ^= 0x40;
        let err = e.decode(&mut slot).unwrap_err();
        assert!(err.contains("no correction code"), "{err}");
    }

    fn encoded(e: &Ecc, seed: u8) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let l = e.layout();
        let data: Vec<u8> = (0..l.page_size)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        let oob: Vec<u8> = (0..l.oob_size.min(10)).map(|i| i as u8 ^ seed).collect();
        let mut slot = vec![0u8; l.slot_size];
        e.encode(
            &mut slot,
            &data,
            &oob,
            Header {
                erase_count: 3,
                page_index: 77,
                partial: false,
            },
        );
        (slot, data, oob)
    }

    #[test]
    fn layout_8k_is_9216() {
        let l = SlotLayout::new(&Geometry::default()).expect("layout");
        assert_eq!(l.slot_size, 9216);
        assert_eq!(l.sectors, 8);
        assert!(l.used_bytes <= 9216);
        let l2 = SlotLayout::new(&Geometry {
            page_size_bytes: 2048,
            ..Geometry::default()
        })
        .expect("2k");
        assert_eq!(l2.slot_size % 512, 0);
    }

    #[test]
    fn a_crc_only_layout_has_no_parity_room_and_round_trips() {
        let g = Geometry {
            page_size_bytes: 65536,
            ..Geometry::default()
        };
        let rs = SlotLayout::new(&g).expect("layout");
        let crc = SlotLayout::crc_only(&g).expect("layout");
        assert_eq!(rs.slot_size, 70144);
        assert_eq!(crc.slot_size, 66048);
        assert_eq!(crc.meta_parity_offset, crc.used_bytes);
        assert_eq!(crc.sector_parity_offset, crc.used_bytes);
        assert_eq!(crc.used_bytes, 65536 + HEADER_BYTES + 64 + 4 + 4 * 64);
        let e = Ecc::with_correction(crc.clone(), false);
        let data: Vec<u8> = (0..crc.page_size).map(|i| (i * 7) as u8).collect();
        let mut slot = vec![0x5Au8; crc.slot_size];
        let header = Header {
            erase_count: 1,
            page_index: 5,
            partial: false,
        };
        e.encode(&mut slot, &data, b"oob", header);
        let mut clean = slot.clone();
        assert_eq!(e.decode(&mut clean).expect("decodes").header, header);
        assert_eq!(&clean[..crc.page_size], &data[..]);
        slot[40_000] ^= 1;
        assert!(e.decode(&mut slot).is_err(), "damage is detected");
    }

    #[test]
    fn oversized_oob_is_refused() {
        let err = SlotLayout::new(&Geometry {
            oob_size_bytes: 1024,
            ..Geometry::default()
        })
        .expect_err("too big");
        assert!(err.to_string().contains("does not fit"), "{err}");
    }

    #[test]
    fn clean_roundtrip_and_header() {
        let e = ecc(8192, 64);
        let (mut slot, data, oob) = encoded(&e, 1);
        let d = e.decode(&mut slot).expect("decode");
        assert_eq!(d.corrected_bytes, 0);
        assert_eq!(
            d.header,
            Header {
                erase_count: 3,
                page_index: 77,
                partial: false,
            }
        );
        assert_eq!(&slot[..8192], &data[..]);
        let l = e.layout();
        assert_eq!(&slot[l.oob_offset..l.oob_offset + oob.len()], &oob[..]);
        assert!(slot[l.oob_offset + oob.len()..l.meta_crc_offset]
            .iter()
            .all(|&b| b == 0xFF));
    }

    #[test]
    fn burst_is_corrected() {
        let e = ecc(8192, 64);
        let (mut slot, data, _) = encoded(&e, 2);
        // 5 codewords per sector x 6 = 30-byte burst inside one sector.
        for b in &mut slot[100..130] {
            *b ^= 0x5A;
        }
        let d = e.decode(&mut slot).expect("decode");
        assert_eq!(d.corrected_bytes, 30);
        assert_eq!(&slot[..8192], &data[..]);
    }

    #[test]
    fn too_many_errors_are_uncorrectable() {
        let e = ecc(8192, 64);
        let (mut slot, _, _) = encoded(&e, 3);
        for b in &mut slot[0..200] {
            *b ^= 0xFF;
        }
        assert!(e.decode(&mut slot).is_err());
    }

    #[test]
    fn zero_slot_is_not_a_page() {
        let e = ecc(8192, 64);
        let mut slot = vec![0u8; e.layout().slot_size];
        assert!(e.decode(&mut slot).is_err());
        assert!(e.decode_meta(&mut slot).is_err());
        let mut slot = vec![0xFFu8; e.layout().slot_size];
        assert!(e.decode(&mut slot).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn corrects_up_to_t_errors_per_codeword(
            data in proptest::collection::vec(any::<u8>(), 2048),
            oob in proptest::collection::vec(any::<u8>(), 0..=64usize),
            errs in proptest::collection::vec((0usize..4096, 1u8..=255), 0..40),
        ) {
            let e = ecc(2048, 64);
            let l = e.layout().clone();
            let mut slot = vec![0u8; l.slot_size];
            e.encode(&mut slot, &data, &oob, Header { erase_count: 9, page_index: 1, partial: false });
            // Corrupt at most 6 bytes per codeword: count per (unit, codeword).
            let mut per_cw = std::collections::HashMap::new();
            let mut flipped = std::collections::HashSet::new();
            for (pos, x) in errs {
                let pos = pos % l.used_bytes;
                // Which unit/codeword does `pos` belong to?
                let key = cw_of(&e, pos);
                let count = per_cw.entry(key).or_insert(0usize);
                if *count < ECC_CORRECTABLE_BYTES && flipped.insert(pos) {
                    *count += 1;
                    slot[pos] ^= x;
                }
            }
            let d = e.decode(&mut slot).expect("correctable");
            prop_assert_eq!(&slot[..2048], &data[..]);
            prop_assert_eq!(&slot[l.oob_offset..l.oob_offset + oob.len()], &oob[..]);
            prop_assert!(d.corrected_bytes as usize <= flipped.len());
        }

        #[test]
        fn garbage_never_panics(garbage in proptest::collection::vec(any::<u8>(), 2560)) {
            let e = ecc(2048, 64);
            let mut slot = garbage;
            slot.resize(e.layout().slot_size, 0);
            let _ = e.decode(&mut slot);
        }
    }

    /// (unit id, codeword) of slot byte `pos` (for the proptest).
    fn cw_of(e: &Ecc, pos: usize) -> (usize, usize) {
        let l = e.layout();
        let units = std::iter::once(Unit::Meta).chain((0..l.sectors).map(Unit::Sector));
        for (u, unit) in units.enumerate() {
            let n = e.unit_codewords(unit);
            for i in 0..e.unit_len(unit) {
                if e.unit_offset(unit, i) == pos {
                    return (u, i % n);
                }
            }
            let base = e.parity_base(unit);
            if pos >= base && pos < base + n * ECC_PARITY_BYTES {
                return (u, (pos - base) % n);
            }
        }
        (usize::MAX, 0)
    }
}
