//! `quarry bench objects`: put and get of one large object on a local
//! managed cluster (file backend, O_DIRECT), side by side with fio's
//! sequential write and read of the same size on the same disk, as ratios.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{BucketName, Chunking, Client, Condition, ObjectKey};
use quarry_device::{BackendKind, Geometry};
use serde::Serialize;

use crate::args::BenchObjectsArgs;
use crate::common::CountingSink;
use crate::measure::{median, mib_per_s};
use quarry_jobs::human_bytes;
use quarry_jobs::parse_size;
use quarry_local::quarry_exe;
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

/// One measured transfer.
#[derive(Debug, Serialize)]
struct Row {
    what: &'static str,
    quarry_mib_per_s: f64,
    peer_mib_per_s: f64,
    ratio: f64,
}

/// A transfer through the FUSE mount next to the same one by the client.
#[derive(Debug, Serialize)]
struct FuseRow {
    what: &'static str,
    fuse_mib_per_s: f64,
    quarry_mib_per_s: f64,
    ratio: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    object_bytes: u64,
    nodes: u16,
    chunk_bytes: u32,
    rounds: u32,
    rows: Vec<Row>,
    fuse: Option<Vec<FuseRow>>,
    /// The fio setting that was best in each sweep (write, then read, each
    /// round): the peer is fio at its best on this disk.
    fio_best: Vec<FioBest>,
}

#[derive(Debug, Serialize)]
struct FioBest {
    rw: &'static str,
    setting: FioSetting,
}

/// What one run measures on: the object's size and bytes, the chunking,
/// and the cluster to start.
struct Plan {
    size_bytes: u64,
    dir: std::path::PathBuf,
    /// Removes the work directory when dropped (a temporary one).
    _scratch: Option<crate::common::TempDir>,
    chunking: Chunking,
    chunk_bytes: u32,
    source: std::path::PathBuf,
    spec: LocalClusterSpec,
}

