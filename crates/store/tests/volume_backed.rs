//! The store over the space manager: `VolumeTableStore` and
//! `VolumeChunkStore` under `NodeStore` and `ObjectStore`, on `mem` and
//! `file` devices; crash recovery by dropping everything without a close.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use quarry_device::BackendKind;
use quarry_store::{
    open_volume_node, Batch, BucketName, ChunkCheck, ChunkLocation, ChunkStore, Chunking,
    Condition, Fingerprint, NodeId, ObjectKey, ObjectStore, OwnedRecords, Recovery, StoreError,
    Table, TableOwner, TableStore, VolumeChunkConfig, VolumeChunkStore, VolumeObjectStore,
    VolumeTableConfig, VolumeTableStore,
};
use quarry_volume::{LogicalPage, SpaceManager};

fn b(name: &str) -> BucketName {
    BucketName::new(name).unwrap()
}

fn k(key: &str) -> ObjectKey {
    ObjectKey::new(key).unwrap()
}

/// A store over one node per volume, ids 1, 2, ...
async fn objects(volumes: &[Arc<SpaceManager>]) -> (VolumeObjectStore, Vec<Recovery>) {
    let mut nodes = Vec::new();
    let mut recoveries = Vec::new();
    for (i, v) in volumes.iter().enumerate() {
        let (n, r) = open_volume_node(i as NodeId + 1, Arc::clone(v), &store_config())
            .await
            .unwrap();
        nodes.push(Arc::new(n));
        recoveries.push(r);
    }
    (ObjectStore::new(nodes).unwrap(), recoveries)
}

async fn close(s: VolumeObjectStore, volumes: Vec<Arc<SpaceManager>>) {
    drop(s);
    for v in volumes {
        v.close().await.unwrap();
    }
}

