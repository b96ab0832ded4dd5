//! The space manager: logical pages over the raw device, log-structured.
//!
//! Concurrency. One `std::sync::Mutex` guards all bookkeeping (`State`); it
//! is held only for short, non-blocking updates and never across an await.
//! Device I/O happens outside it:
//! - each chip has an async lock that a user write holds from taking a page of
//!   the chip's open block until its program has finished and its mapping is
//!   committed, so a block's pages are programmed in order, one in flight per
//!   chip (what a real chip does), and every chip runs in parallel;
//! - garbage collection (and wear leveling) runs under one async lock, with
//!   its own open block;
//! - trims and checkpoints share the trim-log lock, so a checkpoint's snapshot
//!   and the switch to a new trim log are one step for trims;
//! - reads take no lock across I/O: they read where the map points and check
//!   the page's OOB identity; a page moved or erased meanwhile fails the check
//!   and the read looks the page up again.
//!
//! Writes, trims, collection and checkpoints run in spawned tasks, so a
//! caller that drops its future never leaves a program half-accounted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use quarry_device::{BackendKind, BlockAddr, Device, DeviceError, Geometry, PageAddr, PageRead};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, OwnedMutexGuard, Semaphore};
use tokio::task::JoinHandle;

use crate::blocks::{page_addr, BlockState, Blocks, Phys, Wear};
use crate::meta::{self, Checkpoint, CkptBlock, CkptEntry, TrimLog, TrimRecord};
use crate::oob::{OobError, OobRecord, OOB_RECORD_BYTES, PIECES_RECORD_BYTES};
use crate::recovery::{self, Candidate, DeviceBlock, Entry};
use crate::{FaultPlan, LogicalPage, VictimPolicy, VolumeConfig, VolumeError};

/// A read retries this many times when the page moved under it.
const MAX_READ_ATTEMPTS: u32 = 8;
/// Most pages one [`SpaceManager::read_run`] or
/// [`SpaceManager::write_run`] call covers (64 MiB of 16 KiB pages): a
/// bound on what one call holds in memory.
pub const MAX_RUN_PAGES: usize = 4096;
/// An uncorrectable page is read this many times before it is taken for
/// damaged (bit errors of a read are independent of the last read's: what a
/// flash controller's read retry exploits).
const UNCORRECTABLE_RETRIES: u32 = 3;
/// A page is tried on this many blocks before its write fails.
const MAX_PROGRAM_ATTEMPTS: u32 = 8;
/// Trims applied to the map per take of the state lock.
const TRIM_APPLY_BATCH: usize = 1024;
/// Pages read at once while scanning at open.
const SCAN_CONCURRENCY: usize = 64;
/// Victims the background task collects before it looks at its other work.
const BACKGROUND_BATCH: u32 = 16;
/// How often the background task looks for work when nobody wakes it.
const BACKGROUND_TICK: Duration = Duration::from_millis(100);
/// The lock file in the data directory.
const LOCK_FILE: &str = "volume.lock";

/// Figures for status reports. Counters (`*_written`, `*_moved`, ...) count
/// from when this manager was opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeStats {
    /// Bytes per page.
    pub page_size: u32,
    /// Physical pages of the device.
    pub device_pages: u64,
    /// The most logical pages the volume holds (see [`VolumeConfig::max_fill`]).
    pub capacity_pages: u64,
    /// Logical pages holding data.
    pub live_pages: u64,
    /// Programmed pages holding superseded or trimmed data, in good blocks.
    pub dead_pages: u64,
    /// Pages ready to be programmed (free blocks and the rest of open blocks).
    pub free_pages: u64,
    /// Erased blocks ready for use.
    pub free_blocks: u64,
    /// Blocks reserved for garbage collection.
    pub reserved_blocks: u64,
    /// Blocks neither bad nor being retired.
    pub good_blocks: u64,
    /// Blocks in the bad-block table (factory or retired).
    pub bad_blocks: u64,
    /// Blocks this manager retired after a failed program or erase.
    pub retired_blocks: u64,
    /// Fewest erases of a good block.
    pub erase_count_min: u32,
    /// Most erases of a good block.
    pub erase_count_max: u32,
    /// Mean erases of good blocks.
    pub erase_count_mean: f64,
    /// Pages written by callers.
    pub user_pages_written: u64,
    /// Live pages moved by garbage collection.
    pub gc_pages_moved: u64,
    /// Live pages moved by wear leveling.
    pub wear_pages_moved: u64,
    /// Pages programmed per page written by callers.
    pub write_amplification: f64,
    /// Blocks cleaned by garbage collection.
    pub gc_blocks_collected: u64,
    /// Blocks whose data wear leveling moved.
    pub wear_blocks_moved: u64,
    /// Blocks erased.
    pub blocks_erased: u64,
    /// Live pages that could not be read back to be moved (still mapped; their
    /// reads fail).
    pub unreadable_pages: u64,
    /// Generation of the last checkpoint.
    pub checkpoint_generation: u64,
    /// Pages read by the scan at open.
    pub pages_scanned_at_open: u64,
    /// Acknowledged versions that recovery could not find (never expected).
    pub pages_lost_at_open: u64,
}

#[derive(Debug, Default, Clone)]
struct Counters {
    user_pages: u64,
    gc_pages: u64,
    wear_pages: u64,
    gc_blocks: u64,
    wear_blocks: u64,
    erases: u64,
    retired: u64,
    unreadable: u64,
    scanned: u64,
    lost: u64,
}

/// A live page read from a block being collected, on its way to a new place.
struct Move {
    rec: OobRecord,
    data: Bytes,
    oob: Bytes,
    old: Phys,
}

/// Why garbage collection moves a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MoveKind {
    Gc,
    Wear,
}

/// Which write stream a block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    User(usize),
    Gc,
}

/// What a user-page allocation on a chip found.
enum Alloc {
    Page(Phys),
    /// This chip has no free block; others may.
    ChipEmpty,
    /// Only the garbage-collection reserve is left.
    NeedGc,
}

/// What [`SpaceManager::write_sectors`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectorsWritten {
    /// The sectors are on the device (durable as [`SpaceManager::write`]
    /// makes a page).
    Written,
    /// The page takes no more sectors here (written anew or trimmed since,
    /// moved by garbage collection, full, its block's next page programmed,
    /// or the volume reopened): nothing was written, and the caller writes
    /// the page again from sector 0 with all of its sectors.
    Closed,
}

struct State {
    /// Ordered by (space, index), so the pages of one space are one range.
    map: BTreeMap<LogicalPage, Entry>,
    blocks: Blocks,
    /// Next sequence number; also the clock of block ages.
    next_seq: u64,
    /// User writes with a sequence number handed out, not yet settled.
    inflight: BTreeSet<u64>,
    /// Map entries with data (not tombstones).
    live: u64,
    /// Writes of new logical pages in flight (counted against capacity).
    pending_new: u64,
    /// The pages of the trim batch being made durable, sorted: a write of one
    /// admitted meanwhile may land after the trim, so it counts as new.
    trimming: Vec<LogicalPage>,
    open_user: Vec<Option<u32>>,
    open_gc: Option<u32>,
    generation: u64,
    changes_since_checkpoint: u64,
    counters: Counters,
}

struct Inner {
    device: Arc<Device>,
    config: VolumeConfig,
    dir: PathBuf,
    geometry: Geometry,
    chips: usize,
    reserve: u64,
    high_watermark: u64,
    state: Mutex<State>,
    chip_locks: Vec<Arc<tokio::sync::Mutex<()>>>,
    gc_lock: tokio::sync::Mutex<()>,
    trim_log: tokio::sync::Mutex<Option<TrimLog>>,
    checkpoint_lock: tokio::sync::Mutex<()>,
    reads: Semaphore,
    round_robin: AtomicUsize,
    closed: AtomicBool,
    wake: Arc<Notify>,
    faults: FaultPlan,
    background: Mutex<Option<JoinHandle<()>>>,
    /// Held while open; released by `close` (or the drop of the last reference).
    lock_file: Mutex<Option<File>>,
}

/// One node's log-structured space manager: it owns the node's device and
/// gives the layers above a logical page space ([`LogicalPage`]) with flash
/// managed underneath. See the [crate documentation](crate).
///
/// All methods take `&self` and may be called from many tasks at once (share
/// it in an `Arc`). Dropping it without [`close`](SpaceManager::close) is
/// what a crash looks like: everything acknowledged is recovered at the next
/// open.
pub struct SpaceManager {
    inner: Arc<Inner>,
}

/// Reads a page, again when the ECC could not correct it.
async fn read_page(device: &Device, addr: PageAddr) -> Result<PageRead, DeviceError> {
    read_page_as(device, addr, false).await.map(|(r, _)| r)
}

/// [`Device::read_page`], tried again while uncorrectable (the `nand`
/// backend's bit errors differ between reads); with `pieces`,
/// [`Device::read_page_pieces`], which reads a page written in pieces as far
/// as it holds and names the sectors that fail.
async fn read_page_as(
    device: &Device,
    addr: PageAddr,
    pieces: bool,
) -> Result<(PageRead, Vec<u32>), DeviceError> {
    let mut attempt = 1;
    loop {
        let read = if pieces {
            device.read_page_pieces(addr).await
        } else {
            device.read_page(addr).await.map(|r| (r, Vec::new()))
        };
        match read {
            Err(DeviceError::Uncorrectable { .. }) if attempt < UNCORRECTABLE_RETRIES => {
                attempt += 1;
            }
            other => return other,
        }
    }
}

fn media_failure(e: &DeviceError) -> bool {
    matches!(
        e,
        DeviceError::Io { .. } | DeviceError::BadBlock { .. } | DeviceError::Uncorrectable { .. }
    )
}

fn out_of_step(e: &DeviceError) -> bool {
    matches!(
        e,
        DeviceError::AlreadyProgrammed { .. } | DeviceError::OutOfOrder { .. }
    )
}

fn injected(what: &str) -> DeviceError {
    DeviceError::Io {
        context: format!("{what} (injected failure)"),
        source: std::io::Error::other("injected by the fault plan"),
    }
}

/// Runs a future on the caller's task and to its end even if the caller
/// stops waiting: a write dropped half-way would leave its page admitted
/// and never landed. Dropped before its end, it hands what is left to a
/// task of its own. Unlike spawning it from the start (what this replaced),
/// a write that is waited for costs no wake-up of another task and of the
/// caller again (measured at 10-20 us a QD1 volume write here).
struct RunToEnd<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    future: Option<Pin<Box<F>>>,
}

impl<F: Future + Send + 'static> RunToEnd<F>
where
    F::Output: Send + 'static,
{
    fn new(future: F) -> Self {
        RunToEnd {
            future: Some(Box::pin(future)),
        }
    }
}

impl<F: Future + Send + 'static> Future for RunToEnd<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Polled again after its end: nothing left to run (a caller's bug,
        // answered by never finishing rather than by a panic).
        let Some(future) = self.future.as_mut() else {
            return Poll::Pending;
        };
        let output = ready!(future.as_mut().poll(cx));
        self.future = None;
        Poll::Ready(output)
    }
}

impl<F: Future + Send + 'static> Drop for RunToEnd<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let Some(future) = self.future.take() {
            // Without a runtime (it is shutting down) nothing can run it;
            // the space manager's recovery then sees a write that never
            // landed, as after a crash.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(future);
            }
        }
    }
}

async fn join<T>(handle: JoinHandle<T>) -> T {
    match handle.await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("space manager task cancelled: {e}"),
    }
}

impl State {
    fn current(&self, id: &LogicalPage) -> Option<(u64, Phys)> {
        self.map.get(id).and_then(|e| e.phys.map(|p| (e.seq, p)))
    }

