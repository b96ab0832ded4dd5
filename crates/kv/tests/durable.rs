//! Durable tenants on the space manager: what was acknowledged is there
//! after the process lets go of everything without closing, counts and
//! all; a compaction in between changes nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quarry_device::{BackendKind, Device, DeviceConfig, Geometry};
use quarry_kv::{KvConfig, KvMode, KvNode, TenantConfig};
use quarry_kv_api::{
    Expiry, ItemKind, KvAnswer, KvCall, KvOp, KvReply, KvRequest, StoreMode, TenantName,
};
use quarry_store::{VolumeTableConfig, VolumeTableStore};
use quarry_volume::{SpaceManager, VolumeConfig};

type Node = KvNode<VolumeTableStore>;

fn geometry() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 32,
        pages_per_block: 64,
        page_size_bytes: 4096,
        oob_size_bytes: 64,
    }
}

async fn open(dir: &std::path::Path) -> (Node, Arc<VolumeTableStore>, std::sync::Weak<Device>) {
    open_with(dir, &["alpha"]).await
}

/// The node with these durable tenants (each with secret "p" + its first
/// letter).
async fn open_with(
    dir: &std::path::Path,
    tenants: &[&str],
) -> (Node, Arc<VolumeTableStore>, std::sync::Weak<Device>) {
    let config = DeviceConfig {
        backend: BackendKind::File,
        geometry: Some(geometry()),
        direct_io: Some(false),
        seed: Some(7),
        ..DeviceConfig::default()
    };
    let device = Arc::new(Device::open(&config, dir).unwrap());
    let weak = Arc::downgrade(&device);
    let volume = Arc::new(
        SpaceManager::open(
            device,
            VolumeConfig {
                background: false,
                ..VolumeConfig::default()
            },
            dir,
        )
        .await
        .unwrap(),
    );
    let tables = VolumeTableConfig {
        log_space: 4,
        snapshot_space: 5,
        compact_min_log_pages: 16,
        ..VolumeTableConfig::default()
    };
    let tables = Arc::new(VolumeTableStore::open(volume, tables).await.unwrap());
    let kv = KvConfig {
        tenants: tenants
            .iter()
            .map(|name| TenantConfig {
                name: name.to_string(),
                secret: format!("p{}", &name[..1]),
                mode: KvMode::Durable,
                max_bytes: 64 << 20,
                max_keys: u64::MAX,
                ops_per_sec: 0,
                bytes_per_sec: 0,
                burst_ms: quarry_kv::DEFAULT_BURST_MS,
                dedup: true,
            })
            .collect(),
        ..KvConfig::default()
    };
    let node = Node::open(&kv, Some(Arc::clone(&tables))).await.unwrap();
    (node, tables, weak)
}

async fn run(node: &Node, ops: Vec<KvOp>) -> Vec<KvAnswer> {
    run_as(node, "alpha", ops).await
}

async fn run_as(node: &Node, tenant: &str, ops: Vec<KvOp>) -> Vec<KvAnswer> {
    let call = KvCall {
        tenant: TenantName::new(tenant).unwrap(),
        secret: Bytes::from(format!("p{}", &tenant[..1])),
        request: KvRequest::Ops(ops),
    };
    match node.call(call).await {
        KvReply::Answers(a) => a,
        other => panic!("{other:?}"),
    }
}

fn set(key: &str, value: Vec<u8>) -> KvOp {
    KvOp::Store {
        key: Bytes::from(key.to_string()),
        mode: StoreMode::Set,
        flags: 3,
        expiry: Expiry::Never,
        kind: ItemKind::Plain,
        value: Bytes::from(value),
    }
}

