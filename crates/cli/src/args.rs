use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
pub use quarry_bench::BenchCommand;
pub use quarry_local::{DeviceArg, PresetArg};

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
    /// A tenant's key-value tables: get, set, del, stats (the memcached
    /// ports `quarry up` prints serve the same tables).
    Kv {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// Who is asking.
        #[command(flatten)]
        tenant: crate::kv_cmd::TenantArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::kv_cmd::KvCommand,
    },
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
    /// Run SQL over Parquet objects where their pages live: filters and
    /// partial aggregates at the nodes, only the answer to the client
    /// (the SQL subset: docs/query.md).
    Query(crate::query_cmd::QueryArgs),
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
    /// A TOML file with the key-value store's `[kv]` table (tenants, their
    /// modes, secrets and limits: docs/kv.md), given to every node.
    /// Default: one open tenant, `default`, in cache mode.
    #[arg(long, value_name = "FILE")]
    pub kv_config: Option<PathBuf>,
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
