//! Block volumes over in-process nodes: each node a space manager on a
//! `mem` device and a registry, calls served by `serve_volume_call` through
//! a transport that counts the calls in flight.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{open, quiet, small, Rng};
use quarry_device::{BackendKind, Geometry};
use quarry_volume::{
    answer_error, serve_volume_call, BlockVolumeError, BlockVolumes, LogicalPage, SpaceManager,
    VolumeDef, VolumeRegistry, VolumeTransport, ADD_CALL_MAX_BYTES, MAX_ADDS_PER_CALL,
    VOLUME_SPACE_BASE,
};

struct Node {
    registry: VolumeRegistry,
    space: SpaceManager,
}

/// In-process nodes. A node in `raw` refuses volume calls as a raw node
/// does; a node in `down` does not answer.
struct Nodes {
    nodes: Vec<Node>,
    raw: BTreeSet<u16>,
    down: Mutex<BTreeSet<u16>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    calls: AtomicUsize,
}

impl VolumeTransport for Nodes {
    async fn call(&self, node: u16, _: bool, body: Bytes) -> Result<Bytes, BlockVolumeError> {
        if self.raw.contains(&node) {
            return Err(BlockVolumeError::Refused {
                node,
                message: format!("node {node} runs its device raw"),
            });
        }
        if self.down.lock().unwrap().contains(&node) {
            return Err(BlockVolumeError::Transport {
                node,
                reason: "connection refused".into(),
            });
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::SeqCst);
        // Let other calls start, as a network would.
        tokio::task::yield_now().await;
        let n = &self.nodes[usize::from(node)];
        let answer = serve_volume_call(&n.registry, &n.space, body).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(answer)
    }
}

async fn nodes_with(dir: &std::path::Path, geometries: &[Geometry], raw: &[u16]) -> Arc<Nodes> {
    let mut nodes = Vec::new();
    for (id, g) in geometries.iter().enumerate() {
        let data_dir = dir.join(format!("node{id}"));
        let (space, _) = open(BackendKind::Mem, *g, &data_dir, quiet()).await;
        let registry = VolumeRegistry::open(id as u16, &data_dir).unwrap();
        nodes.push(Node { registry, space });
    }
    Arc::new(Nodes {
        nodes,
        raw: raw.iter().copied().collect(),
        down: Mutex::new(BTreeSet::new()),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    })
}

fn view(nodes: &Arc<Nodes>) -> BlockVolumes<Nodes> {
    let ids = (0..nodes.nodes.len() as u16).collect();
    BlockVolumes::new(nodes.clone(), ids)
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    (0..len).map(|_| rng.next() as u8).collect()
}

const PS: usize = 512;

#[tokio::test]
async fn pages_stripe_over_the_members_and_read_back_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 4], &[]).await;
    let volumes = view(&nodes);
    let def = volumes
        .create("disk", 120 * PS as u64, Some(vec![3, 1, 2]))
        .await
        .unwrap();
    assert_eq!((def.size_pages, def.page_size_bytes), (120, 512));
    assert_eq!(def.members, vec![3, 1, 2]);
    // Every member holds the definition; node 0 does not.
    for (id, n) in nodes.nodes.iter().enumerate() {
        assert_eq!(n.registry.get("disk").is_some(), id != 0, "node {id}");
    }

    let disk = volumes.open("disk").await.unwrap();
    let data = pattern(50 * PS, 1);
    disk.write_pages(10, &data).await.unwrap();
    // Another view of the same cluster reads it back.
    let other = view(&nodes).open("disk").await.unwrap();
    assert_eq!(&other.read_pages(10, 50).await.unwrap()[..], &data[..]);
    // Page L is on members[L % 3] at index L / 3 of space 1000 + id.
    let space = VOLUME_SPACE_BASE + def.id;
    for l in 10..60u64 {
        let node = def.members[(l % 3) as usize];
        let got = nodes.nodes[usize::from(node)]
            .space
            .read(LogicalPage::new(space, l / 3))
            .await
            .unwrap()
            .expect("the page is where striping says");
        let at = (l as usize - 10) * PS;
        assert_eq!(&got[..], &data[at..at + PS], "page {l}");
        assert_eq!(disk.locate(l).unwrap(), (node, l / 3));
    }
    let held: usize = nodes
        .nodes
        .iter()
        .map(|n| n.space.pages_in(space).len())
        .sum();
    assert_eq!(held, 50);
    assert!(nodes.nodes[0].space.pages_in(space).is_empty());

    // Pages never written read as zeros.
    let zeros = disk.read_pages(0, 10).await.unwrap();
    assert!(zeros.iter().all(|b| *b == 0) && zeros.len() == 10 * PS);

    // The listing shows it once, with its pages.
    let listing = volumes.list().await.unwrap();
    assert_eq!(listing.volumes.len(), 1);
    assert_eq!(listing.volumes[0].used_pages, 50);
    assert!(listing.volumes[0].missing_on.is_empty());
    assert_eq!(listing.nodes.len(), 4);
    let status = volumes.status("disk").await.unwrap();
    assert_eq!(status.used_pages(), 50);
    assert_eq!(status.members.len(), 3);
}