/// Drops the store and the volumes without closing anything.
async fn crash(
    s: VolumeObjectStore,
    volumes: Vec<Arc<SpaceManager>>,
    devices: Vec<std::sync::Weak<quarry_device::Device>>,
) {
    drop(s);
    drop(volumes);
    for d in devices {
        wait_released(d).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_over_volume_backed_nodes_on_mem_and_file_devices() {
    for backend in [BackendKind::Mem, BackendKind::File] {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut volumes = Vec::new();
        for d in &dirs {
            volumes.push(open_volume(backend, d.path(), quiet()).await.0);
        }
        let (s, _) = objects(&volumes).await;
        s.create_bucket(&b("fixed"), Chunking::fixed(4096).unwrap())
            .await
            .unwrap();
        s.create_bucket(&b("cdc"), Chunking::fastcdc(1024, 4096, 16384).unwrap())
            .await
            .unwrap();
        let mut model = BTreeMap::new();
        for i in 0..12u64 {
            let bucket = if i % 2 == 0 { "fixed" } else { "cdc" };
            let data = content(i % 7);
            let key = format!("dir/obj-{i}");
            let m = s
                .put_bytes(&b(bucket), &k(&key), &data, Condition::Always)
                .await
                .unwrap();
            assert_eq!(m.size(), data.len() as u64);
            model.insert((bucket, key), data);
        }
        for ((bucket, key), data) in &model {
            let (_, got) = s.get(&b(bucket), &k(key)).await.unwrap();
            assert_eq!(&got[..], &data[..], "{backend:?} {bucket}/{key}");
            let (_, part) = s.get_range(&b(bucket), &k(key), 1000, 3000).await.unwrap();
            assert_eq!(&part[..], &data[1000..data.len().min(4000)]);
        }
        let listed = s.list(&b("fixed"), "dir/", None, 100).await.unwrap();
        assert_eq!(listed.len(), 6);
        assert_exact(&s, "").await;
        for i in (0..12u64).step_by(3) {
            let bucket = if i % 2 == 0 { "fixed" } else { "cdc" };
            let key = format!("dir/obj-{i}");
            s.delete(&b(bucket), &k(&key), Condition::Always)
                .await
                .unwrap();
            model.remove(&(bucket, key.clone()));
            assert!(matches!(
                s.get(&b(bucket), &k(&key)).await,
                Err(StoreError::NoSuchObject { .. })
            ));
        }
        assert_exact(&s, "").await;
        let u = s.usage().await.unwrap();
        assert_eq!(u.objects, model.len() as u64);
        assert_eq!(
            u.logical_bytes,
            model.values().map(|d| d.len() as u64).sum::<u64>()
        );
        close(s, volumes).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_bytes_twice_take_no_pages_and_the_last_delete_trims_them() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::Mem, dir.path(), quiet()).await;
    let (s, _) = objects(std::slice::from_ref(&volume)).await;
    let node = s.node(1).unwrap();
    let chunk_pages = || volume.pages_in(node.data().space()).len() as u64;
    let others = || volume.stats().live_pages - node.tables().pages();
    s.create_bucket(&b("data"), Chunking::fixed(8192).unwrap())
        .await
        .unwrap();
    let data = noise(42, 50_000);
    s.put_bytes(&b("data"), &k("a"), &data, Condition::Always)
        .await
        .unwrap();
    // 7 chunks (6 of 8192 bytes, one of 848) on 1 KiB pages, their headers
    // in the first pages' tags: 6 x 8 + 1.
    assert_eq!(chunk_pages(), 49);
    assert_eq!(others(), 49, "every other live page is the tables'");
    s.put_bytes(&b("data"), &k("b"), &data, Condition::Always)
        .await
        .unwrap();
    assert_eq!(chunk_pages(), 49, "the same bytes again: no chunk pages");
    assert_eq!(others(), 49);
    assert_eq!(s.usage().await.unwrap().stored_bytes, 50_000);
    assert_eq!(s.usage().await.unwrap().logical_bytes, 100_000);

    s.delete(&b("data"), &k("a"), Condition::Always)
        .await
        .unwrap();
    assert_eq!(chunk_pages(), 49, "b still holds every chunk");
    // The tables' own pages grow with the releases' commits (how many
    // records they take depends on how the concurrent releases group), so
    // the pages freed are counted without them.
    let before = others();
    s.delete(&b("data"), &k("b"), Condition::Always)
        .await
        .unwrap();
    assert_eq!(chunk_pages(), 0, "the last reference trims the pages");
    assert_eq!(others(), 0);
    assert!(others() + 49 <= before);
    assert_exact(&s, "").await;
    assert_eq!(node.data().stats().extents, 0);
    close(s, vec![volume]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_keeps_every_object_byte_for_byte_and_every_count() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut volumes = Vec::new();
    let mut devices = Vec::new();
    for d in &dirs {
        let (v, dev) = open_volume(BackendKind::File, d.path(), quiet()).await;
        volumes.push(v);
        devices.push(dev);
    }
    let (s, _) = objects(&volumes).await;
    s.create_bucket(&b("fixed"), Chunking::fixed(2048).unwrap())
        .await
        .unwrap();
    s.create_bucket(&b("cdc"), Chunking::fastcdc(256, 1024, 4096).unwrap())
        .await
        .unwrap();
    let mut model: BTreeMap<(&str, String), u64> = BTreeMap::new();
    let mut rng = Rng(5);
    for step in 0..120u64 {
        let bucket = if rng.below(2) == 0 { "fixed" } else { "cdc" };
        let key = format!("k{}", rng.below(16));
        if rng.below(5) == 0 {
            match s.delete(&b(bucket), &k(&key), Condition::Always).await {
                Ok(_) | Err(StoreError::NoSuchObject { .. }) => {}
                Err(e) => panic!("step {step}: {e}"),
            }
            model.remove(&(bucket, key));
        } else {
            let c = rng.below(10);
            s.put_bytes(&b(bucket), &k(&key), &content(c), Condition::Always)
                .await
                .unwrap();
            model.insert((bucket, key), c);
        }
    }
    assert_exact(&s, "").await;
    let mut counts = BTreeMap::new();
    let mut compactions = 0;
    for n in s.nodes() {
        for (fp, info) in n.chunks().await.unwrap() {
            counts.insert(fp, (info.location, info.refs));
        }
        n.tables().compacted().await;
        compactions += n.tables().stats().compactions;
    }
    assert!(compactions > 0, "the tables were compacted meanwhile");
    let usage = s.usage().await.unwrap();
    crash(s, volumes, devices).await;

    let mut volumes = Vec::new();
    for d in &dirs {
        volumes.push(open_volume(BackendKind::File, d.path(), quiet()).await.0);
    }
    let (s, recoveries) = objects(&volumes).await;
    for r in &recoveries {
        assert_eq!(r.orphan_extents_trimmed, 0, "{r:?}");
    }
    assert_eq!(
        recoveries.iter().map(|r| r.manifests).sum::<u64>(),
        model.len() as u64
    );
    for ((bucket, key), c) in &model {
        let (_, got) = s.get(&b(bucket), &k(key)).await.unwrap();
        assert_eq!(&got[..], &content(*c)[..], "{bucket}/{key}");
    }
    let mut after = BTreeMap::new();
    for n in s.nodes() {
        for (fp, info) in n.chunks().await.unwrap() {
            after.insert(fp, (info.location, info.refs));
        }
    }
    assert_eq!(after, counts, "chunk records and counts survive");
    assert_eq!(s.usage().await.unwrap(), usage);
    assert_exact(&s, "").await;
    let report = s.collect_orphans().await.unwrap();
    assert_eq!(
        (report.chunks_lowered, report.dangling.len()),
        (0, 0),
        "{report:?}"
    );
    close(s, volumes).await;
}

/// Tables compacting after `compact_min_log_pages`, their snapshots
/// written in pieces of three pages or so (so a snapshot takes several).
async fn open_tables(volume: &Arc<SpaceManager>, compact_min_log_pages: u64) -> VolumeTableStore {
    VolumeTableStore::open(
        Arc::clone(volume),
        VolumeTableConfig {
            compact_min_log_pages,
            snapshot_piece_bytes: 3000,
            ..VolumeTableConfig::default()
        },
    )
    .await
    .unwrap()
}

/// Lets go of `tables` and `volume` without closing them, as a crash does,
/// then opens the tables again from the same files, compacting after
/// `compact_min_log_pages`.
async fn crash_and_reopen(
    dir: &std::path::Path,
    tables: impl Sized,
    volume: Arc<SpaceManager>,
    device: std::sync::Weak<quarry_device::Device>,
    compact_min_log_pages: u64,
) -> (
    Arc<SpaceManager>,
    std::sync::Weak<quarry_device::Device>,
    VolumeTableStore,
) {
    drop(tables);
    drop(volume);
    wait_released(device).await;
    let (volume, device) = open_volume(BackendKind::File, dir, quiet()).await;
    let tables = open_tables(&volume, compact_min_log_pages).await;
    (volume, device, tables)
}

async fn dump(t: &VolumeTableStore) -> BTreeMap<(Table, Vec<u8>), Bytes> {
    let mut out = BTreeMap::new();
    for table in [Table::Buckets, Table::Manifests, Table::Chunks] {
        for (key, v) in t.scan(table, b"", None, usize::MAX).await.unwrap() {
            out.insert((table, key), v);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_survive_a_crash_through_compactions() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let tables = Arc::new(open_tables(&volume, 8).await);
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let tables = Arc::clone(&tables);
        tasks.push(tokio::spawn(async move {
            let mut model = BTreeMap::new();
            let mut rng = Rng(t);
            for i in 0..40u64 {
                let mut batch = Batch::new();
                for j in 0..1 + rng.below(4) {
                    let table = [Table::Buckets, Table::Manifests, Table::Chunks][j as usize % 3];
                    let key = format!("{t}/{}", rng.below(20)).into_bytes();
                    if rng.below(4) == 0 {
                        batch.delete(table, key.clone());
                        model.insert((table, key), None);
                    } else {
                        // Now and then a value spanning several pages.
                        let len = if rng.below(10) == 0 { 3000 } else { 40 };
                        let value = Bytes::from(noise(t << 32 | i << 8 | j, len));
                        batch.put(table, key.clone(), value.clone());
                        model.insert((table, key), Some(value));
                    }
                }
                tables.commit(batch).await.unwrap();
            }
            model
        }));
    }
    let mut model = BTreeMap::new();
    for t in tasks {
        for (k, v) in t.await.unwrap() {
            if let Some(v) = v {
                model.insert(k, v);
            }
        }
    }
    assert_eq!(dump(&tables).await, model);
    tables.compacted().await;
    let st = tables.stats();
    assert_eq!(st.batches_committed, 320);
    assert!(st.compactions > 0, "{st:?}");
    // Written in pieces of about three pages: several pieces each.
    assert!(st.snapshot_pages >= 9, "{st:?}");
    assert!(
        st.log_records_written <= 320,
        "group commit writes at most one record a batch: {st:?}"
    );
    // The log is trimmed as it is compacted: what the tables hold stays
    // near twice the snapshot, not the 320 records' pages.
    assert!(tables.pages() < 2 * st.snapshot_pages + 40, "{st:?}");
    let (volume, device, tables) = crash_and_reopen(dir.path(), tables, volume, device, 8).await;
    assert_eq!(dump(&tables).await, model, "after the crash");
    assert_eq!(tables.stats().last_seq, st.last_seq);
    assert_eq!(tables.pages(), volume.stats().live_pages);
    // Once more, after a forced compaction and a clean close.
    tables.compact().await.unwrap();
    assert_eq!(tables.stats().log_pages, 0);
    drop(tables);
    volume.close().await.unwrap();
    drop(volume);
    wait_released(device).await;
    let (volume, _) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let tables = open_tables(&volume, 8).await;
    assert_eq!(dump(&tables).await, model, "after compaction and close");
    assert_eq!(tables.stats().records_replayed_at_open, 0);
    drop(tables);
    volume.close().await.unwrap();
}

/// A test's owner of the records under `o/` of [`Table::KvItems`], as the
/// key-value tenants keep theirs. Once its gate is set, its next copy stops
/// before the gate's record until the test lets it go: a compaction held in
/// the middle of writing the owner's records.
type Gate = (
    std::sync::mpsc::Sender<()>,
    std::sync::mpsc::Receiver<()>,
    usize,
);

#[derive(Default)]
struct Owner {
    records: std::sync::Mutex<BTreeMap<Vec<u8>, Bytes>>,
    /// (told when the copy is reached, waited on before it goes on, the
    /// record it stops before)
    gate: std::sync::Mutex<Option<Gate>>,
}

impl TableOwner for Owner {
    fn claims(&self) -> (Vec<Table>, Vec<Vec<u8>>) {
        (vec![Table::KvItems], vec![b"o/".to_vec()])
    }

    fn capture(&self, drain: &mut dyn FnMut()) -> OwnedRecords {
        let records = self.records.lock().unwrap();
        drain();
        let copy = records.clone();
        let mut gate = self.gate.lock().unwrap().take();
        Box::new(copy.into_iter().enumerate().map(move |(i, (k, v))| {
            if gate.as_ref().is_some_and(|(_, _, at)| *at == i) {
                if let Some((reached, go, _)) = gate.take() {
                    reached.send(()).unwrap();
                    go.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
                }
            }
            (Table::KvItems, k, v)
        }))
    }
}

async fn kv_items(t: &VolumeTableStore) -> BTreeMap<Vec<u8>, Bytes> {
    let all = t.scan(Table::KvItems, b"", None, usize::MAX).await.unwrap();
    all.into_iter().collect()
}

/// Records handed over to their owner: the tables log them and keep no
/// copy, snapshots (in pieces) take them from the owner while it and
/// others commit, and after a crash the tables hold exactly the owner's
/// records and those it never claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owners_records_are_logged_and_snapshotted_from_its_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let tables = Arc::new(open_tables(&volume, 8).await);
    let mut before = Batch::new();
    before.put(
        Table::KvItems,
        b"o/loaded".to_vec(),
        Bytes::from_static(b"1"),
    );
    before.put(Table::KvItems, b"z/left".to_vec(), Bytes::from_static(b"2"));
    tables.commit(before).await.unwrap();
    // The owner loads its records, then takes them over.
    let owner = Arc::new(Owner {
        records: std::sync::Mutex::new(
            tables
                .scan(Table::KvItems, b"o/", None, usize::MAX)
                .await
                .unwrap()
                .into_iter()
                .collect(),
        ),
        ..Owner::default()
    });
    tables.hand_over(owner.clone()).await.unwrap();
    let again = tables.hand_over(owner.clone()).await.unwrap_err();
    assert!(again.to_string().contains("already"), "{again}");
    let read = tables.get(Table::KvItems, b"z/left").await.unwrap_err();
    assert!(read.to_string().contains("handed over"), "{read}");
    assert_eq!(tables.stats().records, 1, "only the unclaimed record stays");

    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let (tables, owner) = (Arc::clone(&tables), Arc::clone(&owner));
        tasks.push(tokio::spawn(async move {
            let mut chunks = BTreeMap::new();
            for i in 0..40u64 {
                let key = format!("o/{t}/{}", i % 10).into_bytes();
                let value = Bytes::from(noise(t << 32 | i, 200 + (i as usize % 7) * 400));
                let mut batch = Batch::new();
                let done = {
                    let mut records = owner.records.lock().unwrap();
                    if i % 9 == 8 {
                        records.remove(&key);
                        batch.delete(Table::KvItems, key);
                    } else {
                        records.insert(key.clone(), value.clone());
                        batch.put(Table::KvItems, key, value);
                    }
                    tables.submit(batch)
                };
                done.await.unwrap();
                let mut other = Batch::new();
                let key = format!("{t}/{}", i % 5).into_bytes();
                other.put(Table::Chunks, key.clone(), Bytes::from(noise(i, 40)));
                tables.commit(other).await.unwrap();
                chunks.insert((Table::Chunks, key), Bytes::from(noise(i, 40)));
            }
            chunks
        }));
    }
    let mut model = BTreeMap::new();
    for t in tasks {
        model.extend(t.await.unwrap());
    }
    tables.compacted().await;
    let st = tables.stats();
    assert!(st.compactions >= 2, "{st:?}");
    assert!(
        st.snapshot_pages >= 9,
        "snapshots in several pieces: {st:?}"
    );
    assert_eq!(st.records as usize, 1 + model.len(), "{st:?}");
    let mut expected = owner.records.lock().unwrap().clone();
    expected.insert(b"z/left".to_vec(), Bytes::from_static(b"2"));
    let (volume, _, tables) = crash_and_reopen(dir.path(), tables, volume, device, 8).await;
    assert_eq!(kv_items(&tables).await, expected, "after the crash");
    assert_eq!(dump(&tables).await, model);
    drop(tables);
    volume.close().await.unwrap();
}

/// Tables whose owner took over 50 records (committed and compacted
/// first, as the key-value store loads its records at open), with a
/// compaction under way that stands before the owner's last record: 3.5 KB
/// of them encoded, a piece of 3000 bytes written.
struct HeldCompaction {
    tables: Arc<VolumeTableStore>,
    owner: Arc<Owner>,
    first_snapshot_pages: u64,
    /// Lets the compaction go on.
    go: std::sync::mpsc::Sender<()>,
    /// The records the commits that began it wrote.
    model: BTreeMap<(Table, Vec<u8>), Bytes>,
    /// The number of the next commit ([`commit_numbered`]).
    next: u64,
}

async fn hold_a_compaction(volume: &Arc<SpaceManager>) -> HeldCompaction {
    let tables = Arc::new(open_tables(volume, 8).await);
    let mut loaded = Batch::new();
    for i in 0..50u64 {
        loaded.put(
            Table::KvItems,
            format!("o/{i:02}").into_bytes(),
            Bytes::from(noise(i, 60)),
        );
    }
    tables.commit(loaded).await.unwrap();
    tables.compact().await.unwrap();
    let first_snapshot_pages = tables.stats().snapshot_pages;
    let owner = Arc::new(Owner {
        records: std::sync::Mutex::new(kv_items(&tables).await),
        ..Owner::default()
    });
    assert_eq!(owner.records.lock().unwrap().len(), 50);
    tables.hand_over(owner.clone()).await.unwrap();
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    *owner.gate.lock().unwrap() = Some((reached_tx, go_rx, 49));
    // A record a page, until the log is due (four times the snapshot's
    // pages) and a commit begins the compaction.
    let mut model = BTreeMap::new();
    let mut next = 0;
    while reached.try_recv().is_err() {
        assert!(next < 200, "200 commits began no compaction");
        commit_numbered(&tables, &mut model, next).await;
        next += 1;
    }
    HeldCompaction {
        tables,
        owner,
        first_snapshot_pages,
        go,
        model,
        next,
    }
}

/// Commits record `c/{i}` (100 bytes) and notes it in `model`.
async fn commit_numbered(
    tables: &VolumeTableStore,
    model: &mut BTreeMap<(Table, Vec<u8>), Bytes>,
    i: u64,
) {
    let key = format!("c/{i}").into_bytes();
    let value = Bytes::from(noise(1000 + i, 100));
    model.insert((Table::Chunks, key.clone()), value.clone());
    let mut batch = Batch::new();
    batch.put(Table::Chunks, key, value);
    tables.commit(batch).await.unwrap();
}

/// A commit that finds the log due for a compaction begins it and is
/// answered; the snapshot's owner records are written by a task of its own
/// while later commits go on, and those commits, in the log after the new
/// snapshot, survive a crash with it. A crash while the snapshot is half
/// written (its pages so far on the volume, the new root not yet) loses nothing
/// either: the log is whole, and the half snapshot is trimmed at open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_go_on_while_a_compaction_writes_the_owners_records() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let HeldCompaction {
        tables,
        owner,
        first_snapshot_pages,
        go,
        mut model,
        next,
    } = hold_a_compaction(&volume).await;
    let during = async {
        for i in next..next + 22 {
            commit_numbered(&tables, &mut model, i).await;
        }
        let key = b"o/during".to_vec();
        let value = Bytes::from_static(b"committed during the compaction");
        let mut batch = Batch::new();
        let done = {
            let mut records = owner.records.lock().unwrap();
            records.insert(key.clone(), value.clone());
            batch.put(Table::KvItems, key, value);
            tables.submit(batch)
        };
        done.await.unwrap();
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), during)
        .await
        .expect("commits go on while the compaction is under way");
    let st = tables.stats();
    assert_eq!(st.compactions, 1, "the second still under way: {st:?}");
    // What a crash now would leave: nothing is being written.
    let image = tempfile::tempdir().unwrap();
    assert!(quarry_testkit::copy_tree(dir.path(), image.path(), &[]).unwrap() > 0);
    let (model_at_image, owned_at_image) = (model.clone(), owner.records.lock().unwrap().clone());

    go.send(()).unwrap();
    tables.compacted().await;
    let st = tables.stats();
    assert_eq!(st.compactions, 2, "{st:?}");
    // The log keeps what was committed after the snapshot began.
    assert!(st.log_pages >= 23, "{st:?}");
    let owned = owner.records.lock().unwrap().clone();
    drop(tables);
    drop(volume);
    wait_released(device).await;
    let st = open_and_check(dir.path(), &owned, &model, "after the crash").await;
    assert!(st.records_replayed_at_open >= 23, "{st:?}");

    let st = open_and_check(
        image.path(),
        &owned_at_image,
        &model_at_image,
        "after a crash in the compaction",
    )
    .await;
    assert_eq!(
        st.snapshot_pages, first_snapshot_pages,
        "the first snapshot's root: {st:?}"
    );
    assert!(
        st.records_replayed_at_open >= 23,
        "the log after it: {st:?}"
    );
    assert!(
        st.pages_trimmed_at_open > 0,
        "the half-written snapshot: {st:?}"
    );
}

