//! The `quarry` command line: argument parsing and the commands behind it.
//! The binary (`main.rs`) only installs logging and calls [`run`]; everything
//! else lives here so tests and benchmarks can reuse it. A local cluster
//! ([`LocalCluster`]) is a set of real `quarry node` processes on loopback.
//!
//! ```
//! use clap::Parser;
//! use quarry_cli::{Cli, Command};
//!
//! let cli = Cli::parse_from(["quarry", "up", "--nodes", "2", "--device", "mem", "--detach"]);
//! assert!(matches!(cli.command, Command::Up(ref up) if up.nodes == 2 && up.detach));
//! ```
#![deny(missing_docs)]

mod args;
mod bench;
mod bench_compute;
mod bench_device;
mod bench_fabric;
mod bench_objects;
mod bench_scan;
mod bench_small;
mod bench_stream;
mod bench_volume;
mod commands;
mod compute_cmd;
mod dates;
mod demo;
mod grep_output;
mod local_cluster;
mod mount_cmd;
mod netlink;
mod objects_cmd;
mod plain_read;
mod plot;
mod stats;
mod volume_cmd;

pub use args::{
    BenchCommand, BenchDeviceArgs, BenchFabricArgs, BenchObjectsArgs, BenchPageArgs, Cli,
    ClusterArg, Command, DemoArgs, DeviceArg, FabricPart, PageCommand, PresetArg, StorageArg,
    TopologyArg, UpArgs,
};
pub use compute_cmd::{
    format_grep, format_wc, parse_job, parse_target, result_json, CommandOptions, ExitStatus,
    GrepArgs, GrepFormat, GrepPrint, GrepRequest, ListFiles, RunArgs, WcArgs,
};
pub use local_cluster::{
    cluster_file_path, down, log_tail, process_alive, LocalCluster, LocalClusterSpec, Topology,
};
pub use mount_cmd::{ConflictArg, MountArgs};
pub use objects_cmd::{GetArgs, ObjectCommand, PutArgs};
pub use stats::LatencyStats;
pub use volume_cmd::{parse_size, VolumeCommand};

use anyhow::Result;

/// Runs one parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Node { config } => run_node(&config),
        Command::Up(args) => commands::up(&args),
        Command::Down { dir } => commands::down(&dir),
        Command::Demo(args) => demo::demo(&args),
        Command::Status {
            cluster,
            json,
            routes: false,
        } => commands::status(cluster.cluster.as_deref(), json),
        Command::Status {
            cluster,
            json,
            routes: true,
        } => commands::routes(cluster.cluster.as_deref(), json),
        Command::Page { cluster, command } => commands::page(cluster.cluster.as_deref(), &command),
        Command::Objects(command) => objects_cmd::run(&command),
        Command::Mount(args) => mount_cmd::mount(&args),
        Command::Volume { cluster, command } => {
            volume_cmd::volume(cluster.cluster.as_deref(), &command)
        }
        Command::Grep(args) => compute_cmd::grep(&args),
        Command::Wc(args) => compute_cmd::wc(&args),
        Command::Run(args) => compute_cmd::run(&args),
        Command::Jobs { cluster, json } => compute_cmd::jobs(&cluster, json),
        Command::Cancel { cluster, ids } => compute_cmd::cancel(&cluster, &ids),
        Command::Bench { command } => match command {
            BenchCommand::Page(args) => bench::page(&args),
            BenchCommand::Device(args) => bench_device::device(&args),
            BenchCommand::Fabric(args) => bench_fabric::fabric(&args),
            BenchCommand::Volume(args) => bench_volume::volume(&args),
            BenchCommand::Objects(args) => bench_objects::objects(&args),
            BenchCommand::Wordcount(args) => bench_compute::wordcount(&args),
            BenchCommand::Minerva(args) => bench_compute::minerva(&args),
            BenchCommand::Scan(args) => bench_scan::scan(&args),
            BenchCommand::Stream(args) => bench_stream::stream(&args),
            BenchCommand::Small(args) => bench_small::small(&args),
        },
    }
}

fn run_node(config: &std::path::Path) -> Result<()> {
    quarry_node::run_blocking(quarry_node::NodeConfig::load(config)?)?;
    Ok(())
}
