//! The storage fabric (layer 3): who is in the cluster and how a request for
//! another node's page gets there.
//!
//! This crate owns cluster membership ([`Membership`]), the links between
//! nodes, and forwarding behind the [`Router`] interface. Today's router is
//! [`MeshRouter`]: a full mesh from configuration, one lazily connected
//! [`quarry_proto::Session`] per peer, so every request is one hop. Flooding
//! discovery, routing tables and multi-hop forwarding will be other `Router`
//! implementations; the hop count every request carries already guards them
//! against loops.
//!
//! Failures come back as [`Response::Error`] answers naming the node and the
//! reason (unknown id, unreachable address, timeout, hop limit), ready to be
//! sent to the requester unchanged.
//!
//! ```
//! use quarry_fabric::{FabricConfig, Membership, MeshRouter, Router};
//! use quarry_proto::{NodeEntry, Request, Response, Status};
//!
//! let runtime = tokio::runtime::Runtime::new().unwrap();
//! runtime.block_on(async {
//!     let local = NodeEntry { id: 0, addr: "127.0.0.1:7400".into() };
//!     let peers = vec![NodeEntry { id: 1, addr: "127.0.0.1:7401".into() }];
//!     let router = MeshRouter::new(Membership::new(local, peers).unwrap(), FabricConfig::default());
//!     match router.route(9, Request::Ping, 0).await {
//!         Response::Error { status, message } => {
//!             assert_eq!(status, Status::UnknownNode);
//!             assert_eq!(message, "node 9 is not a member; members are 0,1");
//!         }
//!         other => panic!("{other:?}"),
//!     }
//! });
//! ```
#![deny(missing_docs)]

mod linear;
mod membership;
mod mesh;
mod topology;

pub use linear::{LinearSpace, LinearSpaceError};
pub use membership::{Membership, MAX_MEMBERS};
pub use mesh::{check_hops, FabricConfig, MeshRouter};
pub use topology::{links_of, Link, LinkAdvert, LinkStateDb, Route, RoutingTable, TopologyKind};

use futures::future::BoxFuture;
use quarry_proto::{NodeId, Request, Response};

/// Forwards requests to other nodes. Implementations own their links and
/// their tags: they send under tags of their own sessions and hand back the
/// answer, which the caller returns under the requester's tag.
pub trait Router: Send + Sync + 'static {
    /// Delivers `request` (which has crossed `hops` links so far) to node
    /// `dest` and returns its answer, or an error answer naming why it could
    /// not be delivered. Never panics, and completes within the configured
    /// connect plus request timeouts.
    fn route(&self, dest: NodeId, request: Request, hops: u8) -> BoxFuture<'static, Response>;

    /// The members this router knows.
    fn membership(&self) -> &Membership;
}

/// Why a fabric could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// Two peers share an id.
    #[error("duplicate peer id {id}: both {first} and {second}")]
    DuplicatePeer {
        /// The id.
        id: NodeId,
        /// The first address listed for it.
        first: String,
        /// The second.
        second: String,
    },
    /// This node's own id is listed among its peers.
    #[error("peer {id} at {addr} has this node's own id")]
    SelfAmongPeers {
        /// The id.
        id: NodeId,
        /// The peer's address.
        addr: String,
    },
    /// Too many members.
    #[error("more than {limit} cluster members")]
    TooManyMembers {
        /// The limit.
        limit: usize,
    },
}
