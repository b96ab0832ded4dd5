//! The benchmarks behind `quarry bench ...`, each measuring Quarry side by
//! side with what a user would run instead (fio, a plain TCP stream, `rg`,
//! GNU tools) in the same run: pages, devices, the fabric, volumes, objects,
//! near-data scans and streams. It owns their arguments ([`BenchCommand`]),
//! running them ([`run`]), the helpers they share (latency statistics,
//! medians and rates, SVG plots) and the plain readers and network namespaces
//! the peers run in. Clusters come from `quarry-local`; the `quarry` binary
//! only parses the command line and calls [`run`].
//!
//! ```
//! use std::time::Duration;
//! use clap::Parser;
//! use quarry_bench::{BenchCommand, LatencyStats};
//!
//! #[derive(Parser)]
//! struct Bench {
//!     #[command(subcommand)]
//!     command: BenchCommand,
//! }
//! let bench = Bench::parse_from(["bench", "scan", "--quick"]);
//! assert!(matches!(bench.command, BenchCommand::Scan(ref scan) if scan.common.quick));
//!
//! let mut stats = LatencyStats::new();
//! stats.record(Duration::from_micros(80));
//! stats.record(Duration::from_micros(120));
//! assert_eq!(stats.count(), 2);
//! assert!((stats.mean_us() - 100.0).abs() < 1.0);
//! ```
#![deny(missing_docs)]

mod args;
mod common;
mod compute;
mod device;
mod fabric;
mod kv;
mod measure;
mod netlink;
mod objects;
mod page;
mod plain_read;
mod plot;
mod qd1;
mod query;
mod scan;
mod small;
mod small_steps;
mod stats;
mod stream;
mod volume;

pub use args::{
    BenchCommand, BenchComputeArgs, BenchDeviceArgs, BenchFabricArgs, BenchKvArgs,
    BenchObjectsArgs, BenchPageArgs, BenchQueryArgs, BenchScanArgs, BenchSmallArgs,
    BenchStreamArgs, BenchVolumeArgs, FabricPart, PolicyArg,
};
pub use stats::LatencyStats;

/// Runs one benchmark, printing its tables (and writing its plots) as it goes.
pub fn run(command: &BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Page(args) => page::page(args),
        BenchCommand::Device(args) => device::device(args),
        BenchCommand::Fabric(args) => fabric::fabric(args),
        BenchCommand::Volume(args) => volume::volume(args),
        BenchCommand::Objects(args) => objects::objects(args),
        BenchCommand::Wordcount(args) => compute::wordcount(args),
        BenchCommand::Query(args) => query::query(args),
        BenchCommand::Kv(args) => kv::kv(args),
        BenchCommand::Minerva(args) => compute::minerva(args),
        BenchCommand::Scan(args) => scan::scan(args),
        BenchCommand::Stream(args) => stream::stream(args),
        BenchCommand::Small(args) => small::small(args),
    }
}
