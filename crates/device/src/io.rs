//! I/O engines for the backing file.
//!
//! The fast engine is an io_uring driven from the caller's own tokio runtime:
//! the task that asks for a page pushes the SQE and enters the kernel itself,
//! and the ring's completions signal an eventfd that the runtime's reactor
//! watches, so one reaper task on the same threads hands each result back.
//! No thread of our own sits between the network and the disk: a read costs
//! the disk's time plus one reactor wake-up, as it does for `fio`. (A
//! dedicated ring thread cost two cross-thread wake-ups per I/O, which
//! measured at a third of fio's IOPS at queue depth 32.)
//!
//! Without a runtime at open time, or without io_uring, a small pool of
//! blocking pread/pwrite threads does the work instead (logged).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

use io_uring::{opcode, types, IoUring};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::oneshot;

use crate::buf::PooledBuf;

/// Ring size: the most requests in the kernel at once.
const RING_ENTRIES: u32 = 256;
/// Requests waiting for a free ring entry; beyond this a request fails with
/// "I/O queue full" instead of queueing without bound.
const MAX_BACKLOG: usize = 16 * 1024;
/// Threads of the fallback engine.
const FALLBACK_THREADS: usize = 4;

pub(crate) enum IoKind {
    Read,
    Write,
}

pub(crate) struct IoReq {
    pub kind: IoKind,
    pub offset: u64,
    pub buf: PooledBuf,
    pub reply: oneshot::Sender<(PooledBuf, io::Result<()>)>,
}

impl IoReq {
    fn fail(self, why: &str) {
        let _ = self
            .reply
            .send((self.buf, Err(io::Error::other(why.to_string()))));
    }
}

enum Engine {
    Uring(Arc<Reactor>),
    Threads {
        tx: Option<crossbeam_channel::Sender<IoReq>>,
        threads: Vec<JoinHandle<()>>,
    },
}

/// Handle to the I/O engine of one backing file.
pub(crate) struct IoEngine {
    engine: Engine,
    /// What is in use, for logs and `DeviceInfo`.
    pub(crate) name: &'static str,
}

impl IoEngine {
    /// Starts the io_uring engine on the current tokio runtime, or the thread
    /// pool when there is no runtime or io_uring cannot be set up (logged).
    pub(crate) fn start(file: Arc<File>, prefer_uring: bool) -> io::Result<IoEngine> {
        if prefer_uring {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => match Reactor::start(Arc::clone(&file), &runtime) {
                    Ok(reactor) => {
                        return Ok(IoEngine {
                            engine: Engine::Uring(reactor),
                            name: "io_uring",
                        })
                    }
                    Err(e) => tracing::warn!(
                        "io_uring unavailable ({e}); using {FALLBACK_THREADS} blocking I/O threads"
                    ),
                },
                Err(_) => tracing::debug!(
                    "device opened outside a tokio runtime; using {FALLBACK_THREADS} blocking I/O threads"
                ),
            }
        }
        let (tx, rx) = crossbeam_channel::bounded::<IoReq>(MAX_BACKLOG);
        let mut threads = Vec::new();
        for i in 0..FALLBACK_THREADS {
            let rx = rx.clone();
            let file = Arc::clone(&file);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("quarry-io-{i}"))
                    .spawn(move || {
                        while let Ok(mut req) = rx.recv() {
                            let res = match req.kind {
                                IoKind::Read => {
                                    file.read_exact_at(req.buf.buf_mut().as_mut_slice(), req.offset)
                                }
                                IoKind::Write => {
                                    file.write_all_at(req.buf.buf().as_slice(), req.offset)
                                }
                            };
                            let _ = req.reply.send((req.buf, res));
                        }
                    })?,
            );
        }
        Ok(IoEngine {
            engine: Engine::Threads {
                tx: Some(tx),
                threads,
            },
            name: "threads",
        })
    }

    /// Queues a read of `buf.len()` bytes at `offset`; await the result with
    /// [`Pending::wait`] (no borrow of the engine is held meanwhile).
    pub(crate) fn submit_read(&self, offset: u64, buf: PooledBuf) -> Pending {
        self.start_op(IoKind::Read, offset, buf)
    }

    /// Queues a write of `buf` at `offset`.
    pub(crate) fn submit_write(&self, offset: u64, buf: PooledBuf) -> Pending {
        self.start_op(IoKind::Write, offset, buf)
    }

    fn start_op(&self, kind: IoKind, offset: u64, buf: PooledBuf) -> Pending {
        let (reply, rx) = oneshot::channel();
        let req = IoReq {
            kind,
            offset,
            buf,
            reply,
        };
        let submitted = match &self.engine {
            Engine::Uring(reactor) => reactor.submit(req),
            Engine::Threads { tx: Some(tx), .. } => tx.try_send(req).map_err(|e| e.into_inner()),
            Engine::Threads { tx: None, .. } => Err(req),
        };
        match submitted {
            Ok(()) => Pending(Ok(rx)),
            Err(req) => Pending(Err(req.buf)),
        }
    }

    /// Keeps at most `bytes` of reads at the disk at once (one read always
    /// may go): the rest wait in order, and each completion starts the next
    /// at once, from the reaper, as `fio` does. The blocking engine has no
    /// queue of its own to shape and ignores it.
    pub(crate) fn set_read_budget_bytes(&self, bytes: usize) {
        if let Engine::Uring(reactor) = &self.engine {
            reactor.set_read_budget_bytes(bytes);
        }
    }

    /// Finishes what is in flight and stops; later requests fail.
    pub(crate) fn stop(&mut self) {
        match &mut self.engine {
            Engine::Uring(reactor) => reactor.stop(),
            Engine::Threads { tx, threads } => {
                tx.take();
                for t in threads.drain(..) {
                    let _ = t.join();
                }
            }
        }
    }
}

