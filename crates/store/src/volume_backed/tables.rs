//! [`VolumeTableStore`]: a node's tables as an ordered map in memory, made
//! durable by a log of committed batches in one volume space and periodic
//! snapshots in another.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use quarry_volume::{LogicalPage, SectorsWritten, SpaceManager};
use tokio::sync::{oneshot, watch, Notify, OwnedMutexGuard};

use super::{paginate, read_pages, trim_pages, u32_at, u64_at, volume_error, write_pages};
use crate::table::{
    record_bytes, Batch, Op, OwnedRecords, Table, TableMap, TableOwner, TableStore,
};
use quarry_store_api::RecordReader as Reader;
use quarry_store_api::{Result, StoreError};

/// The space of the table log unless configured otherwise.
pub const DEFAULT_LOG_SPACE: u32 = 2;
/// The space of the table snapshots (and, at page 0, their root) unless
/// configured otherwise.
pub const DEFAULT_SNAPSHOT_SPACE: u32 = 3;

/// Longest key a table record may have.
pub const MAX_TABLE_KEY_BYTES: usize = 4096;
/// Longest value (a manifest of 2^18 chunks is under 9.5 MiB).
pub const MAX_TABLE_VALUE_BYTES: usize = 12 << 20;
/// Largest encoded batch; also the most one log record carries.
pub const MAX_BATCH_BYTES: usize = 16 << 20;
/// Most changes in one batch.
pub const MAX_BATCH_OPS: usize = 1 << 16;

/// Most batches one log record carries (group commit).
const MAX_GROUP: usize = 1024;
/// Most batches waiting for the writer.
const QUEUE: usize = MAX_GROUP;
/// Most bytes of batches waiting for the writer (each counted with its
/// encoded size plus [`PENDING_OVERHEAD`]): commits beyond wait their turn.
const MAX_QUEUED_BYTES: usize = 4 * MAX_BATCH_BYTES;
const PENDING_OVERHEAD: usize = 256;

/// A snapshot's work between yields to the tasks beside it (the sessions
/// of a key-value node share its thread with a compaction): records
/// encoded, or pages written, about this many bytes at a time.
const SNAPSHOT_SLICE_BYTES: usize = 256 << 10;

const LOG_MAGIC: [u8; 4] = *b"QTLG";
const SNAPSHOT_MAGIC: [u8; 4] = *b"QTSN";
const ROOT_MAGIC: [u8; 4] = *b"QTRT";
const FORMAT: u8 = 1;
/// Log records packed into the sectors of a page after the one before
/// ([`Writer::commit_group`]); format 1 records began a page each.
const LOG_FORMAT_PACKED: u8 = 2;
const LOG_HEADER: usize = 32;
const SNAPSHOT_HEADER: usize = 40;
const ROOT_BYTES: usize = 44;
const ROOT_PAGE: u64 = 0;

/// Where a [`VolumeTableStore`] keeps its log and snapshots, and its limits.
#[derive(Clone, Debug)]
pub struct VolumeTableConfig {
    /// The space of the log of committed batches.
    pub log_space: u32,
    /// The space of the snapshots; page 0 holds the root.
    pub snapshot_space: u32,
    /// Most memory the tables may take (keys + values + 64 bytes a record);
    /// a commit that could go beyond is refused (deletes always pass).
    pub max_table_bytes: u64,
    /// The log is compacted into a snapshot once it spans this many pages
    /// and at least as many as the last snapshot.
    pub compact_min_log_pages: u64,
    /// Bytes of a snapshot encoded before they are written: a compaction
    /// takes about this much memory, whatever the tables hold.
    pub snapshot_piece_bytes: usize,
}

impl Default for VolumeTableConfig {
    fn default() -> Self {
        Self {
            log_space: DEFAULT_LOG_SPACE,
            snapshot_space: DEFAULT_SNAPSHOT_SPACE,
            max_table_bytes: 256 << 20,
            compact_min_log_pages: 1024,
            snapshot_piece_bytes: 4 << 20,
        }
    }
}

/// Figures of a [`VolumeTableStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeTableStats {
    /// Records the store keeps (not an owner's: [`TableStore::hand_over`]).
    pub records: u64,
    /// Memory they are counted with.
    pub bytes: u64,
    /// Sequence number of the last log record written (or replayed).
    pub last_seq: u64,
    /// Log pages since the last snapshot.
    pub log_pages: u64,
    /// Pages of the current snapshot.
    pub snapshot_pages: u64,
    /// Log records written by this instance.
    pub log_records_written: u64,
    /// Batches committed by this instance.
    pub batches_committed: u64,
    /// Snapshots written by this instance.
    pub compactions: u64,
    /// Log records replayed at open.
    pub records_replayed_at_open: u64,
    /// Pages trimmed at open: a torn log tail, and pages left behind by a
    /// compaction cut short.
    pub pages_trimmed_at_open: u64,
}

fn table_byte(t: Table) -> u8 {
    t.index() as u8
}

fn table_of(b: u8) -> Option<Table> {
    Table::ALL.get(usize::from(b)).copied()
}

fn malformed(what: &'static str, reason: impl Into<String>) -> StoreError {
    StoreError::Malformed {
        what,
        reason: reason.into(),
    }
}

/// Checks `batch` against the limits; returns its encoded size.
fn batch_size(batch: &Batch) -> Result<usize> {
    let ops = batch.ops();
    if ops.len() > MAX_BATCH_OPS {
        return Err(StoreError::Backend(format!(
            "a batch of {} changes; at most {MAX_BATCH_OPS}",
            ops.len()
        )));
    }
    let mut size = 4usize;
    for op in ops {
        let (key, value) = match op {
            Op::Put { key, value, .. } => (key, Some(value)),
            Op::Delete { key, .. } => (key, None),
        };
        if key.len() > MAX_TABLE_KEY_BYTES {
            return Err(StoreError::Backend(format!(
                "a table key of {} bytes; at most {MAX_TABLE_KEY_BYTES}",
                key.len()
            )));
        }
        if let Some(v) = value {
            if v.len() > MAX_TABLE_VALUE_BYTES {
                return Err(StoreError::Backend(format!(
                    "a table value of {} bytes; at most {MAX_TABLE_VALUE_BYTES}",
                    v.len()
                )));
            }
        }
        size += 6 + key.len() + value.map_or(0, |v| 4 + v.len());
    }
    if size > MAX_BATCH_BYTES {
        return Err(StoreError::Backend(format!(
            "a batch of {size} bytes encoded; at most {MAX_BATCH_BYTES}"
        )));
    }
    Ok(size)
}

/// Appends a batch's encoding (checked by [`batch_size`]) to `out`: op
/// count u32, then per op kind u8 (0 put, 1 delete), table u8, key length
/// u32, key, and for a put value length u32, value.
fn encode_batch(batch: &Batch, out: &mut Vec<u8>) {
    let ops = batch.ops();
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        match op {
            Op::Put { table, key, value } => {
                out.push(0);
                out.push(table_byte(*table));
                out.extend_from_slice(&(key.len() as u32).to_le_bytes());
                out.extend_from_slice(key);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
            }
            Op::Delete { table, key } => {
                out.push(1);
                out.push(table_byte(*table));
                out.extend_from_slice(&(key.len() as u32).to_le_bytes());
                out.extend_from_slice(key);
            }
        }
    }
}

/// A table byte off an encoded payload.
fn read_table(c: &mut Reader<'_>) -> Result<Table> {
    let b = c.u8()?;
    table_of(b).ok_or_else(|| malformed(c.what(), format!("unknown table {b}")))
}

/// Applies one encoded batch (as written by [`encode_batch`]) to `map`.
fn apply_encoded(c: &mut Reader<'_>, map: &mut TableMap) -> Result<()> {
    let ops = c.u32()?;
    for _ in 0..ops {
        let kind = c.u8()?;
        let table = read_table(c)?;
        let klen = c.u32()? as usize;
        let key = c.take(klen)?;
        match kind {
            0 => {
                let vlen = c.u32()? as usize;
                let value = Bytes::copy_from_slice(c.take(vlen)?);
                map.put(table, key.to_vec(), value);
            }
            1 => map.delete(table, key),
            k => return Err(malformed(c.what(), format!("unknown change kind {k}"))),
        }
    }
    Ok(())
}

