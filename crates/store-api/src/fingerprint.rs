//! Chunk names: the SHA-256 of the chunk's bytes.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};

/// A chunk's name: the SHA-256 of its bytes (all 32 bytes are kept; Multes++
/// cut them to 64 bits to fit its hash table and says a large store should
/// not).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of `data`.
    pub fn of(data: &[u8]) -> Self {
        Self(Sha256::digest(data).into())
    }

    /// The fingerprint of the concatenation of `parts`.
    pub fn of_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update(part);
        }
        Self(hasher.finalize().into())
    }

    /// Parses 64 hex digits.
    pub fn from_hex(hex: &str) -> Result<Self> {
        let bad = |reason: &str| StoreError::Malformed {
            what: "fingerprint",
            reason: format!("{hex:?}: {reason}"),
        };
        if hex.len() != 64 {
            return Err(bad("not 64 hex digits"));
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let digit = |c: u8| match c {
                b'0'..=b'9' => Ok(c - b'0'),
                b'a'..=b'f' => Ok(c - b'a' + 10),
                b'A'..=b'F' => Ok(c - b'A' + 10),
                _ => Err(bad("not a hex digit")),
            };
            out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Ok(Self(out))
    }

    /// The first 8 bytes as a number (uniformly distributed: placement uses it).
    pub fn prefix_u64(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Twelve digits tell chunks apart in logs and test failures.
        write!(f, "Fingerprint({})", &self.to_string()[..12])
    }
}

/// CRC-32C of a chunk's bytes: what guards them between hashing and filing
/// and between filing and reading, where SHA-256 would cost ~10x as much
/// (19 vs 1.7 GiB/s a core here). The fingerprint is taken once, by the
/// writer, to name and place the chunk; every later check of the same
/// bytes uses this.
pub fn chunk_crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// [`chunk_crc32c`] of the concatenation of `parts` (a chunk read as the
/// pages it lies on), without joining them.
pub fn chunk_crc32c_of_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u32 {
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    for part in parts {
        digest.update(part);
    }
    // The 32-bit CRC comes back in a u64; the high half is zero.
    digest.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_over_parts_are_sums_of_the_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for cut in [0, 1, 4096, 9_999, 10_000] {
            let parts = [&data[..cut], &data[cut..]];
            assert_eq!(
                chunk_crc32c_of_parts(parts),
                chunk_crc32c(&data),
                "cut at {cut}"
            );
            assert_eq!(
                Fingerprint::of_parts(parts),
                Fingerprint::of(&data),
                "cut at {cut}"
            );
        }
        assert_eq!(chunk_crc32c_of_parts([]), chunk_crc32c(&[]));
    }

    #[test]
    fn sha256_known_answer_and_hex_round_trip() {
        let fp = Fingerprint::of(b"abc");
        let hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(fp.to_string(), hex);
        assert_eq!(Fingerprint::from_hex(hex).unwrap(), fp);
        assert_eq!(Fingerprint::from_hex(&hex.to_uppercase()).unwrap(), fp);
        assert!(Fingerprint::from_hex("zz").is_err());
        assert!(Fingerprint::from_hex(&"g".repeat(64)).is_err());
        assert_eq!(fp.prefix_u64(), 0xba7816bf8f01cfea);
    }
}
