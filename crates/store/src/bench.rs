//! The dedup benchmark: store a generated file, then a copy with one region
//! changed, and report the extra bytes stored with fixed-size and with
//! FastCDC chunking (issue 4's "storing a file, then a copy with one region
//! changed"). A library function; `examples/dedup.rs` runs it.

use std::fmt;
use std::time::Instant;

use crate::mem::mem_object_store;
use quarry_store_api::Chunking;
use quarry_store_api::Condition;
use quarry_store_api::Result;
use quarry_store_api::{BucketName, ObjectKey};

/// How the copy differs from the original.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit {
    /// `region` bytes in the middle are overwritten in place (same length).
    Overwrite,
    /// `region` new bytes are inserted in the middle (the copy is longer).
    Insert,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct DedupConfig {
    /// Size of the generated file.
    pub file_bytes: usize,
    /// Bytes overwritten or inserted.
    pub region_bytes: usize,
    /// Seed of the generated content.
    pub seed: u64,
    /// Nodes of the in-memory cluster.
    pub nodes: u16,
    /// The chunkings compared.
    pub chunkings: Vec<Chunking>,
}

impl Default for DedupConfig {
    fn default() -> Self {
        Self {
            file_bytes: 64 << 20,
            region_bytes: 4096,
            seed: 1,
            nodes: 4,
            chunkings: vec![Chunking::DEFAULT_FIXED, Chunking::DEFAULT_FASTCDC],
        }
    }
}

/// One measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct DedupRow {
    /// The chunking.
    pub chunking: Chunking,
    /// The edit.
    pub edit: Edit,
    /// Stored bytes after the original.
    pub first_stored: u64,
    /// Chunks of the original.
    pub first_chunks: usize,
    /// Stored bytes the copy added.
    pub extra_stored: u64,
    /// Logical bytes of both objects.
    pub logical: u64,
    /// Stored bytes of both objects.
    pub stored: u64,
    /// Seconds to put both objects (chunking, hashing, in-memory tables).
    pub seconds: f64,
}

impl DedupRow {
    /// Logical over stored bytes for the pair.
    pub fn dedup_ratio(&self) -> f64 {
        self.logical as f64 / self.stored.max(1) as f64
    }
}

/// The rows of a run.
#[derive(Clone, Debug)]
pub struct DedupReport {
    /// What ran.
    pub config: DedupConfig,
    /// One row per chunking and edit.
    pub rows: Vec<DedupRow>,
}

/// Deterministic content: xorshift64* words, so runs compare.
pub fn generate(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The copy of `original` with the edit applied in the middle.
pub fn edited(original: &[u8], edit: Edit, region: usize, seed: u64) -> Vec<u8> {
    let at = original.len() / 2;
    let patch = generate(region, seed ^ 0x5555);
    let mut copy = original.to_vec();
    match edit {
        Edit::Overwrite => {
            let end = (at + region).min(copy.len());
            copy[at..end].copy_from_slice(&patch[..end - at]);
        }
        Edit::Insert => {
            copy.splice(at..at, patch);
        }
    }
    copy
}

/// Runs the benchmark on fresh in-memory clusters.
pub async fn dedup(config: &DedupConfig) -> Result<DedupReport> {
    let original = generate(config.file_bytes, config.seed);
    let mut rows = Vec::new();
    for &chunking in &config.chunkings {
        for edit in [Edit::Overwrite, Edit::Insert] {
            let copy = edited(&original, edit, config.region_bytes, config.seed);
            let store = mem_object_store(0..config.nodes).await?;
            let bucket = BucketName::new("bench")?;
            store.create_bucket(&bucket, chunking).await?;
            let started = Instant::now();
            let first = store
                .put_bytes(
                    &bucket,
                    &ObjectKey::new("original")?,
                    &original,
                    Condition::Always,
                )
                .await?;
            let first_stored = store.usage().await?.stored_bytes;
            store
                .put_bytes(&bucket, &ObjectKey::new("copy")?, &copy, Condition::Always)
                .await?;
            let seconds = started.elapsed().as_secs_f64();
            let usage = store.usage().await?;
            rows.push(DedupRow {
                chunking,
                edit,
                first_stored,
                first_chunks: first.chunks().len(),
                extra_stored: usage.stored_bytes - first_stored,
                logical: usage.logical_bytes,
                stored: usage.stored_bytes,
                seconds,
            });
        }
    }
    Ok(DedupReport {
        config: config.clone(),
        rows,
    })
}

fn describe(c: Chunking) -> String {
    let k = |v: u32| {
        if v.is_multiple_of(1024) {
            format!("{}K", v / 1024)
        } else {
            v.to_string()
        }
    };
    match c {
        Chunking::Fixed { size } => format!("fixed {}", k(size)),
        Chunking::FastCdc { min, avg, max } => {
            format!("FastCDC {}/{}/{}", k(min), k(avg), k(max))
        }
        Chunking::Parquet { min, avg, max } => {
            format!("parquet (FastCDC {}/{}/{})", k(min), k(avg), k(max))
        }
        Chunking::Auto { min, avg, max } => {
            format!("auto (FastCDC {}/{}/{})", k(min), k(avg), k(max))
        }
    }
}

impl fmt::Display for DedupReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "file {} bytes, region {} bytes changed in the middle, {} nodes",
            self.config.file_bytes, self.config.region_bytes, self.config.nodes
        )?;
        writeln!(
            f,
            "{:<24} {:<9} {:>8} {:>14} {:>10} {:>8} {:>8}",
            "chunking", "edit", "chunks", "extra bytes", "extra/edit", "ratio", "MB/s"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<24} {:<9} {:>8} {:>14} {:>10.1} {:>8.3} {:>8.0}",
                describe(r.chunking),
                format!("{:?}", r.edit).to_lowercase(),
                r.first_chunks,
                r.extra_stored,
                r.extra_stored as f64 / self.config.region_bytes.max(1) as f64,
                r.dedup_ratio(),
                r.logical as f64 / r.seconds.max(1e-9) / 1e6,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fastcdc_beats_fixed_after_an_insertion() {
        let config = DedupConfig {
            file_bytes: 2 << 20,
            region_bytes: 100,
            seed: 7,
            nodes: 4,
            chunkings: vec![
                Chunking::fixed(8192).unwrap(),
                Chunking::fastcdc(2048, 8192, 32768).unwrap(),
            ],
        };
        let report = dedup(&config).await.unwrap();
        let row = |c: usize, e: Edit| {
            report
                .rows
                .iter()
                .find(|r| r.chunking == config.chunkings[c] && r.edit == e)
                .unwrap()
                .clone()
        };
        // Overwrite: about one chunk either way.
        assert!(row(0, Edit::Overwrite).extra_stored <= 2 * 8192);
        assert!(row(1, Edit::Overwrite).extra_stored <= 2 * 32768);
        // Insert: fixed restores everything after the middle, FastCDC a chunk or two.
        let fixed = row(0, Edit::Insert).extra_stored;
        let cdc = row(1, Edit::Insert).extra_stored;
        assert!(fixed >= (1 << 20), "fixed {fixed}");
        assert!(cdc <= 2 * 32768, "FastCDC {cdc}");
        let text = report.to_string();
        assert!(
            text.contains("FastCDC 2K/8K/32K") && text.contains("insert"),
            "{text}"
        );
    }

    #[test]
    fn generated_content_is_deterministic() {
        assert_eq!(generate(1000, 3), generate(1000, 3));
        assert_ne!(generate(1000, 3), generate(1000, 4));
        let e = edited(&generate(100, 1), Edit::Insert, 10, 1);
        assert_eq!(e.len(), 110);
    }
}
