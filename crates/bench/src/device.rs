//! `quarry bench device`: device-level figures, measured in this process on a
//! `quarry_device::Device` (no node, no network), so they show the device
//! and its emulator alone:
//!
//! 1. NAND QD1 page-read latency against the preset's modeled device time
//!    plus the software time of the same read loop on the `mem` backend
//!    (RFSA Table II).
//! 2. Bandwidth vs request size on the nand device (RFSA Fig. 6), sequential
//!    and random, as a share of the preset's bus bandwidth; optionally an SVG.
//! 3. What the ECC costs: QD32 random reads of clean pages on the `file` and
//!    `mem` backends with the normal read path vs with the check skipped
//!    ([`OpenOptions::skip_read_check`]), and program throughput with encoding.
//! 4. What durability costs: programs on the `file` backend (O_DIRECT) at
//!    QD1 and QD32 acknowledged after the group-committed `fdatasync`
//!    (`sync_writes`, the default), the same without filling ahead of
//!    small programs ([`OpenOptions::skip_fill_ahead`]), and the same
//!    acknowledged when the write returns (durable across a process crash
//!    only), alternated.
//!
//! A benchmark reports figures and states its goals; it asserts nothing
//! about time.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use futures::stream::{FuturesUnordered, StreamExt};
use quarry_device::{
    BackendKind, BlockAddr, Device, DeviceConfig, Geometry, NandTiming, OpenOptions, PageAddr,
};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;

use crate::args::BenchDeviceArgs;
use crate::common::work_dir;
use crate::plot::{HLine, LinePlot, Series};
use crate::stats::LatencyStats;
use quarry_jobs::human_bytes;
use quarry_local::preset_of;

/// Goal of the QD1 measurement: measured / (modeled + software) at most this.
const LATENCY_RATIO_MAX: f64 = 1.10;
/// Goal of the bandwidth sweep: best point at least this share of the buses.
const BANDWIDTH_PEAK_FRACTION_MIN: f64 = 0.75;
/// Goal of the ECC measurement: read throughput lost to the check at most this.
const ECC_COST_MAX: f64 = 0.10;
/// Queue depth of the ECC read and program measurements.
const ECC_QUEUE_DEPTH: usize = 32;
/// Programs in flight while filling the nand device (not measured; deep so the
/// 64 chips' 0.4-2.1 ms program times overlap).
const NAND_FILL_QUEUE_DEPTH: usize = 256;
/// Requests per bandwidth point at least, however long they take.
const MIN_REQUESTS_PER_POINT: u64 = 3;
/// Distinct page contents written (cloned, so generating data costs nothing
/// in the measured program loop).
const DATA_PATTERNS: usize = 16;

/// How much of everything to do: the full run or `--quick`.
struct Plan {
    working_set_pages: usize,
    nand_qd1_reads: u64,
    mem_qd1_reads: u64,
    point_seconds: f64,
    max_request_bytes: u64,
    ecc_time_file: Duration,
    ecc_time_mem: Duration,
    ecc_rounds: u32,
    /// Programs per durability point at QD1 and at the deep queue.
    durability_pages_qd1: usize,
    durability_pages_deep: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                working_set_pages: 256,
                nand_qd1_reads: 100,
                mem_qd1_reads: 1000,
                point_seconds: 0.02,
                max_request_bytes: 256 << 10,
                ecc_time_file: Duration::from_millis(100),
                ecc_time_mem: Duration::from_millis(100),
                ecc_rounds: 1,
                durability_pages_qd1: 64,
                durability_pages_deep: 256,
            }
        } else {
            Plan {
                // 128 MiB of 8 KiB pages: room for random 16 MiB requests at
                // many positions, filled in about a second.
                working_set_pages: 16 * 1024,
                nand_qd1_reads: 2000,
                mem_qd1_reads: 20_000,
                point_seconds: 0.5,
                max_request_bytes: 16 << 20,
                ecc_time_file: Duration::from_secs(1),
                ecc_time_mem: Duration::from_millis(500),
                // Checked and unchecked alternate, so drift in the disk's
                // speed (large on a shared virtual disk) hits both alike.
                ecc_rounds: 4,
                // Whole blocks (64 chips x 64 pages), as the volume fills them.
                durability_pages_qd1: 4096,
                durability_pages_deep: 8192,
            }
        }
    }
}

/// Everything `--json` prints.
#[derive(Debug, Serialize)]
struct Report {
    preset: String,
    quick: bool,
    geometry: Geometry,
    working_set_pages: usize,
    latency: LatencyReport,
    bandwidth: BandwidthReport,
    ecc: EccReport,
    durability: Vec<DurabilityRow>,
}

