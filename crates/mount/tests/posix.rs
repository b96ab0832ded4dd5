//! File-system calls through a real FUSE mount over an in-memory store:
//! what each call does to the files seen and to the objects stored.

mod common;

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt};
use std::path::Path;

use common::*;
use quarry_mount::MountOptions;
use quarry_store::{BucketName, Condition, MemObjectStore, ObjectKey};

fn b(name: &str) -> BucketName {
    BucketName::new(name).unwrap()
}

fn k(key: &str) -> ObjectKey {
    ObjectKey::new(key).unwrap()
}

/// The stored bytes of `bucket/key`, or `None` if there is no such object.
fn stored(
    rt: &tokio::runtime::Runtime,
    s: &MemObjectStore,
    bucket: &str,
    key: &str,
) -> Option<Vec<u8>> {
    rt.block_on(s.get(&b(bucket), &k(key)))
        .ok()
        .map(|(_, data)| data.to_vec())
}

fn keys(rt: &tokio::runtime::Runtime, s: &MemObjectStore, bucket: &str) -> Vec<String> {
    rt.block_on(s.list(&b(bucket), "", None, 100_000))
        .unwrap()
        .iter()
        .map(|m| m.key().to_string())
        .collect()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

#[test]
fn files_write_read_back_and_stat_their_sizes() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let _m = mount_with(&store, &d.mnt, options(&d.spool));
    let bucket = d.mnt.join("photos");
    fs::create_dir(&bucket).unwrap();
    fs::create_dir_all(bucket.join("2024/summer")).unwrap();

    // 1.5 MiB: past the kernel's own read-ahead, inside the mount's.
    let big = noise(1, 1_500_000);
    let path = bucket.join("2024/summer/beach.raw");
    fs::write(&path, &big).unwrap();
    assert_eq!(fs::read(&path).unwrap(), big);
    assert_eq!(
        stored(&rt, &store, "photos", "2024/summer/beach.raw").unwrap(),
        big
    );
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 1_500_000);
    assert!(meta.is_file());
    assert_eq!(meta.mode() & 0o777, 0o644);
    assert_eq!(meta.nlink(), 1);
    let age = std::time::SystemTime::now()
        .duration_since(meta.modified().unwrap())
        .unwrap_or_default();
    assert!(age.as_secs() < 60, "mtime is the version's creation time");
    let dir_meta = fs::metadata(bucket.join("2024")).unwrap();
    assert!(dir_meta.is_dir());
    assert_eq!(dir_meta.mode() & 0o777, 0o755);
    // Inode numbers are stable for a path.
    assert_eq!(meta.ino(), fs::metadata(&path).unwrap().ino());
    assert_ne!(meta.ino(), dir_meta.ino());

    // A small file, an empty one, and one rewritten shorter.
    fs::write(bucket.join("note.txt"), b"hello").unwrap();
    File::create(bucket.join("empty")).unwrap();
    assert_eq!(fs::metadata(bucket.join("empty")).unwrap().len(), 0);
    assert_eq!(stored(&rt, &store, "photos", "empty").unwrap(), b"");
    fs::write(bucket.join("note.txt"), b"hi").unwrap();
    assert_eq!(fs::read(bucket.join("note.txt")).unwrap(), b"hi");
    assert_eq!(fs::metadata(bucket.join("note.txt")).unwrap().len(), 2);
    let version = rt
        .block_on(store.head(&b("photos"), &k("note.txt")))
        .unwrap();
    assert_eq!(
        version.version(),
        2,
        "each close of a written file is one version"
    );

    // Appends go to the end of what is stored.
    let mut f = OpenOptions::new()
        .append(true)
        .open(bucket.join("note.txt"))
        .unwrap();
    f.write_all(b" there").unwrap();
    drop(f);
    assert_eq!(fs::read(bucket.join("note.txt")).unwrap(), b"hi there");

    // Sequential reads in small pieces (read-ahead windows) see it all.
    let mut f = File::open(&path).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 7000];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, big);
}

