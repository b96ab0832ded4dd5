//! `quarry grep`'s flags against GNU grep 3.8, byte for byte (standard
//! output and exit status), over random text and random command lines: the
//! command line read by `quarry grep`'s own parser, the kernel run over each
//! target cut into random ranges (folded in random blocks, each part sent
//! through postcard, the parts joined in either order, as nodes and the
//! entry node do), and the answer printed by `quarry grep`'s printer. The
//! same flags over a real cluster are in `compute.rs`.

use std::path::Path;
use std::process::Command;

use clap::Parser;
use quarry_cli::{Cli, GrepRequest};
use quarry_client::{KernelSpec, Output, Target, TargetOutput};
use quarry_jobs::format_grep;
use quarry_kernels::{compile, Part, ScanKernel};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Fails the test unless GNU grep runs here.
fn require_gnu_grep() {
    let out = Command::new("grep").arg("--version").output();
    let version = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => panic!("these tests compare with GNU grep, which cannot be run here: {e}"),
    };
    assert!(
        version.contains("GNU grep"),
        "these tests compare with GNU grep; `grep --version` says: {version}"
    );
}

/// `quarry grep ARGS` read by its parser.
fn request(args: &[String]) -> GrepRequest {
    let argv = ["quarry", "grep"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: quarry_cli::Command::Grep(grep),
        }) => grep.request().expect("a grep request"),
        Ok(other) => panic!("not a grep command: {other:?}"),
        Err(e) => panic!("quarry grep {args:?}: {e}"),
    }
}

/// Runs `k` over `text` cut into a few random ranges.
fn run_split(k: &dyn ScanKernel, text: &[u8], rng: &mut StdRng) -> Output {
    let mut bounds: Vec<usize> = (0..rng.gen_range(0..6))
        .map(|_| rng.gen_range(0..=text.len()))
        .collect();
    bounds.push(0);
    bounds.push(text.len());
    bounds.sort_unstable();
    let block = match rng.gen_range(0..3) {
        0 => rng.gen_range(1..8),
        1 => rng.gen_range(8..200),
        _ => usize::MAX,
    };
    let mut parts: Vec<Part> = Vec::new();
    for w in bounds.windows(2) {
        let mut p = k.empty(w[0] as u64);
        for chunk in text[w[0]..w[1]].chunks(block) {
            p = k.fold(p, chunk).expect("fold");
        }
        parts.push(roundtrip(&p));
    }
    let joined = if rng.gen_bool(0.5) {
        let mut it = parts.into_iter();
        let first = it.next().expect("one part");
        it.fold(first, |a, b| roundtrip(&k.combine(a, b).expect("combine")))
    } else {
        let mut it = parts.into_iter().rev();
        let last = it.next().expect("one part");
        it.fold(last, |b, a| roundtrip(&k.combine(a, b).expect("combine")))
    };
    k.finish(joined).expect("finish")
}

/// Runs `k` over `text` cut at `cuts` as the entry node joins parts: left
/// to right, taking the final lines of the joined prefix after each join;
/// the answer is those lines and then what `finish` gives.
fn run_drained(k: &dyn ScanKernel, text: &[u8], cuts: &[usize]) -> Output {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(text.len());
    let mut taken = Vec::new();
    let mut prefix: Option<Part> = None;
    for w in bounds.windows(2) {
        let p = k
            .fold(k.empty(w[0] as u64), &text[w[0]..w[1]])
            .expect("fold");
        let mut joined = match prefix.take() {
            None => p,
            Some(left) => k.combine(left, roundtrip(&p)).expect("combine"),
        };
        taken.extend(k.drain(&mut joined).expect("drain"));
        prefix = Some(roundtrip(&joined));
    }
    let mut out = k.finish(prefix.expect("one part")).expect("finish");
    if let Output::Grep(g) = &mut out {
        taken.append(&mut g.lines);
        g.lines = taken;
    }
    out
}

fn roundtrip(p: &Part) -> Part {
    let wire = postcard::to_stdvec(p).expect("serialize");
    postcard::from_bytes(&wire).expect("deserialize")
}

/// What `quarry grep ARGS` prints and its exit status, for objects named
/// and holding what `files` does.
fn ours(args: &[String], files: &[(String, Vec<u8>)], rng: &mut StdRng) -> (Vec<u8>, i32) {
    let request = request(args);
    if request.nothing_selected {
        return (Vec::new(), 1);
    }
    let kernel = compile(&KernelSpec::Grep(request.spec.clone())).expect("compile");
    let mut outputs = Vec::new();
    for target in &request.targets {
        let (bucket, key, prefix) = match target {
            Target::Object { bucket, key } => (bucket, key, false),
            Target::Prefix { bucket, prefix } => (bucket, prefix, true),
            other => panic!("no such target here: {other:?}"),
        };
        let name = format!("{bucket}/{key}");
        for (file, text) in files {
            if *file == name || (prefix && file.starts_with(&name)) {
                outputs.push(TargetOutput {
                    target: file.clone(),
                    size_bytes: text.len() as u64,
                    output: run_split(&*kernel, text, rng),
                });
            }
        }
    }
    let any = outputs
        .iter()
        .any(|t| matches!(&t.output, Output::Grep(g) if g.matching_lines > 0));
    let printed = format_grep(&outputs, &request.format);
    (printed.stdout, if any { 0 } else { 1 })
}

