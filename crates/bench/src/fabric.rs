//! `quarry bench fabric`: the storage fabric's figures (issue 3), measured on
//! local clusters of real `quarry node` processes whose devices are the
//! `nand` emulator with BlueDBM's timing (27 us reads, 25 MB/s per bus), so
//! the device, not the CPU, is what a run saturates:
//!
//! 1. **Latency vs hops** (BlueDBM Fig. 8, RFSA Fig. 8): a 4-node line, QD1
//!    reads entering at node 0 of pages 0..3 hops away; mean, p50, p99 per
//!    hop count, the least-squares slope and the step deltas. The same on the
//!    `mem` backend, where no device time hides anything, and side by side
//!    the floor of a hop on this machine: chains of blocking relay threads
//!    on loopback TCP (bare, and with answers held for the device time).
//! 2. **Bandwidth vs nodes** (BlueDBM Fig. 9b): one client reading the linear
//!    page space sequentially over a mesh of 1, 2 and 4 nodes, against the
//!    1-node figure and the device's modeled peak.
//! 3. **Multi-access** (RFSA Fig. 7): one host on many nodes (part 2), many
//!    hosts on one node (each host's share), many hosts on many nodes
//!    (aggregate against the sum of the nodes' bandwidths alone).
//! 4. **QD1 under load**: QD1 reads of node 1 entering at node 0 of a line,
//!    alone and while another client streams node 2's pages over the same
//!    link (and, as a variant, node 1's pages, sharing its device).
//!
//! Concurrent hosts each run on their own thread and runtime, so one host's
//! answers do not queue behind another's in this process. Bandwidth runs
//! and load cases also report the CPU the nodes and this process used, which
//! tells a device-bound figure from a CPU-bound one on a small machine. A benchmark reports
//! figures and states its goals; it asserts nothing about time.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use futures::stream::{FuturesUnordered, StreamExt};
use quarry_client::{Client, LinearSpace, Request};
use quarry_device::{BackendKind, Geometry, NandTiming, PageAddr, Preset, SlotLayout};
use quarry_fabric::TopologyKind;
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, NodeId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::args::{BenchFabricArgs, FabricPart};
use crate::common::{process_ticks, ticks_per_sec, work_dir};
use crate::measure::{mib_per_s, MIB};
use crate::plot::{HLine, LinePlot, Series};
use crate::stats::LatencyStats;
use quarry_jobs::human_bytes;
use quarry_local::quarry_exe;
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

/// Goal of part 1: added latency per hop at most this (least-squares slope
/// of the mean).
const HOP_GOAL_US: f64 = 20.0;
/// Goal of part 2: 4 nodes at least this many times 1 node.
const SCALING_GOAL_AT_4: f64 = 3.6;
/// Goal of part 3b: the smallest host share at least this share of the largest.
const SHARE_GOAL_MIN_MAX: f64 = 0.9;
/// Goal of part 3c: aggregate at least this share of the nodes' sum alone.
const AGGREGATE_GOAL: f64 = 0.9;
/// Goal of part 4: loaded p99 at most this many times the unloaded p99.
const LOAD_GOAL_RATIO: f64 = 2.0;
/// Page size of every run: the nand model moves it with its spare area in
/// ~360 us per bus at BlueDBM's 25 MB/s.
const PAGE_BYTES: u32 = 8192;
const PAGES_PER_BLOCK: u32 = 64;
/// Erases and programs in flight while filling.
const FILL_QUEUE_DEPTH: usize = 64;
/// Nodes of the bandwidth sweep (and of the multi-access mesh: the last).
const SWEEP_NODES: [u16; 3] = [1, 2, 4];
/// The load of part 4 runs this long before the QD1 reads start.
const LOAD_WARMUP: Duration = Duration::from_millis(200);

/// How much of everything to do: the full run or `--quick`.
struct Plan {
    pages_per_node: u64,
    reads: u64,
    seconds: f64,
    /// In flight per node of the target set.
    depth_per_node: usize,
    /// Unloaded / loaded alternations in part 4.
    load_rounds: u32,
    geometry: Geometry,
}

impl Plan {
    fn new(args: &BenchFabricArgs) -> Result<Plan> {
        if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 600.0) {
            bail!(
                "--seconds {} is out of range: give 0 < seconds <= 600",
                args.seconds
            );
        }
        let (pages_per_node, reads, seconds, load_rounds) = if args.common.quick {
            (args.pages_per_node.min(64), args.reads.min(40), 0.25, 1)
        } else {
            (args.pages_per_node, args.reads, args.seconds, 2)
        };
        let row = u64::from(args.buses * args.chips * PAGES_PER_BLOCK);
        let blocks_needed = pages_per_node.div_ceil(row) as u32;
        // Room for the factory-bad blocks the preset marks (0.5%).
        let geometry = Geometry {
            buses: args.buses,
            chips_per_bus: args.chips,
            blocks_per_chip: (blocks_needed + 8).max(16),
            pages_per_block: PAGES_PER_BLOCK,
            page_size_bytes: PAGE_BYTES,
            oob_size_bytes: 64,
        };
        geometry
            .validate()
            .map_err(|e| anyhow::anyhow!("benchmark geometry: {e}"))?;
        Ok(Plan {
            pages_per_node,
            reads,
            seconds,
            depth_per_node: (args.queue_depth * args.buses) as usize,
            load_rounds,
            geometry,
        })
    }
}

/// Everything `--json` prints.
#[derive(Debug, Serialize)]
struct Report {
    quick: bool,
    preset: &'static str,
    geometry: Geometry,
    pages_per_node: u64,
    /// Page data per second one node's buses can move (modeled).
    device_peak_mib_per_s_per_node: f64,
    /// Device time of one idle QD1 read (command + tR + transfer), modeled.
    device_read_us: f64,
    latency: Option<LatencyReport>,
    bandwidth: Option<BandwidthReport>,
    multi_access: Option<MultiReport>,
    load: Option<LoadReport>,
}

#[derive(Debug, Serialize)]
struct LatencyReport {
    topology: String,
    entry_node: NodeId,
    goal_us_per_hop: f64,
    backends: Vec<HopSeries>,
}

#[derive(Debug, Serialize)]
struct HopSeries {
    backend: String,
    rows: Vec<HopRow>,
    /// Least-squares slope of the mean over hop counts: latency added per hop.
    slope_us_per_hop_mean: f64,
    slope_us_per_hop_p50: f64,
    /// mean(h) - mean(h-1) for h = 1..
    step_us_mean: Vec<f64>,
    goal_met: bool,
    /// The floor series this one compares with (nand: the relay chain whose
    /// server holds answers for the device time; mem: the bare relay chain).
    floor: Option<String>,
    /// slope / the floor's slope.
    ratio_to_floor: Option<f64>,
}

#[derive(Debug, Serialize)]
struct HopRow {
    hops: u8,
    node: NodeId,
    reads: u64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Debug, Serialize)]
struct BandwidthReport {
    topology: String,
    entry_node: NodeId,
    rows: Vec<BandwidthRow>,
    goal_ratio_at_4: f64,
    ratio_at_4: Option<f64>,
    goal_met: bool,
}

#[derive(Debug, Serialize)]
struct BandwidthRow {
    nodes: u16,
    queue_depth: usize,
    pages: u64,
    seconds: f64,
    mib_per_s: f64,
    /// This row over the 1-node row.
    ratio_to_one_node: f64,
    /// ratio / nodes.
    linear_fraction: f64,
    /// Nodes x the modeled per-node peak.
    modeled_peak_mib_per_s: f64,
    peak_fraction: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    /// Cores the nodes and the benchmark kept busy during the run.
    cpu_cores: f64,
    /// Page data that reached the client.
    client_bytes: u64,
    /// Page data that crossed a fabric link, counted once per link crossed.
    fabric_bytes: u64,
}

#[derive(Debug, Serialize)]
struct MultiReport {
    topology: String,
    nodes: u16,
    /// One host, many nodes: part 2's 4-node row over its 1-node row.
    one_host_ratio_at_4: Option<f64>,
    many_to_one: ManyToOne,
    many_to_many: ManyToMany,
}