#[test]
fn random_writes_and_reads_at_any_offset() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let _m = mount_with(&store, &d.mnt, options(&d.spool));
    fs::create_dir(d.mnt.join("db")).unwrap();
    let path = d.mnt.join("db/file.bin");
    let mut model = noise(2, 300_000);
    fs::write(&path, &model).unwrap();

    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut seed = 7u64;
    for i in 0..200u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (seed >> 16) % 400_000;
        let len = 1 + (seed >> 40) as usize % 9000;
        let data = noise(100 + i, len);
        f.write_all_at(&data, offset).unwrap();
        let end = offset as usize + len;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[offset as usize..end].copy_from_slice(&data);
        if i % 10 == 0 {
            // Reads on the same handle see the writes before any upload.
            let mut back = vec![0u8; len];
            f.read_exact_at(&mut back, offset).unwrap();
            assert_eq!(back, data);
        }
    }
    // Another descriptor of the same file in this process sees them too.
    let other = File::open(&path).unwrap();
    let mut all = Vec::new();
    (&other).read_to_end(&mut all).unwrap();
    assert_eq!(all.len(), model.len());
    assert!(all == model);
    f.sync_all().unwrap();
    assert!(
        stored(&rt, &store, "db", "file.bin").unwrap() == model,
        "fsync uploads"
    );
    drop(f);
    drop(other);
    assert!(fs::read(&path).unwrap() == model);
    assert_eq!(fs::metadata(&path).unwrap().len(), model.len() as u64);
}

#[test]
fn truncate_shrinks_and_grows_open_and_unopened_files() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let _m = mount_with(&store, &d.mnt, options(&d.spool));
    fs::create_dir(d.mnt.join("t")).unwrap();
    let path = d.mnt.join("t/f");
    let data = noise(3, 100_000);
    fs::write(&path, &data).unwrap();

    // A path truncate of a file nobody has open is stored at once.
    let f = OpenOptions::new()
        .write(true)
        .open(d.mnt.join("t/f"))
        .unwrap();
    drop(f);
    std::process::Command::new("truncate")
        .args(["-s", "10000"])
        .arg(&path)
        .status()
        .unwrap();
    assert_eq!(stored(&rt, &store, "t", "f").unwrap(), &data[..10_000]);
    assert_eq!(fs::metadata(&path).unwrap().len(), 10_000);
    std::process::Command::new("truncate")
        .args(["-s", "50000"])
        .arg(&path)
        .status()
        .unwrap();
    let mut want = data[..10_000].to_vec();
    want.resize(50_000, 0);
    assert_eq!(stored(&rt, &store, "t", "f").unwrap(), want);
    assert_eq!(fs::read(&path).unwrap(), want);

    // ftruncate on an open file, then writes: stored at close.
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.set_len(20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 20);
    f.seek(SeekFrom::Start(30)).unwrap();
    f.write_all(b"tail").unwrap();
    f.set_len(32).unwrap();
    drop(f);
    let mut want = data[..20].to_vec();
    want.extend_from_slice(&[0; 10]);
    want.extend_from_slice(b"ta");
    assert_eq!(stored(&rt, &store, "t", "f").unwrap(), want);
    assert_eq!(fs::read(&path).unwrap(), want);

    // O_TRUNC.
    fs::write(&path, b"x").unwrap();
    assert_eq!(stored(&rt, &store, "t", "f").unwrap(), b"x");
}

#[test]
fn writes_past_the_largest_object_fail_with_efbig() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let opts = MountOptions {
        max_object_size_bytes: 1 << 20,
        ..options(&d.spool)
    };
    let _m = mount_with(&store, &d.mnt, opts);
    fs::create_dir(d.mnt.join("big")).unwrap();
    let path = d.mnt.join("big/f");
    let mut f = File::create(&path).unwrap();
    f.write_all(&vec![1u8; 1 << 20]).unwrap();
    let e = f.write_all(b"one more").unwrap_err();
    assert_eq!(errno(e), libc::EFBIG);
    let e = f.set_len(2 << 20).unwrap_err();
    assert_eq!(errno(e), libc::EFBIG);
    drop(f);
    assert_eq!(stored(&rt, &store, "big", "f").unwrap().len(), 1 << 20);
}