/// What GNU grep prints for the same arguments (`C` locale), in `dir`.
fn theirs(dir: &Path, args: &[String]) -> (Vec<u8>, i32) {
    let out = Command::new("grep")
        .args(args)
        .current_dir(dir)
        .env("LC_ALL", "C")
        .output()
        .expect("run GNU grep");
    let status = out.status.code().expect("grep exits");
    assert!(
        status < 2,
        "grep {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.stdout, status)
}

const WORDS: &[&str] = &[
    "ab", "a", "b", "abc", "xab", "ab_", "AB", "c", "ba", "x.y", "-", "aab", "bb",
];

/// Random text: words of [`WORDS`] on lines of 0 to 9 words (runs of
/// matching and empty lines come up), sometimes without a last newline;
/// with `nul`, some words hold NUL bytes (binary data).
fn random_text(rng: &mut StdRng, lines: usize, nul: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..lines {
        let words = rng
            .gen_range(0..10usize)
            .saturating_sub(rng.gen_range(0..3));
        for w in 0..words {
            if w > 0 {
                out.push(if rng.gen_bool(0.9) { b' ' } else { b'\t' });
            }
            if nul && rng.gen_bool(0.1) {
                out.extend_from_slice(b"a\0b");
                continue;
            }
            out.extend_from_slice(WORDS[rng.gen_range(0..WORDS.len())].as_bytes());
        }
        out.push(b'\n');
    }
    if rng.gen_bool(0.3) {
        out.pop();
    }
    out
}

const PATTERNS: &[(&str, &str)] = &[
    ("-F", "ab"),
    ("-F", "a"),
    ("-F", "x.y"),
    ("-F", ""),
    ("-G", "ab*"),
    ("-G", "^a"),
    ("-G", "b$"),
    ("-G", "a\\|bb"),
    ("-G", "x.y"),
    ("-G", "c*"),
    ("-E", "a|ab"),
    ("-E", "(ab)+"),
    ("-E", "^(a|b)+$"),
    ("-E", "b{2}"),
    ("-E", "a|"),
    ("-E", "[[:upper:]]+"),
];

/// A random command line: a syntax, one to three patterns (as the operand,
/// with -e, or in a -f file), and flags.
fn random_args(rng: &mut StdRng, dir: &Path, case: usize) -> Vec<String> {
    let (syntax, first) = PATTERNS[rng.gen_range(0..PATTERNS.len())];
    let mut patterns = vec![first.to_string()];
    for _ in 0..rng.gen_range(0..3) {
        let same: Vec<&str> = PATTERNS
            .iter()
            .filter(|(s, _)| *s == syntax)
            .map(|(_, p)| *p)
            .collect();
        patterns.push(same[rng.gen_range(0..same.len())].to_string());
    }
    let mut args = vec![syntax.to_string()];
    let mut flag = |args: &mut Vec<String>, p: f64, f: &str| {
        if rng.gen_bool(p) {
            args.push(f.to_string());
        }
    };
    for (p, f) in [
        (0.2, "-i"),
        (0.25, "-v"),
        (0.2, "-w"),
        (0.1, "-x"),
        (0.3, "-o"),
        (0.4, "-n"),
        (0.2, "-b"),
        (0.15, "-H"),
        (0.05, "-h"),
    ] {
        flag(&mut args, p, f);
    }
    match rng.gen_range(0..12) {
        0 => args.push("-c".into()),
        1 => args.push("-l".into()),
        2 => args.push("-L".into()),
        _ => {}
    }
    if rng.gen_bool(0.3) {
        args.push(format!("-m{}", rng.gen_range(0..4)));
    }
    // Mostly short context, sometimes longer than the ranges are.
    let most = if rng.gen_bool(0.2) { 12 } else { 4 };
    match rng.gen_range(0..6) {
        0 => args.push(format!("-A{}", rng.gen_range(0..most))),
        1 => args.push(format!("-B{}", rng.gen_range(0..most))),
        2 => args.push(format!("-C{}", rng.gen_range(0..most))),
        3 => {
            args.push(format!("-A{}", rng.gen_range(0..most)));
            args.push(format!("-B{}", rng.gen_range(0..most)));
        }
        _ => {}
    }
    match rng.gen_range(0..4) {
        0 => {
            let file = format!("patterns-{case}");
            let mut text = patterns.join("\n");
            if rng.gen_bool(0.5) {
                text.push('\n');
            }
            let path = dir.join(&file);
            std::fs::write(&path, text).expect("write the pattern file");
            args.push("-f".into());
            args.push(path.display().to_string());
        }
        1 => {
            for p in patterns {
                args.push("-e".into());
                args.push(p);
            }
        }
        _ => args.push(patterns.swap_remove(0)),
    }
    args
}

/// Random command lines over random text: one file, or three named on the
/// command line or through a prefix (either way they are named in the
/// output).
#[test]
fn random_flags_print_what_gnu_grep_prints() {
    require_gnu_grep();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = StdRng::seed_from_u64(0x6772_6570_0019);
    for case in 0..1500 {
        // A bucket per case, so a prefix names this case's files only.
        let bucket = format!("b{case}");
        std::fs::create_dir_all(dir.path().join(&bucket)).expect("mkdir");
        let n_files = if case % 3 == 0 { 3 } else { 1 };
        let nul = case % 20 == 7;
        let files: Vec<(String, Vec<u8>)> = (0..n_files)
            .map(|i| {
                let lines = if rng.gen_bool(0.1) {
                    rng.gen_range(40..300)
                } else {
                    rng.gen_range(0..40)
                };
                (format!("{bucket}/f{i}"), random_text(&mut rng, lines, nul))
            })
            .collect();
        for (name, text) in &files {
            std::fs::write(dir.path().join(name), text).expect("write a file");
        }
        let flags = random_args(&mut rng, dir.path(), case);
        let mut gnu_args = flags.clone();
        gnu_args.extend(files.iter().map(|(name, _)| name.clone()));
        let mut our_args = flags.clone();
        if n_files > 1 && rng.gen_bool(0.5) {
            our_args.push(format!("{bucket}/*"));
        } else {
            our_args.extend(files.iter().map(|(name, _)| name.clone()));
        }
        let want = theirs(dir.path(), &gnu_args);
        let got = ours(&our_args, &files, &mut rng);
        assert!(
            got == want,
            "case {case} in {}: grep {gnu_args:?}\n--- GNU grep (status {}):\n{}\n--- quarry grep {our_args:?} (status {}):\n{}\n--- text:\n{}",
            dir.path().display(),
            want.1,
            String::from_utf8_lossy(&want.0),
            got.1,
            String::from_utf8_lossy(&got.0),
            files
                .iter()
                .map(|(n, t)| format!("{n}:\n{}", String::from_utf8_lossy(t)))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Patterns that select every line (`''`, `^`, `x*$`: the kernel takes
/// whole blocks of lines with no search) with the flags that cut, number
/// or surround those blocks, on random text with and without NULs and
/// with and without a last newline: what GNU grep prints.
#[test]
fn every_line_patterns_print_what_gnu_grep_prints() {
    require_gnu_grep();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("e")).expect("mkdir");
    let mut rng = StdRng::seed_from_u64(0x6772_6570_0020);
    let flag_sets: &[&[&str]] = &[
        &[],
        &["-n"],
        &["-b"],
        &["-c"],
        &["-m", "5", "-A", "3"],
        &["-m", "5", "-A", "3", "-n"],
        &["-m", "1", "-B", "2"],
        &["-C", "1", "-n"],
        &["-v"],
        &["-x"],
        &["-w"],
        &["-o"],
        &["-H", "-n", "-b"],
    ];
    for case in 0..60 {
        let nul = case % 4 == 3;
        // Some texts pass GNU grep's 96 KiB pieces, so drains take lines.
        let lines = if case % 10 == 9 {
            rng.gen_range(8000..12000)
        } else {
            rng.gen_range(0..120)
        };
        let mut text = random_text(&mut rng, lines, nul);
        if case % 2 == 1 && text.last() == Some(&b'\n') {
            text.pop();
        }
        let name = format!("e/f{case}");
        std::fs::write(dir.path().join(&name), &text).expect("write a file");
        for pattern in ["", "^", "x*$"] {
            for flags in flag_sets {
                let mut args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
                args.extend(["-E".to_string(), "-e".to_string(), pattern.to_string()]);
                args.push(name.clone());
                let want = theirs(dir.path(), &args);
                let got = ours(&args, &[(name.clone(), text.clone())], &mut rng);
                let request = request(&args);
                if !request.nothing_selected {
                    let kernel = compile(&KernelSpec::Grep(request.spec.clone())).expect("compile");
                    let mut cuts: Vec<usize> = (0..rng.gen_range(1..12))
                        .map(|_| rng.gen_range(0..=text.len()))
                        .collect();
                    cuts.sort_unstable();
                    let output = TargetOutput {
                        target: name.clone(),
                        size_bytes: text.len() as u64,
                        output: run_drained(&*kernel, &text, &cuts),
                    };
                    let drained = format_grep(&[output], &request.format).stdout;
                    assert!(
                        drained == want.0,
                        "drained, cut at {cuts:?}: grep {args:?}\n--- GNU grep:\n{}\n--- quarry grep:\n{}",
                        String::from_utf8_lossy(&want.0),
                        String::from_utf8_lossy(&drained),
                    );
                }
                assert!(
                    got == want,
                    "grep {args:?}\n--- GNU grep (status {}):\n{}\n--- quarry grep (status {}):\n{}",
                    want.1,
                    String::from_utf8_lossy(&want.0),
                    got.1,
                    String::from_utf8_lossy(&got.0),
                );
            }
        }
    }
}
