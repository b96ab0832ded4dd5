//! Local clusters on loopback: the runner behind `quarry up` / `quarry down`,
//! which the demo, the benchmarks and the integration tests use too (and the
//! Python package will). Each node is a real `quarry node` process with its
//! own port and folder, so a local cluster behaves like a deployed one.
//!
//! It owns what it takes to start one: the spec ([`LocalClusterSpec`]), the
//! links between the nodes ([`Topology`]), the running cluster
//! ([`LocalCluster`]: start, stop, kill or restart a node, detach), stopping a
//! detached one ([`down`]), and the command-line names of a node's device
//! ([`DeviceArg`], [`PresetArg`]) that `quarry up` and `quarry bench` share.
//!
//! ```
//! use quarry_local::Topology;
//!
//! let line = Topology::parse_links("0-1, 1-2")?;
//! assert_eq!(line.links(3)?.len(), 2);
//! assert_eq!(line.describe(), "0-1,1-2");
//! // Node 2 would have no path to node 0.
//! assert!(Topology::parse_links("0-1")?.links(3).is_err());
//! # Ok::<(), anyhow::Error>(())
//! ```
#![deny(missing_docs)]

mod cluster;
mod device_arg;

pub use cluster::{
    cluster_file_path, down, log_tail, process_alive, LocalCluster, LocalClusterSpec, Topology,
    MAX_LOCAL_NODES,
};
pub use device_arg::{backend_of, preset_of, quarry_exe, DeviceArg, PresetArg};
