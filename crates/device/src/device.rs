//! The device: NAND rules, per-block state, backends and persistence.

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{oneshot, Notify};

use crate::buf::{AlignedBuf, BufPool, PooledBuf};
use crate::ecc::{Ecc, Header, SlotLayout};
use crate::flush::Flusher;
use crate::io::IoEngine;
use crate::meta::{self, BlockMeta, Snapshot, FLAG_BAD, FLAG_FACTORY_BAD};
use crate::nand::{spin_until, NandOp, NandScheduler, NandTiming, OpKind, SplitMix};
use crate::{
    BackendKind, BlockAddr, DeviceConfig, DeviceError, DeviceInfo, Geometry, PageAddr, PageRead,
    Preset,
};

/// Default bound on operations in flight per device.
pub const DEFAULT_MAX_INFLIGHT: usize = 4096;
/// Free slot buffers kept for reuse: as many as operations in flight, so a
/// 16 MiB request (2048 pages at once) reuses buffers instead of allocating
/// and zeroing fresh ones, which cost 3x the submission time per page.
const POOL_MAX_FREE: usize = DEFAULT_MAX_INFLIGHT;
/// Most bytes of slots one multi-page read ([`Device::read_pages`]) moves:
/// large enough that a sequential scan reads as fast as the disk reads in
/// megabyte requests, small enough that a run's buffer is cheap to keep.
/// Just over 2 MiB, so that 32 slots of a 64 KiB page and its spare area
/// go in one request: a 4 MiB chunk of 64 pages is then 2 requests, not 3
/// (31 + 31 + 2), and this disk's rate follows its count of requests.
pub const MAX_READ_RUN_BYTES: usize = (2 << 20) + (64 << 10);
/// Multi-page read buffers kept free between reads (at most 256 MiB idle):
/// enough for a node's streaming reads in flight and read ahead (8 runs at
/// depth 128 hold up to twice 128 pages each, in buffers of 16-31 pages),
/// so they reuse buffers rather than map and fault in fresh ones for every
/// read. With 64, four 1 GiB scans in a row on a fresh node ran at 1316,
/// 1648, 1852 and 1987 MiB/s; with 128, at 1997-2217 from the first.
///
/// Buffers are 4 MiB now (a read of 32 slots is just over one huge page)
/// and a scan holds only the few its read setting allows (two at 1 x 1),
/// so 64 keep the idle memory at 256 MiB.
const RUN_POOL_MAX_FREE: usize = 64;
/// Seed of the nand model when the configuration gives none.
const DEFAULT_SEED: u64 = 0x005E_ED0F_F1A5;

/// Options beyond [`DeviceConfig`] (programmatic use: tests, benchmarks).
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Timing of the `nand` backend; `None` = the preset's (RFSA by default).
    pub nand_timing: Option<NandTiming>,
    /// Bound on operations in flight; beyond it operations fail with
    /// [`DeviceError::QueueFull`].
    pub max_inflight: usize,
    /// Reads return the stored bytes without the CRC-32C check or any
    /// Reed-Solomon decoding (and without checking the slot's header), so a
    /// corrupt page is returned as data. Only for measuring what the ECC costs
    /// on the read path (`quarry bench device`); never for serving data.
    pub skip_read_check: bool,
    /// Small programs do not fill the pages ahead of them (see
    /// `Device::fill_or_wait`): only for measuring what filling buys
    /// (`quarry bench device`).
    pub skip_fill_ahead: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            nand_timing: None,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            skip_read_check: false,
            skip_fill_ahead: false,
        }
    }
}

/// The geometry a preset implies. Blocks per chip and pages per block are kept
/// small (64 x 64) so an emulated device stays a few GiB of sparse file at
/// most; real chips have thousands of blocks. Override with `geometry`.
pub fn preset_geometry(preset: Preset) -> Geometry {
    match preset {
        // RFSA: 8 buses x 8 chips, 8 KiB MLC pages.
        Preset::Rfsa => Geometry {
            buses: 8,
            chips_per_bus: 8,
            blocks_per_chip: 64,
            pages_per_block: 64,
            page_size_bytes: 8192,
            oob_size_bytes: 64,
        },
        // BlueDBM: 4 buses x 8 Micron SLC chips, 2 KiB pages (its latency
        // figures are for 2048-byte pages).
        Preset::Bluedbm => Geometry {
            buses: 4,
            chips_per_bus: 8,
            blocks_per_chip: 64,
            pages_per_block: 64,
            page_size_bytes: 2048,
            oob_size_bytes: 64,
        },
    }
}

/// Pages in `BlockState::pending` while their program runs; dropping it
/// (the program's future was dropped) takes them off the list.
struct PendingProgram<'a> {
    block: &'a Mutex<BlockState>,
    pages: std::ops::Range<u32>,
}

impl<'a> PendingProgram<'a> {
    /// The program completed: takes the pages off the list and hands back
    /// the block's lock.
    fn finish(&mut self) -> MutexGuard<'a, BlockState> {
        let mut b = lock(self.block);
        let pages = std::mem::take(&mut self.pages);
        b.pending.retain(|p| !pages.contains(p));
        b
    }
}

impl Drop for PendingProgram<'_> {
    fn drop(&mut self) {
        if !self.pages.is_empty() {
            let pages = std::mem::take(&mut self.pages);
            lock(self.block).pending.retain(|p| !pages.contains(p));
        }
    }
}

/// A partial-page program in flight: if its future is dropped before the
/// write ends, the page is taken off the pending list and closed (its
/// sectors' contents are unknown, so none are offered again).
struct SectorProgram<'a> {
    block: &'a Mutex<BlockState>,
    page: u32,
    /// The page's first program (it is on the pending list).
    first: bool,
    done: bool,
}

impl Drop for SectorProgram<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut b = lock(self.block);
        if self.first {
            b.pending.retain(|p| *p != self.page);
        }
        if b.open.as_ref().is_some_and(|o| o.page == self.page) {
            b.open = None;
        }
    }
}

/// Longest [`Device::close_sectors`] waits for a program of sectors in
/// flight.
const CLOSE_SECTORS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Pages a small program fills ahead of itself (see
/// [`Device::fill_or_wait`]): programs of fewer pages than this fill.
const FILL_AHEAD_PAGES: u32 = 32;

/// How far a block's part of the backing file is written through.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct BlockFill {
    /// Pages below this are written through (data or zeros) since the
    /// block was erased or the device opened.
    filled_to: u32,
    /// A program is filling pages ahead of itself; the block's other
    /// programs wait for it.
    running: bool,
}

/// Ends a fill: records how far it got (nothing if the program filling
/// was dropped before it finished) and wakes the programs waiting.
struct FillGuard<'a> {
    dev: &'a Device,
    bi: usize,
    filled_to: Option<u32>,
}

impl Drop for FillGuard<'_> {
    fn drop(&mut self) {
        {
            let mut b = lock(&self.dev.blocks[self.bi]);
            b.fill.running = false;
            if let Some(to) = self.filled_to {
                b.fill.filled_to = b.fill.filled_to.max(to);
            }
        }
        self.dev.filled.notify_waiters();
    }
}

#[derive(Debug, Default)]
struct BlockState {
    /// How far the block's part of the backing file is written through.
    fill: BlockFill,
    erase_count: u32,
    /// Next page the block accepts; pages below it are programmed (or being).
    wp: u32,
    /// Pages whose program is still in flight (read as erased until done).
    pending: Vec<u32>,
    /// The last page programmed, when it was programmed in pieces and has
    /// sectors left ([`Device::program_sectors`]).
    open: Option<OpenPage>,
    bad: bool,
    factory_bad: bool,
    erasing: bool,
    reads: u32,
}

impl BlockState {
    /// Whether the block (`block`) takes a program now: not bad, and no
    /// erase in flight.
    fn programmable(&self, block: BlockAddr) -> Result<(), DeviceError> {
        if self.bad {
            return Err(DeviceError::BadBlock { block });
        }
        if self.erasing {
            return Err(DeviceError::BlockBusy {
                block,
                reason: "an erase is in flight".into(),
            });
        }
        Ok(())
    }
}

/// A page programmed in pieces that takes more sectors: the block's last
/// page, until the block's next page is programmed, the block is erased or
/// the device reopens.
#[derive(Debug)]
struct OpenPage {
    page: u32,
    /// Sectors programmed so far (from sector 0 on).
    sectors: u32,
    /// The slot as programmed so far: a program of more sectors adds their
    /// codes to this spare area and writes it again whole.
    slot: Box<[u8]>,
    /// A program of more sectors is in flight.
    busy: bool,
}

enum Store {
    Mem(Vec<Mutex<Option<Box<[u8]>>>>),
    File {
        file: Arc<File>,
        engine: RwLock<IoEngine>,
    },
    Nand {
        file: Arc<File>,
        sched: RwLock<NandScheduler>,
        timing: NandTiming,
    },
}

/// One node's page device. Cheap to share behind an `Arc`; every method may be
/// called concurrently from many tasks. Needs a tokio runtime (multi- or
/// current-thread) for the file and nand backends.
///
/// **Concurrency rules.** Programs of one block are accepted in page order
/// and may be in flight together; a read of a page whose program has not
/// completed returns the erased page. An erase while a program of the block is
/// in flight fails with [`DeviceError::BlockBusy`]; an erase waits for reads of
/// the block already in flight, and reads arriving during the erase see erased
/// pages.
pub struct Device {
    backend: BackendKind,
    preset: Option<Preset>,
    geometry: Geometry,
    ecc: Ecc,
    blocks: Vec<Mutex<BlockState>>,
    store: Store,
    /// Makes programs durable before they are acknowledged (`sync_writes`).
    flusher: Option<Flusher>,
    /// `fdatasync` calls of the `flush_interval_ms` thread and of `sync`
    /// without a flusher.
    periodic_flushes: Arc<std::sync::atomic::AtomicU64>,
    /// Wakes programs waiting for their block's fill.
    filled: Notify,
    backing_path: Option<PathBuf>,
    meta_path: Option<PathBuf>,
    meta_lock: tokio::sync::Mutex<()>,
    inflight: Arc<AtomicUsize>,
    max_inflight: usize,
    erased_data: Bytes,
    erased_oob: Bytes,
    drained: Notify,
    closed: AtomicBool,
    direct_io: bool,
    /// The backing file is allocated whole: erases keep its blocks.
    allocated: bool,
    skip_read_check: bool,
    skip_fill_ahead: bool,
    pool: Arc<BufPool>,
    /// Buffers of [`Device::max_read_pages`] slots, for multi-page reads.
    run_pool: Arc<BufPool>,
    seed: u64,
    read_seq: AtomicU64,
    rng: Mutex<SplitMix>,
}

