//! `quarry bench small`: small objects on a cluster with `quarry up`'s
//! defaults (4 file-backed nodes, a bucket of default chunking). Two
//! figures, each beside its peer measured in the same run:
//! - `cp -r` of a tree of many small files into the FUSE mount, in files
//!   per second, next to the same `cp -r` into a local directory;
//! - a 4 KiB object put and get at queue depth 1 (mean latency), in plain
//!   blocking loopback TCP ping-pongs of the same sizes;
//!
//! and the steps those are made of, each store call timed alone against
//! the entry node and another member ([`crate::small_steps`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{BucketName, Chunking, Client, Condition, ObjectKey, Objects};
use serde::Serialize;

use crate::args::BenchSmallArgs;
use crate::common::work_dir;
use crate::small_steps::{breakdown, Step};
use quarry_device::EccMode;
use quarry_jobs::parse_size;
use quarry_local::{backend_of, quarry_exe, DeviceArg, LocalCluster, LocalClusterSpec};

/// The object size of the QD1 figures.
const SMALL_OBJECT_BYTES: usize = 4096;
/// What the ping-pong's short side carries (a request or an answer
/// header).
const PING_SHORT_BYTES: usize = 64;
/// Most files in the tree, and most timed puts.
const MAX_COUNT: usize = 1_000_000;
/// Largest mean file size (small files are the point).
const MAX_FILE_BYTES: u64 = 16 << 20;
/// Files per directory of the generated tree (a source tree's order).
const FILES_PER_DIR: usize = 70;
/// Most rounds of each step of the breakdown.
const MAX_STEP_ROUNDS: usize = 500;

#[derive(Debug, Serialize)]
struct Report {
    quick: bool,
    nodes: u16,
    backend: String,
    files: usize,
    tree_bytes: u64,
    cp_mount_seconds: f64,
    cp_mount_files_per_s: f64,
    cp_local_files_per_s: f64,
    ops: usize,
    put_4k_us_mean: f64,
    get_4k_us_mean: f64,
    pingpong_put_us_mean: f64,
    pingpong_get_us_mean: f64,
    put_4k_pingpongs: f64,
    get_4k_pingpongs: f64,
    steps: Vec<Step>,
}

/// Runs the benchmark and prints its table (or JSON).
pub fn small(args: &BenchSmallArgs) -> Result<()> {
    let (files, ops) = if args.common.quick {
        (120, 100)
    } else {
        (args.files, args.ops)
    };
    let file_bytes = parse_size(&args.file_size)?;
    if !(1..=MAX_COUNT).contains(&files) || !(1..=MAX_COUNT).contains(&ops) {
        bail!("--files and --ops must be 1 to {MAX_COUNT}");
    }
    if !(1..=MAX_FILE_BYTES).contains(&file_bytes) {
        bail!("--file-size must be 1 byte to {MAX_FILE_BYTES} bytes");
    }
    let (dir, _guard) = work_dir(args.common.dir.as_deref(), "quarry-bench-small")?;
    let source = dir.join("tree");
    let tree_bytes = write_tree(&source, files, file_bytes)?;
    let local_started = Instant::now();
    cp_r(&source, &dir.join("local-copy"))?;
    let cp_local_files_per_s = files as f64 / local_started.elapsed().as_secs_f64();
    let mut spec = LocalClusterSpec::default_in(&dir.join("cluster"));
    spec.stop_with_this_process = true;
    spec.backend = backend_of(args.device);
    // As `quarry up` gives each backend: CRC-32C alone on file and mem,
    // Reed-Solomon on the NAND emulator.
    spec.ecc = match args.device {
        DeviceArg::Nand => EccMode::Rs,
        DeviceArg::File | DeviceArg::Mem => EccMode::Crc,
    };
    if !args.common.json {
        eprintln!(
            "bench small: {files} files ({tree_bytes} bytes) and {ops} QD1 4 KiB puts and gets on a {}-node cluster ({:?} backend, otherwise quarry up's defaults) in {}",
            spec.nodes,
            spec.backend,
            dir.display()
        );
    }
    let cluster = LocalCluster::start(&spec, &quarry_exe()?)?;
    let result = measure(&cluster, &dir, &source, files, ops);
    cluster.stop()?;
    let (cp_mount_seconds, put_us, get_us, steps) = result?;
    let (ping_put_us, ping_get_us) = ping_pong(ops.max(1000))?;
    let report = Report {
        quick: args.common.quick,
        nodes: spec.nodes,
        backend: format!("{:?}", spec.backend).to_lowercase(),
        files,
        tree_bytes,
        cp_mount_seconds,
        cp_mount_files_per_s: files as f64 / cp_mount_seconds,
        cp_local_files_per_s,
        ops,
        put_4k_us_mean: put_us,
        get_4k_us_mean: get_us,
        pingpong_put_us_mean: ping_put_us,
        pingpong_get_us_mean: ping_get_us,
        put_4k_pingpongs: put_us / ping_put_us,
        get_4k_pingpongs: get_us / ping_get_us,
        steps,
    };
    print_report(&report, args.common.json)
}