#[tokio::test]
async fn byte_ranges_read_modify_write_partial_pages() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 3], &[]).await;
    let volumes = view(&nodes);
    volumes.create("bytes", 40 * PS as u64, None).await.unwrap();
    let v = volumes.open("bytes").await.unwrap();
    let mut model = vec![0u8; 40 * PS];
    let mut rng = Rng(5);
    for round in 0..60 {
        let offset = rng.below(model.len() as u64) as usize;
        let len = rng.below((model.len() - offset).min(3 * PS) as u64 + 1) as usize;
        let data = pattern(len, round);
        v.write_range(offset as u64, &data).await.unwrap();
        model[offset..offset + len].copy_from_slice(&data);
        let a = rng.below(model.len() as u64) as usize;
        let b = a + rng.below((model.len() - a) as u64 + 1) as usize;
        assert_eq!(
            &v.read_range(a as u64, (b - a) as u64).await.unwrap()[..],
            &model[a..b],
            "round {round}"
        );
    }
    assert_eq!(
        &v.read_range(0, model.len() as u64).await.unwrap()[..],
        &model[..]
    );
    // Trimmed pages read as zeros again.
    v.trim_pages(0, 40).await.unwrap();
    assert!(v.read_pages(0, 40).await.unwrap().iter().all(|b| *b == 0));
}

#[tokio::test]
async fn bad_requests_get_errors_that_name_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let other_pages = Geometry {
        page_size_bytes: 1024,
        ..small()
    };
    let nodes = nodes_with(dir.path(), &[small(), small(), other_pages, small()], &[3]).await;
    let volumes = view(&nodes);
    let err = |r: Result<VolumeDef, BlockVolumeError>| r.unwrap_err();

    let e = err(volumes.create("bad name", 4096, Some(vec![0])).await);
    assert!(matches!(e, BlockVolumeError::InvalidName { .. }), "{e}");
    let e = err(volumes.create("v", 0, Some(vec![0])).await);
    assert!(matches!(e, BlockVolumeError::InvalidSize { .. }), "{e}");
    let e = err(volumes.create("v", 1000, Some(vec![0])).await);
    assert!(
        e.to_string().contains("not a whole number") && e.to_string().contains("1024"),
        "{e}"
    );
    let e = err(volumes.create("v", 4096, Some(vec![0, 9])).await);
    assert!(e.to_string().contains("node 9 is not a member"), "{e}");
    let e = err(volumes.create("v", 4096, Some(vec![0, 0])).await);
    assert!(e.to_string().contains("listed twice"), "{e}");
    let e = err(volumes.create("v", 4096, Some(vec![0, 2])).await);
    assert!(
        matches!(
            e,
            BlockVolumeError::PageSizeMismatch {
                node: 2,
                node_page_size_bytes: 1024,
                volume_page_size_bytes: 512
            }
        ),
        "{e}"
    );
    // A raw member: refused by name, nothing left defined anywhere.
    let e = err(volumes.create("v", 4096, Some(vec![0, 3])).await);
    assert!(
        matches!(e, BlockVolumeError::Refused { node: 3, .. }),
        "{e}"
    );
    assert!(volumes.list().await.unwrap().volumes.is_empty());

    volumes
        .create("v", 8 * PS as u64, Some(vec![0, 1]))
        .await
        .unwrap();
    let e = err(volumes.create("v", 4096, Some(vec![1])).await);
    assert!(matches!(e, BlockVolumeError::Exists { .. }), "{e}");
    let v = volumes.open("v").await.unwrap();
    let e = v.read_pages(6, 3).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "volume \"v\": pages 6..9 are outside its 8 pages"
    );
    let e = v.write_pages(0, &[1u8; 100]).await.unwrap_err();
    assert!(matches!(e, BlockVolumeError::PageData { .. }), "{e}");
    let e = v.read_range(4000, 97).await.unwrap_err();
    assert!(e.to_string().contains("bytes 4000..4097"), "{e}");
    // Thin-provisioned sizes far past the devices are fine; one transfer
    // is bounded before anything is allocated for it.
    volumes
        .create("huge", 1 << 30, Some(vec![0, 1]))
        .await
        .unwrap();
    let huge = volumes.open("huge").await.unwrap();
    let e = huge.read_pages(0, 1 << 20).await.unwrap_err();
    assert!(matches!(e, BlockVolumeError::RangeTooLarge { .. }), "{e}");
    assert!(huge
        .read_page((1 << 21) - 1)
        .await
        .unwrap()
        .iter()
        .all(|b| *b == 0));
    let e = volumes.open("nope").await.err().unwrap();
    assert_eq!(e.to_string(), "no volume named \"nope\"");

    // A handle outliving its volume cannot touch the next one of that name.
    v.write_page(1, &[7u8; PS]).await.unwrap();
    volumes.delete("v").await.unwrap();
    volumes
        .create("v", 8 * PS as u64, Some(vec![0, 1]))
        .await
        .unwrap();
    let e = v.write_page(1, &[8u8; PS]).await.unwrap_err();
    assert!(matches!(e, BlockVolumeError::Stale { .. }), "{e}");
    let fresh = volumes.open("v").await.unwrap();
    assert!(fresh.read_page(1).await.unwrap().iter().all(|b| *b == 0));
}

