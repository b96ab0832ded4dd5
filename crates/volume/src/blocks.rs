//! The block table: per-block state, live-page bitmaps, the free-block
//! allocator (wear-aware) and victim choice for garbage collection and wear
//! leveling. Pure bookkeeping: no I/O, no locks (the manager holds its state
//! lock around every call).

use quarry_device::{BlockAddr, Geometry, PageAddr};

use crate::VictimPolicy;

/// Dense physical page number: `block index * pages per block + page`.
pub(crate) type Phys = u32;

/// The device address of a physical page: geometry only, no table needed.
pub(crate) fn page_addr(geometry: &Geometry, phys: Phys) -> PageAddr {
    let ppb = geometry.pages_per_block;
    geometry.block_at(u64::from(phys / ppb)).page(phys % ppb)
}

/// What a block is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockState {
    /// Erased and good; no page written.
    Free,
    /// The current block of a write stream (a chip's user stream or GC's).
    Open,
    /// Holds data; no longer written.
    Sealed,
    /// Chosen by garbage collection; its live pages are being moved.
    Collecting,
    /// Marked bad on the device after a failure; still holds live pages that
    /// garbage collection moves out first. Never erased.
    Retiring,
    /// Bad (factory, or retired and emptied). Never used.
    Bad,
}

/// One block's bookkeeping.
#[derive(Debug, Clone)]
pub(crate) struct BlockInfo {
    pub state: BlockState,
    /// The device's erase count as of the last erase this manager saw.
    pub erase_count: u32,
    /// Pages handed out for programming (the manager's write pointer).
    pub written: u32,
    /// Pages whose program has finished and whose outcome is in the map:
    /// a checkpoint taken now needs to rescan only pages from here on.
    pub settled: u32,
    /// Live pages (set bits of `live_bits`).
    pub live: u32,
    /// Clock (sequence counter) at the block's latest program: its age for
    /// cost-benefit victim choice.
    pub last_write: u64,
    live_bits: Vec<u64>,
}

/// Which end of the wear range an allocation prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wear {
    /// Least-worn first: user writes (hot data) go to young blocks.
    Least,
    /// Most-worn first: data moved by garbage collection (cold) rests on old blocks.
    Most,
}

/// Erase-count spread over good blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WearRange {
    pub min: u32,
    pub max: u32,
    pub mean: f64,
}

/// The table.
#[derive(Debug)]
pub(crate) struct Blocks {
    geometry: Geometry,
    info: Vec<BlockInfo>,
    /// Free blocks per chip; kept by `set_state`, the one place states change.
    free_per_chip: Vec<u32>,
    /// Blocks neither bad nor retiring; kept by `set_state`.
    good: u64,
}

impl Blocks {
    /// All blocks `Free` with erase count 0; the caller sets the real state.
    pub fn new(geometry: Geometry) -> Blocks {
        let words = geometry.pages_per_block.div_ceil(64) as usize;
        let n = geometry.blocks() as usize;
        let info = (0..n)
            .map(|_| BlockInfo {
                state: BlockState::Free,
                erase_count: 0,
                written: 0,
                settled: 0,
                live: 0,
                last_write: 0,
                live_bits: vec![0; words],
            })
            .collect();
        Blocks {
            geometry,
            info,
            free_per_chip: vec![geometry.blocks_per_chip; geometry.chips() as usize],
            good: n as u64,
        }
    }

    pub fn len(&self) -> usize {
        self.info.len()
    }

    pub fn pages_per_block(&self) -> u32 {
        self.geometry.pages_per_block
    }

    pub fn get(&self, block: u32) -> &BlockInfo {
        &self.info[block as usize]
    }

