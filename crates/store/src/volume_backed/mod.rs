//! The persistent store of one node: [`VolumeTableStore`] and
//! [`VolumeChunkStore`], the [`TableStore`](crate::TableStore) and
//! [`ChunkStore`](crate::ChunkStore) over a `quarry-volume`
//! [`SpaceManager`]. Formats, recovery and limits are in `docs/store.md`
//! ("Volume-backed tables and chunks").

mod chunks;
mod tables;

use std::sync::Arc;

use bytes::Bytes;
use quarry_volume::{LogicalPage, SpaceManager, VolumeError};
use tokio::task::JoinSet;

use crate::node::{NodeStore, Recovery};
use quarry_store_api::NodeId;
use quarry_store_api::{Result, StoreError};

pub use chunks::{
    ChunkPageSpan, VolumeChunkConfig, VolumeChunkStats, VolumeChunkStore, CHUNK_HEADER_BYTES,
    CHUNK_MAGIC, CHUNK_TAG_BYTES, DEFAULT_CHUNK_SPACE,
};
pub use tables::{
    VolumeTableConfig, VolumeTableStats, VolumeTableStore, DEFAULT_LOG_SPACE,
    DEFAULT_SNAPSHOT_SPACE, MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_TABLE_KEY_BYTES,
    MAX_TABLE_VALUE_BYTES,
};

/// One node's store over its space manager.
pub type VolumeNodeStore = NodeStore<VolumeTableStore, VolumeChunkStore>;

/// Objects over nodes whose stores live on their space managers.
pub type VolumeObjectStore = crate::ObjectStore<VolumeNodeStore>;

/// Where a node keeps its tables and chunks in its volume.
#[derive(Clone, Debug, Default)]
pub struct VolumeStoreConfig {
    /// The tables (log and snapshot spaces, limits).
    pub tables: VolumeTableConfig,
    /// The chunks (chunk space, logical range, room kept for the tables).
    pub chunks: VolumeChunkConfig,
}

