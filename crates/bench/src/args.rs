//! The arguments of `quarry bench ...`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use quarry_local::{DeviceArg, PresetArg};

/// `quarry bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Page latency and throughput per backend, locally and through a forwarding
    /// node; with --fio, side by side with fio on the same file.
    /// --quick: few reads, queue depths up to 4, small devices.
    Page(BenchPageArgs),
    /// Device-level figures in this process (no node, no network): NAND QD1
    /// latency against the timing model, bandwidth vs request size (RFSA
    /// Fig. 6, with an SVG plot), and the read path's ECC cost.
    /// --quick: few reads, request sizes up to 256 KiB, small working sets.
    Device(BenchDeviceArgs),
    /// The storage fabric on the nand backend (BlueDBM timing): latency vs
    /// hops, bandwidth vs nodes, many hosts and many nodes, and QD1 latency
    /// under a competing stream; tables, --json and SVG plots.
    /// --quick: few pages and reads, short streams.
    Fabric(BenchFabricArgs),
    /// Flash management (no node, no network): write amplification of random
    /// page overwrites at 50%, 80% and 90% full, next to ideal greedy
    /// cleaning simulated and in closed form.
    /// --quick: a small device, one overwrite pass.
    Volume(BenchVolumeArgs),
    /// The object store: put and get of one large object on a local
    /// managed cluster (file backend) vs fio sequential write and read of
    /// the same size on the same disk.
    /// --quick: a 32 MiB object.
    Objects(BenchObjectsArgs),
    /// BlueDBM Fig. 11: word count in the datapath vs at the client vs
    /// plain host software, on loopback and on tc-limited client links.
    /// --quick: a 64 MiB corpus and fewer operations.
    Wordcount(BenchComputeArgs),
    /// Minerva: fgrep-8 near the data vs the client's threaded range scans,
    /// and batched read-modify-write vs round trips.
    /// --quick: a 64 MiB corpus and fewer operations.
    Minerva(BenchComputeArgs),
    /// Near-data compute, the kernel alone: the grep kernel (literal and
    /// regex) and wc -l folded over text in memory, one core, vs ripgrep
    /// and GNU wc on the same file hot in the page cache.
    /// --quick: 16 MiB of text, one round.
    Scan(BenchScanArgs),
    /// Near-data compute off the disk: fgrep8 streamed over one object on
    /// a 1-node managed cluster (file backend, O_DIRECT) vs fio sequential
    /// reads of the node's device file; and pinned read settings vs the
    /// adaptive tuner.
    /// --quick: a 64 MiB object, one round, a 2-setting sweep.
    Stream(BenchStreamArgs),
    /// Small objects: `cp -r` of a tree of small files into the FUSE mount
    /// (files/s, beside the same copy into a local directory), and a 4 KiB
    /// put and get at QD1 in loopback TCP ping-pongs measured in the run.
    Small(BenchSmallArgs),
    /// SQL near the data (issue 21): TPC-H lineitem (tpchgen-cli from
    /// .venv) stored page by page on a 4-node cluster; one column read vs
    /// the whole file; Q1, Q6 and a selective GROUP BY near the data vs
    /// DuckDB through fsspec (quarry://) vs DuckDB on a local copy, per
    /// client link, with the bytes each moved. The fsspec peer uses the
    /// quarry package in .venv: for figures, build it with
    /// `maturin develop --release`. --quick: scale factor 0.05.
    Query(BenchQueryArgs),
    /// The key-value store (issue 22) on a 1-node cluster's memcached port,
    /// beside memcached 1.6 and Redis (AOF, fsync every second), all driven
    /// by one load generator with the same connections: get, set, YCSB A
    /// and B over zipfian keys (20-byte keys, 1000-byte values) at each
    /// connection count; value sizes 32 B to 64 KiB; the added latency of
    /// deduplication; Minerva's batched gets; Multes++ Fig. 5 (array
    /// elements per call); tenant isolation (a tenant over its rate limit
    /// beside a quiet one). --quick: short runs, few keys, fewer cells.
    Kv(BenchKvArgs),
}

