//! The benchmarks run end to end through the built binary in `--quick` mode:
//! their JSON has the expected shape and sane values. Nothing here asserts
//! anything about time (the figures of a quick run mean little).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn quarry_json(dir: &Path, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_quarry"))
        .args(args)
        .current_dir(dir)
        .env_remove("QUARRY_CLUSTER")
        .env("RUST_LOG", "warn")
        .env("TMPDIR", dir)
        .output()
        .expect("run quarry");
    assert!(
        output.status.success(),
        "quarry {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "quarry {args:?} printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

/// A figure that noise may drive to any sign in a tiny run (a slope, a
/// difference): only its presence is checked; tests assert no timings.
fn finite(v: &Value, key: &str) {
    let x = num(v, key);
    assert!(x.is_finite(), "{key} = {x} in {v}");
}

fn positive(v: &Value, key: &str) {
    let x = num(v, key);
    assert!(x.is_finite() && x > 0.0, "{key} = {x} in {v}");
}

#[test]
fn bench_device_quick_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plot = dir.path().join("bandwidth.svg");
    let plot_arg = plot.to_str().expect("utf-8 path");
    let r = quarry_json(
        dir.path(),
        &["bench", "device", "--quick", "--json", "--plot", plot_arg],
    );
    assert_eq!(r["preset"], "rfsa");
    assert_eq!(r["quick"], true);
    let page_bytes = r["geometry"]["page_size_bytes"]
        .as_u64()
        .expect("page size");
    assert_eq!(page_bytes, 8192);

    let l = &r["latency"];
    for key in [
        "nand_latency_us_mean",
        "nand_latency_us_p50",
        "nand_latency_us_p99",
        "modeled_device_time_us",
        "software_latency_us_mean",
        "ratio_mean",
    ] {
        positive(l, key);
    }
    // RFSA Table II: 69-75 us tR + ~43 us transfer.
    let modeled = num(l, "modeled_device_time_us");
    assert!((100.0..150.0).contains(&modeled), "modeled {modeled} us");
    assert!(num(l, "modeled_device_time_us_min") <= modeled);
    assert!(num(l, "modeled_device_time_us_max") >= modeled);
    assert!(l["goal_met"].is_boolean());

    let b = &r["bandwidth"];
    positive(b, "peak_bus_bytes_per_s");
    let points = b["points"].as_array().expect("bandwidth points");
    // Quick: 8 KiB .. 256 KiB, both patterns, with and without bit errors.
    for pages in [1u64, 2, 4, 8, 16, 32] {
        for pattern in ["sequential", "random"] {
            for bit_errors in [true, false] {
                let p = points
                    .iter()
                    .find(|p| {
                        p["request_bytes"].as_u64() == Some(pages * page_bytes)
                            && p["pattern"] == pattern
                            && p["bit_errors"] == bit_errors
                    })
                    .unwrap_or_else(|| {
                        panic!("no {pattern} point of {pages} pages (bit errors {bit_errors})")
                    });
                positive(p, "bytes_per_s");
                positive(p, "peak_fraction");
                assert!(num(p, "peak_fraction") <= 1.0, "{p}");
            }
        }
    }
    assert!(num(b, "best_peak_fraction") > 0.0);

    let e = &r["ecc"];
    assert_eq!(e["queue_depth"], 32);
    let rows = e["backends"].as_array().expect("ecc rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["backend"].as_str()).collect();
    assert_eq!(names, ["file", "mem"]);
    for row in rows {
        for key in [
            "read_checked_iops",
            "read_unchecked_iops",
            "program_iops",
            "program_bytes_per_s",
        ] {
            positive(row, key);
        }
        assert!(num(row, "cost_fraction") < 1.0, "{row}");
    }

    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline"),
        "{svg}"
    );
    assert!(svg.contains("stroke-dasharray"), "goal line is dashed");
}

