//! The memcached face: every node listens on a memcached port, parses the
//! text and meta protocols (`quarry-memcache`), and runs each pipeline of
//! commands as one batch of key-value operations split per node (Minerva's
//! batching): its own keys in this process, the others' over the fabric.
//! With tenants configured, a connection authenticates first with
//! memcached's ASCII authentication (`set <any> 0 0 <n>` carrying
//! `user secret`) and sees only its tenant's keys.

mod plan;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quarry_kv::KvNode;
use quarry_kv_api::{
    now_unix_secs, Expiry, KvCall, KvCluster, KvError, KvOp, KvReply, KvTransport, TenantName,
    DEFAULT_TENANT,
};
use quarry_memcache::{Command, CommandReader, Limits, Parsed, Reply, StoreOp};
use quarry_proto::{NodeId, Request, Response, Service, ServiceCall};
use quarry_store::VolumeTableStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use plan::{answer, op_count, plan, plan_get, Step};

use crate::node::NodePeers;

/// Operations run as one batch before their answers are written: it bounds
/// what one connection's answers hold in memory (at most this many items
/// of at most 1 MiB), and a longer pipeline runs as several batches.
const MAX_BATCH_OPS: usize = 128;

/// Bytes read from a socket at a time.
const READ_BYTES: usize = 64 << 10;

/// The version `version` answers: memcached's whose protocol this speaks,
/// so clients that check for features find them.
const VERSION: &str = "1.6.18";

/// A node's memcached face.
pub(crate) struct Face {
    id: NodeId,
    /// Members placement always counts: the configured ones, so a key is
    /// never placed elsewhere because its node is down or not yet found
    /// (a restarted node's fabric finds its peers a moment after it
    /// serves); those found since are added.
    configured: Vec<NodeId>,
    kv: Arc<KvNode<VolumeTableStore>>,
    peers: Arc<NodePeers>,
    limits: Limits,
    started: Instant,
    curr_connections: AtomicU64,
    total_connections: AtomicU64,
    auth_cmds: AtomicU64,
    auth_errors: AtomicU64,
}

/// Reaches the key-value service of any node from this one: its own in
/// this process, the others' as fabric calls.
pub(crate) struct NodeKv {
    id: NodeId,
    kv: Arc<KvNode<VolumeTableStore>>,
    peers: Arc<NodePeers>,
}

impl KvTransport for NodeKv {
    async fn call(&self, node: NodeId, call: KvCall) -> quarry_kv_api::Result<KvReply> {
        if node == self.id {
            return Ok(self.kv.call(call).await);
        }
        let request = Request::Call(Box::new(ServiceCall {
            node,
            service: Service::Kv,
            idempotent: false,
            body: call.encode(),
        }));
        let transport = |message: String| KvError::Transport { node, message };
        match self.peers.request(node, request).await.map_err(transport)? {
            Response::Reply(body) => KvReply::decode(&body),
            Response::Error { status, message } => Err(transport(format!("{status:?}: {message}"))),
            other => Err(transport(format!(
                "answered a key-value call with {other:?}"
            ))),
        }
    }
}

type Tables = KvCluster<NodeKv>;

impl Face {
    /// `configured`: the members this node's configuration names (itself
    /// and its peers).
    pub(crate) fn new(
        id: NodeId,
        kv: Arc<KvNode<VolumeTableStore>>,
        peers: Arc<NodePeers>,
        configured: Vec<NodeId>,
    ) -> Arc<Self> {
        Arc::new(Self {
            id,
            configured,
            kv,
            peers,
            limits: Limits::default(),
            started: Instant::now(),
            curr_connections: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            auth_cmds: AtomicU64::new(0),
            auth_errors: AtomicU64::new(0),
        })
    }

    fn tables(&self, tenant: TenantName, secret: Bytes) -> Result<Tables, KvError> {
        let transport = NodeKv {
            id: self.id,
            kv: Arc::clone(&self.kv),
            peers: Arc::clone(&self.peers),
        };
        let mut members = self.peers.members();
        members.extend(&self.configured);
        members.sort_unstable();
        members.dedup();
        KvCluster::new(members, Arc::new(transport), tenant, secret)
    }

    /// memcached's ASCII authentication: a `set` whose value is `user
    /// secret`.
    fn authenticate(&self, command: &Command) -> Result<Tables, &'static [u8]> {
        let Command::Store(s) = command else {
            return Err(b"CLIENT_ERROR unauthenticated\r\n");
        };
        if s.op != StoreOp::Set {
            return Err(b"CLIENT_ERROR unauthenticated\r\n");
        }
        self.auth_cmds.fetch_add(1, Ordering::Relaxed);
        let Some(space) = s.data.iter().position(|&b| b == b' ') else {
            self.auth_errors.fetch_add(1, Ordering::Relaxed);
            return Err(b"CLIENT_ERROR bad authentication token format\r\n");
        };
        let user = std::str::from_utf8(&s.data[..space]).unwrap_or("");
        let secret = s.data.slice(space + 1..);
        match self.kv.authenticate(user, &secret) {
            Ok(tenant) => self
                .tables(tenant, secret)
                .map_err(|_| &b"SERVER_ERROR cannot reach the cluster\r\n"[..]),
            Err(_) => {
                self.auth_errors.fetch_add(1, Ordering::Relaxed);
                Err(b"CLIENT_ERROR authentication failure\r\n")
            }
        }
    }
}

