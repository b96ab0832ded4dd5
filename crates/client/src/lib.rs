//! The Rust client of Quarry: connect to any node of a cluster and address any
//! page of any node as `node:bus:chip:block:page`.
//!
//! [`Client`] is async and tagged: [`Client::submit`] sends a request under a
//! free tag at once and hands back its completion, so one connection keeps
//! hundreds of requests in flight, answered out of order (RFSA's driver API).
//! [`BlockingClient`] wraps it for scripts. [`ClusterFile`] is how a client
//! finds a cluster (`--cluster FILE`, `$QUARRY_CLUSTER`, `./.quarry/cluster.toml`).
//!
//! Named block volumes ([`Client::volumes`]) stripe a logical page space
//! over nodes; an open [`Volume`] reads and writes pages and byte ranges.
//!
//! Besides global addresses, the cluster's pages have linear numbers
//! ([`LinearSpace`], from [`Client::linear_space`]): consecutive linear pages
//! go to different nodes, then buses, then chips, so [`Client::read_linear`]
//! and [`Client::write_linear`] stream over every node and bus at once.
//!
//! The client links the wire formats only (`quarry-proto` and the
//! `quarry-*-api` crates of each service), never a node's internals: a
//! program that talks to a cluster compiles none of the device, the space
//! manager, a node's store or the kernels (`tests/dependencies.rs`).
//!
//! ```no_run
//! use quarry_client::{BlockingClient, ClusterFile};
//! use quarry_proto::GlobalPageAddr;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = ClusterFile::load(&ClusterFile::locate(None))?;
//! let client = BlockingClient::connect_cluster(&cluster)?;
//! let addr: GlobalPageAddr = "2:0:1:5:0".parse()?;
//! let page = client.read_page(addr)?;
//! println!("{} bytes, erased: {}", page.data.len(), page.erased);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod blocking;
mod client;
mod cluster_file;
mod compute;
mod error;
mod file_source;
mod linear;
mod objects;
mod volumes;

pub use blocking::BlockingClient;
pub use client::{into_result, page_of, Client, Completion};
pub use cluster_file::{
    ClusterFile, ClusterNode, CLUSTER_ENV, DEFAULT_CLUSTER_PATH, MAX_CLUSTER_NODES,
};
pub use compute::Compute;
pub use error::ClientError;
pub use file_source::file_source;
pub use linear::{MAX_LINEAR_PAGES, MAX_LINEAR_QUEUE_DEPTH};
pub use objects::{KvTables, Objects, StoreCalls};
pub use quarry_kernels_api::{
    Assembler, CommandId, CommandResult, CommandState, CommandStatus, GrepOutput, GrepSpec,
    GrepSyntax, Job, KernelSpec, Limits, LineBlock, LineRun, MatchLine, Outcome, Output,
    OutputPiece, QueryOutcome, QuerySpec, RmwBatch, RmwOp, Target, TargetOutput, WcLocale,
    WcOutput, WcSpec,
};
pub use quarry_kv_api::{
    check_key, Expiry, FailKind, Item, ItemKind, KvAnswer, KvError, KvOp, StoreMode, TenantName,
    MAX_KEY_BYTES, MAX_SECRET_BYTES, MAX_VALUE_BYTES,
};
pub use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, NodeId, Request, Response, Status};
pub use quarry_proto::{LinearSpace, LinearSpaceError};
pub use quarry_store_api::{
    BucketConfig, BucketName, BucketUsage, ChunkRole, Chunking, ColumnFilter, ColumnRead,
    CompareOp, Condition, FilterValue, Manifest, ObjectKey, ParquetLayout, StoreError, Usage,
};
pub use quarry_volume_api::{
    BlockVolumeError, MemberStatus, NodeSpace, VolumeDef, VolumeListing, VolumeStatus,
    VolumeSummary, MAX_RANGE_BYTES,
};
pub use volumes::{Volume, VolumeCalls, Volumes};