#[test]
fn bench_page_quick_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = quarry_json(
        dir.path(),
        &["bench", "page", "--quick", "--device", "mem", "--json"],
    );
    let backends = r["backends"].as_array().expect("one report per backend");
    assert_eq!(backends.len(), 1);
    let mem = &backends[0];
    assert_eq!(mem["backend"], "mem");
    assert!(mem["working_set_pages"].as_u64().unwrap_or(0) > 0);
    positive(mem, "pingpong_us_mean");
    positive(mem, "ping_us_p50");
    let points = mem["points"].as_array().expect("points");
    for depth in [1u64, 2, 4] {
        for path in ["local", "forwarded"] {
            let p = points
                .iter()
                .find(|p| p["queue_depth"].as_u64() == Some(depth) && p["path"] == path)
                .unwrap_or_else(|| panic!("no {path} point at QD{depth}"));
            positive(p, "iops");
            positive(p, "mib_per_s");
            positive(p, "latency_us_p50");
            positive(p, "pingpongs");
            assert!(num(p, "latency_us_p99") >= num(p, "latency_us_p50"), "{p}");
        }
    }
    assert!(
        !points.iter().any(|p| p["queue_depth"].as_u64() > Some(4)),
        "--quick stops at QD4"
    );
    // With the mem backend come the volume rows, beside a raw read through
    // the same (managed) node.
    let volume = &r["volume"];
    for field in [
        "pingpong_us_mean",
        "raw_read_us_mean",
        "volume_read_us_mean",
        "volume_write_us_mean",
        "volume_read_vs_raw",
        "volume_write_vs_raw",
    ] {
        positive(volume, field);
    }
    assert_eq!(volume["page_size_bytes"].as_u64(), Some(8192), "{volume}");
}

#[test]
#[allow(clippy::too_many_lines)] // one scenario, step by step
fn bench_fabric_quick_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plots = dir.path().join("plots");
    let plots_arg = plots.to_str().expect("utf-8 path");
    let r = quarry_json(
        dir.path(),
        &[
            "bench",
            "fabric",
            "--quick",
            "--json",
            "--plot-dir",
            plots_arg,
        ],
    );
    assert_eq!(r["quick"], true);
    assert_eq!(r["preset"], "bluedbm");
    positive(&r, "device_peak_mib_per_s_per_node");
    positive(&r, "device_read_us");

    // 1. Latency vs hops: nand and mem, hop counts 0..3 on the line.
    let backends = r["latency"]["backends"].as_array().expect("latency");
    let names: Vec<&str> = backends
        .iter()
        .filter_map(|b| b["backend"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "nand",
            "mem",
            "tcp relay (floor)",
            "tcp relay + device time (floor)"
        ]
    );
    // Quarry's series name the floor they compare with.
    assert_eq!(backends[0]["floor"], "tcp relay + device time (floor)");
    assert_eq!(backends[1]["floor"], "tcp relay (floor)");
    finite(&backends[0], "ratio_to_floor");
    finite(&backends[1], "ratio_to_floor");
    for b in backends {
        let rows = b["rows"].as_array().expect("hop rows");
        let hops: Vec<u64> = rows.iter().filter_map(|row| row["hops"].as_u64()).collect();
        assert_eq!(hops, [0, 1, 2, 3], "{b}");
        for row in rows {
            positive(row, "mean_us");
            assert!(num(row, "p99_us") >= num(row, "p50_us"), "{row}");
        }
        assert!(num(b, "slope_us_per_hop_mean").is_finite());
        assert_eq!(b["step_us_mean"].as_array().map(Vec::len), Some(3));
        assert!(b["goal_met"].is_boolean());
    }

    // 2. Bandwidth over 1, 2 and 4 nodes.
    let rows = r["bandwidth"]["rows"].as_array().expect("bandwidth rows");
    let nodes: Vec<u64> = rows
        .iter()
        .filter_map(|row| row["nodes"].as_u64())
        .collect();
    assert_eq!(nodes, [1, 2, 4]);
    for row in rows {
        positive(row, "mib_per_s");
        positive(row, "ratio_to_one_node");
        positive(row, "modeled_peak_mib_per_s");
        positive(row, "client_bytes");
        positive(row, "cpu_cores");
    }
    assert_eq!(
        rows[0]["fabric_bytes"], 0,
        "one node: nothing crosses a link"
    );
    positive(&rows[2], "fabric_bytes");
    assert!(r["bandwidth"]["goal_met"].is_boolean());

    // 3. Multi-access: a host at every node of the 4-node mesh.
    let m = &r["multi_access"];
    for part in ["many_to_one", "many_to_many"] {
        let hosts = m[part]["hosts"].as_array().expect("hosts");
        assert_eq!(hosts.len(), 4, "{part}");
        let shares: f64 = hosts.iter().map(|h| num(h, "share")).sum();
        assert!((shares - 1.0).abs() < 1e-6, "{part} shares sum to {shares}");
        for h in hosts {
            positive(h, "mib_per_s");
        }
    }
    positive(&m["many_to_one"], "min_max_ratio");
    positive(&m["many_to_many"], "fraction");
    assert_eq!(m["many_to_many"]["alone"].as_array().map(Vec::len), Some(4));

    // 4. QD1 under load: both backends, the link-only and shared-device cases.
    let load = r["load"]["backends"].as_array().expect("load");
    assert_eq!(load.len(), 2);
    for b in load {
        positive(&b["unloaded"], "p99_us");
        let cases = b["cases"].as_array().expect("cases");
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0]["stream_target"], 2);
        assert_eq!(cases[1]["stream_target"], 1);
        for c in cases {
            positive(c, "stream_mib_per_s");
            positive(c, "p99_ratio");
            positive(c, "cpu_cores");
        }
    }

    for name in [
        "fabric-latency-hops.svg",
        "fabric-bandwidth-nodes.svg",
        "fabric-multi-access.svg",
        "fabric-qd1-under-load.svg",
    ] {
        let svg = std::fs::read_to_string(plots.join(name)).expect("plot written");
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{name}"
        );
    }
}

