//! A node's side of a command: [`LocalData`] (what the node holds) and the
//! local run, which streams the pages of its segments off the device into
//! the kernel.
//!
//! One run streams at a time on a node (its lane); the others wait their
//! turn before they hold a thread or a buffer. A run is one blocking
//! thread: it issues reads of as many pages as one device request takes,
//! as many as the tuner's setting has buffers, waits for the oldest, checks
//! its pages and folds them into the kernel while they are in the cache,
//! and hands the buffer back. Meanwhile the next read is at the disk and
//! the one after waits its turn, started as the one before comes in
//! (Minerva's double buffering). On a `file` device the run's reads go on a
//! ring of the thread's own ([`quarry_device::StreamReader`]): the thread
//! that waits for a read submitted it, so the completion wakes it directly
//! and it sends the next read at once, as fio does; through the device's
//! shared engine a runtime worker had to wake first, and the disk waited
//! about 0.1 ms more per 2 MiB request. Pages are folded as slices of
//! the read buffers, never copied: with a fast disk the scan is bound by
//! the node's CPU, and a copy into contiguous blocks was a sixth of it.
//!
//! This is the shape of the fastest reader this VM has: at 1 read at the
//! disk and 1 ahead, two buffers take turns. A bare reader of that shape
//! read 0.97 of `fio`'s best, and each buffer more in circulation, or a
//! second thread touching the bytes, cost this disk a tenth or more
//! (`docs/benchmarks.md`, "One thread, two buffers").

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures::future::{maybe_done, BoxFuture, MaybeDone};
use futures::task::noop_waker_ref;
use futures::FutureExt;
use quarry_device::{Device, PageAddr};
use quarry_proto::NodeId;
use quarry_store::{ChunkLocation, Fingerprint, VolumeNodeStore};
use quarry_volume::{LogicalPage, SpaceManager, TaggedPage, VolumeRegistry};

use crate::engine_error::ComputeError;
use crate::scan::{compile, Part, ScanKernel};
use crate::tuner::{ReadSetting, ReadTuner};
use crate::wire::{LocalAnswer, LocalRun, Resume, Segment, Source, MAX_SEGMENTS_PER_RUN};

/// Most bytes one local run reads: the entry node cuts larger scans into
/// several runs, so progress is reported and limits are checked between
/// them.
pub const MAX_RUN_BYTES: u64 = 256 << 20;

/// What a node holds that kernels read: its device, and its managed storage
/// when it runs one.
pub struct LocalData {
    /// The node.
    pub node: NodeId,
    /// Its device (raw pages, for linear targets).
    pub device: Arc<Device>,
    /// Its managed storage.
    pub managed: Option<ManagedData>,
    /// A page of zeros: what a never-written volume page reads as, made
    /// once rather than per page.
    zeros: std::sync::OnceLock<Bytes>,
    /// The read setting the device was last given.
    applied: std::sync::Mutex<Option<ReadSetting>>,
    /// One run streams at a time on the node; the others wait their turn
    /// (first come, first served) before they take a thread or a buffer.
    lane: Arc<tokio::sync::Semaphore>,
}

/// A node's managed storage.
pub struct ManagedData {
    /// The space manager over the device.
    pub space: Arc<SpaceManager>,
    /// The object store's node.
    pub store: Arc<VolumeNodeStore>,
    /// The block volumes held here.
    pub volumes: Arc<VolumeRegistry>,
}

/// One page read of a run.
struct PageItem {
    /// Index of the segment in the run.
    segment: usize,
    page: PageRef,
    span: std::ops::Range<usize>,
    /// The chunk whose header this page must hold (the first page of a
    /// chunk read near the data).
    header: Option<(Fingerprint, ChunkLocation, u32)>,
}

#[derive(Clone, Copy)]
enum PageRef {
    /// A chunk's page: must be written.
    Chunk(LogicalPage),
    /// A volume's page: never written reads as zeros.
    Volume(LogicalPage),
    Device(PageAddr),
}

/// A group of page reads whose bytes are in.
enum Fetched<'a> {
    /// Read and checked already (single pages, device pages); each taken
    /// once.
    Read(Vec<Option<Result<TaggedPage, ComputeError>>>),
    /// A logical run, its pages checked one by one as they are taken (or
    /// the fetch's error).
    Run(Result<quarry_volume::FetchedRun<'a>, quarry_volume::VolumeError>),
}

impl Fetched<'_> {
    /// Page `k` of the group, checked now (CPU; a page that fails its check
    /// is read again): the kernel that folds it next finds its bytes in the
    /// cache.
    async fn take(
        &mut self,
        data: &LocalData,
        k: usize,
        item: &PageItem,
    ) -> Result<TaggedPage, ComputeError> {
        match self {
            Fetched::Read(pages) => pages
                .get_mut(k)
                .and_then(Option::take)
                .unwrap_or_else(|| Err(data.storage(format!("page {k} of a read taken twice")))),
            Fetched::Run(Ok(run)) => match run.page(k).await {
                Ok(page) => data.logical_page(item, page),
                Err(e) => Err(data.storage(format!("reading page {k} of a run: {e}"))),
            },
            Fetched::Run(Err(e)) => Err(data.storage(format!("reading a run of pages: {e}"))),
        }
    }
}

