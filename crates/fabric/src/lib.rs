//! The storage fabric (layer 3): the links between nodes, how every node
//! learns the network, and how a request for another node's page gets there
//! and back, hop by hop.
//!
//! This crate owns:
//! - the **link protocol** (a connection between neighbours, told apart from
//!   client connections by its magic `QL`): a handshake, link-state adverts,
//!   and requests and answers cut into fragments on two virtual channels,
//!   control and data, each with credit-based flow control and bounded
//!   buffers (RFSA §IV.B);
//! - **discovery and routing**: every change of a link floods an advert of the
//!   node's live links; every node keeps the newest advert of each node in a
//!   [`LinkStateDb`] and computes shortest routes from it ([`RoutingTable`]),
//!   so nodes can be plugged in and links cut while the cluster runs (BlueDBM
//!   §4.1). Topologies for configuration come from [`links_of`];
//! - the **switch** ([`Fabric`]): a request is forwarded under a tag of the
//!   next link and its answer mapped back to the requester's stream (two-layer
//!   tags, BlueDBM §3.3); fragments are passed on as they arrive, so hops
//!   overlap (BlueDBM §7.3); each link sends one fragment per requester flow
//!   in turn (rotating priority, RFSA §IV.A). A request whose requester
//!   stops waiting is withdrawn at every hop, and stops where it runs if it
//!   only reads;
//! - **cluster identity**: a link's handshake names the cluster, and a node
//!   of another cluster is refused even when its id fits.
//!
//! Failures come back as [`quarry_proto::Response::Error`] answers naming the
//! node and the reason (unknown id, no live path, timeout, busy, hop limit),
//! ready to be sent to the requester unchanged.
//!
//! ```
//! use std::sync::Arc;
//! use quarry_fabric::{Fabric, FabricConfig, LocalHandler};
//! use quarry_proto::{NodeEntry, Request, Response, Status};
//!
//! let runtime = tokio::runtime::Runtime::new().unwrap();
//! runtime.block_on(async {
//!     let handler: LocalHandler = Arc::new(|_request| Box::pin(async { Response::Done.into() }));
//!     let local = NodeEntry { id: 0, addr: "127.0.0.1:7400".into() };
//!     let config = FabricConfig { route_wait: std::time::Duration::from_millis(50), ..FabricConfig::default() };
//!     let fabric = Fabric::start(local, Vec::new(), config, handler).unwrap();
//!     match fabric.route(9, Request::NodeInfo(9), 0, 1).await {
//!         Response::Error { status, message } => {
//!             assert_eq!(status, Status::UnknownNode);
//!             assert_eq!(message, "node 9 is not known to node 0; reachable nodes are 0");
//!         }
//!         other => panic!("{other:?}"),
//!     }
//!     fabric.shutdown();
//! });
//! ```
#![deny(missing_docs)]

mod fabric;
mod link;
mod topology;
mod wire;

pub use fabric::{Fabric, LocalHandler};
// The linear space is arithmetic a client shares; it lives with the wire
// format and is named here as it always was.
pub use quarry_proto::{LinearSpace, LinearSpaceError};
pub use topology::{links_of, Link, LinkAdvert, LinkStateDb, Route, RoutingTable, TopologyKind};
pub use wire::{
    decode_json, encode_json, flags as link_flags, Channel, Hello, Kind as LinkKind, LinkCodec,
    LinkFrame, LinkHeader, ReceiveLimits, FRAGMENT_BYTES, LINK_HEADER_BYTES, LINK_MAGIC,
    LINK_VERSION, MAX_DATA_FRAGMENT_BYTES,
};

use std::time::Duration;

use quarry_proto::{NodeId, Response, Status};

/// Most members a cluster may have; matches the Cluster answer's limit.
pub const MAX_MEMBERS: usize = quarry_proto::MAX_CLUSTER_MEMBERS;

