//! A bucket's settings and the framing of the small records a node's
//! tables hold (a format byte, the fields, a CRC-32C).

use crate::chunking::Chunking;
use crate::error::{Result, StoreError};
use crate::manifest::Reader;

/// The format byte every record starts with.
pub const RECORD_FORMAT: u8 = 1;

/// Appends the CRC-32C of `out` to it.
pub fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks the trailing CRC-32C and the format byte; returns the body after it.
pub fn open<'a>(what: &'static str, bytes: &'a [u8]) -> Result<Reader<'a>> {
    let bad = |reason: String| StoreError::Malformed { what, reason };
    if bytes.len() < 5 {
        return Err(bad(format!("{} bytes, too short", bytes.len())));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(tail.try_into().expect("4")) {
        return Err(bad("checksum does not match".into()));
    }
    if body[0] != RECORD_FORMAT {
        return Err(bad(format!(
            "format {}; this build reads {RECORD_FORMAT}",
            body[0]
        )));
    }
    Reader::after(what, body, 1)
}

/// Checks that nothing trails a record's last field.
pub fn finish(what: &'static str, r: &Reader<'_>) -> Result<()> {
    if r.done() {
        Ok(())
    } else {
        Err(StoreError::Malformed {
            what,
            reason: format!("{} bytes trail the record", r.left()),
        })
    }
}

/// A bucket's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketConfig {
    /// How new objects are cut.
    pub chunking: Chunking,
    /// When the bucket was made (ms since the epoch).
    pub created_unix_ms: u64,
}

impl BucketConfig {
    /// `format:u8=1 kind:u8 a:u32 b:u32 c:u32 created:u64 crc32c:u32`
    pub fn encode(&self) -> Vec<u8> {
        let (kind, [a, b, c]) = self.chunking.encode_parts();
        let mut out = vec![RECORD_FORMAT, kind];
        for v in [a, b, c] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.created_unix_ms.to_le_bytes());
        seal(out)
    }

    /// Decodes [`BucketConfig::encode`]'s record, checking its CRC and chunking.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        const WHAT: &str = "bucket record";
        let mut r = open(WHAT, bytes)?;
        let kind = r.u8()?;
        let (a, b, c) = (r.u32()?, r.u32()?, r.u32()?);
        let created_unix_ms = r.u64()?;
        finish(WHAT, &r)?;
        // A fixed setting was always written with b = c = 0.
        let parts = if kind == 0 { [a, 0, 0] } else { [a, b, c] };
        let chunking =
            Chunking::decode_parts(kind, parts).ok_or_else(|| StoreError::Malformed {
                what: WHAT,
                reason: format!("unknown chunking {kind}"),
            })?;
        chunking.validate()?;
        Ok(Self {
            chunking,
            created_unix_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_config_round_trips_and_rejects_damage() {
        for chunking in [
            Chunking::DEFAULT_FIXED,
            Chunking::DEFAULT_FASTCDC,
            Chunking::DEFAULT_PARQUET,
            Chunking::Auto {
                min: 2048,
                avg: 8192,
                max: 32768,
            },
        ] {
            let c = BucketConfig {
                chunking,
                created_unix_ms: 77,
            };
            let enc = c.encode();
            assert_eq!(BucketConfig::decode(&enc).unwrap(), c);
            for i in 0..enc.len() {
                let mut b = enc.clone();
                b[i] ^= 0x10;
                assert!(BucketConfig::decode(&b).is_err(), "flip at {i}");
                assert!(BucketConfig::decode(&enc[..i]).is_err());
            }
        }
        // A Parquet-aware chunking's FastCDC parameters are checked too.
        let bad = BucketConfig {
            chunking: Chunking::Parquet {
                min: 2048,
                avg: 3000,
                max: 32768,
            },
            created_unix_ms: 1,
        };
        let e = BucketConfig::decode(&bad.encode()).unwrap_err().to_string();
        assert!(e.contains("not a power of two"), "{e}");
    }
}
