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
    let up = quarry(
        d,
        &[
            "up",
            "--nodes",
            "3",
            "--device",
            "mem",
            "--storage",
            "raw",
            "--detach",
        ],
    );
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
    assert!(out.contains("got and verified demo/logs/day1.txt"), "{out}");
    assert!(out.contains("dedup 1.99x"), "{out}");
    assert!(down.status.success(), "{}", text(&down));
}

#[test]
fn object_commands_put_get_ls_stat_df_rm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(d, &["up", "--nodes", "4", "--device", "mem", "--detach"]);
    let _down = Down(d);
    assert!(up.status.success(), "{}", text(&up));
    let data: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(d.join("in.bin"), &data).unwrap();

    let missing_bucket = quarry(d, &["put", "in.bin", "pics/a.bin"]);
    assert!(!missing_bucket.status.success());
    assert!(
        text(&missing_bucket).contains("no such bucket \"pics\""),
        "{}",
        text(&missing_bucket)
    );
    assert!(quarry(d, &["mb", "pics", "--chunking", "fixed:16K"])
        .status
        .success());
    let put = quarry(d, &["put", "in.bin", "pics/2024/a.bin"]);
    assert!(put.status.success(), "{}", text(&put));
    assert!(text(&put).contains("version 1"), "{}", text(&put));
    assert!(quarry(d, &["put", "in.bin", "pics/b.bin", "--if-absent"])
        .status
        .success());
    let again = quarry(d, &["put", "in.bin", "pics/b.bin", "--if-absent"]);
    assert!(!again.status.success());
    assert!(
        text(&again).contains("expected absent, current version 1"),
        "{}",
        text(&again)
    );

    let ls = quarry(d, &["ls", "pics/2024/"]);
    assert_eq!(
        String::from_utf8_lossy(&ls.stdout).trim(),
        "700000  v1    2024/a.bin"
    );
    let buckets = quarry(d, &["ls"]);
    assert!(String::from_utf8_lossy(&buckets.stdout).starts_with("pics/"));

    let get = quarry(d, &["get", "pics/2024/a.bin", "out.bin"]);
    assert!(get.status.success(), "{}", text(&get));
    assert_eq!(std::fs::read(d.join("out.bin")).unwrap(), data);
    let range = quarry(d, &["get", "pics/2024/a.bin", "--range", "16380-16389"]);
    assert_eq!(range.stdout, &data[16380..16390]);
    let tail = quarry(d, &["get", "pics/b.bin", "--range", "-5"]);
    assert_eq!(tail.stdout, &data[data.len() - 5..]);

    let stat = quarry(d, &["stat", "pics/b.bin", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&stat.stdout).expect("stat json");
    assert_eq!(v["size"], 700_000);
    assert_eq!(v["chunk_count"], 43);

    let df = quarry(d, &["df", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&df.stdout).expect("df json");
    assert_eq!(v["cluster"]["logical_bytes"], 1_400_000);
    assert_eq!(v["cluster"]["stored_bytes"], 700_000);
    assert_eq!(v["buckets"]["pics"]["objects"], 2);

    let stale = quarry(d, &["rm", "pics/b.bin", "--if-version", "3"]);
    assert!(!stale.status.success());
    assert!(quarry(d, &["rm", "pics/b.bin", "pics/2024/a.bin"])
        .status
        .success());
    let df = quarry(d, &["df", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&df.stdout).expect("df json");
    assert_eq!(v["cluster"]["stored_bytes"], 0);
    let gone = quarry(d, &["get", "pics/b.bin"]);
    assert!(
        text(&gone).contains("no such object pics/b.bin"),
        "{}",
        text(&gone)
    );
    let bad = quarry(d, &["put", "in.bin", "pics/a//b"]);
    assert!(text(&bad).contains("invalid object key"), "{}", text(&bad));
    assert!(quarry(d, &["rb", "pics"]).status.success());

    // Raw page writes would corrupt the space manager's data: refused.
    std::fs::write(d.join("page.bin"), b"x").unwrap();
    let raw = quarry(d, &["page", "write", "1:0:0:0:0", "page.bin"]);
    assert!(!raw.status.success());
    assert!(text(&raw).contains("managed storage"), "{}", text(&raw));
}

/// A small Parquet file: 2 row groups of an int64 `id` and a string `name`.
fn parquet_file() -> Vec<u8> {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    let schema = parquet::schema::parser::parse_message_type(
        "message m { required int64 id; required binary name (UTF8); }",
    )
    .expect("schema");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_data_page_row_count_limit(500)
        .set_write_batch_size(100)
        .build();
    let mut out = Vec::new();
    let mut w = parquet::file::writer::SerializedFileWriter::new(
        &mut out,
        std::sync::Arc::new(schema),
        std::sync::Arc::new(props),
    )
    .expect("writer");
    for rg in 0..2i64 {
        let mut g = w.next_row_group().expect("row group");
        let mut c = g.next_column().expect("column").expect("id");
        let ids: Vec<i64> = (rg * 2000..(rg + 1) * 2000).collect();
        c.typed::<Int64Type>()
            .write_batch(&ids, None, None)
            .expect("ids");
        c.close().expect("close");
        let mut c = g.next_column().expect("column").expect("name");
        let names: Vec<ByteArray> = ids
            .iter()
            .map(|i| ByteArray::from(format!("name {}", i % 37).as_str()))
            .collect();
        c.typed::<ByteArrayType>()
            .write_batch(&names, None, None)
            .expect("names");
        c.close().expect("close");
        g.close().expect("close");
    }
    w.close().expect("close");
    out
}

#[test]
fn parquet_buckets_record_columns_and_warn_about_false_parquet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(d, &["up", "--nodes", "3", "--device", "mem", "--detach"]);
    let _down = Down(d);
    assert!(up.status.success(), "{}", text(&up));
    let file = parquet_file();
    std::fs::write(d.join("t.parquet"), &file).unwrap();
    std::fs::write(d.join("fake.parquet"), "id,name\n1,a\n".repeat(2000)).unwrap();
    for (bucket, chunking) in [("pq", "parquet"), ("au", "auto")] {
        let mb = quarry(d, &["mb", bucket, "--chunking", chunking]);
        assert!(mb.status.success(), "{}", text(&mb));
        let path = format!("{bucket}/t.parquet");
        let put = quarry(d, &["put", "t.parquet", &path]);
        assert!(put.status.success(), "{}", text(&put));
        assert!(!text(&put).contains("warning"), "{}", text(&put));
        let stat = quarry(d, &["stat", &path, "--chunks"]);
        let out = text(&stat);
        assert!(
            out.contains(&format!("chunking {chunking} (Parquet pages")),
            "{out}"
        );
        assert!(
            out.contains("parquet  2 columns, cut page by page"),
            "{out}"
        );
        assert!(out.contains("row group 1 column 1 name"), "{out}");
        assert!(out.contains("footer"), "{out}");
        let json = quarry(d, &["stat", &path, "--chunks", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("stat json");
        assert_eq!(v["columns"], serde_json::json!(["id", "name"]));
        let chunks = v["chunks"].as_array().expect("chunks");
        let pages = chunks.iter().filter(|c| c["role"] == "page").count();
        assert!(pages >= 8, "{v}");
        assert!(chunks
            .iter()
            .any(|c| c["row_group"] == 1 && c["column_path"] == "id"));
        let get = quarry(d, &["get", &path, "back.parquet"]);
        assert!(get.status.success(), "{}", text(&get));
        assert_eq!(std::fs::read(d.join("back.parquet")).unwrap(), file);
        // One column, read from its pages and the footer only.
        let get = quarry(d, &["get", &path, "name.parquet", "--columns", "name"]);
        assert!(get.status.success(), "{}", text(&get));
        assert!(
            text(&get).contains(&format!("got columns name of {path}: read ")),
            "{}",
            text(&get)
        );
        let one = bytes::Bytes::from(std::fs::read(d.join("name.parquet")).unwrap());
        let md = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&one)
            .expect("a valid Parquet file");
        let all = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&bytes::Bytes::from(file.clone()))
            .unwrap();
        assert_eq!(md.file_metadata().schema_descr().num_columns(), 1);
        assert_eq!(
            md.file_metadata().num_rows(),
            all.file_metadata().num_rows()
        );
        let bad = quarry(d, &["get", &path, "x.parquet", "--columns", "nope"]);
        assert!(!bad.status.success());
        assert!(
            text(&bad).contains("no column \"nope\"; the file has id, name"),
            "{}",
            text(&bad)
        );
    }
    // Text named .parquet: stored, with a warning in `parquet` mode only.
    let put = quarry(d, &["put", "fake.parquet", "pq/fake.parquet"]);
    assert!(put.status.success(), "{}", text(&put));
    assert!(
        text(&put).contains("warning: pq/fake.parquet: not a Parquet file"),
        "{}",
        text(&put)
    );
    let get = quarry(
        d,
        &["get", "pq/fake.parquet", "x.parquet", "--columns", "id"],
    );
    assert!(!get.status.success());
    assert!(
        text(&get).contains("pq/fake.parquet: not stored page by page"),
        "{}",
        text(&get)
    );
    let stat = quarry(d, &["stat", "pq/fake.parquet", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&stat.stdout).expect("stat json");
    assert!(
        v["warning"]
            .as_str()
            .is_some_and(|w| w.contains("not a Parquet file")),
        "{v}"
    );
    let put = quarry(d, &["put", "fake.parquet", "au/fake.parquet"]);
    assert!(!text(&put).contains("warning"), "{}", text(&put));
    let stat = text(&quarry(d, &["stat", "au/fake.parquet"]));
    assert!(stat.contains("chunking FastCDC chunks"), "{stat}");
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

#[test]
fn a_bad_inherited_listening_socket_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        "id = 0\nlisten = \"127.0.0.1:0\"\ndata_dir = \".\"\n[device]\nbackend = \"mem\"\n",
    )
    .expect("write config");
    for (fd, why) in [
        ("999", "not open"),
        ("2", "standard input"),
        ("x", "not a file"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_quarry"))
            .args(["node", "--config", config.to_str().expect("utf-8 path")])
            .env("QUARRY_LISTEN_FD", fd)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run quarry node");
        assert!(
            !out.status.success(),
            "node started on QUARRY_LISTEN_FD={fd}"
        );
        let message = text(&out);
        assert!(
            message.contains(&format!("QUARRY_LISTEN_FD={fd}")) && message.contains(why),
            "{message}"
        );
    }
}

/// Stops the cluster in a directory when dropped, so a failing assertion
/// leaves no node processes behind.
struct Down<'a>(&'a Path);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = quarry(self.0, &["down"]);
    }
}

