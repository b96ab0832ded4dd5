//! `quarry grep`, `quarry wc`, `quarry run`, `quarry jobs` and
//! `quarry cancel` against a real 4-node cluster (`quarry up`): on
//! randomized text cut into small chunks, so that words and lines cross
//! chunk and node boundaries everywhere, their output equals GNU grep's,
//! wc's and ripgrep's on the same bytes in local files.

use std::path::Path;
use std::process::{Command, Output};

fn quarry(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quarry"))
        .args(args)
        .current_dir(dir)
        .env_remove("QUARRY_CLUSTER")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run quarry")
}

/// Runs a local tool in `dir`. The test fails where the tool is missing
/// (GNU's build, but for ripgrep); `None` only where a developer opted out
/// locally (quarry_testkit).
fn tool(dir: &Path, program: &str, args: &[&str]) -> Option<Output> {
    let present = if program == "rg" {
        quarry_testkit::require_tool(program)
    } else {
        quarry_testkit::require_gnu_tool(program)
    };
    if !present {
        return None;
    }
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("LC_ALL", "C")
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?} cannot run: {e}"));
    Some(output)
}

/// `quarry PROGRAM FLAGS... TARGETS...` and the local `PROGRAM FLAGS...
/// TARGETS...` on the same names (objects there, files here); `None` only
/// where a developer opted out of a missing tool.
fn ours_and_theirs(
    d: &Path,
    program: &str,
    flags: &[&str],
    targets: &[&str],
) -> Option<(Output, Output)> {
    let theirs_args: Vec<&str> = flags.iter().chain(targets).copied().collect();
    let theirs = tool(d, program, &theirs_args)?;
    let mut ours_args = vec![program];
    ours_args.extend(&theirs_args);
    Some((quarry(d, &ours_args), theirs))
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

struct Down<'a>(&'a Path);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = quarry(self.0, &["down"]);
    }
}

/// Random text: words from a small vocabulary (the searched ones among
/// them), runs of spaces and tabs, empty lines, lines longer than a chunk,
/// sometimes no final newline.
fn random_text(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "would",
        "could",
        "flash",
        "storage",
        "Would",
        "wouldn't",
        "a",
        "node",
        "kernel",
        "x",
        "near-data",
        "WOULD",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        let r = next();
        match r % 20 {
            0 => out.push(b'\n'),
            1 => out.extend_from_slice(b"\n\n"),
            2 => out.extend_from_slice(b" \t "),
            3 => {
                // A long line with no newline for several kilobytes.
                for _ in 0..(r >> 8) % 900 {
                    out.extend_from_slice(WORDS[(next() % 12) as usize].as_bytes());
                    out.push(b' ');
                }
            }
            _ => {
                out.extend_from_slice(WORDS[(r >> 8) as usize % 12].as_bytes());
                out.push(if r % 7 == 0 { b'\n' } else { b' ' });
            }
        }
    }
    out.truncate(len);
    if seed.is_multiple_of(2) {
        out.push(b'\n');
    }
    out
}

