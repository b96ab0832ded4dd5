//! `quarry bench page`: page latency and throughput per backend, locally and
//! through one forwarding node, and side by side with fio on the same file.
//! A benchmark reports figures; it asserts nothing about time.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use futures::stream::{FuturesUnordered, StreamExt};
use quarry_client::{Client, Request};
use quarry_device::{BackendKind, Geometry, PageAddr, SlotLayout};
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, NodeId};
use rand::{Rng, SeedableRng};

use crate::args::BenchPageArgs;
use crate::common::{fio_json, work_dir};
use crate::stats::LatencyStats;
use quarry_jobs::human_bytes;
use quarry_local::{backend_of, preset_of, quarry_exe, DeviceArg};
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

/// Pages kept in flight while filling the working set.
const FILL_QUEUE_DEPTH: usize = 64;
/// Bound on the working set for backends where filling is slow (nand) or
/// lives in memory (mem).
const MAX_WORKING_SET_PAGES: u64 = 16 * 1024;
/// `--quick`: working set, reads per point, deepest queue, file device size
/// and largest nand request, so a run takes seconds.
const QUICK_WORKING_SET_PAGES: u64 = 256;
const QUICK_OPS: u32 = 200;
const QUICK_MAX_QUEUE_DEPTH: u32 = 4;
const QUICK_FILE_SIZE_MIB: u64 = 64;
const QUICK_MAX_REQUEST_BYTES: u64 = 256 << 10;

/// Runs the page benchmark.
pub fn page(args: &BenchPageArgs) -> Result<()> {
    let quick;
    let args = if args.common.quick {
        quick = BenchPageArgs {
            ops: args.ops.min(QUICK_OPS),
            max_queue_depth: args.max_queue_depth.min(QUICK_MAX_QUEUE_DEPTH),
            file_size_mib: args.file_size_mib.min(QUICK_FILE_SIZE_MIB),
            ..args.clone()
        };
        &quick
    } else {
        args
    };
    let devices = if args.devices.is_empty() {
        vec![DeviceArg::File, DeviceArg::Mem, DeviceArg::Nand]
    } else {
        args.devices.clone()
    };
    let (root, _scratch) = work_dir(args.common.dir.as_deref(), "quarry-bench")?;
    // The client on one thread: its writer and reader tasks and the
    // requester then take turns on it, with no wake-up across threads
    // (10-20 us each here) between submitting a read and seeing its page.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut report = Vec::new();
    let measure_volume = devices.contains(&DeviceArg::Mem);
    for device in devices {
        let backend = backend_of(device);
        let result = bench_backend(
            &runtime,
            args,
            backend,
            &root.join(format!("{device:?}").to_lowercase()),
        )?;
        if !args.common.json {
            print_backend(&result);
        }
        report.push(result);
    }
    let volume = if measure_volume {
        let ops = u64::from(args.ops.min(2000));
        let rows = crate::qd1::volume_rows(&runtime, ops, &root.join("mem-volume"))?;
        if !args.common.json {
            crate::qd1::print_volume_rows(&rows);
        }
        Some(rows)
    } else {
        None
    };
    if args.common.json {
        let json = serde_json::json!({ "backends": report, "volume": volume });
        println!("{}", serde_json::to_string_pretty(&json)?);
    }
    Ok(())
}

/// Figures for one backend.
#[derive(Debug, serde::Serialize)]
struct BackendReport {
    backend: String,
    geometry: Geometry,
    working_set_pages: u64,
    /// A blocking loopback TCP ping-pong of a page read's sizes (64 B out,
    /// the page and 64 B back), measured in the same run.
    pingpong_us_mean: f64,
    /// A Ping to the entry node at QD1 (mean, p50): the protocol's own
    /// round trip, without a device or a page.
    ping_us_mean: f64,
    ping_us_p50: f64,
    points: Vec<Point>,
    fio: Vec<FioComparison>,
    nand_bandwidth: Vec<BandwidthPoint>,
}