    /// Takes the next page of the chip's open block, opening a new one when
    /// needed and allowed.
    fn alloc_user(&mut self, chip: usize, reserve: u64) -> Alloc {
        let ppb = self.blocks.pages_per_block();
        if let Some(b) = self.open_user[chip] {
            let info = self.blocks.get(b);
            if info.written < ppb {
                return Alloc::Page(self.take_pages(b, 1));
            }
            debug_assert_eq!(info.settled, ppb);
            self.blocks.set_state(b, BlockState::Sealed);
            self.open_user[chip] = None;
        }
        if self.blocks.free_blocks() <= reserve {
            return Alloc::NeedGc;
        }
        match self
            .blocks
            .take_free(Some(chip), Wear::Least, self.next_seq)
        {
            Some(b) => {
                self.open_user[chip] = Some(b);
                Alloc::Page(self.take_pages(b, 1))
            }
            None => Alloc::ChipEmpty,
        }
    }

    /// Takes the next page of garbage collection's open block; it may use
    /// the reserve down to the last free block.
    fn alloc_gc(&mut self) -> Option<Phys> {
        let block = self.gc_block()?;
        Some(self.take_pages(block, 1))
    }

    /// Garbage collection's open block, with room: a full one is sealed and
    /// the most worn free block opened in its place. `None` when no block
    /// is free.
    fn gc_block(&mut self) -> Option<u32> {
        let ppb = self.blocks.pages_per_block();
        if let Some(b) = self.open_gc {
            if self.blocks.get(b).written < ppb {
                return Some(b);
            }
            self.blocks.set_state(b, BlockState::Sealed);
            self.open_gc = None;
        }
        let b = self.blocks.take_free(None, Wear::Most, self.next_seq)?;
        self.open_gc = Some(b);
        Some(b)
    }

    /// Takes the next `pages` pages of the open `block` for one program.
    fn take_pages(&mut self, block: u32, pages: u32) -> Phys {
        let clock = self.next_seq;
        let ppb = self.blocks.pages_per_block();
        let info = self.blocks.get_mut(block);
        assert_eq!(info.state, BlockState::Open);
        assert_eq!(
            info.settled, info.written,
            "one program in flight per block"
        );
        assert!(info.written + pages <= ppb, "pages past the block's end");
        let page = info.written;
        info.written += pages;
        info.last_write = clock;
        self.blocks.phys(block, page)
    }

    /// The program of `phys` finished (its outcome is about to be committed).
    fn settle(&mut self, phys: Phys) {
        let (block, page) = self.blocks.split(phys);
        let info = self.blocks.get_mut(block);
        assert_eq!(info.settled, page, "pages settle in order");
        assert!(page < info.written);
        info.settled = page + 1;
    }

    /// A program was refused before the device took it: give its `pages`
    /// pages from `phys` on back.
    fn unallocate(&mut self, phys: Phys, pages: u32) {
        let (block, page) = self.blocks.split(phys);
        let info = self.blocks.get_mut(block);
        assert_eq!(
            info.written,
            page + pages,
            "only the last pages are given back"
        );
        info.written = page;
    }

    /// Takes up to `want` consecutive pages of `chip`'s open block (never a
    /// new block: that is [`alloc_user`](Self::alloc_user)'s to open).
    /// Returns the first page and how many; `None` when the chip has no open
    /// block with room for two.
    fn alloc_user_run(&mut self, chip: usize, want: u32) -> Option<(Phys, u32)> {
        let block = self.open_user[chip]?;
        self.take_run(block, want)
    }

    /// Takes up to `want` consecutive pages of garbage collection's open
    /// block ([`gc_block`](Self::gc_block)). `None` when no block is free,
    /// or the open block has room for one page only.
    fn alloc_gc_run(&mut self, want: u32) -> Option<(Phys, u32)> {
        let block = self.gc_block()?;
        self.take_run(block, want)
    }

    /// A user page's version `seq` is programmed at `page`: settles it, ends
    /// its write and points the map at it.
    fn land_user(&mut self, id: LogicalPage, seq: u64, is_new: bool, page: Phys) {
        self.settle(page);
        self.end_write(seq, is_new);
        self.install(id, seq, page);
        self.counters.user_pages += 1;
        self.changes_since_checkpoint += 1;
    }

    /// A moved page's copy at `page` is programmed: settles it, counts it,
    /// and points the map at it if the page is still the version moved.
    fn land_move(&mut self, m: &Move, page: Phys, kind: MoveKind) {
        self.settle(page);
        match kind {
            MoveKind::Gc => self.counters.gc_pages += 1,
            MoveKind::Wear => self.counters.wear_pages += 1,
        }
        if self.current(&m.rec.page) == Some((m.rec.seq, m.old)) {
            let installed = self.install(m.rec.page, m.rec.seq, page);
            debug_assert!(installed);
        }
    }

    /// Takes up to `want` consecutive pages of the open `block`, at least
    /// two, or none.
    fn take_run(&mut self, block: u32, want: u32) -> Option<(Phys, u32)> {
        let room = self.blocks.pages_per_block() - self.blocks.get(block).written;
        let pages = want.min(room);
        (pages >= 2).then(|| (self.take_pages(block, pages), pages))
    }

    /// A stream's block can take no more pages (failure or mismatch with the
    /// device): close it; `retire` also takes it out of service.
    fn close_stream_block(&mut self, block: u32, stream: Stream, retire: bool) {
        let info = self.blocks.get_mut(block);
        info.settled = info.written;
        let live = info.live;
        match stream {
            Stream::User(chip) => {
                debug_assert_eq!(self.open_user[chip], Some(block));
                self.open_user[chip] = None;
            }
            Stream::Gc => {
                debug_assert_eq!(self.open_gc, Some(block));
                self.open_gc = None;
            }
        }
        match (retire, live) {
            (false, _) => self.blocks.set_state(block, BlockState::Sealed),
            (true, 0) => self.retire(block, BlockState::Bad),
            (true, _) => self.retire(block, BlockState::Retiring),
        }
    }

    /// Takes a block out of service after a failure (`Bad`, or `Retiring`
    /// while it still holds live pages); the capacity follows the good blocks.
    fn retire(&mut self, block: u32, state: BlockState) {
        self.blocks.set_state(block, state);
        self.counters.retired += 1;
    }

    /// Makes `phys` the current version `seq` of `id` unless a newer version
    /// or trim is already there. Returns whether it did.
    fn install(&mut self, id: LogicalPage, seq: u64, phys: Phys) -> bool {
        let old = match self.map.get(&id) {
            Some(e) if e.seq > seq => return false,
            Some(e) => e.phys,
            None => None,
        };
        match old {
            Some(p) => self.blocks.clear_live(p),
            None => self.live += 1,
        }
        self.blocks.set_live(phys);
        self.map.insert(
            id,
            Entry {
                seq,
                phys: Some(phys),
            },
        );
        true
    }

    /// Applies a durable trim of `id` at `seq` unless a newer write is there.
    fn apply_trim(&mut self, id: LogicalPage, seq: u64) {
        match self.map.get(&id) {
            Some(e) if e.seq > seq => return,
            Some(&Entry {
                phys: Some(phys), ..
            }) => {
                self.blocks.clear_live(phys);
                self.live -= 1;
            }
            _ => {}
        }
        self.map.insert(id, Entry { seq, phys: None });
    }

    fn end_write(&mut self, seq: u64, is_new: bool) {
        let removed = self.inflight.remove(&seq);
        debug_assert!(removed);
        if is_new {
            self.pending_new -= 1;
        }
    }

    fn stats(&self, inner: &Inner) -> VolumeStats {
        let g = &inner.geometry;
        let ppb = u64::from(g.pages_per_block);
        let (mut dead, mut free_pages, mut bad) = (0u64, 0u64, 0u64);
        for (_, b) in self.blocks.iter() {
            match b.state {
                BlockState::Free => free_pages += ppb,
                BlockState::Open => {
                    free_pages += ppb - u64::from(b.written);
                    dead += u64::from(b.written - b.live);
                }
                BlockState::Sealed | BlockState::Collecting => {
                    dead += u64::from(b.written - b.live)
                }
                BlockState::Retiring | BlockState::Bad => bad += 1,
            }
        }
        let wear = self.blocks.wear();
        let c = &self.counters;
        let programs = c.user_pages + c.gc_pages + c.wear_pages;
        VolumeStats {
            page_size: g.page_size_bytes,
            device_pages: g.pages(),
            capacity_pages: inner.capacity(&self.blocks),
            live_pages: self.live,
            dead_pages: dead,
            free_pages,
            free_blocks: self.blocks.free_blocks(),
            reserved_blocks: inner.reserve,
            good_blocks: self.blocks.good_blocks(),
            bad_blocks: bad,
            retired_blocks: c.retired,
            erase_count_min: wear.min,
            erase_count_max: wear.max,
            erase_count_mean: wear.mean,
            user_pages_written: c.user_pages,
            gc_pages_moved: c.gc_pages,
            wear_pages_moved: c.wear_pages,
            write_amplification: if c.user_pages == 0 {
                1.0
            } else {
                programs as f64 / c.user_pages as f64
            },
            gc_blocks_collected: c.gc_blocks,
            wear_blocks_moved: c.wear_blocks,
            blocks_erased: c.erases,
            unreadable_pages: c.unreadable,
            checkpoint_generation: self.generation,
            pages_scanned_at_open: c.scanned,
            pages_lost_at_open: c.lost,
        }
    }

    /// The state as a checkpoint of the next generation. Tombstones at or
    /// below the floor are dropped first: the checkpoint covers them.
    fn snapshot(&mut self, geometry: Geometry) -> Checkpoint {
        let floor = self.inflight.first().map_or(self.next_seq, |&s| s) - 1;
        self.map.retain(|_, e| e.phys.is_some() || e.seq > floor);
        self.generation += 1;
        self.changes_since_checkpoint = 0;
        let blocks = self
            .blocks
            .iter()
            .map(|(_, b)| CkptBlock {
                erase_count: b.erase_count,
                scan_from: b.settled,
                last_write: b.last_write,
            })
            .collect();
        let entries = self
            .map
            .iter()
            .map(|(&page, e)| CkptEntry {
                page,
                seq: e.seq,
                phys: e.phys,
            })
            .collect();
        Checkpoint {
            geometry,
            generation: self.generation,
            next_seq: self.next_seq,
            floor,
            blocks,
            entries,
        }
    }

    /// Checks every invariant that ties the map to the block table.
    fn verify(&self) -> Result<(), String> {
        let mut per_block = vec![0u32; self.blocks.len()];
        let mut live = 0u64;
        for (id, e) in &self.map {
            let Some(p) = e.phys else { continue };
            live += 1;
            if !self.blocks.is_live(p) {
                return Err(format!(
                    "{id} maps to physical page {p}, which is not marked live"
                ));
            }
            let (b, page) = self.blocks.split(p);
            let info = self.blocks.get(b);
            if info.state == BlockState::Free || page >= info.written {
                return Err(format!(
                    "{id} maps to page {page} of block {b} ({:?}, {} written)",
                    info.state, info.written
                ));
            }
            if e.seq >= self.next_seq {
                return Err(format!("{id} has seq {} >= next {}", e.seq, self.next_seq));
            }
            per_block[b as usize] += 1;
        }
        if live != self.live {
            return Err(format!("{live} live entries, counter says {}", self.live));
        }
        let mut free = 0;
        for (i, b) in self.blocks.iter() {
            let bits = self.blocks.live_pages(i).len() as u32;
            // Two entries on one page would show as more entries than bits.
            if bits != b.live || per_block[i as usize] != b.live {
                return Err(format!(
                    "block {i}: {} live by count, {bits} by bitmap, {} by the map",
                    b.live, per_block[i as usize]
                ));
            }
            if b.settled > b.written || b.written > self.blocks.pages_per_block() {
                return Err(format!(
                    "block {i}: settled {} written {}",
                    b.settled, b.written
                ));
            }
            if b.state == BlockState::Free {
                free += 1;
                if b.written != 0 {
                    return Err(format!("free block {i} has {} pages written", b.written));
                }
            }
        }
        let good = self
            .blocks
            .iter()
            .filter(|(_, b)| !matches!(b.state, BlockState::Bad | BlockState::Retiring))
            .count() as u64;
        if good != self.blocks.good_blocks() {
            return Err(format!(
                "{good} good blocks, counter says {}",
                self.blocks.good_blocks()
            ));
        }
        if free != self.blocks.free_blocks() {
            return Err(format!(
                "{free} free blocks, counter says {}",
                self.blocks.free_blocks()
            ));
        }
        for b in self.open_user.iter().flatten().chain(self.open_gc.iter()) {
            if self.blocks.get(*b).state != BlockState::Open {
                return Err(format!("open block {b} is {:?}", self.blocks.get(*b).state));
            }
        }
        Ok(())
    }
}