#[test]
fn rename_moves_files_directories_and_buckets() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let _m = mount_with(&store, &d.mnt, options(&d.spool));
    let m = &d.mnt;
    fs::create_dir(m.join("b")).unwrap();
    fs::create_dir_all(m.join("b/a/deep/er")).unwrap();
    fs::create_dir(m.join("b/a/empty")).unwrap();
    fs::write(m.join("b/a/one"), b"1").unwrap();
    fs::write(m.join("b/a/deep/two"), b"22").unwrap();
    let big = noise(4, 5_000_000); // past the read-ahead: copied through a spool
    fs::write(m.join("b/a/deep/er/big"), &big).unwrap();
    let ino_before = fs::metadata(m.join("b/a/one")).unwrap().ino();

    // A file, within a directory and across.
    fs::rename(m.join("b/a/one"), m.join("b/a/uno")).unwrap();
    assert_eq!(fs::read(m.join("b/a/uno")).unwrap(), b"1");
    assert_eq!(fs::metadata(m.join("b/a/uno")).unwrap().ino(), ino_before);
    assert!(!m.join("b/a/one").exists());
    fs::rename(m.join("b/a/uno"), m.join("b/top")).unwrap();
    assert_eq!(stored(&rt, &store, "b", "top").unwrap(), b"1");
    assert_eq!(stored(&rt, &store, "b", "a/uno"), None);

    // Onto an existing file: replaced.
    fs::write(m.join("b/other"), b"old").unwrap();
    fs::rename(m.join("b/top"), m.join("b/other")).unwrap();
    assert_eq!(fs::read(m.join("b/other")).unwrap(), b"1");

    // A directory with everything under it, its empty subdirectory too.
    fs::rename(m.join("b/a"), m.join("b/z")).unwrap();
    assert!(!m.join("b/a").exists());
    assert_eq!(names(&m.join("b/z")), ["deep", "empty"]);
    assert_eq!(fs::read(m.join("b/z/deep/two")).unwrap(), b"22");
    assert!(fs::read(m.join("b/z/deep/er/big")).unwrap() == big);
    assert!(m.join("b/z/empty").is_dir());
    assert_eq!(
        keys(&rt, &store, "b"),
        [
            "other",
            "z/.quarry-dir",
            "z/deep/.quarry-dir",
            "z/deep/er/.quarry-dir",
            "z/deep/er/big",
            "z/deep/two",
            "z/empty/.quarry-dir",
        ]
    );

    // A directory onto a non-empty one is refused; onto an empty one, fine.
    fs::create_dir(m.join("b/full")).unwrap();
    fs::write(m.join("b/full/x"), b"x").unwrap();
    let e = fs::rename(m.join("b/z/deep"), m.join("b/full")).unwrap_err();
    assert_eq!(errno(e), libc::ENOTEMPTY);
    fs::rename(m.join("b/z/deep"), m.join("b/z/empty")).unwrap();
    assert_eq!(fs::read(m.join("b/z/empty/two")).unwrap(), b"22");

    // A bucket: a new bucket with the same objects; the old one is gone.
    fs::rename(m.join("b"), m.join("c")).unwrap();
    assert_eq!(names(m), ["c"]);
    assert_eq!(fs::read(m.join("c/z/empty/two")).unwrap(), b"22");
    let buckets = rt.block_on(store.buckets()).unwrap();
    assert_eq!(buckets.len(), 1);
    assert_eq!(buckets[0].0.as_str(), "c");

    // A file into the top level (where only buckets live) is refused.
    let e = fs::rename(m.join("c/other"), m.join("other")).unwrap_err();
    assert_eq!(errno(e), libc::EPERM);
}