/// A log record: `record` is [`LOG_HEADER`] bytes of room, then the payload
/// (batch count u32, then the encoded batches). Fills in the header (magic,
/// format, 3 bytes zero, sequence u64, payload length u32, pages u32,
/// payload CRC-32C, header CRC-32C) and cuts the record into pages, without
/// copying the payload.
fn seal_log_record(seq: u64, mut record: Vec<u8>, page_size: usize) -> Vec<Bytes> {
    fill_log_header(seq, &mut record, page_size, FORMAT);
    paginate(record, page_size)
}

/// A log record of one page or less (see [`seal_log_record`]), packed:
/// padded with zeros to whole sectors of `sector_size`.
fn seal_packed_log_record(
    seq: u64,
    mut record: Vec<u8>,
    page_size: usize,
    sector_size: usize,
) -> Bytes {
    debug_assert!(record.len() <= page_size, "a packed record fits a page");
    fill_log_header(seq, &mut record, page_size, LOG_FORMAT_PACKED);
    record.resize(record.len().div_ceil(sector_size) * sector_size, 0);
    Bytes::from(record)
}

/// Fills in a log record's header (see [`seal_log_record`]).
fn fill_log_header(seq: u64, record: &mut [u8], page_size: usize, format: u8) {
    let len = record.len() - LOG_HEADER;
    let pages = record.len().div_ceil(page_size) as u32;
    let crc = crc32c::crc32c(&record[LOG_HEADER..]);
    record[0..4].copy_from_slice(&LOG_MAGIC);
    record[4..8].copy_from_slice(&[format, 0, 0, 0]);
    record[8..16].copy_from_slice(&seq.to_le_bytes());
    record[16..20].copy_from_slice(&(len as u32).to_le_bytes());
    record[20..24].copy_from_slice(&pages.to_le_bytes());
    record[24..28].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c::crc32c(&record[..28]);
    record[28..32].copy_from_slice(&hcrc.to_le_bytes());
}

/// A log record header: (sequence, payload length, pages, payload CRC).
fn decode_log_header(page: &[u8], page_size: usize) -> Option<(u64, usize, u64, u32)> {
    if page.len() < LOG_HEADER
        || page[0..4] != LOG_MAGIC
        || !(page[4] == FORMAT || page[4] == LOG_FORMAT_PACKED)
        || crc32c::crc32c(&page[..28]) != u32_at(page, 28)
    {
        return None;
    }
    let len = u32_at(page, 16) as usize;
    let pages = u64::from(u32_at(page, 20));
    if len > MAX_BATCH_BYTES + 4 * MAX_GROUP + 4
        || pages != (LOG_HEADER + len).div_ceil(page_size) as u64
    {
        return None;
    }
    Some((u64_at(page, 8), len, pages, u32_at(page, 24)))
}

/// What the root page says: the current snapshot and where the log after
/// it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Root {
    /// Batches up to this sequence number are in the snapshot.
    snapshot_seq: u64,
    /// The snapshot's pages in the snapshot space.
    snapshot_first: u64,
    snapshot_pages: u64,
    /// The log page holding the record after `snapshot_seq`.
    log_start: u64,
}

impl Root {
    /// magic, format, 3 zero bytes, snapshot seq u64, first page u64, pages
    /// u64, log start u64, CRC-32C; the rest of the page zero.
    fn encode(&self, page_size: usize) -> Bytes {
        let mut b = Vec::with_capacity(ROOT_BYTES);
        b.extend_from_slice(&ROOT_MAGIC);
        b.extend_from_slice(&[FORMAT, 0, 0, 0]);
        b.extend_from_slice(&self.snapshot_seq.to_le_bytes());
        b.extend_from_slice(&self.snapshot_first.to_le_bytes());
        b.extend_from_slice(&self.snapshot_pages.to_le_bytes());
        b.extend_from_slice(&self.log_start.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        paginate(b, page_size).remove(0)
    }

    fn decode(page: &[u8]) -> Result<Root> {
        if page.len() < ROOT_BYTES
            || page[0..4] != ROOT_MAGIC
            || crc32c::crc32c(&page[..40]) != u32_at(page, 40)
        {
            return Err(malformed(
                "table root",
                "bad magic or checksum in an acknowledged page",
            ));
        }
        if page[4] != FORMAT {
            return Err(malformed(
                "table root",
                format!("format {}; this build reads {FORMAT}", page[4]),
            ));
        }
        Ok(Root {
            snapshot_seq: u64_at(page, 8),
            snapshot_first: u64_at(page, 16),
            snapshot_pages: u64_at(page, 24),
            log_start: u64_at(page, 32),
        })
    }
}

/// A snapshot, whole (the tests' reference for [`write_snapshot`]).
#[cfg(test)]
fn encode_snapshot(seq: u64, map: &TableMap, page_size: usize) -> Vec<Bytes> {
    let mut bytes = vec![0u8; SNAPSHOT_HEADER];
    for (table, key, value) in map.iter_after(None) {
        encode_snapshot_record(table, key, value, &mut bytes);
    }
    let len = (bytes.len() - SNAPSHOT_HEADER) as u64;
    let crc = crc32c::crc32c(&bytes[SNAPSHOT_HEADER..]);
    fill_snapshot_header(&mut bytes, seq, map.records() as u64, len, crc);
    paginate(bytes, page_size)
}

/// Appends one record of a snapshot's payload (see [`fill_snapshot_header`]
/// for the whole).
fn encode_snapshot_record(table: Table, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(table_byte(table));
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// Fills in a snapshot's header, the first [`SNAPSHOT_HEADER`] bytes of
/// `first_page`. A snapshot: magic, format, 3 zero bytes, sequence u64,
/// records u64, payload length u64, payload CRC-32C, header CRC-32C; then
/// per record table u8, key length u32, key, value length u32, value: the
/// store's records in key order, then an owner's in its order.
fn fill_snapshot_header(first_page: &mut [u8], seq: u64, records: u64, len: u64, crc: u32) {
    let h = &mut first_page[..SNAPSHOT_HEADER];
    h[0..4].copy_from_slice(&SNAPSHOT_MAGIC);
    h[4..8].copy_from_slice(&[FORMAT, 0, 0, 0]);
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&records.to_le_bytes());
    h[24..32].copy_from_slice(&len.to_le_bytes());
    h[32..36].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c::crc32c(&h[..36]);
    h[36..40].copy_from_slice(&hcrc.to_le_bytes());
}

/// A snapshot on its way to its pages (the format of
/// [`fill_snapshot_header`]), from page `first` of its space: records are
/// encoded and written `piece_bytes` at a time, so a compaction's memory
/// stays bounded whatever the tables hold; the first page, which holds the
/// header with the count and checksum of every record, goes last
/// ([`finish`](Self::finish)). The store's map goes in first, while the
/// writer holds the map still; an owner's records (a copy) follow, with the
/// writer free to commit again.
struct SnapshotWriter {
    volume: Arc<SpaceManager>,
    space: u32,
    page_size: usize,
    piece_bytes: usize,
    /// The sequence number of the last log record the snapshot holds.
    seq: u64,
    first: u64,
    /// The page after the last one written or tried: on an error, pages
    /// `first..next` are what to trim.
    next: u64,
    /// Encoded records not yet written (less than a piece and a page).
    buf: Vec<u8>,
    records: u64,
    len: u64,
    crc: u32,
    /// The first page, kept back until the header can be filled in.
    first_page: Option<Vec<u8>>,
}

impl SnapshotWriter {
    fn new(
        volume: Arc<SpaceManager>,
        space: u32,
        first: u64,
        seq: u64,
        piece_bytes: usize,
    ) -> Self {
        let page_size = volume.page_size();
        let piece_bytes = piece_bytes.max(page_size);
        let mut buf = Vec::with_capacity(piece_bytes + page_size);
        buf.resize(SNAPSHOT_HEADER, 0);
        Self {
            volume,
            space,
            page_size,
            piece_bytes,
            seq,
            first,
            next: first,
            buf,
            records: 0,
            len: 0,
            crc: 0,
            first_page: None,
        }
    }

