//! Object operations over in-memory nodes: versions, conditional and atomic
//! replace, ranges, listing, accounting, and what a crash between steps
//! leaves (orphans, never dangling references).

use std::collections::HashMap;
use std::sync::Arc;

use quarry_store::bench::generate;
use quarry_store::{
    BucketName, ChunkStore, Chunking, Condition, Fingerprint, MemChunkStore, MemTableStore,
    NodeStore, ObjectKey, ObjectStore, StoreError,
};

fn b(name: &str) -> BucketName {
    BucketName::new(name).unwrap()
}

fn k(key: &str) -> ObjectKey {
    ObjectKey::new(key).unwrap()
}

async fn store(ids: &[u16]) -> quarry_store::MemObjectStore {
    let s = quarry_store::mem_object_store(ids.iter().copied())
        .await
        .unwrap();
    s.create_bucket(&b("data"), Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    s
}

#[tokio::test]
async fn put_get_range_list_delete_and_versions() {
    let s = store(&[1, 2, 3]).await;
    let data = generate(10_000, 1);
    let m = s
        .put_bytes(&b("data"), &k("dir/a"), &data, Condition::Always)
        .await
        .unwrap();
    assert_eq!((m.version(), m.size(), m.chunks().len()), (1, 10_000, 10));
    assert_eq!(s.get(&b("data"), &k("dir/a")).await.unwrap().1, data);
    for (off, len) in [(0, 1), (1023, 2), (5000, 3000), (9999, 100), (10_000, 5)] {
        let (_, got) = s
            .get_range(&b("data"), &k("dir/a"), off, len)
            .await
            .unwrap();
        let end = (off + len).min(10_000) as usize;
        assert_eq!(&got[..], &data[off as usize..end], "{off}+{len}");
    }
    let e = s
        .get_range(&b("data"), &k("dir/a"), 10_001, 1)
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::RangeOutOfBounds { .. }));

    for key in ["dir/b", "dir/c", "other", "dir/sub/d"] {
        s.put_bytes(&b("data"), &k(key), key.as_bytes(), Condition::Always)
            .await
            .unwrap();
    }
    let keys =
        |v: Vec<quarry_store::Manifest>| v.iter().map(|m| m.key().to_string()).collect::<Vec<_>>();
    assert_eq!(
        keys(s.list(&b("data"), "dir/", None, 10).await.unwrap()),
        ["dir/a", "dir/b", "dir/c", "dir/sub/d"]
    );
    assert_eq!(
        s.list(&b("data"), "", None, usize::MAX)
            .await
            .unwrap()
            .len(),
        5
    );
    assert_eq!(
        keys(
            s.list(&b("data"), "dir/", Some(&k("dir/b")), 2)
                .await
                .unwrap()
        ),
        ["dir/c", "dir/sub/d"]
    );

    // Versions keep increasing across delete and re-create.
    let m2 = s
        .put_bytes(&b("data"), &k("dir/a"), b"v2", Condition::Always)
        .await
        .unwrap();
    assert_eq!(m2.version(), 2);
    let gone = s
        .delete(&b("data"), &k("dir/a"), Condition::IfVersion(2))
        .await
        .unwrap();
    assert_eq!(gone.version(), 2);
    assert!(matches!(
        s.head(&b("data"), &k("dir/a")).await,
        Err(StoreError::NoSuchObject { .. })
    ));
    assert!(matches!(
        s.delete(&b("data"), &k("dir/a"), Condition::Always).await,
        Err(StoreError::NoSuchObject { .. })
    ));
    let m3 = s
        .put_bytes(&b("data"), &k("dir/a"), b"v3", Condition::IfAbsent)
        .await
        .unwrap();
    assert_eq!(m3.version(), 3);
    assert_eq!(
        keys(s.list(&b("data"), "dir/a", None, 10).await.unwrap()),
        ["dir/a"]
    );

    // Empty objects are objects.
    let e = s
        .put_bytes(&b("data"), &k("empty"), b"", Condition::Always)
        .await
        .unwrap();
    assert_eq!((e.size(), e.chunks().len()), (0, 0));
    assert!(s.get(&b("data"), &k("empty")).await.unwrap().1.is_empty());
}

