//! An in-process cluster on loopback with the `mem` device backend.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_device::{BlockAddr, DeviceConfig, PageAddr};
use quarry_fabric::{links_of, TopologyKind};
use quarry_node::{Node, NodeConfig, NodeHandle, NodeLimits, PeerConfig};
use quarry_proto::{
    GlobalBlockAddr, GlobalPageAddr, NodeId, Request, Response, Session, SessionLimits, Status,
};
use tokio::net::TcpListener;

async fn cluster(n: u16, dir: &Path) -> Vec<NodeHandle> {
    cluster_of(TopologyKind::Mesh, n, dir).await
}

/// `n` nodes linked as `kind`, each listing its neighbours; returns once
/// every node has a route to every other.
async fn cluster_of(kind: TopologyKind, n: u16, dir: &Path) -> Vec<NodeHandle> {
    let ids: Vec<NodeId> = (0..n).collect();
    let links = links_of(kind, &ids);
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let mut nodes = Vec::new();
    for (id, listener) in listeners.into_iter().enumerate() {
        let id = id as NodeId;
        let config = NodeConfig {
            cluster: "test".into(),
            id,
            listen: addrs[usize::from(id)].clone(),
            data_dir: dir.join(format!("node{id}")),
            device: DeviceConfig {
                backend: quarry_device::BackendKind::Mem,
                ..DeviceConfig::default()
            },
            peers: (0..n)
                .filter(|p| links.contains(&(id.min(*p), id.max(*p))))
                .map(|p| PeerConfig {
                    id: p,
                    addr: addrs[usize::from(p)].clone(),
                })
                .collect(),
            limits: NodeLimits {
                connect_timeout_ms: 1000,
                retry_backoff_ms: 200,
                ..NodeLimits::default()
            },
            storage: Default::default(),
            compute: Default::default(),
            memcached_listen: None,
            kv: Default::default(),
        };
        nodes.push(Node::start_with_listener(config, listener).await.unwrap());
    }
    for node in &nodes {
        assert!(
            node.fabric()
                .wait_for_routes(&ids, Duration::from_secs(5))
                .await,
            "node {} did not learn every route",
            node.id()
        );
    }
    nodes
}

async fn session(node: &NodeHandle) -> Session {
    Session::connect(&node.local_addr().to_string(), SessionLimits::default())
        .await
        .unwrap()
}

fn page(node: NodeId, page: u32) -> GlobalPageAddr {
    GlobalPageAddr {
        node,
        page: PageAddr {
            bus: 1,
            chip: 0,
            block: 2,
            page,
        },
    }
}

