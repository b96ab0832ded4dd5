//! One node's volume registry: the definitions of the volumes it is a
//! member of, kept in `volumes.reg` in the node's data directory.
//!
//! File (little endian), replaced atomically (temp file, fsync, rename,
//! fsync of the directory; `meta::write_atomically`, as the checkpoint):
//!
//! ```text
//! magic "QVOLREGS" | version u32 (1) | node u16 | count u32
//! count x definition (the call encoding's, see wire.rs)
//! CRC-32C of all the bytes before it, u32
//! ```
//!
//! The node id is stored so a data directory moved to a node of another id
//! is refused rather than served under the wrong stripe positions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use quarry_volume_api::{
    VolumeDef, VolumeFields, VolumeReader as Reader, VolumeWriter as Writer, MAX_VOLUMES_PER_NODE,
    MIN_DEF_BYTES,
};

use super::{BlockVolumeError, NodeId};
use crate::{meta, LogicalPage, SpaceManager, VolumeError};

/// The registry's file name in the node's data directory.
pub const REGISTRY_FILE: &str = "volumes.reg";
const MAGIC: &[u8; 8] = b"QVOLREGS";
const VERSION: u32 = 1;
/// Pages trimmed per space manager call when a volume is deleted or
/// trimmed: each call is one log sync, and the batch bounds its memory.
pub(crate) const TRIM_BATCH_PAGES: usize = 4096;
/// Stripes of the page-lock table: enough that unrelated pages rarely
/// share one, few enough that a trim batch can take every one it needs.
pub(crate) const PAGE_LOCK_STRIPES: usize = 1024;
const _: () = assert!(PAGE_LOCK_STRIPES.is_power_of_two() && PAGE_LOCK_STRIPES > 1);

/// A defined volume on this node.
pub(crate) struct Entry {
    pub def: VolumeDef,
    /// This node's position in the member list.
    pub member: usize,
    /// Data calls hold it shared for their whole run; a delete holds it
    /// exclusively while it trims, so no write lands after the trims. The
    /// flag is set once the volume is gone.
    pub gate: tokio::sync::RwLock<bool>,
}

impl Entry {
    /// Holds the gate shared for a data call, or says the volume is gone.
    pub(crate) async fn open_gate(
        &self,
    ) -> Result<tokio::sync::RwLockReadGuard<'_, bool>, BlockVolumeError> {
        let gate = self.gate.read().await;
        if *gate {
            return Err(BlockVolumeError::NotFound {
                name: self.def.name.clone(),
            });
        }
        Ok(gate)
    }
}

/// The volumes one node is a member of, persisted in its data directory.
/// All methods take `&self`; definitions and deletes are serialised.
pub struct VolumeRegistry {
    node: NodeId,
    dir: PathBuf,
    entries: Mutex<BTreeMap<String, Arc<Entry>>>,
    /// Held by a define or delete from its checks to its file write.
    changes: tokio::sync::Mutex<()>,
    /// Page locks, striped by (space, page): an add holds its page's from
    /// its read to its write, and writes and trims hold theirs, so no add
    /// is lost to another add, a write or a trim of the same page. A task
    /// holding more than one takes them in stripe order (`lock_pages`), so
    /// no two calls deadlock.
    page_locks: Box<[tokio::sync::Mutex<()>]>,
}

impl std::fmt::Debug for VolumeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeRegistry")
            .field("node", &self.node)
            .field("dir", &self.dir)
            .field("volumes", &self.volumes().len())
            .finish()
    }
}

impl VolumeRegistry {
    /// Opens node `node`'s registry in `dir` (empty if the file does not
    /// exist yet). A damaged file, or one written by a node of another id,
    /// is an error naming the file.
    pub fn open(node: NodeId, dir: &Path) -> Result<VolumeRegistry, BlockVolumeError> {
        let path = dir.join(REGISTRY_FILE);
        let defs = match std::fs::read(&path) {
            Ok(bytes) => decode_registry(&path, &Bytes::from(bytes), node)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(BlockVolumeError::Registry {
                    path,
                    reason: format!("cannot read it: {e}"),
                })
            }
        };
        let mut entries = BTreeMap::new();
        for def in defs {
            let member = def.members.iter().position(|m| *m == node).ok_or_else(|| {
                BlockVolumeError::Registry {
                    path: path.clone(),
                    reason: format!(
                        "volume {:?} does not list this node ({node}) among its members {:?}",
                        def.name, def.members
                    ),
                }
            })?;
            entries.insert(
                def.name.clone(),
                Arc::new(Entry {
                    def,
                    member,
                    gate: tokio::sync::RwLock::new(false),
                }),
            );
        }
        Ok(VolumeRegistry {
            node,
            dir: dir.to_path_buf(),
            entries: Mutex::new(entries),
            changes: tokio::sync::Mutex::new(()),
            page_locks: (0..PAGE_LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        })
    }

