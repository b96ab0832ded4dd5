//! The write-amplification benchmark: uniform random page overwrites on a
//! volume filled to a given fraction of its physical pages, measured next to
//! what theory gives for greedy (and FIFO) cleaning. A library function, so
//! the command line and docs/benchmarks.md can call it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use quarry_device::{BackendKind, Device, DeviceConfig, Geometry};
use serde::{Deserialize, Serialize};

use crate::{LogicalPage, SpaceManager, VictimPolicy, VolumeConfig, VolumeError};

/// What to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaBenchOptions {
    /// Geometry of the `mem` device each fill level runs on.
    pub geometry: Geometry,
    /// Live logical pages as fractions of the device's physical pages.
    pub fills: Vec<f64>,
    /// Random overwrites before measuring, in multiples of the logical pages
    /// (reaching the steady state).
    pub warmup_writes: f64,
    /// Random overwrites measured, in multiples of the logical pages.
    pub measured_writes: f64,
    /// Victim choice of the garbage collector.
    pub policy: VictimPolicy,
    /// Seed of the page choice.
    pub seed: u64,
    /// Scratch directory for the managers' checkpoints (one subdirectory per
    /// fill level, removed afterwards).
    pub dir: PathBuf,
}

impl Default for WaBenchOptions {
    fn default() -> Self {
        WaBenchOptions {
            geometry: Geometry {
                buses: 4,
                chips_per_bus: 4,
                blocks_per_chip: 64,
                pages_per_block: 64,
                page_size_bytes: 512,
                oob_size_bytes: 64,
            },
            fills: vec![0.5, 0.8, 0.9],
            warmup_writes: 2.0,
            measured_writes: 2.0,
            policy: VictimPolicy::Greedy,
            seed: 1,
            dir: std::env::temp_dir().join(format!("quarry-wa-bench-{}", std::process::id())),
        }
    }
}

/// One fill level's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaPoint {
    /// Live pages / physical pages.
    pub fill: f64,
    /// Victim choice used.
    pub policy: VictimPolicy,
    /// Logical pages written.
    pub logical_pages: u64,
    /// Physical pages of the device.
    pub physical_pages: u64,
    /// Random overwrites measured.
    pub user_writes: u64,
    /// Pages programmed during the measurement (user writes and moves).
    pub flash_writes: u64,
    /// `flash_writes / user_writes`.
    pub write_amplification: f64,
    /// Greedy cleaning in theory at this fill ([`greedy_write_amplification`]).
    pub greedy_theory: f64,
    /// FIFO cleaning in theory at this fill ([`fifo_write_amplification`]).
    pub fifo_theory: f64,
    /// Ideal greedy cleaning simulated on the same geometry ([`simulate_greedy`]).
    pub greedy_simulated: f64,
    /// Erase-count spread (max - min) at the end.
    pub erase_count_spread: u32,
    /// Wall time of the fill level, seconds.
    pub seconds: f64,
}

/// Write amplification of greedy cleaning under uniform random writes at
/// `fill` = logical / physical pages, by Agarwal and Marrow's closed form
/// (`(1 + ρ) / (2ρ)` with over-provisioning `ρ = (1 - fill) / fill`, i.e.
/// `1 / (2 (1 - fill))`), never below 1. An approximation for large erase
/// blocks, tight at high fill and optimistic at low fill.
pub fn greedy_write_amplification(fill: f64) -> f64 {
    assert!(fill > 0.0 && fill < 1.0, "fill must be in (0, 1)");
    (1.0 / (2.0 * (1.0 - fill))).max(1.0)
}

