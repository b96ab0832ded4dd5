//! The chunk table's reference counts (Multes++ Algorithm 1 over chunks):
//! exact under concurrency, freed at zero, consistent with the manifests.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use quarry_store::{
    mem_object_store, BucketName, Chunking, Condition, Fingerprint, MemChunkStore, MemObjectStore,
    MemTableStore, NodeId, NodeStore, ObjectKey, StoreError,
};

type MemNode = NodeStore<Arc<MemTableStore>, Arc<MemChunkStore>>;

async fn node() -> (MemNode, Arc<MemTableStore>, Arc<MemChunkStore>) {
    let tables = Arc::new(MemTableStore::new());
    let data = Arc::new(MemChunkStore::default());
    let (n, _) = NodeStore::open(1, tables.clone(), data.clone())
        .await
        .unwrap();
    (n, tables, data)
}

fn b(name: &str) -> BucketName {
    BucketName::new(name).unwrap()
}

fn k(key: &str) -> ObjectKey {
    ObjectKey::new(key).unwrap()
}

#[tokio::test]
async fn put_chunk_stores_once_and_release_frees_at_zero() {
    let (n, _, data) = node().await;
    let bytes = Bytes::from(vec![3u8; 10_000]);
    let fp = Fingerprint::of(&bytes);
    let first = n.put_chunk(&b("a"), fp, bytes.clone()).await.unwrap();
    assert!(first.stored);
    let second = n.put_chunk(&b("a"), fp, bytes.clone()).await.unwrap();
    assert_eq!((second.stored, second.refcount), (false, 2));
    assert_eq!(n.ref_chunk(&b("other"), fp).await.unwrap(), Some(3));
    assert_eq!(data.live_extents(), 1);
    assert_eq!(data.live_pages(), 2, "10 000 bytes on 8 KiB pages");
    let u = n.usage();
    assert_eq!((u.chunks, u.stored_bytes), (1, 10_000));
    assert_eq!(u.buckets[&b("other")].stored_bytes, 10_000);

    assert_eq!(n.read_chunk(fp).await.unwrap(), bytes);
    assert_eq!(n.release_chunk(&b("a"), fp).await.unwrap().refcount, 2);
    assert!(matches!(
        n.release_chunk(&b("nobody"), fp).await,
        Err(StoreError::NotReferenced { .. })
    ));
    assert_eq!(n.release_chunk(&b("other"), fp).await.unwrap().refcount, 1);
    assert!(!n.usage().buckets.contains_key(&b("other")));
    let last = n.release_chunk(&b("a"), fp).await.unwrap();
    assert_eq!(last.refcount, 0);
    assert!(last.freed.is_some());
    assert_eq!(
        data.live_extents(),
        0,
        "the freed chunk's pages were trimmed"
    );
    assert!(matches!(
        n.read_chunk(fp).await,
        Err(StoreError::ChunkMissing(_))
    ));
    assert!(matches!(
        n.release_chunk(&b("a"), fp).await,
        Err(StoreError::ChunkMissing(_))
    ));
    assert_eq!(n.usage(), Default::default());
    assert_eq!(n.ref_chunk(&b("a"), fp).await.unwrap(), None);
}