impl LocalData {
    /// What node `node` holds: its device and, when it runs managed
    /// storage, the space manager, object store and volumes on it.
    pub fn new(node: NodeId, device: Arc<Device>, managed: Option<ManagedData>) -> LocalData {
        LocalData {
            node,
            device,
            managed,
            zeros: std::sync::OnceLock::new(),
            applied: std::sync::Mutex::new(None),
            lane: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// Puts `setting` in force for the node: its device's reads at the
    /// disk (which shape every read there, not only the kernels'); the
    /// buffers a run holds follow the setting at each read.
    pub(crate) fn apply(&self, setting: ReadSetting) {
        let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        if *applied == Some(setting) {
            return;
        }
        self.device
            .set_read_budget_bytes(setting.depth * quarry_device::MAX_READ_RUN_BYTES);
        *applied = Some(setting);
    }

    fn managed(&self, what: &str) -> Result<&ManagedData, ComputeError> {
        self.managed.as_ref().ok_or_else(|| ComputeError::Storage {
            node: self.node,
            message: format!(
                "the node runs its device raw (storage mode \"raw\"): {what} need storage mode \"managed\""
            ),
        })
    }

    fn storage(&self, message: String) -> ComputeError {
        ComputeError::Storage {
            node: self.node,
            message,
        }
    }

    /// The page reads of a run, in order.
    async fn plan(&self, segments: &[Segment]) -> Result<(Vec<PageItem>, u64), ComputeError> {
        let mut items = Vec::new();
        let mut total = 0u64;
        for (i, seg) in segments.iter().enumerate() {
            total += seg.source.len_bytes();
            if total > MAX_RUN_BYTES {
                return Err(ComputeError::BadRequest(format!(
                    "a local run of more than {MAX_RUN_BYTES} bytes"
                )));
            }
            match &seg.source {
                Source::Chunk {
                    fingerprint,
                    len,
                    start,
                    end,
                } => {
                    self.plan_chunk(i, *fingerprint, *len, *start..*end, &mut items)
                        .await?;
                }
                Source::VolumePage {
                    space,
                    page,
                    start,
                    end,
                } => {
                    let m = self.managed("volume pages")?;
                    if !m.volumes.volumes().iter().any(|d| d.space() == *space) {
                        return Err(self.storage(format!("no block volume has space {space} here")));
                    }
                    let page_size = m.space.page_size();
                    if *start > *end || *end as usize > page_size {
                        return Err(ComputeError::BadRequest(format!(
                            "bytes {start}..{end} of a {page_size}-byte page"
                        )));
                    }
                    items.push(PageItem {
                        segment: i,
                        page: PageRef::Volume(LogicalPage::new(*space, *page)),
                        span: *start as usize..*end as usize,
                        header: None,
                    });
                }
                Source::DevicePage { page, start, end } => {
                    let page_size = self.device.geometry().page_size_bytes as usize;
                    if *start > *end || *end as usize > page_size {
                        return Err(ComputeError::BadRequest(format!(
                            "bytes {start}..{end} of a {page_size}-byte page"
                        )));
                    }
                    items.push(PageItem {
                        segment: i,
                        page: PageRef::Device(*page),
                        span: *start as usize..*end as usize,
                        header: None,
                    });
                }
            }
        }
        Ok((items, total))
    }

    /// The page reads of bytes `range` of a chunk: its pages from the
    /// header page on, each with the bytes of the range it holds.
    async fn plan_chunk(
        &self,
        segment: usize,
        fingerprint: [u8; 32],
        len: u32,
        range: std::ops::Range<u32>,
        items: &mut Vec<PageItem>,
    ) -> Result<(), ComputeError> {
        let m = self.managed("chunks")?;
        let fp = Fingerprint(fingerprint);
        let info = m
            .store
            .chunk(fp)
            .await
            .map_err(|e| self.storage(format!("looking up chunk {fp}: {e}")))?
            .ok_or_else(|| {
                self.storage(format!(
                    "chunk {fp} is not here (released by a newer version of its \
                     object, or placed over other members)"
                ))
            })?;
        if info.len != len {
            return Err(self.storage(format!(
                "chunk {fp} holds {} bytes, the manifest says {len}",
                info.len
            )));
        }
        let spans = m
            .store
            .data()
            .page_spans(info.location, info.len, range)
            .map_err(|e| self.storage(e.to_string()))?;
        let first = LogicalPage::new(info.location.space, info.location.first_page);
        let header = Some((fp, info.location, info.len));
        // The header page is read even when the range starts
        // further on: it proves the extent still holds this chunk.
        if spans.first().map(|s| s.page) != Some(first) {
            items.push(PageItem {
                segment,
                page: PageRef::Chunk(first),
                span: 0..0,
                header,
            });
        }
        for s in spans {
            let header = (s.page == first).then_some((fp, info.location, info.len));
            items.push(PageItem {
                segment,
                page: PageRef::Chunk(s.page),
                span: s.bytes,
                header,
            });
        }
        Ok(())
    }

    async fn read(&self, item: &PageItem) -> Result<TaggedPage, ComputeError> {
        match item.page {
            PageRef::Chunk(id) | PageRef::Volume(id) => {
                let m = self.managed("logical pages")?;
                match m.space.read_tagged(id).await {
                    Ok(page) => self.logical_page(item, page),
                    Err(e) => Err(self.storage(format!("reading page {id}: {e}"))),
                }
            }
            PageRef::Device(addr) => self
                .device
                .read_page(addr)
                .await
                .map(|r| TaggedPage::untagged(r.data))
                .map_err(|e| self.storage(format!("reading device page {addr}: {e}"))),
        }
    }

    /// A logical page as the space manager answered it: a volume's page
    /// never written reads as zeros; a chunk's must be written.
    fn logical_page(
        &self,
        item: &PageItem,
        page: Option<TaggedPage>,
    ) -> Result<TaggedPage, ComputeError> {
        match (page, item.page) {
            (Some(page), _) => Ok(page),
            (None, PageRef::Volume(_)) => Ok(TaggedPage::untagged(
                self.zeros(self.managed("volume pages")?),
            )),
            (None, PageRef::Chunk(id)) => Err(self.storage(format!(
                "page {id} of a chunk is not written (the chunk was released meanwhile)"
            ))),
            (None, PageRef::Device(addr)) => {
                Err(self.storage(format!("device page {addr} among logical pages")))
            }
        }
    }

    /// Fetches a group of items (see [`group_len`]): a run of logical pages
    /// through the space manager's fetch, which reads pages lying next to
    /// each other on the device in one request and leaves their check to
    /// [`Fetched::finish`]; one item alone is read (and checked) at once.
    async fn fetch_group<'a>(&'a self, items: &[PageItem]) -> Fetched<'a> {
        let ids: Vec<LogicalPage> = items
            .iter()
            .filter_map(|item| match item.page {
                PageRef::Chunk(id) | PageRef::Volume(id) => Some(id),
                PageRef::Device(_) => None,
            })
            .collect();
        let managed = self.managed.as_ref().filter(|_| ids.len() == items.len());
        let Some(m) = managed.filter(|_| items.len() > 1) else {
            // A single page, or a device page among them: read one by one.
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(self.read(item).await);
            }
            return Fetched::Read(out.into_iter().map(Some).collect());
        };
        Fetched::Run(m.space.fetch_many(&ids).await)
    }

    /// A group's read through the device's shared engine, polled once so it
    /// has reached the device (it takes its buffer there); the waker that
    /// waits for it is the run's, later.
    fn issue_shared<'a>(&'a self, group: &'a [PageItem]) -> IssuedRead<'a> {
        let mut read: IssuedRead<'a> = Box::pin(maybe_done(
            async move { (group, self.fetch_group(group).await) }.boxed(),
        ));
        let _ = read
            .as_mut()
            .poll(&mut Context::from_waker(noop_waker_ref()));
        read
    }

    /// A group of logical pages (a device page among them goes the shared
    /// way) located and its device reads issued on the run's own ring.
    fn issue_on_stream<'a>(
        &'a self,
        m: &'a ManagedData,
        stream: &mut quarry_device::StreamReader<'a>,
        group: &'a [PageItem],
    ) -> Result<Issued<'a>, ComputeError> {
        let ids: Option<Vec<LogicalPage>> = group
            .iter()
            .map(|item| match item.page {
                PageRef::Chunk(id) | PageRef::Volume(id) => Some(id),
                PageRef::Device(_) => None,
            })
            .collect();
        let Some(ids) = ids else {
            return Ok(Issued::Shared(self.issue_shared(group)));
        };
        let located = m
            .space
            .locate(&ids)
            .map_err(|e| self.storage(format!("locating {} pages: {e}", ids.len())))?;
        let mut on_stream = Vec::new();
        for (first, count) in located.device_reads() {
            let room = stream.len() < quarry_device::MAX_STREAM_READS;
            let issued = room
                && stream
                    .issue(first, count)
                    .map_err(|e| self.storage(format!("reading pages {first}+{count}: {e}")))?;
            on_stream.push(issued);
        }
        Ok(Issued::Stream {
            group,
            located,
            on_stream,
        })
    }

    fn zeros(&self, m: &ManagedData) -> Bytes {
        self.zeros
            .get_or_init(|| Bytes::from(vec![0u8; m.space.page_size()]))
            .clone()
    }

    fn check_header(&self, item: &PageItem, page: &TaggedPage) -> Result<(), ComputeError> {
        if let Some((fp, location, len)) = &item.header {
            let m = self.managed("chunks")?;
            m.store
                .data()
                .check_first_page(fp, *location, *len, page)
                .map_err(|e| self.storage(e.to_string()))?;
        }
        Ok(())
    }
}