/// One measurement: a path (local or forwarded) at one queue depth.
#[derive(Debug, serde::Serialize)]
struct Point {
    path: &'static str,
    queue_depth: u32,
    ops: u64,
    iops: f64,
    mib_per_s: f64,
    latency_us_mean: f64,
    latency_us_p50: f64,
    latency_us_p99: f64,
    /// Mean latency in ping-pongs of the same sizes.
    pingpongs: f64,
}

#[derive(Debug, serde::Serialize)]
struct FioComparison {
    queue_depth: u32,
    round: u32,
    /// fio's block size: 8 KiB (a raw page with no ECC or OOB), or the slot
    /// Quarry reads per page (data, CRCs, OOB and parity), at slot offsets.
    fio_block_bytes: u64,
    fio_iops: f64,
    quarry_iops: f64,
    iops_ratio: f64,
    fio_latency_us_mean: f64,
    quarry_latency_us_mean: f64,
    added_latency_us: f64,
}

#[derive(Debug, serde::Serialize)]
struct BandwidthPoint {
    request_bytes: u64,
    mib_per_s: f64,
}

fn bench_backend(
    runtime: &tokio::runtime::Runtime,
    args: &BenchPageArgs,
    backend: BackendKind,
    dir: &Path,
) -> Result<BackendReport> {
    let geometry = bench_geometry(args, backend);
    let spec = LocalClusterSpec {
        nodes: 2,
        dir: dir.to_path_buf(),
        backend,
        preset: (backend == BackendKind::Nand).then(|| preset_of(args.preset)),
        geometry,
        capacity_bytes: None,
        direct_io: true,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: false,
        ecc: quarry_device::EccMode::Rs,
        kv_toml: None,
        device_toml: None,
    };
    eprintln!(
        "bench page: starting a 2-node {backend:?} cluster in {}",
        dir.display()
    );
    let cluster = LocalCluster::start(&spec, &quarry_exe()?)?;
    let report = runtime.block_on(measure_cluster(args, backend, &cluster));
    cluster.stop()?;
    report
}

async fn measure_cluster(
    args: &BenchPageArgs,
    backend: BackendKind,
    cluster: &LocalCluster,
) -> Result<BackendReport> {
    let client = Client::connect(&cluster.cluster.nodes[0].addr).await?;
    let geometry = client.node_info(0).await?.device.geometry;
    let bad0 = client.node_info(0).await?.device.bad_blocks;
    let bad1 = client.node_info(1).await?.device.bad_blocks;
    let full = backend == BackendKind::File && args.fio;
    let cap = if args.common.quick {
        QUICK_WORKING_SET_PAGES
    } else {
        MAX_WORKING_SET_PAGES
    };
    let limit = if full {
        geometry.pages()
    } else {
        geometry.pages().min(cap)
    };
    let set0 = working_set(0, &geometry, &bad0, limit);
    let set1 = working_set(1, &geometry, &bad1, limit.min(cap));
    eprintln!(
        "bench page: filling {} pages on node 0 and {} on node 1",
        set0.len(),
        set1.len()
    );
    fill(&client, &geometry, &set0).await?;
    fill(&client, &geometry, &set1).await?;

    let pingpong_us_mean = crate::qd1::ping_pong_us(
        args.ops.clamp(200, 2000) as usize,
        crate::qd1::REQUEST_FRAME_BYTES,
        geometry.page_size_bytes as usize + crate::qd1::ANSWER_HEAD_BYTES,
    )?;
    let (ping_us_mean, ping_us_p50) = ping_latency(&client, args.ops.min(2000)).await?;
    let mut points = Vec::new();
    let mut depth = 1u32;
    while depth <= args.max_queue_depth {
        for (path, set) in [("local", &set0), ("forwarded", &set1)] {
            let ops = if depth == 1 {
                args.ops.min(2000)
            } else {
                args.ops
            };
            let mut point = measure(&client, set, depth, u64::from(ops), path).await?;
            point.pingpongs = point.latency_us_mean / pingpong_us_mean;
            points.push(point);
        }
        depth *= 2;
    }

    let fio = if full {
        compare_with_fio(args, &client, cluster, &geometry, &set0).await?
    } else {
        Vec::new()
    };

    let mut nand_bandwidth = Vec::new();
    if backend == BackendKind::Nand {
        let max_request_bytes = if args.common.quick {
            QUICK_MAX_REQUEST_BYTES
        } else {
            16 << 20
        };
        let mut request_pages = 1u64;
        while request_pages * u64::from(geometry.page_size_bytes) <= max_request_bytes {
            let pages = (request_pages as usize).min(set0.len());
            nand_bandwidth.push(bandwidth(&client, &set0, pages, &geometry).await?);
            request_pages *= 2;
        }
    }
    Ok(BackendReport {
        backend: format!("{backend:?}").to_lowercase(),
        geometry,
        working_set_pages: set0.len() as u64,
        pingpong_us_mean,
        ping_us_mean,
        ping_us_p50,
        points,
        fio,
        nand_bandwidth,
    })
}