#[derive(Debug, Serialize)]
struct HostRow {
    host: usize,
    entry_node: NodeId,
    queue_depth: usize,
    pages: u64,
    mib_per_s: f64,
    /// Of the run's total.
    share: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    fabric_bytes: u64,
}

#[derive(Debug, Serialize)]
struct ManyToOne {
    target: NodeId,
    /// The target's bandwidth to one local host alone (same total depth).
    alone_mib_per_s: f64,
    hosts: Vec<HostRow>,
    total_mib_per_s: f64,
    /// total / alone.
    total_fraction_of_alone: f64,
    /// Smallest host over largest host.
    min_max_ratio: f64,
    goal_min_max_ratio: f64,
    goal_met: bool,
}

#[derive(Debug, Serialize)]
struct ManyToMany {
    /// Each node alone, read by a host entering at it.
    alone: Vec<NodeAlone>,
    sum_alone_mib_per_s: f64,
    hosts: Vec<HostRow>,
    aggregate_mib_per_s: f64,
    /// aggregate / sum alone.
    fraction: f64,
    goal_fraction: f64,
    goal_met: bool,
}

#[derive(Debug, Serialize)]
struct NodeAlone {
    node: NodeId,
    mib_per_s: f64,
}

#[derive(Debug, Serialize)]
struct LoadReport {
    topology: String,
    entry_node: NodeId,
    qd1_target: NodeId,
    stream_queue_depth: usize,
    goal_ratio_max: f64,
    backends: Vec<LoadSeries>,
}

#[derive(Debug, Serialize)]
struct LoadSeries {
    backend: String,
    unloaded: LatencyRow,
    /// Cores the nodes and the benchmark kept busy during the unloaded reads.
    unloaded_cpu_cores: f64,
    cases: Vec<LoadCase>,
    /// The link-only case (stream on another node's device) meets the goal.
    goal_met: bool,
}

#[derive(Debug, Serialize)]
struct LoadCase {
    name: String,
    stream_target: NodeId,
    stream_mib_per_s: f64,
    /// Cores the nodes and the benchmark kept busy while the QD1 reads ran.
    cpu_cores: f64,
    qd1: LatencyRow,
    /// Loaded p99 over unloaded p99.
    p99_ratio: f64,
    /// Loaded p50 over unloaded p50.
    p50_ratio: f64,
}

#[derive(Debug, Serialize, Clone, Copy)]
struct LatencyRow {
    reads: u64,
    mean_us: f64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
}

impl LatencyRow {
    fn of(stats: &LatencyStats) -> LatencyRow {
        LatencyRow {
            reads: stats.count(),
            mean_us: stats.mean_us(),
            p50_us: stats.quantile_us(0.5),
            p90_us: stats.quantile_us(0.9),
            p99_us: stats.quantile_us(0.99),
            p999_us: stats.quantile_us(0.999),
            max_us: stats.quantile_us(1.0),
        }
    }
}

/// Runs the fabric benchmark.
pub fn fabric(args: &BenchFabricArgs) -> Result<()> {
    let plan = Plan::new(args)?;
    let wants = |part: FabricPart| args.only.is_empty() || args.only.contains(&part);
    let (root, _scratch) = work_dir(args.common.dir.as_deref(), "quarry-bench-fabric")?;
    if let Some(dir) = &args.plot_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the plot directory {}", dir.display()))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let layout = SlotLayout::new(&plan.geometry).map_err(|e| anyhow::anyhow!("{e}"))?;
    let timing = NandTiming::preset(Preset::Bluedbm, layout.used_bytes as u64);
    let peak_page_bytes_per_s = timing.peak_bus_bandwidth(&plan.geometry) as f64
        * f64::from(PAGE_BYTES)
        / layout.used_bytes as f64;
    let mut report = Report {
        quick: args.common.quick,
        preset: "bluedbm",
        geometry: plan.geometry,
        pages_per_node: plan.pages_per_node,
        device_peak_mib_per_s_per_node: peak_page_bytes_per_s / MIB,
        device_read_us: timing.read_device_time().as_secs_f64() * 1e6,
        latency: None,
        bandwidth: None,
        multi_access: None,
        load: None,
    };

    if wants(FabricPart::Latency) || wants(FabricPart::Load) {
        latency_and_load(args, &plan, &runtime, &root, &mut report)?;
    }
    if wants(FabricPart::Bandwidth) || wants(FabricPart::Multi) {
        bandwidth_and_multi(args, &plan, &runtime, &root, &mut report)?;
    }

    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if let Some(dir) = &args.plot_dir {
        for (name, plot) in plots(&report) {
            let path = dir.join(name);
            std::fs::write(&path, plot.to_svg())
                .with_context(|| format!("cannot write the plot {}", path.display()))?;
            if !args.common.json {
                println!("plot: {}", path.display());
            }
        }
    }
    Ok(())
}

/// QD1 latency vs hops on a 4-node line, with the TCP relay floors, and
/// QD1 latency under a competing stream, into `report`.
fn latency_and_load(
    args: &BenchFabricArgs,
    plan: &Plan,
    runtime: &tokio::runtime::Runtime,
    root: &Path,
    report: &mut Report,
) -> Result<()> {
    let wants = |part: FabricPart| args.only.is_empty() || args.only.contains(&part);
    let mut hop_series = Vec::new();
    let mut load_series = Vec::new();
    for backend in [BackendKind::Nand, BackendKind::Mem] {
        let name = format!("line-{}", backend_name(backend));
        let mut bed = Bed::start(
            runtime,
            &root.join(&name),
            4,
            TopologyKind::Line,
            backend,
            plan,
        )?;
        if wants(FabricPart::Latency) {
            eprintln!("bench fabric: QD1 latency vs hops, {}", bed.describe());
            let series = runtime.block_on(latency_vs_hops(&bed, plan));
            let series = bed.check(series)?;
            hop_series.push(series);
        }
        if wants(FabricPart::Load) {
            eprintln!("bench fabric: QD1 under load, {}", bed.describe());
            let series = runtime.block_on(qd1_under_load(&bed, plan));
            let series = bed.check(series)?;
            load_series.push(series);
        }
        bed.stop()?;
    }
    if wants(FabricPart::Latency) {
        eprintln!("bench fabric: QD1 latency vs hops, blocking TCP relays (the floor)");
        hop_series.push(tcp_relay_floor(plan, Duration::ZERO, FLOOR_BACKEND)?);
        // The same with the answer held for the modeled device time: the
        // relays' cores fall idle meanwhile, as the nodes' do on nand.
        let device = Duration::from_secs_f64(report.device_read_us / 1e6);
        hop_series.push(tcp_relay_floor(plan, device, FLOOR_DEVICE_BACKEND)?);
    }
    let slope_of = |name: &str, all: &[HopSeries]| {
        all.iter()
            .find(|s| s.backend == name)
            .map(|s| s.slope_us_per_hop_mean)
    };
    for i in 0..hop_series.len() {
        let floor = match hop_series[i].backend.as_str() {
            "nand" => FLOOR_DEVICE_BACKEND,
            "mem" => FLOOR_BACKEND,
            _ => continue,
        };
        if let Some(slope) = slope_of(floor, &hop_series) {
            hop_series[i].ratio_to_floor = Some(hop_series[i].slope_us_per_hop_mean / slope);
            hop_series[i].floor = Some(floor.into());
        }
    }
    if !hop_series.is_empty() {
        report.latency = Some(LatencyReport {
            topology: "line 0-1-2-3".into(),
            entry_node: 0,
            goal_us_per_hop: HOP_GOAL_US,
            backends: hop_series,
        });
    }
    if !load_series.is_empty() {
        report.load = Some(LoadReport {
            topology: "line 0-1-2-3 (the QD1 reads and the stream enter at node 0)".into(),
            entry_node: 0,
            qd1_target: 1,
            stream_queue_depth: plan.depth_per_node,
            goal_ratio_max: LOAD_GOAL_RATIO,
            backends: load_series,
        });
    }
    Ok(())
}

