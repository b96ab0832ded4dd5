//! The store's call encoding: an `ObjectStore` over `RemoteNode`s whose
//! transport hands the encoded calls to `serve_call` on in-memory nodes
//! behaves as one over the nodes themselves, errors included.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use quarry_store::{
    serve_call, BucketName, Chunking, Condition, ManifestWithChunk, MemChunkStore, MemTableStore,
    NodeId, NodeStore, ObjectKey, ObjectStore, RemoteNode, Result, StoreError, StoreTransport,
};

type Node = NodeStore<Arc<MemTableStore>, Arc<MemChunkStore>>;

/// Hands every call to the named node's `serve_call`, counting bytes.
struct Loopback {
    nodes: BTreeMap<NodeId, Arc<Node>>,
    sent_bytes: AtomicU64,
    /// Calls carried, by opcode.
    calls: std::sync::Mutex<BTreeMap<u8, u64>>,
    /// Calls to this node (0: none) fail as undeliverable.
    down: AtomicU16,
    /// Manifest commits are applied but their answers lost.
    lose_commit_answers: std::sync::atomic::AtomicBool,
    /// Chunk puts (op 1) and chunk reads' answers (ops 3 and 18) have
    /// their last byte, one of the chunk's, flipped on the way.
    damage_chunks: std::sync::atomic::AtomicBool,
    /// The same for one-call small puts (op 16) and, when they carry the
    /// chunk, one-call gets' answers (op 17).
    damage_small: std::sync::atomic::AtomicBool,
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
        if let Some(&op) = body.first() {
            *self.calls.lock().unwrap().entry(op).or_default() += 1;
        }
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
        let damage_small = self.damage_small.load(Ordering::Relaxed);
        let body = if (damage && op == Some(1)) || (damage_small && op == Some(16)) {
            flip_last(body)
        } else {
            body
        };
        let mut answer = serve_call(n, body).await;
        if ((damage && (op == Some(3) || op == Some(OP_READ_CHUNKS)))
            || (damage_small && op == Some(17)))
            && answer.first() == Some(&0)
        {
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
        calls: Default::default(),
        down: AtomicU16::new(0),
        lose_commit_answers: Default::default(),
        damage_chunks: Default::default(),
        damage_small: Default::default(),
    });
    let remote = [1, 2, 3, 4].map(|id| Arc::new(RemoteNode::new(id, transport.clone())));
    (ObjectStore::new(remote).unwrap(), transport)
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    quarry_testkit::noise_bytes(len, seed)
}

