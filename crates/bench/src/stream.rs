//! `quarry bench stream`: near-data compute off the disk. One managed node
//! (file backend, O_DIRECT, CRC-only ECC, 64 KiB pages, 16 MiB erase
//! blocks) holds one object put with large fixed chunks (fio's file, of the
//! same size in the node's data directory, is written at the same time);
//! rounds alternate fio's sequential O_DIRECT read (1 MiB blocks, 32 in
//! flight; also with its buffers on huge pages, 2 MiB blocks 2 in flight on
//! huge pages, and page-sized requests) with an fgrep8 scan (the cheapest
//! kernel: memchr) of the object through the client, each measurement right
//! after a read of the other file. The scan is compared with the best of the
//! fio rows: the device's sequential bandwidth. Then the node is restarted pinned to
//! each of a few read settings (`[compute]` in its configuration) and the
//! scan measured again, next to the adaptive tuner's figure and choice.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{
    BucketName, Chunking, Client, Condition, Job, KernelSpec, Limits, ObjectKey, Outcome, Output,
    Target,
};
use quarry_device::{BackendKind, Geometry};
use serde::Serialize;

use crate::args::BenchStreamArgs;
use crate::common::fio_json;
use crate::measure::{median, mib_per_s};
use quarry_jobs::human_bytes;
use quarry_jobs::parse_size;
use quarry_local::quarry_exe;
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

const PAGE_BYTES: u32 = 64 << 10;
/// fio's shallow row: requests of 2 MiB, two in flight.
const SHALLOW_BLOCK_BYTES: usize = 2 << 20;
const SHALLOW_DEPTH: usize = 2;
/// fio's usual sequential read: requests of 1 MiB, 32 in flight.
const DEEP_BLOCK_BYTES: usize = 1 << 20;
const DEEP_DEPTH: usize = 32;
const BUCKET: &str = "bench";
const KEY: &str = "stream";

#[derive(Debug, Serialize)]
struct SweepRow {
    depth: usize,
    read_ahead: usize,
    mib_per_s: f64,
    ratio_to_fio: f64,
    /// Median over the rounds of each scan's rate over the mean of the fio
    /// reads just before and just after it.
    ratio_paired: f64,
}

#[derive(Debug, Default, Serialize)]
struct Report {
    object_bytes: u64,
    chunk_bytes: u32,
    rounds: u32,
    fio_engine: String,
    fio_mib_per_s: f64,
    /// fio reading in requests of one device page (what each of the node's
    /// page reads is).
    fio_page_mib_per_s: f64,
    /// fio with its buffers on huge pages (hugetlbfs), when the machine
    /// allows it: a disk request carries a bounded number of memory
    /// segments, so buffers of scattered 4 KiB pages cap its size.
    fio_huge_mib_per_s: Option<f64>,
    /// Why there is no huge-page row, if there is none.
    fio_huge_unavailable: Option<String>,
    /// fio on huge pages with few, large requests in flight
    /// ([`SHALLOW_BLOCK_BYTES`] x [`SHALLOW_DEPTH`]): this virtual disk
    /// reads fastest with two to four requests in flight, a fifth faster
    /// than with 32 (`docs/benchmarks.md`).
    fio_shallow_mib_per_s: Option<f64>,
    /// The best fio row: the device's sequential read bandwidth.
    device_mib_per_s: f64,
    scan_mib_per_s: f64,
    ratio: f64,
    /// Median over the rounds of each scan between two of fio's best reads,
    /// over the mean of those two: the disk's rate drifts by a fifth
    /// between minutes, so a scan compares best with the reads seconds
    /// either side of it (a scan set against the read before it alone
    /// gained or lost whatever the drift did meanwhile).
    ratio_paired: f64,
    /// fio's best row against itself: per round, its read after the scan
    /// over its read before it (median, smallest, largest). How far the
    /// disk moves within one pairing, so how much one paired ratio says.
    fio_best_over_itself: Option<[f64; 3]>,
    ratio_to_page_reads: f64,
    /// A plain reader of fio's file that checks what it reads
    /// (`crate::plain_read`): the peer that, like a scan, touches its bytes.
    plain_reader_mib_per_s: f64,
    /// The same reader without the check: what its way of reading costs
    /// by itself, so the difference is the cost of touching the bytes.
    plain_reader_unchecked_mib_per_s: f64,
    /// Its buffers were on reserved huge pages in every round.
    plain_reader_huge_pages: bool,
    ratio_to_plain_reader: f64,
    /// Median over the rounds of the scan after the plain reader, over it.
    ratio_paired_plain_reader: f64,
    /// The adaptive tuner's last move, from the node's log.
    adaptive_choice: Option<String>,
    /// The scan's median after each kind of read (this disk's host caches
    /// what was read last, so what came before a scan moves its rate);
    /// `scan_mib_per_s` is the median over all of them.
    scan_after: Vec<(String, f64)>,
    sweep: Vec<SweepRow>,
}