#[tokio::test]
async fn delete_trims_every_members_pages() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 3], &[]).await;
    let volumes = view(&nodes);
    volumes.create("a", 90 * PS as u64, None).await.unwrap();
    volumes
        .create("b", 30 * PS as u64, Some(vec![2]))
        .await
        .unwrap();
    let a = volumes.open("a").await.unwrap();
    let b = volumes.open("b").await.unwrap();
    a.write_pages(0, &pattern(90 * PS, 2)).await.unwrap();
    b.write_pages(0, &pattern(30 * PS, 3)).await.unwrap();
    let live = |n: usize| nodes.nodes[n].space.stats().live_pages;
    assert_eq!((live(0), live(1), live(2)), (30, 30, 60));
    // A member that does not answer leaves the delete incomplete...
    nodes.down.lock().unwrap().insert(1);
    let e = volumes.delete("a").await.unwrap_err();
    assert!(
        matches!(e, BlockVolumeError::Incomplete { op: "delete", .. }),
        "{e}"
    );
    assert_eq!((live(0), live(1), live(2)), (0, 30, 30));
    // ...and running it again finishes it.
    nodes.down.lock().unwrap().clear();
    assert_eq!(volumes.delete("a").await.unwrap(), 30);
    assert_eq!((live(0), live(1), live(2)), (0, 0, 30));
    // The other volume is untouched.
    assert_eq!(
        &b.read_pages(0, 30).await.unwrap()[..],
        &pattern(30 * PS, 3)[..]
    );
    let listing = volumes.list().await.unwrap();
    let names: Vec<String> = listing.volumes.into_iter().map(|v| v.def.name).collect();
    assert_eq!(names, vec!["b"]);
}

#[tokio::test]
async fn registries_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("node1");
    let (space, _) = open(BackendKind::Mem, small(), &data_dir, quiet()).await;
    let registry = VolumeRegistry::open(1, &data_dir).unwrap();
    let def = |name: &str, id| VolumeDef {
        name: name.into(),
        id,
        instance: u64::from(id) + 100,
        size_pages: 64,
        page_size_bytes: 512,
        members: vec![0, 1],
        created_unix_ms: 5,
    };
    assert!(registry.define(def("x", 1), &space).await.unwrap());
    assert!(registry.define(def("y", 2), &space).await.unwrap());
    // The same definition again is harmless; another under the name is not.
    assert!(!registry.define(def("x", 1), &space).await.unwrap());
    let e = registry.define(def("x", 3), &space).await.unwrap_err();
    assert!(matches!(e, BlockVolumeError::Exists { .. }), "{e}");
    let e = registry.define(def("z", 2), &space).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("id 2 is taken on node 1 by volume \"y\""),
        "{e}"
    );
    let e = registry
        .define(
            VolumeDef {
                members: vec![0, 2],
                ..def("w", 4)
            },
            &space,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("asked node 1 to hold it"), "{e}");

    let again = VolumeRegistry::open(1, &data_dir).unwrap();
    assert_eq!(again.volumes(), vec![def("x", 1), def("y", 2)]);
    assert_eq!(again.delete("x", 101, &space).await.unwrap(), Some(0));
    assert_eq!(again.delete("x", 101, &space).await.unwrap(), None);
    let e = again.delete("y", 7, &space).await.unwrap_err();
    assert!(matches!(e, BlockVolumeError::Stale { .. }), "{e}");
    let third = VolumeRegistry::open(1, &data_dir).unwrap();
    assert_eq!(third.volumes(), vec![def("y", 2)]);
    // The directory of node 1 is not node 0's.
    let e = VolumeRegistry::open(0, &data_dir).unwrap_err();
    assert!(
        e.to_string().contains("volumes.reg") && e.to_string().contains("another node"),
        "{e}"
    );
}

