//! Files of the data directory: the checkpoint (`volume.ckpt`) and the trim
//! logs (`volume-trims-GGGGGGGGGGGGGGGG.log`).
//!
//! **Checkpoint** (little endian), replaced atomically (temp file, fsync,
//! rename, fsync of the directory):
//!
//! ```text
//! magic "QVOLCKPT" | version u32 | geometry: 6 x u32
//! generation u64 | next_seq u64 | floor u64
//! block count u32, then per block: erase_count u32, scan_from u32, last_write u64
//! entry count u64, then per entry: space u32, index u64, seq u64, phys u32
//!     (phys 0xFFFF_FFFF = a tombstone: the page was trimmed at seq)
//! CRC-32C of all the bytes before it, u32
//! ```
//!
//! **Trim log**: records of 28 bytes appended and fsynced before a trim is
//! acknowledged: magic "QVTR" | space u32 | index u64 | seq u64 | CRC-32C of the
//! 24 bytes before it. A log is started at every checkpoint (its generation
//! is the checkpoint's); recovery replays the logs whose generation is at
//! least the checkpoint's. A torn record can only be the last one (records
//! are synced in order); anything invalid before a valid record is corruption.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use quarry_device::Geometry;

use crate::blocks::Phys;
use crate::{LogicalPage, VolumeError};

/// The checkpoint's file name in the data directory.
pub(crate) const CHECKPOINT_FILE: &str = "volume.ckpt";
const CHECKPOINT_MAGIC: &[u8; 8] = b"QVOLCKPT";
const CHECKPOINT_VERSION: u32 = 1;
const HEADER: usize = 8 + 4 + 6 * 4 + 8 + 8 + 8 + 4;
const PER_BLOCK: usize = 16;
const PER_ENTRY: usize = 24;
/// `phys` of a tombstone entry.
pub(crate) const TOMBSTONE: Phys = u32::MAX;

const TRIM_MAGIC: &[u8; 4] = b"QVTR";
/// Bytes of one trim-log record.
pub(crate) const TRIM_RECORD_BYTES: usize = 28;
/// An append's header: one record's size, so a log stays a row of
/// fixed-size units. Logs written before headers existed hold records only,
/// and still read.
const TRIM_APPEND_MAGIC: &[u8; 4] = b"QVTA";

/// Per-block part of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CkptBlock {
    /// The device's erase count when the checkpoint was taken.
    pub erase_count: u32,
    /// Pages below this are reflected in the entries; recovery rescans from
    /// here (if the erase count is unchanged) or from 0.
    pub scan_from: u32,
    /// Age clock of the block.
    pub last_write: u64,
}

/// One mapping entry (or tombstone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CkptEntry {
    pub page: LogicalPage,
    pub seq: u64,
    /// `None` for a tombstone.
    pub phys: Option<Phys>,
}

/// A checkpoint: the mapping and the block table at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub geometry: Geometry,
    /// Generation: the trim log started with this checkpoint has the same.
    pub generation: u64,
    /// The next sequence number to hand out.
    pub next_seq: u64,
    /// Every write with a sequence number up to here is reflected in the
    /// entries (applied, or superseded); writes above it may have been in
    /// flight.
    pub floor: u64,
    pub blocks: Vec<CkptBlock>,
    pub entries: Vec<CkptEntry>,
}