#[tokio::test]
async fn conditional_puts_name_both_versions_and_leave_nothing_behind() {
    let s = store(&[1, 2]).await;
    s.put_bytes(&b("data"), &k("x"), b"one", Condition::Always)
        .await
        .unwrap();
    s.put_bytes(&b("data"), &k("x"), b"two", Condition::IfVersion(1))
        .await
        .unwrap();
    let before = s.usage().await.unwrap();
    let e = s
        .put_bytes(
            &b("data"),
            &k("x"),
            &generate(5000, 9),
            Condition::IfVersion(1),
        )
        .await
        .unwrap_err();
    match &e {
        StoreError::VersionMismatch {
            expected, current, ..
        } => assert_eq!((*expected, *current), (Some(1), Some(2))),
        other => panic!("{other}"),
    }
    assert_eq!(
        e.to_string(),
        "version mismatch on data/x: expected version 1, current version 2"
    );
    let e = s
        .put_bytes(&b("data"), &k("x"), b"z", Condition::IfAbsent)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("expected absent, current version 2"),
        "{e}"
    );
    let e = s
        .put_bytes(&b("data"), &k("new"), b"z", Condition::IfVersion(4))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("expected version 4, current absent"),
        "{e}"
    );
    let e = s
        .delete(&b("data"), &k("x"), Condition::IfVersion(1))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::VersionMismatch { .. }));
    assert_eq!(
        s.usage().await.unwrap(),
        before,
        "refused writes cost nothing"
    );
    assert_eq!(s.get(&b("data"), &k("x")).await.unwrap().1, &b"two"[..]);

    assert!(matches!(
        s.put_bytes(&b("nope"), &k("x"), b"", Condition::Always)
            .await,
        Err(StoreError::NoSuchBucket(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_put_races_have_one_winner() {
    let s = Arc::new(store(&[1, 2, 3, 4]).await);
    s.put_bytes(&b("data"), &k("counter"), b"0", Condition::Always)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8u8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.put_bytes(
                &b("data"),
                &k("counter"),
                &[i; 3000],
                Condition::IfVersion(1),
            )
            .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(m) => {
                wins += 1;
                assert_eq!(m.version(), 2);
            }
            Err(StoreError::VersionMismatch { current, .. }) => assert_eq!(current, Some(2)),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(wins, 1);
    // Losers released their chunks: only the winner's remain.
    let u = s.usage().await.unwrap();
    assert_eq!(u.logical_bytes, 3000);
    assert_eq!(
        u.stored_bytes,
        1024 + 952,
        "one 1 KiB block of the byte, and the tail"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_see_the_old_or_the_new_version_never_a_mix() {
    let s = Arc::new(store(&[1, 2, 3, 4]).await);
    let a = generate(64 * 1024, 1);
    let bb = generate(64 * 1024, 2);
    s.put_bytes(&b("data"), &k("obj"), &a, Condition::Always)
        .await
        .unwrap();
    let writer = {
        let (s, a, bb) = (s.clone(), a.clone(), bb.clone());
        tokio::spawn(async move {
            for i in 0..200 {
                let v = if i % 2 == 0 { &bb } else { &a };
                s.put_bytes(&b("data"), &k("obj"), v, Condition::Always)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (s, a, bb) = (s.clone(), a.clone(), bb.clone());
        readers.push(tokio::spawn(async move {
            let mut seen = [0; 2];
            for _ in 0..200 {
                match s.get(&b("data"), &k("obj")).await {
                    Ok((_, got)) => {
                        if got[..] == a[..] {
                            seen[0] += 1;
                        } else if got[..] == bb[..] {
                            seen[1] += 1;
                        } else {
                            panic!("a read mixed two versions");
                        }
                    }
                    // Three newer versions in a row overtook this reader.
                    Err(StoreError::Changed { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
                tokio::task::yield_now().await;
            }
            seen
        }));
    }
    writer.await.unwrap();
    for r in readers {
        r.await.unwrap();
    }
}

#[tokio::test]
async fn usage_per_bucket_and_dedup_ratio() {
    let s = store(&[1, 2, 3, 4]).await;
    s.create_bucket(&b("copies"), Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    let data = generate(8 * 1024, 3);
    s.put_bytes(&b("data"), &k("a"), &data, Condition::Always)
        .await
        .unwrap();
    s.put_bytes(&b("data"), &k("b"), &data, Condition::Always)
        .await
        .unwrap();
    s.put_bytes(&b("copies"), &k("c"), &data, Condition::Always)
        .await
        .unwrap();
    let mut other = data.clone();
    other[0] ^= 1;
    s.put_bytes(&b("copies"), &k("d"), &other, Condition::Always)
        .await
        .unwrap();
    let u = s.usage().await.unwrap();
    assert_eq!(u.objects, 4);
    assert_eq!(u.logical_bytes, 4 * 8192);
    assert_eq!((u.chunks, u.stored_bytes), (9, 9 * 1024));
    assert!((u.dedup_ratio() - 32.0 / 9.0).abs() < 1e-9);
    let d = &u.buckets[&b("data")];
    assert_eq!(
        (d.objects, d.logical_bytes, d.chunks, d.stored_bytes),
        (2, 16384, 8, 8192)
    );
    assert!((d.dedup_ratio() - 2.0).abs() < 1e-9);
    let c = &u.buckets[&b("copies")];
    assert_eq!(
        (c.objects, c.logical_bytes, c.chunks, c.stored_bytes),
        (2, 16384, 9, 9216)
    );
    // The per-node figures add up to the cluster's.
    let mut stored = 0;
    for n in s.nodes() {
        stored += n.usage().stored_bytes;
    }
    assert_eq!(stored, u.stored_bytes);
    // Delete the bucket's objects; the shared chunks stay for "copies".
    s.delete(&b("data"), &k("a"), Condition::Always)
        .await
        .unwrap();
    s.delete(&b("data"), &k("b"), Condition::Always)
        .await
        .unwrap();
    let u = s.usage().await.unwrap();
    assert!(!u.buckets.contains_key(&b("data")));
    assert_eq!((u.chunks, u.stored_bytes), (9, 9 * 1024));
    assert!(matches!(
        s.delete_bucket(&b("copies")).await,
        Err(StoreError::BucketNotEmpty(_))
    ));
    s.delete_bucket(&b("data")).await.unwrap();
    assert_eq!(s.buckets().await.unwrap().len(), 1);
}

type Node = NodeStore<Arc<MemTableStore>, Arc<MemChunkStore>>;

async fn single(
    tables: &Arc<MemTableStore>,
    data: &Arc<MemChunkStore>,
) -> (ObjectStore<Node>, quarry_store::Recovery) {
    let (n, rec): (Node, _) = NodeStore::open(1, tables.clone(), data.clone())
        .await
        .unwrap();
    (ObjectStore::new([Arc::new(n)]).unwrap(), rec)
}

/// No live manifest names a chunk that is missing or under-counted.
async fn assert_no_dangling(s: &ObjectStore<Node>) {
    let mut want: HashMap<Fingerprint, u64> = HashMap::new();
    for n in s.nodes() {
        for m in n.all_manifests().await.unwrap() {
            for c in m.chunks() {
                *want.entry(c.fingerprint).or_default() += 1;
            }
        }
    }
    for (fp, w) in want {
        let n = s.node(s.placement().chunk_node(&fp)).unwrap();
        let have = n.chunk(fp).await.unwrap().map_or(0, |i| i.refcount);
        assert!(
            have >= w,
            "chunk {fp} has {have} references, manifests make {w}"
        );
        n.read_chunk(fp).await.unwrap();
    }
}

#[tokio::test]
async fn a_crash_at_any_step_leaves_orphans_never_dangling_references() {
    let old = generate(6000, 1);
    let mut new = old.clone();
    new[3000..3100].fill(0);
    new.extend_from_slice(&generate(2000, 2));
    // Commits of a replace on one node: one per chunk of the new version
    // (8), the manifest, then one release per chunk of the old (6).
    for crash_after in 0..=16u64 {
        let tables = Arc::new(MemTableStore::new());
        let data = Arc::new(MemChunkStore::default());
        let (s, _) = single(&tables, &data).await;
        s.create_bucket(&b("data"), Chunking::fixed(1024).unwrap())
            .await
            .unwrap();
        s.put_bytes(&b("data"), &k("f"), &old, Condition::Always)
            .await
            .unwrap();
        tables.fail_commits_after(Some(crash_after));
        let result = s
            .put_bytes(&b("data"), &k("f"), &new, Condition::Always)
            .await;
        // "Crash": drop the node, reopen over what was committed.
        drop(s);
        tables.fail_commits_after(None);
        let (mut s, _) = single(&tables, &data).await;
        assert_no_dangling(&s).await;
        let (m, got) = s.get(&b("data"), &k("f")).await.unwrap();
        if m.version() == 2 {
            assert_eq!(got, new, "crash after {crash_after}");
        } else {
            assert!(result.is_err());
            assert_eq!(got, old, "crash after {crash_after}");
        }
        // The collector takes the orphans' references away; after it,
        // counts are exact and only live chunks hold pages. (A deadline of
        // 0 here, not for the puts: one taking a millisecond would expire.)
        s.set_put_deadline_ms(0);
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        let report = s.collect_orphans().await.unwrap();
        assert!(report.dangling.is_empty());
        let mut total_refs = 0;
        for (_, info) in s.node(1).unwrap().chunks().await.unwrap() {
            total_refs += info.refcount;
        }
        assert_eq!(
            total_refs,
            m.chunks().len() as u64,
            "crash after {crash_after}: {report:?}"
        );
        assert_eq!(
            data.live_extents(),
            s.node(1).unwrap().chunks().await.unwrap().len()
        );
        let u = s.usage().await.unwrap();
        assert_eq!(u.logical_bytes, m.size());
    }
}

#[tokio::test]
async fn open_trims_extents_no_record_names() {
    let tables = Arc::new(MemTableStore::new());
    let data = Arc::new(MemChunkStore::default());
    let (s, rec) = single(&tables, &data).await;
    assert_eq!(rec.orphan_extents_trimmed, 0);
    s.create_bucket(&b("data"), Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    s.put_bytes(&b("data"), &k("f"), &generate(3000, 5), Condition::Always)
        .await
        .unwrap();
    let before = s.usage().await.unwrap();
    // Bytes written, then a crash before their record: an unnamed extent.
    let fp = Fingerprint::of(b"lost");
    data.write(&fp, bytes::Bytes::from_static(b"lost"))
        .await
        .unwrap();
    assert_eq!(data.live_extents(), 4);
    drop(s);
    let (s, rec) = single(&tables, &data).await;
    assert_eq!(rec.orphan_extents_trimmed, 1);
    assert_eq!((rec.chunks, rec.manifests), (3, 1));
    assert_eq!(data.live_extents(), 3);
    assert_eq!(
        s.usage().await.unwrap(),
        before,
        "open rebuilds the figures from the tables"
    );
    assert_eq!(s.usage().await.unwrap().stored_bytes, 3000);
    assert_eq!(
        s.get(&b("data"), &k("f")).await.unwrap().1,
        generate(3000, 5)
    );
}

#[tokio::test]
async fn failed_chunk_writes_release_what_the_put_took() {
    let tables = Arc::new(MemTableStore::new());
    let data = Arc::new(MemChunkStore::default());
    let (s, _) = single(&tables, &data).await;
    s.create_bucket(&b("data"), Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    let base = generate(4096, 1);
    s.put_bytes(&b("data"), &k("base"), &base, Condition::Always)
        .await
        .unwrap();
    // The copy shares its first 4 chunks, then needs new bytes: the write fails.
    let mut longer = base.clone();
    longer.extend_from_slice(&generate(2048, 2));
    data.fail_writes(true);
    let e = s
        .put_bytes(&b("data"), &k("copy"), &longer, Condition::Always)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("refused"), "{e}");
    data.fail_writes(false);
    for (_, info) in s.node(1).unwrap().chunks().await.unwrap() {
        assert_eq!(
            info.refcount, 1,
            "the shared chunks went back to one reference"
        );
    }
    assert!(matches!(
        s.head(&b("data"), &k("copy")).await,
        Err(StoreError::NoSuchObject { .. })
    ));
}

#[tokio::test]
async fn the_collector_spares_recent_references() {
    let tables = Arc::new(MemTableStore::new());
    let data = Arc::new(MemChunkStore::default());
    let (n, _): (Node, _) = NodeStore::open(1, tables.clone(), data.clone())
        .await
        .unwrap();
    let mut s = ObjectStore::new([Arc::new(n)]).unwrap();
    s.create_bucket(&b("data"), Chunking::fixed(1024).unwrap())
        .await
        .unwrap();
    // A put in flight: its chunk is referenced, its manifest not yet written.
    let chunk = bytes::Bytes::from_static(b"in flight");
    let fp = Fingerprint::of(&chunk);
    s.node(1)
        .unwrap()
        .put_chunk(&b("data"), fp, chunk)
        .await
        .unwrap();
    s.set_put_deadline_ms(60_000);
    let report = s.collect_orphans().await.unwrap();
    assert_eq!(
        report.chunks_lowered, 0,
        "a recent reference may belong to a put in flight"
    );
    s.set_put_deadline_ms(0);
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let report = s.collect_orphans().await.unwrap();
    assert_eq!((report.chunks_lowered, report.chunks_freed), (1, 1));
    assert_eq!(data.live_extents(), 0);
}

#[tokio::test]
async fn a_chunk_shorter_than_its_manifest_says_is_an_error_not_a_panic() {
    let s = store(&[1]).await;
    let node = s.node(1).unwrap();
    let chunk = bytes::Bytes::from_static(b"ten bytes!");
    let fp = Fingerprint::of(&chunk);
    node.put_chunk(&b("data"), fp, chunk).await.unwrap();
    // A damaged manifest (or chunk record) that disagrees on the length.
    let m = quarry_store::Manifest::new(
        b("data"),
        k("x"),
        0,
        0,
        Chunking::fixed(1024).unwrap(),
        vec![quarry_store::ChunkRef {
            fingerprint: fp,
            len: 20,
        }],
    )
    .unwrap();
    node.put_manifest(m, Condition::Always).await.unwrap();
    let e = s.get(&b("data"), &k("x")).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidChunk { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("10 bytes at its node, 20 in the manifest"),
        "{e}"
    );
}

#[tokio::test]
async fn a_put_over_its_deadline_fails_and_releases_its_chunks() {
    let mut s = store(&[1, 2]).await;
    s.set_put_deadline_ms(0);
    // A source that takes at least 5 ms: the put cannot commit in 0 ms.
    let (mut tx, rx) = tokio::io::duplex(4096);
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        tx.write_all(&generate(3000, 1)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        tx.write_all(&generate(3000, 2)).await.unwrap();
    });
    let e = s
        .put(&b("data"), &k("slow"), rx, Condition::Always)
        .await
        .unwrap_err();
    writer.await.unwrap();
    assert!(matches!(e, StoreError::PutExpired { .. }), "{e}");
    assert!(e.to_string().contains("over the 0 ms limit"), "{e}");
    // Its references were released: nothing is stored, nothing to collect.
    assert_eq!(s.usage().await.unwrap(), Default::default());
    for n in s.nodes() {
        assert!(n.chunks().await.unwrap().is_empty());
        assert!(n.data().extents().await.unwrap().is_empty());
    }
    assert!(matches!(
        s.head(&b("data"), &k("slow")).await,
        Err(StoreError::NoSuchObject { .. })
    ));
}

#[tokio::test]
async fn bucket_settings_are_cached_for_a_second_and_forgotten_at_delete() {
    let s = store(&[1, 2, 3]).await;
    // A second client over the same nodes.
    let other = ObjectStore::new(s.nodes().cloned()).unwrap();
    let data = generate(3000, 7);
    other
        .put_bytes(&b("data"), &k("x"), &data, Condition::Always)
        .await
        .unwrap();
    s.delete(&b("data"), &k("x"), Condition::Always)
        .await
        .unwrap();
    s.delete_bucket(&b("data")).await.unwrap();
    // The client that deleted the bucket knows at once.
    assert!(matches!(
        s.put_bytes(&b("data"), &k("y"), &data, Condition::Always)
            .await,
        Err(StoreError::NoSuchBucket(_))
    ));
    assert!(matches!(
        s.head(&b("data"), &k("y")).await,
        Err(StoreError::NoSuchBucket(_))
    ));
    // The other one once its cached settings are older than the TTL.
    s.create_bucket(&b("data"), Chunking::fixed(2048).unwrap())
        .await
        .unwrap();
    tokio::time::sleep(quarry_store::BUCKET_CONFIG_TTL + std::time::Duration::from_millis(50))
        .await;
    let m = other
        .put_bytes(&b("data"), &k("z"), &data, Condition::Always)
        .await
        .unwrap();
    assert_eq!(
        m.chunks().len(),
        2,
        "cut with the new bucket's 2 KiB chunks"
    );
    s.delete(&b("data"), &k("z"), Condition::Always)
        .await
        .unwrap();
    s.delete_bucket(&b("data")).await.unwrap();
    tokio::time::sleep(quarry_store::BUCKET_CONFIG_TTL + std::time::Duration::from_millis(50))
        .await;
    assert!(matches!(
        other
            .put_bytes(&b("data"), &k("w"), &data, Condition::Always)
            .await,
        Err(StoreError::NoSuchBucket(_))
    ));
}
