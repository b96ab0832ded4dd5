//! Fabrics of several nodes over real loopback links: discovery, hop-by-hop
//! forwarding of multi-fragment pages, hot plug, failure and reroute.

use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use quarry_fabric::{
    decode_json, encode_json, link_flags, links_of, Channel, Fabric, FabricConfig, Hello,
    LinkAdvert, LinkCodec, LinkFrame, LinkHeader, LinkKind, LinkStateDb, LocalHandler,
    ReceiveLimits, RoutingTable, TopologyKind, FRAGMENT_BYTES,
};
use quarry_proto::PageAddr;
use quarry_proto::{GlobalPageAddr, NodeEntry, NodeId, Request, Response, Status};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

const PAGE_BYTES: usize = 8192;

/// The page a test node holds at `addr`: its id and the address, repeated.
fn page_of(node: NodeId, page: u32) -> Bytes {
    let mut data = Vec::with_capacity(PAGE_BYTES);
    while data.len() < PAGE_BYTES {
        data.extend_from_slice(&node.to_be_bytes());
        data.extend_from_slice(&page.to_be_bytes());
        data.push((data.len() % 251) as u8);
    }
    data.truncate(PAGE_BYTES);
    Bytes::from(data)
}

fn handler(id: NodeId) -> LocalHandler {
    Arc::new(move |request| {
        Box::pin(async move {
            let response = match request {
                Request::ReadPage(addr) => Response::Page {
                    data: page_of(id, addr.page.page),
                    oob: Bytes::from(vec![id as u8; 16]),
                    erased: false,
                    corrected_bytes: 0,
                },
                // Echo a program's checksum in an error message, so a test can
                // see the whole page arrived intact after several hops.
                Request::ProgramPage { data, .. } => Response::Error {
                    status: Status::BadRequest,
                    message: format!("node {id} got {} bytes summing {}", data.len(), sum(&data)),
                },
                _ => Response::Done,
            };
            response.into()
        })
    })
}

fn sum(data: &[u8]) -> u64 {
    data.iter().map(|b| u64::from(*b)).sum()
}

fn config() -> FabricConfig {
    FabricConfig {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(5),
        retry_backoff: Duration::from_millis(100),
        keepalive_interval: Duration::from_millis(50),
        dead_after: Duration::from_millis(400),
        route_wait: Duration::from_millis(300),
        // Small windows make every test exercise credit flow control, and
        // make a backlog on a link certain in the overtaking test.
        window_fragments: 8,
        ..FabricConfig::default()
    }
}

struct TestNode {
    fabric: Fabric,
    accept: tokio::task::JoinHandle<()>,
}

impl TestNode {
    fn stop(self) {
        self.accept.abort();
        self.fabric.shutdown();
    }
}

async fn listeners(count: usize) -> Vec<(TcpListener, String)> {
    let mut all = Vec::new();
    for _ in 0..count {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        all.push((listener, addr));
    }
    all
}

fn start(id: NodeId, listener: TcpListener, addr: &str, neighbors: Vec<NodeEntry>) -> TestNode {
    start_with(id, listener, addr, neighbors, config())
}

fn start_with(
    id: NodeId,
    listener: TcpListener,
    addr: &str,
    neighbors: Vec<NodeEntry>,
    config: FabricConfig,
) -> TestNode {
    start_serving(id, listener, addr, neighbors, config, handler(id))
}

fn start_serving(
    id: NodeId,
    listener: TcpListener,
    addr: &str,
    neighbors: Vec<NodeEntry>,
    config: FabricConfig,
    handler: LocalHandler,
) -> TestNode {
    let local = NodeEntry {
        id,
        addr: addr.to_string(),
    };
    let fabric = Fabric::start(local, neighbors, config, handler).unwrap();
    let acceptor = fabric.clone();
    let accept = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            acceptor.accept(stream);
        }
    });
    TestNode { fabric, accept }
}

/// Starts `ids.len()` nodes linked as `kind`; each dials its higher-id neighbours.
async fn cluster(kind: TopologyKind, count: u16) -> (Vec<TestNode>, Vec<String>) {
    cluster_serving(kind, count, &handler).await
}