/// The cluster part: the QD1 puts and gets through the client, their
/// steps, then the `cp -r` through a mount. Returns (cp seconds, put us,
/// get us, steps).
fn measure(
    cluster: &LocalCluster,
    dir: &Path,
    source: &Path,
    files: usize,
    ops: usize,
) -> Result<(f64, f64, f64, Vec<Step>)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = runtime.block_on(Client::connect_cluster(&cluster.cluster))?;
    let objects = runtime.block_on(client.objects())?;
    let bucket = BucketName::new("bench")?;
    runtime.block_on(objects.create_bucket(&bucket, Chunking::default()))?;
    let (put_us, get_us) = runtime.block_on(qd1(&objects, &bucket, ops))?;
    let [entry, other, ..] = cluster.cluster.nodes.as_slice() else {
        bail!("the breakdown needs two nodes");
    };
    let steps = runtime.block_on(breakdown(
        &client,
        &objects,
        &bucket,
        (entry.id, other.id),
        ops.min(MAX_STEP_ROUNDS),
        SMALL_OBJECT_BYTES,
    ))?;
    let mount = MountProcess::start(dir, &cluster.cluster_path)?;
    let target = mount.dir.join("bench").join("tree");
    let started = Instant::now();
    cp_r(source, &target)?;
    let seconds = started.elapsed().as_secs_f64();
    drop(mount);
    // Every file must be an object now (cp's closes stored them).
    let listed = runtime.block_on(objects.list(&bucket, "tree/", None, files + 100))?;
    let stored = listed
        .iter()
        .filter(|m| !m.key().as_str().ends_with("/.quarry-dir"))
        .count();
    if stored != files {
        bail!("cp -r into the mount stored {stored} objects of {files} files");
    }
    Ok((seconds, put_us, get_us, steps))
}

/// Mean latency (us) of `ops` 4 KiB puts, one at a time, then of getting
/// each back (checking its bytes).
async fn qd1(objects: &Objects, bucket: &BucketName, ops: usize) -> Result<(f64, f64)> {
    let keys: Vec<ObjectKey> = (0..ops)
        .map(|i| ObjectKey::new(&format!("qd1/{i:06}")))
        .collect::<std::result::Result<_, _>>()?;
    let data: Vec<Vec<u8>> = (0..ops)
        .map(|i| text_bytes(i, SMALL_OBJECT_BYTES))
        .collect();
    let started = Instant::now();
    for (key, data) in keys.iter().zip(&data) {
        objects
            .put_bytes(bucket, key, data, Condition::Always)
            .await?;
    }
    let put_us = started.elapsed().as_secs_f64() * 1e6 / ops as f64;
    let started = Instant::now();
    for (key, data) in keys.iter().zip(&data) {
        let (_, got) = objects.get(bucket, key).await?;
        if got != data.as_slice() {
            bail!("get of {key} returned other bytes than were put");
        }
    }
    let get_us = started.elapsed().as_secs_f64() * 1e6 / ops as f64;
    Ok((put_us, get_us))
}

/// Mean round trip (us) of a blocking loopback TCP ping-pong shaped like a
/// small put (4 KiB out, a short answer back) and like a small get (a
/// short request out, 4 KiB back), `rounds` each.
fn ping_pong(rounds: usize) -> Result<(f64, f64)> {
    let put_us = crate::qd1::ping_pong_us(rounds, SMALL_OBJECT_BYTES, PING_SHORT_BYTES)?;
    let get_us = crate::qd1::ping_pong_us(rounds, PING_SHORT_BYTES, SMALL_OBJECT_BYTES)?;
    Ok((put_us, get_us))
}