#[tokio::test]
async fn multi_page_transfers_keep_a_bounded_number_of_calls_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 4], &[]).await;
    let volumes = view(&nodes).with_max_in_flight(3).unwrap();
    volumes
        .create("wide", 2000 * PS as u64, None)
        .await
        .unwrap();
    let v = volumes.open("wide").await.unwrap();
    nodes.max_in_flight.store(0, Ordering::SeqCst);
    nodes.calls.store(0, Ordering::SeqCst);
    // 2000 pages of 512 bytes over 4 members: 4096 pages fit one call, so
    // one call per member; cut it to many calls with a smaller range each.
    let data = pattern(400 * PS, 9);
    for chunk in 0..5u64 {
        let at = chunk as usize * 80 * PS;
        v.write_pages(chunk * 80, &data[at..at + 80 * PS])
            .await
            .unwrap();
    }
    assert_eq!(&v.read_pages(0, 400).await.unwrap()[..], &data[..]);
    let max = nodes.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=3).contains(&max), "{max} calls were in flight at once");
    assert!(view(&nodes).with_max_in_flight(0).is_err());
    assert!(view(&nodes).with_max_in_flight(100_000).is_err());
}

#[tokio::test]
async fn a_full_member_says_no_space_by_name_and_keeps_what_it_has() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 2], &[]).await;
    let volumes = view(&nodes);
    // Thin-provisioned: 4000 pages over two nodes of ~850 pages each.
    volumes.create("big", 4000 * PS as u64, None).await.unwrap();
    let v = volumes.open("big").await.unwrap();
    let mut written = 0u64;
    let e = loop {
        match v.write_pages(written, &pattern(100 * PS, written)).await {
            Ok(()) => written += 100,
            Err(e) => break e,
        }
        assert!(written < 4000, "never ran out of space");
    };
    assert!(matches!(e, BlockVolumeError::NoSpace { .. }), "{e}");
    assert!(e.to_string().contains("out of space"), "{e}");
    for first in (0..written).step_by(100) {
        assert_eq!(
            &v.read_pages(first, 100).await.unwrap()[..],
            &pattern(100 * PS, first)[..]
        );
    }
    // Deleting makes the room again.
    volumes.delete("big").await.unwrap();
    for n in &nodes.nodes {
        assert_eq!(n.space.stats().live_pages, 0);
        n.space.verify().unwrap();
    }
}