/// Takes an exclusive lock on the data directory's lock file.
fn lock_dir(dir: &Path) -> Result<File, VolumeError> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| VolumeError::io(format!("opening {}", path.display()), e))?;
    // SAFETY: flock on a descriptor we own, plain integer arguments.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(VolumeError::Locked { path });
        }
        return Err(VolumeError::io(format!("locking {}", path.display()), err));
    }
    Ok(file)
}

/// The checks a geometry must pass; returns (chips, reserve, high watermark).
fn plan(geometry: &Geometry, config: &VolumeConfig) -> Result<(usize, u64, u64), VolumeError> {
    config.validate()?;
    // A page written whole needs its record; one written in pieces, a
    // little more. Every page may be written in pieces (the tables' log
    // is), so a volume asks for the larger.
    if (geometry.oob_size_bytes as usize) < PIECES_RECORD_BYTES {
        return Err(VolumeError::OobTooSmall {
            have: geometry.oob_size_bytes,
            need: PIECES_RECORD_BYTES as u32,
        });
    }
    if geometry.pages() >= u64::from(u32::MAX) {
        return Err(VolumeError::Config {
            reason: format!(
                "the device has {} pages; the space manager addresses at most {} (u32 page \
                 numbers)",
                geometry.pages(),
                u32::MAX - 1
            ),
        });
    }
    let chips = geometry.chips() as usize;
    let blocks = geometry.blocks();
    let reserve = if config.reserve_blocks == 0 {
        (blocks / 128).max(3)
    } else {
        u64::from(config.reserve_blocks)
    };
    let high = if config.gc_high_watermark_blocks == 0 {
        reserve + (chips as u64 / 2).max(2)
    } else {
        u64::from(config.gc_high_watermark_blocks).max(reserve + 1)
    };
    let need = reserve + chips as u64 + 2;
    if blocks < need {
        return Err(VolumeError::Config {
            reason: format!(
                "the device has {blocks} blocks; the space manager needs at least {need} \
                 ({reserve} reserved for garbage collection, one open block per chip for {chips} \
                 chips, one for garbage collection, one for data)"
            ),
        });
    }
    Ok((chips, reserve, high))
}

impl SpaceManager {
    /// Opens the space manager over `device`, keeping its checkpoint and trim
    /// logs in `dir` (created if missing; locked against a second manager).
    /// Recovers the mapping from the last checkpoint, the trim logs and the
    /// OOB records of pages programmed since, then writes a fresh checkpoint.
    /// Needs a tokio runtime.
    pub async fn open(
        device: Arc<Device>,
        config: VolumeConfig,
        dir: &Path,
    ) -> Result<SpaceManager, VolumeError> {
        SpaceManager::open_with_faults(device, config, dir, FaultPlan::new()).await
    }

    /// [`SpaceManager::open`] with failure injection (tests of bad-block handling).
    pub async fn open_with_faults(
        device: Arc<Device>,
        config: VolumeConfig,
        dir: &Path,
        faults: FaultPlan,
    ) -> Result<SpaceManager, VolumeError> {
        let geometry = device.geometry();
        let (chips, reserve, high_watermark) = plan(&geometry, &config)?;
        std::fs::create_dir_all(dir)
            .map_err(|e| VolumeError::io(format!("creating {}", dir.display()), e))?;
        let lock_file = lock_dir(dir)?;
        let state = recover(&device, dir, chips).await?;
        let generation = state.generation;
        let inner = Arc::new(Inner {
            chip_locks: (0..chips)
                .map(|_| Arc::new(tokio::sync::Mutex::new(())))
                .collect(),
            device,
            reads: Semaphore::new(config.max_inflight_reads as usize),
            config,
            dir: dir.to_path_buf(),
            geometry,
            chips,
            reserve,
            high_watermark,
            state: Mutex::new(state),
            gc_lock: tokio::sync::Mutex::new(()),
            trim_log: tokio::sync::Mutex::new(Some(TrimLog::open(dir, generation)?)),
            checkpoint_lock: tokio::sync::Mutex::new(()),
            round_robin: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            wake: Arc::new(Notify::new()),
            faults,
            background: Mutex::new(None),
            lock_file: Mutex::new(Some(lock_file)),
        });
        {
            let st = inner.lock();
            tracing::info!(
                "space manager open: {} live pages, {} pages scanned, checkpoint generation {}",
                st.live,
                st.counters.scanned,
                generation
            );
        }
        // A fresh checkpoint: the next open scans only what comes after it.
        inner.checkpoint().await?;
        if inner.config.background {
            let weak = Arc::downgrade(&inner);
            let handle = tokio::spawn(background(weak, Arc::clone(&inner.wake)));
            *inner.background.lock().expect("background lock") = Some(handle);
        }
        Ok(SpaceManager { inner })
    }

    /// Bytes per page: every write is exactly this long.
    pub fn page_size(&self) -> usize {
        self.inner.geometry.page_size_bytes as usize
    }

    /// The device's geometry.
    pub fn geometry(&self) -> Geometry {
        self.inner.geometry
    }

    /// The most logical pages the volume holds.
    pub fn capacity_pages(&self) -> u64 {
        self.inner.capacity(&self.inner.lock().blocks)
    }

    /// Bytes of tag a page's spare area has room for beside its record
    /// (the geometry's OOB size less [`OOB_RECORD_BYTES`]).
    pub fn tag_capacity_bytes(&self) -> usize {
        self.inner.geometry.oob_size_bytes as usize - OOB_RECORD_BYTES
    }

    /// Writes one logical page (exactly [`page_size`](Self::page_size)
    /// bytes). When it returns `Ok`, the page is on the device with its OOB
    /// record and survives a crash; a concurrent write of the same page with
    /// a later sequence number wins. Fails with [`VolumeError::NoSpace`] when
    /// a new page would exceed the capacity (nothing stored is touched).
    pub async fn write(&self, id: LogicalPage, data: Bytes) -> Result<(), VolumeError> {
        self.inner.check_open()?;
        let g = &self.inner.geometry;
        if data.len() != g.page_size_bytes as usize {
            return Err(VolumeError::PageSize {
                expected: g.page_size_bytes,
                got: data.len(),
            });
        }
        let (seq, is_new) = self.inner.admit(id)?;
        let inner = Arc::clone(&self.inner);
        RunToEnd::new(async move {
            let result = inner
                .write_page(id, seq, is_new, data, &[], &mut None)
                .await;
            if result.is_err() {
                inner.lock().end_write(seq, is_new);
            }
            result
        })
        .await
    }

    /// Writes `pages` to the logical pages `first.index`, `first.index + 1`,
    /// ... of `first.space`, in that order, each exactly
    /// [`page_size`](Self::page_size) bytes and durable as
    /// [`write`](Self::write) makes it. The pages go to one chip's open block
    /// one after another while it has room, so they lie on consecutive
    /// physical pages and [`read_run`](Self::read_run) reads them back in
    /// large requests (writes of one run do not spread over chips; different
    /// runs do). The first page is programmed and installed before any
    /// other, so after a crash a run with any page left has its first; the
    /// rest go in batches of consecutive pages, one device request each
    /// (a disk written in large pieces reads back faster), each batch
    /// installed before the next is programmed, so what survives a crash is
    /// a prefix of the run up to the last batch, plus any pages of that
    /// batch that reached the disk. On an error the pages before the failed
    /// program stay written. At most [`MAX_RUN_PAGES`] pages.
    pub async fn write_run(
        &self,
        first: LogicalPage,
        pages: Vec<Bytes>,
    ) -> Result<(), VolumeError> {
        self.write_run_tagged(first, pages, Bytes::new()).await
    }

    /// [`write_run`](Self::write_run) with `tag` kept in the first page's
    /// spare area beside its record, covered by its checksum, and handed
    /// back by [`read_tagged`](Self::read_tagged) and
    /// [`FetchedRun::finish_tagged`] (garbage collection moves it with the
    /// page). At most [`tag_capacity_bytes`](Self::tag_capacity_bytes).
    pub async fn write_run_tagged(
        &self,
        first: LogicalPage,
        pages: Vec<Bytes>,
        tag: Bytes,
    ) -> Result<(), VolumeError> {
        self.inner.check_open()?;
        if tag.len() > self.tag_capacity_bytes() {
            return Err(VolumeError::Config {
                reason: format!(
                    "a page tag of {} bytes (the spare area here has room for {})",
                    tag.len(),
                    self.tag_capacity_bytes()
                ),
            });
        }
        let g = &self.inner.geometry;
        if pages.len() > MAX_RUN_PAGES {
            return Err(VolumeError::Config {
                reason: format!(
                    "a run write of {} pages (at most {MAX_RUN_PAGES} per call)",
                    pages.len()
                ),
            });
        }
        if first.index.checked_add(pages.len() as u64).is_none() {
            return Err(VolumeError::Config {
                reason: format!(
                    "a run of {} pages from {first} passes the last index",
                    pages.len()
                ),
            });
        }
        if let Some(bad) = pages.iter().find(|p| p.len() != g.page_size_bytes as usize) {
            return Err(VolumeError::PageSize {
                expected: g.page_size_bytes,
                got: bad.len(),
            });
        }
        let inner = Arc::clone(&self.inner);
        RunToEnd::new(async move { inner.write_run(first, pages, tag).await }).await
    }

    /// Data bytes of one device sector: what
    /// [`write_sectors`](Self::write_sectors) writes whole.
    pub fn sector_size_bytes(&self) -> usize {
        self.inner.device.sector_size_bytes()
    }

    /// Writes logical page `id` in pieces, `data` (whole sectors of
    /// [`sector_size_bytes`](Self::sector_size_bytes)) from sector
    /// `first_sector` on: NAND's partial-page program through the map.
    /// From sector 0 it writes a new version of the page, as
    /// [`write`](Self::write) does, holding only these sectors (the rest
    /// read as 0xFF); from a later sector it adds the sectors after those
    /// written, on the same physical page, and answers
    /// [`SectorsWritten::Closed`] without writing when the page takes no
    /// more (see there). Either way, `Written` means durable as `write`
    /// makes a page.
    ///
    /// Why: a log of records much smaller than a page (the key-value
    /// store's) writes each record's sectors, not a page a record
    /// (`docs/volume.md`, "Pages written in pieces"). A page written in
    /// pieces reads back with [`read`](Self::read) while every sector holds;
    /// [`read_pieces`](Self::read_pieces) reads one whose last program was
    /// cut short.
    pub async fn write_sectors(
        &self,
        id: LogicalPage,
        first_sector: u32,
        data: Bytes,
    ) -> Result<SectorsWritten, VolumeError> {
        self.inner.check_open()?;
        let sector = self.sector_size_bytes();
        let sectors = self.inner.sectors_per_page();
        let count = data.len() / sector;
        if data.is_empty()
            || !data.len().is_multiple_of(sector)
            || first_sector as usize + count > sectors
        {
            return Err(VolumeError::Config {
                reason: format!(
                    "sectors {first_sector}.. of {id}: {} bytes is not a whole number of \
                     {sector}-byte sectors that fits a page's {sectors}",
                    data.len()
                ),
            });
        }
        let inner = Arc::clone(&self.inner);
        if first_sector == 0 {
            let (seq, is_new) = self.inner.admit(id)?;
            let oob = Bytes::from(OobRecord::spare_area_pieces(
                id,
                seq,
                &data,
                self.inner.geometry.oob_size_bytes as usize,
            ));
            return RunToEnd::new(async move {
                let result = inner
                    .place_page(id, (seq, is_new), (data, oob), true, &mut None)
                    .await;
                if result.is_err() {
                    inner.lock().end_write(seq, is_new);
                }
                result.map(|()| SectorsWritten::Written)
            })
            .await;
        }
        // The page's current version takes the sectors if the device still
        // has it open at that sector; it says so, and keeps the state.
        let Some((_, phys)) = self.inner.lock().current(&id) else {
            return Ok(SectorsWritten::Closed);
        };
        RunToEnd::new(async move {
            inner
                .program_more_sectors(id, phys, first_sector, data)
                .await
        })
        .await
    }

