use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry_device::{Device, DeviceError};
use quarry_fabric::{check_hops, Fabric, LocalHandler, LINK_MAGIC};
use quarry_kernels::{Engine, LocalData, ManagedData};
use quarry_kv::KvNode;
use quarry_proto::{
    serve_connection_with, Answer, Incoming, NodeEntry, NodeId, NodeInfo, Request, Response,
    Service, SessionLimits, Status,
};
use quarry_store::{
    open_volume_node, VolumeNodeStore, VolumeStoreConfig, VolumeTableConfig, VolumeTableStore,
};
use quarry_volume::{SpaceManager, VolumeRegistry};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use crate::{NodeConfig, NodeError, StorageMode};

/// What runs requests addressed to this node: its device, its managed
/// storage when it has one, and its identity.
struct LocalService {
    id: NodeId,
    cluster: String,
    addr: String,
    started: Instant,
    device: Arc<Device>,
    managed: Option<Managed>,
    /// The compute engine: commands that enter here, and local runs of
    /// kernels over what this node holds.
    engine: Arc<Engine<NodePeers>>,
}

/// The cluster as this node's compute engine reaches it: its own services
/// directly, every other node through the fabric. Both are set once the
/// node is assembled (the fabric needs the local service first).
#[derive(Default)]
pub(crate) struct NodePeers {
    id: NodeId,
    local: std::sync::OnceLock<std::sync::Weak<LocalService>>,
    fabric: std::sync::OnceLock<Fabric>,
}

impl NodePeers {
    /// The members this node knows now.
    pub(crate) fn members(&self) -> Vec<NodeId> {
        quarry_kernels::Peers::members(self)
    }

    pub(crate) async fn request(&self, node: NodeId, request: Request) -> Result<Response, String> {
        if node == self.id {
            let local = self
                .local
                .get()
                .and_then(std::sync::Weak::upgrade)
                .ok_or_else(|| format!("node {node} is shutting down"))?;
            return Ok(local.serve(request).await);
        }
        let fabric = self
            .fabric
            .get()
            .ok_or_else(|| format!("node {} has no fabric yet", self.id))?;
        Ok(fabric.route(node, request, 0, 0).await)
    }
}

impl quarry_kernels::Peers for NodePeers {
    async fn call(
        &self,
        node: NodeId,
        service: Service,
        idempotent: bool,
        body: bytes::Bytes,
    ) -> Result<bytes::Bytes, String> {
        let call = quarry_proto::ServiceCall {
            node,
            service,
            idempotent,
            body,
        };
        match self.request(node, Request::Call(Box::new(call))).await? {
            Response::Reply(answer) => Ok(answer),
            Response::Error { status, message } => Err(format!("{status:?}: {message}")),
            other => Err(format!("answered a call with {other:?}")),
        }
    }

    async fn geometry(&self, node: NodeId) -> Result<quarry_device::Geometry, String> {
        match self.request(node, Request::NodeInfo(node)).await? {
            Response::NodeInfo(info) => Ok(info.device.geometry),
            Response::Error { status, message } => Err(format!("{status:?}: {message}")),
            other => Err(format!("answered node info with {other:?}")),
        }
    }

    fn members(&self) -> Vec<NodeId> {
        match self.fabric.get() {
            Some(f) => f.members().into_iter().map(|m| m.id).collect(),
            None => vec![self.id],
        }
    }
}

/// A node's managed storage: the space manager that owns the device, the
/// object store on it and the registry of the block volumes it holds.
struct Managed {
    volume: Arc<SpaceManager>,
    store: Arc<VolumeNodeStore>,
    volumes: Arc<VolumeRegistry>,
    kv: Arc<KvNode<VolumeTableStore>>,
}