/// Closing the tables waits for the compaction under way and then refuses
/// commits, so a node that closes them before its volume leaves a whole
/// snapshot: the next open trims nothing and starts from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_tables_waits_for_the_compaction_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let HeldCompaction {
        tables,
        owner,
        first_snapshot_pages,
        go,
        model,
        ..
    } = hold_a_compaction(&volume).await;
    // The close waits for the compaction.
    let closing = tokio::spawn({
        let tables = Arc::clone(&tables);
        async move { tables.close().await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !closing.is_finished(),
        "the close waited for the compaction"
    );
    go.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(60), closing)
        .await
        .expect("the close returns once the compaction is done")
        .unwrap();
    assert_eq!(tables.stats().compactions, 2);
    let mut late = Batch::new();
    late.put(Table::Chunks, b"late".to_vec(), Bytes::from_static(b"x"));
    let refused = tables.commit(late).await.unwrap_err();
    assert!(refused.to_string().contains("closed"), "{refused}");
    let owned = owner.records.lock().unwrap().clone();
    drop(tables);
    volume.close().await.unwrap();

    let st = open_and_check(dir.path(), &owned, &model, "after the close").await;
    assert_eq!(st.pages_trimmed_at_open, 0, "nothing half-written: {st:?}");
    assert_ne!(
        st.snapshot_pages, first_snapshot_pages,
        "the second snapshot's root: {st:?}"
    );
}