#[test]
fn bench_volume_quick_json() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quarry"))
        .args(["bench", "volume", "--quick", "--json"])
        .output()
        .expect("run quarry bench volume");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let points: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("bench volume --json is JSON");
    let points = points.as_array().expect("one point per fill");
    assert_eq!(points.len(), 3);
    for point in points {
        let wa = point["write_amplification"].as_f64().expect("a figure");
        assert!(wa >= 1.0, "write amplification below 1: {point}");
    }
}

#[test]
fn bench_small_quick_json() {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .expect("bench small copies a tree into a FUSE mount: /dev/fuse (fuse3) is needed");
    let dir = tempfile::tempdir().expect("tempdir");
    let r = quarry_json(dir.path(), &["bench", "small", "--quick", "--json"]);
    assert_eq!(r["quick"], true);
    assert_eq!(r["nodes"], 4);
    // The quick tree: 120 files, every one stored (the benchmark checks
    // the listing and fails otherwise).
    assert_eq!(r["files"], 120);
    assert_eq!(r["ops"], 100);
    for key in [
        "tree_bytes",
        "cp_mount_seconds",
        "cp_mount_files_per_s",
        "cp_local_files_per_s",
        "put_4k_us_mean",
        "get_4k_us_mean",
        "pingpong_put_us_mean",
        "pingpong_get_us_mean",
        "put_4k_pingpongs",
        "get_4k_pingpongs",
    ] {
        positive(&r, key);
    }
    let pingpongs = num(&r, "put_4k_pingpongs");
    let expect = num(&r, "put_4k_us_mean") / num(&r, "pingpong_put_us_mean");
    assert!((pingpongs - expect).abs() < 1e-6 * expect, "{r}");
    // The breakdown: the ping, then each store call of a small put and
    // get on the entry node and another member, each timed.
    let steps = r["steps"].as_array().expect("a list of steps");
    assert_eq!(steps.len(), 1 + 2 * 6, "{r}");
    for place in ["entry node", "another node"] {
        for call in [
            "put_chunk",
            "put_manifest",
            "get_manifest",
            "read_chunk",
            "put_with_chunk",
            "get_with_chunk",
        ] {
            let step = steps
                .iter()
                .find(|s| {
                    let name = s["step"].as_str().unwrap_or("");
                    name.starts_with(call) && name.ends_with(place)
                })
                .unwrap_or_else(|| panic!("no step {call} on {place}: {r}"));
            assert!(
                step["us_mean"].as_f64().is_some_and(|us| us > 0.0),
                "{step}"
            );
        }
    }
}

