//! File contents: open handles, reads with read-ahead pinned to one object
//! version, the write spool shared by every handle of an inode, and the
//! upload that turns a spool into a new object version.

use std::cmp::min;
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::io::SeekFrom;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use fuser::{Errno, FileAttr, FileHandle, INodeNo, OpenAccMode, OpenFlags, TimeOrNow};
use quarry_store_api::{BucketName, Condition, ObjectKey, StoreError};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::task::JoinHandle;

use crate::backend::{ObjectBackend, ObjectMeta};
use crate::error::{io_errno, store_errno, FsResult};
use crate::fs::{lock, unix_ms, utf8, Mount, DIR_MARKER};
use crate::inode::{Ino, Kind, Location};
use crate::options::ConflictPolicy;
use crate::stream::UploadStream;

/// Reads within this distance of where the last one ended count as
/// sequential (the kernel's own read-ahead may reorder requests a little).
const SEQUENTIAL_SLACK_BYTES: u64 = 256 << 10;
/// A random read fetches this much, from a 64 KiB boundary (one default
/// chunk): enough for neighbouring pages without wasting a big window.
const RANDOM_WINDOW_BYTES: u64 = 256 << 10;
const RANDOM_ALIGN_BYTES: u64 = 64 << 10;
/// Bound on windows fetched for one read request (a request is at most a
/// few MiB and a window at least 64 KiB, so this is never reached unless
/// the store keeps answering with data that does not cover the request).
const MAX_READ_STEPS: usize = 256;
/// Attempts to download an object whole before giving up with `ESTALE`
/// because it keeps changing.
const FILL_ATTEMPTS: usize = 3;
/// Windows fetched ahead of a sequential reader: with the one it reads,
/// an open handle holds at most this many plus one windows. Seven of the
/// default 4 MiB keep 28 MiB in flight, about what a `quarry get` keeps
/// (`DEFAULT_IN_FLIGHT_BYTES`): against the get in the same minute a 1 GiB
/// sequential read went from 0.54-0.66 of it with three windows to
/// 0.65-0.91 with seven, and fifteen were no faster (`docs/benchmarks.md`).
const READ_AHEAD_WINDOWS: usize = 7;

/// The local copy of a file being written: the truth while any handle of
/// the inode is open in this mount.
pub(crate) struct Spool {
    file: File,
    pub(crate) size_bytes: u64,
    /// Changed since it was filled or last uploaded.
    pub(crate) dirty: bool,
    /// The object version the content came from or was last uploaded as;
    /// `None` if the object did not exist.
    pub(crate) base_version: Option<u64>,
    pub(crate) mtime: SystemTime,
    /// The upload of the spool's bytes under way while a new file is
    /// written front to back (see `stream.rs`).
    stream: Option<UploadStream>,
}

impl Spool {
    /// Stops the streamed upload (the content stops being a plain append):
    /// the spool is uploaded whole instead.
    pub(crate) fn drop_stream(&mut self) {
        self.stream = None;
    }
}

/// What the handles of one inode share.
pub(crate) struct OpenFile {
    /// Handles open on the inode; changed only under the mount's `files`
    /// lock, so an entry is removed exactly when the last handle goes.
    opens: AtomicU64,
    pub(crate) spool: Mutex<Option<Spool>>,
}

/// One open file handle.
pub(crate) struct OpenHandle {
    pub(crate) ino: Ino,
    writable: bool,
    /// Where the file was at open: reads of a file unlinked since then go
    /// there (and find its version gone unless it was read already).
    open_loc: Location,
    pub(crate) reader: Mutex<Reader>,
}

/// A handle's view of the object when it has no spool: the version seen
/// at open and what was fetched of it.
pub(crate) struct Reader {
    pub(crate) version: u64,
    pub(crate) size_bytes: u64,
    pub(crate) created_unix_ms: u64,
    /// Bytes (or an end of file) were returned: the handle is committed to
    /// its version from now on.
    touched: bool,
    /// Where the last read ended (sequential detection).
    seq_end: u64,
    current: Option<Window>,
    /// Windows being fetched ahead of a sequential reader, in order.
    prefetch: VecDeque<Prefetch>,
}

/// Fetched bytes of a file from `offset` on, as the store's chunks: a read
/// inside one chunk is answered with a slice of it, so a window is never
/// joined into one buffer (that copy was a sixth of the mount's CPU on a
/// sequential read).
struct Window {
    offset: u64,
    pieces: Vec<Bytes>,
    /// Where each piece starts, counted from `offset`.
    starts: Vec<u64>,
    len_bytes: u64,
}

impl Window {
    fn new(offset: u64, pieces: Vec<Bytes>) -> Window {
        let pieces: Vec<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        let mut starts = Vec::with_capacity(pieces.len());
        let mut len_bytes = 0u64;
        for piece in &pieces {
            starts.push(len_bytes);
            len_bytes += piece.len() as u64;
        }
        Window {
            offset,
            pieces,
            starts,
            len_bytes,
        }
    }

