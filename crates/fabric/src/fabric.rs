//! The fabric of one node: its links, the link-state database and routing
//! table they feed, and the switch that moves request and answer fragments
//! between links (or to and from this node) under tags of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::StreamExt;
use quarry_proto::{
    decode_request, decode_response, encode_request_pieces, encode_response, Answer, FrameCodec,
    LinkEntry, NodeEntry, NodeId, RelayedFrame, Request, Response, RouteEntry, RoutesInfo, Status,
    HEADER_LEN_BYTES, MAX_BODY_BYTES, PROTOCOL_VERSION,
};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
use tokio_util::codec::{Decoder, FramedRead};

use crate::link::{lock, Inbound, Link, LinkLimits, OutFragment, Pending, Release};
use crate::topology::{LinkAdvert, LinkStateDb, RoutingTable};
use crate::wire::{
    decode_credit, decode_json, encode_json, Channel, Hello, Kind, LinkCodec, LinkFrame, LinkHeader,
};
use crate::{FabricConfig, FabricError};

/// Largest client-protocol frame carried over a link (a maximal page).
const MAX_MESSAGE_BYTES: usize = HEADER_LEN_BYTES + MAX_BODY_BYTES as usize;

/// Runs a request addressed to this node (a device operation, a NodeInfo) and
/// answers it.
pub type LocalHandler = Arc<dyn Fn(Request) -> BoxFuture<'static, Answer> + Send + Sync>;

/// One node's view of the storage network, and the switch that forwards
/// requests hop by hop. Cloning is cheap; clones share everything.
///
/// Links come from [`Fabric::start`]'s neighbour list (dialled and redialled
/// by this node) and from neighbours that dial in ([`Fabric::accept`]).
/// Every change of a link floods a new link-state advertisement, and every node
/// recomputes its shortest routes from what it has heard, so a node plugged in
/// with one link becomes reachable from all, and traffic moves off a dead link
/// onto another path if there is one.
#[derive(Clone)]
pub struct Fabric {
    inner: Arc<Inner>,
}

struct Inner {
    local: NodeEntry,
    instance: u64,
    config: FabricConfig,
    handler: LocalHandler,
    state: RwLock<State>,
    /// Bumped on every routing change; route lookups wait on it.
    version: watch::Sender<u64>,
    started: Instant,
    next_serial: AtomicU64,
    stop: watch::Sender<bool>,
    /// Bounds the links (and handshakes) other nodes open to this one.
    accepted: Arc<tokio::sync::Semaphore>,
    /// When each reason for refusing an incoming link was last logged as a
    /// warning: a misconfigured node redials every retry backoff, and one
    /// warning a minute says as much as one per attempt.
    refusals_logged: std::sync::Mutex<BTreeMap<String, Instant>>,
}

/// Whether refusing a link for `reason` at `now` is worth a warning: not
/// if the same reason was warned of within the interval. Remembers at most
/// [`MAX_REFUSALS_LOGGED`] reasons; past that, every new one is warned of.
fn refusal_due_warning(logged: &mut BTreeMap<String, Instant>, reason: &str, now: Instant) -> bool {
    if logged
        .get(reason)
        .is_some_and(|at| now.duration_since(*at) < REFUSAL_WARNING_INTERVAL)
    {
        return false;
    }
    if logged.len() >= MAX_REFUSALS_LOGGED && !logged.contains_key(reason) {
        logged.retain(|_, at| now.duration_since(*at) < REFUSAL_WARNING_INTERVAL);
        if logged.len() >= MAX_REFUSALS_LOGGED {
            return true;
        }
    }
    logged.insert(reason.to_string(), now);
    true
}

/// Distinct refusal reasons remembered for rate-limiting their warnings.
const MAX_REFUSALS_LOGGED: usize = 64;
/// How often one refusal reason is logged as a warning.
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(60);

struct State {
    links: BTreeMap<NodeId, Arc<Link>>,
    /// Links replaced by a preferred one to the same peer (both ends dialled
    /// each other), kept open until the streams on them end: closing one at
    /// once would fail requests the peer sends on it before it has switched
    /// to the new link too. At most [`FabricConfig::max_nodes`].
    retired: Vec<(Arc<Link>, Instant)>,
    db: LinkStateDb,
    table: RoutingTable,
    sequence: u64,
}

impl Fabric {
    /// Starts the fabric of node `local` on the current tokio runtime: it
    /// dials each of `neighbors` (and keeps redialling any that drop), and
    /// runs requests that arrive for this node with `handler`.
    pub fn start(
        local: NodeEntry,
        neighbors: Vec<NodeEntry>,
        config: FabricConfig,
        handler: LocalHandler,
    ) -> Result<Fabric, FabricError> {
        config.validate()?;
        let mut seen = BTreeSet::new();
        for neighbor in &neighbors {
            if neighbor.id == local.id {
                return Err(FabricError::SelfAmongPeers {
                    id: neighbor.id,
                    addr: neighbor.addr.clone(),
                });
            }
            if !seen.insert(neighbor.id) {
                return Err(FabricError::DuplicatePeer {
                    id: neighbor.id,
                    addr: neighbor.addr.clone(),
                });
            }
        }
        if neighbors.len() + 1 > config.max_nodes {
            return Err(FabricError::TooManyMembers {
                limit: config.max_nodes,
            });
        }
        // A restarted node's adverts must supersede its previous run's.
        let instance = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        let mut db = LinkStateDb::new();
        db.apply(LinkAdvert {
            origin: local.id,
            addr: local.addr.clone(),
            sequence: instance,
            neighbors: BTreeSet::new(),
        });
        let (stop, _) = watch::channel(false);
        let max_nodes = config.max_nodes;
        let fabric = Fabric {
            inner: Arc::new(Inner {
                local,
                instance,
                config,
                handler,
                state: RwLock::new(State {
                    links: BTreeMap::new(),
                    retired: Vec::new(),
                    db,
                    table: RoutingTable::default(),
                    sequence: instance,
                }),
                version: watch::channel(0).0,
                started: Instant::now(),
                next_serial: AtomicU64::new(1),
                stop,
                accepted: Arc::new(tokio::sync::Semaphore::new(max_nodes)),
                refusals_logged: std::sync::Mutex::new(BTreeMap::new()),
            }),
        };
        for neighbor in neighbors {
            tokio::spawn(fabric.inner.clone().dial_loop(neighbor));
        }
        tokio::spawn(fabric.inner.clone().housekeeping());
        Ok(fabric)
    }