/// Opens the tables in `dir`, checks that they hold `owned` in the owner's
/// table and `model` in the others, and closes them; their figures.
async fn open_and_check(
    dir: &std::path::Path,
    owned: &BTreeMap<Vec<u8>, Bytes>,
    model: &BTreeMap<(Table, Vec<u8>), Bytes>,
    when: &str,
) -> quarry_store::VolumeTableStats {
    let (volume, _) = open_volume(BackendKind::File, dir, quiet()).await;
    let tables = open_tables(&volume, 8).await;
    assert_eq!(
        &kv_items(&tables).await,
        owned,
        "the owner's records {when}"
    );
    assert_eq!(&dump(&tables).await, model, "the other records {when}");
    let st = tables.stats();
    drop(tables);
    volume.close().await.unwrap();
    st
}

/// A snapshot whose records end exactly at a page's end takes no page
/// beyond them, whether a piece of it ends there too or not, and reads back
/// whole. (The snapshot header is 40 bytes and a record of a 4-byte key and
/// an 11-byte value 24, of a 19-byte value 32: 41 of the first fill a
/// 1 KiB page, 32 of the second the next.)
#[tokio::test]
async fn a_snapshot_ending_at_a_page_boundary_takes_no_page_beyond() {
    for piece_bytes in [1024, 4096] {
        let dir = tempfile::tempdir().unwrap();
        let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
        assert_eq!(volume.page_size(), 1024);
        let config = VolumeTableConfig {
            compact_min_log_pages: 1000,
            snapshot_piece_bytes: piece_bytes,
            ..VolumeTableConfig::default()
        };
        let tables = VolumeTableStore::open(Arc::clone(&volume), config.clone())
            .await
            .unwrap();
        let mut model = BTreeMap::new();
        let mut batch = Batch::new();
        for (prefix, count, value_bytes) in [("a", 41, 11), ("b", 32, 19)] {
            for i in 0..count {
                let key = format!("{prefix}{i:03}").into_bytes();
                let value = Bytes::from(noise(i, value_bytes));
                batch.put(Table::Chunks, key.clone(), value.clone());
                model.insert((Table::Chunks, key), value);
            }
        }
        tables.commit(batch).await.unwrap();
        tables.compact().await.unwrap();
        let st = tables.stats();
        assert_eq!(st.snapshot_pages, 2, "pieces of {piece_bytes}: {st:?}");
        drop(tables);
        volume.close().await.unwrap();
        drop(volume);
        wait_released(device).await;
        let (volume, _) = open_volume(BackendKind::File, dir.path(), quiet()).await;
        let tables = VolumeTableStore::open(Arc::clone(&volume), config)
            .await
            .unwrap();
        assert_eq!(dump(&tables).await, model, "pieces of {piece_bytes}");
        assert_eq!(tables.stats().records_replayed_at_open, 0);
        drop(tables);
        volume.close().await.unwrap();
    }
}