    fn covers(&self, pos: u64) -> bool {
        pos >= self.offset && pos - self.offset < self.len_bytes
    }

    fn end(&self) -> u64 {
        self.offset + self.len_bytes
    }

    /// The bytes from `pos` (which the window covers) up to `end`, or to
    /// the end of the piece holding `pos` if that comes first: a slice of
    /// the piece, not a copy.
    fn slice(&self, pos: u64, end: u64) -> Bytes {
        debug_assert!(self.covers(pos) && end > pos);
        let at = pos - self.offset;
        let i = self.starts.partition_point(|&s| s <= at) - 1;
        let piece = &self.pieces[i];
        let from = (at - self.starts[i]) as usize;
        let n = min(end - pos, (piece.len() - from) as u64) as usize;
        piece.slice(from..from + n)
    }
}

type Fetch = quarry_store_api::Result<(ObjectMeta, Vec<Bytes>)>;

struct Prefetch {
    offset: u64,
    len: u64,
    task: JoinHandle<Fetch>,
}

impl Reader {
    fn new(meta: &ObjectMeta) -> Self {
        Self {
            version: meta.version,
            size_bytes: meta.size_bytes,
            created_unix_ms: meta.created_unix_ms,
            touched: false,
            seq_end: 0,
            current: None,
            prefetch: VecDeque::new(),
        }
    }

    fn empty() -> Self {
        Self {
            version: 0,
            size_bytes: 0,
            created_unix_ms: 0,
            touched: false,
            seq_end: 0,
            current: None,
            prefetch: VecDeque::new(),
        }
    }

    fn drop_prefetch(&mut self) {
        for p in self.prefetch.drain(..) {
            p.task.abort();
        }
    }

    /// Takes a version the store answered with: the pinned one is fine; a
    /// handle that returned nothing yet moves to a newer one (and drops
    /// what it fetched of the old); otherwise the handle is stale.
    fn accept(&mut self, meta: &ObjectMeta) -> FsResult<bool> {
        if meta.version == self.version {
            return Ok(false);
        }
        if self.touched {
            return Err(Errno::ESTALE);
        }
        self.version = meta.version;
        self.size_bytes = meta.size_bytes;
        self.created_unix_ms = meta.created_unix_ms;
        self.current = None;
        self.drop_prefetch();
        Ok(true)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.drop_prefetch();
    }
}

/// The parts of one read's answer, each a slice of a fetched window.
#[derive(Default)]
struct Pieces {
    parts: Vec<Bytes>,
    len_bytes: u64,
}

impl Pieces {
    fn push(&mut self, b: Bytes) {
        self.len_bytes += b.len() as u64;
        self.parts.push(b);
    }

    /// One window's slice as it is; several (a read across windows) joined.
    fn into_bytes(mut self) -> Bytes {
        if self.parts.len() == 1 {
            return self.parts.pop().unwrap_or_default();
        }
        let mut out = Vec::with_capacity(self.len_bytes as usize);
        for p in &self.parts {
            out.extend_from_slice(p);
        }
        Bytes::from(out)
    }
}

/// Reads up to `len` bytes at `offset` from a spool file of `size` bytes
/// (a hole past the file's physical end reads as zeros).
fn read_spool(sp: &Spool, offset: u64, len: u32) -> std::io::Result<Vec<u8>> {
    if offset >= sp.size_bytes {
        return Ok(Vec::new());
    }
    let n = min(u64::from(len), sp.size_bytes - offset) as usize;
    let mut buf = vec![0u8; n];
    let mut done = 0;
    while done < n {
        let got = sp.file.read_at(&mut buf[done..], offset + done as u64)?;
        if got == 0 {
            break;
        }
        done += got;
    }
    Ok(buf)
}

impl<B: ObjectBackend> Mount<B> {
    // ---- open files --------------------------------------------------------

    /// The shared state of `ino`, counting one more handle on it.
    fn attach_open(&self, ino: Ino) -> Arc<OpenFile> {
        let mut files = lock(&self.files);
        let of = files.entry(ino).or_insert_with(|| {
            Arc::new(OpenFile {
                opens: AtomicU64::new(0),
                spool: Mutex::new(None),
            })
        });
        of.opens.fetch_add(1, Ordering::Relaxed);
        Arc::clone(of)
    }

    /// One handle of `ino` less; the shared state (and its spool) goes with
    /// the last one.
    fn detach_open(&self, ino: Ino) {
        let mut files = lock(&self.files);
        if let Some(of) = files.get(&ino) {
            if of.opens.fetch_sub(1, Ordering::Relaxed) <= 1 {
                files.remove(&ino);
            }
        }
    }