/// Programs with and without the flush before the acknowledgement.
#[derive(Debug, Serialize)]
struct DurabilityRow {
    queue_depth: usize,
    programs: u64,
    synced_iops: f64,
    /// Durable, without filling ahead of small programs.
    synced_no_fill_iops: f64,
    unsynced_iops: f64,
    /// synced / unsynced.
    ratio: f64,
    /// `fdatasync` calls per program with `sync_writes` (group commit
    /// makes it below 1 when programs are in flight together).
    flushes_per_program: f64,
    synced_cpu_us_per_page: f64,
    unsynced_cpu_us_per_page: f64,
}

#[derive(Debug, Serialize)]
struct LatencyReport {
    reads: u64,
    nand_latency_us_mean: f64,
    nand_latency_us_p50: f64,
    nand_latency_us_p99: f64,
    /// Share of the nand reads the ECC had to correct (the preset's bit errors).
    nand_corrected_fraction: f64,
    /// command + mean tR + transfer of one page slot on an idle device.
    modeled_device_time_us: f64,
    /// command + shortest tR + transfer.
    modeled_device_time_us_min: f64,
    /// command + longest tR + transfer.
    modeled_device_time_us_max: f64,
    mem_reads: u64,
    software_latency_us_mean: f64,
    software_latency_us_p50: f64,
    software_latency_us_p99: f64,
    /// mean measured / (modeled + mean software).
    ratio_mean: f64,
    /// p50 measured / (modeled + p50 software).
    ratio_p50: f64,
    goal_ratio_max: f64,
    goal_met: bool,
}

#[derive(Debug, Serialize)]
struct BandwidthReport {
    /// Buses x per-bus rate (moves data and spare: a page's data is at most
    /// page / slot-in-use of it).
    peak_bus_bytes_per_s: u64,
    page_transfer_bytes: u64,
    points: Vec<BandwidthPoint>,
    /// Best point with the preset's bit errors (the goal's figure).
    best_peak_fraction: f64,
    /// Best point of the same timing without bit errors (diagnostic).
    best_peak_fraction_without_bit_errors: f64,
    goal_peak_fraction_min: f64,
    goal_met: bool,
}

#[derive(Debug, Serialize)]
struct BandwidthPoint {
    pattern: &'static str,
    /// False on the diagnostic device without the preset's bit errors.
    bit_errors: bool,
    request_bytes: u64,
    requests: u64,
    seconds: f64,
    /// Page data read per second.
    bytes_per_s: f64,
    mib_per_s: f64,
    peak_fraction: f64,
    corrected_fraction: f64,
}

#[derive(Debug, Serialize)]
struct EccReport {
    queue_depth: usize,
    backends: Vec<EccRow>,
    goal_cost_max: f64,
    goal_met: bool,
}

#[derive(Debug, Serialize)]
struct EccRow {
    backend: String,
    io_engine: String,
    direct_io: bool,
    read_checked_iops: f64,
    read_unchecked_iops: f64,
    /// 1 - checked / unchecked.
    cost_fraction: f64,
    /// Process CPU time per read (all threads), normal path.
    read_checked_cpu_us_per_page: f64,
    /// Process CPU time per read with the check skipped.
    read_unchecked_cpu_us_per_page: f64,
    /// The difference: what checking a clean page costs the CPU.
    check_cpu_us_per_page: f64,
    program_iops: f64,
    program_bytes_per_s: f64,
    /// Process CPU time per program, ECC encoding included.
    program_cpu_us_per_page: f64,
}

/// Runs the device benchmark.
pub fn device(args: &BenchDeviceArgs) -> Result<()> {
    let plan = Plan::new(args.common.quick);
    let (root, _scratch) = work_dir(args.common.dir.as_deref(), "quarry-bench-device")?;
    // The measuring loops run on this thread (block_on) and one worker drives
    // the I/O reactor: the nand emulator's scheduler thread needs the other
    // core (it spins near events), and one busy thread keeps CPU per page plain.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let report = runtime.block_on(run(args, &plan, &root))?;
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, bandwidth_plot(&report).to_svg())
            .with_context(|| format!("cannot write the plot to {}", path.display()))?;
        if !args.common.json {
            println!("plot: {}", path.display());
        }
    }
    Ok(())
}