    /// Encodes one record; whether a piece is full.
    fn add(&mut self, table: Table, key: &[u8], value: &[u8]) -> bool {
        let start = self.buf.len();
        encode_snapshot_record(table, key, value, &mut self.buf);
        self.crc = crc32c::crc32c_append(self.crc, &self.buf[start..]);
        self.len += (self.buf.len() - start) as u64;
        self.records += 1;
        self.buf.len() >= self.piece_bytes
    }

    /// Adds the store's map (held by `inner`; the caller is the writer, the
    /// map's only writer, so it does not change meanwhile), a piece at a
    /// time: the map's lock is let go while a piece is written.
    async fn add_map(&mut self, inner: &Inner) -> Result<()> {
        let mut cursor: Option<(Table, Vec<u8>)> = None;
        loop {
            cursor = {
                let map = inner.read();
                let after = cursor.as_ref().map(|(t, k)| (*t, k.as_slice()));
                let mut stopped_at = None;
                for (table, key, value) in map.iter_after(after) {
                    if self.add(table, key, value) {
                        stopped_at = Some((table, key.to_vec()));
                        break;
                    }
                }
                stopped_at
            };
            if cursor.is_none() {
                return Ok(());
            }
            self.write_whole_pages(false).await?;
        }
    }

    /// Adds an owner's records.
    async fn add_owned(&mut self, owned: OwnedRecords) -> Result<()> {
        let slice = SNAPSHOT_SLICE_BYTES as u64;
        let mut next_yield = self.len + slice;
        for (table, key, value) in owned {
            if self.add(table, &key, &value) {
                self.write_whole_pages(false).await?;
            }
            if self.len >= next_yield {
                next_yield = self.len + slice;
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }

    /// Writes the whole pages encoded so far (with `last`, the partial one
    /// too, padded), keeping back the first page.
    async fn write_whole_pages(&mut self, last: bool) -> Result<()> {
        let page_size = self.page_size;
        let whole = if last {
            self.buf.len().div_ceil(page_size)
        } else {
            self.buf.len() / page_size
        };
        let mut rest = Vec::with_capacity(self.piece_bytes + page_size);
        if last {
            self.buf.resize(whole * page_size, 0);
        } else {
            rest.extend_from_slice(&self.buf[whole * page_size..]);
            self.buf.truncate(whole * page_size);
        }
        if self.buf.is_empty() {
            // `paginate` would make a page of nothing.
            self.buf = rest;
            return Ok(());
        }
        let mut pages = paginate(std::mem::replace(&mut self.buf, rest), page_size);
        if self.first_page.is_none() {
            self.first_page = Some(pages.remove(0).to_vec());
            self.next += 1;
        }
        let run_pages = (SNAPSHOT_SLICE_BYTES / page_size).clamp(1, quarry_volume::MAX_RUN_PAGES);
        while !pages.is_empty() {
            let run: Vec<Bytes> = pages.drain(..pages.len().min(run_pages)).collect();
            let n = run.len() as u64;
            let id = LogicalPage::new(self.space, self.next);
            self.next += n;
            self.volume
                .write_run(id, run)
                .await
                .map_err(|e| volume_error(format_args!("writing snapshot pages {id}+{n}"), e))?;
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// Writes what is left, then the first page with the header; returns
    /// the snapshot's pages.
    async fn finish(&mut self) -> Result<u64> {
        self.write_whole_pages(true).await?;
        let mut page = self
            .first_page
            .take()
            .unwrap_or_else(|| vec![0u8; self.page_size]);
        fill_snapshot_header(&mut page, self.seq, self.records, self.len, self.crc);
        let id = LogicalPage::new(self.space, self.first);
        self.volume
            .write(id, Bytes::from(page))
            .await
            .map_err(|e| volume_error(format_args!("writing the snapshot's first page {id}"), e))?;
        Ok(self.next - self.first)
    }
}

/// The tables as the root's snapshot holds them (empty without one).
async fn load_snapshot(
    volume: &Arc<SpaceManager>,
    snap_space: u32,
    root: &Root,
) -> Result<TableMap> {
    let mut map = TableMap::default();
    let page_size = volume.page_size();
    if root.snapshot_pages > 0 {
        let pages =
            read_pages(volume, snap_space, root.snapshot_first, root.snapshot_pages).await?;
        let mut all = Vec::with_capacity(pages.len() * page_size);
        for (i, p) in pages.into_iter().enumerate() {
            let p = p.ok_or_else(|| {
                malformed(
                    "table snapshot",
                    format!(
                        "page {} of {} is missing",
                        root.snapshot_first + i as u64,
                        root.snapshot_pages
                    ),
                )
            })?;
            all.extend_from_slice(&p);
        }
        map = decode_snapshot(&all, root.snapshot_seq)?;
    }
    Ok(map)
}

/// Applies the log's records after the snapshot, up to its torn tail;
/// returns the page after the last page with a whole record, its sequence
/// number, and the bytes of the records applied.
///
/// A page holds one record that begins it and may span pages (format 1,
/// and records of more than a page), or records packed into its sectors one
/// after another (format 2). Within a page, records are read until one
/// does not check (the sectors never written, or a write of more sectors
/// cut short: [`SpaceManager::read_pieces`] names the sectors that fail);
/// the log goes on at the next page, whose first record must be the next
/// sequence number, so an acknowledged record lost in the middle is an
/// error, not a shorter log. The log ends at a page that is missing or
/// does not begin with a record that checks.
async fn replay_log(
    volume: &Arc<SpaceManager>,
    log_space: u32,
    root: &Root,
    map: &mut TableMap,
    stats: &mut VolumeTableStats,
) -> Result<(u64, u64, u64)> {
    let page_size = volume.page_size();
    let sector = volume.sector_size_bytes();
    let mut next = root.log_start;
    let mut seq = root.snapshot_seq;
    let mut bytes = 0u64;
    'pages: loop {
        let id = LogicalPage::new(log_space, next);
        let Some((page, damaged)) = volume
            .read_pieces(id)
            .await
            .map_err(|e| volume_error(format_args!("reading table log page {id}"), e))?
        else {
            break;
        };
        let mut at = 0usize;
        while at + LOG_HEADER <= page_size {
            let Some((rseq, len, pages, crc)) = decode_log_header(&page[at..], page_size) else {
                break;
            };
            if rseq != seq + 1 {
                return Err(malformed(
                    "table log",
                    format!(
                        "page {id} holds record {rseq}{} where record {} was due",
                        if at > 0 {
                            format!(" at byte {at}")
                        } else {
                            String::new()
                        },
                        seq + 1
                    ),
                ));
            }
            if pages > 1 {
                if at > 0 || !damaged.is_empty() {
                    break;
                }
                let rest = read_pages(volume, log_space, next + 1, pages - 1).await?;
                if rest.iter().any(Option::is_none) {
                    break 'pages;
                }
                let mut payload = Vec::with_capacity(pages as usize * page_size);
                payload.extend_from_slice(&page);
                for p in rest.into_iter().flatten() {
                    payload.extend_from_slice(&p);
                }
                let Some(payload) = payload.get(LOG_HEADER..LOG_HEADER + len) else {
                    break 'pages;
                };
                if crc32c::crc32c(payload) != crc {
                    break 'pages;
                }
                apply_log_payload(payload, map)?;
                stats.records_replayed_at_open += 1;
                seq = rseq;
                bytes += (LOG_HEADER + len) as u64;
                next += pages;
                continue 'pages;
            }
            let end = at + LOG_HEADER + len;
            let sectors = at / sector..end.div_ceil(sector);
            if end > page_size || damaged.iter().any(|&k| sectors.contains(&(k as usize))) {
                break;
            }
            let payload = &page[at + LOG_HEADER..end];
            if crc32c::crc32c(payload) != crc {
                break;
            }
            apply_log_payload(payload, map)?;
            stats.records_replayed_at_open += 1;
            seq = rseq;
            bytes += (LOG_HEADER + len) as u64;
            at = sectors.end * sector;
        }
        if at == 0 {
            // No record begins this page: the log ends before it, unless
            // the page is damaged and the log goes on after it (a record
            // lost, not a write cut short: those are the last).
            let after = LogicalPage::new(log_space, next + 1);
            if !damaged.is_empty()
                && volume
                    .read_pieces(after)
                    .await
                    .map_err(|e| volume_error(format_args!("reading table log page {after}"), e))?
                    .is_some()
            {
                return Err(malformed(
                    "table log",
                    format!(
                        "page {id} is damaged (sectors {damaged:?}) and page {after} follows it"
                    ),
                ));
            }
            break;
        }
        next += 1;
    }
    Ok((next, seq, bytes))
}

/// Applies a log record's payload (batch count u32, then the encoded
/// batches) to `map`.
fn apply_log_payload(payload: &[u8], map: &mut TableMap) -> Result<()> {
    let mut c = Reader::new("table log record", payload);
    let batches = c.u32()?;
    for _ in 0..batches {
        apply_encoded(&mut c, map)?;
    }
    if !c.done() {
        return Err(malformed("table log record", "bytes trail the batches"));
    }
    Ok(())
}

fn decode_snapshot(bytes: &[u8], seq: u64) -> Result<TableMap> {
    let what = "table snapshot";
    if bytes.len() < SNAPSHOT_HEADER
        || bytes[0..4] != SNAPSHOT_MAGIC
        || bytes[4] != FORMAT
        || crc32c::crc32c(&bytes[..36]) != u32_at(bytes, 36)
    {
        return Err(malformed(what, "bad magic, format or header checksum"));
    }
    if u64_at(bytes, 8) != seq {
        return Err(malformed(
            what,
            format!("holds sequence {}, the root names {seq}", u64_at(bytes, 8)),
        ));
    }
    let records = u64_at(bytes, 16);
    let len = u64_at(bytes, 24);
    // Compared before any sum: a claimed length near 2^64 must not wrap
    // (found by `tables::fuzz`, kept there as a case).
    let Some(len) = usize::try_from(len)
        .ok()
        .filter(|&l| l <= bytes.len() - SNAPSHOT_HEADER)
    else {
        return Err(malformed(what, format!("{len} payload bytes do not fit")));
    };
    let payload = &bytes[SNAPSHOT_HEADER..SNAPSHOT_HEADER + len];
    if crc32c::crc32c(payload) != u32_at(bytes, 32) {
        return Err(malformed(what, "payload checksum does not match"));
    }
    let mut c = Reader::new(what, payload);
    let mut map = TableMap::default();
    for _ in 0..records {
        let table = read_table(&mut c)?;
        let klen = c.u32()? as usize;
        let key = c.take(klen)?.to_vec();
        let vlen = c.u32()? as usize;
        let value = Bytes::copy_from_slice(c.take(vlen)?);
        map.put(table, key, value);
    }
    if !c.done() {
        return Err(malformed(what, "bytes trail the records"));
    }
    Ok(map)
}

/// The in-memory tables, and what the writer shares with every caller.
struct Inner {
    tables: RwLock<TableMap>,
    /// The writer's figures (`records` and `bytes` are the map's, filled in
    /// by [`VolumeTableStore::stats`]).
    stats: Mutex<VolumeTableStats>,
    /// Batches handed in and not yet taken by a writer, in ticket order.
    queue: Mutex<Queue>,
    /// The ticket of the last batch a writer is done with (committed or
    /// refused): tickets are taken in order, so every earlier one is done.
    done: watch::Sender<u64>,
    /// Woken when a writer takes batches off the queue.
    room: Notify,
    /// Where the log goes next; whoever holds it writes the next group.
    writer: Arc<tokio::sync::Mutex<Writer>>,
    /// Held by the compaction under way (taken before `writer`, never
    /// after): one at a time.
    compacting: Arc<tokio::sync::Mutex<()>>,
    /// Who keeps the records of some tables ([`TableStore::hand_over`]).
    owner: Mutex<Option<Arc<dyn TableOwner>>>,
    /// Bit `table.index()` set: the owner's table.
    owned_mask: AtomicU8,
}

impl Inner {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, TableMap> {
        self.tables.read().expect("tables lock")
    }

    fn owned(&self) -> [bool; 5] {
        let mask = self.owned_mask.load(Ordering::Acquire);
        std::array::from_fn(|i| mask & (1 << i) != 0)
    }

    fn refuse_owned(&self, table: Table) -> Result<()> {
        if self.owned()[table.index()] {
            return Err(StoreError::Backend(format!(
                "table {table:?} was handed over to its owner, which keeps its records"
            )));
        }
        Ok(())
    }
}

/// Batches waiting for the log.
#[derive(Default)]
struct Queue {
    waiting: VecDeque<Pending>,
    /// Bytes of the waiting batches (each with [`PENDING_OVERHEAD`]).
    bytes: usize,
    /// The ticket of the last batch handed in.
    last_ticket: u64,
}

/// A batch on its way to the log (encoded by the writer, straight into the
/// log record).
struct Pending {
    ticket: u64,
    batch: Batch,
    /// Its encoded size.
    size: usize,
    /// Memory the batch could add (its puts).
    growth: u64,
    /// Handed in by [`TableStore::submit`]: refused once an earlier such
    /// batch failed.
    ordered: bool,
    done: oneshot::Sender<Result<()>>,
}

/// Where the log goes next, and what the writer keeps between groups.
struct Writer {
    volume: Arc<SpaceManager>,
    config: VolumeTableConfig,
    page_size: usize,
    /// The volume's sector: packed log records take whole ones.
    sector_size: usize,
    root: Root,
    /// Next log page.
    log_next: u64,
    /// The log page the next record of a page or less is packed into, when
    /// it has room.
    open_log: Option<OpenLogPage>,
    /// Bytes of the log records since the snapshot (headers and payloads,
    /// not the padding of their last pages).
    log_bytes: u64,
    last_seq: u64,
    /// Next free snapshot page (snapshots never reuse an index).
    snapshot_next: u64,
    /// Set when a failed log write could not be cleaned up (recovery trims
    /// the torn record), or by [`VolumeTableStore::close`]: later commits
    /// fail until the store is reopened.
    broken: Option<String>,
    /// Set when a submitted batch failed: the submitter's memory then holds
    /// changes the log does not, so later submitted batches fail too.
    ordered_failed: Option<String>,
}

/// The log page records are being packed into.
struct OpenLogPage {
    index: u64,
    /// Its records as written, padded to whole sectors: written again from
    /// sector 0 with the next record when the page takes no more sectors
    /// in place ([`SectorsWritten::Closed`]).
    written: Vec<u8>,
}

/// A crash-safe table store over a [`SpaceManager`]: the tables live in
/// memory as one ordered map, every commit is first appended to a log in
/// the log space, and the log is compacted now and then into a snapshot in
/// the snapshot space.
///
/// - **Commit**: the batch is checked against the limits and queued behind
///   the batches before it (at most 1024 batches and 64 MiB wait; a commit
///   beyond waits for room). The first caller to find the log free becomes
///   its writer: it takes every batch waiting (group commit, up to 1024
///   batches and 16 MiB), writes them as one log record (sequence number,
///   length, CRC-32C): packed into the sectors after the records of the
///   open log page when it is a page or less, else at the next log pages
///   (`docs/store.md`, "Packed log records"), and
///   only then applies them to the map and answers each; callers that
///   queued meanwhile form the next group. The writing is done by a caller,
///   not a task of its own, so a commit with nobody ahead of it costs no
///   hand-over between threads; a writer whose caller goes away finishes
///   its group on a task. A record is all or nothing at recovery, so each
///   batch is atomic.
/// - **Compaction**, when the log since the last snapshot holds as many
///   bytes as it (and spans at least `compact_min_log_pages`): the writer
///   writes the map as the start of a snapshot at fresh pages and takes an
///   owner's copy; then, with the log free for the next commits, a task of
///   its own writes the owner's records and the snapshot's header page,
///   points the root page (page 0 of the snapshot space, written in place:
///   the volume keeps the old version until the new one is programmed) at
///   it and at the log page the compaction began at, and trims the old
///   snapshot's and log's pages. One runs at a time
///   ([`compacted`](Self::compacted) waits for it).
/// - **Recovery** ([`open`](Self::open)): the root's snapshot, then the log
///   records from the root's log start, each the next sequence number, until
///   a page is missing or a record does not check (the torn tail of a commit
///   that was never acknowledged); the tail's pages and anything left by a
///   cut-short compaction are trimmed.
///
/// Limits: keys of at most [`MAX_TABLE_KEY_BYTES`], values of at most
/// [`MAX_TABLE_VALUE_BYTES`], batches of at most [`MAX_BATCH_OPS`] changes
/// and [`MAX_BATCH_BYTES`] encoded; the whole tables within
/// `max_table_bytes` of memory.
pub struct VolumeTableStore {
    inner: Arc<Inner>,
    volume: Arc<SpaceManager>,
    config: VolumeTableConfig,
}

impl std::fmt::Debug for VolumeTableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeTableStore")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl VolumeTableStore {
    /// Opens the tables kept in `config`'s spaces of `volume`: loads the
    /// snapshot the root names, replays the log after it, trims a torn tail
    /// and what a cut-short compaction left. Nothing may write these spaces
    /// meanwhile.
    pub async fn open(volume: Arc<SpaceManager>, config: VolumeTableConfig) -> Result<Self> {
        if config.log_space == config.snapshot_space {
            return Err(StoreError::Backend(format!(
                "the table log and snapshots need two spaces, both are {}",
                config.log_space
            )));
        }
        let page_size = volume.page_size();
        if page_size < 2 * SNAPSHOT_HEADER {
            return Err(StoreError::Backend(format!(
                "volume pages of {page_size} bytes are too small for the tables"
            )));
        }
        let mut stats = VolumeTableStats::default();
        let snap_space = config.snapshot_space;
        let log_space = config.log_space;

        // The root and its snapshot.
        let root_id = LogicalPage::new(snap_space, ROOT_PAGE);
        let root = match volume
            .read(root_id)
            .await
            .map_err(|e| volume_error(format_args!("reading the table root {root_id}"), e))?
        {
            Some(page) => Root::decode(&page)?,
            None => Root::default(),
        };
        // Checked before anything is allocated for the snapshot.
        let snapshot_fits = root.snapshot_pages <= volume.capacity_pages()
            && root.snapshot_first > ROOT_PAGE
            && root
                .snapshot_first
                .checked_add(root.snapshot_pages)
                .is_some();
        if root.snapshot_pages > 0 && !snapshot_fits {
            return Err(malformed(
                "table root",
                format!(
                    "names a snapshot of {} pages from page {}; the volume holds {} pages \
                     and snapshots start at page 1",
                    root.snapshot_pages,
                    root.snapshot_first,
                    volume.capacity_pages()
                ),
            ));
        }
        let mut map = load_snapshot(&volume, snap_space, &root).await?;
        let (next, seq, log_bytes) =
            replay_log(&volume, log_space, &root, &mut map, &mut stats).await?;

        // Trim the torn tail, and what a cut-short compaction left: log
        // pages before the root's log start, snapshot pages other than the
        // root's snapshot.
        let stale_log: Vec<u64> = volume
            .pages_in(log_space)
            .into_iter()
            .filter(|&p| p < root.log_start || p >= next)
            .collect();
        let snap_end = root.snapshot_first + root.snapshot_pages;
        let snap_pages = volume.pages_in(snap_space);
        let snapshot_next = snap_pages.last().map_or(1, |&p| p + 1).max(snap_end).max(1);
        let stale_snap: Vec<u64> = snap_pages
            .into_iter()
            .filter(|&p| p != ROOT_PAGE && (p < root.snapshot_first || p >= snap_end))
            .collect();
        stats.pages_trimmed_at_open = (stale_log.len() + stale_snap.len()) as u64;
        trim_pages(&volume, log_space, stale_log).await?;
        trim_pages(&volume, snap_space, stale_snap).await?;

        stats.last_seq = seq;
        stats.log_pages = next - root.log_start;
        stats.snapshot_pages = root.snapshot_pages;
        let writer = Writer {
            volume: Arc::clone(&volume),
            config: config.clone(),
            page_size,
            sector_size: volume.sector_size_bytes(),
            root,
            log_next: next,
            // A reopened volume's pages take no more sectors in place: the
            // next record begins a page.
            open_log: None,
            log_bytes,
            last_seq: seq,
            snapshot_next,
            broken: None,
            ordered_failed: None,
        };
        let inner = Arc::new(Inner {
            tables: RwLock::new(map),
            stats: Mutex::new(stats),
            queue: Mutex::new(Queue::default()),
            done: watch::Sender::new(0),
            room: Notify::new(),
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            compacting: Arc::new(tokio::sync::Mutex::new(())),
            owner: Mutex::new(None),
            owned_mask: AtomicU8::new(0),
        });
        Ok(Self {
            inner,
            volume,
            config,
        })
    }

    /// The bytes the records held in memory are counted with
    /// ([`VolumeTableStats::bytes`] alone: no walk over the tables and no
    /// stats lock, for a check made on every call).
    pub fn bytes(&self) -> u64 {
        self.inner.read().bytes()
    }

    /// Current figures.
    pub fn stats(&self) -> VolumeTableStats {
        let (records, bytes) = {
            let map = self.inner.read();
            (map.records() as u64, map.bytes())
        };
        VolumeTableStats {
            records,
            bytes,
            ..*self.inner.stats.lock().expect("table stats lock")
        }
    }

    /// Volume pages the tables hold now (root, snapshot and log).
    pub fn pages(&self) -> u64 {
        (self.volume.pages_in(self.config.log_space).len()
            + self.volume.pages_in(self.config.snapshot_space).len()) as u64
    }

    /// Writes a snapshot now and drops the log before it (after the
    /// compaction under way, if one is).
    pub async fn compact(&self) -> Result<()> {
        let _compacting = self.inner.compacting.lock().await;
        let begun = self
            .inner
            .writer
            .lock()
            .await
            .begin_compaction(&self.inner)
            .await?;
        finish_compaction(&self.inner, begun).await
    }

    /// Returns once the compaction under way, if one is, is done. (A commit
    /// that finds the log due for one begins it and leaves the rest to a
    /// task of its own.)
    pub async fn compacted(&self) {
        let _compacting = self.inner.compacting.lock().await;
    }

    /// Waits for the compaction under way, if one is, then refuses every
    /// later commit (and so every later compaction). A node calls it before
    /// it closes its volume: a compaction the volume's close cut off would
    /// leave its pages for the next open to trim, and its work to do again.
    pub async fn close(&self) {
        let _compacting = self.inner.compacting.lock().await;
        let mut writer = self.inner.writer.lock().await;
        if writer.broken.is_none() {
            writer.broken = Some("the tables are closed".to_string());
        }
    }

    /// Queues `batch` (checked by [`batch_size`] at `size`) behind every
    /// batch queued before it; what answers it once a writer is done with
    /// it.
    fn enqueue(
        &self,
        batch: Batch,
        size: usize,
        ordered: bool,
    ) -> (u64, oneshot::Receiver<Result<()>>) {
        // An owner's records take none of the store's memory.
        let owned = self.inner.owned();
        let growth = batch
            .ops()
            .iter()
            .map(|op| match op {
                Op::Put { table, key, value } if !owned[table.index()] => record_bytes(key, value),
                _ => 0,
            })
            .sum();
        let (done, rx) = oneshot::channel();
        let mut queue = self.inner.queue.lock().expect("table queue lock");
        queue.last_ticket += 1;
        let ticket = queue.last_ticket;
        queue.bytes += size + PENDING_OVERHEAD;
        queue.waiting.push_back(Pending {
            ticket,
            batch,
            size,
            growth,
            ordered,
            done,
        });
        (ticket, rx)
    }

    /// Waits until the queue has room: fewer than [`QUEUE`] batches and
    /// [`MAX_QUEUED_BYTES`] wait. Callers that find room at the same moment
    /// may each add one batch beyond it.
    async fn wait_for_room(&self) {
        loop {
            let notified = self.inner.room.notified();
            {
                let queue = self.inner.queue.lock().expect("table queue lock");
                if queue.waiting.len() < QUEUE && queue.bytes < MAX_QUEUED_BYTES {
                    return;
                }
            }
            // A writer that takes batches meanwhile wakes this (the
            // `Notified` was made before the check).
            tokio::select! {
                () = notified => {}
                () = self.drive(u64::MAX) => {}
            }
        }
    }

    /// The answer to batch `ticket` (`rx`, from [`enqueue`](Self::enqueue)),
    /// writing groups itself whenever the log is free, as
    /// [`drive`](Self::drive) does. Only this batch's answer wakes it: the
    /// `done` watch that `drive` waits on wakes every waiting committer at
    /// each group, a wake-up (often of the other event-loop thread) for
    /// each one whose batch is not in it.
    async fn answered(&self, ticket: u64, mut rx: oneshot::Receiver<Result<()>>) -> Result<()> {
        loop {
            tokio::select! {
                biased;
                answer = &mut rx => {
                    return answer.unwrap_or_else(|_| {
                        Err(StoreError::Backend(
                            "the table writer dropped a batch unanswered".into(),
                        ))
                    });
                }
                writer = Arc::clone(&self.inner.writer).lock_owned() => {
                    // Leads until this batch is done with: its answer is
                    // sent by then.
                    let until = ticket.min(self.inner.queue.lock().expect("table queue lock").last_ticket);
                    Finishing::new(lead(Arc::clone(&self.inner), writer, until)).await;
                }
            }
        }
    }

    /// Returns once a writer is done with every batch up to `ticket`,
    /// writing groups itself whenever the log is free. (With `u64::MAX`,
    /// it writes or waits until a writer takes batches.)
    async fn drive(&self, ticket: u64) {
        let mut done = self.inner.done.subscribe();
        loop {
            if *done.borrow_and_update() >= ticket {
                return;
            }
            tokio::select! {
                biased;
                changed = done.changed() => {
                    // The sender lives in `inner`, which this borrows.
                    debug_assert!(changed.is_ok());
                }
                writer = Arc::clone(&self.inner.writer).lock_owned() => {
                    let until = ticket.min(self.inner.queue.lock().expect("table queue lock").last_ticket);
                    Finishing::new(lead(Arc::clone(&self.inner), writer, until)).await;
                    if ticket == u64::MAX {
                        return;
                    }
                }
            }
        }
    }
}

/// A writer's work, finished on a task of its own if its caller goes away
/// (a dropped future): batches taken off the queue are always written and
/// answered, and the writer's place in the log stays true.
struct Finishing(Option<Pin<Box<dyn Future<Output = ()> + Send>>>);

impl Finishing {
    fn new(work: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(Some(Box::pin(work)))
    }
}

impl Future for Finishing {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(work) = self.0.as_mut() else {
            return Poll::Ready(());
        };
        match work.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.0 = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        if let Some(work) = self.0.take() {
            // Without a runtime (it is shutting down) the work stops here,
            // as at a crash: recovery trims a record cut short.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(work);
            }
        }
    }
}

/// The writer's turn: groups off the queue until every batch up to
/// `until` is done with, then a compaction when one is due.
async fn lead(inner: Arc<Inner>, mut writer: OwnedMutexGuard<Writer>, until: u64) {
    loop {
        if *inner.done.borrow() >= until {
            break;
        }
        let (group, size, last) = writer.take_group(&inner);
        if last == 0 {
            // Every ticket handed out is done with (or taken by this
            // writer's own earlier groups).
            break;
        }
        inner.room.notify_waiters();
        if !group.is_empty() {
            writer.commit_group(&inner, group, size).await;
        }
        inner.done.send_replace(last);
    }
    if !writer.compaction_due() {
        return;
    }
    // One compaction at a time: while one is under way, commits go on.
    let Ok(compacting) = Arc::clone(&inner.compacting).try_lock_owned() else {
        return;
    };
    // A failure leaves the log as it was; a later commit tries again.
    let Ok(begun) = writer.begin_compaction(&inner).await else {
        return;
    };
    drop(writer);
    let rest = async move {
        let _ = finish_compaction(&inner, begun).await;
        drop(compacting);
    };
    // The rest is left to a task so that this commit's caller is answered
    // now. Without a runtime (it is shutting down) it stops here, as at a
    // crash: the next open trims what it wrote.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(rest);
    }
}

