//! Near-data commands: `quarry grep`, `quarry wc`, `quarry run`,
//! `quarry jobs`, `quarry cancel`. The output of grep and wc is what GNU
//! grep and wc print for the same bytes (grep: C locale; wc: the C or a
//! UTF-8 locale, the one this process runs under), so scripts can switch.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{ProgressBar, ProgressStyle};
use quarry_client::{
    Client, ClientError, ClusterFile, CommandId, CommandResult, Compute, GrepSpec, Job, KernelSpec,
    Limits, Outcome, Output, OutputPiece, Target, TargetOutput, WcSpec,
};
use quarry_kernels::MAX_PATTERN_BYTES;
use serde_json::Value;

use crate::args::ClusterArg;
use quarry_jobs::human_bytes;
pub use quarry_jobs::result_json;
use quarry_jobs::{
    format_wc, parse_job, parse_target, wc_locale, GrepFormat, GrepPrinter, ListFiles,
};
use quarry_jobs::{state_text, status_json, GrepOptions};

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

/// Arguments of `quarry grep`: GNU grep's, where a target is an object, a
/// prefix or a range instead of a file.
#[derive(Debug, Args, Clone)]
#[command(disable_help_flag = true, args_override_self = true)]
pub struct GrepArgs {
    /// Use PATTERN (may be given more than once: a line matches when any
    /// does). With -e or -f, every operand is a target.
    #[arg(
        short = 'e',
        long = "regexp",
        value_name = "PATTERN",
        allow_hyphen_values = true,
        action = clap::ArgAction::Append
    )]
    pub regexp: Vec<String>,
    /// Read patterns from FILE, one per line ("-": standard input).
    #[arg(short = 'f', long = "file", value_name = "FILE", action = clap::ArgAction::Append)]
    pub pattern_files: Vec<PathBuf>,
    /// Print only a count of selected lines per target.
    #[arg(short = 'c', long = "count")]
    pub count: bool,
    /// Prefix each line with its 1-based line number.
    #[arg(short = 'n', long = "line-number")]
    pub line_number: bool,
    /// Prefix each line with the byte offset of its start (with -o, of the
    /// match).
    #[arg(short = 'b', long = "byte-offset")]
    pub byte_offset: bool,
    /// PATTERN is an extended regular expression.
    #[arg(short = 'E', long = "extended-regexp", conflicts_with = "fixed")]
    pub extended: bool,
    /// PATTERN is a literal string.
    #[arg(short = 'F', long = "fixed-strings")]
    pub fixed: bool,
    /// PATTERN is a basic regular expression (the default).
    #[arg(short = 'G', long = "basic-regexp", conflicts_with_all = ["extended", "fixed"])]
    pub basic: bool,
    /// Ignore case.
    #[arg(short = 'i', long = "ignore-case")]
    pub ignore_case: bool,
    /// Select the lines that do not match.
    #[arg(short = 'v', long = "invert-match")]
    pub invert: bool,
    /// Match only whole words.
    #[arg(short = 'w', long = "word-regexp")]
    pub word: bool,
    /// Match only whole lines.
    #[arg(short = 'x', long = "line-regexp")]
    pub line_regexp: bool,
    /// Print only the matched, non-empty parts of lines, each on a line.
    #[arg(short = 'o', long = "only-matching")]
    pub only_matching: bool,
    /// Print only the names of targets with a selected line.
    #[arg(
        short = 'l',
        long = "files-with-matches",
        overrides_with = "files_without_match"
    )]
    pub files_with_matches: bool,
    /// Print only the names of targets without a selected line.
    #[arg(
        short = 'L',
        long = "files-without-match",
        overrides_with = "files_with_matches"
    )]
    pub files_without_match: bool,
    /// Stop after NUM selected lines of each target.
    #[arg(short = 'm', long = "max-count", value_name = "NUM")]
    pub max_count: Option<u64>,
    /// Print NUM lines of context after each selected line.
    #[arg(short = 'A', long = "after-context", value_name = "NUM")]
    pub after_context: Option<u64>,
    /// Print NUM lines of context before each selected line.
    #[arg(short = 'B', long = "before-context", value_name = "NUM")]
    pub before_context: Option<u64>,
    /// Print NUM lines of context before and after (-A and -B win).
    #[arg(short = 'C', long = "context", value_name = "NUM")]
    pub context: Option<u64>,
    /// Always print target names (the last of -H and -h wins).
    #[arg(short = 'H', long = "with-filename", overrides_with = "no_filename")]
    pub with_filename: bool,
    /// Never print target names.
    #[arg(short = 'h', long = "no-filename", overrides_with = "with_filename")]
    pub no_filename: bool,
    /// Print help (-h is grep's --no-filename).
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// The pattern (a basic regular expression unless -E or -F; not given
    /// with -e or -f), then what to search: BUCKET/KEY, BUCKET/PREFIX*
    /// (every object whose key starts with PREFIX; quote it), BUCKET/ (the
    /// whole bucket), volume:NAME[@OFFSET[+LEN]], linear:FIRST+PAGES.
    #[arg(required = true, value_name = "PATTERN|TARGET")]
    pub operands: Vec<String>,
    /// Limits and output.
    #[command(flatten)]
    pub options: CommandOptions,
}

