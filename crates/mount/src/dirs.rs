//! Names: directory listings, mkdir/rmdir (buckets at the top, marker
//! objects below), unlink, and rename (copy, then delete: the store has no
//! rename).

use std::collections::BTreeMap;
use std::ffi::OsStr;

use bytes::Bytes;
use fuser::{Errno, FileAttr, FileHandle, FileType, INodeNo, RenameFlags, ReplyDirectory};
use quarry_store_api::{BucketName, Condition, ObjectKey, StoreError};

use crate::backend::{ObjectBackend, ObjectMeta};
use crate::error::{store_errno, FsResult};
use crate::fs::{lock, utf8, DirEntry, Found, Mount, DIR_MARKER, LIST_PAGE};
use crate::inode::{checked_key, Ino, Kind, Location};
use crate::kernel_files::VNode;

/// One object a rename moved: bucket and key it now has, and the version
/// it had and has.
type Moved = (BucketName, ObjectKey, u64, u64);

impl<B: ObjectBackend> Mount<B> {
    // ---- listing -----------------------------------------------------------

    pub(crate) fn do_opendir(&self, ino: Ino) -> FsResult<u64> {
        if let Some((_, node)) = self.vnode(ino) {
            return match node {
                VNode::Root | VNode::Dir(_) => self.add_dir_handle(),
                _ => Err(Errno::ENOTDIR),
            };
        }
        match lock(&self.inodes).kind(ino) {
            None => return Err(Errno::ENOENT),
            Some(Kind::File) => return Err(Errno::ENOTDIR),
            Some(Kind::Dir) => {}
        }
        self.add_dir_handle()
    }

