//! PLACEHOLDER lib.rs — the proto helper replaces the bodies; the public
//! signatures below are the contract the fabric, node and client code against.
#![deny(missing_docs)]

mod message;

pub use message::{
    GlobalBlockAddr, GlobalPageAddr, NodeEntry, NodeId, NodeInfo, Request, Response, Status, Tag,
};

use std::future::Future;
use std::time::Duration;

/// Protocol version spoken by this build.
pub const PROTOCOL_VERSION: u8 = 1;

/// Why a frame could not be decoded or a session failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// Placeholder variant.
    #[error("closed")]
    Closed,
}

/// Bounds on one session or connection.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Requests in flight per connection (at least 256).
    pub max_in_flight: usize,
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time from sending a request to its answer.
    pub request_timeout: Duration,
}

/// The requesting end of one connection: take a free tag, send, get the answer
/// matched by tag. Cloneable; clones share the connection.
#[derive(Clone)]
pub struct Session {
    _private: (),
}

impl Session {
    /// Connects to `addr` (`host:port`).
    pub async fn connect(_addr: &str, _limits: SessionLimits) -> Result<Session, ProtoError> {
        todo!()
    }
    /// Sends `request` under a free tag and waits for its answer.
    pub async fn call(&self, _request: Request) -> Result<Response, ProtoError> {
        todo!()
    }
    /// Sends `request` now; the returned future completes with its answer.
    pub async fn submit(
        &self,
        _request: Request,
    ) -> Result<impl Future<Output = Result<Response, ProtoError>> + Send + 'static, ProtoError> {
        todo!();
        #[allow(unreachable_code)]
        Ok(async { Err(ProtoError::Closed) })
    }
}

/// Serves one accepted connection: decodes requests, runs `handler` on each
/// concurrently (at most `limits.max_in_flight` at once), and writes each answer
/// under its request's tag as soon as it is ready.
pub async fn serve_connection<S, H, F>(_stream: S, _handler: H, _limits: SessionLimits) -> Result<(), ProtoError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    todo!()
}
