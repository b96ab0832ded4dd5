//! `quarry-kv-api` — key-value tables as a client sees them.
//!
//! Every tenant has its own key space. A key lives on the node its point
//! names ([`key_point`]: SHA-256 of the tenant and the key, ranked over the
//! members by the object store's rendezvous [`Placement`](quarry_store_api::Placement)).
//! This crate owns what a client shares with the nodes: tenant names and
//! key rules, the operations with memcached's semantics ([`KvOp`],
//! [`KvAnswer`]), the call encoding that carries a batch of them to one
//! node ([`KvCall`], [`KvReply`]), and the operations over a cluster
//! ([`KvCluster`] over any [`KvTransport`]): batches split per node and run
//! at once (Minerva's batched gets and sets), values beyond an item's size
//! stored as slices behind a head, and arrays behind a directory value
//! (Multes++). A node's side — the tables, dedup, modes, tenants — is
//! `quarry-kv`'s; the memcached text protocol is `quarry-memcache`'s.
//!
//! ```
//! use bytes::Bytes;
//! use quarry_kv_api::{Expiry, KvCall, KvOp, KvRequest, StoreMode, ItemKind, TenantName};
//!
//! let call = KvCall {
//!     tenant: TenantName::new("default")?,
//!     secret: Bytes::new(),
//!     request: KvRequest::Ops(vec![
//!         KvOp::Store {
//!             key: Bytes::from_static(b"user:1"),
//!             mode: StoreMode::Set,
//!             flags: 0,
//!             expiry: Expiry::Never,
//!             kind: ItemKind::Plain,
//!             value: Bytes::from_static(b"ada"),
//!         },
//!         KvOp::Get { key: Bytes::from_static(b"user:1"), touch: None },
//!     ]),
//! };
//! let body = call.encode();
//! assert_eq!(KvCall::decode(&body)?, call);
//! # Ok::<(), quarry_kv_api::KvError>(())
//! ```
#![deny(missing_docs)]

mod call;
mod cluster;
mod error;
mod name;
mod op;
mod sliced;

pub use call::{
    ClusterFigures, KvCall, KvReply, KvRequest, MAX_ANSWER_BYTES, MAX_CALL_BYTES, MAX_OPS_PER_CALL,
    MAX_VALUE_BYTES,
};
pub use cluster::{KvCluster, KvTransport, MAX_ARRAY_ELEMENTS, MAX_PARENT_KEY_BYTES, MAX_SLICES};
pub use error::{KvError, Result};
pub use name::{
    check_key, key_point, Key, TenantName, DEFAULT_TENANT, MAX_KEY_BYTES, MAX_SECRET_BYTES,
    MAX_TENANT_BYTES,
};
pub use op::{now_unix_secs, Expiry, FailKind, Item, ItemKind, KvAnswer, KvOp, StoreMode};