async fn run(args: &BenchDeviceArgs, plan: &Plan, root: &Path) -> Result<Report> {
    let preset = preset_of(args.preset);
    let nand = open(
        BackendKind::Nand,
        preset,
        &root.join("nand"),
        OpenOptions::default(),
    )?;
    let geometry = nand.geometry();
    let set = working_set(&nand, plan.working_set_pages)?;
    eprintln!(
        "bench device: filling {} pages of the nand device ({})",
        set.len(),
        human_bytes(set.len() as u64 * u64::from(geometry.page_size_bytes))
    );
    fill(&nand, &set, NAND_FILL_QUEUE_DEPTH).await?;

    eprintln!("bench device: QD1 reads, nand and mem");
    let latency = latency(&nand, preset, &set, plan, root).await?;

    eprintln!("bench device: bandwidth vs request size");
    let mut points = bandwidth_sweep(&nand, &set, plan, true).await?;
    let timing = nand
        .nand_timing()
        .context("the nand device has no timing model")?
        .clone();
    let peak = nand
        .peak_bus_bandwidth()
        .context("the nand device has no bus model")?;
    nand.close().await?;
    // The same sweep on a device with the preset's timing but no bit errors:
    // tells the bus model's ceiling apart from the CPU time of correcting
    // the preset's bit errors in software.
    eprintln!("bench device: bandwidth vs request size, no bit errors");
    let clean_timing = NandTiming {
        rber_fresh: 0.0,
        rber_growth_per_erase: 0.0,
        ..timing.clone()
    };
    let clean = open(
        BackendKind::Nand,
        preset,
        &root.join("nand-no-bit-errors"),
        OpenOptions {
            nand_timing: Some(clean_timing),
            ..OpenOptions::default()
        },
    )?;
    let clean_set = working_set(&clean, plan.working_set_pages)?;
    fill(&clean, &clean_set, NAND_FILL_QUEUE_DEPTH).await?;
    points.extend(bandwidth_sweep(&clean, &clean_set, plan, false).await?);
    clean.close().await?;
    let best = |bit_errors: bool| {
        points
            .iter()
            .filter(|p| p.bit_errors == bit_errors)
            .map(|p| p.peak_fraction)
            .fold(0.0, f64::max)
    };
    let bandwidth = BandwidthReport {
        peak_bus_bytes_per_s: peak,
        page_transfer_bytes: timing.transfer_bytes,
        best_peak_fraction: best(true),
        best_peak_fraction_without_bit_errors: best(false),
        goal_peak_fraction_min: BANDWIDTH_PEAK_FRACTION_MIN,
        goal_met: best(true) >= BANDWIDTH_PEAK_FRACTION_MIN,
        points,
    };

    let mut rows = Vec::new();
    for (backend, time) in [
        (BackendKind::File, plan.ecc_time_file),
        (BackendKind::Mem, plan.ecc_time_mem),
    ] {
        eprintln!("bench device: ECC cost, {backend:?} backend");
        let dir = root.join(format!("ecc-{backend:?}").to_lowercase());
        rows.push(ecc_cost(backend, preset, &dir, plan, time).await?);
    }
    let ecc = EccReport {
        queue_depth: ECC_QUEUE_DEPTH,
        goal_cost_max: ECC_COST_MAX,
        goal_met: rows.iter().all(|r| r.cost_fraction <= ECC_COST_MAX),
        backends: rows,
    };
    let mut durability = Vec::new();
    for (depth, pages) in [
        (1, plan.durability_pages_qd1),
        (ECC_QUEUE_DEPTH, plan.durability_pages_deep),
    ] {
        eprintln!("bench device: durability cost, QD{depth}");
        durability.push(durability_cost(preset, root, plan, depth, pages).await?);
    }
    Ok(Report {
        durability,
        preset: format!("{preset:?}").to_lowercase(),
        quick: args.common.quick,
        geometry,
        working_set_pages: set.len(),
        latency,
        bandwidth,
        ecc,
    })
}

fn open(
    backend: BackendKind,
    preset: quarry_device::Preset,
    dir: &Path,
    options: OpenOptions,
) -> Result<Device> {
    open_config(
        &DeviceConfig {
            backend,
            preset: Some(preset),
            direct_io: Some(true),
            ..DeviceConfig::default()
        },
        dir,
        options,
    )
}

fn open_config(config: &DeviceConfig, dir: &Path, options: OpenOptions) -> Result<Device> {
    let backend = config.backend;
    Device::open_with(config, dir, options)
        .with_context(|| format!("cannot open a {backend:?} device in {}", dir.display()))
}