impl Drop for IoEngine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An I/O request on its way.
pub(crate) struct Pending(Result<oneshot::Receiver<(PooledBuf, io::Result<()>)>, PooledBuf>);

impl Pending {
    /// Waits for the request; the buffer comes back unless the engine died.
    pub(crate) async fn wait(self) -> (Option<PooledBuf>, io::Result<()>) {
        let stopped = || io::Error::other("device I/O engine stopped");
        match self.0 {
            Err(buf) => (Some(buf), Err(stopped())),
            Ok(rx) => match rx.await {
                Ok((buf, res)) => (Some(buf), res),
                Err(_) => (None, Err(stopped())),
            },
        }
    }
}

/// One request in the kernel: `done` bytes of it have moved so far (a short
/// transfer is resubmitted for the rest).
struct InFlight {
    req: IoReq,
    done: usize,
}

/// The ring and the requests it owns. Buffers in `slots` belong to the kernel
/// until their completion is reaped, so they are never dropped before that.
struct Ring {
    ring: IoUring,
    fd: types::Fd,
    /// Keeps `fd` open for as long as requests may be in the kernel.
    _file: Arc<File>,
    /// Completions taken off the ring, reused so reaping allocates nothing.
    reaped: Vec<(u64, i32)>,
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    backlog: VecDeque<IoReq>,
    /// Reads waiting for the read budget, in the order they came.
    read_backlog: VecDeque<IoReq>,
    /// Bytes of reads in the kernel.
    read_bytes_in_kernel: usize,
    /// At most this many bytes of reads in the kernel at once (one read
    /// always may): this disk serves a few large requests faster than many.
    read_budget_bytes: usize,
    stopped: bool,
}

impl Ring {
    fn in_kernel(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Puts `req` on the ring (not yet submitted), or in the backlog when the
    /// ring is full, or (a read) in the read backlog when the read budget is.
    fn enqueue(&mut self, req: IoReq) -> Result<(), IoReq> {
        if self.stopped {
            return Err(req);
        }
        // Reads wait behind the budget, and behind the reads already
        // waiting (in order).
        let waits = matches!(req.kind, IoKind::Read)
            && (!self.read_backlog.is_empty() || !self.read_fits(req.buf.buf().len()));
        if !waits {
            return self.enqueue_now(req);
        }
        if self.read_backlog.len() >= MAX_BACKLOG {
            return Err(req);
        }
        self.read_backlog.push_back(req);
        Ok(())
    }

    /// [`enqueue`](Self::enqueue) past the read budget.
    fn enqueue_now(&mut self, req: IoReq) -> Result<(), IoReq> {
        let Some(idx) = self.free.pop() else {
            if self.backlog.len() >= MAX_BACKLOG {
                return Err(req);
            }
            self.backlog.push_back(req);
            return Ok(());
        };
        debug_assert!(self.slots[idx].is_none(), "free slot {idx} is occupied");
        if matches!(req.kind, IoKind::Read) {
            self.read_bytes_in_kernel += req.buf.buf().len();
        }
        self.slots[idx] = Some(InFlight { req, done: 0 });
        self.push_sqe(idx);
        Ok(())
    }

    /// Pushes the SQE for (the rest of) the request in `slots[idx]`. The ring
    /// has as many SQ entries as slots, and every pushed SQE is submitted
    /// before the lock is released, so the queue always has room.
    fn push_sqe(&mut self, idx: usize) {
        let Some(f) = self.slots[idx].as_mut() else {
            return;
        };
        let len = f.req.buf.buf().len();
        debug_assert!(f.done < len, "resubmitting a finished transfer");
        let offset = f.req.offset + f.done as u64;
        let remaining = u32::try_from(len - f.done).unwrap_or(u32::MAX);
        // SAFETY: `done < len`, so the pointer stays inside the buffer.
        let ptr = unsafe { f.req.buf.buf_mut().as_mut_ptr().add(f.done) };
        let entry = match f.req.kind {
            IoKind::Read => opcode::Read::new(self.fd, ptr, remaining)
                .offset(offset)
                .build(),
            IoKind::Write => opcode::Write::new(self.fd, ptr, remaining)
                .offset(offset)
                .build(),
        }
        .user_data(idx as u64);
        // SAFETY: the buffer is owned by slots[idx] until its completion is
        // reaped, so the pointer stays valid and unaliased while the kernel
        // uses it.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        assert!(
            pushed.is_ok(),
            "io_uring submission queue full with a free slot"
        );
    }