/// Bandwidth of one client over 1, 2 and 4 nodes, and many hosts on one and
/// on many nodes, into `report`.
fn bandwidth_and_multi(
    args: &BenchFabricArgs,
    plan: &Plan,
    runtime: &tokio::runtime::Runtime,
    root: &Path,
    report: &mut Report,
) -> Result<()> {
    let wants = |part: FabricPart| args.only.is_empty() || args.only.contains(&part);
    let sweep: Vec<u16> = if wants(FabricPart::Bandwidth) {
        SWEEP_NODES.to_vec()
    } else {
        vec![SWEEP_NODES[SWEEP_NODES.len() - 1]]
    };
    let mut rows = Vec::new();
    for &nodes in &sweep {
        let mut bed = Bed::start(
            runtime,
            &root.join(format!("mesh-{nodes}")),
            nodes,
            TopologyKind::Mesh,
            BackendKind::Nand,
            plan,
        )?;
        if wants(FabricPart::Bandwidth) {
            eprintln!("bench fabric: sequential bandwidth, {}", bed.describe());
            let row = runtime.block_on(one_host_bandwidth(&bed, plan));
            rows.push(bed.check(row)?);
        }
        if wants(FabricPart::Multi) && nodes == sweep[sweep.len() - 1] {
            eprintln!("bench fabric: multi-access, {}", bed.describe());
            let many_to_one = many_hosts_one_node(&bed, plan);
            let many_to_one = bed.check(many_to_one)?;
            let many_to_many = many_hosts_many_nodes(&bed, plan);
            let many_to_many = bed.check(many_to_many)?;
            report.multi_access = Some(MultiReport {
                topology: "mesh".into(),
                nodes,
                one_host_ratio_at_4: None,
                many_to_one,
                many_to_many,
            });
        }
        bed.stop()?;
    }
    if !rows.is_empty() {
        let one = rows[0].mib_per_s;
        for row in &mut rows {
            row.ratio_to_one_node = row.mib_per_s / one;
            row.linear_fraction = row.ratio_to_one_node / f64::from(row.nodes);
        }
        let at_4 = rows
            .iter()
            .find(|r| r.nodes == 4)
            .map(|r| r.ratio_to_one_node);
        if let Some(multi) = &mut report.multi_access {
            multi.one_host_ratio_at_4 = at_4;
        }
        report.bandwidth = Some(BandwidthReport {
            topology: "mesh".into(),
            entry_node: 0,
            goal_ratio_at_4: SCALING_GOAL_AT_4,
            goal_met: at_4.is_some_and(|r| r >= SCALING_GOAL_AT_4),
            ratio_at_4: at_4,
            rows,
        });
    }
    Ok(())
}

fn backend_name(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::File => "file",
        BackendKind::Mem => "mem",
        BackendKind::Nand => "nand",
    }
}

/// A running local cluster with the same region of pages written on every
/// node: linear pages `first..first + count`, which give every node
/// `count / nodes` pages spread over its buses and chips.
struct Bed {
    cluster: LocalCluster,
    backend: BackendKind,
    topology: TopologyKind,
    space: LinearSpace,
    first: u64,
    count: u64,
    /// Hops from each node to each other node, from the nodes' routing tables.
    hops: BTreeMap<(NodeId, NodeId), u8>,
}