/// One of four values of 2000 bytes (deduplicated) or a small one.
fn value_of(seed: u64) -> Vec<u8> {
    if seed.is_multiple_of(3) {
        format!("small-{seed}").into_bytes()
    } else {
        vec![(seed % 4) as u8; 2000]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_changes_survive_a_crash_with_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (node, tables, device) = open(dir.path()).await;
    let node = Arc::new(node);
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    // Eight writers at once, so commits group; each owns its keys.
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let node = Arc::clone(&node);
        tasks.push(tokio::spawn(async move {
            let mut mine = HashMap::new();
            for i in 0..60u64 {
                let key = format!("w{w}-k{}", i % 17);
                if i % 5 == 4 {
                    let del = KvOp::Delete {
                        key: Bytes::from(key.clone()),
                        cas: None,
                    };
                    run(&node, vec![del]).await;
                    mine.insert(key, None);
                } else {
                    let v = value_of(w * 1000 + i);
                    let a = run(&node, vec![set(&key, v.clone())]).await;
                    assert!(matches!(a[0], KvAnswer::Stored { .. }), "{a:?}");
                    mine.insert(key, Some(v));
                }
            }
            mine
        }));
    }
    for t in tasks {
        for (k, v) in t.await.unwrap() {
            match v {
                Some(v) => model.insert(k, v),
                None => model.remove(&k),
            };
        }
    }
    node.audit().unwrap();
    let stats_before = stats(&node).await;
    tables.compacted().await;
    assert!(tables.stats().compactions >= 1, "{:?}", tables.stats());
    // The tenant's table is the only copy in memory: the tables log its
    // changes and snapshot them from it.
    assert_eq!(tables.stats().records, 0, "{:?}", tables.stats());

    // Let go of everything without closing.
    let node = Arc::into_inner(node).expect("the writers are done");
    close(node, tables, device).await;

    let (node, _tables, _) = open(dir.path()).await;
    node.audit().unwrap();
    for (k, v) in &model {
        let a = run(&node, vec![get(k)]).await;
        match &a[0] {
            KvAnswer::Value(item) => {
                assert_eq!(&item.value[..], &v[..], "{k}");
                assert_eq!(item.flags, 3);
            }
            other => panic!("{k}: {other:?}"),
        }
    }
    let after = stats(&node).await;
    for name in [
        "curr_items",
        "logical_bytes",
        "stored_bytes",
        "dedup_values",
        "bytes",
    ] {
        assert_eq!(after[name], stats_before[name], "{name}");
    }
    assert_eq!(after["curr_items"], model.len() as u64);
    // Four distinct big values at most, whatever the number of items.
    assert!(after["dedup_values"] <= 4);
    // New CAS values are above every one loaded.
    let a = run(&node, vec![set("fresh", b"x".to_vec())]).await;
    let KvAnswer::Stored { cas } = a[0] else {
        panic!()
    };
    assert!(cas > 8 * 60 / 2, "{cas}");
}

async fn stats(node: &Node) -> HashMap<String, u64> {
    let call = KvCall {
        tenant: TenantName::new("alpha").unwrap(),
        secret: Bytes::from_static(b"pa"),
        request: KvRequest::Stats,
    };
    match node.call(call).await {
        KvReply::Stats(s) => s.into_iter().collect(),
        other => panic!("{other:?}"),
    }
}

fn get(key: &str) -> KvOp {
    KvOp::Get {
        key: Bytes::from(key.to_string()),
        touch: None,
    }
}

/// Let go of `node` and its tables and wait until the device is closed.
async fn close(node: Node, tables: Arc<VolumeTableStore>, device: std::sync::Weak<Device>) {
    drop(node);
    drop(tables);
    for _ in 0..500 {
        if device.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the device outlived the node");
}

/// A tenant taken out of the configuration for a while: the node does not
/// keep its records in memory, but its tables do, through compactions, so
/// it is all there when the tenant comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_left_out_of_the_configuration_keeps_its_items() {
    let dir = tempfile::tempdir().unwrap();
    let (node, tables, device) = open_with(dir.path(), &["alpha", "beta"]).await;
    for i in 0..40u64 {
        let a = run_as(&node, "beta", vec![set(&format!("b{i}"), value_of(i))]).await;
        assert!(matches!(a[0], KvAnswer::Stored { .. }), "{a:?}");
    }
    close(node, tables, device).await;

    // Without beta: alpha's sets compact the tables more than once.
    let (node, tables, device) = open_with(dir.path(), &["alpha"]).await;
    for i in 0..200u64 {
        run(&node, vec![set(&format!("a{}", i % 30), value_of(i))]).await;
    }
    tables.compact().await.unwrap();
    assert!(tables.stats().compactions >= 2, "{:?}", tables.stats());
    // Beta's 40 items and its shared values stay with the tables.
    assert!(tables.stats().records >= 40, "{:?}", tables.stats());
    close(node, tables, device).await;

    let (node, _tables, _) = open_with(dir.path(), &["alpha", "beta"]).await;
    node.audit().unwrap();
    for i in 0..40u64 {
        let a = run_as(&node, "beta", vec![get(&format!("b{i}"))]).await;
        match &a[0] {
            KvAnswer::Value(item) => assert_eq!(&item.value[..], &value_of(i)[..], "b{i}"),
            other => panic!("b{i}: {other:?}"),
        }
    }
    for i in 170..200u64 {
        let key = format!("a{}", i % 30);
        let a = run(&node, vec![get(&key)]).await;
        match &a[0] {
            KvAnswer::Value(item) => assert_eq!(&item.value[..], &value_of(i)[..], "{key}"),
            other => panic!("{key}: {other:?}"),
        }
    }
}
