//! The wc kernel: split invariance, the same counts as GNU wc with
//! `LC_ALL=C` and `LC_ALL=C.UTF-8`, and the word counter and histogram
//! against a model of wc's word rule (itself checked against wc).

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use common::{random_block, random_cuts, random_text, run_split, run_whole};
use quarry_kernels::{compile, KernelError, KernelSpec, Output, WcLocale, WcOutput, WcSpec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn wc(words: bool, word: Option<&[u8]>, top: Option<u32>) -> KernelSpec {
    wc_in(WcLocale::C, words, word, top)
}

fn wc_in(locale: WcLocale, words: bool, word: Option<&[u8]>, top: Option<u32>) -> KernelSpec {
    KernelSpec::Wc(WcSpec {
        words,
        word: word.map(<[u8]>::to_vec),
        top,
        locale,
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
            let gnu = gnu_wc(WcLocale::C, &[flag], &[file.path()]);
            assert_eq!(gnu, format!("{n} {path}\n"), "wc {flag}, round {round}");
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
    assert_eq!(
        gnu_wc(WcLocale::C, &["-w"], &[file.path()]),
        format!("{} {}\n", got.words, file.path().display())
    );
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

/// The locale GNU wc runs under to follow a kernel locale.
fn locale_name(locale: WcLocale) -> &'static str {
    match locale {
        WcLocale::C => "C",
        WcLocale::Utf8 => "C.UTF-8",
    }
}

/// GNU wc's standard output for `wc ARGS FILES...` under `LC_ALL` set to
/// `locale`. Fails the test when wc cannot run, or when C.UTF-8 is not
/// installed (wc would then count as in C, silently).
fn gnu_wc(locale: WcLocale, args: &[&str], files: &[&Path]) -> String {
    if locale == WcLocale::Utf8 {
        let probe = Command::new("sh")
            .args(["-c", "printf 'a\\302\\240b' | wc -w"])
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap_or_else(|e| panic!("this test needs sh and GNU wc (coreutils): {e}"));
        assert_eq!(
            String::from_utf8_lossy(&probe.stdout).trim(),
            "2",
            "this test needs the C.UTF-8 locale (see `locale -a`): without it GNU wc counts as in C"
        );
    }
    let out = Command::new("wc")
        .args(args)
        .args(files)
        .env("LC_ALL", locale_name(locale))
        .output()
        .unwrap_or_else(|e| panic!("this test needs GNU wc (coreutils): {e}"));
    assert!(
        out.status.success(),
        "wc {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The bytes UTF-8 would give `cp`; a surrogate gets the three bytes its
/// value would (invalid UTF-8).
fn utf8_bytes(cp: u32) -> Vec<u8> {
    match char::from_u32(cp) {
        Some(c) => c.to_string().into_bytes(),
        None => vec![
            0xe0 | (cp >> 12) as u8,
            0x80 | ((cp >> 6) & 0x3f) as u8,
            0x80 | (cp & 0x3f) as u8,
        ],
    }
}

#[test]
fn every_code_point_reads_as_gnu_wc_reads_it_in_a_utf8_locale() {
    // Each code point X in `aXb ` (two words if X separates) and in ` X `
    // (a word if X makes one), 256 code points a file, all files in one wc
    // run.
    const BLOCK: u32 = 256;
    let k = compile(&wc_in(WcLocale::Utf8, true, None, None)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut ours = Vec::new();
    for first in (0..0x11_0000u32).step_by(BLOCK as usize) {
        for (form, (before, after)) in [(&b"a"[..], &b"b "[..]), (b" ", b" ")].iter().enumerate() {
            let mut text = Vec::new();
            for cp in first..first + BLOCK {
                text.extend_from_slice(before);
                text.extend(utf8_bytes(cp));
                text.extend_from_slice(after);
            }
            let path = dir.path().join(format!("{first:06x}-{form}"));
            std::fs::write(&path, &text).unwrap();
            ours.push(wc_out(run_whole(&*k, &text)).words);
            files.push(path);
        }
    }
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let gnu = gnu_wc(WcLocale::Utf8, &["-w"], &paths);
    let mut lines = gnu.lines();
    for (path, ours) in files.iter().zip(ours) {
        let line = lines.next().expect("a line per file");
        assert_eq!(
            line.trim_start(),
            format!("{ours} {}", path.display()),
            "code points from U+{} (form 0: aXb, 1: ' X ')",
            path.file_name().unwrap().to_string_lossy()
        );
    }
}

/// Words, separators, neutral characters and bytes of both locales: Unicode
/// spaces, letters of several scripts, controls, unassigned code points,
/// invalid and cut sequences (joined with nothing between them, a cut
/// sequence and the bytes after it may make a character).
const VOCAB_UTF8: &[&[u8]] = &[
    b"the",
    b"the",
    "\u{e9}t\u{e9}".as_bytes(),
    "\u{65e5}\u{672c}\u{8a9e}".as_bytes(),
    "na\u{ef}ve".as_bytes(),
    "\u{1f600}".as_bytes(),
    "\u{200b}".as_bytes(),
    "a\u{a0}b".as_bytes(),
    "\u{a0}".as_bytes(),
    "\u{2003}".as_bytes(),
    "\u{202f}".as_bytes(),
    "\u{3000}".as_bytes(),
    "\u{1680}".as_bytes(),
    "\u{2060}".as_bytes(),
    "\u{205f}".as_bytes(),
    "\u{85}".as_bytes(),
    "\u{378}".as_bytes(),
    "\u{2028}".as_bytes(),
    "\u{ffff}".as_bytes(),
    b"\x80",
    b"\x80\x80",
    b"\xe3\x80",
    b"\xe3",
    b"\xf0\x9f\x98",
    b"\xff",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\xf4\x90\x80\x80",
    b"\xe3\x80the",
    b"x\xe3\x80\x80y",
    b"\xc3\xa9\x80",
    b"\0",
    b"-",
];

/// The separators of GNU wc 9.1 in a UTF-8 locale (`iswspace` and its
/// non-breaking spaces), as its source lists them.
fn utf8_separator(c: char) -> bool {
    matches!(c, '\t'..='\r' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'..='\u{200a}' | '\u{202f}' | '\u{205f}' | '\u{2060}' | '\u{3000}')
}

/// wc's words in a UTF-8 locale, as the model: for the characters of
/// [`VOCAB_UTF8`], the controls and the few unassigned or non-printable
/// ones listed make no word, every other character does.
fn model_words_utf8(text: &[u8]) -> Vec<Vec<u8>> {
    let mut words = Vec::new();
    let mut run = Vec::new();
    let mut graphic = false;
    for chunk in text.utf8_chunks() {
        for c in chunk.valid().chars() {
            if utf8_separator(c) {
                if graphic {
                    words.push(std::mem::take(&mut run));
                }
                run.clear();
                graphic = false;
                continue;
            }
            graphic |= !(c.is_control() || matches!(c, '\u{378}' | '\u{2028}' | '\u{ffff}'));
            run.extend_from_slice(c.to_string().as_bytes());
        }
        run.extend_from_slice(chunk.invalid());
    }
    if graphic {
        words.push(run);
    }
    words
}

fn model_utf8(text: &[u8], word: &[u8], top: u32) -> WcOutput {
    let words = model_words_utf8(text);
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
        word_count: Some(words.iter().filter(|w| w.as_slice() == word).count() as u64),
        top: all,
    }
}

#[test]
fn utf8_text_counts_as_gnu_wc_counts_it_in_both_locales() {
    let mut rng = StdRng::seed_from_u64(0x7538);
    for round in 0..16 {
        let n = rng.gen_range(0..300);
        let text = random_text(&mut rng, VOCAB_UTF8, n);
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&text).unwrap();
        file.flush().unwrap();
        let word: &[u8] = [
            b"the".as_slice(),
            "\u{e9}t\u{e9}".as_bytes(),
            b"\xe3\x80the",
        ][round % 3];
        let top = rng.gen_range(0..6);
        for locale in [WcLocale::C, WcLocale::Utf8] {
            let k = compile(&wc_in(locale, true, Some(word), Some(top))).unwrap();
            let whole = wc_out(run_whole(&*k, &text));
            let gnu = gnu_wc(locale, &["-l", "-w", "-c"], &[file.path()]);
            let counts: Vec<&str> = gnu.split_whitespace().take(3).collect();
            assert_eq!(
                counts,
                [whole.lines, whole.words, whole.bytes].map(|n| n.to_string()),
                "{locale:?}, round {round}: {:?}",
                String::from_utf8_lossy(&text)
            );
            let model = match locale {
                WcLocale::C => model(&text, word, top),
                WcLocale::Utf8 => model_utf8(&text, word, top),
            };
            assert_eq!(whole, model, "{locale:?}, round {round}");
            for _ in 0..30 {
                let cuts = random_cuts(&mut rng, text.len());
                let block = random_block(&mut rng);
                assert_eq!(
                    wc_out(run_split(&*k, &text, &cuts, block, &mut rng)),
                    whole,
                    "{locale:?}: cuts {cuts:?} block {block}"
                );
            }
        }
    }
}

#[test]
fn every_split_of_a_small_utf8_target_gives_the_whole_answer() {
    // Cut characters at both ends and inside, a space cut in three, a
    // four-byte character, orphan continuation bytes, invalid bytes.
    let text = "\u{80}x \u{3000}\u{e9}t\u{e9}\u{a0}the\u{1f600}the \u{2003}\u{2028} the"
        .as_bytes()
        .iter()
        .copied()
        .chain(*b"\x80\x80\x80\x80a\xe3\x80 \xe3\x80\x80the\xf0\x9f")
        .collect::<Vec<u8>>();
    let text = &text[1..]; // starts inside U+0080
    let mut rng = StdRng::seed_from_u64(4);
    for spec in [
        wc_in(WcLocale::Utf8, true, None, None),
        wc_in(WcLocale::Utf8, true, Some(b"the"), Some(4)),
        wc_in(
            WcLocale::Utf8,
            false,
            Some("\u{e9}t\u{e9}".as_bytes()),
            None,
        ),
    ] {
        let k = compile(&spec).unwrap();
        let want = run_whole(&*k, text);
        for a in 0..=text.len() {
            for b in a..=text.len() {
                for block in [1, 2, 3, usize::MAX] {
                    assert_eq!(
                        run_split(&*k, text, &[a, b], block, &mut rng),
                        want,
                        "{spec:?} split {a} {b} block {block}"
                    );
                }
            }
        }
    }
    let got = wc_out(run_whole(
        &*compile(&wc_in(WcLocale::Utf8, true, Some(b"the"), Some(4))).unwrap(),
        text,
    ));
    assert_eq!(got, model_utf8(text, b"the", 4));
}

#[test]
fn words_with_unicode_spaces_are_refused_in_utf8_only() {
    let utf8 = |w: &str| compile(&wc_in(WcLocale::Utf8, false, Some(w.as_bytes()), None));
    let c = |w: &str| compile(&wc_in(WcLocale::C, false, Some(w.as_bytes()), None));
    for (word, why) in [
        ("a\u{a0}b", "separator"),
        ("\u{3000}", "separator"),
        ("\u{2028}", "printable"),
    ] {
        match utf8(word) {
            Err(KernelError::BadArguments(msg)) => assert!(msg.contains(why), "{word:?}: {msg}"),
            Err(e) => panic!("{word:?}: wrong error {e}"),
            Ok(_) => panic!("{word:?} was accepted in UTF-8"),
        }
    }
    // In C those bytes are neutral: a word with a letter is one word.
    assert!(c("a\u{a0}b").is_ok());
    // And a word of letters outside ASCII is one in UTF-8 only.
    assert!(utf8("\u{e9}").is_ok());
    assert!(c("\u{e9}").is_err());
}