/// Medians of every round, MiB/s.
struct Measured {
    /// The fio setting that won each sweep, in order (write, read per round).
    fio_settings: Vec<(&'static str, FioSetting)>,
    /// SHA-256 alone over the object's bytes in memory, on every core
    /// (dedup's own floor: a put hashes every byte once).
    sha256: f64,
    put: f64,
    get: f64,
    fio_write: f64,
    fio_read: f64,
    /// (write, read) through the mount, the last round.
    fuse: Option<(f64, f64)>,
}

/// Runs the benchmark and prints its table (or JSON).
pub fn objects(args: &BenchObjectsArgs) -> Result<()> {
    let plan = plan(args)?;
    let cluster = LocalCluster::start(&plan.spec, &quarry_exe()?)?;
    let measured = measure(args, &plan, &cluster);
    cluster.stop()?;
    let report = report(args, &plan, &measured?);
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print_report(&report, args.rounds);
    Ok(())
}

/// The settings a user gets from `quarry up` and `quarry mb` unless the
/// flags ask for others; only the capacity is chosen here, as a user would
/// with `quarry up --capacity`. Writes the source object.
fn plan(args: &BenchObjectsArgs) -> Result<Plan> {
    let size_bytes = if args.common.quick {
        32 << 20
    } else {
        parse_size(&args.size)?
    };
    if size_bytes == 0 {
        bail!("--size must be above zero");
    }
    let (dir, scratch) =
        crate::common::work_dir(args.common.dir.as_deref(), "quarry-bench-objects")?;
    let chunking = match &args.chunk {
        Some(text) => Chunking::fixed(u32::try_from(parse_size(text)?).context("--chunk")?)?,
        None => Chunking::DEFAULT_FIXED,
    };
    let chunk_bytes = match chunking {
        Chunking::Fixed { size } => size,
        Chunking::FastCdc { avg, .. }
        | Chunking::Parquet { avg, .. }
        | Chunking::Auto { avg, .. } => avg,
    };
    let mut shape = Geometry::default();
    if let Some(text) = &args.page_size {
        shape.page_size_bytes = u32::try_from(parse_size(text)?).context("--page-size")?;
    }
    if let Some(chips) = args.chips {
        shape.chips_per_bus = chips.div_ceil(shape.buses);
    }
    // Each node holds its share of the object plus room for the space
    // manager's over-provisioning and reserve: twice its share, rounded up
    // to whole blocks on every chip.
    let per_node = size_bytes.div_ceil(u64::from(args.nodes)) * 2 + (64 << 20);
    let row = shape.chips() * u64::from(shape.pages_per_block) * u64::from(shape.page_size_bytes);
    let capacity_bytes = per_node.div_ceil(row).max(16) * row;
    let geometry = shape.with_capacity(capacity_bytes)?;
    geometry.validate()?;
    let custom_shape = args.page_size.is_some() || args.chips.is_some();
    let source = dir.join("source.bin");
    write_source(&source, size_bytes)?;
    let spec = LocalClusterSpec {
        nodes: args.nodes,
        dir: dir.join("cluster"),
        backend: BackendKind::File,
        preset: None,
        geometry: custom_shape.then_some(geometry),
        capacity_bytes: (!custom_shape).then_some(capacity_bytes),
        direct_io: true,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        ecc: if args.rs_ecc {
            quarry_device::EccMode::Rs
        } else {
            quarry_device::EccMode::Crc
        },
        kv_toml: None,
        device_toml: None,
    };
    if !args.common.json {
        eprintln!(
            "bench objects: {} object, {} fixed chunks, {}-node managed cluster (file backend, O_DIRECT, {} ECC, {} chips x {} pages, {} per node) vs fio on {}",
            human_bytes(size_bytes),
            human_bytes(u64::from(chunk_bytes)),
            args.nodes,
            if args.rs_ecc { "RS" } else { "CRC-only" },
            geometry.buses * geometry.chips_per_bus,
            human_bytes(u64::from(geometry.page_size_bytes)),
            human_bytes(geometry.capacity_bytes()),
            dir.display()
        );
    }
    Ok(Plan {
        size_bytes,
        dir,
        _scratch: scratch,
        chunking,
        chunk_bytes,
        source,
        spec,
    })
}

/// Every round: fio write, put, fio read, get (the peer and Quarry
/// alternate so drift in the disk affects both); FUSE in the last.
fn measure(args: &BenchObjectsArgs, plan: &Plan, cluster: &LocalCluster) -> Result<Measured> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let size_bytes = plan.size_bytes;
    let entry = cluster.cluster.nodes[0].addr.clone();
    let fio_file = plan.dir.join("fio.dat");
    let (mut put, mut get, mut fio_write, mut fio_read) = (vec![], vec![], vec![], vec![]);
    let mut fuse: Option<(f64, f64)> = None;
    let mut fio_settings = Vec::new();
    let sha256 = sha256_alone(&plan.source, size_bytes)?;
    let members = cluster.cluster.nodes.iter().map(|n| (n.id, n.addr.clone()));
    let objects = runtime.block_on(async {
        Client::connect(&entry)
            .await?
            .with_member_addrs(members)
            .objects()
            .await
    })?;
    let bucket = BucketName::new("bench")?;
    runtime.block_on(objects.create_bucket(&bucket, plan.chunking))?;
    for round in 0..args.rounds {
        let (rate, setting) = best_fio(&fio_file, "write", size_bytes)?;
        fio_write.push(rate);
        fio_settings.push(("write", setting));
        let key = ObjectKey::new(&format!("big-{round}"))?;
        let started = Instant::now();
        runtime.block_on(async {
            let reader = quarry_client::file_source(std::fs::File::open(&plan.source)?);
            objects
                .put(&bucket, &key, reader, Condition::Always)
                .await?;
            anyhow::Ok(())
        })?;
        put.push(mib_per_s(size_bytes, started.elapsed().as_secs_f64()));
        let (rate, setting) = best_fio(&fio_file, "read", size_bytes)?;
        fio_read.push(rate);
        fio_settings.push(("read", setting));
        let started = Instant::now();
        let mut sink = CountingSink::default();
        runtime.block_on(objects.get_to(&bucket, &key, 0, u64::MAX, &mut sink))?;
        if sink.bytes != size_bytes {
            bail!("get returned {} bytes of {size_bytes}", sink.bytes);
        }
        get.push(mib_per_s(size_bytes, started.elapsed().as_secs_f64()));
        if round + 1 == args.rounds && !args.no_fuse {
            // The same transfers through the FUSE mount: read the object
            // just put, then write a copy of the source. The object goes
            // before the copy is written, so the copy's chunks are stored
            // anew, as the put's were, not deduplicated against it.
            let drop_object = || {
                runtime
                    .block_on(objects.delete(&bucket, &key, Condition::Always))
                    .map(|_| ())
                    .context("deleting the object before the FUSE write")
            };
            let mount = FuseRun {
                dir: &plan.dir,
                cluster_file: &cluster.cluster_path,
                entry: &entry,
                source: &plan.source,
                key: &key,
            };
            // A FUSE part that cannot run fails the benchmark (--no-fuse
            // leaves it out): a row silently missing proves nothing.
            fuse = Some(fuse_transfers(&mount, drop_object).context("the FUSE part")?);
            let copy = ObjectKey::new("fuse-copy")?;
            runtime.block_on(objects.delete(&bucket, &copy, Condition::Always))?;
        } else {
            // Free the space for the next round.
            runtime.block_on(objects.delete(&bucket, &key, Condition::Always))?;
        }
        let _ = std::fs::remove_file(&fio_file);
    }
    Ok(Measured {
        fio_settings,
        sha256,
        put: median(&mut put),
        get: median(&mut get),
        fio_write: median(&mut fio_write),
        fio_read: median(&mut fio_read),
        fuse,
    })
}