fn error_of(response: Response) -> (Status, String) {
    match response {
        Response::Error { status, message } => (status, message),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn program_through_one_node_read_through_another_then_erase() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(3, dir.path()).await;
    let via0 = session(&nodes[0]).await;
    let via2 = session(&nodes[2]).await;
    let data = Bytes::from((0..8192u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let oob = Bytes::from_static(b"owner=test");

    let block = GlobalBlockAddr {
        node: 1,
        block: BlockAddr {
            bus: 1,
            chip: 0,
            block: 2,
        },
    };
    assert_eq!(
        via0.call(Request::EraseBlock(block)).await.unwrap(),
        Response::Done
    );
    let program = Request::ProgramPage {
        addr: page(1, 0),
        data: data.clone(),
        oob: oob.clone(),
    };
    assert_eq!(via0.call(program).await.unwrap(), Response::Done);
    match via2.call(Request::ReadPage(page(1, 0))).await.unwrap() {
        Response::Page {
            data: got,
            oob: got_oob,
            erased,
            ..
        } => {
            assert_eq!(got, data);
            assert_eq!(&got_oob[..oob.len()], &oob[..]);
            assert!(!erased);
        }
        other => panic!("{other:?}"),
    }
    // NAND rule errors travel back through the forwarding node unchanged.
    let again = Request::ProgramPage {
        addr: page(1, 0),
        data: data.clone(),
        oob: Bytes::new(),
    };
    let (status, message) = error_of(via2.call(again).await.unwrap());
    assert_eq!(status, Status::AlreadyProgrammed, "{message}");

    assert_eq!(
        via2.call(Request::EraseBlock(block)).await.unwrap(),
        Response::Done
    );
    match via0.call(Request::ReadPage(page(1, 0))).await.unwrap() {
        Response::Page { erased, .. } => assert!(erased),
        other => panic!("{other:?}"),
    }
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_info_and_cluster_of_remote_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(3, dir.path()).await;
    let via0 = session(&nodes[0]).await;
    match via0.call(Request::NodeInfo(2)).await.unwrap() {
        Response::NodeInfo(info) => {
            assert_eq!(info.id, 2);
            assert_eq!(info.addr, nodes[2].local_addr().to_string());
        }
        other => panic!("{other:?}"),
    }
    match via0.call(Request::Cluster).await.unwrap() {
        Response::Cluster(members) => {
            assert_eq!(
                members.iter().map(|m| m.id).collect::<Vec<_>>(),
                vec![0, 1, 2]
            )
        }
        other => panic!("{other:?}"),
    }
    let (status, message) = error_of(via0.call(Request::ReadPage(page(9, 0))).await.unwrap());
    assert_eq!(status, Status::UnknownNode);
    assert_eq!(
        message,
        "node 9 is not known to node 0; reachable nodes are 0,1,2"
    );
    let (status, _) = error_of(
        via0.call(Request::ReadPage(GlobalPageAddr {
            node: 1,
            page: PageAddr {
                bus: 99,
                chip: 0,
                block: 0,
                page: 0,
            },
        }))
        .await
        .unwrap(),
    );
    assert_eq!(status, Status::AddressOutOfRange);
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_node_is_reported_within_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = cluster(3, dir.path()).await;
    let dead_addr = nodes[2].local_addr().to_string();
    nodes.pop().unwrap().shutdown().await.unwrap();
    let via0 = session(&nodes[0]).await;
    let started = Instant::now();
    let (status, message) = error_of(via0.call(Request::NodeInfo(2)).await.unwrap());
    assert_eq!(status, Status::NodeUnreachable);
    // Node 0 may still route through node 1 for a moment; whichever node
    // finds the path gone says so.
    assert!(
        message.starts_with(&format!("node 2 (at {dead_addr}) is unreachable")),
        "{message}"
    );
    // The route wait (1 s by default) bounds it, far below the request
    // timeout (30 s) it would otherwise take; the bound leaves a loaded
    // machine room.
    assert!(started.elapsed() < Duration::from_secs(10));
    // The rest of the cluster still works.
    assert!(matches!(
        via0.call(Request::NodeInfo(1)).await.unwrap(),
        Response::NodeInfo(_)
    ));
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_client_connections() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(1, dir.path()).await;
    let client = session(&nodes[0]).await;
    assert_eq!(client.call(Request::Ping).await.unwrap(), Response::Pong);
    let started = Instant::now();
    for node in nodes {
        node.shutdown().await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(client.call(Request::Ping).await.is_err());
}

fn pattern_of(page: u32) -> Bytes {
    Bytes::from(
        (0..8192u32)
            .map(|i| (i.wrapping_mul(31) ^ page.wrapping_mul(2_654_435_761)) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// BlueDBM's two-layer tags: 16 clients entering at four different nodes of
/// a line, each numbering its requests from the same tag values, all read
/// node 3 at once; every answer must reach the client that asked, with the
/// page it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_with_the_same_tags_get_their_own_answers() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster_of(TopologyKind::Line, 4, dir.path()).await;
    let loader = session(&nodes[0]).await;
    const PAGES: u32 = 32;
    let target = |p: u32| GlobalPageAddr {
        node: 3,
        page: PageAddr {
            bus: p % 4,
            chip: 0,
            block: 0,
            page: p / 4,
        },
    };
    for p in 0..PAGES {
        let program = Request::ProgramPage {
            addr: target(p),
            data: pattern_of(p),
            oob: Bytes::copy_from_slice(&p.to_be_bytes()),
        };
        assert_eq!(loader.call(program).await.unwrap(), Response::Done);
    }
    let mut clients = Vec::new();
    for client in 0..16u32 {
        let entry = &nodes[(client % 4) as usize];
        let session = session(entry).await;
        clients.push(tokio::spawn(async move {
            // Each client walks the pages in its own order, all requests of a
            // round in flight together.
            for round in 0..8u32 {
                let order: Vec<u32> = (0..PAGES)
                    .map(|i| (i * 7 + client * 5 + round * 3) % PAGES)
                    .collect();
                let calls = order
                    .iter()
                    .map(|&p| session.call(Request::ReadPage(target(p))));
                let answers = futures::future::join_all(calls).await;
                for (&p, answer) in order.iter().zip(answers) {
                    match answer.unwrap() {
                        Response::Page { data, oob, .. } => {
                            assert!(
                                data == pattern_of(p),
                                "client {client} got the wrong data for page {p}"
                            );
                            assert_eq!(&oob[..4], &p.to_be_bytes());
                        }
                        other => panic!("client {client}, page {p}: {other:?}"),
                    }
                }
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

/// NAND takes a block's pages only in order. A client that sends a whole
/// block's programs at once, in order, through a forwarding node (two hops
/// on a line) must see them applied in that order: each link starts the
/// requests it carries in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_programs_of_one_block_stay_in_order_across_hops() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster_of(TopologyKind::Line, 3, dir.path()).await;
    let client = session(&nodes[0]).await;
    let pages_per_block = 64; // DeviceConfig::default()'s geometry
    let target = |p: u32| GlobalPageAddr {
        node: 2,
        page: PageAddr {
            bus: 0,
            chip: 0,
            block: 3,
            page: p,
        },
    };
    let mut pending = Vec::new();
    for p in 0..pages_per_block {
        let program = Request::ProgramPage {
            addr: target(p),
            data: pattern_of(p),
            oob: Bytes::new(),
        };
        pending.push(client.submit(program).await.unwrap());
    }
    for (p, answer) in pending.into_iter().enumerate() {
        assert_eq!(answer.await.unwrap(), Response::Done, "page {p}");
    }
    for p in 0..pages_per_block {
        match client.call(Request::ReadPage(target(p))).await.unwrap() {
            Response::Page { data, .. } => assert!(data == pattern_of(p), "page {p}"),
            other => panic!("page {p}: {other:?}"),
        }
    }
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

/// A client that connects and asks nothing for longer than the node's
/// connect timeout (1 s here) is still served when it does ask: the mount
/// connects at start and waits for the first file operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_silent_past_the_connect_timeout_is_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(2, dir.path()).await;
    let quiet = session(&nodes[0]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(quiet.call(Request::Ping).await.unwrap(), Response::Pong);
    // Neighbours still find each other's links: a page on the other node
    // reads through this one.
    let read = quiet.call(Request::ReadPage(page(1, 0))).await.unwrap();
    assert!(
        matches!(read, Response::Page { .. }),
        "a read through the link answered {read:?}"
    );
}
