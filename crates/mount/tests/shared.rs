//! Two mounts of one store (as two processes over two clients would be):
//! what each sees of the other's closed files, and what an open reader
//! keeps while the other replaces the file.

mod common;

use std::fs::OpenOptions;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use common::*;
use quarry_mount::{ConflictPolicy, MountHandle, MountOptions};

/// Two mounts of one store, `strict` failing on conflict and `lax` with the
/// default (last writer wins), and a file `c/f` holding `v1`. Fields drop in
/// order: the mounts before their directories and the store.
struct StrictAndLax {
    _mounts: (MountHandle, MountHandle),
    _dirs: Dirs,
    _store: (
        tokio::runtime::Runtime,
        std::sync::Arc<quarry_store::MemObjectStore>,
    ),
    strict: std::path::PathBuf,
    lax: std::path::PathBuf,
}

impl StrictAndLax {
    fn new() -> StrictAndLax {
        init_logs();
        let (rt, store) = mem_store();
        let d = dirs(&["strict", "lax"]);
        let (strict, lax) = (d.root.path().join("strict"), d.root.path().join("lax"));
        let strict_mount = mount_with(
            &store,
            &strict,
            MountOptions {
                conflict: ConflictPolicy::FailOnConflict,
                ..options(&d.spool)
            },
        );
        let lax_mount = mount_with(&store, &lax, options(&d.spool));
        fs::create_dir(strict.join("c")).unwrap();
        fs::write(strict.join("c/f"), b"v1").unwrap();
        StrictAndLax {
            _mounts: (lax_mount, strict_mount),
            _dirs: d,
            _store: (rt, store),
            strict,
            lax,
        }
    }

    /// `c/f` opened for writing through the strict mount.
    fn open_strict(&self) -> File {
        OpenOptions::new()
            .write(true)
            .open(self.strict.join("c/f"))
            .unwrap()
    }

    /// A strict handle that wrote `mine`, after which the lax mount stored
    /// `replacement`: its fsync fails with ESTALE, and it stays open.
    fn stale_writer(&self, replacement: &[u8]) -> File {
        let mut w = self.open_strict();
        w.write_all(b"mine").unwrap();
        fs::write(self.lax.join("c/f"), replacement).unwrap();
        let e = w.sync_all().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESTALE));
        w
    }

    /// The lax mount stores `replacement` while strict handle `w` has not
    /// written yet: its first write fails with ESTALE.
    fn replace_before_first_write(&self, mut w: File, replacement: &[u8]) {
        fs::write(self.lax.join("c/f"), replacement).unwrap();
        let e = w.write_all(b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESTALE));
    }
}

#[test]
fn a_closed_file_is_visible_to_the_other_mount() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (_rt, store) = mem_store();
    let d = dirs(&["a", "b"]);
    let (a, b) = (d.root.path().join("a"), d.root.path().join("b"));
    let _ma = mount_with(&store, &a, options(&d.spool));
    let _mb = mount_with(&store, &b, options(&d.spool));

    fs::create_dir(a.join("shared")).unwrap();
    fs::create_dir(a.join("shared/dir")).unwrap();
    assert!(b.join("shared/dir").is_dir(), "new names need no wait");

    let first = noise(10, 300_000);
    fs::write(a.join("shared/dir/f"), &first).unwrap();
    assert_eq!(fs::read(b.join("shared/dir/f")).unwrap(), first);

    // While it is being written and not yet closed, the other mount
    // still sees the old version.
    let second = noise(11, 700_000);
    let mut w = File::create(a.join("shared/dir/f")).unwrap();
    w.write_all(&second).unwrap();
    assert_eq!(fs::read(b.join("shared/dir/f")).unwrap(), first);
    // Closed: b's next open sees it whole, even though b's kernel still
    // caches the old size (open revalidates and drops those attributes).
    drop(w);
    assert!(fs::read(b.join("shared/dir/f")).unwrap() == second);
    assert_eq!(fs::metadata(b.join("shared/dir/f")).unwrap().len(), 700_000);

    // Shorter again.
    fs::write(a.join("shared/dir/f"), b"tiny").unwrap();
    assert_eq!(fs::read(b.join("shared/dir/f")).unwrap(), b"tiny");

    // Removals show after the name cache's TTL.
    fs::remove_file(a.join("shared/dir/f")).unwrap();
    wait_ttl(&MountOptions::default());
    assert!(!b.join("shared/dir/f").exists());
    assert!(fs::read_dir(b.join("shared/dir")).unwrap().next().is_none());
}