fn report(args: &BenchObjectsArgs, plan: &Plan, m: &Measured) -> Report {
    let (p, g) = (m.put, m.get);
    Report {
        object_bytes: plan.size_bytes,
        nodes: args.nodes,
        chunk_bytes: plan.chunk_bytes,
        rounds: args.rounds,
        fio_best: m
            .fio_settings
            .iter()
            .map(|&(rw, setting)| FioBest { rw, setting })
            .collect(),
        rows: vec![
            Row {
                what: "put vs fio sequential write",
                quarry_mib_per_s: p,
                peer_mib_per_s: m.fio_write,
                ratio: p / m.fio_write,
            },
            Row {
                what: "put vs SHA-256 alone, every core",
                quarry_mib_per_s: p,
                peer_mib_per_s: m.sha256,
                ratio: p / m.sha256,
            },
            Row {
                what: "get vs fio sequential read",
                quarry_mib_per_s: g,
                peer_mib_per_s: m.fio_read,
                ratio: g / m.fio_read,
            },
        ],
        fuse: m.fuse.map(|(write, read)| {
            vec![
                FuseRow {
                    what: "FUSE write (copy into the mount, close) vs put",
                    fuse_mib_per_s: write,
                    quarry_mib_per_s: p,
                    ratio: write / p,
                },
                FuseRow {
                    what: "FUSE read (sequential, 1 MiB reads) vs get",
                    fuse_mib_per_s: read,
                    quarry_mib_per_s: g,
                    ratio: read / g,
                },
            ]
        }),
    }
}