/// A `quarry grep` command line read as GNU grep reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepRequest {
    /// What the kernel selects.
    pub spec: GrepSpec,
    /// How its answer is printed.
    pub format: GrepFormat,
    /// What to search.
    pub targets: Vec<Target>,
    /// GNU grep would print nothing and exit with status 1 without reading
    /// a byte (`-m 0`, or patterns that cannot select a line, as
    /// `grep -f /dev/null`), unless `-L` lists the targets.
    pub nothing_selected: bool,
}

impl GrepArgs {
    /// Reads the patterns (from -e, -f or the first operand), the targets
    /// and the flags.
    pub fn request(&self) -> Result<GrepRequest> {
        let mut patterns = Vec::new();
        // GNU grep reads a pattern holding newlines as several patterns.
        for e in &self.regexp {
            patterns.extend(e.split('\n').map(str::to_string));
        }
        for path in &self.pattern_files {
            patterns.extend(read_pattern_file(path)?);
        }
        let mut targets = self.operands.clone();
        if self.regexp.is_empty() && self.pattern_files.is_empty() {
            let first = targets.remove(0);
            patterns.extend(first.split('\n').map(str::to_string));
        }
        if targets.is_empty() {
            bail!(
                "name what to search after the pattern: BUCKET/KEY, BUCKET/PREFIX*, BUCKET/, \
                 volume:NAME or linear:FIRST+PAGES (quarry grep does not read standard input)"
            );
        }
        let list = if self.files_with_matches {
            Some(ListFiles::WithMatches)
        } else if self.files_without_match {
            Some(ListFiles::WithoutMatch)
        } else {
            None
        };
        let after = self.after_context.or(self.context);
        let before = self.before_context.or(self.context);
        let nothing_selected = list != Some(ListFiles::WithoutMatch)
            && (self.max_count == Some(0) || selects_nothing(&patterns, self));
        let spec = GrepOptions {
            patterns,
            fixed: self.fixed,
            extended: self.extended,
            ignore_case: self.ignore_case,
            invert: self.invert,
            word: self.word,
            whole_line: self.line_regexp,
            count: self.count,
            list,
            only_matching: self.only_matching,
            max_count: self.max_count,
            before_context: before,
            after_context: after,
        }
        .spec()?;
        let targets = parse_targets(&targets)?;
        let many = targets.len() > 1 || targets.iter().any(|t| matches!(t, Target::Prefix { .. }));
        let format = GrepFormat {
            count: self.count,
            line_number: self.line_number,
            byte_offset: self.byte_offset,
            names: (many || self.with_filename) && !self.no_filename,
            list,
            only_matching: self.only_matching,
            invert: self.invert,
            group_separators: after.is_some() || before.is_some(),
            after_context: after.unwrap_or(0),
        };
        Ok(GrepRequest {
            spec,
            format,
            targets,
            nothing_selected,
        })
    }
}

/// Whether GNU grep 3.8 sees at once that no line can be selected: no
/// patterns (it reads them as `-v ''`, `-w` and `-x` dropped), or `-v`
/// with only the empty pattern, unless `-x` or `-w` makes that select the
/// non-empty lines.
fn selects_nothing(patterns: &[String], args: &GrepArgs) -> bool {
    if patterns.is_empty() {
        return !args.invert;
    }
    patterns.iter().all(String::is_empty) && args.invert && !args.line_regexp && !args.word
}

/// The patterns of a `-f` file: one per line, none in an empty file.
fn read_pattern_file(path: &Path) -> Result<Vec<String>> {
    let bytes = if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_PATTERN_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .context("reading patterns from standard input")?;
        bytes
    } else {
        let file = std::fs::File::open(path)
            .with_context(|| format!("{}: cannot open the pattern file", path.display()))?;
        let mut bytes = Vec::new();
        file.take(MAX_PATTERN_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("{}: cannot read the pattern file", path.display()))?;
        bytes
    };
    if bytes.len() > MAX_PATTERN_BYTES {
        bail!(
            "{}: more than {MAX_PATTERN_BYTES} bytes of patterns",
            path.display()
        );
    }
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let text = String::from_utf8(bytes)
        .with_context(|| format!("{}: the patterns are not UTF-8", path.display()))?;
    // A last line needs no newline; "\n" alone is one empty pattern.
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(text.split('\n').map(str::to_string).collect())
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