    /// Reads logical page `id` as [`read`](Self::read) does, but a page
    /// written in pieces whose sectors do not all hold (a program cut short
    /// by a crash, or damage) comes back with the numbers of those sectors
    /// rather than as an error; whether they matter is the caller's to
    /// tell (a log with checksummed records can). A page written whole
    /// reads as `read` reads it, with an empty list.
    pub async fn read_pieces(
        &self,
        id: LogicalPage,
    ) -> Result<Option<(Bytes, Vec<u32>)>, VolumeError> {
        self.inner.check_open()?;
        let _permit = self
            .inner
            .reads
            .acquire()
            .await
            .map_err(|_| VolumeError::Closed)?;
        let read = self.inner.read_permitted_as(id, true).await?;
        Ok(read.map(|(page, damaged)| (page.data, damaged)))
    }

    /// Reads one logical page: `None` if it was never written or was trimmed.
    /// The page read back is checked against its OOB record (identity,
    /// version, checksum); a mismatch is an error, never data.
    pub async fn read(&self, id: LogicalPage) -> Result<Option<Bytes>, VolumeError> {
        Ok(self.read_tagged(id).await?.map(|page| page.data))
    }

    /// [`read`](Self::read), with the tag the page was written with (see
    /// [`write_run_tagged`](Self::write_run_tagged)).
    pub async fn read_tagged(&self, id: LogicalPage) -> Result<Option<TaggedPage>, VolumeError> {
        self.inner.check_open()?;
        self.inner.read(id).await
    }

    /// Reads `count` logical pages of `first.space` from `first.index` on
    /// (`None` for a page never written or trimmed), each checked as
    /// [`read`](Self::read) checks it. Pages written together by
    /// [`write_run`](Self::write_run) lie on consecutive physical pages and
    /// come back in a few large device requests rather than one per page:
    /// this is how a sequential scan reads at the disk's sequential rate. At
    /// most [`MAX_RUN_PAGES`] pages per call.
    pub async fn read_run(
        &self,
        first: LogicalPage,
        count: u64,
    ) -> Result<Vec<Option<Bytes>>, VolumeError> {
        self.inner.check_open()?;
        // read_many bounds the count; this bounds the list it is handed.
        if count > MAX_RUN_PAGES as u64 || first.index.checked_add(count).is_none() {
            return Err(VolumeError::Config {
                reason: format!(
                    "a run read of {count} pages from {first} (at most {MAX_RUN_PAGES} per call)"
                ),
            });
        }
        let ids: Vec<LogicalPage> = (0..count)
            .map(|i| LogicalPage::new(first.space, first.index + i))
            .collect();
        self.inner.read_many(&ids).await
    }

    /// [`read_run`](Self::read_run) of any logical pages, in the order
    /// given: whatever of them lies next to each other on the device is read
    /// in one request (a scan's chunks, whose logical pages were handed out
    /// in another order than the object's, still come back in large reads).
    pub async fn read_many(&self, ids: &[LogicalPage]) -> Result<Vec<Option<Bytes>>, VolumeError> {
        self.inner.check_open()?;
        self.inner.read_many(ids).await
    }

    /// [`read_many`](Self::read_many) in two steps: this one looks the pages
    /// up and moves their bytes off the device, [`FetchedRun::finish`]
    /// checks them (and reads again what failed). A streaming reader issues
    /// its next reads between the two, so the disk is not left idle while
    /// the CPU checks what came in. The answer is the pages as they were
    /// when looked up here: writes, trims and garbage collection before
    /// `finish` do not change it.
    pub async fn fetch_many(&self, ids: &[LogicalPage]) -> Result<FetchedRun<'_>, VolumeError> {
        self.inner.check_open()?;
        self.inner.fetch_many(ids).await
    }

    /// [`fetch_many`](Self::fetch_many) for a reader that reads the device
    /// itself (a [`quarry_device::StreamReader`]): where the pages are now,
    /// as the device reads that cover them. The reader reads each
    /// ([`LocatedRun::device_reads`]) and hands what came back to
    /// [`LocatedRun::fetched`]. Its reads are its own to bound: they take
    /// none of the manager's read permits.
    pub fn locate(&self, ids: &[LogicalPage]) -> Result<LocatedRun, VolumeError> {
        self.inner.check_open()?;
        self.inner.locate(ids)
    }

    /// Declares a logical page dead: its data is dropped, its space reclaimed
    /// by garbage collection. Durable when it returns (logged and synced).
    pub async fn trim(&self, id: LogicalPage) -> Result<(), VolumeError> {
        self.trim_many(vec![id]).await
    }

    /// [`trim`](Self::trim) of many pages with one sync.
    pub async fn trim_many(&self, ids: Vec<LogicalPage>) -> Result<(), VolumeError> {
        self.inner.check_open()?;
        let inner = Arc::clone(&self.inner);
        join(tokio::spawn(async move { inner.trim_many(&ids).await })).await
    }

    /// Writes a checkpoint now (the mapping and block table), so the next
    /// open scans only pages programmed after it.
    pub async fn checkpoint(&self) -> Result<(), VolumeError> {
        self.inner.check_open()?;
        let inner = Arc::clone(&self.inner);
        join(tokio::spawn(async move { inner.checkpoint().await })).await
    }

    /// Collects up to `max_blocks` victims now (one wear-leveling move first
    /// if the erase counts spread too far). Returns the blocks collected.
    pub async fn collect_garbage(&self, max_blocks: u32) -> Result<u32, VolumeError> {
        self.inner.check_open()?;
        let inner = Arc::clone(&self.inner);
        join(tokio::spawn(async move {
            let _gc = inner.gc_lock.lock().await;
            let mut done = u32::from(inner.wear_level_once().await?);
            while done < max_blocks {
                if !inner.collect_one(MoveKind::Gc).await? {
                    break;
                }
                done += 1;
            }
            Ok(done)
        }))
        .await
    }

    /// Current figures.
    pub fn stats(&self) -> VolumeStats {
        self.inner.lock().stats(&self.inner)
    }

    /// Live pages and the pages the volume may hold, as in
    /// [`SpaceManager::stats`], without its walk over every block: what a
    /// writer checks before each write.
    pub fn fill_pages(&self) -> (u64, u64) {
        let st = self.inner.lock();
        (st.live, self.inner.capacity(&st.blocks))
    }

    /// The logical pages of `space` that hold data, in index order. Reads
    /// the space's range of the map only (the map is ordered by space, then
    /// index), under the state lock.
    pub fn pages_in(&self, space: u32) -> Vec<u64> {
        let range = LogicalPage::new(space, 0)..=LogicalPage::new(space, u64::MAX);
        let st = self.inner.lock();
        st.map
            .range(range)
            .filter(|(_, e)| e.phys.is_some())
            .map(|(k, _)| k.index)
            .collect()
    }

    /// Checks the internal invariants (every mapped physical page marked live
    /// exactly once, live counts matching the map, free counts matching the
    /// block table). Walks the whole map: for tests and debugging.
    pub fn verify(&self) -> Result<(), VolumeError> {
        self.inner
            .lock()
            .verify()
            .map_err(|reason| VolumeError::Invariant { reason })
    }

    /// Stops background work, waits for writes in flight, writes a final
    /// checkpoint and closes the device. Later calls fail with
    /// [`VolumeError::Closed`].
    pub async fn close(&self) -> Result<(), VolumeError> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.wake.notify_one();
        let handle = self
            .inner
            .background
            .lock()
            .expect("background lock")
            .take();
        if let Some(h) = handle {
            let _ = h.await;
        }
        let inner = Arc::clone(&self.inner);
        join(tokio::spawn(async move {
            let mut chips = Vec::with_capacity(inner.chip_locks.len());
            for l in &inner.chip_locks {
                chips.push(l.lock().await);
            }
            let gc = inner.gc_lock.lock().await;
            let result = inner.checkpoint().await;
            *inner.trim_log.lock().await = None;
            drop((chips, gc));
            let closed = inner
                .device
                .close()
                .await
                .map_err(|e| VolumeError::device("closing the device", e));
            *inner.lock_file.lock().expect("lock file lock") = None;
            result.and(closed)
        }))
        .await
    }
}

impl Drop for SpaceManager {
    fn drop(&mut self) {
        // The background task holds only a weak reference; it stops at its
        // next wake-up. Nothing else to do: a drop without close is a crash.
        self.inner.wake.notify_one();
    }
}

