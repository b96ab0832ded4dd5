//! `quarry-kv` — layer 5: one node's key-value tables.
//!
//! Each tenant has its own items on each node: an index in memory (a hash
//! table kept in use order, evicting by CLOCK as memcached approximates
//! LRU) over values that are
//! deduplicated inline (Multes++ Algorithm 1: a value of at least
//! [`KvConfig::dedup_min_bytes`] is fingerprinted with SHA-256 and stored
//! once, with an exact count of the items that hold it, kept through set,
//! overwrite, append, delete, expiry, flush and eviction). Every operation
//! has memcached's semantics. A tenant is `cache` (bounded memory, least
//! recently used items evicted) or `durable` (every acknowledged change is
//! in the node's log first: the store's tables on the space manager, many
//! calls to one log record, loaded back at open). A call carries a batch of
//! operations for this node and runs as one operation (Minerva), after the
//! tenant's credentials and rate limits are checked. The call encoding and
//! the operations over a cluster are `quarry-kv-api`'s.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use quarry_kv::{KvConfig, KvNode};
//! use quarry_kv_api::{Expiry, ItemKind, KvAnswer, KvCall, KvOp, KvReply, KvRequest, StoreMode, TenantName};
//! use quarry_store::MemTableStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let node = KvNode::<MemTableStore>::open(&KvConfig::default(), None).await?;
//! let value = Bytes::from(vec![7u8; 1000]);
//! let set = |key: &'static [u8]| KvOp::Store {
//!     key: Bytes::from_static(key),
//!     mode: StoreMode::Set,
//!     flags: 0,
//!     expiry: Expiry::Never,
//!     kind: ItemKind::Plain,
//!     value: value.clone(),
//! };
//! let call = KvCall {
//!     tenant: TenantName::new("default")?,
//!     secret: Bytes::new(),
//!     request: KvRequest::Ops(vec![set(b"a"), set(b"b")]),
//! };
//! assert!(matches!(node.call(call.clone()).await, KvReply::Answers(a) if a.len() == 2));
//!
//! // Two items of 1000 bytes, one stored copy.
//! let stats = KvCall { request: KvRequest::Stats, ..call };
//! let KvReply::Stats(s) = node.call(stats).await else { panic!() };
//! let get = |name: &str| s.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
//! assert_eq!((get("logical_bytes"), get("stored_bytes")), (Some(2000), Some(1000)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![deny(missing_docs)]

mod config;
mod index;
mod node;
mod records;
mod table;

pub use config::{KvConfig, KvMode, TenantConfig, DEFAULT_BURST_MS, DEFAULT_DEDUP_MIN_BYTES};

/// The volume space of the durable tenants' log (the object store has 1-3,
/// block volumes 1000 and up).
pub const KV_LOG_SPACE: u32 = 4;
/// The volume space of the durable tenants' snapshots.
pub const KV_SNAPSHOT_SPACE: u32 = 5;
pub use node::{KvNode, KvOpenError, Room};