/// Object `b/k` of `len` noise bytes (seed `seed`) in chunks of
/// `chunk_bytes`; its bytes.
async fn put_object(
    s: &ObjectStore<RemoteNode<Loopback>>,
    chunk_bytes: u32,
    len: usize,
    seed: u64,
) -> (BucketName, ObjectKey, Vec<u8>) {
    let b = BucketName::new("b").unwrap();
    s.create_bucket(&b, Chunking::fixed(chunk_bytes).unwrap())
        .await
        .unwrap();
    let data = bytes(len, seed);
    let k = ObjectKey::new("k").unwrap();
    s.put_bytes(&b, &k, &data, Condition::Always).await.unwrap();
    (b, k, data)
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

impl Loopback {
    /// Calls carried so far with opcode `op`.
    fn calls_of(&self, op: u8) -> u64 {
        self.calls.lock().unwrap().get(&op).copied().unwrap_or(0)
    }
    /// Calls carried so far, of any kind.
    fn calls_total(&self) -> u64 {
        self.calls.lock().unwrap().values().sum()
    }
}

/// Opcode of the read of several chunks in one call (docs/store.md, "Calls").
const OP_READ_CHUNKS: u8 = 18;

/// A read of several chunks answers each as single reads would, in the
/// order asked, in one call; bounds, a chunk the node does not hold and
/// bytes damaged on the way are errors.
#[tokio::test]
async fn several_chunks_read_in_one_call_answer_as_single_reads() {
    let (s, transport) = cluster().await;
    let (b, k, data) = put_object(&s, 4096, 200_000, 12).await;
    let mut read_any = false;
    for (&id, n) in &transport.nodes {
        let mut held: Vec<_> = NodeStore::chunks(&**n)
            .await
            .unwrap()
            .into_iter()
            .map(|(fp, _)| fp)
            .collect();
        if held.is_empty() {
            continue;
        }
        held.reverse();
        held.truncate(quarry_store::MAX_READ_CHUNKS);
        let remote = RemoteNode::new(id, transport.clone());
        let before = transport.calls_of(OP_READ_CHUNKS);
        let got = remote.read_chunks(&held).await.unwrap();
        assert_eq!(transport.calls_of(OP_READ_CHUNKS), before + 1, "one call");
        assert_eq!(got.len(), held.len());
        for (fp, bytes) in held.iter().zip(&got) {
            assert_eq!(bytes, &n.read_chunk(*fp).await.unwrap(), "node {id}");
        }
        read_any = true;

        // A chunk this node does not hold fails the call, naming it.
        let mut with_missing = held.clone();
        with_missing.push(quarry_store::Fingerprint([7; 32]));
        assert!(remote.read_chunks(&with_missing).await.is_err());
        // Bytes damaged on the way are refused.
        transport.damage_chunks.store(true, Ordering::Relaxed);
        let err = remote.read_chunks(&held).await.unwrap_err().to_string();
        transport.damage_chunks.store(false, Ordering::Relaxed);
        assert!(err.contains("arrived damaged"), "{err}");
    }
    assert!(read_any, "no node held a chunk");

    // None, or more than a call takes: refused before anything is sent.
    let remote = RemoteNode::new(1, transport.clone());
    for count in [0, quarry_store::MAX_READ_CHUNKS + 1] {
        let fps = vec![quarry_store::Fingerprint([1; 32]); count];
        let before = transport.calls_total();
        let err = remote.read_chunks(&fps).await.unwrap_err().to_string();
        assert!(err.contains("a call"), "{err}");
        assert_eq!(transport.calls_total(), before, "nothing sent");
    }
    // A node refuses such a call too, whoever sends it.
    let mut call = vec![OP_READ_CHUNKS];
    call.extend_from_slice(&0u16.to_le_bytes());
    let n = &transport.nodes[&1];
    let answer = serve_call(&**n, Bytes::from(call)).await;
    assert_ne!(answer.first(), Some(&0), "refused");
    // More bytes than a call carries (one 1 MiB chunk asked 17 times):
    // refused by the node, naming the bound.
    let big_b = BucketName::new("big").unwrap();
    let big_k = ObjectKey::new("big").unwrap();
    s.create_bucket(&big_b, Chunking::fixed(1 << 20).unwrap())
        .await
        .unwrap();
    let m = s
        .put_bytes(&big_b, &big_k, &bytes(1 << 20, 13), Condition::Always)
        .await
        .unwrap();
    let fp = m.chunks()[0].fingerprint;
    let holder = s.placement().chunk_holder(&m, &fp);
    let mut call = vec![OP_READ_CHUNKS];
    call.extend_from_slice(&17u16.to_le_bytes());
    for _ in 0..17 {
        call.extend_from_slice(&fp.0);
    }
    let answer = serve_call(&*transport.nodes[&holder], Bytes::from(call)).await;
    assert_ne!(answer.first(), Some(&0), "refused");
    let message = String::from_utf8_lossy(&answer);
    assert!(message.contains("at most 16777216"), "{message}");
    let (_, got) = s.get(&b, &k).await.unwrap();
    assert_eq!(&got[..], &data[..], "nothing stored was changed");
}

/// Opcodes of the one-call small object put and get (docs/store.md, "Calls").
const OP_PUT_WITH_CHUNK: u8 = 16;
const OP_GET_WITH_CHUNK: u8 = 17;

/// A small object costs one call to put and one to get, and its chunk is
/// kept on its manifest's node; overwriting it releases the old chunk
/// there, deleting it releases the last, and the orphan collector finds
/// nothing to lower and nothing dangling.
#[tokio::test]
async fn a_small_object_is_one_call_each_way_and_keeps_its_chunk_with_its_manifest() {
    let (s, transport) = cluster().await;
    let b = BucketName::new("small").unwrap();
    s.create_bucket(&b, Chunking::default()).await.unwrap();
    let k = ObjectKey::new("dir/file.rs").unwrap();
    let home = s.placement().manifest_node(&b, &k);
    let data = bytes(4096, 21);

    let before = transport.calls_total();
    let m = s.put_bytes(&b, &k, &data, Condition::Always).await.unwrap();
    assert_eq!(transport.calls_total() - before, 1, "one call to put");
    assert_eq!(transport.calls_of(OP_PUT_WITH_CHUNK), 1);
    assert!(m.chunk_at_manifest_node());
    assert_eq!((m.version(), m.size()), (1, 4096));
    for (id, n) in &transport.nodes {
        let want = if *id == home { 4096 } else { 0 };
        assert_eq!(NodeStore::usage(&**n).stored_bytes, want, "node {id}");
    }

    let before = transport.calls_total();
    let (got_m, got) = s.get(&b, &k).await.unwrap();
    assert_eq!(transport.calls_total() - before, 1, "one call to get");
    assert_eq!(transport.calls_of(OP_GET_WITH_CHUNK), 1);
    assert_eq!(got_m, m);
    assert_eq!(&got[..], &data[..], "byte for byte");
    let (_, range) = s.get_range(&b, &k, 100, 50).await.unwrap();
    assert_eq!(&range[..], &data[100..150]);
    let mut out = Vec::new();
    s.get_to(&b, &k, 4000, u64::MAX, &mut out).await.unwrap();
    assert_eq!(&out[..], &data[4000..]);
    let past = s.get_range(&b, &k, 4097, 1).await.unwrap_err();
    assert!(
        matches!(past, StoreError::RangeOutOfBounds { .. }),
        "{past}"
    );

    // An overwrite is one call too: the node releases the old chunk itself.
    let newer = bytes(3000, 22);
    let before = transport.calls_total();
    let m2 = s
        .put_bytes(&b, &k, &newer, Condition::IfVersion(1))
        .await
        .unwrap();
    assert_eq!(transport.calls_total() - before, 1, "one call to replace");
    assert_eq!(m2.version(), 2);
    assert_eq!(s.usage().await.unwrap().stored_bytes, 3000);
    let stale = s
        .put_bytes(&b, &k, b"late", Condition::IfVersion(1))
        .await
        .unwrap_err();
    assert!(
        matches!(stale, StoreError::VersionMismatch { .. }),
        "{stale}"
    );
    assert_eq!(&s.get(&b, &k).await.unwrap().1[..], &newer[..]);

    let report = s.collect_orphans().await.unwrap();
    assert_eq!(report.manifests, 1);
    assert_eq!(report.chunks_lowered, 0, "a kept chunk is no orphan");
    assert!(report.dangling.is_empty(), "{:?}", report.dangling);

    s.delete(&b, &k, Condition::Always).await.unwrap();
    assert_eq!(s.usage().await.unwrap().stored_bytes, 0);
    let missing = s.get(&b, &k).await.unwrap_err();
    assert!(
        matches!(missing, StoreError::NoSuchObject { .. }),
        "{missing}"
    );
    let no_bucket = s
        .get(&BucketName::new("nope").unwrap(), &k)
        .await
        .unwrap_err();
    assert!(
        matches!(no_bucket, StoreError::NoSuchBucket(_)),
        "{no_bucket}"
    );
}

/// Objects larger than one chunk, or than the small object bound, keep
/// the two-call path: chunks placed by fingerprint, the manifest after.
#[tokio::test]
async fn objects_of_several_chunks_or_large_ones_keep_the_placed_path() {
    let (s, transport) = cluster().await;
    let b = BucketName::new("big").unwrap();
    s.create_bucket(&b, Chunking::fixed(1 << 20).unwrap())
        .await
        .unwrap();
    let k = ObjectKey::new("one-large-chunk").unwrap();
    let data = bytes(quarry_store::MAX_SMALL_OBJECT_BYTES + 1, 23);
    let m = s.put_bytes(&b, &k, &data, Condition::Always).await.unwrap();
    assert!(!m.chunk_at_manifest_node());
    assert_eq!(m.chunks().len(), 1);
    assert_eq!(transport.calls_of(OP_PUT_WITH_CHUNK), 0);
    assert_eq!(&s.get(&b, &k).await.unwrap().1[..], &data[..]);
    // Exactly the small bound goes the one-call way.
    let edge = bytes(quarry_store::MAX_SMALL_OBJECT_BYTES, 24);
    let k2 = ObjectKey::new("edge").unwrap();
    assert!(s
        .put_bytes(&b, &k2, &edge, Condition::Always)
        .await
        .unwrap()
        .chunk_at_manifest_node());
    assert_eq!(&s.get(&b, &k2).await.unwrap().1[..], &edge[..]);
    // An empty object has no chunk to keep.
    let k3 = ObjectKey::new("empty").unwrap();
    let e = s.put_bytes(&b, &k3, b"", Condition::Always).await.unwrap();
    assert!(!e.chunk_at_manifest_node());
    assert!(s.get(&b, &k3).await.unwrap().1.is_empty());
}

/// The same bytes put as a small object and as a large object's chunk are
/// stored once when the small object's manifest node is the node the
/// chunk's fingerprint names, and kept apart (each counted where it
/// lives) when it is not; either way the collector lowers nothing.
#[tokio::test]
async fn a_small_object_dedups_with_a_large_objects_chunk_on_the_same_node() {
    let (s, transport) = cluster().await;
    let b = BucketName::new("mixed").unwrap();
    s.create_bucket(&b, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    let large = bytes(4 * 4096, 31);
    let first = &large[..4096];
    let fp = quarry_store::Fingerprint::of(first);
    let chunk_home = s.placement().chunk_node(&fp);
    s.put_bytes(
        &b,
        &ObjectKey::new("large").unwrap(),
        &large,
        Condition::Always,
    )
    .await
    .unwrap();
    let stored = s.usage().await.unwrap().stored_bytes;
    assert_eq!(stored, 4 * 4096);
    let same = (0..)
        .map(|i| ObjectKey::new(&format!("same{i}")).unwrap())
        .find(|k| s.placement().manifest_node(&b, k) == chunk_home)
        .unwrap();
    let other = (0..)
        .map(|i| ObjectKey::new(&format!("other{i}")).unwrap())
        .find(|k| s.placement().manifest_node(&b, k) != chunk_home)
        .unwrap();
    s.put_bytes(&b, &same, first, Condition::Always)
        .await
        .unwrap();
    assert_eq!(
        s.usage().await.unwrap().stored_bytes,
        stored,
        "stored once on the node both name"
    );
    let info = transport.nodes[&chunk_home]
        .chunk(fp)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.refcount, 2);
    s.put_bytes(&b, &other, first, Condition::Always)
        .await
        .unwrap();
    assert_eq!(s.usage().await.unwrap().stored_bytes, stored + 4096);
    let report = s.collect_orphans().await.unwrap();
    assert_eq!(report.chunks_lowered, 0, "{report:?}");
    assert!(report.dangling.is_empty(), "{report:?}");
    // The large object goes; the small ones still read back whole.
    s.delete(&b, &ObjectKey::new("large").unwrap(), Condition::Always)
        .await
        .unwrap();
    for k in [&same, &other] {
        assert_eq!(&s.get(&b, k).await.unwrap().1[..], first);
    }
    assert_eq!(s.usage().await.unwrap().stored_bytes, 2 * 4096);
}

/// The one-call put and get carry the chunk's CRC-32C like the chunk
/// calls: damage on the way is refused before anything is filed, and a
/// damaged answer is an error, never data.
#[tokio::test]
async fn small_object_bytes_damaged_on_the_way_are_refused_both_ways() {
    let (s, transport) = cluster().await;
    let b = BucketName::new("b").unwrap();
    s.create_bucket(&b, Chunking::default()).await.unwrap();
    let k = ObjectKey::new("k").unwrap();
    let data = bytes(5000, 41);
    transport.damage_small.store(true, Ordering::Relaxed);
    let err = s
        .put_bytes(&b, &k, &data, Condition::Always)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("arrived damaged"), "{err}");
    assert_eq!(s.usage().await.unwrap().stored_bytes, 0);
    assert_eq!(s.usage().await.unwrap().objects, 0);
    transport.damage_small.store(false, Ordering::Relaxed);
    s.put_bytes(&b, &k, &data, Condition::Always).await.unwrap();
    transport.damage_small.store(true, Ordering::Relaxed);
    let err = s.get(&b, &k).await.unwrap_err().to_string();
    assert!(err.contains("arrived damaged"), "{err}");
    transport.damage_small.store(false, Ordering::Relaxed);
    assert_eq!(&s.get(&b, &k).await.unwrap().1[..], &data[..]);
}