    /// Registers a handle on `ino`, undoing the open count if that fails.
    fn register(&self, ino: Ino, writable: bool, loc: Location, reader: Reader) -> FsResult<u64> {
        let fh = self
            .add_handle(OpenHandle {
                ino,
                writable,
                open_loc: loc,
                reader: Mutex::new(reader),
            })
            .inspect_err(|_| self.detach_open(ino))?;
        lock(&self.inodes).add_open(ino);
        Ok(fh)
    }

    pub(crate) fn do_open(&self, ino: Ino, flags: OpenFlags) -> FsResult<u64> {
        match lock(&self.inodes).kind(ino) {
            None => return Err(Errno::ENOENT),
            Some(Kind::Dir) => return Err(Errno::EISDIR),
            Some(Kind::File) => {}
        }
        let loc = self.location(ino)?;
        let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let of = self.attach_open(ino);
        let spooled = lock(&of.spool).is_some();
        let reader = if spooled {
            // Reads come from the spool; nothing to pin.
            Reader::empty()
        } else {
            let Location::Entry { bucket, key } = &loc else {
                self.detach_open(ino);
                return Err(Errno::EISDIR);
            };
            // Revalidate at every open: another mount may have replaced or
            // removed the file since the kernel cached its attributes.
            let meta = match self.run(self.backend.head(bucket, key)) {
                Ok(meta) => meta,
                Err(e) => {
                    self.detach_open(ino);
                    return Err(store_errno("open", &loc, &e));
                }
            };
            let seen = lock(&self.inodes).swap_seen_version(ino, meta.version);
            if seen.is_some_and(|v| v != meta.version) {
                // The kernel's size and times are of another version: drop
                // them (attributes only, no page locks) so that reads past
                // the old size are not cut short.
                if let Some(n) = self.notifier.get() {
                    if let Err(e) = n.inval_inode(INodeNo(ino), -1, 0) {
                        tracing::debug!(ino, error = %e, "attribute invalidation failed");
                    }
                }
            }
            Reader::new(&meta)
        };
        if writable && flags.0 & libc::O_TRUNC != 0 {
            // The kernel leaves O_TRUNC to us (atomic_o_trunc): the file
            // becomes empty here and in the store at close, in one version.
            if let Err(e) = self.truncate_open(&of, &loc, reader.version) {
                self.detach_open(ino);
                return Err(e);
            }
        }
        self.register(ino, writable, loc, reader)
    }

    /// Empties the spool of an open file, making one if there is none
    /// (without downloading what is about to be thrown away).
    fn truncate_open(&self, of: &OpenFile, loc: &Location, version: u64) -> FsResult<()> {
        let mut slot = lock(&of.spool);
        match slot.as_mut() {
            Some(sp) => {
                sp.drop_stream();
                sp.file
                    .set_len(0)
                    .map_err(|e| io_errno("truncate", loc, &e))?;
                sp.size_bytes = 0;
                sp.dirty = true;
                sp.mtime = SystemTime::now();
            }
            None => {
                let mut sp = self.new_spool(loc)?;
                sp.base_version = Some(version).filter(|v| *v > 0);
                *slot = Some(sp);
            }
        }
        Ok(())
    }

    pub(crate) fn do_create(
        &self,
        parent: Ino,
        name: &OsStr,
        flags: i32,
    ) -> FsResult<(FileAttr, u64)> {
        let name = utf8(name)?;
        if name == DIR_MARKER {
            return Err(Errno::EINVAL);
        }
        let parent_loc = self.location(parent)?;
        if parent_loc == Location::Root {
            // Only buckets live at the top.
            return Err(Errno::EPERM);
        }
        let loc = parent_loc.child(name)?;
        let Location::Entry { bucket, key } = &loc else {
            return Err(Errno::EIO);
        };
        // The kernel asks only after a lookup found nothing, but another
        // mount may have created the file since: ask again unless that
        // lookup was just now.
        let head = if self.take_absent(parent, name) {
            Err(StoreError::NoSuchObject {
                bucket: bucket.to_string(),
                key: key.to_string(),
            })
        } else {
            self.run(self.backend.head(bucket, key))
        };
        match head {
            Ok(meta) => {
                if flags & libc::O_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                let ino = {
                    let mut inodes = lock(&self.inodes);
                    let ino = inodes.intern(parent, name, Kind::File)?;
                    inodes.add_lookup(ino);
                    ino
                };
                let fh = self
                    .do_open(ino, OpenFlags(flags))
                    .inspect_err(|_| lock(&self.inodes).forget(ino, 1))?;
                // With O_TRUNC the spool is empty already.
                let attr = self
                    .spool_attr(ino)
                    .unwrap_or_else(|| self.meta_attr(ino, &meta));
                return Ok((attr, fh));
            }
            Err(StoreError::NoSuchObject { .. }) => {}
            Err(e) => return Err(store_errno("create", &loc, &e)),
        }
        let spool = self.new_spool(&loc)?;
        let ino = {
            let mut inodes = lock(&self.inodes);
            let ino = inodes.intern(parent, name, Kind::File)?;
            inodes.add_lookup(ino);
            ino
        };
        let of = self.attach_open(ino);
        {
            let mut slot = lock(&of.spool);
            if slot.is_none() {
                *slot = Some(spool);
            }
        }
        let writable = OpenFlags(flags).acc_mode() != OpenAccMode::O_RDONLY;
        // A failed reply takes no lookup: give it back.
        let fh = self
            .register(ino, writable, loc, Reader::empty())
            .inspect_err(|_| lock(&self.inodes).forget(ino, 1))?;
        let attr = self
            .spool_attr(ino)
            .unwrap_or_else(|| self.file_attr(ino, 0, SystemTime::now()));
        Ok((attr, fh))
    }