/// The slot layout for the configured ECC mode. A CRC-only device made
/// before CRC-only slots dropped the parity room keeps the layout it was
/// made with (its metadata records the slot size), so it opens as before.
fn slot_layout(
    config: &DeviceConfig,
    geometry: &Geometry,
    data_dir: &Path,
) -> Result<SlotLayout, DeviceError> {
    let layout = SlotLayout::for_mode(geometry, config.ecc)?;
    if config.ecc == crate::EccMode::Crc && config.backend != BackendKind::Mem {
        let with_parity = SlotLayout::new(geometry)?;
        let stored = meta::stored_slot_size(&data_dir.join("device.meta"));
        if stored == Some(with_parity.slot_size as u32) && stored != Some(layout.slot_size as u32) {
            return Ok(with_parity);
        }
    }
    Ok(layout)
}

/// Pages one multi-page read may cover: as many slots as fit
/// [`MAX_READ_RUN_BYTES`] with room to align the request
/// ([`aligned_span`]), at least one, at most a block.
fn max_read_pages(geometry: &Geometry, slot_size_bytes: usize) -> u32 {
    let room = MAX_READ_RUN_BYTES - 2 * READ_ALIGN_BYTES;
    let fit = u32::try_from(room / slot_size_bytes.max(1)).unwrap_or(u32::MAX);
    fit.clamp(1, geometry.pages_per_block.max(1))
}

/// What a multi-page read's disk request is aligned to. Slots are 512-byte
/// multiples (a CRC-only 64 KiB slot is 66048 bytes), so a run of them
/// mostly starts and ends inside a 4 KiB page: the virtual disk here served
/// such requests about 5% slower than the same requests aligned
/// (`docs/benchmarks.md`), and a request one page wider costs 0.4% of 2 MiB.
const READ_ALIGN_BYTES: usize = 4096;

/// A disk request covering `len` bytes at `offset`, widened to
/// [`READ_ALIGN_BYTES`] on both sides but not past `end` (the device's last
/// byte: the file may be no longer); `lead` is where the asked bytes start in
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AlignedSpan {
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) lead: usize,
}

/// One disk request readied by [`Device::begin_run_read`]: where it reads,
/// its buffer, and what holds the blocks and the operation count until it
/// is dropped.
pub(crate) struct RunRead<'a> {
    pub(crate) span: AlignedSpan,
    pub(crate) buf: PooledBuf,
    pub(crate) _guard: ReadGuard<'a>,
    pub(crate) _op: OpGuard<'a>,
}

fn aligned_span(offset: u64, len: usize, end: u64) -> AlignedSpan {
    let align = READ_ALIGN_BYTES as u64;
    let start = offset - offset % align;
    let stop = (offset + len as u64).next_multiple_of(align).min(end);
    assert!(
        start <= offset && stop >= offset + len as u64,
        "an aligned read of {len} bytes at {offset} must cover them (device end {end})"
    );
    AlignedSpan {
        offset: start,
        len: (stop - start) as usize,
        lead: (offset - start) as usize,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct OpGuard<'a>(&'a AtomicUsize);
impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Consecutive pages read by [`Device::fetch_pages`] and not yet checked.
/// Their bytes are reachable only through [`check`](Self::check) or
/// [`check_page`](Self::check_page).
#[must_use = "fetched pages are of use only once checked"]
pub struct FetchedPages<'a> {
    dev: &'a Device,
    first: PageAddr,
    count: u32,
    raw: Raw,
}

enum Raw {
    /// One disk request's slots, `lead` bytes in.
    Slots { bytes: Bytes, lead: usize },
    /// Read page by page, each checked as it came; each taken once.
    Checked(Vec<Option<Result<PageRead, DeviceError>>>),
}

impl FetchedPages<'_> {
    /// Pages fetched.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether no page was fetched.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Checks (and corrects) each page as [`Device::read_page`] does; one
    /// page's failure does not fail the others. CPU only: no I/O.
    pub fn check(mut self) -> Vec<Result<PageRead, DeviceError>> {
        (0..self.len()).map(|i| self.check_page(i)).collect()
    }

    /// Checks (and corrects) page `i` of the run alone, as
    /// [`Device::read_page`] does. A caller that uses each page right after
    /// its check finds the page's bytes still in the CPU's cache from it: a
    /// request's megabytes do not fit in one core's cache, one page does.
    /// A page past the run is an error; so is a page asked for twice where
    /// the backend read page by page (it hands each result over once).
    pub fn check_page(&mut self, i: usize) -> Result<PageRead, DeviceError> {
        if i >= self.len() {
            return Err(DeviceError::AddressOutOfRange {
                addr: format!("{}+{i}", self.first),
                field: "page of the read",
                value: i.min(u32::MAX as usize) as u32,
                max: self.count.saturating_sub(1),
                valid: format!("the {} pages the read fetched", self.count),
            });
        }
        match &mut self.raw {
            Raw::Checked(pages) => pages.get_mut(i).and_then(Option::take).unwrap_or_else(|| {
                Err(DeviceError::Uncorrectable {
                    addr: self.first,
                    detail: format!("page {i} of the read was taken already"),
                })
            }),
            Raw::Slots { bytes, lead } => {
                // The run was checked whole before it was read: its pages
                // are on the device.
                let index = self.dev.geometry.page_index(self.first) + i as u64;
                let addr = self.dev.geometry.page_at(index);
                let slot = self.dev.ecc.layout().slot_size;
                let at = *lead + i * slot;
                if at + slot > bytes.len() {
                    return Err(DeviceError::Uncorrectable {
                        addr,
                        detail: format!(
                            "the read's {} bytes end before the page's slot ({at}..{})",
                            bytes.len(),
                            at + slot
                        ),
                    });
                }
                self.dev
                    .check_slot_in(addr, index, bytes.slice(at..at + slot))
            }
        }
    }
}

/// A read in progress on the blocks `blocks` (dense indices): an erase of
/// one of them waits until it is dropped.
pub(crate) struct ReadGuard<'a> {
    dev: &'a Device,
    blocks: std::ops::Range<usize>,
}
impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        for bi in self.blocks.clone() {
            let mut b = lock(&self.dev.blocks[bi]);
            b.reads -= 1;
            if b.erasing && b.reads == 0 {
                self.dev.drained.notify_waiters();
            }
        }
    }
}

fn io_err(context: impl Into<String>, source: io::Error) -> DeviceError {
    DeviceError::Io {
        context: context.into(),
        source,
    }
}

/// The geometry `config` asks for: its own, else its preset's or the
/// default, sized to `capacity_bytes` when that is given.
pub fn geometry_of(config: &DeviceConfig) -> Result<Geometry, DeviceError> {
    let base = config
        .geometry
        .or_else(|| config.preset.map(preset_geometry))
        .unwrap_or_default();
    match (config.capacity_bytes, config.geometry) {
        (None, _) => Ok(base),
        (Some(_), Some(_)) => Err(DeviceError::Config {
            reason: "give the device either a geometry or capacity_bytes, not both".into(),
        }),
        (Some(capacity), None) => Ok(base.with_capacity(capacity)?),
    }
}

/// What [`open_backing`] set up.
struct Backing {
    file: File,
    /// O_DIRECT is in effect.
    direct: bool,
    /// The whole file is allocated: erases keep it so.
    allocated: bool,
}

/// Opens the backing file (creating it at `size`: allocated when
/// `preallocate` and the filesystem can, else sparse), with O_DIRECT when
/// asked and possible.
fn open_backing(
    path: &Path,
    size: u64,
    direct: bool,
    preallocate: bool,
) -> Result<Backing, DeviceError> {
    let ctx = |what: &str| format!("{what} {}", path.display());
    let file = FsOpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_err(ctx("opening"), e))?;
    let md = file.metadata().map_err(|e| io_err(ctx("stat of"), e))?;
    if md.file_type().is_block_device() {
        let len = {
            use std::io::Seek;
            let mut f = &file;
            f.seek(io::SeekFrom::End(0))
                .map_err(|e| io_err(ctx("sizing"), e))?
        };
        if len < size {
            return Err(DeviceError::Config {
                reason: format!(
                    "block device {} has {len} bytes, the geometry needs {size}",
                    path.display()
                ),
            });
        }
    }
    let no_space = |e: io::Error| {
        if e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EFBIG) {
            DeviceError::NoSpace {
                path: path.to_path_buf(),
                source: e,
            }
        } else {
            io_err(ctx("sizing"), e)
        }
    };
    let mut allocated = false;
    if !md.file_type().is_block_device() {
        if preallocate {
            match fallocate(&file, 0, 0, size) {
                Ok(()) => allocated = true,
                Err(e) if unsupported(&e) => {
                    tracing::warn!(
                        "the filesystem of {} cannot allocate files ({e}); the device file \
                         stays sparse",
                        path.display()
                    );
                }
                Err(e) => return Err(no_space(e)),
            }
        }
        if md.len() < size && !allocated {
            file.set_len(size).map_err(no_space)?;
        }
    }
    let plain = |file: File| Backing {
        file,
        direct: false,
        allocated,
    };
    if !direct {
        return Ok(plain(file));
    }
    match FsOpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(dfile) => {
            let mut probe = AlignedBuf::new(4096);
            match dfile.read_at(probe.as_mut_slice(), 0) {
                Ok(_) => Ok(Backing {
                    file: dfile,
                    direct: true,
                    allocated,
                }),
                Err(e) => {
                    tracing::warn!(
                        "O_DIRECT read on {} failed ({e}); using buffered I/O",
                        path.display()
                    );
                    Ok(plain(file))
                }
            }
        }
        Err(e) => {
            tracing::warn!(
                "the filesystem of {} refuses O_DIRECT ({e}); using buffered I/O",
                path.display()
            );
            Ok(plain(file))
        }
    }
}

/// `fallocate(2)` of bytes `offset..offset + len` of `file` in `mode`
/// (0: allocate, growing the file if shorter).
fn fallocate(file: &File, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    let too_big = |_| io::Error::from_raw_os_error(libc::EFBIG);
    let offset = libc::off_t::try_from(offset).map_err(too_big)?;
    let len = libc::off_t::try_from(len).map_err(too_big)?;
    // SAFETY: fallocate on an fd we own with plain integer arguments.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether `e` says the filesystem does not do what was asked (rather than
/// that it failed doing it).
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
    )
}

/// Zeroes bytes `offset..offset + len` of `file` (an erase): when `keep`,
/// by marking them unwritten in place (`FALLOC_FL_ZERO_RANGE`: the blocks
/// stay where they are, so the file stays in long runs), else by punching
/// a hole; writing zeros if the filesystem does neither.
fn punch_or_zero(
    file: &File,
    offset: u64,
    len: u64,
    slot_size: usize,
    keep: bool,
) -> io::Result<()> {
    let modes = [
        keep.then_some(libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE),
        Some(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE),
    ];
    for mode in modes.into_iter().flatten() {
        match fallocate(file, mode, offset, len) {
            Ok(()) => return Ok(()),
            Err(e) => tracing::debug!("fallocate mode {mode:#x} failed ({e})"),
        }
    }
    tracing::debug!("writing zeros instead");
    write_zeros(file, offset, len, slot_size)
}