/// Accepts memcached connections until `stop`, handing each to one of a
/// few event-loop threads (one per core, as memcached's workers): a
/// connection's requests then run start to end on one thread, with no
/// wake-up of another thread between reading a request and answering it.
pub(crate) async fn serve(
    listener: TcpListener,
    face: Arc<Face>,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(Semaphore::new(max_connections));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut loops = Vec::with_capacity(threads);
    for i in 0..threads {
        match event_loop(i, Arc::clone(&face)) {
            Ok(tx) => loops.push(tx),
            Err(e) => tracing::error!("cannot start memcached event loop {i}: {e}"),
        }
    }
    if loops.is_empty() {
        return;
    }
    let mut next = 0usize;
    loop {
        tokio::select! {
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("memcached accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = open.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "refusing memcached connection: {max_connections} open");
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let Ok(stream) = stream.into_std() else { continue };
                next = (next + 1) % loops.len();
                if loops[next].send((stream, permit)).is_err() {
                    tracing::warn!(%peer, "memcached event loop {next} has stopped");
                }
            }
        }
    }
    // Dropping the senders ends every event loop and its connections.
}

type Handover = (std::net::TcpStream, tokio::sync::OwnedSemaphorePermit);

/// Starts event loop `i`: a thread with a runtime of its own that serves
/// the connections it is handed until the sender is dropped.
fn event_loop(
    i: usize,
    face: Arc<Face>,
) -> std::io::Result<tokio::sync::mpsc::UnboundedSender<Handover>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Unbounded in type only: each handover holds one of the node's
    // connection permits, so at most `max_connections` wait here.
    let (tx, mut bridge_rx) = tokio::sync::mpsc::unbounded_channel::<Handover>();
    std::thread::Builder::new()
        .name(format!("memcached-{i}"))
        .spawn(move || {
            runtime.block_on(async move {
                let mut connections = JoinSet::new();
                loop {
                    tokio::select! {
                        Some(_) = connections.join_next(), if !connections.is_empty() => {}
                        handed = bridge_rx.recv() => {
                            let Some((stream, permit)) = handed else { break };
                            let face = Arc::clone(&face);
                            connections.spawn(async move {
                                let peer = stream.peer_addr().ok();
                                face.curr_connections.fetch_add(1, Ordering::Relaxed);
                                face.total_connections.fetch_add(1, Ordering::Relaxed);
                                let served = match TcpStream::from_std(stream) {
                                    Ok(s) => connection(s, &face).await,
                                    Err(e) => Err(e),
                                };
                                if let Err(e) = served {
                                    tracing::debug!(?peer, "memcached connection closed: {e}");
                                }
                                face.curr_connections.fetch_sub(1, Ordering::Relaxed);
                                drop(permit);
                            });
                        }
                    }
                }
                connections.abort_all();
            });
        })?;
    Ok(tx)
}

/// Operations of a pipeline waiting to run, and how to answer each command.
#[derive(Default)]
struct Batch {
    ops: Vec<KvOp>,
    steps: Vec<Step>,
}

impl Batch {
    /// Runs the waiting operations and writes every waiting answer.
    async fn run(&mut self, tables: Option<&Tables>, now: u64, out: &mut BytesMut) {
        let ops = std::mem::take(&mut self.ops);
        let answers = match (tables, ops.is_empty()) {
            (_, true) => Vec::new(),
            (Some(t), false) => t.run(ops).await,
            (None, false) => Vec::new(),
        };
        let mut at = 0;
        for step in self.steps.drain(..) {
            let n = op_count(&step);
            let end = (at + n).min(answers.len());
            answer(step, &answers[at.min(end)..end], now, out);
            at += n;
        }
    }
}

/// What a connection does after a command that is not a key operation.
enum After {
    Go,
    Close,
}

