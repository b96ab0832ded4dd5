//! Logical page names and the record each programmed page carries in its OOB.
//!
//! Layout (little endian), at the start of the spare area:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 2 | magic `QV` |
//! | 2 | 1 | format version (2; 1 is still read) |
//! | 3 | 1 | kind (1 = data page; 2 = data page written in pieces, version 2 only) |
//! | 4 | 4 | owner space |
//! | 8 | 8 | logical index in the space |
//! | 16 | 8 | sequence number of the write |
//! | 24 | 4 | CRC-32C of the page data, bytes 0..24, and (version 2) bytes 28.. |
//! | 28 | the rest | version 2: the writer's tag, padded with 0xFF |
//!
//! A page written in pieces (kind 2) has no tag: bytes 28..32 hold how many
//! bytes its first program wrote, and the checksum covers those bytes of
//! data rather than the page's. The sectors added later are checked by the
//! device's sector codes alone, and may be cut short by a crash; the first
//! program's may not: a new version of a page written from sector 0 repeats
//! what the old one held, so recovery must not take it over the old one
//! unless all of that arrived (`docs/volume.md`, "Pages written in pieces").
//!
//! The tag lets a layer above keep a few bytes about a page beside it
//! rather than in its data (the chunk store keeps a chunk's header there, so
//! a 4 MiB chunk takes 64 pages of 64 KiB, not 65). Version 1 records (28
//! bytes, the rest of the spare area unchecked) have no tag. The device pads
//! what it is handed with 0xFF; an erased page's spare area is all 0xFF,
//! which fails the magic.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A page of a logical space: the layers above choose the spaces (a volume,
/// a chunk store, a manifest table) and index pages within them freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LogicalPage {
    /// The owning space.
    pub space: u32,
    /// The page's index in the space.
    pub index: u64,
}

impl LogicalPage {
    /// Page `index` of `space`.
    pub const fn new(space: u32, index: u64) -> LogicalPage {
        LogicalPage { space, index }
    }
}

impl fmt::Display for LogicalPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.space, self.index)
    }
}

/// Bytes of the OOB record before the tag; the geometry's `oob_size_bytes`
/// must be at least this, and what it has beyond is the room for a tag.
pub const OOB_RECORD_BYTES: usize = 28;

const MAGIC: [u8; 2] = *b"QV";
/// Records without a tag, checksummed over their first 24 bytes only.
const VERSION_UNTAGGED: u8 = 1;
/// Records followed by a tag, checksummed with it.
const VERSION_TAGGED: u8 = 2;
const KIND_DATA: u8 = 1;
/// A data page programmed in pieces (a sector range at a time): the
/// checksum covers the record and the data of the first program only, since
/// sectors come after it is written; the device's sector codes check those.
const KIND_PIECES: u8 = 2;
const CRC_AT: usize = 24;
/// Where a page written in pieces keeps its first program's length.
const FIRST_BYTES_AT: usize = OOB_RECORD_BYTES;
/// The spare area a page written in pieces needs: the record and the
/// length of its first program. The volume asks at least this of a
/// geometry.
pub const PIECES_RECORD_BYTES: usize = FIRST_BYTES_AT + 4;

/// What a programmed page says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OobRecord {
    pub page: LogicalPage,
    pub seq: u64,
    pub crc: u32,
    /// Version 2: bytes 28.. of the spare area are the writer's tag.
    pub tagged: bool,
    /// Programmed in pieces: the checksum covers only the data of the
    /// first program, `first_bytes` long.
    pub pieces: bool,
    /// How many bytes the first program of a page written in pieces wrote
    /// (0 for a page written whole).
    pub first_bytes: u32,
}

/// Why a spare area is not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OobError {
    /// Too short, wrong magic (erased, or not written by this layer).
    NotARecord,
    /// A version or kind this build does not know.
    Unknown,
    /// The checksum over data and record does not match: torn or damaged.
    Checksum,
}