/// Most bytes of a cluster name.
pub const MAX_CLUSTER_NAME_BYTES: usize = 64;

/// The cluster name of a node whose configuration names none.
pub const DEFAULT_CLUSTER_NAME: &str = "quarry";

/// The fabric's cluster, bounds and timings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricConfig {
    /// The cluster this node belongs to. A link to a node of another
    /// cluster is refused at the handshake: a node that dials an address a
    /// stopped neighbour left behind must not join whatever listens there now.
    pub cluster: String,
    /// Time to connect to a neighbour and finish the handshake.
    pub connect_timeout: Duration,
    /// Time a request routed from this node may take end to end.
    pub request_timeout: Duration,
    /// Most links a request may cross; one more is refused as a loop.
    pub max_hops: u8,
    /// Pause between attempts to dial a configured neighbour that is down.
    pub retry_backoff: Duration,
    /// A link with nothing to send sends a keepalive this often.
    pub keepalive_interval: Duration,
    /// A link silent for this long is declared dead and routed around (TCP
    /// alone does not notice a cable pulled or a peer frozen).
    pub dead_after: Duration,
    /// How long a request waits for a route to its node to appear (a link
    /// coming up or a reroute) before it fails as unreachable.
    pub route_wait: Duration,
    /// Receive buffer of the control channel of each link, in fragments
    /// (credits) of at most [`FRAGMENT_BYTES`].
    pub window_fragments: u32,
    /// Size of the data channel's fragments (what this node receives; its
    /// peers cut data to it). Large so that per-fragment work (a header,
    /// a credit, a queue turn) is paid per 64 KiB rather than per 2 KiB,
    /// small enough that a flow waits at most one fragment per competing
    /// flow.
    pub data_fragment_bytes: u32,
    /// Receive buffer of the data channel of each link, bytes: with the
    /// control window, it bounds the memory a link can hold.
    pub data_window_bytes: u32,
    /// Requests in flight on one link in each direction.
    pub max_streams_per_link: usize,
    /// Most nodes this node keeps adverts of, and most links other nodes may
    /// open to it; adverts and links beyond are refused (at most
    /// [`MAX_MEMBERS`]).
    pub max_nodes: usize,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            cluster: DEFAULT_CLUSTER_NAME.to_string(),
            connect_timeout: Duration::from_millis(1500),
            request_timeout: Duration::from_secs(30),
            max_hops: 8,
            retry_backoff: Duration::from_millis(500),
            keepalive_interval: Duration::from_millis(200),
            dead_after: Duration::from_millis(1000),
            route_wait: Duration::from_millis(1000),
            window_fragments: 128,
            data_fragment_bytes: DEFAULT_DATA_FRAGMENT_BYTES,
            data_window_bytes: DEFAULT_DATA_WINDOW_BYTES,
            max_streams_per_link: 4096,
            max_nodes: MAX_MEMBERS,
        }
    }
}

/// Default size of data-channel fragments. Measured (`docs/benchmarks.md`,
/// "Fabric fragment size"): a 512 MiB get relayed through the entry node of
/// 4 `mem` nodes costs the nodes 72-82 CPU ticks at 2 KiB fragments and
/// 60-70 from 8 KiB to 256 KiB, where the curve is flat; 64 KiB sits in
/// the middle of the flat part, and a flow behind another waits at most one
/// 64 KiB fragment (~25 us on loopback).
pub const DEFAULT_DATA_FRAGMENT_BYTES: u32 = 64 * 1024;
/// Default data-channel receive buffer per link: 4 MiB, a millisecond of
/// loopback at full speed, so credits come back before they run out.
pub const DEFAULT_DATA_WINDOW_BYTES: u32 = 4 << 20;

impl FabricConfig {
    /// What this node announces it can receive on each link.
    pub fn receive_limits(&self) -> ReceiveLimits {
        ReceiveLimits {
            data_fragment_bytes: self.data_fragment_bytes,
            control_window_fragments: self.window_fragments,
            data_window_fragments: self.data_window_bytes / self.data_fragment_bytes.max(1),
        }
    }