fn print_report(report: &Report, rounds: u32) {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "transfer",
        "quarry MiB/s",
        "peer MiB/s",
        "quarry / peer",
    ]);
    for r in &report.rows {
        table.add_row(vec![
            r.what.to_string(),
            format!("{:.1}", r.quarry_mib_per_s),
            format!("{:.1}", r.peer_mib_per_s),
            format!("{:.2}", r.ratio),
        ]);
    }
    println!("{table}");
    println!(
        "(medians of {rounds} rounds; fio: 1 MiB blocks, O_DIRECT, fsync at the end of writes, the best of \
         psync QD1 and io_uring at QD 4, 16, 32 and 2 jobs x QD 16 each round; SHA-256: the object's \
         first bytes in memory, 1 MiB at a time, one thread a core)"
    );
    let won: Vec<String> = report
        .fio_best
        .iter()
        .map(|b| {
            let s = b.setting;
            format!("{} {} QD{} x{}", b.rw, s.engine, s.queue_depth, s.jobs)
        })
        .collect();
    println!("(fio's best each round: {})", won.join(", "));
    if let [put_fio, put_sha, ..] = report.rows.as_slice() {
        // Issue 19's put goal: the lower of the two floors.
        let goal = (0.6 * put_fio.peer_mib_per_s).min(0.8 * put_sha.peer_mib_per_s);
        println!(
            "put goal: {goal:.0} MiB/s (the lower of 0.6 x fio write and 0.8 x SHA-256 alone); put {:.2} of it",
            put_fio.quarry_mib_per_s / goal
        );
    }
    if let Some(rows) = &report.fuse {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "through the mount",
            "FUSE MiB/s",
            "put/get MiB/s",
            "FUSE / put-get",
        ]);
        for r in rows {
            table.add_row(vec![
                r.what.to_string(),
                format!("{:.1}", r.fuse_mib_per_s),
                format!("{:.1}", r.quarry_mib_per_s),
                format!("{:.2}", r.ratio),
            ]);
        }
        println!("{table}");
        println!("(one round, the last; put/get figures are the medians above)");
    }
}

/// Where and what the FUSE part reads and writes.
struct FuseRun<'a> {
    dir: &'a Path,
    cluster_file: &'a Path,
    entry: &'a str,
    source: &'a Path,
    key: &'a ObjectKey,
}

/// Mounts the cluster with `quarry mount` (through `entry`), reads object
/// `key` of bucket `bench` through it, runs `between`, and copies `source`
/// in as `fuse-copy`; returns (write, read) MiB/s.
fn fuse_transfers(run: &FuseRun<'_>, between: impl FnOnce() -> Result<()>) -> Result<(f64, f64)> {
    use std::io::{Read, Write};
    let FuseRun {
        dir,
        cluster_file,
        entry,
        source,
        key,
    } = *run;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .context("/dev/fuse cannot be opened")?;
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let mut child = Command::new(quarry_exe()?)
        .args(["mount", "--cluster"])
        .arg(cluster_file)
        .args(["--entry", entry])
        .arg(&mnt)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("cannot start quarry mount")?;
    let result = (|| -> Result<(f64, f64)> {
        let object = mnt.join("bench").join(key.as_str());
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while std::fs::metadata(&object).is_err() {
            if Instant::now() > deadline {
                bail!("the mount did not show {} in time", object.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let mut buf = vec![0u8; 1 << 20];
        let started = Instant::now();
        let mut file = std::fs::File::open(&object)?;
        let mut read_bytes = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            read_bytes += n as u64;
        }
        let read = mib_per_s(read_bytes, started.elapsed().as_secs_f64());
        between()?;
        let started = Instant::now();
        let mut input = std::fs::File::open(source)?;
        let mut out = std::fs::File::create(mnt.join("bench/fuse-copy"))?;
        let mut written = 0u64;
        loop {
            let n = input.read(&mut buf)?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n])?;
            written += n as u64;
        }
        // The object is stored at close.
        drop(out);
        let write = mib_per_s(written, started.elapsed().as_secs_f64());
        Ok((write, read))
    })();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    result
}

/// Most bytes of the object hashed for the SHA-256 floor: enough to run
/// past the caches, little enough to hold in memory.
const SHA_SAMPLE_BYTES_MAX: u64 = 256 << 20;

