//! `quarry bench scan`: the kernels alone, in this process, on one core —
//! the grep kernel (a rare literal, a frequent literal, five regexes: one
//! with inner literals, `-i` words, whole words, anchored, `\w`) and wc -l
//! folded over generated text in memory in 1 MiB blocks — side by side
//! with ripgrep (`rg -j1 -c`, with and without mmap, the faster kept) and
//! GNU `wc -l` on the same file hot in the page cache, timed as processes
//! less their startup (the same tool on an empty file).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_kernels::{compile, GrepSpec, GrepSyntax, KernelSpec, Output, WcSpec};
use serde::Serialize;

use crate::args::BenchScanArgs;
use crate::measure::{median, mib_per_s};
use quarry_jobs::human_bytes;
use quarry_jobs::parse_size;

/// Bytes per fold, as a node's local run hands them over by default.
const BLOCK_BYTES: usize = 1 << 20;
/// The rare literal: planted once every `RARE_EVERY` lines.
const RARE: &str = "Quarrystone";
const RARE_EVERY: u64 = 20_000;

/// One kind of scan, and how each side runs it.
struct Case {
    what: &'static str,
    kernel: KernelSpec,
    /// Arguments of the peer (before the file).
    peer: PeerKind,
}

enum PeerKind {
    /// `rg --no-config -c ARGS`, as it runs by default and on one thread
    /// with and without mmap; the fastest is the peer.
    Rg(Vec<String>),
    /// `wc -l`.
    WcLines,
}

#[derive(Debug, Serialize)]
struct Row {
    what: &'static str,
    peer: String,
    matching: u64,
    kernel_mib_per_s: f64,
    peer_mib_per_s: f64,
    ratio: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    text_bytes: u64,
    rounds: u32,
    rg_startup_ms: f64,
    wc_startup_ms: f64,
    rows: Vec<Row>,
}

/// Runs the benchmark and prints its table (or JSON).
pub fn scan(args: &BenchScanArgs) -> Result<()> {
    let (size_bytes, rounds) = if args.common.quick {
        (16 << 20, 1)
    } else {
        (parse_size(&args.size)?, args.rounds)
    };
    if size_bytes == 0 {
        bail!("--size must be above zero");
    }
    let (dir, _scratch) = crate::common::work_dir(args.common.dir.as_deref(), "quarry-bench-scan")?;
    let file = dir.join("text.txt");
    let empty = dir.join("empty.txt");
    let text = generate_text(size_bytes);
    std::fs::write(&file, &text).with_context(|| format!("cannot write {}", file.display()))?;
    std::fs::write(&empty, b"")?;
    let frequent = frequent_word(&text);
    let cases = cases(&frequent);
    if !args.common.json {
        eprintln!(
            "bench scan: {} of generated text in {}, {} round(s); kernel folds 1 MiB blocks in memory on one core; \
             rare literal {RARE:?}, frequent literal {frequent:?}, regexes {REGEX:?}, \
             -i {REGEX_ANY_CASE:?}, {REGEX_WORDS:?}, {REGEX_ANCHORED:?}, {REGEX_CLASS:?}",
            human_bytes(size_bytes),
            file.display(),
            rounds
        );
    }
    // Warm the page cache, and measure the peers' startup.
    std::fs::read(&file)?;
    let rg_startup = startup(|| {
        rg_time(
            &empty,
            &["-F".into(), "-e".into(), RARE.into()],
            RgMode::Default,
        )
    })?;
    let wc_startup = startup(|| wc_time(&empty))?;
    let mut kernel_secs = vec![Vec::new(); cases.len()];
    let mut peer_secs = vec![Vec::new(); cases.len()];
    let mut matching = vec![0u64; cases.len()];
    let mut peer_names = vec![String::new(); cases.len()];
    for _ in 0..rounds {
        for (i, case) in cases.iter().enumerate() {
            let (secs, count) = kernel_time(&case.kernel, &text)?;
            kernel_secs[i].push(secs);
            matching[i] = count;
            let (secs, count, name) = peer_time(&case.peer, &file, rg_startup, wc_startup)?;
            if count != matching[i] {
                bail!(
                    "{}: the kernel counted {} lines, {name} {count}",
                    case.what,
                    matching[i]
                );
            }
            peer_secs[i].push(secs);
            peer_names[i] = name.to_string();
        }
    }
    let rows: Vec<Row> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            let k = mib_per_s(size_bytes, median(&mut kernel_secs[i]));
            let p = mib_per_s(size_bytes, median(&mut peer_secs[i]));
            Row {
                what: case.what,
                peer: peer_names[i].clone(),
                matching: matching[i],
                kernel_mib_per_s: k,
                peer_mib_per_s: p,
                ratio: k / p,
            }
        })
        .collect();
    let report = Report {
        text_bytes: size_bytes,
        rounds,
        rg_startup_ms: rg_startup * 1e3,
        wc_startup_ms: wc_startup * 1e3,
        rows,
    };
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print_table(&report);
    Ok(())
}