fn geometry_fields(g: &Geometry) -> [u32; 6] {
    [
        g.buses,
        g.chips_per_bus,
        g.blocks_per_chip,
        g.pages_per_block,
        g.page_size_bytes,
        g.oob_size_bytes,
    ]
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(crate) fn encode_checkpoint(c: &Checkpoint) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(HEADER + c.blocks.len() * PER_BLOCK + 8 + c.entries.len() * PER_ENTRY);
    out.extend_from_slice(CHECKPOINT_MAGIC);
    out.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    for f in geometry_fields(&c.geometry) {
        out.extend_from_slice(&f.to_le_bytes());
    }
    out.extend_from_slice(&c.generation.to_le_bytes());
    out.extend_from_slice(&c.next_seq.to_le_bytes());
    out.extend_from_slice(&c.floor.to_le_bytes());
    out.extend_from_slice(&(c.blocks.len() as u32).to_le_bytes());
    for b in &c.blocks {
        out.extend_from_slice(&b.erase_count.to_le_bytes());
        out.extend_from_slice(&b.scan_from.to_le_bytes());
        out.extend_from_slice(&b.last_write.to_le_bytes());
    }
    out.extend_from_slice(&(c.entries.len() as u64).to_le_bytes());
    for e in &c.entries {
        out.extend_from_slice(&e.page.space.to_le_bytes());
        out.extend_from_slice(&e.page.index.to_le_bytes());
        out.extend_from_slice(&e.seq.to_le_bytes());
        out.extend_from_slice(&e.phys.unwrap_or(TOMBSTONE).to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The checkpoint without its CRC, once the magic, the CRC, the version
/// and the geometry check out; else why not.
fn checked_body<'a>(bytes: &'a [u8], expect: &Geometry) -> Result<&'a [u8], String> {
    if bytes.len() < HEADER + 8 + 4 || &bytes[..8] != CHECKPOINT_MAGIC {
        return Err(format!(
            "not a space manager checkpoint ({} bytes, bad magic or too short)",
            bytes.len()
        ));
    }
    let body = &bytes[..bytes.len() - 4];
    if crc32c::crc32c(body) != u32_at(bytes, bytes.len() - 4) {
        return Err("checksum mismatch: the checkpoint is corrupt".into());
    }
    let version = u32_at(bytes, 8);
    if version != CHECKPOINT_VERSION {
        return Err(format!(
            "version {version}, this build reads version {CHECKPOINT_VERSION}"
        ));
    }
    let f: Vec<u32> = (0..6).map(|i| u32_at(bytes, 12 + 4 * i)).collect();
    if f != geometry_fields(expect) {
        return Err(format!(
            "geometry mismatch: the checkpoint was written for buses/chips/blocks/pages/page \
             size/OOB {f:?}, the device has {:?}",
            geometry_fields(expect)
        ));
    }
    Ok(body)
}

/// Decodes a checkpoint and checks it against the device's geometry.
pub(crate) fn decode_checkpoint(
    path: &Path,
    bytes: &[u8],
    expect: &Geometry,
) -> Result<Checkpoint, VolumeError> {
    // Twin of quarry-device's `meta::decode` header checks (magic, CRC, version, geometry).
    let bad = |reason: String| VolumeError::Metadata {
        path: path.to_path_buf(),
        reason,
    };
    let body = checked_body(bytes, expect).map_err(bad)?;
    let mut at = 36;
    let generation = u64_at(bytes, at);
    let next_seq = u64_at(bytes, at + 8);
    let floor = u64_at(bytes, at + 16);
    let nblocks = u32_at(bytes, at + 24) as usize;
    at += 28;
    if nblocks as u64 != expect.blocks() {
        return Err(bad(format!(
            "{nblocks} blocks, the device has {}",
            expect.blocks()
        )));
    }
    if floor >= next_seq {
        return Err(bad(format!(
            "floor {floor} not below next sequence number {next_seq}"
        )));
    }
    if body.len() < at + nblocks * PER_BLOCK + 8 {
        return Err(bad("truncated block table".into()));
    }
    let mut blocks = Vec::with_capacity(nblocks);
    for _ in 0..nblocks {
        let b = CkptBlock {
            erase_count: u32_at(bytes, at),
            scan_from: u32_at(bytes, at + 4),
            last_write: u64_at(bytes, at + 8),
        };
        if b.scan_from > expect.pages_per_block {
            return Err(bad(format!(
                "block #{}: scan_from {} beyond {} pages",
                blocks.len(),
                b.scan_from,
                expect.pages_per_block
            )));
        }
        blocks.push(b);
        at += PER_BLOCK;
    }
    let nentries = u64_at(bytes, at);
    at += 8;
    let room = (body.len() - at) as u64;
    if nentries.checked_mul(PER_ENTRY as u64) != Some(room) {
        return Err(bad(format!(
            "{nentries} entries do not fill the {room} bytes left"
        )));
    }
    let pages = expect.pages();
    let mut entries = Vec::with_capacity(nentries as usize);
    for _ in 0..nentries {
        let phys = u32_at(bytes, at + 20);
        let e = CkptEntry {
            page: LogicalPage {
                space: u32_at(bytes, at),
                index: u64_at(bytes, at + 4),
            },
            seq: u64_at(bytes, at + 12),
            phys: (phys != TOMBSTONE).then_some(phys),
        };
        if e.phys.is_some_and(|p| u64::from(p) >= pages) || e.seq >= next_seq {
            return Err(bad(format!(
                "entry for {} out of range (physical page {phys}, seq {})",
                e.page, e.seq
            )));
        }
        entries.push(e);
        at += PER_ENTRY;
    }
    Ok(Checkpoint {
        geometry: *expect,
        generation,
        next_seq,
        floor,
        blocks,
        entries,
    })
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes the checkpoint atomically into `dir`.
pub(crate) fn save_checkpoint(dir: &Path, c: &Checkpoint) -> Result<(), VolumeError> {
    write_atomically(dir, CHECKPOINT_FILE, &encode_checkpoint(c))
}

/// Replaces `dir/name` with `bytes` atomically: a temporary file is written
/// and synced, renamed over the old one, and the directory synced, so a
/// crash leaves the old file or the new one, never a mix. Used for the
/// checkpoint and the block-volume registry.
pub(crate) fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), VolumeError> {
    quarry_geometry::write_file_durably(&dir.join(name), bytes)
        .map_err(|e| VolumeError::io(format!("{} {}", e.step, e.path.display()), e.source))
}

/// Reads the checkpoint in `dir`; `Ok(None)` when there is none.
pub(crate) fn load_checkpoint(
    dir: &Path,
    expect: &Geometry,
) -> Result<Option<Checkpoint>, VolumeError> {
    let path = dir.join(CHECKPOINT_FILE);
    match fs::read(&path) {
        Ok(bytes) => decode_checkpoint(&path, &bytes, expect).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(VolumeError::io(format!("reading {}", path.display()), e)),
    }
}

/// One trim: `page` holds nothing from sequence number `seq` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TrimRecord {
    pub page: LogicalPage,
    pub seq: u64,
}

