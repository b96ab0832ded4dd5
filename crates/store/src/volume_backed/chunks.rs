//! [`VolumeChunkStore`]: chunk bytes on consecutive logical pages of one
//! volume space, each extent's first page naming the chunk: in its spare
//! area (the volume's page tag), or, where the spare area has no room for
//! that and in stores written before tags, in a header before the bytes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use quarry_volume::{LogicalPage, SpaceManager, TaggedPage};

use super::{paginate, trim_pages, u32_at, u64_at, volume_error};
use crate::data::{ChunkCheck, ChunkStore};
use quarry_store_api::ChunkLocation;
use quarry_store_api::Fingerprint;
use quarry_store_api::{check_chunk_len, MAX_CHUNK_SIZE};
use quarry_store_api::{Result, StoreError};

/// The space chunks live in unless configured otherwise.
pub const DEFAULT_CHUNK_SPACE: u32 = 1;

/// Magic at the start of an in-page header.
pub const CHUNK_MAGIC: [u8; 4] = *b"QCHK";

/// Bytes of an in-page header, before the chunk's bytes on its first page.
pub const CHUNK_HEADER_BYTES: usize = 64;

/// Bytes of the tag that names a chunk in its first page's spare area.
pub const CHUNK_TAG_BYTES: usize = 36;

const CHUNK_FORMAT: u8 = 1;
const CRC_AT: usize = 60;
/// The first byte of a chunk tag: its format.
const CHUNK_TAG_FORMAT: u8 = 2;
/// A tag keeps the length in 3 bytes.
const _: () = assert!(MAX_CHUNK_SIZE < 1 << 24);

/// Where an extent keeps the header that names its chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// In the first page's tag: the pages hold the bytes alone (format 2).
    InTag,
    /// In the first [`CHUNK_HEADER_BYTES`] of the first page, the bytes
    /// after it (format 1: stores written before tags, and volumes whose
    /// spare area has no room for [`CHUNK_TAG_BYTES`]).
    InPage,
}

impl Layout {
    /// Bytes on the first page before the chunk's.
    fn header_bytes(self) -> usize {
        match self {
            Layout::InTag => 0,
            Layout::InPage => CHUNK_HEADER_BYTES,
        }
    }
}

/// The fingerprint [`VolumeChunkStore::extents`] reports for pages no header
/// covers (no chunk record can name it, so the node trims them).
const NO_FINGERPRINT: Fingerprint = Fingerprint([0; 32]);

/// Where a [`VolumeChunkStore`] keeps its chunks.
#[derive(Clone, Debug)]
pub struct VolumeChunkConfig {
    /// The volume space of the chunk pages.
    pub space: u32,
    /// Logical pages `0..logical_pages` of the space are handed out, next
    /// fit from a cursor that only moves forward, so a freed range is reused
    /// only once the cursor has gone round the whole range (default 2^40:
    /// in practice never within a process's life).
    pub logical_pages: u64,
    /// Pages of the volume's capacity that chunk writes leave free, so the
    /// tables can still commit (deletes included) when chunks fill the
    /// volume. `None`: max(capacity / 16, 16).
    pub keep_free_pages: Option<u64>,
}

impl Default for VolumeChunkConfig {
    fn default() -> Self {
        Self {
            space: DEFAULT_CHUNK_SPACE,
            logical_pages: 1 << 40,
            keep_free_pages: None,
        }
    }
}

/// Figures of a [`VolumeChunkStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeChunkStats {
    /// Extents held (chunks, and at open runs of pages no header covers).
    pub extents: u64,
    /// Logical pages they span.
    pub pages: u64,
    /// Runs of mapped pages no header covered, found at open.
    pub headerless_runs_at_open: u64,
    /// Pages found at open that could not be read; left alone (neither
    /// listed nor trimmed nor reused).
    pub unreadable_pages_at_open: u64,
    /// Pages read by the header scan at open.
    pub pages_scanned_at_open: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A chunk written with this fingerprint, its header kept so.
    Chunk(Fingerprint, Layout),
    /// Mapped pages no header covers (found at open): to be trimmed.
    Headerless,
    /// Pages that could not be read at open: kept out of everybody's way.
    Unreadable,
}