const AFTER_FIO_DEEP: &str = "fio 1 MiB x 32";
const AFTER_FIO_DEEP_HUGE: &str = "fio 1 MiB x 32, huge pages";
const AFTER_FIO_SHALLOW: &str = "fio 2 MiB x 2, huge pages";
const AFTER_FIO_PAGE: &str = "fio 64 KiB x 32";
const AFTER_PLAIN: &str = "plain reader";
const AFTER_PLAIN_UNCHECKED: &str = "plain reader, unchecked";

/// The adaptive scans' rates, all together and by the read before each.
#[derive(Default)]
struct Scans {
    all: Vec<f64>,
    after: Vec<(&'static str, Vec<f64>)>,
}

impl Scans {
    fn push(&mut self, after: &'static str, mib_per_s: f64) {
        self.all.push(mib_per_s);
        match self.after.iter_mut().find(|(label, _)| *label == after) {
            Some((_, rates)) => rates.push(mib_per_s),
            None => self.after.push((after, vec![mib_per_s])),
        }
    }

    fn medians_after(&mut self) -> Vec<(String, f64)> {
        self.after
            .iter_mut()
            .map(|(label, rates)| (label.to_string(), median(rates)))
            .collect()
    }
}

/// Parses `DEPTHxAHEAD,...` (or `none`).
pub(crate) fn parse_sweep(text: &str) -> Result<Vec<(usize, usize)>> {
    if text.trim() == "none" || text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|item| {
            let (d, b) = item
                .trim()
                .split_once('x')
                .with_context(|| format!("--sweep item {item:?} is not DEPTHxAHEAD (e.g. 2x2)"))?;
            let depth: usize = d
                .parse()
                .with_context(|| format!("--sweep item {item:?}: depth {d:?}"))?;
            let ahead: usize = b
                .parse()
                .with_context(|| format!("--sweep item {item:?}: read-ahead {b:?}"))?;
            if quarry_kernels::ReadTuner::pinned(quarry_kernels::ReadSetting {
                depth,
                read_ahead: ahead,
            })
            .is_none()
            {
                bail!(
                    "--sweep item {item:?} is not on the read tuner's grid (depths {:?}, read-aheads {:?})",
                    quarry_kernels::ReadTuner::depths(),
                    quarry_kernels::ReadTuner::read_aheads()
                );
            }
            Ok((depth, ahead))
        })
        .collect()
}

