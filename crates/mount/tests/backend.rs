//! The mount over a backend of the test's own (the store behind a counter
//! of calls and bytes): read-ahead fetches a few large windows for a
//! sequential reader and small ones for a random one, and fsync uploads
//! the spool without reading the object back.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use quarry_mount::{MountOptions, ObjectBackend, ObjectMeta};
use quarry_store::{BucketName, Condition, MemObjectStore, ObjectKey, Result};
use tokio::io::AsyncRead;

#[derive(Default)]
struct Counts {
    get_ranges: AtomicU64,
    bytes_fetched: AtomicU64,
    puts: AtomicU64,
    heads: AtomicU64,
}

struct Counting {
    inner: Arc<MemObjectStore>,
    counts: Counts,
}

impl ObjectBackend for Counting {
    async fn buckets(&self) -> Result<Vec<BucketName>> {
        ObjectBackend::buckets(&*self.inner).await
    }
    async fn create_bucket(&self, bucket: &BucketName) -> Result<()> {
        ObjectBackend::create_bucket(&*self.inner, bucket).await
    }
    async fn delete_bucket(&self, bucket: &BucketName) -> Result<()> {
        ObjectBackend::delete_bucket(&*self.inner, bucket).await
    }
    async fn head(&self, bucket: &BucketName, key: &ObjectKey) -> Result<ObjectMeta> {
        self.counts.heads.fetch_add(1, Relaxed);
        ObjectBackend::head(&*self.inner, bucket, key).await
    }
    async fn get_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(ObjectMeta, Bytes)> {
        let got = ObjectBackend::get_range(&*self.inner, bucket, key, offset, len).await?;
        self.counts.get_ranges.fetch_add(1, Relaxed);
        self.counts
            .bytes_fetched
            .fetch_add(got.1.len() as u64, Relaxed);
        Ok(got)
    }
    async fn put_bytes(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        data: Bytes,
        condition: Condition,
    ) -> Result<ObjectMeta> {
        self.counts.puts.fetch_add(1, Relaxed);
        ObjectBackend::put_bytes(&*self.inner, bucket, key, data, condition).await
    }
    async fn put_reader<R: AsyncRead + Send + Unpin>(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        source: R,
        condition: Condition,
    ) -> Result<ObjectMeta> {
        self.counts.puts.fetch_add(1, Relaxed);
        ObjectBackend::put_reader(&*self.inner, bucket, key, source, condition).await
    }
    async fn delete(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> Result<ObjectMeta> {
        ObjectBackend::delete(&*self.inner, bucket, key, condition).await
    }
    async fn list(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<Vec<ObjectMeta>> {
        ObjectBackend::list(&*self.inner, bucket, prefix, after, limit).await
    }
}

fn counting() -> (tokio::runtime::Runtime, Arc<Counting>) {
    let (rt, store) = mem_store();
    (
        rt,
        Arc::new(Counting {
            inner: store,
            counts: Counts::default(),
        }),
    )
}

#[test]
fn read_ahead_fetches_large_windows_for_sequential_reads_and_small_ones_for_random() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, backend) = counting();
    let d = dirs(&["mnt"]);
    let opts = MountOptions {
        read_ahead_bytes: 1 << 20,
        ..options(&d.spool)
    };
    let _m = quarry_mount::mount(Arc::clone(&backend), None, &d.mnt, opts).unwrap();
    fs::create_dir(d.mnt.join("r")).unwrap();
    let size = 8 << 20;
    let data = noise(40, size);
    // Stored through the store, not the mount: a file just written through
    // the mount may still be read from its spool while its upload ends,
    // and this test counts what read-ahead fetches from the store.
    rt.block_on(backend.put_bytes(
        &BucketName::new("r").unwrap(),
        &ObjectKey::new("big").unwrap(),
        Bytes::from(data.clone()),
        Condition::Always,
    ))
    .unwrap();
    let c = &backend.counts;
    let (calls0, bytes0) = (c.get_ranges.load(Relaxed), c.bytes_fetched.load(Relaxed));

    // Sequential, 64 KiB at a time: 1 MiB windows, each fetched once.
    let mut f = File::open(d.mnt.join("r/big")).unwrap();
    let mut got = Vec::with_capacity(size);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == data);
    let calls = c.get_ranges.load(Relaxed) - calls0;
    let bytes = c.bytes_fetched.load(Relaxed) - bytes0;
    eprintln!("sequential 8 MiB: {calls} fetches, {bytes} bytes");
    assert!((8..=12).contains(&calls), "{calls} fetches");
    assert!(bytes <= size as u64 + (2 << 20), "{bytes} bytes fetched");

    // Random 4 KiB reads: a 256 KiB window each, not the 1 MiB one.
    let f = File::open(d.mnt.join("r/big")).unwrap();
    let (calls0, bytes0) = (c.get_ranges.load(Relaxed), c.bytes_fetched.load(Relaxed));
    let mut small = vec![0u8; 4096];
    // (None at offset 0: a first read there counts as sequential.)
    for i in 1..=20u64 {
        let offset = (i * 2_654_435_761) % (size as u64 - 4096);
        f.read_exact_at(&mut small, offset).unwrap();
        assert_eq!(small, &data[offset as usize..offset as usize + 4096]);
    }
    let calls = c.get_ranges.load(Relaxed) - calls0;
    let bytes = c.bytes_fetched.load(Relaxed) - bytes0;
    eprintln!("20 random 4 KiB reads: {calls} fetches, {bytes} bytes");
    assert!(calls <= 20, "{calls} fetches");
    assert!(bytes <= 20 * (256 << 10), "{bytes} bytes fetched");
}