    /// This node.
    pub fn local(&self) -> &NodeEntry {
        &self.inner.local
    }

    /// The configuration in force.
    pub fn config(&self) -> &FabricConfig {
        &self.inner.config
    }

    /// Takes over a connection a neighbour opened (its first bytes are the
    /// link magic); returns at once, the handshake runs in the background.
    /// At most `config.max_nodes` accepted links (or handshakes) run at
    /// once; a connection beyond that is closed at once.
    pub fn accept(&self, stream: TcpStream) {
        let inner = self.inner.clone();
        let Ok(permit) = inner.accepted.clone().try_acquire_owned() else {
            tracing::warn!(
                "refusing a link connection: {} accepted links already",
                inner.config.max_nodes
            );
            return;
        };
        tokio::spawn(async move {
            let _permit = permit;
            let peer = stream
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            if let Err(e) = inner.clone().run_link(stream, None).await {
                let reason = e.to_string();
                if inner.warn_of_refusal(&reason) {
                    tracing::warn!(%peer, "link refused: {reason}");
                } else {
                    tracing::debug!(%peer, "link refused: {reason}");
                }
            }
        });
    }

    /// Delivers `request` (which has crossed `hops` links so far) to node
    /// `dest` over the fabric and returns its answer, or an error answer
    /// naming why it could not: no such node, no live path, timeout, busy,
    /// hop limit. `flow` names the requester, for fair sharing of links.
    /// Completes within the route wait plus the request timeout.
    pub async fn route(&self, dest: NodeId, request: Request, hops: u8, flow: u32) -> Response {
        match self
            .inner
            .clone()
            .exchange(dest, request, hops, flow)
            .await
            .into_message()
        {
            Ok(response) => response,
            Err(frame) => decode_relayed(&frame, dest),
        }
    }

    /// [`Fabric::route`] for a requester the answer only passes on to (a
    /// client of this node): the answer frame comes back as it arrived,
    /// in its fragments, to go out under the requester's tag without being
    /// decoded or encoded again here.
    pub async fn relay(&self, dest: NodeId, request: Request, hops: u8, flow: u32) -> Answer {
        self.inner.clone().exchange(dest, request, hops, flow).await
    }

    /// This node and every node it has a route to, by id.
    pub fn members(&self) -> Vec<NodeEntry> {
        let state = self.inner.read();
        let mut members = vec![self.inner.local.clone()];
        for route in state.table.routes() {
            if let Some(advert) = state.db.get(route.dest) {
                members.push(NodeEntry {
                    id: route.dest,
                    addr: advert.addr.clone(),
                });
            }
        }
        members.sort_by_key(|m| m.id);
        members
    }

    /// This node's links and routing table.
    pub fn routes(&self) -> RoutesInfo {
        let state = self.inner.read();
        RoutesInfo {
            node: self.inner.local.id,
            links: state
                .links
                .values()
                .filter(|link| !link.is_closed())
                .map(|link| LinkEntry {
                    peer: link.peer,
                    addr: link.peer_addr.clone(),
                    in_flight: link.in_flight() as u32,
                    inbound: lock(&link.inbound).len() as u32,
                    local: link.local_requests() as u32,
                })
                .collect(),
            routes: state
                .table
                .routes()
                .map(|r| RouteEntry {
                    dest: r.dest,
                    next_hop: r.next_hop,
                    hops: r.hops,
                })
                .collect(),
        }
    }