#[tokio::test]
async fn put_chunk_checks_the_fingerprint_and_length() {
    let (n, _, _) = node().await;
    let e = n
        .put_chunk(
            &b("a"),
            Fingerprint::of(b"other"),
            Bytes::from_static(b"data"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::FingerprintMismatch { .. }), "{e}");
    let e = n
        .put_chunk(&b("a"), Fingerprint::of(b""), Bytes::new())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("0 bytes"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_and_releases_of_one_chunk_stay_exact() {
    let (n, _, data) = node().await;
    let n = Arc::new(n);
    let bytes = Bytes::from(vec![9u8; 5000]);
    let fp = Fingerprint::of(&bytes);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let (n, bytes) = (n.clone(), bytes.clone());
        tasks.push(tokio::spawn(async move {
            let bucket = b(if i % 2 == 0 { "even" } else { "odd" });
            n.put_chunk(&bucket, fp, bytes).await.unwrap()
        }));
    }
    let mut stored = 0;
    for t in tasks {
        stored += usize::from(t.await.unwrap().stored);
    }
    assert_eq!(stored, 1, "exactly one put wrote the bytes");
    assert_eq!(data.live_extents(), 1);
    let info = n.chunk(fp).await.unwrap().unwrap();
    assert_eq!(info.refcount, 64);
    assert_eq!(info.refs[&b("even")], 32);

    // Releases interleaved with more puts: 64 releases and 10 puts.
    let mut tasks = Vec::new();
    for i in 0..74 {
        let (n, bytes) = (n.clone(), bytes.clone());
        tasks.push(tokio::spawn(async move {
            let bucket = b(if i % 2 == 0 { "even" } else { "odd" });
            if i < 64 {
                n.release_chunk(&bucket, fp)
                    .await
                    .map(|r| r.freed.is_some())
            } else {
                n.put_chunk(&bucket, fp, bytes).await.map(|_| false)
            }
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    // A release can free the chunk only if it ran after every put but the
    // later ones; any put after a free stores the bytes again. Whatever the
    // order, what is left is exactly the 10 later references.
    let info = n.chunk(fp).await.unwrap().unwrap();
    assert_eq!(info.refcount, 10);
    assert_eq!(data.live_extents(), 1);
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
}

/// Counts references that live manifests make, per chunk and the node
/// that must hold it: the manifest's own node for a small object that
/// keeps its chunk there, else the node the fingerprint names.
async fn references(store: &MemObjectStore) -> HashMap<(NodeId, Fingerprint), u64> {
    let mut refs = HashMap::new();
    for n in store.nodes() {
        for m in n.all_manifests().await.unwrap() {
            for c in m.chunks() {
                let home = if m.chunk_at_manifest_node() {
                    n.id()
                } else {
                    store.placement().chunk_node(&c.fingerprint)
                };
                *refs.entry((home, c.fingerprint)).or_default() += 1;
            }
        }
    }
    refs
}

/// Every chunk's count equals the references live manifests make, and
/// every live extent belongs to a chunk record.
async fn assert_counts_exact(store: &MemObjectStore) {
    let want = references(store).await;
    let mut have = HashMap::new();
    let mut extents = 0;
    for n in store.nodes() {
        for (fp, info) in n.chunks().await.unwrap() {
            have.insert((n.id(), fp), info.refcount);
        }
        extents += n.data().live_extents();
    }
    assert_eq!(have, want);
    assert_eq!(extents, have.len());
    // And the space figures agree with a recount.
    let usage = store.usage().await.unwrap();
    let mut stored = 0u64;
    for n in store.nodes() {
        for (_, info) in n.chunks().await.unwrap() {
            stored += u64::from(info.len);
        }
    }
    assert_eq!(usage.stored_bytes, stored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_object_puts_and_deletes_keep_counts_exact() {
    let store = Arc::new(mem_object_store([1, 2, 3, 4]).await.unwrap());
    for (bucket, chunking) in [
        ("fixed", Chunking::fixed(1024).unwrap()),
        ("cdc", Chunking::fastcdc(256, 1024, 4096).unwrap()),
    ] {
        store.create_bucket(&b(bucket), chunking).await.unwrap();
    }
    // Eight contents sharing most of their chunks: a common body of blocks
    // with a few blocks changed per variant.
    let base = quarry_store::bench::generate(40_000, 11);
    let variants: Vec<Vec<u8>> = (0..8)
        .map(|v| {
            let mut d = base.clone();
            d[v * 4000..v * 4000 + 100].fill(v as u8);
            d
        })
        .collect();
    let variants = Arc::new(variants);
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let (store, variants) = (store.clone(), variants.clone());
        tasks.push(tokio::spawn(async move {
            let bucket = b(if t % 2 == 0 { "fixed" } else { "cdc" });
            for round in 0..12u64 {
                let key = k(&format!("key-{}", (t + round) % 6));
                let v = &variants[((t * 7 + round) % 8) as usize];
                match round % 4 {
                    3 => match store.delete(&bucket, &key, Condition::Always).await {
                        Ok(_) | Err(StoreError::NoSuchObject { .. }) => {}
                        Err(e) => panic!("{e}"),
                    },
                    _ => {
                        store
                            .put_bytes(&bucket, &key, v, Condition::Always)
                            .await
                            .unwrap();
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_counts_exact(&store).await;
    // Objects read back as one of the variants, whole.
    for bucket in ["fixed", "cdc"] {
        for m in store.list(&b(bucket), "", None, 100).await.unwrap() {
            let (_, data) = store.get(&b(bucket), m.key()).await.unwrap();
            assert!(variants.iter().any(|v| v[..] == data[..]));
        }
    }
    // Deleting everything frees every chunk and every page.
    for bucket in ["fixed", "cdc"] {
        for m in store.list(&b(bucket), "", None, 100).await.unwrap() {
            store
                .delete(&b(bucket), m.key(), Condition::Always)
                .await
                .unwrap();
        }
    }
    assert_counts_exact(&store).await;
    let u = store.usage().await.unwrap();
    assert_eq!(
        (u.objects, u.logical_bytes, u.stored_bytes, u.chunks),
        (0, 0, 0, 0)
    );
}

#[tokio::test]
async fn algorithm_1_cases_same_key() {
    let store = mem_object_store([1, 2]).await.unwrap();
    let bucket = b("kv");
    store
        .create_bucket(&bucket, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    let one = vec![1u8; 4096];
    let two = vec![2u8; 4096];
    let fp1 = Fingerprint::of(&one);
    let fp2 = Fingerprint::of(&two);
    // A value's count over every node: a small object keeps its chunk on
    // its manifest's node, so "a" and "b" may hold it on two nodes.
    let count = |fp: Fingerprint| {
        let store = &store;
        async move {
            let mut total = 0;
            for n in store.nodes() {
                total += n.chunk(fp).await.unwrap().map_or(0, |i| i.refcount);
            }
            total
        }
    };
    // First time this value is stored.
    store
        .put_bytes(&bucket, &k("a"), &one, Condition::Always)
        .await
        .unwrap();
    assert_eq!(count(fp1).await, 1);
    // Same key, same value: no change in counts.
    store
        .put_bytes(&bucket, &k("a"), &one, Condition::Always)
        .await
        .unwrap();
    assert_eq!(count(fp1).await, 1);
    // New key, existing value: count + 1.
    store
        .put_bytes(&bucket, &k("b"), &one, Condition::Always)
        .await
        .unwrap();
    assert_eq!(count(fp1).await, 2);
    // Key gets a different value: the old one loses a reference.
    store
        .put_bytes(&bucket, &k("a"), &two, Condition::Always)
        .await
        .unwrap();
    assert_eq!((count(fp1).await, count(fp2).await), (1, 1));
    store
        .delete(&bucket, &k("b"), Condition::Always)
        .await
        .unwrap();
    assert_eq!(count(fp1).await, 0, "freed");
    assert_counts_exact(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deletes_of_one_object_release_once() {
    let store = Arc::new(mem_object_store([1, 2, 3]).await.unwrap());
    let bucket = b("d");
    store
        .create_bucket(&bucket, Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    let data = quarry_store::bench::generate(20_000, 4);
    store
        .put_bytes(&bucket, &k("keep"), &data, Condition::Always)
        .await
        .unwrap();
    store
        .put_bytes(&bucket, &k("gone"), &data, Condition::Always)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .delete(&b("d"), &k("gone"), Condition::Always)
                .await
                .is_ok()
        }));
    }
    let mut deleted = 0;
    for t in tasks {
        deleted += usize::from(t.await.unwrap());
    }
    assert_eq!(deleted, 1);
    assert_counts_exact(&store).await;
    for n in store.nodes() {
        for (_, info) in n.chunks().await.unwrap() {
            assert_eq!(info.refcount, 1, "only \"keep\" refers to it now");
        }
    }
}