#[test]
fn rename_keeps_an_open_reader_reading() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (_rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let opts = MountOptions {
        read_ahead_bytes: 64 << 10,
        ..options(&d.spool)
    };
    let _m = mount_with(&store, &d.mnt, opts);
    fs::create_dir(d.mnt.join("r")).unwrap();
    let data = noise(5, 2_000_000);
    fs::write(d.mnt.join("r/src"), &data).unwrap();
    // The target's versions run ahead of the source's, so the copy's
    // version differs from the one the reader pinned.
    fs::write(d.mnt.join("r/dst"), b"older").unwrap();
    fs::write(d.mnt.join("r/dst"), b"old").unwrap();
    let f = File::open(d.mnt.join("r/src")).unwrap();
    let mut head = vec![0u8; 4096];
    f.read_exact_at(&mut head, 0).unwrap();
    fs::rename(d.mnt.join("r/src"), d.mnt.join("r/dst")).unwrap();
    // The copy is the same bytes: the handle follows it.
    let mut tail = vec![0u8; 4096];
    f.read_exact_at(&mut tail, 1_900_000).unwrap();
    assert_eq!(tail, &data[1_900_000..1_904_096]);
}

#[test]
fn mkdir_rmdir_unlink_and_the_directory_marker() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let _m = mount_with(&store, &d.mnt, options(&d.spool));
    let m = &d.mnt;
    fs::create_dir(m.join("b")).unwrap();
    let e = fs::create_dir(m.join("b")).unwrap_err();
    assert_eq!(errno(e), libc::EEXIST);

    // An empty directory persists, by a marker object listings hide.
    fs::create_dir(m.join("b/empty")).unwrap();
    assert_eq!(keys(&rt, &store, "b"), ["empty/.quarry-dir"]);
    assert_eq!(names(&m.join("b")), ["empty"]);
    assert!(names(&m.join("b/empty")).is_empty());
    assert!(!m.join("b/empty/.quarry-dir").exists());
    let e = fs::create_dir(m.join("b/empty")).unwrap_err();
    assert_eq!(errno(e), libc::EEXIST);
    fs::remove_dir(m.join("b/empty")).unwrap();
    assert!(keys(&rt, &store, "b").is_empty());
    assert!(!m.join("b/empty").exists());

    // Non-empty: ENOTEMPTY, also when the only entry is not stored yet.
    fs::create_dir(m.join("b/full")).unwrap();
    fs::write(m.join("b/full/f"), b"f").unwrap();
    let e = fs::remove_dir(m.join("b/full")).unwrap_err();
    assert_eq!(errno(e), libc::ENOTEMPTY);
    let mut pending = File::create(m.join("b/full/pending")).unwrap();
    fs::remove_file(m.join("b/full/f")).unwrap();
    let e = fs::remove_dir(m.join("b/full")).unwrap_err();
    assert_eq!(errno(e), libc::ENOTEMPTY);
    pending.write_all(b"p").unwrap();
    drop(pending);
    fs::remove_file(m.join("b/full/pending")).unwrap();
    // Emptied by unlinks, the directory is still there, then removable.
    assert!(m.join("b/full").is_dir());
    assert!(names(&m.join("b/full")).is_empty());
    fs::remove_dir(m.join("b/full")).unwrap();

    // A directory that exists only because keys have it as a prefix
    // stays when its last file goes.
    rt.block_on(store.put_bytes(&b("b"), &k("implicit/x"), b"x", Condition::Always))
        .unwrap();
    assert_eq!(names(&m.join("b")), ["implicit"]);
    fs::remove_file(m.join("b/implicit/x")).unwrap();
    assert!(m.join("b/implicit").is_dir());

    // unlink and rmdir of the wrong kind, and of nothing.
    let e = fs::remove_file(m.join("b/implicit")).unwrap_err();
    assert_eq!(errno(e), libc::EISDIR);
    fs::write(m.join("b/file"), b"1").unwrap();
    let e = fs::remove_dir(m.join("b/file")).unwrap_err();
    assert_eq!(errno(e), libc::ENOTDIR);
    let e = fs::remove_file(m.join("b/nothing")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);

    // A file unlinked while open is still readable through its handle,
    // and its later writes are not stored.
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.join("b/file"))
        .unwrap();
    fs::remove_file(m.join("b/file")).unwrap();
    f.write_all(b"ghost").unwrap();
    drop(f);
    assert_eq!(stored(&rt, &store, "b", "file"), None);

    // Buckets: rmdir of a non-empty one is refused, of an empty one works.
    let e = fs::remove_dir(m.join("b")).unwrap_err();
    assert_eq!(errno(e), libc::ENOTEMPTY);
    fs::remove_dir(m.join("b/implicit")).unwrap();
    fs::remove_dir(m.join("b")).unwrap();
    assert!(rt.block_on(store.buckets()).unwrap().is_empty());
    assert!(names(m).is_empty());
}