/// The rows: what each side runs.
fn cases(frequent: &str) -> Vec<Case> {
    vec![
        Case {
            what: "grep -F, rare literal",
            kernel: grep(RARE, GrepSyntax::Fixed),
            peer: PeerKind::Rg(vec!["-F".into(), "-e".into(), RARE.into()]),
        },
        Case {
            what: "grep -F, frequent literal",
            kernel: grep(frequent, GrepSyntax::Fixed),
            peer: PeerKind::Rg(vec!["-F".into(), "-e".into(), frequent.to_string()]),
        },
        Case {
            what: "grep -E, regex",
            kernel: grep(REGEX, GrepSyntax::Extended),
            peer: PeerKind::Rg(vec!["-e".into(), REGEX.into()]),
        },
        Case {
            what: "grep -E -i, case-insensitive words",
            kernel: KernelSpec::Grep(GrepSpec {
                ignore_case: true,
                ..grep_spec(REGEX_ANY_CASE, GrepSyntax::Extended)
            }),
            peer: PeerKind::Rg(vec!["-i".into(), "-e".into(), REGEX_ANY_CASE.into()]),
        },
        Case {
            what: "grep -E, alternation of words",
            kernel: grep(REGEX_WORDS, GrepSyntax::Extended),
            peer: PeerKind::Rg(vec!["-e".into(), REGEX_WORDS.into()]),
        },
        Case {
            what: "grep -E, anchored",
            kernel: grep(REGEX_ANCHORED, GrepSyntax::Extended),
            peer: PeerKind::Rg(vec!["-e".into(), REGEX_ANCHORED.into()]),
        },
        Case {
            what: "grep -E, word class",
            kernel: grep(REGEX_CLASS, GrepSyntax::Extended),
            peer: PeerKind::Rg(vec!["-e".into(), REGEX_CLASS.into()]),
        },
        Case {
            what: "wc -l",
            kernel: KernelSpec::Wc(WcSpec {
                words: false,
                word: None,
                top: None,
                locale: quarry_kernels::WcLocale::C,
            }),
            peer: PeerKind::WcLines,
        },
    ]
}

/// Runs the peer of a row on `file`: its seconds less its startup, the
/// count it printed and its name.
fn peer_time(
    peer: &PeerKind,
    file: &Path,
    rg_startup: f64,
    wc_startup: f64,
) -> Result<(f64, u64, &'static str)> {
    Ok(match peer {
        PeerKind::Rg(rg_args) => {
            // The fastest of rg as it runs by default and rg pinned to one
            // thread with and without mmap: the peer is rg at its best.
            let mut best: Option<(f64, u64, &'static str)> = None;
            for mode in [RgMode::Default, RgMode::Mmap, RgMode::NoMmap] {
                let (secs, n) = rg_time(file, rg_args, mode)?;
                if let Some((_, n0, name0)) = best {
                    if n != n0 {
                        bail!("rg counted {n0} as `{name0}`, {n} as `{}`", mode.name());
                    }
                }
                if best.is_none_or(|(b, _, _)| secs < b) {
                    best = Some((secs, n, mode.name()));
                }
            }
            let (secs, n, name) = best.context("no rg run")?;
            ((secs - rg_startup).max(1e-6), n, name)
        }
        PeerKind::WcLines => {
            let (secs, n) = wc_time(file)?;
            ((secs - wc_startup).max(1e-6), n, "wc -l (GNU)")
        }
    })
}

/// Prints the report as a table.
fn print_table(report: &Report) {
    let rounds = report.rounds;
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "scan",
        "matching lines",
        "kernel MiB/s",
        "peer",
        "peer MiB/s",
        "kernel / peer",
    ]);
    for r in &report.rows {
        table.add_row(vec![
            r.what.to_string(),
            r.matching.to_string(),
            format!("{:.0}", r.kernel_mib_per_s),
            r.peer.clone(),
            format!("{:.0}", r.peer_mib_per_s),
            format!("{:.2}", r.ratio),
        ]);
    }
    println!("{table}");
    println!(
        "(medians of {rounds} round(s); one core each; peers hot in the page cache, less their startup: rg {:.1} ms, wc {:.1} ms)",
        report.rg_startup_ms, report.wc_startup_ms
    );
}