#[tokio::test]
async fn malformed_calls_get_error_answers_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 1], &[]).await;
    let volumes = view(&nodes);
    volumes.create("m", 16 * PS as u64, None).await.unwrap();
    let n = &nodes.nodes[0];
    let name = |w: &mut Vec<u8>| {
        w.push(1);
        w.push(b'm');
    };
    let instance = n.registry.get("m").unwrap().instance;
    let mut write = vec![6u8];
    name(&mut write);
    write.extend_from_slice(&instance.to_le_bytes());
    write.extend_from_slice(&0u64.to_le_bytes());
    write.extend_from_slice(&2u32.to_le_bytes());
    let mut short = write.clone();
    short.extend_from_slice(&[1u8; PS + 3]);
    let mut wrong_instance = write.clone();
    wrong_instance[3..11].copy_from_slice(&(instance + 1).to_le_bytes());
    wrong_instance.extend_from_slice(&[1u8; 2 * PS]);
    let mut too_far = write.clone();
    too_far[11..19].copy_from_slice(&15u64.to_le_bytes());
    too_far.extend_from_slice(&[1u8; 2 * PS]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "needs 1 bytes"),
        (vec![99], "unknown volume op 99"),
        (vec![3, 0], "1 bytes trail"),
        (vec![4, 3, b'a', b'/', b'b'], "'/' is not allowed"),
        (short, "page data is 515 bytes"),
        (wrong_instance, "not the one this handle opened"),
        (too_far, "pages 15..17 are outside its 16 pages"),
    ];
    for (call, expect) in cases {
        let answer = serve_volume_call(&n.registry, &n.space, Bytes::from(call.clone())).await;
        let Err(e) = answer_error(0, &answer) else {
            panic!("{expect}: a success answer");
        };
        let text = e.to_string();
        assert!(text.contains(expect), "{expect}: {text}");
    }
    assert_eq!(n.space.stats().live_pages, 0);
    // Random bytes never panic and never store anything.
    let mut rng = Rng(11);
    for _ in 0..2000 {
        let len = rng.below(64) as usize;
        let mut call: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if let Some(op) = call.first_mut() {
            *op = 1 + *op % 8;
        }
        let answer = serve_volume_call(&n.registry, &n.space, Bytes::from(call)).await;
        // Whatever it was, the answer decodes.
        if let Err(e) = answer_error(0, &answer) {
            assert!(
                !matches!(e, BlockVolumeError::Malformed { ref what, .. } if what == "volume answer"),
                "{e}"
            );
        }
    }
    assert_eq!(n.space.stats().live_pages, 0);
    assert_eq!(n.registry.volumes().len(), 1);
}

#[tokio::test]
async fn racing_creates_over_disjoint_nodes_are_reported_and_deleted_together() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 4], &[]).await;
    let volumes = view(&nodes);
    // Each create misses the nodes of the other (they do not answer).
    nodes.down.lock().unwrap().extend([2, 3]);
    volumes
        .create("dup", 8 * PS as u64, Some(vec![0, 1]))
        .await
        .unwrap();
    *nodes.down.lock().unwrap() = [0, 1].into();
    volumes
        .create("dup", 8 * PS as u64, Some(vec![2, 3]))
        .await
        .unwrap();
    volumes
        .open("dup")
        .await
        .unwrap()
        .write_page(0, &[1u8; PS])
        .await
        .unwrap();
    nodes.down.lock().unwrap().clear();
    let e = volumes.open("dup").await.err().unwrap();
    assert!(
        matches!(e, BlockVolumeError::Ambiguous { .. }) && e.to_string().contains("removes both"),
        "{e}"
    );
    assert_eq!(volumes.list().await.unwrap().volumes.len(), 2);
    assert_eq!(volumes.delete("dup").await.unwrap(), 1);
    assert!(volumes.list().await.unwrap().volumes.is_empty());
}

/// The model of `add_u64s`: adds in order to the little-endian words of
/// `model`, returning each new value.
fn model_adds(model: &mut [u8], adds: &[(u64, u64)]) -> Vec<u64> {
    adds.iter()
        .map(|&(offset, delta)| {
            let at = offset as usize;
            let old = u64::from_le_bytes(model[at..at + 8].try_into().unwrap());
            let new = old.wrapping_add(delta);
            model[at..at + 8].copy_from_slice(&new.to_le_bytes());
            new
        })
        .collect()
}

/// A random add whose 8 bytes stay inside one page of a volume of `pages`
/// pages; a few offsets repeat so one counter takes many adds.
fn random_add(rng: &mut Rng, pages: u64) -> (u64, u64) {
    let offset = if rng.below(4) == 0 {
        // A hot counter: 8 of them, on pages 0..8.
        rng.below(8) * PS as u64 + 24
    } else {
        rng.below(pages) * PS as u64 + rng.below(PS as u64 - 7)
    };
    (offset, rng.next())
}

