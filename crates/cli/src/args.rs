use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Quarry: a distributed storage system that computes where the data lives.
#[derive(Debug, Parser)]
#[command(name = "quarry", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one storage node (a daemon; stops cleanly on SIGTERM or Ctrl-C).
    Node {
        /// The node's TOML configuration.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Start a local cluster on loopback and write DIR/cluster.toml.
    Up(UpArgs),
    /// Stop the local cluster started by `quarry up` (its data stays).
    Down {
        /// The cluster's directory.
        #[arg(long, default_value = ".quarry")]
        dir: PathBuf,
    },
    /// Write and read data across every node of the cluster (starts a local
    /// cluster first if none is running) and show what it did and how long it took.
    Demo(DemoArgs),
    /// Show the nodes, their addresses, geometry, capacity, bad blocks and wear;
    /// with --routes, every node's fabric links and routing table.
    Status {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// Print each node's links and routing table instead.
        #[arg(long)]
        routes: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read, write or erase raw pages anywhere in the cluster, by global
    /// address or linear page number.
    ///
    /// A page is named either by its global address `node:bus:chip:block:page`
    /// or by its number in the cluster's linear page space, where consecutive
    /// pages go to different nodes, then buses, then chips, then pages of a
    /// block, then blocks, so one sequential range uses every node and bus.
    /// `N` is one linear page, `N..M` the pages N to M-1, `N+COUNT` COUNT
    /// pages from N.
    Page {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// What to do with the page.
        #[command(subcommand)]
        command: PageCommand,
    },
    /// The object store: buckets and keys.
    #[command(flatten)]
    Objects(crate::objects_cmd::ObjectCommand),
    /// Show the buckets and objects as a file system on DIR (FUSE), until
    /// Ctrl-C, SIGTERM or `umount DIR`.
    Mount(crate::mount_cmd::MountArgs),
    /// Block volumes: named logical page spaces striped over nodes, buses
    /// and chips; read and write any page through any node.
    Volume {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::volume_cmd::VolumeCommand,
    },
    /// Search objects, volume ranges or linear ranges near the data; prints
    /// what GNU grep prints for the same bytes (exit status 1 when nothing
    /// matched).
    Grep(crate::compute_cmd::GrepArgs),
    /// Count lines, words and bytes near the data; prints what GNU wc
    /// prints for the same bytes in this locale (C, or UTF-8 where Unicode
    /// spaces separate words too; from LC_ALL, LC_CTYPE, LANG). --word
    /// counts one word, --top K the most frequent words.
    Wc(crate::compute_cmd::WcArgs),
    /// Run any kernel near the data and print its result as JSON.
    Run(crate::compute_cmd::RunArgs),
    /// List the commands of the entry node and their status.
    Jobs {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel commands.
    Cancel {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// The commands' numbers (from `quarry jobs` or `quarry run --detach`).
        #[arg(required = true)]
        ids: Vec<u64>,
    },
    /// Measure Quarry side by side with what a user would use instead.
    Bench {
        /// Which benchmark.
        #[command(subcommand)]
        command: BenchCommand,
    },
}

/// How a command finds the cluster.
#[derive(Debug, Args, Clone)]
pub struct ClusterArg {
    /// The cluster file (default: $QUARRY_CLUSTER, else ./.quarry/cluster.toml).
    #[arg(long, value_name = "FILE", global = true)]
    pub cluster: Option<PathBuf>,
}

/// Device backends selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// A file per node (O_DIRECT where possible).
    File,
    /// DRAM; nothing survives a restart.
    Mem,
    /// Emulated NAND flash with a timing model.
    Nand,
}

/// Chip presets selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    /// BlueDBM's SLC boards.
    Bluedbm,
    /// RFSA's MLC boards.
    Rfsa,
}

