//! Real programs on the mount: `cp -r` of a source tree checked by
//! `diff -r`, and SQLite building a database through transactions that
//! survives an unmount and a remount.

mod common;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::*;
use quarry_store::{BucketName, ObjectKey};

#[test]
fn cp_r_of_a_source_tree_then_diff_r_is_clean() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (_rt, store) = mem_store();
    let d = dirs(&["mnt", "tree"]);
    // A private copy of this repository's crates, so the test does not
    // race with edits to the working tree.
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tree = d.root.path().join("tree/crates");
    let files = quarry_testkit::copy_tree(&crates, &tree, &["target"]).unwrap();
    assert!(files > 100, "{files} files");

    let started = Instant::now();
    let m = mount_with(&store, &d.mnt, options(&d.spool));
    fs::create_dir(d.mnt.join("src")).unwrap();
    sh(&format!(
        "cp -r {} {}/src/",
        tree.display(),
        d.mnt.display()
    ));
    sh(&format!(
        "diff -r {} {}/src/crates",
        tree.display(),
        d.mnt.display()
    ));
    m.unmount().unwrap();

    // Everything is in the store, not in the mount: a new mount agrees.
    let m = mount_with(&store, &d.mnt, options(&d.spool));
    sh(&format!(
        "diff -r {} {}/src/crates",
        tree.display(),
        d.mnt.display()
    ));
    let count = sh(&format!("find {}/src -type f | wc -l", d.mnt.display()));
    assert_eq!(count.trim(), files.to_string());
    m.unmount().unwrap();
    eprintln!(
        "cp -r and two diff -r of {files} files: {:?}",
        started.elapsed()
    );
}

#[test]
fn sqlite_writes_100k_rows_in_100_transactions_and_survives_a_remount() {
    if !fuse_available() {
        return;
    }
    if !quarry_testkit::require_tool("sqlite3") {
        return;
    }
    init_logs();
    let (rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let db = d.mnt.join("db/rows.db");

    let mut script = String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL);\n");
    for _ in 0..100 {
        script.push_str(
            "BEGIN;\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) \
             INSERT INTO t(v) SELECT printf('row %d %s', x, hex(randomblob(16))) FROM c;\nCOMMIT;\n",
        );
    }

    let started = Instant::now();
    let m = mount_with(&store, &d.mnt, options(&d.spool));
    fs::create_dir(d.mnt.join("db")).unwrap();
    let mut child = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "sqlite3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = started.elapsed();
    // The rollback journal was deleted at each commit.
    let names: Vec<String> = fs::read_dir(d.mnt.join("db"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["rows.db"]);
    m.unmount().unwrap();
    // Every commit's fsync stored a version of the database.
    let bucket = BucketName::new("db").unwrap();
    let head = rt
        .block_on(store.head(&bucket, &ObjectKey::new("rows.db").unwrap()))
        .unwrap();
    assert!(head.version() > 100, "version {}", head.version());
    let keys = rt.block_on(store.list(&bucket, "", None, 10)).unwrap();
    assert_eq!(keys.len(), 1, "no journal left behind");
    eprintln!(
        "database: {} bytes, version {}",
        head.size(),
        head.version()
    );

    let m = mount_with(&store, &d.mnt, options(&d.spool));
    let out = sh(&format!(
        "sqlite3 {} 'PRAGMA integrity_check; SELECT count(*) FROM t; SELECT count(DISTINCT v) FROM t;'",
        db.display()
    ));
    assert_eq!(out, "ok\n100000\n100000\n");
    m.unmount().unwrap();
    eprintln!(
        "sqlite: 100 transactions of 1000 rows in {written:?}, checked after a remount at {:?}",
        started.elapsed()
    );
}

#[test]
fn fcntl_locks_exclude_between_processes_on_one_mount() {
    if !fuse_available() {
        return;
    }
    if !quarry_testkit::require_tool("python3") {
        return;
    }
    init_logs();
    let (_rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let _m = mount_with(&store, &d.mnt, options(&d.spool));
    fs::create_dir(d.mnt.join("locks")).unwrap();
    let path = d.mnt.join("locks/f");
    fs::write(&path, b"lock me").unwrap();
    // The kernel keeps POSIX locks for the mount (fuser does not ask for
    // FUSE_POSIX_LOCKS): a second process cannot take a held lock.
    let script = r#"
import fcntl, subprocess, sys
p = sys.argv[1]
other = [sys.executable, "-c",
         "import fcntl, sys; f = open(sys.argv[1], 'r+'); fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)", p]
f = open(p, "r+")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
assert subprocess.run(other, capture_output=True).returncode != 0, "second lock granted"
fcntl.lockf(f, fcntl.LOCK_UN)
assert subprocess.run(other, capture_output=True).returncode == 0, "lock not released"
print("ok")
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