/// `quarry mount` of a cluster in a child process, stopped on drop (which
/// unmounts, storing whatever is still open).
struct MountProcess {
    dir: PathBuf,
    child: Child,
}

impl MountProcess {
    fn start(work: &Path, cluster_file: &Path) -> Result<MountProcess> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .context("/dev/fuse cannot be opened (the cp -r figure needs FUSE)")?;
        let dir = work.join("mnt");
        std::fs::create_dir_all(&dir)?;
        let child = Command::new(quarry_exe()?)
            .args(["mount", "--no-kernels", "--cluster"])
            .arg(cluster_file)
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("cannot start quarry mount")?;
        let mount = MountProcess { dir, child };
        let bucket = mount.dir.join("bench");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::metadata(&bucket).is_err() {
            if Instant::now() > deadline {
                bail!("the mount did not show {} in time", bucket.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(mount)
    }
}

impl Drop for MountProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn cp_r(from: &Path, to: &Path) -> Result<()> {
    let status = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .context("cannot run cp")?;
    if !status.success() {
        bail!("cp -r {} {} failed: {status}", from.display(), to.display());
    }
    Ok(())
}

/// A tree of `files` files in directories of [`FILES_PER_DIR`], sizes
/// spread around `file_bytes` (half to one and a half of it); returns the
/// bytes written.
fn write_tree(root: &Path, files: usize, file_bytes: u64) -> Result<u64> {
    let mut total = 0u64;
    for i in 0..files {
        let sub = root.join(format!("dir{:03}", i / FILES_PER_DIR));
        if i % FILES_PER_DIR == 0 {
            std::fs::create_dir_all(&sub)
                .with_context(|| format!("cannot create {}", sub.display()))?;
        }
        let spread = (i as u64).wrapping_mul(7919) % file_bytes.max(1);
        let len = usize::try_from(file_bytes / 2 + spread).context("--file-size")?;
        let path = sub.join(format!("file{i:05}.rs"));
        std::fs::write(&path, text_bytes(i, len))
            .with_context(|| format!("cannot write {}", path.display()))?;
        total += len as u64;
    }
    Ok(total)
}

/// `len` bytes of text, different for every `seed` (no two files or
/// objects deduplicate).
fn text_bytes(seed: usize, len: usize) -> Vec<u8> {
    let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"abcdefghijklmnopqrstuvwxyz {}();\n"[(x % 33) as usize]
        })
        .collect()
}

fn print_report(r: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(vec!["figure", "Quarry", "peer in the same run", "ratio"]);
    table.add_row(vec![
        format!("cp -r of {} files into the mount", r.files),
        format!("{:.0} files/s", r.cp_mount_files_per_s),
        format!("{:.0} files/s into a local dir", r.cp_local_files_per_s),
        format!("{:.2}", r.cp_mount_files_per_s / r.cp_local_files_per_s),
    ]);
    table.add_row(vec![
        "4 KiB put, QD1 (mean)".to_string(),
        format!("{:.0} us", r.put_4k_us_mean),
        format!("{:.1} us TCP ping-pong 4 KiB/64 B", r.pingpong_put_us_mean),
        format!("{:.1} ping-pongs", r.put_4k_pingpongs),
    ]);
    table.add_row(vec![
        "4 KiB get, QD1 (mean)".to_string(),
        format!("{:.0} us", r.get_4k_us_mean),
        format!("{:.1} us TCP ping-pong 64 B/4 KiB", r.pingpong_get_us_mean),
        format!("{:.1} ping-pongs", r.get_4k_pingpongs),
    ]);
    println!("{table}");
    let mut steps = Table::new();
    steps.load_preset(UTF8_FULL_CONDENSED);
    steps.set_header(vec!["step (QD1, mean)", "us", "put/get ping-pongs"]);
    for s in &r.steps {
        let ping = if s.step.starts_with("put") {
            r.pingpong_put_us_mean
        } else {
            r.pingpong_get_us_mean
        };
        steps.add_row(vec![
            s.step.clone(),
            format!("{:.0}", s.us_mean),
            format!("{:.1}", s.us_mean / ping),
        ]);
    }
    println!("{steps}");
    Ok(())
}
