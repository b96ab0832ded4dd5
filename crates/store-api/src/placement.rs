//! Where things live: rendezvous (highest-random-weight) hashing over the
//! member node ids.
//!
//! Every item has a 64-bit *point* (a chunk: the first 8 bytes of its
//! fingerprint; a manifest: of SHA-256 over its bucket and key; a bucket's
//! record: of SHA-256 over its name). Each member scores the point with a
//! mixing hash of (point, node id); the highest score owns it. No table is
//! kept: every node computes the same owner from the member list alone. When
//! a node joins, only the items it now wins move (to it, about 1/(n+1) of
//! them); when one leaves, only its own items move, spread over the others.

use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};
use crate::fingerprint::Fingerprint;
use crate::manifest::Manifest;
use crate::name::{BucketName, ObjectKey};

/// A node's id, as in the fabric and the wire protocol (`quarry_proto::NodeId`).
pub type NodeId = u16;

/// The owner function over a set of members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    members: Vec<NodeId>,
}

/// The 64-bit finaliser of MurmurHash3: every input bit flips each output bit
/// with probability about 1/2, which is what rendezvous hashing needs.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// The weight of `node` for `point`.
fn score(point: u64, node: NodeId) -> u64 {
    fmix64(point ^ fmix64(u64::from(node).wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// The placement point of a manifest: SHA-256 over the length-prefixed
/// bucket and the key, first 8 bytes.
pub fn manifest_point(bucket: &BucketName, key: &ObjectKey) -> u64 {
    let mut h = Sha256::new();
    h.update(b"quarry-manifest\0");
    h.update([bucket.as_str().len() as u8]);
    h.update(bucket.as_str().as_bytes());
    h.update(key.as_str().as_bytes());
    let d: [u8; 32] = h.finalize().into();
    u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The placement point of a bucket's own record.
pub fn bucket_point(bucket: &BucketName) -> u64 {
    let mut h = Sha256::new();
    h.update(b"quarry-bucket\0");
    h.update(bucket.as_str().as_bytes());
    let d: [u8; 32] = h.finalize().into();
    u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

impl Placement {
    /// A placement over `members` (order and repeats do not matter).
    pub fn new(members: impl IntoIterator<Item = NodeId>) -> Result<Self> {
        let mut members: Vec<NodeId> = members.into_iter().collect();
        members.sort_unstable();
        members.dedup();
        if members.is_empty() {
            return Err(StoreError::NoMembers);
        }
        Ok(Self { members })
    }

    /// The members, sorted.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The owner of `point`: the member with the highest score (ties, which
    /// need equal 64-bit hashes, go to the higher id).
    pub fn owner(&self, point: u64) -> NodeId {
        *self
            .members
            .iter()
            .max_by_key(|&&n| (score(point, n), n))
            .expect("at least one member")
    }

    /// All members, best first: the owner, then where a replica (or the item,
    /// should the owner leave) would go.
    pub fn ranked(&self, point: u64) -> Vec<NodeId> {
        let mut v = self.members.clone();
        v.sort_unstable_by_key(|&n| std::cmp::Reverse((score(point, n), n)));
        v
    }

    /// The node a chunk lives on.
    pub fn chunk_node(&self, fingerprint: &Fingerprint) -> NodeId {
        self.owner(fingerprint.prefix_u64())
    }

    /// The node that holds chunk `fingerprint` of the object `manifest`
    /// describes: the manifest's node when the manifest keeps its chunk
    /// there (a small object), else the node the fingerprint names.
    pub fn chunk_holder(&self, manifest: &Manifest, fingerprint: &Fingerprint) -> NodeId {
        if manifest.chunk_at_manifest_node() {
            self.manifest_node(manifest.bucket(), manifest.key())
        } else {
            self.chunk_node(fingerprint)
        }
    }

    /// The node an object's manifest lives on.
    pub fn manifest_node(&self, bucket: &BucketName, key: &ObjectKey) -> NodeId {
        self.owner(manifest_point(bucket, key))
    }

    /// The node a bucket's record (its configuration) lives on.
    pub fn bucket_node(&self, bucket: &BucketName) -> NodeId {
        self.owner(bucket_point(bucket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fps(n: u32) -> Vec<Fingerprint> {
        (0..n).map(|i| Fingerprint::of(&i.to_le_bytes())).collect()
    }

    #[test]
    fn balance_over_four_nodes_within_two_percent() {
        let p = Placement::new([1, 2, 3, 4]).unwrap();
        let mut counts = [0u32; 5];
        let chunks = fps(100_000);
        for fp in &chunks {
            counts[p.chunk_node(fp) as usize] += 1;
        }
        for (node, &c) in counts.iter().enumerate().skip(1) {
            let dev = (f64::from(c) - 25_000.0).abs() / 25_000.0;
            assert!(dev < 0.02, "node {node} got {c} of 100000 chunks");
        }
        // Manifests: 100k keys, same bound.
        let bucket = BucketName::new("b").unwrap();
        let mut counts = [0u32; 5];
        for i in 0..100_000 {
            let key = ObjectKey::new(&format!("dir/file-{i}")).unwrap();
            counts[p.manifest_node(&bucket, &key) as usize] += 1;
        }
        for (node, &c) in counts.iter().enumerate().skip(1) {
            let dev = (f64::from(c) - 25_000.0).abs() / 25_000.0;
            assert!(dev < 0.02, "node {node} got {c} of 100000 manifests");
        }
    }

    #[test]
    fn balance_with_sequential_ids() {
        // Small consecutive ids are the common case; they must not cluster.
        let p = Placement::new(0..8).unwrap();
        let mut counts = [0u32; 8];
        for fp in fps(80_000) {
            counts[p.chunk_node(&fp) as usize] += 1;
        }
        for c in counts {
            assert!((9_600..=10_400).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn membership_changes_move_little() {
        let chunks = fps(50_000);
        let four = Placement::new([1, 2, 3, 4]).unwrap();
        let five = Placement::new([1, 2, 3, 4, 5]).unwrap();
        let three = Placement::new([1, 2, 4]).unwrap();
        let mut moved_join = 0;
        let mut moved_leave = 0;
        for fp in &chunks {
            let before = four.chunk_node(fp);
            let after = five.chunk_node(fp);
            if before != after {
                // A join moves items only onto the new node.
                assert_eq!(after, 5);
                moved_join += 1;
            }
            let after = three.chunk_node(fp);
            if before != after {
                // A leave moves only the leaver's items.
                assert_eq!(before, 3);
                moved_leave += 1;
            } else {
                assert_ne!(before, 3);
            }
        }
        // Ideal: 1/5 and 1/4 of the items.
        assert!((9_500..=10_500).contains(&moved_join), "{moved_join}");
        assert!((12_000..=13_000).contains(&moved_leave), "{moved_leave}");
    }

    #[test]
    fn order_and_repeats_of_members_do_not_matter() {
        let a = Placement::new([3, 1, 2, 2]).unwrap();
        let b = Placement::new([1, 2, 3]).unwrap();
        assert_eq!(a, b);
        for fp in fps(1000) {
            assert_eq!(a.chunk_node(&fp), b.chunk_node(&fp));
            let r = a.ranked(fp.prefix_u64());
            assert_eq!(r[0], a.chunk_node(&fp));
            assert_eq!(r.len(), 3);
        }
        assert!(matches!(
            Placement::new(std::iter::empty()),
            Err(StoreError::NoMembers)
        ));
    }
}