impl LocalService {
    fn refuse_raw_write(&self, what: &str) -> Option<Response> {
        self.managed.as_ref().map(|_| Response::Error {
            status: Status::BadRequest,
            message: format!(
                "node {} runs managed storage: its space manager owns the device, so a raw \
                 {what} would corrupt the data kept there (raw page reads are allowed; start \
                 the node with storage mode \"raw\" to program and erase pages directly)",
                self.id
            ),
        })
    }

    /// [`Self::serve`], with an object-store call's answer in the pieces
    /// it was read in (a chunk's pages, not joined into one buffer here).
    async fn serve_answer(self: Arc<Self>, request: Request) -> Answer {
        match request {
            Request::Call(call) if call.service == Service::Store => match &self.managed {
                Some(m) => {
                    Answer::ReplyPieces(quarry_store::serve_call_pieces(&m.store, call.body).await)
                }
                None => self.serve(Request::Call(call)).await.into(),
            },
            request => self.serve(request).await.into(),
        }
    }

    async fn serve(self: Arc<Self>, request: Request) -> Response {
        match request {
            Request::ProgramPage { .. } | Request::EraseBlock(_) if self.managed.is_some() => {
                let what = if matches!(request, Request::EraseBlock(_)) {
                    "erase"
                } else {
                    "program"
                };
                self.refuse_raw_write(what).unwrap_or(Response::Done)
            }
            Request::Call(call) => match (call.service, &self.managed) {
                (Service::Store, Some(m)) => {
                    Response::Reply(quarry_store::serve_call(&m.store, call.body).await)
                }
                (Service::Volume, Some(m)) => Response::Reply(
                    quarry_volume::serve_volume_call(&m.volumes, &m.volume, call.body).await,
                ),
                // Compute runs on raw nodes too: linear targets read raw
                // device pages.
                (Service::Compute, _) => Response::Reply(self.engine.serve_call(call.body).await),
                (Service::Kv, Some(m)) => Response::Reply(m.kv.serve_call(call.body).await),
                (service, None) => Response::Error {
                    status: Status::BadRequest,
                    message: format!(
                        "node {} runs its device raw (storage mode \"raw\"): {service:?} calls \
                         need storage mode \"managed\"",
                        self.id
                    ),
                },
            },
            Request::ReadPage(addr) => match self.device.read_page(addr.page).await {
                Ok(read) => Response::Page {
                    data: read.data,
                    oob: read.oob,
                    erased: read.erased,
                    corrected_bytes: read.corrected_bytes,
                },
                Err(e) => device_error_answer(&e),
            },
            Request::ProgramPage { addr, data, oob } => {
                match self.device.program_page(addr.page, data, oob).await {
                    Ok(()) => Response::Done,
                    Err(e) => device_error_answer(&e),
                }
            }
            Request::EraseBlock(addr) => match self.device.erase_block(addr.block).await {
                Ok(()) => Response::Done,
                Err(e) => device_error_answer(&e),
            },
            Request::NodeInfo(_) => Response::NodeInfo(Box::new(NodeInfo {
                id: self.id,
                cluster: self.cluster.clone(),
                addr: self.addr.clone(),
                uptime_secs: self.started.elapsed().as_secs(),
                device: self.device.info(),
            })),
            Request::Ping => Response::Pong,
            Request::Cluster | Request::Routes(_) => Response::Error {
                status: Status::Internal,
                message: "a fabric request reached the device".to_string(),
            },
        }
    }
}

/// What serves a client connection: this node's own requests, and the fabric
/// for every other node's.
struct NodeCore {
    local: Arc<LocalService>,
    fabric: Fabric,
    max_hops: u8,
}