/// Programs `pages` pages at `depth` on the `file` backend with and without
/// `sync_writes`, alternating over the rounds so drift in the disk's speed
/// hits both alike.
async fn durability_cost(
    preset: quarry_device::Preset,
    root: &Path,
    plan: &Plan,
    depth: usize,
    pages: usize,
) -> Result<DurabilityRow> {
    // [synced, unsynced, synced without fill]: pages, seconds, cpu
    // seconds, flushes.
    let mut totals = [(0u64, 0.0f64, 0.0f64, 0u64); 3];
    for _ in 0..plan.ecc_rounds {
        for (mode, (sync, skip_fill_ahead)) in [(true, false), (false, false), (true, true)]
            .into_iter()
            .enumerate()
        {
            let config = DeviceConfig {
                backend: BackendKind::File,
                preset: Some(preset),
                direct_io: Some(true),
                sync_writes: Some(sync),
                ..DeviceConfig::default()
            };
            let dir = root.join(format!("durability-{mode}"));
            let options = OpenOptions {
                skip_fill_ahead,
                ..OpenOptions::default()
            };
            let device = open_config(&config, &dir, options)?;
            let set = working_set(&device, pages)?;
            let run = fill(&device, &set, depth).await?;
            totals[mode].0 += run.pages;
            totals[mode].1 += run.seconds;
            totals[mode].2 += run.cpu_seconds;
            totals[mode].3 += device.flushes();
            device.close().await?;
        }
    }
    let iops = |t: (u64, f64, f64, u64)| t.0 as f64 / t.1;
    let cpu_us = |t: (u64, f64, f64, u64)| t.2 / t.0.max(1) as f64 * 1e6;
    let (synced, unsynced) = (totals[0], totals[1]);
    Ok(DurabilityRow {
        queue_depth: depth,
        programs: synced.0,
        synced_iops: iops(synced),
        synced_no_fill_iops: iops(totals[2]),
        unsynced_iops: iops(unsynced),
        ratio: iops(synced) / iops(unsynced),
        flushes_per_program: synced.3 as f64 / synced.0.max(1) as f64,
        synced_cpu_us_per_page: cpu_us(synced),
        unsynced_cpu_us_per_page: cpu_us(unsynced),
    })
}

/// The first `limit` good pages, striped bus first, then chip, then page,
/// then block, so consecutive pages use every bus and every chip before any
/// chip is used twice.
fn working_set(device: &Device, limit: usize) -> Result<Vec<PageAddr>> {
    let g = device.geometry();
    let mut pages = Vec::with_capacity(limit);
    for block in 0..g.blocks_per_chip {
        for page in 0..g.pages_per_block {
            for chip in 0..g.chips_per_bus {
                for bus in 0..g.buses {
                    if pages.len() >= limit {
                        return Ok(pages);
                    }
                    let addr = PageAddr {
                        bus,
                        chip,
                        block,
                        page,
                    };
                    if !device.is_bad(addr.block_addr())? {
                        pages.push(addr);
                    }
                }
            }
        }
    }
    Ok(pages)
}

/// What filling a working set measured.
struct FillRun {
    pages: u64,
    seconds: f64,
    cpu_seconds: f64,
}

/// Erases the blocks of `set`, then programs its pages with at most `depth`
/// programs in flight. Each block's pages are programmed by one chain in page
/// order (the NAND rule); the chains share `depth` permits.
async fn fill(device: &Device, set: &[PageAddr], depth: usize) -> Result<FillRun> {
    let mut blocks: BTreeMap<BlockAddr, Vec<u32>> = BTreeMap::new();
    for addr in set {
        blocks.entry(addr.block_addr()).or_default().push(addr.page);
    }
    let mut erases: FuturesUnordered<_> = blocks
        .keys()
        .map(|&b| async move { (b, device.erase_block(b).await) })
        .collect();
    while let Some((block, result)) = erases.next().await {
        result.with_context(|| format!("cannot erase block {block}"))?;
    }
    let patterns = data_patterns(device.geometry().page_size_bytes as usize);
    let permits = Arc::new(tokio::sync::Semaphore::new(depth));
    let cpu = cpu_seconds();
    let started = Instant::now();
    let mut chains: FuturesUnordered<_> = blocks
        .iter()
        .map(|(&block, pages)| {
            let permits = Arc::clone(&permits);
            let patterns = &patterns;
            async move {
                for &page in pages {
                    let addr = block.page(page);
                    let _permit = permits.acquire().await?;
                    let data =
                        patterns[(page as usize + block.chip as usize) % patterns.len()].clone();
                    device
                        .program_page(addr, data, Bytes::new())
                        .await
                        .with_context(|| format!("cannot program page {addr}"))?;
                }
                anyhow::Ok(())
            }
        })
        .collect();
    while let Some(result) = chains.next().await {
        result?;
    }
    Ok(FillRun {
        pages: set.len() as u64,
        seconds: started.elapsed().as_secs_f64(),
        cpu_seconds: cpu_seconds() - cpu,
    })
}

fn data_patterns(page_size: usize) -> Vec<Bytes> {
    let mut rng = StdRng::seed_from_u64(0xDA7A);
    (0..DATA_PATTERNS)
        .map(|_| {
            let mut page = vec![0u8; page_size];
            rng.fill_bytes(&mut page);
            Bytes::from(page)
        })
        .collect()
}

/// What a run of random reads measured.
struct ReadRun {
    reads: u64,
    seconds: f64,
    cpu_seconds: f64,
    corrected: u64,
    stats: LatencyStats,
}

