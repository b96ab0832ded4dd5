//! The `quarry` command line, run as a user would.

use std::path::Path;
use std::process::{Command, Output};

fn quarry(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quarry"))
        .args(args)
        .current_dir(dir)
        .env_remove("QUARRY_CLUSTER")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run quarry")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn up_status_page_demo_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(d, &["up", "--nodes", "3", "--device", "mem", "--detach"]);
    assert!(up.status.success(), "{}", text(&up));
    assert!(d.join(".quarry/cluster.toml").exists());

    let again = quarry(d, &["up", "--detach"]);
    assert!(!again.status.success());
    assert!(text(&again).contains("already running"), "{}", text(&again));

    let status = quarry(d, &["status"]);
    assert!(status.status.success(), "{}", text(&status));
    let out = text(&status);
    assert!(out.contains("3 of 3 nodes up"), "{out}");

    let input = d.join("input.txt");
    std::fs::write(&input, b"hello quarry\n").expect("write input");
    let erase = quarry(d, &["page", "erase", "2:1:0:0"]);
    assert!(erase.status.success(), "{}", text(&erase));
    let write = quarry(
        d,
        &[
            "page",
            "write",
            "2:1:0:0:0",
            input.to_str().expect("utf-8 path"),
        ],
    );
    assert!(write.status.success(), "{}", text(&write));
    let out_file = d.join("out.bin");
    let read = quarry(
        d,
        &[
            "page",
            "read",
            "2:1:0:0:0",
            "--out",
            out_file.to_str().expect("utf-8 path"),
        ],
    );
    assert!(read.status.success(), "{}", text(&read));
    let data = std::fs::read(&out_file).expect("read output");
    assert_eq!(&data[..13], b"hello quarry\n");
    assert_eq!(data.len(), 8192);
    assert!(
        data[13..].iter().all(|&b| b == 0),
        "short input is zero-padded"
    );

    // Bad input gets a clear error and a non-zero exit.
    let bad = quarry(d, &["page", "read", "1:99:0:0:0"]);
    assert!(!bad.status.success());
    let out = text(&bad);
    assert!(
        out.contains("out of range") && out.contains("bus 0..="),
        "{out}"
    );
    let bad = quarry(d, &["page", "read", "1:0:0"]);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("expected 5 fields"), "{}", text(&bad));
    let twice = quarry(
        d,
        &[
            "page",
            "write",
            "2:1:0:0:0",
            input.to_str().expect("utf-8 path"),
        ],
    );
    assert!(!twice.status.success());
    assert!(
        text(&twice).contains("already programmed"),
        "{}",
        text(&twice)
    );

    let demo = quarry(d, &["demo", "--pages-per-node", "16"]);
    assert!(demo.status.success(), "{}", text(&demo));
    let out = text(&demo);
    assert!(out.contains("read and verified 48 pages"), "{out}");

    let down = quarry(d, &["down"]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(!d.join(".quarry/cluster.toml").exists());
    let status = quarry(d, &["status"]);
    assert!(!status.status.success());
    assert!(text(&status).contains("quarry up"), "{}", text(&status));
}

#[test]
fn demo_starts_the_embedded_cluster_when_none_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let demo = quarry(d, &["demo", "--pages-per-node", "8"]);
    let out = text(&demo);
    let down = quarry(d, &["down"]);
    assert!(demo.status.success(), "{out}");
    assert!(
        out.contains("starting the embedded 4-node cluster"),
        "{out}"
    );
    assert!(out.contains("read and verified 32 pages"), "{out}");
    assert!(down.status.success(), "{}", text(&down));
}

#[test]
fn bad_node_config_is_reported_with_the_file_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        "id = 0\nlisten = \"127.0.0.1:0\"\ndata_dir = \".\"\nbogus = 1\n",
    )
    .expect("write config");
    let out = quarry(
        dir.path(),
        &["node", "--config", config.to_str().expect("utf-8 path")],
    );
    assert!(!out.status.success());
    let message = text(&out);
    assert!(
        message.contains("node.toml") && message.contains("bogus"),
        "{message}"
    );
    let missing = quarry(dir.path(), &["node", "--config", "missing.toml"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("missing.toml"),
        "{}",
        text(&missing)
    );
}