#[test]
fn an_open_reader_keeps_its_version_while_the_other_mount_replaces_it() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (_rt, store) = mem_store();
    let d = dirs(&["a", "b", "c"]);
    let (a, b, c) = (
        d.root.path().join("a"),
        d.root.path().join("b"),
        d.root.path().join("c"),
    );
    let _ma = mount_with(&store, &a, options(&d.spool));
    let _mb = mount_with(&store, &b, options(&d.spool));
    // c reads ahead 64 KiB at a time: a 2 MB file is read in windows.
    let _mc = mount_with(
        &store,
        &c,
        MountOptions {
            read_ahead_bytes: 64 << 10,
            ..options(&d.spool)
        },
    );
    fs::create_dir(a.join("v")).unwrap();
    let old = noise(20, 2_000_000);
    let new = noise(21, 2_000_000);
    fs::write(a.join("v/f"), &old).unwrap();

    // b's file fits b's read-ahead (4 MiB): its first read takes the
    // version whole, so b reads the old bytes to the end.
    let rb = File::open(b.join("v/f")).unwrap();
    let rc = File::open(c.join("v/f")).unwrap();
    let mut buf = vec![0u8; 4096];
    rb.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, &old[..4096]);
    rc.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, &old[..4096]);

    fs::write(a.join("v/f"), &new).unwrap();

    let mut rest = vec![0u8; 2_000_000 - 4096];
    rb.read_exact_at(&mut rest, 4096).unwrap();
    assert!(rest == old[4096..], "one version per handle, never a mix");

    // c has only its first window: the rest of its version is gone from
    // the store, so it gets ESTALE rather than bytes of the new version.
    let e = rc.read_exact_at(&mut buf, 1_500_000).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE));
    drop(rc);
    // Opened again, it reads the new version.
    assert!(fs::read(c.join("v/f")).unwrap() == new);

    // A handle that has not read yet simply reads the newer version.
    let rc = File::open(c.join("v/f")).unwrap();
    fs::write(a.join("v/f"), &old).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    rc.read_exact_at(&mut buf, 1_000_000).unwrap();
    assert_eq!(buf, &old[1_000_000..1_004_096]);
}

#[test]
fn the_conflict_policy_decides_between_two_writers() {
    if !fuse_available() {
        return;
    }
    let m = StrictAndLax::new();
    let (strict, lax) = (m.strict.clone(), m.lax.clone());

    // Last writer wins (the default): lax's close replaces what strict
    // stored in between.
    let mut w = OpenOptions::new()
        .write(true)
        .open(lax.join("c/f"))
        .unwrap();
    w.write_all(b"lax").unwrap();
    fs::write(strict.join("c/f"), b"strict").unwrap();
    drop(w);
    assert_eq!(fs::read(strict.join("c/f")).unwrap(), b"lax");

    // Fail on conflict: a writer whose base was replaced before its upload
    // gets ESTALE from fsync (and close), and stores nothing.
    drop(m.stale_writer(b"theirs"));
    assert_eq!(fs::read(lax.join("c/f")).unwrap(), b"theirs");

    // ... and one that opened before the replacement gets it at its
    // first write.
    m.replace_before_first_write(m.open_strict(), b"again");
    assert_eq!(fs::read(strict.join("c/f")).unwrap(), b"again");

    // A new file created under the same name by both: the second to close
    // loses under fail-on-conflict.
    let mut w = File::create(strict.join("c/new")).unwrap();
    w.write_all(b"strict").unwrap();
    fs::write(lax.join("c/new"), b"lax").unwrap();
    let e = w.sync_all().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE));
}

/// Under fail-on-conflict, a handle opened while another handle of the same
/// file still holds changes refused as stale does not inherit them: it pins
/// the store's version at its open and meets its own conflict. (FUSE sends
/// a close's release asynchronously, so an open right after a close used to
/// land on the old handle's spool now and then.)
#[test]
fn an_open_beside_a_stale_writer_pins_the_current_version() {
    if !fuse_available() {
        return;
    }
    let m = StrictAndLax::new();
    let (strict, lax) = (m.strict.clone(), m.lax.clone());
    let stale = m.stale_writer(b"theirs");
    // The stale handle stays open while another opens, and the file is
    // replaced again before that one writes.
    let w = m.open_strict();
    assert_eq!(fs::read(strict.join("c/f")).unwrap(), b"theirs");
    m.replace_before_first_write(w, b"again");
    drop(stale);
    assert_eq!(fs::read(lax.join("c/f")).unwrap(), b"again");
}

/// A directory one mount just made answers for the names in it by itself
/// for the trust window (a copy into it asks the store nothing per new
/// name), then asks again: a file the other mount stored in it meanwhile
/// shows up, and the mount's own files were there all along.
#[test]
fn a_new_directory_answers_for_its_names_for_a_second_then_asks_again() {
    assert!(
        fuse_available(),
        "this test mounts two file systems: /dev/fuse (fuse3) is needed"
    );
    let m = StrictAndLax::new();
    fs::create_dir(m.lax.join("n")).unwrap();
    for i in 0..20 {
        fs::write(m.lax.join(format!("n/mine{i}")), format!("mine {i}")).unwrap();
    }
    // The other mount sees the directory (its marker is stored) and
    // stores a file in it.
    fs::write(m.strict.join("n/theirs"), b"theirs").unwrap();
    for i in 0..20 {
        assert_eq!(
            fs::read_to_string(m.lax.join(format!("n/mine{i}"))).unwrap(),
            format!("mine {i}")
        );
    }
    wait_ttl(&options(std::path::Path::new("/")));
    assert_eq!(fs::read(m.lax.join("n/theirs")).unwrap(), b"theirs");
    let mut names: Vec<String> = fs::read_dir(m.lax.join("n"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 21, "{names:?}");
    assert!(names.contains(&"theirs".to_string()));
    // And the other way round: what this mount made is in the store.
    for i in 0..20 {
        assert_eq!(
            fs::read_to_string(m.strict.join(format!("n/mine{i}"))).unwrap(),
            format!("mine {i}")
        );
    }
}
