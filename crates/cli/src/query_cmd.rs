//! `quarry query`: SQL over Parquet objects, run where their pages live;
//! the answer written as a table, CSV, JSON lines, Parquet or Arrow IPC.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use quarry_client::{Job, Outcome, QuerySpec};
use quarry_jobs::{human_bytes, query_stats_json};
use quarry_query::Format;

use crate::compute_cmd::{compute, run_command, runtime, CommandOptions};

/// Arguments of `quarry query`.
#[derive(Debug, Args, Clone)]
pub struct QueryArgs {
    /// The query: SELECT ... FROM 'bucket/key.parquet' (or a pattern,
    /// 'bucket/2013/*.parquet') [WHERE ...] [GROUP BY ...] [HAVING ...]
    /// [ORDER BY ...] [LIMIT n].
    pub sql: String,
    /// How to write the answer: table, csv, json (one object per line),
    /// parquet or arrow (an Arrow IPC stream).
    #[arg(long, default_value = "table")]
    pub format: String,
    /// Write the answer to this file instead of standard output.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Limits and output (--json prints what the query read and moved, as
    /// JSON on standard error).
    #[command(flatten)]
    pub options: CommandOptions,
}

/// Runs `quarry query`.
pub fn query(args: &QueryArgs) -> Result<()> {
    let format: Format = args.format.parse()?;
    if format.is_binary() && args.output.is_none() && std::io::stdout().is_terminal() {
        bail!(
            "--format {} writes binary data: give --output FILE or redirect standard output",
            args.format
        );
    }
    runtime()?.block_on(async {
        let compute = compute(&args.options.cluster).await?;
        let job = Job::Query(QuerySpec {
            sql: args.sql.clone(),
        });
        let (result, sent) = run_command(&compute, job, Vec::new(), &args.options, "query").await?;
        let Outcome::Query(q) = &result.outcome else {
            bail!("the command answered something other than a query");
        };
        let answer = quarry_query::decode_ipc(&q.arrow_ipc)?;
        let bytes = quarry_query::write(&answer, format)?;
        match &args.output {
            Some(path) => std::fs::write(path, &bytes)
                .with_context(|| format!("writing the answer to {}", path.display()))?,
            None => {
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)?;
                out.flush()?;
            }
        }
        if args.options.json {
            eprintln!("{}", query_stats_json(q, sent));
        } else if !args.options.quiet {
            eprintln!(
                "{} rows from {} objects ({} of {} row groups read): {} read from devices, \
                 {} between nodes, {} to the client",
                q.rows,
                q.objects,
                q.row_groups_read,
                q.row_groups,
                human_bytes(q.bytes_from_devices),
                human_bytes(q.bytes_between_nodes),
                human_bytes(sent)
            );
        }
        Ok(())
    })
}
