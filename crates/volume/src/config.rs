//! Tunables of the space manager, with their bounds.

use serde::{Deserialize, Serialize};

use crate::VolumeError;

/// How garbage collection picks the block to clean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum VictimPolicy {
    /// The block with the fewest live pages.
    Greedy,
    /// Rosenblum and Ousterhout's cost-benefit: the block maximising
    /// `(1 - u) * age / (1 + u)`, where `u` is the live fraction and `age` the
    /// sequence numbers issued since the block was last written. Old, mostly
    /// dead blocks go first; young blocks are left to die some more.
    #[default]
    CostBenefit,
}

/// Configuration of one [`SpaceManager`](crate::SpaceManager). Every field has
/// a default; `0` for a block count means "derive from the geometry".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VolumeConfig {
    /// Free blocks only garbage collection may take (its destination blocks
    /// and replacements for blocks that fail). User writes stop taking blocks
    /// when this many are left and collect garbage first. `0` = derive:
    /// `max(3, blocks / 128)`.
    pub reserve_blocks: u32,
    /// Background collection runs while fewer blocks than this are free.
    /// `0` = derive: `reserve + max(2, chips / 2)`.
    pub gc_high_watermark_blocks: u32,
    /// Fraction of the pages left after the reserve and the open blocks that
    /// may hold live data (the rest is over-provisioning that bounds write
    /// amplification and how long a write waits for garbage collection).
    pub max_fill: f64,
    /// Victim choice.
    pub victim_policy: VictimPolicy,
    /// Pages of a victim read at once while collecting.
    pub gc_batch_pages: u32,
    /// Most victims a single write may collect inline before it gives up with
    /// [`VolumeError::GcStalled`].
    pub max_inline_gc_steps: u32,
    /// Static wear leveling moves the data of the least-worn block once the
    /// spread of erase counts over good blocks exceeds this.
    pub wear_spread_limit: u32,
    /// Run garbage collection, wear leveling and periodic checkpoints in a
    /// background task (otherwise only inline, when writes need room, and on
    /// request).
    pub background: bool,
    /// Write a checkpoint after this many pages have been written or trimmed
    /// since the last one (background only; `0` = never on its own).
    pub checkpoint_interval_pages: u64,
    /// Bound on pages being read at the device from this manager at once
    /// (a multi-page request counts each page). A node's scans keep up to
    /// 8 runs x 256 pages in flight when their tuner asks for the deepest
    /// queue: 128 MiB of 64 KiB pages.
    pub max_inflight_reads: u32,
}

impl Default for VolumeConfig {
    fn default() -> Self {
        VolumeConfig {
            reserve_blocks: 0,
            gc_high_watermark_blocks: 0,
            max_fill: 0.95,
            victim_policy: VictimPolicy::CostBenefit,
            gc_batch_pages: 32,
            max_inline_gc_steps: 256,
            wear_spread_limit: 32,
            background: true,
            checkpoint_interval_pages: 16 * 1024,
            max_inflight_reads: 2048,
        }
    }
}

/// Bounds on the tunables.
pub(crate) const MAX_GC_BATCH_PAGES: u32 = 4096;
pub(crate) const MAX_INFLIGHT_READS: u32 = 4096;

impl VolumeConfig {
    /// Checks every field against its bound; the error names the field.
    pub fn validate(&self) -> Result<(), VolumeError> {
        let bad = |reason: String| Err(VolumeError::Config { reason });
        if !(self.max_fill > 0.0 && self.max_fill <= 1.0) {
            return bad(format!("max_fill = {}, must be in (0, 1]", self.max_fill));
        }
        if self.gc_batch_pages == 0 || self.gc_batch_pages > MAX_GC_BATCH_PAGES {
            return bad(format!(
                "gc_batch_pages = {}, must be in 1..={MAX_GC_BATCH_PAGES}",
                self.gc_batch_pages
            ));
        }
        if self.max_inline_gc_steps == 0 {
            return bad("max_inline_gc_steps must be at least 1".into());
        }
        if self.wear_spread_limit == 0 {
            return bad("wear_spread_limit must be at least 1".into());
        }
        if self.max_inflight_reads == 0 || self.max_inflight_reads > MAX_INFLIGHT_READS {
            return bad(format!(
                "max_inflight_reads = {}, must be in 1..={MAX_INFLIGHT_READS}",
                self.max_inflight_reads
            ));
        }
        Ok(())
    }
}