impl Writer {
    /// Takes the next group off the queue (the batches it refuses are
    /// answered here): the group, its encoded size, and the last ticket
    /// taken (0 when the queue was empty).
    fn take_group(&mut self, inner: &Inner) -> (Vec<Pending>, usize, u64) {
        // The writer is the map's only writer: what it holds now plus what
        // the group could add bounds it until the group is applied.
        let bound = inner.read().bytes();
        let mut queue = inner.queue.lock().expect("table queue lock");
        let (group, size, last, taken_bytes) = self.take_from(&mut queue.waiting, bound);
        queue.bytes -= taken_bytes;
        (group, size, last)
    }

    /// [`take_group`](Self::take_group) from `waiting`, with the map at
    /// `bound` bytes; also the queue bytes taken.
    fn take_from(
        &mut self,
        waiting: &mut VecDeque<Pending>,
        mut bound: u64,
    ) -> (Vec<Pending>, usize, u64, usize) {
        let mut group = Vec::new();
        let mut size = 4usize;
        let mut last = 0;
        let mut taken_bytes = 0;
        while group.len() < MAX_GROUP {
            let Some(next) = waiting.front() else {
                break;
            };
            if size + next.size > MAX_BATCH_BYTES && !group.is_empty() {
                break;
            }
            let Some(p) = waiting.pop_front() else {
                break;
            };
            taken_bytes += p.size + PENDING_OVERHEAD;
            last = p.ticket;
            if let Some(reason) = self.refusal(&p, bound) {
                if p.ordered && self.ordered_failed.is_none() {
                    self.ordered_failed = Some(reason.clone());
                }
                let _ = p.done.send(Err(StoreError::Backend(reason)));
                continue;
            }
            size += p.size;
            bound += p.growth;
            group.push(p);
        }
        (group, size, last, taken_bytes)
    }