pub(crate) fn encode_trim(r: &TrimRecord) -> [u8; TRIM_RECORD_BYTES] {
    let mut b = [0u8; TRIM_RECORD_BYTES];
    b[0..4].copy_from_slice(TRIM_MAGIC);
    b[4..8].copy_from_slice(&r.page.space.to_le_bytes());
    b[8..16].copy_from_slice(&r.page.index.to_le_bytes());
    b[16..24].copy_from_slice(&r.seq.to_le_bytes());
    let crc = crc32c::crc32c(&b[..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_trim(b: &[u8]) -> Option<TrimRecord> {
    if b.len() < TRIM_RECORD_BYTES
        || &b[0..4] != TRIM_MAGIC
        || crc32c::crc32c(&b[..24]) != u32_at(b, 24)
    {
        return None;
    }
    Some(TrimRecord {
        page: LogicalPage {
            space: u32_at(b, 4),
            index: u64_at(b, 8),
        },
        seq: u64_at(b, 16),
    })
}

/// The header of an append of `records` (encoded): magic, record count,
/// CRC-32C of the records, zeros, CRC-32C of the header.
fn encode_trim_append_header(records: &[u8]) -> [u8; TRIM_RECORD_BYTES] {
    let mut b = [0u8; TRIM_RECORD_BYTES];
    b[0..4].copy_from_slice(TRIM_APPEND_MAGIC);
    let count = records.len() / TRIM_RECORD_BYTES;
    assert!(
        u32::try_from(count).is_ok(),
        "{count} trim records for a 32-bit count"
    );
    b[4..8].copy_from_slice(&(count as u32).to_le_bytes());
    b[8..12].copy_from_slice(&crc32c::crc32c(records).to_le_bytes());
    let crc = crc32c::crc32c(&b[..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

/// An append header's (record count, CRC of the records).
fn decode_trim_append_header(b: &[u8]) -> Option<(usize, u32)> {
    if b.len() < TRIM_RECORD_BYTES
        || &b[0..4] != TRIM_APPEND_MAGIC
        || crc32c::crc32c(&b[..24]) != u32_at(b, 24)
    {
        return None;
    }
    // Any count is safe to follow: the decoder checks it against the file.
    Some((u32_at(b, 4) as usize, u32_at(b, 8)))
}

/// Parses a trim log: appends, each a header and its records (or, in a log
/// written before headers, records alone).
///
/// Only the last append can be torn: each is synced before the next
/// starts. A power loss in the middle of one may keep any of its unsynced
/// pages and lose others, so its header or any of its records may be
/// missing while later ones of the same append are whole; the whole append
/// is dropped (it was never acknowledged). Damage followed by a whole later
/// append (or, in a log without headers, a whole later record) is
/// corruption.
#[cfg(test)]
pub(crate) fn decode_trim_log(path: &Path, bytes: &[u8]) -> Result<Vec<TrimRecord>, VolumeError> {
    decode_trim_log_whole(path, bytes).map(|(records, _)| records)
}

/// [`decode_trim_log`], and how many bytes from the start hold whole
/// appends: the rest is a torn append, to be cut off before the log is
/// appended to again (an append after it would make it a damaged middle).
pub(crate) fn decode_trim_log_whole(
    path: &Path,
    bytes: &[u8],
) -> Result<(Vec<TrimRecord>, usize), VolumeError> {
    const R: usize = TRIM_RECORD_BYTES;
    let full = bytes.len() / R;
    let unit = |i: usize| &bytes[i * R..(i + 1) * R];
    let mut out = Vec::with_capacity(full);
    let mut framed = false;
    let mut i = 0;
    while i < full {
        if let Some((count, crc)) = decode_trim_append_header(unit(i)) {
            framed = true;
            let end = (i + 1).saturating_add(count);
            let records = (end <= full)
                .then(|| &bytes[(i + 1) * R..end * R])
                .filter(|r| crc32c::crc32c(r) == crc)
                .and_then(|r| r.chunks(R).map(decode_trim).collect::<Option<Vec<_>>>());
            if let Some(records) = records {
                out.extend(records);
                i = end;
                continue;
            }
        } else if !framed {
            if let Some(r) = decode_trim(unit(i)) {
                out.push(r);
                i += 1;
                continue;
            }
        }
        // Damage (or a record outside any append) at unit i: the torn last
        // append, unless something whole was appended after it.
        let later_whole = (i + 1..full).any(|j| {
            decode_trim_append_header(unit(j)).is_some()
                || (!framed && decode_trim(unit(j)).is_some())
        });
        if later_whole {
            return Err(VolumeError::Metadata {
                path: path.to_path_buf(),
                reason: format!("trim log unit #{i} is damaged and later appends are not"),
            });
        }
        warn_torn(path, i);
        return Ok((out, i * R));
    }
    if !bytes.len().is_multiple_of(R) {
        warn_torn(path, full);
    }
    Ok((out, full * R))
}

fn warn_torn(path: &Path, unit: usize) {
    tracing::warn!(
        "{}: dropping a torn trim append from unit #{unit} (never acknowledged)",
        path.display()
    );
}

/// The records of the trim logs in `dir` from generation `from_gen` on, in
/// order; each log's torn last append is cut off on the way (the current
/// generation's log is appended to again).
pub(crate) fn load_trim_logs(dir: &Path, from_gen: u64) -> Result<Vec<TrimRecord>, VolumeError> {
    let mut trims = Vec::new();
    for (gen, path) in list_trim_logs(dir)? {
        if gen < from_gen {
            continue;
        }
        let bytes = fs::read(&path)
            .map_err(|e| VolumeError::io(format!("reading {}", path.display()), e))?;
        let (records, whole_bytes) = decode_trim_log_whole(&path, &bytes)?;
        if whole_bytes < bytes.len() {
            cut_torn_trim_append(&path, whole_bytes as u64)?;
        }
        trims.extend(records);
    }
    Ok(trims)
}

/// Cuts a trim log back to its first `whole_bytes` (its whole appends) and
/// syncs it, so what is appended next follows a whole append.
pub(crate) fn cut_torn_trim_append(path: &Path, whole_bytes: u64) -> Result<(), VolumeError> {
    let io = |what: &str, e| VolumeError::io(format!("{what} {}", path.display()), e);
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io("opening", e))?;
    file.set_len(whole_bytes)
        .map_err(|e| io("cutting a torn append off", e))?;
    file.sync_all().map_err(|e| io("syncing", e))
}

/// The trim log file name of generation `gen`.
pub(crate) fn trim_log_path(dir: &Path, gen: u64) -> PathBuf {
    dir.join(format!("volume-trims-{gen:016x}.log"))
}

/// The trim logs in `dir`, by generation.
pub(crate) fn list_trim_logs(dir: &Path) -> Result<Vec<(u64, PathBuf)>, VolumeError> {
    let mut logs = Vec::new();
    let rd =
        fs::read_dir(dir).map_err(|e| VolumeError::io(format!("listing {}", dir.display()), e))?;
    for entry in rd {
        let entry = entry.map_err(|e| VolumeError::io(format!("listing {}", dir.display()), e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(hex) = name
            .strip_prefix("volume-trims-")
            .and_then(|n| n.strip_suffix(".log"))
        else {
            continue;
        };
        if let Ok(gen) = u64::from_str_radix(hex, 16) {
            logs.push((gen, entry.path()));
        }
    }
    logs.sort();
    Ok(logs)
}

/// An open trim log: appends are synced before they return.
#[derive(Debug)]
pub(crate) struct TrimLog {
    file: std::sync::Arc<File>,
    path: PathBuf,
    /// Bytes of whole, synced records: where the next append starts.
    len: u64,
    /// Set when a failed append could not be cut off again: the log takes no
    /// more records (they would follow a damaged one) until a checkpoint
    /// starts a new one.
    damaged: Option<String>,
}

impl TrimLog {
    /// Opens (creating) the log of `generation` for appending.
    pub fn open(dir: &Path, generation: u64) -> Result<TrimLog, VolumeError> {
        let path = trim_log_path(dir, generation);
        let io = |what: &str, e| VolumeError::io(format!("{what} {}", path.display()), e);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io("opening", e))?;
        let len = file
            .metadata()
            .map_err(|e| io("reading the size of", e))?
            .len();
        sync_dir(dir);
        Ok(TrimLog {
            file: std::sync::Arc::new(file),
            path,
            len,
            damaged: None,
        })
    }

    /// Appends records and syncs them to stable storage (on a blocking
    /// thread). On failure the log is cut back to its last synced record, so
    /// a later append never follows a partial one (which recovery would take
    /// for corruption). `inject_failure` fails the sync (tests).
    pub async fn append(
        &mut self,
        records: &[TrimRecord],
        inject_failure: bool,
    ) -> Result<(), VolumeError> {
        if let Some(why) = &self.damaged {
            return Err(VolumeError::io(
                format!(
                    "appending to {} (it could not be cut back after a failed append; the next \
                     checkpoint starts a new log)",
                    self.path.display()
                ),
                std::io::Error::other(why.clone()),
            ));
        }
        // The header counts records in 32 bits (112 GiB of records).
        if u32::try_from(records.len()).is_err() {
            return Err(VolumeError::io(
                format!("appending to {}", self.path.display()),
                std::io::Error::other(format!(
                    "{} trim records in one append; a header counts at most {}",
                    records.len(),
                    u32::MAX
                )),
            ));
        }
        // Header first, then the records it counts and checks: a torn
        // append is then told from a damaged log (`decode_trim_log`).
        let mut buf = vec![0u8; TRIM_RECORD_BYTES];
        buf.reserve(records.len() * TRIM_RECORD_BYTES);
        for r in records {
            buf.extend_from_slice(&encode_trim(r));
        }
        let header = encode_trim_append_header(&buf[TRIM_RECORD_BYTES..]);
        buf[..TRIM_RECORD_BYTES].copy_from_slice(&header);
        let added = buf.len() as u64;
        let file = std::sync::Arc::clone(&self.file);
        let path = self.path.clone();
        let len = self.len;
        let (result, damaged) = tokio::task::spawn_blocking(move || {
            let io = |what: &str, e| VolumeError::io(format!("{what} {}", path.display()), e);
            let result = (&*file)
                .write_all(&buf)
                .map_err(|e| io("appending to", e))
                .and_then(|()| {
                    if inject_failure {
                        Err(io("syncing", std::io::Error::other("injected failure")))
                    } else {
                        file.sync_data().map_err(|e| io("syncing", e))
                    }
                });
            let damaged = match &result {
                Ok(()) => None,
                Err(_) => file.set_len(len).err().map(|e| e.to_string()),
            };
            (result, damaged)
        })
        .await
        .map_err(|e| VolumeError::io("appending trims", std::io::Error::other(e)))?;
        match result {
            Ok(()) => self.len += added,
            Err(_) => self.damaged = damaged,
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn geo() -> Geometry {
        Geometry {
            buses: 1,
            chips_per_bus: 2,
            blocks_per_chip: 3,
            pages_per_block: 4,
            page_size_bytes: 512,
            oob_size_bytes: 32,
        }
    }

    fn sample() -> Checkpoint {
        Checkpoint {
            geometry: geo(),
            generation: 3,
            next_seq: 100,
            floor: 90,
            blocks: (0..6)
                .map(|i| CkptBlock {
                    erase_count: i,
                    scan_from: i % 5,
                    last_write: u64::from(i) * 7,
                })
                .collect(),
            entries: vec![
                CkptEntry {
                    page: LogicalPage::new(1, 2),
                    seq: 50,
                    phys: Some(17),
                },
                CkptEntry {
                    page: LogicalPage::new(9, u64::MAX),
                    seq: 95,
                    phys: None,
                },
            ],
        }
    }

    #[test]
    fn checkpoint_round_trips_and_rejects_damage() {
        let p = Path::new("volume.ckpt");
        let c = sample();
        let bytes = encode_checkpoint(&c);
        assert_eq!(decode_checkpoint(p, &bytes, &geo()).unwrap(), c);
        let mut flipped = bytes.clone();
        flipped[50] ^= 1;
        assert!(decode_checkpoint(p, &flipped, &geo())
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        let other = Geometry {
            pages_per_block: 8,
            ..geo()
        };
        assert!(decode_checkpoint(p, &bytes, &other)
            .unwrap_err()
            .to_string()
            .contains("geometry mismatch"));
        assert!(decode_checkpoint(p, &bytes[..10], &geo()).is_err());
        // Another version with a valid checksum: refused by version.
        let mut v2 = bytes[..bytes.len() - 4].to_vec();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&v2);
        v2.extend_from_slice(&crc.to_le_bytes());
        let err = decode_checkpoint(p, &v2, &geo()).unwrap_err().to_string();
        assert!(
            err.contains("version 2") && err.contains("volume.ckpt"),
            "{err}"
        );
    }

    /// Logs written before appends had headers: records alone.
    #[test]
    fn trim_log_drops_a_torn_tail_and_refuses_holes() {
        let p = Path::new("t.log");
        let recs: Vec<TrimRecord> = (0..3)
            .map(|i| TrimRecord {
                page: LogicalPage::new(i, u64::from(i) * 3),
                seq: u64::from(i) + 10,
            })
            .collect();
        let mut bytes: Vec<u8> = recs.iter().flat_map(encode_trim).collect();
        assert_eq!(decode_trim_log(p, &bytes).unwrap(), recs);
        // Torn tail: half a record.
        let mut torn = bytes.clone();
        torn.extend_from_slice(&encode_trim(&recs[0])[..13]);
        assert_eq!(decode_trim_log(p, &torn).unwrap(), recs);
        // A damaged last record is dropped.
        let n = bytes.len();
        bytes[n - 3] ^= 0xFF;
        assert_eq!(decode_trim_log(p, &bytes).unwrap(), recs[..2].to_vec());
        // A damaged middle record is corruption.
        let mut hole: Vec<u8> = recs.iter().flat_map(encode_trim).collect();
        hole[30] ^= 0xFF;
        assert!(decode_trim_log(p, &hole).is_err());
    }

    /// An append as `TrimLog::append` writes it: header, then records.
    fn framed(recs: &[TrimRecord]) -> Vec<u8> {
        let records: Vec<u8> = recs.iter().flat_map(encode_trim).collect();
        let mut out = encode_trim_append_header(&records).to_vec();
        out.extend(records);
        out
    }

    #[test]
    fn a_torn_last_append_is_dropped_whole_and_damage_before_a_whole_one_is_not() {
        let p = Path::new("t.log");
        let rec = |i: u64| TrimRecord {
            page: LogicalPage::new(1, i),
            seq: i + 100,
        };
        let appends = [
            vec![rec(1), rec(2)],
            vec![rec(3), rec(4), rec(5)],
            vec![rec(6), rec(7)],
        ];
        let log: Vec<u8> = appends.iter().flat_map(|a| framed(a)).collect();
        let all: Vec<TrimRecord> = appends.concat();
        assert_eq!(decode_trim_log(p, &log).unwrap(), all);
        let first_two: Vec<TrimRecord> = appends[..2].concat();
        let last = (2 + 1 + 3 + 1) * TRIM_RECORD_BYTES;
        // A power loss kept the last append's records but not its header
        // (another page), or its header and its second record but not its
        // first, or a piece of it only: the append is dropped.
        for (from, to) in [
            (last, last + 28),
            (last + 28, last + 56),
            (last + 60, last + 84),
        ] {
            let mut torn = log.clone();
            torn[from..to].fill(0);
            assert_eq!(
                decode_trim_log(p, &torn).unwrap(),
                first_two,
                "zeroed {from}..{to}"
            );
        }
        let mut cut = log.clone();
        cut.truncate(last + 40);
        assert_eq!(decode_trim_log(p, &cut).unwrap(), first_two);
        // Damage in an append with a whole one after it is corruption.
        for at in [2 * 28 + 5, 3 * 28 + 5, 5 * 28 + 1] {
            let mut hole = log.clone();
            hole[at] ^= 0xFF;
            let e = decode_trim_log(p, &hole).unwrap_err().to_string();
            assert!(e.contains("damaged and later appends are not"), "{e}");
        }
        // A log written before headers, then appended to with them, reads.
        let mut mixed: Vec<u8> = [rec(8), rec(9)].iter().flat_map(encode_trim).collect();
        mixed.extend(framed(&appends[0]));
        let mut want = vec![rec(8), rec(9)];
        want.extend(appends[0].clone());
        assert_eq!(decode_trim_log(p, &mixed).unwrap(), want);
    }

    #[tokio::test]
    async fn a_torn_append_cut_off_at_open_is_not_followed_by_later_ones() {
        let dir = tempfile::tempdir().unwrap();
        let rec = |i: u64| TrimRecord {
            page: LogicalPage::new(2, i),
            seq: i,
        };
        let path = trim_log_path(dir.path(), 7);
        let whole = framed(&[rec(1), rec(2)]);
        let mut torn = framed(&[rec(3), rec(4)]);
        torn[..TRIM_RECORD_BYTES].fill(0);
        fs::write(&path, [whole.clone(), torn].concat()).unwrap();
        let bytes = fs::read(&path).unwrap();
        let (records, whole_bytes) = decode_trim_log_whole(&path, &bytes).unwrap();
        assert_eq!((records, whole_bytes), (vec![rec(1), rec(2)], whole.len()));
        cut_torn_trim_append(&path, whole_bytes as u64).unwrap();
        let mut log = TrimLog::open(dir.path(), 7).unwrap();
        log.append(&[rec(5)], false).await.unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(
            decode_trim_log(&path, &bytes).unwrap(),
            vec![rec(1), rec(2), rec(5)]
        );
    }

    #[tokio::test]
    async fn trim_log_files_append_and_list() {
        let dir = tempfile::tempdir().unwrap();
        let r = TrimRecord {
            page: LogicalPage::new(1, 1),
            seq: 5,
        };
        for gen in [2u64, 10] {
            let mut log = TrimLog::open(dir.path(), gen).unwrap();
            log.append(&[r, r], false).await.unwrap();
        }
        let logs = list_trim_logs(dir.path()).unwrap();
        assert_eq!(logs.iter().map(|l| l.0).collect::<Vec<_>>(), vec![2, 10]);
        let bytes = fs::read(&logs[1].1).unwrap();
        assert_eq!(decode_trim_log(&logs[1].1, &bytes).unwrap(), vec![r, r]);
    }

    #[tokio::test]
    async fn a_failed_append_is_cut_off_so_later_records_follow_whole_ones() {
        let dir = tempfile::tempdir().unwrap();
        let rec = |seq| TrimRecord {
            page: LogicalPage::new(1, seq),
            seq,
        };
        let mut log = TrimLog::open(dir.path(), 1).unwrap();
        log.append(&[rec(1)], false).await.unwrap();
        assert!(log.append(&[rec(2), rec(3)], true).await.is_err());
        log.append(&[rec(4)], false).await.unwrap();
        let path = trim_log_path(dir.path(), 1);
        let bytes = fs::read(&path).unwrap();
        assert_eq!(
            decode_trim_log(&path, &bytes).unwrap(),
            vec![rec(1), rec(4)]
        );
        // Reopened, it appends after what is there.
        let mut log = TrimLog::open(dir.path(), 1).unwrap();
        log.append(&[rec(5)], false).await.unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(decode_trim_log(&path, &bytes).unwrap().len(), 3);
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_checkpoint(Path::new("x"), &bytes, &geo());
            let _ = decode_trim_log(Path::new("x"), &bytes);
        }
    }
}