    /// `mknod` of a regular file: an empty object, stored at once.
    pub(crate) fn do_mknod(&self, parent: Ino, name: &OsStr) -> FsResult<FileAttr> {
        let name = utf8(name)?;
        if name == DIR_MARKER {
            return Err(Errno::EINVAL);
        }
        let parent_loc = self.location(parent)?;
        if parent_loc == Location::Root {
            return Err(Errno::EPERM);
        }
        let loc = parent_loc.child(name)?;
        let Location::Entry { bucket, key } = &loc else {
            return Err(Errno::EIO);
        };
        let meta = self
            .run(
                self.backend
                    .put_bytes(bucket, key, Bytes::new(), Condition::IfAbsent),
            )
            .map_err(|e| store_errno("mknod", &loc, &e))?;
        let mut inodes = lock(&self.inodes);
        let ino = inodes.intern(parent, name, Kind::File)?;
        inodes.add_lookup(ino);
        inodes.swap_seen_version(ino, meta.version);
        Ok(self.meta_attr(ino, &meta))
    }

    pub(crate) fn do_release(&self, ino: Ino, fh: FileHandle) {
        let handle = lock(&self.handles).files.remove(&fh.0);
        if let Some(h) = handle {
            lock(&h.reader).drop_prefetch();
        }
        let last = self
            .open_file(ino)
            .is_some_and(|of| of.opens.load(Ordering::Relaxed) <= 1);
        if let Err(e) = self.upload_if_dirty(ino) {
            if last {
                let path = self
                    .location(ino)
                    .map_or_else(|_| format!("inode {ino}"), |l| l.to_string());
                tracing::error!(%path, errno = e.code(), "last close of a file whose changes could not be stored: they are lost");
            }
        }
        self.detach_open(ino);
        lock(&self.inodes).drop_open(ino);
    }

    /// Uploads every dirty spool (at unmount).
    pub(crate) fn flush_all(&self) {
        let inos: Vec<Ino> = lock(&self.files).keys().copied().collect();
        for ino in inos {
            if let Err(e) = self.upload_if_dirty(ino) {
                tracing::error!(
                    ino,
                    errno = e.code(),
                    "unmount: changes to an open file could not be stored"
                );
            }
        }
    }

    // ---- reads -------------------------------------------------------------

