//! I/O engines for the backing file: an io_uring thread (many requests in
//! flight, batched submissions) or, when io_uring is unavailable, a small pool
//! of blocking pread/pwrite threads.
//!
//! The io_uring thread keeps a read of an eventfd outstanding on the ring, so
//! one `submit_and_wait` sleeps on both completions and new work. Producers
//! write the eventfd only when the thread has said it is about to sleep (a
//! flag checked with SeqCst on both sides), so a busy device pays no syscall
//! per request to wake the thread.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use io_uring::{opcode, types, IoUring};
use tokio::sync::oneshot;

use crate::buf::PooledBuf;

/// Ring size; also the most requests the ring thread keeps in the kernel.
const RING_ENTRIES: u32 = 256;
/// Threads of the fallback engine.
const FALLBACK_THREADS: usize = 4;
const EVENTFD_TOKEN: u64 = u64::MAX;

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

enum Engine {
    Uring { wake: Arc<Wake> },
    Threads,
}

struct Wake {
    efd: RawFd,
    sleeping: AtomicBool,
}

impl Wake {
    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own (closed
        // only in Drop of IoEngine after the thread has exited).
        unsafe {
            libc::write(self.efd, (&one as *const u64).cast(), 8);
        }
    }
}

/// Handle to the I/O threads.
pub(crate) struct IoEngine {
    tx: Option<Sender<IoReq>>,
    engine: Engine,
    threads: Vec<JoinHandle<()>>,
    /// What is in use, for logs and `DeviceInfo`.
    pub(crate) name: &'static str,
}