/// A one-call put, encoded by hand as `docs/store.md` ("Calls") gives it:
/// op 16, the manifest, the condition, the chunk's CRC-32C, the chunk.
fn put_with_chunk_call(m: &quarry_store::Manifest, data: &[u8], crc: u32) -> Vec<u8> {
    let enc = m.encode();
    let mut call = vec![OP_PUT_WITH_CHUNK];
    call.extend_from_slice(&(enc.len() as u32).to_le_bytes());
    call.extend_from_slice(&enc);
    call.push(0); // Condition::Always
    call.extend_from_slice(&crc.to_le_bytes());
    call.extend_from_slice(&(data.len() as u32).to_le_bytes());
    call.extend_from_slice(data);
    call
}

fn get_with_chunk_call(bucket: &str, key: &str) -> Vec<u8> {
    let mut call = vec![OP_GET_WITH_CHUNK];
    for s in [bucket, key] {
        call.extend_from_slice(&(s.len() as u32).to_le_bytes());
        call.extend_from_slice(s.as_bytes());
    }
    call
}

fn small_manifest(bucket: &str, key: &str, data: &[u8]) -> quarry_store::Manifest {
    quarry_store::Manifest::new(
        BucketName::new(bucket).unwrap(),
        ObjectKey::new(key).unwrap(),
        0,
        1,
        Chunking::default(),
        vec![quarry_store::ChunkRef {
            fingerprint: quarry_store::Fingerprint::of(data),
            len: data.len() as u32,
        }],
    )
    .unwrap()
}

