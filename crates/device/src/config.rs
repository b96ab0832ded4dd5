use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{BackendKind, Geometry, Preset};

/// How to build a node's device. Deserialized from the `[device]` table of a
/// node's TOML configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// The medium.
    #[serde(default)]
    pub backend: BackendKind,
    /// Chip preset: sets the geometry (unless `geometry` is given) and, for the
    /// `nand` backend, the timing model.
    #[serde(default)]
    pub preset: Option<Preset>,
    /// Geometry; overrides the preset's.
    #[serde(default)]
    pub geometry: Option<Geometry>,
    /// Data bytes the device holds: the preset's (or the default) geometry
    /// with as many blocks per chip as this needs, rounded down to whole
    /// blocks ([`Geometry::with_capacity`]). Not with `geometry`.
    #[serde(default)]
    pub capacity_bytes: Option<u64>,
    /// Backing file or block device for `file` (and `nand`); defaults to
    /// `DATA_DIR/pages.bin`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Use O_DIRECT for the `file` backend when the filesystem allows it
    /// (default true).
    #[serde(default)]
    pub direct_io: Option<bool>,
    /// Allocate the whole backing file of `file` (and `nand`) when the
    /// device opens, rather than leaving it sparse (default false: the file
    /// takes disk space as pages are written, and an erase gives it back).
    /// Allocated, the filesystem lays the device's address space out in
    /// long runs (a sparse file filled by sixteen chips at once got 8 MiB
    /// extents interleaved on the disk, though scans ran no faster for the
    /// longer runs: docs/benchmarks.md), and a full filesystem is an error
    /// at open naming the file, not a failed write later; erases then keep
    /// the space (`FALLOC_FL_ZERO_RANGE`). Sparse is the default because a
    /// cluster made with room to grow must not take that room up front.
    #[serde(default)]
    pub preallocate: Option<bool>,
    /// Acknowledge a program only once it is on the medium: an
    /// `fdatasync` of the backing file, shared by the programs that
    /// completed before it started (group commit), so that an acknowledged
    /// page survives a power loss. Default true for `file`; false for
    /// `nand`, whose backing file only holds the emulated chip's contents
    /// and whose timing model would otherwise carry the host disk's flush
    /// latency. Off, a power loss may lose acknowledged pages (a process
    /// crash still loses none: they are in the host's page cache).
    #[serde(default)]
    pub sync_writes: Option<bool>,
    /// With `sync_writes` off, `fdatasync` the backing file this often in
    /// the background, so a power loss loses at most about this much of
    /// what was acknowledged (Redis's `appendfsync everysec` contract, at
    /// 1000). None: only the kernel's own write-back.
    #[serde(default)]
    pub flush_interval_ms: Option<u64>,
    /// Seed for the `nand` backend's bit-error and bad-block model.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The per-page code (default `rs`).
    #[serde(default)]
    pub ecc: EccMode,
}

/// What protects each page's bytes on the medium.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EccMode {
    /// CRC-32C per sector and RS(255,243) parity that corrects up to 6 bad
    /// bytes per codeword (RFSA's flash ECC). What raw flash needs.
    #[default]
    Rs,
    /// CRC-32C per sector only: damage is detected and reported as
    /// uncorrectable, never returned as data, but not repaired. For a
    /// `file` backend on a disk that does its own ECC (every SSD and HDD),
    /// where RS parity would only spend CPU (about 28 us per 8 KiB page).
    Crc,
}
