//! The FUSE callbacks: a pass-through to the backing directory for names
//! and metadata, with file data and sizes going through each file's
//! [`Overlay`] until an fsync.
//!
//! Every callback takes the one lock: the tests this serves are about
//! order, not speed, and one lock makes a power loss a clean cut between
//! two operations.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::overlay::{Overlay, PAGE_BYTES};
use crate::{LossReport, PowerLoss};

/// Attributes and names are never cached by the kernel: after a power loss
/// a size may go back, and the next `stat` must see it.
const TTL: Duration = Duration::ZERO;
/// Inodes the table may name at once (files and directories ever looked up).
const MAX_INODES: usize = 1 << 20;
/// Open files at once.
const MAX_HANDLES: usize = 1 << 16;
/// Largest write the kernel is asked to send in one request.
const MAX_WRITE_BYTES: u32 = 1 << 20;

struct Node {
    /// Relative to the backing directory; empty for the root.
    path: PathBuf,
    /// Unlinked (or replaced by a rename) while still open.
    orphan: bool,
}

struct Handle {
    ino: u64,
    file: Arc<File>,
    /// The power-loss generation it was opened in: a request on a handle of
    /// a process that died at an earlier power loss must not land.
    generation: u64,
}

pub(crate) struct Tables {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<PathBuf, u64>,
    next_ino: u64,
    overlays: HashMap<u64, Overlay>,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    generation: u64,
    held_bytes: u64,
    syncs: u64,
}

/// What the mount handle and the callbacks share.
pub(crate) struct Shared {
    pub backing: PathBuf,
    pub max_unsynced_bytes: u64,
    tables: Mutex<Tables>,
}