/// Random reads over `set` with `depth` in flight, until `max_reads` are
/// issued or `max_time` has passed.
async fn random_reads(
    device: &Device,
    set: &[PageAddr],
    depth: usize,
    max_reads: u64,
    max_time: Duration,
    seed: u64,
) -> Result<ReadRun> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut stats = LatencyStats::new();
    let mut in_flight = FuturesUnordered::new();
    let (mut issued, mut done, mut corrected) = (0u64, 0u64, 0u64);
    let cpu = cpu_seconds();
    let started = Instant::now();
    loop {
        while in_flight.len() < depth && issued < max_reads && started.elapsed() < max_time {
            let addr = set[rng.gen_range(0..set.len())];
            in_flight.push(async move {
                let sent = Instant::now();
                let result = device.read_page(addr).await;
                (addr, sent.elapsed(), result)
            });
            issued += 1;
        }
        let Some((addr, latency, result)) = in_flight.next().await else {
            break;
        };
        let page = result.with_context(|| format!("cannot read page {addr}"))?;
        stats.record(latency);
        done += 1;
        corrected += u64::from(page.corrected_bytes > 0);
    }
    Ok(ReadRun {
        reads: done,
        seconds: started.elapsed().as_secs_f64(),
        cpu_seconds: cpu_seconds() - cpu,
        corrected,
        stats,
    })
}

async fn latency(
    nand: &Device,
    preset: quarry_device::Preset,
    set: &[PageAddr],
    plan: &Plan,
    root: &Path,
) -> Result<LatencyReport> {
    let timing = nand
        .nand_timing()
        .context("the nand device has no timing model")?
        .clone();
    let measured = random_reads(nand, set, 1, plan.nand_qd1_reads, Duration::MAX, 1).await?;
    // The software time: the same loop on the mem backend, same geometry and
    // working set, where the medium costs nothing.
    let mem = open(
        BackendKind::Mem,
        preset,
        &root.join("mem"),
        OpenOptions::default(),
    )?;
    fill(&mem, set, ECC_QUEUE_DEPTH).await?;
    let software = random_reads(&mem, set, 1, plan.mem_qd1_reads, Duration::MAX, 2).await?;
    mem.close().await?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let modeled = us(timing.read_device_time());
    let ratio_mean = measured.stats.mean_us() / (modeled + software.stats.mean_us());
    let ratio_p50 = measured.stats.quantile_us(0.5) / (modeled + software.stats.quantile_us(0.5));
    let transfer = us(timing.transfer_time());
    Ok(LatencyReport {
        reads: measured.reads,
        nand_latency_us_mean: measured.stats.mean_us(),
        nand_latency_us_p50: measured.stats.quantile_us(0.5),
        nand_latency_us_p99: measured.stats.quantile_us(0.99),
        nand_corrected_fraction: measured.corrected as f64 / measured.reads.max(1) as f64,
        modeled_device_time_us: modeled,
        modeled_device_time_us_min: us(timing.read_device_time_min()),
        modeled_device_time_us_max: (timing.t_cmd_ns + timing.t_read_max_ns) as f64 / 1e3
            + transfer,
        mem_reads: software.reads,
        software_latency_us_mean: software.stats.mean_us(),
        software_latency_us_p50: software.stats.quantile_us(0.5),
        software_latency_us_p99: software.stats.quantile_us(0.99),
        ratio_mean,
        ratio_p50,
        goal_ratio_max: LATENCY_RATIO_MAX,
        goal_met: ratio_mean <= LATENCY_RATIO_MAX,
    })
}

/// Bandwidth at every request size, sequential and random, on one nand
/// device; `bit_errors` tells which device it is.
async fn bandwidth_sweep(
    nand: &Device,
    set: &[PageAddr],
    plan: &Plan,
    bit_errors: bool,
) -> Result<Vec<BandwidthPoint>> {
    let g = nand.geometry();
    let peak = nand
        .peak_bus_bandwidth()
        .context("the nand device has no bus model")?;
    let page_bytes = u64::from(g.page_size_bytes);
    // A request starts on a stripe boundary (one page on every chip) or, when
    // smaller, on a multiple of its own size, so it covers the same buses as
    // a sequential one.
    let stripe = (g.buses * g.chips_per_bus) as usize;
    let mut points = Vec::new();
    let mut pages = 1usize;
    while pages as u64 * page_bytes <= plan.max_request_bytes && pages <= set.len() {
        for random in [false, true] {
            let point =
                bandwidth_point(nand, set, pages, random, stripe, plan.point_seconds).await?;
            let bytes_per_s = point.pages as f64 * page_bytes as f64 / point.seconds;
            points.push(BandwidthPoint {
                pattern: if random { "random" } else { "sequential" },
                bit_errors,
                request_bytes: pages as u64 * page_bytes,
                requests: point.requests,
                seconds: point.seconds,
                bytes_per_s,
                mib_per_s: bytes_per_s / crate::measure::MIB,
                peak_fraction: bytes_per_s / peak as f64,
                corrected_fraction: point.corrected as f64 / point.pages.max(1) as f64,
            });
        }
        pages *= 2;
    }
    Ok(points)
}