/// Where linear page `l` lives in a 4-node cluster of the default geometry
/// (4 buses x 4 chips, 64 pages per block), by the permutation's definition:
/// nodes first, then buses, then chips, then pages of a block, then blocks.
fn default_linear_addr(l: u64) -> String {
    let (node, r) = (l % 4, l / 4);
    let (bus, r) = (r % 4, r / 4);
    let (chip, r) = (r % 4, r / 4);
    let (page, block) = (r % 64, r / 64);
    format!("{node}:{bus}:{chip}:{block}:{page}")
}

#[test]
#[allow(clippy::too_many_lines)] // one scenario, step by step
fn linear_pages_stream_across_four_nodes() {
    const PAGE: usize = 8192;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(
        d,
        &[
            "up",
            "--nodes",
            "4",
            "--device",
            "mem",
            "--storage",
            "raw",
            "--detach",
        ],
    );
    let _down = Down(d);
    assert!(up.status.success(), "{}", text(&up));
    let path = |name: &str| d.join(name).to_str().expect("utf-8 path").to_string();

    // Ten pages less 100 bytes into a range of 12: ten pages are programmed.
    let data: Vec<u8> = (0..10 * PAGE - 100)
        .map(|i| (i % 251) as u8 ^ (i / PAGE) as u8)
        .collect();
    std::fs::write(d.join("in.bin"), &data).expect("write input");
    let write = quarry(
        d,
        &[
            "page",
            "write",
            "0..12",
            &path("in.bin"),
            "--queue-depth",
            "8",
        ],
    );
    assert!(write.status.success(), "{}", text(&write));
    let out = text(&write);
    assert!(
        out.contains("programmed linear pages 0..10 (10 pages on 4 nodes"),
        "{out}"
    );

    // The range reads back equal, zero padded, concatenated into --out.
    let read = quarry(d, &["page", "read", "0..10", "--out", &path("out.bin")]);
    assert!(read.status.success(), "{}", text(&read));
    let back = std::fs::read(d.join("out.bin")).expect("read output");
    assert_eq!(back.len(), 10 * PAGE);
    assert_eq!(&back[..data.len()], &data[..]);
    assert!(back[data.len()..].iter().all(|&b| b == 0));

    // N+COUNT into a pipe: raw bytes, concatenated.
    let read = quarry(d, &["page", "read", "4+3"]);
    assert!(read.status.success(), "{}", text(&read));
    assert_eq!(read.stdout, &back[4 * PAGE..7 * PAGE]);

    // Each page is on the node, bus and chip the permutation names, so the
    // ten pages are spread over all four nodes.
    let mut nodes = std::collections::BTreeSet::new();
    for l in 0..10u64 {
        let global = default_linear_addr(l);
        nodes.insert(global.split(':').next().map(str::to_string));
        let read = quarry(d, &["page", "read", &global]);
        assert!(read.status.success(), "{}", text(&read));
        let l = l as usize;
        assert_eq!(read.stdout, &back[l * PAGE..(l + 1) * PAGE], "{global}");
        let single = quarry(d, &["page", "read", &l.to_string()]);
        assert_eq!(single.stdout, read.stdout, "linear page {l} is {global}");
    }
    assert_eq!(nodes.len(), 4);

    // One linear page with OOB bytes, read back with --oob.
    std::fs::write(d.join("small.txt"), b"one page").expect("write input");
    let write = quarry(
        d,
        &[
            "page",
            "write",
            "12",
            &path("small.txt"),
            "--oob-hex",
            "abcd",
        ],
    );
    assert!(write.status.success(), "{}", text(&write));
    assert!(
        text(&write).contains("linear page 12 (0:3:0:0:0)"),
        "{}",
        text(&write)
    );
    let read = quarry(d, &["page", "read", "12", "--oob"]);
    assert!(read.status.success(), "{}", text(&read));
    assert!(text(&read).contains("oob: abcd"), "{}", text(&read));
    assert_eq!(&read.stdout[..8], b"one page");

    // Input longer than an explicit range programs nothing.
    std::fs::write(d.join("four.bin"), vec![7u8; 3 * PAGE + 1]).expect("write input");
    let over = quarry(d, &["page", "write", "20..23", &path("four.bin")]);
    assert!(!over.status.success());
    assert!(
        text(&over).contains("linear range 20..23 holds 3 pages"),
        "{}",
        text(&over)
    );
    let untouched = quarry(d, &["page", "read", "20"]);
    assert!(untouched.stdout.iter().all(|&b| b == 0xFF), "still erased");

    // A page out of block order names the linear page and its address.
    let out_of_order = quarry(d, &["page", "write", "100", &path("small.txt")]);
    assert!(!out_of_order.status.success());
    let out = text(&out_of_order);
    assert!(out.contains("linear page 100 (0:1:2:0:1)"), "{out}");
    assert!(out.contains("expects page 0"), "{out}");

    // Bad addresses give clear errors.
    let bad = quarry(d, &["page", "read", "abc"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("expected node:bus:chip:block:page, a linear page N"),
        "{}",
        text(&bad)
    );
    let bad = quarry(d, &["page", "read", "5..3"]);
    assert!(
        text(&bad).contains("linear range 5..3 is empty"),
        "{}",
        text(&bad)
    );
    let bad = quarry(d, &["page", "read", "99999999"]);
    assert!(
        text(&bad).contains("linear page 99999999 is outside the space of 262144 pages"),
        "{}",
        text(&bad)
    );
    let bad = quarry(d, &["page", "read", "262140..262150", "--out", &path("x")]);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("does not fit"), "{}", text(&bad));
    assert!(!d.join("x").exists(), "nothing written for a bad range");
    let bad = quarry(d, &["page", "read", "0..4", "--queue-depth", "0"]);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("--queue-depth"), "{}", text(&bad));

    let down = quarry(d, &["down"]);
    assert!(down.status.success(), "{}", text(&down));
}