async fn one_node() -> Node {
    NodeStore::open(
        1,
        Arc::new(MemTableStore::new()),
        Arc::new(MemChunkStore::default()),
    )
    .await
    .unwrap()
    .0
}

/// Malformed one-call puts and gets get error answers that say what was
/// wrong, and change nothing.
#[tokio::test]
async fn malformed_small_object_calls_are_refused_clearly() {
    let n = one_node().await;
    let data = bytes(3000, 51);
    let crc = quarry_store::chunk_crc32c(&data);
    let plain = small_manifest("b", "k", &data);
    let kept = plain.clone().with_chunk_at_manifest_node().unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            put_with_chunk_call(&plain, &data, crc),
            "does not keep its chunk with it",
        ),
        (
            put_with_chunk_call(&kept, &data[..2999], crc),
            "2999 bytes sent for a chunk of 3000 bytes",
        ),
        (
            put_with_chunk_call(&kept, &data, crc ^ 1),
            "arrived damaged",
        ),
        (put_with_chunk_call(&kept, &[], crc), "not 1..="),
        (vec![OP_PUT_WITH_CHUNK, 9, 0, 0, 0, b'Q'], "store call"),
        (get_with_chunk_call("b", "")[..8].to_vec(), "store call"),
        (get_with_chunk_call("B!", "k"), "character 'B' at byte 0"),
        (
            {
                let mut c = get_with_chunk_call("b", "k");
                c.push(0);
                c
            },
            "store call",
        ),
    ];
    for (call, says) in cases {
        let answer = serve_call(&n, Bytes::from(call.clone())).await;
        assert_eq!(answer.first(), Some(&1), "call {call:?} got {answer:?}");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.contains(says), "wanted {says:?} in {text}");
    }
    assert_eq!(NodeStore::usage(&n), Default::default());
    // The well-formed call is taken.
    let answer = serve_call(&n, Bytes::from(put_with_chunk_call(&kept, &data, crc))).await;
    assert_eq!(answer.first(), Some(&0), "{answer:?}");
    assert_eq!(NodeStore::usage(&n).stored_bytes, 3000);
}

