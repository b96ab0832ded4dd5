//! The object store through the client, against an in-process cluster of
//! four managed `mem` nodes on loopback: every call crosses the protocol and
//! the fabric to the node placement names.

mod common;

use common::cluster_with;
use quarry_client::{
    BucketName, Chunking, Client, ClientError, Condition, ObjectKey, Status, StoreError,
};
use quarry_device::Geometry;
use quarry_node::StorageMode;
use quarry_store_api::Fingerprint;

fn geometry() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 64,
        pages_per_block: 32,
        page_size_bytes: 4096,
        oob_size_bytes: 64,
    }
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    quarry_testkit::noise_bytes(len, seed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_through_any_entry_node() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster_with(dir.path(), &[geometry(); 4], StorageMode::Managed).await;
    let a = Client::connect(&nodes[0].local_addr().to_string())
        .await
        .unwrap()
        .objects()
        .await
        .unwrap();
    let b = Client::connect(&nodes[3].local_addr().to_string())
        .await
        .unwrap()
        .objects()
        .await
        .unwrap();
    let bucket = BucketName::new("data").unwrap();
    a.create_bucket(&bucket, Chunking::fixed(16 * 1024).unwrap())
        .await
        .unwrap();
    let data = bytes(1_000_000, 7);
    let key = ObjectKey::new("big.bin").unwrap();
    let m = a
        .put(&bucket, &key, &data[..], Condition::IfAbsent)
        .await
        .unwrap();
    assert_eq!(m.size(), 1_000_000);
    // Chunks went to every node.
    let (_, got) = b.get(&bucket, &key).await.unwrap();
    assert_eq!(&got[..], &data[..]);
    let (_, mid) = b.get_range(&bucket, &key, 123_457, 50_000).await.unwrap();
    assert_eq!(&mid[..], &data[123_457..173_457]);

    // Same bytes under another key: no new chunk space.
    let before = b.usage().await.unwrap();
    b.put(
        &bucket,
        &ObjectKey::new("copy.bin").unwrap(),
        &data[..],
        Condition::Always,
    )
    .await
    .unwrap();
    let after = a.usage().await.unwrap();
    assert_eq!(after.stored_bytes, before.stored_bytes);
    assert_eq!(after.logical_bytes, 2_000_000);
    assert!((after.dedup_ratio() - 2.0).abs() < 0.01);

    // A conditional put from the other entry node is refused by version.
    let err = b
        .put(&bucket, &key, &b"new"[..], Condition::IfVersion(9))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::VersionMismatch { .. }), "{err}");
    b.put(&bucket, &key, &b"new"[..], Condition::IfVersion(1))
        .await
        .unwrap();
    assert_eq!(&a.get(&bucket, &key).await.unwrap().1[..], b"new");

    // Deleting the last references frees the chunks.
    a.delete(&bucket, &key, Condition::Always).await.unwrap();
    a.delete(
        &bucket,
        &ObjectKey::new("copy.bin").unwrap(),
        Condition::Always,
    )
    .await
    .unwrap();
    assert_eq!(a.usage().await.unwrap().stored_bytes, 0);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_survive_a_node_restart() {
    let dir = tempfile::tempdir().unwrap();
    // The file backend keeps pages across restarts.
    let geometry = geometry();
    let nodes = common::cluster_on(dir.path(), &[geometry; 2], StorageMode::Managed, true).await;
    let objects = Client::connect(&nodes[1].local_addr().to_string())
        .await
        .unwrap()
        .objects()
        .await
        .unwrap();
    let bucket = BucketName::new("keep").unwrap();
    objects
        .create_bucket(&bucket, Chunking::DEFAULT_FASTCDC)
        .await
        .unwrap();
    let data = bytes(300_000, 3);
    for i in 0..5 {
        let key = ObjectKey::new(&format!("o{i}")).unwrap();
        objects
            .put(&bucket, &key, &data[i * 1000..], Condition::Always)
            .await
            .unwrap();
    }
    drop(objects);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
    let nodes = common::cluster_on(dir.path(), &[geometry; 2], StorageMode::Managed, true).await;
    let objects = Client::connect(&nodes[0].local_addr().to_string())
        .await
        .unwrap()
        .objects()
        .await
        .unwrap();
    for i in 0..5 {
        let key = ObjectKey::new(&format!("o{i}")).unwrap();
        let (m, got) = objects.get(&bucket, &key).await.unwrap();
        assert_eq!(m.version(), 1);
        assert_eq!(&got[..], &data[i * 1000..]);
    }
    assert_eq!(objects.list(&bucket, "", None, 100).await.unwrap().len(), 5);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_nodes_refuse_store_calls_and_managed_nodes_refuse_raw_writes() {
    let dir = tempfile::tempdir().unwrap();
    let raw = cluster_with(&dir.path().join("raw"), &[geometry(); 1], StorageMode::Raw).await;
    let client = Client::connect(&raw[0].local_addr().to_string())
        .await
        .unwrap();
    let err = client.objects().await.unwrap().buckets().await.unwrap_err();
    assert!(
        err.to_string().contains("storage mode \"managed\""),
        "{err}"
    );

    let managed = cluster_with(
        &dir.path().join("managed"),
        &[geometry(); 1],
        StorageMode::Managed,
    )
    .await;
    let client = Client::connect(&managed[0].local_addr().to_string())
        .await
        .unwrap();
    let addr = "0:0:0:0:0".parse().unwrap();
    let err = client
        .program_page(addr, vec![0u8; 4096].into(), Default::default())
        .await
        .unwrap_err();
    match err {
        ClientError::Remote { status, message } => {
            assert_eq!(status, Status::BadRequest);
            assert!(message.contains("managed storage"), "{message}");
        }
        other => panic!("unexpected {other}"),
    }
    // Raw reads are allowed.
    client.read_page(addr).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_spans_the_configured_members_while_one_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = cluster_with(dir.path(), &[geometry(); 3], StorageMode::Managed).await;
    let entry = nodes[0].local_addr().to_string();
    let all = Client::connect(&entry)
        .await
        .unwrap()
        .with_members([0, 1, 2])
        .objects()
        .await
        .unwrap();
    let bucket = BucketName::new("b").unwrap();
    // A bucket whose record and an object whose manifest live on node 0
    // (up throughout), and a key whose manifest lives on node 2.
    let bucket = (0..)
        .map(|i| BucketName::new(&format!("b{i}")).unwrap())
        .find(|b| all.placement().bucket_node(b) == 0)
        .unwrap_or(bucket);
    all.create_bucket(&bucket, Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    let on = |node: u16| {
        (0..)
            .map(|i| ObjectKey::new(&format!("k{i}")).unwrap())
            .find(|k| all.placement().manifest_node(&bucket, k) == node)
            .unwrap()
    };
    let (on_zero, on_two) = (on(0), on(2));
    all.put(&bucket, &on_two, &b"kept on node 2"[..], Condition::Always)
        .await
        .unwrap();
    nodes.pop().unwrap().shutdown().await.unwrap();

    // With the configured members, node 2's key is unavailable, not absent,
    // and a write that needs node 2 fails rather than landing elsewhere.
    let all = Client::connect(&entry)
        .await
        .unwrap()
        .with_members([0, 1, 2])
        .objects()
        .await
        .unwrap();
    let err = all.get(&bucket, &on_two).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Transport { node: 2, .. }),
        "{err}"
    );
    let err = all
        .put(&bucket, &on_two, &b"new"[..], Condition::Always)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Transport { node: 2, .. }),
        "{err}"
    );
    // Keys placed on live nodes still work.
    all.put(&bucket, &on_zero, &b"fine"[..], Condition::Always)
        .await
        .unwrap();

    // Without them, the entry node's view (nodes 0 and 1) places node 2's
    // key elsewhere and calls it absent: why the CLI and the mount pass the
    // cluster file's members.
    let client = Client::connect(&entry).await.unwrap();
    let mut reachable = client.objects().await.unwrap();
    for _ in 0..50 {
        if reachable.nodes().count() == 2 {
            break;
        }
        // Node 0 drops node 2 from its routes once their link closes.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        reachable = client.objects().await.unwrap();
    }
    assert_eq!(reachable.nodes().count(), 2);
    let err = reachable.get(&bucket, &on_two).await.unwrap_err();
    assert!(matches!(err, StoreError::NoSuchObject { .. }), "{err}");
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

