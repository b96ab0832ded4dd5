//! Logical page names and the record each programmed page carries in its OOB.
//!
//! Layout (little endian), 28 bytes at the start of the spare area:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 2 | magic `QV` |
//! | 2 | 1 | format version (1) |
//! | 3 | 1 | kind (1 = data page) |
//! | 4 | 4 | owner space |
//! | 8 | 8 | logical index in the space |
//! | 16 | 8 | sequence number of the write |
//! | 24 | 4 | CRC-32C of the page data followed by bytes 0..24 |
//!
//! The device pads the rest of the spare area with 0xFF; an erased page's
//! spare area is all 0xFF, which fails the magic.

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

/// Bytes of the OOB record; the geometry's `oob_size_bytes` must be at least this.
pub const OOB_RECORD_BYTES: usize = 28;

const MAGIC: [u8; 2] = *b"QV";
const VERSION: u8 = 1;
const KIND_DATA: u8 = 1;
const CRC_AT: usize = 24;

/// What a programmed page says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OobRecord {
    pub page: LogicalPage,
    pub seq: u64,
    pub crc: u32,
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

fn checksum(data: &[u8], head: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(data), head)
}

impl OobRecord {
    /// The record for writing `data` as `page` at sequence `seq`.
    pub fn for_data(page: LogicalPage, seq: u64, data: &[u8]) -> OobRecord {
        let mut rec = OobRecord { page, seq, crc: 0 };
        rec.crc = checksum(data, &rec.encode()[..CRC_AT]);
        rec
    }

    /// The bytes to hand the device as OOB.
    pub fn encode(&self) -> [u8; OOB_RECORD_BYTES] {
        let mut b = [0u8; OOB_RECORD_BYTES];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = KIND_DATA;
        b[4..8].copy_from_slice(&self.page.space.to_le_bytes());
        b[8..16].copy_from_slice(&self.page.index.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..28].copy_from_slice(&self.crc.to_le_bytes());
        b
    }

    /// Parses a spare area without checking the data (cheap: identity only).
    pub fn decode(oob: &[u8]) -> Result<OobRecord, OobError> {
        if oob.len() < OOB_RECORD_BYTES || oob[0..2] != MAGIC {
            return Err(OobError::NotARecord);
        }
        if oob[2] != VERSION || oob[3] != KIND_DATA {
            return Err(OobError::Unknown);
        }
        let u32_at = |at: usize| u32::from_le_bytes(oob[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(oob[at..at + 8].try_into().expect("8 bytes"));
        Ok(OobRecord {
            page: LogicalPage {
                space: u32_at(4),
                index: u64_at(8),
            },
            seq: u64_at(16),
            crc: u32_at(CRC_AT),
        })
    }

    /// Parses a spare area and checks the checksum over `data` and the record.
    pub fn decode_checked(oob: &[u8], data: &[u8]) -> Result<OobRecord, OobError> {
        let rec = OobRecord::decode(oob)?;
        if checksum(data, &oob[..CRC_AT]) != rec.crc {
            return Err(OobError::Checksum);
        }
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_checksum() {
        let data = vec![0x5Au8; 512];
        let page = LogicalPage::new(7, 1 << 40);
        let rec = OobRecord::for_data(page, 99, &data);
        let mut oob = rec.encode().to_vec();
        oob.resize(64, 0xFF);
        assert_eq!(OobRecord::decode_checked(&oob, &data), Ok(rec));
        let mut other = data.clone();
        other[100] ^= 1;
        assert_eq!(
            OobRecord::decode_checked(&oob, &other),
            Err(OobError::Checksum)
        );
        // Changing the identity breaks the checksum too.
        oob[4] ^= 1;
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
        let mut oob = OobRecord::for_data(LogicalPage::new(1, 2), 3, b"x").encode();
        oob[2] = 9;
        assert_eq!(OobRecord::decode(&oob), Err(OobError::Unknown));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = OobRecord::decode(&bytes);
            let _ = OobRecord::decode_checked(&bytes, &bytes);
        }

        #[test]
        fn any_record_round_trips(space: u32, index: u64, seq: u64, fill: u8) {
            let data = vec![fill; 512];
            let rec = OobRecord::for_data(LogicalPage::new(space, index), seq, &data);
            prop_assert_eq!(OobRecord::decode_checked(&rec.encode(), &data), Ok(rec));
        }
    }
}
