use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use quarry_geometry::{parse_fields, AddrParseError, BlockAddr, DeviceInfo, PageAddr};
use serde::{Deserialize, Serialize};

/// A node's identity in the cluster (unique per cluster).
pub type NodeId = u16;

/// A requester's label for one request in flight on one connection; the answer
/// carries the same tag. Tags only need to be unique per connection.
pub type Tag = u32;

/// A page anywhere in the cluster: `node:bus:chip:block:page`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GlobalPageAddr {
    /// Owning node.
    pub node: NodeId,
    /// Page on that node's device.
    pub page: PageAddr,
}

/// An erase block anywhere in the cluster: `node:bus:chip:block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GlobalBlockAddr {
    /// Owning node.
    pub node: NodeId,
    /// Block on that node's device.
    pub block: BlockAddr,
}

impl fmt::Display for GlobalPageAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.page)
    }
}

impl fmt::Display for GlobalBlockAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.block)
    }
}

fn node_field(text: &str, value: u32) -> Result<NodeId, AddrParseError> {
    NodeId::try_from(value).map_err(|_| AddrParseError {
        text: text.to_string(),
        reason: format!("node {value} exceeds {}", NodeId::MAX),
    })
}

impl FromStr for GlobalPageAddr {
    type Err = AddrParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let f = parse_fields(text, &["node", "bus", "chip", "block", "page"])?;
        Ok(GlobalPageAddr {
            node: node_field(text, f[0])?,
            page: PageAddr {
                bus: f[1],
                chip: f[2],
                block: f[3],
                page: f[4],
            },
        })
    }
}

impl FromStr for GlobalBlockAddr {
    type Err = AddrParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let f = parse_fields(text, &["node", "bus", "chip", "block"])?;
        Ok(GlobalBlockAddr {
            node: node_field(text, f[0])?,
            block: BlockAddr {
                bus: f[1],
                chip: f[2],
                block: f[3],
            },
        })
    }
}

/// One member of the cluster as a node knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// Its id.
    pub id: NodeId,
    /// Its listen address (`host:port`).
    pub addr: String,
}

/// What `NodeInfo` answers: one node's identity and device summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node's id.
    pub id: NodeId,
    /// The cluster it belongs to (its configuration's `cluster`).
    pub cluster: String,
    /// Its listen address.
    pub addr: String,
    /// Seconds since it started.
    pub uptime_secs: u64,
    /// Its device.
    pub device: DeviceInfo,
}

/// One row of a node's routing table: how it reaches `dest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteEntry {
    /// The destination node.
    pub dest: NodeId,
    /// The neighbour a request for `dest` is handed to.
    pub next_hop: NodeId,
    /// Links on the shortest path (1 for a neighbour).
    pub hops: u8,
}

/// One live link of a node, as `Routes` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkEntry {
    /// The neighbour at the other end.
    pub peer: NodeId,
    /// Its address.
    pub addr: String,
    /// Requests this node has in flight on the link right now.
    pub in_flight: u32,
    /// Requests of the neighbour's open on the link right now: still
    /// arriving, or passed on to a node further on and not yet answered.
    /// Those running here are counted in `local`.
    #[serde(default)]
    pub inbound: u32,
    /// Requests of the neighbour taken to run on this node right now:
    /// arriving, waiting to start, running or answering. A cancelled
    /// command's requests leave this count, as the ones that end do.
    #[serde(default)]
    pub local: u32,
}

/// What `Routes` answers: one node's links and routing table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesInfo {
    /// The node described.
    pub node: NodeId,
    /// Its live links, by peer id.
    pub links: Vec<LinkEntry>,
    /// Its routes, by destination; a node missing here is unreachable from it.
    pub routes: Vec<RouteEntry>,
}

/// A request, as sent by a client or forwarded by a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Liveness check; answered by [`Response::Pong`].
    Ping,
    /// Read one page; answered by [`Response::Page`].
    ReadPage(GlobalPageAddr),
    /// Program one page; answered by [`Response::Done`].
    ProgramPage {
        /// Where.
        addr: GlobalPageAddr,
        /// Exactly one page of data.
        data: Bytes,
        /// At most the device's OOB size.
        oob: Bytes,
    },
    /// Erase one block; answered by [`Response::Done`].
    EraseBlock(GlobalBlockAddr),
    /// Describe one node; answered by [`Response::NodeInfo`].
    NodeInfo(NodeId),
    /// List the cluster's members as the entry node knows them; answered by
    /// [`Response::Cluster`].
    Cluster,
    /// One node's fabric view: its live links and its routing table; answered
    /// by [`Response::Routes`].
    Routes(NodeId),
    /// A call to one of a node's services (the object store, volumes, ...):
    /// the body is the service's own encoding, opaque to this layer and the
    /// fabric. Answered by [`Response::Reply`] (the service's answer,
    /// successes and the service's own failures alike) or by
    /// [`Response::Error`] when the call never reached the service.
    Call(Box<ServiceCall>),
}