async fn background(weak: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.closed.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = inner.background_round().await {
            if matches!(e, VolumeError::Closed) {
                return;
            }
            tracing::warn!("space manager background work: {e}");
        }
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        drop(inner);
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(BACKGROUND_TICK) => {}
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("space manager state lock poisoned")
    }

    fn check_open(&self) -> Result<(), VolumeError> {
        if self.closed.load(Ordering::Acquire) {
            Err(VolumeError::Closed)
        } else {
            Ok(())
        }
    }

    /// The most logical pages the volume holds: the good blocks less the
    /// reserve and the open blocks, times `max_fill`.
    fn capacity(&self, blocks: &Blocks) -> u64 {
        let usable = blocks
            .good_blocks()
            .saturating_sub(self.reserve + self.chips as u64 + 1);
        (usable as f64 * f64::from(blocks.pages_per_block()) * self.config.max_fill).floor() as u64
    }

    fn no_space(&self, st: &State, page: LogicalPage) -> VolumeError {
        let capacity = self.capacity(&st.blocks);
        VolumeError::NoSpace {
            page,
            live_pages: st.live,
            pending_pages: st.pending_new,
            capacity_pages: capacity,
            capacity_bytes: capacity * u64::from(self.geometry.page_size_bytes),
            device_pages: self.geometry.pages(),
            page_size: self.geometry.page_size_bytes,
            good_blocks: st.blocks.good_blocks(),
            reserved_blocks: self.reserve,
        }
    }

    /// Hands out a sequence number, counting a new page against capacity.
    fn admit(&self, id: LogicalPage) -> Result<(u64, bool), VolumeError> {
        self.admit_locked(&mut self.lock(), id)
    }

    /// [`admit`](Self::admit) under a lock the caller holds.
    fn admit_locked(&self, st: &mut State, id: LogicalPage) -> Result<(u64, bool), VolumeError> {
        let is_new = st.current(&id).is_none() || st.trimming.binary_search(&id).is_ok();
        if is_new {
            if st.live + st.pending_new >= self.capacity(&st.blocks) {
                return Err(self.no_space(st, id));
            }
            st.pending_new += 1;
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.inflight.insert(seq);
        Ok((seq, is_new))
    }

    /// Programs `data` for `id` at `seq` on some chip and commits it.
    async fn write_page(
        &self,
        id: LogicalPage,
        seq: u64,
        is_new: bool,
        data: Bytes,
        tag: &[u8],
        held: &mut Option<(usize, OwnedMutexGuard<()>)>,
    ) -> Result<(), VolumeError> {
        let oob = Bytes::from(OobRecord::spare_area(
            id,
            seq,
            &data,
            tag,
            self.geometry.oob_size_bytes as usize,
        ));
        self.place_page(id, (seq, is_new), (data, oob), false, held)
            .await
    }

    /// Programs `data` for `id` at `seq` on some chip and commits it: a
    /// whole page, or with `pieces` the first sectors of one
    /// ([`SpaceManager::write_sectors`]), which then takes more.
    async fn place_page(
        &self,
        id: LogicalPage,
        (seq, is_new): (u64, bool),
        (data, oob): (Bytes, Bytes),
        pieces: bool,
        held: &mut Option<(usize, OwnedMutexGuard<()>)>,
    ) -> Result<(), VolumeError> {
        let mut gc_steps = 0u32;
        let mut failures = 0u32;
        loop {
            // The chip the caller holds first, so a run's pages follow one
            // another in its open block.
            let on_held = held.take().and_then(|(chip, guard)| {
                match self.lock().alloc_user(chip, self.reserve) {
                    Alloc::Page(p) => Some((chip, guard, p)),
                    Alloc::ChipEmpty | Alloc::NeedGc => None,
                }
            });
            let taken = match on_held {
                Some(t) => Some(t),
                None => self.user_page().await,
            };
            let Some((chip, guard, phys)) = taken else {
                if !self.make_room(&mut gc_steps).await? {
                    return Err(self.no_space(&self.lock(), id));
                }
                continue;
            };
            let programmed = if pieces {
                self.program_first_sectors(phys, &data, &oob).await
            } else {
                self.program(phys, data.clone(), oob.clone()).await
            };
            match programmed {
                Ok(()) => {
                    let wake = {
                        let mut st = self.lock();
                        st.land_user(id, seq, is_new, phys);
                        self.wants_background(&st)
                    };
                    *held = Some((chip, guard));
                    if wake {
                        self.wake.notify_one();
                    }
                    return Ok(());
                }
                Err(e) => {
                    let last = e.to_string();
                    self.program_failed(phys, 1, Stream::User(chip), e).await?;
                    drop(guard);
                    failures += 1;
                    if failures >= MAX_PROGRAM_ATTEMPTS {
                        return Err(VolumeError::ProgramFailed {
                            page: id,
                            attempts: failures,
                            last,
                        });
                    }
                }
            }
        }
    }

    /// Writes `pages` to consecutive logical pages from `first`, in order,
    /// on one chip while it has room (the chip `first`'s stretch of logical
    /// pages names). The first page, with `tag`, is programmed and installed
    /// before any other: whenever a page of the run is mapped, so is the
    /// first (the store's scan at open relies on it). The rest go in batches
    /// of consecutive pages of the chip's open block, one device request
    /// each, every batch installed before the next is programmed.
    async fn write_run(
        &self,
        first: LogicalPage,
        pages: Vec<Bytes>,
        tag: Bytes,
    ) -> Result<(), VolumeError> {
        // Runs that start in the same block-sized stretch of logical pages go
        // to the same chip, one after another in the order they come: runs
        // written in sequence (the chunks of one object) then lie next to
        // each other on the device too, and a scan reads across them in
        // block-sized requests. Different stretches go to different chips.
        let stretch = first.index / u64::from(self.geometry.pages_per_block);
        let chip = (stretch % self.chips as u64) as usize;
        let guard = Arc::clone(&self.chip_locks[chip]).lock_owned().await;
        let mut held = Some((chip, guard));
        let mut batch_failures = 0u32;
        let mut next = 0usize;
        while next < pages.len() {
            if next > 0 && batch_failures < MAX_PROGRAM_ATTEMPTS {
                let (written, failed) = self
                    .write_batch(first, next, &pages[next..], &mut held)
                    .await?;
                batch_failures += u32::from(failed);
                if written > 0 || failed {
                    next += written;
                    continue;
                }
            }
            // One page: the first, after a failed batch, or where the chip's
            // open block has no room for a batch (this one opens the next).
            let id = LogicalPage::new(first.space, first.index + next as u64);
            let (seq, is_new) = self.admit(id)?;
            let tag: &[u8] = if next == 0 { &tag } else { &[] };
            let result = self
                .write_page(id, seq, is_new, pages[next].clone(), tag, &mut held)
                .await;
            if result.is_err() {
                self.lock().end_write(seq, is_new);
                return result;
            }
            next += 1;
        }
        Ok(())
    }

    /// Writes the first pages of `pages` (the run's pages from `at` on) as
    /// one batch on the held chip's open block. Returns how many it wrote
    /// (0 when the block has no room for two, or no chip is held) and
    /// whether a program failed in a way that lets the caller go on (the
    /// block was retired or sealed; the pages go elsewhere).
    async fn write_batch(
        &self,
        first: LogicalPage,
        at: usize,
        pages: &[Bytes],
        held: &mut Option<(usize, OwnedMutexGuard<()>)>,
    ) -> Result<(usize, bool), VolumeError> {
        let want = pages.len().min(self.device.max_program_pages() as usize);
        if want < 2 {
            return Ok((0, false));
        }
        let Some((chip, guard)) = held.take() else {
            return Ok((0, false));
        };
        let id = |k: usize| LogicalPage::new(first.space, first.index + (at + k) as u64);
        let Some((phys, admitted)) = self.take_batch(chip, want as u32, id) else {
            // Not a batch: the page goes alone.
            *held = Some((chip, guard));
            return Ok((0, false));
        };
        let count = admitted.len();
        let oob_bytes = self.geometry.oob_size_bytes as usize;
        let run: Vec<(Bytes, Bytes)> = pages[..count]
            .iter()
            .zip(&admitted)
            .enumerate()
            .map(|(k, (data, &(seq, _)))| {
                let oob = OobRecord::spare_area(id(k), seq, data, &[], oob_bytes);
                (data.clone(), Bytes::from(oob))
            })
            .collect();
        match self.program_run(phys, &run).await {
            Ok(()) => {
                let wake = {
                    let mut st = self.lock();
                    for (k, &(seq, is_new)) in admitted.iter().enumerate() {
                        st.land_user(id(k), seq, is_new, phys + k as Phys);
                    }
                    self.wants_background(&st)
                };
                *held = Some((chip, guard));
                if wake {
                    self.wake.notify_one();
                }
                Ok((count, false))
            }
            Err(e) => {
                {
                    let mut st = self.lock();
                    for &(seq, is_new) in &admitted {
                        st.end_write(seq, is_new);
                    }
                }
                self.program_failed(phys, count as u32, Stream::User(chip), e)
                    .await?;
                drop(guard);
                Ok((0, true))
            }
        }
    }

    /// Up to `want` consecutive pages of `chip`'s open block for the pages
    /// `id(0)`, `id(1)`, ..., and their admissions, under one lock: the
    /// first page and each page's sequence number. A page that does not fit
    /// ends the batch and gives back the pages from it on (it then goes
    /// alone, and fails there). `None` when fewer than two are left.
    fn take_batch(
        &self,
        chip: usize,
        want: u32,
        id: impl Fn(usize) -> LogicalPage,
    ) -> Option<(Phys, Vec<(u64, bool)>)> {
        let mut st = self.lock();
        let (phys, count) = st.alloc_user_run(chip, want)?;
        let mut admitted = Vec::with_capacity(count as usize);
        for k in 0..count as usize {
            let Ok(a) = self.admit_locked(&mut st, id(k)) else {
                break;
            };
            admitted.push(a);
        }
        let kept = if admitted.len() < 2 {
            0
        } else {
            admitted.len()
        };
        if kept < count as usize {
            st.unallocate(phys + kept as Phys, count - kept as u32);
            for &(seq, is_new) in &admitted[kept..] {
                st.end_write(seq, is_new);
            }
            admitted.truncate(kept);
        }
        (kept > 0).then_some((phys, admitted))
    }

    /// Whether the background task has work: few free blocks, a block to
    /// retire, or a checkpoint due.
    fn wants_background(&self, st: &State) -> bool {
        self.config.background
            && (st.blocks.free_blocks() < self.high_watermark
                || (self.config.checkpoint_interval_pages > 0
                    && st.changes_since_checkpoint >= self.config.checkpoint_interval_pages))
    }

    /// Picks a chip (round robin, skipping busy and exhausted ones) and takes
    /// a page of its open block. `None`: only the reserve is left.
    async fn user_page(&self) -> Option<(usize, OwnedMutexGuard<()>, Phys)> {
        let start = self.round_robin.fetch_add(1, Ordering::Relaxed);
        let chips = (0..self.chips).map(|k| (start + k) % self.chips);
        for chip in chips.clone() {
            let Ok(guard) = Arc::clone(&self.chip_locks[chip]).try_lock_owned() else {
                continue;
            };
            if let Alloc::Page(p) = self.lock().alloc_user(chip, self.reserve) {
                return Some((chip, guard, p));
            }
        }
        // Every idle chip is out of blocks: wait for a busy one that has room
        // (the idle ones just found none).
        let chip = {
            let st = self.lock();
            let has_room = |c: usize| {
                st.open_user[c]
                    .is_some_and(|b| st.blocks.get(b).written < st.blocks.pages_per_block())
                    || (st.blocks.free_blocks() > self.reserve && st.blocks.free_on_chip(c) > 0)
            };
            chips.into_iter().find(|&c| has_room(c))?
        };
        let guard = Arc::clone(&self.chip_locks[chip]).lock_owned().await;
        match self.lock().alloc_user(chip, self.reserve) {
            Alloc::Page(p) => Some((chip, guard, p)),
            Alloc::ChipEmpty | Alloc::NeedGc => None,
        }
    }

    fn sectors_per_page(&self) -> usize {
        self.device.slot_layout().sectors
    }

    /// Programs the first sectors of a page written in pieces, through the
    /// fault plan.
    async fn program_first_sectors(
        &self,
        phys: Phys,
        data: &Bytes,
        oob: &Bytes,
    ) -> Result<(), DeviceError> {
        let addr = page_addr(&self.geometry, phys);
        if self.faults.program_fails(addr.block_addr()) {
            return Err(injected(&format!("programming page {addr} in pieces")));
        }
        self.device
            .program_sectors(addr, 0, data.clone(), oob.clone())
            .await
    }

    /// Programs more sectors of the page written in pieces at `phys`, the
    /// current version of `id`, from sector `first` on: `Closed` when the
    /// device has the page closed or open at another sector.
    async fn program_more_sectors(
        &self,
        id: LogicalPage,
        phys: Phys,
        first: u32,
        data: Bytes,
    ) -> Result<SectorsWritten, VolumeError> {
        let addr = page_addr(&self.geometry, phys);
        let programmed = if self.faults.program_fails(addr.block_addr()) {
            Err(injected(&format!("programming sectors of page {addr}")))
        } else {
            self.device
                .program_sectors(addr, first, data, Bytes::new())
                .await
        };
        match programmed {
            Ok(()) => Ok(SectorsWritten::Written),
            Err(DeviceError::PageNotOpen { .. }) => Ok(SectorsWritten::Closed),
            Err(DeviceError::Closed) => Err(VolumeError::Closed),
            Err(e) => Err(VolumeError::device(
                format!("programming sectors {first}.. of {id} at {addr}"),
                e,
            )),
        }
    }

    /// Programs one page, through the fault plan.
    async fn program(&self, phys: Phys, data: Bytes, oob: Bytes) -> Result<(), DeviceError> {
        self.program_run(phys, &[(data, oob)]).await
    }

    /// Programs consecutive pages of one block from `phys` on, in one device
    /// call, through the fault plan (which counts it as one program).
    async fn program_run(&self, phys: Phys, pages: &[(Bytes, Bytes)]) -> Result<(), DeviceError> {
        let addr = page_addr(&self.geometry, phys);
        if self.faults.program_fails(addr.block_addr()) {
            return Err(injected(&match pages.len() {
                1 => format!("programming page {addr}"),
                n => format!("programming pages {addr}+{n}"),
            }));
        }
        self.device.program_pages(addr, pages).await
    }

    /// After a failed program of `phys` in `stream`'s open block: a media
    /// failure retires the block (its live pages are moved out later) and
    /// returns `Ok` so the caller tries another block; so does a mismatch
    /// with the device's write pointer (the block is only sealed). Anything
    /// else gives the page back and is the caller's error.
    async fn program_failed(
        &self,
        phys: Phys,
        pages: u32,
        stream: Stream,
        e: DeviceError,
    ) -> Result<(), VolumeError> {
        let block = phys / self.geometry.pages_per_block;
        let addr = page_addr(&self.geometry, phys);
        if media_failure(&e) {
            tracing::warn!(
                "program of {addr} failed ({e}); retiring block {}",
                addr.block_addr()
            );
            self.mark_bad(addr.block_addr()).await;
            self.lock().close_stream_block(block, stream, true);
            self.wake.notify_one();
            return Ok(());
        }
        if out_of_step(&e) {
            tracing::error!(
                "program of {addr} refused ({e}): the block's write pointer disagrees; sealing it"
            );
            self.lock().close_stream_block(block, stream, false);
            return Ok(());
        }
        self.lock().unallocate(phys, pages);
        Err(VolumeError::device(format!("programming page {addr}"), e))
    }

    /// Records a failed block in the device's bad-block table. If that fails
    /// too the block is still out of service here; the error is logged.
    async fn mark_bad(&self, block: BlockAddr) {
        if let Err(e) = self.device.mark_bad(block).await {
            tracing::error!("marking block {block} bad: {e}");
        }
    }

    /// Collects garbage until a user write may take a block. Returns `false`
    /// when no block has anything to reclaim.
    async fn make_room(&self, steps: &mut u32) -> Result<bool, VolumeError> {
        let _gc = self.gc_lock.lock().await;
        if *steps == 0 && self.lock().blocks.free_blocks() >= 2 {
            self.wear_level_once().await?;
        }
        while self.lock().blocks.free_blocks() <= self.reserve {
            if *steps >= self.config.max_inline_gc_steps {
                let st = self.lock();
                return Err(VolumeError::GcStalled {
                    steps: *steps,
                    free_blocks: st.blocks.free_blocks(),
                    reserved_blocks: self.reserve,
                });
            }
            if !self.collect_one(MoveKind::Gc).await? {
                return Ok(false);
            }
            *steps += 1;
        }
        Ok(true)
    }

    /// One static wear-leveling move if the erase counts spread too far.
    /// Caller holds the GC lock.
    async fn wear_level_once(&self) -> Result<bool, VolumeError> {
        let victim = {
            let mut st = self.lock();
            let v = st.blocks.choose_wear_victim(self.config.wear_spread_limit);
            if let Some(v) = v {
                st.blocks.set_state(v, BlockState::Collecting);
            }
            v
        };
        match victim {
            Some(v) => self.collect(v, MoveKind::Wear).await.map(|()| true),
            None => Ok(false),
        }
    }

    /// Collects the best victim. Caller holds the GC lock. `false`: none.
    async fn collect_one(&self, kind: MoveKind) -> Result<bool, VolumeError> {
        let victim = {
            let mut st = self.lock();
            let v = st
                .blocks
                .choose_victim(self.config.victim_policy, st.next_seq);
            if let Some(v) = v {
                if st.blocks.get(v).state == BlockState::Sealed {
                    st.blocks.set_state(v, BlockState::Collecting);
                }
            }
            v
        };
        match victim {
            Some(v) => self.collect(v, kind).await.map(|()| true),
            None => Ok(false),
        }
    }

    /// Moves the live pages of `victim` (state `Collecting` or `Retiring`)
    /// and erases it (or, if retiring, leaves it bad and empty).
    async fn collect(&self, victim: u32, kind: MoveKind) -> Result<(), VolumeError> {
        let result = self.move_out(victim, kind).await;
        if let Err(e) = &result {
            let mut st = self.lock();
            if st.blocks.get(victim).state == BlockState::Collecting {
                st.blocks.set_state(victim, BlockState::Sealed);
            }
            tracing::debug!("collecting block {victim} stopped: {e}");
        }
        result
    }

    /// Erases a victim whose live pages are moved: the device's answer, or
    /// the volume's error when the sync before it failed.
    async fn erase_victim(&self, baddr: BlockAddr) -> Result<Result<(), DeviceError>, VolumeError> {
        // The copies just made, and the newer versions of the victim's
        // dead pages, may still be only in the host's page cache (a device
        // without `sync_writes`): once the victim is erased they are all
        // there is, so they go to the medium first.
        self.device
            .sync()
            .await
            .map_err(|e| VolumeError::device(format!("syncing before erasing {baddr}"), e))?;
        Ok(if self.faults.erase_fails(baddr) {
            Err(injected(&format!("erasing block {baddr}")))
        } else {
            self.device.erase_block(baddr).await
        })
    }

    async fn move_out(&self, victim: u32, kind: MoveKind) -> Result<(), VolumeError> {
        let (pages, baddr, retiring) = {
            let st = self.lock();
            (
                st.blocks.live_pages(victim),
                st.blocks.block_addr(victim),
                st.blocks.get(victim).state == BlockState::Retiring,
            )
        };
        let batch = self.config.gc_batch_pages as usize;
        for chunk in pages.chunks(batch) {
            let olds = chunk
                .iter()
                .map(|&p| victim * self.geometry.pages_per_block + p);
            self.close_pieces(olds).await?;
            let reads = futures::future::join_all(
                chunk
                    .iter()
                    .map(|&p| read_page(&self.device, baddr.page(p))),
            )
            .await;
            let mut moves = Vec::with_capacity(chunk.len());
            for (&p, read) in chunk.iter().zip(reads) {
                let old = victim * self.geometry.pages_per_block + p;
                let checked = match read {
                    Err(DeviceError::Closed) => return Err(VolumeError::Closed),
                    Err(e) => Err(e.to_string()),
                    Ok(r) if r.erased => Err("reads as erased".to_string()),
                    // The record checked is the copy's record: its bytes,
                    // and the tag after it, go along.
                    Ok(r) => self
                        .record_of(&r)
                        .map(|rec| (rec, r.data, r.oob))
                        .map_err(|e| e.to_string()),
                };
                match checked {
                    Ok((rec, data, oob)) => {
                        let current = self.lock().current(&rec.page) == Some((rec.seq, old));
                        if current {
                            moves.push(Move {
                                rec,
                                data,
                                oob,
                                old,
                            });
                        }
                    }
                    Err(why) => {
                        if self.lock().blocks.is_live(old) {
                            tracing::error!(
                                "live page {} cannot be moved: {why}; it stays where it is",
                                baddr.page(p)
                            );
                        }
                    }
                }
            }
            self.move_pages(&moves, kind).await?;
        }
        let left = self.lock().blocks.get(victim).live;
        if left > 0 || retiring {
            // A retiring block ends bad (it was counted when it failed).
            // Unreadable live pages stay mapped (their reads fail loudly)
            // and their block is retired, never erased.
            if !retiring {
                self.mark_bad(baddr).await;
            }
            let mut st = self.lock();
            st.counters.unreadable += u64::from(left);
            if retiring {
                st.blocks.set_state(victim, BlockState::Bad);
            } else {
                st.retire(victim, BlockState::Bad);
            }
            return Ok(());
        }
        let erased = self.erase_victim(baddr).await?;
        match erased {
            Ok(()) => {
                let ec = self
                    .device
                    .erase_count(baddr)
                    .map_err(|e| VolumeError::device(format!("erase count of {baddr}"), e))?;
                let mut st = self.lock();
                st.blocks.mark_erased(victim, ec);
                st.counters.erases += 1;
                match kind {
                    MoveKind::Gc => st.counters.gc_blocks += 1,
                    MoveKind::Wear => st.counters.wear_blocks += 1,
                }
                Ok(())
            }
            Err(e) if media_failure(&e) => {
                tracing::warn!("erase of block {baddr} failed ({e}); retiring it");
                self.mark_bad(baddr).await;
                self.lock().retire(victim, BlockState::Bad);
                Ok(())
            }
            Err(e) => Err(VolumeError::device(format!("erasing block {baddr}"), e)),
        }
    }

    /// Closes the pages written in pieces among `pages` before they are
    /// moved ([`Device::close_sectors`], which waits for a program of more
    /// sectors under way): a copy must hold every sector its page was
    /// acknowledged with, and the page takes no more once copied (its
    /// writer then writes it anew). Past the device's wait the move is
    /// given up (the block stays sealed, and a later collection tries
    /// again).
    async fn close_pieces(&self, pages: impl Iterator<Item = Phys>) -> Result<(), VolumeError> {
        for phys in pages {
            let addr = page_addr(&self.geometry, phys);
            self.device.close_sectors(addr).await.map_err(|e| {
                VolumeError::device(format!("closing page {addr} before it is moved"), e)
            })?;
        }
        Ok(())
    }

    /// Copies live pages into garbage collection's open block in batches of
    /// consecutive pages, one device request each (as a run's pages are
    /// written, so moved data reads back as fast), and points the map at
    /// each copy whose page is still that version. Where the open block has
    /// no room for two, or after [`MAX_PROGRAM_ATTEMPTS`] failed batches, a
    /// page goes alone ([`move_page`](Self::move_page)).
    async fn move_pages(&self, moves: &[Move], kind: MoveKind) -> Result<(), VolumeError> {
        let max = self.device.max_program_pages() as usize;
        let mut failures = 0u32;
        let mut at = 0usize;
        while at < moves.len() {
            let rest = &moves[at..];
            let want = rest.len().min(max);
            let taken = if want >= 2 && failures < MAX_PROGRAM_ATTEMPTS {
                self.lock().alloc_gc_run(want as u32)
            } else {
                None
            };
            let Some((new, count)) = taken else {
                self.move_page(&rest[0], kind).await?;
                at += 1;
                continue;
            };
            let batch = &rest[..count as usize];
            let run: Vec<(Bytes, Bytes)> = batch
                .iter()
                .map(|m| (m.data.clone(), m.oob.clone()))
                .collect();
            match self.program_run(new, &run).await {
                Ok(()) => {
                    let mut st = self.lock();
                    for (k, m) in batch.iter().enumerate() {
                        st.land_move(m, new + k as Phys, kind);
                    }
                    at += batch.len();
                }
                Err(e) => {
                    failures += 1;
                    self.program_failed(new, count, Stream::Gc, e).await?;
                }
            }
        }
        Ok(())
    }

    /// Copies one live page (its data and OOB record as read) into garbage
    /// collection's open block and points the map at the copy (if the page is
    /// still that version).
    async fn move_page(&self, m: &Move, kind: MoveKind) -> Result<(), VolumeError> {
        let mut last = String::new();
        for _ in 0..MAX_PROGRAM_ATTEMPTS {
            let Some(new) = self.lock().alloc_gc() else {
                let st = self.lock();
                return Err(VolumeError::GcStalled {
                    steps: 0,
                    free_blocks: st.blocks.free_blocks(),
                    reserved_blocks: self.reserve,
                });
            };
            match self.program(new, m.data.clone(), m.oob.clone()).await {
                Ok(()) => {
                    self.lock().land_move(m, new, kind);
                    return Ok(());
                }
                Err(e) => {
                    last = e.to_string();
                    self.program_failed(new, 1, Stream::Gc, e).await?;
                }
            }
        }
        Err(VolumeError::ProgramFailed {
            page: m.rec.page,
            attempts: MAX_PROGRAM_ATTEMPTS,
            last,
        })
    }

    async fn read(&self, id: LogicalPage) -> Result<Option<TaggedPage>, VolumeError> {
        let _permit = self
            .reads
            .acquire()
            .await
            .map_err(|_| VolumeError::Closed)?;
        self.read_permitted(id).await
    }

    /// Reads the logical pages `ids`. Pages that lie on consecutive
    /// physical pages (of one block or running on into the next), in
    /// whatever logical order, are read in one device request; the groups are read at once. Each page is checked
    /// against its OOB record as [`read`](Self::read) checks it; a page that
    /// fails the check (moved by garbage collection meanwhile, or damaged) is
    /// read again on its own, which tells the two apart.
    async fn read_many(&self, ids: &[LogicalPage]) -> Result<Vec<Option<Bytes>>, VolumeError> {
        self.fetch_many(ids).await?.finish().await
    }

    /// The I/O of [`read_many`](Self::read_many): looks the pages up and
    /// reads their groups off the device; nothing is checked yet.
    async fn fetch_many(&self, ids: &[LogicalPage]) -> Result<FetchedRun<'_>, VolumeError> {
        let count = ids.len();
        // The permits bound the reads at the device; they go once the bytes
        // are in (what the caller holds after that is its own to bound).
        let permits = u32::try_from(count)
            .unwrap_or(u32::MAX)
            .clamp(1, self.config.max_inflight_reads);
        let _permits = self
            .reads
            .acquire_many(permits)
            .await
            .map_err(|_| VolumeError::Closed)?;
        let located = self.locate(ids)?;
        let reads = futures::future::join_all(
            located
                .device_reads()
                .map(|(first, count)| self.device.fetch_pages(first, count)),
        )
        .await;
        if reads.iter().any(|r| matches!(r, Err(DeviceError::Closed))) {
            return Err(VolumeError::Closed);
        }
        located.fetched_from(self, reads)
    }

    /// Where the pages `ids` are now, grouped into device reads.
    fn locate(&self, ids: &[LogicalPage]) -> Result<LocatedRun, VolumeError> {
        let count = ids.len();
        if count > MAX_RUN_PAGES {
            return Err(VolumeError::Config {
                reason: format!("a read of {count} pages (at most {MAX_RUN_PAGES} per call)"),
            });
        }
        let at: Vec<Option<(u64, Phys)>> = {
            let st = self.lock();
            ids.iter().map(|id| st.current(id)).collect()
        };
        let max = self.device.max_read_pages();
        // Groups of physically consecutive pages, found in physical order:
        // runs written one after another lie next to each other on the
        // device even when their tasks reached the chip in another order
        // than their logical pages. A group may go on into the next block:
        // a chunk that ends a block and begins the next is then one disk
        // request per 2 MiB, not an extra small one at the boundary (a
        // tenth more requests in a scan, which this disk serves slower).
        let mut order: Vec<(Phys, usize)> = at
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.map(|(_, p)| (p, i)))
            .collect();
        order.sort_unstable();
        let mut reads: Vec<(PageAddr, u32)> = Vec::new();
        let mut place = vec![None; count];
        let mut rest = order.as_slice();
        while let Some(&(phys, _)) = rest.first() {
            let mut n = 1u32;
            while (n as usize) < rest.len() && n < max && rest[n as usize].0 == phys + n {
                n += 1;
            }
            let (group, tail) = rest.split_at(n as usize);
            for (i, &(_, j)) in group.iter().enumerate() {
                place[j] = Some((reads.len(), i));
            }
            reads.push((page_addr(&self.geometry, phys), n));
            rest = tail;
        }
        Ok(LocatedRun {
            ids: ids.to_vec(),
            seqs: at.iter().map(|a| a.map(|(seq, _)| seq)).collect(),
            reads,
            place,
        })
    }

    /// The OOB record of a page just read (for a reader, or to move it).
    /// When the device checked the page (data sectors and spare area against
    /// their CRCs), the record's identity is what is left to check: hashing
    /// the data again for the record's checksum would repeat the device's
    /// check, and was a third of a scan's CPU. Otherwise the checksum is
    /// checked too. Recovery's scan at open still checks the checksum: it
    /// decides what a torn page is.
    fn record_of(&self, r: &PageRead) -> Result<OobRecord, OobError> {
        if self.device.checks_reads() {
            OobRecord::decode(&r.oob)
        } else {
            OobRecord::decode_checked(&r.oob, &r.data)
        }
    }

    /// [`read`](Self::read) with the caller holding a read permit.
    async fn read_permitted(&self, id: LogicalPage) -> Result<Option<TaggedPage>, VolumeError> {
        let read = self.read_permitted_as(id, false).await?;
        Ok(read.map(|(page, _)| page))
    }

    /// [`read_permitted`](Self::read_permitted); with `pieces`, a page
    /// written in pieces whose sectors do not all hold comes back with
    /// their numbers ([`SpaceManager::read_pieces`]).
    async fn read_permitted_as(
        &self,
        id: LogicalPage,
        pieces: bool,
    ) -> Result<Option<(TaggedPage, Vec<u32>)>, VolumeError> {
        let mut last: Option<(PageAddr, String)> = None;
        for _ in 0..MAX_READ_ATTEMPTS {
            let Some((seq, phys)) = self.lock().current(&id) else {
                return Ok(None);
            };
            let addr = page_addr(&self.geometry, phys);
            let why = match read_page_as(&self.device, addr, pieces).await {
                Err(DeviceError::Closed) => return Err(VolumeError::Closed),
                Err(e) => e.to_string(),
                Ok((r, _)) if r.erased => "the page reads as erased".to_string(),
                Ok((r, damaged)) => match if damaged.is_empty() {
                    OobRecord::decode_checked(&r.oob, &r.data)
                } else {
                    // The device names the sectors that fail, and the
                    // caller is told them; the checksum over the first
                    // program would only fail again for the same damage.
                    OobRecord::decode(&r.oob)
                } {
                    Ok(rec) if rec.page == id && rec.seq == seq => {
                        return Ok(Some((TaggedPage::of(&rec, r), damaged)))
                    }
                    Ok(rec) => format!(
                        "the page holds {} version {}, not version {seq}",
                        rec.page, rec.seq
                    ),
                    Err(e) => e.to_string(),
                },
            };
            if self.lock().current(&id) == Some((seq, phys)) {
                // The map still points here: the page itself is wrong.
                return Err(VolumeError::Corrupt {
                    page: id,
                    addr,
                    reason: why,
                });
            }
            last = Some((addr, why));
        }
        let (addr, why) = last.expect("at least one attempt");
        Err(VolumeError::Corrupt {
            page: id,
            addr,
            reason: format!("moved {MAX_READ_ATTEMPTS} times while being read; last: {why}"),
        })
    }

    /// Trims are made durable first, then applied: the map never shows a trim
    /// the log does not hold, and a trim whose append fails changes nothing.
    /// Their sequence numbers are taken up front, so a write admitted
    /// meanwhile gets a higher number and wins, one admitted before loses.
    async fn trim_many(&self, ids: &[LogicalPage]) -> Result<(), VolumeError> {
        if ids.is_empty() {
            return Ok(());
        }
        // One batch at a time, and no checkpoint until it is applied: a
        // checkpoint's snapshot and log switch take this lock too.
        let mut log = self.trim_log.lock().await;
        let log = log.as_mut().ok_or(VolumeError::Closed)?;
        let mut pages = ids.to_vec();
        pages.sort_unstable();
        pages.dedup();
        let first = {
            let mut st = self.lock();
            let first = st.next_seq;
            st.next_seq += ids.len() as u64;
            // Until applied, a write of these pages counts as a new page.
            st.trimming = pages;
            first
        };
        let records: Vec<TrimRecord> = ids
            .iter()
            .zip(first..)
            .map(|(&page, seq)| TrimRecord { page, seq })
            .collect();
        // A trim makes data unreachable: the pages it names, and for the
        // layer above what they were replaced by (a log's pages after its
        // snapshot, an object's chunks after its manifest is gone). What
        // was written before it goes to the medium first (a device without
        // `sync_writes` acknowledges from the page cache), or a power loss
        // could keep the trim and lose its reason.
        if let Err(e) = self.device.sync().await {
            self.lock().trimming.clear();
            return Err(VolumeError::device("syncing before a trim", e));
        }
        let appended = log.append(&records, self.faults.trim_append_fails()).await;
        if appended.is_err() {
            self.lock().trimming.clear();
            return appended;
        }
        // Applied in bounded steps so a large batch does not hold the state
        // lock for long.
        let mut chunks = records.chunks(TRIM_APPLY_BATCH).peekable();
        while let Some(chunk) = chunks.next() {
            let mut st = self.lock();
            for r in chunk {
                st.apply_trim(r.page, r.seq);
            }
            st.changes_since_checkpoint += chunk.len() as u64;
            if chunks.peek().is_none() {
                st.trimming.clear();
            }
        }
        Ok(())
    }

    /// Snapshot of the mapping and block table, switch to a new trim log,
    /// then write the checkpoint and drop the logs it covers.
    async fn checkpoint(&self) -> Result<(), VolumeError> {
        let _one = self.checkpoint_lock.lock().await;
        let ckpt = {
            let mut log = self.trim_log.lock().await;
            let ckpt = self.lock().snapshot(self.geometry);
            if log.is_some() {
                *log = Some(TrimLog::open(&self.dir, ckpt.generation)?);
            }
            ckpt
        };
        let generation = ckpt.generation;
        // Every page the checkpoint maps is on the medium before it is
        // saved: recovery reads no OOB record of a page the checkpoint
        // covers, so a mapped page the power took (a device without
        // `sync_writes` acknowledges from the page cache) would read as
        // lost, and the older version it replaced is no longer named.
        self.device
            .sync()
            .await
            .map_err(|e| VolumeError::device("syncing before a checkpoint", e))?;
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || {
            meta::save_checkpoint(&dir, &ckpt)?;
            for (gen, path) in meta::list_trim_logs(&dir)? {
                if gen < ckpt.generation {
                    let _ = std::fs::remove_file(path);
                }
            }
            Ok::<(), VolumeError>(())
        })
        .await
        .map_err(|e| VolumeError::io("writing the checkpoint", std::io::Error::other(e)))??;
        tracing::debug!("checkpoint {generation} written");
        Ok(())
    }

    async fn background_round(&self) -> Result<(), VolumeError> {
        let needs_gc = |st: &State| {
            st.blocks.free_blocks() < self.high_watermark
                || st
                    .blocks
                    .iter()
                    .any(|(_, b)| b.state == BlockState::Retiring && b.live > 0)
        };
        if needs_gc(&self.lock()) {
            let _gc = self.gc_lock.lock().await;
            for _ in 0..BACKGROUND_BATCH {
                if self.closed.load(Ordering::Acquire) || !needs_gc(&self.lock()) {
                    break;
                }
                if !self.collect_one(MoveKind::Gc).await? {
                    break;
                }
            }
        }
        if self.lock().blocks.free_blocks() > self.reserve + 1 {
            let _gc = self.gc_lock.lock().await;
            for _ in 0..BACKGROUND_BATCH {
                if self.closed.load(Ordering::Acquire) || !self.wear_level_once().await? {
                    break;
                }
            }
        }
        let due = {
            let st = self.lock();
            self.config.checkpoint_interval_pages > 0
                && st.changes_since_checkpoint >= self.config.checkpoint_interval_pages
        };
        if due && !self.closed.load(Ordering::Acquire) {
            self.checkpoint().await?;
        }
        Ok(())
    }
}

