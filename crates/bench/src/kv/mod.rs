//! `quarry bench kv`: the key-value store beside memcached and Redis
//! (docs/benchmarks.md, "Key-value"). Every system runs on this machine
//! as a process of its own; one load generator (this process, [`load`])
//! drives each with the same connections, in the same minute, cell by
//! cell, alternating which goes first.

mod load;
mod peers;
mod shapes;

use std::time::Duration;

use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde_json::json;

use crate::args::BenchKvArgs;
use crate::common::work_dir;
use load::{drive, preload, Mix, Outcome, Target};
use peers::Flush;

/// The workloads of the head-to-head: name, fraction of gets.
const WORKLOADS: [(&str, f64); 4] = [
    ("get", 1.0),
    ("set", 0.0),
    ("ycsb-a", 0.5),
    ("ycsb-b", 0.95),
];

/// Sets in flight per connection while loading the keys.
const PRELOAD_DEPTH: usize = 64;

/// A cell's figures as printed and as JSON.
struct Row {
    section: &'static str,
    case: String,
    system: &'static str,
    conns: usize,
    outcome: Outcome,
    /// ops/s over the peer's in the same cell, for Quarry's rows.
    ratio: Option<f64>,
}

impl Row {
    fn json(&self) -> serde_json::Value {
        json!({
            "section": self.section,
            "case": self.case,
            "system": self.system,
            "conns": self.conns,
            "ops_per_sec": self.outcome.ops_per_sec(),
            "latency_us_p50": self.outcome.latency.quantile_us(0.5),
            "latency_us_p99": self.outcome.latency.quantile_us(0.99),
            "server_cpu_us_per_op": self.outcome.server_cpu_us_per_op(),
            "misses": self.outcome.misses,
            "ratio_to_peer": self.ratio,
        })
    }
}

