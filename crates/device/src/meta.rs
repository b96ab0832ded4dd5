//! Persistent device metadata: erase counts, write pointers and the bad-block
//! table.
//!
//! Format: a snapshot file `device.meta` replaced atomically (write
//! `device.meta.tmp`, fsync, rename over, fsync the directory). A snapshot was
//! chosen over an append journal because the table is small (9 bytes per
//! block: 9 KiB for the 1024-block default) and changes only on erases and
//! bad-block marks, which cost milliseconds on flash anyway; a snapshot needs
//! no compaction and is all-or-nothing by construction. Write pointers in it
//! are lower bounds: programs do not save it, and after an unclean stop the
//! device probes forward (see `device.rs`). The `clean` flag says whether the
//! pointers are exact (saved by `close`).
//!
//! Layout (little endian): magic `QDEVMETA`, version u32, the six geometry
//! fields u32, slot size u32, clean u8, then per block erase count u32, write
//! pointer u32, flags u8 (1 = bad, 2 = factory bad), then CRC-32C of all the
//! preceding bytes.

use std::fs;
use std::path::Path;

use crate::{DeviceError, Geometry};

const MAGIC: &[u8; 8] = b"QDEVMETA";
const VERSION: u32 = 1;
const PER_BLOCK: usize = 9;
const HEADER: usize = 8 + 4 + 6 * 4 + 4 + 1;

/// Flag bits of a block entry.
pub(crate) const FLAG_BAD: u8 = 1;
pub(crate) const FLAG_FACTORY_BAD: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockMeta {
    pub erase_count: u32,
    pub write_pointer: u32,
    pub flags: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub geometry: Geometry,
    pub slot_size: u32,
    pub clean: bool,
    pub blocks: Vec<BlockMeta>,
}

fn fields(g: &Geometry) -> [u32; 6] {
    [
        g.buses,
        g.chips_per_bus,
        g.blocks_per_chip,
        g.pages_per_block,
        g.page_size_bytes,
        g.oob_size_bytes,
    ]
}

fn describe(g: &Geometry) -> String {
    format!(
        "{} buses x {} chips x {} blocks x {} pages, {} B pages + {} B OOB",
        g.buses,
        g.chips_per_bus,
        g.blocks_per_chip,
        g.pages_per_block,
        g.page_size_bytes,
        g.oob_size_bytes
    )
}

pub(crate) fn encode(s: &Snapshot) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + s.blocks.len() * PER_BLOCK + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    for f in fields(&s.geometry) {
        out.extend_from_slice(&f.to_le_bytes());
    }
    out.extend_from_slice(&s.slot_size.to_le_bytes());
    out.push(u8::from(s.clean));
    for b in &s.blocks {
        out.extend_from_slice(&b.erase_count.to_le_bytes());
        out.extend_from_slice(&b.write_pointer.to_le_bytes());
        out.push(b.flags);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

/// Decodes a snapshot and checks it against the configured geometry.
pub(crate) fn decode(
    path: &Path,
    bytes: &[u8],
    expect: &Geometry,
    slot_size: u32,
) -> Result<Snapshot, DeviceError> {
    let bad = |reason: String| DeviceError::Metadata {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.len() < HEADER + 4 || &bytes[..8] != MAGIC {
        return Err(bad(format!(
            "not a quarry device metadata file ({} bytes, bad magic or too short)",
            bytes.len()
        )));
    }
    let body = &bytes[..bytes.len() - 4];
    if crc32c::crc32c(body) != u32_at(bytes, bytes.len() - 4) {
        return Err(bad("checksum mismatch: the file is corrupt (restore it or remove the device's data directory)".into()));
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(bad(format!(
            "version {version}, this build reads version {VERSION}"
        )));
    }
    let f: Vec<u32> = (0..6).map(|i| u32_at(bytes, 12 + 4 * i)).collect();
    let geometry = Geometry {
        buses: f[0],
        chips_per_bus: f[1],
        blocks_per_chip: f[2],
        pages_per_block: f[3],
        page_size_bytes: f[4],
        oob_size_bytes: f[5],
    };
    if geometry != *expect {
        return Err(bad(format!(
            "geometry mismatch: the device was created with {}, the configuration says {}; \
             refusing to reformat (use the original geometry or a fresh data directory)",
            describe(&geometry),
            describe(expect)
        )));
    }
    let stored_slot = u32_at(bytes, 36);
    if stored_slot != slot_size {
        return Err(bad(format!(
            "slot size {stored_slot} on disk, this build uses {slot_size} (was the device \
             made with another ecc mode? a device made with ecc = \"crc\" opens only as crc)"
        )));
    }
    let clean = bytes[40] != 0;
    let nblocks = expect.blocks() as usize;
    if body.len() != HEADER + nblocks * PER_BLOCK {
        return Err(bad(format!(
            "{} bytes of block table, expected {}",
            body.len() - HEADER,
            nblocks * PER_BLOCK
        )));
    }
    let mut blocks = Vec::with_capacity(nblocks);
    for i in 0..nblocks {
        let at = HEADER + i * PER_BLOCK;
        let b = BlockMeta {
            erase_count: u32_at(bytes, at),
            write_pointer: u32_at(bytes, at + 4),
            flags: bytes[at + 8],
        };
        if b.write_pointer > expect.pages_per_block {
            return Err(bad(format!(
                "block #{i}: write pointer {} beyond {} pages",
                b.write_pointer, expect.pages_per_block
            )));
        }
        blocks.push(b);
    }
    Ok(Snapshot {
        geometry,
        slot_size,
        clean,
        blocks,
    })
}

/// The slot size a metadata file at `path` records, if there is a readable
/// one (checked in full later, by [`load`]).
pub(crate) fn stored_slot_size(path: &Path) -> Option<u32> {
    let bytes = fs::read(path).ok()?;
    (bytes.len() >= HEADER + 4 && &bytes[..8] == MAGIC).then(|| u32_at(&bytes, 36))
}

/// Reads the snapshot at `path`; `Ok(None)` when there is none.
pub(crate) fn load(
    path: &Path,
    expect: &Geometry,
    slot_size: u32,
) -> Result<Option<Snapshot>, DeviceError> {
    match fs::read(path) {
        Ok(bytes) => decode(path, &bytes, expect, slot_size).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(DeviceError::Io {
            context: format!("reading {}", path.display()),
            source: e,
        }),
    }
}

/// Writes the snapshot atomically (temp file, fsync, rename, fsync dir).
pub(crate) fn save(path: &Path, s: &Snapshot) -> Result<(), DeviceError> {
    quarry_geometry::write_file_durably(path, &encode(s)).map_err(|e| {
        if e.source.raw_os_error() == Some(libc::ENOSPC) {
            DeviceError::NoSpace {
                path: path.to_path_buf(),
                source: e.source,
            }
        } else {
            DeviceError::Io {
                context: format!("{} {}", e.step, e.path.display()),
                source: e.source,
            }
        }
    })
}