impl VolumeStoreConfig {
    /// Refuses spaces used twice.
    pub fn validate(&self) -> Result<()> {
        let spaces = [
            ("chunk space", self.chunks.space),
            ("table log space", self.tables.log_space),
            ("table snapshot space", self.tables.snapshot_space),
        ];
        for (i, (a, sa)) in spaces.iter().enumerate() {
            for (b, sb) in &spaces[i + 1..] {
                if sa == sb {
                    return Err(StoreError::Backend(format!(
                        "invalid volume store configuration: the {a} and the {b} are both \
                         space {sa}; each needs a space of its own"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Opens node `id`'s store over `volume`: the tables (snapshot + log
/// replay), the chunks (header scan), then [`NodeStore::open`], which trims
/// extents no chunk record names. Nothing else may use these spaces.
pub async fn open_volume_node(
    id: NodeId,
    volume: Arc<SpaceManager>,
    config: &VolumeStoreConfig,
) -> Result<(VolumeNodeStore, Recovery)> {
    config.validate()?;
    let tables = VolumeTableStore::open(Arc::clone(&volume), config.tables.clone()).await?;
    let chunks = VolumeChunkStore::open(volume, config.chunks.clone()).await?;
    NodeStore::open(id, tables, chunks).await
}

/// Pages in flight at once for one chunk, log record or snapshot.
const WINDOW: usize = 32;

fn volume_error(what: impl std::fmt::Display, e: VolumeError) -> StoreError {
    StoreError::Backend(format!("{what}: {e}"))
}

fn join_error(e: tokio::task::JoinError) -> StoreError {
    StoreError::Backend(format!("a volume task failed: {e}"))
}

/// Cuts `bytes` into pages of `page_size`, the last one padded with zeros
/// (at least one page). Whole pages are slices of `bytes`, not copies; only
/// a last partial page is copied, to pad it.
fn paginate(bytes: impl Into<Bytes>, page_size: usize) -> Vec<Bytes> {
    let bytes = bytes.into();
    let whole = bytes.len() / page_size;
    let mut pages: Vec<Bytes> = (0..whole)
        .map(|i| bytes.slice(i * page_size..(i + 1) * page_size))
        .collect();
    if pages.is_empty() || !bytes.len().is_multiple_of(page_size) {
        let mut last = bytes[whole * page_size..].to_vec();
        last.resize(page_size, 0);
        pages.push(Bytes::from(last));
    }
    pages
}

/// Writes `pages` to `space` from index `first`, at most [`WINDOW`] at a
/// time. Returns once every write it started has finished; the first error
/// wins and stops further writes from starting.
async fn write_pages(
    volume: &Arc<SpaceManager>,
    space: u32,
    first: u64,
    pages: Vec<Bytes>,
) -> Result<()> {
    if pages.len() == 1 {
        // One page (a commit's log record, mostly): written by this task,
        // not one of its own.
        let id = LogicalPage::new(space, first);
        let page = pages.into_iter().next().unwrap_or_default();
        return volume
            .write(id, page)
            .await
            .map_err(|e| volume_error(format_args!("writing page {id}"), e));
    }
    let mut set = JoinSet::new();
    let mut result = Ok(());
    let note = |result: &mut Result<()>, r: std::result::Result<Result<()>, _>| {
        let r = r.map_err(join_error).and_then(|r| r);
        if result.is_ok() {
            *result = r;
        }
    };
    for (i, page) in pages.into_iter().enumerate() {
        while set.len() >= WINDOW {
            let r = set.join_next().await.expect("a task is in the set");
            note(&mut result, r);
        }
        if result.is_err() {
            break;
        }
        let volume = Arc::clone(volume);
        let id = LogicalPage::new(space, first + i as u64);
        set.spawn(async move {
            volume
                .write(id, page)
                .await
                .map_err(|e| volume_error(format_args!("writing page {id}"), e))
        });
    }
    while let Some(r) = set.join_next().await {
        note(&mut result, r);
    }
    result
}

/// Reads `count` pages of `space` from index `first`, in order (`None`:
/// not written or trimmed): runs of physically consecutive pages come back
/// in one device request each.
async fn read_pages(
    volume: &Arc<SpaceManager>,
    space: u32,
    first: u64,
    count: u64,
) -> Result<Vec<Option<Bytes>>> {
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    let mut next = 0u64;
    while next < count {
        let n = (count - next).min(quarry_volume::MAX_RUN_PAGES as u64);
        let id = LogicalPage::new(space, first + next);
        let pages = volume
            .read_run(id, n)
            .await
            .map_err(|e| volume_error(format_args!("reading pages {id}+{n}"), e))?;
        out.extend(pages);
        next += n;
    }
    Ok(out)
}

/// Trims `pages` of `space` in the order given, with one sync.
async fn trim_pages(
    volume: &SpaceManager,
    space: u32,
    pages: impl IntoIterator<Item = u64>,
) -> Result<()> {
    let ids: Vec<LogicalPage> = pages
        .into_iter()
        .map(|i| LogicalPage::new(space, i))
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let n = ids.len();
    volume
        .trim_many(ids)
        .await
        .map_err(|e| volume_error(format_args!("trimming {n} pages of space {space}"), e))
}

/// Little-endian field readers over a header known to be long enough.
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_space_used_twice_is_refused() {
        VolumeStoreConfig::default().validate().unwrap();
        let mut config = VolumeStoreConfig::default();
        config.chunks.space = config.tables.snapshot_space;
        let e = config.validate().unwrap_err().to_string();
        assert!(
            e.contains("the chunk space and the table snapshot space are both space 3"),
            "{e}"
        );
    }

    #[test]
    fn pages_share_whole_pages_and_pad_the_last() {
        let bytes = Bytes::from((0..10u8).collect::<Vec<_>>());
        let pages = paginate(bytes.clone(), 4);
        assert_eq!(pages.len(), 3);
        assert_eq!(&pages[0][..], &[0, 1, 2, 3]);
        assert_eq!(
            pages[0].as_ptr(),
            bytes.as_ptr(),
            "a whole page is a slice, not a copy"
        );
        assert_eq!(&pages[2][..], &[8, 9, 0, 0]);
        assert_eq!(paginate(bytes.slice(..8), 4).len(), 2, "no padding page");
        assert_eq!(paginate(Vec::new(), 4), vec![Bytes::from(vec![0u8; 4])]);
    }
}