    pub(crate) fn do_read(
        &self,
        ino: Ino,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> FsResult<Bytes> {
        let h = self.handle(fh)?;
        if let Some(of) = self.open_file(ino) {
            let slot = lock(&of.spool);
            if let Some(sp) = slot.as_ref() {
                return read_spool(sp, offset, size)
                    .map(Bytes::from)
                    .map_err(|e| io_errno("read", &ino, &e));
            }
        }
        let loc = self.location(ino).unwrap_or_else(|_| h.open_loc.clone());
        let Location::Entry { bucket, key } = &loc else {
            return Err(Errno::EISDIR);
        };
        let mut r = lock(&h.reader);
        let sequential = offset.abs_diff(r.seq_end) <= SEQUENTIAL_SLACK_BYTES;
        let want_end = offset.saturating_add(u64::from(size));
        // Slices of the windows, not copies: a read inside one window (the
        // usual case) replies straight from the fetched bytes.
        let mut out = Pieces::default();
        let mut pos = offset;
        let mut steps = 0;
        loop {
            let end = min(want_end, r.size_bytes);
            if pos >= end {
                break;
            }
            if let Some(w) = r.current.as_ref().filter(|w| w.covers(pos)) {
                let piece = w.slice(pos, end);
                pos += piece.len() as u64;
                out.push(piece);
                continue;
            }
            steps += 1;
            if steps > MAX_READ_STEPS {
                tracing::warn!(path = %loc, offset, size, "read: the store's answers never covered the request");
                return Err(Errno::EIO);
            }
            let (window_offset, fetched) = self.fetch_window(&mut r, bucket, key, pos, sequential);
            let (meta, data) = match fetched {
                Ok(x) => x,
                Err(StoreError::NoSuchObject { .. }) if !r.touched => return Err(Errno::ENOENT),
                Err(StoreError::NoSuchObject { .. }) => {
                    tracing::info!(path = %loc, version = r.version, "read: the file was removed under an open handle");
                    return Err(Errno::ESTALE);
                }
                Err(StoreError::RangeOutOfBounds { .. }) => {
                    // The object shrank: a newer version.
                    let meta = self
                        .run(self.backend.head(bucket, key))
                        .map_err(|e| store_errno("read", &loc, &e))?;
                    if self.accept(&mut r, &loc, &meta)? {
                        out = Pieces::default();
                        pos = offset;
                    }
                    continue;
                }
                Err(e) => return Err(store_errno("read", &loc, &e)),
            };
            if self.accept(&mut r, &loc, &meta)? {
                // Bytes gathered in this call were of the old version.
                out = Pieces::default();
                pos = offset;
            }
            r.current = Some(Window::new(window_offset, data));
        }
        r.touched = true;
        r.seq_end = offset + out.len_bytes;
        if sequential {
            self.maybe_prefetch(&mut r, bucket, key);
        }
        Ok(out.into_bytes())
    }

    fn accept(&self, r: &mut Reader, loc: &Location, meta: &ObjectMeta) -> FsResult<bool> {
        r.accept(meta).inspect_err(|_| {
            tracing::info!(path = %loc, open_version = r.version, now = meta.version,
                "read: the file was replaced under an open handle that already read from it");
        })
    }

    /// The window holding `pos`: the read-ahead in flight if it covers
    /// `pos`, else one fetched now. Files up to the read-ahead size are
    /// fetched whole, so their readers keep one version for good.
    fn fetch_window(
        &self,
        r: &mut Reader,
        bucket: &BucketName,
        key: &ObjectKey,
        pos: u64,
        sequential: bool,
    ) -> (u64, Fetch) {
        if let Some(p) = r.prefetch.pop_front() {
            if pos >= p.offset && pos - p.offset < p.len {
                let offset = p.offset;
                return match self.run(p.task) {
                    Ok(fetched) => (offset, fetched),
                    Err(e) => (
                        offset,
                        Err(StoreError::Backend(format!("read-ahead task failed: {e}"))),
                    ),
                };
            }
            p.task.abort();
            r.drop_prefetch();
        }
        let ra = self.options.read_ahead_bytes;
        let (start, len) = if r.size_bytes <= ra {
            (0, r.size_bytes)
        } else if sequential {
            (pos, ra)
        } else {
            (pos - pos % RANDOM_ALIGN_BYTES, min(RANDOM_WINDOW_BYTES, ra))
        };
        (
            start,
            self.run(self.backend.get_range_pieces(bucket, key, start, len)),
        )
    }

    /// Keeps [`READ_AHEAD_WINDOWS`] windows after the current one in
    /// flight for a sequential reader, so the store works on several at
    /// once (one at a time, each window's first chunk latency showed as a
    /// gap in the stream).
    fn maybe_prefetch(&self, r: &mut Reader, bucket: &BucketName, key: &ObjectKey) {
        let Some(w) = r.current.as_ref() else {
            return;
        };
        let mut next = r.prefetch.back().map_or(w.end(), |p| p.offset + p.len);
        let len = self.options.read_ahead_bytes;
        while r.prefetch.len() < READ_AHEAD_WINDOWS && next < r.size_bytes {
            let backend = Arc::clone(&self.backend);
            let (bucket, key) = (bucket.clone(), key.clone());
            let offset = next;
            let task = self
                .runtime()
                .spawn(async move { backend.get_range_pieces(&bucket, &key, offset, len).await });
            r.prefetch.push_back(Prefetch { offset, len, task });
            next += len;
        }
    }

    // ---- writes ------------------------------------------------------------

    pub(crate) fn do_write(
        &self,
        ino: Ino,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> FsResult<u32> {
        let h = self.handle(fh)?;
        if !h.writable {
            return Err(Errno::EBADF);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|end| *end <= self.options.max_object_size_bytes)
            .ok_or_else(|| {
                tracing::info!(
                    ino,
                    offset,
                    max_object_size_bytes = self.options.max_object_size_bytes,
                    "write past the largest object the mount stores"
                );
                Errno::EFBIG
            })?;
        let of = self.open_file(ino).ok_or(Errno::EBADF)?;
        let mut slot = lock(&of.spool);
        if slot.is_none() {
            let loc = self.location(ino).unwrap_or_else(|_| h.open_loc.clone());
            let pin = lock(&h.reader).version;
            *slot = Some(
                self.fill_spool(&loc, u64::MAX, Some(pin).filter(|v| *v > 0))?
                    .0,
            );
        }
        let Some(sp) = slot.as_mut() else {
            return Err(Errno::EIO);
        };
        sp.file
            .write_all_at(data, offset)
            .map_err(|e| io_errno("write", &ino, &e))?;
        self.stream_write(ino, sp, offset, data);
        sp.size_bytes = sp.size_bytes.max(end);
        sp.dirty = true;
        sp.mtime = SystemTime::now();
        Ok(data.len() as u32)
    }

    /// `truncate`/`ftruncate`: on the spool if the file is open here (a
    /// path truncate also uploads at once, having no close to wait for),
    /// otherwise through a one-off spool uploaded at once.
    pub(crate) fn truncate(&self, ino: Ino, size: u64, fh: Option<FileHandle>) -> FsResult<()> {
        if size > self.options.max_object_size_bytes {
            return Err(Errno::EFBIG);
        }
        match lock(&self.inodes).kind(ino) {
            None => return Err(Errno::ENOENT),
            Some(Kind::Dir) => return Err(Errno::EISDIR),
            Some(Kind::File) => {}
        }
        let handle = fh.and_then(|fh| self.handle(fh).ok());
        let loc = match (self.location(ino), &handle) {
            (Ok(loc), _) => loc,
            (Err(_), Some(h)) => h.open_loc.clone(),
            (Err(e), None) => return Err(e),
        };
        if let Some(of) = self.open_file(ino) {
            let mut slot = lock(&of.spool);
            if slot.is_none() {
                let pin = handle.map(|h| lock(&h.reader).version).filter(|v| *v > 0);
                *slot = Some(self.fill_spool(&loc, size, pin)?.0);
            }
            let Some(sp) = slot.as_mut() else {
                return Err(Errno::EIO);
            };
            sp.drop_stream();
            sp.file
                .set_len(size)
                .map_err(|e| io_errno("truncate", &loc, &e))?;
            sp.size_bytes = size;
            sp.dirty = true;
            sp.mtime = SystemTime::now();
            if fh.is_none() && lock(&self.inodes).is_attached(ino) {
                self.upload_spool(ino, sp, &loc)?;
            }
            return Ok(());
        }
        let (mut sp, object_size) = self.fill_spool(&loc, size, None)?;
        if sp.base_version.is_some() && object_size == size {
            return Ok(());
        }
        sp.file
            .set_len(size)
            .map_err(|e| io_errno("truncate", &loc, &e))?;
        sp.size_bytes = size;
        self.upload_spool(ino, &mut sp, &loc)
    }

    pub(crate) fn set_spool_mtime(&self, ino: Ino, t: TimeOrNow) {
        if let Some(of) = self.open_file(ino) {
            if let Some(sp) = lock(&of.spool).as_mut() {
                sp.mtime = match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                };
            }
        }
    }

    // ---- spools and uploads ------------------------------------------------

    /// An empty spool for a new file.
    fn new_spool(&self, loc: &Location) -> FsResult<Spool> {
        let file = tempfile::tempfile_in(&self.options.spool_dir)
            .map_err(|e| io_errno("create spool", loc, &e))?;
        Ok(Spool {
            file,
            size_bytes: 0,
            dirty: true,
            base_version: None,
            mtime: SystemTime::now(),
            stream: None,
        })
    }

    /// A spool holding the first `limit` bytes of the object at `loc` (all
    /// of them from one version), and the object's whole size. An absent
    /// object gives an empty spool with no base version. With
    /// [`ConflictPolicy::FailOnConflict`], a version other than `pin`
    /// (the one the handle opened) is `ESTALE`.
    pub(crate) fn fill_spool(
        &self,
        loc: &Location,
        limit: u64,
        pin: Option<u64>,
    ) -> FsResult<(Spool, u64)> {
        let Location::Entry { bucket, key } = loc else {
            return Err(Errno::EISDIR);
        };
        'attempt: for _ in 0..FILL_ATTEMPTS {
            let mut sp = self.new_spool(loc)?;
            sp.dirty = false;
            let meta = match self.run(self.backend.head(bucket, key)) {
                Ok(meta) => meta,
                Err(StoreError::NoSuchObject { .. }) => return Ok((sp, 0)),
                Err(e) => return Err(store_errno("download", loc, &e)),
            };
            if meta.size_bytes > self.options.max_object_size_bytes
                && limit > self.options.max_object_size_bytes
            {
                tracing::info!(path = %loc, size_bytes = meta.size_bytes,
                    max_object_size_bytes = self.options.max_object_size_bytes,
                    "open for writing: the object is larger than the mount spools");
                return Err(Errno::EFBIG);
            }
            if self.options.conflict == ConflictPolicy::FailOnConflict
                && pin.is_some_and(|p| p != meta.version)
            {
                tracing::info!(path = %loc, "write: the file was replaced since it was opened");
                return Err(Errno::ESTALE);
            }
            let want = min(meta.size_bytes, limit);
            let mut off = 0;
            while off < want {
                let len = min(self.options.read_ahead_bytes, want - off);
                let (m, data) = match self.run(self.backend.get_range(bucket, key, off, len)) {
                    Ok(x) => x,
                    Err(StoreError::NoSuchObject { .. } | StoreError::RangeOutOfBounds { .. }) => {
                        continue 'attempt
                    }
                    Err(e) => return Err(store_errno("download", loc, &e)),
                };
                if m.version != meta.version || data.is_empty() {
                    continue 'attempt;
                }
                sp.file
                    .write_all_at(&data, off)
                    .map_err(|e| io_errno("download", loc, &e))?;
                off += data.len() as u64;
            }
            sp.file
                .set_len(want)
                .map_err(|e| io_errno("download", loc, &e))?;
            sp.size_bytes = want;
            sp.base_version = Some(meta.version);
            sp.mtime = unix_ms(meta.created_unix_ms);
            return Ok((sp, meta.size_bytes));
        }
        tracing::info!(path = %loc, "download: the object kept changing");
        Err(Errno::ESTALE)
    }