#[test]
fn readdir_lists_buckets_directories_and_files_across_pages() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let _m = mount_with(&store, &d.mnt, options(&d.spool));
    let m = &d.mnt;
    for name in ["alpha", "beta", "gamma"] {
        fs::create_dir(m.join(name)).unwrap();
    }
    assert_eq!(names(m), ["alpha", "beta", "gamma"]);
    // Put through the store directly: 1500 files beside a subdirectory of
    // 1200, so listings span pages and skip the subdirectory's keys.
    let bucket = b("beta");
    rt.block_on(async {
        for i in 0..1500 {
            store
                .put_bytes(
                    &bucket,
                    &k(&format!("many/f{i:04}")),
                    b"",
                    Condition::Always,
                )
                .await
                .unwrap();
        }
        for i in 0..1200 {
            store
                .put_bytes(
                    &bucket,
                    &k(&format!("many/sub/s{i:04}")),
                    b"",
                    Condition::Always,
                )
                .await
                .unwrap();
        }
        store
            .put_bytes(&bucket, &k("many/zz"), b"last", Condition::Always)
            .await
            .unwrap();
        store
            .put_bytes(&bucket, &k("top.txt"), b"t", Condition::Always)
            .await
            .unwrap();
    });
    assert_eq!(names(&m.join("beta")), ["many", "top.txt"]);
    let listed = names(&m.join("beta/many"));
    assert_eq!(listed.len(), 1502);
    assert_eq!(listed[0], "f0000");
    assert_eq!(listed[1499], "f1499");
    assert_eq!(&listed[1500..], ["sub", "zz"]);
    assert_eq!(names(&m.join("beta/many/sub")).len(), 1200);
    let kinds: Vec<(String, bool)> = fs::read_dir(m.join("beta"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.file_type().unwrap().is_dir(),
            )
        })
        .collect();
    assert!(kinds.contains(&("many".to_string(), true)));
    assert!(kinds.contains(&("top.txt".to_string(), false)));
    // readdir's inode numbers are the ones stat gives.
    let entry = fs::read_dir(m.join("beta"))
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_name() == "top.txt")
        .unwrap();
    assert_eq!(
        entry.ino(),
        fs::metadata(m.join("beta/top.txt")).unwrap().ino()
    );
    // A file created here shows before it is stored.
    let f = File::create(m.join("gamma/new")).unwrap();
    assert_eq!(names(&m.join("gamma")), ["new"]);
    drop(f);
}

