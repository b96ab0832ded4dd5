//! Forwarding through real loopback servers.

use std::time::{Duration, Instant};

use quarry_fabric::{FabricConfig, FabricError, Membership, MeshRouter, Router};
use quarry_proto::{
    serve_connection_with, Incoming, NodeEntry, Request, Response, SessionLimits, Status,
};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// A peer that answers Ping with Pong and Cluster with the hop count it saw.
async fn peer_on(listener: TcpListener) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            connections.spawn(serve_connection_with(
                stream,
                SessionLimits::default(),
                std::future::pending(),
                |incoming: Incoming| async move {
                    match incoming.request {
                        Request::Ping => Response::Pong,
                        Request::Cluster => Response::Cluster(vec![NodeEntry {
                            id: u16::from(incoming.hops),
                            addr: "hops".into(),
                        }]),
                        _ => Response::Done,
                    }
                },
            ));
        }
    })
}

fn config() -> FabricConfig {
    FabricConfig {
        limits: SessionLimits {
            connect_timeout: Duration::from_secs(1),
            ..SessionLimits::default()
        },
        max_hops: 4,
        retry_backoff: Duration::from_millis(300),
    }
}

fn router(peers: &[(u16, &str)]) -> MeshRouter {
    let local = NodeEntry {
        id: 0,
        addr: "127.0.0.1:1".into(),
    };
    let peers = peers.iter().map(|(id, addr)| NodeEntry {
        id: *id,
        addr: addr.to_string(),
    });
    MeshRouter::new(Membership::new(local, peers).unwrap(), config())
}

fn error_of(response: Response) -> (Status, String) {
    match response {
        Response::Error { status, message } => (status, message),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn forwards_to_a_live_peer_with_one_more_hop() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let _peer = peer_on(listener).await;
    let router = router(&[(1, &addr)]);
    assert_eq!(router.route(1, Request::Ping, 0).await, Response::Pong);
    assert_eq!(router.connected_peers(), vec![1]);
    match router.route(1, Request::Cluster, 2).await {
        Response::Cluster(entries) => assert_eq!(entries[0].id, 3),
        other => panic!("{other:?}"),
    }
    // Many concurrent forwards share the one link.
    let answers =
        futures::future::join_all((0..300).map(|_| router.route(1, Request::Ping, 0))).await;
    assert!(answers.iter().all(|a| *a == Response::Pong));
}

#[tokio::test]
async fn unknown_node_names_the_members() {
    let router = router(&[(1, "127.0.0.1:9"), (2, "127.0.0.1:9"), (3, "127.0.0.1:9")]);
    let (status, message) = error_of(router.route(9, Request::Ping, 0).await);
    assert_eq!(status, Status::UnknownNode);
    assert_eq!(message, "node 9 is not a member; members are 0,1,2,3");
}

#[tokio::test]
async fn hop_limit_refuses_loops() {
    let router = router(&[(1, "127.0.0.1:9")]);
    let (status, message) = error_of(router.route(1, Request::Ping, 4).await);
    assert_eq!(status, Status::HopLimitExceeded);
    assert!(message.contains("limit is 4"), "{message}");
}

#[tokio::test]
async fn dead_peer_fails_fast_then_reconnects_when_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let router = router(&[(3, &addr)]);

    let started = Instant::now();
    let (status, message) = error_of(router.route(3, Request::Ping, 0).await);
    assert_eq!(status, Status::NodeUnreachable);
    assert_eq!(
        message,
        format!("node 3 at {addr} is unreachable: connection refused")
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // Inside the back-off window a burst fails at once without dialling.
    let started = Instant::now();
    let burst =
        futures::future::join_all((0..100).map(|_| router.route(3, Request::Ping, 0))).await;
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    for answer in burst {
        let (status, message) = error_of(answer);
        assert_eq!(status, Status::NodeUnreachable);
        assert!(message.contains("next attempt in"), "{message}");
    }

    // The peer comes back on the same address; after the back-off it is reached.
    let listener = TcpListener::bind(&addr).await.unwrap();
    let peer = peer_on(listener).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(router.route(3, Request::Ping, 0).await, Response::Pong);

    // The peer dies with the link open: the next request reports it, and a
    // restarted peer is reached again.
    peer.abort();
    let _ = peer.await;
    let (status, message) = error_of(router.route(3, Request::Ping, 0).await);
    assert_eq!(status, Status::NodeUnreachable, "{message}");
    let listener = TcpListener::bind(&addr).await.unwrap();
    let _peer = peer_on(listener).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(router.route(3, Request::Ping, 0).await, Response::Pong);
}

#[tokio::test]
async fn unroutable_address_fails_within_the_connect_timeout() {
    // 10.255.255.1 is normally unroutable: either no route (fast) or silence
    // until the connect timeout.
    let router = router(&[(5, "10.255.255.1:7400")]);
    let started = Instant::now();
    let (status, message) = error_of(router.route(5, Request::Ping, 0).await);
    assert_eq!(status, Status::NodeUnreachable);
    assert!(
        message.starts_with("node 5 at 10.255.255.1:7400 is unreachable"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn membership_rejects_bad_peer_lists() {
    let local = NodeEntry {
        id: 0,
        addr: "a:1".into(),
    };
    let dup = vec![
        NodeEntry {
            id: 1,
            addr: "b:1".into(),
        },
        NodeEntry {
            id: 1,
            addr: "c:1".into(),
        },
    ];
    let err = Membership::new(local.clone(), dup).unwrap_err();
    assert!(
        matches!(err, FabricError::DuplicatePeer { id: 1, .. }),
        "{err}"
    );
    assert_eq!(err.to_string(), "duplicate peer id 1: both b:1 and c:1");
    let own = vec![NodeEntry {
        id: 0,
        addr: "b:1".into(),
    }];
    assert!(matches!(
        Membership::new(local.clone(), own),
        Err(FabricError::SelfAmongPeers { .. })
    ));
    let m = Membership::new(
        local,
        vec![NodeEntry {
            id: 2,
            addr: "b:1".into(),
        }],
    )
    .unwrap();
    assert_eq!(
        m.members().iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![0, 2]
    );
    assert!(m.is_member(2) && !m.is_member(1));
}