impl NodeCore {
    async fn dispatch(self: Arc<Self>, incoming: Incoming, flow: u32) -> Answer {
        let Incoming { mut request, hops } = incoming;
        // A client's "entry node" is this node.
        if let Request::Call(call) = &mut request {
            if call.node == quarry_proto::ENTRY_NODE {
                call.node = self.local.id;
            }
        }
        if let Err(refusal) = check_hops(hops, self.max_hops) {
            return refusal.into();
        }
        let dest = match &request {
            Request::Ping => return Response::Pong.into(),
            Request::Cluster => return Response::Cluster(self.fabric.members()).into(),
            Request::ReadPage(addr) => addr.node,
            Request::ProgramPage { addr, .. } => addr.node,
            Request::EraseBlock(addr) => addr.node,
            Request::NodeInfo(node) | Request::Routes(node) => *node,
            Request::Call(call) => call.node,
        };
        if dest != self.local.id {
            // Forwarded under a tag of the link's own; the answer returns
            // here and goes out under the requester's tag, passed on as it
            // arrived (never decoded and encoded again here).
            return self.fabric.relay(dest, request, hops, flow).await;
        }
        if let Request::Routes(_) = request {
            return Response::Routes(Box::new(self.fabric.routes())).into();
        }
        self.local.clone().serve_answer(request).await
    }
}

/// Starts nodes. See [`Node::start`].
pub struct Node;

impl Node {
    /// Opens the device, binds `config.listen` and serves in the background
    /// on the current tokio runtime.
    pub async fn start(config: NodeConfig) -> Result<NodeHandle, NodeError> {
        let listener =
            TcpListener::bind(&config.listen)
                .await
                .map_err(|source| NodeError::Bind {
                    addr: config.listen.clone(),
                    source,
                })?;
        Node::start_with_listener(config, listener).await
    }