/// A log record as `docs/store.md` describes it, cut into 1 KiB pages:
/// "QTLG", format 1, 3 zero bytes, sequence, payload length, pages, payload
/// CRC-32C, header CRC-32C, payload. `good_crc: false` spoils the payload's.
fn log_record(seq: u64, payload: &[u8], good_crc: bool) -> Vec<Bytes> {
    let pages = (32 + payload.len()).div_ceil(1024) as u32;
    let mut h = Vec::new();
    h.extend_from_slice(b"QTLG");
    h.extend_from_slice(&[1, 0, 0, 0]);
    h.extend_from_slice(&seq.to_le_bytes());
    h.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    h.extend_from_slice(&pages.to_le_bytes());
    let crc = crc32c::crc32c(payload) ^ u32::from(!good_crc);
    h.extend_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c::crc32c(&h);
    h.extend_from_slice(&hcrc.to_le_bytes());
    h.extend_from_slice(payload);
    h.resize(pages as usize * 1024, 0);
    h.chunks(1024).map(Bytes::copy_from_slice).collect()
}

/// The payload of one batch putting `key` = `value` in the chunk table.
fn one_put(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&1u32.to_le_bytes()); // batches
    p.extend_from_slice(&1u32.to_le_bytes()); // ops
    p.extend_from_slice(&[0, 2]); // put, chunks
    p.extend_from_slice(&(key.len() as u32).to_le_bytes());
    p.extend_from_slice(key);
    p.extend_from_slice(&(value.len() as u32).to_le_bytes());
    p.extend_from_slice(value);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_log_tail_is_ignored_and_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let log = |i: u64| LogicalPage::new(quarry_store::DEFAULT_LOG_SPACE, i);
    let mut model = BTreeMap::new();
    // (No compaction here: the log's end is its last mapped page.)
    // Three kinds of torn tail: a record missing a middle page, a record
    // whose payload does not check, a record whose first page is missing.
    for (round, case) in ["missing page", "bad checksum", "no first page"]
        .into_iter()
        .enumerate()
    {
        let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
        let tables = open_tables(&volume, 1000).await;
        assert_eq!(dump(&tables).await, model, "{case}: reopened");
        for i in 0..3 {
            let key = format!("{round}/{i}").into_bytes();
            let value = Bytes::from(vec![i as u8; 10]);
            let mut batch = Batch::new();
            batch.put(Table::Chunks, key.clone(), value.clone());
            tables.commit(batch).await.unwrap();
            model.insert((Table::Chunks, key), value);
        }
        let seq = tables.stats().last_seq + 1;
        let next = volume
            .pages_in(quarry_store::DEFAULT_LOG_SPACE)
            .last()
            .map_or(0, |p| p + 1);
        drop(tables);
        let pages = log_record(seq, &one_put(b"torn", &[7; 2500]), round != 1);
        assert_eq!(pages.len(), 3);
        for (i, page) in pages.into_iter().enumerate() {
            let skip = match round {
                0 => i == 1,
                1 => false,
                _ => i == 0,
            };
            if !skip {
                volume.write(log(next + i as u64), page).await.unwrap();
            }
        }
        // And a stray page further on.
        volume
            .write(log(next + 10), Bytes::from(vec![1; 1024]))
            .await
            .unwrap();
        drop(volume);
        wait_released(device).await;

        let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
        let tables = open_tables(&volume, 1000).await;
        assert_eq!(
            dump(&tables).await,
            model,
            "{case}: the torn record is not there"
        );
        let st = tables.stats();
        assert_eq!(st.last_seq, seq - 1, "{case}");
        // The record's pages that were written, and the stray one.
        let written = if round == 1 { 3 } else { 2 };
        assert_eq!(
            st.pages_trimmed_at_open,
            written + 1,
            "{case}: the tail is trimmed"
        );
        assert!(volume
            .pages_in(quarry_store::DEFAULT_LOG_SPACE)
            .iter()
            .all(|&p| p < next));
        // The next commit goes where the torn record was, and survives.
        let mut batch = Batch::new();
        let key = format!("{round}/after").into_bytes();
        batch.put(Table::Chunks, key.clone(), Bytes::from_static(b"ok"));
        tables.commit(batch).await.unwrap();
        model.insert((Table::Chunks, key), Bytes::from_static(b"ok"));
        drop(tables);
        drop(volume);
        wait_released(device).await;
    }
    let (volume, _) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let tables = open_tables(&volume, 1000).await;
    assert_eq!(dump(&tables).await, model);
    drop(tables);
    volume.close().await.unwrap();
}

/// Tables bounded to 1000 bytes of memory, where each record of
/// [`put_100`] counts 2 + 100 + 64 bytes: six fit, a seventh not.
async fn tables_of_1000_bytes(volume: &Arc<SpaceManager>) -> VolumeTableStore {
    VolumeTableStore::open(
        Arc::clone(volume),
        VolumeTableConfig {
            max_table_bytes: 1000,
            ..VolumeTableConfig::default()
        },
    )
    .await
    .unwrap()
}

/// A batch putting 100 bytes under a two-byte key.
fn put_100(i: u8) -> Batch {
    let mut batch = Batch::new();
    batch.put(Table::Chunks, vec![b'k', i], Bytes::from(vec![i; 100]));
    batch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tables_refuse_puts_beyond_their_memory_and_still_delete() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::Mem, dir.path(), quiet()).await;
    let tables = tables_of_1000_bytes(&volume).await;
    for i in 0..6 {
        tables.commit(put_100(i)).await.unwrap();
    }
    let err = tables.commit(put_100(6)).await.unwrap_err().to_string();
    assert!(err.contains("max_table_bytes"), "{err}");
    assert_eq!(tables.stats().records, 6);
    assert_eq!(tables.stats().bytes, 6 * 166);
    assert_eq!(tables.bytes(), 6 * 166);
    // Deletes always pass, and free room.
    let mut batch = Batch::new();
    batch.delete(Table::Chunks, vec![b'k', 0]);
    tables.commit(batch).await.unwrap();
    tables.commit(put_100(6)).await.unwrap();
    assert_eq!(tables.stats().records, 6);
    drop(tables);
    volume.close().await.unwrap();
}

async fn value(t: &VolumeTableStore) -> Option<String> {
    let got = t.get(Table::Manifests, b"k").await.unwrap();
    got.map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// Batches handed in with `submit` commit in the order they were handed
/// in, whatever order their futures are awaited in; one whose future is
/// dropped unawaited is committed all the same (by the next writer, or by
/// `settled`), and the order survives a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submitted_batches_commit_in_the_order_they_were_handed_in() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let tables = open_tables(&volume, 1000).await;
    let put = |v: &str| {
        let mut batch = Batch::new();
        batch.put(Table::Manifests, b"k".to_vec(), Bytes::from(v.to_string()));
        batch
    };
    let first = tables.submit(put("1"));
    let second = tables.submit(put("2"));
    let third = tables.submit(put("3"));
    drop(second);
    third.await.unwrap();
    first.await.unwrap();
    assert_eq!(value(&tables).await.as_deref(), Some("3"));
    drop(tables.submit(put("4")));
    assert_eq!(
        value(&tables).await.as_deref(),
        Some("3"),
        "not yet committed"
    );
    tables.settled().await.unwrap();
    assert_eq!(value(&tables).await.as_deref(), Some("4"));
    assert_eq!(tables.stats().batches_committed, 4);
    let (_volume, _, tables) = crash_and_reopen(dir.path(), tables, volume, device, 1000).await;
    assert_eq!(
        value(&tables).await.as_deref(),
        Some("4"),
        "after reopening"
    );
}