/// The addressed parts of a [`Request::Call`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceCall {
    /// The node whose service runs the call.
    pub node: NodeId,
    /// Which service ([`Service`]).
    pub service: Service,
    /// The call changes nothing, so the fabric may send it again on another
    /// path when the link it took dies.
    pub idempotent: bool,
    /// The service's encoding of the call, at most [`crate::MAX_BODY_BYTES`]
    /// less the call's 4-byte head.
    pub body: Bytes,
}

/// The services a node runs behind [`Request::Call`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Service {
    /// The object store (layer 5): chunks, manifests, buckets.
    Store = 1,
    /// Block volumes (layer 4 spaces made into named logical page spaces).
    Volume = 2,
    /// Near-data compute (layer 6): commands, their status and results, and
    /// the local runs of kernels over the data a node holds.
    Compute = 3,
    /// Key-value tables (layer 5): batches of a tenant's operations on the
    /// keys this node holds, its figures, its flush.
    Kv = 4,
}

impl Service {
    /// Decodes a service byte.
    pub fn from_u8(byte: u8) -> Option<Service> {
        match byte {
            1 => Some(Service::Store),
            2 => Some(Service::Volume),
            3 => Some(Service::Compute),
            4 => Some(Service::Kv),
            _ => None,
        }
    }
}

/// An answer to one [`Request`].
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// Answer to [`Request::Ping`].
    Pong,
    /// Answer to [`Request::ReadPage`].
    Page {
        /// Page data.
        data: Bytes,
        /// OOB bytes.
        oob: Bytes,
        /// The page is erased (never programmed since the last erase).
        erased: bool,
        /// Bytes the ECC repaired.
        corrected_bytes: u32,
    },
    /// Success with nothing to return (program, erase).
    Done,
    /// Answer to [`Request::NodeInfo`].
    NodeInfo(Box<NodeInfo>),
    /// Answer to [`Request::Cluster`].
    Cluster(Vec<NodeEntry>),
    /// Answer to [`Request::Routes`].
    Routes(Box<RoutesInfo>),
    /// Answer to [`Request::Call`]: the service's encoding of its answer.
    Reply(Bytes),
    /// The request failed; `status` says how, `message` says what was wrong.
    Error {
        /// Machine-readable class.
        status: Status,
        /// Human-readable reason naming the bad input.
        message: String,
    },
}

/// Machine-readable failure classes carried in a frame's status byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// The frame or request was malformed.
    BadRequest = 1,
    /// The frame's protocol version is not spoken here.
    UnsupportedVersion = 2,
    /// An address lies outside the device's geometry.
    AddressOutOfRange = 3,
    /// NAND rule: page already programmed.
    AlreadyProgrammed = 4,
    /// NAND rule: pages of a block out of order.
    OutOfOrder = 5,
    /// The block is bad.
    BadBlock = 6,
    /// The page is damaged beyond correction.
    Uncorrectable = 7,
    /// The device is full.
    NoSpace = 8,
    /// Too much in flight; try again.
    Busy = 9,
    /// The addressed node id is not a member of the cluster.
    UnknownNode = 10,
    /// The owning node cannot be reached.
    NodeUnreachable = 11,
    /// The request did not finish in time.
    Timeout = 12,
    /// The node failed internally (I/O error, shutting down).
    Internal = 13,
    /// The request crossed more fabric links than allowed (a forwarding loop).
    HopLimitExceeded = 14,
}

impl Status {
    /// Decodes a status byte.
    pub fn from_u8(byte: u8) -> Option<Status> {
        use Status::*;
        Some(match byte {
            0 => Ok,
            1 => BadRequest,
            2 => UnsupportedVersion,
            3 => AddressOutOfRange,
            4 => AlreadyProgrammed,
            5 => OutOfOrder,
            6 => BadBlock,
            7 => Uncorrectable,
            8 => NoSpace,
            9 => Busy,
            10 => UnknownNode,
            11 => NodeUnreachable,
            12 => Timeout,
            13 => Internal,
            14 => HopLimitExceeded,
            _ => return None,
        })
    }
}
