//! The checksum kernel: CRC-32C and SHA-256 through any split of the
//! target folded in order, against the crates' one-shot functions and
//! `sha256sum`.

mod common;

use std::io::Write;

use common::{random_block, random_cuts, run_chain, run_whole, tool};
use quarry_kernels::{compile, ChecksumOutput, KernelError, KernelSpec, Output};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

fn want(data: &[u8]) -> Output {
    Output::Checksum(ChecksumOutput {
        bytes: data.len() as u64,
        crc32c: crc32c::crc32c(data),
        sha256: Sha256::digest(data).into(),
    })
}

#[test]
fn every_split_folded_in_order_gives_the_whole_answer() {
    let k = compile(&KernelSpec::Checksum).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    // Lengths around SHA-256's block and padding edges.
    for len in [
        0usize, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 70_000,
    ] {
        let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        assert_eq!(run_whole(&*k, &data), want(&data), "len {len}");
        for _ in 0..40 {
            let cuts = random_cuts(&mut rng, len);
            let block = random_block(&mut rng);
            assert_eq!(
                run_chain(&*k, &data, &cuts, block),
                want(&data),
                "len {len} cuts {cuts:?} block {block}"
            );
        }
    }
    let data: Vec<u8> = (0..150).map(|i| i as u8).collect();
    for a in 0..=data.len() {
        for b in (a..=data.len()).step_by(7) {
            assert_eq!(
                run_chain(&*k, &data, &[a, b], 13),
                want(&data),
                "split {a} {b}"
            );
        }
    }
}

#[test]
fn matches_sha256sum() {
    let k = compile(&KernelSpec::Checksum).unwrap();
    let mut rng = StdRng::seed_from_u64(8);
    let data: Vec<u8> = (0..100_003).map(|_| rng.gen()).collect();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&data).unwrap();
    file.flush().unwrap();
    let Some(out) = tool("sha256sum", &[], file.path()) else {
        return;
    };
    let hex = String::from_utf8_lossy(&out)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string();
    let Output::Checksum(got) = run_chain(&*k, &data, &[10, 4097, 65_536], 1000) else {
        panic!("not a checksum");
    };
    let got_hex: String = got.sha256.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(got_hex, hex);
}

#[test]
fn only_empty_parts_join() {
    let k = compile(&KernelSpec::Checksum).unwrap();
    assert!(!k.parallel());
    let left = k.fold(k.empty(0), b"hello ").unwrap();
    let right = k.fold(k.empty(6), b"world").unwrap();
    // An empty side joins either way.
    let same = k.combine(left.clone(), k.empty(6)).unwrap();
    assert_eq!(same, left);
    let whole = k
        .combine(k.empty(0), k.fold(k.empty(0), b"hello world").unwrap())
        .unwrap();
    assert_eq!(k.finish(whole).unwrap(), want(b"hello world"));
    assert!(matches!(
        k.combine(left.clone(), right),
        Err(KernelError::Unsupported(_))
    ));
    assert!(matches!(
        k.combine(left, k.empty(9)),
        Err(KernelError::Disjoint {
            left_end: 6,
            right_start: 9
        })
    ));
}