#[test]
fn bench_minerva_quick_json_has_grep_every_line_next_to_get() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = quarry_json(
        dir.path(),
        &[
            "bench", "minerva", "--quick", "--links", "loopback", "--rounds", "1", "--json",
        ],
    );
    let rows = rows.as_array().expect("rows");
    let row = |prefix: &str| {
        rows.iter()
            .find(|r| r["mode"].as_str().is_some_and(|m| m.starts_with(prefix)))
            .unwrap_or_else(|| panic!("no row {prefix:?} in {rows:?}"))
    };
    let grep = row("grep ''");
    let get = row("get of the same object");
    for r in [grep, get] {
        positive(r, "rate");
        positive(r, "speedup");
    }
    // Nothing filtered out: every byte of the object reaches the client.
    assert!(
        num(grep, "bytes_to_client") >= num(get, "bytes_to_client"),
        "{grep} {get}"
    );
    assert_eq!(num(get, "speedup"), 1.0, "{get}");
    // Lines: the newlines, and a last line without one.
    let extra = num(grep, "answer") - num(get, "answer");
    assert!(extra == 0.0 || extra == 1.0, "lines: {grep} {get}");
}

#[test]
fn bench_objects_quick_json_has_every_floor_and_the_mount() {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .expect("bench objects reads and writes through a FUSE mount: /dev/fuse (fuse3) is needed");
    let dir = tempfile::tempdir().expect("tempdir");
    let r = quarry_json(
        dir.path(),
        &["bench", "objects", "--quick", "--rounds", "1", "--json"],
    );
    assert_eq!(r["object_bytes"], 32 << 20);
    let rows = r["rows"].as_array().expect("rows");
    let whats: Vec<&str> = rows.iter().filter_map(|r| r["what"].as_str()).collect();
    assert_eq!(
        whats,
        [
            "put vs fio sequential write",
            "put vs SHA-256 alone, every core",
            "get vs fio sequential read"
        ],
        "{r}"
    );
    for row in rows {
        positive(row, "quarry_mib_per_s");
        positive(row, "peer_mib_per_s");
        let ratio = num(row, "ratio");
        let expect = num(row, "quarry_mib_per_s") / num(row, "peer_mib_per_s");
        assert!((ratio - expect).abs() < 1e-9 * expect, "{row}");
    }
    // The fio peer is the best of a sweep, each round's winner named.
    let best = r["fio_best"].as_array().expect("fio_best");
    assert_eq!(best.len(), 2, "one write and one read sweep a round: {r}");
    for b in best {
        assert!(
            b["setting"]["queue_depth"].as_u64().is_some_and(|q| q >= 1),
            "{b}"
        );
    }
    // The mount's rows are there, not skipped.
    let fuse = r["fuse"].as_array().expect("the FUSE rows");
    assert_eq!(fuse.len(), 2, "{r}");
    for row in fuse {
        positive(row, "fuse_mib_per_s");
        positive(row, "quarry_mib_per_s");
    }
}

#[test]
fn bench_wordcount_quick_json_counts_alike_and_names_every_host_peer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = quarry_json(
        dir.path(),
        &[
            "bench",
            "wordcount",
            "--quick",
            "--links",
            "loopback",
            "--json",
        ],
    );
    let rows = r.as_array().expect("a list of rows");
    let modes: Vec<&str> = rows.iter().filter_map(|r| r["mode"].as_str()).collect();
    assert_eq!(
        modes,
        [
            "in the datapath (kernel at the nodes)",
            "off the datapath (kernel at the client)",
            "host software (plain TCP + memmem)",
            "GNU grep -c -w -F over the same link (lines)",
            "GNU wc -w over the same link (all words)"
        ],
        "{r}"
    );
    // The host peer's memmem count, the kernel at the nodes and at the
    // client agree on a corpus where the word is common; GNU grep counts
    // the lines that hold it (fewer, as a line holds twelve words) and
    // GNU wc every word (more).
    let answers: Vec<u64> = rows.iter().filter_map(|r| r["answer"].as_u64()).collect();
    assert_eq!(answers.len(), 5, "{r}");
    let word = answers[0];
    assert!(
        word > 1000 && answers[..3].iter().all(|&a| a == word),
        "{r}"
    );
    assert!(answers[3] > 0 && answers[3] <= word, "{r}");
    assert!(answers[4] > 10 * word, "{r}");
    // Speedups are over the fastest host program: one of them is 1.
    let best = rows[2..]
        .iter()
        .map(|row| num(row, "speedup"))
        .fold(0.0, f64::max);
    assert!((best - 1.0).abs() < 1e-9, "{r}");
    for row in rows {
        positive(row, "rate");
    }
}