/// fio's random reads of node 0's backing file, at the page size and at the
/// slot size, next to Quarry's reads of the same node, at QD1 and QD32.
async fn compare_with_fio(
    args: &BenchPageArgs,
    client: &Client,
    cluster: &LocalCluster,
    geometry: &Geometry,
    set0: &[GlobalPageAddr],
) -> Result<Vec<FioComparison>> {
    let mut fio = Vec::new();
    let file = cluster.cluster.nodes[0]
        .config
        .as_ref()
        .and_then(|c| c.parent())
        .map(|d| d.join("pages.bin"))
        .context("node 0 has no data directory")?;
    let page_bytes = u64::from(geometry.page_size_bytes);
    let slot_bytes = SlotLayout::new(geometry)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .slot_size as u64;
    // Alternate the peer and Quarry so drift in the disk's speed (large on
    // a shared virtual disk) hits both alike.
    for round in 0..2 {
        for qd in [1u32, 32] {
            let raw = run_fio(&file, qd, page_bytes)?;
            let ours =
                measure(client, set0, qd, u64::from(args.ops.max(4000)) * 2, "local").await?;
            let slot = run_fio(&file, qd, slot_bytes)?;
            for (peer, block) in [(raw, page_bytes), (slot, slot_bytes)] {
                fio.push(FioComparison {
                    queue_depth: qd,
                    round,
                    fio_block_bytes: block,
                    fio_iops: peer.iops,
                    quarry_iops: ours.iops,
                    iops_ratio: ours.iops / peer.iops,
                    fio_latency_us_mean: peer.latency_us_mean,
                    quarry_latency_us_mean: ours.latency_us_mean,
                    added_latency_us: ours.latency_us_mean - peer.latency_us_mean,
                });
            }
        }
    }
    Ok(fio)
}

fn bench_geometry(args: &BenchPageArgs, backend: BackendKind) -> Option<Geometry> {
    match backend {
        BackendKind::File => {
            let base = Geometry::default();
            let per_block = u64::from(
                base.buses * base.chips_per_bus * base.pages_per_block * base.page_size_bytes,
            );
            let blocks = ((args.file_size_mib << 20) / per_block)
                .clamp(1, u64::from(quarry_device::MAX_BLOCKS_PER_CHIP));
            Some(Geometry {
                blocks_per_chip: blocks as u32,
                ..base
            })
        }
        BackendKind::Mem => None,
        BackendKind::Nand => None,
    }
}

/// Pages to read: striped bus first, then chip, then block (so consecutive
/// pages use every bus), skipping bad blocks, at most `limit`.
fn working_set(
    node: NodeId,
    g: &Geometry,
    bad: &[quarry_device::BlockAddr],
    limit: u64,
) -> Vec<GlobalPageAddr> {
    let mut pages = Vec::new();
    'outer: for block in 0..g.blocks_per_chip {
        for page in 0..g.pages_per_block {
            for chip in 0..g.chips_per_bus {
                for bus in 0..g.buses {
                    let addr = PageAddr {
                        bus,
                        chip,
                        block,
                        page,
                    };
                    if bad.contains(&addr.block_addr()) {
                        continue;
                    }
                    if pages.len() as u64 >= limit {
                        break 'outer;
                    }
                    pages.push(GlobalPageAddr { node, page: addr });
                }
            }
        }
    }
    pages
}