/// Arguments of `quarry up`.
#[derive(Debug, Args, Clone)]
pub struct UpArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 4)]
    pub nodes: u16,
    /// Where the cluster keeps its data, logs and cluster.toml.
    #[arg(long, default_value = ".quarry")]
    pub dir: PathBuf,
    /// Device backend of every node.
    #[arg(long, value_enum, default_value = "file")]
    pub device: DeviceArg,
    /// Data each node holds (K, M, G, T suffixes: 512M, 8G). Default for
    /// `file` and `nand`: an eighth of the disk free under --dir, shared by
    /// the nodes, at least 512M and at most 16G a node (what the cluster in
    /// --dir was made with, when it exists); `mem`: 512M. The device files
    /// take disk space as data arrives, not up front.
    #[arg(long, value_name = "SIZE")]
    pub capacity: Option<String>,
    /// Chip preset (sets the geometry; the timing model for `nand`).
    #[arg(long, value_enum)]
    pub preset: Option<PresetArg>,
    /// How the nodes are linked (default: every node to every other).
    #[arg(long, value_enum, conflicts_with = "links")]
    pub topology: Option<TopologyArg>,
    /// Exactly these links instead of a shape, as `0-1,1-2,1-3`.
    #[arg(long, value_name = "A-B,...")]
    pub links: Option<String>,
    /// Return once the cluster is up instead of waiting for Ctrl-C.
    #[arg(long)]
    pub detach: bool,
    /// `managed`: each node's space manager owns its device and runs the
    /// object store and block volumes; `raw`: pages are programmed and
    /// erased directly (`quarry page write/erase`).
    #[arg(long, value_enum, default_value = "managed")]
    pub storage: StorageArg,
    /// Per-page code: `rs` (CRC-32C and RS parity, flash's ECC) or `crc`
    /// (CRC-32C only). Default: `rs` for `nand` (emulated flash flips
    /// bits), `crc` for `file` and `mem` (a disk and DRAM correct their
    /// own errors; parity there costs a quarter of a put's CPU and finds
    /// nothing the CRC does not).
    #[arg(long, value_enum)]
    pub ecc: Option<EccArg>,
}

/// Per-page codes selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EccArg {
    /// CRC-32C per sector and RS(255,243) parity.
    Rs,
    /// CRC-32C per sector only.
    Crc,
}

/// Storage modes selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StorageArg {
    /// Space manager, object store and volumes on the device.
    Managed,
    /// Raw pages.
    Raw,
}

/// Shapes of the fabric selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TopologyArg {
    /// Every node linked to every other.
    Mesh,
    /// Nodes in id order, each linked to the next.
    Line,
    /// A line whose ends are linked too.
    Ring,
    /// Node 0 linked to every other node.
    Star,
    /// A binary tree: node i linked to node (i - 1) / 2.
    Tree,
}

/// Arguments of `quarry demo`.
#[derive(Debug, Args, Clone)]
pub struct DemoArgs {
    /// How to find the cluster.
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// Pages to write on each node.
    #[arg(long, default_value_t = 64)]
    pub pages_per_node: u32,
}

/// `quarry page ...`.
#[derive(Debug, Subcommand)]
pub enum PageCommand {
    /// Read pages to stdout or --out.
    ///
    /// Raw bytes, or a hex dump when one page goes to a terminal; the pages of
    /// a linear range come concatenated, in linear order.
    Read {
        /// `node:bus:chip:block:page`, a linear page `N`, or a linear range
        /// `N..M` (end exclusive) or `N+COUNT`.
        #[arg(value_name = "ADDR")]
        addr: String,
        /// Write the data to this file.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Print the OOB bytes (hex) and the ECC report to stderr (one page only).
        #[arg(long)]
        oob: bool,
        /// Page reads in flight for a range.
        #[arg(long, default_value_t = 32, value_parser = queue_depth_parser())]
        queue_depth: u32,
    },
    /// Program pages from FILE or stdin; the last page is padded with zero bytes.
    ///
    /// A global address takes at most one page of input. A linear page `N`
    /// takes as many consecutive linear pages as the input needs; a range
    /// `N..M` or `N+COUNT` the same, but no more than the range holds
    /// (checked before anything is programmed). Input is read whole first,
    /// at most 1 GiB. The pages must be erased, and a block's pages are
    /// programmed in order.
    Write {
        /// `node:bus:chip:block:page`, a linear page `N`, or a linear range
        /// `N..M` (end exclusive) or `N+COUNT`.
        #[arg(value_name = "ADDR")]
        addr: String,
        /// The data (default: stdin).
        file: Option<PathBuf>,
        /// OOB bytes as hex (only when the input fits one page).
        #[arg(long, value_name = "HEX")]
        oob_hex: Option<String>,
        /// Page programs in flight (narrowed to one per chip of the cluster,
        /// so the pages of a block are programmed in order).
        #[arg(long, default_value_t = 32, value_parser = queue_depth_parser())]
        queue_depth: u32,
    },
    /// Erase one block (`node:bus:chip:block`).
    Erase {
        /// The block address.
        addr: String,
    },
}

/// `--queue-depth` accepts 1 to the client's limit for one linear request.
fn queue_depth_parser() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=quarry_client::MAX_LINEAR_QUEUE_DEPTH as i64)
}

