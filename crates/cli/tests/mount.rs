//! `quarry mount` through real node processes: two mounts entering the
//! cluster at different nodes see each other's closed files; a source tree
//! copied in through one mount is `diff -r` clean through the other; SQLite
//! builds a 100k-row database on a mount that passes `integrity_check`
//! after unmount and a mount through a third node. BlueDBM's virtual files:
//! `.quarry/KERNEL/input` and `output` answer as the same computation (or
//! GNU grep) does over the same bytes. Fails, naming it, where FUSE or
//! sqlite3 is missing (quarry_testkit).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quarry_device::{BackendKind, EccMode, Geometry};
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quarry"))
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

/// A cluster of `nodes` in-memory nodes under `dir/cluster`.
fn start_cluster(dir: &Path, nodes: u16) -> LocalCluster {
    let spec = LocalClusterSpec {
        nodes,
        dir: dir.join("cluster"),
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
        capacity_bytes: None,
        direct_io: false,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        ecc: EccMode::Crc,
        kv_toml: None,
        device_toml: None,
    };
    LocalCluster::start(&spec, &exe()).expect("cluster starts")
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
    if !quarry_testkit::require_fuse() {
        return;
    }
    let have_sqlite = quarry_testkit::require_tool("sqlite3");
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_cluster(dir.path(), 4);
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

/// Runs `sh -c script`; its stdout, or its stderr as the error.
fn sh(script: &str) -> Result<String, String> {
    let out = Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("run sh");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `s` quoted for `sh`.
fn quoted(s: &Path) -> String {
    format!("'{}'", s.display().to_string().replace('\'', r"'\''"))
}

/// Deterministic text: words from a small vocabulary (some that look like
/// "would" and are not), lines of 1 to 12 words.
fn text(seed: u64, words: usize) -> String {
    const VOCAB: [&str; 12] = [
        "would",
        "wouldn't",
        "Would",
        "should",
        "could",
        "like",
        "needle42",
        "xneedle42",
        "the",
        "data",
        "near",
        "flash",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = String::new();
    let mut in_line = 0;
    for _ in 0..words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(VOCAB[(x % VOCAB.len() as u64) as usize]);
        in_line += 1;
        if in_line > (x >> 20) % 12 {
            out.push('\n');
            in_line = 0;
        } else {
            out.push(' ');
        }
    }
    out.push('\n');
    out
}

/// Overlapping occurrences of `pattern` in `data` (fgrep-8's count).
fn occurrences(data: &[u8], pattern: &[u8]) -> u64 {
    data.windows(pattern.len())
        .filter(|w| *w == pattern)
        .count() as u64
}

#[test]
#[allow(clippy::too_many_lines)] // one scenario, step by step
fn quarry_kernel_files_answer_as_the_same_computation_over_the_same_bytes() {
    if !quarry_testkit::require_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_cluster(dir.path(), 3);
    let m = Mounted::start(
        &cluster.cluster_path,
        &cluster.cluster.nodes[0].addr,
        &dir.path().join("m"),
    );
    let q = m.dir.join(".quarry");

    // A local tree of text files, copied in with cp: two buckets, one
    // file large enough to span many chunks and pages.
    let local = dir.path().join("local");
    let files: [(&str, u64, usize); 4] = [
        ("docs/a.txt", 1, 300),
        ("docs/sub/b.txt", 2, 2_000),
        ("docs/big.txt", 3, 120_000),
        ("misc/c.txt", 4, 50),
    ];
    let mut all = Vec::new();
    let mut sub = Vec::new();
    for (path, seed, words) in files {
        let body = text(seed, words);
        let p = local.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &body).unwrap();
        all.extend_from_slice(body.as_bytes());
        if path.starts_with("docs/sub/") {
            sub.extend_from_slice(body.as_bytes());
        }
    }
    for bucket in ["docs", "misc"] {
        let cp = Command::new("cp")
            .arg("-r")
            .arg(local.join(bucket))
            .arg(m.dir.join(bucket))
            .status()
            .unwrap();
        assert!(cp.success());
    }

    // `.quarry` is there to those who name it, not a bucket in listings.
    let mut kernels: Vec<String> = sh(&format!("ls -a {}", quoted(&q)))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    kernels.sort();
    assert_eq!(
        kernels,
        [
            ".",
            "..",
            "checksum",
            "egrep",
            "fgrep",
            "fgrep8",
            "grep",
            "histogram",
            "wc",
            "wordcount"
        ]
    );
    let top = sh(&format!("ls -a {}", quoted(&m.dir))).unwrap();
    assert!(!top.lines().any(|l| l == ".quarry"), "{top}");
    assert_eq!(
        sh(&format!("ls {}", quoted(&q.join("wc")))).unwrap(),
        "error\ninput\noutput\n"
    );

    // fgrep8 over everything (no targets), then over one directory.
    let fgrep8 = q.join("fgrep8");
    sh(&format!(
        "echo needle42 > {}",
        quoted(&fgrep8.join("input"))
    ))
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(fgrep8.join("input")).unwrap(),
        "needle42\n"
    );
    let expected = occurrences(&all, b"needle42");
    assert!(expected > 1000, "the text holds the pattern ({expected})");
    assert_eq!(
        sh(&format!("cat {}", quoted(&fgrep8.join("output")))).unwrap(),
        format!("{expected}\n")
    );
    std::fs::write(fgrep8.join("input"), "needle42\ndocs/sub\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(fgrep8.join("output")).unwrap(),
        format!("{}\n", occurrences(&sub, b"needle42"))
    );

    // A bad input: the read fails with EIO, the error file says why, and
    // the mount goes on working.
    sh(&format!("echo abc > {}", quoted(&fgrep8.join("input")))).unwrap();
    let err = std::fs::read(fgrep8.join("output")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let why = std::fs::read_to_string(fgrep8.join("error")).unwrap();
    assert!(why.contains("8 bytes"), "{why}");
    assert_eq!(
        std::fs::read(m.dir.join("misc/c.txt")).unwrap(),
        std::fs::read(local.join("misc/c.txt")).unwrap()
    );
    sh(&format!(
        "echo needle42 > {}",
        quoted(&fgrep8.join("input"))
    ))
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(fgrep8.join("output")).unwrap(),
        format!("{expected}\n")
    );
    assert!(std::fs::read_to_string(fgrep8.join("error"))
        .unwrap()
        .is_empty());

    // Nothing in `.quarry` can be removed, renamed, made or written but
    // the inputs.
    assert!(std::fs::remove_file(fgrep8.join("input")).is_err());
    assert!(std::fs::remove_dir(&fgrep8).is_err());
    assert!(std::fs::remove_dir(&q).is_err());
    assert!(std::fs::create_dir(&q).is_err());
    assert!(std::fs::write(fgrep8.join("output"), "x").is_err());
    assert!(std::fs::write(fgrep8.join("new"), "x").is_err());
    assert!(std::fs::rename(fgrep8.join("input"), m.dir.join("docs/x")).is_err());
    assert!(q.join("fgrep8/input").exists());

    // BlueDBM's word count, exactly as its paper writes it.
    let expected_would = all
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| *w == b"would")
        .count();
    let wq = quoted(&q.join("wordcount"));
    let why = |k: &str| std::fs::read_to_string(q.join(k).join("error")).unwrap_or_default();
    assert_eq!(
        sh(&format!("echo would > {wq}/input; cat {wq}/output"))
            .unwrap_or_else(|e| panic!("{e}: {}", why("wordcount"))),
        format!("{expected_would}\n")
    );

    // grep against GNU grep -r over the local copy (the order of files is
    // readdir's in both, so lines are compared sorted).
    sh(&format!(
        "echo 'would like' > {}",
        quoted(&q.join("grep/input"))
    ))
    .unwrap();
    let ours = std::fs::read_to_string(q.join("grep/output"))
        .unwrap_or_else(|e| panic!("{e}: {}", why("grep")));
    let gnu = Command::new("grep")
        .args(["-r", "would like", "docs", "misc"])
        .current_dir(&local)
        .output()
        .unwrap();
    let sorted = |s: &str| {
        let mut v: Vec<String> = s.lines().map(str::to_string).collect();
        v.sort();
        v
    };
    let gnu = sorted(&String::from_utf8_lossy(&gnu.stdout));
    assert!(!gnu.is_empty());
    assert_eq!(sorted(&ours), gnu);

    // checksum of one bucket against sha256sum of the local copy.
    std::fs::write(q.join("checksum/input"), "\nmisc\n").unwrap();
    let ours = std::fs::read_to_string(q.join("checksum/output"))
        .unwrap_or_else(|e| panic!("{e}: {}", why("checksum")));
    let gnu = Command::new("sha256sum")
        .arg("misc/c.txt")
        .current_dir(&local)
        .output()
        .unwrap();
    assert_eq!(ours, String::from_utf8_lossy(&gnu.stdout));

    m.stop();
    cluster.stop().unwrap();
}
