//! `quarry volume ...` run as a user would, against three `quarry node`
//! processes in managed storage mode.

use std::path::Path;
use std::process::{Command, Output};

use quarry_device::{BackendKind, EccMode, Geometry};
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

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

/// Starts `n` managed `mem` nodes under `dir/.quarry` (a full mesh), which
/// writes `dir/.quarry/cluster.toml`; they stop when the cluster is dropped,
/// so a failing assertion leaves none behind.
fn managed_cluster(dir: &Path, n: u16) -> LocalCluster {
    let spec = LocalClusterSpec {
        nodes: n,
        dir: dir.join(".quarry"),
        backend: BackendKind::Mem,
        preset: None,
        geometry: Some(Geometry {
            buses: 2,
            chips_per_bus: 2,
            blocks_per_chip: 64,
            pages_per_block: 32,
            page_size_bytes: 4096,
            oob_size_bytes: 64,
        }),
        capacity_bytes: None,
        direct_io: false,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        ecc: EccMode::Rs,
        kv_toml: None,
        device_toml: None,
    };
    match LocalCluster::start(&spec, Path::new(env!("CARGO_BIN_EXE_quarry"))) {
        Ok(cluster) => cluster,
        Err(e) => panic!("cluster did not start: {e:#}"),
    }
}

#[test]
fn create_write_read_list_stat_remove() {
    const PAGE: usize = 4096;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let _nodes = managed_cluster(d, 3);
    let path = |name: &str| d.join(name).to_str().expect("utf-8 path").to_string();

    let create = quarry(
        d,
        &["volume", "create", "vol", "--size", "1M", "--nodes", "2,0"],
    );
    assert!(create.status.success(), "{}", text(&create));
    assert!(
        text(&create).contains(
            "created volume vol: 1.0 MiB (256 pages of 4096 bytes) striped over nodes 2,0"
        ),
        "{}",
        text(&create)
    );

    // 10 000 bytes from page 3 on: three pages, the last padded with zeros.
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("in.bin"), &data).expect("write input");
    let write = quarry(d, &["volume", "write", "vol", "3", &path("in.bin")]);
    assert!(write.status.success(), "{}", text(&write));
    assert!(
        text(&write).contains("wrote pages 3..6 of volume vol (3 pages on 2 nodes"),
        "{}",
        text(&write)
    );
    let read = quarry(
        d,
        &["volume", "read", "vol", "3..6", "-o", &path("out.bin")],
    );
    assert!(read.status.success(), "{}", text(&read));
    let back = std::fs::read(d.join("out.bin")).expect("read output");
    assert_eq!(back.len(), 3 * PAGE);
    assert_eq!(&back[..data.len()], &data[..]);
    assert!(back[data.len()..].iter().all(|&b| b == 0));
    // Into a pipe, raw; pages never written are zeros.
    let read = quarry(d, &["volume", "read", "vol", "2+2"]);
    assert!(read.status.success(), "{}", text(&read));
    assert_eq!(read.stdout.len(), 2 * PAGE);
    assert!(read.stdout[..PAGE].iter().all(|&b| b == 0));
    assert_eq!(&read.stdout[PAGE..], &data[..PAGE]);

    let ls = quarry(d, &["volume", "ls"]);
    assert!(ls.status.success(), "{}", text(&ls));
    assert!(
        text(&ls).contains("vol") && text(&ls).contains("2,0"),
        "{}",
        text(&ls)
    );
    let ls = quarry(d, &["volume", "ls", "--json"]);
    assert!(ls.status.success(), "{}", text(&ls));
    let json: serde_json::Value = serde_json::from_slice(&ls.stdout).expect("json");
    assert_eq!(json[0]["name"], "vol");
    assert_eq!(json[0]["used_pages"], 3);
    assert_eq!(json[0]["members"], serde_json::json!([2, 0]));
    let stat = quarry(d, &["volume", "stat", "vol"]);
    assert!(stat.status.success(), "{}", text(&stat));
    assert!(
        text(&stat).contains("space 1001") && text(&stat).contains("3 pages written"),
        "{}",
        text(&stat)
    );

    // Bad input: clear errors, a non-zero exit, nothing stored is lost.
    let cases: [(&[&str], &str); 6] = [
        (
            &["volume", "read", "vol", "250..260"],
            "does not fit in volume \"vol\", which has 256 pages",
        ),
        (
            &["volume", "create", "vol", "--size", "64K"],
            "a volume named \"vol\" already exists",
        ),
        (&["volume", "read", "nope", "0"], "no volume named \"nope\""),
        (&["volume", "create", "x", "--size", "1.5G"], "unknown unit"),
        (
            &["volume", "create", "x", "--size", "5000"],
            "not a whole number of the members' 4096-byte pages",
        ),
        (
            &["volume", "write", "vol", "0+2", &path("in.bin")],
            "nothing was written",
        ),
    ];
    for (args, expect) in cases {
        let out = quarry(d, args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(expect), "{args:?}: {}", text(&out));
    }
    let read = quarry(
        d,
        &["volume", "read", "vol", "3..6", "-o", &path("again.bin")],
    );
    assert!(read.status.success(), "{}", text(&read));
    assert_eq!(std::fs::read(d.join("again.bin")).expect("read"), back);

    let rm = quarry(d, &["volume", "rm", "vol"]);
    assert!(rm.status.success(), "{}", text(&rm));
    assert!(
        text(&rm).contains("deleted volume vol (3 pages trimmed)"),
        "{}",
        text(&rm)
    );
    let ls = quarry(d, &["volume", "ls"]);
    assert!(text(&ls).contains("no volumes"), "{}", text(&ls));
}