    /// Checks every field; the error names the bad one.
    pub fn validate(&self) -> Result<(), FabricError> {
        let bad = |reason: String| Err(FabricError::InvalidConfig { reason });
        if let Err(reason) = check_cluster_name(&self.cluster) {
            return bad(reason);
        }
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
            ("retry_backoff", self.retry_backoff),
            ("keepalive_interval", self.keepalive_interval),
            ("route_wait", self.route_wait),
        ] {
            if value.is_zero() {
                return bad(format!("{name} must be above zero"));
            }
        }
        if self.dead_after <= self.keepalive_interval * 2 {
            return bad(format!(
                "dead_after ({} ms) must exceed twice keepalive_interval ({} ms)",
                self.dead_after.as_millis(),
                self.keepalive_interval.as_millis()
            ));
        }
        if !(2..=4096).contains(&self.window_fragments) {
            return bad(format!(
                "window_fragments = {}, must be in 2..=4096",
                self.window_fragments
            ));
        }
        if let Err(reason) = self.receive_limits().check() {
            return bad(format!(
                "data_fragment_bytes = {}, data_window_bytes = {}: {reason}",
                self.data_fragment_bytes, self.data_window_bytes
            ));
        }
        if !(1..=65536).contains(&self.max_streams_per_link) {
            return bad(format!(
                "max_streams_per_link = {}, must be in 1..=65536",
                self.max_streams_per_link
            ));
        }
        if !(2..=MAX_MEMBERS).contains(&self.max_nodes) {
            return bad(format!(
                "max_nodes = {}, must be in 2..={MAX_MEMBERS}",
                self.max_nodes
            ));
        }
        if self.max_hops == 0 {
            return bad("max_hops must be above zero".into());
        }
        Ok(())
    }
}

/// Checks a cluster name: 1 to [`MAX_CLUSTER_NAME_BYTES`] bytes of ASCII
/// letters, digits, `-`, `_` and `.`, so it reads the same in a TOML file, a
/// log line and an error message.
pub fn check_cluster_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_CLUSTER_NAME_BYTES {
        return Err(format!(
            "cluster name {name:?} must be 1 to {MAX_CLUSTER_NAME_BYTES} bytes"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "cluster name {name:?} holds {bad:?}; use letters, digits, '-', '_' and '.'"
        ));
    }
    Ok(())
}

/// Refuses a request that would cross more than `max_hops` links.
pub fn check_hops(hops: u8, max_hops: u8) -> Result<(), Response> {
    if hops > max_hops {
        return Err(Response::Error {
            status: Status::HopLimitExceeded,
            message: format!(
                "request has crossed {hops} links, the limit is {max_hops}; is there a forwarding loop?"
            ),
        });
    }
    Ok(())
}

/// Why a fabric could not be set up, or why a link was closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// Two neighbours share an id.
    #[error("duplicate neighbour id {id} (at {addr})")]
    DuplicatePeer {
        /// The id.
        id: NodeId,
        /// The second address listed for it.
        addr: String,
    },
    /// This node's own id is listed among its neighbours.
    #[error("neighbour {id} at {addr} has this node's own id")]
    SelfAmongPeers {
        /// The id.
        id: NodeId,
        /// The neighbour's address.
        addr: String,
    },
    /// Too many members.
    #[error("more than {limit} cluster members")]
    TooManyMembers {
        /// The limit.
        limit: usize,
    },
    /// A configuration value is out of range.
    #[error("fabric config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// A neighbour broke the link protocol; the link is closed.
    #[error("link protocol: {reason}")]
    BadLinkFrame {
        /// What was wrong.
        reason: String,
    },
    /// Reading or writing a link failed.
    #[error("link I/O: {source}")]
    LinkIo {
        /// The OS error.
        source: std::io::Error,
    },
}
