//! `quarry bench query`: SQL near the data (issue 21) against DuckDB.
//! TPC-H `lineitem` (tpchgen-cli, from the Python environment) is stored
//! page by page on a 4-node cluster. Table 1: one column read from its
//! pages vs the whole file. Table 2: TPC-H Q1, Q6 and a selective GROUP
//! BY near the data vs DuckDB reading the object through fsspec
//! (`quarry://`) vs DuckDB on a local copy, on loopback and with the
//! client's link limited by `tc`; every row with the bytes it moved. Each
//! round runs every side once, so the two sides of a ratio share a minute.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{BucketName, Client, Condition, Job, Limits, ObjectKey, Outcome, QuerySpec};
use serde::Serialize;

use crate::args::BenchQueryArgs;
use crate::common::{work_dir, CountingSink};
use crate::compute::{client_net, links, on_link, runtime, Link};
use crate::measure::median;
use crate::netlink::ClientNet;
use quarry_client::file_source;
use quarry_jobs::human_bytes;
use quarry_local::LocalCluster;

const BUCKET: &str = "tpch";
const KEY: &str = "lineitem.parquet";

/// The queries: TPC-H Q1 and Q6 as the specification writes them, and a
/// GROUP BY over a few percent of the rows.
const QUERIES: [(&str, &str); 3] = [
    (
        "Q1",
        "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, \
         sum(l_extendedprice) AS sum_base_price, \
         sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price, \
         sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, \
         avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price, \
         avg(l_discount) AS avg_disc, count(*) AS count_order \
         FROM 'tpch/lineitem.parquet' WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY \
         GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    ),
    (
        "Q6",
        "SELECT sum(l_extendedprice * l_discount) AS revenue FROM 'tpch/lineitem.parquet' \
         WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' \
         AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
    ),
    (
        "selective GROUP BY",
        "SELECT l_shipmode, count(*) AS n, sum(l_extendedprice) AS total \
         FROM 'tpch/lineitem.parquet' \
         WHERE l_shipdate BETWEEN DATE '1995-03-01' AND DATE '1995-03-31' AND l_quantity < 10 \
         GROUP BY l_shipmode ORDER BY l_shipmode",
    ),
];

/// The DuckDB peers, run by the environment's Python.
const PEER_SCRIPT: &str = include_str!("../peers/duckdb_query.py");

#[derive(Debug, Clone, Serialize)]
struct Row {
    link: String,
    query: &'static str,
    way: &'static str,
    seconds: f64,
    /// Seconds of DuckDB through fsspec on the same link (the faster of
    /// its two caches) over these.
    x_vs_fsspec: f64,
    /// These seconds over DuckDB's on a local copy.
    x_of_local: f64,
    /// None where the peer does not say (DuckDB reads what it fetched
    /// or the local file).
    bytes_from_devices: Option<u64>,
    bytes_between_nodes: Option<u64>,
    bytes_to_client: u64,
}

/// A program of the Python environment the README's setup makes
/// (`.venv` at the repository's root, found from this executable, or
/// `$QUARRY_VENV`).
fn venv_program(name: &str) -> Result<PathBuf> {
    if let Some(v) = std::env::var_os("QUARRY_VENV") {
        return Ok(Path::new(&v).join("bin").join(name));
    }
    let exe = std::env::current_exe().context("where this program is")?;
    for dir in exe.ancestors() {
        let p = dir.join(".venv").join("bin").join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "no .venv/bin/{name} above {}: run scripts/setup.sh (it makes .venv) or set QUARRY_VENV",
        exe.display()
    )
}

/// TPC-H lineitem at scale factor `scale` in `dir`, row groups of about
/// 32 MB so the nodes share the work.
fn lineitem(dir: &Path, scale: f64) -> Result<PathBuf> {
    let out = Command::new(venv_program("tpchgen-cli")?)
        .args(["parquet", "-s", &scale.to_string(), "--tables=lineitem"])
        .args(["--row-group-bytes=32MB", "--output-dir"])
        .arg(dir)
        .output()
        .context("running tpchgen-cli")?;
    if !out.status.success() {
        bail!(
            "tpchgen-cli failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(dir.join("lineitem.parquet"))
}

/// One query near the data: seconds, the answer as CSV, and the outcome's
/// bytes (from devices, between nodes, to the client).
async fn near(client: &Client, sql: &str) -> Result<(f64, String, [u64; 3])> {
    let started = Instant::now();
    let (result, sent) = client
        .compute()
        .run(
            Job::Query(QuerySpec { sql: sql.into() }),
            Vec::new(),
            Limits::default(),
        )
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    let Outcome::Query(q) = result.outcome else {
        bail!("a query answered something else");
    };
    let batch = quarry_query::decode_ipc(&q.arrow_ipc)?;
    let csv = String::from_utf8(quarry_query::write(&batch, quarry_query::Format::Csv)?)?;
    Ok((
        seconds,
        csv,
        [q.bytes_from_devices, q.bytes_between_nodes, sent],
    ))
}

#[derive(serde::Deserialize)]
struct PeerAnswer {
    seconds: Vec<f64>,
    bytes_fetched: Vec<u64>,
    rows: Vec<Vec<String>>,
}

/// Runs the DuckDB peer (`mode` fsspec, fsspec_exact or local) over every
/// query: one unmeasured round, then one measured.
fn duckdb(mode: &str, address: &str, path: &str) -> Result<Vec<PeerAnswer>> {
    let request = serde_json::json!({
        "mode": mode,
        "address": address,
        "path": path,
        // One measured round a call: the rounds interleave with the other
        // sides' ([`measure_link`]).
        "rounds": 1,
        "queries": QUERIES.iter().map(|(_, q)| *q).collect::<Vec<_>>(),
    });
    let mut child = Command::new(venv_program("python")?)
        .args(["-c", PEER_SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the DuckDB peer")?;
    child
        .stdin
        .take()
        .context("the peer's stdin")?
        .write_all(request.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "the DuckDB peer ({mode}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("the DuckDB peer's answer")
}

/// Whether Quarry's CSV answer holds DuckDB's rows: same count, numbers
/// equal to 1e-6 relative, the rest equal as text.
fn same_answer(csv: &str, rows: &[Vec<String>]) -> bool {
    let ours: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    ours.len() == rows.len()
        && ours.iter().zip(rows).all(|(a, b)| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| match (x.parse::<f64>(), y.parse::<f64>()) {
                        (Ok(p), Ok(q)) => (p - q).abs() <= 1e-6 * p.abs().max(q.abs()).max(1.0),
                        _ => x == y,
                    })
        })
}

/// `quarry bench query`.
pub fn query(args: &BenchQueryArgs) -> Result<()> {
    let scale = if args.common.quick { 0.05 } else { args.scale };
    let links = links(&args.links)?;
    let (dir, _scratch) = work_dir(args.common.dir.as_deref(), "quarry-bench-query")?;
    let file = lineitem(&dir, scale)?;
    let file_bytes = std::fs::metadata(&file)
        .with_context(|| format!("{}", file.display()))?
        .len();
    let cluster = crate::compute::mem_cluster(&dir, file_bytes, 3)?;
    let members: Vec<u16> = cluster.cluster.nodes.iter().map(|n| n.id).collect();
    let entry: std::net::SocketAddr = cluster.cluster.nodes[0].addr.parse()?;
    if !args.common.json {
        eprintln!(
            "bench query: TPC-H lineitem at scale {scale} ({}) on a 4-node cluster (mem backend), \
             parquet chunking; links: {}",
            human_bytes(file_bytes),
            links
                .iter()
                .map(|l| l.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let rt = runtime()?;
    let columns = rt.block_on(async {
        let client = Client::connect(&entry.to_string())
            .await?
            .with_members(members.clone());
        let objects = client.objects().await?;
        let b = BucketName::new(BUCKET)?;
        objects
            .create_bucket(&b, quarry_jobs::parse_chunking("parquet")?)
            .await?;
        let k = ObjectKey::new(KEY)?;
        let f = std::fs::File::open(&file)?;
        objects
            .put(&b, &k, file_source(f), Condition::Always)
            .await?;
        column_table(&client, &b, &k, args.rounds).await
    })?;
    let mut net = client_net(&links)?;
    let mut rows = Vec::new();
    for link in &links {
        let way = client_way(entry, &cluster, &mut net, link)?;
        let m = on_link(link, net.as_ref(), || {
            measure_link(&way, &members, args.rounds, &file.to_string_lossy())
        })?;
        for (i, (name, _)) in QUERIES.iter().enumerate() {
            let (near_s, csv, moved) = &m.near[i];
            let fs = &m.fsspec[i];
            let exact = &m.fsspec_exact[i];
            let local = &m.local;
            for (w, rows_peer) in [
                ("fsspec", &fs.rows),
                ("fsspec, no cache", &exact.rows),
                ("local", &local[i].rows),
            ] {
                if !same_answer(csv, rows_peer) {
                    bail!("{name}: Quarry answered\n{csv}\nDuckDB ({w}) {rows_peer:?}");
                }
            }
            let readahead_s = median(&mut fs.seconds.clone());
            let exact_s = median(&mut exact.seconds.clone());
            let fs_s = readahead_s.min(exact_s);
            let local_s = median(&mut local[i].seconds.clone());
            let fetched = fs.bytes_fetched.last().copied().unwrap_or(0);
            let fetched_exact = exact.bytes_fetched.last().copied().unwrap_or(0);
            for (way_name, s, bytes) in [
                (
                    "near the data",
                    *near_s,
                    (Some(moved[0]), Some(moved[1]), moved[2]),
                ),
                (
                    "DuckDB through fsspec (read-ahead cache)",
                    readahead_s,
                    (None, None, fetched),
                ),
                (
                    "DuckDB through fsspec (no cache)",
                    exact_s,
                    (None, None, fetched_exact),
                ),
                ("DuckDB on a local copy", local_s, (None, None, 0)),
            ] {
                rows.push(Row {
                    link: link.name.clone(),
                    query: name,
                    way: way_name,
                    seconds: s,
                    x_vs_fsspec: fs_s / s,
                    x_of_local: s / local_s,
                    bytes_from_devices: bytes.0,
                    bytes_between_nodes: bytes.1,
                    bytes_to_client: bytes.2,
                });
            }
        }
    }
    report(args.common.json, &columns, &rows)
}

/// A link's rounds: near the data (median seconds, answer, bytes), and
/// DuckDB through fsspec and on a local copy, per query.
struct LinkRun {
    near: Vec<(f64, String, [u64; 3])>,
    fsspec: Vec<PeerAnswer>,
    fsspec_exact: Vec<PeerAnswer>,
    /// DuckDB on a local copy, in the same rounds.
    local: Vec<PeerAnswer>,
}

/// How the client reaches the cluster on one link.
struct ClientWay {
    entry: std::net::SocketAddr,
    /// The members' addresses, when the client may dial them (loopback).
    members_direct: Vec<(u16, String)>,
}

fn client_way(
    entry: std::net::SocketAddr,
    cluster: &LocalCluster,
    net: &mut Option<ClientNet>,
    link: &Link,
) -> Result<ClientWay> {
    match (&link.rate, net.as_mut()) {
        (None, _) => Ok(ClientWay {
            entry,
            members_direct: crate::compute::member_addrs(cluster),
        }),
        (Some(rate), Some(n)) => {
            n.limit(Some(rate))?;
            Ok(ClientWay {
                entry: n.relay(entry)?,
                members_direct: Vec::new(),
            })
        }
        (Some(_), None) => bail!("no client namespace"),
    }
}

/// The rounds on one link. Each round runs every query near the data, then
/// each DuckDB peer once, so both sides of every ratio are measured in the
/// same minute (this VM's speed moves by 10-40% between minutes).
fn measure_link(
    way: &ClientWay,
    members: &[u16],
    rounds: u32,
    local_file: &str,
) -> Result<LinkRun> {
    let rt = runtime()?;
    let client = rt
        .block_on(Client::connect(&way.entry.to_string()))?
        .with_members(members.iter().copied());
    let client = if way.members_direct.is_empty() {
        client
    } else {
        client.with_member_addrs(way.members_direct.iter().cloned())
    };
    // One round unmeasured first, as the DuckDB peers do: the first query
    // after the put pays for warming the nodes.
    for (_, sql) in QUERIES {
        rt.block_on(near(&client, sql))?;
    }
    let entry = way.entry.to_string();
    let object = format!("{BUCKET}/{KEY}");
    let mut near_secs = vec![Vec::new(); QUERIES.len()];
    let mut near_last = vec![None; QUERIES.len()];
    let (mut fsspec, mut fsspec_exact, mut local) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        for (i, (_, sql)) in QUERIES.iter().enumerate() {
            let (s, csv, moved) = rt.block_on(near(&client, sql))?;
            near_secs[i].push(s);
            near_last[i] = Some((csv, moved));
        }
        add_round(&mut fsspec, duckdb("fsspec", &entry, &object)?);
        add_round(&mut fsspec_exact, duckdb("fsspec_exact", &entry, &object)?);
        add_round(&mut local, duckdb("local", "", local_file)?);
    }
    let mut near_rows = Vec::new();
    for (secs, last) in near_secs.iter_mut().zip(near_last) {
        let Some((csv, moved)) = last else {
            bail!("no round ran");
        };
        near_rows.push((median(secs), csv, moved));
    }
    Ok(LinkRun {
        near: near_rows,
        fsspec,
        fsspec_exact,
        local,
    })
}

/// A peer's answers of one more round added to those of the rounds before.
fn add_round(all: &mut Vec<PeerAnswer>, round: Vec<PeerAnswer>) {
    if all.is_empty() {
        *all = round;
        return;
    }
    for (a, r) in all.iter_mut().zip(round) {
        a.seconds.extend(r.seconds);
        a.bytes_fetched.extend(r.bytes_fetched);
        a.rows = r.rows;
    }
}

/// One column read from its pages vs the whole object: (seconds, bytes)
/// of each, medians over `rounds`.
async fn column_table(
    client: &Client,
    b: &BucketName,
    k: &ObjectKey,
    rounds: u32,
) -> Result<[(f64, u64); 2]> {
    let objects = client.objects().await?;
    let (mut one, mut whole) = (Vec::new(), Vec::new());
    let (mut one_bytes, mut whole_bytes) = (0, 0);
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let read = objects
            .get_columns(b, k, &["l_quantity".to_string()], &[])
            .await?;
        one.push(started.elapsed().as_secs_f64());
        one_bytes = read.bytes_read;
        let started = Instant::now();
        let mut sink = CountingSink::default();
        objects.get_to(b, k, 0, u64::MAX, &mut sink).await?;
        whole.push(started.elapsed().as_secs_f64());
        whole_bytes = sink.bytes;
    }
    Ok([
        (median(&mut one), one_bytes),
        (median(&mut whole), whole_bytes),
    ])
}

fn report(json: bool, columns: &[(f64, u64); 2], rows: &[Row]) -> Result<()> {
    if json {
        let out = serde_json::json!({
            "one_column": {"seconds": columns[0].0, "bytes": columns[0].1},
            "whole_file": {"seconds": columns[1].0, "bytes": columns[1].1},
            "queries": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(["read (loopback)", "seconds", "bytes read", "vs whole file"]);
    for (name, (s, b)) in [
        ("one column (l_quantity)", columns[0]),
        ("the whole file", columns[1]),
    ] {
        t.add_row([
            name.to_string(),
            format!("{s:.3}"),
            human_bytes(b),
            format!(
                "{:.3} of the bytes, {:.1}x faster",
                b as f64 / columns[1].1.max(1) as f64,
                columns[1].0 / s
            ),
        ]);
    }
    println!("one column vs the whole file:\n{t}");
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "client link",
        "query",
        "how",
        "seconds",
        "x vs fsspec",
        "x of local",
        "from devices",
        "between nodes",
        "to client",
    ]);
    for r in rows {
        t.add_row([
            r.link.clone(),
            r.query.to_string(),
            r.way.to_string(),
            format!("{:.3}", r.seconds),
            format!("{:.2}", r.x_vs_fsspec),
            format!("{:.2}", r.x_of_local),
            r.bytes_from_devices.map_or("-".into(), human_bytes),
            r.bytes_between_nodes.map_or("-".into(), human_bytes),
            human_bytes(r.bytes_to_client),
        ]);
    }
    println!(
        "queries near the data vs DuckDB (x vs fsspec: the faster DuckDB-through-fsspec \
         seconds over these; x of local: these over DuckDB on a local copy):\n{t}"
    );
    Ok(())
}