#[test]
fn grep_and_wc_near_the_data_print_what_gnu_grep_and_wc_print() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(d, &["up", "--nodes", "4", "--device", "mem", "--detach"]);
    let _down = Down(d);
    assert!(up.status.success(), "{}", text(&up));
    for (bucket, chunking) in [("txt", "fixed:4K"), ("cdc", "fastcdc:1K,2K,8K")] {
        let mb = quarry(d, &["mb", bucket, "--chunking", chunking]);
        assert!(mb.status.success(), "{}", text(&mb));
        std::fs::create_dir_all(d.join(bucket)).unwrap();
    }
    let names = ["a.txt", "b.txt", "c.txt", "d.txt"];
    for (i, (name, len)) in names.iter().zip([150_000, 61_000, 9_999, 1]).enumerate() {
        let data = random_text(len, i as u64 + 1);
        for bucket in ["txt", "cdc"] {
            let path = format!("{bucket}/{name}");
            std::fs::write(d.join(&path), &data).unwrap();
            let put = quarry(d, &["put", &path, &path]);
            assert!(put.status.success(), "{}", text(&put));
        }
    }
    for bucket in ["txt", "cdc"] {
        let files: Vec<String> = names.iter().map(|n| format!("{bucket}/{n}")).collect();
        let files: Vec<&str> = files.iter().map(String::as_str).collect();
        let prefix = format!("{bucket}/*");
        for flags in [
            vec!["-c", "would"],
            vec!["-n", "would"],
            vec!["-b", "-i", "would"],
            vec!["-c", "-E", "wo(u|r)ld[a-z']* +(flash|node)"],
            vec!["-n", "^x"],
            vec!["-c", "^$"],
            vec!["-n", "-F", "near-data"],
            vec!["-c", "kernel\\( x\\)\\{2\\}"],
        ] {
            // Every file named, and the same through a prefix.
            let mut args: Vec<&str> = vec!["grep"];
            args.extend(&flags);
            let mut gnu_args: Vec<&str> = flags.clone();
            gnu_args.extend(&files);
            let Some(gnu) = tool(d, "grep", &gnu_args) else {
                return;
            };
            let mut ours_args = args.clone();
            ours_args.push(&prefix);
            let ours = quarry(d, &ours_args);
            assert_eq!(
                String::from_utf8_lossy(&ours.stdout),
                String::from_utf8_lossy(&gnu.stdout),
                "quarry {ours_args:?} vs grep {gnu_args:?}: {}",
                String::from_utf8_lossy(&ours.stderr)
            );
            assert_eq!(ours.status.code(), gnu.status.code(), "{ours_args:?}");
            // One file: no names.
            let mut one = args.clone();
            one.push(files[0]);
            let ours = quarry(d, &one);
            let mut gnu_one = flags.clone();
            gnu_one.push(files[0]);
            let gnu = tool(d, "grep", &gnu_one).unwrap();
            assert_eq!(ours.stdout, gnu.stdout, "{one:?}");
        }
        // ripgrep agrees on counts of literal patterns.
        if let Some(rg) = tool(d, "rg", &["-c", "-F", "would", files[0]]) {
            let ours = quarry(d, &["grep", "-c", "-F", "would", files[0]]);
            assert_eq!(ours.stdout, rg.stdout);
        }
        for flags in [vec![], vec!["-l"], vec!["-w"], vec!["-c"], vec!["-l", "-c"]] {
            let Some((ours, gnu)) = ours_and_theirs(d, "wc", &flags, &files) else {
                return;
            };
            assert_eq!(
                String::from_utf8_lossy(&ours.stdout),
                String::from_utf8_lossy(&gnu.stdout),
                "quarry wc {flags:?}: {}",
                String::from_utf8_lossy(&ours.stderr)
            );
            // And one file.
            let mut ours_one = vec!["wc"];
            ours_one.extend(&flags);
            ours_one.push(files[1]);
            let mut gnu_one = flags.clone();
            gnu_one.push(files[1]);
            assert_eq!(
                quarry(d, &ours_one).stdout,
                tool(d, "wc", &gnu_one).unwrap().stdout,
                "{ours_one:?}"
            );
        }
        // One word, as BlueDBM's accelerator counts it: the whitespace
        // separated words equal to it.
        let ours = quarry(d, &["wc", "--word", "would", files[0]]);
        let local = std::fs::read(d.join(files[0])).unwrap();
        let want = local
            .split(|b| b" \t\n\r\x0b\x0c".contains(b))
            .filter(|w| *w == b"would")
            .count();
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            format!("{want} would {}\n", files[0])
        );
        // A histogram's top entries agree with counting locally.
        let top = quarry(d, &["wc", "--top", "3", "--json", files[0]]);
        let v: serde_json::Value = serde_json::from_slice(&top.stdout).expect("wc json");
        let mut counts = std::collections::BTreeMap::<&[u8], u64>::new();
        for w in local
            .split(|b| b" \t\n\r\x0b\x0c".contains(b))
            .filter(|w| !w.is_empty())
        {
            *counts.entry(w).or_default() += 1;
        }
        let mut ranked: Vec<(&[u8], u64)> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let got = &v["results"][0]["output"]["top"];
        for (i, (word, n)) in ranked.iter().take(3).enumerate() {
            assert_eq!(got[i][0], String::from_utf8_lossy(word).as_ref());
            assert_eq!(got[i][1], *n);
        }
        // Bytes scanned and sent.
        assert_eq!(v["bytes_scanned"], 150_000);
        assert!(v["bytes_sent_to_client"].as_u64().unwrap() > 0);
    }

    // Binary data (a NUL byte), as GNU grep prints it: lines before the
    // 96 KiB piece holding the first NUL, then "binary file matches" on
    // standard error instead of the rest.
    let lines = |from: usize, to: usize| -> Vec<u8> {
        (from..to)
            .flat_map(|i| format!("would line {i}\n").into_bytes())
            .collect()
    };
    let mut late = lines(0, 9000);
    late.extend_from_slice(b"x\0y would\n");
    late.extend(lines(9000, 12_000));
    // A line holding NULs counts as its matching pieces (here two).
    let mut early = b"ELF\0\x01\x02 would\nwould\0would\n".to_vec();
    early.extend(lines(0, 100));
    let mut clean_then_late = lines(0, 20_000);
    clean_then_late.extend_from_slice(b"tail\0");
    for (name, data) in [
        ("late.bin", late),
        ("early.bin", early),
        ("end.bin", clean_then_late),
    ] {
        let path = format!("txt/{name}");
        std::fs::write(d.join(&path), &data).unwrap();
        let put = quarry(d, &["put", &path, &path]);
        assert!(put.status.success(), "{}", text(&put));
        for flags in [vec!["-n", "would"], vec!["-c", "would"], vec!["zebra"]] {
            let Some((ours, gnu)) = ours_and_theirs(d, "grep", &flags, &[&path]) else {
                return;
            };
            assert!(
                ours.stdout == gnu.stdout,
                "quarry grep {flags:?} {path}: {} bytes out, grep {} bytes",
                ours.stdout.len(),
                gnu.stdout.len()
            );
            assert_eq!(ours.status.code(), gnu.status.code(), "{flags:?} {path}");
            let said =
                |o: &Output| String::from_utf8_lossy(&o.stderr).contains("binary file matches");
            assert_eq!(said(&ours), said(&gnu), "{flags:?} {path}: {}", text(&ours));
        }
    }

    // Nothing matched: grep's exit status 1, no output.
    let none = quarry(d, &["grep", "zebra", "txt/a.txt"]);
    assert_eq!(none.status.code(), Some(1), "{}", text(&none));
    assert!(none.stdout.is_empty());
    // A bad pattern or a missing object: a clear error.
    let bad = quarry(d, &["grep", "-E", "(unclosed", "txt/a.txt"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("bad kernel arguments"),
        "{}",
        text(&bad)
    );
    let missing = quarry(d, &["wc", "txt/nope.txt"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("txt/nope.txt"),
        "{}",
        text(&missing)
    );

    // Checksums equal sha256sum's.
    let sum = quarry(d, &["run", "checksum", "txt/a.txt"]);
    let v: serde_json::Value = serde_json::from_slice(&sum.stdout).expect("checksum json");
    if let Some(gnu) = tool(d, "sha256sum", &["txt/a.txt"]) {
        let hex = String::from_utf8_lossy(&gnu.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        assert_eq!(v["results"][0]["output"]["sha256"], hex);
    }

    // Detached commands show in jobs; cancelling a finished one leaves it
    // done.
    let detached = quarry(d, &["run", "--detach", "wordcount", "would", "txt/*"]);
    assert!(detached.status.success(), "{}", text(&detached));
    let id = String::from_utf8_lossy(&detached.stdout).trim().to_string();
    // Wait (at most 10 s) for this command, not any other, to be done.
    let mut job = serde_json::Value::Null;
    for _ in 0..100 {
        let jobs = quarry(d, &["jobs", "--json"]);
        let listed: serde_json::Value = serde_json::from_slice(&jobs.stdout).expect("jobs json");
        job = listed
            .as_array()
            .expect("a list of commands")
            .iter()
            .find(|j| j["id"].as_u64().map(|n| n.to_string()) == Some(id.clone()))
            .cloned()
            .expect("the detached command is listed");
        if job["state"] == "done" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(job["kernel"], "wc");
    assert_eq!(job["state"], "done");
    let cancel = quarry(d, &["cancel", &id]);
    assert_eq!(
        String::from_utf8_lossy(&cancel.stdout).trim(),
        format!("{id} done")
    );
}

/// Text whose chunk boundaries (every `chunk` bytes) fall inside a match
/// of "needle", at a line's end, inside a context window (a match a line or
/// two away) or between groups, in turn; lines of a few words, matches
/// every few lines.
fn text_cut_at_matches(len: usize, chunk: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 9] = [
        "needle", "hay", "stack", "Needle", "needles", "a", "x", "NEEDLE", "haystack",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        for w in 0..next() % 6 {
            if w > 0 {
                out.push(b' ');
            }
            // Mostly hay, so groups of context stand apart.
            let r = next();
            let word = if r % 5 == 0 {
                WORDS[(r >> 8) as usize % 9]
            } else {
                "hay"
            };
            out.extend_from_slice(word.as_bytes());
        }
        out.push(b'\n');
    }
    out.truncate(len);
    let mut at = chunk;
    let mut turn = 0;
    while at + 8 < out.len() {
        match turn % 4 {
            0 => out[at - 3..at + 3].copy_from_slice(b"needle"),
            1 => out[at - 1] = b'\n',
            2 => out[at - 40..at - 33].copy_from_slice(b"\nneedle"),
            _ => {}
        }
        turn += 1;
        at += chunk;
    }
    out
}

/// The flags GNU grep users type every day, over objects cut into 512-byte
/// chunks spread over four nodes, print what GNU grep prints on the same
/// bytes: standard output and exit status, byte for byte.
#[test]
fn grep_flags_near_the_data_print_what_gnu_grep_prints() {
    let version = tool(Path::new("."), "grep", &["--version"])
        .expect("this test compares with GNU grep, which must be installed");
    assert!(
        String::from_utf8_lossy(&version.stdout).contains("GNU grep"),
        "this test compares with GNU grep; grep --version says {}",
        text(&version)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(d, &["up", "--nodes", "4", "--device", "mem", "--detach"]);
    let _down = Down(d);
    assert!(up.status.success(), "{}", text(&up));
    let mb = quarry(d, &["mb", "g", "--chunking", "fixed:512"]);
    assert!(mb.status.success(), "{}", text(&mb));
    std::fs::create_dir_all(d.join("g")).unwrap();
    let mut names = Vec::new();
    for (i, len) in [60_000usize, 20_011, 3_000].into_iter().enumerate() {
        names.push(format!("g/t{i}.txt"));
        std::fs::write(
            d.join(&names[i]),
            text_cut_at_matches(len, 512, i as u64 + 7),
        )
        .unwrap();
    }
    names.push("g/hay.txt".into());
    std::fs::write(d.join("g/hay.txt"), "hay\nhaystack\n".repeat(300)).unwrap();
    // Binary data: a match whose context runs into the 96 KiB piece that
    // holds the first NUL, where GNU grep stops printing.
    let mut binary = Vec::new();
    let mut n = 0;
    while binary.len() < 98_260 {
        binary.extend_from_slice(format!("hay line {n}\n").as_bytes());
        n += 1;
    }
    binary.extend_from_slice(b"needle here\nafter1\nafter2\nafter3\nafter4\nafter5\n");
    binary.extend_from_slice(&[b'y'; 80]);
    binary.extend_from_slice(b"\nx\0y\nafter6\nneedle again\n");
    names.push("g/late.bin".into());
    std::fs::write(d.join("g/late.bin"), binary).unwrap();
    for name in &names {
        let put = quarry(d, &["put", name, name]);
        assert!(put.status.success(), "{}", text(&put));
    }
    std::fs::write(d.join("patterns.txt"), "stack\nNEEDLE\n").unwrap();
    // In key order, as the prefix lists them.
    let mut files: Vec<&str> = names.iter().map(String::as_str).collect();
    files.sort_unstable();
    let flag_sets: [&[&str]; 21] = [
        &["-v", "-c", "needle"],
        &["-w", "-o", "needle"],
        &["-n", "-A2", "needle"],
        &["-C1", "-m3", "needle"],
        &["-l", "needle"],
        &["-L", "needle"],
        &["-e", "needle", "-e", "stack"],
        &["-n", "-f", "patterns.txt"],
        &["-x", "-i", "needle"],
        &["-o", "-b", "needle"],
        &["-n", "-B3", "-v", "hay"],
        &["-c", "-m5", "needle"],
        &["-nb", "-C2", "-w", "-E", "needles?"],
        &["-o", "-i", "-E", "ne+dle|stack"],
        &["-v", "-n", "-m4", "-A2", "-e", "hay"],
        &["-n", "-A1", "-B2", "-i", "-F", "NEEDLE"],
        &["-vx", "-c", "hay"],
        &["-b", "-A6", "needle"],
        &["-n", "-B2", "-o", "needle again"],
        &["-n", "-b", "-m1", "-A8", "needle"],
        &["-n", "-m1", "-A10", "needle"],
    ];
    for flags in flag_sets {
        // Each object alone, then all of them through the prefix.
        let mut runs: Vec<(Vec<&str>, Vec<&str>)> =
            files.iter().map(|f| (vec![*f], vec![*f])).collect();
        runs.push((vec!["g/*"], files.clone()));
        for (ours_targets, gnu_targets) in runs {
            let mut ours_args = vec!["grep"];
            ours_args.extend(flags);
            ours_args.extend(&ours_targets);
            let mut gnu_args: Vec<&str> = flags.to_vec();
            gnu_args.extend(&gnu_targets);
            let ours = quarry(d, &ours_args);
            let gnu = tool(d, "grep", &gnu_args).expect("GNU grep runs");
            assert!(
                ours.stdout == gnu.stdout,
                "quarry {ours_args:?} vs grep {gnu_args:?}:\n--- quarry ({} bytes):\n{}\n--- grep ({} bytes):\n{}",
                ours.stdout.len(),
                text(&ours),
                gnu.stdout.len(),
                String::from_utf8_lossy(&gnu.stdout)
            );
            assert_eq!(
                ours.status.code(),
                gnu.status.code(),
                "{ours_args:?}: {}",
                text(&ours)
            );
            let said =
                |o: &Output| String::from_utf8_lossy(&o.stderr).contains("binary file matches");
            assert_eq!(said(&ours), said(&gnu), "{ours_args:?}: {}", text(&ours));
        }
    }
}

/// `quarry grep ''` prints every line of an object many times larger than
/// the memory the command may hold at the entry node: the lines stream to
/// the client in order as the nodes produce them, in bounded pieces, and
/// the entry node never holds more than the bound (it reports its peak).
/// Also with `-n` and `-b` (numbers and offsets counted in blocks of lines
/// that crossed chunk and node boundaries), with `-C2` around matches
/// whose context crosses them, and with `-m` ending a block among its
/// lines. Output equals GNU grep's, byte for byte, and `grep ''` the
/// object's bytes (a newline after its unterminated last line).
#[test]
fn grep_of_every_line_streams_with_bounded_memory() {
    let version = tool(Path::new("."), "grep", &["--version"])
        .expect("this test compares with GNU grep, which must be installed");
    assert!(
        String::from_utf8_lossy(&version.stdout).contains("GNU grep"),
        "this test compares with GNU grep; grep --version says {}",
        text(&version)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(d, &["up", "--nodes", "4", "--device", "mem", "--detach"]);
    let _down = Down(d);
    assert!(up.status.success(), "{}", text(&up));
    let mb = quarry(d, &["mb", "s", "--chunking", "fixed:64K"]);
    assert!(mb.status.success(), "{}", text(&mb));
    std::fs::create_dir_all(d.join("s")).unwrap();
    let bound_bytes: u64 = 1 << 20;
    let mut data = Vec::new();
    let mut n = 0u64;
    while data.len() < 8 << 20 {
        let line = match n % 97 {
            0 => format!("needle {n}\n"),
            1 => "\n".to_string(),
            _ => format!("line {n} of hay, {}\n", "x".repeat((n % 61) as usize)),
        };
        data.extend_from_slice(line.as_bytes());
        n += 1;
    }
    // A last line without a newline: grep prints it with one.
    data.extend_from_slice(b"the last line, with no newline");
    assert!(data.len() as u64 > 8 * bound_bytes);
    std::fs::write(d.join("s/big.txt"), &data).unwrap();
    let put = quarry(d, &["put", "s/big.txt", "s/big.txt"]);
    assert!(put.status.success(), "{}", text(&put));
    let bound = bound_bytes.to_string();
    let flag_sets: [&[&str]; 6] = [
        &[""],
        &["-n", ""],
        &["-C2", "needle"],
        &["-n", "-C2", ""],
        &["-b", "^"],
        &["-m", "70000", "-A3", ""],
    ];
    for flags in flag_sets {
        let mut ours_args = vec!["grep", "--memory-limit", &bound];
        ours_args.extend(flags);
        ours_args.push("s/big.txt");
        let mut gnu_args: Vec<&str> = flags.to_vec();
        gnu_args.push("s/big.txt");
        let ours = quarry(d, &ours_args);
        let gnu = tool(d, "grep", &gnu_args).expect("GNU grep runs");
        assert!(
            ours.status.success(),
            "{ours_args:?}: {}",
            String::from_utf8_lossy(&ours.stderr)
        );
        assert!(
            ours.stdout == gnu.stdout,
            "quarry {ours_args:?} printed {} bytes, grep {gnu_args:?} {} bytes",
            ours.stdout.len(),
            gnu.stdout.len()
        );
        if flags == [""] {
            let mut object = data.clone();
            object.push(b'\n');
            assert!(ours.stdout == object, "grep '' prints the object");
        }
    }
    let jobs = quarry(d, &["jobs", "--json"]);
    assert!(jobs.status.success(), "{}", text(&jobs));
    let list: serde_json::Value = serde_json::from_slice(&jobs.stdout).expect("jobs JSON");
    let greps: Vec<&serde_json::Value> = list
        .as_array()
        .expect("a list of commands")
        .iter()
        .filter(|j| j["kernel"] == "grep")
        .collect();
    assert_eq!(greps.len(), flag_sets.len(), "{list}");
    for job in greps {
        assert_eq!(job["state"], "done", "{job}");
        let peak = job["peak_memory_bytes"].as_u64().expect("a peak");
        assert!(peak > 0 && peak <= bound_bytes, "{job}");
    }
}
