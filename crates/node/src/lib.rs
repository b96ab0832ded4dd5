//! The Quarry node daemon as a library (layer 7).
//!
//! This crate owns a node's configuration ([`NodeConfig`], read from TOML),
//! the wiring of the layers below (the device for this node's pages, the
//! fabric's router for every other node's, the protocol's connection serving)
//! and the node's life cycle: [`Node::start`] serves in the background and
//! returns a [`NodeHandle`]; [`run`] serves until SIGTERM/SIGINT and shuts down
//! gracefully. It logs through `tracing` and installs no subscriber: that is
//! the binary's job.
//!
//! ```
//! use quarry_node::{Node, NodeConfig};
//! use quarry_proto::{Request, Response, Session, SessionLimits};
//!
//! let dir = std::env::temp_dir().join(format!("quarry-node-doc-{}", std::process::id()));
//! let config = NodeConfig::from_toml(
//!     r#"
//!         id = 0
//!         listen = "127.0.0.1:0"
//!         data_dir = "node0"
//!         [device]
//!         backend = "mem"
//!     "#,
//!     &dir,
//! )
//! .unwrap();
//! let runtime = tokio::runtime::Runtime::new().unwrap();
//! runtime.block_on(async {
//!     let node = Node::start(config).await.unwrap();
//!     let session = Session::connect(&node.local_addr().to_string(), SessionLimits::default())
//!         .await
//!         .unwrap();
//!     assert_eq!(session.call(Request::Ping).await.unwrap(), Response::Pong);
//!     node.shutdown().await.unwrap();
//! });
//! let _ = std::fs::remove_dir_all(dir);
//! ```
#![deny(missing_docs)]

mod config;
mod listener;
mod memcached;
mod node;

pub use config::{NodeConfig, NodeLimits, PeerConfig, StorageConfig, StorageMode};
pub use listener::{
    inherited_listener, inherited_memcached_listener, LISTEN_FD_ENV, MEMCACHED_FD_ENV,
};
pub use node::{run, run_blocking, Node, NodeHandle};
pub use quarry_kv::{KvConfig, KvMode, TenantConfig};

use std::path::PathBuf;

/// Why a node could not start or stop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The configuration is unusable.
    #[error("config {path}: {reason}")]
    Config {
        /// The configuration file.
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// The listening socket handed over in `QUARRY_LISTEN_FD` is unusable.
    #[error("cannot use the listening socket inherited in QUARRY_LISTEN_FD={fd}: {reason}")]
    InheritedListener {
        /// The variable's value.
        fd: String,
        /// What was wrong.
        reason: String,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The data folder could not be created.
    #[error("cannot create data folder {}: {source}", path.display())]
    DataDir {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The device failed to open or close.
    #[error("device: {0}")]
    Device(quarry_device::DeviceError),
    /// The fabric could not be set up.
    #[error("fabric: {0}")]
    Fabric(quarry_fabric::FabricError),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signal(std::io::Error),
    /// The runtime could not be built.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The space manager (managed storage) failed to open or close.
    #[error("space manager: {0}")]
    Volume(quarry_volume::VolumeError),
    /// The object store failed to open.
    #[error("object store: {0}")]
    Store(quarry_store::StoreError),
    /// The block volume registry could not be opened.
    #[error("block volumes: {0}")]
    Volumes(quarry_volume::BlockVolumeError),
}