/// [`cluster`] with each node's requests served by `serve(id)`.
async fn cluster_serving(
    kind: TopologyKind,
    count: u16,
    serve: &dyn Fn(NodeId) -> LocalHandler,
) -> (Vec<TestNode>, Vec<String>) {
    let ids: Vec<NodeId> = (0..count).collect();
    let links = links_of(kind, &ids);
    let bound = listeners(count as usize).await;
    let addrs: Vec<String> = bound.iter().map(|(_, a)| a.clone()).collect();
    let mut nodes = Vec::new();
    for (id, (listener, addr)) in bound.into_iter().enumerate() {
        let id = id as NodeId;
        let neighbors = links
            .iter()
            .filter(|(a, _)| *a == id)
            .map(|&(_, b)| NodeEntry {
                id: b,
                addr: addrs[b as usize].clone(),
            })
            .collect();
        nodes.push(start_serving(
            id,
            listener,
            &addr,
            neighbors,
            config(),
            serve(id),
        ));
    }
    // Wait until every node's table is the one the whole topology gives,
    // not just some route to everyone.
    let mut db = LinkStateDb::new();
    for &id in &ids {
        db.apply(LinkAdvert {
            origin: id,
            addr: String::new(),
            sequence: 1,
            neighbors: links
                .iter()
                .filter_map(|&(a, b)| (a == id).then_some(b).or((b == id).then_some(a)))
                .collect(),
        });
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for node in &nodes {
        let id = node.fabric.local().id;
        let want: Vec<(NodeId, NodeId, u8)> = RoutingTable::compute(id, &db)
            .routes()
            .map(|r| (r.dest, r.next_hop, r.hops))
            .collect();
        loop {
            let have: Vec<(NodeId, NodeId, u8)> = node
                .fabric
                .routes()
                .routes
                .iter()
                .map(|r| (r.dest, r.next_hop, r.hops))
                .collect();
            if have == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} has routes {have:?}, want {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    (nodes, addrs)
}

fn addr(node: NodeId, page: u32) -> GlobalPageAddr {
    GlobalPageAddr {
        node,
        page: PageAddr {
            bus: 0,
            chip: 0,
            block: 0,
            page,
        },
    }
}

async fn read(fabric: &Fabric, node: NodeId, page: u32) -> Response {
    fabric
        .route(node, Request::ReadPage(addr(node, page)), 0, 7)
        .await
}

fn assert_page(answer: Response, node: NodeId, page: u32) {
    match answer {
        Response::Page { data, oob, .. } => {
            assert!(
                data == page_of(node, page),
                "page {node}:{page} came back wrong"
            );
            assert_eq!(oob[0], node as u8);
        }
        other => panic!("reading {node}:{page}: {other:?}"),
    }
}

fn error_of(answer: Response) -> (Status, String) {
    match answer {
        Response::Error { status, message } => (status, message),
        Response::Page { data, oob, .. } => panic!(
            "expected an error, got a page of {} bytes (oob {oob:?})",
            data.len()
        ),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_learns_its_routes_and_forwards_pages_three_hops() {
    let (nodes, _) = cluster(TopologyKind::Line, 4).await;
    let routes = nodes[0].fabric.routes();
    let to_3 = routes.routes.iter().find(|r| r.dest == 3).unwrap();
    assert_eq!((to_3.next_hop, to_3.hops), (1, 3));
    assert_eq!(routes.links.len(), 1, "node 0 of a line has one link");
    assert_eq!(
        nodes[3]
            .fabric
            .members()
            .iter()
            .map(|m| m.id)
            .collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    // Every node reads every other node's pages, many at once.
    let mut reads = Vec::new();
    for from in 0..4u16 {
        for to in 0..4u16 {
            if from == to {
                continue;
            }
            for page in 0..8 {
                let fabric = nodes[from as usize].fabric.clone();
                reads.push(tokio::spawn(async move {
                    (to, page, read(&fabric, to, page).await)
                }));
            }
        }
    }
    for read in reads {
        let (to, page, answer) = read.await.unwrap();
        assert_page(answer, to, page);
    }
    // A page-sized request streams three hops the other way, intact.
    let data = page_of(9, 9);
    let answer = nodes[0]
        .fabric
        .route(
            3,
            Request::ProgramPage {
                addr: addr(3, 0),
                data: data.clone(),
                oob: Bytes::new(),
            },
            0,
            1,
        )
        .await;
    let (_, message) = error_of(answer);
    assert_eq!(
        message,
        format!("node 3 got 8192 bytes summing {}", sum(&data))
    );
    for node in nodes {
        node.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_plugged_in_with_one_link_becomes_reachable_from_all() {
    let (mut nodes, addrs) = cluster(TopologyKind::Line, 3).await;
    let (listener, addr4) = listeners(1).await.pop().unwrap();
    let newcomer = start(
        4,
        listener,
        &addr4,
        vec![NodeEntry {
            id: 1,
            addr: addrs[1].clone(),
        }],
    );
    nodes.push(newcomer);
    for node in &nodes {
        assert!(
            node.fabric
                .wait_for_routes(&[0, 1, 2, 4], Duration::from_secs(5))
                .await
        );
    }
    assert_page(read(&nodes[0].fabric, 4, 3).await, 4, 3);
    assert_page(read(&nodes[3].fabric, 2, 5).await, 2, 5);
    let via = nodes[2].fabric.routes();
    let to_4 = via.routes.iter().find(|r| r.dest == 4).unwrap();
    assert_eq!((to_4.next_hop, to_4.hops), (1, 2));
    for node in nodes {
        node.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_reroutes_around_a_dead_node_and_fails_fast_for_it() {
    let (mut nodes, _) = cluster(TopologyKind::Ring, 4).await;
    let before = nodes[0].fabric.routes();
    let to_2 = before.routes.iter().find(|r| r.dest == 2).unwrap();
    assert_eq!(
        (to_2.next_hop, to_2.hops),
        (1, 2),
        "ties go to the lower id"
    );
    assert_page(read(&nodes[0].fabric, 2, 1).await, 2, 1);

    // Node 1 dies while reads of node 2 are on their way through it: its
    // links close, 0 reaches 2 through 3 instead, and a read that lost its
    // link is sent again on the new route, so none fails.
    let reading = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let readers: Vec<_> = (0..8u32)
        .map(|lane| {
            let fabric = nodes[0].fabric.clone();
            let reading = reading.clone();
            tokio::spawn(async move {
                let mut reads = 0u32;
                while reading.load(std::sync::atomic::Ordering::Relaxed) {
                    let page = lane * 1000 + reads;
                    assert_page(read(&fabric, 2, page).await, 2, page);
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    nodes.remove(1).stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    reading.store(false, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        assert!(reader.await.expect("no read failed") > 0);
    }
    let started = Instant::now();
    for page in 0..20 {
        assert_page(read(&nodes[0].fabric, 2, page).await, 2, page);
    }
    let after = nodes[0].fabric.routes();
    let to_2 = after.routes.iter().find(|r| r.dest == 2).unwrap();
    assert_eq!((to_2.next_hop, to_2.hops), (3, 2));

    // Requests for the dead node fail with a clear error, quickly.
    let asked = Instant::now();
    let (status, message) = error_of(read(&nodes[0].fabric, 1, 0).await);
    assert_eq!(status, Status::NodeUnreachable, "{message}");
    assert!(
        message.contains("node 1 (at 127.0.0.1:") && message.contains("unreachable"),
        "{message}"
    );
    // Failing fast means on the route wait, not the request timeout: the
    // bound is the latter, so a loaded machine does not fail the test.
    assert!(
        asked.elapsed() < config().request_timeout,
        "took {:?}",
        asked.elapsed()
    );
    // An id nobody ever heard of is refused as unknown.
    let (status, message) = error_of(read(&nodes[0].fabric, 77, 0).await);
    assert_eq!(status, Status::UnknownNode, "{message}");
    assert!(started.elapsed() < Duration::from_secs(10));
    for node in nodes {
        node.stop();
    }
}

/// The bytes of a link Hello from node `id`, built by hand as a foreign
/// implementation would.
fn hello_frame(id: NodeId) -> Vec<u8> {
    let json = format!(
        r#"{{"cluster":"quarry","id":{id},"addr":"127.0.0.1:9","instance":1,"expect":null}}"#
    );
    let mut frame = vec![0x51, 0x4C, quarry_fabric::LINK_VERSION, 1, 0, 0, 0, 0];
    frame.extend_from_slice(&[0; 12]);
    frame.extend_from_slice(&(json.len() as u32).to_be_bytes());
    frame.extend_from_slice(json.as_bytes());
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_link_is_declared_dead() {
    let (nodes, addrs) = cluster(TopologyKind::Line, 2).await;
    // A "node 5" that shakes hands and then freezes: its socket stays open,
    // so only the missing keepalives can tell.
    let mut frozen = tokio::net::TcpStream::connect(&addrs[0]).await.unwrap();
    frozen.write_all(&hello_frame(5)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while !nodes[0].fabric.routes().links.iter().any(|l| l.peer == 5) {
        assert!(
            Instant::now() < deadline,
            "the link to node 5 never came up"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let up = Instant::now();
    while nodes[0].fabric.routes().links.iter().any(|l| l.peer == 5) {
        // A bound on "eventually", wide enough for a loaded 2-core CI
        // machine: the behaviour is that a silent link goes, not how fast.
        assert!(
            up.elapsed() < config().dead_after * 10,
            "a silent link still up after {:?}",
            up.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        up.elapsed() >= config().dead_after / 2,
        "declared dead too soon"
    );
    // The real neighbour, which sends keepalives, stays.
    assert_page(read(&nodes[0].fabric, 1, 4).await, 1, 4);
    drop(frozen);
    for node in nodes {
        node.stop();
    }
}

/// Everything the fabric logs in this test binary, kept for the tests that
/// check why a link was refused; only the newest [`LOG_KEPT_BYTES`] stay.
fn fabric_log() -> &'static Mutex<Vec<u8>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let installed = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("quarry_fabric=debug"))
            .with_ansi(false)
            .with_writer(move || LogSink(sink.clone()))
            .try_init();
        assert!(
            installed.is_ok(),
            "another subscriber took the fabric's log"
        );
        log
    })
}

const LOG_KEPT_BYTES: usize = 4 << 20;

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut log = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        log.extend_from_slice(bytes);
        if log.len() > LOG_KEPT_BYTES {
            let excess = log.len() - LOG_KEPT_BYTES / 2;
            log.drain(..excess);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits until the fabric has logged one line holding every one of `parts`.
async fn logged(parts: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = {
            let log = fabric_log()
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            String::from_utf8_lossy(&log)
                .lines()
                .any(|line| parts.iter().all(|part| line.contains(part)))
        };
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the fabric never logged a line with all of {parts:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads `frames` until the node closes the link; only `allowed` kinds may
/// come first.
async fn closed_by_the_node<R: tokio::io::AsyncRead + Unpin>(
    frames: &mut tokio_util::codec::FramedRead<R, LinkCodec>,
    allowed: &[LinkKind],
    what: &str,
) {
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match frames.next().await {
                Some(Ok(frame)) if allowed.contains(&frame.header.kind) => {}
                Some(Ok(frame)) => panic!("{what}: the node sent {:?}", frame.header),
                Some(Err(_)) | None => return,
            }
        }
    })
    .await;
    assert!(end.is_ok(), "{what}: the link is still open after 5 s");
}

/// A link header built by hand, with raw kind and channel bytes.
fn raw_header(kind: u8, channel: u8, len_bytes: u32) -> Vec<u8> {
    let mut header = vec![
        0x51,
        0x4C,
        quarry_fabric::LINK_VERSION,
        kind,
        channel,
        0,
        0,
        0,
    ];
    header.extend_from_slice(&[0; 12]);
    header.extend_from_slice(&len_bytes.to_be_bytes());
    header
}

/// A Hello frame of node `id` of `cluster` expecting node `expect`, at a
/// name of its own (`fake-{id}:1`) so the node's log lines of it are told
/// apart.
fn hello_of(cluster: &str, id: NodeId, expect: Option<NodeId>, receive: ReceiveLimits) -> Vec<u8> {
    let hello = Hello {
        cluster: cluster.into(),
        id,
        addr: format!("fake-{id}:1"),
        instance: 1,
        expect,
        receive,
    };
    let mut buf = bytes::BytesMut::new();
    encode_json(LinkKind::Hello, &hello, &mut buf).unwrap();
    buf.to_vec()
}

/// Sends `bytes` on a new link connection to `addr` (then closes its
/// sending side if `close`) and checks the node refuses the link with
/// `reason`, logged for this connection, and closes it.
async fn refused_at_handshake(addr: &str, bytes: &[u8], close: bool, reason: &str) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let local = stream.local_addr().unwrap().to_string();
    stream.write_all(bytes).await.unwrap();
    if close {
        stream.shutdown().await.unwrap();
    }
    logged(&[&format!("peer={local}"), "link refused", reason]).await;
    let mut frames = tokio_util::codec::FramedRead::new(stream, LinkCodec);
    closed_by_the_node(&mut frames, &[LinkKind::Hello], reason).await;
}

/// A node `id` shakes hands with the node at `addr` and sends `garbage`; the
/// node must drop the link, logging `reason`.
async fn dropped_after_handshake(addr: &str, id: NodeId, garbage: &[u8], reason: &str) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (reader, mut writer) = stream.into_split();
    let mut frames = tokio_util::codec::FramedRead::new(reader, LinkCodec);
    let hello = hello_of(
        "quarry",
        id,
        Some(1),
        FabricConfig::default().receive_limits(),
    );
    writer.write_all(&hello).await.unwrap();
    // The node may close the link before it has read all of a long input.
    let _ = writer.write_all(garbage).await;
    logged(&[&format!("addr=fake-{id}:1"), "link down", reason]).await;
    let allowed = [
        LinkKind::Hello,
        LinkKind::Advert,
        LinkKind::Credit,
        LinkKind::Keepalive,
        LinkKind::Response,
    ];
    closed_by_the_node(&mut frames, &allowed, reason).await;
}

/// A request fragment header on `stream` to node `dest`.
fn fragment(
    stream: u32,
    dest: NodeId,
    channel: Channel,
    flags: u8,
    len_bytes: usize,
) -> LinkHeader {
    LinkHeader {
        kind: LinkKind::Request,
        channel,
        flags,
        hops: 1,
        stream,
        dest,
        origin: 7,
        flow: 5,
        len_bytes: len_bytes as u32,
    }
}

/// Frames encoded one after another.
fn frames_of(frames: &[(LinkHeader, Vec<u8>)]) -> Vec<u8> {
    let mut buf = bytes::BytesMut::new();
    for (header, payload) in frames {
        header.put(&mut buf);
        buf.extend_from_slice(payload);
    }
    buf.to_vec()
}

/// The answer a node sent, decoded.
fn decoded(answer: Vec<u8>) -> Response {
    let mut buf = bytes::BytesMut::from(&answer[..]);
    let frame = tokio_util::codec::Decoder::decode(&mut quarry_proto::FrameCodec, &mut buf)
        .expect("a well-formed answer")
        .expect("a whole answer");
    quarry_proto::decode_response(&frame).expect("a known answer")
}

/// Garbage on a link connection, at the handshake and after it, reaches
/// every check past the version byte: each closes that link with its own
/// reason, and the node goes on serving its real neighbour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_a_link_closes_that_link_only() {
    fabric_log();
    let mut bound = listeners(2).await;
    let (listener1, addr1) = bound.pop().unwrap();
    let (listener0, addr0) = bound.pop().unwrap();
    let node1 = start_with(
        1,
        listener1,
        &addr1,
        Vec::new(),
        FabricConfig {
            max_streams_per_link: 4,
            ..config()
        },
    );
    let neighbor = NodeEntry {
        id: 1,
        addr: addr1.clone(),
    };
    let node0 = start(0, listener0, &addr0, vec![neighbor]);
    assert!(
        node0
            .fabric
            .wait_for_routes(&[1], Duration::from_secs(5))
            .await
    );
    garbage_at_the_handshake(&addr1).await;
    assert_page(read(&node0.fabric, 1, 2).await, 1, 2);
    garbage_after_the_handshake(&addr1).await;
    assert_page(read(&node0.fabric, 1, 3).await, 1, 3);
    stray_fragments_are_dropped_or_answered(&addr1).await;
    assert_page(read(&node0.fabric, 1, 4).await, 1, 4);
    eventually("the fakes' links going", || {
        node1.fabric.routes().links.len() == 1
    })
    .await;
    node0.stop();
    node1.stop();
}

async fn garbage_at_the_handshake(addr: &str) {
    let limits = FabricConfig::default().receive_limits();
    let mut cut_hello = raw_header(1, 0, 100);
    cut_hello.extend_from_slice(b"{\"cluster\"");
    let mut keepalive_first = raw_header(4, 0, 0);
    keepalive_first.extend_from_slice(&hello_of("quarry", 40, None, limits));
    let mut not_json = raw_header(1, 0, 9);
    not_json.extend_from_slice(b"{not json");
    let cases: Vec<(Vec<u8>, bool, String)> = vec![
        (raw_header(0x63, 0, 0), false, "unknown kind 99".into()),
        (raw_header(1, 7, 0), false, "unknown channel 7".into()),
        (
            raw_header(1, 0, u32::MAX),
            false,
            "Hello payload of 4294967295 bytes exceeds limit 65536".into(),
        ),
        (
            raw_header(5, 0, 4096),
            false,
            "Request payload of 4096 bytes exceeds limit 2048".into(),
        ),
        (
            raw_header(5, 1, 2 << 20),
            false,
            "Request payload of 2097152 bytes exceeds limit 1048576".into(),
        ),
        (
            raw_header(3, 0, 9),
            false,
            "Credit payload of 9 bytes exceeds limit 8".into(),
        ),
        (
            raw_header(4, 0, 1),
            false,
            "Keepalive payload of 1 bytes exceeds limit 0".into(),
        ),
        (keepalive_first, false, "expected Hello, got Keepalive".into()),
        (not_json, false, "malformed Hello".into()),
        (cut_hello, true, "bytes remaining on stream".into()),
        (raw_header(1, 0, 0)[..3].to_vec(), true, "bytes remaining on stream".into()),
        (Vec::new(), true, "closed during the handshake".into()),
        (Vec::new(), false, "no handshake within 500 ms".into()),
        (
            hello_of("elsewhere", 41, None, limits),
            false,
            "node 41 at fake-41:1 belongs to cluster \"elsewhere\", this node to cluster \"quarry\"".into(),
        ),
        (
            hello_of(
                "quarry",
                42,
                None,
                ReceiveLimits {
                    data_fragment_bytes: u32::MAX,
                    ..limits
                },
            ),
            false,
            "node 42 at fake-42:1 announced data fragments of 4294967295 bytes".into(),
        ),
        (
            hello_of(
                "quarry",
                43,
                None,
                ReceiveLimits {
                    data_window_fragments: 0,
                    ..limits
                },
            ),
            false,
            "announced a data window of 0 fragments".into(),
        ),
        (
            hello_of("quarry", 1, None, limits),
            false,
            "the node at fake-1:1 has this node's own id 1".into(),
        ),
        (
            hello_of("quarry", 44, Some(9), limits),
            false,
            "node 44 dialled this node as node 9, but it is node 1".into(),
        ),
    ];
    for (bytes, close, reason) in cases {
        refused_at_handshake(addr, &bytes, close, &reason).await;
    }
}

async fn garbage_after_the_handshake(addr: &str) {
    let mut short_credit = raw_header(3, 0, 4);
    short_credit.extend_from_slice(&[0, 0, 0, 1]);
    let mut too_many_credits = raw_header(3, 0, 8);
    too_many_credits.extend_from_slice(&1000u32.to_be_bytes());
    too_many_credits.extend_from_slice(&0u32.to_be_bytes());
    let limits = FabricConfig::default().receive_limits();
    let mut bad_advert = raw_header(2, 0, 5);
    bad_advert.extend_from_slice(b"[1,2]");
    let mut big_advert = bytes::BytesMut::new();
    let crowded = LinkAdvert {
        origin: 56,
        addr: "fake-56:1".into(),
        sequence: 1,
        neighbors: (0..=quarry_fabric::MAX_MEMBERS as NodeId).collect(),
    };
    encode_json(LinkKind::Advert, &crowded, &mut big_advert).unwrap();
    let data_bytes = FabricConfig::default().data_fragment_bytes as usize;
    let first = link_flags::FIRST;
    let oversized = frames_of(&[(
        fragment(1, 1, Channel::Data, first, data_bytes + 1),
        vec![0; data_bytes + 1],
    )]);
    let reopened = frames_of(&[
        (fragment(5, 1, Channel::Control, first, 1), vec![0]),
        (fragment(5, 1, Channel::Control, first, 1), vec![0]),
    ]);
    // Node 1 runs 4 requests of a link and keeps twice that many open.
    let crowd: Vec<_> = (0..9)
        .map(|stream| (fragment(stream, 1, Channel::Control, first, 1), vec![0]))
        .collect();
    let endless: Vec<_> = (0..70)
        .map(|index| {
            let flags = if index == 0 { first } else { 0 };
            let header = fragment(3, 1, Channel::Data, flags, data_bytes);
            (header, vec![0; data_bytes])
        })
        .collect();
    let max_message_bytes = quarry_proto::HEADER_LEN_BYTES + quarry_proto::MAX_BODY_BYTES as usize;
    let cases: Vec<(NodeId, Vec<u8>, String)> = vec![
        (
            50,
            short_credit,
            "Credit payload of 4 bytes, expected 8".into(),
        ),
        (
            51,
            too_many_credits,
            "node 51 returned Control credits beyond the window of 128".into(),
        ),
        (
            52,
            hello_of("quarry", 52, Some(1), limits),
            "a second Hello".into(),
        ),
        (53, bad_advert, "malformed Advert".into()),
        (
            54,
            big_advert.to_vec(),
            format!("advert lists {} neighbours", quarry_fabric::MAX_MEMBERS + 1),
        ),
        (
            55,
            oversized,
            format!(
                "node 55 sent a Data fragment of {} bytes; this node takes at most {data_bytes}",
                data_bytes + 1
            ),
        ),
        (57, reopened, "node 57 reopened stream 0x5".into()),
        (
            58,
            frames_of(&crowd),
            "node 58 has 8 request streams open, the limit is 8".into(),
        ),
        (
            59,
            frames_of(&endless),
            format!("request stream 0x3 exceeds {max_message_bytes} bytes"),
        ),
    ];
    for (id, garbage, reason) in cases {
        dropped_after_handshake(addr, id, &garbage, &reason).await;
    }
}

/// Fragments of no stream the node knows, aborts of streams it never had,
/// a request that is not a frame and one for a node nobody knows: each is
/// dropped or answered, and the link stays up and serves.
async fn stray_fragments_are_dropped_or_answered(node_addr: &str) {
    let mut fake = FakeNode::join(node_addr, 60, 1).await;
    let control = Channel::Control;
    let mut strays = vec![
        (fragment(9, 1, control, 0, 3), b"mid".to_vec()),
        (
            fragment(10, 1, control, link_flags::LAST, 3),
            b"end".to_vec(),
        ),
        (LinkHeader::control(LinkKind::AbortRequest, 0), Vec::new()),
        (LinkHeader::control(LinkKind::AbortResponse, 0), Vec::new()),
        (LinkHeader::control(LinkKind::Keepalive, 0), Vec::new()),
    ];
    let mut answer = LinkHeader::control(LinkKind::Response, 4);
    answer.stream = 0x7777;
    answer.flags = link_flags::FIRST | link_flags::LAST;
    strays.push((answer, b"junk".to_vec()));
    let whole = link_flags::FIRST | link_flags::LAST;
    strays.push((fragment(20, 1, control, whole, 7), b"garbage".to_vec()));
    let mut unknown = bytes::BytesMut::new();
    quarry_proto::encode_request(0, 1, &Request::Ping, &mut unknown).unwrap();
    strays.push((
        fragment(21, 77, control, whole, unknown.len()),
        unknown.to_vec(),
    ));
    fake.writer.write_all(&frames_of(&strays)).await.unwrap();
    // Answers come in the order they are ready, not asked.
    let mut answers = std::collections::BTreeMap::<u32, Vec<u8>>::new();
    let mut finished = Vec::new();
    while finished.len() < 2 {
        let next = fake.next(LinkKind::Response).await;
        let stream = next.header.stream;
        assert!(
            [20, 21].contains(&stream),
            "an answer on stream {stream:#x}"
        );
        answers
            .entry(stream)
            .or_default()
            .extend_from_slice(&next.payload);
        if next.header.is_last() {
            finished.push(stream);
        }
    }
    let (status, message) = error_of(decoded(answers.remove(&20).unwrap()));
    assert_eq!(status, Status::BadRequest, "{message}");
    assert!(message.starts_with("malformed request"), "{message}");
    let (status, message) = error_of(decoded(answers.remove(&21).unwrap()));
    assert_eq!(status, Status::NodeUnreachable, "{message}");
    fake.ask(22, 1, &Request::ReadPage(addr(1, 5))).await;
    assert_page(decoded(fake.answer(22).await), 1, 5);
}

/// A node that dials a neighbour's address where a node of another cluster
/// now listens (a stopped cluster's port taken by a new one) must not link to
/// it, even when the ids match: that node's pages are not its neighbour's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_cluster_is_never_linked() {
    let mut bound = listeners(2).await;
    let (foreign_listener, foreign_addr) = bound.pop().unwrap();
    let (home_listener, home_addr) = bound.pop().unwrap();
    let foreign = start_with(
        1,
        foreign_listener,
        &foreign_addr,
        Vec::new(),
        FabricConfig {
            cluster: "other".into(),
            ..config()
        },
    );
    let home = start(
        0,
        home_listener,
        &home_addr,
        vec![NodeEntry {
            id: 1,
            addr: foreign_addr.clone(),
        }],
    );
    // Several dials and handshakes go by; none may make a link.
    for page in 0..3 {
        let (status, message) = error_of(read(&home.fabric, 1, page).await);
        assert!(
            matches!(status, Status::UnknownNode | Status::NodeUnreachable),
            "{status:?}: {message}"
        );
        tokio::time::sleep(config().retry_backoff).await;
    }
    assert!(home.fabric.routes().links.is_empty());
    assert!(foreign.fabric.routes().links.is_empty());
    // A hand-made handshake naming another cluster is refused the same way.
    let mut stranger = tokio::net::TcpStream::connect(&home_addr).await.unwrap();
    let json = r#"{"cluster":"other","id":5,"addr":"127.0.0.1:9","instance":1,"expect":null}"#;
    let mut frame = vec![0x51, 0x4C, quarry_fabric::LINK_VERSION, 1, 0, 0, 0, 0];
    frame.extend_from_slice(&[0; 12]);
    frame.extend_from_slice(&(json.len() as u32).to_be_bytes());
    frame.extend_from_slice(json.as_bytes());
    stranger.write_all(&frame).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(home.fabric.routes().links.is_empty());
    home.stop();
    foreign.stop();
}

/// What a node's slow service calls went through.
#[derive(Default)]
struct CallLog {
    started: AtomicUsize,
    /// Dropped before their end.
    stopped: AtomicUsize,
    finished: AtomicUsize,
}

/// Counts into `stopped` when dropped unless disarmed.
struct Stopped(Arc<CallLog>, bool);

impl Drop for Stopped {
    fn drop(&mut self) {
        if self.1 {
            self.0.stopped.fetch_add(1, AtomicOrdering::SeqCst);
        }
    }
}

/// Service calls take `call_time`; everything else is the usual handler.
fn slow_calls(id: NodeId, log: Arc<CallLog>, call_time: Duration) -> LocalHandler {
    let usual = handler(id);
    Arc::new(move |request| {
        let log = log.clone();
        let usual = usual.clone();
        Box::pin(async move {
            if !matches!(request, Request::Call(_)) {
                return usual(request).await;
            }
            log.started.fetch_add(1, AtomicOrdering::SeqCst);
            let mut guard = Stopped(log.clone(), true);
            tokio::time::sleep(call_time).await;
            guard.1 = false;
            log.finished.fetch_add(1, AtomicOrdering::SeqCst);
            Response::Done.into()
        })
    })
}

fn call(node: NodeId, idempotent: bool) -> Request {
    Request::Call(Box::new(quarry_proto::ServiceCall {
        node,
        service: quarry_proto::Service::Compute,
        idempotent,
        body: Bytes::from_static(b"scan"),
    }))
}

async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A requester that stops waiting (a cancelled command, a timeout) withdraws
/// its request: a read stops where it runs, one hop away or two; a call that
/// changes something runs to its end once started, so it never stops half-done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_read_stops_where_it_runs_and_a_started_write_does_not() {
    let logs: Vec<Arc<CallLog>> = (0..3).map(|_| Arc::new(CallLog::default())).collect();
    let serve = |id: NodeId| {
        let time = if id == 2 {
            Duration::from_secs(30)
        } else {
            Duration::from_millis(600)
        };
        slow_calls(id, logs[usize::from(id)].clone(), time)
    };
    let (nodes, _) = cluster_serving(TopologyKind::Line, 3, &serve).await;
    let entry = &nodes[0].fabric;
    // Sends `request` to `node` and stops waiting once the call has started
    // there for the `nth` time.
    let withdraw_once_started = |node: NodeId, request: Request, nth: usize| {
        let log = logs[usize::from(node)].clone();
        async move {
            let waiting = entry.route(node, request, 0, 7);
            let started = eventually("the call starting", || {
                log.started.load(AtomicOrdering::SeqCst) == nth
            });
            tokio::select! {
                answer = waiting => panic!("answered before it was withdrawn: {answer:?}"),
                () = started => {}
            }
        }
    };
    // Two hops: 0 -> 1 -> 2.
    withdraw_once_started(2, call(2, true), 1).await;
    eventually("the withdrawn read stopping at node 2", || {
        logs[2].stopped.load(AtomicOrdering::SeqCst) == 1
    })
    .await;
    // One hop.
    withdraw_once_started(1, call(1, true), 1).await;
    eventually("the withdrawn read stopping at node 1", || {
        logs[1].stopped.load(AtomicOrdering::SeqCst) == 1
    })
    .await;
    // A write withdrawn after it started still finishes.
    withdraw_once_started(1, call(1, false), 2).await;
    eventually("the withdrawn write finishing at node 1", || {
        logs[1].finished.load(AtomicOrdering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        logs[1].stopped.load(AtomicOrdering::SeqCst),
        1,
        "only the read"
    );
    // The streams are gone from every table: the links still carry requests.
    assert_page(read(entry, 2, 5).await, 2, 5);
    assert_eq!(
        entry.route(1, call(1, true), 0, 7).await,
        Response::Done,
        "a call that is waited for is answered"
    );
    for node in nodes {
        node.stop();
    }
}

/// A forwarding node keeps each stream's mapping until its answer ends; a
/// mapping that outlived its stream would fill the forwarder's table (here
/// 2 x 4 streams) and close the link. Hundreds of answered, and withdrawn,
/// requests through it leave it serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarder_forgets_every_stream_it_forwarded() {
    let tight = || FabricConfig {
        max_streams_per_link: 4,
        ..config()
    };
    let mut bound = listeners(3).await;
    let addrs: Vec<String> = bound.iter().map(|(_, a)| a.clone()).collect();
    let (l2, _) = bound.pop().unwrap();
    let (l1, _) = bound.pop().unwrap();
    let (l0, _) = bound.pop().unwrap();
    let entry = |id: NodeId| NodeEntry {
        id,
        addr: addrs[usize::from(id)].clone(),
    };
    let log = Arc::new(CallLog::default());
    let far = start_serving(
        2,
        l2,
        &addrs[2],
        Vec::new(),
        tight(),
        slow_calls(2, log.clone(), Duration::from_secs(30)),
    );
    let middle = start_serving(1, l1, &addrs[1], vec![entry(2)], tight(), handler(1));
    let near = start_serving(0, l0, &addrs[0], vec![entry(1)], tight(), handler(0));
    assert!(
        near.fabric
            .wait_for_routes(&[1, 2], Duration::from_secs(5))
            .await
    );
    for page in 0..300 {
        assert_page(read(&near.fabric, 2, page).await, 2, page);
    }
    for round in 0..20 {
        let reads = (0..4).map(|i| read(&near.fabric, 2, round * 4 + i));
        for (i, answer) in futures::future::join_all(reads)
            .await
            .into_iter()
            .enumerate()
        {
            assert_page(answer, 2, round * 4 + i as u32);
        }
    }
    for n in 1..=40 {
        let waiting = near.fabric.route(2, call(2, true), 0, 7);
        let started = eventually("the call starting", || {
            log.started.load(AtomicOrdering::SeqCst) == n
        });
        tokio::select! {
            answer = waiting => panic!("answered before it was withdrawn: {answer:?}"),
            () = started => {}
        }
    }
    eventually("every withdrawn call stopping", || {
        log.stopped.load(AtomicOrdering::SeqCst) == 40
    })
    .await;
    assert_page(read(&near.fabric, 2, 7).await, 2, 7);
    // Every stream has ended: the forwarder holds none of them.
    eventually("the forwarder's tables emptying", || {
        middle.fabric.routes().links.iter().all(|l| l.inbound == 0)
            && near.fabric.routes().links.iter().all(|l| l.in_flight == 0)
    })
    .await;
    assert_eq!(
        middle.fabric.routes().links.len(),
        2,
        "both links stayed up"
    );
    for node in [near, middle, far] {
        node.stop();
    }
}

/// When the link a read came in on goes down, nobody is left to take its
/// answer: it stops where it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_whose_requester_is_gone_stops() {
    let log = Arc::new(CallLog::default());
    let serve = |id: NodeId| slow_calls(id, log.clone(), Duration::from_secs(30));
    let (mut nodes, _) = cluster_serving(TopologyKind::Line, 2, &serve).await;
    let entry = nodes.remove(0);
    let fabric = entry.fabric.clone();
    let waiting = tokio::spawn(async move { fabric.route(1, call(1, true), 0, 7).await });
    eventually("the read starting at node 1", || {
        log.started.load(AtomicOrdering::SeqCst) == 1
    })
    .await;
    // The requesting node goes away with its request still waiting.
    entry.stop();
    eventually("the orphaned read stopping at node 1", || {
        log.stopped.load(AtomicOrdering::SeqCst) == 1
    })
    .await;
    waiting.abort();
    for node in nodes {
        node.stop();
    }
}

#[tokio::test]
async fn bad_configuration_is_refused_with_the_reason() {
    let local = NodeEntry {
        id: 0,
        addr: "127.0.0.1:1".into(),
    };
    let itself = vec![local.clone()];
    let error = Fabric::start(local.clone(), itself, config(), handler(0))
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        "neighbour 0 at 127.0.0.1:1 has this node's own id"
    );
    let twice = vec![
        NodeEntry {
            id: 1,
            addr: "a:1".into(),
        },
        NodeEntry {
            id: 1,
            addr: "b:1".into(),
        },
    ];
    let error = Fabric::start(local.clone(), twice, config(), handler(0))
        .err()
        .unwrap();
    assert_eq!(error.to_string(), "duplicate neighbour id 1 (at b:1)");
    let silly = FabricConfig {
        dead_after: Duration::from_millis(10),
        ..config()
    };
    let error = Fabric::start(local.clone(), Vec::new(), silly, handler(0))
        .err()
        .unwrap();
    assert!(error.to_string().contains("dead_after"), "{error}");
    for name in ["", "has space", &"x".repeat(65)] {
        let unnamed = FabricConfig {
            cluster: name.to_string(),
            ..config()
        };
        let error = Fabric::start(local.clone(), Vec::new(), unnamed, handler(0))
            .err()
            .unwrap();
        assert!(error.to_string().contains("cluster name"), "{error}");
    }
}

/// Virtual channels and rotating priority: a requester asking for one page
/// is answered while another requester's two hundred pages are still
/// queued on the same link, not after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_request_overtakes_a_bulk_flow() {
    let (nodes, _) = cluster(TopologyKind::Line, 2).await;
    // A round shows something only if the bulk flow is still queued when
    // the small request goes out; on a loaded machine it may not be, so a
    // few rounds are allowed to be inconclusive.
    let mut waits = Vec::new();
    for round in 0..5u32 {
        let done = Arc::new(std::sync::Mutex::new(0usize));
        let mut bulk = Vec::new();
        for page in 0..200u32 {
            let fabric = nodes[0].fabric.clone();
            let done = done.clone();
            bulk.push(tokio::spawn(async move {
                let answer = fabric
                    .route(1, Request::ReadPage(addr(1, page)), 0, 1)
                    .await;
                assert_page(answer, 1, page);
                *done.lock().unwrap() += 1;
            }));
        }
        // Wait for the first bulk answer: the link is busy from then on.
        while *done.lock().unwrap() == 0 {
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        let before = *done.lock().unwrap();
        let answer = nodes[0]
            .fabric
            .route(1, Request::ReadPage(addr(1, 9999)), 0, 2)
            .await;
        assert_page(answer, 1, 9999);
        let after = *done.lock().unwrap();
        for task in bulk {
            task.await.unwrap();
        }
        eprintln!("round {round}: {before} bulk pages answered when the small request went out, {after} when it was answered");
        if before < 150 {
            waits.push(after - before);
        }
        if waits.len() >= 2 {
            break;
        }
    }
    assert!(
        !waits.is_empty(),
        "the bulk flow never stayed queued long enough to tell"
    );
    for wait in &waits {
        assert!(
            *wait < 100,
            "the small request waited for {wait} bulk pages: {waits:?}"
        );
    }
    for node in nodes {
        node.stop();
    }
}

/// A hand-driven node at the far end of a link: speaks the link protocol
/// byte by byte, as another implementation would.
struct FakeNode {
    frames: tokio_util::codec::FramedRead<tokio::net::tcp::OwnedReadHalf, LinkCodec>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl FakeNode {
    /// Dials `addr` as node `id` and advertises a link to `neighbor`.
    async fn join(addr: &str, id: NodeId, neighbor: NodeId) -> FakeNode {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (reader, writer) = stream.into_split();
        let mut fake = FakeNode {
            frames: tokio_util::codec::FramedRead::new(reader, LinkCodec),
            writer,
        };
        let mut buf = bytes::BytesMut::new();
        let hello = Hello {
            cluster: "quarry".into(),
            id,
            addr: format!("fake-{id}:1"),
            instance: 1,
            expect: Some(neighbor),
            receive: FabricConfig::default().receive_limits(),
        };
        encode_json(LinkKind::Hello, &hello, &mut buf).unwrap();
        let advert = LinkAdvert {
            origin: id,
            addr: format!("fake-{id}:1"),
            sequence: 1,
            neighbors: [neighbor].into(),
        };
        encode_json(LinkKind::Advert, &advert, &mut buf).unwrap();
        fake.writer.write_all(&buf).await.unwrap();
        let theirs = fake.next(LinkKind::Hello).await;
        let hello: Hello = decode_json(LinkKind::Hello, &theirs.payload).unwrap();
        assert_eq!(hello.id, neighbor);
        fake
    }

    /// The next frame of `kind`, skipping adverts, credits and keepalives.
    async fn next(&mut self, kind: LinkKind) -> LinkFrame {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(5), self.frames.next())
                .await
                .unwrap_or_else(|_| panic!("no {kind:?} frame within 5 s"))
                .expect("link open")
                .expect("well-formed frame");
            if frame.header.kind == kind {
                return frame;
            }
        }
    }

    async fn send(&mut self, header: LinkHeader, payload: &[u8]) {
        let mut buf = bytes::BytesMut::new();
        header.put(&mut buf);
        buf.extend_from_slice(payload);
        self.writer.write_all(&buf).await.unwrap();
    }

    /// Sends `request`, whole in one fragment, to node `dest` on `stream`;
    /// returns the request's bytes as sent.
    async fn ask(&mut self, stream: u32, dest: NodeId, request: &Request) -> Vec<u8> {
        let mut encoded = bytes::BytesMut::new();
        quarry_proto::encode_request(0, 1, request, &mut encoded).unwrap();
        let header = LinkHeader {
            kind: LinkKind::Request,
            channel: Channel::Control,
            flags: link_flags::FIRST | link_flags::LAST,
            hops: 1,
            stream,
            dest,
            origin: 7,
            flow: 5,
            len_bytes: encoded.len() as u32,
        };
        self.send(header, &encoded).await;
        encoded.to_vec()
    }

    /// The whole answer on `stream`, encoded.
    async fn answer(&mut self, stream: u32) -> Vec<u8> {
        let mut answer = Vec::new();
        loop {
            let next = self.next(LinkKind::Response).await;
            assert_eq!(next.header.stream, stream);
            answer.extend_from_slice(&next.payload);
            if next.header.is_last() {
                return answer;
            }
        }
    }
}

fn encoded(response: &Response) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    quarry_proto::encode_response(0, response, &mut out).unwrap();
    out.to_vec()
}

/// Node 7 (a fake) links to node 1 of `nodes`, then links again in the same
/// run, so the second link replaces the first at node 1; the first is
/// returned.
async fn link_twice(nodes: &[TestNode], addrs: &[String]) -> (FakeNode, FakeNode) {
    let first = FakeNode::join(&addrs[1], 7, 1).await;
    assert!(
        nodes[1]
            .fabric
            .wait_for_routes(&[7], Duration::from_secs(5))
            .await
    );
    let second = FakeNode::join(&addrs[1], 7, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    (first, second)
}

/// When both ends dial each other, the link kept replaces the other one,
/// which is retired, not closed: a request the peer sent on it before it
/// switched (or sends while switching) is still answered there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_link_still_answers_what_was_sent_on_it() {
    let (nodes, addrs) = cluster(TopologyKind::Line, 2).await;
    let (mut first, _second) = link_twice(&nodes, &addrs).await;
    first.ask(0x31, 1, &Request::ReadPage(addr(1, 9))).await;
    let want = encoded(&Response::Page {
        data: page_of(1, 9),
        oob: Bytes::from(vec![1u8; 16]),
        erased: false,
        corrected_bytes: 0,
    });
    assert_eq!(
        first.answer(0x31).await,
        want,
        "the page, whole, on the retired link"
    );
    for node in nodes {
        node.stop();
    }
}

/// A retired link stays open while a request of the peer runs here, however
/// long past the grace it idles otherwise: closing it would lose the
/// answer, and a write's answer says whether the write happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_link_stays_open_while_a_request_of_the_peer_runs_here() {
    let log = Arc::new(CallLog::default());
    // Three times the grace a retired link idles before it closes.
    let call_time = config().dead_after * 3;
    let (nodes, addrs) = cluster_serving(TopologyKind::Line, 2, &|id| {
        slow_calls(id, log.clone(), call_time)
    })
    .await;
    let (mut first, _second) = link_twice(&nodes, &addrs).await;
    first.ask(0x32, 1, &call(1, false)).await;
    assert_eq!(
        first.answer(0x32).await,
        encoded(&Response::Done),
        "the write's answer on the retired link"
    );
    assert_eq!(log.finished.load(AtomicOrdering::SeqCst), 1);
    for node in nodes {
        node.stop();
    }
}

/// Hop-by-hop streaming and tag renaming, seen on the wire: a request from
/// node 7 to node 8 crosses a real node 1 under a tag of node 1's choosing,
/// and the first fragment of the answer is passed back to node 7 before node 8
/// has sent the rest of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_node_renames_tags_and_streams_fragments_on() {
    let (nodes, addrs) = cluster(TopologyKind::Line, 2).await;
    let mut entry = FakeNode::join(&addrs[1], 7, 1).await;
    let mut target = FakeNode::join(&addrs[1], 8, 1).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !nodes[1]
        .fabric
        .wait_for_routes(&[7, 8], Duration::from_millis(10))
        .await
    {
        assert!(
            Instant::now() < deadline,
            "node 1 never routed to the fakes"
        );
    }

    // Node 7 asks node 8 for a page, under its own stream tag 0x77.
    let request = entry.ask(0x77, 8, &Request::ReadPage(addr(8, 3))).await;
    let arrived = target.next(LinkKind::Request).await;
    assert_eq!(arrived.header.dest, 8);
    assert_eq!(arrived.header.hops, 2, "node 1 counted its hop");
    assert_eq!(arrived.header.origin, 7);
    assert_eq!(
        &arrived.payload[..],
        &request[..],
        "the request is passed on unchanged"
    );
    let renamed = arrived.header.stream;

    // Node 8 answers with a page in five fragments but sends only the first.
    let mut answer = bytes::BytesMut::new();
    let page = page_of(8, 3);
    quarry_proto::encode_response(
        0,
        &Response::Page {
            data: page.clone(),
            oob: Bytes::new(),
            erased: false,
            corrected_bytes: 0,
        },
        &mut answer,
    )
    .unwrap();
    let fragments: Vec<&[u8]> = answer.chunks(FRAGMENT_BYTES).collect();
    assert_eq!(fragments.len(), 5);
    let fragment_header = |index: usize| LinkHeader {
        kind: LinkKind::Response,
        channel: Channel::Data,
        flags: if index == 0 { link_flags::FIRST } else { 0 }
            | if index == fragments.len() - 1 {
                link_flags::LAST
            } else {
                0
            },
        hops: 0,
        stream: renamed,
        dest: 0,
        origin: 7,
        flow: 5,
        len_bytes: fragments[index].len() as u32,
    };
    target.send(fragment_header(0), fragments[0]).await;
    let first = entry.next(LinkKind::Response).await;
    assert_eq!(first.header.stream, 0x77, "mapped back to node 7's own tag");
    assert!(first.header.is_first() && !first.header.is_last());
    assert_eq!(&first.payload[..], fragments[0]);

    // The rest follows, in order, and the page is whole at node 7.
    for (index, fragment) in fragments.iter().enumerate().skip(1) {
        target.send(fragment_header(index), fragment).await;
    }
    let mut whole = first.payload.to_vec();
    loop {
        let next = entry.next(LinkKind::Response).await;
        assert_eq!(next.header.stream, 0x77);
        whole.extend_from_slice(&next.payload);
        if next.header.is_last() {
            break;
        }
    }
    assert_eq!(whole, answer.to_vec());
    for node in nodes {
        node.stop();
    }
}

/// Adverts flood in from anywhere and links are opened by anyone: a node
/// keeps at most `max_nodes` adverts and accepted links, and refuses the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adverts_and_accepted_links_are_bounded() {
    let mut bound = listeners(2).await;
    let (listener1, addr1) = bound.pop().unwrap();
    let (listener0, addr0) = bound.pop().unwrap();
    let small = FabricConfig {
        max_nodes: 5,
        ..config()
    };
    let node1 = start_with(1, listener1, &addr1, Vec::new(), small);
    let node0 = start(
        0,
        listener0,
        &addr0,
        vec![NodeEntry {
            id: 1,
            addr: addr1.clone(),
        }],
    );
    assert!(
        node1
            .fabric
            .wait_for_routes(&[0], Duration::from_secs(5))
            .await
    );

    // A node 7 claims links to four nodes 50..=53 and sends their adverts.
    let mut fake = FakeNode::join(&addr1, 7, 1).await;
    let mut adverts = bytes::BytesMut::new();
    for origin in 50..=53u16 {
        let advert = LinkAdvert {
            origin,
            addr: format!("fake-{origin}:1"),
            sequence: 1,
            neighbors: [7].into(),
        };
        encode_json(LinkKind::Advert, &advert, &mut adverts).unwrap();
    }
    let own = LinkAdvert {
        origin: 7,
        addr: "fake-7:1".into(),
        sequence: 2,
        neighbors: [1, 50, 51, 52, 53].into(),
    };
    encode_json(LinkKind::Advert, &own, &mut adverts).unwrap();
    fake.writer.write_all(&adverts).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let ids = || -> Vec<NodeId> { node1.fabric.members().iter().map(|m| m.id).collect() };
    while ids().len() < 5 {
        assert!(Instant::now() < deadline, "members: {:?}", ids());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        ids(),
        vec![0, 1, 7, 50, 51],
        "adverts beyond 5 nodes are dropped"
    );

    // Accepted: node 0's link and node 7's. Three idle connections fill the
    // rest; the next is closed at once, not left waiting for its handshake.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(tokio::net::TcpStream::connect(&addr1).await.unwrap());
    }
    let mut refused = tokio::net::TcpStream::connect(&addr1).await.unwrap();
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(
        Duration::from_millis(300),
        tokio::io::AsyncReadExt::read(&mut refused, &mut byte),
    )
    .await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "a link connection beyond the bound was kept: {closed:?}"
    );
    // The links already up still work.
    assert_page(read(&node0.fabric, 1, 2).await, 1, 2);
    drop(idle);
    node0.stop();
    node1.stop();
}

/// The entry node relays another node's answer as the fragments it came in
/// (only the tag changes when it goes out), and an answer that is not one
/// well-formed frame becomes an error of the entry node's, never bytes
/// passed on to its requester.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_answer_passes_on_whole_and_a_malformed_one_never_does() {
    let (nodes, addrs) = cluster(TopologyKind::Line, 2).await;
    let mut target = FakeNode::join(&addrs[1], 8, 1).await;
    assert!(
        nodes[1]
            .fabric
            .wait_for_routes(&[8], Duration::from_secs(5))
            .await
    );
    let page = page_of(8, 4);
    let answer = encoded(&Response::Page {
        data: page.clone(),
        oob: Bytes::new(),
        erased: false,
        corrected_bytes: 0,
    });
    for (stream_answer, malformed) in [(answer.clone(), false), (answer[..100].to_vec(), true)] {
        let fabric = nodes[1].fabric.clone();
        let asked =
            tokio::spawn(async move { fabric.relay(8, Request::ReadPage(addr(8, 4)), 0, 3).await });
        let request = target.next(LinkKind::Request).await;
        let fragments: Vec<&[u8]> = stream_answer.chunks(FRAGMENT_BYTES).collect();
        for (index, fragment) in fragments.iter().enumerate() {
            let first = if index == 0 { link_flags::FIRST } else { 0 };
            let last = if index + 1 == fragments.len() {
                link_flags::LAST
            } else {
                0
            };
            let header = LinkHeader {
                kind: LinkKind::Response,
                channel: Channel::Data,
                flags: first | last,
                hops: 0,
                stream: request.header.stream,
                dest: 0,
                origin: 1,
                flow: 3,
                len_bytes: fragment.len() as u32,
            };
            target.send(header, fragment).await;
        }
        match asked.await.unwrap() {
            quarry_proto::Answer::Relayed(frame) if !malformed => {
                let mut out = bytes::BytesMut::new();
                frame.write_into(0x1234, &mut out);
                let mut expected = bytes::BytesMut::new();
                let response = Response::Page {
                    data: page.clone(),
                    oob: Bytes::new(),
                    erased: false,
                    corrected_bytes: 0,
                };
                quarry_proto::encode_response(0x1234, &response, &mut expected).unwrap();
                assert_eq!(out, expected, "passed on as it came, under the new tag");
            }
            quarry_proto::Answer::Message(response) if malformed => {
                let (status, message) = error_of(response);
                assert_eq!(status, Status::Internal, "{message}");
                assert!(message.contains("malformed answer"), "{message}");
            }
            other => panic!("malformed: {malformed}, got {other:?}"),
        }
    }
    for node in nodes {
        node.stop();
    }
}

/// The size of one fragment of a random request stream.
#[derive(Debug, Clone)]
enum FragmentSize {
    /// Random bytes, within every limit.
    Small(Vec<u8>),
    /// One byte past the control channel's fragment limit.
    ControlOver,
    /// One byte past the data fragment size the node announced.
    DataOver,
}

/// One fragment of a random sequence on a link.
#[derive(Debug, Clone)]
struct RandomFragment {
    stream: u32,
    /// For the node itself, or for a node nobody knows.
    dest_known: bool,
    flags: u8,
    data: bool,
    size: FragmentSize,
}

fn random_fragments() -> impl proptest::strategy::Strategy<Value = Vec<RandomFragment>> {
    use proptest::prelude::*;
    let size = prop_oneof![
        20 => proptest::collection::vec(any::<u8>(), 0..48).prop_map(FragmentSize::Small),
        1 => Just(FragmentSize::ControlOver),
        1 => Just(FragmentSize::DataOver),
    ];
    let fragment = (0u32..3, any::<bool>(), 0u8..4, any::<bool>(), size).prop_map(
        |(stream, dest_known, flags, data, size)| RandomFragment {
            stream,
            dest_known,
            flags,
            data,
            size,
        },
    );
    proptest::collection::vec(fragment, 1..12)
}

/// What the node must make of `fragments`, as its reassembly is specified:
/// the streams it answers (one for this node when its last fragment comes,
/// one for an unknown node at once, on its first; fragments of streams not
/// open are dropped), and whether the link breaks (a fragment over its
/// limit, a stream opened twice).
fn expected_of(fragments: &[RandomFragment]) -> (Vec<u32>, bool) {
    // Open streams, and whether each is for this node.
    let mut open = std::collections::BTreeMap::new();
    let mut answered = Vec::new();
    for fragment in fragments {
        if !matches!(fragment.size, FragmentSize::Small(_)) {
            return (answered, true);
        }
        if fragment.flags & link_flags::FIRST != 0 {
            if open.insert(fragment.stream, fragment.dest_known).is_some() {
                return (answered, true);
            }
            if !fragment.dest_known {
                answered.push(fragment.stream);
            }
        }
        if fragment.flags & link_flags::LAST != 0 && open.remove(&fragment.stream) == Some(true) {
            answered.push(fragment.stream);
        }
    }
    (answered, false)
}

/// Links to the node at `addr` as node `id`, sends `fragments`, and checks
/// the node answers what the reassembly rules say and breaks the link
/// exactly when they say so; an unbroken link still answers a ping.
/// Returns whether the link broke.
async fn reassembly_follows_the_rules(
    addr: &str,
    id: NodeId,
    fragments: &[RandomFragment],
) -> bool {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (reader, mut writer) = stream.into_split();
    let mut frames = tokio_util::codec::FramedRead::new(reader, LinkCodec);
    let limits = FabricConfig::default().receive_limits();
    let mut bytes = hello_of("quarry", id, Some(1), limits);
    let data_bytes = limits.data_fragment_bytes as usize;
    for fragment in fragments {
        let dest = if fragment.dest_known { 1 } else { 77 };
        let (channel, payload) = match &fragment.size {
            FragmentSize::Small(payload) if fragment.data => (Channel::Data, payload.clone()),
            FragmentSize::Small(payload) => (Channel::Control, payload.clone()),
            FragmentSize::ControlOver => (Channel::Control, vec![0; FRAGMENT_BYTES + 1]),
            FragmentSize::DataOver => (Channel::Data, vec![0; data_bytes + 1]),
        };
        let header = fragment_with(fragment.stream, dest, channel, fragment.flags, &payload);
        bytes.extend_from_slice(&frames_of(&[(header, payload)]));
    }
    let (mut expected, broken) = expected_of(fragments);
    if !broken {
        let mut ping = bytes::BytesMut::new();
        quarry_proto::encode_request(0, 1, &Request::Ping, &mut ping).unwrap();
        let whole = link_flags::FIRST | link_flags::LAST;
        let header = fragment_with(1000, 1, Channel::Control, whole, &ping);
        bytes.extend_from_slice(&frames_of(&[(header, ping.to_vec())]));
        expected.push(1000);
    }
    // A node that breaks the link may do so before it has read everything.
    let _ = writer.write_all(&bytes).await;
    let mut answered = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while broken || answered.len() < expected.len() {
            match frames.next().await {
                Some(Ok(frame)) if frame.header.kind == LinkKind::Response => {
                    if frame.header.is_last() {
                        answered.push(frame.header.stream);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return false,
            }
        }
        true
    })
    .await;
    let Ok(open) = end else {
        panic!("{fragments:?}: neither {expected:?} answered nor the link closed within 5 s, answered {answered:?}");
    };
    assert_eq!(open, !broken, "{fragments:?}: link open: {open}");
    answered.sort_unstable();
    expected.sort_unstable();
    if broken {
        // Answers of streams finished before the break may or may not leave.
        assert!(
            answered.iter().all(|stream| expected.contains(stream)),
            "{fragments:?}: answered {answered:?}, finished {expected:?}"
        );
    } else {
        assert_eq!(answered, expected, "{fragments:?}");
    }
    broken
}

fn fragment_with(
    stream: u32,
    dest: NodeId,
    channel: Channel,
    flags: u8,
    payload: &[u8],
) -> LinkHeader {
    fragment(stream, dest, channel, flags, payload.len())
}

/// Sequences tried by [`random_fragment_sequences_are_reassembled_or_refused`].
const REASSEMBLY_CASES: u32 = 256;

/// Random request fragment sequences on a live link (out of order,
/// duplicated, oversized, to unknown nodes) are reassembled, dropped,
/// answered or refused as the rules say, never wedge the link, and leave
/// the node serving its real neighbour.
#[test]
fn random_fragment_sequences_are_reassembled_or_refused() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (nodes, addrs) = runtime.block_on(cluster(TopologyKind::Line, 2));
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: REASSEMBLY_CASES,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    });
    // Every case links as a node of its own, so no case's link replaces
    // another's.
    let next_id = std::sync::atomic::AtomicU16::new(100);
    let broken_links = AtomicUsize::new(0);
    let result = runner.run(&random_fragments(), |fragments| {
        let id = next_id.fetch_add(1, AtomicOrdering::Relaxed);
        if runtime.block_on(reassembly_follows_the_rules(&addrs[1], id, &fragments)) {
            broken_links.fetch_add(1, AtomicOrdering::Relaxed);
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    // Both outcomes were tried: some sequences broke their link, some not.
    let broken_links = broken_links.into_inner();
    assert!(
        (1..REASSEMBLY_CASES as usize).contains(&broken_links),
        "{broken_links} of {REASSEMBLY_CASES} links broke"
    );
    runtime.block_on(async {
        assert_page(read(&nodes[0].fabric, 1, 6).await, 1, 6);
    });
    for node in nodes {
        runtime.block_on(async { node.stop() });
    }
}