/// Answers a fixed byte string to every call: a node that answers
/// nonsense.
struct Canned(Bytes);

impl StoreTransport for Canned {
    async fn call(&self, _node: NodeId, _idempotent: bool, _body: Bytes) -> Result<Bytes> {
        Ok(self.0.clone())
    }
}

/// The answer a node gives a one-call get of a small object.
async fn a_get_with_chunk_answer() -> (Bytes, Vec<u8>) {
    let n = one_node().await;
    let data = bytes(2000, 61);
    let kept = small_manifest("b", "k", &data)
        .with_chunk_at_manifest_node()
        .unwrap();
    let crc = quarry_store::chunk_crc32c(&data);
    serve_call(&n, Bytes::from(put_with_chunk_call(&kept, &data, crc))).await;
    (
        serve_call(&n, Bytes::from(get_with_chunk_call("b", "k"))).await,
        data,
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Random, truncated and bit-flipped one-call puts and gets never
    /// panic a node: each gets an answer, and one that is not an error
    /// stored exactly the bytes sent under the fingerprint sent.
    #[test]
    fn random_small_object_calls_never_panic(
        cut in 0usize..6000,
        flips in proptest::collection::vec((proptest::prelude::any::<usize>(), 1u8..=255), 0..4),
        junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        get in proptest::prelude::any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let n = one_node().await;
            let data = bytes(3000, 71);
            let kept = small_manifest("b", "k", &data).with_chunk_at_manifest_node().unwrap();
            let mut call = if get {
                get_with_chunk_call("b", "k")
            } else {
                put_with_chunk_call(&kept, &data, quarry_store::chunk_crc32c(&data))
            };
            call.truncate(cut.max(1));
            for (at, x) in &flips {
                let i = at % call.len();
                call[i] ^= x;
            }
            call.extend_from_slice(&junk);
            let answer = serve_call(&n, Bytes::from(call)).await;
            assert!(matches!(answer.first(), Some(0 | 1)), "{answer:?}");
            if answer.first() == Some(&0) && NodeStore::usage(&n).objects == 1 {
                let found = n
                    .get_with_chunk(&BucketName::new("b").unwrap(), &ObjectKey::new("k").unwrap())
                    .await;
                // Whatever was stored reads back as what its manifest says.
                if let Ok(Some(f)) = found {
                    let chunk = f.chunk.unwrap();
                    assert_eq!(
                        quarry_store::Fingerprint::of(&chunk),
                        f.manifest.chunks()[0].fingerprint
                    );
                }
            }
        });
    }

    /// Random, truncated and bit-flipped answers to a one-call get are
    /// errors at the caller, never a panic and never other bytes.
    #[test]
    fn random_small_object_answers_never_panic(
        cut in 0usize..3000,
        flips in proptest::collection::vec((proptest::prelude::any::<usize>(), 1u8..=255), 0..4),
        junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let (answer, data) = a_get_with_chunk_answer().await;
            let mut bad = answer.to_vec();
            bad.truncate(cut);
            for (at, x) in &flips {
                if !bad.is_empty() {
                    let i = at % bad.len();
                    bad[i] ^= x;
                }
            }
            bad.extend_from_slice(&junk);
            let node = RemoteNode::new(1, Arc::new(Canned(Bytes::from(bad))));
            let got = quarry_store::StoreNode::get_with_chunk(
                &node,
                &BucketName::new("b").unwrap(),
                &ObjectKey::new("k").unwrap(),
            )
            .await;
            // Only what passes every check (the manifest's own CRC-32C,
            // the chunk's) comes back: the bytes put.
            if let Ok(Some(ManifestWithChunk { chunk: Some(chunk), .. })) = got {
                assert_eq!(&chunk[..], &data[..]);
            }
        });
    }
}