impl Shared {
    pub fn new(backing: PathBuf, max_unsynced_bytes: u64) -> Shared {
        let mut nodes = HashMap::new();
        nodes.insert(
            INodeNo::ROOT.0,
            Node {
                path: PathBuf::new(),
                orphan: false,
            },
        );
        let mut by_path = HashMap::new();
        by_path.insert(PathBuf::new(), INodeNo::ROOT.0);
        Shared {
            backing,
            max_unsynced_bytes,
            tables: Mutex::new(Tables {
                nodes,
                by_path,
                next_ino: INodeNo::ROOT.0 + 1,
                overlays: HashMap::new(),
                handles: HashMap::new(),
                next_fh: 1,
                generation: 0,
                held_bytes: 0,
                syncs: 0,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Tables> {
        // A panic in one callback must not wedge the mount for the test.
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn unsynced_bytes(&self) -> u64 {
        self.lock().held_bytes
    }

    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// Drops (or keeps a random part of) everything unsynced, and makes
    /// every open handle stale.
    pub fn power_loss(&self, loss: PowerLoss) -> io::Result<LossReport> {
        let mut t = self.lock();
        t.generation += 1;
        let mut rng = SplitMix(match loss {
            PowerLoss::DropAll => 0,
            PowerLoss::KeepSome { seed, .. } => seed,
        });
        let mut survives = || match loss {
            PowerLoss::DropAll => false,
            PowerLoss::KeepSome { keep_per_mille, .. } => {
                rng.next() % 1000 < u64::from(keep_per_mille)
            }
        };
        let mut report = LossReport::default();
        let overlays = std::mem::take(&mut t.overlays);
        for (ino, mut overlay) in overlays {
            let Some(node) = t.nodes.get(&ino).filter(|n| !n.orphan) else {
                continue;
            };
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.backing.join(&node.path))?;
            let len = file.metadata()?.len();
            let lost = overlay.lose(&file, len, &mut survives)?;
            report.files += 1;
            report.pages_dropped += lost.pages_dropped;
            report.pages_kept += lost.pages_kept;
            report.sizes_reverted += u64::from(lost.size_reverted);
        }
        t.held_bytes = 0;
        Ok(report)
    }
}

/// SplitMix64: which unsynced pages a power loss keeps, from a seed.
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

/// The file system handed to fuser.
pub(crate) struct CrashFs {
    pub shared: Arc<Shared>,
}

fn errno(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn system_time(secs: i64, nanos: i64) -> SystemTime {
    let nanos = u32::try_from(nanos).unwrap_or(0);
    match u64::try_from(secs) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, nanos),
        Err(_) => UNIX_EPOCH,
    }
}

fn attr_of(ino: u64, md: &std::fs::Metadata, size: u64) -> FileAttr {
    let ft = md.file_type();
    let kind = if ft.is_dir() {
        FileType::Directory
    } else if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_block_device() {
        FileType::BlockDevice
    } else if ft.is_char_device() {
        FileType::CharDevice
    } else if ft.is_fifo() {
        FileType::NamedPipe
    } else if ft.is_socket() {
        FileType::Socket
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: system_time(md.atime(), md.atime_nsec()),
        mtime: system_time(md.mtime(), md.mtime_nsec()),
        ctime: system_time(md.ctime(), md.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind,
        perm: (md.mode() & 0o7777) as u16,
        nlink: u32::try_from(md.nlink()).unwrap_or(u32::MAX),
        uid: md.uid(),
        gid: md.gid(),
        rdev: u32::try_from(md.rdev()).unwrap_or(0),
        blksize: PAGE_BYTES as u32,
        flags: 0,
    }
}

impl Tables {
    fn path_of(&self, ino: u64) -> Result<&Path, Errno> {
        self.nodes
            .get(&ino)
            .map(|n| n.path.as_path())
            .ok_or(Errno::ENOENT)
    }

    /// The inode of `path`, named now if it had none.
    fn ino_of(&mut self, path: PathBuf) -> Result<u64, Errno> {
        if let Some(&ino) = self.by_path.get(&path) {
            return Ok(ino);
        }
        if self.nodes.len() >= MAX_INODES {
            return Err(Errno::ENFILE);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.by_path.insert(path.clone(), ino);
        self.nodes.insert(
            ino,
            Node {
                path,
                orphan: false,
            },
        );
        Ok(ino)
    }

    /// Forgets the name `path` (unlinked, or replaced by a rename): an open
    /// file keeps its inode, a closed one loses its unsynced state.
    fn orphan(&mut self, path: &Path) {
        let Some(ino) = self.by_path.remove(path) else {
            return;
        };
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.orphan = true;
        }
        if !self.handles.values().any(|h| h.ino == ino) {
            self.nodes.remove(&ino);
            self.drop_overlay(ino);
        }
    }

    fn drop_overlay(&mut self, ino: u64) {
        if let Some(o) = self.overlays.remove(&ino) {
            self.held_bytes -= o.held_bytes();
        }
    }

    /// Renames every inode at or under `from` to the same place under `to`.
    fn moved(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (old, ino) in moved {
            self.by_path.remove(&old);
            let rest = old.strip_prefix(from).unwrap_or(Path::new(""));
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.by_path.insert(new.clone(), ino);
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.path = new;
            }
        }
    }

    fn handle(&self, fh: FileHandle) -> Result<&Handle, Errno> {
        let h = self.handles.get(&fh.0).ok_or(Errno::EBADF)?;
        if h.generation != self.generation {
            // Opened before a power loss: the process that held it is gone.
            return Err(Errno::EIO);
        }
        Ok(h)
    }

    fn add_handle(&mut self, ino: u64, file: File) -> Result<u64, Errno> {
        if self.handles.len() >= MAX_HANDLES {
            return Err(Errno::ENFILE);
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(
            fh,
            Handle {
                ino,
                file: Arc::new(file),
                generation: self.generation,
            },
        );
        Ok(fh)
    }

    /// Runs `f` on the overlay of `ino` and keeps the held-bytes count. An
    /// operation that may hold up to `growth_bytes` more is refused first
    /// (`ENOSPC`, nothing applied) if that could pass `limit`: the bound is
    /// on memory, and a test whose load outgrows it learns so.
    fn with_overlay<R>(
        &mut self,
        ino: u64,
        limit: u64,
        growth_bytes: u64,
        f: impl FnOnce(&mut Overlay) -> io::Result<R>,
    ) -> Result<R, Errno> {
        if self.held_bytes.saturating_add(growth_bytes) > limit {
            return Err(Errno::ENOSPC);
        }
        let overlay = self.overlays.entry(ino).or_default();
        let before = overlay.held_bytes();
        let result = f(overlay);
        let after = overlay.held_bytes();
        if overlay.is_clean() {
            self.overlays.remove(&ino);
        }
        self.held_bytes = self.held_bytes - before + after;
        result.map_err(|e| errno(&e))
    }

    fn attr(&self, backing: &Path, ino: u64, file: Option<&File>) -> Result<FileAttr, Errno> {
        let md = match file {
            Some(f) => f.metadata(),
            None => std::fs::symlink_metadata(backing.join(self.path_of(ino)?)),
        }
        .map_err(|e| errno(&e))?;
        let size = match self.overlays.get(&ino) {
            Some(o) if md.is_file() => o.size_bytes(md.len()),
            _ => md.len(),
        };
        Ok(attr_of(ino, &md, size))
    }
}

fn backing_len(file: &File) -> io::Result<u64> {
    Ok(file.metadata()?.len())
}

fn open_backing(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).open(path)
}

impl CrashFs {
    fn child(&self, t: &Tables, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        if name.as_bytes().contains(&b'/') || name == "." || name == ".." {
            return Err(Errno::EINVAL);
        }
        Ok(t.path_of(parent.0)?.join(name))
    }

    fn entry(&self, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        let mut t = self.shared.lock();
        let path = self.child(&t, parent, name)?;
        std::fs::symlink_metadata(self.shared.backing.join(&path)).map_err(|e| errno(&e))?;
        let ino = t.ino_of(path)?;
        t.attr(&self.shared.backing, ino, None)
    }

    fn set_attr(
        &self,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr, Errno> {
        let mut t = self.shared.lock();
        let path = self.shared.backing.join(t.path_of(ino.0)?);
        if let Some(mode) = mode {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777))
                .map_err(|e| errno(&e))?;
        }
        if uid.is_some() || gid.is_some() {
            std::os::unix::fs::lchown(&path, uid, gid).map_err(|e| errno(&e))?;
        }
        if let Some(size) = size {
            let file = match fh {
                Some(fh) => Arc::clone(&t.handle(fh)?.file),
                None => Arc::new(open_backing(&path).map_err(|e| errno(&e))?),
            };
            let limit = self.shared.max_unsynced_bytes;
            t.with_overlay(ino.0, limit, 0, |o| {
                o.truncate(size, backing_len(&file)?);
                Ok(())
            })?;
        }
        let file = fh
            .and_then(|fh| t.handle(fh).ok())
            .map(|h| Arc::clone(&h.file));
        t.attr(&self.shared.backing, ino.0, file.as_deref())
    }

    fn create_file(
        &self,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<(FileAttr, u64), Errno> {
        let mut t = self.shared.lock();
        let path = self.child(&t, parent, name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode & !umask & 0o7777)
            .open(self.shared.backing.join(&path))
            .map_err(|e| errno(&e))?;
        let ino = t.ino_of(path)?;
        let attr = t.attr(&self.shared.backing, ino, Some(&file))?;
        let fh = t.add_handle(ino, file)?;
        Ok((attr, fh))
    }

    fn rename_inner(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let mut t = self.shared.lock();
        let from = self.child(&t, parent, name)?;
        let to = self.child(&t, newparent, newname)?;
        let (abs_from, abs_to) = (
            self.shared.backing.join(&from),
            self.shared.backing.join(&to),
        );
        if flags.bits() & !libc::RENAME_NOREPLACE != 0 {
            return Err(Errno::EINVAL);
        }
        if flags.bits() & libc::RENAME_NOREPLACE != 0 && abs_to.symlink_metadata().is_ok() {
            return Err(Errno::EEXIST);
        }
        std::fs::rename(&abs_from, &abs_to).map_err(|e| errno(&e))?;
        if from != to {
            t.orphan(&to);
            t.moved(&from, &to);
        }
        Ok(())
    }

    /// Removes a name with `remove_backing` (a file or an empty directory).
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        remove_backing: fn(&Path) -> io::Result<()>,
    ) -> Result<(), Errno> {
        let mut t = self.shared.lock();
        let path = self.child(&t, parent, name)?;
        remove_backing(&self.shared.backing.join(&path)).map_err(|e| errno(&e))?;
        t.orphan(&path);
        Ok(())
    }

    fn write_inner(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<u32, Errno> {
        let mut t = self.shared.lock();
        let file = Arc::clone(&t.handle(fh)?.file);
        let limit = self.shared.max_unsynced_bytes;
        // A write holds the pages it touches: its bytes and one partial
        // page at each end.
        let growth = data.len() as u64 + 2 * PAGE_BYTES;
        t.with_overlay(ino.0, limit, growth, |o| {
            o.write(&file, offset, data, backing_len(&file)?)
        })?;
        u32::try_from(data.len()).map_err(|_| Errno::EINVAL)
    }

    fn read_inner(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, Errno> {
        let t = self.shared.lock();
        let file = &t.handle(fh)?.file;
        let len = backing_len(file).map_err(|e| errno(&e))?;
        match t.overlays.get(&ino.0) {
            Some(o) => o.read(file, offset, u64::from(size), len),
            None => Overlay::default().read(file, offset, u64::from(size), len),
        }
        .map_err(|e| errno(&e))
    }

    fn fsync_inner(&self, ino: INodeNo, fh: FileHandle) -> Result<(), Errno> {
        let mut t = self.shared.lock();
        let file = Arc::clone(&t.handle(fh)?.file);
        t.syncs += 1;
        if !t.overlays.contains_key(&ino.0) {
            return Ok(());
        }
        t.with_overlay(ino.0, u64::MAX, 0, |o| o.sync(&file, backing_len(&file)?))
    }

    fn fallocate_inner(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        let mut t = self.shared.lock();
        let file = Arc::clone(&t.handle(fh)?.file);
        let limit = self.shared.max_unsynced_bytes;
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let zeroes = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        let known =
            libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 || (mode & libc::FALLOC_FL_PUNCH_HOLE != 0 && !keep_size) {
            return Err(Errno::EOPNOTSUPP);
        }
        let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
        // Whole zeroed pages hold nothing; a partial page at each end does.
        t.with_overlay(ino.0, limit, 2 * PAGE_BYTES, |o| {
            let len = backing_len(&file)?;
            if zeroes {
                o.zero(&file, offset, length, len)?;
            }
            if !keep_size && end > o.size_bytes(len) {
                o.truncate(end, len);
            }
            Ok(())
        })
    }

    fn readdir_inner(
        &self,
        ino: INodeNo,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Result<(), Errno> {
        let mut t = self.shared.lock();
        let dir = t.path_of(ino.0)?.to_path_buf();
        let mut entries: Vec<(u64, FileType, std::ffi::OsString)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        let listing = std::fs::read_dir(self.shared.backing.join(&dir)).map_err(|e| errno(&e))?;
        for entry in listing {
            let entry = entry.map_err(|e| errno(&e))?;
            let kind = match entry.file_type() {
                Ok(ft) if ft.is_dir() => FileType::Directory,
                Ok(ft) if ft.is_symlink() => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            let child = t.ino_of(dir.join(entry.file_name()))?;
            entries.push((child, kind, entry.file_name()));
        }
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, &name) {
                break;
            }
        }
        Ok(())
    }
}

impl Filesystem for CrashFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Larger writes if the kernel allows them; the default is fine too.
        let _ = config.set_max_write(MAX_WRITE_BYTES);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.entry(parent, name) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let t = self.shared.lock();
        let file = fh
            .and_then(|fh| t.handles.get(&fh.0))
            .map(|h| Arc::clone(&h.file));
        match t.attr(&self.shared.backing, ino.0, file.as_deref()) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.set_attr(ino, mode, uid, gid, size, fh) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let made = {
            let t = self.shared.lock();
            self.child(&t, parent, name).and_then(|path| {
                std::fs::DirBuilder::new()
                    .mode(mode & !umask & 0o7777)
                    .create(self.shared.backing.join(path))
                    .map_err(|e| errno(&e))
            })
        };
        match made.and_then(|()| self.entry(parent, name)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name, |p| std::fs::remove_file(p)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name, |p| std::fs::remove_dir(p)) {
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
        match self.rename_inner(parent, name, newparent, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut t = self.shared.lock();
        let opened = t
            .path_of(ino.0)
            .map(|p| self.shared.backing.join(p))
            .and_then(|path| {
                let file = open_backing(&path).map_err(|e| errno(&e))?;
                t.add_handle(ino.0, file)
            });
        match opened {
            // Direct I/O: the kernel keeps no copy of the data, so what a
            // read returns is always what this file system holds.
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
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
        match self.read_inner(ino, fh, offset, size) {
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
        match self.write_inner(ino, fh, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable.
        reply.ok();
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
        let mut t = self.shared.lock();
        t.handles.remove(&fh.0);
        let orphan = t.nodes.get(&ino.0).is_some_and(|n| n.orphan);
        if orphan && !t.handles.values().any(|h| h.ino == ino.0) {
            t.nodes.remove(&ino.0);
            t.drop_overlay(ino.0);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.fsync_inner(ino, fh) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.readdir_inner(ino, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Names are durable at once (see the crate doc).
        self.shared.lock().syncs += 1;
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let Ok(path) = CString::new(self.shared.backing.as_os_str().as_bytes()) else {
            reply.error(Errno::EINVAL);
            return;
        };
        // SAFETY: statvfs(3) fills the zeroed struct we own from a valid
        // NUL-terminated path; nothing else is touched.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            reply.error(errno(&io::Error::last_os_error()));
            return;
        }
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            u32::try_from(st.f_bsize).unwrap_or(4096),
            u32::try_from(st.f_namemax).unwrap_or(255),
            u32::try_from(st.f_frsize).unwrap_or(4096),
        );
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.create_file(parent, name, mode, umask) {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.fallocate_inner(ino, fh, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
