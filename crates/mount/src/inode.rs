//! Inode numbers and the names they stand for.
//!
//! A node is (parent inode, name), so renaming a directory changes one node
//! and its descendants follow. An inode number is a hash of (parent inode,
//! name), so a path keeps its number within a mount even after the kernel
//! forgot it and looked it up again; a collision with a live node (or a
//! node that was unlinked or renamed away but is still held by the kernel)
//! moves to the next free number.

use std::collections::HashMap;

use fuser::Errno;
use quarry_store_api::{BucketName, ObjectKey, MAX_BUCKET_LEN, MAX_KEY_LEN, MAX_KEY_SEGMENT_LEN};

use crate::error::FsResult;
use crate::kernel_files::FIRST_HASHED_INO;

/// An inode number.
pub(crate) type Ino = u64;

/// The root directory's inode number (FUSE's).
pub(crate) const ROOT: Ino = 1;

/// Deepest a path can be: a key of 1024 bytes has at most 512 segments.
const MAX_DEPTH: usize = MAX_KEY_LEN / 2 + 2;

/// How many numbers past its hash a new node may probe for a free one.
const MAX_PROBES: u64 = 64;

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A bucket or a directory inside one (the root is one too).
    Dir,
    /// An object.
    File,
}

/// Where a node lives in the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Location {
    /// The mount's root: the list of buckets.
    Root,
    /// A bucket's top directory.
    Bucket(BucketName),
    /// An object, or a directory made of the keys under `key/`.
    Entry {
        /// The bucket.
        bucket: BucketName,
        /// The object's key, or the directory's path within the bucket.
        key: ObjectKey,
    },
}

impl Location {
    /// The bucket, unless this is the root.
    pub(crate) fn bucket(&self) -> Option<&BucketName> {
        match self {
            Location::Root => None,
            Location::Bucket(b) | Location::Entry { bucket: b, .. } => Some(b),
        }
    }

    /// The key prefix of everything inside this directory: `""` for a
    /// bucket, `"key/"` for a directory inside one; `None` for the root.
    pub(crate) fn dir_prefix(&self) -> Option<String> {
        match self {
            Location::Root => None,
            Location::Bucket(_) => Some(String::new()),
            Location::Entry { key, .. } => Some(format!("{key}/")),
        }
    }

    /// The location of `name` inside this directory, checked against the
    /// store's naming rules: `ENAMETOOLONG` for a name or key too long,
    /// `EINVAL` for any other rule.
    pub(crate) fn child(&self, name: &str) -> FsResult<Location> {
        match self {
            Location::Root => {
                if name.len() > MAX_BUCKET_LEN {
                    return Err(Errno::ENAMETOOLONG);
                }
                BucketName::new(name)
                    .map(Location::Bucket)
                    .map_err(|_| Errno::EINVAL)
            }
            Location::Bucket(bucket) => Ok(Location::Entry {
                bucket: bucket.clone(),
                key: checked_key(name)?,
            }),
            Location::Entry { bucket, key } => Ok(Location::Entry {
                bucket: bucket.clone(),
                key: checked_key(&format!("{key}/{name}"))?,
            }),
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Root => f.write_str("/"),
            Location::Bucket(b) => write!(f, "/{b}"),
            Location::Entry { bucket, key } => write!(f, "/{bucket}/{key}"),
        }
    }
}

/// `key` as an [`ObjectKey`], with length errors told apart from the other
/// rules (programs expect `ENAMETOOLONG` for those).
pub(crate) fn checked_key(key: &str) -> FsResult<ObjectKey> {
    if key.len() > MAX_KEY_LEN || key.split('/').any(|s| s.len() > MAX_KEY_SEGMENT_LEN) {
        return Err(Errno::ENAMETOOLONG);
    }
    ObjectKey::new(key).map_err(|_| Errno::EINVAL)
}