/// Runs the benchmark and prints its table (or JSON).
pub fn stream(args: &BenchStreamArgs) -> Result<()> {
    let (size_bytes, rounds, sweep) = settings(args)?;
    let chunk_bytes = u32::try_from(parse_size(&args.chunk)?).context("--chunk")?;
    let (dir, _scratch) =
        crate::common::work_dir(args.common.dir.as_deref(), "quarry-bench-stream")?;
    let spec = cluster_spec(&dir, size_bytes)?;
    let exe = quarry_exe()?;
    let fio_engine = fio_engine();
    if !args.common.json {
        announce(size_bytes, chunk_bytes, &fio_engine, &dir);
    }
    let mut cluster = LocalCluster::start(&spec, &exe)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let node_dir = node_dir_of(&cluster)?;
    let fio_file = node_dir.join("fio.dat");
    let huge = HugeMemory::set_up(
        &dir.join("huge"),
        (DEEP_BLOCK_BYTES * DEEP_DEPTH).max(SHALLOW_BLOCK_BYTES * SHALLOW_DEPTH) as u64,
        NODE_HUGE_PAGES,
    );
    if let (Err(why), false) = (&huge, args.common.json) {
        eprintln!("  fio with huge-page buffers: unavailable ({why:#})");
    }
    let mut samples = Samples::default();
    let mut sweep_rows = Vec::new();
    let mut adaptive_choice = None;
    let result = (|| -> Result<()> {
        // The object and fio's file are written at the same time: this
        // virtual disk reads data written minutes ago slower than data just
        // written (a file written just now read 7% faster than one written
        // twenty minutes before, docs/benchmarks.md), so the file written
        // second would be the faster to read.
        std::thread::scope(|scope| {
            let fio_write = scope.spawn(|| write_fio_file(&fio_file, size_bytes, &fio_engine));
            let put = put_object(&runtime, &cluster, size_bytes, chunk_bytes);
            let written = fio_write
                .join()
                .map_err(|_| anyhow::anyhow!("the thread writing fio's file panicked"));
            put.and(written?)
        })?;
        // One scan first: connections, and the tuner's first windows.
        scan_once(&runtime, &cluster, size_bytes)?;
        // Every measurement follows a read of the other file: the virtual
        // disk's host caches what was read last, so a read right after
        // reading the same file again runs faster (fio's huge-page row read
        // right after its plain row was warm, the scans after fio cold).
        let huge_dir = huge.as_ref().ok().map(|h| h.dir.clone());
        let fio_read = |block: usize, depth: usize, huge: bool| {
            run_fio_read(
                &fio_file,
                size_bytes,
                &fio_engine,
                block,
                depth,
                huge.then_some(huge_dir.as_deref()).flatten(),
            )
        };
        let scan = || scan_once(&runtime, &cluster, size_bytes);
        for _ in 0..rounds {
            samples.measure_round(&fio_read, &scan, huge_dir.is_some(), &fio_file)?;
        }
        adaptive_choice = last_tuner_move(&node_dir.join("node.log"));
        // fio's best read, which each pinned row's scans sit between.
        let best = || match huge_dir {
            Some(_) => fio_read(SHALLOW_BLOCK_BYTES, SHALLOW_DEPTH, true),
            None => fio_read(DEEP_BLOCK_BYTES, DEEP_DEPTH, false),
        };
        let pinned = PinnedSweep {
            runtime: &runtime,
            exe: &exe,
            node_dir: &node_dir,
            size_bytes,
            rounds,
            quiet: args.common.json,
        };
        sweep_rows = pinned.run(&mut cluster, &sweep, &best)?;
        Ok(())
    })();
    let _ = std::fs::remove_file(&fio_file);
    let fio_huge_unavailable = huge.as_ref().err().map(|e| format!("{e:#}"));
    drop(huge);
    cluster.stop()?;
    result?;
    let report = samples.report(Report {
        object_bytes: size_bytes,
        chunk_bytes,
        rounds,
        fio_engine,
        fio_huge_unavailable,
        adaptive_choice,
        sweep: sweep_rows,
        ..Report::default()
    });
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print_report(&report);
    Ok(())
}

/// A pinned read setting: reads at the disk, reads held ahead.
type ReadSetting = (usize, usize);

/// The object's size, the rounds and the pinned settings to sweep.
fn settings(args: &BenchStreamArgs) -> Result<(u64, u32, Vec<ReadSetting>)> {
    let (size_bytes, rounds, sweep) = if args.common.quick {
        (64 << 20, 1, parse_sweep("1x1,4x2")?)
    } else {
        (
            parse_size(&args.size)?,
            args.rounds,
            parse_sweep(&args.sweep)?,
        )
    };
    if size_bytes == 0 {
        bail!("--size must be above zero");
    }
    Ok((size_bytes, rounds, sweep))
}

/// What the benchmark is about to measure, on stderr.
fn announce(size_bytes: u64, chunk_bytes: u32, fio_engine: &str, dir: &Path) {
    eprintln!(
        "bench stream: {} object, {} fixed chunks, 1 managed node (file backend, O_DIRECT, CRC-only ECC, 64 KiB pages) \
         vs fio (--rw=read --direct=1 --ioengine={fio_engine}; --bs={}k --iodepth={DEEP_DEPTH}, and --bs={}k --iodepth={SHALLOW_DEPTH} on huge pages) in {}",
        human_bytes(size_bytes),
        human_bytes(u64::from(chunk_bytes)),
        DEEP_BLOCK_BYTES >> 10,
        SHALLOW_BLOCK_BYTES >> 10,
        dir.display()
    );
}

/// The node's directory, where fio's file and the node's log are.
fn node_dir_of(cluster: &LocalCluster) -> Result<PathBuf> {
    Ok(cluster
        .cluster
        .nodes
        .first()
        .and_then(|n| n.config.as_ref())
        .and_then(|c| c.parent())
        .context("the node has no directory")?
        .to_path_buf())
}

