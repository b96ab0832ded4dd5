//! [`StreamReader`]: runs of pages read in order by one thread through an
//! io_uring of its own, the thread submitting each read and waiting for it
//! in the kernel itself.
//!
//! Why not the device's shared engine: there a read's completion reaches
//! its reader through the runtime's reactor (an eventfd, a worker woken to
//! reap the ring, then the reader woken), and the next read held back for
//! the disk starts from that worker. On this VM the disk then took about
//! 0.8 ms per 2 MiB request where `fio` at one request in flight took 0.7:
//! a tenth of the disk lost between requests (`docs/benchmarks.md`, "The
//! reader's own ring"). io_uring posts a read's completion from the thread
//! that submitted it, so here the thread that waits is the one that
//! submitted: a completion wakes it directly, and it starts the next read
//! before it looks at the one that came in, as `fio` does.

use std::collections::VecDeque;
use std::io;
use std::os::unix::io::AsRawFd;

use io_uring::{opcode, types, IoUring};

use crate::device::{Device, FetchedPages, RunRead};
use crate::{DeviceError, PageAddr};

/// Most reads a stream holds at once (at the disk and waiting their turn).
pub const MAX_STREAM_READS: usize = 16;

/// A reader's own ring: one thread issues runs of pages in order and takes
/// them back in the same order, blocking in the kernel while it waits (for
/// a thread of its own, such as tokio's `spawn_blocking`, never a
/// runtime's worker). At most `depth` reads are at the disk; the others
/// wait in order and each completion starts the next. What comes back is
/// [`FetchedPages`], checked page by page as from
/// [`Device::fetch_pages`]. The `file` backend only
/// ([`Device::stream_reader`]).
///
/// The device's read budget does not cover these reads: the reader's own
/// bound does ([`MAX_STREAM_READS`]).
pub struct StreamReader<'a> {
    dev: &'a Device,
    ring: IoUring,
    fd: types::Fd,
    /// Reads in issue order; the first `at_disk` are in the kernel.
    reads: VecDeque<StreamRead<'a>>,
    at_disk: usize,
    depth: usize,
    /// Bumped per read: a completion names its read by it.
    next_tag: u64,
    /// Completions taken off the ring, kept to be reused.
    reaped: Vec<(u64, i32)>,
}

struct StreamRead<'a> {
    tag: u64,
    first: PageAddr,
    count: u32,
    run: RunRead<'a>,
    /// Bytes in so far (a short read is sent again for the rest).
    done_bytes: usize,
    /// Set once every byte is in, or the read failed.
    outcome: Option<io::Result<()>>,
}

impl Device {
    /// A [`StreamReader`] keeping at most `depth` reads at the disk (1 to
    /// [`MAX_STREAM_READS`]); `None` unless the backend is `file` and the
    /// kernel offers io_uring (read with
    /// [`fetch_pages`](Self::fetch_pages) then).
    pub fn stream_reader(&self, depth: usize) -> Option<StreamReader<'_>> {
        let file = self.backing_file()?;
        let ring = IoUring::new(MAX_STREAM_READS as u32).ok()?;
        Some(StreamReader {
            dev: self,
            ring,
            fd: types::Fd(file.as_raw_fd()),
            reads: VecDeque::new(),
            at_disk: 0,
            depth: depth.clamp(1, MAX_STREAM_READS),
            next_tag: 0,
            reaped: Vec::with_capacity(MAX_STREAM_READS),
        })
    }
}

impl<'a> StreamReader<'a> {
    /// Reads issued and not yet taken back.
    pub fn len(&self) -> usize {
        self.reads.len()
    }

    /// Whether no read is issued.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Keeps at most `depth` reads at the disk from now on (1 to
    /// [`MAX_STREAM_READS`]).
    pub fn set_depth(&mut self, depth: usize) -> Result<(), DeviceError> {
        self.depth = depth.clamp(1, MAX_STREAM_READS);
        self.start_waiting()
    }

    /// Issues the read of `count` pages from `first`, in one disk request:
    /// at the disk now if fewer than `depth` are, else after those before
    /// it. `Ok(false)` when the run cannot be read so (a page of it erased
    /// or still being programmed, or no pages): read it with
    /// [`Device::fetch_pages`], which answers for each page. An error for an
    /// address or count out of range, more than [`MAX_STREAM_READS`] reads
    /// held, a closed device, or a failed submission.
    pub fn issue(&mut self, first: PageAddr, count: u32) -> Result<bool, DeviceError> {
        if self.reads.len() >= MAX_STREAM_READS {
            return Err(DeviceError::QueueFull {
                limit: MAX_STREAM_READS,
            });
        }
        let Some(run) = self.dev.begin_run_read(first, count)? else {
            return Ok(false);
        };
        self.next_tag += 1;
        self.reads.push_back(StreamRead {
            tag: self.next_tag,
            first,
            count,
            run,
            done_bytes: 0,
            outcome: None,
        });
        self.start_waiting()?;
        Ok(true)
    }

