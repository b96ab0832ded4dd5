//! The file system: shared state, attributes, name resolution, and the
//! `fuser::Filesystem` callbacks, each of which runs one method of
//! `files.rs` or `dirs.rs` and turns its result into a reply.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use quarry_store_api::{BucketName, StoreError};

use crate::backend::{ObjectBackend, ObjectMeta};
use crate::error::{store_errno, FsResult, MountError, Result};
use crate::files::{OpenFile, OpenHandle};
use crate::inode::{Ino, InodeTable, Kind, Location, ROOT};
use crate::kernel_files::{KernelFiles, KernelRunner, VNode, QUARRY_DIR};
use crate::options::MountOptions;

/// The name of the empty object that keeps a directory made by `mkdir`
/// alive while nothing else is under it (`dir/.quarry-dir`). Hidden from
/// listings; the mount refuses to create, look up or rename to this name.
pub const DIR_MARKER: &str = ".quarry-dir";

/// Objects asked for per `list` call.
pub(crate) const LIST_PAGE: usize = 1000;

/// Block size reported by `stat` and `statfs`.
const BLOCK_BYTES: u32 = 4096;
/// How long a lookup's "absent" is trusted by the `create` that follows it.
const ABSENT_TRUST: Duration = Duration::from_secs(1);
/// Most absent names remembered (emptied when full: a note only saves a
/// round trip).
const MAX_ABSENT_NAMES: usize = 1024;

/// Locks `m`, carrying on if another thread panicked while holding it (the
/// guarded state is kept consistent at every await-free step).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A runtime the mount owns, shut down without waiting (it may be dropped
/// on any thread, and pending read-ahead is not worth waiting for).
struct OwnedRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// What a name resolved to in the store.
pub(crate) enum Found {
    Dir,
    File(ObjectMeta),
}

/// Open file and directory handles, bounded together.
pub(crate) struct Handles {
    next: u64,
    pub(crate) files: HashMap<u64, Arc<OpenHandle>>,
    pub(crate) dirs: HashMap<u64, Arc<Mutex<Option<Vec<DirEntry>>>>>,
}

/// One entry of a directory listing.
pub(crate) struct DirEntry {
    pub(crate) ino: Ino,
    pub(crate) kind: Kind,
    pub(crate) name: String,
}

/// A FUSE file system over an [`ObjectBackend`]: buckets are the top-level
/// directories, objects are files, keys are `/`-separated paths.
///
/// [`crate::mount`] runs one in a background session; it can also be
/// handed to `fuser` directly.
pub struct Mount<B: ObjectBackend> {
    pub(crate) backend: Arc<B>,
    pub(crate) options: MountOptions,
    runtime: tokio::runtime::Handle,
    _owned_runtime: OwnedRuntime,
    uid: u32,
    gid: u32,
    started: SystemTime,
    pub(crate) inodes: Mutex<InodeTable>,
    /// Per-inode state shared by the handles open on it (the write spool).
    pub(crate) files: Mutex<HashMap<Ino, Arc<OpenFile>>>,
    pub(crate) handles: Mutex<Handles>,
    buckets_cache: Mutex<Option<(Instant, Arc<Vec<BucketName>>)>>,
    /// Names a lookup just found absent, and when: `create` right after
    /// such a lookup (how the kernel creates a file) trusts it instead of
    /// asking the store again.
    absent: Mutex<HashMap<(Ino, String), Instant>>,
    /// Directories this mount made, and when. Right after `mkdir` found
    /// the name free (no object, no key under it), every name the store
    /// holds in it was made through this mount, so for the same trust as
    /// [`Self::absent`] a lookup of a name the inode table does not hold
    /// is answered absent without asking the store (each file `cp -r`
    /// copies into a new directory saves a round of calls). A forgotten
    /// child ends the trust: its name may exist in the store unknown here.
    fresh_dirs: Mutex<HashMap<Ino, Instant>>,
    /// Set once the session exists: lets `open` drop the kernel's cached
    /// attributes of a file another mount replaced.
    pub(crate) notifier: Arc<OnceLock<Notifier>>,
    /// The `.quarry` tree, when the mount was given a kernel runner.
    pub(crate) kernels: Option<KernelFiles>,
}