#[tokio::test]
async fn adds_across_pages_and_nodes_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 3], &[]).await;
    let volumes = view(&nodes).with_max_in_flight(2).unwrap();
    volumes.create("ctr", 30 * PS as u64, None).await.unwrap();
    let v = volumes.open("ctr").await.unwrap();
    // Half the pages hold data, half were never written (zeros).
    let mut model = vec![0u8; 30 * PS];
    let data = pattern(15 * PS, 4);
    v.write_pages(0, &data).await.unwrap();
    model[..15 * PS].copy_from_slice(&data);
    let mut rng = Rng(21);
    nodes.max_in_flight.store(0, Ordering::SeqCst);
    for round in 0..20 {
        let adds: Vec<(u64, u64)> = (0..1 + rng.below(300))
            .map(|_| random_add(&mut rng, 30))
            .collect();
        let got = v.add_u64s(&adds).await.unwrap();
        assert_eq!(got, model_adds(&mut model, &adds), "round {round}");
    }
    assert_eq!(&v.read_pages(0, 30).await.unwrap()[..], &model[..]);
    let max = nodes.max_in_flight.load(Ordering::SeqCst);
    assert!((1..=2).contains(&max), "{max} calls in flight at once");
    assert!(v.add_u64s(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_batch_past_the_call_limit_goes_in_calls_one_after_another_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 2], &[]).await;
    let volumes = view(&nodes);
    volumes.create("big", 16 * PS as u64, None).await.unwrap();
    let v = volumes.open("big").await.unwrap();
    let mut model = vec![0u8; 16 * PS];
    let mut rng = Rng(8);
    // More than one call's worth for each of the two members, mostly on a
    // few counters, so the order across calls shows in the values.
    let n = 2 * MAX_ADDS_PER_CALL + 1000;
    let adds: Vec<(u64, u64)> = (0..n).map(|_| random_add(&mut rng, 16)).collect();
    nodes.calls.store(0, Ordering::SeqCst);
    let got = v.add_u64s(&adds).await.unwrap();
    assert_eq!(got, model_adds(&mut model, &adds));
    assert_eq!(
        nodes.calls.load(Ordering::SeqCst),
        4,
        "two calls per member"
    );
    assert_eq!(&v.read_pages(0, 16).await.unwrap()[..], &model[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_adds_to_the_same_counters_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 2], &[]).await;
    let volumes = view(&nodes);
    volumes.create("hot", 8 * PS as u64, None).await.unwrap();
    let v = volumes.open("hot").await.unwrap();
    // Three counters on page 1 (node 1), one on page 2 (node 0).
    let counters = [PS as u64, PS as u64 + 8, 2 * PS as u64 - 8, 2 * PS as u64];
    const TASKS: u64 = 16;
    const BATCHES: u64 = 60;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let v = v.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for b in 0..BATCHES {
                // Each batch adds 1 to every counter, in a rotating order.
                let adds: Vec<(u64, u64)> = (0..4)
                    .map(|i| (counters[((t + b + i) % 4) as usize], 1))
                    .collect();
                let got = v.add_u64s(&adds).await.unwrap();
                seen.extend(adds.iter().map(|a| a.0).zip(got));
            }
            seen
        }));
    }
    let mut seen: Vec<(u64, u64)> = Vec::new();
    for t in tasks {
        seen.extend(t.await.unwrap());
    }
    let total = TASKS * BATCHES;
    for c in counters {
        let page = v.read_range(c, 8).await.unwrap();
        assert_eq!(u64::from_le_bytes(page[..].try_into().unwrap()), total);
        // Every add saw its own value: the counter went 1, 2, ..., total.
        let mut values: Vec<u64> = seen.iter().filter(|s| s.0 == c).map(|s| s.1).collect();
        values.sort_unstable();
        assert_eq!(values, (1..=total).collect::<Vec<_>>(), "counter at {c}");
    }
}