/// With the members' addresses, object calls go to the member that holds
/// the data over a connection of their own: with the entry node gone, an
/// object held wholly elsewhere still reads back, where a client that knows
/// only the entry node can no longer reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_calls_go_straight_to_the_member_that_holds_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = cluster_with(dir.path(), &[geometry(); 3], StorageMode::Managed).await;
    let addrs: Vec<(u16, String)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (i as u16, n.local_addr().to_string()))
        .collect();
    let entry = addrs[0].1.clone();
    let direct = Client::connect(&entry)
        .await
        .unwrap()
        .with_member_addrs(addrs.clone())
        .objects()
        .await
        .unwrap();
    let routed = Client::connect(&entry)
        .await
        .unwrap()
        .with_members([0, 1, 2])
        .objects()
        .await
        .unwrap();
    let placement = direct.placement().clone();
    // A bucket, a key and one chunk's bytes that all live off node 0.
    let bucket = (0..)
        .map(|i| BucketName::new(&format!("b{i}")).unwrap())
        .find(|b| placement.bucket_node(b) != 0)
        .unwrap();
    let key = (0..)
        .map(|i| ObjectKey::new(&format!("k{i}")).unwrap())
        .find(|k| placement.manifest_node(&bucket, k) != 0)
        .unwrap();
    let data = (0..)
        .map(|seed| bytes(3000, seed))
        .find(|d| placement.chunk_node(&Fingerprint::of(d)) != 0)
        .unwrap();
    direct
        .create_bucket(&bucket, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    direct
        .put(&bucket, &key, &data[..], Condition::Always)
        .await
        .unwrap();
    assert_eq!(&direct.get(&bucket, &key).await.unwrap().1[..], &data[..]);

    nodes.remove(0).shutdown().await.unwrap();
    let (_, got) = direct.get(&bucket, &key).await.unwrap();
    assert_eq!(&got[..], &data[..]);
    let err = routed.get(&bucket, &key).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Transport { .. }),
        "through the dead entry node: {err}"
    );
}