    /// Locks page `page` of space `space_id` (its stripe) against adds,
    /// writes and trims of it on this node.
    pub(crate) async fn lock_page(
        &self,
        space_id: u32,
        page: u64,
    ) -> tokio::sync::MutexGuard<'_, ()> {
        self.page_locks[page_lock_stripe(space_id, page)]
            .lock()
            .await
    }

    /// Locks every page of `pages` in space `space_id`: each stripe once,
    /// in ascending order, the one order every multi-lock holder uses.
    pub(crate) async fn lock_pages(
        &self,
        space_id: u32,
        pages: &[u64],
    ) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = pages
            .iter()
            .map(|p| page_lock_stripe(space_id, *p))
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for s in stripes {
            guards.push(self.page_locks[s].lock().await);
        }
        guards
    }

    /// The node this registry belongs to.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The definitions held here, by name.
    pub fn volumes(&self) -> Vec<VolumeDef> {
        self.lock().values().map(|e| e.def.clone()).collect()
    }

    /// The definition of `name`, if held here.
    pub fn get(&self, name: &str) -> Option<VolumeDef> {
        self.lock().get(name).map(|e| e.def.clone())
    }

    pub(crate) fn entry(&self, name: &str) -> Option<Arc<Entry>> {
        self.lock().get(name).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Entry>>> {
        // Nothing panics while holding it; a poisoned map is still whole.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `def` here. Returns `false` if exactly this volume (same
    /// instance) was defined already, so a repeated define is harmless.
    /// Refuses a name or id in use by another volume, a page size other
    /// than `space`'s, a member list without this node, and more than
    /// [`MAX_VOLUMES_PER_NODE`] volumes. Pages left in the volume's space
    /// by no volume (none are expected) are trimmed first.
    pub async fn define(
        &self,
        def: VolumeDef,
        space: &SpaceManager,
    ) -> Result<bool, BlockVolumeError> {
        def.validate()?;
        let node = self.node;
        let Some(member) = def.members.iter().position(|m| *m == node) else {
            return Err(BlockVolumeError::InvalidMembers {
                reason: format!(
                    "volume {:?} asked node {node} to hold it, but its members are {:?}",
                    def.name, def.members
                ),
            });
        };
        let page_size = space.page_size() as u32;
        if def.page_size_bytes != page_size {
            return Err(BlockVolumeError::PageSizeMismatch {
                node,
                node_page_size_bytes: page_size,
                volume_page_size_bytes: def.page_size_bytes,
            });
        }
        let _changes = self.changes.lock().await;
        let mut defs: Vec<VolumeDef> = {
            let entries = self.lock();
            if let Some(e) = entries.get(&def.name) {
                if e.def == def {
                    return Ok(false);
                }
                return Err(BlockVolumeError::Exists {
                    name: def.name,
                    node,
                });
            }
            if let Some(e) = entries.values().find(|e| e.def.id == def.id) {
                return Err(BlockVolumeError::IdTaken {
                    id: def.id,
                    node,
                    by: e.def.name.clone(),
                });
            }
            if entries.len() >= MAX_VOLUMES_PER_NODE {
                return Err(BlockVolumeError::TooMany {
                    node,
                    what: "volumes on one node".into(),
                    limit: MAX_VOLUMES_PER_NODE as u64,
                });
            }
            entries.values().map(|e| e.def.clone()).collect()
        };
        let leftover = space.pages_in(def.space());
        if !leftover.is_empty() {
            // A delete trims before it drops the definition, so this takes
            // a write that raced a delete; no volume owns these pages.
            tracing::warn!(
                space = def.space(),
                pages = leftover.len(),
                "trimming pages no volume owns before defining volume {:?}",
                def.name
            );
            trim_pages(node, space, def.space(), leftover).await?;
        }
        defs.push(def.clone());
        self.save(defs).await?;
        tracing::info!(
            "volume {:?} defined: id {}, {} pages of {} bytes over nodes {:?}",
            def.name,
            def.id,
            def.size_pages,
            def.page_size_bytes,
            def.members
        );
        self.lock().insert(
            def.name.clone(),
            Arc::new(Entry {
                def,
                member,
                gate: tokio::sync::RwLock::new(false),
            }),
        );
        Ok(true)
    }

    /// Deletes volume `name` here if it is instance `instance`: trims every
    /// page it holds on this node, then drops the definition. Returns the
    /// pages trimmed, or `None` if the volume is not held here. If the trim
    /// or the file write fails the definition stays, so the delete can be
    /// run again.
    pub async fn delete(
        &self,
        name: &str,
        instance: u64,
        space: &SpaceManager,
    ) -> Result<Option<u64>, BlockVolumeError> {
        let _changes = self.changes.lock().await;
        let Some(entry) = self.entry(name) else {
            return Ok(None);
        };
        if entry.def.instance != instance {
            return Err(BlockVolumeError::Stale {
                name: name.to_string(),
                node: self.node,
            });
        }
        // Waits for the data calls in flight; later ones wait here and
        // then find the volume gone.
        let mut gone = entry.gate.write().await;
        let pages = space.pages_in(entry.def.space());
        let trimmed = pages.len() as u64;
        trim_pages(self.node, space, entry.def.space(), pages).await?;
        let defs: Vec<VolumeDef> = self
            .lock()
            .values()
            .filter(|e| e.def.name != name)
            .map(|e| e.def.clone())
            .collect();
        self.save(defs).await?;
        *gone = true;
        self.lock().remove(name);
        tracing::info!("volume {name:?} deleted: {trimmed} pages trimmed");
        Ok(Some(trimmed))
    }

    async fn save(&self, defs: Vec<VolumeDef>) -> Result<(), BlockVolumeError> {
        let bytes = encode_registry(self.node, &defs);
        let dir = self.dir.clone();
        let path = self.dir.join(REGISTRY_FILE);
        // The writes and fsyncs block: off the async threads.
        tokio::task::spawn_blocking(move || meta::write_atomically(&dir, REGISTRY_FILE, &bytes))
            .await
            .map_err(|e| BlockVolumeError::Registry {
                path: path.clone(),
                reason: format!("the write task failed: {e}"),
            })?
            .map_err(|e| BlockVolumeError::Registry {
                path,
                reason: e.to_string(),
            })
    }
}

/// The page-lock stripe of page `page` of space `space_id`: a
/// multiplicative hash, so consecutive pages (and the same page of two
/// volumes) land on different stripes.
pub(crate) fn page_lock_stripe(space_id: u32, page: u64) -> usize {
    let key = (u64::from(space_id) << 40) ^ page;
    // Fibonacci hashing: the top bits of the product are the well-mixed ones.
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let stripe = (h >> (64 - PAGE_LOCK_STRIPES.trailing_zeros())) as usize;
    debug_assert!(stripe < PAGE_LOCK_STRIPES);
    stripe
}

/// Trims `pages` of `space` in batches.
pub(crate) async fn trim_pages(
    node: NodeId,
    space: &SpaceManager,
    space_id: u32,
    pages: Vec<u64>,
) -> Result<(), BlockVolumeError> {
    for batch in pages.chunks(TRIM_BATCH_PAGES) {
        let ids = batch
            .iter()
            .map(|i| LogicalPage::new(space_id, *i))
            .collect();
        space
            .trim_many(ids)
            .await
            .map_err(|e| storage_error(node, e))?;
    }
    Ok(())
}

/// A space manager error as a block-volume error: a full node stays
/// `NoSpace`, the rest carry the manager's message.
pub(crate) fn storage_error(node: NodeId, e: VolumeError) -> BlockVolumeError {
    match e {
        VolumeError::NoSpace { .. } => BlockVolumeError::NoSpace {
            node,
            message: e.to_string(),
        },
        VolumeError::PageSize { expected, got } => BlockVolumeError::PageData {
            page_size_bytes: expected,
            got_bytes: got as u64,
        },
        other => BlockVolumeError::Storage {
            node,
            message: other.to_string(),
        },
    }
}

fn encode_registry(node: NodeId, defs: &[VolumeDef]) -> Vec<u8> {
    let mut w = Writer::default();
    w.raw(MAGIC).u32(VERSION).u16(node).u32(defs.len() as u32);
    for d in defs {
        w.def(d);
    }
    let crc = crc32c::crc32c(&w.0);
    w.u32(crc);
    w.0
}

fn decode_registry(
    path: &Path,
    bytes: &Bytes,
    node: NodeId,
) -> Result<Vec<VolumeDef>, BlockVolumeError> {
    let bad = |reason: String| BlockVolumeError::Registry {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.len() < 8 + 4 + 2 + 4 + 4 || &bytes[..8] != MAGIC {
        return Err(bad(format!(
            "not a volume registry ({} bytes, bad magic or too short)",
            bytes.len()
        )));
    }
    let body = bytes.slice(..bytes.len() - 4);
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&bytes[bytes.len() - 4..]);
    if crc32c::crc32c(&body) != u32::from_le_bytes(crc) {
        return Err(bad("checksum mismatch: the registry is corrupt".into()));
    }
    let mut r = Reader::new("volume registry", &body);
    let decoded = (|| {
        r.take(8)?;
        let version = r.u32()?;
        if version != VERSION {
            return Err(r.malformed(format!(
                "version {version}, this build reads version {VERSION}"
            )));
        }
        let owner = r.u16()?;
        if owner != node {
            return Err(r.malformed(format!(
                "written by node {owner}, this is node {node}: the data directory belongs to \
                 another node"
            )));
        }
        let n = r.count(MIN_DEF_BYTES)?;
        if n > MAX_VOLUMES_PER_NODE {
            return Err(r.malformed(format!("{n} volumes, at most {MAX_VOLUMES_PER_NODE}")));
        }
        let mut defs: Vec<VolumeDef> = Vec::with_capacity(n);
        for _ in 0..n {
            let d = r.def()?;
            if let Some(other) = defs.iter().find(|o| o.name == d.name || o.id == d.id) {
                return Err(r.malformed(format!(
                    "volumes {:?} and {:?} share a name or id",
                    other.name, d.name
                )));
            }
            defs.push(d);
        }
        r.end()?;
        Ok(defs)
    })();
    decoded.map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn def(name: &str, id: u32) -> VolumeDef {
        VolumeDef {
            name: name.into(),
            id,
            instance: u64::from(id) * 31,
            size_pages: 100,
            page_size_bytes: 512,
            members: vec![0, 1],
            created_unix_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn registry_files_round_trip_and_refuse_damage() {
        let p = Path::new("volumes.reg");
        let defs = vec![def("a", 1), def("b", 2)];
        let bytes = Bytes::from(encode_registry(1, &defs));
        assert_eq!(decode_registry(p, &bytes, 1).unwrap(), defs);
        let e = decode_registry(p, &bytes, 0).unwrap_err().to_string();
        assert!(
            e.contains("another node") && e.contains("volumes.reg"),
            "{e}"
        );
        let mut flipped = bytes.to_vec();
        flipped[20] ^= 1;
        let e = decode_registry(p, &Bytes::from(flipped), 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("checksum"), "{e}");
        // Two volumes with one id, with a valid checksum: refused.
        let twins = Bytes::from(encode_registry(1, &[def("a", 1), def("b", 1)]));
        let e = decode_registry(p, &twins, 1).unwrap_err().to_string();
        assert!(e.contains("share a name or id"), "{e}");
    }

    #[test]
    fn page_locks_spread_pages_and_lock_each_stripe_once() {
        // Consecutive pages of one space, and one page of consecutive
        // spaces, rarely share a stripe.
        let stripes: std::collections::BTreeSet<usize> =
            (0..256).map(|p| page_lock_stripe(1001, p)).collect();
        assert!(stripes.len() > 200, "{} stripes", stripes.len());
        let spaces: std::collections::BTreeSet<usize> =
            (1000..1256).map(|s| page_lock_stripe(s, 7)).collect();
        assert!(spaces.len() > 200, "{} stripes", spaces.len());
        let dir = tempfile::tempdir().unwrap();
        let registry = VolumeRegistry::open(0, dir.path()).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                // Every stripe twice over: each is taken once (a second
                // take of one would never return).
                let pages: Vec<u64> = (0..4 * PAGE_LOCK_STRIPES as u64).collect();
                let guards = registry.lock_pages(1001, &pages).await;
                assert_eq!(guards.len(), PAGE_LOCK_STRIPES);
                drop(guards);
                let _one = registry.lock_page(1001, 5).await;
                let _other = registry.lock_pages(1001, &[6, 6, 7]).await;
            });
    }

    proptest! {
        #[test]
        fn the_registry_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_registry(Path::new("x"), &Bytes::from(bytes), 0);
        }
    }
}