impl Bed {
    fn start(
        runtime: &tokio::runtime::Runtime,
        dir: &Path,
        nodes: u16,
        topology: TopologyKind,
        backend: BackendKind,
        plan: &Plan,
    ) -> Result<Bed> {
        // A cluster left by an earlier run with --dir may have another
        // geometry: start afresh.
        if dir.join("node-0").join("node.toml").exists() {
            std::fs::remove_dir_all(dir)
                .with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        let spec = LocalClusterSpec {
            nodes,
            dir: dir.to_path_buf(),
            backend,
            preset: (backend == BackendKind::Nand).then_some(Preset::Bluedbm),
            geometry: Some(plan.geometry),
            capacity_bytes: None,
            direct_io: true,
            topology: Topology::Shape(topology),
            stop_with_this_process: true,
            managed: false,
            ecc: quarry_device::EccMode::Rs,
            kv_toml: None,
            device_toml: None,
        };
        eprintln!(
            "bench fabric: starting a {nodes}-node {} {} cluster in {}",
            format!("{topology:?}").to_lowercase(),
            backend_name(backend),
            dir.display()
        );
        let mut cluster = LocalCluster::start(&spec, &quarry_exe()?)?;
        let prepared = runtime.block_on(prepare(&cluster, nodes, plan));
        let (space, first, count, hops) = with_node_exits(prepared, &mut cluster)?;
        Ok(Bed {
            cluster,
            backend,
            topology,
            space,
            first,
            count,
            hops,
        })
    }

    fn describe(&self) -> String {
        format!(
            "{}-node {} of {}",
            self.nodes().len(),
            format!("{:?}", self.topology).to_lowercase(),
            backend_name(self.backend)
        )
    }

    /// Passes `result` on and, if it is an error, names the nodes that died.
    fn check<T>(&mut self, result: Result<T>) -> Result<T> {
        with_node_exits(result, &mut self.cluster)
    }

    fn stop(self) -> Result<()> {
        self.cluster.stop()
    }

    fn nodes(&self) -> &[NodeId] {
        self.space.nodes()
    }

    fn addr(&self, node: NodeId) -> Result<String> {
        self.cluster
            .cluster
            .nodes
            .iter()
            .find(|n| n.id == node)
            .map(|n| n.addr.clone())
            .with_context(|| format!("node {node} is not in the cluster"))
    }

    /// The written pages, in linear order.
    fn region(&self) -> Result<Vec<GlobalPageAddr>> {
        (self.first..self.first + self.count)
            .map(|l| Ok(self.space.to_global(l)?))
            .collect()
    }

    /// The written pages of `node`, in linear order.
    fn pages_of(&self, node: NodeId) -> Result<Vec<GlobalPageAddr>> {
        Ok(self
            .region()?
            .into_iter()
            .filter(|a| a.node == node)
            .collect())
    }

    fn hops(&self, from: NodeId, to: NodeId) -> u64 {
        if from == to {
            0
        } else {
            u64::from(self.hops.get(&(from, to)).copied().unwrap_or(0))
        }
    }
}

fn with_node_exits<T>(result: Result<T>, cluster: &mut LocalCluster) -> Result<T> {
    result.map_err(|e| {
        let exited = cluster.exited_nodes();
        if exited.is_empty() {
            e
        } else {
            e.context(format!("nodes died: {}", exited.join("; ")))
        }
    })
}

type Prepared = (LinearSpace, u64, u64, BTreeMap<(NodeId, NodeId), u8>);

/// Finds a run of blocks good on every chip of every node, erases it and
/// writes the region's linear pages in order.
async fn prepare(cluster: &LocalCluster, nodes: u16, plan: &Plan) -> Result<Prepared> {
    let entry = &cluster.cluster.nodes[0].addr;
    let client = Client::connect(entry)
        .await
        .with_context(|| format!("cannot connect to node 0 at {entry}"))?;
    let space = client.linear_space().await?;
    if space.nodes().len() != usize::from(nodes) {
        bail!(
            "node 0 knows nodes {:?}, expected {nodes} nodes",
            space.nodes()
        );
    }
    let g = space.geometry();
    let row = u64::from(g.buses * g.chips_per_bus * g.pages_per_block);
    let blocks = plan.pages_per_node.div_ceil(row) as u32;
    let mut bad = Vec::new();
    let mut hops = BTreeMap::new();
    for &node in space.nodes() {
        bad.extend(client.node_info(node).await?.device.bad_blocks);
        for route in client.routes(node).await?.routes {
            hops.insert((node, route.dest), route.hops);
        }
    }
    let start = (0..=g.blocks_per_chip.saturating_sub(blocks))
        .find(|&b0| !bad.iter().any(|a| (b0..b0 + blocks).contains(&a.block)))
        .with_context(|| {
            format!(
                "no {blocks} consecutive blocks are good on every chip of every node \
                 (bad blocks: {bad:?}); write fewer pages per node"
            )
        })?;
    let first = space.to_linear(GlobalPageAddr {
        node: space.nodes()[0],
        page: PageAddr {
            bus: 0,
            chip: 0,
            block: start,
            page: 0,
        },
    })?;
    let count = plan.pages_per_node * u64::from(nodes);
    eprintln!(
        "bench fabric: writing {count} pages ({}) from linear page {first} (blocks {start}..{})",
        human_bytes(count * u64::from(g.page_size_bytes)),
        start + blocks
    );
    let mut erases = Vec::new();
    for &node in space.nodes() {
        for bus in 0..g.buses {
            for chip in 0..g.chips_per_bus {
                for block in start..start + blocks {
                    erases.push(Request::EraseBlock(GlobalBlockAddr {
                        node,
                        block: quarry_device::BlockAddr { bus, chip, block },
                    }));
                }
            }
        }
    }
    let mut in_flight = FuturesUnordered::new();
    for request in erases {
        if in_flight.len() >= FILL_QUEUE_DEPTH {
            if let Some(answer) = in_flight.next().await {
                quarry_client::into_result(answer?).context("erase")?;
            }
        }
        in_flight.push(client.submit(request).await?);
    }
    while let Some(answer) = in_flight.next().await {
        quarry_client::into_result(answer?).context("erase")?;
    }
    let page = g.page_size_bytes as usize;
    let mut data = vec![0u8; count as usize * page];
    for (i, chunk) in data.chunks_mut(page).enumerate() {
        let stamp = format!("fabric bench linear page {} ", first + i as u64);
        for (j, b) in chunk.iter_mut().enumerate() {
            *b = stamp.as_bytes()[j % stamp.len()];
        }
    }
    client
        .write_linear(&space, first, &data, FILL_QUEUE_DEPTH)
        .await?;
    Ok((space, first, count, hops))
}

/// QD1 reads, round robin over `targets` (one random page of each in turn,
/// so drift hits every target alike), `reads` per target.
async fn qd1_reads(
    client: &Client,
    targets: &[Vec<GlobalPageAddr>],
    reads: u64,
    seed: u64,
    stats: &mut [LatencyStats],
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..reads {
        for (pages, stats) in targets.iter().zip(stats.iter_mut()) {
            let addr = pages[rng.gen_range(0..pages.len())];
            let sent = Instant::now();
            let page = client
                .read_page(addr)
                .await
                .with_context(|| format!("cannot read page {addr}"))?;
            stats.record(sent.elapsed());
            if page.erased {
                bail!("page {addr} reads as erased: the fill did not program it");
            }
        }
    }
    Ok(())
}

/// What one streaming host measured.
struct StreamRun {
    pages: u64,
    seconds: f64,
    stats: LatencyStats,
}

impl StreamRun {
    fn mib_per_s(&self) -> f64 {
        mib_per_s(self.pages * u64::from(PAGE_BYTES), self.seconds)
    }
}

/// Reads `pages` in order from `offset`, wrapping, with `depth` in flight,
/// until `duration` has passed or `stop` is set.
async fn stream(
    client: &Client,
    pages: &[GlobalPageAddr],
    offset: usize,
    depth: usize,
    duration: Duration,
    stop: Option<&AtomicBool>,
) -> Result<StreamRun> {
    let mut stats = LatencyStats::new();
    let mut in_flight = FuturesUnordered::new();
    let mut next = offset % pages.len();
    let mut done = 0u64;
    let started = Instant::now();
    let stopped =
        || stop.is_some_and(|s| s.load(Ordering::Relaxed)) || started.elapsed() >= duration;
    loop {
        while in_flight.len() < depth && !stopped() {
            let addr = pages[next];
            next = (next + 1) % pages.len();
            let sent = Instant::now();
            let completion = client.submit(Request::ReadPage(addr)).await?;
            in_flight.push(async move { (addr, sent, completion.await) });
        }
        let Some((addr, sent, answer)) = in_flight.next().await else {
            break;
        };
        stats.record(sent.elapsed());
        quarry_client::page_of(answer?).with_context(|| format!("cannot read page {addr}"))?;
        done += 1;
    }
    Ok(StreamRun {
        pages: done,
        seconds: started.elapsed().as_secs_f64(),
        stats,
    })
}

/// A host streaming on a thread and runtime of its own: connects to `addr`,
/// waits at `barrier` (so every host starts together), then streams.
fn spawn_host(
    addr: String,
    pages: Vec<GlobalPageAddr>,
    offset: usize,
    depth: usize,
    duration: Duration,
    stop: Option<Arc<AtomicBool>>,
    barrier: Arc<Barrier>,
) -> std::thread::JoinHandle<Result<StreamRun>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let client = Client::connect(&addr).await;
            barrier.wait();
            let client = client.with_context(|| format!("cannot connect to {addr}"))?;
            stream(&client, &pages, offset, depth, duration, stop.as_deref()).await
        })
    })
}

fn join_host(handle: std::thread::JoinHandle<Result<StreamRun>>) -> Result<StreamRun> {
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("a streaming host panicked"))?
}

/// Part 1.
async fn latency_vs_hops(bed: &Bed, plan: &Plan) -> Result<HopSeries> {
    let entry = bed.nodes()[0];
    let client = Client::connect(&bed.addr(entry)?).await?;
    let targets: Vec<Vec<GlobalPageAddr>> = bed
        .nodes()
        .iter()
        .map(|&n| bed.pages_of(n))
        .collect::<Result<_>>()?;
    // Warm up the connections and the links before anything is timed.
    let mut warmup: Vec<LatencyStats> = targets.iter().map(|_| LatencyStats::new()).collect();
    qd1_reads(&client, &targets, 5, 0, &mut warmup).await?;
    let mut stats: Vec<LatencyStats> = targets.iter().map(|_| LatencyStats::new()).collect();
    qd1_reads(&client, &targets, plan.reads, 1, &mut stats).await?;
    let rows: Vec<HopRow> = bed
        .nodes()
        .iter()
        .zip(&stats)
        .map(|(&node, s)| HopRow {
            hops: bed.hops(entry, node) as u8,
            node,
            reads: s.count(),
            mean_us: s.mean_us(),
            p50_us: s.quantile_us(0.5),
            p99_us: s.quantile_us(0.99),
        })
        .collect();
    Ok(hop_series(backend_name(bed.backend), rows))
}

/// Size of the floor's request message (a page address and a tag).
const FLOOR_REQUEST_BYTES: usize = 32;