/// A writer whose caller goes away in the middle of its group (the
/// future dropped after its first poll, with the log write in flight)
/// finishes the group on a task of its own: the batch is committed and the
/// next commit goes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_dropped_mid_write_finishes_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let tables = open_tables(&volume, 1000).await;
    // A write sometimes completes within the first poll: try until one
    // is dropped with its write in flight (at most 100 tries).
    let mut submitted = 0;
    let mut dropped_in_flight = false;
    while !dropped_in_flight && submitted < 100 {
        submitted += 1;
        let mut batch = Batch::new();
        let v = format!("v{submitted}");
        batch.put(Table::Manifests, b"k".to_vec(), Bytes::from(v));
        let polled_once =
            tokio::time::timeout(std::time::Duration::ZERO, tables.submit(batch)).await;
        dropped_in_flight = polled_once.is_err();
    }
    assert!(
        dropped_in_flight,
        "no write was in flight at its first poll"
    );
    tables.settled().await.unwrap();
    let last = format!("v{submitted}");
    assert_eq!(value(&tables).await.as_deref(), Some(last.as_str()));
    let mut next = Batch::new();
    next.put(
        Table::Manifests,
        b"k".to_vec(),
        Bytes::from_static(b"after"),
    );
    tables.commit(next).await.unwrap();
    assert_eq!(value(&tables).await.as_deref(), Some("after"));
    assert_eq!(tables.stats().batches_committed, submitted + 1);
}

/// Once a submitted batch fails, every batch submitted after it fails too
/// (its submitter's memory may build on the failed one), while plain
/// commits go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_submitted_batch_fails_later_submitted_ones_fail_too() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::Mem, dir.path(), quiet()).await;
    let tables = tables_of_1000_bytes(&volume).await;
    for i in 0..6 {
        tables.submit(put_100(i)).await.unwrap();
    }
    let err = tables.submit(put_100(6)).await.unwrap_err().to_string();
    assert!(err.contains("max_table_bytes"), "{err}");
    let mut delete = Batch::new();
    delete.delete(Table::Chunks, vec![b'k', 0]);
    let err = tables.submit(delete.clone()).await.unwrap_err().to_string();
    assert!(err.contains("an earlier submitted batch failed"), "{err}");
    assert_eq!(
        tables.stats().records,
        6,
        "the refused delete changed nothing"
    );
    tables.commit(delete).await.unwrap();
    tables.commit(put_100(6)).await.unwrap();
    assert_eq!(tables.stats().records, 6);
    drop(tables);
    volume.close().await.unwrap();
}

/// A table root as `docs/store.md` describes it, padded to a 1 KiB page.
fn root_page(seq: u64, first: u64, pages: u64, log_start: u64) -> Bytes {
    let mut r = Vec::new();
    r.extend_from_slice(b"QTRT");
    r.extend_from_slice(&[1, 0, 0, 0]);
    for v in [seq, first, pages, log_start] {
        r.extend_from_slice(&v.to_le_bytes());
    }
    let crc = crc32c::crc32c(&r);
    r.extend_from_slice(&crc.to_le_bytes());
    r.resize(1024, 0);
    Bytes::from(r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_refuses_a_log_out_of_sequence_and_a_bad_root() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::Mem, dir.path(), quiet()).await;
    let open = || {
        VolumeTableStore::open(
            Arc::clone(&volume),
            VolumeTableConfig {
                compact_min_log_pages: 1000,
                ..VolumeTableConfig::default()
            },
        )
    };
    let tables = open().await.unwrap();
    let mut batch = Batch::new();
    batch.put(Table::Chunks, b"k".to_vec(), Bytes::from_static(b"v"));
    tables.commit(batch).await.unwrap();
    // Empty batches write nothing.
    tables.commit(Batch::new()).await.unwrap();
    assert_eq!(tables.stats().log_records_written, 1);
    drop(tables);

    // Record 5 right after record 1: corruption, not a torn tail.
    let log = |i| LogicalPage::new(quarry_store::DEFAULT_LOG_SPACE, i);
    let page = log_record(5, &one_put(b"x", b"y"), true).remove(0);
    volume.write(log(1), page).await.unwrap();
    let err = open().await.unwrap_err().to_string();
    assert!(
        err.contains("holds record 5 where record 2 was due"),
        "{err}"
    );
    volume.trim(log(1)).await.unwrap();
    assert_eq!(open().await.unwrap().stats().last_seq, 1);

    // A root that does not check, and one naming more pages than the volume
    // has: errors, before anything is read or allocated for the snapshot.
    let root = LogicalPage::new(quarry_store::DEFAULT_SNAPSHOT_SPACE, 0);
    volume
        .write(root, Bytes::from(vec![7; 1024]))
        .await
        .unwrap();
    let err = open().await.unwrap_err().to_string();
    assert!(err.contains("malformed table root"), "{err}");
    volume
        .write(root, root_page(1, 1, 1 << 50, 1))
        .await
        .unwrap();
    let err = open().await.unwrap_err().to_string();
    assert!(err.contains("names a snapshot of"), "{err}");
    volume.close().await.unwrap();
}

