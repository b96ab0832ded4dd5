//! What a user meets every day: `quarry get KEY -` writes to standard
//! output, `quarry stat` prints dates as ISO 8601 in local time, and
//! `quarry up --capacity` sizes nodes whose files grow as data arrives.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

fn quarry(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quarry"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("QUARRY_CLUSTER")
        .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run quarry")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn ok(output: Output) -> Output {
    assert!(output.status.success(), "{}", text(&output));
    output
}

struct Down<'a>(&'a Path, &'a str);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = quarry(self.0, &["down", "--dir", self.1], &[]);
    }
}

/// Some bytes that are not text, so nothing could pass them through a
/// text conversion unchanged by chance.
fn data(len: usize) -> Vec<u8> {
    quarry_testkit::noise_bytes(len, 0x2545_f491_4f6c_dd1d)
}

/// What GNU date prints for the instant `unix_ms` in zone `tz`, in the
/// form `quarry stat` uses.
fn gnu_date(unix_ms: u64, tz: &str) -> String {
    let out = Command::new("date")
        .arg("-d")
        .arg(format!("@{}.{:03}", unix_ms / 1000, unix_ms % 1000))
        .arg("+%Y-%m-%dT%H:%M:%S.%3N%:z")
        .env("TZ", tz)
        .output()
        .unwrap_or_else(|e| panic!("this test needs GNU date (coreutils): {e}"));
    assert!(out.status.success(), "date: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn get_dash_writes_to_stdout_and_stat_prints_local_iso_dates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    ok(quarry(
        d,
        &["up", "--nodes", "2", "--device", "mem", "--detach"],
        &[],
    ));
    let _down = Down(d, ".quarry");
    ok(quarry(d, &["mb", "b"], &[]));
    let bytes = data(300_000);
    std::fs::write(d.join("in.bin"), &bytes).unwrap();
    ok(quarry(d, &["put", "in.bin", "b/k"], &[]));

    let got = ok(quarry(d, &["get", "b/k", "-"], &[]));
    assert!(got.stdout == bytes, "{} bytes on stdout", got.stdout.len());
    assert!(!d.join("-").exists(), "a file named - was written");
    // `./-` is still a file of that name.
    ok(quarry(d, &["get", "b/k", "./-", "-q"], &[]));
    assert!(std::fs::read(d.join("-")).unwrap() == bytes);
    // A path that is not a regular file (here a FIFO; `/dev/null` is the
    // everyday case) is written in place, never renamed over.
    let fifo = d.join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(
        made.is_ok_and(|s| s.success()),
        "this test needs mkfifo (coreutils)"
    );
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    ok(quarry(d, &["get", "b/k", "pipe", "-q"], &[]));
    assert!(
        reader.join().unwrap() == bytes,
        "the FIFO's reader got other bytes"
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO was replaced"
    );

    let json = ok(quarry(d, &["stat", "b/k", "--json"], &[]));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("stat json");
    let created_ms = v["created_unix_ms"]
        .as_u64()
        .expect("created_unix_ms is a number");
    for tz in ["UTC0", "IST-5:30", "America/New_York"] {
        let stat = ok(quarry(d, &["stat", "b/k"], &[("TZ", tz)]));
        let line = String::from_utf8_lossy(&stat.stdout)
            .lines()
            .find(|l| l.starts_with("created"))
            .map(str::to_string)
            .expect("a created line");
        assert_eq!(
            line.split_whitespace().nth(1),
            Some(gnu_date(created_ms, tz).as_str()),
            "TZ={tz}: {line}"
        );
    }
}

/// Bytes the file takes on its disk.
fn allocated_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").blocks() * 512
}