/// Each block's erase count, write pointer and bad mark, as the device has them.
fn device_blocks(device: &Device) -> Result<Vec<DeviceBlock>, VolumeError> {
    let geometry = device.geometry();
    let mut dev_blocks = Vec::with_capacity(geometry.blocks() as usize);
    for i in 0..geometry.blocks() {
        let addr = geometry.block_at(i);
        let err = |e| VolumeError::device(format!("reading the state of block {addr}"), e);
        dev_blocks.push(DeviceBlock {
            erase_count: device.erase_count(addr).map_err(err)?,
            write_pointer: device.write_pointer(addr).map_err(err)?,
            bad: device.is_bad(addr).map_err(err)?,
        });
    }
    Ok(dev_blocks)
}

/// The OOB records of the pages in `ranges`, read many at a time.
async fn scan_records(
    device: &Device,
    ranges: &[recovery::ScanRange],
) -> Result<Vec<Candidate>, VolumeError> {
    let geometry = device.geometry();
    let ppb = geometry.pages_per_block;
    let pages = ranges
        .iter()
        .flat_map(|r| (r.from..r.to).map(move |p| (r.block, p)));
    let mut reads = futures::stream::iter(pages.map(|(block, page)| async move {
        let addr = geometry.block_at(u64::from(block)).page(page);
        // A page written in pieces whose last program was cut short still
        // holds what came before: it is mapped, and its reader is told which
        // sectors fail (`read_pieces`).
        match read_page_as(device, addr, true).await.map(|(r, _)| r) {
            Ok(r) if r.erased => Ok(None),
            Ok(r) => Ok(OobRecord::decode_checked(&r.oob, &r.data)
                .ok()
                .map(|rec| Candidate {
                    page: rec.page,
                    seq: rec.seq,
                    phys: block * ppb + page,
                })),
            Err(DeviceError::Uncorrectable { .. }) => {
                // A program cut short by the crash: never acknowledged.
                tracing::debug!("recovery: page {addr} is unreadable; skipped");
                Ok(None)
            }
            Err(e) => Err(VolumeError::device(format!("scanning page {addr}"), e)),
        }
    }))
    .buffer_unordered(SCAN_CONCURRENCY);
    // Only pages with a record are kept; the first device error ends the scan.
    let mut candidates = Vec::new();
    while let Some(read) = reads.next().await {
        candidates.extend(read?);
    }
    drop(reads);
    Ok(candidates)
}

