//! The store's call encoding: an `ObjectStore` over `RemoteNode`s whose
//! transport hands the encoded calls to `serve_call` on in-memory nodes
//! behaves as one over the nodes themselves, errors included.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use quarry_store::{
    serve_call, BucketName, Chunking, Condition, MemChunkStore, MemTableStore, NodeId, NodeStore,
    ObjectKey, ObjectStore, RemoteNode, Result, StoreError, StoreTransport,
};

type Node = NodeStore<Arc<MemTableStore>, Arc<MemChunkStore>>;

/// Hands every call to the named node's `serve_call`, counting bytes.
struct Loopback {
    nodes: BTreeMap<NodeId, Arc<Node>>,
    sent_bytes: AtomicU64,
    /// Calls to this node (0: none) fail as undeliverable.
    down: AtomicU16,
    /// Manifest commits are applied but their answers lost.
    lose_commit_answers: std::sync::atomic::AtomicBool,
    /// Chunk puts (op 1) and chunk reads' answers (op 3) have their last
    /// byte, one of the chunk's, flipped on the way.
    damage_chunks: std::sync::atomic::AtomicBool,
}

impl StoreTransport for Loopback {
    async fn call(&self, node: NodeId, _idempotent: bool, body: Bytes) -> Result<Bytes> {
        if self.down.load(Ordering::Relaxed) == node {
            return Err(StoreError::Transport {
                node,
                reason: "node unreachable".into(),
            });
        }
        self.sent_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let n = self.nodes.get(&node).ok_or(StoreError::UnknownNode(node))?;
        // Opcode 5 is the manifest commit (see docs/store.md, "Calls").
        let is_commit = body.first() == Some(&5);
        let op = body.first().copied();
        let damage = self.damage_chunks.load(Ordering::Relaxed);
        let flip_last = |b: Bytes| {
            let mut b = b.to_vec();
            if let Some(last) = b.last_mut() {
                *last ^= 0x20;
            }
            Bytes::from(b)
        };
        let body = if damage && op == Some(1) {
            flip_last(body)
        } else {
            body
        };
        let mut answer = serve_call(n, body).await;
        if damage && op == Some(3) && answer.first() == Some(&0) {
            answer = flip_last(answer);
        }
        if is_commit && self.lose_commit_answers.load(Ordering::Relaxed) {
            return Err(StoreError::Transport {
                node,
                reason: "the link died before the answer came back".into(),
            });
        }
        Ok(answer)
    }
}

