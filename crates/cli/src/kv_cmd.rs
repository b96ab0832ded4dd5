//! `quarry kv get|set|del|stats`: a tenant's key-value tables through the
//! Rust client (values of any size: large ones as slices).

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{Client, ClusterFile, Expiry, KvTables};

use crate::args::ClusterArg;

/// Who is asking.
#[derive(Debug, Args, Clone)]
pub struct TenantArg {
    /// The tenant (default: the `default` tenant of a cluster with no
    /// tenants configured).
    #[arg(
        long,
        env = "QUARRY_KV_TENANT",
        default_value = "default",
        global = true
    )]
    pub tenant: String,
    /// The tenant's secret.
    #[arg(
        long,
        env = "QUARRY_KV_SECRET",
        default_value = "",
        hide_env_values = true,
        global = true
    )]
    pub secret: String,
}

/// The key-value commands.
#[derive(Debug, Subcommand, Clone)]
pub enum KvCommand {
    /// Print the value under KEY (raw bytes; exit status 1 when absent).
    Get {
        /// The key.
        key: String,
    },
    /// Store a value under KEY: the VALUE argument, or --file (`-`: stdin).
    Set {
        /// The key.
        key: String,
        /// The value.
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        value: Option<String>,
        /// Read the value from this file (`-`: stdin).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The client's 32 opaque bits, as memcached's flags.
        #[arg(long, default_value_t = 0)]
        flags: u32,
        /// Seconds until it expires (0: never).
        #[arg(long, default_value_t = 0)]
        ttl: u64,
    },
    /// Delete KEYS.
    Del {
        /// The keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// The tenant's figures, summed over the nodes: memcached's counters
    /// and dedup (logical bytes, stored bytes, ratio).
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// One column per node too.
        #[arg(long)]
        nodes: bool,
    },
}

/// `quarry kv ...`.
pub fn kv(cluster: &ClusterArg, tenant: &TenantArg, command: &KvCommand) -> Result<()> {
    crate::compute_cmd::runtime()?.block_on(async {
        let path = ClusterFile::locate(cluster.cluster.as_deref());
        let file = ClusterFile::load(&path)?;
        let client = Client::connect_cluster(&file).await?;
        let tables = client.kv(&tenant.tenant, &tenant.secret).await?;
        run(&tables, command).await
    })
}

async fn run(tables: &KvTables, command: &KvCommand) -> Result<()> {
    match command {
        KvCommand::Get { key } => match tables.get_large(key.as_bytes()).await? {
            Some(value) => {
                let mut out = std::io::stdout().lock();
                out.write_all(&value)?;
                out.flush()?;
                Ok(())
            }
            None => {
                eprintln!("quarry: no key {key:?}");
                std::process::exit(1);
            }
        },
        KvCommand::Set {
            key,
            value,
            file,
            flags,
            ttl,
        } => {
            let bytes = match (value, file) {
                (Some(v), _) => Bytes::copy_from_slice(v.as_bytes()),
                (None, Some(p)) if p.as_os_str() == "-" => {
                    let mut buf = Vec::new();
                    std::io::stdin().read_to_end(&mut buf)?;
                    Bytes::from(buf)
                }
                (None, Some(p)) => Bytes::from(
                    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
                ),
                (None, None) => bail!("give a VALUE or --file"),
            };
            let expiry = Expiry::after_secs(*ttl)
                .with_context(|| format!("a ttl of {ttl} seconds is past any time"))?;
            let n = bytes.len();
            tables
                .set_large(key.as_bytes(), bytes, *flags, expiry)
                .await?;
            println!("stored {key} ({n} bytes)");
            Ok(())
        }
        KvCommand::Del { keys } => {
            let mut missing = 0;
            for key in keys {
                if tables.delete_large(key.as_bytes()).await? {
                    println!("deleted {key}");
                } else {
                    eprintln!("quarry: no key {key:?}");
                    missing += 1;
                }
            }
            if missing > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
        KvCommand::Stats { json, nodes } => stats(tables, *json, *nodes).await,
    }
}

/// The tenant's figures summed over the nodes (`ClusterFigures`), with
/// each node's beside them on request.
async fn stats(tables: &KvTables, json: bool, per_node: bool) -> Result<()> {
    let figures = tables.figures().await?;
    let (by_node, total, ratio) = (&figures.by_node, &figures.total, figures.dedup_ratio());
    if json {
        let mut doc = serde_json::Map::new();
        doc.insert("tenant".into(), tables.tenant().as_str().into());
        for (k, v) in total {
            doc.insert(k.clone(), (*v).into());
        }
        doc.insert("dedup_ratio".into(), serde_json::json!(ratio));
        if per_node {
            let nodes: serde_json::Map<String, serde_json::Value> = by_node
                .iter()
                .map(|(id, s)| {
                    let m: serde_json::Map<String, serde_json::Value> =
                        s.iter().map(|(k, v)| (k.clone(), (*v).into())).collect();
                    (id.to_string(), m.into())
                })
                .collect();
            doc.insert("nodes".into(), nodes.into());
        }
        println!("{}", serde_json::Value::Object(doc));
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec![format!("tenant {}", tables.tenant()), "total".to_string()];
    if per_node {
        header.extend(by_node.iter().map(|(id, _)| format!("node {id}")));
    }
    table.set_header(header);
    for (name, value) in total {
        let mut row = vec![name.clone(), value.to_string()];
        if per_node {
            for (_, s) in by_node {
                let v = s.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
                row.push(v.to_string());
            }
        }
        table.add_row(row);
    }
    table.add_row(vec!["dedup_ratio".to_string(), format!("{ratio:.3}")]);
    println!("{table}");
    Ok(())
}