/// The floor of a hop on this machine: QD1 round trips over loopback TCP
/// through chains of 0..3 blocking relay threads (each reads a 32-byte
/// request, passes it on, reads the page-sized answer and passes it back)
/// to a thread that answers with a page from memory. No runtime, no framing,
/// no device: what any relay built on kernel TCP sockets pays per hop here.
fn tcp_relay_floor(plan: &Plan, device_time: Duration, name: &str) -> Result<HopSeries> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn listen() -> Result<(TcpListener, String)> {
        let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind a loopback port")?;
        let addr = listener.local_addr()?.to_string();
        Ok((listener, addr))
    }
    fn accept(listener: &TcpListener) -> std::io::Result<TcpStream> {
        let (stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
    // Threads end when their upstream connection closes.
    fn server(listener: TcpListener, device_time: Duration) {
        let Ok(mut up) = accept(&listener) else {
            return;
        };
        let answer = vec![0x5Au8; PAGE_BYTES as usize];
        let mut request = [0u8; FLOOR_REQUEST_BYTES];
        while up.read_exact(&mut request).is_ok() {
            if !device_time.is_zero() {
                std::thread::sleep(device_time);
            }
            if up.write_all(&answer).is_err() {
                return;
            }
        }
    }
    fn relay(listener: TcpListener, down_addr: String) {
        let Ok(mut up) = accept(&listener) else {
            return;
        };
        let Ok(mut down) = TcpStream::connect(&down_addr) else {
            return;
        };
        let _ = down.set_nodelay(true);
        let mut request = [0u8; FLOOR_REQUEST_BYTES];
        let mut answer = vec![0u8; PAGE_BYTES as usize];
        while up.read_exact(&mut request).is_ok() {
            let passed = down.write_all(&request).is_ok()
                && down.read_exact(&mut answer).is_ok()
                && up.write_all(&answer).is_ok();
            if !passed {
                return;
            }
        }
    }

    let mut clients = Vec::new();
    let mut threads = Vec::new();
    for relays in 0..4u8 {
        let (listener, mut head) = listen()?;
        threads.push(std::thread::spawn(move || server(listener, device_time)));
        for _ in 0..relays {
            let (listener, addr) = listen()?;
            let down = head;
            threads.push(std::thread::spawn(move || relay(listener, down)));
            head = addr;
        }
        let client =
            TcpStream::connect(&head).with_context(|| format!("cannot connect to {head}"))?;
        client.set_nodelay(true)?;
        clients.push((relays, client));
    }
    let mut stats: Vec<LatencyStats> = clients.iter().map(|_| LatencyStats::new()).collect();
    let request = [1u8; FLOOR_REQUEST_BYTES];
    let mut answer = vec![0u8; PAGE_BYTES as usize];
    // Interleaved like the Quarry runs; the first rounds warm up.
    for round in 0..plan.reads + 5 {
        for ((_, client), stats) in clients.iter_mut().zip(stats.iter_mut()) {
            let sent = Instant::now();
            client.write_all(&request)?;
            client.read_exact(&mut answer)?;
            if round >= 5 {
                stats.record(sent.elapsed());
            }
        }
    }
    drop(clients);
    for thread in threads {
        let _ = thread.join();
    }
    let rows: Vec<HopRow> = stats
        .iter()
        .enumerate()
        .map(|(relays, s)| HopRow {
            hops: relays as u8,
            node: relays as NodeId,
            reads: s.count(),
            mean_us: s.mean_us(),
            p50_us: s.quantile_us(0.5),
            p99_us: s.quantile_us(0.99),
        })
        .collect();
    Ok(hop_series(name, rows))
}

/// Name of the floor's series.
const FLOOR_BACKEND: &str = "tcp relay (floor)";
/// Name of the floor's series whose server holds each answer for the
/// modeled nand read time.
const FLOOR_DEVICE_BACKEND: &str = "tcp relay + device time (floor)";

/// Slopes and steps of per-hop rows.
fn hop_series(backend: &str, rows: Vec<HopRow>) -> HopSeries {
    let points = |f: fn(&HopRow) -> f64| -> Vec<(f64, f64)> {
        rows.iter().map(|r| (f64::from(r.hops), f(r))).collect()
    };
    let slope_mean = slope(&points(|r| r.mean_us));
    let slope_p50 = slope(&points(|r| r.p50_us));
    let mut by_hops: Vec<&HopRow> = rows.iter().collect();
    by_hops.sort_by_key(|r| r.hops);
    let step_us_mean = by_hops
        .windows(2)
        .map(|w| w[1].mean_us - w[0].mean_us)
        .collect();
    HopSeries {
        backend: backend.into(),
        slope_us_per_hop_mean: slope_mean,
        slope_us_per_hop_p50: slope_p50,
        step_us_mean,
        goal_met: slope_mean <= HOP_GOAL_US,
        rows,
        floor: None,
        ratio_to_floor: None,
    }
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

/// Part 2: one host at node 0 streams the whole region in linear order.
async fn one_host_bandwidth(bed: &Bed, plan: &Plan) -> Result<BandwidthRow> {
    let entry = bed.nodes()[0];
    let client = Client::connect(&bed.addr(entry)?).await?;
    let region = bed.region()?;
    let nodes = bed.nodes().len() as u16;
    let depth = plan.depth_per_node * usize::from(nodes);
    // Fill the pipelines before timing.
    stream(&client, &region, 0, depth, Duration::from_millis(100), None).await?;
    let cpu = CpuMark::now(bed);
    let run = stream(
        &client,
        &region,
        0,
        depth,
        Duration::from_secs_f64(plan.seconds),
        None,
    )
    .await?;
    let cpu = cpu.elapsed();
    let (client_bytes, fabric_bytes) = traffic(bed, entry, &region, 0, run.pages);
    let layout = SlotLayout::new(&bed.space.geometry()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let peak = peak_mib_per_s(bed, &layout) * f64::from(nodes);
    Ok(BandwidthRow {
        nodes,
        queue_depth: depth,
        pages: run.pages,
        seconds: run.seconds,
        mib_per_s: run.mib_per_s(),
        ratio_to_one_node: 0.0,
        linear_fraction: 0.0,
        modeled_peak_mib_per_s: peak,
        peak_fraction: run.mib_per_s() / peak,
        latency_p50_us: run.stats.quantile_us(0.5),
        latency_p99_us: run.stats.quantile_us(0.99),
        cpu_cores: cpu.cores(),
        client_bytes,
        fabric_bytes,
    })
}

/// Page data per second one node's buses move, modeled (nand only).
fn peak_mib_per_s(bed: &Bed, layout: &SlotLayout) -> f64 {
    let timing = NandTiming::preset(Preset::Bluedbm, layout.used_bytes as u64);
    timing.peak_bus_bandwidth(&bed.space.geometry()) as f64 * f64::from(PAGE_BYTES)
        / layout.used_bytes as f64
        / MIB
}

/// Bytes that reached a host at `entry` reading `pages` pages of `list` from
/// `offset` (wrapping), and bytes that crossed links on the way.
fn traffic(
    bed: &Bed,
    entry: NodeId,
    list: &[GlobalPageAddr],
    offset: usize,
    pages: u64,
) -> (u64, u64) {
    let page = u64::from(PAGE_BYTES);
    let full = pages / list.len() as u64;
    let rest = (pages % list.len() as u64) as usize;
    let hops_of = |a: &GlobalPageAddr| bed.hops(entry, a.node);
    let all: u64 = list.iter().map(hops_of).sum();
    let partial: u64 = (0..rest)
        .map(|i| hops_of(&list[(offset + i) % list.len()]))
        .sum();
    (pages * page, (full * all + partial) * page)
}

/// Streams on one thread per host, all started together; returns each
/// host's run in order.
fn run_hosts(
    bed: &Bed,
    hosts: &[(NodeId, Vec<GlobalPageAddr>, usize)],
    depth: usize,
    seconds: f64,
) -> Result<Vec<StreamRun>> {
    let barrier = Arc::new(Barrier::new(hosts.len()));
    let handles: Vec<_> = hosts
        .iter()
        .map(|(entry, pages, offset)| {
            Ok(spawn_host(
                bed.addr(*entry)?,
                pages.clone(),
                *offset,
                depth,
                Duration::from_secs_f64(seconds),
                None,
                barrier.clone(),
            ))
        })
        .collect::<Result<_>>()?;
    handles.into_iter().map(join_host).collect()
}

fn host_rows(
    bed: &Bed,
    hosts: &[(NodeId, Vec<GlobalPageAddr>, usize)],
    runs: &[StreamRun],
    depth: usize,
) -> Vec<HostRow> {
    let total: f64 = runs.iter().map(StreamRun::mib_per_s).sum();
    hosts
        .iter()
        .zip(runs)
        .enumerate()
        .map(|(host, ((entry, pages, offset), run))| HostRow {
            host,
            entry_node: *entry,
            queue_depth: depth,
            pages: run.pages,
            mib_per_s: run.mib_per_s(),
            share: run.mib_per_s() / total,
            latency_p50_us: run.stats.quantile_us(0.5),
            latency_p99_us: run.stats.quantile_us(0.99),
            fabric_bytes: traffic(bed, *entry, pages, *offset, run.pages).1,
        })
        .collect()
}

/// Part 3b: a host at every node streams the target's pages at the same depth.
fn many_hosts_one_node(bed: &Bed, plan: &Plan) -> Result<ManyToOne> {
    let target = bed.nodes()[0];
    let pages = bed.pages_of(target)?;
    let depth = plan.depth_per_node;
    let alone = run_hosts(
        bed,
        &[(target, pages.clone(), 0)],
        depth * bed.nodes().len(),
        plan.seconds,
    )?;
    let hosts: Vec<(NodeId, Vec<GlobalPageAddr>, usize)> = bed
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, &entry)| (entry, pages.clone(), i * pages.len() / bed.nodes().len()))
        .collect();
    let runs = run_hosts(bed, &hosts, depth, plan.seconds)?;
    let rows = host_rows(bed, &hosts, &runs, depth);
    let total: f64 = rows.iter().map(|r| r.mib_per_s).sum();
    let (min, max) = rows.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
        (lo.min(r.mib_per_s), hi.max(r.mib_per_s))
    });
    let min_max = if max > 0.0 { min / max } else { 0.0 };
    Ok(ManyToOne {
        target,
        alone_mib_per_s: alone[0].mib_per_s(),
        total_fraction_of_alone: total / alone[0].mib_per_s(),
        hosts: rows,
        total_mib_per_s: total,
        min_max_ratio: min_max,
        goal_min_max_ratio: SHARE_GOAL_MIN_MAX,
        goal_met: min_max >= SHARE_GOAL_MIN_MAX,
    })
}