async fn fill(client: &Client, g: &Geometry, set: &[GlobalPageAddr]) -> Result<()> {
    let mut blocks: Vec<GlobalBlockAddr> = set
        .iter()
        .map(|a| GlobalBlockAddr {
            node: a.node,
            block: a.page.block_addr(),
        })
        .collect();
    blocks.sort();
    blocks.dedup();
    run_pipelined(
        client,
        blocks.into_iter().map(Request::EraseBlock),
        FILL_QUEUE_DEPTH,
    )
    .await?;
    let page_size = g.page_size_bytes as usize;
    let writes = set.iter().map(|addr| {
        let mut data = vec![0u8; page_size];
        let stamp = format!("bench {addr} ");
        for (i, b) in data.iter_mut().enumerate() {
            *b = stamp.as_bytes()[i % stamp.len()];
        }
        Request::ProgramPage {
            addr: *addr,
            data: Bytes::from(data),
            oob: Bytes::new(),
        }
    });
    run_pipelined(client, writes, FILL_QUEUE_DEPTH).await
}

async fn run_pipelined(
    client: &Client,
    requests: impl Iterator<Item = Request>,
    depth: usize,
) -> Result<()> {
    let mut in_flight = FuturesUnordered::new();
    for request in requests {
        if in_flight.len() >= depth {
            if let Some(answer) = in_flight.next().await {
                quarry_client::into_result(answer?)?;
            }
        }
        in_flight.push(client.submit(request).await?);
    }
    while let Some(answer) = in_flight.next().await {
        quarry_client::into_result(answer?)?;
    }
    Ok(())
}

/// Mean and median latency (us) of `ops` Pings to the entry node, one at a
/// time.
async fn ping_latency(client: &Client, ops: u32) -> Result<(f64, f64)> {
    let mut stats = LatencyStats::new();
    for _ in 0..ops.max(1) {
        let sent = Instant::now();
        client.ping().await?;
        stats.record(sent.elapsed());
    }
    Ok((stats.mean_us(), stats.quantile_us(0.5)))
}