/// A page whose counter at byte 0 holds `j * 1_000_000` and whose other
/// bytes say `j`.
fn marked_page(j: u64) -> Vec<u8> {
    let mut page = pattern(PS, 1000 + j);
    page[..8].copy_from_slice(&(j * 1_000_000).to_le_bytes());
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adds_and_whole_page_writes_and_trims_of_one_page_serialize() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 2], &[]).await;
    let volumes = view(&nodes);
    volumes.create("mix", 8 * PS as u64, None).await.unwrap();
    let v = volumes.open("mix").await.unwrap();
    for round in 0..6u64 {
        let page = 3 + round % 2;
        let at = page * PS as u64;
        v.write_page(page, &marked_page(1)).await.unwrap();
        // Adders of 1 to the counter run until the writer is done; the
        // writer writes whole pages with counter j * 1e6, j = 2..=6, in
        // order.
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut adders = Vec::new();
        for _ in 0..6 {
            let (v, done) = (v.clone(), done.clone());
            adders.push(tokio::spawn(async move {
                let mut values = Vec::new();
                // Bounded, in case the writer never finishes.
                while !done.load(Ordering::SeqCst) && values.len() < 5000 {
                    values.extend(v.add_u64s(&[(at, 1)]).await.unwrap());
                }
                values
            }));
        }
        let mut values = Vec::new();
        for j in 2..=6u64 {
            tokio::task::yield_now().await;
            v.write_page(page, &marked_page(j)).await.unwrap();
            // An add issued after the write returned sees it: its value
            // and its other bytes. A write landing between another add's
            // read and write is overwritten with the old page, and this
            // add sees the old counter or the old bytes.
            let mine = v.add_u64s(&[(at, 1)]).await.unwrap()[0];
            let base = j * 1_000_000;
            assert!(
                (base + 1..base + 1_000_000).contains(&mine),
                "round {round}: write {j} lost (an add after it saw {mine})"
            );
            assert_eq!(
                v.read_page(page).await.unwrap()[8..],
                marked_page(j)[8..],
                "round {round}: write {j}'s bytes lost"
            );
            values.push(mine);
            if j == 6 {
                break;
            }
            // A trim is a write of zeros: an add after it starts again
            // from zero on a page of zeros.
            v.trim_pages(page, 1).await.unwrap();
            let mine = v.add_u64s(&[(at, 1)]).await.unwrap()[0];
            assert!(
                (1..1_000_000).contains(&mine),
                "round {round}: the trim after write {j} lost (an add after it saw {mine})"
            );
            assert!(
                v.read_page(page).await.unwrap()[8..]
                    .iter()
                    .all(|b| *b == 0),
                "round {round}: the trim after write {j} lost"
            );
        }
        done.store(true, Ordering::SeqCst);
        for a in adders {
            values.extend(a.await.unwrap());
        }
        // The counter is the last write's value plus the adds after it,
        // which are those that returned a value just above it.
        let got = v.read_page(page).await.unwrap();
        assert_eq!(got[8..], marked_page(6)[8..], "round {round}");
        let base = 6_000_000;
        let after = values
            .iter()
            .filter(|x| (base + 1..base + 1_000_000).contains(*x))
            .count() as u64;
        let counter = u64::from_le_bytes(got[..8].try_into().unwrap());
        assert_eq!(counter, base + after, "round {round}");
        // And no two adds after writes saw the same value (after trims,
        // counters start again from zero).
        let mut sorted: Vec<u64> = values.iter().copied().filter(|x| *x > 1_000_000).collect();
        let n = sorted.len();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), n, "round {round}");
    }
}

#[tokio::test]
async fn bad_adds_are_refused_whole_naming_the_add() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 2], &[]).await;
    let volumes = view(&nodes);
    volumes.create("b", 5 * PS as u64, None).await.unwrap();
    let v = volumes.open("b").await.unwrap();
    v.write_page(0, &[1u8; PS]).await.unwrap();
    let before = v.read_pages(0, 5).await.unwrap();
    let size = 5 * PS as u64;
    let cases: Vec<(u64, &str)> = vec![
        (PS as u64 - 4, "cross the end of page 0"),
        (3 * PS as u64 - 1, "cross the end of page 2"),
        (size - 7, "beyond the volume's 2560 bytes"),
        (size, "beyond the volume's 2560 bytes"),
        (u64::MAX - 3, "beyond the volume's 2560 bytes"),
    ];
    for (offset, expect) in cases {
        // A good add before and after it: neither is applied.
        let adds = [(0, 5), (8, 1), (offset, 1), (16, 1)];
        let e = v.add_u64s(&adds).await.unwrap_err();
        assert!(
            matches!(e, BlockVolumeError::BadAdd { index: 2, offset: o, .. } if o == offset),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!("add 2 at offset {offset}")) && text.contains(expect),
            "{text}"
        );
    }
    // The last 8 bytes of the volume and of a page are fine.
    v.add_u64s(&[(size - 8, 1), (PS as u64 - 8, 0)])
        .await
        .unwrap();
    v.add_u64s(&[(size - 8, u64::MAX)]).await.unwrap();
    assert_eq!(v.read_pages(0, 5).await.unwrap(), before, "nothing changed");

    // A hand-made call a node must refuse: node 1 holds pages 1 and 3 of
    // the volume (local 0 and 1); local page 2, and bytes 506.. of a page.
    let n = &nodes.nodes[1];
    let instance = n.registry.get("b").unwrap().instance;
    let call = |adds: &[(u64, u32, u64)]| {
        let mut c = vec![8u8, 1, b'b'];
        c.extend_from_slice(&instance.to_le_bytes());
        c.extend_from_slice(&(adds.len() as u32).to_le_bytes());
        for (page, offset, delta) in adds {
            c.extend_from_slice(&page.to_le_bytes());
            c.extend_from_slice(&offset.to_le_bytes());
            c.extend_from_slice(&delta.to_le_bytes());
        }
        Bytes::from(c)
    };
    for (adds, expect) in [
        (
            vec![(0, 0, 1), (1, 8, 1), (2, 0, 1)],
            "add 2 at offset 0: local page 2 is outside this node's 2 pages",
        ),
        (
            vec![(0, 0, 1), (1, 506, 1)],
            "add 1 at offset 506: bytes 506..514 of local page 1 cross the end",
        ),
        (
            vec![(0, u32::MAX, 1)],
            "add 0 at offset 4294967295: bytes 4294967295..",
        ),
    ] {
        let answer = serve_volume_call(&n.registry, &n.space, call(&adds)).await;
        let e = answer_error(1, &answer).unwrap_err();
        assert!(matches!(e, BlockVolumeError::BadAdd { .. }), "{e}");
        assert!(e.to_string().contains(expect), "{e}");
    }
    assert_eq!(v.read_pages(0, 5).await.unwrap(), before, "nothing changed");
    // A good hand-made call: the answer is the values.
    let answer = serve_volume_call(&n.registry, &n.space, call(&[(1, 0, 7), (1, 0, 2)])).await;
    answer_error(1, &answer).unwrap();
    assert_eq!(answer.len(), 1 + 4 + 16);
    assert_eq!(&answer[5..13], &7u64.to_le_bytes());
    assert_eq!(&answer[13..21], &9u64.to_le_bytes());
    assert_eq!(
        v.read_range(3 * PS as u64, 8).await.unwrap()[..],
        9u64.to_le_bytes()
    );
}