struct PointRun {
    requests: u64,
    pages: u64,
    corrected: u64,
    seconds: f64,
}

/// Requests of `pages` consecutive pages of `set`, one at a time, each with
/// all its reads in flight at once (RFSA Fig. 6); sequential requests follow
/// each other, random ones start at a random aligned position.
async fn bandwidth_point(
    nand: &Device,
    set: &[PageAddr],
    pages: usize,
    random: bool,
    stripe: usize,
    seconds: f64,
) -> Result<PointRun> {
    let align = pages.min(stripe);
    let positions = (set.len() / align).max(1);
    let mut rng = StdRng::seed_from_u64(pages as u64);
    let (mut requests, mut corrected, mut start) = (0u64, 0u64, 0usize);
    let started = Instant::now();
    while requests < MIN_REQUESTS_PER_POINT || started.elapsed().as_secs_f64() < seconds {
        if random {
            start = rng.gen_range(0..positions) * align;
        }
        let mut reads: FuturesUnordered<_> = (0..pages)
            .map(|i| {
                let addr = set[(start + i) % set.len()];
                async move { (addr, nand.read_page(addr).await) }
            })
            .collect();
        while let Some((addr, result)) = reads.next().await {
            let page = result.with_context(|| format!("cannot read page {addr}"))?;
            corrected += u64::from(page.corrected_bytes > 0);
        }
        requests += 1;
        start = (start + pages) % set.len();
    }
    Ok(PointRun {
        requests,
        pages: requests * pages as u64,
        corrected,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Checked vs unchecked QD32 random reads of clean pages on one backend, and
/// QD32 program throughput. A file device is reopened in the other mode over
/// the same data; a mem device keeps nothing across a reopen, so each mode
/// has its own device, filled once and kept open.
async fn ecc_cost(
    backend: BackendKind,
    preset: quarry_device::Preset,
    dir: &Path,
    plan: &Plan,
    time: Duration,
) -> Result<EccRow> {
    let keep_open = backend == BackendKind::Mem;
    let mut kept: [Option<Device>; 2] = [None, None];
    let mut filled = [false; 2];
    let mut set = Vec::new();
    let mut program: Option<FillRun> = None;
    // [checked, unchecked]: reads, seconds, cpu seconds.
    let mut totals = [(0u64, 0.0f64, 0.0f64); 2];
    let (mut io_engine, mut direct_io, mut page_bytes) = (String::new(), false, 0.0);
    for round in 0..plan.ecc_rounds {
        for (mode, skip) in [false, true].into_iter().enumerate() {
            let options = OpenOptions {
                skip_read_check: skip,
                ..OpenOptions::default()
            };
            let device = match kept[mode].take() {
                Some(device) => device,
                None => open(backend, preset, dir, options)?,
            };
            if set.is_empty() {
                set = working_set(&device, plan.working_set_pages)?;
            }
            let needs_fill = if keep_open {
                !filled[mode]
            } else {
                program.is_none()
            };
            if needs_fill {
                let run = fill(&device, &set, ECC_QUEUE_DEPTH).await?;
                program.get_or_insert(run);
                filled[mode] = true;
            }
            let seed = u64::from(round) * 2 + mode as u64;
            let run = random_reads(&device, &set, ECC_QUEUE_DEPTH, u64::MAX, time, seed).await?;
            totals[mode].0 += run.reads;
            totals[mode].1 += run.seconds;
            totals[mode].2 += run.cpu_seconds;
            let info = device.info();
            io_engine = info.io_engine;
            direct_io = info.direct_io;
            page_bytes = f64::from(info.geometry.page_size_bytes);
            if keep_open {
                kept[mode] = Some(device);
            } else {
                device.close().await?;
            }
        }
    }
    for device in kept.into_iter().flatten() {
        device.close().await?;
    }
    let program = program.context("nothing was programmed")?;
    let iops = |t: (u64, f64, f64)| t.0 as f64 / t.1;
    let cpu_us = |t: (u64, f64, f64)| t.2 / t.0.max(1) as f64 * 1e6;
    let (checked, unchecked) = (totals[0], totals[1]);
    let program_iops = program.pages as f64 / program.seconds;
    Ok(EccRow {
        backend: format!("{backend:?}").to_lowercase(),
        io_engine,
        direct_io,
        read_checked_iops: iops(checked),
        read_unchecked_iops: iops(unchecked),
        cost_fraction: 1.0 - iops(checked) / iops(unchecked),
        read_checked_cpu_us_per_page: cpu_us(checked),
        read_unchecked_cpu_us_per_page: cpu_us(unchecked),
        check_cpu_us_per_page: cpu_us(checked) - cpu_us(unchecked),
        program_iops,
        program_bytes_per_s: program_iops * page_bytes,
        program_cpu_us_per_page: program.cpu_seconds / program.pages.max(1) as f64 * 1e6,
    })
}

/// CPU time of the whole process (user + system, every thread), seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes only into the zeroed struct we pass it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a rusage struct.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn yes_no(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn print_report(r: &Report) {
    let g = r.geometry;
    println!(
        "\n== quarry bench device: {} preset, {} x {} x {} x {} pages of {} B, working set {} pages{}",
        r.preset,
        g.buses,
        g.chips_per_bus,
        g.blocks_per_chip,
        g.pages_per_block,
        g.page_size_bytes,
        r.working_set_pages,
        if r.quick { " (--quick: figures mean little)" } else { "" }
    );

    print_latency(r);
    print_bandwidth(r);
    print_ecc(r);
    print_durability(r);
}

/// Table 4: programs with and without the flush before the acknowledgement.
fn print_durability(r: &Report) {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "queue depth",
        "programs",
        "durable IOPS",
        "durable, no fill ahead",
        "unflushed IOPS",
        "durable / unflushed",
        "fdatasyncs per program",
        "CPU us/page durable",
        "CPU us/page unflushed",
    ]);
    for row in &r.durability {
        table.add_row(vec![
            format!("{}", row.queue_depth),
            format!("{}", row.programs),
            format!("{:.0}", row.synced_iops),
            format!("{:.0}", row.synced_no_fill_iops),
            format!("{:.0}", row.unsynced_iops),
            format!("{:.2}", row.ratio),
            format!("{:.3}", row.flushes_per_program),
            format!("{:.1}", row.synced_cpu_us_per_page),
            format!("{:.1}", row.unsynced_cpu_us_per_page),
        ]);
    }
    println!(
        "\n4. What durability costs: programs on the file backend (O_DIRECT) acknowledged after \
         the group-committed fdatasync (sync_writes, the default) vs when the write returns \
         (safe from a process crash only), alternated:\n{table}"
    );
}

