use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use quarry_proto::{NodeId, ProtoError, Request, Response, Session, SessionLimits, Status};

use crate::{Membership, Router};

/// Bounds and timings of the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FabricConfig {
    /// Limits of each link's session (in-flight bound, connect and request
    /// timeouts). The connect timeout bounds how long a request waits to learn
    /// that a peer is unreachable.
    pub limits: SessionLimits,
    /// Most links a request may cross; one more is refused as a loop.
    pub max_hops: u8,
    /// After a failed connect, requests to that peer fail at once for this long
    /// instead of each dialling again; the next request after it redials.
    pub retry_backoff: Duration,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            limits: SessionLimits {
                connect_timeout: Duration::from_millis(1500),
                ..SessionLimits::default()
            },
            max_hops: 8,
            retry_backoff: Duration::from_millis(500),
        }
    }
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

#[derive(Default)]
struct LinkState {
    session: Option<Session>,
    down_until: Option<Instant>,
    last_error: String,
}

/// One peer: a lazily connected session, and the memory of a recent failure.
struct Link {
    id: NodeId,
    addr: String,
    state: Mutex<LinkState>,
    /// Serialises dialling so a burst of requests to a dead peer makes one
    /// connect attempt, not one each.
    dialing: tokio::sync::Mutex<()>,
}

enum Cached {
    Up(Session),
    Down(String),
    Unknown,
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn cached(&self) -> Cached {
        let state = self.lock();
        if let Some(session) = &state.session {
            if !session.is_closed() {
                return Cached::Up(session.clone());
            }
        }
        match state.down_until {
            Some(until) if Instant::now() < until => {
                let retry_ms = until.saturating_duration_since(Instant::now()).as_millis();
                Cached::Down(format!(
                    "{} (next attempt in {retry_ms} ms)",
                    state.last_error
                ))
            }
            _ => Cached::Unknown,
        }
    }

    async fn session(&self, config: &FabricConfig) -> Result<Session, String> {
        match self.cached() {
            Cached::Up(session) => return Ok(session),
            Cached::Down(reason) => return Err(reason),
            Cached::Unknown => {}
        }
        let _dialing = self.dialing.lock().await;
        // Whoever held the lock before us may have connected or failed.
        match self.cached() {
            Cached::Up(session) => return Ok(session),
            Cached::Down(reason) => return Err(reason),
            Cached::Unknown => {}
        }
        match Session::connect(&self.addr, config.limits).await {
            Ok(session) => {
                tracing::info!(peer = self.id, addr = %self.addr, "link up");
                let mut state = self.lock();
                state.session = Some(session.clone());
                state.down_until = None;
                Ok(session)
            }
            Err(e) => {
                let reason = connect_reason(&e);
                tracing::warn!(peer = self.id, addr = %self.addr, "link down: {reason}");
                let mut state = self.lock();
                state.session = None;
                state.down_until = Some(Instant::now() + config.retry_backoff);
                state.last_error = reason.clone();
                Err(reason)
            }
        }
    }
}

fn connect_reason(error: &ProtoError) -> String {
    match error {
        ProtoError::ConnectRefused { .. } => "connection refused".to_string(),
        ProtoError::ConnectTimeout { timeout_ms, .. } => {
            format!("no connection within {timeout_ms} ms")
        }
        ProtoError::Connect { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// The full-mesh router: every peer is one link away, reached over a lazily
/// connected [`Session`] per peer. A forwarded request travels under a tag of
/// that session (the second tag layer) and its answer returns to the caller,
/// which answers under the requester's own tag on the requester's connection.
#[derive(Clone)]
pub struct MeshRouter {
    inner: Arc<MeshInner>,
}

struct MeshInner {
    membership: Membership,
    config: FabricConfig,
    links: HashMap<NodeId, Arc<Link>>,
}

impl MeshRouter {
    /// A router over `membership`; no connection is made until a request needs it.
    pub fn new(membership: Membership, config: FabricConfig) -> MeshRouter {
        let links = membership
            .peers()
            .map(|peer| {
                let link = Link {
                    id: peer.id,
                    addr: peer.addr,
                    state: Mutex::new(LinkState::default()),
                    dialing: tokio::sync::Mutex::new(()),
                };
                (peer.id, Arc::new(link))
            })
            .collect();
        MeshRouter {
            inner: Arc::new(MeshInner {
                membership,
                config,
                links,
            }),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> FabricConfig {
        self.inner.config
    }

    /// Peers with an open link right now, by id.
    pub fn connected_peers(&self) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = self
            .inner
            .links
            .values()
            .filter(|link| matches!(link.cached(), Cached::Up(_)))
            .map(|link| link.id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

impl MeshInner {
    async fn route(&self, dest: NodeId, request: Request, hops: u8) -> Response {
        let next_hops = hops.saturating_add(1);
        if let Err(refusal) = check_hops(next_hops, self.config.max_hops) {
            return refusal;
        }
        if dest == self.membership.local_id() {
            return Response::Error {
                status: Status::Internal,
                message: format!("node {dest} is this node; a local request reached the router"),
            };
        }
        let Some(link) = self.links.get(&dest) else {
            return Response::Error {
                status: Status::UnknownNode,
                message: format!(
                    "node {dest} is not a member; members are {}",
                    self.membership.ids_text()
                ),
            };
        };
        let unreachable = |reason: &str| Response::Error {
            status: Status::NodeUnreachable,
            message: format!("node {dest} at {} is unreachable: {reason}", link.addr),
        };
        let session = match link.session(&self.config).await {
            Ok(session) => session,
            Err(reason) => return unreachable(&reason),
        };
        match session.call_with_hops(request, next_hops).await {
            Ok(answer) => answer,
            Err(ProtoError::Timeout { timeout_ms, .. }) => Response::Error {
                status: Status::Timeout,
                message: format!(
                    "node {dest} at {} did not answer within {timeout_ms} ms",
                    link.addr
                ),
            },
            Err(e @ ProtoError::NoFreeTag { .. }) => Response::Error {
                status: Status::Busy,
                message: e.to_string(),
            },
            Err(e) if e.is_connection_error() => unreachable(&e.to_string()),
            Err(e) => Response::Error {
                status: Status::BadRequest,
                message: format!("cannot forward to node {dest}: {e}"),
            },
        }
    }
}

impl Router for MeshRouter {
    fn route(&self, dest: NodeId, request: Request, hops: u8) -> BoxFuture<'static, Response> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.route(dest, request, hops).await })
    }

    fn membership(&self) -> &Membership {
        &self.inner.membership
    }
}