/// Part 3c: each node alone (a host entering at it reads its pages), then a
/// host at every node streaming the whole region, each from its own offset.
fn many_hosts_many_nodes(bed: &Bed, plan: &Plan) -> Result<ManyToMany> {
    let nodes = bed.nodes().len();
    let depth = plan.depth_per_node;
    let mut alone = Vec::new();
    for &node in bed.nodes() {
        let run = run_hosts(
            bed,
            &[(node, bed.pages_of(node)?, 0)],
            depth * nodes,
            plan.seconds,
        )?;
        alone.push(NodeAlone {
            node,
            mib_per_s: run[0].mib_per_s(),
        });
    }
    let sum: f64 = alone.iter().map(|a| a.mib_per_s).sum();
    let region = bed.region()?;
    // Offsets a quarter of the region apart (rounded to a stripe of every
    // node), so the hosts read different pages of every node.
    let hosts: Vec<(NodeId, Vec<GlobalPageAddr>, usize)> = bed
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, &entry)| {
            let offset = (i * region.len() / nodes) / nodes * nodes;
            (entry, region.clone(), offset)
        })
        .collect();
    let runs = run_hosts(bed, &hosts, depth * nodes, plan.seconds)?;
    let rows = host_rows(bed, &hosts, &runs, depth * nodes);
    let aggregate: f64 = rows.iter().map(|r| r.mib_per_s).sum();
    Ok(ManyToMany {
        alone,
        sum_alone_mib_per_s: sum,
        hosts: rows,
        aggregate_mib_per_s: aggregate,
        fraction: aggregate / sum,
        goal_fraction: AGGREGATE_GOAL,
        goal_met: aggregate / sum >= AGGREGATE_GOAL,
    })
}

/// Part 4: QD1 reads of node 1 entering at node 0, alone and while a second
/// client, also entering at node 0, streams node 2's pages (crossing link 0-1
/// but not node 1's device) or node 1's pages (sharing its device).
async fn qd1_under_load(bed: &Bed, plan: &Plan) -> Result<LoadSeries> {
    let nodes = bed.nodes();
    if nodes.len() < 3 {
        bail!("the load test needs a line of at least 3 nodes");
    }
    let (entry, near, far) = (nodes[0], nodes[1], nodes[2]);
    let addr = bed.addr(entry)?;
    let client = Client::connect(&addr).await?;
    let near_pages = bed.pages_of(near)?;
    let targets = [near_pages.clone()];
    let mut warmup = [LatencyStats::new()];
    qd1_reads(&client, &targets, 5, 0, &mut warmup).await?;
    let cases = [
        ("stream over link 0-1, node 2's device", far),
        ("stream over link 0-1, node 1's device (shared)", near),
    ];
    let mut unloaded = LatencyStats::new();
    let mut unloaded_cpu = CpuTimes::default();
    let mut loaded: Vec<(LatencyStats, f64, f64, CpuTimes)> = cases
        .iter()
        .map(|_| (LatencyStats::new(), 0.0, 0.0, CpuTimes::default()))
        .collect();
    let depth = plan.depth_per_node;
    for round in 0..plan.load_rounds {
        let seed = u64::from(round) * 10;
        let cpu = CpuMark::now(bed);
        qd1_reads(
            &client,
            &targets,
            plan.reads,
            seed + 1,
            std::slice::from_mut(&mut unloaded),
        )
        .await?;
        unloaded_cpu.add(cpu.elapsed());
        for (i, &(_, stream_target)) in cases.iter().enumerate() {
            let stop = Arc::new(AtomicBool::new(false));
            let barrier = Arc::new(Barrier::new(1));
            let host = spawn_host(
                addr.clone(),
                bed.pages_of(stream_target)?,
                0,
                depth,
                Duration::from_secs(3600),
                Some(stop.clone()),
                barrier,
            );
            tokio::time::sleep(LOAD_WARMUP).await;
            let cpu = CpuMark::now(bed);
            let measured = qd1_reads(
                &client,
                &targets,
                plan.reads,
                seed + 2 + i as u64,
                std::slice::from_mut(&mut loaded[i].0),
            )
            .await;
            loaded[i].3.add(cpu.elapsed());
            stop.store(true, Ordering::Relaxed);
            let run = join_host(host)?;
            measured?;
            loaded[i].1 += run.pages as f64 * f64::from(PAGE_BYTES) / MIB;
            loaded[i].2 += run.seconds;
        }
    }
    let unloaded = LatencyRow::of(&unloaded);
    let cases: Vec<LoadCase> = cases
        .iter()
        .zip(&loaded)
        .map(|(&(name, target), (stats, mib, seconds, cpu))| {
            let qd1 = LatencyRow::of(stats);
            LoadCase {
                name: name.into(),
                stream_target: target,
                stream_mib_per_s: mib / seconds,
                cpu_cores: cpu.cores(),
                p99_ratio: qd1.p99_us / unloaded.p99_us,
                p50_ratio: qd1.p50_us / unloaded.p50_us,
                qd1,
            }
        })
        .collect();
    Ok(LoadSeries {
        backend: backend_name(bed.backend).into(),
        goal_met: cases[0].p99_ratio <= LOAD_GOAL_RATIO,
        unloaded_cpu_cores: unloaded_cpu.cores(),
        unloaded,
        cases,
    })
}

/// CPU time of the cluster's node processes and this process (every thread,
/// user + system) from /proc, and the wall time it was measured over.
#[derive(Debug, Default, Clone, Copy)]
struct CpuTimes {
    ticks: u64,
    seconds: f64,
}

/// A point to measure [`CpuTimes`] from.
struct CpuMark {
    pids: Vec<u32>,
    ticks: u64,
    at: Instant,
}

impl CpuMark {
    fn now(bed: &Bed) -> CpuMark {
        let mut pids: Vec<u32> = bed
            .cluster
            .cluster
            .nodes
            .iter()
            .filter_map(|n| n.pid)
            .collect();
        pids.push(std::process::id());
        CpuMark {
            ticks: pids.iter().map(|&pid| process_ticks(pid)).sum(),
            pids,
            at: Instant::now(),
        }
    }

    fn elapsed(&self) -> CpuTimes {
        let ticks: u64 = self.pids.iter().map(|&pid| process_ticks(pid)).sum();
        CpuTimes {
            ticks: ticks.saturating_sub(self.ticks),
            seconds: self.at.elapsed().as_secs_f64(),
        }
    }
}

impl CpuTimes {
    fn add(&mut self, more: CpuTimes) {
        self.ticks += more.ticks;
        self.seconds += more.seconds;
    }

    /// Cores busy on average (of the machine's 2).
    fn cores(&self) -> f64 {
        let hz = ticks_per_sec();
        if self.seconds > 0.0 {
            self.ticks as f64 / hz / self.seconds
        } else {
            0.0
        }
    }
}

