//! An in-process cluster on loopback for the client's tests.
#![allow(dead_code)]

use std::path::Path;

use quarry_device::{BackendKind, DeviceConfig, Geometry};
use quarry_node::{
    Node, NodeConfig, NodeHandle, NodeLimits, PeerConfig, StorageConfig, StorageMode,
};
use quarry_proto::NodeId;
use tokio::net::TcpListener;

pub fn small_geometry() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 4,
        pages_per_block: 8,
        page_size_bytes: 512,
        oob_size_bytes: 16,
    }
}

/// Starts `geometries.len()` nodes, node `i` with `geometries[i]`.
pub async fn cluster(dir: &Path, geometries: &[Geometry]) -> Vec<NodeHandle> {
    cluster_with(dir, geometries, StorageMode::Raw).await
}

/// Like [`cluster`], each node in storage mode `mode`.
pub async fn cluster_with(
    dir: &Path,
    geometries: &[Geometry],
    mode: StorageMode,
) -> Vec<NodeHandle> {
    cluster_on(dir, geometries, mode, false).await
}

/// Like [`cluster_with`]; `file_backed` puts each device in a file under
/// `dir/node<id>`, so a cluster started again on `dir` finds its data.
pub async fn cluster_on(
    dir: &Path,
    geometries: &[Geometry],
    mode: StorageMode,
    file_backed: bool,
) -> Vec<NodeHandle> {
    let devices: Vec<DeviceConfig> = geometries
        .iter()
        .map(|g| DeviceConfig {
            backend: if file_backed {
                BackendKind::File
            } else {
                BackendKind::Mem
            },
            geometry: Some(*g),
            ..DeviceConfig::default()
        })
        .collect();
    cluster_of(dir, &devices, mode).await
}

/// Starts `devices.len()` nodes, node `i` on device `devices[i]`, in storage
/// mode `mode`, all linked to all.
pub async fn cluster_of(
    dir: &Path,
    devices: &[DeviceConfig],
    mode: StorageMode,
) -> Vec<NodeHandle> {
    let n = devices.len() as NodeId;
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
    }
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").to_string())
        .collect();
    let mut nodes = Vec::new();
    for (id, listener) in listeners.into_iter().enumerate() {
        let config = node_config(dir, &addrs, id as NodeId, &devices[id], mode);
        nodes.push(
            Node::start_with_listener(config, listener)
                .await
                .expect("node starts"),
        );
    }
    let ids: Vec<NodeId> = (0..n).collect();
    for node in &nodes {
        assert!(
            node.fabric()
                .wait_for_routes(&ids, std::time::Duration::from_secs(5))
                .await,
            "node {} did not learn every route",
            node.id()
        );
    }
    nodes
}

/// Node `id`'s configuration in a cluster of the nodes at `addrs`, all
/// linked to all.
fn node_config(
    dir: &Path,
    addrs: &[String],
    id: NodeId,
    device: &DeviceConfig,
    mode: StorageMode,
) -> NodeConfig {
    let n = addrs.len() as NodeId;
    NodeConfig {
        cluster: "test".into(),
        id,
        listen: addrs[usize::from(id)].clone(),
        data_dir: dir.join(format!("node{id}")),
        device: device.clone(),
        peers: (0..n)
            .filter(|p| *p != id)
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
        storage: StorageConfig {
            mode,
            ..StorageConfig::default()
        },
        compute: Default::default(),
        memcached_listen: None,
        kv: Default::default(),
    }
}

/// Starts node `id` of a cluster made by [`cluster_of`] again, on its old
/// address and data directory (after it was shut down).
pub async fn restart_node(
    dir: &Path,
    addrs: &[String],
    id: NodeId,
    device: &DeviceConfig,
    mode: StorageMode,
) -> NodeHandle {
    let listener = TcpListener::bind(&addrs[usize::from(id)])
        .await
        .expect("bind the old address");
    let config = node_config(dir, addrs, id, device, mode);
    Node::start_with_listener(config, listener)
        .await
        .expect("node restarts")
}
