//! Encodings of the table records other than manifests.

use std::collections::BTreeMap;

use quarry_store_api::ChunkLocation;
use quarry_store_api::{
    finish_record as finish, open_record as open, seal_record as seal, Manifest, RECORD_FORMAT,
};
use quarry_store_api::{BucketName, ObjectKey};
use quarry_store_api::{Result, StoreError};

/// A chunk table entry: where the chunk is, how long, and who refers to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChunkRecord {
    pub location: ChunkLocation,
    pub len: u32,
    /// References per bucket (every entry > 0); the refcount is their sum.
    pub refs: BTreeMap<BucketName, u64>,
    /// When a reference was last added (ms since the epoch): the orphan
    /// collector leaves recently referenced chunks alone.
    pub touched_unix_ms: u64,
    /// CRC-32C of the chunk's bytes, taken when they were filed: a read
    /// checks it instead of hashing the bytes again (SHA-256 costs ~10x
    /// more). `None` in records written before it; those reads hash.
    pub data_crc32c: Option<u32>,
}

impl ChunkRecord {
    pub fn refcount(&self) -> u64 {
        self.refs.values().sum()
    }

    /// `format:u8=1 space:u32 first_page:u64 pages:u32 len:u32 touched:u64
    /// n:u16 {bucket_len:u8 bucket count:u64}*n [data_crc32c:u32] crc32c:u32`
    /// (the data CRC is absent in records written before it; the counted
    /// list before it keeps the two forms apart).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40 + 16 * self.refs.len());
        out.push(RECORD_FORMAT);
        out.extend_from_slice(&self.location.space.to_le_bytes());
        out.extend_from_slice(&self.location.first_page.to_le_bytes());
        out.extend_from_slice(&self.location.pages.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.touched_unix_ms.to_le_bytes());
        out.extend_from_slice(&(self.refs.len() as u16).to_le_bytes());
        for (b, n) in &self.refs {
            out.push(b.as_str().len() as u8);
            out.extend_from_slice(b.as_str().as_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        if let Some(crc) = self.data_crc32c {
            out.extend_from_slice(&crc.to_le_bytes());
        }
        seal(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self> {
        const WHAT: &str = "chunk record";
        let mut r = open(WHAT, bytes)?;
        let location = ChunkLocation {
            space: r.u32()?,
            first_page: r.u64()?,
            pages: r.u32()?,
        };
        let len = r.u32()?;
        let touched_unix_ms = r.u64()?;
        let n = r.u16()?;
        let mut refs = BTreeMap::new();
        for _ in 0..n {
            let l = r.u8()? as usize;
            let b = BucketName::from_bytes(r.take(l)?)?;
            let count = r.u64()?;
            if count == 0 || refs.insert(b.clone(), count).is_some() {
                return Err(StoreError::Malformed {
                    what: WHAT,
                    reason: format!("bucket {b} listed twice or with no reference"),
                });
            }
        }
        let data_crc32c = if r.left() == 4 { Some(r.u32()?) } else { None };
        finish(WHAT, &r)?;
        Ok(Self {
            location,
            len,
            refs,
            touched_unix_ms,
            data_crc32c,
        })
    }
}

/// A manifest table entry: the current manifest, or the last version of a
/// deleted object (so versions keep increasing across delete and re-create).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyRecord {
    Live(Manifest),
    Deleted { last_version: u64 },
}

impl KeyRecord {
    pub fn version(&self) -> u64 {
        match self {
            KeyRecord::Live(m) => m.version(),
            KeyRecord::Deleted { last_version } => *last_version,
        }
    }

    /// `1` + encoded manifest, or `2` + `format:u8=1 last_version:u64 crc32c:u32`.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            KeyRecord::Live(m) => {
                let mut out = Vec::with_capacity(1 + m.encoded_len());
                out.push(1);
                out.extend_from_slice(&m.encode());
                out
            }
            KeyRecord::Deleted { last_version } => {
                let mut body = vec![RECORD_FORMAT];
                body.extend_from_slice(&last_version.to_le_bytes());
                let mut out = vec![2];
                out.extend_from_slice(&seal(body));
                out
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Self> {
        const WHAT: &str = "key record";
        match bytes.first() {
            Some(1) => Ok(KeyRecord::Live(Manifest::decode(&bytes[1..])?)),
            Some(2) => {
                let mut r = open(WHAT, &bytes[1..])?;
                let last_version = r.u64()?;
                finish(WHAT, &r)?;
                Ok(KeyRecord::Deleted { last_version })
            }
            other => Err(StoreError::Malformed {
                what: WHAT,
                reason: format!("unknown tag {other:?}"),
            }),
        }
    }
}

/// The manifest table's key: `bucket_len:u8 bucket key`, so one bucket's
/// keys are contiguous and sorted.
pub(crate) fn manifest_key(bucket: &BucketName, key: &ObjectKey) -> Vec<u8> {
    let mut k = manifest_prefix(bucket, key.as_str());
    k.shrink_to_fit();
    k
}

/// The key prefix of a bucket's keys that start with `prefix`.
pub(crate) fn manifest_prefix(bucket: &BucketName, prefix: &str) -> Vec<u8> {
    let b = bucket.as_str().as_bytes();
    let mut k = Vec::with_capacity(1 + b.len() + prefix.len());
    k.push(b.len() as u8);
    k.extend_from_slice(b);
    k.extend_from_slice(prefix.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_store_api::{ChunkRef, Chunking, Fingerprint};

    #[test]
    fn records_round_trip_and_reject_damage() {
        let mut refs = BTreeMap::new();
        refs.insert(BucketName::new("a").unwrap(), 3);
        refs.insert(BucketName::new("bb").unwrap(), 1);
        let rec = ChunkRecord {
            location: ChunkLocation {
                space: 2,
                first_page: 99,
                pages: 8,
            },
            len: 65536,
            refs,
            touched_unix_ms: 5,
            data_crc32c: Some(0xdead_beef),
        };
        // Records written before the data CRC read back without one.
        let old = ChunkRecord {
            data_crc32c: None,
            ..rec.clone()
        };
        assert_eq!(ChunkRecord::decode(&old.encode()).unwrap(), old);
        assert_eq!(old.encode().len() + 4, rec.encode().len());
        let enc = rec.encode();
        assert_eq!(ChunkRecord::decode(&enc).unwrap(), rec);
        assert_eq!(rec.refcount(), 4);
        for i in 0..enc.len() {
            let mut b = enc.clone();
            b[i] ^= 0x10;
            assert!(ChunkRecord::decode(&b).is_err(), "flip at {i}");
            assert!(ChunkRecord::decode(&enc[..i]).is_err());
        }

        let m = Manifest::new(
            BucketName::new("a").unwrap(),
            ObjectKey::new("k").unwrap(),
            4,
            1,
            Chunking::DEFAULT_FIXED,
            vec![ChunkRef {
                fingerprint: Fingerprint::of(b"x"),
                len: 1,
            }],
        )
        .unwrap();
        for r in [KeyRecord::Live(m), KeyRecord::Deleted { last_version: 9 }] {
            let enc = r.encode();
            assert_eq!(KeyRecord::decode(&enc).unwrap(), r);
            let mut b = enc.clone();
            *b.last_mut().unwrap() ^= 1;
            assert!(KeyRecord::decode(&b).is_err());
        }
        assert!(KeyRecord::decode(&[]).is_err());
        assert!(KeyRecord::decode(&[7]).is_err());
    }

    #[test]
    fn manifest_keys_group_by_bucket() {
        let a = BucketName::new("a").unwrap();
        let k1 = manifest_key(&a, &ObjectKey::new("x/1").unwrap());
        assert!(k1.starts_with(&manifest_prefix(&a, "x/")));
        let ab = BucketName::new("ab").unwrap();
        assert!(
            !manifest_key(&ab, &ObjectKey::new("c").unwrap()).starts_with(&manifest_prefix(&a, ""))
        );
    }
}