    pub fn get_mut(&mut self, block: u32) -> &mut BlockInfo {
        &mut self.info[block as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &BlockInfo)> {
        self.info.iter().enumerate().map(|(i, b)| (i as u32, b))
    }

    pub fn chip_of(&self, block: u32) -> usize {
        (block / self.geometry.blocks_per_chip) as usize
    }

    pub fn phys(&self, block: u32, page: u32) -> Phys {
        debug_assert!(page < self.pages_per_block() && (block as usize) < self.info.len());
        block * self.pages_per_block() + page
    }

    pub fn split(&self, phys: Phys) -> (u32, u32) {
        let ppb = self.pages_per_block();
        (phys / ppb, phys % ppb)
    }

    pub fn block_addr(&self, block: u32) -> BlockAddr {
        self.geometry.block_at(u64::from(block))
    }

    pub fn free_blocks(&self) -> u64 {
        self.free_per_chip.iter().map(|&n| u64::from(n)).sum()
    }

    pub fn free_on_chip(&self, chip: usize) -> u32 {
        self.free_per_chip[chip]
    }

    /// Moves a block to `state`, keeping the free and good counts.
    pub fn set_state(&mut self, block: u32, state: BlockState) {
        let chip = self.chip_of(block);
        let old = self.info[block as usize].state;
        let good = |s| !matches!(s, BlockState::Bad | BlockState::Retiring);
        if old == BlockState::Free {
            self.free_per_chip[chip] -= 1;
        }
        if state == BlockState::Free {
            let b = &self.info[block as usize];
            assert_eq!(b.live, 0, "block {block} freed with live pages");
            self.free_per_chip[chip] += 1;
        }
        match (good(old), good(state)) {
            (true, false) => self.good -= 1,
            (false, true) => self.good += 1,
            _ => {}
        }
        self.info[block as usize].state = state;
    }

    /// Marks a block erased: free, nothing written, `erase_count` as the
    /// device now reports.
    pub fn mark_erased(&mut self, block: u32, erase_count: u32) {
        {
            let b = &mut self.info[block as usize];
            assert_eq!(b.live, 0, "block {block} erased with live pages");
            b.written = 0;
            b.settled = 0;
            b.erase_count = erase_count;
            b.live_bits.fill(0);
        }
        self.set_state(block, BlockState::Free);
    }

    pub fn is_live(&self, phys: Phys) -> bool {
        let (block, page) = self.split(phys);
        self.info[block as usize].live_bits[(page / 64) as usize] & (1 << (page % 64)) != 0
    }

    /// Records that `phys` holds the current version of some logical page.
    pub fn set_live(&mut self, phys: Phys) {
        let (block, page) = self.split(phys);
        let b = &mut self.info[block as usize];
        let (w, bit) = ((page / 64) as usize, 1u64 << (page % 64));
        assert!(
            b.live_bits[w] & bit == 0,
            "physical page {phys} would map to two logical pages"
        );
        assert!(
            page < b.written,
            "physical page {phys} live above the write pointer"
        );
        b.live_bits[w] |= bit;
        b.live += 1;
        debug_assert!(b.live <= self.geometry.pages_per_block);
    }

    /// Records that `phys` no longer holds a current version.
    pub fn clear_live(&mut self, phys: Phys) {
        let (block, page) = self.split(phys);
        let b = &mut self.info[block as usize];
        let (w, bit) = ((page / 64) as usize, 1u64 << (page % 64));
        assert!(
            b.live_bits[w] & bit != 0,
            "physical page {phys} was not live"
        );
        b.live_bits[w] &= !bit;
        b.live -= 1;
    }

    /// The live pages of a block, in page order.
    pub fn live_pages(&self, block: u32) -> Vec<u32> {
        let b = &self.info[block as usize];
        (0..self.pages_per_block())
            .filter(|&p| b.live_bits[(p / 64) as usize] & (1 << (p % 64)) != 0)
            .collect()
    }

    /// Takes a free block (on `chip`, or any chip), preferring one end of the
    /// wear range, and opens it.
    pub fn take_free(&mut self, chip: Option<usize>, wear: Wear, clock: u64) -> Option<u32> {
        let range = match chip {
            Some(c) => {
                if self.free_per_chip[c] == 0 {
                    return None;
                }
                let per_chip = self.geometry.blocks_per_chip;
                let first = c as u32 * per_chip;
                first..first + per_chip
            }
            None => {
                if self.free_blocks() == 0 {
                    return None;
                }
                0..self.info.len() as u32
            }
        };
        let pick = range
            .filter(|&b| self.info[b as usize].state == BlockState::Free)
            .min_by_key(|&b| {
                let ec = self.info[b as usize].erase_count;
                match wear {
                    Wear::Least => i64::from(ec),
                    Wear::Most => -i64::from(ec),
                }
            })?;
        debug_assert_eq!(self.info[pick as usize].written, 0);
        self.set_state(pick, BlockState::Open);
        self.info[pick as usize].last_write = clock;
        Some(pick)
    }

    /// Blocks that may hold data again (not bad or retiring).
    pub fn good_blocks(&self) -> u64 {
        self.good
    }

    /// Erase counts over good blocks.
    pub fn wear(&self) -> WearRange {
        let (mut min, mut max, mut sum, mut n) = (u32::MAX, 0u32, 0u64, 0u64);
        for b in &self.info {
            if matches!(b.state, BlockState::Bad | BlockState::Retiring) {
                continue;
            }
            min = min.min(b.erase_count);
            max = max.max(b.erase_count);
            sum += u64::from(b.erase_count);
            n += 1;
        }
        if n == 0 {
            return WearRange {
                min: 0,
                max: 0,
                mean: 0.0,
            };
        }
        WearRange {
            min,
            max,
            mean: sum as f64 / n as f64,
        }
    }

    /// The block garbage collection should clean next: a retiring block with
    /// live pages first; otherwise the best sealed block with anything to
    /// gain by `policy`. `None` when no block would free any space.
    pub fn choose_victim(&self, policy: VictimPolicy, now: u64) -> Option<u32> {
        if let Some((i, _)) = self
            .iter()
            .find(|(_, b)| b.state == BlockState::Retiring && b.live > 0)
        {
            return Some(i);
        }
        let ppb = self.pages_per_block();
        let mut best: Option<(u32, f64)> = None;
        for (i, b) in self.iter() {
            if b.state != BlockState::Sealed || b.live >= ppb {
                continue;
            }
            let score = match policy {
                VictimPolicy::Greedy => {
                    // Fewest live pages; among equals, the oldest.
                    -(f64::from(b.live)) - (b.last_write as f64 / (now as f64 + 1.0)) * 0.5
                }
                VictimPolicy::CostBenefit => {
                    let u = f64::from(b.live) / f64::from(ppb);
                    let age = now.saturating_sub(b.last_write) as f64 + 1.0;
                    (1.0 - u) * age / (1.0 + u)
                }
            };
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((i, score));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Static wear leveling: when the erase counts of good blocks spread by
    /// more than `limit`, the sealed block with the fewest erases (cold data
    /// sitting on a young block) is to be moved so the block rejoins the pool.
    pub fn choose_wear_victim(&self, limit: u32) -> Option<u32> {
        let wear = self.wear();
        if wear.max - wear.min <= limit {
            return None;
        }
        self.iter()
            .filter(|(_, b)| b.state == BlockState::Sealed && wear.max - b.erase_count > limit)
            .min_by_key(|(_, b)| (b.erase_count, b.live))
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            buses: 2,
            chips_per_bus: 1,
            blocks_per_chip: 4,
            pages_per_block: 8,
            page_size_bytes: 512,
            oob_size_bytes: 32,
        }
    }

    fn fill(t: &mut Blocks, block: u32, live: u32, last_write: u64) {
        let b = t.get_mut(block);
        b.written = 8;
        b.settled = 8;
        b.last_write = last_write;
        for p in 0..live {
            let phys = t.phys(block, p);
            t.set_live(phys);
        }
    }

    #[test]
    fn allocator_keeps_free_counts_and_prefers_wear_ends() {
        let mut t = Blocks::new(geo());
        assert_eq!(t.free_blocks(), 8);
        for (b, ec) in [(0, 5), (1, 1), (2, 9), (3, 3)] {
            t.get_mut(b).erase_count = ec;
        }
        assert_eq!(t.take_free(Some(0), Wear::Least, 1), Some(1));
        assert_eq!(t.take_free(Some(0), Wear::Most, 1), Some(2));
        assert_eq!(t.free_blocks(), 6);
        assert_eq!(t.free_on_chip(0), 2);
        assert_eq!(t.free_on_chip(1), 4);
        assert_eq!(t.get(1).state, BlockState::Open);
        t.take_free(Some(0), Wear::Least, 1);
        t.take_free(Some(0), Wear::Least, 1);
        assert_eq!(t.take_free(Some(0), Wear::Least, 1), None);
        // Any chip: chip 1 still has blocks.
        let any = t.take_free(None, Wear::Least, 1).unwrap();
        assert_eq!(t.chip_of(any), 1);
        t.set_state(1, BlockState::Sealed);
        t.mark_erased(1, 2);
        assert_eq!(t.get(1).state, BlockState::Free);
        assert_eq!(t.free_on_chip(0), 1);
    }

    #[test]
    fn live_bits_are_counted_and_never_doubled() {
        let mut t = Blocks::new(geo());
        t.get_mut(3).written = 8;
        let p = t.phys(3, 5);
        t.set_live(p);
        assert!(t.is_live(p));
        assert_eq!(t.get(3).live, 1);
        assert_eq!(t.live_pages(3), vec![5]);
        let doubled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut t2 = Blocks::new(geo());
            t2.get_mut(3).written = 8;
            t2.set_live(p);
            t2.set_live(p);
        }));
        assert!(doubled.is_err());
        t.clear_live(p);
        assert_eq!(t.get(3).live, 0);
        assert_eq!(
            page_addr(&geo(), p),
            PageAddr {
                bus: 0,
                chip: 0,
                block: 3,
                page: 5
            }
        );
    }

    #[test]
    fn greedy_takes_fewest_live_cost_benefit_weighs_age() {
        let mut t = Blocks::new(geo());
        // Block 0: 2 live, written long ago. Block 1: 1 live, just written.
        // Block 2: full (nothing to gain). Block 3: free.
        for b in 0..3 {
            t.set_state(b, BlockState::Sealed);
        }
        fill(&mut t, 0, 2, 10);
        fill(&mut t, 1, 1, 990);
        fill(&mut t, 2, 8, 5);
        assert_eq!(t.choose_victim(VictimPolicy::Greedy, 1000), Some(1));
        assert_eq!(t.choose_victim(VictimPolicy::CostBenefit, 1000), Some(0));
        // A retiring block with live pages goes first.
        t.set_state(2, BlockState::Retiring);
        assert_eq!(t.choose_victim(VictimPolicy::Greedy, 1000), Some(2));
        // Nothing to gain anywhere: no victim.
        let mut full = Blocks::new(geo());
        full.set_state(0, BlockState::Sealed);
        fill(&mut full, 0, 8, 1);
        assert_eq!(full.choose_victim(VictimPolicy::CostBenefit, 10), None);
    }

    #[test]
    fn wear_victim_is_the_coldest_sealed_block_past_the_limit() {
        let mut t = Blocks::new(geo());
        for b in 0..8 {
            t.get_mut(b).erase_count = 10;
        }
        t.get_mut(5).erase_count = 1;
        t.get_mut(6).erase_count = 2;
        assert_eq!(t.choose_wear_victim(8), None, "5 and 6 are free");
        t.set_state(5, BlockState::Sealed);
        t.set_state(6, BlockState::Sealed);
        assert_eq!(t.choose_wear_victim(8), Some(5));
        assert_eq!(t.choose_wear_victim(9), None);
        // Bad blocks do not count toward the spread.
        t.set_state(5, BlockState::Bad);
        assert_eq!(t.wear().min, 2);
        assert_eq!(t.good_blocks(), 7);
    }
}