/// How many items from `items[0]` on one read covers, at most `max`:
/// logical pages (chunks' or volumes'), which the space manager reads in
/// as few device requests as their places allow (pages next to each other
/// on the device in one). A device page is read alone.
fn group_len(items: &[PageItem], max: usize) -> usize {
    let logical = |item: &PageItem| matches!(item.page, PageRef::Chunk(_) | PageRef::Volume(_));
    match items.first() {
        None => 0,
        Some(first) if !logical(first) => 1,
        Some(_) => items
            .iter()
            .take(max)
            .take_while(|item| logical(item))
            .count(),
    }
}

/// A group of items and its read.
type FetchedGroup<'a> = (&'a [PageItem], Fetched<'a>);

/// A group's read, issued: polled once so it has reached the device, and
/// finished when the run comes to it.
type IssuedRead<'a> = Pin<Box<MaybeDone<BoxFuture<'a, FetchedGroup<'a>>>>>;

/// A group's read, issued.
enum Issued<'a> {
    /// Through the device's shared engine.
    Shared(IssuedRead<'a>),
    /// On the run's own ring: the group located, and for each of its device
    /// reads whether it went on the ring (else it is fetched when taken:
    /// a page of it not yet programmed, or the ring full).
    Stream {
        group: &'a [PageItem],
        located: quarry_volume::LocatedRun,
        on_stream: Vec<bool>,
    },
}

