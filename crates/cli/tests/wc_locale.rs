//! `quarry wc` counts words as GNU wc does in the locale both run under
//! (C, or UTF-8 where Unicode spaces such as U+00A0 and U+3000 separate
//! words too), on a real 4-node cluster (`quarry up`), with multibyte
//! characters cut by chunk and node boundaries everywhere.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `program` in `dir` with the locale variables `env` (and no others).
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env_remove("QUARRY_CLUSTER")
        .env_remove("LC_ALL")
        .env_remove("LC_CTYPE")
        .env_remove("LANG")
        .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("this test needs {program}: {e}"))
}

fn quarry(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    run(dir, env!("CARGO_BIN_EXE_quarry"), args, env)
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
        let _ = quarry(self.0, &["down"], &[]);
    }
}

/// Text of words in several scripts, ASCII and Unicode spaces, neutral
/// characters and invalid bytes, with a multibyte character cut at every
/// 4 KiB boundary (the chunk size of the `fixed` bucket), each cut at a
/// different byte of it.
fn mixed_text(len: usize, seed: u64) -> Vec<u8> {
    const PIECES: [&str; 16] = [
        "word",
        "\u{e9}t\u{e9}",
        "\u{65e5}\u{672c}\u{8a9e}",
        "\u{1f600}",
        " ",
        "\u{a0}",
        "\u{2003}",
        "\u{202f}",
        "\u{3000}",
        "\n",
        "\t",
        "a\u{a0}b",
        "\u{2028}",
        "\u{85}",
        "x\u{3000}y",
        "  ",
    ];
    const CUT: [&str; 6] = [
        "\u{a0}",
        "\u{3000}",
        "\u{202f}",
        "\u{1f600}",
        "\u{65e5}",
        "\u{2060}",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out: Vec<u8> = Vec::with_capacity(len + 64);
    let mut boundary = 4096;
    while out.len() < len {
        let r = next();
        let piece: &[u8] = match r % 40 {
            0 => b"\x80",
            1 => b"\xe3\x80",
            _ => PIECES[(r >> 8) as usize % PIECES.len()].as_bytes(),
        };
        out.extend_from_slice(piece);
        if out.len() + 4 >= boundary {
            // Place a character so that the boundary falls inside it.
            let c = CUT[(boundary / 4096) % CUT.len()].as_bytes();
            let into = 1 + (boundary / 4096) % (c.len() - 1);
            out.resize(boundary - into, b'z');
            out.extend_from_slice(c);
            boundary += 4096;
        }
    }
    out
}

#[test]
fn quarry_wc_counts_words_as_gnu_wc_in_the_same_locale() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = quarry(
        d,
        &["up", "--nodes", "4", "--device", "mem", "--detach"],
        &[],
    );
    let _down = Down(d);
    assert!(up.status.success(), "{}", text(&up));
    for (bucket, chunking) in [("txt", "fixed:4K"), ("cdc", "fastcdc:1K,2K,8K")] {
        let mb = quarry(d, &["mb", bucket, "--chunking", chunking], &[]);
        assert!(mb.status.success(), "{}", text(&mb));
        std::fs::create_dir_all(d.join(bucket)).unwrap();
    }
    let mut files = Vec::new();
    for (i, len) in [200_000, 40_000, 4_097, 3].into_iter().enumerate() {
        let data = mixed_text(len, i as u64 + 7);
        for bucket in ["txt", "cdc"] {
            let path = format!("{bucket}/m{i}.txt");
            std::fs::write(d.join(&path), &data).unwrap();
            let put = quarry(d, &["put", &path, &path], &[]);
            assert!(put.status.success(), "{}", text(&put));
            files.push(path);
        }
    }
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    let utf8_probe = run(
        d,
        "sh",
        &["-c", "printf 'a\\302\\240b' | wc -w"],
        &[("LC_ALL", "C.UTF-8")],
    );
    assert_eq!(
        String::from_utf8_lossy(&utf8_probe.stdout).trim(),
        "2",
        "this test needs GNU wc and the C.UTF-8 locale (see `locale -a`)"
    );
    // LC_ALL, then LC_CTYPE, then LANG; a locale not installed is C.
    let locales: [&[(&str, &str)]; 6] = [
        &[("LC_ALL", "C")],
        &[("LC_ALL", "C.UTF-8")],
        &[("LANG", "C.UTF-8")],
        &[("LANG", "C.UTF-8"), ("LC_CTYPE", "C")],
        &[("LANG", "C"), ("LC_CTYPE", "C.utf8"), ("LC_ALL", "")],
        &[("LC_ALL", "xx_NO.UTF-8")],
    ];
    let mut differ = 0;
    for env in locales {
        for flags in [vec!["-w"], vec![], vec!["-l", "-w"]] {
            let mut args = flags.clone();
            args.extend(&files);
            let gnu = run(d, "wc", &args, env);
            assert!(gnu.status.success(), "wc {args:?}: {}", text(&gnu));
            let mut ours_args = vec!["wc"];
            ours_args.extend(&args);
            let ours = quarry(d, &ours_args, env);
            assert_eq!(
                String::from_utf8_lossy(&ours.stdout),
                String::from_utf8_lossy(&gnu.stdout),
                "quarry {ours_args:?} under {env:?}: {}",
                String::from_utf8_lossy(&ours.stderr)
            );
        }
        let c = run(d, "wc", &["-w", files[0]], &[("LC_ALL", "C")]);
        let here = run(d, "wc", &["-w", files[0]], env);
        differ += usize::from(c.stdout != here.stdout);
    }
    // The text tells the locales apart: three of them count as UTF-8.
    assert_eq!(differ, 3);
}