/// Write amplification of FIFO (LRU) cleaning under uniform random writes at
/// `fill`: `1 / (1 - v)` where the live fraction `v` of a cleaned block solves
/// `v = exp(-(1 - v) / fill)` (Desnoyers; Hu et al.). Greedy never does worse.
pub fn fifo_write_amplification(fill: f64) -> f64 {
    assert!(fill > 0.0 && fill < 1.0, "fill must be in (0, 1)");
    let f = |v: f64| v - (-(1.0 - v) / fill).exp();
    let (mut lo, mut hi) = (0.0f64, 1.0 - 1e-12);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if f(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    1.0 / (1.0 - lo)
}

/// Write amplification of ideal greedy cleaning, simulated: a page-mapped
/// log over `blocks` x `pages_per_block` pages holding `fill` of them live,
/// uniform random overwrites, and no reserve at all (the victim with the
/// fewest live pages is read, erased and becomes the open block with its
/// live pages written back first). `writes_per_page` rounds of overwrites
/// warm up and as many are measured. The figure for greedy at the same
/// erase-block size that the closed form approximates.
pub fn simulate_greedy(
    blocks: u32,
    pages_per_block: u32,
    fill: f64,
    writes_per_page: f64,
    seed: u64,
) -> f64 {
    assert!(fill > 0.0 && fill < 1.0, "fill must be in (0, 1)");
    assert!(blocks >= 2 && pages_per_block >= 1);
    let ppb = pages_per_block as usize;
    let physical = blocks as usize * ppb;
    let logical = ((fill * physical as f64).round() as usize).clamp(1, physical - ppb);
    let mut sim = GreedySim {
        ppb,
        where_is: vec![NONE; logical],
        owner: vec![NONE; physical],
        valid: vec![0; blocks as usize],
        free: (1..blocks).rev().collect(),
        open: 0,
        next: 0,
        moved: 0,
    };
    for l in 0..logical {
        sim.write(l);
    }
    let mut rng = SplitMix(seed);
    let rounds = (writes_per_page * logical as f64).round() as u64;
    for _ in 0..rounds {
        sim.write((rng.next() % logical as u64) as usize);
    }
    sim.moved = 0;
    for _ in 0..rounds {
        sim.write((rng.next() % logical as u64) as usize);
    }
    if rounds == 0 {
        return 1.0;
    }
    (rounds + sim.moved) as f64 / rounds as f64
}

const NONE: u32 = u32::MAX;

/// State of [`simulate_greedy`]'s ideal log.
struct GreedySim {
    ppb: usize,
    /// Logical page -> physical page.
    where_is: Vec<u32>,
    /// Physical page -> logical page.
    owner: Vec<u32>,
    /// Live pages per block.
    valid: Vec<u32>,
    free: Vec<u32>,
    open: u32,
    next: usize,
    moved: u64,
}

impl GreedySim {
    fn place(&mut self, l: u32) {
        let p = self.open as usize * self.ppb + self.next;
        self.owner[p] = l;
        self.where_is[l as usize] = p as u32;
        self.valid[self.open as usize] += 1;
        self.next += 1;
    }

    fn write(&mut self, l: usize) {
        if self.next == self.ppb {
            if let Some(b) = self.free.pop() {
                self.open = b;
                self.next = 0;
            } else {
                // Greedy: the sealed block with the fewest live pages, read,
                // erased and written back as the new open block.
                let open = self.open;
                let victim = (0..self.valid.len() as u32)
                    .filter(|&b| b != open)
                    .min_by_key(|&b| self.valid[b as usize])
                    .expect("a victim");
                let base = victim as usize * self.ppb;
                let live: Vec<u32> = self.owner[base..base + self.ppb]
                    .iter()
                    .copied()
                    .filter(|&x| x != NONE)
                    .collect();
                self.owner[base..base + self.ppb].fill(NONE);
                self.valid[victim as usize] = 0;
                self.open = victim;
                self.next = 0;
                self.moved += live.len() as u64;
                for x in live {
                    self.place(x);
                }
                assert!(self.next < self.ppb, "no dead page to reclaim");
            }
        }
        let old = self.where_is[l];
        if old != NONE {
            self.owner[old as usize] = NONE;
            self.valid[old as usize / self.ppb] -= 1;
        }
        self.place(l as u32);
    }
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Runs the benchmark: for each fill level, a fresh `mem` device, the
/// logical pages written once in order, `warmup_writes` rounds of uniform
/// random overwrites, then `measured_writes` rounds measured. Background work
/// and wear leveling are off, so the figure is garbage collection's alone.
/// Needs a tokio runtime.
pub async fn write_amplification(opts: &WaBenchOptions) -> Result<Vec<WaPoint>, VolumeError> {
    let mut out = Vec::with_capacity(opts.fills.len());
    for (n, &fill) in opts.fills.iter().enumerate() {
        if !(fill > 0.0 && fill < 1.0) {
            return Err(VolumeError::Config {
                reason: format!("benchmark fill {fill} must be in (0, 1)"),
            });
        }
        let start = Instant::now();
        let dir = opts.dir.join(format!("fill-{n}"));
        let device_config = DeviceConfig {
            backend: BackendKind::Mem,
            geometry: Some(opts.geometry),
            ..DeviceConfig::default()
        };
        let device = Device::open(&device_config, &dir)
            .map_err(|e| VolumeError::device("opening the benchmark device", e))?;
        let config = VolumeConfig {
            max_fill: 1.0,
            victim_policy: opts.policy,
            background: false,
            wear_spread_limit: 1 << 30,
            checkpoint_interval_pages: 0,
            ..VolumeConfig::default()
        };
        let volume = SpaceManager::open(Arc::new(device), config, &dir).await?;
        let physical = opts.geometry.pages();
        let logical = (fill * physical as f64).round() as u64;
        if logical > volume.capacity_pages() {
            return Err(VolumeError::Config {
                reason: format!(
                    "fill {fill} needs {logical} live pages; the space manager holds at most {} of \
                     the {physical} (blocks kept for garbage collection and open blocks); use a \
                     larger geometry",
                    volume.capacity_pages()
                ),
            });
        }
        let data = Bytes::from(vec![0xA5u8; opts.geometry.page_size_bytes as usize]);
        for i in 0..logical {
            volume.write(LogicalPage::new(0, i), data.clone()).await?;
        }
        let mut rng = SplitMix(opts.seed ^ (n as u64).wrapping_mul(0x51_7CC1_B727_220A));
        let rounds = |x: f64| (x * logical as f64).round() as u64;
        for _ in 0..rounds(opts.warmup_writes) {
            let i = rng.next() % logical;
            volume.write(LogicalPage::new(0, i), data.clone()).await?;
        }
        let before = volume.stats();
        let measured = rounds(opts.measured_writes);
        for _ in 0..measured {
            let i = rng.next() % logical;
            volume.write(LogicalPage::new(0, i), data.clone()).await?;
        }
        let after = volume.stats();
        volume.verify()?;
        volume.close().await?;
        let _ = std::fs::remove_dir_all(&dir);
        let programs =
            |s: &crate::VolumeStats| s.user_pages_written + s.gc_pages_moved + s.wear_pages_moved;
        let user = after.user_pages_written - before.user_pages_written;
        let flash = programs(&after) - programs(&before);
        out.push(WaPoint {
            fill,
            policy: opts.policy,
            logical_pages: logical,
            physical_pages: physical,
            user_writes: user,
            flash_writes: flash,
            write_amplification: if user == 0 {
                1.0
            } else {
                flash as f64 / user as f64
            },
            greedy_theory: greedy_write_amplification(fill),
            fifo_theory: fifo_write_amplification(fill),
            greedy_simulated: simulate_greedy(
                opts.geometry.blocks() as u32,
                opts.geometry.pages_per_block,
                fill,
                opts.measured_writes.max(1.0),
                opts.seed,
            ),
            erase_count_spread: after.erase_count_max - after.erase_count_min,
            seconds: start.elapsed().as_secs_f64(),
        });
    }
    let _ = std::fs::remove_dir(&opts.dir);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theory_figures() {
        assert!((greedy_write_amplification(0.8) - 2.5).abs() < 1e-9);
        assert!((greedy_write_amplification(0.9) - 5.0).abs() < 1e-9);
        assert_eq!(greedy_write_amplification(0.3), 1.0);
        // Lambert-W closed form: 1.25 / (1.25 + W(-1.25 e^-1.25)) = 2.6927 at 0.8.
        let f = fifo_write_amplification(0.8);
        assert!((f - 2.6927).abs() < 0.001, "{f}");
        for u in [0.5, 0.8, 0.9] {
            assert!(fifo_write_amplification(u) >= greedy_write_amplification(u) - 0.01);
        }
    }

    #[test]
    fn simulated_greedy_sits_between_the_closed_forms() {
        for u in [0.5, 0.8] {
            let sim = simulate_greedy(128, 16, u, 2.0, 3);
            assert!(sim >= 1.0, "{u}: {sim}");
            assert!(sim <= fifo_write_amplification(u) * 1.05, "{u}: {sim}");
        }
        assert!(simulate_greedy(128, 16, 0.8, 2.0, 3) > simulate_greedy(128, 16, 0.5, 2.0, 3));
    }
}