/// Table 1: QD1 latency against the timing model.
fn print_latency(r: &Report) {
    let l = &r.latency;
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "QD1 page read",
        "avg us",
        "p50 us",
        "p99 us",
    ]);
    let f = |v: f64| format!("{v:.1}");
    table.add_row(vec![
        format!("nand, measured ({} reads)", l.reads),
        f(l.nand_latency_us_mean),
        f(l.nand_latency_us_p50),
        f(l.nand_latency_us_p99),
    ]);
    table.add_row(vec![
        format!(
            "modeled device time (cmd + tR + transfer; tR range gives {:.1}-{:.1})",
            l.modeled_device_time_us_min, l.modeled_device_time_us_max
        ),
        f(l.modeled_device_time_us),
        f(l.modeled_device_time_us),
        "-".into(),
    ]);
    table.add_row(vec![
        format!(
            "software time: mem backend, same loop ({} reads)",
            l.mem_reads
        ),
        f(l.software_latency_us_mean),
        f(l.software_latency_us_p50),
        f(l.software_latency_us_p99),
    ]);
    table.add_row(vec![
        "modeled + software".into(),
        f(l.modeled_device_time_us + l.software_latency_us_mean),
        f(l.modeled_device_time_us + l.software_latency_us_p50),
        "-".into(),
    ]);
    table.add_row(vec![
        "ratio measured / (modeled + software)".into(),
        format!("{:.3}", l.ratio_mean),
        format!("{:.3}", l.ratio_p50),
        "-".into(),
    ]);
    println!("\n1. NAND QD1 latency (RFSA Table II), device level:\n{table}");
    println!(
        "   ECC corrected {:.0}% of the nand reads (the preset's bit errors).\n   goal: ratio <= {:.2}: {}",
        l.nand_corrected_fraction * 100.0,
        l.goal_ratio_max,
        yes_no(l.goal_met)
    );
}

