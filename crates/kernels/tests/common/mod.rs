//! What the kernels' tests share: running a kernel over a split target, and
//! random text.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use quarry_kernels::{Output, Part, ScanKernel};
use rand::rngs::StdRng;
use rand::Rng;

/// Folds each range of `text` cut at `cuts` (ascending) in blocks of at most
/// `block` bytes, sends each part through postcard, and joins the parts in
/// order, left to right or right to left as `rng` picks.
pub fn run_split(
    k: &dyn ScanKernel,
    text: &[u8],
    cuts: &[usize],
    block: usize,
    rng: &mut StdRng,
) -> Output {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(text.len());
    let mut parts: Vec<Part> = Vec::new();
    for w in bounds.windows(2) {
        let mut p = k.empty(w[0] as u64);
        for chunk in text[w[0]..w[1]].chunks(block.max(1)) {
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

/// As the entry node joins a target's parts: left to right, taking the
/// final lines of the joined prefix after every join
/// ([`ScanKernel::drain`]); the answer is what `finish` gives with the
/// taken lines before its own.
pub fn run_drained(k: &dyn ScanKernel, text: &[u8], cuts: &[usize], block: usize) -> Output {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(text.len());
    let mut taken = Vec::new();
    let mut prefix: Option<Part> = None;
    for w in bounds.windows(2) {
        let mut p = k.empty(w[0] as u64);
        for chunk in text[w[0]..w[1]].chunks(block.max(1)) {
            p = k.fold(p, chunk).expect("fold");
        }
        let mut joined = match prefix.take() {
            None => p,
            Some(left) => k.combine(left, p).expect("combine"),
        };
        taken.extend(k.drain(&mut joined).expect("drain"));
        prefix = Some(roundtrip(&joined));
    }
    let whole = prefix.expect("one part");
    let mut out = k.finish(whole).expect("finish");
    if let Output::Grep(g) = &mut out {
        taken.append(&mut g.lines);
        g.lines = taken;
    } else {
        assert!(taken.is_empty(), "only grep drains lines");
    }
    out
}

/// The part after a trip through postcard, checked equal to what went in.
pub fn roundtrip(p: &Part) -> Part {
    let wire = postcard::to_stdvec(p).expect("serialize");
    let back: Part = postcard::from_bytes(&wire).expect("deserialize");
    assert_eq!(&back, p);
    assert!(p.size_bytes() > 0);
    back
}

/// The whole target folded at once.
pub fn run_whole(k: &dyn ScanKernel, text: &[u8]) -> Output {
    let p = k.fold(k.empty(0), text).expect("fold");
    k.finish(p).expect("finish")
}

/// Up to three random cuts (so one to four ranges), often close together
/// so tiny and empty ranges come up.
pub fn random_cuts(rng: &mut StdRng, len: usize) -> Vec<usize> {
    let n = rng.gen_range(0..=3);
    let mut cuts: Vec<usize> = (0..n)
        .map(|_| {
            if rng.gen_bool(0.3) && len > 0 {
                let base = rng.gen_range(0..=len);
                (base + rng.gen_range(0..3)).min(len)
            } else {
                rng.gen_range(0..=len)
            }
        })
        .collect();
    cuts.sort_unstable();
    cuts
}

/// A random block size for fold: often tiny, sometimes everything.
pub fn random_block(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..4) {
        0 => rng.gen_range(1..4),
        1 => rng.gen_range(1..64),
        2 => rng.gen_range(64..4096),
        _ => usize::MAX,
    }
}

/// Random text from `vocab`: words joined by spaces, tabs and odd bytes,
/// lines of random length (empty and long ones), sometimes no final
/// newline.
pub fn random_text(rng: &mut StdRng, vocab: &[&[u8]], lines: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..lines {
        let words = match rng.gen_range(0..10) {
            0 => 0,
            1 => rng.gen_range(40..200),
            _ => rng.gen_range(1..12),
        };
        for w in 0..words {
            if w > 0 || rng.gen_bool(0.1) {
                let sep: &[u8] = match rng.gen_range(0..12) {
                    0 => b"\t",
                    1 => b"  ",
                    2 => b" \r",
                    3 => b"",
                    _ => b" ",
                };
                out.extend_from_slice(sep);
            }
            out.extend_from_slice(vocab[rng.gen_range(0..vocab.len())]);
        }
        out.push(b'\n');
    }
    if rng.gen_bool(0.4) {
        out.pop();
    }
    out
}

/// Runs a tool with `LC_ALL=C`. The test fails where the tool is missing
/// (GNU's build, but for ripgrep); `None` only where a developer opted out
/// locally (quarry_testkit).
pub fn tool(name: &str, args: &[&str], file: &Path) -> Option<Vec<u8>> {
    let present = if name == "rg" {
        quarry_testkit::require_tool(name)
    } else {
        quarry_testkit::require_gnu_tool(name)
    };
    if !present {
        return None;
    }
    let out = Command::new(name)
        .args(args)
        .arg(file)
        .env("LC_ALL", "C")
        .output()
        .unwrap_or_else(|e| panic!("{name} {args:?} cannot run: {e}"));
    // grep exits 1 when nothing matched, which is an answer too.
    if out.status.code().is_none_or(|c| c > 1) {
        panic!(
            "{name} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(out.stdout)
}

/// As the engine runs a kernel that is not parallel: each range folded, in
/// order, into the state the previous range ended with, which crosses the
/// network (postcard) between ranges.
pub fn run_chain(k: &dyn ScanKernel, text: &[u8], cuts: &[usize], block: usize) -> Output {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(text.len());
    let mut p = k.empty(0);
    for w in bounds.windows(2) {
        for chunk in text[w[0]..w[1]].chunks(block.max(1)) {
            p = k.fold(p, chunk).expect("fold");
        }
        p = roundtrip(&p);
    }
    k.finish(p).expect("finish")
}