/// `quarry bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Page latency and throughput per backend, locally and through a forwarding
    /// node; with --fio, side by side with fio on the same file.
    Page(BenchPageArgs),
    /// Device-level figures in this process (no node, no network): NAND QD1
    /// latency against the timing model, bandwidth vs request size (RFSA
    /// Fig. 6, with an SVG plot), and the read path's ECC cost.
    Device(BenchDeviceArgs),
    /// The storage fabric on the nand backend (BlueDBM timing): latency vs
    /// hops, bandwidth vs nodes, many hosts and many nodes, and QD1 latency
    /// under a competing stream; tables, --json and SVG plots.
    Fabric(BenchFabricArgs),
    /// Flash management (no node, no network): write amplification of random
    /// page overwrites at 50%, 80% and 90% full, next to ideal greedy
    /// cleaning simulated and in closed form.
    Volume(BenchVolumeArgs),
    /// The object store: put and get of one large object on a local
    /// managed cluster (file backend) vs fio sequential write and read of
    /// the same size on the same disk.
    Objects(BenchObjectsArgs),
    /// BlueDBM Fig. 11: word count in the datapath vs at the client vs
    /// plain host software, on loopback and on tc-limited client links.
    Wordcount(BenchComputeArgs),
    /// Minerva: fgrep-8 near the data vs the client's threaded range scans,
    /// and batched read-modify-write vs round trips.
    Minerva(BenchComputeArgs),
    /// Near-data compute, the kernel alone: the grep kernel (literal and
    /// regex) and wc -l folded over text in memory, one core, vs ripgrep
    /// and GNU wc on the same file hot in the page cache.
    Scan(BenchScanArgs),
    /// Near-data compute off the disk: fgrep8 streamed over one object on
    /// a 1-node managed cluster (file backend, O_DIRECT) vs fio sequential
    /// reads of the node's device file; and pinned read settings vs the
    /// adaptive tuner.
    Stream(BenchStreamArgs),
    /// Small objects: `cp -r` of a tree of small files into the FUSE mount
    /// (files/s, beside the same copy into a local directory), and a 4 KiB
    /// put and get at QD1 in loopback TCP ping-pongs measured in the run.
    Small(BenchSmallArgs),
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
    /// Where to keep the cluster, the tree and the mount (default: a
    /// temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A tiny run (120 files, 100 puts and gets): checks the benchmark works.
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
    /// A 64 MiB corpus and fewer operations.
    #[arg(long)]
    pub quick: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG plot of the rates per link here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
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
    /// Where to write the text file (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A tiny run (16 MiB of text, one round): checks the benchmark works.
    #[arg(long)]
    pub quick: bool,
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
    /// Where to keep the cluster (default: a temporary directory on the
    /// same disk as $TMPDIR).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A tiny run (a 64 MiB object, one round, a 2-setting sweep): checks
    /// the benchmark works.
    #[arg(long)]
    pub quick: bool,
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
    /// Fixed chunk size (K, M suffixes).
    #[arg(long, default_value = "1M")]
    pub chunk: String,
    /// Page size of the nodes' devices (512 B to 64 KiB; K suffix).
    #[arg(long, default_value = "64K")]
    pub page_size: String,
    /// Chips per node (its write parallelism: one program in flight per
    /// chip), as 4 buses of this many / 4 chips.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(4..=64))]
    pub chips: u32,
    /// Keep RS(255,243) parity on every page (flash ECC) instead of CRC-32C
    /// only (the disk under the file backend corrects its own errors).
    #[arg(long)]
    pub rs_ecc: bool,
    /// Leave out the FUSE part (read and write of the object through
    /// `quarry mount`).
    #[arg(long)]
    pub no_fuse: bool,
    /// Rounds (each: fio write, put, fio read, get); medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Where to keep the cluster and the files (default: a temporary
    /// directory on the same disk as $TMPDIR).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A tiny run (a 32 MiB object): checks the benchmark works.
    #[arg(long)]
    pub quick: bool,
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
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A tiny run (a small device, one overwrite pass): checks the benchmark
    /// works, in seconds; the figures mean little.
    #[arg(long)]
    pub quick: bool,
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
    /// Where to keep the benchmark clusters (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// A tiny run (few reads, queue depths up to 4, small devices): checks
    /// the benchmark works, in seconds; the figures mean little.
    #[arg(long)]
    pub quick: bool,
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
    /// Where to keep the devices' files (default: a temporary directory,
    /// removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// A tiny run (few reads, request sizes up to 256 KiB, small working
    /// sets): checks the benchmark works, in seconds; the figures mean little.
    #[arg(long)]
    pub quick: bool,
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
    /// Where to keep the benchmark clusters (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// A tiny run (few pages and reads, short streams): checks the benchmark
    /// works, in seconds; the figures mean little.
    #[arg(long)]
    pub quick: bool,
}