fn yes_no(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

/// One row per host of a multi-access run.
fn host_table(hosts: &[HostRow]) -> Table {
    let mut t = table(&[
        "host",
        "enters at",
        "QD",
        "MiB/s",
        "share",
        "p50 us",
        "p99 us",
        "over links",
    ]);
    for h in hosts {
        t.add_row(vec![
            h.host.to_string(),
            format!("node {}", h.entry_node),
            h.queue_depth.to_string(),
            f1(h.mib_per_s),
            format!("{:.1}%", h.share * 100.0),
            f1(h.latency_p50_us),
            f1(h.latency_p99_us),
            human_bytes(h.fabric_bytes),
        ]);
    }
    t
}

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    table
}

fn f1(v: f64) -> String {
    format!("{v:.1}")
}

fn print_report(r: &Report) {
    let g = r.geometry;
    println!(
        "\n== quarry bench fabric: nand {} timing, {} bus(es) x {} chips per node, {} B pages, {} pages per node{}",
        r.preset,
        g.buses,
        g.chips_per_bus,
        g.page_size_bytes,
        r.pages_per_node,
        if r.quick { " (--quick: figures mean little)" } else { "" }
    );
    println!(
        "   modeled device: {:.1} us per idle QD1 read, peak {:.1} MiB/s of page data per node. \
         2 cores run every node, the client and the emulators: figures are noisy.",
        r.device_read_us, r.device_peak_mib_per_s_per_node
    );

    print_latency(r);

    print_bandwidth(r);

    print_multi_access(r);

    print_load(r);
}