impl IoEngine {
    /// Starts an io_uring engine on `file`, or the thread pool when io_uring
    /// cannot be set up (logged).
    pub(crate) fn start(file: Arc<File>, prefer_uring: bool) -> io::Result<IoEngine> {
        if prefer_uring {
            match Self::start_uring(Arc::clone(&file)) {
                Ok(e) => return Ok(e),
                Err(e) => tracing::warn!(
                    "io_uring unavailable ({e}); using {FALLBACK_THREADS} blocking I/O threads"
                ),
            }
        }
        let (tx, rx) = crossbeam_channel::unbounded::<IoReq>();
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
            tx: Some(tx),
            engine: Engine::Threads,
            threads,
            name: "threads",
        })
    }

    fn start_uring(file: Arc<File>) -> io::Result<IoEngine> {
        let ring = IoUring::new(RING_ENTRIES)?;
        // SAFETY: plain syscall creating a new fd; checked below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        let wake = Arc::new(Wake {
            efd,
            sleeping: AtomicBool::new(false),
        });
        let (tx, rx) = crossbeam_channel::unbounded::<IoReq>();
        let w = Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name("quarry-uring".into())
            .spawn(move || uring_thread(ring, file, rx, w))?;
        Ok(IoEngine {
            tx: Some(tx),
            engine: Engine::Uring { wake },
            threads: vec![thread],
            name: "io_uring",
        })
    }

    /// Queues a request; the reply arrives on `req.reply`.
    pub(crate) fn submit(&self, req: IoReq) -> Result<(), IoReq> {
        let Some(tx) = &self.tx else { return Err(req) };
        tx.send(req).map_err(|e| e.into_inner())?;
        if let Engine::Uring { wake } = &self.engine {
            if wake.sleeping.load(Ordering::SeqCst) && wake.sleeping.swap(false, Ordering::SeqCst) {
                wake.kick();
            }
        }
        Ok(())
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
        match self.submit(IoReq {
            kind,
            offset,
            buf,
            reply,
        }) {
            Ok(()) => Pending(Ok(rx)),
            Err(req) => Pending(Err(req.buf)),
        }
    }

    pub(crate) fn stop(&mut self) {
        self.tx.take();
        if let Engine::Uring { wake } = &self.engine {
            wake.kick();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for IoEngine {
    fn drop(&mut self) {
        self.stop();
        if let Engine::Uring { wake } = &self.engine {
            // SAFETY: the thread using the fd has been joined; closed once.
            unsafe {
                libc::close(wake.efd);
            }
        }
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

struct InFlight {
    req: IoReq,
    done: usize,
}

fn uring_thread(mut ring: IoUring, file: Arc<File>, rx: Receiver<IoReq>, wake: Arc<Wake>) {
    let fd = types::Fd(file.as_raw_fd());
    let mut slots: Vec<Option<InFlight>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut in_kernel = 0usize;
    // Leaked (8 bytes per device): the kernel may still own the pending
    // eventfd read when the thread exits, so the target must never be freed.
    let efd_buf: &'static mut u64 = Box::leak(Box::new(0u64));
    let mut efd_armed = false;
    let mut disconnected = false;
    let cap = RING_ENTRIES as usize - 1;

    // Pushes an SQE for the (remaining part of the) request in `slots[idx]`.
    let push = |ring: &mut IoUring, slots: &mut Vec<Option<InFlight>>, idx: usize| -> bool {
        let Some(f) = slots[idx].as_mut() else {
            return true;
        };
        let len = f.req.buf.buf().len();
        let off = f.req.offset + f.done as u64;
        let remaining = (len - f.done) as u32;
        let entry = match f.req.kind {
            // SAFETY (both arms): the buffer is owned by slots[idx] until its
            // completion is reaped, so the pointer stays valid and unaliased
            // while the kernel uses it.
            IoKind::Read => {
                let ptr = unsafe { f.req.buf.buf_mut().as_mut_ptr().add(f.done) };
                opcode::Read::new(fd, ptr, remaining).offset(off).build()
            }
            IoKind::Write => {
                let ptr = unsafe { f.req.buf.buf_mut().as_mut_ptr().add(f.done) };
                opcode::Write::new(fd, ptr, remaining).offset(off).build()
            }
        }
        .user_data(idx as u64);
        // SAFETY: see above; the entry's buffer outlives the operation.
        unsafe { ring.submission().push(&entry).is_ok() }
    };

    loop {
        // Arm the eventfd read.
        if !efd_armed && !disconnected {
            let e = opcode::Read::new(types::Fd(wake.efd), (efd_buf as *mut u64).cast(), 8)
                .build()
                .user_data(EVENTFD_TOKEN);
            // SAFETY: efd_buf is leaked, so it outlives the operation.
            if unsafe { ring.submission().push(&e).is_ok() } {
                efd_armed = true;
            }
        }
        // Take new work while the ring has room.
        while in_kernel < cap && !disconnected {
            match rx.try_recv() {
                Ok(req) => {
                    let idx = free.pop().unwrap_or_else(|| {
                        slots.push(None);
                        slots.len() - 1
                    });
                    slots[idx] = Some(InFlight { req, done: 0 });
                    if push(&mut ring, &mut slots, idx) {
                        in_kernel += 1;
                    } else {
                        // Submission queue full: submit and retry next round.
                        let _ = ring.submit();
                        if push(&mut ring, &mut slots, idx) {
                            in_kernel += 1;
                        } else if let Some(f) = slots[idx].take() {
                            free.push(idx);
                            let _ = f
                                .req
                                .reply
                                .send((f.req.buf, Err(io::Error::other("io_uring queue full"))));
                        }
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => disconnected = true,
            }
        }
        if disconnected && in_kernel == 0 {
            return;
        }
        // About to sleep: tell producers to kick, then re-check for work.
        wake.sleeping.store(true, Ordering::SeqCst);
        if !rx.is_empty() && in_kernel < cap {
            wake.sleeping.store(false, Ordering::SeqCst);
            let _ = ring.submit();
        } else {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    tracing::error!("io_uring submit failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            wake.sleeping.store(false, Ordering::SeqCst);
        }
        let completions: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (token, res) in completions {
            if token == EVENTFD_TOKEN {
                efd_armed = false;
                continue;
            }
            let idx = token as usize;
            let Some(f) = slots.get_mut(idx).and_then(Option::as_mut) else {
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
                if f.done >= len {
                    Some(Ok(()))
                } else {
                    None // short transfer: resubmit the rest
                }
            };
            match outcome {
                None => {
                    if !push(&mut ring, &mut slots, idx) {
                        let _ = ring.submit();
                        if !push(&mut ring, &mut slots, idx) {
                            if let Some(f) = slots[idx].take() {
                                in_kernel -= 1;
                                free.push(idx);
                                let _ = f.req.reply.send((
                                    f.req.buf,
                                    Err(io::Error::other("io_uring queue full")),
                                ));
                            }
                        }
                    }
                }
                Some(res) => {
                    in_kernel -= 1;
                    if let Some(f) = slots[idx].take() {
                        free.push(idx);
                        let _ = f.req.reply.send((f.req.buf, res));
                    }
                }
            }
        }
        if disconnected && in_kernel == 0 {
            return;
        }
    }
}