/// Table 2: bandwidth vs request size.
fn print_bandwidth(r: &Report) {
    let g = r.geometry;
    let b = &r.bandwidth;
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "request",
        "seq MiB/s",
        "seq % peak",
        "random MiB/s",
        "random % peak",
        "no bit errors: seq MiB/s",
        "% peak",
        "random MiB/s",
        "% peak",
    ]);
    let mut sizes: Vec<u64> = b.points.iter().map(|p| p.request_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        let mut row = vec![human_bytes(size)];
        for (bit_errors, pattern) in [
            (true, "sequential"),
            (true, "random"),
            (false, "sequential"),
            (false, "random"),
        ] {
            match b.points.iter().find(|p| {
                p.request_bytes == size && p.pattern == pattern && p.bit_errors == bit_errors
            }) {
                Some(p) => row.extend([
                    format!("{:.1}", p.mib_per_s),
                    format!("{:.1}", p.peak_fraction * 100.0),
                ]),
                None => row.extend(["-".to_string(), "-".to_string()]),
            }
        }
        table.add_row(row);
    }
    println!(
        "\n2. Bandwidth vs request size (RFSA Fig. 6), nand {}, device level; peak = {} buses x bus rate = {:.1} MiB/s (moves {} B per 8 KiB page):\n{table}",
        r.preset,
        g.buses,
        b.peak_bus_bytes_per_s as f64 / crate::measure::MIB,
        b.page_transfer_bytes
    );
    let corrected = b
        .points
        .iter()
        .filter(|p| p.bit_errors)
        .map(|p| p.corrected_fraction)
        .fold(0.0, f64::max);
    println!(
        "   ECC corrected up to {:.0}% of the pages read with the preset's bit errors; the \
         \"no bit errors\" columns are the same timing on a second device with the error model off.\n   \
         goal: best >= {:.0}% of peak with the preset's bit errors: {:.1}%, {} (without bit errors: {:.1}%)",
        corrected * 100.0,
        b.goal_peak_fraction_min * 100.0,
        b.best_peak_fraction * 100.0,
        yes_no(b.goal_met),
        b.best_peak_fraction_without_bit_errors * 100.0
    );
}

/// Table 3: what the read path's ECC costs.
fn print_ecc(r: &Report) {
    let e = &r.ecc;
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "backend",
        "read IOPS checked",
        "read IOPS unchecked",
        "ECC cost",
        "CPU us/read checked",
        "CPU us/read unchecked",
        "check CPU us/page",
        "program IOPS",
        "program MiB/s",
        "program CPU us/page",
    ]);
    for row in &e.backends {
        table.add_row(vec![
            format!(
                "{} ({}{})",
                row.backend,
                row.io_engine,
                if row.direct_io { ", O_DIRECT" } else { "" }
            ),
            format!("{:.0}", row.read_checked_iops),
            format!("{:.0}", row.read_unchecked_iops),
            format!("{:.1}%", row.cost_fraction * 100.0),
            format!("{:.2}", row.read_checked_cpu_us_per_page),
            format!("{:.2}", row.read_unchecked_cpu_us_per_page),
            format!("{:.2}", row.check_cpu_us_per_page),
            format!("{:.0}", row.program_iops),
            format!("{:.1}", row.program_bytes_per_s / crate::measure::MIB),
            format!("{:.1}", row.program_cpu_us_per_page),
        ]);
    }
    println!(
        "\n3. ECC cost: QD{} random reads of clean pages, normal path vs check skipped; programs at QD{} with encoding (CPU = whole process, one runtime worker):\n{table}",
        e.queue_depth, e.queue_depth
    );
    println!(
        "   goal: cost <= {:.0}% on every backend: {}",
        e.goal_cost_max * 100.0,
        yes_no(e.goal_met)
    );
}

/// Bandwidth vs request size, both patterns, with the goal as a dashed line.
fn bandwidth_plot(r: &Report) -> LinePlot {
    let b = &r.bandwidth;
    let series = |pattern: &str, bit_errors: bool, name: &str, color: &'static str| Series {
        name: name.to_string(),
        color,
        points: b
            .points
            .iter()
            .filter(|p| p.pattern == pattern && p.bit_errors == bit_errors)
            .map(|p| (p.request_bytes as f64, p.mib_per_s))
            .collect(),
    };
    let peak_mib = b.peak_bus_bytes_per_s as f64 / crate::measure::MIB;
    LinePlot {
        title: format!(
            "nand {} ({} buses): read bandwidth vs request size",
            r.preset, r.geometry.buses
        ),
        x_label: "request size (log2)".into(),
        y_label: "MiB/s of page data".into(),
        log2_x: true,
        x_tick: |x| human_bytes(x as u64),
        series: vec![
            series("sequential", true, "sequential", "steelblue"),
            series("random", true, "random", "darkorange"),
            series(
                "sequential",
                false,
                "sequential, no bit errors",
                "lightsteelblue",
            ),
            series("random", false, "random, no bit errors", "navajowhite"),
        ],
        hlines: vec![
            HLine {
                name: format!("bus peak {peak_mib:.0} MiB/s"),
                color: "gray",
                y: peak_mib,
            },
            HLine {
                name: format!("goal: {:.0}% of peak", b.goal_peak_fraction_min * 100.0),
                color: "crimson",
                y: peak_mib * b.goal_peak_fraction_min,
            },
        ],
    }
}