    /// Like [`Node::start`] on an already bound listener (`config.listen` is
    /// then only used to name the node). Lets a test or an embedded cluster
    /// bind every node's port first and hand out the addresses before any node
    /// starts.
    pub async fn start_with_listener(
        config: NodeConfig,
        listener: TcpListener,
    ) -> Result<NodeHandle, NodeError> {
        config.validate().map_err(|reason| NodeError::Config {
            path: "<in-memory>".to_string(),
            reason,
        })?;
        let local_addr = listener.local_addr().map_err(|source| NodeError::Bind {
            addr: config.listen.clone(),
            source,
        })?;
        // Advertise the configured address unless it asked for any port.
        let advertised = if config.listen.ends_with(":0") {
            local_addr.to_string()
        } else {
            config.listen.clone()
        };
        std::fs::create_dir_all(&config.data_dir).map_err(|source| NodeError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let device =
            Arc::new(Device::open(&config.device, &config.data_dir).map_err(NodeError::Device)?);
        let neighbors = config
            .peers
            .iter()
            .map(|p| NodeEntry {
                id: p.id,
                addr: p.addr.clone(),
            })
            .collect();
        let managed = open_managed(&config, &device).await?;
        let volume = managed.as_ref().map(|m| m.volume.clone());
        let kv = managed.as_ref().map(|m| m.kv.clone());
        let table_stores = managed.as_ref().map(|m| (m.store.clone(), m.kv.clone()));
        let peers = Arc::new(NodePeers {
            id: config.id,
            ..NodePeers::default()
        });
        let local = local_service(&config, &device, managed, advertised.clone(), &peers)?;
        let _ = peers.local.set(Arc::downgrade(&local));
        let service = local.clone();
        let handler: LocalHandler =
            Arc::new(move |request| Box::pin(service.clone().serve_answer(request)));
        let fabric = Fabric::start(
            NodeEntry {
                id: config.id,
                addr: advertised,
            },
            neighbors,
            config.fabric_config(),
            handler,
        )
        .map_err(NodeError::Fabric)?;
        let _ = peers.fabric.set(fabric.clone());
        let core = Arc::new(NodeCore {
            local,
            fabric: fabric.clone(),
            max_hops: config.limits.max_hops,
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let memcached_addr = match kv {
            Some(kv) => start_kv(&config, kv, &peers, &stop_rx).await?,
            None => None,
        };
        let grace = Duration::from_millis(config.limits.shutdown_grace_ms);
        let task = tokio::spawn(
            accept_loop(
                listener,
                core,
                config.limits.session_limits(),
                config.limits.max_connections,
                stop_rx,
                grace,
            )
            .instrument(tracing::info_span!("node", id = config.id)),
        );
        tracing::info!(id = config.id, addr = %local_addr, "node listening");
        Ok(NodeHandle {
            id: config.id,
            local_addr,
            memcached_addr,
            stop: stop_tx,
            task,
            device,
            volume,
            table_stores,
            fabric,
        })
    }
}

/// Opens the space manager, object store and volume registry of a managed
/// node; None for a raw one.
async fn open_managed(
    config: &NodeConfig,
    device: &Arc<Device>,
) -> Result<Option<Managed>, NodeError> {
    Ok(match config.storage.mode {
        StorageMode::Raw => None,
        StorageMode::Managed => {
            let volume = SpaceManager::open(
                device.clone(),
                config.storage.volume.clone(),
                &config.data_dir,
            )
            .await
            .map_err(NodeError::Volume)?;
            let volume = Arc::new(volume);
            let (store, recovery) =
                open_volume_node(config.id, volume.clone(), &VolumeStoreConfig::default())
                    .await
                    .map_err(NodeError::Store)?;
            tracing::info!(
                id = config.id,
                chunks = recovery.chunks,
                manifests = recovery.manifests,
                orphan_extents_trimmed = recovery.orphan_extents_trimmed,
                "object store opened"
            );
            let kv = open_kv(config, &volume).await?;
            let volumes =
                VolumeRegistry::open(config.id, &config.data_dir).map_err(NodeError::Volumes)?;
            tracing::info!(
                id = config.id,
                volumes = volumes.volumes().len(),
                "block volume registry opened"
            );
            Some(Managed {
                volume,
                store: Arc::new(store),
                volumes: Arc::new(volumes),
                kv,
            })
        }
    })
}

/// Opens the key-value service over its own tables (spaces of their own in
/// the space manager), loading the durable tenants.
async fn open_kv(
    config: &NodeConfig,
    volume: &Arc<SpaceManager>,
) -> Result<Arc<KvNode<VolumeTableStore>>, NodeError> {
    let durable_bytes: u64 = config
        .kv
        .tenants
        .iter()
        .filter(|t| t.mode == quarry_kv::KvMode::Durable)
        .map(|t| t.max_bytes)
        .chain(
            (config.kv.default_mode == quarry_kv::KvMode::Durable)
                .then_some(config.kv.default_max_bytes),
        )
        .fold(0u64, u64::saturating_add);
    let tables = VolumeTableConfig {
        log_space: quarry_kv::KV_LOG_SPACE,
        snapshot_space: quarry_kv::KV_SNAPSHOT_SPACE,
        // The durable tenants keep their records themselves (handed over
        // at open, bounded by their own limits); the tables' memory holds
        // only what tenants no longer configured left, at most what was
        // allowed before.
        max_table_bytes: durable_bytes.saturating_mul(2).max(64 << 20),
        ..VolumeTableConfig::default()
    };
    let tables = Arc::new(
        VolumeTableStore::open(volume.clone(), tables)
            .await
            .map_err(NodeError::Store)?,
    );
    let kv = KvNode::open(&config.kv, Some(Arc::clone(&tables)))
        .await
        .map_err(|e| NodeError::Config {
            path: "<config>".into(),
            reason: e.to_string(),
        })?
        .with_room(kv_room(volume.clone(), tables));
    tracing::info!(id = config.id, "key-value service opened");
    Ok(Arc::new(kv))
}

/// Whether the device can take `growth` more bytes of durable key-value
/// changes beside the `held` bytes the durable tenants hold: their log,
/// and a snapshot of all of it beside the old one (a compaction writes
/// the new before it trims the old), with a sixteenth of the device kept
/// free as the object store keeps it (so deletes can always be logged).
/// The tenants' own count, not the table store's bound on the next
/// snapshot (the last one plus the log since): that bound only grows
/// between compactions, so deletes would make no room until the next one.
fn kv_room(volume: Arc<SpaceManager>, tables: Arc<VolumeTableStore>) -> quarry_kv::Room {
    let page = volume.page_size().max(1) as u64;
    Arc::new(move |growth: u64, held: u64| {
        // Only the two page counts: the volume's full figures walk every
        // block, far too much for each durable call.
        let (live_pages, capacity_pages) = volume.fill_pages();
        let after = tables.bytes().saturating_add(held).saturating_add(growth);
        let need = growth.div_ceil(page) + after.saturating_mul(2).div_ceil(page);
        let keep_free = (capacity_pages / 16).max(16);
        live_pages + need + keep_free <= capacity_pages
    })
}

/// Starts the key-value service's background work (the expiry sweep) and
/// its memcached face when the configuration names a port; the face's
/// address.
async fn start_kv(
    config: &NodeConfig,
    kv: Arc<KvNode<VolumeTableStore>>,
    peers: &Arc<NodePeers>,
    stop: &watch::Receiver<bool>,
) -> Result<Option<SocketAddr>, NodeError> {
    let sweep = Arc::downgrade(&kv);
    let mut sweep_stop = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = async { sweep_stop.wait_for(|s| *s).await.is_ok() } => return,
                _ = tick.tick() => match sweep.upgrade() {
                    Some(kv) => kv.sweep().await,
                    None => return,
                },
            }
        }
    });
    let Some(listen) = &config.memcached_listen else {
        return Ok(None);
    };
    let bind_error = |source| NodeError::Bind {
        addr: listen.clone(),
        source,
    };
    // The socket `quarry up` bound for this node when there is one (no gap
    // in which another process could take the port), else a bind.
    let listener = match crate::inherited_memcached_listener(listen)? {
        Some(l) => TcpListener::from_std(l).map_err(bind_error)?,
        None => TcpListener::bind(listen).await.map_err(bind_error)?,
    };
    let addr = listener.local_addr().map_err(|source| NodeError::Bind {
        addr: listen.clone(),
        source,
    })?;
    let configured = std::iter::once(config.id)
        .chain(config.peers.iter().map(|p| p.id))
        .collect();
    let face = crate::memcached::Face::new(config.id, kv, Arc::clone(peers), configured);
    tokio::spawn(crate::memcached::serve(
        listener,
        face,
        config.limits.max_connections,
        stop.clone(),
    ));
    tracing::info!(id = config.id, %addr, "memcached face listening");
    Ok(Some(addr))
}