#[tokio::test]
async fn malformed_add_calls_get_error_answers_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes_with(dir.path(), &[small(); 1], &[]).await;
    let volumes = view(&nodes);
    volumes.create("m", 16 * PS as u64, None).await.unwrap();
    let n = &nodes.nodes[0];
    let instance = n.registry.get("m").unwrap().instance;
    let head = |count: u32| {
        let mut c = vec![8u8, 1, b'm'];
        c.extend_from_slice(&instance.to_le_bytes());
        c.extend_from_slice(&count.to_le_bytes());
        c
    };
    let mut good = head(2);
    for page in [3u64, 4] {
        good.extend_from_slice(&page.to_le_bytes());
        good.extend_from_slice(&0u32.to_le_bytes());
        good.extend_from_slice(&1u64.to_le_bytes());
    }
    let serve = |c: Vec<u8>| serve_volume_call(&n.registry, &n.space, Bytes::from(c));
    // Every truncation of a good call is an error answer.
    for cut in 0..good.len() {
        let answer = serve(good[..cut].to_vec()).await;
        assert!(answer_error(0, &answer).is_err(), "cut at {cut}");
    }
    let mut trailing = good.clone();
    trailing.push(0);
    let mut huge_count = head(u32::MAX);
    huge_count.extend_from_slice(&[0u8; 40]);
    // More adds than a call may carry, all present: refused by count.
    let mut too_many = head(MAX_ADDS_PER_CALL as u32 + 1);
    too_many.resize(too_many.len() + (MAX_ADDS_PER_CALL + 1) * 20, 0);
    // The largest legal call stays within the protocol's body limit.
    assert!(too_many.len() - 20 <= ADD_CALL_MAX_BYTES);
    const { assert!(ADD_CALL_MAX_BYTES <= (4 << 20) + (64 << 10)) };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (trailing, "1 bytes trail"),
        (
            huge_count,
            "4294967295 items cannot fit in the 40 bytes left",
        ),
        (head(3), "3 items cannot fit in the 0 bytes left"),
        (
            too_many,
            "16385 adds in one call would exceed the limit of 16384",
        ),
    ];
    for (call, expect) in cases {
        let e = answer_error(0, &serve(call).await).unwrap_err();
        assert!(e.to_string().contains(expect), "{expect}: {e}");
    }
    assert_eq!(n.space.stats().live_pages, 0, "nothing was written");
    // The good call itself works, once.
    answer_error(0, &serve(good).await).unwrap();
    assert_eq!(n.space.stats().live_pages, 2);
}