/// Arguments of `quarry bench kv`.
#[derive(Debug, Args, Clone)]
pub struct BenchKvArgs {
    /// Connection counts, comma separated.
    #[arg(long, default_value = "1,32,128")]
    pub conns: String,
    /// Seconds each cell runs.
    #[arg(long, default_value_t = 2.0)]
    pub secs: f64,
    /// Keys in the key space (each loaded once before the runs).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Nodes of the Quarry cluster (1: one server, as memcached and Redis
    /// are).
    #[arg(long, default_value_t = 1)]
    pub nodes: u16,
    /// Head-to-head workloads to run, comma separated (get, set, ycsb-a,
    /// ycsb-b).
    #[arg(long, default_value = "get,set,ycsb-a,ycsb-b")]
    pub workloads: String,
    /// Pairs to run, comma separated: cache (beside memcached), everysec
    /// (durable with a 1 s flush, beside Redis AOF everysec), synced
    /// (durable, synced, beside Redis AOF always).
    #[arg(long, default_value = "cache,everysec,synced")]
    pub pairs: String,
    /// Sections to run, comma separated: head-to-head, value-sizes, shapes
    /// (dedup latency, batching, arrays, isolation); one alone is for
    /// profiling or repeating it.
    #[arg(long, default_value = "head-to-head,value-sizes,shapes")]
    pub sections: String,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Arguments of `quarry bench query`.
#[derive(Debug, Args, Clone)]
pub struct BenchQueryArgs {
    /// TPC-H scale factor (1: 6 million lineitem rows, about 200 MB of
    /// Parquet).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// The client's links: loopback and tc rates (e.g. 1gbit), comma
    /// separated; limited links need root, iproute2 and tc.
    #[arg(long, default_value = "loopback,1gbit")]
    pub links: String,
    /// Rounds per figure (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// What every benchmark takes.
#[derive(Debug, Args, Clone, Default)]
pub struct CommonArgs {
    /// Where to keep the benchmark's clusters and files (default: a
    /// temporary directory on the same disk as $TMPDIR, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// A tiny run that checks the benchmark works, in seconds; the figures
    /// mean little (the benchmark's help says what it shrinks).
    #[arg(long)]
    pub quick: bool,
}

/// Arguments of `quarry bench wordcount` and `quarry bench minerva`.
#[derive(Debug, Args, Clone)]
pub struct BenchComputeArgs {
    /// Size of the text corpus (K, M, G suffixes).
    #[arg(long, default_value = "512M")]
    pub size: String,
    /// The client's links: loopback and tc rates (e.g. 1gbit), comma
    /// separated; limited links need root, iproute2 and tc.
    #[arg(long, default_value = "loopback,10gbit,1gbit")]
    pub links: String,
    /// Rounds per figure (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Write an SVG plot of the rates per link here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Arguments of `quarry bench scan`.
#[derive(Debug, Args, Clone)]
pub struct BenchScanArgs {
    /// Bytes of generated text (K, M, G suffixes).
    #[arg(long, default_value = "256M")]
    pub size: String,
    /// Rounds (each: every row, kernel and peer alternating); medians are
    /// reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Arguments of `quarry bench stream`.
#[derive(Debug, Args, Clone)]
pub struct BenchStreamArgs {
    /// Object size (K, M, G suffixes). A few seconds of streaming: the
    /// virtual disk here moves its data in bursts, and a scan of half a
    /// second varied by a third from one to the next.
    #[arg(long, default_value = "4G")]
    pub size: String,
    /// Fixed chunk size of the object (K, M suffixes). A chunk is one run
    /// of pages (its header is in the first page's spare area), so larger
    /// chunks mean fewer, longer runs for the reader to stitch.
    #[arg(long, default_value = "4M")]
    pub chunk: String,
    /// Rounds (each: fio read, then the scan); medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Pinned read settings to sweep, as DEPTHxAHEAD (reads at the disk x
    /// reads held ahead of the kernels, for the node; e.g. 2x2), comma
    /// separated; "none" skips the sweep.
    #[arg(long, default_value = "1x1,1x2,2x2,4x2,8x8")]
    pub sweep: String,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Arguments of `quarry bench objects`.
#[derive(Debug, Args, Clone)]
pub struct BenchObjectsArgs {
    /// Object size (K, M, G suffixes).
    #[arg(long, default_value = "1G")]
    pub size: String,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub nodes: u16,
    /// Fixed chunk size (K, M suffixes). Default: what `quarry mb` gives a
    /// bucket.
    #[arg(long)]
    pub chunk: Option<String>,
    /// Page size of the nodes' devices (512 B to 64 KiB; K suffix).
    /// Default: `quarry up`'s geometry.
    #[arg(long)]
    pub page_size: Option<String>,
    /// Chips per node (its write parallelism: one program in flight per
    /// chip), as 4 buses of this many / 4 chips. Default: `quarry up`'s.
    #[arg(long, value_parser = clap::value_parser!(u32).range(4..=64))]
    pub chips: Option<u32>,
    /// Keep RS(255,243) parity on every page (flash ECC) instead of CRC-32C
    /// only, `quarry up`'s default for the file backend (the disk under it
    /// corrects its own errors).
    #[arg(long)]
    pub rs_ecc: bool,
    /// Leave out the FUSE part (read and write of the object through
    /// `quarry mount`).
    #[arg(long)]
    pub no_fuse: bool,
    /// Rounds (each: fio write, put, fio read, get); medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Arguments of `quarry bench volume`.
#[derive(Debug, Args, Clone)]
pub struct BenchVolumeArgs {
    /// Victim choice of the garbage collector.
    #[arg(long, value_enum, default_value = "greedy")]
    pub policy: PolicyArg,
    /// Write an SVG plot of write amplification vs fill to this file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Garbage-collection victim policies selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// The block with the fewest live pages.
    Greedy,
    /// Liveness and age (Rosenblum and Ousterhout).
    CostBenefit,
}

/// Arguments of `quarry bench page`.
#[derive(Debug, Args, Clone)]
pub struct BenchPageArgs {
    /// Backends to measure (default: all three).
    #[arg(long = "device", value_enum)]
    pub devices: Vec<DeviceArg>,
    /// Preset of the nand backend.
    #[arg(long, value_enum, default_value = "rfsa")]
    pub preset: PresetArg,
    /// Reads per measurement point.
    #[arg(long, default_value_t = 4000)]
    pub ops: u32,
    /// Largest queue depth (powers of two from 1).
    #[arg(long, default_value_t = 256)]
    pub max_queue_depth: u32,
    /// Also run fio on the file backend's backing file (8 KiB random reads,
    /// O_DIRECT), alternating with Quarry, and report ratios.
    #[arg(long)]
    pub fio: bool,
    /// Size of the file backend's device per node, in MiB (make it larger than
    /// the page cache can hide when O_DIRECT is unavailable).
    #[arg(long, default_value_t = 1024)]
    pub file_size_mib: u64,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Arguments of `quarry bench device`.
#[derive(Debug, Args, Clone)]
pub struct BenchDeviceArgs {
    /// Preset of the nand device (geometry and timing).
    #[arg(long, value_enum, default_value = "rfsa")]
    pub preset: PresetArg,
    /// Write an SVG plot of bandwidth vs request size to this file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Parts of `quarry bench fabric`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FabricPart {
    /// QD1 read latency vs hops on a 4-node line (nand, and mem for reference).
    Latency,
    /// Sequential read bandwidth of one client over 1, 2 and 4 nodes.
    Bandwidth,
    /// Many hosts on one node, and many hosts on many nodes.
    Multi,
    /// QD1 latency while another client streams over the same link.
    Load,
}

/// Arguments of `quarry bench fabric`.
#[derive(Debug, Args, Clone)]
pub struct BenchFabricArgs {
    /// Run only these parts (comma separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<FabricPart>,
    /// Buses per node (the nand device's bandwidth is 25 MB/s per bus with
    /// the BlueDBM preset).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub buses: u32,
    /// Chips per bus.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub chips: u32,
    /// Pages written per node before the reads (8 KiB each).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(16..=16384))]
    pub pages_per_node: u64,
    /// QD1 reads per hop count (latency) and per load case.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    pub reads: u64,
    /// Seconds each bandwidth measurement streams.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Reads in flight per node of the target set for bandwidth runs, per bus.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=128))]
    pub queue_depth: u32,
    /// Write the plots (fabric-*.svg) into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot_dir: Option<PathBuf>,
    /// Where to work, how to print, and --quick.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Arguments of `quarry bench small`.
#[derive(Debug, Args, Clone)]
pub struct BenchSmallArgs {
    /// Files in the tree copied into the mount (1 to 1 000 000).
    #[arg(long, default_value_t = 2780)]
    pub files: usize,
    /// Mean file size of the tree (K suffix); sizes spread from half to one
    /// and a half of it.
    #[arg(long, default_value = "10K")]
    pub file_size: String,
    /// The nodes' device backend (`file`, as `quarry up` makes, or `mem`
    /// to see the request path without the disk's write latency).
    #[arg(long, value_enum, default_value_t = DeviceArg::File)]
    pub device: DeviceArg,
    /// 4 KiB puts (then gets) timed one at a time (1 to 1 000 000).
    #[arg(long, default_value_t = 2000)]
    pub ops: usize,
    /// Where to work, how to print, and --quick (a tiny run: 120 files,
    /// 100 puts and gets).
    #[command(flatten)]
    pub common: CommonArgs,
}