    /// Enters the kernel with whatever SQEs are queued.
    fn submit(&mut self) -> io::Result<()> {
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether a read of `len` bytes may enter the kernel now: within the
    /// read budget, or alone (one read always may).
    fn read_fits(&self, len: usize) -> bool {
        self.read_bytes_in_kernel == 0 || self.read_bytes_in_kernel + len <= self.read_budget_bytes
    }

    /// Puts the reads waiting for the read budget on the ring, in order,
    /// while it has room for them (not yet submitted).
    fn start_reads(&mut self, done: &mut Vec<(IoReq, io::Result<()>)>) {
        while let Some(req) = self.read_backlog.front() {
            if !self.read_fits(req.buf.buf().len()) {
                break;
            }
            let Some(req) = self.read_backlog.pop_front() else {
                break;
            };
            if let Err(req) = self.enqueue_now(req) {
                done.push((req, Err(io::Error::other("device I/O engine stopped"))));
            }
        }
    }

    /// Takes every completion off the ring; finished requests go into `done`.
    fn reap(&mut self, done: &mut Vec<(IoReq, io::Result<()>)>) {
        let mut reaped = std::mem::take(&mut self.reaped);
        reaped.clear();
        reaped.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(token, res) in &reaped {
            let idx = token as usize;
            let Some(f) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
                tracing::error!(token, "io_uring completion for no request");
                continue;
            };
            let len = f.req.buf.buf().len();
            let outcome = if res < 0 {
                Some(Err(io::Error::from_raw_os_error(-res)))
            } else if res == 0 {
                Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "short transfer at end of file",
                )))
            } else {
                f.done += res as usize;
                (f.done >= len).then_some(Ok(()))
            };
            match outcome {
                None => self.push_sqe(idx),
                Some(result) => {
                    if let Some(f) = self.slots[idx].take() {
                        self.free.push(idx);
                        if matches!(f.req.kind, IoKind::Read) {
                            self.read_bytes_in_kernel -= f.req.buf.buf().len();
                        }
                        done.push((f.req, result));
                    }
                }
            }
        }
        self.reaped = reaped;
        self.start_reads(done);
        while !self.free.is_empty() {
            let Some(req) = self.backlog.pop_front() else {
                break;
            };
            if let Err(req) = self.enqueue(req) {
                done.push((req, Err(io::Error::other("device I/O engine stopped"))));
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Only after io_uring itself failed can requests still be in the
        // kernel here: leak their buffers rather than free memory the kernel
        // may still write.
        for f in self.slots.drain(..).flatten() {
            tracing::error!("leaking a buffer still owned by the kernel");
            std::mem::forget(f);
        }
    }
}

/// An io_uring whose completions are reaped by a task on a tokio runtime.
struct Reactor {
    ring: Mutex<Ring>,
    /// The reaper; once it has ended (its runtime shut down) requests fail
    /// instead of waiting for completions nobody would deliver.
    /// Set once at start; a `OnceLock` so checking it costs no lock per request.
    reaper: OnceLock<tokio::task::JoinHandle<()>>,
}

