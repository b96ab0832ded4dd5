//! The `quarry` command line: argument parsing and the commands behind it.
//! The binary (`main.rs`) only installs logging and calls [`run`]. What the
//! commands share with other faces lives below: local clusters in
//! `quarry-local`, job parsing and grep/wc output in `quarry-jobs`, and the
//! benchmarks behind `quarry bench` in `quarry-bench`.
//!
//! ```
//! use clap::Parser;
//! use quarry_cli::{Cli, Command};
//!
//! let cli = Cli::parse_from(["quarry", "up", "--nodes", "2", "--device", "mem", "--detach"]);
//! assert!(matches!(cli.command, Command::Up(ref up) if up.nodes == 2 && up.detach));
//! ```
#![deny(missing_docs)]

mod allocator;
mod args;
mod commands;
mod compute_cmd;
mod dates;
mod demo;
mod kv_cmd;
mod mount_cmd;
mod objects_cmd;
mod query_cmd;
mod volume_cmd;

pub use allocator::tune_allocator;
pub use args::{Cli, ClusterArg, Command, DemoArgs, PageCommand, StorageArg, TopologyArg, UpArgs};
pub use compute_cmd::{
    result_json, CommandOptions, ExitStatus, GrepArgs, GrepRequest, RunArgs, WcArgs,
};
pub use mount_cmd::{ConflictArg, MountArgs};
pub use objects_cmd::{GetArgs, ObjectCommand, PutArgs};
pub use volume_cmd::VolumeCommand;

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
        Command::Kv {
            cluster,
            tenant,
            command,
        } => kv_cmd::kv(&cluster, &tenant, &command),
        Command::Volume { cluster, command } => {
            volume_cmd::volume(cluster.cluster.as_deref(), &command)
        }
        Command::Grep(args) => compute_cmd::grep(&args),
        Command::Wc(args) => compute_cmd::wc(&args),
        Command::Run(args) => compute_cmd::run(&args),
        Command::Query(args) => query_cmd::query(&args),
        Command::Jobs { cluster, json } => compute_cmd::jobs(&cluster, json),
        Command::Cancel { cluster, ids } => compute_cmd::cancel(&cluster, &ids),
        Command::Bench { command } => quarry_bench::run(&command),
    }
}

fn run_node(config: &std::path::Path) -> Result<()> {
    quarry_node::run_blocking(quarry_node::NodeConfig::load(config)?)?;
    Ok(())
}