/// Most zeros [`write_zeros`] writes in one request.
const MAX_ZERO_WRITE_BYTES: usize = 1 << 20;

/// Largest program written on the caller's thread when the backing file is
/// not O_DIRECT (a copy into the page cache of at most this many bytes);
/// larger ones go through the I/O engine, whose worker threads copy them
/// beside the caller.
const INLINE_WRITE_BYTES: usize = 64 << 10;

/// Writes `len` zero bytes at `offset` (both whole slots, so O_DIRECT
/// takes them), a few slots a request.
fn write_zeros(file: &File, offset: u64, len: u64, slot_size: usize) -> io::Result<()> {
    let slots_a_write = (MAX_ZERO_WRITE_BYTES / slot_size).max(1) as u64;
    let slots = len.div_ceil(slot_size as u64).clamp(1, slots_a_write);
    let zeros = AlignedBuf::new(slot_size * slots as usize);
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(zeros.as_slice().len() as u64) as usize;
        file.write_all_at(&zeros.as_slice()[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

impl Device {
    /// Opens (or creates) the device described by `config`, keeping metadata in
    /// `data_dir`.
    pub fn open(config: &DeviceConfig, data_dir: &Path) -> Result<Device, DeviceError> {
        Device::open_with(config, data_dir, OpenOptions::default())
    }

    /// [`Device::open`] with extra options (nand timing, in-flight bound).
    pub fn open_with(
        config: &DeviceConfig,
        data_dir: &Path,
        options: OpenOptions,
    ) -> Result<Device, DeviceError> {
        let geometry = geometry_of(config)?;
        let layout = slot_layout(config, &geometry, data_dir)?;
        if options.max_inflight == 0 {
            return Err(DeviceError::Config {
                reason: "max_inflight must be at least 1".into(),
            });
        }
        let slot = layout.slot_size;
        let total = geometry.pages().checked_mul(slot as u64).ok_or_else(|| {
            DeviceError::InvalidGeometry {
                reason: "device size overflows".into(),
            }
        })?;
        let seed = config.seed.unwrap_or(DEFAULT_SEED);
        let nblocks = geometry.blocks() as usize;
        let inflight = Arc::new(AtomicUsize::new(0));
        let mut blocks: Vec<BlockState> = (0..nblocks).map(|_| BlockState::default()).collect();
        let mut meta_path = None;
        let mut backing_path = None;
        let mut direct_io = false;
        let mut allocated = false;
        let mut flusher = None;
        let periodic_flushes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let ecc = Ecc::with_correction(layout.clone(), config.ecc == crate::EccMode::Rs);

        let store = match config.backend {
            BackendKind::Mem => {
                Store::Mem((0..geometry.pages()).map(|_| Mutex::new(None)).collect())
            }
            BackendKind::File | BackendKind::Nand => {
                std::fs::create_dir_all(data_dir)
                    .map_err(|e| io_err(format!("creating {}", data_dir.display()), e))?;
                let path = config
                    .path
                    .clone()
                    .unwrap_or_else(|| data_dir.join("pages.bin"));
                let mpath = data_dir.join("device.meta");
                let snapshot = meta::load(&mpath, &geometry, slot as u32)?;
                let want_direct =
                    config.backend == BackendKind::File && config.direct_io.unwrap_or(true);
                let backing = open_backing(
                    &path,
                    total,
                    want_direct,
                    config.preallocate.unwrap_or(false),
                )?;
                direct_io = backing.direct;
                allocated = backing.allocated;
                let file = Arc::new(backing.file);
                flusher = flushing(config, &file, &periodic_flushes)?;
                let timing = nand_timing_of(config, &options, &layout)?;
                restore_blocks(
                    snapshot,
                    &path,
                    &geometry,
                    &ecc,
                    timing.as_ref(),
                    seed,
                    &mut blocks,
                )?;
                // Mark dirty until close: write pointers will run ahead of the file.
                meta::save(&mpath, &snapshot_of(&geometry, slot, false, blocks.iter()))?;
                meta_path = Some(mpath);
                backing_path = Some(path);
                start_store(file, timing, &geometry, &inflight, direct_io)?
            }
        };
        Ok(Device {
            backend: config.backend,
            preset: config.preset,
            geometry,
            erased_data: Bytes::from(vec![0xFF; layout.page_size]),
            erased_oob: Bytes::from(vec![0xFF; layout.oob_size]),
            pool: BufPool::new(slot, POOL_MAX_FREE),
            run_pool: BufPool::new_huge(
                slot * max_read_pages(&geometry, slot) as usize + 2 * READ_ALIGN_BYTES,
                RUN_POOL_MAX_FREE,
            ),
            ecc,
            blocks: blocks.into_iter().map(Mutex::new).collect(),
            store,
            flusher,
            periodic_flushes,
            filled: Notify::new(),
            backing_path,
            meta_path,
            meta_lock: tokio::sync::Mutex::new(()),
            inflight,
            max_inflight: options.max_inflight,
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            direct_io,
            allocated,
            skip_read_check: options.skip_read_check,
            skip_fill_ahead: options.skip_fill_ahead,
            seed,
            read_seq: AtomicU64::new(0),
            rng: Mutex::new(SplitMix(seed ^ 0xA5A5_5A5A)),
        })
    }

    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Where pages live in the backing store.
    pub fn slot_layout(&self) -> &SlotLayout {
        self.ecc.layout()
    }

    /// Bytes per page slot in the backing store.
    pub fn slot_size_bytes(&self) -> u64 {
        self.ecc.layout().slot_size as u64
    }

    /// Byte offset of a page's data in the backing file (`file`/`nand`); the
    /// page's slot spans `slot_size_bytes()` from there.
    pub fn page_offset_bytes(&self, addr: PageAddr) -> Result<u64, DeviceError> {
        self.geometry.check_page(addr)?;
        let off = self
            .ecc
            .layout()
            .slot_offset(self.geometry.page_index(addr));
        assert!(off + self.slot_size_bytes() <= self.geometry.pages() * self.slot_size_bytes());
        Ok(off)
    }

    /// The backing file, for `file` and `nand` devices.
    pub fn backing_path(&self) -> Option<&Path> {
        self.backing_path.as_deref()
    }

    /// The modeled timing of a `nand` device.
    pub fn nand_timing(&self) -> Option<&NandTiming> {
        match &self.store {
            Store::Nand { timing, .. } => Some(timing),
            _ => None,
        }
    }

    /// Peak bandwidth of all buses of a `nand` device (buses x per-bus rate),
    /// bytes per second.
    pub fn peak_bus_bandwidth(&self) -> Option<u64> {
        self.nand_timing()
            .map(|t| t.peak_bus_bandwidth(&self.geometry))
    }

    /// Erase count of a block.
    pub fn erase_count(&self, addr: BlockAddr) -> Result<u32, DeviceError> {
        self.geometry.check_block(addr)?;
        Ok(lock(&self.blocks[self.geometry.block_index(addr) as usize]).erase_count)
    }

    /// Whether a block is in the bad-block table.
    pub fn is_bad(&self, addr: BlockAddr) -> Result<bool, DeviceError> {
        self.geometry.check_block(addr)?;
        Ok(lock(&self.blocks[self.geometry.block_index(addr) as usize]).bad)
    }

    /// The next page a block accepts (pages below it are programmed).
    pub fn write_pointer(&self, addr: BlockAddr) -> Result<u32, DeviceError> {
        self.geometry.check_block(addr)?;
        Ok(lock(&self.blocks[self.geometry.block_index(addr) as usize]).wp)
    }

    /// Adds a block to the bad-block table (persisted). Its pages stay
    /// readable; programs and erases are refused.
    pub async fn mark_bad(&self, addr: BlockAddr) -> Result<(), DeviceError> {
        self.check_open()?;
        self.geometry.check_block(addr)?;
        {
            let mut b = lock(&self.blocks[self.geometry.block_index(addr) as usize]);
            if b.bad {
                return Ok(());
            }
            b.bad = true;
        }
        self.persist(false).await
    }

    /// Summary for status reports.
    pub fn info(&self) -> DeviceInfo {
        let mut bad_blocks = Vec::new();
        let (mut min, mut max, mut sum, mut good, mut programmed) =
            (u32::MAX, 0u32, 0u64, 0u64, 0u64);
        for (i, b) in self.blocks.iter().enumerate() {
            let b = lock(b);
            programmed += u64::from(b.wp) - b.pending.len() as u64;
            if b.bad {
                bad_blocks.push(self.geometry.block_at(i as u64));
                continue;
            }
            good += 1;
            min = min.min(b.erase_count);
            max = max.max(b.erase_count);
            sum += u64::from(b.erase_count);
        }
        DeviceInfo {
            backend: self.backend,
            preset: self.preset,
            geometry: self.geometry,
            direct_io: self.direct_io,
            bad_blocks,
            erase_count_min: if good == 0 { 0 } else { min },
            erase_count_max: max,
            erase_count_mean: if good == 0 {
                0.0
            } else {
                sum as f64 / good as f64
            },
            programmed_pages: programmed,
            io_engine: match &self.store {
                Store::Mem(_) => "memory".to_string(),
                Store::File { engine, .. } => engine
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .name
                    .to_string(),
                Store::Nand { .. } => "nand-emulator".to_string(),
            },
        }
    }

    fn check_open(&self) -> Result<(), DeviceError> {
        if self.closed.load(Ordering::Acquire) {
            Err(DeviceError::Closed)
        } else {
            Ok(())
        }
    }

    fn begin_op(&self) -> Result<OpGuard<'_>, DeviceError> {
        self.check_open()?;
        let prev = self.inflight.fetch_add(1, Ordering::AcqRel);
        if prev >= self.max_inflight {
            self.inflight.fetch_sub(1, Ordering::AcqRel);
            return Err(DeviceError::QueueFull {
                limit: self.max_inflight,
            });
        }
        Ok(OpGuard(&self.inflight))
    }

    fn erased(&self) -> PageRead {
        PageRead {
            data: self.erased_data.clone(),
            oob: self.erased_oob.clone(),
            erased: true,
            corrected_bytes: 0,
        }
    }

    fn sample(&self, lo: u64, hi: u64) -> Duration {
        Duration::from_nanos(lock(&self.rng).range(lo, hi))
    }

    /// Runs one op through the nand timing model; returns its modeled end.
    async fn model(
        &self,
        sched: &RwLock<NandScheduler>,
        addr: BlockAddr,
        kind: OpKind,
        chip_time: Duration,
        arrival: Instant,
    ) -> Result<Instant, DeviceError> {
        let (reply, rx) = oneshot::channel();
        let op = NandOp {
            bus: addr.bus,
            chip: addr.chip,
            kind,
            chip_time,
            arrival,
            reply,
        };
        sched.read().unwrap_or_else(|e| e.into_inner()).submit(op)?;
        rx.await.map_err(|_| DeviceError::Closed)
    }

    /// A read slot as the page and spare area it holds, without a copy.
    fn page_read_of(&self, buf: PooledBuf, corrected_bytes: u32) -> PageRead {
        let l = self.ecc.layout();
        let (page, oob_at, oob_len) = (l.page_size, l.oob_offset, l.oob_size);
        let bytes = Bytes::from_owner(buf);
        PageRead {
            data: bytes.slice(0..page),
            oob: bytes.slice(oob_at..oob_at + oob_len),
            erased: false,
            corrected_bytes,
        }
    }

    /// Reads one page; corrects what the ECC can, returns an uncorrectable page as an error.
    pub async fn read_page(&self, addr: PageAddr) -> Result<PageRead, DeviceError> {
        self.read_page_as(addr, false).await.map(|(read, _)| read)
    }

    /// [`read_page`](Self::read_page) for a page programmed in pieces
    /// ([`program_sectors`](Self::program_sectors)): a sector that fails its
    /// check (after correction) does not fail the read; its bytes come back
    /// as read and its index in the list. A program cut short by a crash
    /// leaves such sectors after the ones programmed before it, and a log
    /// whose records carry their own checksums can tell those from damage
    /// to what it had written. Any other page reads as `read_page` reads it
    /// (and the list is empty).
    pub async fn read_page_pieces(
        &self,
        addr: PageAddr,
    ) -> Result<(PageRead, Vec<u32>), DeviceError> {
        self.read_page_as(addr, true).await
    }

    async fn read_page_as(
        &self,
        addr: PageAddr,
        pieces: bool,
    ) -> Result<(PageRead, Vec<u32>), DeviceError> {
        let arrival = Instant::now();
        self.geometry.check_page(addr)?;
        let _op = self.begin_op()?;
        let bi = self.geometry.block_index(addr.block_addr()) as usize;
        let erase_count;
        let programmed = {
            let mut b = lock(&self.blocks[bi]);
            erase_count = b.erase_count;
            let programmed = !b.erasing && addr.page < b.wp && !b.pending.contains(&addr.page);
            if programmed {
                b.reads += 1;
            }
            programmed
        };
        let _read_guard = if programmed {
            Some(ReadGuard {
                dev: self,
                blocks: bi..bi + 1,
            })
        } else {
            None
        };
        let index = self.geometry.page_index(addr);
        let offset = self.ecc.layout().slot_offset(index);
        let mut buf = self.pool.take();
        let (mut buf, deadline) = match &self.store {
            Store::Mem(slots) => {
                if !programmed {
                    return Ok((self.erased(), Vec::new()));
                }
                match lock(&slots[index as usize]).as_deref() {
                    Some(s) => buf.buf_mut().as_mut_slice().copy_from_slice(s),
                    None => buf.buf_mut().as_mut_slice().fill(0),
                }
                (buf, None)
            }
            Store::File { engine, .. } => {
                if !programmed {
                    return Ok((self.erased(), Vec::new()));
                }
                let fut = engine
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .submit_read(offset, buf);
                let (buf, res) = fut.wait().await;
                let buf = buf.ok_or(DeviceError::Closed)?;
                res.map_err(|e| io_err(format!("reading page {addr}"), e))?;
                (buf, None)
            }
            Store::Nand {
                file,
                sched,
                timing,
            } => {
                if programmed {
                    file.read_exact_at(buf.buf_mut().as_mut_slice(), offset)
                        .map_err(|e| io_err(format!("reading page {addr}"), e))?;
                }
                let t_r = self.sample(timing.t_read_min_ns, timing.t_read_max_ns);
                let end = self
                    .model(sched, addr.block_addr(), OpKind::Read, t_r, arrival)
                    .await?;
                if !programmed {
                    spin_until(end);
                    return Ok((self.erased(), Vec::new()));
                }
                self.inject_bit_errors(&mut buf, timing, erase_count, index);
                (buf, Some(end))
            }
        };
        if self.skip_read_check {
            // Benchmark-only path: everything the normal path does except the
            // check, so the difference in throughput is the cost of the ECC.
            let read = self.page_read_of(buf, 0);
            if let Some(end) = deadline {
                spin_until(end);
            }
            return Ok((read, Vec::new()));
        }
        let checked = if pieces {
            self.check_slot_pieces(addr, index, buf.buf_mut().as_mut_slice())
        } else {
            self.check_slot(addr, index, buf.buf_mut().as_mut_slice())
                .map(|corrected_bytes| (corrected_bytes, Vec::new()))
        };
        let result = checked
            .map(|(corrected_bytes, damaged)| (self.page_read_of(buf, corrected_bytes), damaged));
        if let Some(end) = deadline {
            spin_until(end);
        }
        result
    }

    /// Checks (and corrects) the slot of page `addr`, dense index `index`,
    /// just read: the code's verdict, and the header must name this page.
    /// Returns the bytes corrected.
    fn check_slot(&self, addr: PageAddr, index: u64, slot: &mut [u8]) -> Result<u32, DeviceError> {
        match self.ecc.decode(slot) {
            Ok(d) if d.header.page_index != index => Err(DeviceError::Uncorrectable {
                addr,
                detail: format!(
                    "slot holds page #{} (misdirected write?)",
                    d.header.page_index
                ),
            }),
            Ok(d) => Ok(d.corrected_bytes),
            Err(detail) => Err(DeviceError::Uncorrectable { addr, detail }),
        }
    }

    /// [`check_slot`](Self::check_slot) that names the damaged sectors of a
    /// page programmed in pieces instead of failing on them.
    fn check_slot_pieces(
        &self,
        addr: PageAddr,
        index: u64,
        slot: &mut [u8],
    ) -> Result<(u32, Vec<u32>), DeviceError> {
        match self.ecc.decode_pieces(slot) {
            Ok((d, _)) if d.header.page_index != index => Err(DeviceError::Uncorrectable {
                addr,
                detail: format!(
                    "slot holds page #{} (misdirected write?)",
                    d.header.page_index
                ),
            }),
            Ok((d, damaged)) => Ok((d.corrected_bytes, damaged)),
            Err(detail) => Err(DeviceError::Uncorrectable { addr, detail }),
        }
    }

    /// [`read_page`](Self::read_page) of each page, one after another.
    async fn read_each(
        &self,
        pages: impl Iterator<Item = PageAddr>,
    ) -> Vec<Result<PageRead, DeviceError>> {
        let mut out = Vec::new();
        for addr in pages {
            out.push(self.read_page(addr).await);
        }
        out
    }

    /// Whether every read checks the page against its CRCs (data sectors
    /// and spare area) before returning it: always, except on a device
    /// opened with [`OpenOptions::skip_read_check`] (benchmarks of the
    /// check's cost).
    pub fn checks_reads(&self) -> bool {
        !self.skip_read_check
    }

    /// Keeps at most `bytes` of multi-page and page reads at the disk at
    /// once (one read always goes): later reads wait in order, and each
    /// completion starts the next straight from the I/O engine's reaper.
    /// This disk serves one or two large requests at a time faster than
    /// many (`docs/benchmarks.md`). Unbounded until set; the `file`
    /// backend's io_uring engine only (elsewhere it does nothing).
    pub fn set_read_budget_bytes(&self, bytes: usize) {
        if let Store::File { engine, .. } = &self.store {
            engine
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .set_read_budget_bytes(bytes);
        }
    }

    /// The most pages one [`read_pages`](Self::read_pages) covers.
    pub fn max_read_pages(&self) -> u32 {
        max_read_pages(&self.geometry, self.ecc.layout().slot_size)
    }

    /// Reads `count` consecutive pages from `first` on, in the device's page
    /// order ([`Geometry::page_index`]; a run may go on into the blocks that
    /// follow `first`'s, which lie next to it in the backing file): on the
    /// `file` backend in one request to the disk (a sequential reader then
    /// moves megabytes per request, as a disk wants, instead of a page at a
    /// time); elsewhere page by page. Each page is checked and corrected as
    /// [`read_page`](Self::read_page) does, and answered on its own: one
    /// uncorrectable page does not fail the others. The outer error is for
    /// the request as a whole: an address or count out of range (at most
    /// [`max_read_pages`](Self::max_read_pages) pages, none past the
    /// device's last), a full queue, an I/O error, a closed device.
    pub async fn read_pages(
        &self,
        first: PageAddr,
        count: u32,
    ) -> Result<Vec<Result<PageRead, DeviceError>>, DeviceError> {
        Ok(self.fetch_pages(first, count).await?.check())
    }

    /// [`read_pages`](Self::read_pages) in two steps: this one moves the
    /// bytes off the disk, [`FetchedPages::check`] checks (and corrects)
    /// them. A reader that keeps the disk busy issues its next request
    /// between the two, so the CPU the check takes (about as much as the
    /// disk's rate in CRC-32C) does not leave the disk idle; and it may
    /// check on another thread. Nothing of a page is readable before its
    /// check.
    pub async fn fetch_pages(
        &self,
        first: PageAddr,
        count: u32,
    ) -> Result<FetchedPages<'_>, DeviceError> {
        // Only called once the run is checked: the address is valid.
        let pages = || {
            let first_index = self.geometry.page_index(first);
            (first_index..first_index + u64::from(count)).map(move |i| self.geometry.page_at(i))
        };
        let checked = |pages: Vec<Result<PageRead, DeviceError>>| FetchedPages {
            dev: self,
            first,
            count,
            raw: Raw::Checked(pages.into_iter().map(Some).collect()),
        };
        let Store::File { engine, .. } = &self.store else {
            self.check_run(first, count)?;
            // No disk request to save: the emulations time and copy per page
            // (and one chip reads one page at a time).
            return Ok(checked(self.read_each(pages()).await));
        };
        let Some(run) = self.begin_run_read(first, count)? else {
            // Empty, or some page is erased or still being programmed: each
            // page says which on its own.
            return Ok(checked(self.read_each(pages()).await));
        };
        let fut = engine
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .submit_read(run.span.offset, run.buf);
        let (buf, res) = fut.wait().await;
        let buf = buf.ok_or(DeviceError::Closed)?;
        res.map_err(|e| io_err(format!("reading pages {first}+{count}"), e))?;
        Ok(self.fetched_slots(first, count, buf, run.span.lead))
    }

    /// `count` pages from `first` as one request may read them: within the
    /// device and [`max_read_pages`](Self::max_read_pages), the device
    /// open.
    fn check_run(&self, first: PageAddr, count: u32) -> Result<(), DeviceError> {
        self.check_open()?;
        self.geometry.check_page(first)?;
        let max = self.max_read_pages();
        let first_index = self.geometry.page_index(first);
        let pages_total = self.geometry.pages();
        let end_index = first_index + u64::from(count);
        if count > max || end_index > pages_total {
            return Err(DeviceError::AddressOutOfRange {
                addr: format!("{first}+{count}"),
                field: "page",
                value: (end_index.saturating_sub(1)).min(u64::from(u32::MAX)) as u32,
                max: (pages_total - 1).min(u64::from(u32::MAX)) as u32,
                valid: format!(
                    "at most {max} consecutive pages per read, none past the device's \
                     {pages_total} pages"
                ),
            });
        }
        Ok(())
    }

    /// Readies one disk request for `count` pages from `first` (checked as
    /// [`check_run`](Self::check_run)): counted as an operation, every page
    /// programmed and each block counting the read (an erase waits for it
    /// until the answer is dropped), a buffer for it. `None` when the run is
    /// empty or a page is erased or still being programmed: such a run is
    /// read page by page.
    pub(crate) fn begin_run_read(
        &self,
        first: PageAddr,
        count: u32,
    ) -> Result<Option<RunRead<'_>>, DeviceError> {
        self.check_run(first, count)?;
        if count == 0 {
            return Ok(None);
        }
        let op = self.begin_op()?;
        let ppb = u64::from(self.geometry.pages_per_block);
        let first_index = self.geometry.page_index(first);
        let end_index = first_index + u64::from(count);
        // Every block the run touches must have all of its pages of the run
        // programmed; each counts the read, so an erase waits for it.
        let first_block = (first_index / ppb) as usize;
        let last_block = ((end_index - 1) / ppb) as usize;
        let mut guard = ReadGuard {
            dev: self,
            blocks: first_block..first_block,
        };
        for bi in first_block..=last_block {
            let block_first = bi as u64 * ppb;
            let lo = (first_index.max(block_first) - block_first) as u32;
            let hi = (end_index.min(block_first + ppb) - block_first) as u32;
            let mut b = lock(&self.blocks[bi]);
            let all = !b.erasing && hi <= b.wp && !b.pending.iter().any(|&p| p >= lo && p < hi);
            if !all {
                break;
            }
            b.reads += 1;
            guard.blocks.end = bi + 1;
        }
        if guard.blocks.end != last_block + 1 {
            return Ok(None);
        }
        let layout = self.ecc.layout();
        let span = aligned_span(
            layout.slot_offset(first_index),
            layout.slot_size * count as usize,
            layout.slot_offset(self.geometry.pages()),
        );
        let mut buf = self.run_pool.take();
        buf.buf_mut().set_len(span.len);
        Ok(Some(RunRead {
            span,
            buf,
            _guard: guard,
            _op: op,
        }))
    }

    /// A run's slots as read into `buf`, `lead` bytes in, not yet checked.
    pub(crate) fn fetched_slots(
        &self,
        first: PageAddr,
        count: u32,
        buf: PooledBuf,
        lead: usize,
    ) -> FetchedPages<'_> {
        FetchedPages {
            dev: self,
            first,
            count,
            raw: Raw::Slots {
                // One owner for every page's bytes: the pages are slices of it.
                bytes: Bytes::from_owner(buf),
                lead,
            },
        }
    }

    /// The backing file of the `file` backend (the one a
    /// [`StreamReader`](crate::StreamReader) reads with a ring of its own).
    pub(crate) fn backing_file(&self) -> Option<&Arc<File>> {
        match &self.store {
            Store::File { file, .. } => Some(file),
            _ => None,
        }
    }

    /// A page's slot as it came off the disk, checked: its bytes as they
    /// are when every CRC holds (no copy), else a copy corrected, or the
    /// error. Reads of one request share the buffer, so it is not written.
    fn check_slot_in(
        &self,
        addr: PageAddr,
        index: u64,
        slot: Bytes,
    ) -> Result<PageRead, DeviceError> {
        let layout = self.ecc.layout();
        let (page, oob_at, oob_len) = (layout.page_size, layout.oob_offset, layout.oob_size);
        let page_read = |slot: Bytes, corrected_bytes| PageRead {
            data: slot.slice(..page),
            oob: slot.slice(oob_at..oob_at + oob_len),
            erased: false,
            corrected_bytes,
        };
        if self.skip_read_check {
            return Ok(page_read(slot, 0));
        }
        match self.ecc.verify(&slot) {
            Some(header) if header.page_index == index => return Ok(page_read(slot, 0)),
            Some(header) => {
                return Err(DeviceError::Uncorrectable {
                    addr,
                    detail: format!(
                        "slot holds page #{} (misdirected write?)",
                        header.page_index
                    ),
                })
            }
            None => {}
        }
        // Rare: a CRC failed. Correct a copy of the slot.
        let mut copy = slot.to_vec();
        let corrected = self.check_slot(addr, index, &mut copy)?;
        Ok(page_read(Bytes::from(copy), corrected))
    }

    fn inject_bit_errors(
        &self,
        buf: &mut PooledBuf,
        timing: &NandTiming,
        erase_count: u32,
        index: u64,
    ) {
        let bits = (self.ecc.layout().used_bytes * 8) as u64;
        let lambda = timing.rber(erase_count) * bits as f64;
        if lambda <= 0.0 {
            return;
        }
        let seq = self.read_seq.fetch_add(1, Ordering::Relaxed);
        let mut rng = SplitMix(
            self.seed ^ index.wrapping_mul(0x9E37_79B9) ^ seq.wrapping_mul(0xD1B5_4A32_D192_ED03),
        );
        let flips = rng.poisson(lambda);
        let slot = buf.buf_mut().as_mut_slice();
        for _ in 0..flips {
            let bit = rng.next_u64() % bits;
            slot[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
    }

    /// Programs one page with data (exactly one page) and OOB (at most `oob_size_bytes`).
    pub async fn program_page(
        &self,
        addr: PageAddr,
        data: Bytes,
        oob: Bytes,
    ) -> Result<(), DeviceError> {
        self.program_pages(addr, &[(data, oob)]).await
    }

    /// The most pages one [`program_pages`](Self::program_pages) takes: as
    /// many as one read request holds.
    pub fn max_program_pages(&self) -> u32 {
        self.max_read_pages()
    }

    /// Programs `pages` (data of exactly one page and OOB of at most
    /// `oob_size_bytes` each) into consecutive pages of one block from
    /// `first` on, in order, as [`program_page`](Self::program_page) would
    /// one by one. On the `file` backend they go to the disk in one request:
    /// a file written a page at a time by several chips at once lay on this
    /// VM's host so that reading it back ran a tenth slower than a file
    /// written in large pieces (`docs/benchmarks.md`). At most
    /// [`max_program_pages`](Self::max_program_pages) pages. A torn request
    /// may leave any of them written, so each page's check on reading is
    /// what tells. On an error the pages count as programmed with unknown
    /// contents unless nothing later was accepted in the block.
    pub async fn program_pages(
        &self,
        first: PageAddr,
        pages: &[(Bytes, Bytes)],
    ) -> Result<(), DeviceError> {
        let arrival = Instant::now();
        self.geometry.check_page(first)?;
        let count = u32::try_from(pages.len()).unwrap_or(u32::MAX);
        let max = self.max_program_pages();
        let ppb = self.geometry.pages_per_block;
        if count == 0 || count > max || u64::from(first.page) + u64::from(count) > u64::from(ppb) {
            return Err(DeviceError::AddressOutOfRange {
                addr: format!("{first}+{count}"),
                field: "page",
                value: (u64::from(first.page) + u64::from(count))
                    .saturating_sub(1)
                    .min(u64::from(u32::MAX)) as u32,
                max: ppb - 1,
                valid: format!(
                    "1 to {max} consecutive pages per program, all in one block of {ppb} pages"
                ),
            });
        }
        let l = self.ecc.layout();
        for (data, oob) in pages {
            if data.len() != l.page_size {
                return Err(DeviceError::PageSize {
                    expected: self.geometry.page_size_bytes,
                    got: data.len(),
                });
            }
            if oob.len() > l.oob_size {
                return Err(DeviceError::OobSize {
                    max: self.geometry.oob_size_bytes,
                    got: oob.len(),
                });
            }
        }
        let _op = self.begin_op()?;
        let block = first.block_addr();
        let bi = self.geometry.block_index(block) as usize;
        let erase_count = {
            let mut b = lock(&self.blocks[bi]);
            b.programmable(block)?;
            if first.page < b.wp {
                return Err(DeviceError::AlreadyProgrammed { addr: first });
            }
            if first.page > b.wp {
                return Err(DeviceError::OutOfOrder {
                    addr: first,
                    expected: b.wp,
                });
            }
            b.wp += count;
            b.pending.extend(first.page..first.page + count);
            // A later page programmed: NAND takes no more sectors of the
            // page before it.
            b.open = None;
            b.erase_count
        };
        self.fill_or_wait(bi, first, count).await;
        // A caller that drops this future mid-program must not leave the
        // pages pending for ever (the block could then never be erased). They
        // then count as programmed with unknown contents: the write may still
        // land, so they must not be offered again.
        let mut pending = PendingProgram {
            block: &self.blocks[bi],
            pages: first.page..first.page + count,
        };
        let result = self.write_slots(first, pages, erase_count, arrival).await;
        let mut b = pending.finish();
        if result.is_err() && b.wp == first.page + count {
            // Nothing later was accepted: the pages can be programmed again.
            b.wp = first.page;
        }
        result
    }

    /// Data bytes of one sector: [`program_sectors`](Self::program_sectors)
    /// programs whole sectors.
    pub fn sector_size_bytes(&self) -> usize {
        self.ecc.layout().sector_size
    }

    /// Programs sectors `first_sector..` of page `addr` with `data` (whole
    /// sectors of [`sector_size_bytes`](Self::sector_size_bytes)): NAND's
    /// partial-page program. A page's first such program starts at sector 0,
    /// goes to the block's next page as [`program_page`](Self::program_page)
    /// does and carries the page's OOB (at most `oob_size_bytes`). The page
    /// is then *open*: it takes the sectors after those programmed, in
    /// order and with no OOB, until it is full, the block's next page is
    /// programmed, the block is erased or the device reopens. Sectors never
    /// programmed read as an erased page does (0xFF).
    ///
    /// Why: a log of small records fills a page a few sectors at a time
    /// instead of taking a page a record, so the backing file takes the
    /// record's bytes and the spare area, not a whole slot (the crate's
    /// doc, "Pages programmed in pieces").
    ///
    /// A read of the page while more of its sectors are programmed may fail,
    /// as a chip busy programming a page cannot read it; callers order the
    /// two. On an error the page is closed; what it held before stays as it
    /// was, and a failed first program leaves the page free as
    /// [`program_pages`](Self::program_pages) does.
    pub async fn program_sectors(
        &self,
        addr: PageAddr,
        first_sector: u32,
        data: Bytes,
        oob: Bytes,
    ) -> Result<(), DeviceError> {
        let arrival = Instant::now();
        self.check_sectors(addr, first_sector, &data, &oob)?;
        let l = self.ecc.layout();
        let first = first_sector as usize;
        let count = data.len() / l.sector_size;
        let _op = self.begin_op()?;
        let bi = self.geometry.block_index(addr.block_addr()) as usize;
        let (erase_count, mut slot) = self.claim_sectors(bi, addr, first_sector)?;
        let mut guard = SectorProgram {
            block: &self.blocks[bi],
            page: addr.page,
            first: first == 0,
            done: false,
        };
        if first == 0 {
            self.fill_or_wait(bi, addr, 1).await;
        }
        let meta = (first == 0).then(|| {
            (
                &oob[..],
                Header {
                    erase_count,
                    page_index: self.geometry.page_index(addr),
                    partial: true,
                },
            )
        });
        self.ecc.encode_sectors(&mut slot, first, &data, meta);
        let result = self
            .write_sectors(addr, &slot, first..first + count, arrival)
            .await;
        guard.done = true;
        self.settle_sectors(bi, addr, first_sector, (count, slot), result.is_ok());
        result
    }

    /// Page `addr` takes no more sectors from now on
    /// ([`program_sectors`](Self::program_sectors) answers
    /// [`DeviceError::PageNotOpen`]); a program of its sectors in flight is
    /// waited for first, at most [`CLOSE_SECTORS_WAIT`]. Nothing for a page
    /// that is not open.
    ///
    /// Why: a copy of the page (garbage collection's) must hold every
    /// sector programmed before it, and none may land on the page after it
    /// is copied.
    pub async fn close_sectors(&self, addr: PageAddr) -> Result<(), DeviceError> {
        self.geometry.check_page(addr)?;
        let bi = self.geometry.block_index(addr.block_addr()) as usize;
        let started = Instant::now();
        loop {
            {
                let mut b = lock(&self.blocks[bi]);
                match &b.open {
                    Some(o) if o.page == addr.page && o.busy => {}
                    Some(o) if o.page == addr.page => {
                        b.open = None;
                        return Ok(());
                    }
                    _ => return Ok(()),
                }
            }
            if started.elapsed() > CLOSE_SECTORS_WAIT {
                return Err(DeviceError::BlockBusy {
                    block: addr.block_addr(),
                    reason: format!(
                        "a program of sectors of page {addr} took over {CLOSE_SECTORS_WAIT:?}"
                    ),
                });
            }
            // A program of sectors is one write: a short wait.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// [`program_sectors`](Self::program_sectors)' arguments, before any
    /// state is touched.
    fn check_sectors(
        &self,
        addr: PageAddr,
        first_sector: u32,
        data: &Bytes,
        oob: &Bytes,
    ) -> Result<(), DeviceError> {
        self.geometry.check_page(addr)?;
        let l = self.ecc.layout();
        let count = data.len() / l.sector_size;
        if data.is_empty()
            || !data.len().is_multiple_of(l.sector_size)
            || first_sector as usize + count > l.sectors
        {
            return Err(DeviceError::SectorRange {
                addr,
                first_sector,
                bytes: data.len(),
                sector_bytes: l.sector_size,
                sectors: l.sectors,
            });
        }
        if oob.len() > l.oob_size {
            return Err(DeviceError::OobSize {
                max: self.geometry.oob_size_bytes,
                got: oob.len(),
            });
        }
        if first_sector > 0 && !oob.is_empty() {
            return Err(DeviceError::PageNotOpen {
                addr,
                reason: "only a page's first program (from sector 0) carries OOB bytes".into(),
            });
        }
        Ok(())
    }

    /// Takes page `addr` of block `bi` for a program of sectors from
    /// `first_sector`: the block's next page for a first program (now
    /// pending), or its open page when it takes that sector next (now
    /// busy). Returns the block's erase count and the slot as programmed so
    /// far.
    fn claim_sectors(
        &self,
        bi: usize,
        addr: PageAddr,
        first_sector: u32,
    ) -> Result<(u32, Box<[u8]>), DeviceError> {
        let block = addr.block_addr();
        let mut b = lock(&self.blocks[bi]);
        b.programmable(block)?;
        let erase_count = b.erase_count;
        if first_sector == 0 {
            if addr.page < b.wp {
                return Err(DeviceError::AlreadyProgrammed { addr });
            }
            if addr.page > b.wp {
                return Err(DeviceError::OutOfOrder {
                    addr,
                    expected: b.wp,
                });
            }
            b.wp += 1;
            b.pending.push(addr.page);
            b.open = None;
            let slot = vec![0u8; self.ecc.layout().slot_size].into_boxed_slice();
            return Ok((erase_count, slot));
        }
        match b.open.as_mut() {
            Some(o) if o.page == addr.page && o.busy => Err(DeviceError::BlockBusy {
                block,
                reason: format!("sectors of page {addr} are being programmed"),
            }),
            Some(o) if o.page == addr.page && o.sectors == first_sector => {
                o.busy = true;
                Ok((erase_count, std::mem::take(&mut o.slot)))
            }
            Some(o) if o.page == addr.page => Err(DeviceError::PageNotOpen {
                addr,
                reason: format!(
                    "sector {first_sector} asked for; the page takes sector {} next",
                    o.sectors
                ),
            }),
            _ => Err(DeviceError::PageNotOpen {
                addr,
                reason: "the page takes no more sectors (programmed whole or full, or since \
                         then a later page of its block was programmed, the block erased or \
                         the device reopened)"
                    .into(),
            }),
        }
    }

    /// After a program of `count` sectors from `first_sector` (`slot`, the
    /// page as now programmed) of page `addr`: the page opens, stays open
    /// with more sectors, closes once full, or, on a failure, closes (and a
    /// failed first program gives the page back if nothing later came).
    fn settle_sectors(
        &self,
        bi: usize,
        addr: PageAddr,
        first_sector: u32,
        (count, slot): (usize, Box<[u8]>),
        written: bool,
    ) {
        let sectors_per_page = self.ecc.layout().sectors;
        let mut b = lock(&self.blocks[bi]);
        if first_sector == 0 {
            b.pending.retain(|p| *p != addr.page);
        }
        let sectors = first_sector + count as u32;
        let ours = b.open.as_ref().is_some_and(|o| o.page == addr.page);
        if !written {
            if first_sector == 0 && b.wp == addr.page + 1 {
                // Nothing later was accepted: the page can be programmed again.
                b.wp = addr.page;
            }
            if ours {
                b.open = None;
            }
            return;
        }
        let room = (sectors as usize) < sectors_per_page;
        if first_sector == 0 {
            // Still the block's last page, with room: open.
            if b.wp == addr.page + 1 && room {
                b.open = Some(OpenPage {
                    page: addr.page,
                    sectors,
                    slot,
                    busy: false,
                });
            }
        } else if ours && room {
            if let Some(o) = b.open.as_mut() {
                o.sectors = sectors;
                o.slot = slot;
                o.busy = false;
            }
        } else if ours {
            b.open = None;
        }
    }

    /// A program's failed write: the file system full is
    /// [`DeviceError::NoSpace`] (the device file's, not the device's), the
    /// rest an I/O error naming `what` was programmed.
    fn program_error(&self, what: String, e: io::Error) -> DeviceError {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            DeviceError::NoSpace {
                path: self.backing_path.clone().unwrap_or_default(),
                source: e,
            }
        } else {
            io_err(what, e)
        }
    }

    /// Writes sectors `sectors` of the slot image `slot` of page `addr` and
    /// its spare area (which holds their codes): one write on the file
    /// backends, from the first sector to the slot's end, so the file takes
    /// at most the rest of a slot rather than a whole one.
    async fn write_sectors(
        &self,
        addr: PageAddr,
        slot: &[u8],
        sectors: std::ops::Range<usize>,
        arrival: Instant,
    ) -> Result<(), DeviceError> {
        let l = self.ecc.layout();
        let index = self.geometry.page_index(addr);
        let base = l.slot_offset(index);
        // One write from the first sector to the slot's end: the sectors,
        // those after them (not programmed yet: zeros, as the erase left
        // the file), and the spare area. Two writes (the sectors, then the
        // spare area) cost a second syscall, which is most of a small
        // program's time; the bytes between are at most a page. Both
        // ends are multiples of 512, so O_DIRECT's alignment holds.
        debug_assert!(
            slot[sectors.end * l.sector_size..l.page_size]
                .iter()
                .all(|&b| b == 0),
            "sectors not programmed yet are as the erase left them"
        );
        let range = sectors.start * l.sector_size..l.slot_size;
        let what = || {
            format!(
                "programming sectors {}..{} of page {addr}",
                sectors.start, sectors.end
            )
        };
        let map = |e: io::Error| self.program_error(what(), e);
        let file = match &self.store {
            Store::Mem(slots) => {
                *lock(&slots[index as usize]) = Some(slot.into());
                return Ok(());
            }
            Store::File { file, .. } | Store::Nand { file, .. } => Arc::clone(file),
        };
        let write = move |file: &File, b: &[u8]| -> io::Result<()> {
            file.write_all_at(&b[range.clone()], base + range.start as u64)
        };
        if self.direct_io {
            // O_DIRECT wants an aligned buffer, and the writes go to the
            // disk: a pool buffer, off the runtime's thread.
            let mut buf = self.pool.take();
            buf.buf_mut().set_len(l.slot_size);
            buf.buf_mut().as_mut_slice().copy_from_slice(slot);
            tokio::task::spawn_blocking(move || write(&file, buf.buf().as_slice()))
                .await
                .map_err(|e| io_err(what(), io::Error::other(e.to_string())))?
                .map_err(map)?;
        } else {
            // Buffered: copies into the page cache straight from the slot,
            // made here (as `write_slots` does for one page).
            write(&file, slot).map_err(map)?;
        }
        if let Store::Nand { sched, timing, .. } = &self.store {
            let t_prog = self.sample(timing.t_prog_min_ns, timing.t_prog_max_ns);
            let end = self
                .model(sched, addr.block_addr(), OpKind::Program, t_prog, arrival)
                .await?;
            spin_until(end);
        }
        self.flush_programs(&what).await
    }

    /// Encodes `pages` into the slots from `first` on and writes them: one
    /// request on the `file` backend.
    async fn write_slots(
        &self,
        first: PageAddr,
        pages: &[(Bytes, Bytes)],
        erase_count: u32,
        arrival: Instant,
    ) -> Result<(), DeviceError> {
        let l = self.ecc.layout();
        let first_index = self.geometry.page_index(first);
        let offset = l.slot_offset(first_index);
        // One page takes a slot-sized buffer; more take a run buffer, which
        // holds as many slots as a read request.
        let mut buf = if pages.len() == 1 {
            self.pool.take()
        } else {
            self.run_pool.take()
        };
        buf.buf_mut().set_len(l.slot_size * pages.len());
        for (k, ((data, oob), slot)) in pages
            .iter()
            .zip(buf.buf_mut().as_mut_slice().chunks_exact_mut(l.slot_size))
            .enumerate()
        {
            self.ecc.encode(
                slot,
                data,
                oob,
                Header {
                    erase_count,
                    page_index: first_index + k as u64,
                    partial: false,
                },
            );
        }
        let what = || {
            if pages.len() == 1 {
                format!("programming page {first}")
            } else {
                format!("programming pages {first}+{}", pages.len())
            }
        };
        let map = |e: io::Error| self.program_error(what(), e);
        match &self.store {
            Store::Mem(slots) => {
                for (k, slot) in buf.buf().as_slice().chunks_exact(l.slot_size).enumerate() {
                    *lock(&slots[first_index as usize + k]) = Some(slot.into());
                }
                Ok(())
            }
            Store::File { file, .. }
                if !self.direct_io && buf.buf().len() <= INLINE_WRITE_BYTES =>
            {
                // A buffered write only copies into the page cache, so it
                // is made here: through the ring it waited for an io_uring
                // worker thread and then the reaper, two thread wake-ups
                // on every durable key-value set (docs/benchmarks.md).
                let res = file.write_all_at(buf.buf().as_slice(), offset);
                drop(buf);
                res.map_err(map)?;
                self.flush_programs(&what).await
            }
            Store::File { engine, .. } => {
                let fut = engine
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .submit_write(offset, buf);
                let (_, res) = fut.wait().await;
                res.map_err(map)?;
                self.flush_programs(&what).await
            }
            Store::Nand {
                file,
                sched,
                timing,
            } => {
                file.write_all_at(buf.buf().as_slice(), offset)
                    .map_err(map)?;
                // The chip programs its pages one after another.
                let mut end = arrival;
                for _ in pages {
                    let t_prog = self.sample(timing.t_prog_min_ns, timing.t_prog_max_ns);
                    end = self
                        .model(sched, first.block_addr(), OpKind::Program, t_prog, end)
                        .await?;
                }
                spin_until(end);
                self.flush_programs(&what).await
            }
        }
    }

    /// With `sync_writes`, a program of fewer than [`FILL_AHEAD_PAGES`]
    /// pages that reaches past what its block has written through writes
    /// zeros over the [`FILL_AHEAD_PAGES`] pages after it (within the
    /// block); the block's other programs wait while it does.
    ///
    /// Why: a flush after a write into a hole or an unwritten extent must
    /// commit the file system's journal (new blocks), one after a write
    /// over written blocks only flushes the disk's cache: 125 against
    /// 28 us an `fdatasync` on this machine's ext4. Filling ahead makes the
    /// next small programs of the block overwrites, for one journal commit
    /// every [`FILL_AHEAD_PAGES`] pages instead of one a program; filling
    /// a window rather than the whole block bounds the zeros written for a
    /// block that takes only a few pages. The fill is a performance measure
    /// only: the pages it covers are unprogrammed (past the write pointer),
    /// so a fill that fails or is lost at a crash changes nothing that can
    /// be read.
    async fn fill_or_wait(&self, bi: usize, first: PageAddr, count: u32) {
        if self.flusher.is_none() || self.skip_fill_ahead || matches!(self.store, Store::Mem(_)) {
            return;
        }
        let ppb = self.geometry.pages_per_block;
        let end = first.page + count;
        loop {
            let notified = self.filled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let fill = {
                let mut b = lock(&self.blocks[bi]);
                if b.fill.running {
                    None
                } else {
                    // Large programs share their flush over many pages and
                    // fill nothing; a small one fills the pages ahead of it
                    // unless they are already.
                    let ahead = end.max(b.fill.filled_to)..(end + FILL_AHEAD_PAGES).min(ppb);
                    if count >= FILL_AHEAD_PAGES || b.fill.filled_to > end || ahead.is_empty() {
                        b.fill.filled_to = b.fill.filled_to.max(end);
                        return;
                    }
                    b.fill.running = true;
                    Some(ahead)
                }
            };
            let Some(ahead) = fill else {
                notified.await;
                continue;
            };
            let mut guard = FillGuard {
                dev: self,
                bi,
                filled_to: None,
            };
            self.fill_block_remainder(bi, ahead.clone()).await;
            guard.filled_to = Some(ahead.end);
            return;
        }
    }

    /// Writes zeros over pages `pages` of block `bi` (see
    /// [`Self::fill_or_wait`]); a failure is logged and ignored.
    async fn fill_block_remainder(&self, bi: usize, pages: std::ops::Range<u32>) {
        let file = match &self.store {
            Store::File { file, .. } | Store::Nand { file, .. } => Arc::clone(file),
            Store::Mem(_) => return,
        };
        let l = self.ecc.layout();
        let ppb = u64::from(self.geometry.pages_per_block);
        let first_index = bi as u64 * ppb + u64::from(pages.start);
        let (offset, len) = (
            l.slot_offset(first_index),
            u64::from(pages.end - pages.start) * l.slot_size as u64,
        );
        let slot = l.slot_size;
        let filled =
            tokio::task::spawn_blocking(move || write_zeros(&file, offset, len, slot)).await;
        match filled {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("filling block {bi} with zeros failed ({e})"),
            Err(e) => tracing::debug!("filling block {bi} with zeros failed ({e})"),
        }
    }

    /// With `sync_writes`, waits until the programs completed so far are on
    /// the medium (one shared `fdatasync`).
    async fn flush_programs(&self, what: &(dyn Fn() -> String + Sync)) -> Result<(), DeviceError> {
        let Some(flusher) = &self.flusher else {
            return Ok(());
        };
        flusher
            .flush()
            .await
            .map_err(|e| io_err(format!("flushing the backing file after {}", what()), e))
    }

    /// Waits until every program completed so far is on the medium: one
    /// `fdatasync` of the backing file; nothing under `sync_writes` (a
    /// program completes only once flushed) or on the `mem` backend.
    ///
    /// Why: without `sync_writes` a program is acknowledged from the page
    /// cache, and the layer above must not make an older copy unreachable
    /// (erase it, trim it, or save a map that no longer names it) until the
    /// newer one is durable, or a power loss takes both: data acknowledged
    /// long before the last periodic flush, which `flush_interval_ms`
    /// promises to keep.
    pub async fn sync(&self) -> Result<(), DeviceError> {
        let file = match &self.store {
            Store::Mem(_) => return Ok(()),
            _ if self.flusher.is_some() => return Ok(()),
            Store::File { file, .. } | Store::Nand { file, .. } => Arc::clone(file),
        };
        let what = || "syncing the backing file".to_string();
        tokio::task::spawn_blocking(move || file.sync_data())
            .await
            .map_err(|e| io_err(what(), io::Error::other(e)))?
            .map_err(|e| io_err(what(), e))?;
        self.periodic_flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// `fdatasync` calls made since the device opened: for programs
    /// (`sync_writes`), every `flush_interval_ms`, or for [`sync`](Self::sync).
    pub fn flushes(&self) -> u64 {
        self.flusher.as_ref().map_or(0, Flusher::flushes)
            + self
                .periodic_flushes
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Erases one block.
    pub async fn erase_block(&self, addr: BlockAddr) -> Result<(), DeviceError> {
        let arrival = Instant::now();
        self.geometry.check_block(addr)?;
        let _op = self.begin_op()?;
        let bi = self.geometry.block_index(addr) as usize;
        {
            let mut b = lock(&self.blocks[bi]);
            if b.bad {
                return Err(DeviceError::BadBlock { block: addr });
            }
            if b.erasing {
                return Err(DeviceError::BlockBusy {
                    block: addr,
                    reason: "an erase is already in flight".into(),
                });
            }
            if !b.pending.is_empty() {
                return Err(DeviceError::BlockBusy {
                    block: addr,
                    reason: format!(
                        "{} program(s) in flight (pages {:?})",
                        b.pending.len(),
                        b.pending
                    ),
                });
            }
            b.erasing = true;
            b.erase_count = b.erase_count.saturating_add(1);
            b.wp = 0;
            b.open = None;
            // The erase punches the block's pages out (or zeroes the range):
            // its next programs fill it again.
            b.fill = BlockFill::default();
        }
        // Wait for reads that started before the erase.
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if lock(&self.blocks[bi]).reads == 0 {
                break;
            }
            notified.await;
        }
        let result = self.erase_store(addr, arrival).await;
        lock(&self.blocks[bi]).erasing = false;
        result
    }

    async fn erase_store(&self, addr: BlockAddr, arrival: Instant) -> Result<(), DeviceError> {
        // Persist the new erase count and write pointer before touching the
        // pages: after a crash in between, the old pages carry the old erase
        // count in their headers and are not taken for programmed ones.
        if self.meta_path.is_some() {
            self.persist(false).await?;
        }
        let ppb = u64::from(self.geometry.pages_per_block);
        let first = self.geometry.block_index(addr) * ppb;
        let slot = self.ecc.layout().slot_size;
        let (offset, len) = (self.ecc.layout().slot_offset(first), ppb * slot as u64);
        let file = match &self.store {
            Store::Mem(slots) => {
                for s in &slots[first as usize..(first + ppb) as usize] {
                    *lock(s) = None;
                }
                return Ok(());
            }
            Store::File { file, .. } => Arc::clone(file),
            Store::Nand {
                file,
                sched,
                timing,
            } => {
                let t = Duration::from_nanos(timing.t_erase_ns);
                let end = self.model(sched, addr, OpKind::Erase, t, arrival).await?;
                spin_until(end);
                Arc::clone(file)
            }
        };
        let keep = self.allocated;
        tokio::task::spawn_blocking(move || punch_or_zero(&file, offset, len, slot, keep))
            .await
            .map_err(|e| {
                io_err(
                    format!("erasing block {addr}"),
                    io::Error::other(e.to_string()),
                )
            })?
            .map_err(|e| io_err(format!("erasing block {addr}"), e))
    }

    /// Saves the metadata snapshot. Saves are serialised (an async mutex held
    /// across the write), so a later state is never overwritten by an earlier.
    async fn persist(&self, clean: bool) -> Result<(), DeviceError> {
        let Some(path) = self.meta_path.clone() else {
            return Ok(());
        };
        let _order = self.meta_lock.lock().await;
        let snapshot = {
            let guards: Vec<_> = self.blocks.iter().map(lock).collect();
            snapshot_of(
                &self.geometry,
                self.ecc.layout().slot_size,
                clean,
                guards.iter().map(|g| &**g),
            )
        };
        tokio::task::spawn_blocking(move || meta::save(&path, &snapshot))
            .await
            .map_err(|e| io_err("saving device metadata", io::Error::other(e.to_string())))?
    }

    /// Persists metadata and stops the device's threads.
    pub async fn close(&self) -> Result<(), DeviceError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let start = Instant::now();
        while self.inflight.load(Ordering::Acquire) > 0 && start.elapsed() < Duration::from_secs(30)
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let result = self.persist(true).await;
        match &self.store {
            Store::File { engine, file } => {
                engine.write().unwrap_or_else(|e| e.into_inner()).stop();
                let _ = file.sync_all();
            }
            Store::Nand { sched, file, .. } => {
                sched.write().unwrap_or_else(|e| e.into_inner()).stop();
                let _ = file.sync_all();
            }
            Store::Mem(_) => {}
        }
        result
    }
}

fn snapshot_of<'a>(
    geometry: &Geometry,
    slot: usize,
    clean: bool,
    blocks: impl Iterator<Item = &'a BlockState>,
) -> Snapshot {
    Snapshot {
        geometry: *geometry,
        slot_size: slot as u32,
        clean,
        blocks: blocks
            .map(|b| BlockMeta {
                erase_count: b.erase_count,
                write_pointer: b.wp,
                flags: if b.bad { FLAG_BAD } else { 0 }
                    | if b.factory_bad { FLAG_FACTORY_BAD } else { 0 },
            })
            .collect(),
    }
}

/// Marks a seeded-random `fraction` of blocks bad, never every block of a chip.
/// The timing model of a nand device (the options', else its preset's);
/// none for the other backends.
fn nand_timing_of(
    config: &DeviceConfig,
    options: &OpenOptions,
    layout: &SlotLayout,
) -> Result<Option<NandTiming>, DeviceError> {
    if config.backend != BackendKind::Nand {
        return Ok(None);
    }
    let t = options.nand_timing.clone().unwrap_or_else(|| {
        NandTiming::preset(
            config.preset.unwrap_or(Preset::Rfsa),
            layout.used_bytes as u64,
        )
    });
    t.validate()?;
    Ok(Some(t))
}

/// Block states from the saved snapshot (and, after an unclean stop, the
/// pages programmed past its write pointers); a new nand device instead
/// gets its factory bad blocks.
fn restore_blocks(
    snapshot: Option<meta::Snapshot>,
    path: &Path,
    geometry: &Geometry,
    ecc: &Ecc,
    timing: Option<&NandTiming>,
    seed: u64,
    blocks: &mut [BlockState],
) -> Result<(), DeviceError> {
    match snapshot {
        Some(s) => {
            for (b, m) in blocks.iter_mut().zip(&s.blocks) {
                b.erase_count = m.erase_count;
                b.wp = m.write_pointer;
                b.bad = m.flags & FLAG_BAD != 0;
                b.factory_bad = m.flags & FLAG_FACTORY_BAD != 0;
            }
            if !s.clean {
                let recovered = recover(path, geometry, ecc, blocks)?;
                tracing::info!(
                    "device {}: unclean stop, recovered {recovered} programmed pages past saved write pointers",
                    path.display()
                );
            }
        }
        None => {
            if let Some(t) = timing {
                mark_factory_bad(geometry, t.factory_bad_fraction, seed, blocks);
            }
        }
    }
    Ok(())
}

/// The backing file's store: behind the nand scheduler when there is a
/// timing model, else behind the I/O engine.
fn start_store(
    file: Arc<File>,
    timing: Option<NandTiming>,
    geometry: &Geometry,
    inflight: &Arc<AtomicUsize>,
    direct_io: bool,
) -> Result<Store, DeviceError> {
    Ok(match timing {
        Some(timing) => {
            let sched = NandScheduler::start(geometry, &timing, Arc::clone(inflight))?;
            Store::Nand {
                file,
                sched: RwLock::new(sched),
                timing,
            }
        }
        None => {
            let engine = IoEngine::start(Arc::clone(&file), true)
                .map_err(|e| io_err("starting the I/O engine", e))?;
            tracing::debug!(
                "file device: {} engine, O_DIRECT {}",
                engine.name,
                direct_io
            );
            Store::File {
                file,
                engine: RwLock::new(engine),
            }
        }
    })
}

fn mark_factory_bad(geometry: &Geometry, fraction: f64, seed: u64, blocks: &mut [BlockState]) {
    let mut rng = SplitMix(seed ^ 0xBAD_B10C);
    let per_chip = geometry.blocks_per_chip as usize;
    for chip in blocks.chunks_mut(per_chip) {
        for b in chip.iter_mut() {
            if rng.next_f64() < fraction {
                b.bad = true;
                b.factory_bad = true;
            }
        }
        if chip.iter().all(|b| b.bad) {
            chip[0].bad = false;
            chip[0].factory_bad = false;
        }
    }
}

/// After an unclean stop: for every good block, probe the slots from the
/// saved write pointer to the end of the block; a slot is programmed iff its
/// header decodes, names this page and carries the block's current erase
/// count. The write pointer moves past the last programmed slot (a gap below
/// it was a program that never completed, so never acknowledged; it reads as
/// uncorrectable). Only the spare area of each slot is read.
fn recover(
    path: &Path,
    geometry: &Geometry,
    ecc: &Ecc,
    blocks: &mut [BlockState],
) -> Result<u64, DeviceError> {
    let file = File::open(path)
        .map_err(|e| io_err(format!("opening {} for recovery", path.display()), e))?;
    let l = ecc.layout();
    let mut slot = vec![0u8; l.slot_size];
    let mut recovered = 0;
    for (bi, b) in blocks.iter_mut().enumerate() {
        if b.bad || b.wp >= geometry.pages_per_block {
            continue;
        }
        let mut last = None;
        for page in b.wp..geometry.pages_per_block {
            let index = bi as u64 * u64::from(geometry.pages_per_block) + u64::from(page);
            let off = l.slot_offset(index);
            slot.fill(0);
            file.read_exact_at(
                &mut slot[l.page_size..l.used_bytes],
                off + l.page_size as u64,
            )
            .map_err(|e| io_err(format!("probing slot {index} of {}", path.display()), e))?;
            if let Ok(h) = ecc.decode_meta(&mut slot) {
                if h.page_index == index && h.erase_count == b.erase_count {
                    last = Some(page);
                }
            }
        }
        if let Some(p) = last {
            recovered += u64::from(p + 1 - b.wp);
            b.wp = p + 1;
        }
    }
    Ok(recovered)
}

/// How `file`'s writes reach the medium: a flush per group of programs
/// (`sync_writes`, the default for `file`), or every `flush_interval_ms`
/// (counted in `periodic`), or the kernel's own write-back.
fn flushing(
    config: &DeviceConfig,
    file: &Arc<std::fs::File>,
    periodic: &Arc<std::sync::atomic::AtomicU64>,
) -> Result<Option<Flusher>, DeviceError> {
    if config
        .sync_writes
        .unwrap_or(config.backend == BackendKind::File)
    {
        return Ok(Some(Flusher::new(Arc::clone(file))));
    }
    if let Some(ms) = config.flush_interval_ms.filter(|&ms| ms > 0) {
        let interval = std::time::Duration::from_millis(ms);
        flush_every(Arc::downgrade(file), interval, Arc::clone(periodic))?;
    }
    Ok(None)
}

/// Flushes `file` every `interval` on a thread of its own until the device
/// lets go of it.
fn flush_every(
    file: std::sync::Weak<std::fs::File>,
    interval: std::time::Duration,
    count: Arc<std::sync::atomic::AtomicU64>,
) -> Result<(), DeviceError> {
    std::thread::Builder::new()
        .name("quarry-flush".into())
        .spawn(move || loop {
            std::thread::sleep(interval);
            let Some(file) = file.upgrade() else { return };
            match file.sync_data() {
                Ok(()) => {
                    count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::error!("periodic fdatasync of the device's backing file failed: {e}")
                }
            }
        })
        .map(drop)
        .map_err(|e| io_err("starting the periodic flush thread".to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_spans_cover_the_bytes_asked_and_stop_at_the_end() {
        let slot = 66048usize;
        for first in 0..64u64 {
            for count in [1usize, 2, 7, 16, 31] {
                let (offset, len) = (first * slot as u64, count * slot);
                let span = aligned_span(offset, len, u64::MAX);
                assert_eq!(span.offset % 4096, 0);
                assert_eq!(span.len % 4096, 0);
                assert_eq!(span.offset + span.lead as u64, offset);
                assert!(span.lead + len <= span.len && span.len < len + 2 * 4096);
            }
        }
        // The device's end is not a 4 KiB multiple: the request stops there.
        let end = 3 * 66048;
        let span = aligned_span(2 * 66048, 66048, end);
        assert_eq!(span.offset + span.len as u64, end);
        assert_eq!(span.offset + span.lead as u64, 2 * 66048);
    }

    /// `skip_read_check` returns the stored bytes as they are; the normal
    /// path corrects them. Guards against the switch leaking into the
    /// default path.
    #[test]
    fn skip_read_check_returns_raw_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = DeviceConfig {
            backend: BackendKind::File,
            direct_io: Some(false),
            ..DeviceConfig::default()
        };
        let addr = PageAddr {
            bus: 1,
            chip: 0,
            block: 3,
            page: 0,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let page_size = config.geometry.unwrap_or_default().page_size_bytes as usize;
            let data = Bytes::from(vec![0x42u8; page_size]);
            let offset = {
                let device = Device::open(&config, dir.path()).expect("open");
                device
                    .program_page(addr, data.clone(), Bytes::new())
                    .await
                    .expect("program");
                let offset = device.page_offset_bytes(addr).expect("offset");
                device.close().await.expect("close");
                offset
            };
            let file = FsOpenOptions::new()
                .write(true)
                .open(dir.path().join("pages.bin"))
                .expect("backing file");
            file.write_all_at(&[0x00], offset + 17).expect("flip");
            drop(file);
            for skip in [true, false] {
                let options = OpenOptions {
                    skip_read_check: skip,
                    ..OpenOptions::default()
                };
                let device = Device::open_with(&config, dir.path(), options).expect("reopen");
                let read = device.read_page(addr).await.expect("read");
                assert_eq!(read.data[17], if skip { 0x00 } else { 0x42 });
                assert_eq!(read.corrected_bytes, if skip { 0 } else { 1 });
                device.close().await.expect("close");
            }
        });
    }
}