    /// Why a batch cannot join the group: the log is broken, an earlier
    /// submitted batch failed, or the tables could outgrow their memory
    /// bound.
    fn refusal(&self, p: &Pending, bound: u64) -> Option<String> {
        if let Some(reason) = &self.broken {
            return Some(reason.clone());
        }
        if let (true, Some(reason)) = (p.ordered, &self.ordered_failed) {
            return Some(format!("an earlier submitted batch failed: {reason}"));
        }
        if p.growth > 0 && bound + p.growth > self.config.max_table_bytes {
            return Some(format!(
                "the tables hold {bound} bytes with the batches before this one; this batch \
                 could add {}, beyond the limit of {} (max_table_bytes)",
                p.growth, self.config.max_table_bytes
            ));
        }
        None
    }

    /// Writes `group` as one log record, then applies and answers it;
    /// whether it was written.
    async fn commit_group(&mut self, inner: &Inner, group: Vec<Pending>, size: usize) -> bool {
        // Room for the whole record and its padding: no reallocation.
        let mut record =
            Vec::with_capacity((LOG_HEADER + size).div_ceil(self.page_size) * self.page_size);
        record.resize(LOG_HEADER, 0);
        record.extend_from_slice(&(group.len() as u32).to_le_bytes());
        for p in &group {
            encode_batch(&p.batch, &mut record);
        }
        debug_assert_eq!(record.len(), LOG_HEADER + size);
        let seq = self.last_seq + 1;
        match self.write_log_record(seq, record).await {
            Ok(n) => {
                self.last_seq = seq;
                self.log_bytes += (LOG_HEADER + size) as u64;
                let count = group.len() as u64;
                let owned = inner.owned();
                let mut dones = Vec::with_capacity(group.len());
                {
                    let mut map = inner.tables.write().expect("tables lock");
                    for p in group {
                        map.apply_unowned(p.batch, &owned);
                        dones.push(p.done);
                    }
                    let mut st = inner.stats.lock().expect("table stats lock");
                    st.last_seq = seq;
                    st.log_pages += n;
                    st.log_records_written += 1;
                    st.batches_committed += count;
                }
                for done in dones {
                    let _ = done.send(Ok(()));
                }
                true
            }
            Err(reason) => {
                if group.iter().any(|p| p.ordered) && self.ordered_failed.is_none() {
                    self.ordered_failed = Some(reason.clone());
                }
                for p in group {
                    let _ = p.done.send(Err(StoreError::Backend(reason.clone())));
                }
                false
            }
        }
    }

