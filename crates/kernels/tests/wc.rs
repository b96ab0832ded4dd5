//! The wc kernel: split invariance, the same counts as GNU wc with
//! `LC_ALL=C`, and the word counter and histogram against a model of wc's
//! word rule (itself checked against wc).

mod common;

use std::collections::HashMap;
use std::io::Write;

use common::{random_block, random_cuts, random_text, run_split, run_whole, tool};
use quarry_kernels::{compile, KernelError, KernelSpec, Output, WcOutput, WcSpec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn wc(words: bool, word: Option<&[u8]>, top: Option<u32>) -> KernelSpec {
    KernelSpec::Wc(WcSpec {
        words,
        word: word.map(<[u8]>::to_vec),
        top,
    })
}

fn wc_out(o: Output) -> WcOutput {
    match o {
        Output::Wc(w) => w,
        other => panic!("not a wc output: {other:?}"),
    }
}

/// wc's words, as the model: runs between `\t \n \v \f \r` and space that
/// hold a byte in `!`..=`~`.
fn model_words(text: &[u8]) -> Vec<&[u8]> {
    text.split(|b| matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' '))
        .filter(|w| w.iter().any(|b| (0x21..=0x7e).contains(b)))
        .collect()
}

fn model(text: &[u8], word: &[u8], top: u32) -> WcOutput {
    let words = model_words(text);
    let mut hist: HashMap<&[u8], u64> = HashMap::new();
    for w in &words {
        *hist.entry(w).or_insert(0) += 1;
    }
    let mut all: Vec<(Vec<u8>, u64)> = hist.into_iter().map(|(w, n)| (w.to_vec(), n)).collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(top as usize);
    WcOutput {
        lines: text.iter().filter(|&&b| b == b'\n').count() as u64,
        words: words.len() as u64,
        bytes: text.len() as u64,
        word_count: Some(words.iter().filter(|w| **w == word).count() as u64),
        top: all,
    }
}

const VOCAB: &[&[u8]] = &[
    b"the",
    b"the",
    b"the",
    b"cat",
    b"cats",
    b"th",
    b"a",
    b"a",
    b"\0",
    b"a\0b",
    b"\x7f",
    b"\x80\xff",
    b"\xe9t\xe9",
    b"\x01x",
    b"\x0b",
    b"\x0c",
    b"\r",
    b"!",
    b"~",
    b"longwordlongwordlongword",
    b"-",
    b"the\x80",
];

#[test]
fn every_split_of_a_small_target_gives_the_whole_answer() {
    let text = b"the cat\tthe\n\ncats the\x80 \0 a\0b\x0bthe thethe\r\nthe";
    let mut rng = StdRng::seed_from_u64(3);
    for spec in [
        wc(false, None, None),
        wc(true, None, None),
        wc(true, Some(b"the"), Some(3)),
        wc(false, Some(b"the"), None),
    ] {
        let k = compile(&spec).unwrap();
        let want = run_whole(&*k, text);
        for a in 0..=text.len() {
            for b in a..=text.len() {
                for block in [1, 3, usize::MAX] {
                    assert_eq!(
                        run_split(&*k, text, &[a, b], block, &mut rng),
                        want,
                        "{spec:?} split {a} {b}"
                    );
                }
            }
        }
    }
    let got = wc_out(run_whole(
        &*compile(&wc(true, Some(b"the"), Some(3))).unwrap(),
        text,
    ));
    assert_eq!(got, model(text, b"the", 3));
}

#[test]
fn counts_match_gnu_wc_and_the_model() {
    let mut rng = StdRng::seed_from_u64(0x7763);
    for round in 0..12 {
        let n = rng.gen_range(0..300);
        let text = random_text(&mut rng, VOCAB, n);
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&text).unwrap();
        file.flush().unwrap();
        let word: &[u8] = [b"the".as_slice(), b"a\0b", b"\x80\xffthe"][round % 3];
        let top = rng.gen_range(0..6);
        let k = compile(&wc(true, Some(word), Some(top))).unwrap();
        let whole = wc_out(run_whole(&*k, &text));
        assert_eq!(whole, model(&text, word, top), "round {round}");
        for _ in 0..20 {
            let cuts = random_cuts(&mut rng, text.len());
            let block = random_block(&mut rng);
            assert_eq!(
                wc_out(run_split(&*k, &text, &cuts, block, &mut rng)),
                whole,
                "cuts {cuts:?} block {block}"
            );
        }
        // Counting lines and bytes only gives the same lines and bytes.
        let plain = wc_out(run_whole(&*compile(&wc(false, None, None)).unwrap(), &text));
        assert_eq!(
            (plain.lines, plain.words, plain.bytes),
            (whole.lines, 0, whole.bytes)
        );
        let path = file.path().display().to_string();
        for (flag, n) in [
            ("-l", whole.lines),
            ("-w", whole.words),
            ("-c", whole.bytes),
        ] {
            let Some(gnu) = tool("wc", &[flag], file.path()) else {
                return;
            };
            assert_eq!(
                String::from_utf8_lossy(&gnu),
                format!("{n} {path}\n"),
                "wc {flag}, round {round}"
            );
        }
    }
}

#[test]
fn the_word_rule_is_gnu_wc_s_on_every_byte() {
    // Each byte alone, and between two letters: which separate, which make
    // a word, which do neither.
    let mut rng = StdRng::seed_from_u64(9);
    let k = compile(&wc(true, None, None)).unwrap();
    let mut soup = Vec::new();
    for b in 0..=255u8 {
        soup.extend_from_slice(&[b' ', b, b' ', b'a', b, b'b', b' ']);
    }
    for _ in 0..2000 {
        let b = [
            0u8, 1, 0x7f, 0x80, 0xff, 0x0b, 0x0c, b'\r', b'\t', b' ', b'\n', b'a', b'!', b'~',
        ][rng.gen_range(0..14)];
        soup.push(b);
    }
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&soup).unwrap();
    file.flush().unwrap();
    let got = wc_out(run_whole(&*k, &soup));
    assert_eq!(got.words, model_words(&soup).len() as u64);
    if let Some(gnu) = tool("wc", &["-w"], file.path()) {
        assert_eq!(
            String::from_utf8_lossy(&gnu),
            format!("{} {}\n", got.words, file.path().display())
        );
    }
}

#[test]
fn bad_words_are_refused_with_a_reason() {
    for (word, why) in [
        (&b""[..], "empty"),
        (b"two words", "separator"),
        (b"line\n", "separator"),
        (b"\0\x80", "printable"),
    ] {
        match compile(&wc(false, Some(word), None)) {
            Err(KernelError::BadArguments(msg)) => assert!(msg.contains(why), "{word:?}: {msg}"),
            Err(e) => panic!("{word:?}: wrong error {e}"),
            Ok(_) => panic!("{word:?} was accepted"),
        }
    }
}
