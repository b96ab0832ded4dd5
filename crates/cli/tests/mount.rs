//! `quarry mount` through real node processes: two mounts entering the
//! cluster at different nodes see each other's closed files; a source tree
//! copied in through one mount is `diff -r` clean through the other; SQLite
//! builds a 100k-row database on a mount that passes `integrity_check`
//! after unmount and a mount through a third node. Skips, saying why, when
//! FUSE or sqlite3 is missing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quarry_cli::{LocalCluster, LocalClusterSpec, Topology};
use quarry_device::{BackendKind, EccMode, Geometry};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quarry"))
}

fn fuse_usable() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse cannot be opened: {e}"))?;
    Ok(())
}

fn is_mounted(dir: &Path) -> bool {
    let Ok(canonical) = dir.canonicalize() else {
        return false;
    };
    std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split(' ').nth(1) == Some(canonical.to_str().unwrap_or("")))
        })
        .unwrap_or(false)
}

/// A `quarry mount` process; unmounted (SIGTERM, then waited for) on drop.
struct Mounted {
    child: Child,
    dir: PathBuf,
}

impl Mounted {
    fn start(cluster: &Path, entry: &str, dir: &Path) -> Mounted {
        std::fs::create_dir_all(dir).unwrap();
        let child = Command::new(exe())
            .args(["mount", "--cluster"])
            .arg(cluster)
            .args(["--entry", entry])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start quarry mount");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(dir) {
            assert!(
                Instant::now() < deadline,
                "{} was not mounted in time",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Mounted {
            child,
            dir: dir.to_path_buf(),
        }
    }

    fn stop(mut self) {
        self.unmount();
    }

    fn unmount(&mut self) {
        // SIGTERM: the mount uploads what is open, then unmounts.
        terminate(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if is_mounted(&self.dir) {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.dir)
                .status();
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.unmount();
        }
    }
}

/// Sends SIGTERM through the `kill` command (no unsafe code in tests).
fn terminate(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

fn sqlite(db: &Path, script: &str) -> String {
    let out = Command::new("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin")
                .write_all(script.as_bytes())?;
            c.wait_with_output()
        })
        .expect("run sqlite3");
    assert!(
        out.status.success(),
        "sqlite3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn mounts_through_different_nodes_share_files_a_tree_and_a_sqlite_database() {
    if let Err(reason) = fuse_usable() {
        println!("SKIPPED: {reason}");
        return;
    }
    let have_sqlite = Command::new("sqlite3").arg("-version").output().is_ok();
    let dir = tempfile::tempdir().unwrap();
    let spec = LocalClusterSpec {
        nodes: 4,
        dir: dir.path().join("cluster"),
        backend: BackendKind::Mem,
        preset: None,
        geometry: Some(Geometry {
            buses: 2,
            chips_per_bus: 4,
            blocks_per_chip: 128,
            pages_per_block: 64,
            page_size_bytes: 8192,
            oob_size_bytes: 64,
        }),
        direct_io: false,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        ecc: EccMode::Crc,
    };
    let cluster = LocalCluster::start(&spec, &exe()).expect("cluster starts");
    let file = cluster.cluster_path.clone();
    let addr = |i: usize| cluster.cluster.nodes[i].addr.clone();
    let a = Mounted::start(&file, &addr(0), &dir.path().join("a"));
    let b = Mounted::start(&file, &addr(3), &dir.path().join("b"));

    // A bucket made through one mount is a directory in the other.
    std::fs::create_dir(a.dir.join("src")).unwrap();
    std::fs::write(a.dir.join("src/hello.txt"), b"hello from node 0\n").unwrap();
    assert_eq!(
        std::fs::read(b.dir.join("src/hello.txt")).unwrap(),
        b"hello from node 0\n"
    );
    std::fs::write(b.dir.join("src/hello.txt"), b"replaced via node 3\n").unwrap();
    // Attributes are cached for up to a second.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        std::fs::read(a.dir.join("src/hello.txt")).unwrap(),
        b"replaced via node 3\n"
    );

    // A real source tree in through one mount, diff -r clean through the other.
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../store/src");
    let cp = Command::new("cp")
        .arg("-r")
        .arg(&tree)
        .arg(a.dir.join("src/store"))
        .status()
        .unwrap();
    assert!(cp.success());
    let diff = Command::new("diff")
        .arg("-r")
        .arg(&tree)
        .arg(b.dir.join("src/store"))
        .output()
        .unwrap();
    assert!(
        diff.status.success(),
        "diff -r: {}",
        String::from_utf8_lossy(&diff.stdout)
    );
    b.stop();

    if !have_sqlite {
        println!(
            "SKIPPED the SQLite part: sqlite3 is not installed (scripts/setup.sh installs it)"
        );
        a.stop();
        return;
    }
    std::fs::create_dir(a.dir.join("db")).unwrap();
    let db = a.dir.join("db/test.db");
    let mut script = String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, n INTEGER);\n");
    for txn in 0..100 {
        script.push_str("BEGIN;\n");
        for row in 0..1000 {
            let id = txn * 1000 + row;
            script.push_str(&format!(
                "INSERT INTO t(v, n) VALUES ('row {id} of the quarry mount test', {});\n",
                id * 7
            ));
        }
        script.push_str("COMMIT;\n");
    }
    sqlite(&db, &script);
    a.stop();
    let c = Mounted::start(&file, &addr(2), &dir.path().join("c"));
    let db = c.dir.join("db/test.db");
    assert_eq!(sqlite(&db, "PRAGMA integrity_check;"), "ok");
    assert_eq!(
        sqlite(&db, "SELECT count(*), sum(n) FROM t;"),
        format!("100000|{}", (0..100_000u64).map(|i| i * 7).sum::<u64>())
    );
    assert!(!c.dir.join("db/test.db-journal").exists());
    c.stop();
    cluster.stop().unwrap();
}
