//! `quarry mount DIR`: the cluster's buckets and objects as a file system,
//! until Ctrl-C, SIGTERM or `umount DIR`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use quarry_client::{Client, ClusterFile};
use quarry_mount::{run_until_signal, ConflictPolicy, MountOptions};

use crate::args::ClusterArg;

/// Arguments of `quarry mount`.
#[derive(Debug, Args, Clone)]
pub struct MountArgs {
    /// How to find the cluster: its members, and the entry node (the first
    /// of the file that answers, unless `--entry`).
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// The directory to mount on (must exist).
    pub dir: PathBuf,
    /// Enter the cluster through this node's address (`host:port`) instead.
    #[arg(long)]
    pub entry: Option<String>,
    /// Bytes fetched ahead of a sequential reader (K, M suffixes).
    #[arg(long, default_value = "4M")]
    pub read_ahead: String,
    /// What a close or fsync does when another writer replaced the file
    /// since it was opened.
    #[arg(long, value_enum, default_value = "last-writer-wins")]
    pub conflict: ConflictArg,
    /// Seconds the kernel may cache attributes and names.
    #[arg(long, default_value_t = 1.0)]
    pub attr_ttl: f64,
    /// Where open files are spooled while written (default: the system's
    /// temporary directory).
    #[arg(long)]
    pub spool_dir: Option<PathBuf>,
}

/// Conflict policies selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConflictArg {
    /// The last close or fsync makes the current version.
    LastWriterWins,
    /// A close or fsync whose file changed since it was opened fails with
    /// ESTALE and stores nothing.
    FailOnConflict,
}

/// Runs `quarry mount`.
pub fn mount(args: &MountArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let objects = runtime.block_on(async {
        let file = ClusterFile::load(&ClusterFile::locate(args.cluster.cluster.as_deref()))?;
        let client = match &args.entry {
            // Placement still spans every member of the file.
            Some(addr) => Client::connect(addr)
                .await?
                .with_members(file.nodes.iter().map(|n| n.id)),
            None => Client::connect_cluster(&file).await?,
        };
        anyhow::Ok(client.objects().await?)
    })?;
    let mut options = MountOptions {
        read_ahead_bytes: crate::objects_cmd::parse_size(&args.read_ahead)?,
        attr_ttl: Duration::from_secs_f64(args.attr_ttl.max(0.0)),
        conflict: match args.conflict {
            ConflictArg::LastWriterWins => ConflictPolicy::LastWriterWins,
            ConflictArg::FailOnConflict => ConflictPolicy::FailOnConflict,
        },
        runtime: Some(runtime.handle().clone()),
        ..MountOptions::default()
    };
    if let Some(spool) = &args.spool_dir {
        options.spool_dir = spool.clone();
    }
    eprintln!(
        "mounted the cluster's buckets on {}; Ctrl-C or `umount {}` to stop",
        args.dir.display(),
        args.dir.display()
    );
    run_until_signal(Arc::new(objects), &args.dir, options)
        .with_context(|| format!("mount on {}", args.dir.display()))?;
    Ok(())
}