#[derive(Clone, Copy, Debug)]
struct Extent {
    pages: u32,
    kind: Kind,
    /// Being written or trimmed.
    busy: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Every allocated range, by first page.
    extents: BTreeMap<u64, Extent>,
    /// Where the next allocation looks first.
    cursor: u64,
    pages: u64,
    stats: VolumeChunkStats,
}

impl State {
    fn insert(&mut self, first: u64, extent: Extent) {
        self.pages += u64::from(extent.pages);
        self.extents.insert(first, extent);
    }

    fn remove(&mut self, first: u64) {
        if let Some(e) = self.extents.remove(&first) {
            self.pages -= u64::from(e.pages);
        }
    }

    /// Next fit: the first free run of `n` pages at or after the cursor,
    /// wrapping once to 0. O(extents skipped).
    fn allocate(&mut self, n: u64, limit: u64) -> Option<u64> {
        let origin = self.cursor.min(limit);
        let mut start = origin;
        let mut wrapped = false;
        loop {
            if wrapped && start >= origin {
                return None;
            }
            if start + n > limit {
                if wrapped {
                    return None;
                }
                wrapped = true;
                start = 0;
                continue;
            }
            if let Some((&s, e)) = self.extents.range(..=start).next_back() {
                if s + u64::from(e.pages) > start {
                    start = s + u64::from(e.pages);
                    continue;
                }
            }
            if let Some((&s, e)) = self.extents.range(start + 1..start + n).next() {
                start = s + u64::from(e.pages);
                continue;
            }
            self.cursor = start + n;
            return Some(start);
        }
    }
}

/// A chunk extent's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    space: u32,
    pages: u32,
    first_page: u64,
    len: u32,
    fingerprint: Fingerprint,
}