/// A member whose address does not answer is reached through the entry
/// node: a wrong or unreachable address costs speed, never an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_out_of_direct_reach_is_reached_through_the_entry_node() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster_with(dir.path(), &[geometry(); 3], StorageMode::Managed).await;
    // Nothing listens on port 1 of loopback: every dial is refused.
    let addrs = vec![
        (0, nodes[0].local_addr().to_string()),
        (1, "127.0.0.1:1".to_string()),
        (2, "127.0.0.1:1".to_string()),
    ];
    let objects = Client::connect(&addrs[0].1)
        .await
        .unwrap()
        .with_member_addrs(addrs)
        .objects()
        .await
        .unwrap();
    let bucket = BucketName::new("reach").unwrap();
    objects
        .create_bucket(&bucket, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    let data = bytes(200_000, 11);
    let key = ObjectKey::new("spread.bin").unwrap();
    objects
        .put(&bucket, &key, &data[..], Condition::Always)
        .await
        .unwrap();
    let placement = objects.placement().clone();
    let on_far_nodes = data
        .chunks(4096)
        .filter(|c| placement.chunk_node(&Fingerprint::of(c)) != 0)
        .count();
    assert!(on_far_nodes > 0, "some chunks must live on nodes 1 and 2");
    let (_, got) = objects.get(&bucket, &key).await.unwrap();
    assert_eq!(&got[..], &data[..]);
}

