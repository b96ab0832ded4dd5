//! `quarry-volume` — layer 4 of Quarry: one node's log-structured space
//! manager over raw flash pages (the FTL that RFSA moves out of the device).
//!
//! A [`SpaceManager`] owns a node's [`Device`](quarry_device::Device) and
//! gives the layers above a *logical* page space: pages named by
//! [`LogicalPage`] (`space`, `index`), written whole, read back, and
//! *trimmed* when their owner knows they are dead — the store that knows what
//! is dead drives garbage collection (RFSA §I, §VI.D). Underneath:
//!
//! - **Log-structured writes**: every write goes to the next page of an open
//!   block, one open block per chip taken round robin, so writes to different
//!   chips and buses run in parallel. Each programmed page carries a 28-byte
//!   OOB record (owner space, logical index, sequence number, CRC-32C over
//!   data and record) from which every index is rebuilt after a crash.
//! - **Garbage collection** picks victims by cost-benefit (`(1-u)·age/(1+u)`)
//!   or greedily, moves their live pages to a separate open block (cold data
//!   apart from hot), and erases them; it runs in the background under a
//!   free-block watermark and inline, a bounded number of blocks, when a
//!   write finds only the reserve left.
//! - **Wear leveling**: new data goes to the least-worn free block, moved data
//!   to the most-worn; when erase counts spread past a limit, the data of the
//!   least-worn sealed block is moved so the block rejoins the pool.
//! - **Bad blocks**: a block whose program or erase fails is retired (marked
//!   bad on the device), its live pages moved out, and the write that failed
//!   goes to another block — nothing acknowledged is lost.
//! - **Crash recovery** from a checkpoint (mapping and block table, written
//!   atomically to the data directory), an fsynced trim log, and the OOB
//!   records of pages programmed since the checkpoint; the highest sequence
//!   number wins.
//! - **Full device**: a write of a new page beyond the capacity fails with
//!   [`VolumeError::NoSpace`] (naming what is live and what the device holds);
//!   blocks are reserved so garbage collection can always make progress.
//!
//! - **Block volumes** (`block`): named logical page spaces striped over
//!   nodes — a per-node [`VolumeRegistry`] of definitions, the volume call
//!   encoding served by [`serve_volume_call`], and the caller's
//!   [`BlockVolumes`] / [`BlockVolume`] over a [`VolumeTransport`].
//!
//! The on-flash format, policies and limits are in `docs/volume.md`.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use quarry_device::{BackendKind, Device, DeviceConfig, Geometry};
//! use quarry_volume::{LogicalPage, SpaceManager, VolumeConfig};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let geometry = Geometry {
//!     buses: 2, chips_per_bus: 2, blocks_per_chip: 16, pages_per_block: 16,
//!     page_size_bytes: 512, oob_size_bytes: 64,
//! };
//! let config = DeviceConfig {
//!     backend: BackendKind::Mem, geometry: Some(geometry), ..DeviceConfig::default()
//! };
//! let device = Arc::new(Device::open(&config, dir.path()).unwrap());
//! let volume = SpaceManager::open(device, VolumeConfig::default(), dir.path()).await?;
//!
//! let page = LogicalPage::new(1, 42);
//! volume.write(page, Bytes::from(vec![7u8; volume.page_size()])).await?;
//! assert_eq!(volume.read(page).await?.unwrap()[0], 7);
//! volume.trim(page).await?;
//! assert_eq!(volume.read(page).await?, None);
//! println!("{:?}", volume.stats());
//! volume.close().await?;
//! # Ok::<(), quarry_volume::VolumeError>(())
//! # }).unwrap();
//! ```
#![deny(missing_docs)]

mod bench;
mod block;
mod blocks;
mod config;
mod error;
mod faults;
mod manager;
mod meta;
mod oob;
mod recovery;

pub use bench::{
    fifo_write_amplification, greedy_write_amplification, simulate_greedy, write_amplification,
    WaBenchOptions, WaPoint,
};
pub use block::{
    answer_error, max_pages_per_call, member_pages, runs, serve_volume_call, stripe,
    validate_members, validate_name, BlockVolume, BlockVolumeError, BlockVolumes, MemberStatus,
    NodeSpace, Run, VolumeDef, VolumeListing, VolumeRegistry, VolumeStatus, VolumeSummary,
    VolumeTransport, ADD_CALL_MAX_BYTES, DEFAULT_MAX_IN_FLIGHT_CALLS, MAX_ADDS_PER_CALL,
    MAX_CALL_DATA_BYTES, MAX_IN_FLIGHT_CALLS, MAX_PAGES_PER_CALL, MAX_RANGE_BYTES,
    MAX_VOLUMES_PER_NODE, MAX_VOLUME_ID, MAX_VOLUME_MEMBERS, MAX_VOLUME_NAME_BYTES,
    MAX_VOLUME_PAGES, MAX_VOLUME_PAGE_SIZE_BYTES, REGISTRY_FILE, VOLUME_SPACE_BASE,
};
pub use config::{VictimPolicy, VolumeConfig};
pub use error::VolumeError;
pub use faults::FaultPlan;
pub use manager::{
    FetchedRun, LocatedRun, SectorsWritten, SpaceManager, TaggedPage, VolumeStats, MAX_RUN_PAGES,
};
pub use oob::{LogicalPage, OOB_RECORD_BYTES};