impl Header {
    fn encode(&self) -> [u8; CHUNK_HEADER_BYTES] {
        let mut h = [0u8; CHUNK_HEADER_BYTES];
        h[0..4].copy_from_slice(&CHUNK_MAGIC);
        h[4] = CHUNK_FORMAT;
        h[8..12].copy_from_slice(&self.space.to_le_bytes());
        h[12..16].copy_from_slice(&self.pages.to_le_bytes());
        h[16..24].copy_from_slice(&self.first_page.to_le_bytes());
        h[24..28].copy_from_slice(&self.len.to_le_bytes());
        h[28..60].copy_from_slice(&self.fingerprint.0);
        let crc = crc32c::crc32c(&h[..CRC_AT]);
        h[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// The tag naming this chunk in its first page's spare area.
    fn encode_tag(&self) -> [u8; CHUNK_TAG_BYTES] {
        let mut t = [0u8; CHUNK_TAG_BYTES];
        t[0] = CHUNK_TAG_FORMAT;
        t[1..4].copy_from_slice(&self.len.to_le_bytes()[..3]);
        t[4..36].copy_from_slice(&self.fingerprint.0);
        t
    }

    /// The header of the extent starting at `space`/`first_page`, if `page`
    /// (read from there) names a chunk: in its tag, else in its first bytes.
    /// A tag needs no place of its own: the volume checked that the page is
    /// the one asked for, and the tag is under the page record's checksum.
    fn of_page(
        page: &TaggedPage,
        space: u32,
        first_page: u64,
        page_size: usize,
    ) -> Option<(Header, Layout)> {
        if let Some(h) = Header::decode_tag(&page.tag, space, first_page, page_size) {
            return Some((h, Layout::InTag));
        }
        Header::decode(&page.data, space, first_page, page_size).map(|h| (h, Layout::InPage))
    }

    fn decode_tag(tag: &[u8], space: u32, first_page: u64, page_size: usize) -> Option<Header> {
        if tag.len() < CHUNK_TAG_BYTES || tag[0] != CHUNK_TAG_FORMAT {
            return None;
        }
        let len = u32::from_le_bytes([tag[1], tag[2], tag[3], 0]);
        if len == 0 || len > MAX_CHUNK_SIZE {
            return None;
        }
        Some(Header {
            space,
            pages: pages_for(len as usize, page_size, Layout::InTag) as u32,
            first_page,
            len,
            fingerprint: Fingerprint(tag[4..36].try_into().expect("32 bytes")),
        })
    }

    /// The in-page header of the extent starting at `space`/`first_page`, if
    /// `page` holds a valid one for exactly that place.
    fn decode(page: &[u8], space: u32, first_page: u64, page_size: usize) -> Option<Header> {
        if page.len() < CHUNK_HEADER_BYTES
            || page[0..4] != CHUNK_MAGIC
            || page[4] != CHUNK_FORMAT
            || crc32c::crc32c(&page[..CRC_AT]) != u32_at(page, CRC_AT)
        {
            return None;
        }
        let h = Header {
            space: u32_at(page, 8),
            pages: u32_at(page, 12),
            first_page: u64_at(page, 16),
            len: u32_at(page, 24),
            fingerprint: Fingerprint(page[28..60].try_into().expect("32 bytes")),
        };
        let ok = h.space == space
            && h.first_page == first_page
            && h.len > 0
            && h.len <= MAX_CHUNK_SIZE
            && u64::from(h.pages) == pages_for(h.len as usize, page_size, Layout::InPage);
        ok.then_some(h)
    }
}

/// Pages an extent of a `len`-byte chunk spans.
fn pages_for(len: usize, page_size: usize, layout: Layout) -> u64 {
    (layout.header_bytes() + len).div_ceil(page_size) as u64
}

/// Bytes of a chunk on one logical page: see [`VolumeChunkStore::page_spans`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkPageSpan {
    /// The page.
    pub page: LogicalPage,
    /// The chunk's bytes within it.
    pub bytes: std::ops::Range<usize>,
}

struct Inner {
    volume: Arc<SpaceManager>,
    space: u32,
    page_size: usize,
    logical_pages: u64,
    keep_free_pages: u64,
    /// How new chunks keep their header.
    layout: Layout,
    state: Mutex<State>,
}

/// Chunk bytes over a [`SpaceManager`]: each chunk occupies consecutive
/// logical pages of the chunk space, the last padded with zeros. The first
/// page names the chunk (length, fingerprint) in its 36-byte tag, beside
/// the volume's record in the spare area, so the pages hold the bytes alone
/// (a 4 MiB chunk of 64 KiB pages takes 64 pages, and a scan reads nothing
/// else). Where the spare area has no room for the tag, and in stores
/// written before tags, a 64-byte header (magic, space, page count, first
/// page, length, fingerprint, CRC-32C) precedes the bytes instead; both
/// kinds are read.
///
/// - `write` allocates a range (next fit in `0..logical_pages`), programs
///   the header page, then the others (32 at a time), and returns when all
///   are on flash. On a failure it trims what it wrote.
/// - `read` checks the header against the location, the length and the
///   fingerprint the caller expects (so a location trimmed and handed to
///   another chunk is never read as the old one), and the bytes against
///   the check the caller names (the CRC-32C its record kept, or the
///   SHA-256 for records from before): a mismatch is an error, never data.
/// - `trim` trims the extent's pages with one `trim_many`, the header page
///   last (so a torn trim leaves a header covering what is left). A
///   location this store does not hold is ignored (trims are idempotent).
/// - `extents` lists what the store holds: at open it scans
///   [`SpaceManager::pages_in`] and reads the header of each extent; mapped
///   pages no header covers are listed as extents of their own with an
///   all-zero fingerprint (no record names them; the node trims them).
///
/// Writes and trims run in spawned tasks: a caller that drops the future
/// leaves the operation to finish (a write whose result nobody sees is an
/// extent no record names, trimmed at the next open).
#[derive(Clone)]
pub struct VolumeChunkStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for VolumeChunkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeChunkStore")
            .field("space", &self.inner.space)
            .field("stats", &self.stats())
            .finish()
    }
}