#[test]
fn names_the_store_cannot_hold_are_refused_and_store_nothing() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let _m = mount_with(&store, &d.mnt, options(&d.spool));
    let m = &d.mnt;

    // The top level holds buckets: their rules, and no files.
    let e = fs::create_dir(m.join("Bad_Name")).unwrap_err();
    assert_eq!(errno(e), libc::EINVAL);
    let e = fs::create_dir(m.join("-dash")).unwrap_err();
    assert_eq!(errno(e), libc::EINVAL);
    let e = fs::create_dir(m.join("a".repeat(64))).unwrap_err();
    assert_eq!(errno(e), libc::ENAMETOOLONG);
    let e = File::create(m.join("file-at-top")).unwrap_err();
    assert_eq!(errno(e), libc::EPERM);
    assert!(rt.block_on(store.buckets()).unwrap().is_empty());

    fs::create_dir(m.join("ok")).unwrap();
    // A segment over 255 bytes, a key over 1024, a non-UTF-8 name, the
    // reserved marker name.
    let e = File::create(m.join("ok").join("n".repeat(256))).unwrap_err();
    assert_eq!(errno(e), libc::ENAMETOOLONG);
    let mut deep = m.join("ok");
    let mut made = 0;
    let err = loop {
        deep = deep.join("d".repeat(200));
        match fs::create_dir(&deep) {
            Ok(()) => made += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(errno(err), libc::ENAMETOOLONG);
    assert_eq!(
        made, 5,
        "five 200-byte segments and a marker fit in 1024 bytes"
    );
    let e = File::create(m.join("ok").join(OsStr::from_bytes(b"bad\xff"))).unwrap_err();
    assert_eq!(errno(e), libc::EINVAL);
    let e = File::create(m.join("ok/.quarry-dir")).unwrap_err();
    assert_eq!(errno(e), libc::EINVAL);
    let e = fs::create_dir(m.join("ok/.quarry-dir")).unwrap_err();
    assert_eq!(errno(e), libc::EINVAL);
    let only_dirs: Vec<String> = keys(&rt, &store, "ok");
    assert_eq!(only_dirs.len(), 5);
    assert!(only_dirs.iter().all(|k| k.ends_with("/.quarry-dir")));
}

#[test]
fn a_directory_over_the_rename_bound_gives_exdev_and_mv_copies_it() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let opts = MountOptions {
        max_rename_objects: 3,
        ..options(&d.spool)
    };
    let _m = mount_with(&store, &d.mnt, opts);
    let m = &d.mnt;
    fs::create_dir_all(m.join("b/d/sub")).unwrap();
    for i in 0..5 {
        fs::write(m.join(format!("b/d/sub/f{i}")), format!("{i}")).unwrap();
    }
    let e = fs::rename(m.join("b/d"), m.join("b/e")).unwrap_err();
    assert_eq!(errno(e), libc::EXDEV);
    assert_eq!(names(&m.join("b")), ["d"], "nothing moved");
    // mv falls back to copying and removing, file by file.
    sh(&format!(
        "mv {} {}",
        m.join("b/d").display(),
        m.join("b/e").display()
    ));
    assert_eq!(names(&m.join("b")), ["e"]);
    assert_eq!(names(&m.join("b/e/sub")), ["f0", "f1", "f2", "f3", "f4"]);
    assert_eq!(stored(&rt, &store, "b", "e/sub/f3").unwrap(), b"3");
}

#[test]
fn run_until_signal_returns_when_unmounted_from_outside() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (_rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let (mnt, opts) = (d.mnt.clone(), options(&d.spool));
    let runner = {
        let store = std::sync::Arc::clone(&store);
        std::thread::spawn(move || quarry_mount::run_until_signal(store, None, mnt, opts))
    };
    let canonical = d.mnt.canonicalize().unwrap();
    let mounted = || {
        fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split(' ').nth(1) == Some(canonical.to_str().unwrap()))
    };
    let started = std::time::Instant::now();
    while !mounted() {
        assert!(started.elapsed().as_secs() < 10, "never mounted");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    fs::create_dir(d.mnt.join("up")).unwrap();
    sh(&format!("umount {}", canonical.display()));
    runner.join().unwrap().unwrap();
    assert!(!mounted());
}

#[test]
fn unmounting_a_busy_mount_detaches_it_lazily() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let m = mount_with(&store, &d.mnt, options(&d.spool));
    fs::create_dir(d.mnt.join("busy")).unwrap();
    fs::write(d.mnt.join("busy/f"), b"still here").unwrap();
    let mut open = OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.mnt.join("busy/f"))
        .unwrap();
    let e = m.unmount().unwrap_err();
    assert!(matches!(e, quarry_mount::MountError::Unmount { .. }), "{e}");
    assert!(e.to_string().contains("detached lazily"), "{e}");
    // Gone from the namespace, still served to the open file, whose
    // changes are stored when it closes.
    assert!(!d.mnt.join("busy").exists());
    let mut got = String::new();
    open.read_to_string(&mut got).unwrap();
    assert_eq!(got, "still here");
    open.write_all(b"!").unwrap();
    drop(open);
    assert_eq!(stored(&rt, &store, "busy", "f").unwrap(), b"still here!");
}