/// `fut`'s output: at once when it is ready at its first poll (a page's
/// check, CPU only: the common case, with no trip through the runtime per
/// page), else waited for on the runtime (a page read again).
fn resolve<F: Future>(handle: &tokio::runtime::Handle, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    match fut
        .as_mut()
        .poll(&mut Context::from_waker(noop_waker_ref()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => handle.block_on(fut),
    }
}

/// Sets a run's stop flag when the command stops waiting for it (its
/// future dropped: cancelled, or past its time), so the blocking side
/// ends at its next read instead of scanning on for nobody.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs a kernel over segments of this node's data.
pub(crate) async fn run_local(
    data: &Arc<LocalData>,
    tuner: &Arc<ReadTuner>,
    run: LocalRun,
) -> Result<LocalAnswer, ComputeError> {
    let deadline = Instant::now() + Duration::from_millis(run.time_left_ms);
    if run.segments.len() > MAX_SEGMENTS_PER_RUN {
        return Err(ComputeError::BadRequest(format!(
            "{} segments in one local run (at most {MAX_SEGMENTS_PER_RUN})",
            run.segments.len()
        )));
    }
    let kernel = compile(&run.kernel)?;
    if run.carry.is_some() {
        check_one_range(&run.segments)?;
    }
    let started = Instant::now();
    let (items, _total) = data.plan(&run.segments).await?;
    let plan_ms = started.elapsed().as_secs_f64() * 1e3;
    // The lane is taken before the blocking thread, so runs that wait for
    // it hold no thread; it goes back once the run's last read is in, so
    // the next run's first read reaches the disk while this one folds.
    let lane = Arc::clone(&data.lane)
        .acquire_owned()
        .await
        .map_err(|_| data.storage("the node's scan lane is closed".into()))?;
    let lane_wait_ms = started.elapsed().as_secs_f64() * 1e3 - plan_ms;
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(Arc::clone(&stop));
    let handle = tokio::runtime::Handle::current();
    let (data_in, tuner_in) = (Arc::clone(data), Arc::clone(tuner));
    let pages = items.len();
    let scanned = tokio::task::spawn_blocking(move || {
        let mut folder = Folder::new(kernel.as_ref(), &run.segments, run.carry, run.memory_bytes);
        folder.piece_bytes = run.piece_bytes;
        let reader = RunReader {
            handle: &handle,
            data: &data_in,
            tuner: &tuner_in,
            items: &items,
            deadline,
            stop: &stop,
        };
        let (bytes, io_wait, cut) = reader.stream_and_fold(&mut folder, lane)?;
        let resume = cut.and_then(|at| items.get(at)).map(|item| Resume {
            segment: item.segment as u32,
            bytes_done: folder.folded[item.segment],
        });
        let parts = folder.finish(resume.map(|r| r.segment as usize))?;
        Ok::<_, ComputeError>((bytes, parts, io_wait, resume))
    })
    .await
    .map_err(|e| ComputeError::Storage {
        node: data.node,
        message: format!("the kernel thread failed: {e}"),
    })?;
    let (bytes_scanned, parts, io_wait, resume) = scanned?;
    tracing::debug!(
        bytes = bytes_scanned,
        pages,
        plan_ms = format!("{plan_ms:.1}"),
        lane_wait_ms = format!("{lane_wait_ms:.1}"),
        io_wait_ms = format!("{:.1}", io_wait.as_secs_f64() * 1e3),
        total_ms = format!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
        "local run"
    );
    Ok(LocalAnswer {
        parts,
        bytes_scanned,
        resume,
    })
}

fn check_one_range(segments: &[Segment]) -> Result<(), ComputeError> {
    for w in segments.windows(2) {
        if w[0].target != w[1].target || w[0].offset + w[0].source.len_bytes() != w[1].offset {
            return Err(ComputeError::BadRequest(
                "a run that carries a kernel's state must cover one contiguous range".into(),
            ));
        }
    }
    Ok(())
}

/// What a run reads, and what stops it.
struct RunReader<'a> {
    /// The node's runtime, which the device's engine answers through.
    handle: &'a tokio::runtime::Handle,
    data: &'a LocalData,
    tuner: &'a ReadTuner,
    /// The run's page reads, in order.
    items: &'a [PageItem],
    deadline: Instant,
    /// Set once the command no longer waits for the run.
    stop: &'a AtomicBool,
}