#[test]
fn fsync_uploads_the_spool_without_reading_the_object_back() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (_rt, backend) = counting();
    let d = dirs(&["mnt"]);
    let _m = quarry_mount::mount(Arc::clone(&backend), None, &d.mnt, options(&d.spool)).unwrap();
    fs::create_dir(d.mnt.join("s")).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(d.mnt.join("s/db"))
        .unwrap();
    f.write_all_at(&noise(41, 2 << 20), 0).unwrap();
    // The file was written front to back, so its first version streams up
    // on a task of its own, which counts its put when it starts: settle it
    // with an fsync before counting, or a slow start is counted below.
    f.sync_all().unwrap();
    let c = &backend.counts;
    let (gets0, puts0) = (c.get_ranges.load(Relaxed), c.puts.load(Relaxed));
    for i in 0..50u64 {
        f.write_all_at(&noise(100 + i, 4096), (i * 40_503) % (2 << 20))
            .unwrap();
        f.sync_all().unwrap();
    }
    // Nothing changed since the last fsync: nothing to upload.
    f.sync_all().unwrap();
    assert_eq!(
        c.get_ranges.load(Relaxed) - gets0,
        0,
        "the spool is the truth"
    );
    assert_eq!(
        c.puts.load(Relaxed) - puts0,
        50,
        "one upload per fsync with changes"
    );
    drop(f);
    assert_eq!(
        c.puts.load(Relaxed) - puts0,
        50,
        "close after fsync uploads nothing"
    );
}

/// The store's current bytes of `bucket/key`, read past the mount.
fn stored(rt: &tokio::runtime::Runtime, backend: &Counting, bucket: &str, key: &str) -> Vec<u8> {
    let (b, k) = (
        BucketName::new(bucket).unwrap(),
        ObjectKey::new(key).unwrap(),
    );
    rt.block_on(backend.inner.get(&b, &k)).unwrap().1.to_vec()
}

fn mount_counting(d: &Dirs, backend: &Arc<Counting>) -> quarry_mount::MountHandle {
    assert!(fuse_available(), "this test needs /dev/fuse (fuse3)");
    init_logs();
    quarry_mount::mount(Arc::clone(backend), None, &d.mnt, options(&d.spool)).unwrap()
}

#[test]
fn a_file_written_front_to_back_is_uploaded_while_it_is_written() {
    let (rt, backend) = counting();
    let d = dirs(&["mnt"]);
    let _m = mount_counting(&d, &backend);
    fs::create_dir(d.mnt.join("w")).unwrap();
    let data = noise(60, (6 << 20) + 12_345);
    let c = &backend.counts;
    let puts0 = c.puts.load(Relaxed);
    let mut f = File::create(d.mnt.join("w/seq")).unwrap();
    for piece in data.chunks(256 << 10) {
        f.write_all(piece).unwrap();
    }
    assert_eq!(
        c.puts.load(Relaxed) - puts0,
        1,
        "the upload is under way before close"
    );
    // Reads of the open file come from the spool, and leave the stream be.
    assert_eq!(fs::read(d.mnt.join("w/seq")).unwrap(), data);
    drop(f);
    assert_eq!(
        c.puts.load(Relaxed) - puts0,
        1,
        "close finished the streamed upload instead of uploading again"
    );
    assert!(stored(&rt, &backend, "w", "seq") == data);
    assert_eq!(fs::read(d.mnt.join("w/seq")).unwrap(), data);
}

