//! The object store commands: mb, rb, put, get, ls, rm, stat, df, gc.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use quarry_client::{
    BucketName, ChunkRole, Client, ClusterFile, Condition, Manifest, ObjectKey, Objects,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::args::ClusterArg;
use crate::dates::local_time_text;
use quarry_jobs::{describe_chunking, human_bytes, parse_chunking};

/// The object store commands (each a top-level `quarry` command).
#[derive(Debug, Subcommand, Clone)]
pub enum ObjectCommand {
    /// Make a bucket.
    Mb {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// The bucket's name (a-z 0-9 - _ ., 1-63 bytes).
        bucket: String,
        /// How its objects are cut into chunks: `fixed:SIZE` (default
        /// fixed:1M), `fastcdc` / `fastcdc:MIN,AVG,MAX` (content-defined;
        /// an edit moves only nearby chunk boundaries), `parquet` (a Parquet
        /// file cut page by page, each chunk's column and row group recorded;
        /// anything else FastCDC, with a warning) or `auto` (`parquet` for
        /// Parquet files, FastCDC for the rest); both take `:MIN,AVG,MAX`
        /// for their FastCDC.
        #[arg(long, default_value = "fixed:1M")]
        chunking: String,
    },
    /// Remove an empty bucket.
    Rb {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// The bucket.
        bucket: String,
    },
    /// Store a local file (or stdin, `-`) as BUCKET/KEY.
    Put(PutArgs),
    /// Fetch BUCKET/KEY (or a byte range of it) to a file or stdout.
    Get(GetArgs),
    /// List buckets, or the objects of BUCKET whose keys start with PREFIX.
    Ls {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// `BUCKET` or `BUCKET/PREFIX` (default: list the buckets).
        path: Option<String>,
        /// At most this many objects.
        #[arg(long, default_value_t = 10_000)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete objects.
    Rm {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// `BUCKET/KEY` of each object.
        #[arg(required = true)]
        paths: Vec<String>,
        /// Only if the object's version is still this one (one path only).
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// Show an object's manifest: version, size, chunking, chunks.
    Stat {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// `BUCKET/KEY`.
        path: String,
        /// Also list every chunk (fingerprint and length).
        #[arg(long)]
        chunks: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Logical bytes, stored bytes and the dedup ratio per bucket and for
    /// the cluster.
    Df {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Find chunk references no object makes (left by a client or node that
    /// died mid-put) and free them.
    Gc {
        /// How to find the cluster.
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

/// Arguments of `quarry put`.
#[derive(Debug, Args, Clone)]
pub struct PutArgs {
    /// How to find the cluster.
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// The local file, or `-` for stdin.
    pub local: PathBuf,
    /// `BUCKET/KEY`.
    pub path: String,
    /// Only if no object has this key yet.
    #[arg(long, conflicts_with = "if_version")]
    pub if_absent: bool,
    /// Only if the object's current version is this one.
    #[arg(long)]
    pub if_version: Option<u64>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `quarry get`.
#[derive(Debug, Args, Clone)]
pub struct GetArgs {
    /// How to find the cluster.
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// `BUCKET/KEY`.
    pub path: String,
    /// Where to write (default, or `-`: stdout; `./-` is a file named `-`).
    pub local: Option<PathBuf>,
    /// Bytes `START-END` (inclusive, as HTTP ranges), `START-` (to the
    /// end) or `-LEN` (the last LEN bytes).
    #[arg(long, allow_hyphen_values = true)]
    pub range: Option<String>,
    /// Top-level columns `A,B,...` of a Parquet object stored page by page
    /// (`mb --chunking parquet|auto`): writes a Parquet file of only them,
    /// reading only their pages and the footer.
    #[arg(long, conflicts_with = "range", value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs one object command.
pub fn run(command: &ObjectCommand) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run_async(command))
}

async fn objects(cluster: &ClusterArg) -> Result<Objects> {
    let path = ClusterFile::locate(cluster.cluster.as_deref());
    let file = ClusterFile::load(&path)?;
    let client = Client::connect_cluster(&file).await?;
    Ok(client.objects().await?)
}

async fn run_async(command: &ObjectCommand) -> Result<()> {
    match command {
        ObjectCommand::Mb {
            cluster,
            bucket,
            chunking,
        } => {
            let bucket = BucketName::new(bucket)?;
            let chunking = parse_chunking(chunking)?;
            objects(cluster)
                .await?
                .create_bucket(&bucket, chunking)
                .await?;
            println!("made bucket {bucket} ({})", describe_chunking(&chunking));
            Ok(())
        }
        ObjectCommand::Rb { cluster, bucket } => {
            let bucket = BucketName::new(bucket)?;
            objects(cluster).await?.delete_bucket(&bucket).await?;
            println!("removed bucket {bucket}");
            Ok(())
        }
        ObjectCommand::Put(args) => put(args).await,
        ObjectCommand::Get(args) => get(args).await,
        ObjectCommand::Ls {
            cluster,
            path,
            limit,
            json,
        } => ls(cluster, path.as_deref(), *limit, *json).await,
        ObjectCommand::Rm {
            cluster,
            paths,
            if_version,
        } => {
            if if_version.is_some() && paths.len() > 1 {
                bail!(
                    "--if-version applies to one object; {} were named",
                    paths.len()
                );
            }
            let condition = if_version.map_or(Condition::Always, Condition::IfVersion);
            let store = objects(cluster).await?;
            for path in paths {
                let (bucket, key) = object_path(path)?;
                let m = store.delete(&bucket, &key, condition).await?;
                println!("removed {bucket}/{key} (version {})", m.version());
            }
            Ok(())
        }
        ObjectCommand::Stat {
            cluster,
            path,
            chunks,
            json,
        } => {
            let (bucket, key) = object_path(path)?;
            let m = objects(cluster).await?.head(&bucket, &key).await?;
            print_manifest(&m, *chunks, *json);
            Ok(())
        }
        ObjectCommand::Df { cluster, json } => df(cluster, *json).await,
        ObjectCommand::Gc { cluster } => {
            let report = objects(cluster).await?.collect_orphans().await?;
            println!(
                "{} live objects; {} chunks had references no object makes: lowered, {} freed",
                report.manifests, report.chunks_lowered, report.chunks_freed
            );
            if !report.dangling.is_empty() {
                println!(
                    "{} chunks are named by objects but missing or under-counted (a delete may have raced; run again): {}",
                    report.dangling.len(),
                    report
                        .dangling
                        .iter()
                        .map(|f| f.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                );
            }
            Ok(())
        }
    }
}

/// Splits `BUCKET/KEY`, checking both names.
fn object_path(path: &str) -> Result<(BucketName, ObjectKey)> {
    let Some((bucket, key)) = path.split_once('/') else {
        bail!("{path:?} is not BUCKET/KEY (no '/' after the bucket name)");
    };
    Ok((BucketName::new(bucket)?, ObjectKey::new(key)?))
}

/// `quarry get --columns`: a Parquet file of the chosen columns, written
/// whole once read (to a temporary file beside the target, then renamed),
/// and what was read on stderr.
async fn get_columns(
    store: &Objects,
    bucket: &BucketName,
    key: &ObjectKey,
    columns: &[String],
    local: Option<&Path>,
) -> Result<()> {
    use tokio::io::AsyncWriteExt;
    let read = store.get_columns(bucket, key, columns, &[]).await?;
    match local.filter(|p| *p != Path::new("-")) {
        Some(path) => {
            let (mut file, tmp) = open_get_target(path).await?;
            file.write_all(&read.file).await?;
            file.sync_all().await?;
            if let Some(tmp) = tmp {
                std::fs::rename(&tmp, path).with_context(|| {
                    format!("cannot rename {} to {}", tmp.display(), path.display())
                })?;
            }
        }
        None => {
            let mut out = tokio::io::stdout();
            out.write_all(&read.file).await?;
            out.flush().await?;
        }
    }
    eprintln!(
        "got columns {} of {bucket}/{key}: read {} of {} ({:.1}%), {} row groups, wrote {}",
        columns.join(","),
        human_bytes(read.bytes_read),
        human_bytes(read.object_bytes),
        read.bytes_read as f64 * 100.0 / read.object_bytes.max(1) as f64,
        read.row_groups,
        human_bytes(read.file.len() as u64)
    );
    Ok(())
}

/// A size with an optional K/M/G/T suffix (powers of 1024).
fn parse_size(text: &str) -> Result<u64> {
    Ok(quarry_jobs::parse_size(text)?)
}

/// A progress bar on stderr when it is a terminal and `quiet` is off.
fn progress(total: Option<u64>, quiet: bool, what: &str) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
    }
    let bar = match total {
        Some(t) => ProgressBar::new(t),
        None => ProgressBar::new_spinner(),
    };
    let template = if total.is_some() {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} {spinner} {bytes} {bytes_per_sec}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

/// Counts the bytes that pass through into a progress bar.
struct Counted<T> {
    inner: T,
    bar: ProgressBar,
}

impl<R: AsyncRead + Unpin> AsyncRead for Counted<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.bar.inc(read as u64);
        polled
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            self.bar.inc(n as u64);
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn put(args: &PutArgs) -> Result<()> {
    let (bucket, key) = object_path(&args.path)?;
    let condition = match (args.if_absent, args.if_version) {
        (true, _) => Condition::IfAbsent,
        (false, Some(v)) => Condition::IfVersion(v),
        (false, None) => Condition::Always,
    };
    let store = objects(&args.cluster).await?;
    let started = Instant::now();
    let manifest = if args.local == Path::new("-") {
        let bar = progress(None, args.quiet, "put");
        let source = Counted {
            inner: tokio::io::stdin(),
            bar: bar.clone(),
        };
        let m = store.put(&bucket, &key, source, condition).await;
        bar.finish_and_clear();
        m?
    } else {
        let file = std::fs::File::open(&args.local)
            .with_context(|| format!("cannot open {}", args.local.display()))?;
        let len = file.metadata().map(|m| m.len()).ok();
        let bar = progress(len, args.quiet, "put");
        let source = Counted {
            inner: quarry_client::file_source(file),
            bar: bar.clone(),
        };
        let m = store.put(&bucket, &key, source, condition).await;
        bar.finish_and_clear();
        m?
    };
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "put {bucket}/{key} version {}: {} in {} chunks, {:.1} MiB/s",
        manifest.version(),
        human_bytes(manifest.size()),
        manifest.chunks().len(),
        manifest.size() as f64 / (1 << 20) as f64 / seconds.max(1e-9)
    );
    if let Some(note) = manifest.note() {
        eprintln!("warning: {bucket}/{key}: {note}");
    }
    Ok(())
}

/// Parses `START-END`, `START-` or `-LEN` against an object of `size` bytes
/// into (offset, length).
fn parse_range(text: &str, size: u64) -> Result<(u64, u64)> {
    let Some((a, b)) = text.split_once('-') else {
        bail!("--range {text:?} is not START-END, START- or -LEN");
    };
    let num =
        |s: &str| -> Result<u64> { parse_size(s).with_context(|| format!("--range {text:?}")) };
    match (a.is_empty(), b.is_empty()) {
        (true, true) => bail!("--range {text:?} names no bytes"),
        (true, false) => {
            let len = num(b)?.min(size);
            Ok((size - len, len))
        }
        (false, true) => {
            let start = num(a)?;
            Ok((start, size.saturating_sub(start)))
        }
        (false, false) => {
            let (start, end) = (num(a)?, num(b)?);
            if end < start {
                bail!("--range {text:?}: end {end} is before start {start}");
            }
            Ok((start, end - start + 1))
        }
    }
}

/// Opens where a get writes. A regular file (or a new name) is written as a
/// temporary file beside it, renamed at the end, so a failed get leaves no
/// half-written file under the name; that temporary's path comes back too.
/// Anything else that exists (`/dev/null`, a FIFO, a terminal) is written in
/// place: renaming over it would replace the device with a file.
async fn open_get_target(path: &Path) -> Result<(tokio::fs::File, Option<std::path::PathBuf>)> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => bail!("{} is a directory", path.display()),
        Ok(meta) if !meta.is_file() => {
            let file = tokio::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .await
                .with_context(|| format!("cannot open {} for writing", path.display()))?;
            return Ok((file, None));
        }
        _ => {}
    }
    let tmp = path.with_file_name(format!(
        ".{}.quarry-get-{}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into()),
        std::process::id()
    ));
    let file = tokio::fs::File::create(&tmp)
        .await
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    Ok((file, Some(tmp)))
}

async fn get(args: &GetArgs) -> Result<()> {
    let (bucket, key) = object_path(&args.path)?;
    let store = objects(&args.cluster).await?;
    if let Some(columns) = &args.columns {
        return get_columns(&store, &bucket, &key, columns, args.local.as_deref()).await;
    }
    let head = store.head(&bucket, &key).await?;
    let (offset, len) = match &args.range {
        None => (0, head.size()),
        Some(r) => parse_range(r, head.size())?,
    };
    // As HTTP ranges: a range must start inside a non-empty object.
    if offset > head.size() || (offset == head.size() && head.size() > 0) {
        bail!(
            "--range starts at byte {offset}, past the end of {bucket}/{key} ({} bytes)",
            head.size()
        );
    }
    let want = len.min(head.size() - offset);
    // `-` is standard output, as for every Unix tool (and `quarry put`).
    let local = args.local.as_deref().filter(|p| *p != Path::new("-"));
    let bar = progress(Some(want), args.quiet || local.is_none(), "get");
    let started = Instant::now();
    let manifest = match local {
        Some(path) => {
            let (file, tmp) = open_get_target(path).await?;
            let mut out = Counted {
                inner: tokio::io::BufWriter::with_capacity(1 << 20, file),
                bar: bar.clone(),
            };
            let got = store.get_to(&bucket, &key, offset, want, &mut out).await;
            bar.finish_and_clear();
            match (got, tmp) {
                (Ok(m), Some(tmp)) => {
                    out.inner.get_ref().sync_all().await.ok();
                    std::fs::rename(&tmp, path).with_context(|| {
                        format!("cannot rename {} to {}", tmp.display(), path.display())
                    })?;
                    m
                }
                (Ok(m), None) => m,
                (Err(e), tmp) => {
                    if let Some(tmp) = tmp {
                        let _ = std::fs::remove_file(&tmp);
                    }
                    return Err(e.into());
                }
            }
        }
        None => {
            let mut out = Counted {
                inner: tokio::io::stdout(),
                bar: bar.clone(),
            };
            let m = store.get_to(&bucket, &key, offset, want, &mut out).await;
            bar.finish_and_clear();
            m?
        }
    };
    if local.is_some() {
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "got {bucket}/{key} version {}: {} of {}, {:.1} MiB/s",
            manifest.version(),
            human_bytes(want),
            human_bytes(manifest.size()),
            want as f64 / (1 << 20) as f64 / seconds.max(1e-9)
        );
    }
    Ok(())
}

async fn ls(cluster: &ClusterArg, path: Option<&str>, limit: usize, json: bool) -> Result<()> {
    let store = objects(cluster).await?;
    let Some(path) = path else {
        let buckets = store.buckets().await?;
        if json {
            let v = quarry_jobs::buckets_json(&buckets);
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            for (b, c) in buckets {
                println!("{b}/\t{}", describe_chunking(&c.chunking));
            }
        }
        return Ok(());
    };
    let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
    let bucket = BucketName::new(bucket)?;
    let list = store.list(&bucket, prefix, None, limit).await?;
    if json {
        let v: Vec<_> = list
            .iter()
            .map(|m| {
                serde_json::json!({
                    "key": m.key().as_str(),
                    "size": m.size(),
                    "version": m.version(),
                    "created_unix_ms": m.created_unix_ms(),
                    "chunks": m.chunks().len(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let mut out = std::io::stdout().lock();
        for m in &list {
            writeln!(out, "{:>12}  v{:<4} {}", m.size(), m.version(), m.key())?;
        }
    }
    Ok(())
}

fn print_manifest(m: &Manifest, chunks: bool, json: bool) {
    let roles = m.parquet_layout().map(|l| &l.roles);
    if json {
        let mut v = serde_json::json!({
            "bucket": m.bucket().as_str(),
            "key": m.key().as_str(),
            "version": m.version(),
            "size": m.size(),
            "created_unix_ms": m.created_unix_ms(),
            "chunking": describe_chunking(&m.chunking()),
            "chunk_count": m.chunks().len(),
            "parquet_layout": m.parquet_layout().is_some(),
            "warning": m.note(),
        });
        if let Some(layout) = m.parquet_layout() {
            v["columns"] = layout
                .columns
                .iter()
                .map(|c| serde_json::json!(c))
                .collect();
        }
        if chunks {
            v["chunks"] = m
                .chunks()
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut e =
                        serde_json::json!({"sha256": c.fingerprint.to_string(), "len": c.len});
                    if let Some(role) = roles.and_then(|r| r.get(i)) {
                        role_json(&mut e, *role, m);
                    }
                    e
                })
                .collect();
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!("object   {}/{}", m.bucket(), m.key());
    println!("version  {}", m.version());
    println!("size     {} ({})", m.size(), human_bytes(m.size()));
    println!("created  {}", local_time_text(m.created_unix_ms()));
    println!("chunking {}", describe_chunking(&m.chunking()));
    if let Some(layout) = m.parquet_layout() {
        println!(
            "parquet  {} columns, cut page by page",
            layout.columns.len()
        );
    }
    if let Some(note) = m.note() {
        println!("warning  {note}");
    }
    println!("chunks   {}", m.chunks().len());
    if chunks {
        for (i, c) in m.chunks().iter().enumerate() {
            match roles.and_then(|r| r.get(i)) {
                Some(role) => println!("  {}  {}  {}", c.fingerprint, c.len, role_text(*role, m)),
                None => println!("  {}  {}", c.fingerprint, c.len),
            }
        }
    }
}

/// What a chunk of a Parquet object holds, for `stat --chunks`.
fn role_text(role: ChunkRole, m: &Manifest) -> String {
    match role {
        ChunkRole::Other => "other".into(),
        ChunkRole::Footer => "footer".into(),
        ChunkRole::Page { row_group, column } => format!(
            "row group {row_group} column {column} {}",
            column_name(m, column)
        ),
    }
}

fn column_name(m: &Manifest, column: u16) -> &str {
    m.parquet_layout()
        .and_then(|l| l.columns.get(usize::from(column)))
        .map_or("?", String::as_str)
}

/// [`role_text`] as JSON fields of a chunk's entry.
fn role_json(entry: &mut serde_json::Value, role: ChunkRole, m: &Manifest) {
    match role {
        ChunkRole::Other => entry["role"] = "other".into(),
        ChunkRole::Footer => entry["role"] = "footer".into(),
        ChunkRole::Page { row_group, column } => {
            entry["role"] = "page".into();
            entry["row_group"] = row_group.into();
            entry["column"] = column.into();
            entry["column_path"] = column_name(m, column).into();
        }
    }
}

async fn df(cluster: &ClusterArg, json: bool) -> Result<()> {
    let usage = objects(cluster).await?.usage().await?;
    if json {
        let v = quarry_jobs::usage_json(&usage);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["bucket", "objects", "logical", "stored", "chunks", "dedup"]);
    for (b, u) in &usage.buckets {
        table.add_row([
            b.to_string(),
            u.objects.to_string(),
            human_bytes(u.logical_bytes),
            human_bytes(u.stored_bytes),
            u.chunks.to_string(),
            format!("{:.2}x", u.dedup_ratio()),
        ]);
    }
    table.add_row([
        "(cluster)".to_string(),
        usage.objects.to_string(),
        human_bytes(usage.logical_bytes),
        human_bytes(usage.stored_bytes),
        usage.chunks.to_string(),
        format!("{:.2}x", usage.dedup_ratio()),
    ]);
    println!("{table}");
    println!(
        "(a chunk shared by two buckets counts in both bucket rows and once in the cluster row)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ranges_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert!(parse_size("12Q")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_size("99999999999999T").is_err());
        assert_eq!(parse_range("0-9", 100).unwrap(), (0, 10));
        assert_eq!(parse_range("90-", 100).unwrap(), (90, 10));
        assert_eq!(parse_range("-10", 100).unwrap(), (90, 10));
        assert!(parse_range("9-3", 100).is_err());
        assert!(parse_range("7", 100).is_err());
        assert!(object_path("nokey").is_err());
        assert!(object_path("b/a//c").is_err());
    }
}