    /// Stores the spool's bytes as `bucket/key`.
    pub(crate) fn put_spool(
        &self,
        sp: &Spool,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> quarry_store_api::Result<ObjectMeta> {
        let file = sp.file.try_clone()?;
        let size = sp.size_bytes;
        let backend = &self.backend;
        self.run(async move {
            let mut file = tokio::fs::File::from_std(file);
            file.seek(SeekFrom::Start(0)).await?;
            backend
                .put_reader(bucket, key, file.take(size), condition)
                .await
        })
    }

    /// Uploads a spool as the new version of `loc` (the condition per the
    /// conflict policy) and marks it clean.
    pub(crate) fn upload_spool(&self, ino: Ino, sp: &mut Spool, loc: &Location) -> FsResult<()> {
        let Location::Entry { bucket, key } = loc else {
            return Err(Errno::EIO);
        };
        let condition = self.upload_condition(sp);
        let stored = match self.finish_stream(sp, bucket, key) {
            Some(stored) => stored,
            None => self.put_spool(sp, bucket, key, condition),
        };
        let meta = stored.map_err(|e| match e {
                StoreError::VersionMismatch { .. } => {
                    tracing::info!(path = %loc, error = %e, "upload refused: the file was replaced since this mount read it");
                    Errno::ESTALE
                }
                e => store_errno("upload", loc, &e),
            })?;
        tracing::debug!(path = %loc, version = meta.version, size_bytes = meta.size_bytes, "uploaded");
        sp.dirty = false;
        sp.base_version = Some(meta.version);
        lock(&self.inodes).swap_seen_version(ino, meta.version);
        Ok(())
    }

    /// The condition of a spool's upload, per the conflict policy.
    fn upload_condition(&self, sp: &Spool) -> Condition {
        match self.options.conflict {
            ConflictPolicy::LastWriterWins => Condition::Always,
            ConflictPolicy::FailOnConflict => sp
                .base_version
                .map_or(Condition::IfAbsent, Condition::IfVersion),
        }
    }

    /// Feeds a write that just went to the spool to its streamed upload:
    /// the first write of an empty spool at offset 0 starts one, an
    /// append continues it, anything else stops it.
    fn stream_write(&self, ino: Ino, sp: &mut Spool, offset: u64, data: &[u8]) {
        if let Some(st) = sp.stream.as_mut() {
            if !st.append(offset, data) {
                sp.drop_stream();
            }
            return;
        }
        if offset != 0 || sp.size_bytes != 0 || data.is_empty() {
            return;
        }
        let Ok(Location::Entry { bucket, key }) = self.location(ino) else {
            return;
        };
        let mut st = UploadStream::start(
            self.runtime(),
            Arc::clone(&self.backend),
            bucket,
            key,
            self.upload_condition(sp),
        );
        if st.append(offset, data) {
            sp.stream = Some(st);
        }
    }

    /// Ends the spool's streamed upload, if it has one holding exactly the
    /// spool's bytes for `bucket/key`, and returns what the store said;
    /// `None`: upload the spool.
    fn finish_stream(
        &self,
        sp: &mut Spool,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> Option<quarry_store_api::Result<ObjectMeta>> {
        let st = sp.stream.take()?;
        if st.end != sp.size_bytes || !st.is_for(bucket, key) {
            return None;
        }
        st.finish(|task| self.run(task))
    }

    /// Uploads `ino`'s spool if it changed since the last upload (flush,
    /// fsync, release). A file unlinked since it was opened is not stored.
    pub(crate) fn upload_if_dirty(&self, ino: Ino) -> FsResult<()> {
        let Some(of) = self.open_file(ino) else {
            return Ok(());
        };
        let mut slot = lock(&of.spool);
        let Some(sp) = slot.as_mut() else {
            return Ok(());
        };
        if !sp.dirty {
            return Ok(());
        }
        let Ok(loc) = self.location(ino) else {
            sp.drop_stream();
            sp.dirty = false;
            return Ok(());
        };
        let result = self.upload_spool(ino, sp, &loc);
        if result == Err(Errno::ESTALE) {
            // The file was replaced under this spool (fail-on-conflict): its
            // changes can never be stored. Without the spool, the next open
            // of the file pins the store's current version and a write from
            // a handle still open meets the conflict again, instead of
            // writing into bytes of a version that is gone (an open that
            // came before this handle's release used to inherit them).
            *slot = None;
        }
        result
    }

    /// Whether `ino` has a spool not yet stored as any version (a file
    /// created here and not closed or synced yet).
    pub(crate) fn is_local_only(&self, ino: Ino) -> bool {
        self.open_file(ino).is_some_and(|of| {
            lock(&of.spool)
                .as_ref()
                .is_some_and(|sp| sp.base_version.is_none())
        })
    }

    /// Drops what an open spool would still upload (its file was unlinked
    /// or replaced).
    pub(crate) fn discard_spool_changes(&self, ino: Ino) {
        if let Some(of) = self.open_file(ino) {
            if let Some(sp) = lock(&of.spool).as_mut() {
                sp.drop_stream();
                sp.dirty = false;
            }
        }
    }

    /// Stores `ino`'s open spool under `dst` (a rename of a file open
    /// here: the spool is the truth). `None` if it has no spool.
    pub(crate) fn upload_spool_to(
        &self,
        ino: Ino,
        dst: &Location,
    ) -> Option<FsResult<Option<u64>>> {
        let of = self.open_file(ino)?;
        let mut slot = lock(&of.spool);
        let sp = slot.as_mut()?;
        sp.drop_stream();
        let old = sp.base_version;
        let Location::Entry { bucket, key } = dst else {
            return Some(Err(Errno::EIO));
        };
        Some(
            self.put_spool(sp, bucket, key, Condition::Always)
                .map(|meta| {
                    sp.dirty = false;
                    sp.base_version = Some(meta.version);
                    old
                })
                .map_err(|e| store_errno("rename", dst, &e)),
        )
    }

    /// Moves the pin of every open reader of `bucket/key`, and the base of
    /// its spool, from version `from` to `to` (a rename copied that
    /// version, byte for byte).
    pub(crate) fn repin(&self, moved: &[(BucketName, ObjectKey, u64, u64)]) {
        if moved.is_empty() {
            return;
        }
        let by_key: std::collections::HashMap<(&BucketName, &ObjectKey), (u64, u64)> = moved
            .iter()
            .map(|(b, k, from, to)| ((b, k), (*from, *to)))
            .collect();
        let handles: Vec<Arc<OpenHandle>> = lock(&self.handles).files.values().cloned().collect();
        for h in handles {
            let Ok(Location::Entry { bucket, key }) = self.location(h.ino) else {
                continue;
            };
            if let Some((from, to)) = by_key.get(&(&bucket, &key)) {
                let mut r = lock(&h.reader);
                if r.version == *from {
                    r.version = *to;
                }
            }
        }
        let files: Vec<(Ino, Arc<OpenFile>)> = lock(&self.files)
            .iter()
            .map(|(ino, of)| (*ino, Arc::clone(of)))
            .collect();
        for (ino, of) in files {
            let Ok(Location::Entry { bucket, key }) = self.location(ino) else {
                continue;
            };
            if let Some((from, to)) = by_key.get(&(&bucket, &key)) {
                if let Some(sp) = lock(&of.spool).as_mut() {
                    if sp.base_version == Some(*from) {
                        sp.base_version = Some(*to);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_answers_a_slice_of_one_piece_at_a_time() {
        let pieces = vec![
            Bytes::from_static(b"abcd"),
            Bytes::new(),
            Bytes::from_static(b"ef"),
            Bytes::from_static(b"ghijk"),
        ];
        let w = Window::new(100, pieces);
        assert_eq!((w.len_bytes, w.end()), (11, 111));
        assert!(!w.covers(99) && w.covers(100) && w.covers(110) && !w.covers(111));
        assert_eq!(&w.slice(100, 111)[..], b"abcd");
        assert_eq!(&w.slice(102, 103)[..], b"c");
        assert_eq!(&w.slice(104, 111)[..], b"ef");
        assert_eq!(&w.slice(105, 111)[..], b"f");
        assert_eq!(&w.slice(107, 200)[..], b"hijk");
        // Reading a range piece by piece gives the range.
        let (mut pos, mut got) = (101, Vec::new());
        while pos < 110 {
            let s = w.slice(pos, 110);
            pos += s.len() as u64;
            got.extend_from_slice(&s);
        }
        assert_eq!(got, b"bcdefghij");
    }
}