impl RunReader<'_> {
    /// Fails once the command stopped waiting for the run or its time ran out.
    fn check_wanted(&self) -> Result<(), ComputeError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(self
                .data
                .storage("the command stopped waiting for this run".into()));
        }
        if Instant::now() > self.deadline {
            return Err(ComputeError::Limit {
                what: "time",
                detail: format!(
                    "the command's time ran out while node {} read its data",
                    self.data.node
                ),
            });
        }
        Ok(())
    }

    /// Reads the run's pages in order with the tuner's setting, checks them
    /// and folds them, on this (blocking) thread; returns the bytes folded
    /// and the time spent waiting for reads, and the first item not folded
    /// when the parts grew past the run's piece bytes before its end.
    ///
    /// Minerva's double buffering, shaped like the fastest reader this VM has
    /// (`docs/benchmarks.md`): while one read's pages are checked and folded,
    /// the next read is at the disk and the one after it waits in the
    /// device's queue, started by the completion before it. The thread that
    /// checks a buffer folds it, while it is still in the cache, and hands it
    /// straight back: no other thread touches the bytes, and the disk writes
    /// into the same few buffers over and over.
    /// `lane` goes back once the last read is in.
    fn stream_and_fold(
        &self,
        folder: &mut Folder<'_>,
        lane: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<(u64, Duration, Option<usize>), ComputeError> {
        let RunReader {
            handle,
            data,
            tuner,
            items,
            ..
        } = *self;
        let mut io_wait = Duration::ZERO;
        let mut lane = Some(lane);
        // The device's engine answers through the node's runtime.
        let _runtime = handle.enter();
        let mut setting = tuner.current();
        data.apply(setting);
        // The run's own ring, when the device has one to give: the thread
        // that waits for a read is the one that submitted it, as with fio
        // (`quarry_device::StreamReader`).
        let mut stream = data
            .managed
            .as_ref()
            .and_then(|m| Some((m, data.device.stream_reader(setting.depth)?)));
        // Each read with the index of its first item.
        let mut issued: VecDeque<(usize, Issued<'_>)> = VecDeque::new();
        let mut next = 0usize;
        let mut bytes_read = 0u64;
        loop {
            self.issue_reads(&mut stream, &mut issued, &mut next, setting)?;
            let Some((group_at, read)) = issued.pop_front() else {
                break;
            };
            self.check_wanted()?;
            let waited = Instant::now();
            let (group, mut fetched) = self.wait_for(&mut stream, read)?;
            io_wait += waited.elapsed();
            if issued.is_empty() && next == items.len() {
                // Nothing left to read: the disk is the next run's while
                // this one checks and folds its last pages.
                drop(lane.take());
            }
            let (folded, cut) = self.fold_group(folder, group_at, group, &mut fetched)?;
            bytes_read += folded;
            if cut.is_some() {
                return Ok((bytes_read, io_wait, cut));
            }
            // The pages went back to the device's pool as they were folded:
            // the next read issued takes that buffer again.
            folder.check_memory()?;
            // Counted per group, not per page: the tuner is behind a lock
            // every run on the node shares.
            let now = tuner.record(group.iter().map(|item| item.span.len() as u64).sum());
            if now != setting {
                data.apply(now);
                if let Some((_, stream)) = stream.as_mut() {
                    stream
                        .set_depth(now.depth)
                        .map_err(|e| data.storage(format!("reading pages: {e}")))?;
                }
                setting = now;
            }
        }
        Ok((bytes_read, io_wait, None))
    }

    /// Issues reads from item `*next` on until as many are out as the
    /// setting has buffers (the one to fold next included), `depth` of them
    /// at the disk; each read is as large as one device request may be.
    fn issue_reads<'s>(
        &self,
        stream: &mut Option<RunStream<'s>>,
        issued: &mut VecDeque<(usize, Issued<'s>)>,
        next: &mut usize,
        setting: ReadSetting,
    ) -> Result<(), ComputeError>
    where
        Self: 's,
    {
        let (data, items) = (self.data, self.items);
        let max_read_pages = data.device.max_read_pages() as usize;
        while *next < items.len() && issued.len() < setting.buffers() {
            let len = group_len(&items[*next..], max_read_pages);
            let group = &items[*next..*next + len];
            let read = match stream.as_mut() {
                Some((m, stream)) if len > 1 => data.issue_on_stream(m, stream, group)?,
                _ => Issued::Shared(data.issue_shared(group)),
            };
            issued.push_back((*next, read));
            *next += len;
        }
        Ok(())
    }

    /// Waits for an issued read's pages (blocking this thread).
    fn wait_for<'s>(
        &self,
        stream: &mut Option<RunStream<'s>>,
        read: Issued<'s>,
    ) -> Result<FetchedGroup<'s>, ComputeError>
    where
        Self: 's,
    {
        let (handle, data) = (self.handle, self.data);
        match read {
            Issued::Shared(mut read) => {
                handle.block_on(read.as_mut());
                read.as_mut()
                    .take_output()
                    .ok_or_else(|| data.storage("a read finished without its pages".into()))
            }
            Issued::Stream {
                group,
                located,
                on_stream,
            } => {
                let Some((m, stream)) = stream.as_mut() else {
                    return Err(data.storage("a stream read without its stream".into()));
                };
                let reads = located
                    .device_reads()
                    .zip(on_stream)
                    .map(|((first, count), on_stream)| {
                        if on_stream {
                            stream.take_next()
                        } else {
                            handle.block_on(data.device.fetch_pages(first, count))
                        }
                    })
                    .collect();
                Ok((group, Fetched::Run(located.fetched(&m.space, reads))))
            }
        }
    }

    /// Checks and folds the pages of a group whose first item is item
    /// `group_at` of the run; returns the bytes folded and, when the parts
    /// grew past the run's piece bytes, the first item not folded.
    fn fold_group(
        &self,
        folder: &mut Folder<'_>,
        group_at: usize,
        group: &[PageItem],
        fetched: &mut Fetched<'_>,
    ) -> Result<(u64, Option<usize>), ComputeError> {
        let (handle, data, items) = (self.handle, self.data, self.items);
        let mut bytes_read = 0u64;
        // Each page is checked right before it is folded, so the kernel
        // reads it from the cache the check brought it into (the scan
        // thread's time per 2 MiB read went from 0.41 to 0.34-0.37 ms
        // with the one-pass check, `docs/benchmarks.md`).
        for (k, item) in group.iter().enumerate() {
            let page = resolve(handle, fetched.take(data, k, item))?;
            data.check_header(item, &page)?;
            let Some(bytes) = page.data.get(item.span.clone()) else {
                return Err(data.storage(format!(
                    "a page of {} bytes has no bytes {:?}",
                    page.data.len(),
                    item.span
                )));
            };
            // An empty span (a header page read for its check) opens
            // no part: a run that stops there answers no part for it.
            if !bytes.is_empty() {
                folder.fold(item.segment, bytes)?;
            }
            bytes_read += bytes.len() as u64;
            let folded = group_at + k + 1;
            if let Some(next) = items.get(folded) {
                // Cut between segments when it can: a run resumed
                // inside a chunk reads the chunk's first page again to
                // check it.
                let between = next.segment != item.segment;
                if folder.past_piece(if between { 1 } else { 2 }) {
                    return Ok((bytes_read, Some(folded)));
                }
            }
        }
        Ok((bytes_read, None))
    }
}