    pub(crate) fn do_readdir(
        &self,
        ino: Ino,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(slot) = lock(&self.handles).dirs.get(&fh.0).cloned() else {
            reply.error(Errno::EBADF);
            return;
        };
        let mut listing = lock(&slot);
        // The listing is taken once per pass (offset 0) and served from
        // memory after, so offsets stay meaningful while it is read.
        if offset == 0 || listing.is_none() {
            match self.list_dir(ino) {
                Ok(entries) => *listing = Some(entries),
                Err(e) => {
                    reply.error(e);
                    return;
                }
            }
        }
        let entries = listing.as_deref().unwrap_or_default();
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let kind = match e.kind {
                Kind::Dir => FileType::Directory,
                Kind::File => FileType::RegularFile,
            };
            if reply.add(INodeNo(e.ino), i as u64 + 1, kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    /// `.`, `..` and the children of a directory, by name.
    fn list_dir(&self, ino: Ino) -> FsResult<Vec<DirEntry>> {
        if let Some((files, node)) = self.vnode(ino) {
            return Ok(files
                .list(node)?
                .into_iter()
                .map(|(ino, kind, name)| DirEntry { ino, kind, name })
                .collect());
        }
        // The root does not list `.quarry`: it is no bucket, and `find`,
        // `grep -r` or `du` over the mount must not run every kernel by
        // reading its `output` files. It is there to those who name it.
        let loc = self.location(ino)?;
        let mut names: BTreeMap<String, Kind> = BTreeMap::new();
        match (&loc, loc.dir_prefix()) {
            (Location::Root, _) => {
                self.forget_buckets();
                for b in self.bucket_names()?.iter() {
                    names.insert(b.to_string(), Kind::Dir);
                }
            }
            (Location::Bucket(bucket) | Location::Entry { bucket, .. }, Some(prefix)) => {
                self.list_children(bucket, &prefix, &loc, &mut names)?;
            }
            _ => return Err(Errno::EIO),
        }
        // Files created here and not stored yet are there all the same.
        let local: Vec<Ino> = lock(&self.files).keys().copied().collect();
        for f in local {
            if !self.is_local_only(f) {
                continue;
            }
            let inodes = lock(&self.inodes);
            if inodes.parent(f) == Some(ino) && inodes.is_attached(f) {
                if let Some(name) = inodes.name(f) {
                    names.entry(name.to_string()).or_insert(Kind::File);
                }
            }
        }
        let inodes = lock(&self.inodes);
        let parent = inodes.parent(ino).unwrap_or(ino);
        let mut entries = Vec::with_capacity(names.len() + 2);
        entries.push(DirEntry {
            ino,
            kind: Kind::Dir,
            name: ".".to_string(),
        });
        entries.push(DirEntry {
            ino: parent,
            kind: Kind::Dir,
            name: "..".to_string(),
        });
        for (name, kind) in names {
            entries.push(DirEntry {
                ino: inodes.peek_ino(ino, &name),
                kind,
                name,
            });
        }
        Ok(entries)
    }

    /// The names directly under `prefix` in `bucket`: an object's next path
    /// segment is a file if it is the last one, else a directory. The store
    /// lists keys flat, so after a page that ends inside a subdirectory the
    /// next page starts past that subdirectory's keys.
    fn list_children(
        &self,
        bucket: &BucketName,
        prefix: &str,
        loc: &Location,
        names: &mut BTreeMap<String, Kind>,
    ) -> FsResult<()> {
        let max = self.options.max_dir_entries;
        let mut after: Option<ObjectKey> = None;
        // Each page adds at least one name (barring keys that sort past the
        // skip key below, which are rarer than rare), so this bounds it.
        for _ in 0..=max {
            let page = self
                .run(self.backend.list(bucket, prefix, after.as_ref(), LIST_PAGE))
                .map_err(|e| store_errno("list", loc, &e))?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            for m in &page {
                let Some(rest) = m.key.as_str().strip_prefix(prefix) else {
                    continue;
                };
                match rest.split_once('/') {
                    None if rest == DIR_MARKER => {}
                    // A key that is also a directory shows as the file.
                    None => {
                        names.insert(rest.to_string(), Kind::File);
                    }
                    Some((dir, _)) => {
                        names.entry(dir.to_string()).or_insert(Kind::Dir);
                    }
                }
            }
            if names.len() > max {
                tracing::warn!(path = %loc, max_dir_entries = max, "directory too large to list; raise max_dir_entries");
                return Err(Errno::EIO);
            }
            if page.len() < LIST_PAGE {
                return Ok(());
            }
            let mut next = last.key.clone();
            let rest = last.key.as_str().strip_prefix(prefix).unwrap_or_default();
            if let Some((dir, _)) = rest.split_once('/') {
                // U+10FFFF sorts after every other character.
                if let Ok(skip) = ObjectKey::new(&format!("{prefix}{dir}/\u{10FFFF}")) {
                    next = next.max(skip);
                }
            }
            after = Some(next);
        }
        tracing::warn!(path = %loc, "listing did not finish within its bound");
        Err(Errno::EIO)
    }

    // ---- mkdir / rmdir -------------------------------------------------------

    pub(crate) fn do_mkdir(&self, parent: Ino, name: &OsStr) -> FsResult<FileAttr> {
        let name = utf8(name)?;
        if name == DIR_MARKER {
            return Err(Errno::EINVAL);
        }
        let parent_loc = self.location(parent)?;
        let loc = parent_loc.child(name)?;
        match &loc {
            Location::Bucket(bucket) => {
                self.forget_buckets();
                self.run(self.backend.create_bucket(bucket))
                    .map_err(|e| store_errno("mkdir", &loc, &e))?;
            }
            Location::Entry { bucket, key } => {
                let local = lock(&self.inodes).child(parent, name);
                if local.is_some_and(|ino| self.is_local_only(ino)) {
                    return Err(Errno::EEXIST);
                }
                match self.resolve(&loc) {
                    Ok(_) => return Err(Errno::EEXIST),
                    Err(Errno::ENOENT) => {}
                    Err(e) => return Err(e),
                }
                self.put_marker(bucket, key, &loc)?;
            }
            Location::Root => return Err(Errno::EEXIST),
        }
        let ino = {
            let mut inodes = lock(&self.inodes);
            let ino = inodes.intern(parent, name, Kind::Dir)?;
            inodes.add_lookup(ino);
            ino
        };
        // Only a directory inside a bucket: a new bucket is where other
        // tools (`quarry put`) store right after `mkdir`, and its lookups
        // keep asking.
        if matches!(loc, Location::Entry { .. }) {
            self.note_fresh_dir(ino);
        }
        Ok(self.dir_attr(ino))
    }

    /// Stores the empty marker that keeps directory `key` alive.
    fn put_marker(&self, bucket: &BucketName, key: &ObjectKey, loc: &Location) -> FsResult<()> {
        // A directory whose marker would not fit the key length cannot
        // persist empty, so it cannot be made.
        let marker = checked_key(&format!("{key}/{DIR_MARKER}"))?;
        match self.run(
            self.backend
                .put_bytes(bucket, &marker, Bytes::new(), Condition::IfAbsent),
        ) {
            Ok(_) | Err(StoreError::VersionMismatch { .. }) => Ok(()),
            Err(e) => Err(store_errno("mkdir", loc, &e)),
        }
    }

    /// After the last entry of directory `dir` went (unlink, rmdir, rename
    /// away), stores its marker: a directory does not vanish because it
    /// became empty. Buckets need none; failures are logged, not returned
    /// (the operation itself succeeded).
    fn keep_dir_alive(&self, dir: &Location) {
        let Location::Entry { bucket, key } = dir else {
            return;
        };
        let prefix = format!("{key}/");
        match self.run(self.backend.list(bucket, &prefix, None, 1)) {
            Ok(under) if under.is_empty() => {
                if let Err(e) = self.put_marker(bucket, key, dir) {
                    tracing::warn!(path = %dir, errno = e.code(), "could not keep an emptied directory");
                }
            }
            Ok(_) => {}
            Err(e) => {
                store_errno("list", dir, &e);
            }
        }
    }

    /// Whether a file created here and not stored yet lies under `dir`.
    fn has_local_files_under(&self, dir: Ino) -> bool {
        let inos: Vec<Ino> = lock(&self.files).keys().copied().collect();
        inos.into_iter()
            .any(|f| self.is_local_only(f) && lock(&self.inodes).is_under(f, dir))
    }

    pub(crate) fn do_rmdir(&self, parent: Ino, name: &OsStr) -> FsResult<()> {
        let name = utf8(name).map_err(|_| Errno::ENOENT)?;
        let parent_loc = self.location(parent)?;
        let loc = parent_loc.child(name).map_err(not_found)?;
        let child = lock(&self.inodes).child(parent, name);
        if child.is_some_and(|c| self.has_local_files_under(c)) {
            return Err(Errno::ENOTEMPTY);
        }
        match &loc {
            Location::Bucket(bucket) => {
                self.forget_buckets();
                self.run(self.backend.delete_bucket(bucket))
                    .map_err(|e| store_errno("rmdir", &loc, &e))?;
            }
            Location::Entry { bucket, key } => {
                let prefix = format!("{key}/");
                let marker = format!("{prefix}{DIR_MARKER}");
                let under = self
                    .run(self.backend.list(bucket, &prefix, None, 2))
                    .map_err(|e| store_errno("rmdir", &loc, &e))?;
                if under.iter().any(|m| m.key.as_str() != marker) {
                    return Err(Errno::ENOTEMPTY);
                }
                if under.is_empty() {
                    return match self.resolve(&loc) {
                        Ok(Found::File(_)) => Err(Errno::ENOTDIR),
                        Ok(Found::Dir) => Err(Errno::ENOTEMPTY),
                        Err(e) => Err(e),
                    };
                }
                let marker = checked_key(&marker)?;
                match self.run(self.backend.delete(bucket, &marker, Condition::Always)) {
                    Ok(_) | Err(StoreError::NoSuchObject { .. }) => {}
                    Err(e) => return Err(store_errno("rmdir", &loc, &e)),
                }
                self.keep_dir_alive(&parent_loc);
            }
            Location::Root => return Err(Errno::EBUSY),
        }
        if let Some(c) = child {
            lock(&self.inodes).detach(c);
        }
        Ok(())
    }

    // ---- unlink --------------------------------------------------------------

    pub(crate) fn do_unlink(&self, parent: Ino, name: &OsStr) -> FsResult<()> {
        let name = utf8(name).map_err(|_| Errno::ENOENT)?;
        if name == DIR_MARKER {
            return Err(Errno::ENOENT);
        }
        let parent_loc = self.location(parent)?;
        let loc = parent_loc.child(name).map_err(not_found)?;
        let Location::Entry { bucket, key } = &loc else {
            return Err(Errno::EISDIR);
        };
        let child = lock(&self.inodes).child(parent, name);
        if child.is_some_and(|c| lock(&self.inodes).kind(c) == Some(Kind::Dir)) {
            return Err(Errno::EISDIR);
        }
        let local_only = child.is_some_and(|c| self.is_local_only(c));
        match self.run(self.backend.delete(bucket, key, Condition::Always)) {
            Ok(_) => {}
            Err(StoreError::NoSuchObject { .. }) if local_only => {}
            Err(StoreError::NoSuchObject { .. }) => {
                return match self.resolve(&loc) {
                    Ok(Found::Dir) => Err(Errno::EISDIR),
                    _ => Err(Errno::ENOENT),
                };
            }
            Err(e) => return Err(store_errno("unlink", &loc, &e)),
        }
        if let Some(c) = child {
            // Still-open handles keep reading and writing the spool, but
            // nothing of it is stored any more.
            self.discard_spool_changes(c);
            lock(&self.inodes).detach(c);
        }
        self.keep_dir_alive(&parent_loc);
        Ok(())
    }

    // ---- rename --------------------------------------------------------------

    pub(crate) fn do_rename(
        &self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> FsResult<()> {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        let name = utf8(name).map_err(|_| Errno::ENOENT)?;
        let new_name = utf8(new_name)?;
        if name == DIR_MARKER {
            return Err(Errno::ENOENT);
        }
        if new_name == DIR_MARKER {
            return Err(Errno::EINVAL);
        }
        let src_parent = self.location(parent)?;
        let dst_parent = self.location(new_parent)?;
        let src = src_parent.child(name).map_err(not_found)?;
        let dst = dst_parent.child(new_name)?;
        if src == dst {
            return Ok(());
        }
        let (src_ino, dst_ino) = {
            let inodes = lock(&self.inodes);
            (
                inodes.child(parent, name),
                inodes.child(new_parent, new_name),
            )
        };
        let src_kind = if src_ino.is_some_and(|i| self.is_local_only(i)) {
            Kind::File
        } else {
            match self.resolve(&src)? {
                Found::Dir => Kind::Dir,
                Found::File(_) => Kind::File,
            }
        };
        let dst_kind = if dst_ino.is_some_and(|i| self.is_local_only(i)) {
            Some(Kind::File)
        } else {
            match self.resolve(&dst) {
                Ok(Found::Dir) => Some(Kind::Dir),
                Ok(Found::File(_)) => Some(Kind::File),
                Err(Errno::ENOENT) => None,
                Err(e) => return Err(e),
            }
        };
        if flags.contains(RenameFlags::RENAME_NOREPLACE) && dst_kind.is_some() {
            return Err(Errno::EEXIST);
        }
        let moved = match (src_kind, dst_kind) {
            (Kind::File, _) if matches!(dst, Location::Bucket(_)) => return Err(Errno::EPERM),
            (Kind::File, Some(Kind::Dir)) => return Err(Errno::EISDIR),
            (Kind::File, _) => self.rename_file(src_ino, &src, &dst)?,
            (Kind::Dir, Some(Kind::File)) => return Err(Errno::ENOTDIR),
            (Kind::Dir, dst_kind) => {
                if dst_kind.is_some() && !self.dir_is_empty(&dst)? {
                    return Err(Errno::ENOTEMPTY);
                }
                self.rename_dir(src_ino, &src, &dst, dst_kind.is_some())?
            }
        };
        {
            let mut inodes = lock(&self.inodes);
            match src_ino {
                Some(ino) => inodes.rename(ino, new_parent, new_name),
                None => {
                    if let Some(old) = dst_ino {
                        inodes.detach(old);
                    }
                }
            }
        }
        if let Some(old) = dst_ino.filter(|d| Some(*d) != src_ino) {
            // A file open here that the rename replaced stores nothing more.
            self.discard_spool_changes(old);
        }
        self.repin(&moved);
        if matches!(src, Location::Bucket(_)) || matches!(dst, Location::Bucket(_)) {
            self.forget_buckets();
        }
        self.keep_dir_alive(&src_parent);
        Ok(())
    }

    /// Whether a directory (or bucket) holds nothing but its marker.
    fn dir_is_empty(&self, dir: &Location) -> FsResult<bool> {
        let (Some(bucket), Some(prefix)) = (dir.bucket(), dir.dir_prefix()) else {
            return Ok(false);
        };
        let marker = format!("{prefix}{DIR_MARKER}");
        let under = self
            .run(self.backend.list(bucket, &prefix, None, 2))
            .map_err(|e| store_errno("rename", dir, &e))?;
        Ok(under.iter().all(|m| m.key.as_str() == marker))
    }

    /// A file: its open spool is uploaded under the new name, or else the
    /// object is copied; then the old key is deleted.
    fn rename_file(
        &self,
        src_ino: Option<Ino>,
        src: &Location,
        dst: &Location,
    ) -> FsResult<Vec<Moved>> {
        let (
            Location::Entry {
                bucket: src_bucket,
                key: src_key,
            },
            Location::Entry {
                bucket: dst_bucket,
                key: dst_key,
            },
        ) = (src, dst)
        else {
            return Err(Errno::EINVAL);
        };
        if let Some(uploaded) = src_ino.and_then(|ino| self.upload_spool_to(ino, dst)) {
            if uploaded?.is_some() {
                self.delete_moved(src_bucket, src_key, Condition::Always, src);
            }
            return Ok(Vec::new());
        }
        let (from, meta) = self.copy_object(src_bucket, src_key, dst_bucket, dst_key, src)?;
        self.delete_moved(src_bucket, src_key, Condition::IfVersion(from), src);
        Ok(vec![(
            dst_bucket.clone(),
            dst_key.clone(),
            from,
            meta.version,
        )])
    }

    /// Deletes the old key of a moved object. A failure leaves both names
    /// (never neither) and is logged: the rename itself happened.
    fn delete_moved(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
        loc: &Location,
    ) {
        match self.run(self.backend.delete(bucket, key, condition)) {
            Ok(_) | Err(StoreError::NoSuchObject { .. }) => {}
            Err(StoreError::VersionMismatch { .. }) => {
                tracing::warn!(path = %loc, "rename: the source was replaced while it was copied; the newer version stays under the old name");
            }
            Err(e) => {
                store_errno("rename (delete the old name)", loc, &e);
            }
        }
    }

    /// Copies one object (one version, whole) to another key; returns the
    /// version copied and the new object. Up to the read-ahead size in
    /// memory, larger ones through a spool file.
    fn copy_object(
        &self,
        src_bucket: &BucketName,
        src_key: &ObjectKey,
        dst_bucket: &BucketName,
        dst_key: &ObjectKey,
        src: &Location,
    ) -> FsResult<(u64, ObjectMeta)> {
        let meta = self
            .run(self.backend.head(src_bucket, src_key))
            .map_err(|e| store_errno("rename", src, &e))?;
        let put_error =
            |e: StoreError| store_errno("rename (copy)", &format!("/{dst_bucket}/{dst_key}"), &e);
        if meta.size_bytes <= self.options.read_ahead_bytes {
            let (m, data) = self
                .run(
                    self.backend
                        .get_range(src_bucket, src_key, 0, meta.size_bytes),
                )
                .map_err(|e| store_errno("rename", src, &e))?;
            let new = self
                .run(
                    self.backend
                        .put_bytes(dst_bucket, dst_key, data, Condition::Always),
                )
                .map_err(put_error)?;
            return Ok((m.version, new));
        }
        let src_loc = Location::Entry {
            bucket: src_bucket.clone(),
            key: src_key.clone(),
        };
        let (sp, _) = self.fill_spool(&src_loc, u64::MAX, None)?;
        let from = sp.base_version.ok_or(Errno::ENOENT)?;
        let new = self
            .put_spool(&sp, dst_bucket, dst_key, Condition::Always)
            .map_err(put_error)?;
        Ok((from, new))
    }

    /// A directory (or bucket): every object under it is copied to the new
    /// prefix, then the old ones are deleted (and an old bucket). Not
    /// atomic: others see the copies appear, then the originals go; if a
    /// copy fails, the copies made are deleted again and nothing changed.
    fn rename_dir(
        &self,
        src_ino: Option<Ino>,
        src: &Location,
        dst: &Location,
        dst_exists: bool,
    ) -> FsResult<Vec<Moved>> {
        let (Some(src_bucket), Some(src_prefix), Some(dst_bucket), Some(dst_prefix)) = (
            src.bucket(),
            src.dir_prefix(),
            dst.bucket(),
            dst.dir_prefix(),
        ) else {
            return Err(Errno::EINVAL);
        };
        // Files created or changed here move too: store them first.
        if let Some(dir) = src_ino {
            let inos: Vec<Ino> = lock(&self.files).keys().copied().collect();
            for f in inos {
                if lock(&self.inodes).is_under(f, dir) {
                    self.upload_if_dirty(f)?;
                }
            }
        }
        let max = self.options.max_rename_objects;
        let mut objects: Vec<ObjectMeta> = Vec::new();
        let mut after: Option<ObjectKey> = None;
        loop {
            let page = self
                .run(
                    self.backend
                        .list(src_bucket, &src_prefix, after.as_ref(), LIST_PAGE),
                )
                .map_err(|e| store_errno("rename", src, &e))?;
            let full = page.len() == LIST_PAGE;
            after = page.last().map(|m| m.key.clone());
            objects.extend(page);
            if objects.len() > max {
                tracing::warn!(path = %src, max_rename_objects = max,
                    "directory too large to rename in place (EXDEV: mv copies it instead)");
                return Err(Errno::EXDEV);
            }
            if !full {
                break;
            }
        }
        // Every new name is checked before anything changes.
        let mut targets = Vec::with_capacity(objects.len());
        for m in &objects {
            let rest = m.key.as_str().strip_prefix(&src_prefix).ok_or(Errno::EIO)?;
            targets.push(checked_key(&format!("{dst_prefix}{rest}"))?);
        }
        let mut created_bucket = false;
        if let Location::Bucket(b) = dst {
            if !dst_exists {
                self.run(self.backend.create_bucket(b))
                    .map_err(|e| store_errno("rename", dst, &e))?;
                created_bucket = true;
            }
        }
        let mut moved: Vec<(ObjectKey, Moved)> = Vec::with_capacity(objects.len());
        for (m, target) in objects.iter().zip(targets) {
            match self.copy_object(src_bucket, &m.key, dst_bucket, &target, src) {
                Ok((from, new)) => moved.push((
                    m.key.clone(),
                    (dst_bucket.clone(), target, from, new.version),
                )),
                Err(e) => {
                    for (_, (b, k, _, v)) in &moved {
                        let _ = self.run(self.backend.delete(b, k, Condition::IfVersion(*v)));
                    }
                    if let (true, Location::Bucket(b)) = (created_bucket, dst) {
                        let _ = self.run(self.backend.delete_bucket(b));
                    }
                    return Err(e);
                }
            }
        }
        if objects.is_empty() {
            // An empty bucket moved below the top: keep it as a directory.
            if let Location::Entry { bucket, key } = dst {
                self.put_marker(bucket, key, dst)?;
            }
        }
        for (old_key, (_, _, from, _)) in &moved {
            self.delete_moved(src_bucket, old_key, Condition::IfVersion(*from), src);
        }
        if let Location::Bucket(b) = src {
            if let Err(e) = self.run(self.backend.delete_bucket(b)) {
                store_errno("rename (delete the old bucket)", src, &e);
            }
        }
        Ok(moved.into_iter().map(|(_, m)| m).collect())
    }
}

/// A name the store cannot hold names nothing that exists (too long stays
/// too long).
fn not_found(e: Errno) -> Errno {
    if e == Errno::ENAMETOOLONG {
        e
    } else {
        Errno::ENOENT
    }
}