/// The node's cluster: one managed node on the file backend, with room for
/// the object twice over (as bench objects sizes its nodes).
fn cluster_spec(dir: &Path, size_bytes: u64) -> Result<LocalClusterSpec> {
    let capacity = size_bytes * 2 + (64 << 20);
    let block_bytes = 256 * u64::from(PAGE_BYTES);
    let blocks_per_chip = capacity.div_ceil(16 * block_bytes).max(16);
    let geometry = Geometry {
        buses: 4,
        chips_per_bus: 4,
        blocks_per_chip: u32::try_from(blocks_per_chip).context("--size too large")?,
        pages_per_block: 256,
        page_size_bytes: PAGE_BYTES,
        oob_size_bytes: 64,
    };
    geometry.validate()?;
    Ok(LocalClusterSpec {
        nodes: 1,
        dir: dir.join("cluster"),
        backend: BackendKind::File,
        preset: None,
        geometry: Some(geometry),
        capacity_bytes: None,
        direct_io: true,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        ecc: quarry_device::EccMode::Crc,
        kv_toml: None,
        device_toml: None,
    })
}

/// What the rounds with the adaptive tuner measured, before the medians.
struct Samples {
    fio: Vec<f64>,
    fio_page: Vec<f64>,
    fio_huge: Vec<f64>,
    fio_shallow: Vec<f64>,
    /// Each scan over the mean of the shallow fio reads either side of it.
    paired_shallow: Vec<f64>,
    /// fio's shallow read after each scan over the one before it.
    shallow_over_itself: Vec<f64>,
    /// The plain reader's rates, its CRC of fio's file, whether all its
    /// buffers were on huge pages, and each scan after it over it.
    plain_reads: Vec<f64>,
    plain_crc: Option<u32>,
    plain_huge: bool,
    paired_plain: Vec<f64>,
    plain_unchecked: Vec<f64>,
    scans: Scans,
    /// Each scan that followed fio's best read, over that read.
    paired: Vec<f64>,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            fio: Vec::new(),
            fio_page: Vec::new(),
            fio_huge: Vec::new(),
            fio_shallow: Vec::new(),
            paired_shallow: Vec::new(),
            shallow_over_itself: Vec::new(),
            plain_reads: Vec::new(),
            plain_crc: None,
            plain_huge: true,
            paired_plain: Vec::new(),
            plain_unchecked: Vec::new(),
            scans: Scans::default(),
            paired: Vec::new(),
        }
    }
}

impl Samples {
    /// One round: each fio read and each plain read, with a scan after it.
    fn measure_round(
        &mut self,
        fio_read: &dyn Fn(usize, usize, bool) -> Result<f64>,
        next_scan: &dyn Fn() -> Result<f64>,
        huge: bool,
        fio_file: &Path,
    ) -> Result<()> {
        let plain = fio_read(DEEP_BLOCK_BYTES, DEEP_DEPTH, false)?;
        self.fio.push(plain);
        let scan = next_scan()?;
        self.scans.push(AFTER_FIO_DEEP, scan);
        if huge {
            let deep = fio_read(DEEP_BLOCK_BYTES, DEEP_DEPTH, true)?;
            self.fio_huge.push(deep);
            let scan = next_scan()?;
            self.scans.push(AFTER_FIO_DEEP_HUGE, scan);
            self.paired.push(scan / deep);
            let shallow = fio_read(SHALLOW_BLOCK_BYTES, SHALLOW_DEPTH, true)?;
            self.fio_shallow.push(shallow);
            let scan = next_scan()?;
            self.scans.push(AFTER_FIO_SHALLOW, scan);
            // The same read again after the scan, and a scan after it
            // so the next fio row still follows a read of the other file.
            let again = fio_read(SHALLOW_BLOCK_BYTES, SHALLOW_DEPTH, true)?;
            self.fio_shallow.push(again);
            self.paired_shallow.push(scan / ((shallow + again) / 2.0));
            self.shallow_over_itself.push(again / shallow);
            self.scans.push(AFTER_FIO_SHALLOW, next_scan()?);
        } else {
            self.paired.push(scan / plain);
        }
        self.fio_page
            .push(fio_read(PAGE_BYTES as usize, DEEP_DEPTH, false)?);
        self.scans.push(AFTER_FIO_PAGE, next_scan()?);
        settle();
        let plain = crate::plain_read::read_file(fio_file, true)?;
        if self.plain_crc.is_some() && self.plain_crc != plain.crc32c {
            bail!("fio's file read back with another CRC-32C than before");
        }
        self.plain_crc = plain.crc32c;
        self.plain_huge &= plain.huge_pages;
        self.plain_reads.push(plain.mib_per_s());
        let scan = next_scan()?;
        self.scans.push(AFTER_PLAIN, scan);
        self.paired_plain.push(scan / plain.mib_per_s());
        settle();
        let unchecked = crate::plain_read::read_file(fio_file, false)?;
        self.plain_huge &= unchecked.huge_pages;
        self.plain_unchecked.push(unchecked.mib_per_s());
        self.scans.push(AFTER_PLAIN_UNCHECKED, next_scan()?);
        Ok(())
    }

