//! Block volumes: named logical page spaces striped over nodes.
//!
//! A volume of `size_pages` pages over the member nodes `members` keeps
//! logical page `L` on node `members[L % n]`, at index `L / n` of space
//! [`VOLUME_SPACE_BASE`]` + id` of that node's [`SpaceManager`](crate::SpaceManager), whose
//! writes go round its chips and buses: consecutive pages spread over
//! nodes, then buses, then chips.
//!
//! - [`VolumeRegistry`]: one node's volume definitions, in `volumes.reg`
//!   in its data directory (replaced atomically).
//! - [`serve_volume_call`]: a node runs an encoded call (define, delete,
//!   list, info, read, write, trim, add) against its registry and space
//!   manager.
//! - [`BlockVolumes`] and [`BlockVolume`]: the caller's view over a
//!   [`VolumeTransport`] — create, list, delete by name; read and write
//!   pages and byte ranges with a bounded number of calls in flight, and
//!   add to `u64` counters in place atomically ([`BlockVolume::add_u64s`]).
//!
//! Every member stores the definition; a lookup by name asks every node of
//! the cluster. Pages never written read as zeros. Sizes are
//! thin-provisioned: a write past a member's capacity fails with
//! [`BlockVolumeError::NoSpace`]. The call format and limits are in
//! `docs/volume.md` ("Block volumes").
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use quarry_device::{BackendKind, Device, DeviceConfig, Geometry};
//! use quarry_volume::{
//!     serve_volume_call, BlockVolumeError, BlockVolumes, SpaceManager, VolumeConfig,
//!     VolumeRegistry, VolumeTransport,
//! };
//!
//! /// Two nodes in this process: a call is served directly.
//! struct InProcess(Vec<(VolumeRegistry, SpaceManager)>);
//!
//! impl VolumeTransport for InProcess {
//!     async fn call(&self, node: u16, _: bool, body: Bytes) -> Result<Bytes, BlockVolumeError> {
//!         let (registry, space) = &self.0[usize::from(node)];
//!         Ok(serve_volume_call(registry, space, body).await)
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let geometry = Geometry {
//!     buses: 2, chips_per_bus: 2, blocks_per_chip: 16, pages_per_block: 16,
//!     page_size_bytes: 512, oob_size_bytes: 64,
//! };
//! let mut nodes = Vec::new();
//! for id in 0..2u16 {
//!     let data_dir = dir.path().join(format!("node{id}"));
//!     let config = DeviceConfig {
//!         backend: BackendKind::Mem, geometry: Some(geometry), ..DeviceConfig::default()
//!     };
//!     let device = Arc::new(Device::open(&config, &data_dir).unwrap());
//!     let space = SpaceManager::open(device, VolumeConfig::default(), &data_dir).await.unwrap();
//!     nodes.push((VolumeRegistry::open(id, &data_dir)?, space));
//! }
//! let volumes = BlockVolumes::new(Arc::new(InProcess(nodes)), vec![0, 1]);
//!
//! volumes.create("disk", 64 * 512, None).await?;
//! let disk = volumes.open("disk").await?;
//! disk.write_range(1020, b"hello, volume").await?;
//! assert_eq!(&disk.read_range(1020, 13).await?[..], b"hello, volume");
//! assert_eq!(disk.read_page(9).await?, Bytes::from(vec![0u8; 512]));  // never written
//! assert_eq!(disk.locate(3)?, (1, 1));  // page 3: node 1, its second page
//! assert_eq!(volumes.delete("disk").await?, 2);  // pages 1 and 2 held data
//! # Ok::<(), BlockVolumeError>(())
//! # }).unwrap();
//! ```

mod registry;
mod serve;

use quarry_proto::NodeId;

// The definitions, the call encoding and the caller's view live in
// quarry-volume-api, which a client links without the space manager.
pub use quarry_volume_api::{
    answer_error, max_pages_per_call, member_pages, runs, stripe, validate_members, validate_name,
    BlockVolume, BlockVolumeError, BlockVolumes, MemberStatus, NodeSpace, Run, VolumeDef,
    VolumeListing, VolumeStatus, VolumeSummary, VolumeTransport, ADD_CALL_MAX_BYTES,
    DEFAULT_MAX_IN_FLIGHT_CALLS, MAX_ADDS_PER_CALL, MAX_CALL_DATA_BYTES, MAX_IN_FLIGHT_CALLS,
    MAX_PAGES_PER_CALL, MAX_RANGE_BYTES, MAX_VOLUMES_PER_NODE, MAX_VOLUME_ID, MAX_VOLUME_MEMBERS,
    MAX_VOLUME_NAME_BYTES, MAX_VOLUME_PAGES, MAX_VOLUME_PAGE_SIZE_BYTES, VOLUME_SPACE_BASE,
};
pub use registry::{VolumeRegistry, REGISTRY_FILE};
pub use serve::serve_volume_call;