/// A chunk header as `docs/store.md` describes it.
fn chunk_header(space: u32, first: u64, pages: u32, len: u32, fp: &Fingerprint) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(b"QCHK");
    h.extend_from_slice(&[1, 0, 0, 0]);
    h.extend_from_slice(&space.to_le_bytes());
    h.extend_from_slice(&pages.to_le_bytes());
    h.extend_from_slice(&first.to_le_bytes());
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(&fp.0);
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_trims_chunk_pages_no_record_names() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let (s, _) = objects(std::slice::from_ref(&volume)).await;
    s.create_bucket(&b("data"), Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    let data = noise(9, 10_000);
    s.put_bytes(&b("data"), &k("kept"), &data, Condition::Always)
        .await
        .unwrap();
    let node = s.node(1).unwrap();
    let space = node.data().space();
    let named = volume.pages_in(space);
    // 1. bytes written, record never committed;
    let orphan = Bytes::from(noise(10, 3000));
    let fp = Fingerprint::of(&orphan);
    node.data().write(&fp, orphan).await.unwrap();
    // 2. an extent whose write stopped after its header page;
    let header = chunk_header(space, 1000, 4, 3500, &Fingerprint([3; 32]));
    let mut page = header.clone();
    page.resize(1024, 0);
    volume
        .write(LogicalPage::new(space, 1000), Bytes::from(page))
        .await
        .unwrap();
    // 3. pages no header covers (a torn trim, say).
    for i in 2000..2003 {
        volume
            .write(LogicalPage::new(space, i), Bytes::from(vec![5; 1024]))
            .await
            .unwrap();
    }
    drop(s);
    drop(volume);
    wait_released(device).await;

    let (volume, _) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let (s, rec) = objects(std::slice::from_ref(&volume)).await;
    assert_eq!(rec[0].orphan_extents_trimmed, 3, "{rec:?}");
    let st = s.node(1).unwrap().data().stats();
    assert_eq!(st.headerless_runs_at_open, 1, "{st:?}");
    assert_eq!(
        volume.pages_in(space),
        named,
        "only the named extents remain"
    );
    let (_, got) = s.get(&b("data"), &k("kept")).await.unwrap();
    assert_eq!(&got[..], &data[..]);
    assert_exact(&s, "").await;
    close(s, vec![volume]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_reads_check_the_length_and_the_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::Mem, dir.path(), quiet()).await;
    let chunks = VolumeChunkStore::open(Arc::clone(&volume), VolumeChunkConfig::default())
        .await
        .unwrap();
    let data = Bytes::from(noise(1, 5000));
    let fp = Fingerprint::of(&data);
    let loc = chunks.write(&fp, data.clone()).await.unwrap();
    assert_eq!(loc.pages, 5, "5000 bytes on 1 KiB pages");
    assert_eq!(
        chunks
            .read(&fp, loc, 5000, ChunkCheck::Sha256)
            .await
            .unwrap(),
        data
    );
    let crc = quarry_store::chunk_crc32c(&data);
    let read = chunks.read(&fp, loc, 5000, ChunkCheck::Crc32c(crc)).await;
    assert_eq!(read.unwrap(), data);
    let err = chunks.read(&fp, loc, 5000, ChunkCheck::Crc32c(!crc)).await;
    assert!(err.unwrap_err().to_string().contains("CRC-32C"));
    // As the pages' bytes, not joined: one piece a page, the first after
    // the chunk's header, cut at the length asked for.
    let pieces = chunks
        .read_pieces(&fp, loc, 4000, ChunkCheck::Crc32c(crc))
        .await
        .unwrap();
    assert!(pieces.len() >= 4, "{} pieces for 4000 bytes", pieces.len());
    assert!(pieces.iter().all(|p| !p.is_empty() && p.len() <= 1024));
    assert_eq!(pieces.concat(), &data[..4000]);
    assert_eq!(
        chunks
            .read(&fp, loc, 100, ChunkCheck::Sha256)
            .await
            .unwrap(),
        data.slice(..100)
    );
    let err = chunks
        .read(&fp, loc, 5001, ChunkCheck::Sha256)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("header says 5000 bytes"), "{err}");
    let wrong = ChunkLocation { pages: 4, ..loc };
    assert!(chunks
        .read(&fp, wrong, 5000, ChunkCheck::Sha256)
        .await
        .is_err());
    let shifted = ChunkLocation {
        first_page: loc.first_page + 1,
        ..loc
    };
    assert!(chunks
        .read(&fp, shifted, 10, ChunkCheck::Sha256)
        .await
        .is_err());
    assert_eq!(chunks.extents().await.unwrap(), vec![(loc, fp)]);

    // Other bytes under the extent: an error, never those bytes.
    let page = LogicalPage::new(chunks.space(), loc.first_page + 2);
    volume
        .write(page, Bytes::from(vec![0; 1024]))
        .await
        .unwrap();
    let err = chunks
        .read(&fp, loc, 5000, ChunkCheck::Sha256)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("hash to"), "{err}");
    // The record's CRC finds the same damage (a tenth of the cost of hashing).
    let crc = ChunkCheck::Crc32c(quarry_store::chunk_crc32c(&data));
    let err = chunks
        .read(&fp, loc, 5000, crc)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("CRC-32C"), "{err}");
    // Reading as pieces finds it too: no damaged byte is ever handed on.
    let err = chunks
        .read_pieces(&fp, loc, 5000, crc)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("CRC-32C"), "{err}");

    chunks.trim(loc).await.unwrap();
    assert!(volume.pages_in(chunks.space()).is_empty());
    assert!(chunks
        .read(&fp, loc, 5000, ChunkCheck::Sha256)
        .await
        .is_err());
    chunks.trim(loc).await.unwrap(); // idempotent
    assert!(chunks.extents().await.unwrap().is_empty());
    assert_eq!(chunks.stats().pages, 0);
    // A new chunk goes to fresh pages: no location is handed out twice
    // within the store's life.
    let loc2 = chunks.write(&fp, data.clone()).await.unwrap();
    assert!(loc2.first_page >= loc.first_page + u64::from(loc.pages));
    volume.close().await.unwrap();
}

/// A location trimmed and handed to another chunk (here: after a reopen,
/// whose cursor starts after the highest extent left) is never read as the
/// chunk it held before: reads name the chunk they expect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_location_is_never_read_as_its_old_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::Mem, dir.path(), quiet()).await;
    let open = || VolumeChunkStore::open(Arc::clone(&volume), VolumeChunkConfig::default());
    let chunk = |seed| {
        let data = Bytes::from(noise(seed, 3000));
        (Fingerprint::of(&data), data)
    };
    let ((fa, a), (fb, b), (fc, c)) = (chunk(1), chunk(2), chunk(3));
    let chunks = open().await.unwrap();
    chunks.write(&fa, a.clone()).await.unwrap();
    let loc_b = chunks.write(&fb, b.clone()).await.unwrap();
    assert_eq!(
        chunks
            .read(&fb, loc_b, 3000, ChunkCheck::Sha256)
            .await
            .unwrap(),
        b
    );
    chunks.trim(loc_b).await.unwrap();
    drop(chunks);

    let chunks = open().await.unwrap();
    let loc_c = chunks.write(&fc, c.clone()).await.unwrap();
    assert_eq!(loc_c, loc_b, "the cursor restarts after the highest extent");
    let err = chunks
        .read(&fb, loc_b, 3000, ChunkCheck::Sha256)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("holds chunk"), "{err}");
    assert_eq!(
        chunks
            .read(&fc, loc_c, 3000, ChunkCheck::Sha256)
            .await
            .unwrap(),
        c
    );
    volume.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_volume_refuses_chunks_and_still_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::Mem, dir.path(), quiet()).await;
    let (s, _) = objects(std::slice::from_ref(&volume)).await;
    s.create_bucket(&b("data"), Chunking::fixed(65536).unwrap())
        .await
        .unwrap();
    let mut stored = Vec::new();
    let err = loop {
        let key = format!("o{}", stored.len());
        let data = noise(stored.len() as u64, 200_000);
        match s
            .put_bytes(&b("data"), &k(&key), &data, Condition::Always)
            .await
        {
            Ok(_) => stored.push(key),
            Err(e) => break e,
        }
        assert!(stored.len() < 100, "the volume never filled");
    };
    assert!(err.to_string().contains("no space for a chunk"), "{err}");
    let cap = volume.capacity_pages();
    assert!(volume.stats().live_pages <= cap);
    // The failed put took nothing: every object reads back, counts exact.
    assert_exact(&s, "").await;
    for key in &stored {
        s.delete(&b("data"), &k(key), Condition::Always)
            .await
            .unwrap();
    }
    assert_eq!(volume.pages_in(s.node(1).unwrap().data().space()).len(), 0);
    s.put_bytes(
        &b("data"),
        &k("again"),
        &noise(1, 200_000),
        Condition::Always,
    )
    .await
    .unwrap();
    assert_exact(&s, "").await;
    close(s, vec![volume]).await;
}