async fn connection(mut stream: TcpStream, face: &Face) -> std::io::Result<()> {
    let mut reader = CommandReader::new(face.limits);
    let mut input = BytesMut::with_capacity(READ_BYTES);
    let mut out = BytesMut::new();
    let mut tables = if face.kv.requires_auth() {
        None
    } else {
        TenantName::new(DEFAULT_TENANT)
            .ok()
            .and_then(|t| face.tables(t, Bytes::new()).ok())
    };
    loop {
        input.reserve(READ_BYTES);
        if stream.read_buf(&mut input).await? == 0 {
            return Ok(());
        }
        let now = now_unix_secs();
        let mut batch = Batch::default();
        let mut close = false;
        loop {
            let command = match reader.read(&mut input) {
                Parsed::Incomplete => break,
                Parsed::Complete { command, .. } => command,
                Parsed::Invalid(rejection) => {
                    batch.run(tables.as_ref(), now, &mut out).await;
                    if let Some(reply) = rejection.reply() {
                        out.extend_from_slice(reply);
                    }
                    if rejection.close {
                        close = true;
                        break;
                    }
                    continue;
                }
            };
            let Some(t) = &tables else {
                match face.authenticate(&command) {
                    Ok(t) => {
                        tables = Some(t);
                        out.extend_from_slice(b"STORED\r\n");
                    }
                    Err(reply) => out.extend_from_slice(reply),
                }
                continue;
            };
            if let Some(after) = special(face, t, &command, &mut batch, now, &mut out).await {
                if let After::Close = after {
                    close = true;
                    break;
                }
                continue;
            }
            let planned = match command {
                Command::Get(get) => plan_get(get, now, MAX_BATCH_OPS),
                other => {
                    let mut ops = Vec::with_capacity(1);
                    let step = plan(other, now, &mut ops);
                    vec![(ops, step)]
                }
            };
            for (ops, step) in planned {
                batch.ops.extend(ops);
                batch.steps.push(step);
                if batch.ops.len() >= MAX_BATCH_OPS {
                    batch.run(tables.as_ref(), now, &mut out).await;
                    stream.write_all(&out).await?;
                    out.clear();
                }
            }
        }
        batch.run(tables.as_ref(), now, &mut out).await;
        stream.write_all(&out).await?;
        out.clear();
        if close {
            return Ok(());
        }
    }
}

/// Runs a command that is not an operation on keys (after the operations
/// before it), or returns None for one that is.
async fn special(
    face: &Face,
    tables: &Tables,
    command: &Command,
    batch: &mut Batch,
    now: u64,
    out: &mut BytesMut,
) -> Option<After> {
    let reply = |r: Reply, out: &mut BytesMut| r.encode(out);
    match command {
        Command::Quit => {
            batch.run(Some(tables), now, out).await;
            Some(After::Close)
        }
        Command::Version => {
            batch.run(Some(tables), now, out).await;
            reply(Reply::Version(Bytes::from_static(VERSION.as_bytes())), out);
            Some(After::Go)
        }
        Command::Verbosity { noreply, .. } => {
            batch.run(Some(tables), now, out).await;
            if !noreply {
                reply(Reply::Ok, out);
            }
            Some(After::Go)
        }
        Command::FlushAll { delay, noreply } => {
            batch.run(Some(tables), now, out).await;
            let at = match delay {
                Some(d) if *d > 0 => match quarry_memcache::expiry_unix_secs(*d, now) {
                    quarry_memcache::Expiry::At(t) => Expiry::At(t),
                    quarry_memcache::Expiry::Never => Expiry::Never,
                },
                _ => Expiry::Never,
            };
            let r = match tables.flush_all(at).await {
                Ok(()) => Reply::Ok,
                Err(e) => Reply::server_error(&e.to_string().replace(['\r', '\n'], " ")),
            };
            if !noreply {
                reply(r, out);
            }
            Some(After::Go)
        }
        Command::Stats { args } => {
            batch.run(Some(tables), now, out).await;
            stats(face, tables, args, now, out).await;
            Some(After::Go)
        }
        _ => None,
    }
}

/// `stats`: memcached's general figures for this connection's tenant,
/// summed over the nodes, and its dedup figures.
async fn stats(face: &Face, tables: &Tables, args: &[Bytes], now: u64, out: &mut BytesMut) {
    if !args.is_empty() {
        // Groups (settings, items, slabs, ...) describe memcached's slab
        // allocator, which this store does not have.
        Reply::Error.encode(out);
        return;
    }
    let figures = match tables.figures().await {
        Ok(f) => f,
        Err(e) => {
            Reply::server_error(&e.to_string().replace(['\r', '\n'], " ")).encode(out);
            return;
        }
    };
    let mut stat = |name: &str, value: String| {
        Reply::Stat {
            name: Bytes::copy_from_slice(name.as_bytes()),
            value: Bytes::from(value),
        }
        .encode(out)
    };
    stat("pid", std::process::id().to_string());
    stat("uptime", face.started.elapsed().as_secs().to_string());
    stat("time", now.to_string());
    stat("version", VERSION.to_string());
    stat("tenant", tables.tenant().to_string());
    stat("nodes", figures.by_node.len().to_string());
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    stat("curr_connections", c(&face.curr_connections));
    stat("total_connections", c(&face.total_connections));
    stat("auth_cmds", c(&face.auth_cmds));
    stat("auth_errors", c(&face.auth_errors));
    for (name, value) in &figures.total {
        stat(name, value.to_string());
    }
    stat("dedup_ratio", format!("{:.3}", figures.dedup_ratio()));
    Reply::End.encode(out);
}
