//! `quarry mount DIR`: the cluster's buckets and objects as a file system,
//! until Ctrl-C, SIGTERM or `umount DIR`; and BlueDBM's virtual files,
//! `DIR/.quarry/KERNEL/{input,output,error}`, run here over the client's
//! compute API.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use quarry_client::{
    BucketName, Client, ClusterFile, Compute, Limits, ObjectKey, Objects, Outcome, Output,
    StoreError, Target, TargetOutput,
};
use quarry_mount::{
    run_until_signal, ConflictPolicy, KernelFuture, KernelRunner, MountOptions, ObjectBackend,
    DIR_MARKER, MAX_OUTPUT_BYTES, QUARRY_DIR,
};

use crate::args::ClusterArg;
use quarry_jobs::{format_grep, format_wc, parse_job, GrepFormat};

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
    /// No `DIR/.quarry` (the kernel files).
    #[arg(long)]
    pub no_kernels: bool,
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
    // The wc files count by this process's locale, read before threads run.
    quarry_jobs::wc_locale();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let (objects, compute) = runtime.block_on(async {
        let file = ClusterFile::load(&ClusterFile::locate(args.cluster.cluster.as_deref()))?;
        let client = match &args.entry {
            // Placement still spans every member of the file.
            // Object calls still go straight to the member that holds the
            // data, as through the cluster file.
            Some(addr) => Client::connect(addr)
                .await?
                .with_member_addrs(file.nodes.iter().map(|n| (n.id, n.addr.clone()))),
            None => Client::connect_cluster(&file).await?,
        };
        anyhow::Ok((Arc::new(client.objects().await?), client.compute()))
    })?;
    let kernels: Option<Arc<dyn KernelRunner>> = (!args.no_kernels).then(|| {
        Arc::new(ComputeKernels {
            compute,
            objects: Arc::clone(&objects),
        }) as Arc<dyn KernelRunner>
    });
    let mut options = MountOptions {
        read_ahead_bytes: quarry_jobs::parse_size(&args.read_ahead)?,
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
    run_until_signal(objects, kernels, &args.dir, options)
        .with_context(|| format!("mount on {}", args.dir.display()))?;
    Ok(())
}

/// The kernels `.quarry` shows, as `quarry run` names them (`rmw` changes
/// a volume, so it is no file to read).
pub const MOUNT_KERNELS: [&str; 8] = [
    "fgrep8",
    "grep",
    "egrep",
    "fgrep",
    "wc",
    "wordcount",
    "histogram",
    "checksum",
];

/// The mount's kernel runner: parses an `input` file, resolves its targets
/// against the store, runs the job near the data, and formats the answer
/// as the matching GNU tool would. All of it here, beside `quarry run`'s
/// parser and `quarry grep`'s formatting, so the mount only moves bytes.
struct ComputeKernels {
    compute: Compute,
    objects: Arc<Objects>,
}

impl KernelRunner for ComputeKernels {
    fn kernels(&self) -> Vec<String> {
        MOUNT_KERNELS.iter().map(|k| k.to_string()).collect()
    }

    fn run<'a>(&'a self, kernel: &'a str, input: &'a [u8]) -> KernelFuture<'a> {
        Box::pin(async move {
            self.answer(kernel, input)
                .await
                .map_err(|e| format!("{kernel}: {e:#}"))
        })
    }
}

impl ComputeKernels {
    async fn answer(&self, kernel: &str, input: &[u8]) -> Result<Vec<u8>> {
        let request = parse_input(kernel, input)?;
        let targets = self.targets(&request.targets).await?;
        let (job, _) = parse_job(kernel, &request.args)?;
        let limits = Limits {
            result_bytes: MAX_OUTPUT_BYTES as u64,
            ..Limits::default()
        };
        let (result, _) = self.compute.run(job, targets, limits).await?;
        let Outcome::Scan(mut outputs) = result.outcome else {
            bail!("the command answered a read-modify-write batch, not a scan");
        };
        // Directory markers are the mount's own empty objects, not files.
        outputs.retain(|t| t.target.rsplit('/').next() != Some(DIR_MARKER));
        format_answer(kernel, &outputs, &request.args)
    }