/// A regex with a literal inside, as log searches are.
const REGEX: &str = "[A-Z][a-z]+ (of|the) [a-z]+ing";
/// Words in any case (`-i`), as a search of logs for trouble is.
const REGEX_ANY_CASE: &str = "error|warning";
/// Whole words, one of several.
const REGEX_WORDS: &str = r"\b(water|sound|number)\b";
/// Anchored at the line's start: nearly every line matches.
const REGEX_ANCHORED: &str = "^[A-Z][a-z]+ ";
/// A class where ripgrep's default is Unicode: `\w` (the C locale's
/// `[_[:alnum:]]` to GNU grep and the kernel). The text is ASCII, so both
/// select the same lines; ripgrep pays for its class as a user typing the
/// pattern would make it.
const REGEX_CLASS: &str = r"\w+ing";

fn grep_spec(pattern: &str, syntax: GrepSyntax) -> GrepSpec {
    GrepSpec {
        lines: false,
        ..GrepSpec::new(pattern, syntax)
    }
}

fn grep(pattern: &str, syntax: GrepSyntax) -> KernelSpec {
    KernelSpec::Grep(grep_spec(pattern, syntax))
}

/// The median of 5 timings of `f` (a peer on an empty file).
fn startup(f: impl Fn() -> Result<(f64, u64)>) -> Result<f64> {
    let mut v = (0..5)
        .map(|_| f().map(|t| t.0))
        .collect::<Result<Vec<_>>>()?;
    Ok(median(&mut v))
}

/// Folds the kernel over `text` in 1 MiB blocks; returns the seconds and
/// the matching lines (or lines, for wc).
fn kernel_time(spec: &KernelSpec, text: &[u8]) -> Result<(f64, u64)> {
    let started = Instant::now();
    let kernel = compile(spec)?;
    let mut part = kernel.empty(0);
    for block in text.chunks(BLOCK_BYTES) {
        part = kernel.fold(part, block)?;
    }
    let out = kernel.finish(part)?;
    let secs = started.elapsed().as_secs_f64();
    let count = match out {
        Output::Grep(g) => g.matching_lines,
        Output::Wc(w) => w.lines,
        other => bail!("unexpected output {other:?}"),
    };
    Ok((secs, count))
}

/// How rg is run: as it runs by default, or on one thread with or
/// without mmap.
#[derive(Debug, Clone, Copy)]
enum RgMode {
    Default,
    Mmap,
    NoMmap,
}

impl RgMode {
    fn name(self) -> &'static str {
        match self {
            RgMode::Default => "rg -c",
            RgMode::Mmap => "rg -j1 -c --mmap",
            RgMode::NoMmap => "rg -j1 -c --no-mmap",
        }
    }

    fn flags(self) -> &'static [&'static str] {
        match self {
            RgMode::Default => &[],
            RgMode::Mmap => &["-j1", "--mmap"],
            RgMode::NoMmap => &["-j1", "--no-mmap"],
        }
    }
}