    /// The medians and ratios, over `base`'s settings and sweep.
    fn report(mut self, base: Report) -> Report {
        let scan_after = self.scans.medians_after();
        let (f, s) = (median(&mut self.fio), median(&mut self.scans.all));
        let fp = median(&mut self.fio_page);
        let fh = (!self.fio_huge.is_empty()).then(|| median(&mut self.fio_huge));
        let fs = (!self.fio_shallow.is_empty()).then(|| median(&mut self.fio_shallow));
        let device = f.max(fh.unwrap_or(0.0)).max(fs.unwrap_or(0.0));
        // Paired with whichever fio row is the device's figure.
        let plain = median(&mut self.plain_reads);
        let plain_no_check = median(&mut self.plain_unchecked);
        let ratio_paired = match fs {
            Some(fs) if fs >= device => median(&mut self.paired_shallow),
            _ => median(&mut self.paired),
        };
        Report {
            fio_mib_per_s: f,
            fio_page_mib_per_s: fp,
            fio_huge_mib_per_s: fh,
            fio_shallow_mib_per_s: fs,
            device_mib_per_s: device,
            scan_mib_per_s: s,
            ratio: s / device,
            ratio_paired,
            fio_best_over_itself: match fs {
                Some(fs) if fs >= device && !self.shallow_over_itself.is_empty() => {
                    let lo = self
                        .shallow_over_itself
                        .iter()
                        .copied()
                        .fold(f64::MAX, f64::min);
                    let hi = self
                        .shallow_over_itself
                        .iter()
                        .copied()
                        .fold(f64::MIN, f64::max);
                    Some([median(&mut self.shallow_over_itself), lo, hi])
                }
                _ => None,
            },
            ratio_to_page_reads: s / fp,
            plain_reader_mib_per_s: plain,
            plain_reader_unchecked_mib_per_s: plain_no_check,
            plain_reader_huge_pages: self.plain_huge,
            ratio_to_plain_reader: s / plain,
            ratio_paired_plain_reader: median(&mut self.paired_plain),
            scan_after,
            ..base
        }
    }
}

/// Rows of pinned read settings: the node restarted with each, its scans
/// measured between fio's best reads.
struct PinnedSweep<'a> {
    runtime: &'a tokio::runtime::Runtime,
    exe: &'a Path,
    node_dir: &'a Path,
    size_bytes: u64,
    rounds: u32,
    quiet: bool,
}

impl PinnedSweep<'_> {
    fn run(
        &self,
        cluster: &mut LocalCluster,
        sweep: &[(usize, usize)],
        best: &dyn Fn() -> Result<f64>,
    ) -> Result<Vec<SweepRow>> {
        let mut sweep_rows = Vec::new();
        let config_path = self.node_dir.join("node.toml");
        let adaptive_config = std::fs::read_to_string(&config_path)?;
        for &(depth, ahead) in sweep {
            cluster.stop_node(0)?;
            std::fs::write(
                &config_path,
                format!(
                    "{adaptive_config}\n[compute]\nread_depth = {depth}\nread_ahead = {ahead}\n"
                ),
            )?;
            cluster.restart_node(0, self.exe)?;
            // As for the adaptive rows, one scan first: a node just started
            // maps its read buffers and connections on its first scan.
            scan_once(self.runtime, cluster, self.size_bytes)?;
            // Each scan between two of fio's best reads, which are also
            // measured: the pinned row's ratio is to the fio reads of its
            // own rounds.
            let (mut v, mut peer, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
            let mut before = best()?;
            peer.push(before);
            for _ in 0..self.rounds {
                let scan = scan_once(self.runtime, cluster, self.size_bytes)?;
                let after = best()?;
                peer.push(after);
                v.push(scan);
                pairs.push(scan / ((before + after) / 2.0));
                before = after;
            }
            let m = median(&mut v);
            let p = median(&mut peer);
            let ratio_paired = median(&mut pairs);
            if !self.quiet {
                eprintln!("  pinned depth {depth}, read-ahead {ahead}: {m:.0} MiB/s (fio {p:.0})");
            }
            sweep_rows.push(SweepRow {
                depth,
                read_ahead: ahead,
                mib_per_s: m,
                ratio_to_fio: m / p,
                ratio_paired,
            });
        }
        if !sweep.is_empty() {
            cluster.stop_node(0)?;
            std::fs::write(&config_path, adaptive_config)?;
            cluster.restart_node(0, self.exe)?;
        }
        Ok(sweep_rows)
    }
}