    /// The targets the paths name: `bucket` (all of it), `bucket/key` (the
    /// object, or everything under `key/` if it is a directory); no paths,
    /// every bucket.
    async fn targets(&self, paths: &[String]) -> Result<Vec<Target>> {
        let store = &*self.objects;
        if paths.is_empty() {
            let buckets = ObjectBackend::buckets(store).await?;
            if buckets.is_empty() {
                bail!("the mount has no buckets to scan");
            }
            return Ok(buckets
                .into_iter()
                .map(|b| Target::Prefix {
                    bucket: b.to_string(),
                    prefix: String::new(),
                })
                .collect());
        }
        let mut targets = Vec::with_capacity(paths.len());
        for path in paths {
            let (bucket, key) = path.split_once('/').unwrap_or((path.as_str(), ""));
            if bucket == QUARRY_DIR {
                bail!("{path}: the kernel files are no target");
            }
            let b = BucketName::new(bucket).with_context(|| format!("{path}: bucket"))?;
            if key.is_empty() {
                targets.push(Target::Prefix {
                    bucket: bucket.to_string(),
                    prefix: String::new(),
                });
                continue;
            }
            let k = ObjectKey::new(key).with_context(|| format!("{path}: key"))?;
            match ObjectBackend::head(store, &b, &k).await {
                Ok(_) => targets.push(Target::Object {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                }),
                Err(StoreError::NoSuchObject { .. }) => {
                    let prefix = format!("{key}/");
                    if ObjectBackend::list(store, &b, &prefix, None, 1)
                        .await?
                        .is_empty()
                    {
                        bail!("{path}: no such file or directory");
                    }
                    targets.push(Target::Prefix {
                        bucket: bucket.to_string(),
                        prefix,
                    });
                }
                Err(e) => return Err(e).with_context(|| path.clone()),
            }
        }
        Ok(targets)
    }
}

/// What an `input` file says.
#[derive(Debug, PartialEq, Eq)]
struct KernelInput {
    /// The kernel's arguments, as `quarry run` takes them.
    args: Vec<String>,
    /// Paths relative to the mount (no leading or trailing `/`).
    targets: Vec<String>,
}

/// Splits an `input` file: the first line is the kernel's argument (the
/// whole line, spaces and all, for the pattern and word kernels, which
/// take one; empty for `wc` and `checksum`, which take none), each further
/// non-empty line a target path.
fn parse_input(kernel: &str, input: &[u8]) -> Result<KernelInput> {
    let text = std::str::from_utf8(input).context("the input is not UTF-8")?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let first = lines.next().unwrap_or_default();
    let args = match kernel {
        "wc" | "checksum" => {
            if !first.trim().is_empty() {
                bail!(
                    "takes no arguments: leave the first line empty and name targets on the lines after it"
                );
            }
            Vec::new()
        }
        "histogram" => vec![first.trim().to_string()],
        _ => vec![first.to_string()],
    };
    let targets = lines
        .map(|l| l.trim().trim_matches('/'))
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    Ok(KernelInput { args, targets })
}