impl fmt::Display for OobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OobError::NotARecord => "the spare area holds no page record",
            OobError::Unknown => "the page record has an unknown version or kind",
            OobError::Checksum => "the checksum over data and page record does not match",
        })
    }
}

/// CRC-32C of a page's data by the fastest code this CPU has (carry-less
/// multiplies): the same value as `crc32c::crc32c`, at about twice its
/// rate on a page; every page written is summed here (it was a sixth of a
/// node's CPU on a put with the table-driven code).
fn data_crc32c(data: &[u8]) -> u32 {
    // The 32-bit CRC comes back in a u64; the high half is zero.
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// The record's checksum over `data` and the spare area `spare` it heads.
fn checksum(data: &[u8], spare: &[u8], tagged: bool) -> u32 {
    let crc = crc32c::crc32c_append(data_crc32c(data), &spare[..CRC_AT]);
    if tagged {
        crc32c::crc32c_append(crc, &spare[OOB_RECORD_BYTES..])
    } else {
        crc
    }
}

impl OobRecord {
    /// The whole spare area (`spare_bytes`, the geometry's OOB size) for
    /// writing `data` as `page` at sequence `seq` with `tag`: a version 2
    /// record, the tag, 0xFF padding. The checksum covers all of it, so what
    /// a read hands back as the tag is what was written.
    pub fn spare_area(
        page: LogicalPage,
        seq: u64,
        data: &[u8],
        tag: &[u8],
        spare_bytes: usize,
    ) -> Vec<u8> {
        assert!(
            OOB_RECORD_BYTES + tag.len() <= spare_bytes,
            "a tag of {} bytes in a spare area of {spare_bytes}",
            tag.len()
        );
        let mut b = vec![0xFF; spare_bytes];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION_TAGGED;
        b[3] = KIND_DATA;
        b[4..8].copy_from_slice(&page.space.to_le_bytes());
        b[8..16].copy_from_slice(&page.index.to_le_bytes());
        b[16..24].copy_from_slice(&seq.to_le_bytes());
        b[OOB_RECORD_BYTES..OOB_RECORD_BYTES + tag.len()].copy_from_slice(tag);
        let crc = checksum(data, &b, true);
        b[CRC_AT..OOB_RECORD_BYTES].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// [`spare_area`](Self::spare_area) of a page programmed in pieces
    /// (`SpaceManager::write_sectors`) whose first program writes `first`:
    /// the checksum covers the record and `first`, not the sectors added
    /// after the record is written.
    pub fn spare_area_pieces(
        page: LogicalPage,
        seq: u64,
        first: &[u8],
        spare_bytes: usize,
    ) -> Vec<u8> {
        let first_bytes = u32::try_from(first.len()).expect("a page's bytes fit a u32");
        let mut b = Self::spare_area(page, seq, &[], &first_bytes.to_le_bytes(), spare_bytes);
        b[3] = KIND_PIECES;
        let crc = checksum(first, &b, true);
        b[CRC_AT..OOB_RECORD_BYTES].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses a spare area without checking the data (cheap: identity only).
    pub fn decode(oob: &[u8]) -> Result<OobRecord, OobError> {
        if oob.len() < OOB_RECORD_BYTES || oob[0..2] != MAGIC {
            return Err(OobError::NotARecord);
        }
        let tagged = match oob[2] {
            VERSION_UNTAGGED => false,
            VERSION_TAGGED => true,
            _ => return Err(OobError::Unknown),
        };
        let pieces = match oob[3] {
            KIND_DATA => false,
            KIND_PIECES if tagged && oob.len() >= PIECES_RECORD_BYTES => true,
            _ => return Err(OobError::Unknown),
        };
        let u32_at = |at: usize| u32::from_le_bytes(oob[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(oob[at..at + 8].try_into().expect("8 bytes"));
        Ok(OobRecord {
            page: LogicalPage {
                space: u32_at(4),
                index: u64_at(8),
            },
            seq: u64_at(16),
            crc: u32_at(CRC_AT),
            tagged,
            pieces,
            first_bytes: if pieces { u32_at(FIRST_BYTES_AT) } else { 0 },
        })
    }

    /// Parses a spare area and checks the checksum over `data` and the record.
    pub fn decode_checked(oob: &[u8], data: &[u8]) -> Result<OobRecord, OobError> {
        let rec = OobRecord::decode(oob)?;
        let data = if rec.pieces {
            // A length beyond the page is a record that cannot be right.
            data.get(..rec.first_bytes as usize)
                .ok_or(OobError::Checksum)?
        } else {
            data
        };
        if checksum(data, oob, rec.tagged) != rec.crc {
            return Err(OobError::Checksum);
        }
        Ok(rec)
    }

    /// The tag in `oob`, the spare area this record was decoded from: what
    /// follows the record, padding included (empty for version 1 and for a
    /// page written in pieces).
    pub fn tag_in(&self, oob: &bytes::Bytes) -> bytes::Bytes {
        if self.pieces {
            bytes::Bytes::new()
        } else if self.tagged {
            oob.slice(OOB_RECORD_BYTES.min(oob.len())..)
        } else {
            bytes::Bytes::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    proptest! {
        /// Pages written before the fast CRC keep their checksums: both
        /// codes give one value for any bytes.
        #[test]
        fn the_fast_crc_is_the_crc_records_were_written_with(
            data in proptest::collection::vec(any::<u8>(), 0..20_000)
        ) {
            prop_assert_eq!(data_crc32c(&data), crc32c::crc32c(&data));
        }
    }

    /// A version 1 record as builds before tags wrote it.
    fn version_1(page: LogicalPage, seq: u64, data: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; OOB_RECORD_BYTES];
        b[0..2].copy_from_slice(b"QV");
        b[2] = 1;
        b[3] = 1;
        b[4..8].copy_from_slice(&page.space.to_le_bytes());
        b[8..16].copy_from_slice(&page.index.to_le_bytes());
        b[16..24].copy_from_slice(&seq.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(data), &b[..24]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        // The device padded it.
        b.resize(64, 0xFF);
        b
    }

    #[test]
    fn round_trip_and_checksum() {
        let data = vec![0x5Au8; 512];
        let page = LogicalPage::new(7, 1 << 40);
        let mut oob = OobRecord::spare_area(page, 99, &data, b"tag!", 64);
        assert_eq!(oob.len(), 64);
        let rec = OobRecord::decode_checked(&oob, &data).unwrap();
        assert_eq!((rec.page, rec.seq, rec.tagged), (page, 99, true));
        let tag = rec.tag_in(&Bytes::from(oob.clone()));
        assert_eq!(&tag[..4], b"tag!");
        assert!(tag[4..].iter().all(|&b| b == 0xFF), "padded: {tag:?}");
        let mut other = data.clone();
        other[100] ^= 1;
        assert_eq!(
            OobRecord::decode_checked(&oob, &other),
            Err(OobError::Checksum)
        );
        // Changing the identity or the tag breaks the checksum too.
        for at in [4, 30, 63] {
            oob[at] ^= 1;
            assert_eq!(
                OobRecord::decode_checked(&oob, &data),
                Err(OobError::Checksum),
                "byte {at}"
            );
            oob[at] ^= 1;
        }
    }

    #[test]
    fn a_record_of_a_page_in_pieces_checks_its_first_program_not_the_rest() {
        let page = LogicalPage::new(3, 9);
        let first = [7u8; 1024];
        let mut oob = OobRecord::spare_area_pieces(page, 12, &first, 64);
        // Sectors added after the first program may be anything, even torn.
        for rest in [0x00, 0xFF, 0x5A] {
            let mut data = vec![rest; 4096];
            data[..1024].copy_from_slice(&first);
            let rec = OobRecord::decode_checked(&oob, &data).unwrap();
            assert_eq!(
                (rec.page, rec.seq, rec.pieces, rec.first_bytes),
                (page, 12, true, 1024)
            );
            assert!(rec.tag_in(&Bytes::from(oob.clone())).is_empty());
        }
        // The first program's bytes are checked: one that did not arrive
        // (erased, or stale) fails, as does a page too short for them.
        let mut lost = vec![0xFF; 4096];
        lost[..1023].copy_from_slice(&first[..1023]);
        assert_eq!(
            OobRecord::decode_checked(&oob, &lost),
            Err(OobError::Checksum)
        );
        assert_eq!(
            OobRecord::decode_checked(&oob, &first[..512]),
            Err(OobError::Checksum)
        );
        let whole = OobRecord::spare_area(page, 12, &[7u8; 512], b"t", 64);
        assert!(!OobRecord::decode(&whole).unwrap().pieces);
        for at in [5, 17, 28, 31] {
            oob[at] ^= 1;
            assert_eq!(
                OobRecord::decode_checked(&oob, &first),
                Err(OobError::Checksum),
                "byte {at}"
            );
            oob[at] ^= 1;
        }
        // A spare area too short for the length is not such a record.
        assert_eq!(
            OobRecord::decode(&oob[..PIECES_RECORD_BYTES - 1]),
            Err(OobError::Unknown)
        );
    }

    #[test]
    fn version_1_records_still_read_and_have_no_tag() {
        let data = vec![3u8; 512];
        let page = LogicalPage::new(1, 5);
        let mut oob = version_1(page, 8, &data);
        let rec = OobRecord::decode_checked(&oob, &data).unwrap();
        assert_eq!((rec.page, rec.seq, rec.tagged), (page, 8, false));
        assert!(rec.tag_in(&Bytes::from(oob.clone())).is_empty());
        // Its padding was never covered by the checksum.
        oob[40] = 0;
        assert!(OobRecord::decode_checked(&oob, &data).is_ok());
        oob[5] ^= 1;
        assert_eq!(
            OobRecord::decode_checked(&oob, &data),
            Err(OobError::Checksum)
        );
    }

    #[test]
    fn erased_and_foreign_spare_areas_are_not_records() {
        assert_eq!(OobRecord::decode(&[0xFF; 64]), Err(OobError::NotARecord));
        assert_eq!(OobRecord::decode(&[0; 64]), Err(OobError::NotARecord));
        assert_eq!(OobRecord::decode(b"QV"), Err(OobError::NotARecord));
        let mut oob = OobRecord::spare_area(LogicalPage::new(1, 2), 3, b"x", &[], 28);
        oob[2] = 9;
        assert_eq!(OobRecord::decode(&oob), Err(OobError::Unknown));
        oob[2] = 2;
        oob[3] = 7;
        assert_eq!(OobRecord::decode(&oob), Err(OobError::Unknown));
    }

    #[test]
    #[should_panic(expected = "a tag of 37 bytes in a spare area of 64")]
    fn a_tag_beyond_the_spare_area_is_refused() {
        let _ = OobRecord::spare_area(LogicalPage::new(1, 2), 3, b"x", &[0; 37], 64);
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = OobRecord::decode(&bytes);
            let _ = OobRecord::decode_checked(&bytes, &bytes);
        }

        #[test]
        fn any_record_round_trips(
            space: u32,
            index: u64,
            seq: u64,
            fill: u8,
            tag in proptest::collection::vec(any::<u8>(), 0..=36),
        ) {
            let data = vec![fill; 512];
            let page = LogicalPage::new(space, index);
            let oob = OobRecord::spare_area(page, seq, &data, &tag, 64);
            let rec = OobRecord::decode_checked(&oob, &data).unwrap();
            prop_assert_eq!((rec.page, rec.seq), (page, seq));
            let back = rec.tag_in(&Bytes::from(oob));
            prop_assert_eq!(&back[..tag.len()], &tag[..]);
        }
    }
}