/// The latency table: QD1 reads by hop count.
fn print_latency(r: &Report) {
    let Some(l) = &r.latency else {
        return;
    };
    let mut t = table(&[
        "backend", "hops", "node", "reads", "mean us", "p50 us", "p99 us",
    ]);
    for s in &l.backends {
        for row in &s.rows {
            t.add_row(vec![
                s.backend.clone(),
                row.hops.to_string(),
                row.node.to_string(),
                row.reads.to_string(),
                f1(row.mean_us),
                f1(row.p50_us),
                f1(row.p99_us),
            ]);
        }
    }
    println!(
        "\n1. QD1 read latency vs hops (BlueDBM Fig. 8, RFSA Fig. 8), {}, entering at node {}:\n{t}",
        l.topology, l.entry_node
    );
    for s in &l.backends {
        let floor = match (&s.floor, s.ratio_to_floor) {
            (Some(floor), Some(ratio)) => format!(" = {ratio:.1}x {floor}'s"),
            _ => String::new(),
        };
        println!(
            "   {}: added per hop {:.1} us{floor} (least-squares slope of the mean; p50 slope {:.1} us), steps {}; goal <= {:.0} us/hop: {}",
            s.backend,
            s.slope_us_per_hop_mean,
            s.slope_us_per_hop_p50,
            s.step_us_mean
                .iter()
                .map(|d| format!("{d:+.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            l.goal_us_per_hop,
            yes_no(s.goal_met)
        );
    }
}

/// The bandwidth table: one client over 1, 2 and 4 nodes.
fn print_bandwidth(r: &Report) {
    let Some(b) = &r.bandwidth else {
        return;
    };
    let mut t = table(&[
        "nodes",
        "QD",
        "MiB/s",
        "x 1 node",
        "% of linear",
        "modeled peak MiB/s",
        "% of peak",
        "p50 us",
        "p99 us",
        "CPU cores",
        "to client",
        "over links",
    ]);
    for row in &b.rows {
        t.add_row(vec![
            row.nodes.to_string(),
            row.queue_depth.to_string(),
            f1(row.mib_per_s),
            format!("{:.2}", row.ratio_to_one_node),
            format!("{:.0}%", row.linear_fraction * 100.0),
            f1(row.modeled_peak_mib_per_s),
            format!("{:.0}%", row.peak_fraction * 100.0),
            f1(row.latency_p50_us),
            f1(row.latency_p99_us),
            format!("{:.2}", row.cpu_cores),
            human_bytes(row.client_bytes),
            human_bytes(row.fabric_bytes),
        ]);
    }
    println!(
        "\n2. Sequential read bandwidth vs nodes (BlueDBM Fig. 9b), one client at node {}, linear page space over a {}:\n{t}",
        b.entry_node, b.topology
    );
    println!(
        "   goal: 4 nodes >= {:.1}x 1 node: {}, {}",
        b.goal_ratio_at_4,
        b.ratio_at_4
            .map_or("not measured".to_string(), |r| format!("{r:.2}x")),
        yes_no(b.goal_met)
    );
}

/// The many-hosts tables.
fn print_multi_access(r: &Report) {
    let Some(m) = &r.multi_access else {
        return;
    };
    let o = &m.many_to_one;
    let t = host_table(&o.hosts);
    println!(
        "\n3. Multi-access (RFSA Fig. 7), {}-node {}.\n   (a) one host, many nodes: part 2, {}.\n   (b) many hosts, one node: every host reads node {}'s pages:\n{t}",
        m.nodes,
        m.topology,
        m.one_host_ratio_at_4
            .map_or("not measured".to_string(), |r| format!("4 nodes = {r:.2}x 1 node")),
        o.target
    );
    println!(
        "   total {:.1} MiB/s = {:.0}% of node {} read by one host alone ({:.1} MiB/s); smallest/largest share {:.2}; goal >= {:.2}: {}",
        o.total_mib_per_s,
        o.total_fraction_of_alone * 100.0,
        o.target,
        o.alone_mib_per_s,
        o.min_max_ratio,
        o.goal_min_max_ratio,
        yes_no(o.goal_met)
    );
    let mm = &m.many_to_many;
    let t = host_table(&mm.hosts);
    println!("   (c) many hosts, many nodes: every host reads the whole linear region:\n{t}");
    println!(
        "   each node alone: {}; sum {:.1} MiB/s. Aggregate {:.1} MiB/s = {:.0}% of the sum; goal >= {:.0}%: {}",
        mm.alone
            .iter()
            .map(|a| format!("node {} {:.1}", a.node, a.mib_per_s))
            .collect::<Vec<_>>()
            .join(", "),
        mm.sum_alone_mib_per_s,
        mm.aggregate_mib_per_s,
        mm.fraction * 100.0,
        mm.goal_fraction * 100.0,
        yes_no(mm.goal_met)
    );
}

/// QD1 latency under a competing stream.
fn print_load(r: &Report) {
    let Some(l) = &r.load else {
        return;
    };
    let mut t = table(&[
        "backend",
        "case",
        "stream MiB/s",
        "reads",
        "mean us",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "p99 x",
        "p50 x",
        "CPU cores",
    ]);
    for s in &l.backends {
        let u = &s.unloaded;
        t.add_row(vec![
            s.backend.clone(),
            "unloaded".into(),
            "-".into(),
            u.reads.to_string(),
            f1(u.mean_us),
            f1(u.p50_us),
            f1(u.p99_us),
            f1(u.p999_us),
            "1.00".into(),
            "1.00".into(),
            format!("{:.2}", s.unloaded_cpu_cores),
        ]);
        for c in &s.cases {
            t.add_row(vec![
                s.backend.clone(),
                c.name.clone(),
                f1(c.stream_mib_per_s),
                c.qd1.reads.to_string(),
                f1(c.qd1.mean_us),
                f1(c.qd1.p50_us),
                f1(c.qd1.p99_us),
                f1(c.qd1.p999_us),
                format!("{:.2}", c.p99_ratio),
                format!("{:.2}", c.p50_ratio),
                format!("{:.2}", c.cpu_cores),
            ]);
        }
    }
    println!(
        "\n4. QD1 reads of node {} under load, {}; the stream keeps {} reads in flight:\n{t}",
        l.qd1_target, l.topology, l.stream_queue_depth
    );
    for s in &l.backends {
        println!(
            "   {}: goal p99 loaded <= {:.1}x unloaded over the shared link: {:.2}x, {}",
            s.backend,
            l.goal_ratio_max,
            s.cases[0].p99_ratio,
            yes_no(s.goal_met)
        );
    }
}

const COLORS: [&str; 4] = ["steelblue", "darkorange", "seagreen", "crimson"];
const LIGHT_COLORS: [&str; 4] = ["lightsteelblue", "navajowhite", "lightgreen", "pink"];

fn plots(r: &Report) -> Vec<(&'static str, LinePlot)> {
    let mut plots = Vec::new();
    plot_latency(r, &mut plots);
    plot_bandwidth(r, &mut plots);
    plot_multi_access(r, &mut plots);
    plot_load(r, &mut plots);
    plots
}

/// The latency plot.
fn plot_latency(r: &Report, plots: &mut Vec<(&'static str, LinePlot)>) {
    let Some(l) = &r.latency else {
        return;
    };
    let mut series = Vec::new();
    for (i, s) in l.backends.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut rows: Vec<&HopRow> = s.rows.iter().collect();
        rows.sort_by_key(|r| r.hops);
        series.push(Series {
            name: format!(
                "{} mean (+{:.0} us/hop)",
                s.backend, s.slope_us_per_hop_mean
            ),
            color,
            points: rows
                .iter()
                .map(|r| (f64::from(r.hops), r.mean_us))
                .collect(),
        });
        // The goal drawn from Quarry's own hop-0 figures (p99s are in
        // the table: drawn here they would flatten the means).
        if s.floor.is_some() {
            let base = rows.first().map_or(0.0, |r| r.mean_us);
            series.push(Series {
                name: format!(
                    "goal: {} hop 0 + {:.0} us/hop",
                    s.backend, l.goal_us_per_hop
                ),
                color: LIGHT_COLORS[i % LIGHT_COLORS.len()],
                points: rows
                    .iter()
                    .map(|r| {
                        let h = f64::from(r.hops);
                        (h, base + h * l.goal_us_per_hop)
                    })
                    .collect(),
            });
        }
    }
    plots.push((
        "fabric-latency-hops.svg",
        LinePlot {
            title: format!("QD1 page read latency vs hops, mean ({})", l.topology),
            x_label: "hops from the entry node".into(),
            y_label: "latency (us)".into(),
            log2_x: false,
            x_tick: |x| format!("{x:.0}"),
            series,
            hlines: Vec::new(),
        },
    ));
}

/// The bandwidth plot.
fn plot_bandwidth(r: &Report, plots: &mut Vec<(&'static str, LinePlot)>) {
    let Some(b) = &r.bandwidth else {
        return;
    };
    let one = b.rows.first().map_or(0.0, |r| r.mib_per_s);
    plots.push((
        "fabric-bandwidth-nodes.svg",
        LinePlot {
            title: "Sequential read bandwidth vs nodes (one client, nand bluedbm)".into(),
            x_label: "nodes".into(),
            y_label: "MiB/s of page data".into(),
            log2_x: false,
            x_tick: |x| format!("{x:.0}"),
            series: vec![
                Series {
                    name: "linear: nodes x 1-node figure".into(),
                    color: "gray",
                    points: b
                        .rows
                        .iter()
                        .map(|r| (f64::from(r.nodes), one * f64::from(r.nodes)))
                        .collect(),
                },
                Series {
                    name: format!("goal: {:.1}x at 4 nodes", b.goal_ratio_at_4),
                    color: "crimson",
                    points: b
                        .rows
                        .iter()
                        .map(|r| {
                            let n = f64::from(r.nodes);
                            (n, one * (1.0 + (n - 1.0) * (b.goal_ratio_at_4 - 1.0) / 3.0))
                        })
                        .collect(),
                },
                Series {
                    name: "modeled device peak".into(),
                    color: "darkorange",
                    points: b
                        .rows
                        .iter()
                        .map(|r| (f64::from(r.nodes), r.modeled_peak_mib_per_s))
                        .collect(),
                },
                Series {
                    name: "measured".into(),
                    color: "steelblue",
                    points: b
                        .rows
                        .iter()
                        .map(|r| (f64::from(r.nodes), r.mib_per_s))
                        .collect(),
                },
            ],
            hlines: Vec::new(),
        },
    ));
}

/// The many-hosts plot.
fn plot_multi_access(r: &Report, plots: &mut Vec<(&'static str, LinePlot)>) {
    let Some(m) = &r.multi_access else {
        return;
    };
    let per_host = |rows: &[HostRow]| -> Vec<(f64, f64)> {
        rows.iter()
            .map(|h| (f64::from(h.entry_node), h.mib_per_s))
            .collect()
    };
    let o = &m.many_to_one;
    let mm = &m.many_to_many;
    plots.push((
        "fabric-multi-access.svg",
        LinePlot {
            title: format!(
                "Multi-access: bandwidth per host ({}-node {})",
                m.nodes, m.topology
            ),
            x_label: "node the host enters at".into(),
            y_label: "MiB/s of page data".into(),
            log2_x: false,
            x_tick: |x| format!("node {x:.0}"),
            series: vec![
                Series {
                    name: format!("many hosts, one node (node {}): per host", o.target),
                    color: "steelblue",
                    points: per_host(&o.hosts),
                },
                Series {
                    name: "many hosts, many nodes: per host".into(),
                    color: "darkorange",
                    points: per_host(&mm.hosts),
                },
                Series {
                    name: "each node alone".into(),
                    color: "seagreen",
                    points: mm
                        .alone
                        .iter()
                        .map(|a| (f64::from(a.node), a.mib_per_s))
                        .collect(),
                },
            ],
            hlines: vec![
                HLine {
                    name: format!("fair share of node {} (total / hosts)", o.target),
                    color: "lightsteelblue",
                    y: o.total_mib_per_s / o.hosts.len().max(1) as f64,
                },
                HLine {
                    name: "sum of nodes alone / hosts".into(),
                    color: "navajowhite",
                    y: mm.sum_alone_mib_per_s / mm.hosts.len().max(1) as f64,
                },
            ],
        },
    ));
}

/// The latency-under-load plot.
fn plot_load(r: &Report, plots: &mut Vec<(&'static str, LinePlot)>) {
    let Some(l) = &r.load else {
        return;
    };
    let quantiles = |q: &LatencyRow| -> Vec<(f64, f64)> {
        vec![
            (1.0, q.p50_us),
            (2.0, q.p90_us),
            (3.0, q.p99_us),
            (4.0, q.p999_us),
        ]
    };
    let mut series = Vec::new();
    // The shared-device cases queue behind the stream in the device
    // (milliseconds): they are in the table, and drawn here they would
    // flatten the rest.
    let mut hlines = Vec::new();
    for (i, s) in l.backends.iter().enumerate() {
        series.push(Series {
            name: format!("{}: unloaded", s.backend),
            color: LIGHT_COLORS[i % LIGHT_COLORS.len()],
            points: quantiles(&s.unloaded),
        });
        if let Some(c) = s.cases.first() {
            series.push(Series {
                name: format!("{}: {}", s.backend, c.name),
                color: COLORS[i % COLORS.len()],
                points: quantiles(&c.qd1),
            });
        }
        hlines.push(HLine {
            name: format!(
                "goal: {}'s p99 <= {:.0}x unloaded",
                s.backend, l.goal_ratio_max
            ),
            color: COLORS[i % COLORS.len()],
            y: s.unloaded.p99_us * l.goal_ratio_max,
        });
    }
    plots.push((
        "fabric-qd1-under-load.svg",
        LinePlot {
            title: format!(
                "QD1 read latency of node {}, alone and beside a stream over the same link",
                l.qd1_target
            ),
            x_label: "percentile".into(),
            y_label: "latency (us)".into(),
            log2_x: false,
            x_tick: |x| match x.round() as i64 {
                1 => "p50".into(),
                2 => "p90".into(),
                3 => "p99".into(),
                _ => "p99.9".into(),
            },
            series,
            hlines,
        },
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_noise() {
        let line: Vec<(f64, f64)> = (0..4)
            .map(|h| (f64::from(h), 100.0 + 15.0 * f64::from(h)))
            .collect();
        assert!((slope(&line) - 15.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 5.0), (1.0, 9.0)]), 0.0);
    }
}