/// The service answering this node's own requests, with its kernel engine.
fn local_service(
    config: &NodeConfig,
    device: &Arc<Device>,
    managed: Option<Managed>,
    advertised: String,
    peers: &Arc<NodePeers>,
) -> Result<Arc<LocalService>, NodeError> {
    let tuner = config.compute.tuner().map_err(|reason| NodeError::Config {
        path: "<config>".into(),
        reason,
    })?;
    if let Some(s) = config.compute.read_setting().ok().flatten() {
        tracing::info!(
            id = config.id,
            depth = s.depth,
            read_ahead = s.read_ahead,
            "read tuner pinned by [compute]"
        );
    }
    let engine = Engine::with_tuner(
        LocalData::new(
            config.id,
            device.clone(),
            managed.as_ref().map(|m| ManagedData {
                space: m.volume.clone(),
                store: m.store.clone(),
                volumes: m.volumes.clone(),
            }),
        ),
        peers.clone(),
        tuner,
    );
    Ok(Arc::new(LocalService {
        id: config.id,
        cluster: config.cluster.clone(),
        addr: advertised.clone(),
        started: Instant::now(),
        device: device.clone(),
        managed,
        engine,
    }))
}

/// Longest a shutdown waits for the table compactions under way.
const COMPACTION_WAIT_AT_SHUTDOWN: Duration = Duration::from_secs(60);