/// A chunk's header is in its first page's tag: a chunk of whole pages
/// takes exactly its pages, and a reader streaming them finds the bytes from
/// the first byte of the first page on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_name_themselves_in_their_first_pages_tag() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let open = |volume: &Arc<SpaceManager>| {
        VolumeChunkStore::open(Arc::clone(volume), VolumeChunkConfig::default())
    };
    let chunks = open(&volume).await.unwrap();
    let data = Bytes::from(noise(5, 4096));
    let fp = Fingerprint::of(&data);
    let loc = chunks.write(&fp, data.clone()).await.unwrap();
    assert_eq!(loc.pages, 4, "4096 bytes on 1 KiB pages, no header page");
    let first = LogicalPage::new(chunks.space(), loc.first_page);
    let page = volume.read_tagged(first).await.unwrap().unwrap();
    assert_eq!(&page.data[..], &data[..1024], "the bytes start the page");
    assert_eq!(page.tag[0], 2, "tag format");
    assert_eq!(&page.tag[1..4], &4096u32.to_le_bytes()[..3]);
    assert_eq!(&page.tag[4..36], &fp.0[..]);
    chunks.check_first_page(&fp, loc, 4096, &page).unwrap();
    let other = Fingerprint([7; 32]);
    let err = chunks
        .check_first_page(&other, loc, 4096, &page)
        .unwrap_err()
        .to_string();
    assert!(err.contains("holds chunk"), "{err}");
    let spans = chunks.page_spans(loc, 4096, 1000..3000).unwrap();
    let got: Vec<_> = spans
        .iter()
        .map(|s| (s.page.index - loc.first_page, s.bytes.clone()))
        .collect();
    assert_eq!(got, vec![(0, 1000..1024), (1, 0..1024), (2, 0..952)]);
    // A chunk of a byte past whole pages takes one page more, padded.
    let odd = Bytes::from(noise(6, 2049));
    let odd_fp = Fingerprint::of(&odd);
    let odd_loc = chunks.write(&odd_fp, odd.clone()).await.unwrap();
    assert_eq!(odd_loc.pages, 3);
    drop(chunks);
    drop(volume);
    wait_released(device).await;

    // After a crash the extents come back from the tags alone.
    let (volume, _) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let chunks = open(&volume).await.unwrap();
    let mut extents = chunks.extents().await.unwrap();
    extents.sort_by_key(|(l, _)| l.first_page);
    assert_eq!(extents, vec![(loc, fp), (odd_loc, odd_fp)]);
    assert_eq!(chunks.stats().headerless_runs_at_open, 0);
    assert_eq!(
        chunks
            .read(&fp, loc, 4096, ChunkCheck::Sha256)
            .await
            .unwrap(),
        data
    );
    assert_eq!(
        chunks
            .read(&odd_fp, odd_loc, 2049, ChunkCheck::Sha256)
            .await
            .unwrap(),
        odd
    );
    let err = chunks
        .read(&odd_fp, loc, 2049, ChunkCheck::Sha256)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("holds chunk"), "{err}");
    volume.close().await.unwrap();
}

/// Chunks written with their header before the bytes (stores written before
/// tags, and volumes whose spare area has no room for one) read as before,
/// next to chunks written with tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_with_in_page_headers_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = open_volume(BackendKind::File, dir.path(), quiet()).await;
    let space = quarry_store::DEFAULT_CHUNK_SPACE;
    // A chunk as a build before tags wrote it: header, bytes, zeros.
    let old = noise(8, 3000);
    let old_fp = Fingerprint::of(&old);
    let mut bytes = chunk_header(space, 10, 3, 3000, &old_fp);
    bytes.extend_from_slice(&old);
    bytes.resize(3 * 1024, 0);
    let pages = bytes.chunks(1024).map(Bytes::copy_from_slice).collect();
    volume
        .write_run(LogicalPage::new(space, 10), pages)
        .await
        .unwrap();
    let old_loc = ChunkLocation {
        space,
        first_page: 10,
        pages: 3,
    };
    let chunks = VolumeChunkStore::open(Arc::clone(&volume), VolumeChunkConfig::default())
        .await
        .unwrap();
    assert_eq!(chunks.extents().await.unwrap(), vec![(old_loc, old_fp)]);
    assert_eq!(
        chunks
            .read(&old_fp, old_loc, 3000, ChunkCheck::Sha256)
            .await
            .unwrap(),
        Bytes::from(old.clone())
    );
    let spans = chunks.page_spans(old_loc, 3000, 0..3000).unwrap();
    assert_eq!(spans[0].bytes, 64..1024, "the bytes follow the header");
    let first = LogicalPage::new(space, 10);
    let page = volume.read_tagged(first).await.unwrap().unwrap();
    chunks
        .check_first_page(&old_fp, old_loc, 3000, &page)
        .unwrap();
    // New chunks beside it use tags.
    let new = Bytes::from(noise(9, 3000));
    let new_fp = Fingerprint::of(&new);
    let new_loc = chunks.write(&new_fp, new.clone()).await.unwrap();
    assert_eq!(new_loc.pages, 3);
    assert_eq!(
        chunks.page_spans(new_loc, 3000, 0..10).unwrap()[0].bytes,
        0..10
    );
    assert_eq!(
        chunks
            .read(&new_fp, new_loc, 3000, ChunkCheck::Sha256)
            .await
            .unwrap(),
        new
    );
    volume.close().await.unwrap();

    // A spare area with no room for a tag: headers go before the bytes.
    let dir = tempfile::tempdir().unwrap();
    let narrow = quarry_device::Geometry {
        oob_size_bytes: 32,
        ..geometry()
    };
    let (volume, device) = open_volume_with(BackendKind::File, dir.path(), quiet(), narrow).await;
    assert!(volume.tag_capacity_bytes() < quarry_store::CHUNK_TAG_BYTES);
    let chunks = VolumeChunkStore::open(Arc::clone(&volume), VolumeChunkConfig::default())
        .await
        .unwrap();
    let data = Bytes::from(noise(10, 4096));
    let fp = Fingerprint::of(&data);
    let loc = chunks.write(&fp, data.clone()).await.unwrap();
    assert_eq!(loc.pages, 5, "64 + 4096 bytes on 1 KiB pages");
    let first = LogicalPage::new(space, loc.first_page);
    let page = volume.read(first).await.unwrap().unwrap();
    assert_eq!(&page[..4], b"QCHK");
    drop(chunks);
    drop(volume);
    wait_released(device).await;
    let (volume, _) = open_volume_with(BackendKind::File, dir.path(), quiet(), narrow).await;
    let chunks = VolumeChunkStore::open(Arc::clone(&volume), VolumeChunkConfig::default())
        .await
        .unwrap();
    assert_eq!(chunks.extents().await.unwrap(), vec![(loc, fp)]);
    assert_eq!(
        chunks
            .read(&fp, loc, 4096, ChunkCheck::Sha256)
            .await
            .unwrap(),
        data
    );
    volume.close().await.unwrap();
}