impl<B: ObjectBackend> Mount<B> {
    /// A file system over `backend`; checks `options` and starts the
    /// mount's runtime unless one was given.
    pub fn new(backend: Arc<B>, options: MountOptions) -> Result<Self> {
        options.validate()?;
        let (runtime, owned) = match &options.runtime {
            Some(handle) => (handle.clone(), OwnedRuntime(None)),
            None => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("quarry-mount")
                    .enable_all()
                    .build()
                    .map_err(MountError::Runtime)?;
                (rt.handle().clone(), OwnedRuntime(Some(rt)))
            }
        };
        // SAFETY: getuid and getgid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(Self {
            backend,
            runtime,
            _owned_runtime: owned,
            uid,
            gid,
            started: SystemTime::now(),
            inodes: Mutex::new(InodeTable::new(options.max_inodes)),
            files: Mutex::new(HashMap::new()),
            handles: Mutex::new(Handles {
                next: 1,
                files: HashMap::new(),
                dirs: HashMap::new(),
            }),
            buckets_cache: Mutex::new(None),
            absent: Mutex::new(HashMap::new()),
            fresh_dirs: Mutex::new(HashMap::new()),
            notifier: Arc::new(OnceLock::new()),
            kernels: None,
            options,
        })
    }

    /// Adds the `.quarry` directory of kernel files, run by `runner`
    /// (`None`: no `.quarry`).
    pub fn with_kernels(mut self, runner: Option<Arc<dyn KernelRunner>>) -> Self {
        self.kernels = runner.map(KernelFiles::new);
        self
    }

    /// The virtual `.quarry` node `ino` is, if it is one.
    pub(crate) fn vnode(&self, ino: Ino) -> Option<(&KernelFiles, VNode)> {
        let files = self.kernels.as_ref()?;
        files.node(ino).map(|n| (files, n))
    }

    /// Whether `name` in `parent` is `.quarry` or lies in it: such names
    /// cannot be made, removed or renamed.
    pub(crate) fn is_virtual_name(&self, parent: Ino, name: &OsStr) -> bool {
        self.kernels.is_some()
            && (self.vnode(parent).is_some() || (parent == ROOT && name == QUARRY_DIR))
    }

    fn vattr(&self, files: &KernelFiles, node: VNode) -> FileAttr {
        files.attr(node, self.uid, self.gid, self.started)
    }

    /// The attribute TTL of `ino`: none for the virtual files, whose sizes
    /// change without the kernel seeing a write.
    fn ttl_of(&self, ino: Ino) -> Duration {
        if self.vnode(ino).is_some() {
            Duration::ZERO
        } else {
            self.ttl()
        }
    }

    /// Runs a backend future to completion from a FUSE thread (never an
    /// async context, so blocking here is allowed).
    pub(crate) fn run<F: Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// The runtime (for read-ahead tasks).
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    // ---- attributes -------------------------------------------------------

    fn attr(&self, ino: Ino, kind: Kind, size_bytes: u64, mtime: SystemTime) -> FileAttr {
        let (kind, perm, nlink) = match kind {
            Kind::Dir => (FileType::Directory, 0o755, 2),
            Kind::File => (FileType::RegularFile, 0o644, 1),
        };
        FileAttr {
            ino: INodeNo(ino),
            size: size_bytes,
            blocks: size_bytes.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: mtime,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK_BYTES,
            flags: 0,
        }
    }

    pub(crate) fn dir_attr(&self, ino: Ino) -> FileAttr {
        self.attr(ino, Kind::Dir, 0, self.started)
    }

    pub(crate) fn file_attr(&self, ino: Ino, size_bytes: u64, mtime: SystemTime) -> FileAttr {
        self.attr(ino, Kind::File, size_bytes, mtime)
    }

    pub(crate) fn meta_attr(&self, ino: Ino, meta: &ObjectMeta) -> FileAttr {
        self.file_attr(ino, meta.size_bytes, unix_ms(meta.created_unix_ms))
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.options.attr_ttl
    }

    // ---- names ------------------------------------------------------------

    /// Where an attached node lives.
    pub(crate) fn location(&self, ino: Ino) -> FsResult<Location> {
        lock(&self.inodes).location(ino)
    }

    /// The bucket names, cached for the attribute TTL (mkdir and rmdir of a
    /// bucket through this mount drop the cache).
    pub(crate) fn bucket_names(&self) -> FsResult<Arc<Vec<BucketName>>> {
        if let Some((at, names)) = lock(&self.buckets_cache).as_ref() {
            if at.elapsed() < self.options.attr_ttl {
                return Ok(Arc::clone(names));
            }
        }
        let names = Arc::new(
            self.run(self.backend.buckets())
                .map_err(|e| store_errno("buckets", &"/", &e))?,
        );
        *lock(&self.buckets_cache) = Some((Instant::now(), Arc::clone(&names)));
        Ok(names)
    }

    pub(crate) fn forget_buckets(&self) {
        *lock(&self.buckets_cache) = None;
    }

    /// What `loc` is in the store: a bucket, a file (an object), a
    /// directory (a prefix some key has), or nothing (`ENOENT`). A key that
    /// is both an object and a prefix of other keys shows as the file.
    pub(crate) fn resolve(&self, loc: &Location) -> FsResult<Found> {
        match loc {
            Location::Root => Ok(Found::Dir),
            Location::Bucket(b) => {
                if self.bucket_names()?.contains(b) {
                    return Ok(Found::Dir);
                }
                // Not in the cached list: maybe made since, by another client.
                self.forget_buckets();
                if self.bucket_names()?.contains(b) {
                    Ok(Found::Dir)
                } else {
                    Err(Errno::ENOENT)
                }
            }
            Location::Entry { bucket, key } => {
                // Both questions at once: a name that is neither (every
                // new file `cp` makes) costs one round of calls, not two.
                let prefix = format!("{key}/");
                let (head, under) = self.run(async {
                    tokio::join!(
                        self.backend.head(bucket, key),
                        self.backend.list(bucket, &prefix, None, 1)
                    )
                });
                match head {
                    Ok(meta) => return Ok(Found::File(meta)),
                    Err(StoreError::NoSuchObject { .. }) => {}
                    Err(e) => return Err(store_errno("head", loc, &e)),
                }
                let under = under.map_err(|e| store_errno("list", loc, &e))?;
                if under.is_empty() {
                    Err(Errno::ENOENT)
                } else {
                    Ok(Found::Dir)
                }
            }
        }
    }

    /// The attributes of `ino` from its open spool, if it has one.
    pub(crate) fn spool_attr(&self, ino: Ino) -> Option<FileAttr> {
        let of = lock(&self.files).get(&ino).cloned()?;
        let slot = lock(&of.spool);
        let spool = slot.as_ref()?;
        Some(self.file_attr(ino, spool.size_bytes, spool.mtime))
    }

    pub(crate) fn open_file(&self, ino: Ino) -> Option<Arc<OpenFile>> {
        lock(&self.files).get(&ino).cloned()
    }

    pub(crate) fn handle(&self, fh: FileHandle) -> FsResult<Arc<OpenHandle>> {
        lock(&self.handles)
            .files
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// Registers a file handle (bounded by `max_open_handles`).
    pub(crate) fn add_handle(&self, h: OpenHandle) -> FsResult<u64> {
        let mut hs = lock(&self.handles);
        if hs.files.len() + hs.dirs.len() >= self.options.max_open_handles {
            tracing::warn!(
                max_open_handles = self.options.max_open_handles,
                "too many open handles"
            );
            return Err(Errno::ENFILE);
        }
        let fh = hs.next;
        hs.next += 1;
        hs.files.insert(fh, Arc::new(h));
        Ok(fh)
    }

    // ---- operations that fit here ------------------------------------------

    fn do_lookup(&self, parent: Ino, name: &OsStr) -> FsResult<FileAttr> {
        let name = name.to_str().ok_or(Errno::ENOENT)?;
        if let Some(files) = &self.kernels {
            if parent == ROOT && name == QUARRY_DIR {
                return Ok(self.vattr(files, VNode::Root));
            }
            if let Some(dir) = files.node(parent) {
                let node = files.lookup(dir, name)?;
                return Ok(self.vattr(files, node));
            }
        }
        if name == DIR_MARKER {
            return Err(Errno::ENOENT);
        }
        let parent_loc = self.location(parent)?;
        let loc = match parent_loc.child(name) {
            Ok(loc) => loc,
            Err(Errno::ENAMETOOLONG) => return Err(Errno::ENAMETOOLONG),
            // A name the store cannot hold names nothing.
            Err(_) => return Err(Errno::ENOENT),
        };
        // A file open in this mount is what its spool says (it may not be
        // in the store yet).
        let local = lock(&self.inodes).child(parent, name);
        if let Some(ino) = local {
            if let Some(attr) = self.spool_attr(ino) {
                lock(&self.inodes).add_lookup(ino);
                return Ok(attr);
            }
        }
        if local.is_none() && self.is_fresh_dir(parent) {
            self.note_absent(parent, name);
            return Err(Errno::ENOENT);
        }
        let found = match self.resolve(&loc) {
            Err(Errno::ENOENT) => {
                self.note_absent(parent, name);
                return Err(Errno::ENOENT);
            }
            found => found?,
        };
        let mut inodes = lock(&self.inodes);
        match found {
            Found::Dir => {
                let ino = inodes.intern(parent, name, Kind::Dir)?;
                inodes.add_lookup(ino);
                Ok(self.dir_attr(ino))
            }
            Found::File(meta) => {
                let ino = inodes.intern(parent, name, Kind::File)?;
                inodes.add_lookup(ino);
                inodes.swap_seen_version(ino, meta.version);
                Ok(self.meta_attr(ino, &meta))
            }
        }
    }

    fn note_absent(&self, parent: Ino, name: &str) {
        if self.options.attr_ttl.is_zero() {
            return;
        }
        let mut absent = lock(&self.absent);
        if absent.len() >= MAX_ABSENT_NAMES {
            absent.clear();
        }
        absent.insert((parent, name.to_string()), Instant::now());
    }

    /// Notes a directory this mount just made (see `fresh_dirs`).
    pub(crate) fn note_fresh_dir(&self, ino: Ino) {
        if self.options.attr_ttl.is_zero() {
            return;
        }
        let mut fresh = lock(&self.fresh_dirs);
        if fresh.len() >= MAX_ABSENT_NAMES {
            fresh.clear();
        }
        fresh.insert(ino, Instant::now());
    }

    /// Whether `dir` was made by this mount within the trust window.
    fn is_fresh_dir(&self, dir: Ino) -> bool {
        let trust = self.options.attr_ttl.min(ABSENT_TRUST);
        let mut fresh = lock(&self.fresh_dirs);
        match fresh.get(&dir) {
            Some(at) if at.elapsed() < trust => true,
            Some(_) => {
                fresh.remove(&dir);
                false
            }
            None => false,
        }
    }

    /// Whether a lookup found `name` absent within [`ABSENT_TRUST`] (and
    /// the attribute TTL); the note is used up. A file another mount
    /// creates in between is then replaced at close (or, with `O_EXCL`,
    /// not refused): the same race as between a `head` here and the upload
    /// at close, which the store's unconditional put never closed.
    pub(crate) fn take_absent(&self, parent: Ino, name: &str) -> bool {
        let trust = self.options.attr_ttl.min(ABSENT_TRUST);
        lock(&self.absent)
            .remove(&(parent, name.to_string()))
            .is_some_and(|at| at.elapsed() < trust)
    }

    fn do_getattr(&self, ino: Ino, fh: Option<FileHandle>) -> FsResult<FileAttr> {
        if let Some((files, node)) = self.vnode(ino) {
            return Ok(self.vattr(files, node));
        }
        if let Some(attr) = self.spool_attr(ino) {
            return Ok(attr);
        }
        let kind = lock(&self.inodes).kind(ino).ok_or(Errno::ENOENT)?;
        if kind == Kind::Dir {
            return Ok(self.dir_attr(ino));
        }
        let loc = match self.location(ino) {
            Ok(loc) => loc,
            Err(e) => {
                // An unlinked file still open: what its handle saw.
                let h = fh.and_then(|fh| self.handle(fh).ok()).ok_or(e)?;
                let r = lock(&h.reader);
                return Ok(self.file_attr(ino, r.size_bytes, unix_ms(r.created_unix_ms)));
            }
        };
        let Location::Entry { bucket, key } = &loc else {
            return Ok(self.dir_attr(ino));
        };
        let meta = self
            .run(self.backend.head(bucket, key))
            .map_err(|e| store_errno("head", &loc, &e))?;
        lock(&self.inodes).swap_seen_version(ino, meta.version);
        Ok(self.meta_attr(ino, &meta))
    }
}