/// A running node. Dropping it stops accepting connections; call
/// [`NodeHandle::shutdown`] to also finish in-flight work and close the device.
pub struct NodeHandle {
    id: NodeId,
    local_addr: SocketAddr,
    memcached_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    device: Arc<Device>,
    volume: Option<Arc<SpaceManager>>,
    /// The object store's and the key-value service's, closed before the
    /// volume.
    table_stores: Option<(Arc<VolumeNodeStore>, Arc<KvNode<VolumeTableStore>>)>,
    fabric: Fabric,
}

impl NodeHandle {
    /// The address the node listens on (the real port when configured with 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where the memcached face listens, when it does.
    pub fn memcached_addr(&self) -> Option<SocketAddr> {
        self.memcached_addr
    }

    /// The node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// This node's fabric (its links and routes).
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// Stops accepting, lets requests in flight finish (at most
    /// `limits.shutdown_grace_ms`), closes every connection, closes the
    /// table stores (each waits for its compaction under way, at most 60 s
    /// in all), then the volume and the device.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        let _ = self.stop.send(true);
        if let Err(e) = (&mut self.task).await {
            tracing::error!(id = self.id, "node task failed: {e}");
        }
        self.fabric.shutdown();
        if let Some((store, kv)) = self.table_stores.take() {
            // A compaction the volume's close cut off would leave its pages
            // for the next open to trim, and its work to do again; one that
            // takes longer than the bound is left to that.
            let closed = async {
                store.tables().close().await;
                if let Some(tables) = kv.tables() {
                    tables.close().await;
                }
            };
            if tokio::time::timeout(COMPACTION_WAIT_AT_SHUTDOWN, closed)
                .await
                .is_err()
            {
                tracing::warn!(
                    id = self.id,
                    "a table compaction still runs after {COMPACTION_WAIT_AT_SHUTDOWN:?}; the \
                     next open trims what it wrote"
                );
            }
        }
        if let Some(volume) = self.volume.take() {
            // A checkpoint makes the next start quick; what was acknowledged
            // is durable without it.
            volume.close().await.map_err(NodeError::Volume)?;
        }
        self.device.close().await.map_err(NodeError::Device)
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.fabric.shutdown();
    }
}

async fn accept_loop(
    listener: TcpListener,
    core: Arc<NodeCore>,
    limits: SessionLimits,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let open = Arc::new(Semaphore::new(max_connections));
    // Each connection gets its own receiver; the loop's own one is borrowed
    // mutably by its wait inside select!.
    let stop_template = stop.clone();
    let mut connections = JoinSet::new();
    let mut connection_count: u32 = 0;
    loop {
        tokio::select! {
            _ = async { stop.wait_for(|stopped| *stopped).await.is_ok() } => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Typically EMFILE: pause rather than spin.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = open.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "refusing connection: {max_connections} connections already open");
                    continue;
                };
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(%peer, "TCP_NODELAY not set: {e}");
                }
                let core = core.clone();
                let mut stop = stop_template.clone();
                let span = tracing::debug_span!("conn", %peer);
                connection_count = connection_count.wrapping_add(1);
                // A flow names one requester on the fabric's links, for the
                // rotating-priority arbiters: this node's id and connection.
                let flow = u32::from(core.local.id) << 16 | (connection_count & 0xFFFF);
                connections.spawn(
                    async move {
                        match is_link(&stream, limits.connect_timeout).await {
                            Ok(true) => {
                                // The link runs in the fabric's own tasks and
                                // does not count as a client connection.
                                drop(permit);
                                core.fabric.accept(stream);
                                return;
                            }
                            Ok(false) => {}
                            Err(e) => {
                                tracing::debug!("connection closed before its first bytes: {e}");
                                return;
                            }
                        }
                        let stopped = async move {
                            let _ = stop.wait_for(|stopped| *stopped).await;
                        };
                        let handler =
                            move |incoming: Incoming| core.clone().dispatch(incoming, flow);
                        match serve_connection_with(stream, limits, stopped, handler).await {
                            Ok(()) => tracing::debug!("connection closed"),
                            Err(e) => tracing::debug!("connection closed: {e}"),
                        }
                        drop(permit);
                    }
                    .instrument(span),
                );
            }
        }
    }
    drop(listener);
    let open_connections = connections.len();
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "{} of {open_connections} connections still busy after {} ms; closing them",
            connections.len(),
            grace.as_millis()
        );
        connections.shutdown().await;
    }
}