/// The table of rates, each against the device's best fio row.
fn report_table(report: &Report) -> Table {
    let (f, fp, device) = (
        report.fio_mib_per_s,
        report.fio_page_mib_per_s,
        report.device_mib_per_s,
    );
    let (fh, fs, s) = (
        report.fio_huge_mib_per_s,
        report.fio_shallow_mib_per_s,
        report.scan_mib_per_s,
    );
    let (plain, plain_no_check, plain_huge) = (
        report.plain_reader_mib_per_s,
        report.plain_reader_unchecked_mib_per_s,
        report.plain_reader_huge_pages,
    );
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "sequential read",
        "MiB/s",
        "/ device (best fio)",
        "paired",
    ]);
    table.add_row(vec![
        format!(
            "fio --rw=read --direct=1 --bs={}k --iodepth={DEEP_DEPTH} --ioengine={}",
            DEEP_BLOCK_BYTES >> 10,
            report.fio_engine
        ),
        format!("{f:.0}"),
        format!("{:.2}", f / device),
        String::new(),
    ]);
    match fh {
        Some(fh) => table.add_row(vec![
            "fio, the same with buffers on huge pages (--iomem=mmaphuge)".to_string(),
            format!("{fh:.0}"),
            format!("{:.2}", fh / device),
            String::new(),
        ]),
        None => table.add_row(vec![
            "fio, the same with buffers on huge pages".to_string(),
            "—".into(),
            report
                .fio_huge_unavailable
                .clone()
                .unwrap_or_else(|| "unavailable".into()),
            String::new(),
        ]),
    };
    if let Some(fs) = fs {
        table.add_row(vec![
            format!(
                "fio, huge pages, {} requests, {SHALLOW_DEPTH} in flight (--iodepth={SHALLOW_DEPTH})",
                human_bytes(SHALLOW_BLOCK_BYTES as u64)
            ),
            format!("{fs:.0}"),
            format!("{:.2}", fs / device),
            String::new(),
        ]);
    }
    table.add_row(vec![
        format!(
            "fio, the same in {} requests (one device page)",
            human_bytes(u64::from(PAGE_BYTES))
        ),
        format!("{fp:.0}"),
        format!("{:.2}", fp / device),
        String::new(),
    ]);
    table.add_row(vec![
        format!(
            "plain reader of fio's file, checks its data ({} x {} O_DIRECT{} + CRC-32C)",
            crate::plain_read::READERS,
            human_bytes(crate::plain_read::CHUNK_BYTES as u64),
            if plain_huge { ", huge pages" } else { "" }
        ),
        format!("{plain:.0}"),
        format!("{:.2}", plain / device),
        String::new(),
    ]);
    table.add_row(vec![
        "  the same reader without the check".to_string(),
        format!("{plain_no_check:.0}"),
        format!("{:.2}", plain_no_check / device),
        String::new(),
    ]);
    table.add_row(vec![
        "quarry fgrep8 over the object (adaptive tuner)".to_string(),
        format!("{s:.0}"),
        format!("{:.2}", report.ratio),
        format!("{:.2}", report.ratio_paired),
    ]);
    table
}

/// The table and what it leaves out.
fn print_report(report: &Report) {
    let device = report.device_mib_per_s;
    let mut table = report_table(report);
    for r in &report.sweep {
        table.add_row(vec![
            format!(
                "  pinned: {} at the disk, {} read ahead",
                r.depth, r.read_ahead
            ),
            format!("{:.0}", r.mib_per_s),
            format!("{:.2}", r.ratio_to_fio),
            format!("{:.2}", r.ratio_paired),
        ]);
    }
    println!("{table}");
    println!(
        "(medians of {} round(s); scan = bytes_scanned / wall time of the command through the client; \
         each measurement follows a read of the other file; a pinned row's ratio is to the fio reads of its own rounds; \
         paired: the median over the rounds of each scan over the mean of fio's best reads just before and just after it)",
        report.rounds
    );
    if let Some([m, lo, hi]) = report.fio_best_over_itself {
        println!(
            "fio's best row over itself (its read after each scan over the one before): {m:.2} ({lo:.2}-{hi:.2})"
        );
    }
    println!(
        "scan / plain reader that checks its data: {:.2} (paired: the median over the rounds of the scan \
         after it, over it: {:.2})",
        report.ratio_to_plain_reader, report.ratio_paired_plain_reader
    );
    let after: Vec<String> = report
        .scan_after
        .iter()
        .map(|(label, rate)| format!("{label} {rate:.0} ({:.2})", rate / device))
        .collect();
    println!("adaptive scan by the read before it: {}", after.join("; "));
    if let Some(choice) = &report.adaptive_choice {
        println!("adaptive tuner's last move: {choice}");
    } else {
        let start = quarry_kernels::ReadTuner::new().current();
        println!(
            "adaptive tuner: stayed at its start ({} at the disk, {} read ahead)",
            start.depth, start.read_ahead
        );
    }
}