async fn cluster() -> (ObjectStore<RemoteNode<Loopback>>, Arc<Loopback>) {
    let mut nodes = BTreeMap::new();
    for id in [1, 2, 3, 4] {
        let (n, _) = NodeStore::open(
            id,
            Arc::new(MemTableStore::new()),
            Arc::new(MemChunkStore::default()),
        )
        .await
        .unwrap();
        nodes.insert(id, Arc::new(n));
    }
    let transport = Arc::new(Loopback {
        nodes,
        sent_bytes: AtomicU64::new(0),
        down: AtomicU16::new(0),
        lose_commit_answers: Default::default(),
        damage_chunks: Default::default(),
    });
    let remote = [1, 2, 3, 4].map(|id| Arc::new(RemoteNode::new(id, transport.clone())));
    (ObjectStore::new(remote).unwrap(), transport)
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn objects_over_remote_nodes_behave_as_over_local_ones() {
    let (s, transport) = cluster().await;
    let b = BucketName::new("docs").unwrap();
    s.create_bucket(&b, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    let data = bytes(100_000, 1);
    let k = ObjectKey::new("dir/a.bin").unwrap();
    let m = s
        .put_bytes(&b, &k, &data, Condition::IfAbsent)
        .await
        .unwrap();
    assert_eq!((m.version(), m.size()), (1, 100_000));
    let (_, got) = s.get(&b, &k).await.unwrap();
    assert_eq!(&got[..], &data[..]);
    let (_, range) = s.get_range(&b, &k, 4000, 10_000).await.unwrap();
    assert_eq!(&range[..], &data[4000..14_000]);

    // Streaming into a writer gives the same bytes.
    let mut out = Vec::new();
    s.get_to(&b, &k, 0, u64::MAX, &mut out).await.unwrap();
    assert_eq!(out, data);

    // The same bytes again cost no chunk space.
    let stored = s.usage().await.unwrap().stored_bytes;
    s.put_bytes(
        &b,
        &ObjectKey::new("dir/copy").unwrap(),
        &data,
        Condition::Always,
    )
    .await
    .unwrap();
    let u = s.usage().await.unwrap();
    assert_eq!(u.stored_bytes, stored);
    assert_eq!(u.logical_bytes, 200_000);
    assert_eq!(u.buckets[&b].objects, 2);

    // Errors keep their kind across the wire.
    let stale = s
        .put_bytes(&b, &k, b"x", Condition::IfVersion(7))
        .await
        .unwrap_err();
    assert!(
        matches!(
            stale,
            StoreError::VersionMismatch {
                expected: Some(7),
                current: Some(1),
                ..
            }
        ),
        "{stale}"
    );
    let missing = s
        .get(&b, &ObjectKey::new("nope").unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(missing, StoreError::NoSuchObject { .. }),
        "{missing}"
    );
    let exists = s.create_bucket(&b, Chunking::default()).await.unwrap_err();
    assert!(matches!(exists, StoreError::BucketExists(_)), "{exists}");

    let listed: Vec<String> = s
        .list(&b, "dir/", None, 10)
        .await
        .unwrap()
        .iter()
        .map(|m| m.key().to_string())
        .collect();
    assert_eq!(listed, ["dir/a.bin", "dir/copy"]);
    assert_eq!(s.buckets().await.unwrap().len(), 1);

    s.delete(&b, &k, Condition::Always).await.unwrap();
    s.delete(&b, &ObjectKey::new("dir/copy").unwrap(), Condition::Always)
        .await
        .unwrap();
    assert_eq!(s.usage().await.unwrap().stored_bytes, 0);
    let report = s.collect_orphans().await.unwrap();
    assert_eq!((report.manifests, report.chunks_lowered), (0, 0));
    assert!(transport.sent_bytes.load(Ordering::Relaxed) > 200_000);
}

#[tokio::test]
async fn listing_pages_through_more_keys_than_one_call_returns() {
    let (s, _) = cluster().await;
    let b = BucketName::new("many").unwrap();
    s.create_bucket(&b, Chunking::default()).await.unwrap();
    let n = quarry_store::MAX_PAGE_ITEMS + 250;
    for i in 0..n {
        let k = ObjectKey::new(&format!("k{i:05}")).unwrap();
        s.put_bytes(&b, &k, &(i as u32).to_le_bytes(), Condition::Always)
            .await
            .unwrap();
    }
    let all = s.list(&b, "", None, usize::MAX).await.unwrap();
    assert_eq!(all.len(), n);
    assert!(all.windows(2).all(|w| w[0].key() < w[1].key()));
    let tail = s
        .list(&b, "", Some(&ObjectKey::new("k01000").unwrap()), 10)
        .await
        .unwrap();
    assert_eq!(tail[0].key().as_str(), "k01001");
    assert_eq!(tail.len(), 10);
    let report = s.collect_orphans().await.unwrap();
    assert_eq!(report.manifests, n as u64);
}

#[tokio::test]
async fn a_failed_put_releases_what_it_took_and_names_the_node() {
    let (s, transport) = cluster().await;
    // A bucket whose record is not on node 3, which then goes down: a put
    // whose chunks land on several nodes fails with the transport error,
    // and the references it took elsewhere go back.
    let b = (0..)
        .map(|i| BucketName::new(&format!("b{i}")).unwrap())
        .find(|b| s.placement().bucket_node(b) != 3)
        .unwrap();
    s.create_bucket(&b, Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    transport.down.store(3, Ordering::Relaxed);
    let err = s
        .put_bytes(
            &b,
            &ObjectKey::new("k").unwrap(),
            &bytes(64 * 1024, 9),
            Condition::Always,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Transport { node: 3, .. }),
        "{err}"
    );
    for (id, n) in &transport.nodes {
        assert_eq!(
            NodeStore::usage(&**n).stored_bytes,
            0,
            "node {id} kept chunks of a failed put"
        );
    }
}

#[tokio::test]
async fn malformed_calls_get_error_answers_and_change_nothing() {
    let (n, _): (Node, _) = NodeStore::open(
        1,
        Arc::new(MemTableStore::new()),
        Arc::new(MemChunkStore::default()),
    )
    .await
    .unwrap();
    for call in [
        &b""[..],
        &[0xEE][..],
        &[1, 0xFF, 0xFF, 0xFF, 0x7F][..],
        &[3, 1, 2][..],
        &[7, 4, 0, 0, 0, b'd', b'o'][..],
    ] {
        let answer = serve_call(&n, Bytes::copy_from_slice(call)).await;
        assert_eq!(answer.first(), Some(&1), "call {call:?} got {answer:?}");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.contains("store call"), "{text}");
    }
    assert_eq!(NodeStore::usage(&n), Default::default());
}

#[tokio::test]
async fn a_commit_whose_answer_is_lost_keeps_its_chunks() {
    let (s, transport) = cluster().await;
    let b = BucketName::new("b").unwrap();
    s.create_bucket(&b, Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    let data = bytes(20_000, 5);
    let k = ObjectKey::new("k").unwrap();
    transport.lose_commit_answers.store(true, Ordering::Relaxed);
    let err = s
        .put_bytes(&b, &k, &data, Condition::Always)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Transport { .. }), "{err}");
    transport
        .lose_commit_answers
        .store(false, Ordering::Relaxed);
    // The commit was applied: the object is whole, its chunks kept.
    let (m, got) = s.get(&b, &k).await.unwrap();
    assert_eq!(m.version(), 1);
    assert_eq!(&got[..], &data[..]);
}

/// Chunk bytes are hashed once, by the writer; the CRC-32C that travels
/// with them finds damage on the way in either direction: a damaged put is
/// refused before anything is filed, a damaged read is an error, never data.
#[tokio::test]
async fn chunk_bytes_damaged_on_the_way_are_refused_both_ways() {
    let (s, transport) = cluster().await;
    let b = BucketName::new("b").unwrap();
    s.create_bucket(&b, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    let data = bytes(20_000, 11);
    let k = ObjectKey::new("k").unwrap();

    transport.damage_chunks.store(true, Ordering::Relaxed);
    let err = s
        .put_bytes(&b, &k, &data, Condition::Always)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("arrived damaged"), "{err}");
    assert!(err.contains("CRC-32C"), "{err}");
    for (id, n) in &transport.nodes {
        assert_eq!(
            NodeStore::usage(&**n).stored_bytes,
            0,
            "node {id} filed damaged bytes"
        );
    }

    transport.damage_chunks.store(false, Ordering::Relaxed);
    s.put_bytes(&b, &k, &data, Condition::Always).await.unwrap();
    transport.damage_chunks.store(true, Ordering::Relaxed);
    let err = s.get(&b, &k).await.unwrap_err().to_string();
    assert!(err.contains("arrived damaged"), "{err}");
    transport.damage_chunks.store(false, Ordering::Relaxed);
    let (_, got) = s.get(&b, &k).await.unwrap();
    assert_eq!(&got[..], &data[..], "nothing stored was changed");
}