/// Whether a new connection speaks the link protocol (a neighbour) rather
/// than the client protocol: looks at its first two bytes without taking
/// them; a connection silent for `timeout` is a client's.
async fn is_link(stream: &tokio::net::TcpStream, timeout: Duration) -> std::io::Result<bool> {
    let mut magic = [0u8; 2];
    let peeked = tokio::time::timeout(timeout, async {
        loop {
            let n = stream.peek(&mut magic).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            if n >= 2 {
                return Ok(u16::from_be_bytes(magic) == LINK_MAGIC);
            }
            // One byte so far: wait for the next rather than spin on it.
            stream.readable().await?;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    // A neighbour sends its magic as soon as it connects; a connection
    // still silent after `timeout` is a client that connected before it
    // had anything to ask (the mount connects at start and waits for the
    // first file operation). It is served as one, not closed: closing it
    // broke that client's every later call.
    peeked.unwrap_or(Ok(false))
}

/// Starts the node described by `config` and serves until SIGTERM or SIGINT,
/// then shuts down cleanly (logging "shutting down"). Serves on the
/// listening socket inherited in `QUARRY_LISTEN_FD` when there is one (see
/// [`inherited_listener`](crate::inherited_listener)), else binds
/// `config.listen`.
pub async fn run(config: NodeConfig) -> Result<(), NodeError> {
    let handle = match crate::inherited_listener(&config.listen)? {
        Some(listener) => {
            tracing::info!(listen = %config.listen, "serving on the socket inherited from the starting process");
            let listener = TcpListener::from_std(listener).map_err(|source| NodeError::Bind {
                addr: config.listen.clone(),
                source,
            })?;
            Node::start_with_listener(config, listener).await?
        }
        None => Node::start(config).await?,
    };
    wait_for_signal().await?;
    tracing::info!(id = handle.id(), "shutting down");
    handle.shutdown().await?;
    tracing::info!("stopped");
    Ok(())
}

/// The status a device error maps to: the wire names each NAND rule the
/// device enforces, so a client can tell a page already programmed from a
/// failing disk.
fn device_status(error: &DeviceError) -> Status {
    use DeviceError as E;
    match error {
        E::AddressOutOfRange { .. } => Status::AddressOutOfRange,
        E::AlreadyProgrammed { .. } => Status::AlreadyProgrammed,
        E::OutOfOrder { .. } => Status::OutOfOrder,
        E::BadBlock { .. } => Status::BadBlock,
        E::Uncorrectable { .. } => Status::Uncorrectable,
        E::PageSize { .. } | E::OobSize { .. } => Status::BadRequest,
        E::NoSpace { .. } => Status::NoSpace,
        E::BlockBusy { .. } | E::QueueFull { .. } => Status::Busy,
        _ => Status::Internal,
    }
}

/// An error answer for a device failure, carrying the device's message.
fn device_error_answer(error: &DeviceError) -> Response {
    Response::Error {
        status: device_status(error),
        message: error.to_string(),
    }
}

/// [`run`] on a runtime of its own, for a binary's `main`.
pub fn run_blocking(config: NodeConfig) -> Result<(), NodeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(NodeError::Runtime)?;
    runtime.block_on(run(config))
}

async fn wait_for_signal() -> Result<(), NodeError> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(NodeError::Signal)?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.map_err(NodeError::Signal),
        _ = terminate.recv() => Ok(()),
    }
}