#[test]
fn up_sizes_nodes_by_capacity_and_takes_disk_only_as_data_arrives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // Bad sizes fail before any node starts, saying what was wrong.
    for (bad, says) in [
        ("8X", "unknown unit"),
        ("lots", "expected a whole number"),
        ("1M", "a node of this geometry holds 64.0 MiB to"),
        ("0", "a node of this geometry holds"),
        ("99999T", "holds"),
    ] {
        let out = quarry(d, &["up", "--capacity", bad, "--dir", "bad"], &[]);
        assert!(!out.status.success(), "--capacity {bad} was taken");
        let said = text(&out);
        assert!(
            said.contains(&format!("--capacity {bad:?}")) && said.contains(says),
            "{said}"
        );
        assert!(!d.join("bad/node-0").exists());
    }

    // 64 GiB a node: far more than this test writes, and on a disk with
    // less free than that all together if need be.
    let up = ok(quarry(
        d,
        &[
            "up",
            "--nodes",
            "2",
            "--capacity",
            "64G",
            "--detach",
            "--dir",
            "big",
        ],
        &[],
    ));
    let _down = Down(d, "big");
    assert!(
        String::from_utf8_lossy(&up.stdout).contains("capacity: 64.0 GiB per node (--capacity)"),
        "{}",
        text(&up)
    );
    let files: Vec<_> = (0..2)
        .map(|n| d.join(format!("big/node-{n}/pages.bin")))
        .collect();
    let before: u64 = files.iter().map(|f| allocated_bytes(f)).sum();
    for f in &files {
        assert!(
            std::fs::metadata(f).unwrap().len() >= 64 << 30,
            "{}",
            f.display()
        );
    }
    assert!(before < 64 << 20, "an empty cluster takes {before} bytes");
    let config = std::fs::read_to_string(d.join("big/node-0/node.toml")).unwrap();
    assert!(
        config.contains(&format!("capacity_bytes = {}", 64u64 << 30)),
        "{config}"
    );
    // The file backend gets CRC-32C alone unless --ecc asks for parity.
    assert!(config.contains("ecc = \"crc\""), "{config}");
    let status = ok(quarry(d, &["status", "--cluster", "big/cluster.toml"], &[]));
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("128.0 GiB total capacity"),
        "{}",
        text(&status)
    );

    // Data goes in, reads back, and the files grow by about that much.
    let bytes = data(24 << 20);
    std::fs::write(d.join("in.bin"), &bytes).unwrap();
    let cluster = ["--cluster", "big/cluster.toml"];
    ok(quarry(d, &[&["mb", "b"][..], &cluster].concat(), &[]));
    ok(quarry(
        d,
        &[&["put", "in.bin", "b/k"][..], &cluster].concat(),
        &[],
    ));
    let got = ok(quarry(
        d,
        &[&["get", "b/k", "-"][..], &cluster].concat(),
        &[],
    ));
    assert!(got.stdout == bytes, "{} bytes read back", got.stdout.len());
    let after: u64 = files.iter().map(|f| allocated_bytes(f)).sum();
    assert!(after >= before + (24 << 20), "{before} -> {after}");
    assert!(after < before + (64 << 20), "{before} -> {after}");
}

#[test]
fn up_picks_a_capacity_from_the_free_disk_and_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = ok(quarry(d, &["up", "--nodes", "2", "--detach"], &[]));
    let said = String::from_utf8_lossy(&up.stdout).to_string();
    let line = said
        .lines()
        .find(|l| l.starts_with("capacity: "))
        .expect("a capacity line")
        .to_string();
    assert!(line.contains("free under .quarry over 2 nodes"), "{line}");
    let config = std::fs::read_to_string(d.join(".quarry/node-0/node.toml")).unwrap();
    let capacity: u64 = config
        .lines()
        .find_map(|l| l.strip_prefix("capacity_bytes = "))
        .expect("capacity_bytes in node.toml")
        .parse()
        .unwrap();
    assert!((512 << 20..=16 << 30).contains(&capacity), "{capacity}");
    ok(quarry(d, &["down"], &[]));
    // Again on the same directory: the size it was made with.
    let again = ok(quarry(d, &["up", "--nodes", "2", "--detach"], &[]));
    let _down = Down(d, ".quarry");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("per node, as this cluster was made"),
        "{}",
        text(&again)
    );
    let config = std::fs::read_to_string(d.join(".quarry/node-0/node.toml")).unwrap();
    assert!(
        config.contains(&format!("capacity_bytes = {capacity}")),
        "{config}"
    );
}
