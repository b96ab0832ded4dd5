//! How a command line names a local node's device, shared by `quarry up`
//! and the benchmarks that start clusters.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::ValueEnum;
use quarry_device::{BackendKind, Preset};

/// Device backends selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// A file per node (O_DIRECT where possible).
    File,
    /// DRAM; nothing survives a restart.
    Mem,
    /// Emulated NAND flash with a timing model.
    Nand,
}

/// Chip presets selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    /// BlueDBM's SLC boards.
    Bluedbm,
    /// RFSA's MLC boards.
    Rfsa,
}

/// Converts the command line's backend choice.
pub fn backend_of(arg: DeviceArg) -> BackendKind {
    match arg {
        DeviceArg::File => BackendKind::File,
        DeviceArg::Mem => BackendKind::Mem,
        DeviceArg::Nand => BackendKind::Nand,
    }
}

/// Converts the command line's preset choice.
pub fn preset_of(arg: PresetArg) -> Preset {
    match arg {
        PresetArg::Bluedbm => Preset::Bluedbm,
        PresetArg::Rfsa => Preset::Rfsa,
    }
}

/// The running executable, which is the `quarry` binary nodes are started
/// with when this runs inside it.
pub fn quarry_exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find the quarry executable to start nodes with")
}