/// A run's own ring of reads, with the managed storage it reads through.
type RunStream<'a> = (&'a ManagedData, quarry_device::StreamReader<'a>);

/// The kernel's side of a run: folds the segments' bytes in order, one
/// part per stretch of contiguous segments of one target.
struct Folder<'a> {
    kernel: &'a dyn ScanKernel,
    segments: &'a [Segment],
    /// The state the previous range of the target ended with, for a
    /// kernel that folds ranges in order.
    carry: Option<Part>,
    memory_bytes: u64,
    /// See [`LocalRun::piece_bytes`].
    piece_bytes: u64,
    /// Bytes folded since the parts' size was last measured.
    unmeasured_bytes: u64,
    parts: Vec<(u32, Part)>,
    /// Memory the finished parts hold.
    held_bytes: usize,
    /// The part being folded: its target, where it ends, the part.
    current: Option<(u32, u64, Part)>,
    /// Segments opened so far.
    started: usize,
    /// Bytes folded per segment: each must get exactly its length, or the
    /// parts would describe other ranges than the entry node expects.
    folded: Vec<u64>,
}

impl<'a> Folder<'a> {
    fn new(
        kernel: &'a dyn ScanKernel,
        segments: &'a [Segment],
        carry: Option<Part>,
        memory_bytes: u64,
    ) -> Folder<'a> {
        Folder {
            kernel,
            segments,
            carry,
            memory_bytes,
            piece_bytes: 0,
            unmeasured_bytes: 0,
            parts: Vec::new(),
            held_bytes: 0,
            current: None,
            started: 0,
            folded: vec![0; segments.len()],
        }
    }

    /// Opens the segments up to `segment`: a segment that does not go on
    /// from the part being folded starts a part of its own.
    fn reach(&mut self, segment: usize) -> Result<(), ComputeError> {
        if segment >= self.segments.len() {
            return Err(ComputeError::BadRequest(format!("no segment {segment}")));
        }
        while self.started <= segment {
            let seg = &self.segments[self.started];
            let contiguous = matches!(&self.current,
                Some((t, end, _)) if *t == seg.target && *end == seg.offset);
            if !contiguous {
                if let Some((t, _, p)) = self.current.take() {
                    self.held_bytes += p.size_bytes();
                    self.parts.push((t, p));
                }
                let first = self
                    .carry
                    .take()
                    .unwrap_or_else(|| self.kernel.empty(seg.offset));
                self.current = Some((seg.target, seg.offset, first));
            }
            self.started += 1;
        }
        Ok(())
    }

    /// Folds the next bytes of `segment`.
    fn fold(&mut self, segment: usize, bytes: &[u8]) -> Result<(), ComputeError> {
        self.reach(segment)?;
        let Some((target, end, part)) = self.current.take() else {
            return Err(ComputeError::BadRequest("no part to fold into".into()));
        };
        let part = self.kernel.fold(part, bytes)?;
        self.folded[segment] += bytes.len() as u64;
        self.unmeasured_bytes += bytes.len() as u64;
        self.current = Some((target, end + bytes.len() as u64, part));
        Ok(())
    }

    /// Fails the run once its parts outgrow the command's memory limit.
    fn check_memory(&self) -> Result<(), ComputeError> {
        let current = self.current.as_ref().map_or(0, |(_, _, p)| p.size_bytes());
        if (self.held_bytes + current) as u64 > self.memory_bytes {
            return Err(ComputeError::Limit {
                what: "memory",
                detail: format!(
                    "partial results grew past {} bytes (a line or word longer than that, or \
                     too many matches or distinct words)",
                    self.memory_bytes
                ),
            });
        }
        Ok(())
    }

    /// Whether the parts hold more than `times` the run's piece bytes.
    /// Measured once a sixteenth of a piece was folded since the last
    /// time: a part's size takes a walk over its lines, which after every
    /// page would cost a run time quadratic in its lines.
    fn past_piece(&mut self, times: u64) -> bool {
        if self.piece_bytes == 0 || self.unmeasured_bytes < (self.piece_bytes / 16).max(1) {
            return false;
        }
        self.unmeasured_bytes = 0;
        let current = self.current.as_ref().map_or(0, |(_, _, p)| p.size_bytes());
        (self.held_bytes + current) as u64 > self.piece_bytes.saturating_mul(times)
    }

    /// The parts, once every segment got all its bytes, or with `stop`,
    /// every segment before segment `stop` and the bytes of `stop` folded.
    fn finish(mut self, stop: Option<usize>) -> Result<Vec<(u32, Part)>, ComputeError> {
        let whole = stop.unwrap_or(self.segments.len());
        // Segments without bytes before the end still get their parts.
        if let Some(last) = whole.checked_sub(1) {
            self.reach(last)?;
        }
        self.check_memory()?;
        if let Some((t, _, p)) = self.current.take() {
            self.parts.push((t, p));
        }
        for (i, (seg, got)) in self.segments.iter().zip(&self.folded).enumerate() {
            let short = *got != seg.source.len_bytes() && i < whole;
            if short || *got > seg.source.len_bytes() {
                return Err(ComputeError::BadRequest(format!(
                    "segment {i} was folded with {got} of its {} bytes",
                    seg.source.len_bytes()
                )));
            }
        }
        Ok(self.parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::KernelSpec;
    use quarry_device::{BackendKind, DeviceConfig};

    const PATTERN: [u8; 8] = *b"needle!!";

    fn fgrep8() -> KernelSpec {
        KernelSpec::Fgrep8 { pattern: PATTERN }
    }

    fn page(n: u32) -> PageAddr {
        PageAddr {
            bus: 0,
            chip: 0,
            block: 0,
            page: n,
        }
    }

    fn segment(target: u32, offset: u64, n: u32, len: u32) -> Segment {
        Segment {
            target,
            offset,
            source: Source::DevicePage {
                page: page(n),
                start: 0,
                end: len,
            },
        }
    }

    /// A node with a mem device whose first `pages` pages hold the pattern
    /// at a few places each; returns it and the pages' bytes.
    async fn node_with_pages(pages: u32) -> (Arc<LocalData>, Vec<Bytes>) {
        let config = DeviceConfig {
            backend: BackendKind::Mem,
            ..DeviceConfig::default()
        };
        let device = Device::open(&config, std::path::Path::new("unused")).expect("a mem device");
        let size = device.geometry().page_size_bytes as usize;
        let mut written = Vec::new();
        for n in 0..pages {
            let mut bytes = vec![b'.'; size];
            for at in (0..=n as usize).map(|k| 100 + k * 999) {
                bytes[at..at + 8].copy_from_slice(&PATTERN);
            }
            // Cut across the page's end, so only a join of parts finds it.
            bytes[size - 3..].copy_from_slice(&PATTERN[..3]);
            let bytes = Bytes::from(bytes);
            device
                .program_page(page(n), bytes.clone(), Bytes::new())
                .await
                .expect("programming a page");
            written.push(bytes);
        }
        (Arc::new(LocalData::new(0, Arc::new(device), None)), written)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_folds_one_part_per_contiguous_stretch_of_a_target() {
        let (data, pages) = node_with_pages(3).await;
        let size = pages[0].len() as u32;
        let tuner = Arc::new(ReadTuner::new());
        // Target 0: pages 0 and 1 back to back; target 1: page 2.
        let segments = vec![
            segment(0, 0, 0, size),
            segment(0, u64::from(size), 1, size),
            segment(1, 0, 2, size),
        ];
        let run = LocalRun {
            kernel: fgrep8(),
            segments,
            carry: None,
            time_left_ms: 60_000,
            memory_bytes: 1 << 20,
            piece_bytes: 0,
        };
        let answer = run_local(&data, &tuner, run).await.expect("the run");
        assert_eq!(answer.resume, None);
        assert_eq!(answer.bytes_scanned, 3 * u64::from(size));
        let kernel = compile(&fgrep8()).expect("fgrep8");
        let fold = |offset: u64, bytes: &[&Bytes]| {
            bytes.iter().fold(kernel.empty(offset), |part, b| {
                kernel.fold(part, b).expect("folding")
            })
        };
        assert_eq!(
            answer.parts,
            vec![
                (0, fold(0, &[&pages[0], &pages[1]])),
                (1, fold(0, &[&pages[2]])),
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_stops_at_its_next_read_once_nobody_waits_for_it() {
        let (data, pages) = node_with_pages(2).await;
        let size = pages[0].len() as u32;
        let segments = vec![segment(0, 0, 0, size), segment(0, u64::from(size), 1, size)];
        let (items, _) = data.plan(&segments).await.expect("a plan");
        let handle = tokio::runtime::Handle::current();
        let read = move |stopped: bool| {
            let kernel = compile(&fgrep8()).expect("fgrep8");
            let mut folder = Folder::new(kernel.as_ref(), &segments, None, 1 << 20);
            let stop = AtomicBool::new(stopped);
            let reader = RunReader {
                handle: &handle,
                data: &data,
                tuner: &ReadTuner::new(),
                items: &items,
                deadline: Instant::now() + Duration::from_secs(60),
                stop: &stop,
            };
            let lane = Arc::new(tokio::sync::Semaphore::new(1))
                .try_acquire_owned()
                .expect("a free lane");
            reader
                .stream_and_fold(&mut folder, lane)
                .map(|(bytes, _, cut)| {
                    assert_eq!(cut, None, "a run without a piece bound goes to its end");
                    bytes
                })
        };
        let (going, stopped) = tokio::task::spawn_blocking(move || (read(false), read(true)))
            .await
            .expect("the reader's thread");
        assert_eq!(going.expect("a run nobody stopped"), 2 * u64::from(size));
        let err = stopped.expect_err("a stopped run reads nothing");
        assert!(err.to_string().contains("stopped waiting"), "{err}");
    }

    /// A run whose parts outgrow its piece bytes answers after a page with
    /// where it stopped; running the rest, again and again, gives parts
    /// that join into the part of the whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_answers_in_pieces_that_join_into_the_whole() {
        let (data, pages) = node_with_pages(4).await;
        let size = pages[0].len() as u32;
        let tuner = Arc::new(ReadTuner::new());
        let kernel = compile(&fgrep8()).expect("fgrep8");
        let mut rest: Vec<Segment> = (0..4u32)
            .map(|n| segment(0, u64::from(n * size), n, size))
            .collect();
        // Start mid-page: the first piece is a segment's tail.
        rest[0] = rest[0].split_at(50).1;
        let mut joined: Option<Part> = None;
        let mut answers = 0;
        while !rest.is_empty() {
            let run = LocalRun {
                kernel: fgrep8(),
                segments: rest.clone(),
                carry: None,
                time_left_ms: 60_000,
                memory_bytes: 1 << 20,
                piece_bytes: 1,
            };
            let answer = run_local(&data, &tuner, run).await.expect("the run");
            answers += 1;
            assert_eq!(answer.parts.len(), 1, "one page, one part");
            for (_, part) in answer.parts {
                joined = Some(match joined.take() {
                    None => part,
                    Some(left) => kernel.combine(left, part).expect("joining"),
                });
            }
            rest = match answer.resume {
                None => Vec::new(),
                Some(Resume {
                    segment,
                    bytes_done,
                }) => {
                    let i = segment as usize;
                    let mut next = vec![rest[i].split_at(bytes_done).1];
                    next.extend_from_slice(&rest[i + 1..]);
                    next
                }
            };
        }
        assert_eq!(answers, 4, "a piece per page");
        let whole = pages
            .iter()
            .enumerate()
            .fold(kernel.empty(50), |part, (i, b)| {
                let from = if i == 0 { 50 } else { 0 };
                kernel.fold(part, &b[from..]).expect("folding")
            });
        assert_eq!(joined, Some(whole));
    }

    #[test]
    fn a_segment_short_of_its_bytes_fails_the_run() {
        let kernel = compile(&fgrep8()).expect("fgrep8");
        let segments = vec![segment(0, 0, 0, 100), segment(0, 100, 1, 0)];
        let mut folder = Folder::new(kernel.as_ref(), &segments, None, 1 << 20);
        folder.fold(0, &[b'x'; 60]).expect("folding");
        let err = folder.finish(None).expect_err("40 bytes never came");
        assert!(
            err.to_string().contains("folded with 60 of its 100"),
            "{err}"
        );
        // A segment past the run's is refused, not indexed.
        let mut folder = Folder::new(kernel.as_ref(), &segments, None, 1 << 20);
        assert!(folder.fold(2, b"x").is_err());
    }
}