    /// Waits until this node has a route to every node in `ids` or `timeout`
    /// passes; returns whether it has.
    pub async fn wait_for_routes(&self, ids: &[NodeId], timeout: Duration) -> bool {
        let mut version = self.inner.version.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            {
                let state = self.inner.read();
                // A route and the node's advertisement: what `members`
                // lists (a route learned before the advertisement left the
                // node out of a membership asked for right after this).
                if ids.iter().all(|id| {
                    *id == self.inner.local.id
                        || (state.table.route(*id).is_some() && state.db.get(*id).is_some())
                }) {
                    return true;
                }
            }
            if tokio::time::timeout_at(deadline, version.changed())
                .await
                .is_err()
            {
                return false;
            }
        }
    }

    /// Closes every link and stops dialling.
    pub fn shutdown(&self) {
        let _ = self.inner.stop.send(true);
        let links: Vec<Arc<Link>> = {
            let mut state = self.inner.write();
            let mut links: Vec<Arc<Link>> = state.links.values().cloned().collect();
            links.extend(state.retired.drain(..).map(|(link, _)| link));
            links
        };
        for link in links {
            self.inner.link_down(&link, "this node is shutting down");
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn error(status: Status, message: String) -> Response {
    Response::Error { status, message }
}

fn encode_answer(answer: &Response) -> Bytes {
    let mut buf = BytesMut::new();
    if encode_response(0, answer, &mut buf).is_err() {
        buf.clear();
        let fallback = error(Status::Internal, "answer could not be encoded".into());
        // An error answer with a short message always encodes.
        let _ = encode_response(0, &fallback, &mut buf);
    }
    buf.freeze()
}

/// The opcode of an `Error` answer (docs/protocol.md).
const ERROR_OPCODE: u8 = 0xFF;

/// Decodes another node's answer frame for a caller on this node.
fn decode_relayed(frame: &RelayedFrame, dest: NodeId) -> Response {
    decode_frame(frame.to_contiguous())
        .and_then(|frame| decode_response(&frame).map_err(|e| e.to_string()))
        .unwrap_or_else(|e| {
            error(
                Status::Internal,
                format!("node {dest} sent a malformed answer: {e}"),
            )
        })
}

/// Decodes one whole client-protocol frame carried over a link.
fn decode_frame(mut buf: BytesMut) -> Result<quarry_proto::Frame, String> {
    let len = buf.len();
    // The frame's body is split off the assembly buffer, not copied.
    match FrameCodec.decode(&mut buf) {
        Ok(Some(frame)) if buf.is_empty() => Ok(frame),
        Ok(Some(_)) => Err(format!("{} bytes after the frame", buf.len())),
        Ok(None) => Err(format!("truncated frame of {len} bytes")),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether the client-protocol frame in `message` is a page request (read,
/// program, erase) or a ping: requests whose handler does little before it
/// either finishes or waits for the device, so that its first poll may run
/// on the link's reader ([`Link::run_local`]).
fn is_page_request(message: &[u8]) -> bool {
    use quarry_proto::opcode;
    // The opcode is the fourth byte of the frame header (after the magic
    // and the version); a frame too short to have one is not.
    matches!(
        message.get(3).copied(),
        Some(opcode::READ_PAGE | opcode::PROGRAM_PAGE | opcode::ERASE_BLOCK | opcode::PING)
    )
}

/// What one try of a forwarded request sends, and until when it waits.
#[derive(Clone, Copy)]
struct Sent<'a> {
    dest: NodeId,
    hops: u8,
    flow: u32,
    message: &'a Vec<Bytes>,
    deadline: tokio::time::Instant,
    /// No try comes after this one.
    last: bool,
}

/// Withdraws a request whose requester stopped waiting for it: frees its tag
/// and tells the next node to drop it, which passes that on to the node
/// running it, so the work stops there too.
struct Withdraw<'a> {
    link: &'a Arc<Link>,
    stream: u32,
    /// The whole answer arrived: nothing to withdraw.
    answered: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        // A stream that already ended (failed with its link) has no tag left.
        self.link.withdraw(self.stream);
    }
}

/// Drops `up`'s record of a stream forwarded on its behalf, once the
/// stream has ended downstream.
fn forget_forward(up: &Link, up_stream: u32) {
    let mut inbound = lock(&up.inbound);
    if matches!(inbound.get(&up_stream), Some(Inbound::Forward { .. })) {
        inbound.remove(&up_stream);
    }
}

/// Requests that change nothing, so one that failed because a link died may
/// be sent again on another path, and one whose requester gave up may be
/// dropped half-way where it runs.
fn is_idempotent(request: &Request) -> bool {
    match request {
        Request::Call(call) => call.idempotent,
        other => matches!(
            other,
            Request::Ping
                | Request::ReadPage(_)
                | Request::NodeInfo(_)
                | Request::Cluster
                | Request::Routes(_)
        ),
    }
}

impl Inner {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `node 3 (at 10.0.0.3:7400)`, with the address last advertised.
    fn name(&self, id: NodeId) -> String {
        match self.read().db.get(id) {
            Some(advert) => format!("node {id} (at {})", advert.addr),
            None => format!("node {id}"),
        }
    }

    /// Whether a refusal for `reason` is due a warning (else it is logged
    /// quietly); see [`Inner::refusals_logged`].
    fn warn_of_refusal(&self, reason: &str) -> bool {
        refusal_due_warning(&mut lock(&self.refusals_logged), reason, Instant::now())
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sends `request` to `dest` and returns its answer frame as it
    /// arrived, or an error answer of this node's.
    async fn exchange(
        self: Arc<Self>,
        dest: NodeId,
        request: Request,
        hops: u8,
        flow: u32,
    ) -> Answer {
        let hops = hops.saturating_add(1);
        if let Err(refusal) = crate::check_hops(hops, self.config.max_hops) {
            return refusal.into();
        }
        if dest == self.local.id {
            return error(
                Status::Internal,
                format!("node {dest} is this node; a local request reached the fabric"),
            )
            .into();
        }
        // The request's payload (a call body, a page) goes on as the bytes
        // the requester sent, in pieces of its own: not copied here.
        let message = match encode_request_pieces(0, hops, &request) {
            Ok(pieces) => pieces,
            Err(e) => {
                return error(
                    Status::BadRequest,
                    format!("cannot forward to node {dest}: {e}"),
                )
                .into()
            }
        };
        let deadline = tokio::time::Instant::now() + self.config.request_timeout;
        let attempts = if is_idempotent(&request) { 2 } else { 1 };
        let mut last_failure = String::new();
        for attempt in 1..=attempts {
            let sent = Sent {
                dest,
                hops,
                flow,
                message: &message,
                deadline,
                last: attempt == attempts,
            };
            match self.attempt(sent).await {
                Ok(answer) => return answer,
                Err(failure) => last_failure = failure,
            }
        }
        error(
            Status::NodeUnreachable,
            format!("{} is unreachable: {last_failure}", self.name(dest)),
        )
        .into()
    }

    /// One try of [`Inner::exchange`]: the answer to give, or why this try
    /// failed in a way another try may mend.
    async fn attempt(&self, sent: Sent<'_>) -> Result<Answer, String> {
        let Sent { dest, hops, .. } = sent;
        let routes_seen = self.version.subscribe();
        let link = match self.next_link(dest).await {
            Ok(link) => link,
            Err(refusal) => return Ok(refusal.into()),
        };
        let (reply, answer) = oneshot::channel();
        let stream = lock(&link.outbound).insert(Pending::Local {
            pieces: Vec::new(),
            len_bytes: 0,
            reply,
        });
        let Some(stream) = stream else {
            return Ok(error(
                Status::Busy,
                format!(
                    "link to node {} has {} requests in flight, the limit",
                    link.peer, self.config.max_streams_per_link
                ),
            )
            .into());
        };
        let header = LinkHeader {
            kind: Kind::Request,
            channel: Channel::Control,
            flags: 0,
            hops,
            stream,
            dest,
            origin: self.local.id,
            flow: sent.flow,
            len_bytes: 0,
        };
        if !link.send_pieces(header, sent.message.clone()) {
            // The link closed after the route was chosen; if its streams
            // were already failed, this one was not among them.
            lock(&link.outbound).remove(stream);
            return Err(format!("link to node {} closed", link.peer));
        }
        // From here until the answer is in, a requester that stops
        // waiting (a cancelled command, a timeout) withdraws the request.
        let mut withdraw = Withdraw {
            link: &link,
            stream,
            answered: false,
        };
        let waited = tokio::time::timeout_at(sent.deadline, answer).await;
        // A whole answer closed the stream; anything else withdraws it.
        withdraw.answered = matches!(waited, Ok(Ok(Ok(_))));
        drop(withdraw);
        match waited {
            Ok(Ok(Ok(pieces))) => self.settle(dest, pieces, routes_seen, sent.last).await,
            Ok(Ok(Err(reason))) => Err(reason),
            Ok(Err(_)) => Err(format!("link to node {} closed", link.peer)),
            Err(_) => Ok(error(
                Status::Timeout,
                format!(
                    "node {dest} did not answer within {} ms (sent via node {})",
                    self.config.request_timeout.as_millis(),
                    link.peer
                ),
            )
            .into()),
        }
    }

    /// The answer `dest` sent as `pieces`, or (when `last` is false) why a
    /// read should go again: a node further on lost its link under it and
    /// the routes have moved since.
    async fn settle(
        &self,
        dest: NodeId,
        pieces: Vec<Bytes>,
        mut routes_seen: watch::Receiver<u64>,
        last: bool,
    ) -> Result<Answer, String> {
        let frame = match RelayedFrame::new(pieces) {
            Ok(frame) => frame,
            Err(e) => {
                return Ok(Answer::Message(error(
                    Status::Internal,
                    format!("node {dest} sent a malformed answer: {e}"),
                )))
            }
        };
        // Only an error answer is looked into; a page passes on as it came.
        let header = frame.header();
        let lost_further_on =
            header.opcode == ERROR_OPCODE && header.status == Status::NodeUnreachable as u8;
        if !lost_further_on || last {
            return Ok(Answer::Relayed(frame));
        }
        let rerouted = tokio::time::timeout(self.config.route_wait, routes_seen.changed()).await;
        if !matches!(rerouted, Ok(Ok(()))) {
            return Ok(Answer::Relayed(frame));
        }
        match decode_relayed(&frame, dest) {
            Response::Error { message, .. } => Err(message),
            _ => Err(String::new()),
        }
    }

    /// The link towards `dest`, waiting up to the route wait for a route to
    /// appear (a link coming up, or a reroute after one went down).
    async fn next_link(&self, dest: NodeId) -> Result<Arc<Link>, Response> {
        let mut version = self.version.subscribe();
        let deadline = tokio::time::Instant::now() + self.config.route_wait;
        loop {
            let known = {
                let state = self.read();
                if let Some(route) = state.table.route(dest) {
                    if let Some(link) = state.links.get(&route.next_hop) {
                        if !link.is_closed() {
                            return Ok(link.clone());
                        }
                    }
                }
                state.db.get(dest).is_some()
            };
            // An id never heard of is only worth waiting for while the fabric
            // is still discovering the network.
            let discovering = self.started.elapsed() < self.config.route_wait * 2;
            let waited_out = tokio::time::Instant::now() >= deadline;
            if waited_out || (!known && !discovering) {
                let reachable: Vec<String> = {
                    let state = self.read();
                    std::iter::once(self.local.id)
                        .chain(state.table.routes().map(|r| r.dest))
                        .map(|id| id.to_string())
                        .collect()
                };
                let reachable = reachable.join(",");
                return Err(if known {
                    error(
                        Status::NodeUnreachable,
                        format!(
                            "{} is unreachable from node {}: no live path to it (reachable: {reachable})",
                            self.name(dest),
                            self.local.id
                        ),
                    )
                } else {
                    error(
                        Status::UnknownNode,
                        format!(
                            "node {dest} is not known to node {}; reachable nodes are {reachable}",
                            self.local.id
                        ),
                    )
                });
            }
            let _ = tokio::time::timeout_at(deadline, version.changed()).await;
        }
    }

    /// Dials `neighbor` whenever there is no live link to it.
    async fn dial_loop(self: Arc<Self>, neighbor: NodeEntry) {
        let mut stop = self.stop.subscribe();
        // A refused handshake is a configuration problem (another cluster,
        // another node at the address): said once as a warning, then
        // quietly on every retry until the reason changes.
        let mut last_refusal = String::new();
        loop {
            if *stop.borrow() {
                return;
            }
            let existing = self.read().links.get(&neighbor.id).cloned();
            if let Some(link) = existing.filter(|l| !l.is_closed()) {
                tokio::select! {
                    _ = link.closed() => {}
                    _ = stop.changed() => return,
                }
            } else {
                let dialled = tokio::time::timeout(
                    self.config.connect_timeout,
                    TcpStream::connect(&neighbor.addr),
                )
                .await;
                match dialled {
                    Ok(Ok(stream)) => {
                        let inner = self.clone();
                        let id = neighbor.id;
                        // The link runs in its own task; this loop waits for
                        // it to be registered or to fail.
                        // Not cancelled on stop: shutdown closes the link,
                        // which ends it cleanly through link_down.
                        match inner.run_link(stream, Some(id)).await {
                            Err(e) => {
                                let reason = e.to_string();
                                if reason != last_refusal {
                                    tracing::warn!(peer = neighbor.id, addr = %neighbor.addr, "no link: {reason}");
                                    last_refusal = reason;
                                } else {
                                    tracing::debug!(peer = neighbor.id, addr = %neighbor.addr, "no link: {reason}");
                                }
                            }
                            Ok(()) => last_refusal.clear(),
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(peer = neighbor.id, addr = %neighbor.addr, "dial failed: {e}")
                    }
                    Err(_) => {
                        tracing::debug!(peer = neighbor.id, addr = %neighbor.addr, "dial timed out")
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_backoff) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Handshakes on `stream`, registers the link and serves it until it
    /// closes. `expect` is the neighbour dialled, or None for an accepted link.
    async fn run_link(
        self: Arc<Self>,
        stream: TcpStream,
        expect: Option<NodeId>,
    ) -> Result<(), FabricError> {
        let _ = stream.set_nodelay(true);
        let (reader, mut writer) = stream.into_split();
        let mut frames = FramedRead::with_capacity(reader, LinkCodec, 128 * 1024);
        let theirs = self.handshake(&mut frames, &mut writer, expect).await?;
        self.check_hello(&theirs, expect)?;
        let dialer = if expect.is_some() {
            self.local.id
        } else {
            theirs.id
        };
        let (link, jobs) = Link::new(
            self.next_serial.fetch_add(1, Ordering::Relaxed),
            theirs.id,
            theirs.addr.clone(),
            theirs.instance,
            dialer,
            LinkLimits {
                receive: self.config.receive_limits(),
                send: theirs.receive,
            },
            self.config.max_streams_per_link,
        );
        let link = Arc::new(link);
        link.attach(writer);
        link.heard();
        if !self.register(&link) {
            return Ok(());
        }
        tracing::info!(peer = link.peer, addr = %link.peer_addr, serial = link.serial, "link up");
        tokio::spawn(link.clone().local_runner(jobs));
        let writer_task = tokio::spawn(link.clone().write_loop(self.config.keepalive_interval));
        let reason = match self.clone().read_loop(&link, &mut frames).await {
            Ok(()) => "closed by the peer".to_string(),
            Err(e) => e.to_string(),
        };
        self.link_down(&link, &reason);
        writer_task.abort();
        Ok(())
    }

    /// Sends this node's Hello and reads the peer's, within the connect
    /// timeout.
    async fn handshake(
        &self,
        frames: &mut FramedRead<OwnedReadHalf, LinkCodec>,
        writer: &mut OwnedWriteHalf,
        expect: Option<NodeId>,
    ) -> Result<Hello, FabricError> {
        let hello = Hello {
            cluster: self.config.cluster.clone(),
            id: self.local.id,
            addr: self.local.addr.clone(),
            instance: self.instance,
            expect,
            receive: self.config.receive_limits(),
        };
        let handshake = async {
            let mut buf = BytesMut::new();
            encode_json(Kind::Hello, &hello, &mut buf)?;
            tokio::io::AsyncWriteExt::write_all(writer, &buf).await?;
            match frames.next().await {
                Some(Ok(frame)) if frame.header.kind == Kind::Hello => {
                    decode_json::<Hello>(Kind::Hello, &frame.payload)
                }
                Some(Ok(frame)) => Err(FabricError::BadLinkFrame {
                    reason: format!("expected Hello, got {:?}", frame.header.kind),
                }),
                Some(Err(e)) => Err(e),
                None => Err(FabricError::BadLinkFrame {
                    reason: "closed during the handshake".into(),
                }),
            }
        };
        tokio::time::timeout(self.config.connect_timeout, handshake)
            .await
            .map_err(|_| FabricError::BadLinkFrame {
                reason: format!(
                    "no handshake within {} ms",
                    self.config.connect_timeout.as_millis()
                ),
            })?
    }

    /// Refuses a peer of another cluster, with bad limits, with this node's
    /// id, or not the one either end meant to dial.
    fn check_hello(&self, theirs: &Hello, expect: Option<NodeId>) -> Result<(), FabricError> {
        if theirs.cluster != self.config.cluster {
            return Err(FabricError::BadLinkFrame {
                reason: format!(
                    "node {} at {} belongs to cluster {:?}, this node to cluster {:?}",
                    theirs.id, theirs.addr, theirs.cluster, self.config.cluster
                ),
            });
        }
        if let Err(reason) = theirs.receive.check() {
            return Err(FabricError::BadLinkFrame {
                reason: format!("node {} at {} announced {reason}", theirs.id, theirs.addr),
            });
        }
        if theirs.id == self.local.id {
            return Err(FabricError::BadLinkFrame {
                reason: format!(
                    "the node at {} has this node's own id {}",
                    theirs.addr, theirs.id
                ),
            });
        }
        if let Some(expected) = expect {
            if theirs.id != expected {
                return Err(FabricError::BadLinkFrame {
                    reason: format!(
                        "dialled node {expected} but the node there says it is node {}",
                        theirs.id
                    ),
                });
            }
        }
        if let Some(expected) = theirs.expect {
            if expected != self.local.id {
                return Err(FabricError::BadLinkFrame {
                    reason: format!(
                        "node {} dialled this node as node {expected}, but it is node {}",
                        theirs.id, self.local.id
                    ),
                });
            }
        }
        Ok(())
    }

    /// Adds `link` to the live links, unless a better link to the same peer is
    /// already there; returns whether it was added.
    fn register(self: &Arc<Self>, link: &Arc<Link>) -> bool {
        let replaced = {
            let mut state = self.write();
            if self.stopped() {
                return false;
            }
            if !state.links.contains_key(&link.peer) && state.links.len() >= self.config.max_nodes {
                tracing::warn!(
                    peer = link.peer,
                    "refusing a link: {} links already",
                    self.config.max_nodes
                );
                return false;
            }
            let mut replaced = None;
            if let Some(existing) = state.links.get(&link.peer).cloned() {
                if !existing.is_closed() {
                    // Both ends dialled each other: both keep the link the
                    // lower id dialled. A peer that restarted replaces its
                    // old link.
                    let same_run = existing.peer_instance == link.peer_instance;
                    let keep_existing =
                        same_run && existing.dialer != link.dialer && existing.dialer < link.dialer;
                    if keep_existing {
                        return false;
                    }
                    if same_run {
                        // The peer makes the same choice; each end retires
                        // the other link once it has switched.
                        if state.retired.len() >= self.config.max_nodes {
                            let (oldest, _) = state.retired.remove(0);
                            oldest.close();
                            replaced = Some(oldest);
                        }
                        state.retired.push((existing, Instant::now()));
                    } else {
                        // A restarted peer: its old link is dead.
                        existing.close();
                        replaced = Some(existing);
                    }
                }
            }
            state.links.insert(link.peer, link.clone());
            // The new neighbour learns everything this node knows at once.
            let mut adverts = BytesMut::new();
            for advert in state.db.adverts() {
                if encode_json(Kind::Advert, advert, &mut adverts).is_err() {
                    tracing::error!(origin = advert.origin, "advert too large to send");
                }
            }
            link.send_control(adverts.freeze());
            self.readvertise(&mut state);
            replaced
        };
        if let Some(old) = replaced {
            self.fail_streams(&old, "replaced by a newer link");
        }
        true
    }

    /// Floods a new advert of this node's live links and recomputes routes.
    fn readvertise(&self, state: &mut State) {
        state.sequence += 1;
        let advert = LinkAdvert {
            origin: self.local.id,
            addr: self.local.addr.clone(),
            sequence: state.sequence,
            neighbors: state
                .links
                .values()
                .filter(|l| !l.is_closed())
                .map(|l| l.peer)
                .collect(),
        };
        state.db.apply(advert.clone());
        self.flood(state, &advert, None);
        self.recompute(state);
    }

    fn flood(&self, state: &State, advert: &LinkAdvert, except: Option<NodeId>) {
        let mut frame = BytesMut::new();
        if encode_json(Kind::Advert, advert, &mut frame).is_err() {
            return;
        }
        let frame = frame.freeze();
        for link in state.links.values() {
            if Some(link.peer) != except && !link.send_control(frame.clone()) && !link.is_closed() {
                tracing::warn!(peer = link.peer, "advert dropped: control backlog full");
            }
        }
    }

    fn recompute(&self, state: &mut State) {
        let table = RoutingTable::compute(self.local.id, &state.db);
        if table != state.table {
            tracing::info!(
                routes = ?table.routes().map(|r| (r.dest, r.next_hop, r.hops)).collect::<Vec<_>>(),
                "routes changed"
            );
            state.table = table;
        }
        self.version.send_modify(|v| *v += 1);
    }

    fn on_advert(&self, from: &Arc<Link>, advert: LinkAdvert) {
        let mut state = self.write();
        if advert.origin == self.local.id {
            // An advert of this node's previous run: outbid it.
            if advert.sequence >= state.sequence {
                state.sequence = advert.sequence;
                self.readvertise(&mut state);
            }
            return;
        }
        // Adverts are flooded from anywhere: the database holds at most one
        // per member, and no more members than a cluster may have.
        if state.db.get(advert.origin).is_none() && state.db.len() >= self.config.max_nodes {
            tracing::warn!(
                origin = advert.origin,
                "dropping an advert: {} nodes known already",
                self.config.max_nodes
            );
            return;
        }
        if state.db.apply(advert.clone()) {
            self.flood(&state, &advert, Some(from.peer));
            self.recompute(&mut state);
        }
    }

    /// Takes `link` out of service: new routes, and every stream on it
    /// failed or aborted so nobody waits for the timeout.
    fn link_down(&self, link: &Arc<Link>, reason: &str) {
        let first = link.close();
        {
            let mut state = self.write();
            if state
                .links
                .get(&link.peer)
                .is_some_and(|l| Arc::ptr_eq(l, link))
            {
                state.links.remove(&link.peer);
                if !self.stopped() {
                    self.readvertise(&mut state);
                }
                tracing::warn!(peer = link.peer, addr = %link.peer_addr, "link down: {reason}");
            }
        }
        if first {
            self.fail_streams(link, reason);
        }
    }

    fn fail_streams(&self, link: &Arc<Link>, reason: &str) {
        let why = format!(
            "link from node {} to node {} lost: {reason}",
            self.local.id, link.peer
        );
        let pending = lock(&link.outbound).drain();
        for entry in pending {
            match entry {
                Pending::Local { reply, .. } => {
                    let _ = reply.send(Err(why.clone()));
                }
                Pending::Forward {
                    up,
                    up_stream,
                    dest,
                    started,
                    ..
                } => {
                    let why = format!("{} is unreachable: {why}", self.name(dest));
                    self.fail_upstream(&up, up_stream, started, &why)
                }
            }
        }
        // Nobody is left to take the answers to the peer's requests: the
        // ones passing through stop further on, the ones running here stop.
        let inbound: Vec<Inbound> = lock(&link.inbound).drain().map(|(_, v)| v).collect();
        for entry in inbound {
            if let Inbound::Forward { down, down_stream } = entry {
                down.withdraw(down_stream);
            }
        }
        link.stop_all_local();
    }

    /// Tells `up` its stream failed: an error answer if nothing of the answer
    /// went back yet, else an abort of the half-sent answer.
    fn fail_upstream(&self, up: &Arc<Link>, up_stream: u32, started: bool, why: &str) {
        forget_forward(up, up_stream);
        if started {
            up.send_abort(Kind::AbortResponse, up_stream);
        } else {
            let answer = encode_answer(&error(Status::NodeUnreachable, why.to_string()));
            let mut header = LinkHeader::control(Kind::Response, 0);
            header.stream = up_stream;
            header.origin = self.local.id;
            up.send_message(header, answer);
        }
    }

    async fn read_loop(
        self: Arc<Self>,
        link: &Arc<Link>,
        frames: &mut FramedRead<OwnedReadHalf, LinkCodec>,
    ) -> Result<(), FabricError> {
        loop {
            let frame = tokio::select! {
                frame = frames.next() => frame,
                _ = link.closed() => return Ok(()),
            };
            let Some(frame) = frame else {
                return Ok(());
            };
            let frame = frame?;
            link.heard();
            self.on_frame(link, frame)?;
        }
    }

    fn on_frame(self: &Arc<Self>, link: &Arc<Link>, frame: LinkFrame) -> Result<(), FabricError> {
        let LinkFrame { header, payload } = frame;
        match header.kind {
            Kind::Keepalive => Ok(()),
            Kind::Credit => {
                let (control, data) = decode_credit(&payload)?;
                link.add_credits(control, data)
            }
            Kind::Hello => Err(FabricError::BadLinkFrame {
                reason: "a second Hello".into(),
            }),
            Kind::Advert => {
                let advert: LinkAdvert = decode_json(Kind::Advert, &payload)?;
                if advert.neighbors.len() > crate::MAX_MEMBERS {
                    return Err(FabricError::BadLinkFrame {
                        reason: format!("advert lists {} neighbours", advert.neighbors.len()),
                    });
                }
                self.on_advert(link, advert);
                Ok(())
            }
            Kind::Request => {
                link.receive(header.channel, payload.len())?;
                self.on_request_fragment(link, header, payload)
            }
            Kind::Response => {
                link.receive(header.channel, payload.len())?;
                self.on_response_fragment(link, header, payload);
                Ok(())
            }
            Kind::AbortRequest => {
                let entry = lock(&link.inbound).remove(&header.stream);
                if let Some(Inbound::Forward { down, down_stream }) = entry {
                    down.withdraw(down_stream);
                }
                link.stop_local(header.stream);
                Ok(())
            }
            Kind::AbortResponse => {
                let entry = lock(&link.outbound).remove(header.stream);
                match entry {
                    Some(Pending::Local { reply, .. }) => {
                        let _ = reply.send(Err(format!("node {} broke off the answer", link.peer)));
                    }
                    Some(Pending::Forward { up, up_stream, .. }) => {
                        forget_forward(&up, up_stream);
                        up.send_abort(Kind::AbortResponse, up_stream);
                    }
                    None => {}
                }
                Ok(())
            }
        }
    }

    fn release(link: &Arc<Link>, channel: Channel) -> Option<Release> {
        Some(Release {
            link: link.clone(),
            channel,
        })
    }

    fn on_request_fragment(
        self: &Arc<Self>,
        link: &Arc<Link>,
        header: LinkHeader,
        payload: Bytes,
    ) -> Result<(), FabricError> {
        let stream = header.stream;
        let mut inbound = lock(&link.inbound);
        if header.is_first() {
            if inbound.contains_key(&stream) {
                return Err(FabricError::BadLinkFrame {
                    reason: format!("node {} reopened stream {stream:#x}", link.peer),
                });
            }
            // Streams run here or forwarded are bounded by permits and tags;
            // this bounds the refused ones a peer leaves open too.
            if inbound.len() >= 2 * self.config.max_streams_per_link {
                return Err(FabricError::BadLinkFrame {
                    reason: format!(
                        "node {} has {} request streams open, the limit is {}",
                        link.peer,
                        inbound.len(),
                        2 * self.config.max_streams_per_link
                    ),
                });
            }
            let entry = self.open_inbound(link, &header);
            inbound.insert(stream, entry);
        }
        let Some(entry) = inbound.get_mut(&stream) else {
            // The stream was dropped (its link closed, or it timed out).
            drop(inbound);
            link.release(header.channel);
            return Ok(());
        };
        match entry {
            Inbound::Local { buf, .. } => {
                if buf.len() + payload.len() > MAX_MESSAGE_BYTES {
                    return Err(FabricError::BadLinkFrame {
                        reason: format!(
                            "request stream {stream:#x} exceeds {MAX_MESSAGE_BYTES} bytes"
                        ),
                    });
                }
                buf.extend_from_slice(&payload);
                link.release(header.channel);
                if header.is_last() {
                    if let Some(Inbound::Local { buf, permit }) = inbound.remove(&stream) {
                        drop(inbound);
                        // Only on a link with no other request of the
                        // peer's here: with more, the runner task runs
                        // them beside this reader (on the other core),
                        // which a busy link needs for its throughput.
                        let poll_first = is_page_request(&buf) && link.local_requests() <= 1;
                        let job = self.clone().serve_local(link.clone(), header, buf, permit);
                        link.run_local(stream, job, poll_first);
                    }
                }
            }
            Inbound::Forward { down, down_stream } => {
                let down = down.clone();
                let down_stream = *down_stream;
                let mut forwarded = header;
                forwarded.stream = down_stream;
                forwarded.hops = header.hops.saturating_add(1);
                // The entry stays after the request's last fragment, until
                // its answer ends: an abort from upstream must still find
                // the stream downstream.
                let sent = down.send(OutFragment {
                    header: forwarded,
                    payload,
                    release: Self::release(link, header.channel),
                });
                if !sent {
                    // The next link died under the stream. Unless its
                    // failure was already reported upstream, report it now,
                    // and drop the rest of the request.
                    if header.is_last() {
                        inbound.remove(&stream);
                    } else {
                        inbound.insert(stream, Inbound::Discard);
                    }
                    drop(inbound);
                    // Taken out first: fail_upstream locks this link's
                    // inbound table, never while down's outbound is held.
                    let removed = lock(&down.outbound).remove(down_stream);
                    if let Some(Pending::Forward { dest, started, .. }) = removed {
                        let why = format!(
                            "{} is unreachable: link from node {} to node {} closed",
                            self.name(dest),
                            self.local.id,
                            down.peer
                        );
                        self.fail_upstream(link, stream, started, &why);
                    }
                }
            }
            Inbound::Discard => {
                if header.is_last() {
                    inbound.remove(&stream);
                }
                drop(inbound);
                link.release(header.channel);
            }
        }
        Ok(())
    }

    /// Decides what becomes of a new request stream: run here, forward under a
    /// tag of the next link, or answer with an error at once.
    fn open_inbound(self: &Arc<Self>, link: &Arc<Link>, header: &LinkHeader) -> Inbound {
        let refuse = |status: Status, message: String| {
            let mut answer_header = LinkHeader::control(Kind::Response, 0);
            answer_header.stream = header.stream;
            answer_header.origin = header.origin;
            answer_header.flow = header.flow;
            link.send_message(answer_header, encode_answer(&error(status, message)));
            Inbound::Discard
        };
        if header.dest == self.local.id {
            return match link.local_permits.clone().try_acquire_owned() {
                Ok(permit) => Inbound::Local {
                    buf: BytesMut::new(),
                    permit,
                },
                Err(_) => refuse(
                    Status::Busy,
                    format!(
                        "node {} has {} requests from node {} running, the limit",
                        self.local.id, self.config.max_streams_per_link, link.peer
                    ),
                ),
            };
        }
        let next_hops = header.hops.saturating_add(1);
        if let Err(Response::Error { status, message }) =
            crate::check_hops(next_hops, self.config.max_hops)
        {
            return refuse(status, message);
        }
        let down = {
            let state = self.read();
            state
                .table
                .route(header.dest)
                .and_then(|route| state.links.get(&route.next_hop).cloned())
                .filter(|down| !down.is_closed())
        };
        let Some(down) = down else {
            return refuse(
                Status::NodeUnreachable,
                format!(
                    "{} is unreachable from node {}: no live path to it",
                    self.name(header.dest),
                    self.local.id
                ),
            );
        };
        let tag = lock(&down.outbound).insert(Pending::Forward {
            up: link.clone(),
            up_stream: header.stream,
            dest: header.dest,
            started: false,
            created: Instant::now(),
        });
        match tag {
            Some(down_stream) => Inbound::Forward { down, down_stream },
            None => refuse(
                Status::Busy,
                format!(
                    "link from node {} to node {} has {} requests in flight, the limit",
                    self.local.id, down.peer, self.config.max_streams_per_link
                ),
            ),
        }
    }

    fn on_response_fragment(&self, link: &Arc<Link>, header: LinkHeader, payload: Bytes) {
        let mut outbound = lock(&link.outbound);
        let Some(entry) = outbound.get_mut(header.stream) else {
            // Its requester gave up (timeout) or its upstream link died.
            drop(outbound);
            link.release(header.channel);
            return;
        };
        match entry {
            Pending::Local {
                pieces, len_bytes, ..
            } => {
                let too_big = *len_bytes + payload.len() > MAX_MESSAGE_BYTES
                    || pieces.len() >= quarry_proto::MAX_RELAYED_PIECES;
                if !too_big {
                    // Kept as it arrived: the entry node passes the pieces
                    // on, it does not gather them into one buffer.
                    *len_bytes += payload.len();
                    pieces.push(payload);
                }
                if header.is_last() || too_big {
                    if let Some(Pending::Local { pieces, reply, .. }) =
                        outbound.remove(header.stream)
                    {
                        let result = if too_big {
                            Err(format!(
                                "answer from node {} exceeds {MAX_MESSAGE_BYTES} bytes",
                                link.peer
                            ))
                        } else {
                            Ok(pieces)
                        };
                        let _ = reply.send(result);
                    }
                }
                drop(outbound);
                link.release(header.channel);
            }
            Pending::Forward {
                up,
                up_stream,
                started,
                ..
            } => {
                *started = true;
                let up = up.clone();
                let up_stream = *up_stream;
                let mut forwarded = header;
                forwarded.stream = up_stream;
                if header.is_last() {
                    outbound.remove(header.stream);
                }
                drop(outbound);
                if header.is_last() {
                    forget_forward(&up, up_stream);
                }
                up.send(OutFragment {
                    header: forwarded,
                    payload,
                    release: Self::release(link, header.channel),
                });
            }
        }
    }

    /// Runs a request that arrived over `link` for this node and sends its
    /// answer back on the same stream.
    async fn serve_local(
        self: Arc<Self>,
        link: Arc<Link>,
        header: LinkHeader,
        message: BytesMut,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let answer: Answer = match decode_frame(message) {
            Err(reason) => error(Status::BadRequest, format!("malformed request: {reason}")).into(),
            Ok(frame) if frame.header.version != PROTOCOL_VERSION => error(
                Status::UnsupportedVersion,
                format!(
                    "protocol version {} is not spoken here ({PROTOCOL_VERSION} is)",
                    frame.header.version
                ),
            )
            .into(),
            Ok(frame) => match decode_request(&frame) {
                Err(e) => error(Status::BadRequest, e.to_string()).into(),
                Ok(Request::Routes(_)) => Response::Routes(Box::new(
                    Fabric {
                        inner: self.clone(),
                    }
                    .routes(),
                ))
                .into(),
                Ok(request) => {
                    // A request that changes something runs to its end once
                    // started, withdrawn or not: dropping it half-way could
                    // leave half a change. One that only reads stops.
                    if !is_idempotent(&request) {
                        link.keep_local(header.stream);
                    }
                    (self.handler)(request).await
                }
            },
        };
        link.keep_local(header.stream);
        drop(permit);
        let mut answer_header = LinkHeader::control(Kind::Response, 0);
        answer_header.stream = header.stream;
        answer_header.origin = header.origin;
        answer_header.flow = header.flow;
        // A page or a reply body goes back as the bytes the handler holds,
        // in pieces of its own: not copied into a frame here.
        link.send_pieces(answer_header, answer.frame_pieces(0));
    }

    /// Closes the retired links that carry no stream any more (after a
    /// grace of `dead_after`, so the peer has switched to the new link), or
    /// that have been retired for the longest a stream may take.
    fn close_retired_links(&self) {
        let done: Vec<Arc<Link>> = {
            let mut state = self.write();
            let grace = self.config.dead_after;
            let longest = self.config.request_timeout * 2;
            let mut done = Vec::new();
            state.retired.retain(|(link, since)| {
                let age = since.elapsed();
                // Requests of the peer running here answer on this link
                // too: closing it would drop them, or lose a write's answer.
                let idle = link.in_flight() == 0
                    && lock(&link.inbound).is_empty()
                    && link.local_requests() == 0;
                let finished = link.is_closed() || (idle && age >= grace) || age >= longest;
                if finished {
                    done.push(link.clone());
                }
                !finished
            });
            done
        };
        for link in done {
            self.link_down(&link, "replaced by a newer link");
        }
    }

    /// Declares silent links dead and drops forwarded streams whose answer is
    /// long overdue, so no table grows with a peer that stopped answering.
    async fn housekeeping(self: Arc<Self>) {
        let mut stop = self.stop.subscribe();
        let tick = self.config.keepalive_interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = stop.changed() => return,
            }
            self.close_retired_links();
            let links: Vec<Arc<Link>> = self.read().links.values().cloned().collect();
            for link in links {
                let silent = link.silent_for();
                if silent > self.config.dead_after {
                    self.link_down(
                        &link,
                        &format!("nothing heard for {} ms", silent.as_millis()),
                    );
                    continue;
                }
                let stale = lock(&link.outbound).stale_forwards(self.config.request_timeout * 2);
                for tag in stale {
                    let entry = lock(&link.outbound).remove(tag);
                    if let Some(Pending::Forward {
                        up,
                        up_stream,
                        dest,
                        started,
                        ..
                    }) = entry
                    {
                        let why = format!(
                            "{} did not answer in time (forwarded by node {} via node {})",
                            self.name(dest),
                            self.local.id,
                            link.peer
                        );
                        self.fail_upstream(&up, up_stream, started, &why);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_warned_of_once_a_minute_and_the_memory_is_bounded() {
        let mut logged = BTreeMap::new();
        let start = Instant::now();
        assert!(refusal_due_warning(&mut logged, "other cluster", start));
        let later = start + Duration::from_millis(500);
        assert!(!refusal_due_warning(&mut logged, "other cluster", later));
        assert!(refusal_due_warning(&mut logged, "wrong id", later));
        let after_a_minute = start + REFUSAL_WARNING_INTERVAL;
        assert!(refusal_due_warning(
            &mut logged,
            "other cluster",
            after_a_minute
        ));
        for i in 0..3 * MAX_REFUSALS_LOGGED {
            assert!(refusal_due_warning(
                &mut logged,
                &format!("reason {i}"),
                after_a_minute
            ));
            assert!(logged.len() <= MAX_REFUSALS_LOGGED);
        }
    }
}