    /// Writes log record `seq` (`record`: room for the header, then the
    /// payload); returns the log pages it added. A record of a page or less
    /// is packed into the sectors after the records of the open log page
    /// when they have room ([`SpaceManager::write_sectors`]: the file takes
    /// the record's sectors, not a page), else it begins the next page,
    /// which opens; a longer one takes whole pages from the next page on.
    /// On an error nothing was acknowledged, the record's own pages are
    /// taken back, and the next record begins a page.
    async fn write_log_record(
        &mut self,
        seq: u64,
        record: Vec<u8>,
    ) -> std::result::Result<u64, String> {
        let space = self.config.log_space;
        if record.len() > self.page_size {
            self.open_log = None;
            let pages = seal_log_record(seq, record, self.page_size);
            let n = pages.len() as u64;
            let first = self.log_next;
            return match write_pages(&self.volume, space, first, pages).await {
                Ok(()) => {
                    self.log_next += n;
                    Ok(n)
                }
                Err(e) => Err(self.abandon(seq, first, n, e.to_string()).await),
            };
        }
        let packed = seal_packed_log_record(seq, record, self.page_size, self.sector_size);
        if let Some(open) = self.open_log.take() {
            if open.written.len() + packed.len() <= self.page_size {
                return self.pack(seq, open, packed).await;
            }
        }
        let index = self.log_next;
        let id = LogicalPage::new(space, index);
        match self.volume.write_sectors(id, 0, packed.clone()).await {
            Ok(_) => {
                self.log_next += 1;
                if packed.len() < self.page_size {
                    self.open_log = Some(OpenLogPage {
                        index,
                        written: packed.to_vec(),
                    });
                }
                Ok(1)
            }
            Err(e) => Err(self.abandon(seq, index, 1, e.to_string()).await),
        }
    }