/// Runs rg on `file`; returns the wall seconds and the count it printed.
fn rg_time(file: &Path, args: &[String], mode: RgMode) -> Result<(f64, u64)> {
    let started = Instant::now();
    let output = Command::new("rg")
        .args(["--no-config", "-c"])
        .args(mode.flags())
        .args(args)
        .arg(file)
        .output()
        .context("cannot run rg (install ripgrep)")?;
    let secs = started.elapsed().as_secs_f64();
    // rg exits 1 when nothing matched.
    match output.status.code() {
        Some(0) | Some(1) => {}
        _ => bail!("rg failed: {}", String::from_utf8_lossy(&output.stderr)),
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let count = if text.trim().is_empty() {
        0
    } else {
        text.trim().parse().context("rg -c printed no count")?
    };
    Ok((secs, count))
}

/// Runs `wc -l` on `file`; returns the wall seconds and the lines.
fn wc_time(file: &Path) -> Result<(f64, u64)> {
    let started = Instant::now();
    let output = Command::new("wc")
        .arg("-l")
        .arg(file)
        .env("LC_ALL", "C")
        .output()
        .context("cannot run wc")?;
    let secs = started.elapsed().as_secs_f64();
    if !output.status.success() {
        bail!("wc failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let count = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .context("wc -l printed no count")?;
    Ok((secs, count))
}

/// English words, most frequent first.
const COMMON: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "that",
    "it",
    "was",
    "for",
    "on",
    "are",
    "with",
    "as",
    "his",
    "they",
    "be",
    "at",
    "one",
    "have",
    "this",
    "from",
    "or",
    "had",
    "by",
    "word",
    "but",
    "what",
    "some",
    "we",
    "can",
    "out",
    "other",
    "were",
    "all",
    "there",
    "when",
    "up",
    "use",
    "your",
    "how",
    "said",
    "an",
    "each",
    "she",
    "which",
    "do",
    "their",
    "time",
    "if",
    "will",
    "way",
    "about",
    "many",
    "then",
    "them",
    "write",
    "would",
    "like",
    "so",
    "these",
    "her",
    "long",
    "make",
    "thing",
    "see",
    "him",
    "two",
    "has",
    "look",
    "more",
    "day",
    "could",
    "go",
    "come",
    "did",
    "number",
    "sound",
    "no",
    "most",
    "people",
    "my",
    "over",
    "know",
    "water",
    "than",
    "call",
    "first",
    "who",
    "may",
    "down",
    "side",
    "been",
    "now",
    "find",
    "running",
    "morning",
    "evening",
    "building",
    "nothing",
    "something",
    "reading",
    "thinking",
    "error",
    "warning",
];

/// Text of `size` bytes: lines of 6 to 16 words drawn with Zipf-like
/// frequencies from the common words and a long tail of made-up ones,
/// sentences capitalised, and [`RARE`] planted every [`RARE_EVERY`] lines.
fn generate_text(size: u64) -> Vec<u8> {
    let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    const SYLLABLES: &[&str] = &[
        "ka", "lo", "mer", "tin", "sa", "ver", "dor", "an", "el", "qua", "ri", "ston", "bel",
        "cor", "ful", "ness", "ment", "pre", "ex", "ul", "ow", "ith", "ur", "ble",
    ];
    let mut vocab: Vec<String> = COMMON.iter().map(|s| s.to_string()).collect();
    while vocab.len() < 20_000 {
        let n = 1 + (next() % 4) as usize;
        let mut w = String::new();
        for _ in 0..n {
            w.push_str(SYLLABLES[(next() % SYLLABLES.len() as u64) as usize]);
        }
        vocab.push(w);
    }
    let ln_n = (vocab.len() as f64).ln();
    let mut out = Vec::with_capacity(size as usize + 256);
    let mut line = 0u64;
    while (out.len() as u64) < size {
        let words = 6 + next() % 11;
        for i in 0..words {
            // Log-uniform rank: P(rank r) ~ 1/r.
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            let rank = ((u * ln_n).exp() as usize)
                .saturating_sub(1)
                .min(vocab.len() - 1);
            let w = &vocab[rank];
            if i == 0 || next() % 23 == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    out.extend(f.to_uppercase().to_string().bytes());
                    out.extend(c.as_str().bytes());
                }
            } else {
                out.extend(w.bytes());
            }
            if i + 1 < words {
                out.push(if next() % 17 == 0 { b',' } else { b' ' });
                if out.last() == Some(&b',') {
                    out.push(b' ');
                }
            }
        }
        if line % RARE_EVERY == RARE_EVERY / 2 {
            out.write_all(b" near ").ok();
            out.write_all(RARE.as_bytes()).ok();
        }
        out.extend_from_slice(b".\n");
        line += 1;
    }
    out.truncate(size as usize);
    out
}

/// A word that matches roughly one line in ten: measured on the text's
/// start.
fn frequent_word(text: &[u8]) -> String {
    let sample = &text[..text.len().min(1 << 20)];
    let lines = memchr_count(b'\n', sample).max(1);
    let mut best = ("people", f64::MAX);
    for w in COMMON.iter().skip(20) {
        if w.len() < 5 {
            continue;
        }
        let n = sample
            .split(|&b| b == b'\n')
            .filter(|l| l.windows(w.len()).any(|x| x == w.as_bytes()))
            .count();
        let share = n as f64 / lines as f64;
        let off = (share - 0.1).abs();
        if off < best.1 {
            best = (w, off);
        }
    }
    best.0.to_string()
}

fn memchr_count(b: u8, s: &[u8]) -> usize {
    s.iter().filter(|&&x| x == b).count()
}