/// Rebuilds the state from the checkpoint, the trim logs and the OOB records
/// of pages programmed since.
async fn recover(device: &Device, dir: &Path, chips: usize) -> Result<State, VolumeError> {
    let geometry = device.geometry();
    if device.info().backend == BackendKind::Mem {
        // A mem device starts empty every time: a checkpoint or trim log
        // left in the directory describes pages that no longer exist.
        let _ = std::fs::remove_file(dir.join(meta::CHECKPOINT_FILE));
        for (_, path) in meta::list_trim_logs(dir)? {
            let _ = std::fs::remove_file(path);
        }
    }
    let ckpt = meta::load_checkpoint(dir, &geometry)?;
    let from_gen = ckpt.as_ref().map_or(0, |c| c.generation);
    let trims = meta::load_trim_logs(dir, from_gen)?;
    let dev_blocks = device_blocks(device)?;
    let ranges = recovery::scan_ranges(ckpt.as_ref(), &dev_blocks);
    let ppb = geometry.pages_per_block;
    let scanned: u64 = ranges.iter().map(|r| u64::from(r.to - r.from)).sum();
    let candidates = scan_records(device, &ranges).await?;
    let merged = recovery::merge(ckpt.as_ref(), &dev_blocks, ppb, &trims, &candidates);
    for (page, seq) in &merged.lost {
        tracing::error!(
            "recovery: version {seq} of {page} was in a block erased since the checkpoint and \
             no copy was found"
        );
    }
    let mut newest_in_block: HashMap<u32, u64> = HashMap::new();
    for c in &candidates {
        let b = newest_in_block.entry(c.phys / ppb).or_default();
        *b = (*b).max(c.seq);
    }
    let mut blocks = Blocks::new(geometry);
    for (i, d) in dev_blocks.iter().enumerate() {
        let i = i as u32;
        let info = blocks.get_mut(i);
        info.erase_count = d.erase_count;
        info.written = d.write_pointer;
        info.settled = d.write_pointer;
        info.last_write = match &ckpt {
            Some(c) if recovery::unchanged(Some(c), i as usize, d) => {
                c.blocks[i as usize].last_write
            }
            _ => newest_in_block.get(&i).copied().unwrap_or(merged.next_seq),
        };
        let state = if d.bad {
            BlockState::Bad
        } else if d.write_pointer == 0 {
            BlockState::Free
        } else {
            BlockState::Sealed
        };
        blocks.set_state(i, state);
    }
    for (page, e) in &merged.map {
        let phys = e.phys.expect("merge returns live entries");
        // Scanned pages are distinct, so a page claimed twice comes from a
        // checkpoint that contradicts itself or the scan: an error, not a panic.
        if blocks.is_live(phys) {
            return Err(VolumeError::Metadata {
                path: dir.join(meta::CHECKPOINT_FILE),
                reason: format!(
                    "physical page {phys} is claimed by two logical pages ({page} is one); the \
                     checkpoint does not match the device"
                ),
            });
        }
        blocks.set_live(phys);
    }
    // Bad blocks that still hold live pages: move them out first.
    for i in 0..blocks.len() as u32 {
        if blocks.get(i).state == BlockState::Bad && blocks.get(i).live > 0 {
            blocks.set_state(i, BlockState::Retiring);
        }
    }
    let state = State {
        live: merged.map.len() as u64,
        map: merged.map,
        blocks,
        next_seq: merged.next_seq,
        inflight: BTreeSet::new(),
        pending_new: 0,
        trimming: Vec::new(),
        open_user: vec![None; chips],
        open_gc: None,
        generation: from_gen,
        changes_since_checkpoint: 0,
        counters: Counters {
            scanned,
            lost: merged.lost.len() as u64,
            ..Counters::default()
        },
    };
    state.verify().map_err(|reason| VolumeError::Invariant {
        reason: format!("after recovery: {reason}"),
    })?;
    Ok(state)
}