/// Waits a moment before a measurement, so none starts while the virtual
/// disk's host may still be busy with the last reader's requests (the
/// measurements alternate between two readers; the pause is the same for
/// both).
fn settle() {
    std::thread::sleep(Duration::from_millis(250));
}

async fn client(cluster: &LocalCluster) -> Result<Client> {
    let entry = &cluster.cluster.nodes[0].addr;
    Ok(Client::connect(entry)
        .await?
        .with_members(cluster.cluster.nodes.iter().map(|n| n.id)))
}

fn put_object(
    runtime: &tokio::runtime::Runtime,
    cluster: &LocalCluster,
    size_bytes: u64,
    chunk_bytes: u32,
) -> Result<()> {
    runtime.block_on(async {
        let objects = client(cluster).await?.objects().await?;
        let bucket = BucketName::new(BUCKET)?;
        objects
            .create_bucket(&bucket, Chunking::fixed(chunk_bytes)?)
            .await?;
        let (mut w, r) = tokio::io::duplex(1 << 20);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let mut source = crate::common::RandomBytes::new(size_bytes);
            while let Some(block) = source.next_block() {
                w.write_all(block).await?;
            }
            w.shutdown().await?;
            std::io::Result::Ok(())
        });
        objects
            .put(&bucket, &ObjectKey::new(KEY)?, r, Condition::Always)
            .await?;
        writer.await??;
        anyhow::Ok(())
    })
}