/// Random reads over `set` with `depth` requests in flight.
async fn measure(
    client: &Client,
    set: &[GlobalPageAddr],
    depth: u32,
    ops: u64,
    path: &'static str,
) -> Result<Point> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(depth));
    let mut stats = LatencyStats::new();
    let mut in_flight = FuturesUnordered::new();
    let started = Instant::now();
    let mut issued = 0u64;
    let mut bytes = 0u64;
    while issued < ops || !in_flight.is_empty() {
        while issued < ops && in_flight.len() < depth as usize {
            let addr = set[rng.gen_range(0..set.len())];
            let sent = Instant::now();
            let completion = client.submit(Request::ReadPage(addr)).await?;
            in_flight.push(Box::pin(async move { (sent, completion.await) }));
            issued += 1;
        }
        if let Some((sent, answer)) = in_flight.next().await {
            stats.record(sent.elapsed());
            let page = quarry_client::page_of(answer?)?;
            bytes += page.data.len() as u64;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok(Point {
        path,
        queue_depth: depth,
        ops,
        iops: ops as f64 / elapsed,
        mib_per_s: crate::measure::mib_per_s(bytes, elapsed),
        latency_us_mean: stats.mean_us(),
        latency_us_p50: stats.quantile_us(0.5),
        latency_us_p99: stats.quantile_us(0.99),
        pingpongs: 0.0,
    })
}

/// Reads requests of `pages` consecutive (striped) pages, one request at a
/// time with all its pages in flight (RFSA Fig. 6).
async fn bandwidth(
    client: &Client,
    set: &[GlobalPageAddr],
    pages: usize,
    g: &Geometry,
) -> Result<BandwidthPoint> {
    let total_pages = (set.len()).max(pages * 4).min(set.len() * 4);
    let started = Instant::now();
    let mut done = 0usize;
    let mut start = 0usize;
    while done < total_pages {
        let mut in_flight = FuturesUnordered::new();
        for i in 0..pages {
            let addr = set[(start + i) % set.len()];
            in_flight.push(client.submit(Request::ReadPage(addr)).await?);
        }
        while let Some(answer) = in_flight.next().await {
            quarry_client::page_of(answer?)?;
        }
        done += pages;
        start = (start + pages) % set.len();
    }
    let bytes = done as u64 * u64::from(g.page_size_bytes);
    Ok(BandwidthPoint {
        request_bytes: pages as u64 * u64::from(g.page_size_bytes),
        mib_per_s: crate::measure::mib_per_s(bytes, started.elapsed().as_secs_f64()),
    })
}

struct FioResult {
    iops: f64,
    latency_us_mean: f64,
}

/// fio random reads of `block_bytes` at multiples of `block_bytes`.
fn run_fio(file: &Path, queue_depth: u32, block_bytes: u64) -> Result<FioResult> {
    let json = fio_json(&[
        "--name=quarry-peer".into(),
        "--rw=randread".into(),
        format!("--bs={block_bytes}"),
        format!("--blockalign={block_bytes}"),
        "--direct=1".into(),
        "--ioengine=io_uring".into(),
        format!("--iodepth={queue_depth}"),
        "--runtime=4".into(),
        "--time_based".into(),
        format!("--filename={}", file.display()),
    ])?;
    let read = &json["jobs"][0]["read"];
    let iops = read["iops"].as_f64().context("fio JSON has no read.iops")?;
    // Total latency (submission to completion), as Quarry's is measured;
    // clat alone would leave out the submission.
    let latency_ns = read["lat_ns"]["mean"]
        .as_f64()
        .context("fio JSON has no read.lat_ns.mean")?;
    Ok(FioResult {
        iops,
        latency_us_mean: latency_ns / 1e3,
    })
}

fn print_backend(report: &BackendReport) {
    let g = report.geometry;
    println!(
        "\n== {} backend: {} x {} x {} x {} pages of {} B, {} per node, working set {} pages",
        report.backend,
        g.buses,
        g.chips_per_bus,
        g.blocks_per_chip,
        g.pages_per_block,
        g.page_size_bytes,
        human_bytes(g.capacity_bytes()),
        report.working_set_pages
    );
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "path",
        "QD",
        "IOPS",
        "MiB/s",
        "mean us",
        "p50 us",
        "p99 us",
        "ping-pongs",
    ]);
    for p in &report.points {
        table.add_row(vec![
            p.path.to_string(),
            p.queue_depth.to_string(),
            format!("{:.0}", p.iops),
            format!("{:.1}", p.mib_per_s),
            format!("{:.1}", p.latency_us_mean),
            format!("{:.1}", p.latency_us_p50),
            format!("{:.1}", p.latency_us_p99),
            format!("{:.2}", p.pingpongs),
        ]);
    }
    println!(
        "blocking loopback TCP ping-pong, 64 B out and the page + 64 B back, same run: {:.1} us; \
         a Quarry Ping at QD1: {:.1} us mean, {:.1} us p50\n{table}",
        report.pingpong_us_mean, report.ping_us_mean, report.ping_us_p50
    );
    if !report.fio.is_empty() {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "round",
            "QD",
            "fio block",
            "fio IOPS",
            "quarry IOPS",
            "ratio",
            "fio mean us",
            "quarry mean us",
            "added us",
        ]);
        for f in &report.fio {
            table.add_row(vec![
                f.round.to_string(),
                f.queue_depth.to_string(),
                human_bytes(f.fio_block_bytes),
                format!("{:.0}", f.fio_iops),
                format!("{:.0}", f.quarry_iops),
                format!("{:.2}", f.iops_ratio),
                format!("{:.1}", f.fio_latency_us_mean),
                format!("{:.1}", f.quarry_latency_us_mean),
                format!("{:.1}", f.added_latency_us),
            ]);
        }
        println!(
            "side by side with fio (random reads, O_DIRECT, io_uring, same file; fio at 8 KiB \
             and at Quarry's slot size):\n{table}"
        );
    }
    if !report.nand_bandwidth.is_empty() {
        let mut table = Table::new();
        table
            .load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["request size", "MiB/s"]);
        for b in &report.nand_bandwidth {
            table.add_row(vec![
                human_bytes(b.request_bytes),
                format!("{:.1}", b.mib_per_s),
            ]);
        }
        println!("bandwidth vs request size (RFSA Fig. 6), through the entry node:\n{table}");
    }
}