/// Making a name in `.quarry`: it is full (`EACCES`); making `.quarry`
/// itself: it is there (`EEXIST`).
fn virtual_create_errno(parent: Ino) -> Errno {
    if parent == ROOT {
        Errno::EEXIST
    } else {
        Errno::EACCES
    }
}

/// `ms` since the Unix epoch as a time.
pub(crate) fn unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A file name as UTF-8 (keys are UTF-8): `EINVAL` otherwise.
pub(crate) fn utf8(name: &OsStr) -> FsResult<&str> {
    name.to_str().ok_or(Errno::EINVAL)
}

impl<B: ObjectBackend> Filesystem for Mount<B> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // O_TRUNC arrives with `open` instead of as a separate truncate, so
        // an overwrite is one new version, stored at close.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC) {
            tracing::info!(
                ?missing,
                "kernel without atomic O_TRUNC: overwrites store an empty version first"
            );
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.flush_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.do_lookup(parent.0, name) {
            Ok(attr) => reply.entry(&self.ttl_of(attr.ino.0), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let parent = {
            let mut inodes = lock(&self.inodes);
            let parent = inodes.parent(ino.0);
            inodes.forget(ino.0, nlookup);
            parent
        };
        // A name this mount made may now be missing from the inode table:
        // its directory can no longer answer absent by itself.
        if let Some(p) = parent {
            lock(&self.fresh_dirs).remove(&p);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.do_getattr(ino.0, fh) {
            Ok(attr) => reply.attr(&self.ttl_of(ino.0), &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if let Some((files, node)) = self.vnode(ino.0) {
            // As for objects, only the size means anything (and only
            // `input` has one to change).
            match size.map_or(Ok(()), |size| files.set_size(node, size)) {
                Ok(()) => reply.attr(&Duration::ZERO, &self.vattr(files, node)),
                Err(e) => reply.error(e),
            }
            return;
        }
        // Modes, owners and times are not stored (objects have none);
        // they are accepted so that `cp -p`, `touch` and SQLite's fchmod
        // succeed. Only the size changes anything.
        let result = match size {
            Some(size) => self.truncate(ino.0, size, fh),
            None => Ok(()),
        }
        .and_then(|()| {
            if let Some(t) = mtime {
                self.set_spool_mtime(ino.0, t);
            }
            self.do_getattr(ino.0, fh)
        });
        match result {
            Ok(attr) => reply.attr(&self.ttl(), &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if self.is_virtual_name(parent.0, name) {
            reply.error(virtual_create_errno(parent.0));
            return;
        }
        // Only regular files: an object has no other type to be.
        if mode & libc::S_IFMT != libc::S_IFREG {
            reply.error(Errno::EPERM);
            return;
        }
        match self.do_mknod(parent.0, name) {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        if self.is_virtual_name(parent.0, name) {
            reply.error(virtual_create_errno(parent.0));
            return;
        }
        match self.do_mkdir(parent.0, name) {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.is_virtual_name(parent.0, name) {
            reply.error(Errno::EPERM);
            return;
        }
        match self.do_unlink(parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.is_virtual_name(parent.0, name) {
            reply.error(Errno::EPERM);
            return;
        }
        match self.do_rmdir(parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if self.is_virtual_name(parent.0, name) || self.is_virtual_name(newparent.0, newname) {
            reply.error(Errno::EPERM);
            return;
        }
        match self.do_rename(parent.0, name, newparent.0, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if let Some((files, node)) = self.vnode(ino.0) {
            // Direct I/O: every read reaches `read` here, although the
            // size the kernel was told (0 for `output`) says nothing.
            match files.open(node, flags) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
                Err(e) => reply.error(e),
            }
            return;
        }
        match self.do_open(ino.0, flags) {
            // No KEEP_CACHE: the kernel drops its cached pages at every
            // open, so a reader sees the version `open` just checked.
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if let Some((files, node)) = self.vnode(ino.0) {
            match files.read(node, fh.0, offset, size, |f| self.run(f)) {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(e),
            }
            return;
        }
        match self.do_read(ino.0, fh, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Some((files, node)) = self.vnode(ino.0) {
            match files.write(node, offset, data) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            }
            return;
        }
        match self.do_write(ino.0, fh, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Every close(2) flushes: the file becomes a new version here, and
        // a failed upload is close's error.
        match self.upload_if_dirty(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some((files, node)) = self.vnode(ino.0) {
            files.release(node, fh.0);
            reply.ok();
            return;
        }
        self.do_release(ino.0, fh);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.upload_if_dirty(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.do_opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.do_readdir(ino.0, fh, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.handles).dirs.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Directory changes reach the store before their calls return.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // The store's free space is not known here; report plenty, so that
        // programs checking before they write go ahead (a full store fails
        // the upload with EIO, named in the log).
        let blocks = (1u64 << 50) / u64::from(BLOCK_BYTES);
        reply.statfs(
            blocks,
            blocks,
            blocks,
            1 << 32,
            1 << 32,
            BLOCK_BYTES,
            255,
            BLOCK_BYTES,
        );
    }

    // Objects have no extended attributes, no preallocation and no holes
    // to seek; ENOSYS (instead of fuser's default, the same errno with a
    // warning each time) makes the kernel stop asking: xattr calls then
    // fail with EOPNOTSUPP, and lseek and copy_file_range use the kernel's
    // generic code over read and write.
    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: i64,
        _whence: i32,
        reply: ReplyLseek,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        if self.is_virtual_name(parent.0, name) {
            // `echo x > .quarry/K/input` opens an existing file, so this
            // is only ever a new name.
            reply.error(virtual_create_errno(parent.0));
            return;
        }
        match self.do_create(parent.0, name, flags) {
            Ok((attr, fh)) => reply.created(
                &self.ttl(),
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }
}

impl<B: ObjectBackend> Mount<B> {
    /// Registers a directory handle (bounded with the file handles).
    pub(crate) fn add_dir_handle(&self) -> FsResult<u64> {
        let mut hs = lock(&self.handles);
        if hs.files.len() + hs.dirs.len() >= self.options.max_open_handles {
            tracing::warn!(
                max_open_handles = self.options.max_open_handles,
                "too many open handles"
            );
            return Err(Errno::ENFILE);
        }
        let fh = hs.next;
        hs.next += 1;
        hs.dirs.insert(fh, Arc::new(Mutex::new(None)));
        Ok(fh)
    }
}