struct Node {
    parent: Ino,
    name: String,
    kind: Kind,
    /// Lookups the kernel holds (it forgets them with `forget`).
    lookups: u64,
    /// Open handles on the node.
    opens: u64,
    /// Attached nodes still in the table whose parent this is.
    children: u64,
    /// Whether (parent, name) still names this node; an unlinked or
    /// replaced node stays, detached, while the kernel holds it.
    attached: bool,
    /// The object version whose attributes the kernel was last given.
    seen_version: Option<u64>,
}

/// The table of nodes, bounded by `max_nodes`.
pub(crate) struct InodeTable {
    nodes: HashMap<Ino, Node>,
    index: HashMap<(Ino, String), Ino>,
    max_nodes: usize,
}

/// MurmurHash3's 64-bit finaliser.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The inode number (parent, name) hashes to: FNV-1a over the name, seeded
/// with the parent, finalised; never 0, the root's or one of the numbers
/// kept for `.quarry`.
pub(crate) fn hashed_ino(parent: Ino, name: &str) -> Ino {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ parent.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let h = fmix64(h);
    if h < FIRST_HASHED_INO {
        h + FIRST_HASHED_INO
    } else {
        h
    }
}

impl InodeTable {
    /// A table holding only the root.
    pub(crate) fn new(max_nodes: usize) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                parent: ROOT,
                name: String::new(),
                kind: Kind::Dir,
                lookups: 1,
                opens: 0,
                children: 0,
                attached: true,
                seen_version: None,
            },
        );
        Self {
            nodes,
            index: HashMap::new(),
            max_nodes,
        }
    }

    /// The kind of a node in the table.
    pub(crate) fn kind(&self, ino: Ino) -> Option<Kind> {
        self.nodes.get(&ino).map(|n| n.kind)
    }

    /// Whether a node is in the table and still named by its path.
    pub(crate) fn is_attached(&self, ino: Ino) -> bool {
        self.nodes.get(&ino).is_some_and(|n| n.attached)
    }

    /// The parent of a node (the root is its own).
    pub(crate) fn parent(&self, ino: Ino) -> Option<Ino> {
        self.nodes.get(&ino).map(|n| n.parent)
    }

    /// The name of an attached node.
    pub(crate) fn name(&self, ino: Ino) -> Option<&str> {
        self.nodes
            .get(&ino)
            .filter(|n| n.attached)
            .map(|n| n.name.as_str())
    }

    /// The attached node named `name` in `parent`.
    pub(crate) fn child(&self, parent: Ino, name: &str) -> Option<Ino> {
        self.index.get(&(parent, name.to_string())).copied()
    }

    /// The number `name` in `parent` has or would get (for `readdir`, which
    /// does not add nodes).
    pub(crate) fn peek_ino(&self, parent: Ino, name: &str) -> Ino {
        self.child(parent, name)
            .unwrap_or_else(|| hashed_ino(parent, name))
    }

    /// Where an attached node lives; `ENOENT` for one unknown or detached
    /// (or under a detached directory).
    pub(crate) fn location(&self, ino: Ino) -> FsResult<Location> {
        let mut names: Vec<&str> = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let node = self.nodes.get(&at).ok_or(Errno::ENOENT)?;
            if !node.attached {
                return Err(Errno::ENOENT);
            }
            names.push(&node.name);
            if names.len() > MAX_DEPTH {
                tracing::error!(ino, "inode table: path deeper than any key allows");
                return Err(Errno::EIO);
            }
            at = node.parent;
        }
        names.reverse();
        let mut loc = Location::Root;
        for name in names {
            loc = loc.child(name)?;
        }
        Ok(loc)
    }

    /// Whether `ino` is `ancestor` or lies under it.
    pub(crate) fn is_under(&self, mut ino: Ino, ancestor: Ino) -> bool {
        for _ in 0..=MAX_DEPTH {
            if ino == ancestor {
                return true;
            }
            if ino == ROOT {
                return false;
            }
            match self.nodes.get(&ino) {
                Some(n) if n.attached => ino = n.parent,
                _ => return false,
            }
        }
        false
    }

    /// The node for `name` in `parent` as `kind`, adding it if needed. A
    /// node of the other kind under that name is detached first (the kernel
    /// must never see one inode number change type).
    pub(crate) fn intern(&mut self, parent: Ino, name: &str, kind: Kind) -> FsResult<Ino> {
        if let Some(ino) = self.child(parent, name) {
            if self.nodes.get(&ino).map(|n| n.kind) == Some(kind) {
                return Ok(ino);
            }
            self.detach(ino);
        }
        if self.nodes.len() >= self.max_nodes {
            tracing::warn!(
                max_inodes = self.max_nodes,
                "inode table full (raise max_inodes, or the kernel will free some under memory pressure)"
            );
            return Err(Errno::ENFILE);
        }
        let start = hashed_ino(parent, name);
        let ino = (0..MAX_PROBES)
            .map(|i| start.wrapping_add(i))
            .find(|i| *i >= FIRST_HASHED_INO && !self.nodes.contains_key(i))
            .ok_or_else(|| {
                tracing::error!(start, "no free inode number near the hash");
                Errno::EIO
            })?;
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_string(),
                kind,
                lookups: 0,
                opens: 0,
                children: 0,
                attached: true,
                seen_version: None,
            },
        );
        self.index.insert((parent, name.to_string()), ino);
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children += 1;
        }
        Ok(ino)
    }

    /// One more kernel lookup of `ino`.
    pub(crate) fn add_lookup(&mut self, ino: Ino) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.lookups += 1;
        }
    }

    /// The kernel forgot `count` lookups of `ino`.
    pub(crate) fn forget(&mut self, ino: Ino, count: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(count);
        }
        self.maybe_remove(ino);
    }

    /// One more open handle on `ino`.
    pub(crate) fn add_open(&mut self, ino: Ino) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.opens += 1;
        }
    }

    /// One open handle on `ino` closed.
    pub(crate) fn drop_open(&mut self, ino: Ino) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.opens = n.opens.saturating_sub(1);
        }
        self.maybe_remove(ino);
    }

    /// The version whose attributes the kernel has for `ino`, and records
    /// `version` as the new one.
    pub(crate) fn swap_seen_version(&mut self, ino: Ino, version: u64) -> Option<u64> {
        self.nodes
            .get_mut(&ino)
            .and_then(|n| n.seen_version.replace(version))
    }

    /// (parent, name) no longer names `ino` (unlinked, removed or replaced);
    /// the node stays while the kernel or a handle holds it.
    pub(crate) fn detach(&mut self, ino: Ino) {
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        if !n.attached || ino == ROOT {
            return;
        }
        n.attached = false;
        let key = (n.parent, std::mem::take(&mut n.name));
        let parent = n.parent;
        if self.index.get(&key) == Some(&ino) {
            self.index.remove(&key);
        }
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children = p.children.saturating_sub(1);
        }
        self.maybe_remove(parent);
        self.maybe_remove(ino);
    }

    /// Moves `ino` to `name` in `new_parent`, detaching whatever was there.
    pub(crate) fn rename(&mut self, ino: Ino, new_parent: Ino, name: &str) {
        if let Some(old) = self.child(new_parent, name) {
            if old != ino {
                self.detach(old);
            }
        }
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        let old_parent = n.parent;
        let old_key = (old_parent, std::mem::replace(&mut n.name, name.to_string()));
        n.parent = new_parent;
        let was_attached = std::mem::replace(&mut n.attached, true);
        if was_attached && self.index.get(&old_key) == Some(&ino) {
            self.index.remove(&old_key);
        }
        self.index.insert((new_parent, name.to_string()), ino);
        if let Some(p) = self.nodes.get_mut(&new_parent) {
            p.children += 1;
        }
        if was_attached {
            if let Some(p) = self.nodes.get_mut(&old_parent) {
                p.children = p.children.saturating_sub(1);
            }
            self.maybe_remove(old_parent);
        }
    }

    /// Removes `ino` if nothing holds it any more (no lookups, handles or
    /// children), then its parent likewise, up the chain (bounded by the
    /// depth of a path).
    fn maybe_remove(&mut self, mut ino: Ino) {
        for _ in 0..=MAX_DEPTH {
            if ino == ROOT {
                return;
            }
            let Some(n) = self.nodes.get(&ino) else {
                return;
            };
            if n.lookups > 0 || n.opens > 0 || n.children > 0 {
                return;
            }
            let attached = n.attached;
            let key = (n.parent, n.name.clone());
            let parent = n.parent;
            self.nodes.remove(&ino);
            if !attached {
                return;
            }
            if self.index.get(&key) == Some(&ino) {
                self.index.remove(&key);
            }
            if let Some(p) = self.nodes.get_mut(&parent) {
                p.children = p.children.saturating_sub(1);
            }
            ino = parent;
        }
    }

    /// Nodes in the table (the root included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_keeps_its_number_after_forget_and_collisions_probe() {
        let mut t = InodeTable::new(1024);
        let b = t.intern(ROOT, "photos", Kind::Dir).unwrap();
        t.add_lookup(b);
        let f = t.intern(b, "cat.jpg", Kind::File).unwrap();
        t.add_lookup(f);
        assert_eq!(f, hashed_ino(b, "cat.jpg"));
        assert_eq!(
            t.location(f).unwrap().to_string(),
            "/photos/cat.jpg".to_string()
        );
        t.forget(f, 1);
        assert_eq!(t.len(), 2);
        let again = t.intern(b, "cat.jpg", Kind::File).unwrap();
        assert_eq!(again, f);
        t.add_lookup(again);
        // Unlinked but held: a new file of the same name gets another number.
        t.detach(again);
        let new = t.intern(b, "cat.jpg", Kind::File).unwrap();
        assert_ne!(new, again);
        assert!(t.location(again).is_err());
        t.forget(again, 1);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn renaming_a_directory_moves_its_descendants() {
        let mut t = InodeTable::new(1024);
        let b = t.intern(ROOT, "b", Kind::Dir).unwrap();
        let d = t.intern(b, "d", Kind::Dir).unwrap();
        let f = t.intern(d, "f", Kind::File).unwrap();
        for i in [b, d, f] {
            t.add_lookup(i);
        }
        let e = t.intern(b, "e", Kind::Dir).unwrap();
        t.add_lookup(e);
        t.rename(d, e, "d2");
        assert_eq!(t.location(f).unwrap().to_string(), "/b/e/d2/f");
        assert!(t.is_under(f, e));
        assert!(!t.is_under(f, ROOT + 12345));
        assert_eq!(t.child(b, "d"), None);
        // A kind change detaches the old node.
        let x = t.intern(e, "d2", Kind::File).unwrap();
        assert_ne!(x, d);
        assert!(!t.is_attached(d));
    }

    #[test]
    fn the_table_is_bounded_and_names_are_checked() {
        let mut t = InodeTable::new(3);
        let b = t.intern(ROOT, "b", Kind::Dir).unwrap();
        t.add_lookup(b);
        t.intern(b, "x", Kind::File).unwrap();
        assert_eq!(t.intern(b, "y", Kind::File), Err(Errno::ENFILE));
        assert_eq!(Location::Root.child("Photos"), Err(Errno::EINVAL));
        assert_eq!(
            Location::Root.child(&"a".repeat(64)),
            Err(Errno::ENAMETOOLONG)
        );
        let bucket = Location::Root.child("b").unwrap();
        assert_eq!(bucket.child(&"a".repeat(256)), Err(Errno::ENAMETOOLONG));
        assert_eq!(bucket.child("."), Err(Errno::EINVAL));
        assert!(bucket.child("ok").is_ok());
    }
}