fn parse_targets(texts: &[String]) -> Result<Vec<Target>> {
    Ok(texts
        .iter()
        .map(|t| parse_target(t))
        .collect::<Result<_, _>>()?)
}

fn limits(options: &CommandOptions) -> Result<Limits> {
    Ok(Limits {
        time_ms: options.time_limit_ms,
        memory_bytes: quarry_jobs::parse_size(&options.memory_limit).context("--memory-limit")?,
        result_bytes: quarry_jobs::parse_size(&options.result_limit).context("--result-limit")?,
    })
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub(crate) async fn compute(cluster: &ClusterArg) -> Result<Compute> {
    let path = ClusterFile::locate(cluster.cluster.as_deref());
    let file = ClusterFile::load(&path)?;
    let client = Client::connect_cluster(&file).await?;
    Ok(client.compute())
}

/// Submits a command, shows its progress on a terminal, and returns its
/// result and the bytes that reached the client.
pub(crate) async fn run_command(
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
    // The bar moves while the command scans; the output is read as it
    // streams (a command whose output outgrows its bound waits for it).
    if let Some(bar) = &bar {
        loop {
            let status = compute.wait(id, Duration::from_millis(200)).await?;
            bar.set_length(status.bytes_total);
            bar.set_position(status.bytes_done);
            let output_waits = status.result_bytes > 0;
            if status.state.is_final() || output_waits || started.elapsed() > deadline {
                break;
            }
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(compute
        .finish(id, deadline.saturating_sub(started.elapsed()))
        .await?)
}

fn scan_outputs(result: &CommandResult) -> Result<&[TargetOutput]> {
    match &result.outcome {
        Outcome::Scan(t) => Ok(t),
        Outcome::Rmw { .. } => bail!("the command answered a read-modify-write batch, not a scan"),
        Outcome::Query(_) => bail!("the command answered a query, not a scan"),
    }
}

/// Bytes `quarry grep` gathers before it writes to standard output.
const STDOUT_BUFFER_BYTES: usize = 64 << 10;

/// `quarry grep`.
pub fn grep(args: &GrepArgs) -> Result<()> {
    let request = args.request()?;
    if request.nothing_selected {
        return Err(ExitStatus(1).into());
    }
    runtime()?.block_on(async {
        let compute = compute(&args.options.cluster).await?;
        let job = Job::Scan(KernelSpec::Grep(request.spec));
        if args.options.json {
            let (result, sent) =
                run_command(&compute, job, request.targets, &args.options, "grep").await?;
            let any = scan_outputs(&result)?
                .iter()
                .any(|t| matches!(&t.output, Output::Grep(g) if g.matching_lines > 0));
            println!("{}", result_json(&result, sent));
            return if any {
                Ok(())
            } else {
                Err(ExitStatus(1).into())
            };
        }
        let limits = limits(&args.options)?;
        let id = compute.submit(job, request.targets, limits).await?;
        let timeout = Duration::from_millis(limits.time_ms + 5_000);
        let printed = print_grep(&compute, id, timeout, request.format).await;
        let (any, binary_matches) = match printed {
            Ok(p) => p,
            Err(e) => {
                // A reader that stops leaves the command waiting for it:
                // stop it, and its nodes, now.
                let _ = compute.cancel(id).await;
                return Err(e);
            }
        };
        for target in &binary_matches {
            eprintln!("quarry grep: {target}: binary file matches");
        }
        if !any {
            return Err(ExitStatus(1).into());
        }
        Ok(())
    })
}

/// Prints a grep command's output as GNU grep prints it, as it streams
/// from the entry node; returns whether any target had a selected line
/// and the targets whose matches were withheld as binary data.
async fn print_grep(
    compute: &Compute,
    id: CommandId,
    timeout: Duration,
    format: GrepFormat,
) -> Result<(bool, Vec<String>)> {
    let mut printer = GrepPrinter::new(format);
    // Blocks of lines larger than the buffer go to standard output in one
    // write each, not through it.
    let mut out = std::io::BufWriter::with_capacity(STDOUT_BUFFER_BYTES, std::io::stdout().lock());
    let mut any = false;
    compute
        .stream(id, timeout, |piece| {
            let written = match piece {
                OutputPiece::Lines { target, lines } => printer.lines(&mut out, &target, &lines),
                OutputPiece::Target(t) => {
                    any |= matches!(&t.output, Output::Grep(g) if g.matching_lines > 0);
                    printer.target(&mut out, &t)
                }
                OutputPiece::End { .. } | OutputPiece::Whole(_) => Ok(()),
            };
            // What is printed goes out as each piece comes, not when the
            // buffer fills: a reader sees lines as the nodes find them.
            written
                .and_then(|()| out.flush())
                .map_err(|e| ClientError::Compute(format!("writing standard output: {e}")))
        })
        .await?;
    out.flush()?;
    Ok((any, printer.binary_matches))
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

/// `quarry jobs`.
pub fn jobs(cluster: &ClusterArg, json: bool) -> Result<()> {
    runtime()?.block_on(async {
        let compute = compute(cluster).await?;
        let list = compute.list().await?;
        if json {
            let rows: Vec<Value> = list.iter().map(status_json).collect();
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

    fn grep_request(args: &[&str]) -> Result<GrepRequest> {
        use clap::Parser;
        let argv = ["quarry", "grep"].iter().chain(args);
        match crate::Cli::try_parse_from(argv)?.command {
            crate::Command::Grep(grep) => grep.request(),
            other => panic!("not grep: {other:?}"),
        }
    }

    #[test]
    fn grep_reads_its_command_line_as_gnu_grep_does() {
        let object = |key: &str| Target::Object {
            bucket: "b".into(),
            key: key.into(),
        };
        // A pattern holding a newline is two; with -e every operand is a
        // target.
        let r = grep_request(&["-e", "a\nb", "-e", "-c", "b/k", "b/j"]).unwrap();
        assert_eq!(r.spec.patterns, ["a", "b", "-c"]);
        assert_eq!(r.targets, [object("k"), object("j")]);
        assert!(r.format.names && !r.format.count);
        // -f: a pattern a line; "\n" alone is the empty pattern; an empty
        // file has none.
        let dir = tempfile::tempdir().unwrap();
        for (text, want) in [
            ("x\ny\n", vec!["x", "y"]),
            ("x\ny", vec!["x", "y"]),
            ("\n", vec![""]),
            ("", vec![]),
        ] {
            let path = dir.path().join("p");
            std::fs::write(&path, text).unwrap();
            let path = path.display().to_string();
            let r = grep_request(&["-f", &path, "-e", "z", "b/k"]).unwrap();
            let mut want: Vec<&str> = want;
            want.insert(0, "z");
            assert_eq!(r.spec.patterns, want, "{text:?}");
        }
        let missing = grep_request(&["-f", "/nonexistent/patterns", "b/k"]).unwrap_err();
        assert!(
            format!("{missing:#}").contains("/nonexistent/patterns"),
            "{missing:#}"
        );
        // -A and -B win over -C in either order; the last of a flag wins.
        let r = grep_request(&["-A1", "-C3", "-A0", "p", "b/k"]).unwrap();
        assert_eq!((r.spec.after_context, r.spec.before_context), (0, 3));
        assert!(r.format.group_separators);
        assert!(!grep_request(&["p", "b/k"]).unwrap().format.group_separators);
        // -l and -L: the last wins, one selected line decides, no lines or
        // context travel.
        let r = grep_request(&["-L", "-l", "-C2", "-m5", "p", "b/k"]).unwrap();
        assert_eq!(r.format.list, Some(ListFiles::WithMatches));
        assert_eq!(r.spec.max_count, Some(1));
        assert!(!r.spec.lines && r.spec.after_context == 0);
        // -H and -h: the last wins; a prefix names its objects.
        assert!(
            grep_request(&["-h", "-H", "p", "b/k"])
                .unwrap()
                .format
                .names
        );
        assert!(
            !grep_request(&["-H", "-h", "p", "b/x*"])
                .unwrap()
                .format
                .names
        );
        assert!(grep_request(&["p", "b/x*"]).unwrap().format.names);
        // What GNU grep sees selects nothing, unless -L lists the targets.
        for (args, nothing) in [
            (&["-m0", "p", "b/k"][..], true),
            (&["-m0", "-L", "p", "b/k"][..], false),
            (&["-v", "", "b/k"][..], true),
            (&["-v", "-x", "", "b/k"][..], false),
            (&["-v", "-e", "", "-e", "a", "b/k"][..], false),
        ] {
            let r = grep_request(args).unwrap();
            assert_eq!(r.nothing_selected, nothing, "{args:?}");
        }
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        let empty = empty.display().to_string();
        assert!(
            grep_request(&["-f", &empty, "b/k"])
                .unwrap()
                .nothing_selected
        );
        assert!(
            !grep_request(&["-v", "-f", &empty, "b/k"])
                .unwrap()
                .nothing_selected
        );
        // A pattern but nothing to search, or two matchers: refused.
        let none = grep_request(&["p"]).unwrap_err();
        assert!(none.to_string().contains("name what to search"), "{none}");
        assert!(grep_request(&["-E", "-F", "p", "b/k"]).is_err());
    }
}