    /// Packs `packed` (record `seq`, whole sectors) after the records of
    /// the open log page: in place, or with them from sector 0 when the page
    /// takes no more in place. On an error the page keeps what it held
    /// (acknowledged records, and perhaps sectors of this one cut short,
    /// which recovery reads past), and the next record begins a page.
    async fn pack(
        &mut self,
        seq: u64,
        mut open: OpenLogPage,
        packed: Bytes,
    ) -> std::result::Result<u64, String> {
        let id = LogicalPage::new(self.config.log_space, open.index);
        let sector = (open.written.len() / self.sector_size) as u32;
        let mut written = self.volume.write_sectors(id, sector, packed.clone()).await;
        if let Ok(SectorsWritten::Closed) = written {
            let mut whole = open.written.clone();
            whole.extend_from_slice(&packed);
            written = self.volume.write_sectors(id, 0, Bytes::from(whole)).await;
        }
        match written {
            Ok(_) => {
                open.written.extend_from_slice(&packed);
                if open.written.len() < self.page_size {
                    self.open_log = Some(open);
                }
                Ok(0)
            }
            Err(e) => Err(format!("table log record {seq} packed into {id}: {e}")),
        }
    }

    /// After a failed write of record `seq` to pages `first..first + n`,
    /// which nothing acknowledged: takes them back so the next record can
    /// go at the same place; if that fails too, the tables stop (recovery
    /// trims the torn record). Returns why the write failed.
    async fn abandon(&mut self, seq: u64, first: u64, n: u64, e: String) -> String {
        let space = self.config.log_space;
        let reason = format!("table log record {seq} at {space}/{first}: {e}");
        if let Err(t) = trim_pages(&self.volume, space, first..first + n).await {
            self.broken = Some(format!(
                "{reason}; its pages could not be trimmed ({t}): the tables refuse commits \
                 until reopened"
            ));
        }
        reason
    }

    /// An owner's records for the next snapshot (None without an owner):
    /// its copy, taken together with every batch waiting (the owner's are
    /// all among them), which are written first so the copy and the log
    /// agree.
    async fn capture_owned(&mut self, inner: &Inner) -> Result<Option<OwnedRecords>> {
        let owner = inner.owner.lock().expect("table owner lock").clone();
        let Some(owner) = owner else {
            return Ok(None);
        };
        if let Some(reason) = &self.ordered_failed {
            // The owner's memory holds the failed batch; a snapshot of it
            // would make a change reported as failed come back.
            return Err(StoreError::Backend(format!(
                "no snapshot of the owner's records after a submitted batch failed: {reason}"
            )));
        }
        let mut taken = VecDeque::new();
        let records = owner.capture(&mut || {
            let mut queue = inner.queue.lock().expect("table queue lock");
            taken = std::mem::take(&mut queue.waiting);
            queue.bytes = 0;
        });
        inner.room.notify_waiters();
        let mut written = true;
        while !taken.is_empty() {
            let bound = inner.read().bytes();
            let (group, size, last, _) = self.take_from(&mut taken, bound);
            if !group.is_empty() {
                written &= self.commit_group(inner, group, size).await;
            }
            inner.done.send_replace(last);
        }
        if !written || self.ordered_failed.is_some() {
            return Err(StoreError::Backend(
                "no snapshot: the batches waiting at the owner's copy were not all written".into(),
            ));
        }
        Ok(Some(records))
    }

    /// A compaction rewrites the whole snapshot, so it waits until the log
    /// holds as many bytes as the snapshot (Redis rewrites its append-only
    /// file at the same point), not pages: a commit alone fills a page with
    /// a quarter of it or less, and counting pages wrote a snapshot page
    /// for every set at one connection (docs/benchmarks.md). The log's
    /// pages are kept within four times the snapshot's all the same.
    fn compaction_due(&self) -> bool {
        let log_pages = self.log_next - self.root.log_start;
        let snapshot_bytes = self.root.snapshot_pages * self.page_size as u64;
        self.broken.is_none()
            && log_pages >= self.config.compact_min_log_pages
            && (self.log_bytes >= snapshot_bytes
                || log_pages >= self.root.snapshot_pages.saturating_mul(4))
    }

    /// A compaction's first half, done by the writer: every batch waiting
    /// is written, an owner's records are copied, and the store's map goes
    /// into the snapshot. What is left ([`finish_compaction`]) needs no
    /// writer, so commits go on meanwhile. The caller holds
    /// [`Inner::compacting`].
    async fn begin_compaction(&mut self, inner: &Inner) -> Result<Compaction> {
        if let Some(reason) = &self.broken {
            return Err(StoreError::Backend(reason.clone()));
        }
        let owned = self.capture_owned(inner).await?;
        let mut snapshot = SnapshotWriter::new(
            Arc::clone(&self.volume),
            self.config.snapshot_space,
            self.snapshot_next,
            self.last_seq,
            self.config.snapshot_piece_bytes,
        );
        let added = snapshot.add_map(inner).await;
        // Indices are never reused, so what a failure leaves is harmless
        // and trimmed at the next open at the latest.
        self.snapshot_next = snapshot.next.max(snapshot.first + 1);
        if let Err(e) = added {
            let _ = trim_pages(&self.volume, snapshot.space, snapshot.first..snapshot.next).await;
            return Err(e);
        }
        // The log after the snapshot begins at a page of its own: a record
        // packed into the open page would lie before it.
        self.open_log = None;
        Ok(Compaction {
            snapshot,
            owned,
            log_start: self.log_next,
            log_bytes: self.log_bytes,
        })
    }
}