impl VolumeChunkStore {
    /// Opens the chunk store of `config.space`: lists the space's pages and
    /// reads the header of each extent to rebuild the allocator. Nothing may
    /// write the space meanwhile.
    pub async fn open(volume: Arc<SpaceManager>, config: VolumeChunkConfig) -> Result<Self> {
        let page_size = volume.page_size();
        if page_size < 2 * CHUNK_HEADER_BYTES {
            return Err(StoreError::Backend(format!(
                "volume pages of {page_size} bytes are too small for chunks (at least {})",
                2 * CHUNK_HEADER_BYTES
            )));
        }
        if config.logical_pages < pages_for(MAX_CHUNK_SIZE as usize, page_size, Layout::InPage) {
            return Err(StoreError::Backend(format!(
                "a chunk space of {} logical pages cannot hold a chunk of {MAX_CHUNK_SIZE} bytes",
                config.logical_pages
            )));
        }
        let capacity = volume.capacity_pages();
        let layout = if volume.tag_capacity_bytes() >= CHUNK_TAG_BYTES {
            Layout::InTag
        } else {
            Layout::InPage
        };
        let inner = Inner {
            layout,
            space: config.space,
            page_size,
            logical_pages: config.logical_pages,
            keep_free_pages: config
                .keep_free_pages
                .unwrap_or_else(|| (capacity / 16).max(16)),
            state: Mutex::new(State::default()),
            volume,
        };
        let state = inner.scan().await?;
        *inner.state.lock().expect("chunk state lock") = state;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The volume space of the chunks.
    pub fn space(&self) -> u32 {
        self.inner.space
    }

    /// The space manager underneath.
    pub fn volume(&self) -> &Arc<SpaceManager> {
        &self.inner.volume
    }

    /// Where bytes `range` of the `len`-byte chunk at `location` lie, page
    /// by page: for a reader that streams a chunk straight off its pages
    /// (near-data kernels) instead of assembling it with
    /// [`ChunkStore::read`]. The first page names the chunk (in its tag, or
    /// in a header before the bytes), which such a reader checks with
    /// [`check_first_page`](Self::check_first_page).
    pub fn page_spans(
        &self,
        location: ChunkLocation,
        len: u32,
        range: std::ops::Range<u32>,
    ) -> Result<Vec<ChunkPageSpan>> {
        let bad = |reason: String| StoreError::Backend(format!("chunk at {location:?}: {reason}"));
        let layout = match self.inner.lock().extents.get(&location.first_page) {
            Some(Extent {
                kind: Kind::Chunk(_, layout),
                pages,
                ..
            }) if *pages == location.pages => *layout,
            _ => return Err(bad("this store holds no chunk there".into())),
        };
        if location.space != self.inner.space
            || u64::from(location.pages) != pages_for(len as usize, self.inner.page_size, layout)
        {
            return Err(bad(format!(
                "not the extent of a {len}-byte chunk in chunk space {}",
                self.inner.space
            )));
        }
        if range.start > range.end || range.end > len {
            return Err(bad(format!(
                "bytes {}..{} are not inside its {len} bytes",
                range.start, range.end
            )));
        }
        let page_size = self.inner.page_size as u64;
        let mut spans = Vec::new();
        let header_bytes = layout.header_bytes() as u64;
        let mut at = u64::from(range.start) + header_bytes;
        let end = u64::from(range.end) + header_bytes;
        while at < end {
            let page = at / page_size;
            let in_page = (at % page_size) as usize;
            let take = ((page + 1) * page_size).min(end) - at;
            debug_assert!(page < u64::from(location.pages));
            spans.push(ChunkPageSpan {
                page: LogicalPage::new(self.inner.space, location.first_page + page),
                bytes: in_page..in_page + take as usize,
            });
            at += take;
        }
        Ok(spans)
    }

    /// Checks that `page`, read from the first page of `location`, names
    /// chunk `fingerprint` of `len` bytes: a reader streaming a
    /// chunk's pages must not take the bytes of a chunk written there after
    /// this one was released. The pages themselves are checked by the space
    /// manager (OOB checksum, ECC) as they are read.
    pub fn check_first_page(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        page: &TaggedPage,
    ) -> Result<()> {
        let bad = |reason: String| StoreError::Backend(format!("chunk at {location:?}: {reason}"));
        let (h, _) = Header::of_page(
            page,
            self.inner.space,
            location.first_page,
            self.inner.page_size,
        )
        .ok_or_else(|| bad("its first page holds no valid chunk header".into()))?;
        if h.fingerprint != *fingerprint || h.len != len || h.pages != location.pages {
            return Err(bad(format!(
                "it holds chunk {} of {} bytes on {} pages, not {fingerprint} of {len} bytes",
                h.fingerprint, h.len, h.pages
            )));
        }
        Ok(())
    }

    /// Current figures.
    pub fn stats(&self) -> VolumeChunkStats {
        let st = self.inner.state.lock().expect("chunk state lock");
        VolumeChunkStats {
            extents: st.extents.len() as u64,
            pages: st.pages,
            ..st.stats
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("chunk state lock")
    }

    async fn read_page(&self, index: u64) -> Result<Option<TaggedPage>> {
        let id = LogicalPage::new(self.space, index);
        self.volume
            .read_tagged(id)
            .await
            .map_err(|e| volume_error(format_args!("reading chunk page {id}"), e))
    }

    /// Rebuilds the extents from the space's mapped pages and their headers.
    async fn scan(&self) -> Result<State> {
        let mapped = self.volume.pages_in(self.space);
        let mut st = State::default();
        let mut end = 0u64;
        let mut i = 0;
        // A run of mapped pages no header covers: (first, pages, unreadable).
        let mut run: Option<(u64, u32, bool)> = None;
        let flush = |st: &mut State, run: &mut Option<(u64, u32, bool)>| {
            if let Some((first, pages, unreadable)) = run.take() {
                let kind = if unreadable {
                    st.stats.unreadable_pages_at_open += u64::from(pages);
                    Kind::Unreadable
                } else {
                    st.stats.headerless_runs_at_open += 1;
                    Kind::Headerless
                };
                st.insert(
                    first,
                    Extent {
                        pages,
                        kind,
                        busy: false,
                    },
                );
            }
        };
        while i < mapped.len() {
            let p = mapped[i];
            st.stats.pages_scanned_at_open += 1;
            let page = match self.read_page(p).await {
                Ok(Some(page)) => Some(page),
                // Trimmed since the listing: nothing there.
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(_) => None,
            };
            let header = page
                .as_ref()
                .and_then(|page| Header::of_page(page, self.space, p, self.page_size));
            if let Some((h, layout)) = header {
                flush(&mut st, &mut run);
                st.insert(
                    p,
                    Extent {
                        pages: h.pages,
                        kind: Kind::Chunk(h.fingerprint, layout),
                        busy: false,
                    },
                );
                end = end.max(p + u64::from(h.pages));
                while i < mapped.len() && mapped[i] < p + u64::from(h.pages) {
                    i += 1;
                }
                continue;
            }
            // No header here: extend the current run if adjacent and of the
            // same kind, else start one.
            let unreadable = page.is_none();
            match &mut run {
                Some((first, pages, u))
                    if *first + u64::from(*pages) == p && (*u || !unreadable) =>
                {
                    *pages += 1;
                }
                _ => {
                    flush(&mut st, &mut run);
                    run = Some((p, 1, unreadable));
                }
            }
            end = end.max(p + 1);
            i += 1;
        }
        flush(&mut st, &mut run);
        st.cursor = end;
        Ok(st)
    }

    async fn write(
        self: Arc<Self>,
        fingerprint: Fingerprint,
        data: Bytes,
    ) -> Result<ChunkLocation> {
        check_chunk_len(fingerprint, &data)?;
        let layout = self.layout;
        let pages = pages_for(data.len(), self.page_size, layout);
        let (live_pages, capacity_pages) = self.volume.fill_pages();
        if live_pages + pages + self.keep_free_pages > capacity_pages {
            return Err(StoreError::Backend(format!(
                "no space for a chunk of {} bytes ({pages} pages): the volume holds {} of at \
                 most {} pages, and chunks leave {} free for the tables",
                data.len(),
                live_pages,
                capacity_pages,
                self.keep_free_pages
            )));
        }
        let first = {
            let mut st = self.lock();
            let first = st.allocate(pages, self.logical_pages).ok_or_else(|| {
                StoreError::Backend(format!(
                    "no run of {pages} free logical pages in chunk space {} ({} of {} pages \
                     allocated)",
                    self.space, st.pages, self.logical_pages
                ))
            })?;
            st.insert(
                first,
                Extent {
                    pages: pages as u32,
                    kind: Kind::Chunk(fingerprint, layout),
                    busy: true,
                },
            );
            first
        };
        let location = ChunkLocation {
            space: self.space,
            first_page: first,
            pages: pages as u32,
        };
        let header = Header {
            space: self.space,
            pages: pages as u32,
            first_page: first,
            len: data.len() as u32,
            fingerprint,
        };
        // One run: the pages follow one another on one chip, so a scan reads
        // the chunk in a few large requests, and they are written in order,
        // the page naming the chunk first (a mapped page of an extent always
        // has its first page mapped before it: the scan at open relies on it).
        let first_id = LogicalPage::new(self.space, first);
        let written = match layout {
            Layout::InTag => {
                let tag = Bytes::copy_from_slice(&header.encode_tag());
                let page_data = paginate(data, self.page_size);
                self.volume.write_run_tagged(first_id, page_data, tag).await
            }
            Layout::InPage => {
                let mut bytes = Vec::with_capacity(CHUNK_HEADER_BYTES + data.len());
                bytes.extend_from_slice(&header.encode());
                bytes.extend_from_slice(&data);
                drop(data);
                let page_data = paginate(bytes, self.page_size);
                self.volume.write_run(first_id, page_data).await
            }
        };
        let result = written
            .map_err(|e| volume_error(format_args!("writing chunk pages {first}+{pages}"), e));
        match result {
            Ok(()) => {
                if let Some(e) = self.lock().extents.get_mut(&first) {
                    e.busy = false;
                }
                Ok(location)
            }
            Err(e) => {
                // Every write has finished: take back what made it.
                if self.trim_extent(location).await.is_ok() {
                    self.lock().remove(first);
                } else if let Some(e) = self.lock().extents.get_mut(&first) {
                    // Left allocated and listed: the next open trims it.
                    e.busy = false;
                }
                Err(e)
            }
        }
    }

    /// Trims an extent's pages, the header page last.
    async fn trim_extent(&self, location: ChunkLocation) -> Result<()> {
        let first = location.first_page;
        let pages = (first + 1..first + u64::from(location.pages)).chain([first]);
        trim_pages(&self.volume, self.space, pages).await
    }

    async fn trim(self: Arc<Self>, location: ChunkLocation) -> Result<()> {
        if location.space != self.space {
            return Err(StoreError::Backend(format!(
                "trim of {location:?}: this chunk store holds space {}",
                self.space
            )));
        }
        {
            let mut st = self.lock();
            match st.extents.get_mut(&location.first_page) {
                Some(e) if e.pages == location.pages && e.kind != Kind::Unreadable => {
                    if e.busy {
                        return Err(StoreError::Backend(format!(
                            "trim of {location:?} while it is being written or trimmed"
                        )));
                    }
                    e.busy = true;
                }
                // Not ours (trimmed already): nothing to do.
                _ => return Ok(()),
            }
        }
        let result = self.trim_extent(location).await;
        let mut st = self.lock();
        if result.is_ok() {
            st.remove(location.first_page);
        } else if let Some(e) = st.extents.get_mut(&location.first_page) {
            e.busy = false;
        }
        result
    }

    /// Reads a chunk's pages, all in one request where they lie together
    /// (a chunk's pages were written as one run), and checks that the
    /// header on its first page names `fingerprint` and holds at least
    /// `len` bytes: (the pages, where the chunk's bytes start on the first,
    /// the header). Reading the header first and the rest after would cost
    /// every chunk read two device round trips; a wrong header costs one
    /// wasted read instead, and only when something is already wrong.
    async fn open(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
    ) -> Result<(Vec<Option<TaggedPage>>, usize, Header)> {
        let bad = |reason: String| StoreError::Backend(format!("chunk at {location:?}: {reason}"));
        let most_pages = pages_for(MAX_CHUNK_SIZE as usize, self.page_size, Layout::InPage);
        if location.space != self.space
            || location.pages == 0
            || u64::from(location.pages) > most_pages
        {
            return Err(bad(format!("not a location of chunk space {}", self.space)));
        }
        let pages = self.read_extent(location).await?;
        let first = pages
            .first()
            .and_then(Option::as_ref)
            .ok_or_else(|| bad("its first page is not written (trimmed?)".into()))?;
        let (h, layout) =
            Header::of_page(first, self.space, location.first_page, self.page_size)
                .ok_or_else(|| bad("its first page holds no valid chunk header".into()))?;
        if h.fingerprint != *fingerprint {
            return Err(bad(format!(
                "it holds chunk {}, not {fingerprint}",
                h.fingerprint
            )));
        }
        if h.pages != location.pages || len > h.len {
            return Err(bad(format!(
                "the header says {} bytes on {} pages; asked for {len} bytes on {} pages",
                h.len, h.pages, location.pages
            )));
        }
        Ok((pages, layout.header_bytes(), h))
    }

    /// The pages of the extent at `location`, in as few device requests as
    /// they allow.
    async fn read_extent(&self, location: ChunkLocation) -> Result<Vec<Option<TaggedPage>>> {
        let count = u64::from(location.pages);
        let mut pages = Vec::with_capacity(location.pages as usize);
        let mut next = 0u64;
        while next < count {
            let n = (count - next).min(quarry_volume::MAX_RUN_PAGES as u64);
            let ids: Vec<LogicalPage> = (next..next + n)
                .map(|i| LogicalPage::new(self.space, location.first_page + i))
                .collect();
            let failed = |e| volume_error(format_args!("reading chunk pages {}+{n}", ids[0]), e);
            let run = self.volume.fetch_many(&ids).await.map_err(failed)?;
            pages.extend(run.finish_tagged().await.map_err(failed)?);
            next += n;
        }
        Ok(pages)
    }

    /// The chunk's bytes as pieces, each a slice of a page as the device
    /// read it: the rest of its first page, then each later page's, up to
    /// the header's length.
    fn pieces(
        location: ChunkLocation,
        (pages, header_bytes, h): (Vec<Option<TaggedPage>>, usize, Header),
    ) -> Result<Vec<Bytes>> {
        let bad = |reason: String| StoreError::Backend(format!("chunk at {location:?}: {reason}"));
        let len = h.len as usize;
        let mut pieces = Vec::with_capacity(pages.len());
        let mut got = 0;
        for (i, page) in pages.into_iter().enumerate() {
            let page =
                page.ok_or_else(|| bad(format!("page {} of {} is not written", i + 1, h.pages)))?;
            let skip = if i == 0 { header_bytes } else { 0 };
            let take = page.data.len().saturating_sub(skip).min(len - got);
            got += take;
            if take > 0 {
                pieces.push(page.data.slice(skip..skip + take));
            }
        }
        if got != len {
            return Err(bad(format!("its pages hold {got} of its {len} bytes")));
        }
        Ok(pieces)
    }

    async fn read(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> Result<Bytes> {
        let pieces = self.read_pieces(fingerprint, location, len, check).await?;
        // A chunk on one page comes back as that page's slice, no copy.
        Ok(quarry_proto::join_pieces(&pieces))
    }

    /// The first `len` bytes of the chunk, as [`Self::pieces`], once the
    /// whole chunk passed `check`.
    async fn read_pieces(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> Result<Vec<Bytes>> {
        let opened = self.open(fingerprint, location, len).await?;
        let fingerprint = opened.2.fingerprint;
        let mut pieces = Self::pieces(location, opened)?;
        crate::data::verify_parts(&fingerprint, pieces.iter().map(|p| &p[..]), check)
            .map_err(|reason| StoreError::Backend(format!("chunk at {location:?}: {reason}")))?;
        truncate_pieces(&mut pieces, len as usize);
        Ok(pieces)
    }
}

/// Keeps the first `len` bytes of `pieces`.
fn truncate_pieces(pieces: &mut Vec<Bytes>, len: usize) {
    let mut kept = 0;
    let mut keep = pieces.len();
    for (i, piece) in pieces.iter_mut().enumerate() {
        if kept + piece.len() >= len {
            piece.truncate(len - kept);
            keep = i + 1;
            break;
        }
        kept += piece.len();
    }
    pieces.truncate(keep);
    pieces.retain(|p| !p.is_empty());
}

impl ChunkStore for VolumeChunkStore {
    async fn write(&self, fingerprint: &Fingerprint, data: Bytes) -> Result<ChunkLocation> {
        let inner = Arc::clone(&self.inner);
        let fingerprint = *fingerprint;
        tokio::spawn(inner.write(fingerprint, data))
            .await
            .map_err(super::join_error)?
    }

    async fn read(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> Result<Bytes> {
        self.inner.read(fingerprint, location, len, check).await
    }

    async fn read_pieces(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> Result<Vec<Bytes>> {
        self.inner
            .read_pieces(fingerprint, location, len, check)
            .await
    }

    async fn trim(&self, location: ChunkLocation) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        tokio::spawn(inner.trim(location))
            .await
            .map_err(super::join_error)?
    }

    async fn extents(&self) -> Result<Vec<(ChunkLocation, Fingerprint)>> {
        let st = self.inner.lock();
        Ok(st
            .extents
            .iter()
            .filter_map(|(&first, e)| {
                let fp = match e.kind {
                    Kind::Chunk(fp, _) => fp,
                    Kind::Headerless => NO_FINGERPRINT,
                    Kind::Unreadable => return None,
                };
                let location = ChunkLocation {
                    space: self.inner.space,
                    first_page: first,
                    pages: e.pages,
                };
                Some((location, fp))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(pages: u32) -> Extent {
        Extent {
            pages,
            kind: Kind::Headerless,
            busy: false,
        }
    }

    #[test]
    fn next_fit_skips_used_ranges_and_wraps_once() {
        let mut st = State::default();
        assert_eq!(st.allocate(4, 20), Some(0));
        st.insert(0, extent(4));
        assert_eq!(st.allocate(4, 20), Some(4));
        st.insert(4, extent(4));
        st.insert(10, extent(2));
        // 8..10 is too short for 3; 12..15 fits.
        assert_eq!(st.allocate(3, 20), Some(12));
        st.insert(12, extent(3));
        assert_eq!(st.allocate(5, 20), Some(15));
        st.insert(15, extent(5));
        // Full up to the limit: wraps to the gap at 8..10.
        assert_eq!(st.allocate(2, 20), Some(8));
        st.insert(8, extent(2));
        assert_eq!(st.allocate(1, 20), None);
        st.remove(4);
        assert_eq!(st.allocate(5, 20), None);
        assert_eq!(st.allocate(4, 20), Some(4));
    }

    #[test]
    fn headers_name_their_place() {
        let h = Header {
            space: 3,
            pages: 3,
            first_page: 77,
            len: 1000,
            fingerprint: Fingerprint([9; 32]),
        };
        let mut page = vec![0u8; 512];
        page[..CHUNK_HEADER_BYTES].copy_from_slice(&h.encode());
        assert_eq!(Header::decode(&page, 3, 77, 512), Some(h));
        assert_eq!(Header::decode(&page, 3, 78, 512), None, "another page");
        assert_eq!(Header::decode(&page, 4, 77, 512), None, "another space");
        assert_eq!(Header::decode(&page, 3, 77, 1024), None, "page count");
        page[30] ^= 1;
        assert_eq!(Header::decode(&page, 3, 77, 512), None, "checksum");
    }
}
