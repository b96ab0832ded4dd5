//! Quarry's wire format (layer 2) and the tagged session over it.
//!
//! This crate owns everything that crosses a connection: the frame layout (a
//! fixed 16-byte header with magic, version, opcode, status, flags, hop count,
//! tag and body length, then a body per opcode; see `docs/protocol.md`), the
//! hard limits on every length, the encoders and decoders of every message,
//! the requesting end of a connection ([`Session`]: many requests in flight,
//! answered out of order, matched by tag) and the answering end
//! ([`serve_connection`]). It knows nothing of nodes or routing. It also
//! holds the linear page space ([`LinearSpace`]), the arithmetic a client
//! and the nodes share to number every page of a cluster; addresses and
//! geometry come from `quarry-geometry`, re-exported here.
//!
//! ```
//! use quarry_proto::{serve_connection, Request, Response, Session, SessionLimits};
//!
//! let runtime = tokio::runtime::Runtime::new().unwrap();
//! runtime.block_on(async {
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//!     let addr = listener.local_addr().unwrap().to_string();
//!     tokio::spawn(async move {
//!         let (stream, _) = listener.accept().await.unwrap();
//!         let handler = |request: Request| async move {
//!             match request {
//!                 Request::Ping => Response::Pong,
//!                 _ => Response::Done,
//!             }
//!         };
//!         serve_connection(stream, handler, SessionLimits::default()).await
//!     });
//!     let session = Session::connect(&addr, SessionLimits::default()).await.unwrap();
//!     assert_eq!(session.call(Request::Ping).await.unwrap(), Response::Pong);
//! });
//! ```
#![deny(missing_docs)]

mod codec;
mod error;
mod frame;
mod linear;
mod message;
mod out_queue;
mod relay;
mod server;
mod session;
mod wire;

pub use codec::{ByteReader, ByteWriter, CodecError};
pub use error::ProtoError;
pub use frame::{
    Frame, FrameCodec, FrameHeader, HEADER_LEN_BYTES, MAGIC, MAX_ADDR_BYTES, MAX_BODY_BYTES,
    MAX_CLUSTER_MEMBERS, MAX_ERROR_MESSAGE_BYTES,
};
pub use linear::{LinearSpace, LinearSpaceError};
pub use message::{
    GlobalBlockAddr, GlobalPageAddr, LinkEntry, NodeEntry, NodeId, NodeInfo, Request, Response,
    RouteEntry, RoutesInfo, Service, ServiceCall, Status, Tag,
};
pub use relay::{join_pieces, Answer, RelayedFrame, MAX_RELAYED_PIECES};
pub use server::{serve_connection, serve_connection_with, Incoming};
pub use session::{Session, SessionLimits, MAX_IN_FLIGHT_LIMIT};
// The addresses, geometry and summaries the messages carry, from the
// bottom crate, so that users of the wire format need name no other.
pub use quarry_geometry::{
    AddrParseError, BackendKind, BlockAddr, DeviceInfo, Geometry, PageAddr, PageRead, Preset,
};
pub use wire::{
    check_request, decode_request, decode_response, encode_request, encode_request_pieces,
    encode_response, encode_response_pieces, opcode, request_opcode,
};

/// Protocol version spoken by this build.
pub const PROTOCOL_VERSION: u8 = 1;

/// The node id a client puts in a request for "the node this connection
/// enters at", whatever its id: compute commands are submitted to, and
/// merged at, the entry node. No node may have this id.
pub const ENTRY_NODE: message::NodeId = message::NodeId::MAX;