/// A compaction under way: a snapshot holding the tables as of its
/// sequence number, and the log from `log_start` on, which holds every
/// record after it.
struct Compaction {
    snapshot: SnapshotWriter,
    owned: Option<OwnedRecords>,
    log_start: u64,
    /// The log's bytes before `log_start` (counted since the last snapshot).
    log_bytes: u64,
}

/// A compaction's second half (see [`Writer::begin_compaction`]): the
/// owner's records and the snapshot's first page, then the root (page 0 of
/// the snapshot space, written in place: the volume keeps the old version
/// until the new one is programmed), then trims of the old snapshot and of
/// the log before `log_start`. The writer is taken only to note the new
/// root. The caller holds [`Inner::compacting`].
async fn finish_compaction(inner: &Inner, mut c: Compaction) -> Result<()> {
    let volume = Arc::clone(&c.snapshot.volume);
    let space = c.snapshot.space;
    let first = c.snapshot.first;
    let root_id = LogicalPage::new(space, ROOT_PAGE);
    let installed: Result<Root> = async {
        if let Some(owned) = c.owned.take() {
            c.snapshot.add_owned(owned).await?;
        }
        let root = Root {
            snapshot_seq: c.snapshot.seq,
            snapshot_first: first,
            snapshot_pages: c.snapshot.finish().await?,
            log_start: c.log_start,
        };
        volume
            .write(root_id, root.encode(volume.page_size()))
            .await
            .map_err(|e| volume_error(format_args!("writing the table root {root_id}"), e))?;
        Ok(root)
    }
    .await;
    let end = c.snapshot.next;
    let (root, old, log_space) = {
        let mut writer = inner.writer.lock().await;
        writer.snapshot_next = writer.snapshot_next.max(end);
        match installed {
            Ok(root) => {
                let old = std::mem::replace(&mut writer.root, root);
                writer.log_bytes = writer.log_bytes.saturating_sub(c.log_bytes);
                let mut st = inner.stats.lock().expect("table stats lock");
                st.log_pages = writer.log_next - root.log_start;
                st.snapshot_pages = root.snapshot_pages;
                st.compactions += 1;
                (root, old, writer.config.log_space)
            }
            Err(e) => {
                drop(writer);
                let _ = trim_pages(&volume, space, first..end).await;
                return Err(e);
            }
        }
    };
    trim_pages(
        &volume,
        space,
        old.snapshot_first..old.snapshot_first + old.snapshot_pages,
    )
    .await?;
    trim_pages(&volume, log_space, old.log_start..root.log_start).await
}

impl TableStore for VolumeTableStore {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        self.inner.refuse_owned(table)?;
        Ok(self.inner.read().get(table, key))
    }

    async fn commit(&self, batch: Batch) -> Result<()> {
        if batch.ops().is_empty() {
            return Ok(());
        }
        let size = batch_size(&batch)?;
        self.wait_for_room().await;
        let (ticket, rx) = self.enqueue(batch, size, false);
        self.answered(ticket, rx).await
    }

    async fn room(&self) -> Result<()> {
        self.wait_for_room().await;
        Ok(())
    }

    fn submit(&self, batch: Batch) -> impl Future<Output = Result<()>> + Send + '_ {
        let queued = if batch.ops().is_empty() {
            None
        } else {
            Some(batch_size(&batch).map(|size| self.enqueue(batch, size, true)))
        };
        async move {
            match queued {
                None => Ok(()),
                Some(Err(e)) => Err(e),
                Some(Ok((ticket, rx))) => self.answered(ticket, rx).await,
            }
        }
    }

    fn settled(&self) -> impl Future<Output = Result<()>> + Send + '_ {
        let ticket = self
            .inner
            .queue
            .lock()
            .expect("table queue lock")
            .last_ticket;
        async move {
            self.drive(ticket).await;
            Ok(())
        }
    }

    async fn scan(
        &self,
        table: Table,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Bytes)>> {
        self.inner.refuse_owned(table)?;
        Ok(self.inner.read().scan(table, prefix, after, limit))
    }

    async fn hand_over(&self, owner: Arc<dyn TableOwner>) -> Result<()> {
        let (tables, prefixes) = owner.claims();
        if tables.is_empty() {
            return Err(StoreError::Backend("an owner claiming no table".into()));
        }
        // Under the writer: no group is applied and no snapshot taken
        // while the records change hands.
        let _writer = self.inner.writer.lock().await;
        let mut slot = self.inner.owner.lock().expect("table owner lock");
        if slot.is_some() {
            return Err(StoreError::Backend(
                "the tables were handed over to an owner already".into(),
            ));
        }
        let mut mask = 0u8;
        {
            let mut map = self.inner.tables.write().expect("tables lock");
            for table in tables {
                map.drop_prefixes(table, &prefixes);
                mask |= 1 << table.index();
            }
        }
        *slot = Some(owner);
        self.inner.owned_mask.store(mask, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_encode_and_apply() {
        let mut b = Batch::new();
        b.put(Table::Chunks, b"k1".to_vec(), Bytes::from_static(b"v1"));
        b.put(Table::Buckets, b"k2".to_vec(), Bytes::from_static(b""));
        b.delete(Table::Chunks, b"k3".to_vec());
        let mut enc = Vec::new();
        encode_batch(&b, &mut enc);
        assert_eq!(enc.len(), batch_size(&b).unwrap());
        let (mut m1, mut m2) = (TableMap::default(), TableMap::default());
        let mut c = Reader::new("t", &enc);
        apply_encoded(&mut c, &mut m1).unwrap();
        assert!(c.done());
        m2.apply(b);
        assert_eq!((m1.clone(), m1.bytes()), (m2.clone(), m2.bytes()));
        assert_eq!(m1.records(), 2);
        let mut big = Batch::new();
        big.put(
            Table::Chunks,
            vec![0u8; MAX_TABLE_KEY_BYTES + 1],
            Bytes::new(),
        );
        assert!(batch_size(&big).is_err());
    }

    #[test]
    fn batch_limits_name_the_figure() {
        let refused = |b: &Batch| batch_size(b).unwrap_err().to_string();
        let mut b = Batch::new();
        b.put(
            Table::Manifests,
            b"k".to_vec(),
            vec![0u8; MAX_TABLE_VALUE_BYTES + 1],
        );
        assert!(refused(&b).contains("at most 12582912"), "value");
        let mut b = Batch::new();
        for i in 0..=MAX_BATCH_OPS as u32 {
            b.delete(Table::Chunks, i.to_le_bytes().to_vec());
        }
        assert!(refused(&b).contains("at most 65536"), "changes");
        let mut b = Batch::new();
        let big = Bytes::from(vec![0u8; 9 << 20]);
        b.put(Table::Manifests, b"a".to_vec(), big.clone());
        b.put(Table::Manifests, b"b".to_vec(), big);
        assert!(refused(&b).contains("at most 16777216"), "encoded size");
    }

    #[test]
    fn log_records_and_snapshots_round_trip() {
        let mut record = vec![0u8; LOG_HEADER];
        record.extend_from_slice(&[5u8; 1000]);
        let pages = seal_log_record(7, record, 512);
        assert_eq!(pages.len(), 3);
        let (seq, len, n, crc) = decode_log_header(&pages[0], 512).unwrap();
        assert_eq!(
            (seq, len, n, crc),
            (7, 1000, 3, crc32c::crc32c(&[5u8; 1000]))
        );
        assert!(decode_log_header(&pages[1], 512).is_none());
        let mut map = TableMap::default();
        for i in 0..50u32 {
            map.put(
                Table::Manifests,
                i.to_be_bytes().to_vec(),
                Bytes::from(vec![i as u8; i as usize]),
            );
        }
        let pages = encode_snapshot(9, &map, 512);
        let all: Vec<u8> = pages.iter().flat_map(|p| p.iter().copied()).collect();
        let back = decode_snapshot(&all, 9).unwrap();
        assert_eq!(back, map);
        assert!(decode_snapshot(&all, 8).is_err());
        let root = Root {
            snapshot_seq: 1,
            snapshot_first: 2,
            snapshot_pages: 3,
            log_start: 4,
        };
        assert_eq!(Root::decode(&root.encode(512)).unwrap(), root);
    }
}
