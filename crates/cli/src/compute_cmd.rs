//! Near-data commands: `quarry grep`, `quarry wc`, `quarry run`,
//! `quarry jobs`, `quarry cancel`. The output of grep and wc is what GNU
//! grep and wc print for the same bytes (grep: C locale; wc: the C or a
//! UTF-8 locale, the one this process runs under), so scripts can switch.

use std::ffi::CStr;
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{ProgressBar, ProgressStyle};
use quarry_client::{
    Client, ClusterFile, CommandId, CommandResult, CommandState, Compute, GrepSpec, GrepSyntax,
    Job, KernelSpec, Limits, Outcome, Output, RmwBatch, RmwOp, Target, TargetOutput, WcLocale,
    WcSpec,
};
use serde_json::{json, Value};

use crate::args::ClusterArg;
use crate::commands::human_bytes;

/// An exit status to end the process with, quietly (grep's 1: nothing
/// matched).
#[derive(Debug, thiserror::Error)]
#[error("exit status {0}")]
pub struct ExitStatus(pub i32);

/// Limits and output options every compute command takes.
#[derive(Debug, Args, Clone)]
pub struct CommandOptions {
    /// How to find the cluster.
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// Fail the command after this long (ms).
    #[arg(long, default_value_t = Limits::default().time_ms)]
    pub time_limit_ms: u64,
    /// Fail the command if its partial results need more memory than this
    /// at any node (K, M, G suffixes).
    #[arg(long, default_value = "256M")]
    pub memory_limit: String,
    /// Fail the command if its result is larger than this.
    #[arg(long, default_value = "64M")]
    pub result_limit: String,
    /// Print JSON (the result, bytes scanned and bytes sent).
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Arguments of `quarry grep`.
#[derive(Debug, Args, Clone)]
#[command(disable_help_flag = true)]
pub struct GrepArgs {
    /// Print only a count of matching lines per target.
    #[arg(short = 'c', long = "count")]
    pub count: bool,
    /// Prefix each line with its 1-based line number.
    #[arg(short = 'n', long = "line-number")]
    pub line_number: bool,
    /// Prefix each line with the byte offset of its start.
    #[arg(short = 'b', long = "byte-offset")]
    pub byte_offset: bool,
    /// PATTERN is an extended regular expression.
    #[arg(short = 'E', long = "extended-regexp", conflicts_with = "fixed")]
    pub extended: bool,
    /// PATTERN is a literal string.
    #[arg(short = 'F', long = "fixed-strings")]
    pub fixed: bool,
    /// Ignore case.
    #[arg(short = 'i', long = "ignore-case")]
    pub ignore_case: bool,
    /// Always print target names.
    #[arg(short = 'H', long = "with-filename")]
    pub with_filename: bool,
    /// Never print target names.
    #[arg(short = 'h', long = "no-filename", conflicts_with = "with_filename")]
    pub no_filename: bool,
    /// The pattern (a basic regular expression unless -E or -F).
    pub pattern: String,
    /// Print help (-h is grep's --no-filename).
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// What to search: BUCKET/KEY, BUCKET/PREFIX* (every object whose key
    /// starts with PREFIX; quote it), BUCKET/ (the whole bucket),
    /// volume:NAME[@OFFSET[+LEN]], linear:FIRST+PAGES.
    #[arg(required = true)]
    pub targets: Vec<String>,
    /// Limits and output.
    #[command(flatten)]
    pub options: CommandOptions,
}

/// Arguments of `quarry wc`.
#[derive(Debug, Args, Clone)]
#[command(disable_help_flag = true)]
pub struct WcArgs {
    /// Print the newline counts.
    #[arg(short = 'l', long = "lines")]
    pub lines: bool,
    /// Print the word counts.
    #[arg(short = 'w', long = "words")]
    pub words: bool,
    /// Print the byte counts.
    #[arg(short = 'c', long = "bytes")]
    pub bytes: bool,
    /// Count the occurrences of this word (BlueDBM's word-count
    /// accelerator).
    #[arg(long)]
    pub word: Option<String>,
    /// Print the K most frequent words.
    #[arg(long, value_name = "K")]
    pub top: Option<u32>,
    /// What to count (as for `quarry grep`).
    #[arg(required = true)]
    pub targets: Vec<String>,
    /// Limits and output.
    #[command(flatten)]
    pub options: CommandOptions,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// Arguments of `quarry run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// The kernel and its arguments:
    /// `fgrep8 PATTERN` (8 bytes), `grep PATTERN`, `egrep PATTERN`,
    /// `wc`, `wordcount WORD`, `histogram K`, `checksum`,
    /// `rmw VOLUME OFFSET:DELTA...`.
    pub kernel: String,
    /// The kernel's arguments, then the targets (as for `quarry grep`).
    pub args: Vec<String>,
    /// Submit and print the command's number without waiting.
    #[arg(long)]
    pub detach: bool,
    /// Limits and output.
    #[command(flatten)]
    pub options: CommandOptions,
}

/// Parses a target as the commands name them.
pub fn parse_target(text: &str) -> Result<Target> {
    if let Some(rest) = text.strip_prefix("volume:") {
        let (name, range) = match rest.split_once('@') {
            Some((n, r)) => (n, Some(r)),
            None => (rest, None),
        };
        let (offset_bytes, len_bytes) = match range {
            None => (0, None),
            Some(r) => match r.split_once('+') {
                Some((o, l)) => (
                    crate::objects_cmd::parse_size(o)?,
                    Some(crate::objects_cmd::parse_size(l)?),
                ),
                None => (crate::objects_cmd::parse_size(r)?, None),
            },
        };
        if name.is_empty() {
            bail!("{text:?}: volume:NAME[@OFFSET[+LEN]] needs a volume name");
        }
        return Ok(Target::Volume {
            name: name.to_string(),
            offset_bytes,
            len_bytes,
        });
    }
    if let Some(rest) = text.strip_prefix("linear:") {
        let Some((first, pages)) = rest.split_once('+') else {
            bail!("{text:?}: a linear range is linear:FIRST+PAGES");
        };
        return Ok(Target::Linear {
            first_page: first
                .parse()
                .with_context(|| format!("{text:?}: first page"))?,
            pages: pages
                .parse()
                .with_context(|| format!("{text:?}: page count"))?,
        });
    }
    let Some((bucket, key)) = text.split_once('/') else {
        bail!("{text:?}: name objects as BUCKET/KEY, BUCKET/PREFIX* or BUCKET/");
    };
    if bucket.is_empty() {
        bail!("{text:?}: no bucket before the '/'");
    }
    if key.is_empty() {
        return Ok(Target::Prefix {
            bucket: bucket.into(),
            prefix: String::new(),
        });
    }
    if let Some(prefix) = key.strip_suffix('*') {
        return Ok(Target::Prefix {
            bucket: bucket.into(),
            prefix: prefix.into(),
        });
    }
    Ok(Target::Object {
        bucket: bucket.into(),
        key: key.into(),
    })
}

fn parse_targets(texts: &[String]) -> Result<Vec<Target>> {
    texts.iter().map(|t| parse_target(t)).collect()
}

fn limits(options: &CommandOptions) -> Result<Limits> {
    Ok(Limits {
        time_ms: options.time_limit_ms,
        memory_bytes: crate::objects_cmd::parse_size(&options.memory_limit)
            .context("--memory-limit")?,
        result_bytes: crate::objects_cmd::parse_size(&options.result_limit)
            .context("--result-limit")?,
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

async fn compute(cluster: &ClusterArg) -> Result<Compute> {
    let path = ClusterFile::locate(cluster.cluster.as_deref());
    let file = ClusterFile::load(&path)?;
    let client = Client::connect_cluster(&file).await?;
    Ok(client.compute())
}

/// Submits a command, shows its progress on a terminal, and returns its
/// result and the bytes that reached the client.
async fn run_command(
    compute: &Compute,
    job: Job,
    targets: Vec<Target>,
    options: &CommandOptions,
    what: &str,
) -> Result<(CommandResult, u64)> {
    let limits = limits(options)?;
    let id = compute.submit(job, targets, limits).await?;
    let bar = (!options.quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(format!("{what} (command {id})"));
        bar
    });
    let deadline = Duration::from_millis(limits.time_ms + 5_000);
    let started = tokio::time::Instant::now();
    let status = loop {
        // Short waits while a bar is shown, so it moves.
        let wait = if bar.is_some() {
            Duration::from_millis(200)
        } else {
            deadline
        };
        let status = compute.wait(id, wait).await?;
        if let Some(bar) = &bar {
            bar.set_length(status.bytes_total);
            bar.set_position(status.bytes_done);
        }
        if status.state.is_final() || started.elapsed() > deadline {
            break status;
        }
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    match status.state {
        CommandState::Done => Ok(compute.result(id).await?),
        CommandState::Failed { reason } => bail!("command {id} failed: {reason}"),
        CommandState::Cancelled => bail!("command {id} was cancelled"),
        other => bail!(
            "command {id} is still {other:?} after {} ms",
            deadline.as_millis()
        ),
    }
}

fn scan_outputs(result: &CommandResult) -> Result<&[TargetOutput]> {
    match &result.outcome {
        Outcome::Scan(t) => Ok(t),
        Outcome::Rmw { .. } => bail!("the command answered a read-modify-write batch, not a scan"),
    }
}

/// `quarry grep`.
pub fn grep(args: &GrepArgs) -> Result<()> {
    runtime()?.block_on(async {
        let targets = parse_targets(&args.targets)?;
        let many = targets.len() > 1 || targets.iter().any(|t| matches!(t, Target::Prefix { .. }));
        let spec = GrepSpec {
            pattern: args.pattern.clone(),
            syntax: if args.fixed {
                GrepSyntax::Fixed
            } else if args.extended {
                GrepSyntax::Extended
            } else {
                GrepSyntax::Basic
            },
            ignore_case: args.ignore_case,
            lines: !args.count,
        };
        let compute = compute(&args.options.cluster).await?;
        let (result, sent) = run_command(
            &compute,
            Job::Scan(KernelSpec::Grep(spec)),
            targets,
            &args.options,
            "grep",
        )
        .await?;
        let outputs = scan_outputs(&result)?;
        let any = outputs
            .iter()
            .any(|t| matches!(&t.output, Output::Grep(g) if g.matching_lines > 0));
        let mut out = std::io::stdout().lock();
        if args.options.json {
            writeln!(out, "{}", result_json(&result, sent))?;
        } else {
            let names = (many || args.with_filename) && !args.no_filename;
            let printed = format_grep(
                outputs,
                args.count,
                args.line_number,
                args.byte_offset,
                names,
            );
            out.write_all(&printed.stdout)?;
            out.flush()?;
            for target in &printed.binary_matches {
                eprintln!("quarry grep: {target}: binary file matches");
            }
        }
        out.flush()?;
        if !any {
            return Err(ExitStatus(1).into());
        }
        Ok(())
    })
}

/// GNU grep 3.8 reads a file in pieces of 96 KiB (its first read, and every
/// later one while lines are shorter than a page) and treats the data as
/// binary from the piece that holds its first NUL byte on.
const GNU_GREP_READ_BYTES: u64 = 96 * 1024;

/// What GNU grep prints for a set of outputs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GrepPrint {
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// The targets whose matching lines it withheld as binary data; it says
    /// "binary file matches" for each on standard error.
    pub binary_matches: Vec<String>,
}

/// What GNU grep prints for these outputs. Lines of binary data are
/// withheld as GNU grep withholds them: from the 96 KiB piece of the target
/// that holds its first NUL byte on, no line is printed, and a target with a
/// match there is named in [`GrepPrint::binary_matches`]. (GNU grep also
/// reads NULs as line ends from there on; the kernel counts that way.)
pub fn format_grep(
    outputs: &[TargetOutput],
    count: bool,
    line_number: bool,
    byte_offset: bool,
    names: bool,
) -> GrepPrint {
    let mut out = Vec::new();
    let mut binary_matches = Vec::new();
    for t in outputs {
        let Output::Grep(g) = &t.output else { continue };
        if count {
            if names {
                out.extend_from_slice(t.target.as_bytes());
                out.push(b':');
            }
            out.extend_from_slice(format!("{}\n", g.matching_lines).as_bytes());
            continue;
        }
        let binary_from = g.first_nul.map(|at| at - at % GNU_GREP_READ_BYTES);
        for line in &g.lines {
            let newline_at = line.byte_offset + line.text.len() as u64;
            if binary_from.is_some_and(|from| newline_at >= from) {
                binary_matches.push(t.target.clone());
                break;
            }
            if names {
                out.extend_from_slice(t.target.as_bytes());
                out.push(b':');
            }
            if line_number {
                out.extend_from_slice(format!("{}:", line.line_number).as_bytes());
            }
            if byte_offset {
                out.extend_from_slice(format!("{}:", line.byte_offset).as_bytes());
            }
            out.extend_from_slice(&line.text);
            out.push(b'\n');
        }
    }
    GrepPrint {
        stdout: out,
        binary_matches,
    }
}

/// Whether a locale's codeset (`nl_langinfo(CODESET)`) is UTF-8.
pub fn is_utf8_codeset(codeset: &[u8]) -> bool {
    codeset.eq_ignore_ascii_case(b"UTF-8") || codeset.eq_ignore_ascii_case(b"utf8")
}

/// The word rule of the locale this process runs under, picked as GNU wc
/// picks its locale: `setlocale(LC_CTYPE, "")` reads `LC_ALL`, then
/// `LC_CTYPE`, then `LANG`, and leaves the C locale when the named one is
/// not installed here (`LANG=en_US.UTF-8` without that locale counts as C
/// in wc too). A UTF-8 codeset means UTF-8; every other locale counts as C.
/// Read once, before any thread of ours runs (setlocale is not thread
/// safe), and the process's locale is put back.
pub fn wc_locale() -> WcLocale {
    static LOCALE: OnceLock<WcLocale> = OnceLock::new();
    *LOCALE.get_or_init(|| {
        // SAFETY: setlocale and nl_langinfo are called with valid C strings;
        // the strings they return are copied before the next call.
        unsafe {
            let before = libc::setlocale(libc::LC_CTYPE, std::ptr::null());
            let before = (!before.is_null()).then(|| CStr::from_ptr(before).to_owned());
            let chosen = libc::setlocale(libc::LC_CTYPE, c"".as_ptr());
            let codeset = libc::nl_langinfo(libc::CODESET);
            let utf8 = !chosen.is_null()
                && !codeset.is_null()
                && is_utf8_codeset(CStr::from_ptr(codeset).to_bytes());
            if let Some(before) = before {
                libc::setlocale(libc::LC_CTYPE, before.as_ptr());
            }
            if utf8 {
                WcLocale::Utf8
            } else {
                WcLocale::C
            }
        }
    })
}

/// `quarry wc`.
pub fn wc(args: &WcArgs) -> Result<()> {
    let locale = wc_locale();
    runtime()?.block_on(async {
        let targets = parse_targets(&args.targets)?;
        let any_flag = args.lines || args.words || args.bytes;
        let show = if any_flag {
            (args.lines, args.words, args.bytes)
        } else if args.word.is_some() || args.top.is_some() {
            (false, false, false)
        } else {
            (true, true, true)
        };
        let spec = WcSpec {
            words: show.1,
            word: args.word.as_ref().map(|w| w.as_bytes().to_vec()),
            top: args.top,
            locale,
        };
        let compute = compute(&args.options.cluster).await?;
        let (result, sent) = run_command(
            &compute,
            Job::Scan(KernelSpec::Wc(spec)),
            targets,
            &args.options,
            "wc",
        )
        .await?;
        let outputs = scan_outputs(&result)?;
        let mut out = std::io::stdout().lock();
        if args.options.json {
            writeln!(out, "{}", result_json(&result, sent))?;
        } else {
            if show.0 || show.1 || show.2 {
                out.write_all(format_wc(outputs, show.0, show.1, show.2).as_bytes())?;
            }
            for t in outputs {
                let Output::Wc(w) = &t.output else { continue };
                if let (Some(word), Some(n)) = (&args.word, w.word_count) {
                    writeln!(out, "{n} {word} {}", t.target)?;
                }
                for (word, n) in &w.top {
                    writeln!(out, "{n} {} {}", String::from_utf8_lossy(word), t.target)?;
                }
            }
        }
        out.flush()?;
        Ok(())
    })
}

/// What GNU wc (coreutils 9) prints for these outputs: each count right
/// aligned to the width of the total byte count (1 for a single count of a
/// single target), a "total" line for several targets.
pub fn format_wc(outputs: &[TargetOutput], lines: bool, words: bool, bytes: bool) -> String {
    let counts: Vec<(&str, [u64; 3])> = outputs
        .iter()
        .filter_map(|t| match &t.output {
            Output::Wc(w) => Some((t.target.as_str(), [w.lines, w.words, w.bytes])),
            _ => None,
        })
        .collect();
    let total: [u64; 3] = counts.iter().fold([0; 3], |acc, (_, c)| {
        [acc[0] + c[0], acc[1] + c[1], acc[2] + c[2]]
    });
    let shown = [lines, words, bytes];
    let single = counts.len() == 1 && shown.iter().filter(|s| **s).count() == 1;
    let width = if single {
        1
    } else {
        total_size_digits(outputs)
    };
    let mut out = String::new();
    let mut row = |name: &str, c: &[u64; 3]| {
        let cols: Vec<String> = (0..3)
            .filter(|&i| shown[i])
            .map(|i| format!("{:>width$}", c[i]))
            .collect();
        out.push_str(&cols.join(" "));
        out.push(' ');
        out.push_str(name);
        out.push('\n');
    };
    for (name, c) in &counts {
        row(name, c);
    }
    if counts.len() > 1 {
        row("total", &total);
    }
    out
}

fn total_size_digits(outputs: &[TargetOutput]) -> usize {
    let total: u64 = outputs.iter().map(|t| t.size_bytes).sum();
    total.max(1).to_string().len()
}

/// `quarry run`.
pub fn run(args: &RunArgs) -> Result<()> {
    let (job, rest) = parse_job(&args.kernel, &args.args)?;
    runtime()?.block_on(async {
        let targets = parse_targets(&rest)?;
        let compute = compute(&args.options.cluster).await?;
        if args.detach {
            let id = compute.submit(job, targets, limits(&args.options)?).await?;
            println!("{id}");
            return Ok(());
        }
        let (result, sent) =
            run_command(&compute, job, targets, &args.options, &args.kernel).await?;
        println!("{}", result_json(&result, sent));
        Ok(())
    })
}

/// Parses `quarry run KERNEL ARGS...` into a job and the remaining
/// arguments (the targets).
pub fn parse_job(kernel: &str, args: &[String]) -> Result<(Job, Vec<String>)> {
    let need = |n: usize| -> Result<()> {
        if args.len() < n {
            bail!("kernel {kernel} needs {n} argument(s) before its targets");
        }
        Ok(())
    };
    let job = match kernel {
        "fgrep8" => {
            need(1)?;
            let p = args[0].as_bytes();
            let Ok(pattern) = <[u8; 8]>::try_from(p) else {
                bail!("fgrep8 takes a pattern of exactly 8 bytes; {:?} has {}", args[0], p.len());
            };
            (Job::Scan(KernelSpec::Fgrep8 { pattern }), 1)
        }
        "grep" | "egrep" | "fgrep" => {
            need(1)?;
            let syntax = match kernel {
                "egrep" => GrepSyntax::Extended,
                "fgrep" => GrepSyntax::Fixed,
                _ => GrepSyntax::Basic,
            };
            let spec = GrepSpec {
                pattern: args[0].clone(),
                syntax,
                ignore_case: false,
                lines: true,
            };
            (Job::Scan(KernelSpec::Grep(spec)), 1)
        }
        "wc" => (
            Job::Scan(KernelSpec::Wc(WcSpec {
                words: true,
                word: None,
                top: None,
                locale: wc_locale(),
            })),
            0,
        ),
        "wordcount" => {
            need(1)?;
            let spec = WcSpec {
                words: false,
                word: Some(args[0].as_bytes().to_vec()),
                top: None,
                locale: wc_locale(),
            };
            (Job::Scan(KernelSpec::Wc(spec)), 1)
        }
        "histogram" => {
            need(1)?;
            let k: u32 = args[0].parse().with_context(|| format!("histogram K: {:?}", args[0]))?;
            let spec = WcSpec {
                words: false,
                word: None,
                top: Some(k),
                locale: wc_locale(),
            };
            (Job::Scan(KernelSpec::Wc(spec)), 1)
        }
        "checksum" => (Job::Scan(KernelSpec::Checksum), 0),
        "rmw" => {
            need(2)?;
            let mut ops = Vec::new();
            for op in &args[1..] {
                let Some((offset, delta)) = op.split_once(':') else {
                    bail!("rmw operation {op:?}: write OFFSET:DELTA");
                };
                ops.push(RmwOp {
                    offset_bytes: crate::objects_cmd::parse_size(offset)?,
                    delta: delta.parse().with_context(|| format!("rmw delta {delta:?}"))?,
                });
            }
            return Ok((
                Job::Rmw(RmwBatch {
                    volume: args[0].clone(),
                    ops,
                }),
                Vec::new(),
            ));
        }
        other => bail!(
            "no kernel {other:?}: fgrep8, grep, egrep, fgrep, wc, wordcount, histogram, checksum, rmw"
        ),
    };
    Ok((job.0, args[job.1..].to_vec()))
}

/// A result as JSON, with the bytes scanned and sent.
pub fn result_json(result: &CommandResult, sent_to_client_bytes: u64) -> Value {
    let outcome = match &result.outcome {
        Outcome::Scan(targets) => Value::Array(targets.iter().map(target_json).collect()),
        Outcome::Rmw { values } => json!({ "rmw_values": values }),
    };
    let scanned = result.bytes_scanned;
    json!({
        "results": outcome,
        "bytes_scanned": scanned,
        "bytes_from_nodes": result.bytes_from_nodes,
        "bytes_sent_to_client": sent_to_client_bytes,
        "scanned_per_sent": if sent_to_client_bytes > 0 { scanned as f64 / sent_to_client_bytes as f64 } else { 0.0 },
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn target_json(t: &TargetOutput) -> Value {
    let output = match &t.output {
        Output::Count(n) => json!({ "count": n }),
        Output::Grep(g) => json!({
            "matching_lines": g.matching_lines,
            "first_nul": g.first_nul,
            "lines": g.lines.iter().map(|l| json!({
                "line_number": l.line_number,
                "byte_offset": l.byte_offset,
                "text": text(&l.text),
            })).collect::<Vec<_>>(),
        }),
        Output::Wc(w) => json!({
            "lines": w.lines,
            "words": w.words,
            "bytes": w.bytes,
            "word_count": w.word_count,
            "top": w.top.iter().map(|(word, n)| json!([text(word), n])).collect::<Vec<_>>(),
        }),
        Output::Checksum(c) => json!({
            "bytes": c.bytes,
            "crc32c": format!("{:08x}", c.crc32c),
            "sha256": c.sha256.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        }),
    };
    json!({ "target": t.target, "size_bytes": t.size_bytes, "output": output })
}

/// `quarry jobs`.
pub fn jobs(cluster: &ClusterArg, json: bool) -> Result<()> {
    runtime()?.block_on(async {
        let compute = compute(cluster).await?;
        let list = compute.list().await?;
        if json {
            let rows: Vec<Value> = list
                .iter()
                .map(|s| {
                    json!({
                        "id": s.id, "kernel": s.kernel, "state": state_text(&s.state),
                        "bytes_done": s.bytes_done, "bytes_total": s.bytes_total,
                        "elapsed_ms": s.elapsed_ms, "result_bytes": s.result_bytes,
                    })
                })
                .collect();
            println!("{}", Value::Array(rows));
            return Ok(());
        }
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        table.set_header([
            "id", "kernel", "state", "done", "total", "elapsed", "result",
        ]);
        for s in &list {
            table.add_row([
                s.id.to_string(),
                s.kernel.clone(),
                state_text(&s.state),
                human_bytes(s.bytes_done),
                human_bytes(s.bytes_total),
                format!("{:.1} s", s.elapsed_ms as f64 / 1000.0),
                human_bytes(s.result_bytes),
            ]);
        }
        println!("{table}");
        Ok(())
    })
}

fn state_text(state: &CommandState) -> String {
    match state {
        CommandState::Queued => "queued".into(),
        CommandState::Running => "running".into(),
        CommandState::Done => "done".into(),
        CommandState::Failed { reason } => format!("failed: {reason}"),
        CommandState::Cancelled => "cancelled".into(),
    }
}

/// `quarry cancel`.
pub fn cancel(cluster: &ClusterArg, ids: &[CommandId]) -> Result<()> {
    runtime()?.block_on(async {
        let compute = compute(cluster).await?;
        for &id in ids {
            let status = compute.cancel(id).await?;
            println!("{id} {}", state_text(&status.state));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        crate::Cli::command().debug_assert();
    }

    #[test]
    fn targets_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_target("b/k/x.txt").unwrap(),
            Target::Object {
                bucket: "b".into(),
                key: "k/x.txt".into()
            }
        );
        assert_eq!(
            parse_target("b/logs/*").unwrap(),
            Target::Prefix {
                bucket: "b".into(),
                prefix: "logs/".into()
            }
        );
        assert_eq!(
            parse_target("b/").unwrap(),
            Target::Prefix {
                bucket: "b".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            parse_target("volume:v@4K+1M").unwrap(),
            Target::Volume {
                name: "v".into(),
                offset_bytes: 4096,
                len_bytes: Some(1 << 20)
            }
        );
        assert_eq!(
            parse_target("linear:10+5").unwrap(),
            Target::Linear {
                first_page: 10,
                pages: 5
            }
        );
        for bad in ["nokey", "/k", "linear:5", "volume:@1", "linear:x+1"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn jobs_parse() {
        let args: Vec<String> = ["would", "b/k"].iter().map(|s| s.to_string()).collect();
        let (job, rest) = parse_job("wordcount", &args).unwrap();
        assert_eq!(job.kernel_name(), "wc");
        assert_eq!(rest, vec!["b/k".to_string()]);
        assert!(parse_job("fgrep8", &["short".to_string()]).is_err());
        assert!(parse_job("nope", &[]).is_err());
        let (job, rest) = parse_job("rmw", &["v".into(), "8:1".into(), "4K:2".into()]).unwrap();
        assert!(rest.is_empty());
        assert_eq!(
            job,
            Job::Rmw(RmwBatch {
                volume: "v".into(),
                ops: vec![
                    RmwOp {
                        offset_bytes: 8,
                        delta: 1
                    },
                    RmwOp {
                        offset_bytes: 4096,
                        delta: 2
                    }
                ]
            })
        );
    }
}