pub(crate) struct Plan {
    pub(crate) conns: Vec<usize>,
    /// Head-to-head workloads: name, fraction of gets.
    pub(crate) workloads: Vec<(&'static str, f64)>,
    /// Pairs by name: cache, everysec, synced.
    pub(crate) pairs: Vec<&'static str>,
    /// Sections by name: head-to-head, value-sizes, shapes.
    pub(crate) sections: Vec<&'static str>,
    pub(crate) cell: Duration,
    pub(crate) keys: u64,
    pub(crate) sizes: Vec<usize>,
    pub(crate) quick: bool,
}

fn plan(args: &BenchKvArgs) -> Result<Plan> {
    let quick = args.common.quick;
    let conns: Vec<usize> = if quick {
        vec![1, 8]
    } else {
        args.conns
            .split(',')
            .map(|c| c.trim().parse().with_context(|| format!("--conns {c:?}")))
            .collect::<Result<_>>()?
    };
    let workloads = pick(&args.workloads, &WORKLOADS.map(|(w, _)| w), "--workloads")?
        .into_iter()
        .filter_map(|w| WORKLOADS.iter().find(|(n, _)| *n == w).copied())
        .collect();
    let pairs = pick(&args.pairs, &PAIRS, "--pairs")?;
    Ok(Plan {
        conns,
        workloads,
        pairs,
        sections: pick(&args.sections, &SECTIONS, "--sections")?,
        cell: Duration::from_secs_f64(if quick { 0.3 } else { args.secs.max(0.1) }),
        keys: if quick { 2000 } else { args.keys.max(100) },
        sizes: if quick {
            vec![32, 1024, 65536]
        } else {
            vec![32, 256, 1024, 4096, 16384, 65536]
        },
        quick,
    })
}

/// The sections, in the order they run.
const SECTIONS: [&str; 3] = ["head-to-head", "value-sizes", "shapes"];

/// The pairs of the head-to-head, in the order they run.
const PAIRS: [&str; 3] = ["cache", "everysec", "synced"];

/// The names of a comma-separated `list` among `known`, in `known`'s order.
fn pick(list: &str, known: &[&'static str], what: &str) -> Result<Vec<&'static str>> {
    let asked: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = asked.iter().find(|a| !known.contains(a)) {
        anyhow::bail!("{what}: unknown {bad:?}; choose among {}", known.join(", "));
    }
    if asked.is_empty() {
        anyhow::bail!("{what}: name at least one of {}", known.join(", "));
    }
    Ok(known
        .iter()
        .copied()
        .filter(|k| asked.contains(k))
        .collect())
}

/// `quarry bench kv`.
pub fn kv(args: &BenchKvArgs) -> Result<()> {
    let plan = plan(args)?;
    let (dir, _guard) = work_dir(args.common.dir.as_deref(), "quarry-bench-kv")?;
    let exe = quarry_local::quarry_exe()?;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    // Room for every key at the largest value size, twice over.
    let memory_mib = 4096;
    let memcached = peers::memcached(threads, memory_mib)?;
    let redis_everysec = peers::redis(&dir, "everysec")?;
    let redis_always = peers::redis(&dir, "always")?;
    let noisy_ops_per_sec = if plan.quick { 500 } else { 5000 };
    let tenants = peers::tenants_toml(memory_mib << 20, noisy_ops_per_sec);
    let cluster = peers::quarry(&dir, &exe, args.nodes, tenants.clone(), Flush::EveryWrite)?;
    let everysec = peers::quarry(&dir, &exe, args.nodes, tenants, Flush::EverySecond)?;
    let quarry = |tenant: &str| peers::quarry_target(&cluster, 0, tenant);
    let mut rows = Vec::new();
    runtime.block_on(async {
        let all = [
            (
                "memcached",
                memcached.target.clone(),
                "quarry cache",
                quarry("cache")?,
            ),
            (
                "redis aof everysec",
                redis_everysec.target.clone(),
                "quarry durable, 1 s flush",
                peers::quarry_target(&everysec, 0, "durable")?,
            ),
            (
                "redis aof always",
                redis_always.target.clone(),
                "quarry durable, synced",
                quarry("durable")?,
            ),
        ];
        let pairs: Vec<_> = all
            .into_iter()
            .zip(PAIRS)
            .filter(|(_, name)| plan.pairs.contains(name))
            .map(|(pair, _)| pair)
            .collect();
        if plan.sections.contains(&"head-to-head") {
            head_to_head(&plan, &pairs, &mut rows).await?;
        }
        if plan.sections.contains(&"value-sizes") {
            value_sizes(&plan, &pairs, &quarry("nodedup")?, &mut rows).await?;
        }
        anyhow::Ok(())
    })?;
    let extra = if plan.sections.contains(&"shapes") {
        runtime.block_on(shapes::figures(&plan, &cluster, &memcached.target))?
    } else {
        json!({})
    };
    print(&rows, &extra, args.common.json, &plan, args.nodes);
    drop(cluster);
    drop(everysec);
    Ok(())
}

/// Loads the keys into `targets` (1000-byte values, or `value_bytes`).
async fn load_all(targets: &[&Target], mix: Mix) -> Result<()> {
    for t in targets {
        preload(t, mix, 8, PRELOAD_DEPTH).await?;
    }
    Ok(())
}

/// Each workload at each connection count, Quarry beside its peer.
async fn head_to_head(
    plan: &Plan,
    pairs: &[(&'static str, Target, &'static str, Target)],
    rows: &mut Vec<Row>,
) -> Result<()> {
    let base = Mix {
        get_fraction: 1.0,
        zipfian: true,
        value_bytes: 1000,
        keys: plan.keys,
    };
    let all: Vec<&Target> = pairs.iter().flat_map(|(_, a, _, b)| [a, b]).collect();
    load_all(&all, base).await?;
    let mut flip = false;
    for &(workload, get_fraction) in &plan.workloads {
        for &conns in &plan.conns {
            for (peer_name, peer, name, ours) in pairs {
                let mix = Mix {
                    get_fraction,
                    ..base
                };
                flip = !flip;
                let (p, q) = if flip {
                    let p = drive(peer, mix, conns, plan.cell).await?;
                    (p, drive(ours, mix, conns, plan.cell).await?)
                } else {
                    let q = drive(ours, mix, conns, plan.cell).await?;
                    (drive(peer, mix, conns, plan.cell).await?, q)
                };
                let ratio = q.ops_per_sec() / p.ops_per_sec().max(1e-9);
                let case = workload.to_string();
                rows.push(Row {
                    section: "head-to-head",
                    case: case.clone(),
                    system: peer_name,
                    conns,
                    outcome: p,
                    ratio: None,
                });
                rows.push(Row {
                    section: "head-to-head",
                    case,
                    system: name,
                    conns,
                    outcome: q,
                    ratio: Some(ratio),
                });
            }
        }
    }
    Ok(())
}

/// Sets then gets of each value size at 32 connections (8 with --quick),
/// every system, and Quarry without dedup (Multes++ Fig. 6).
async fn value_sizes(
    plan: &Plan,
    pairs: &[(&'static str, Target, &'static str, Target)],
    nodedup: &Target,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let conns = if plan.quick { 8 } else { 32 };
    let mut systems: Vec<(&'static str, &Target)> = Vec::new();
    for (pn, p, qn, q) in pairs {
        systems.push((pn, p));
        systems.push((qn, q));
    }
    systems.push(("quarry no dedup", nodedup));
    for &size in &plan.sizes {
        // Few keys: 1000 of the largest values is 64 MiB a system.
        let keys = (plan.keys.min(64 << 20 >> size.trailing_zeros().max(10))).max(100);
        for (get_fraction, case) in [(0.0, "set"), (1.0, "get")] {
            for (name, target) in &systems {
                let mix = Mix {
                    get_fraction,
                    zipfian: false,
                    value_bytes: size,
                    keys,
                };
                if get_fraction > 0.5 {
                    preload(target, mix, 8, PRELOAD_DEPTH).await?;
                }
                let outcome = drive(target, mix, conns, plan.cell).await?;
                rows.push(Row {
                    section: "value sizes",
                    case: format!("{case} {size} B"),
                    system: name,
                    conns,
                    outcome,
                    ratio: None,
                });
            }
        }
    }
    Ok(())
}

fn print(rows: &[Row], extra: &serde_json::Value, as_json: bool, plan: &Plan, nodes: u16) {
    if as_json {
        let doc = json!({
            "nodes": nodes,
            "cell_secs": plan.cell.as_secs_f64(),
            "keys": plan.keys,
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
            "figures": extra,
        });
        println!("{doc}");
        return;
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "section",
        "case",
        "conns",
        "system",
        "ops/s",
        "MB/s",
        "p50 us",
        "p99 us",
        "server CPU us/op",
        "x peer",
    ]);
    for r in rows {
        let bytes = r
            .case
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(1000.0);
        table.add_row([
            r.section.to_string(),
            r.case.clone(),
            r.conns.to_string(),
            r.system.to_string(),
            format!("{:.0}", r.outcome.ops_per_sec()),
            format!("{:.1}", r.outcome.ops_per_sec() * bytes / 1e6),
            format!("{:.0}", r.outcome.latency.quantile_us(0.5)),
            format!("{:.0}", r.outcome.latency.quantile_us(0.99)),
            format!("{:.1}", r.outcome.server_cpu_us_per_op()),
            r.ratio.map_or(String::new(), |x| format!("{x:.2}x")),
        ]);
    }
    println!(
        "Quarry: {nodes} node(s) on this machine; memcached, Redis and the load generator too \
         (one process each, sharing the cores); {:.1} s a cell, {} keys",
        plan.cell.as_secs_f64(),
        plan.keys
    );
    println!("{table}");
    println!(
        "{}",
        serde_json::to_string_pretty(extra).unwrap_or_default()
    );
}