    /// The oldest read, once all its bytes are in (blocking this thread
    /// until then); the next read waiting its turn goes to the disk first.
    /// Its pages are not yet checked. An error when nothing is issued, or
    /// for the read's I/O error.
    pub fn take_next(&mut self) -> Result<FetchedPages<'a>, DeviceError> {
        if self.reads.is_empty() {
            return Err(DeviceError::Io {
                context: "taking a read from a stream with none issued".into(),
                source: io::Error::from(io::ErrorKind::InvalidInput),
            });
        }
        while self.reads.front().is_some_and(|r| r.outcome.is_none()) {
            self.wait_and_reap()?;
        }
        let read = self.reads.pop_front().ok_or(DeviceError::Closed)?;
        // The oldest read is always at the disk: `depth` is at least 1.
        debug_assert!(self.at_disk >= 1, "the oldest read was never sent");
        self.at_disk -= 1;
        self.start_waiting()?;
        let StreamRead {
            first,
            count,
            run,
            outcome,
            ..
        } = read;
        let RunRead { span, buf, .. } = run;
        match outcome {
            Some(Ok(())) => Ok(self.dev.fetched_slots(first, count, buf, span.lead)),
            Some(Err(e)) => Err(DeviceError::Io {
                context: format!("reading pages {first}+{count}"),
                source: e,
            }),
            None => Err(DeviceError::Closed),
        }
    }

    /// Sends reads waiting their turn to the disk while fewer than `depth`
    /// are there.
    fn start_waiting(&mut self) -> Result<(), DeviceError> {
        let mut pushed = false;
        while self.at_disk < self.depth && self.at_disk < self.reads.len() {
            let index = self.at_disk;
            self.push(index);
            self.at_disk += 1;
            pushed = true;
        }
        if pushed {
            self.submit()?;
        }
        Ok(())
    }

    /// Puts (the rest of) read `index` on the submission queue.
    fn push(&mut self, index: usize) {
        let read = &mut self.reads[index];
        let len = read.run.span.len;
        debug_assert!(read.done_bytes < len, "sending a finished read again");
        // SAFETY: `done_bytes < len` and the buffer holds `len` bytes, so the
        // pointer stays inside it.
        let ptr = unsafe { read.run.buf.buf_mut().as_mut_ptr().add(read.done_bytes) };
        let entry = opcode::Read::new(
            self.fd,
            ptr,
            u32::try_from(len - read.done_bytes).unwrap_or(u32::MAX),
        )
        .offset(read.run.span.offset + read.done_bytes as u64)
        .build()
        .user_data(read.tag);
        // SAFETY: the buffer belongs to the read, which stays in `reads`
        // (and is not dropped: see `Drop`) until its completion is reaped,
        // so the kernel writes only into memory that lives and that nothing
        // else reads meanwhile.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        // The ring has MAX_STREAM_READS entries and at most that many reads
        // are held, each with at most one entry in the queue.
        assert!(pushed.is_ok(), "stream ring full with a read to send");
    }

    fn submit(&mut self) -> Result<(), DeviceError> {
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    return Err(DeviceError::Io {
                        context: "submitting a stream read".into(),
                        source: e,
                    })
                }
            }
        }
    }

    /// Waits for at least one completion and takes every one there is;
    /// sends again the rest of a short read.
    fn wait_and_reap(&mut self) -> Result<(), DeviceError> {
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    return Err(DeviceError::Io {
                        context: "waiting for a stream read".into(),
                        source: e,
                    })
                }
            }
        }
        let mut reaped = std::mem::take(&mut self.reaped);
        reaped.clear();
        reaped.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        let mut again = false;
        for &(tag, result) in &reaped {
            let Some(index) = self.reads.iter().position(|r| r.tag == tag) else {
                tracing::error!(tag, "stream completion for no read");
                continue;
            };
            let read = &mut self.reads[index];
            if result < 0 {
                read.outcome = Some(Err(io::Error::from_raw_os_error(-result)));
            } else if result == 0 {
                read.outcome = Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "short transfer at end of file",
                )));
            } else {
                read.done_bytes += result as usize;
                if read.done_bytes >= read.run.span.len {
                    read.outcome = Some(Ok(()));
                } else {
                    self.push(index);
                    again = true;
                }
            }
        }
        self.reaped = reaped;
        if again {
            self.submit()?;
        }
        Ok(())
    }
}

impl Drop for StreamReader<'_> {
    fn drop(&mut self) {
        // The kernel may still write into the buffers of reads at the disk:
        // wait for them before the buffers go back to the pool.
        while self
            .reads
            .iter()
            .take(self.at_disk)
            .any(|r| r.outcome.is_none())
        {
            if self.wait_and_reap().is_err() {
                // The ring failed: leak the buffers rather than free memory
                // the kernel may still write.
                tracing::error!("leaking stream buffers still owned by the kernel");
                for read in self.reads.drain(..) {
                    std::mem::forget(read);
                }
                return;
            }
        }
    }
}