/// MiB/s of SHA-256 over the first bytes of `source` held in memory, cut
/// into 1 MiB chunks as a put cuts them, on as many threads as there are
/// cores: the rate no deduplicating put can beat here (median of 3).
fn sha256_alone(source: &Path, size_bytes: u64) -> Result<f64> {
    use std::io::Read;
    let sample_bytes = size_bytes.min(SHA_SAMPLE_BYTES_MAX);
    let mut bytes = Vec::with_capacity(sample_bytes as usize);
    std::fs::File::open(source)
        .with_context(|| format!("cannot open {}", source.display()))?
        .take(sample_bytes)
        .read_to_end(&mut bytes)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunks: Vec<&[u8]> = bytes.chunks(1 << 20).collect();
    let mut rates = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        std::thread::scope(|scope| {
            for t in 0..threads {
                let chunks = &chunks;
                scope.spawn(move || {
                    for chunk in chunks.iter().skip(t).step_by(threads) {
                        std::hint::black_box(quarry_store_api::Fingerprint::of(chunk));
                    }
                });
            }
        });
        rates.push(mib_per_s(sample_bytes, started.elapsed().as_secs_f64()));
    }
    Ok(median(&mut rates))
}

/// Incompressible, non-repeating bytes (no chunk deduplicates).
fn write_source(path: &Path, size_bytes: u64) -> Result<()> {
    use std::io::Write;
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(4 << 20, file);
    let mut source = crate::common::RandomBytes::new(size_bytes);
    while let Some(block) = source.next_block() {
        out.write_all(block)?;
    }
    out.flush()?;
    Ok(())
}

/// fio's sequential `rw` (`write` or `read`) of `size_bytes` in 1 MiB
/// O_DIRECT blocks; returns MiB/s.
/// How fio drives the disk: an engine, requests in flight per job, jobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct FioSetting {
    engine: &'static str,
    queue_depth: u32,
    jobs: u32,
}

/// The settings swept each round; the best one is the peer (a user tuning
/// fio for this disk would find it). Two jobs each take half the file.
const FIO_SETTINGS: [FioSetting; 5] = [
    FioSetting {
        engine: "psync",
        queue_depth: 1,
        jobs: 1,
    },
    FioSetting {
        engine: "io_uring",
        queue_depth: 4,
        jobs: 1,
    },
    FioSetting {
        engine: "io_uring",
        queue_depth: 16,
        jobs: 1,
    },
    FioSetting {
        engine: "io_uring",
        queue_depth: 32,
        jobs: 1,
    },
    FioSetting {
        engine: "io_uring",
        queue_depth: 16,
        jobs: 2,
    },
];

/// fio's best sequential `rw` of `size_bytes` over [`FIO_SETTINGS`]:
/// (MiB/s, the setting that made it).
fn best_fio(file: &Path, rw: &str, size_bytes: u64) -> Result<(f64, FioSetting)> {
    let mut best: Option<(f64, FioSetting)> = None;
    for setting in FIO_SETTINGS {
        let rate = run_fio(file, rw, size_bytes, setting)?;
        if best.is_none_or(|(b, _)| rate > b) {
            best = Some((rate, setting));
        }
    }
    best.context("no fio setting to run")
}

fn run_fio(file: &Path, rw: &str, size_bytes: u64, setting: FioSetting) -> Result<f64> {
    let per_job_bytes = (size_bytes / u64::from(setting.jobs)).max(1 << 20);
    let json = crate::common::fio_json(&[
        "--name=quarry-peer".into(),
        format!("--rw={rw}"),
        "--bs=1M".into(),
        "--direct=1".into(),
        format!("--ioengine={}", setting.engine),
        format!("--iodepth={}", setting.queue_depth),
        format!("--numjobs={}", setting.jobs),
        format!("--offset_increment={per_job_bytes}"),
        "--group_reporting".into(),
        "--end_fsync=1".into(),
        format!("--size={per_job_bytes}"),
        format!("--filename={}", file.display()),
    ])?;
    let side = if rw == "write" { "write" } else { "read" };
    let bw_kib = json["jobs"][0][side]["bw"]
        .as_f64()
        .with_context(|| format!("fio JSON has no {side}.bw"))?;
    Ok(bw_kib / 1024.0)
}