/// A client made from the members' addresses (as `Client::connect_cluster`
/// makes it) outlives a crash of its entry node: once the node is back on
/// its address, calls to it are dialled anew, where they would otherwise
/// go to the dead entry connection for as long as the client lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_keeps_working_after_its_entry_node_restarts() {
    let dir = tempfile::tempdir().unwrap();
    // The file backend keeps node 0's pages across its restart.
    let device = quarry_device::DeviceConfig {
        backend: quarry_device::BackendKind::File,
        geometry: Some(geometry()),
        ..quarry_device::DeviceConfig::default()
    };
    let mut nodes =
        common::cluster_of(dir.path(), &vec![device.clone(); 3], StorageMode::Managed).await;
    let addrs: Vec<String> = nodes.iter().map(|n| n.local_addr().to_string()).collect();
    let objects = Client::connect(&addrs[0])
        .await
        .unwrap()
        .with_member_addrs((0..).zip(addrs.iter().cloned()))
        .objects()
        .await
        .unwrap();
    let placement = objects.placement().clone();
    let bucket = BucketName::new("restart").unwrap();
    objects
        .create_bucket(&bucket, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    // Both objects' manifests live on the entry node, so neither put nor
    // get can avoid it.
    let mut on_entry = (0..)
        .map(|i| ObjectKey::new(&format!("k{i}")).unwrap())
        .filter(|k| placement.manifest_node(&bucket, k) == 0);
    let (before_key, after_key) = (on_entry.next().unwrap(), on_entry.next().unwrap());
    let before = bytes(50_000, 21);
    objects
        .put(&bucket, &before_key, &before[..], Condition::Always)
        .await
        .unwrap();

    nodes.remove(0).shutdown().await.unwrap();
    let err = objects.get(&bucket, &before_key).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Transport { node: 0, .. }),
        "with the entry node down: {err}"
    );
    let _node0 = common::restart_node(dir.path(), &addrs, 0, &device, StorageMode::Managed).await;

    let after = bytes(50_000, 22);
    objects
        .put(&bucket, &after_key, &after[..], Condition::Always)
        .await
        .unwrap();
    assert_eq!(
        &objects.get(&bucket, &before_key).await.unwrap().1[..],
        &before[..]
    );
    assert_eq!(
        &objects.get(&bucket, &after_key).await.unwrap().1[..],
        &after[..]
    );
}

/// A cluster file that names only one node (a seed address) still gives
/// placement over every member: what its client puts, a client of the
/// whole file finds, and the other way round. Placement over the file's
/// one node put every chunk there, where no other client looks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_file_naming_one_node_places_over_every_member() {
    use quarry_client::{ClusterFile, ClusterNode};
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster_with(dir.path(), &[geometry(); 4], StorageMode::Managed).await;
    let entry = |id: u16| ClusterNode {
        id,
        addr: nodes[usize::from(id)].local_addr().to_string(),
        config: None,
        log: None,
        pid: None,
        memcached: None,
    };
    let seed = ClusterFile {
        nodes: vec![entry(2)],
    };
    let whole = ClusterFile {
        nodes: (0..4).map(entry).collect(),
    };
    let by_seed = Client::connect_cluster(&seed)
        .await
        .unwrap()
        .objects()
        .await
        .unwrap();
    let by_file = Client::connect_cluster(&whole)
        .await
        .unwrap()
        .objects()
        .await
        .unwrap();
    assert_eq!(by_seed.placement().members(), &[0, 1, 2, 3]);
    assert_eq!(by_seed.placement().members(), by_file.placement().members());
    let bucket = BucketName::new("seeded").unwrap();
    by_seed
        .create_bucket(&bucket, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    let (one, other) = (bytes(60_000, 31), bytes(60_000, 32));
    let (k1, k2) = (
        ObjectKey::new("one").unwrap(),
        ObjectKey::new("other").unwrap(),
    );
    by_seed
        .put(&bucket, &k1, &one[..], Condition::Always)
        .await
        .unwrap();
    by_file
        .put(&bucket, &k2, &other[..], Condition::Always)
        .await
        .unwrap();
    assert_eq!(&by_file.get(&bucket, &k1).await.unwrap().1[..], &one[..]);
    assert_eq!(&by_seed.get(&bucket, &k2).await.unwrap().1[..], &other[..]);
}