/// A page read back with the tag it was written with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaggedPage {
    /// The page's bytes.
    pub data: Bytes,
    /// The spare-area bytes after the record, as
    /// [`SpaceManager::write_run_tagged`] was given them and padded with
    /// 0xFF to [`SpaceManager::tag_capacity_bytes`]; all 0xFF for a page
    /// written without a tag, empty for one written before tags existed
    /// or written in pieces.
    pub tag: Bytes,
}

impl TaggedPage {
    /// A page with no tag (for readers that mix logical pages with others).
    pub fn untagged(data: Bytes) -> TaggedPage {
        TaggedPage {
            data,
            tag: Bytes::new(),
        }
    }

    /// The page `r`, whose spare area `rec` was decoded from.
    fn of(rec: &OobRecord, r: PageRead) -> TaggedPage {
        TaggedPage {
            tag: rec.tag_in(&r.oob),
            data: r.data,
        }
    }
}

/// Where a run of logical pages was when looked up
/// ([`SpaceManager::locate`]): their versions, and the device reads that
/// cover the written ones.
pub struct LocatedRun {
    ids: Vec<LogicalPage>,
    /// The version of each page when it was looked up (`None`: not
    /// written).
    seqs: Vec<Option<u64>>,
    /// The device reads: first page, pages.
    reads: Vec<(PageAddr, u32)>,
    /// Where each page of `ids` is: its read and its place there (`None`:
    /// not written).
    place: Vec<Option<(usize, usize)>>,
}

impl LocatedRun {
    /// The device reads (first page, pages) that cover the run's written
    /// pages, in the order [`fetched`](Self::fetched) takes them.
    pub fn device_reads(&self) -> impl Iterator<Item = (PageAddr, u32)> + '_ {
        self.reads.iter().copied()
    }

    /// The run with what each device read fetched (in
    /// [`device_reads`](Self::device_reads) order; a failed read's pages are
    /// read again, one by one, when taken).
    pub fn fetched<'a>(
        self,
        manager: &'a SpaceManager,
        reads: Vec<Result<quarry_device::FetchedPages<'a>, DeviceError>>,
    ) -> Result<FetchedRun<'a>, VolumeError> {
        manager.inner.check_open()?;
        self.fetched_from(&manager.inner, reads)
    }

    fn fetched_from<'a>(
        self,
        inner: &'a Inner,
        reads: Vec<Result<quarry_device::FetchedPages<'a>, DeviceError>>,
    ) -> Result<FetchedRun<'a>, VolumeError> {
        if reads.len() != self.reads.len() {
            return Err(VolumeError::Config {
                reason: format!(
                    "{} device reads for a run located as {}",
                    reads.len(),
                    self.reads.len()
                ),
            });
        }
        Ok(FetchedRun {
            inner,
            located: self,
            reads,
        })
    }
}

/// Pages fetched by [`SpaceManager::fetch_many`] and not yet checked.
#[must_use = "fetched pages are of use only once finished"]
pub struct FetchedRun<'a> {
    inner: &'a Inner,
    /// The pages, their versions and places when they were looked up.
    located: LocatedRun,
    /// What each of `located`'s device reads fetched.
    reads: Vec<Result<quarry_device::FetchedPages<'a>, DeviceError>>,
}

impl FetchedRun<'_> {
    /// How many pages were asked for.
    pub fn len(&self) -> usize {
        self.located.ids.len()
    }

    /// Whether no page was asked for.
    pub fn is_empty(&self) -> bool {
        self.located.ids.is_empty()
    }

    /// Checks every page (the device's check, then its OOB record names the
    /// page at the version looked up) and reads again, one by one, the pages
    /// that failed: what [`SpaceManager::read_many`] answers. The check is
    /// CPU only; the reads again are rare (a page moved by garbage
    /// collection meanwhile, or damaged).
    pub async fn finish(self) -> Result<Vec<Option<Bytes>>, VolumeError> {
        let pages = self.finish_tagged().await?;
        Ok(pages.into_iter().map(|p| p.map(|t| t.data)).collect())
    }

    /// [`finish`](Self::finish) with each page's owner tag.
    pub async fn finish_tagged(mut self) -> Result<Vec<Option<TaggedPage>>, VolumeError> {
        let mut out = Vec::with_capacity(self.len());
        for j in 0..self.len() {
            out.push(self.page(j).await?);
        }
        Ok(out)
    }

    /// Page `j` of the run (in the order the ids were given), checked now as
    /// [`finish_tagged`](Self::finish_tagged) checks it: a caller that uses
    /// each page as soon as it is checked finds its bytes still in the CPU's
    /// cache (a run's megabytes do not fit in one core's cache, a page
    /// does). Each page once; `Ok(None)`: not written when looked up.
    pub async fn page(&mut self, j: usize) -> Result<Option<TaggedPage>, VolumeError> {
        let Some(&seq) = self.located.seqs.get(j) else {
            return Err(VolumeError::Config {
                reason: format!("page {j} of a run of {} pages", self.located.ids.len()),
            });
        };
        let Some(seq) = seq else {
            return Ok(None);
        };
        let id = self.located.ids[j];
        let inner = self.inner;
        let checked = self.located.place[j].and_then(|(g, i)| match &mut self.reads[g] {
            Ok(fetched) => match fetched.check_page(i) {
                Ok(r) if !r.erased => inner
                    .record_of(&r)
                    .ok()
                    .filter(|rec| rec.page == id && rec.seq == seq)
                    .map(|rec| TaggedPage::of(&rec, r)),
                _ => None,
            },
            Err(_) => None,
        });
        if let Some(page) = checked {
            return Ok(Some(page));
        }
        // Moved by garbage collection since the look-up, damaged, or the
        // request failed: read it again on its own.
        inner.read(id).await
    }
}

const _: () = {
    const fn check<T: Send + Sync>() {}
    check::<SpaceManager>();
    check::<VictimPolicy>();
};