#[test]
fn up_with_a_topology_and_status_routes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(
        d,
        &[
            "up",
            "--nodes",
            "4",
            "--topology",
            "ring",
            "--device",
            "mem",
            "--detach",
        ],
    );
    assert!(up.status.success(), "{}", text(&up));
    assert!(text(&up).contains("topology: ring"), "{}", text(&up));

    let routes = quarry(d, &["status", "--routes", "--json"]);
    assert!(routes.status.success(), "{}", text(&routes));
    let value: serde_json::Value =
        serde_json::from_slice(&routes.stdout).expect("status --routes --json is JSON");
    let nodes = value.as_array().expect("one entry per node");
    assert_eq!(nodes.len(), 4);
    let node0 = &nodes[0];
    let links: Vec<u64> = node0["links"]
        .as_array()
        .expect("links")
        .iter()
        .filter_map(|l| l["peer"].as_u64())
        .collect();
    assert_eq!(links, vec![1, 3], "node 0 of a ring links to 1 and 3");
    let to_2 = node0["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .find(|r| r["dest"] == 2)
        .expect("a route to node 2");
    assert_eq!(to_2["hops"], 2);

    let table = quarry(d, &["status", "--routes"]);
    assert!(table.status.success(), "{}", text(&table));
    assert!(text(&table).contains("node 3 ("), "{}", text(&table));

    let down = quarry(d, &["down"]);
    assert!(down.status.success(), "{}", text(&down));

    // Links that leave a node cut off are refused before anything starts.
    let bad = quarry(
        d,
        &[
            "up", "--nodes", "4", "--links", "0-1,2-3", "--device", "mem", "--detach",
        ],
    );
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("node 2 has no path to node 0"),
        "{}",
        text(&bad)
    );
    let bad = quarry(d, &["up", "--nodes", "2", "--links", "0-x", "--detach"]);
    assert!(
        text(&bad).contains("is not of the form A-B"),
        "{}",
        text(&bad)
    );
}

/// A cluster started in the foreground goes away with the process that
/// started it, even when that process is killed outright.
#[test]
fn foreground_cluster_dies_with_its_parent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let mut up = Command::new(env!("CARGO_BIN_EXE_quarry"))
        .args(["up", "--nodes", "2", "--device", "mem"])
        .current_dir(d)
        .env_remove("QUARRY_CLUSTER")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start quarry up");
    let cluster_file = d.join(".quarry/cluster.toml");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !cluster_file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster never came up"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let cluster = quarry_client::ClusterFile::load(&cluster_file).expect("cluster file");
    let pids: Vec<u32> = cluster.nodes.iter().filter_map(|n| n.pid).collect();
    assert_eq!(pids.len(), 2);
    up.kill().expect("SIGKILL quarry up");
    let _ = up.wait();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while pids.iter().any(|pid| quarry_local::process_alive(*pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "nodes {pids:?} outlived the killed `quarry up`"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