/// One fgrep8 over the object; returns MiB/s of bytes scanned. Retries a
/// few times while a restarted node opens its store.
fn scan_once(runtime: &tokio::runtime::Runtime, cluster: &LocalCluster, size: u64) -> Result<f64> {
    settle();
    let mut attempt = 0;
    loop {
        let r = runtime.block_on(async {
            let compute = client(cluster).await?.compute();
            let started = Instant::now();
            let (result, _) = compute
                .run(
                    Job::Scan(KernelSpec::Fgrep8 {
                        pattern: *b"Quarry8!",
                    }),
                    vec![Target::Object {
                        bucket: BUCKET.into(),
                        key: KEY.into(),
                    }],
                    Limits::default(),
                )
                .await?;
            let secs = started.elapsed().as_secs_f64();
            anyhow::Ok((result, secs))
        });
        match r {
            Ok((result, secs)) => {
                if result.bytes_scanned != size {
                    bail!("the scan read {} bytes of {size}", result.bytes_scanned);
                }
                match &result.outcome {
                    Outcome::Scan(t)
                        if matches!(t.first().map(|t| &t.output), Some(Output::Count(_))) => {}
                    other => bail!("unexpected scan outcome {other:?}"),
                }
                return Ok(mib_per_s(result.bytes_scanned, secs));
            }
            Err(e) if attempt < 20 => {
                attempt += 1;
                tracing::debug!("scan failed ({e:#}); retrying");
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(e),
        }
    }
}

/// io_uring when fio has it and the kernel allows it, else libaio.
fn fio_engine() -> String {
    let ok = Command::new("fio")
        .args([
            "--name=probe",
            "--ioengine=io_uring",
            "--rw=read",
            "--size=64k",
            "--bs=4k",
            "--filename=/dev/zero",
            "--output-format=json",
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok { "io_uring" } else { "libaio" }.to_string()
}

/// Writes the file fio reads, in full (no holes), on the node's disk.
fn write_fio_file(file: &Path, size_bytes: u64, engine: &str) -> Result<()> {
    fio_json(&[
        "--name=quarry-stream-fill".into(),
        "--rw=write".into(),
        "--bs=1M".into(),
        "--direct=1".into(),
        "--iodepth=32".into(),
        format!("--ioengine={engine}"),
        "--end_fsync=1".into(),
        format!("--size={size_bytes}"),
        format!("--filename={}", file.display()),
    ])?;
    Ok(())
}

/// fio's sequential O_DIRECT read of `file` in `block_bytes` requests,
/// `depth` in flight; returns MiB/s. `huge`: a hugetlbfs directory for
/// fio's buffers.
fn run_fio_read(
    file: &Path,
    size_bytes: u64,
    engine: &str,
    block_bytes: usize,
    depth: usize,
    huge: Option<&Path>,
) -> Result<f64> {
    settle();
    let mut args = vec![
        "--name=quarry-stream-peer".into(),
        "--rw=read".into(),
        format!("--bs={block_bytes}"),
        "--direct=1".into(),
        format!("--iodepth={depth}"),
        format!("--ioengine={engine}"),
        format!("--size={size_bytes}"),
        format!("--filename={}", file.display()),
    ];
    if let Some(dir) = huge {
        args.push(format!(
            "--iomem=mmaphuge:{}",
            dir.join("fio-buffers").display()
        ));
    }
    let json = fio_json(&args)?;
    let bw_kib = json["jobs"][0]["read"]["bw"]
        .as_f64()
        .context("fio JSON has no read.bw")?;
    Ok(bw_kib / 1024.0)
}

/// Huge pages for fio's buffers: a hugetlbfs mount, and enough reserved
/// huge pages (raised for the benchmark if need be, as root). Undone on
/// drop.
struct HugeMemory {
    dir: std::path::PathBuf,
    /// `vm.nr_hugepages` before, when it was raised.
    restore_pages: Option<u64>,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

/// Reserved huge pages for the node's read buffers: the device keeps up to
/// 128 of its 2 MiB buffers free for reuse, and a scan has about 100 more
/// in use. fio's best row reads into reserved huge pages, and so does the
/// node when some are free (on transparent ones otherwise, which read
/// slower here: `crates/device/src/buf.rs`).
const NODE_HUGE_PAGES: u64 = 256;

impl HugeMemory {
    /// Room for fio's buffer area of `fio_bytes` and `node_pages` huge
    /// pages more for the node.
    fn set_up(dir: &Path, fio_bytes: u64, node_pages: u64) -> Result<HugeMemory> {
        let huge_page_bytes = 2u64 << 20;
        let need = fio_bytes.div_ceil(huge_page_bytes) + 2 + node_pages;
        let free = free_huge_pages()?;
        let mut restore_pages = None;
        if free < need {
            let now: u64 = std::fs::read_to_string(NR_HUGEPAGES)
                .context("reading vm.nr_hugepages")?
                .trim()
                .parse()
                .context("vm.nr_hugepages")?;
            std::fs::write(NR_HUGEPAGES, format!("{}", now + need - free))
                .context("raising vm.nr_hugepages (needs root)")?;
            restore_pages = Some(now);
        }
        let mut huge = HugeMemory {
            dir: dir.to_path_buf(),
            restore_pages,
        };
        // The kernel grants what memory allows, maybe less than asked.
        let granted = free_huge_pages()?;
        if granted < need {
            huge.dir = std::path::PathBuf::new();
            bail!("{granted} free huge pages, fio and the node need {need}");
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mounted = Command::new("mount")
            .args(["-t", "hugetlbfs", "none"])
            .arg(dir)
            .status()
            .context("running mount")?;
        if !mounted.success() {
            huge.dir = std::path::PathBuf::new();
            bail!("mount -t hugetlbfs failed");
        }
        Ok(huge)
    }
}

/// `HugePages_Free` from /proc/meminfo.
fn free_huge_pages() -> Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .context("no HugePages_Free in /proc/meminfo (no huge page support)")
}

impl Drop for HugeMemory {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
        if let Some(pages) = self.restore_pages {
            let _ = std::fs::write(NR_HUGEPAGES, pages.to_string());
        }
    }
}

/// The last "read tuner moved" line of the node's log, shortened to its
/// fields.
fn last_tuner_move(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("read tuner moved"))?;
    // Strip ANSI colour codes, keep what follows the message.
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let at = plain.find("read tuner moved")?;
    Some(plain[at..].trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::parse_sweep;

    #[test]
    fn sweep_parses_settings_on_the_grid_and_refuses_others() {
        assert_eq!(
            parse_sweep("1x1, 2x2,8x8").unwrap(),
            vec![(1, 1), (2, 2), (8, 8)]
        );
        assert!(parse_sweep("none").unwrap().is_empty());
        let err = parse_sweep("5x1").unwrap_err().to_string();
        assert!(err.contains("not on the read tuner's grid"), "{err}");
        let err = parse_sweep("2x1M").unwrap_err().to_string();
        assert!(err.contains("read-ahead"), "{err}");
        let err = parse_sweep("2-2").unwrap_err().to_string();
        assert!(err.contains("DEPTHxAHEAD"), "{err}");
    }
}