impl Reactor {
    fn start(file: Arc<File>, runtime: &tokio::runtime::Handle) -> io::Result<Arc<Reactor>> {
        let ring = IoUring::new(RING_ENTRIES)?;
        // SAFETY: plain syscall creating a new fd; checked below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh fd that nothing else owns.
        let efd = unsafe { OwnedFd::from_raw_fd(raw) };
        ring.submitter().register_eventfd(efd.as_raw_fd())?;
        let entries = RING_ENTRIES as usize;
        let reactor = Arc::new(Reactor {
            ring: Mutex::new(Ring {
                fd: types::Fd(file.as_raw_fd()),
                _file: file,
                ring,
                slots: (0..entries).map(|_| None).collect(),
                free: (0..entries).rev().collect(),
                backlog: VecDeque::new(),
                read_backlog: VecDeque::new(),
                read_bytes_in_kernel: 0,
                read_budget_bytes: usize::MAX,
                reaped: Vec::with_capacity(entries),
                stopped: false,
            }),
            reaper: OnceLock::new(),
        });
        // Registering with the reactor needs the runtime's context.
        let efd = {
            let _enter = runtime.enter();
            // SAFETY: the OwnedFd is a valid eventfd that the AsyncFd owns from
            // here on; nothing else closes or replaces it.
            unsafe { AsyncFd::register_with_interest(efd, Interest::READABLE) }
                .map_err(io::Error::from)?
        };
        let task = runtime.spawn(reap_loop(Arc::clone(&reactor), efd));
        let _ = reactor.reaper.set(task);
        Ok(reactor)
    }

    fn submit(&self, req: IoReq) -> Result<(), IoReq> {
        if self.reaper.get().is_none_or(|t| t.is_finished()) {
            return Err(req);
        }
        let mut ring = lock(&self.ring);
        ring.enqueue(req)?;
        if let Err(e) = ring.submit() {
            // The SQE stays queued and goes in with the next submission.
            tracing::warn!("io_uring submit failed: {e}");
        }
        Ok(())
    }

    fn set_read_budget_bytes(&self, bytes: usize) {
        let mut done = Vec::new();
        {
            let mut ring = lock(&self.ring);
            if ring.read_budget_bytes == bytes {
                return;
            }
            ring.read_budget_bytes = bytes;
            ring.start_reads(&mut done);
            if let Err(e) = ring.submit() {
                tracing::warn!("io_uring submit failed: {e}");
            }
        }
        reply_all(done);
    }

    /// Waits (blocking) for everything in the kernel, fails the backlog, and
    /// ends the reaper.
    fn stop(&self) {
        let mut done = Vec::new();
        {
            let mut ring = lock(&self.ring);
            ring.stopped = true;
            let waiting: Vec<IoReq> = ring.backlog.drain(..).collect();
            let reads: Vec<IoReq> = ring.read_backlog.drain(..).collect();
            for req in waiting.into_iter().chain(reads) {
                req.fail("device I/O engine stopped");
            }
            while ring.in_kernel() > 0 {
                match ring.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) => {
                        // Ring's Drop leaks what the kernel still owns.
                        tracing::error!("io_uring wait failed at stop: {e}");
                        break;
                    }
                }
                ring.reap(&mut done);
            }
        }
        reply_all(done);
        if let Some(task) = self.reaper.get() {
            task.abort();
        }
    }
}

async fn reap_loop(reactor: Arc<Reactor>, efd: AsyncFd<OwnedFd>) {
    let mut done = Vec::new();
    loop {
        let mut ready = match efd.readable().await {
            Ok(ready) => ready,
            Err(e) => {
                tracing::error!("device I/O reaper stopped: {e}");
                return;
            }
        };
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from an eventfd we own.
        let n = unsafe {
            libc::read(
                efd.get_ref().as_raw_fd(),
                (&mut count as *mut u64).cast(),
                8,
            )
        };
        if n < 0 {
            // EAGAIN: drained already; wait for the next signal.
            ready.clear_ready();
        }
        // Reading the eventfd before draining the ring means a completion
        // posted after the drain signals it again: none is missed.
        {
            let mut ring = lock(&reactor.ring);
            ring.reap(&mut done);
            if !done.is_empty() {
                if let Err(e) = ring.submit() {
                    tracing::warn!("io_uring submit failed: {e}");
                }
            }
        }
        reply_all(done.drain(..));
    }
}

fn reply_all(done: impl IntoIterator<Item = (IoReq, io::Result<()>)>) {
    for (req, result) in done {
        let _ = req.reply.send((req.buf, result));
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