/// The answer as `output` reads: one total for the counting kernels (the
/// BlueDBM word count), GNU `grep -r`, `wc` and `sha256sum` lines for the
/// others, and `count word` lines for the histogram.
fn format_answer(kernel: &str, outputs: &[TargetOutput], args: &[String]) -> Result<Vec<u8>> {
    Ok(match kernel {
        "fgrep8" => {
            let n: u64 = outputs
                .iter()
                .map(|t| match t.output {
                    Output::Count(n) => n,
                    _ => 0,
                })
                .sum();
            format!("{n}\n").into_bytes()
        }
        "wordcount" => {
            let n: u64 = outputs
                .iter()
                .map(|t| match &t.output {
                    Output::Wc(w) => w.word_count.unwrap_or(0),
                    _ => 0,
                })
                .sum();
            format!("{n}\n").into_bytes()
        }
        "grep" | "egrep" | "fgrep" => {
            // One stream only: the note GNU grep sends to standard error
            // follows the lines.
            let format = GrepFormat {
                names: true,
                ..GrepFormat::default()
            };
            let printed = format_grep(outputs, &format);
            let mut out = printed.stdout;
            for target in printed.binary_matches {
                out.extend_from_slice(format!("{target}: binary file matches\n").as_bytes());
            }
            out
        }
        "wc" => format_wc(outputs, true, true, true).into_bytes(),
        "histogram" => {
            let k: usize = args
                .first()
                .and_then(|a| a.parse().ok())
                .context("histogram K")?;
            // Each target's top K, summed: exact for one target, and for
            // several whenever K covers their words.
            let mut counts: BTreeMap<&[u8], u64> = BTreeMap::new();
            for t in outputs {
                if let Output::Wc(w) = &t.output {
                    for (word, n) in &w.top {
                        *counts.entry(word.as_slice()).or_default() += n;
                    }
                }
            }
            let mut top: Vec<(&[u8], u64)> = counts.into_iter().collect();
            top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let mut out = Vec::new();
            for (word, n) in top.into_iter().take(k) {
                out.extend_from_slice(format!("{n} ").as_bytes());
                out.extend_from_slice(word);
                out.push(b'\n');
            }
            out
        }
        "checksum" => {
            let mut out = String::new();
            for t in outputs {
                if let Output::Checksum(c) = &t.output {
                    for b in c.sha256 {
                        out.push_str(&format!("{b:02x}"));
                    }
                    out.push_str("  ");
                    out.push_str(&t.target);
                    out.push('\n');
                }
            }
            out.into_bytes()
        }
        other => bail!("no kernel {other:?} in the mount"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_client::WcOutput;

    fn out(target: &str, output: Output) -> TargetOutput {
        TargetOutput {
            target: target.to_string(),
            size_bytes: 10,
            output,
        }
    }

    #[test]
    fn inputs_split_into_arguments_and_targets() {
        assert_eq!(
            parse_input("wordcount", b"would\n").unwrap(),
            KernelInput {
                args: vec!["would".into()],
                targets: vec![]
            }
        );
        assert_eq!(
            parse_input("grep", b"a b.*c\r\n/docs/a.txt\n\n  logs/  \n").unwrap(),
            KernelInput {
                args: vec!["a b.*c".into()],
                targets: vec!["docs/a.txt".into(), "logs".into()]
            }
        );
        assert_eq!(
            parse_input("checksum", b"\nb/k").unwrap().targets,
            vec!["b/k".to_string()]
        );
        assert!(parse_input("wc", b"b/k\n").is_err());
        assert!(parse_input("grep", &[0xff, b'\n']).is_err());
        // The mount's parser then checks the arguments themselves.
        let args = parse_input("fgrep8", b"abc\n").unwrap().args;
        assert!(parse_job("fgrep8", &args).is_err());
    }

    #[test]
    fn answers_total_or_list_per_target() {
        let wc = |word_count, top: Vec<(&str, u64)>| {
            Output::Wc(WcOutput {
                lines: 1,
                words: 2,
                bytes: 10,
                word_count,
                top: top
                    .into_iter()
                    .map(|(w, n)| (w.as_bytes().to_vec(), n))
                    .collect(),
            })
        };
        let outs = [
            out("b/x", wc(Some(3), vec![("a", 5), ("b", 1)])),
            out("b/y", wc(Some(4), vec![("b", 5), ("c", 2)])),
        ];
        assert_eq!(
            format_answer("wordcount", &outs, &["would".into()]).unwrap(),
            b"7\n"
        );
        assert_eq!(
            format_answer("histogram", &outs, &["2".into()]).unwrap(),
            b"6 b\n5 a\n"
        );
        let counts = [out("b/x", Output::Count(2)), out("b/y", Output::Count(40))];
        assert_eq!(
            format_answer("fgrep8", &counts, &["abcdefgh".into()]).unwrap(),
            b"42\n"
        );
    }
}