#[test]
fn a_write_that_is_not_an_append_leaves_the_upload_to_the_spool() {
    let (rt, backend) = counting();
    let d = dirs(&["mnt"]);
    let _m = mount_counting(&d, &backend);
    fs::create_dir(d.mnt.join("w")).unwrap();
    let mut want = noise(61, 3 << 20);
    let patch = noise(62, 5000);
    let tail = noise(63, 1 << 20);
    let c = &backend.counts;
    let puts0 = c.puts.load(Relaxed);
    let mut f = File::create(d.mnt.join("w/patched")).unwrap();
    // More pieces than the stream holds in flight: its put has surely
    // started before the patch stops it.
    for piece in want.chunks(256 << 10) {
        f.write_all(piece).unwrap();
    }
    f.write_all_at(&patch, 1000).unwrap();
    f.write_all(&tail).unwrap();
    drop(f);
    want[1000..6000].copy_from_slice(&patch);
    want.extend_from_slice(&tail);
    assert!(stored(&rt, &backend, "w", "patched") == want);
    assert_eq!(
        c.puts.load(Relaxed) - puts0,
        2,
        "the abandoned stream, then the spool"
    );
    // The abandoned upload stored no version of its own.
    let meta = rt
        .block_on(ObjectBackend::head(
            &*backend.inner,
            &BucketName::new("w").unwrap(),
            &ObjectKey::new("patched").unwrap(),
        ))
        .unwrap();
    assert_eq!(meta.size_bytes, want.len() as u64);
    let listed = rt
        .block_on(ObjectBackend::list(
            &*backend.inner,
            &BucketName::new("w").unwrap(),
            "",
            None,
            10,
        ))
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
}

#[test]
fn fsync_commits_the_stream_and_later_appends_go_up_at_close() {
    let (rt, backend) = counting();
    let d = dirs(&["mnt"]);
    let _m = mount_counting(&d, &backend);
    fs::create_dir(d.mnt.join("w")).unwrap();
    let first = noise(64, 2 << 20);
    let second = noise(65, 777_777);
    let mut f = File::create(d.mnt.join("w/log")).unwrap();
    f.write_all(&first).unwrap();
    f.sync_all().unwrap();
    // Stored at fsync, before close.
    assert!(stored(&rt, &backend, "w", "log") == first);
    f.write_all(&second).unwrap();
    drop(f);
    let mut want = first;
    want.extend_from_slice(&second);
    assert!(stored(&rt, &backend, "w", "log") == want);
}

#[test]
fn a_file_unlinked_while_it_streams_is_not_stored() {
    let (rt, backend) = counting();
    let d = dirs(&["mnt"]);
    let _m = mount_counting(&d, &backend);
    fs::create_dir(d.mnt.join("w")).unwrap();
    fs::write(d.mnt.join("w/keep"), b"kept").unwrap();
    let mut f = File::create(d.mnt.join("w/gone")).unwrap();
    f.write_all(&noise(66, 1 << 20)).unwrap();
    fs::remove_file(d.mnt.join("w/gone")).unwrap();
    f.write_all(&noise(67, 1 << 20)).unwrap();
    drop(f);
    let (b, k) = (
        BucketName::new("w").unwrap(),
        ObjectKey::new("gone").unwrap(),
    );
    let gone = rt.block_on(ObjectBackend::head(&*backend.inner, &b, &k));
    assert!(gone.is_err(), "{gone:?}");
    assert_eq!(stored(&rt, &backend, "w", "keep"), b"kept");
}

#[test]
fn files_copied_into_a_directory_just_made_ask_the_store_nothing_before_their_upload() {
    let (rt, backend) = counting();
    let d = dirs(&["mnt"]);
    let _m = mount_counting(&d, &backend);
    fs::create_dir(d.mnt.join("c")).unwrap();
    fs::create_dir(d.mnt.join("c/new")).unwrap();
    let c = &backend.counts;
    let (heads0, puts0) = (c.heads.load(Relaxed), c.puts.load(Relaxed));
    let files = 20u64;
    for i in 0..files {
        fs::write(d.mnt.join(format!("c/new/f{i}")), noise(300 + i, 3000)).unwrap();
    }
    // Every name in the new directory was made here: neither the
    // kernel's lookup nor create asks whether it exists.
    assert_eq!(c.heads.load(Relaxed) - heads0, 0, "no head per new file");
    assert_eq!(c.puts.load(Relaxed) - puts0, files, "one upload per file");
    for i in 0..files {
        assert!(stored(&rt, &backend, "c", &format!("new/f{i}")) == noise(300 + i, 3000));
        assert_eq!(
            fs::read(d.mnt.join(format!("c/new/f{i}"))).unwrap(),
            noise(300 + i, 3000)
        );
    }
}

#[test]
fn creating_a_file_asks_the_store_once_whether_it_exists() {
    let (rt, backend) = counting();
    let d = dirs(&["mnt"]);
    let _m = mount_counting(&d, &backend);
    fs::create_dir(d.mnt.join("c")).unwrap();
    let c = &backend.counts;
    let (heads0, puts0) = (c.heads.load(Relaxed), c.puts.load(Relaxed));
    let files = 20u64;
    for i in 0..files {
        fs::write(d.mnt.join(format!("c/f{i}")), noise(200 + i, 3000)).unwrap();
    }
    // The kernel's lookup found each name absent; create trusts it.
    assert_eq!(
        c.heads.load(Relaxed) - heads0,
        files,
        "one head per new file"
    );
    assert_eq!(c.puts.load(Relaxed) - puts0, files, "one upload per file");
    for i in 0..files {
        assert!(stored(&rt, &backend, "c", &format!("f{i}")) == noise(200 + i, 3000));
    }
}
