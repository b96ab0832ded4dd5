//! Space accounting for `quarry df`.

use std::collections::BTreeMap;

use crate::name::BucketName;

/// One bucket's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BucketUsage {
    /// Live objects (current versions).
    pub objects: u64,
    /// Sum of the live objects' sizes.
    pub logical_bytes: u64,
    /// Sum of the lengths of the distinct chunks the bucket's objects use
    /// (a chunk shared with another bucket counts in both).
    pub stored_bytes: u64,
    /// Number of those distinct chunks.
    pub chunks: u64,
}

impl BucketUsage {
    /// Logical over stored bytes (1.0 when nothing is stored).
    pub fn dedup_ratio(&self) -> f64 {
        ratio(self.logical_bytes, self.stored_bytes)
    }

    fn add(&mut self, o: &BucketUsage) {
        self.objects += o.objects;
        self.logical_bytes += o.logical_bytes;
        self.stored_bytes += o.stored_bytes;
        self.chunks += o.chunks;
    }
}

/// A node's (or, merged, a cluster's) figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Per bucket.
    pub buckets: BTreeMap<BucketName, BucketUsage>,
    /// Live objects.
    pub objects: u64,
    /// Sum of live objects' sizes.
    pub logical_bytes: u64,
    /// Sum of the lengths of all distinct chunks (each counted once, however
    /// many objects and buckets use it).
    pub stored_bytes: u64,
    /// Number of distinct chunks.
    pub chunks: u64,
}

impl Usage {
    /// Logical over stored bytes (1.0 when nothing is stored).
    pub fn dedup_ratio(&self) -> f64 {
        ratio(self.logical_bytes, self.stored_bytes)
    }

    /// Adds another node's figures. Every chunk and every manifest lives on
    /// exactly one node, so sums of per-node figures are the cluster's.
    pub fn merge(&mut self, other: &Usage) {
        for (b, u) in &other.buckets {
            self.buckets.entry(b.clone()).or_default().add(u);
        }
        self.objects += other.objects;
        self.logical_bytes += other.logical_bytes;
        self.stored_bytes += other.stored_bytes;
        self.chunks += other.chunks;
    }

    /// `b`'s figures, to change (zeros if it had none).
    pub fn bucket(&mut self, b: &BucketName) -> &mut BucketUsage {
        self.buckets.entry(b.clone()).or_default()
    }

    /// Drops `b`'s figures if they are all zero (after a decrease).
    pub fn prune(&mut self, b: &BucketName) {
        if self.buckets.get(b) == Some(&BucketUsage::default()) {
            self.buckets.remove(b);
        }
    }
}

fn ratio(logical: u64, stored: u64) -> f64 {
    if stored == 0 {
        1.0
    } else {
        logical as f64 / stored as f64
    }
}
