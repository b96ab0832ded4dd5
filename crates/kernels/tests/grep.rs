//! The grep kernel: split invariance, and the same lines as GNU grep 3.8
//! (and the same counts as ripgrep) in the C locale.

mod common;

use std::io::Write;

use common::{random_block, random_cuts, random_text, run_drained, run_split, run_whole, tool};
use quarry_kernels::{compile, GrepOutput, GrepSpec, GrepSyntax, KernelError, KernelSpec, Output};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn spec(pattern: &str, syntax: GrepSyntax, ignore_case: bool) -> KernelSpec {
    KernelSpec::Grep(GrepSpec {
        ignore_case,
        ..GrepSpec::new(pattern, syntax)
    })
}

fn grep_out(o: Output) -> GrepOutput {
    match o {
        Output::Grep(g) => g,
        other => panic!("not a grep output: {other:?}"),
    }
}

/// The kernel's lines as `grep -n -b` prints them.
fn as_grep_nb(g: &GrepOutput) -> Vec<u8> {
    let mut out = Vec::new();
    for l in g.match_lines() {
        write!(out, "{}:{}:", l.line_number, l.byte_offset).unwrap();
        out.extend_from_slice(&l.text);
        out.push(b'\n');
    }
    out
}

const VOCAB: &[&[u8]] = &[
    b"foo",
    b"bar",
    b"Foo",
    b"BAR",
    b"needle",
    b"NeEdle",
    b"ne",
    b"edle",
    b"a",
    b"ab",
    b"aab",
    b"abab",
    b"x.y",
    b"xzy",
    b"a+b",
    b"(a)",
    b"{1}",
    b"[x]",
    b"\\",
    b"*",
    b"|",
    b"^",
    b"$",
    b"42",
    b"7",
    b"_id",
    b"\xe9t\xe9",
    b"\x80\xff",
    b"\x0b",
    b"\x0c",
    b"\x7f",
    b"-",
];

const PATTERNS: &[(GrepSyntax, &str)] = &[
    (GrepSyntax::Fixed, "needle"),
    (GrepSyntax::Fixed, "a+b"),
    (GrepSyntax::Fixed, "x.y"),
    (GrepSyntax::Fixed, "[x]"),
    (GrepSyntax::Fixed, "\\"),
    (GrepSyntax::Fixed, "foo bar"),
    (GrepSyntax::Fixed, "e"),
    (GrepSyntax::Fixed, ""),
    (GrepSyntax::Basic, "ne*dle"),
    (GrepSyntax::Basic, "^foo"),
    (GrepSyntax::Basic, "bar$"),
    (GrepSyntax::Basic, "a\\+b"),
    (GrepSyntax::Basic, "a+b"),
    (GrepSyntax::Basic, "\\(ab\\)\\{2\\}"),
    (GrepSyntax::Basic, "^$"),
    (GrepSyntax::Basic, "x.y"),
    (GrepSyntax::Basic, "[[:upper:]]"),
    (GrepSyntax::Basic, "[^a-z ]"),
    (GrepSyntax::Basic, "foo\\|bar"),
    (GrepSyntax::Basic, "\\<ne"),
    (GrepSyntax::Basic, "edle\\>"),
    (GrepSyntax::Basic, "*"),
    (GrepSyntax::Basic, "\\bab\\b"),
    (GrepSyntax::Basic, "{1}"),
    (GrepSyntax::Basic, "[]x]"),
    (GrepSyntax::Basic, "x$y\\|^^"),
    (GrepSyntax::Basic, "\\w\\W\\w"),
    (GrepSyntax::Extended, "ne+dle"),
    (GrepSyntax::Extended, "(foo|bar)+ "),
    (GrepSyntax::Extended, "a{2}"),
    (GrepSyntax::Extended, "^(a|b)"),
    (GrepSyntax::Extended, "x\\.y"),
    (GrepSyntax::Extended, "[[:digit:]]"),
    (GrepSyntax::Extended, "^.{30,}$"),
    (GrepSyntax::Extended, "\\w+\\s\\w"),
    (GrepSyntax::Extended, "\\(a\\)"),
    (GrepSyntax::Extended, "a{1"),
    (GrepSyntax::Extended, "^$"),
    (GrepSyntax::Extended, ""),
    (GrepSyntax::Extended, "[\\x]"),
    (GrepSyntax::Extended, "\t|\r$"),
    (GrepSyntax::Extended, "[^[:print:]]"),
    (GrepSyntax::Extended, "(ab)*ab$"),
    (GrepSyntax::Basic, "\\(^a\\|b$\\)"),
    (GrepSyntax::Extended, "a|*b"),
    (GrepSyntax::Basic, "a\\{,2\\}b"),
    (GrepSyntax::Extended, "[[:alpha:]-]+$"),
    (GrepSyntax::Basic, "\\.\\*"),
    (GrepSyntax::Fixed, "\\x"),
    (GrepSyntax::Extended, "\\<(the|a)\\>"),
    (GrepSyntax::Basic, "[.][*]\\|[[:cntrl:]]"),
];

#[test]
fn every_split_of_a_small_target_gives_the_whole_answer() {
    let text = b"foo needle\n\nne\nedle needle\nneedleneedle\nbar\nnee";
    let mut rng = StdRng::seed_from_u64(1);
    for (syntax, pattern, ic) in [
        (GrepSyntax::Fixed, "needle", false),
        (GrepSyntax::Basic, "^$", false),
        (GrepSyntax::Extended, "e+$", true),
        (GrepSyntax::Basic, "", false),
    ] {
        let k = compile(&spec(pattern, syntax, ic)).unwrap();
        let want = run_whole(&*k, text);
        for a in 0..=text.len() {
            for b in a..=text.len() {
                for block in [1, 2, usize::MAX] {
                    assert_eq!(
                        run_split(&*k, text, &[a, b], block, &mut rng),
                        want,
                        "{pattern:?} split {a} {b}"
                    );
                    assert_eq!(
                        run_drained(&*k, text, &[a, b], block),
                        want,
                        "{pattern:?} drained at {a} {b}"
                    );
                }
            }
        }
    }
}

/// Context lines, `-m`, `-v` and `-o` come out the same for every cut of a
/// small target into three ranges, folded in blocks of 1, 2 or all bytes:
/// context that lies in a neighbouring range, a selected line counted
/// against `-m` after those of earlier ranges, a match cut in two.
#[test]
fn every_split_keeps_context_limits_and_matches() {
    let text = b"a1\nb\nc\na2\nd\ne\nf\ng\na3 a\na4\nh\n\na5";
    let mut rng = StdRng::seed_from_u64(2);
    let base = GrepSpec::new("a", GrepSyntax::Fixed);
    // Patterns that match every line make blocks of lines with no search:
    // cut by -m into selected lines and context, and by every split.
    let every = GrepSpec::new("", GrepSyntax::Basic);
    let specs = [
        GrepSpec {
            max_count: Some(5),
            after_context: 2,
            ..every.clone()
        },
        GrepSpec {
            max_count: Some(7),
            before_context: 2,
            ..GrepSpec::new("^", GrepSyntax::Extended)
        },
        GrepSpec {
            after_context: 1,
            ..GrepSpec::new("x*$", GrepSyntax::Extended)
        },
        GrepSpec {
            invert: true,
            max_count: Some(4),
            after_context: 1,
            ..GrepSpec::new("[0-9]", GrepSyntax::Extended)
        },
        GrepSpec {
            before_context: 1,
            after_context: 2,
            ..base.clone()
        },
        GrepSpec {
            max_count: Some(2),
            after_context: 3,
            ..base.clone()
        },
        GrepSpec {
            invert: true,
            max_count: Some(3),
            before_context: 2,
            ..base.clone()
        },
        GrepSpec {
            only_matching: true,
            after_context: 1,
            ..GrepSpec::new("a[0-9]*", GrepSyntax::Basic)
        },
        GrepSpec {
            only_matching: true,
            invert: true,
            max_count: Some(1),
            after_context: 4,
            whole_line: true,
            ..GrepSpec::new("a[0-9]", GrepSyntax::Extended)
        },
    ];
    for spec in &specs {
        let k = compile(&KernelSpec::Grep(spec.clone())).unwrap();
        let want = grep_out(run_whole(&*k, text));
        assert!(!want.lines.is_empty(), "{spec:?}");
        for a in 0..=text.len() {
            for b in a..=text.len() {
                for block in [1, 2, usize::MAX] {
                    let got = grep_out(run_split(&*k, text, &[a, b], block, &mut rng));
                    assert_eq!(got, want, "{spec:?} split {a} {b} blocks of {block}");
                    let drained = grep_out(run_drained(&*k, text, &[a, b], block));
                    assert_eq!(
                        drained, want,
                        "{spec:?} drained at {a} {b}, blocks of {block}"
                    );
                }
            }
        }
    }
    // -B1 -A2: groups of selected lines and their context, in order.
    let k = compile(&KernelSpec::Grep(specs[4].clone())).unwrap();
    let got = grep_out(run_whole(&*k, text));
    let shown: Vec<(u64, bool)> = got
        .match_lines()
        .map(|l| (l.line_number, l.context))
        .collect();
    assert_eq!(
        shown,
        [
            (1, false),
            (2, true),
            (3, true),
            (4, false),
            (5, true),
            (6, true),
            (8, true),
            (9, false),
            (10, false),
            (11, true),
            (12, true),
            (13, false)
        ]
    );
}

#[test]
fn counts_and_lines_match_the_real_tools() {
    let mut rng = StdRng::seed_from_u64(0x67726570);
    let have_rg = quarry_testkit::require_tool("rg");
    for round in 0..6 {
        let n = rng.gen_range(0..300);
        let text = random_text(&mut rng, VOCAB, n);
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&text).unwrap();
        file.flush().unwrap();
        for &(syntax, pattern) in PATTERNS {
            let ic = rng.gen_bool(0.3);
            let k = compile(&spec(pattern, syntax, ic)).unwrap();
            let whole = grep_out(run_whole(&*k, &text));
            for _ in 0..4 {
                let cuts = random_cuts(&mut rng, text.len());
                let block = random_block(&mut rng);
                let got = grep_out(run_split(&*k, &text, &cuts, block, &mut rng));
                assert_eq!(got, whole, "{pattern:?} cuts {cuts:?} block {block}");
            }
            let flag = match syntax {
                GrepSyntax::Fixed => "-F",
                GrepSyntax::Basic => "-G",
                GrepSyntax::Extended => "-E",
            };
            let mut args = vec![flag, "-a"];
            if ic {
                args.push("-i");
            }
            let Some(gnu) = tool(
                "grep",
                &[&args[..], &["-n", "-b", "-e", pattern]].concat(),
                file.path(),
            ) else {
                continue;
            };
            assert_eq!(
                String::from_utf8_lossy(&as_grep_nb(&whole)),
                String::from_utf8_lossy(&gnu),
                "round {round}: grep {args:?} -n -b -e {pattern:?}"
            );
            let count = tool(
                "grep",
                &[&args[..], &["-c", "-e", pattern]].concat(),
                file.path(),
            )
            .unwrap();
            assert_eq!(
                format!("{}\n", whole.matching_lines).into_bytes(),
                count,
                "grep -c {pattern:?}"
            );
            // ripgrep reads its own regex syntax: compare the fixed strings.
            if have_rg && syntax == GrepSyntax::Fixed {
                let mut rg_args = vec!["--no-config", "-a", "-c", "-F"];
                if ic {
                    rg_args.push("-i");
                }
                rg_args.extend(["-e", pattern]);
                if let Some(rg) = tool("rg", &rg_args, file.path()) {
                    let rg: u64 = String::from_utf8_lossy(&rg).trim().parse().unwrap_or(0);
                    assert_eq!(whole.matching_lines, rg, "rg -c -F {pattern:?}");
                }
            }
        }
    }
}

/// Binary data: GNU grep reads NULs as line ends once it has seen one, so a
/// line holding NULs counts as its matching pieces. The kernel's counts
/// equal `grep -c` (binary handling on, no `-a`) for every pattern, and the
/// lines it reports count the same, wherever the ranges are cut.
#[test]
fn counts_of_binary_data_match_gnu_grep() {
    let mut vocab: Vec<&[u8]> = VOCAB.to_vec();
    vocab.extend_from_slice(&[b"\0", b"a\0b", b"\0\0", b"needle\0", b"\0foo"]);
    let mut rng = StdRng::seed_from_u64(0x6e756c);
    for round in 0..4 {
        let n = rng.gen_range(1..300);
        let mut text = random_text(&mut rng, &vocab, n);
        if round == 0 {
            // The first NUL far from the start, past GNU grep's first read.
            let mut long = random_text(&mut rng, VOCAB, 4000);
            long.extend_from_slice(&text);
            text = long;
        }
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&text).unwrap();
        file.flush().unwrap();
        for &(syntax, pattern) in PATTERNS {
            let ic = rng.gen_bool(0.3);
            let flag = match syntax {
                GrepSyntax::Fixed => "-F",
                GrepSyntax::Basic => "-G",
                GrepSyntax::Extended => "-E",
            };
            let (invert, word, whole_line) =
                (rng.gen_bool(0.3), rng.gen_bool(0.2), rng.gen_bool(0.1));
            if invert && pattern.is_empty() && !word && !whole_line {
                // GNU grep sees it selects nothing and prints no count
                // (quarry grep does the same before any kernel runs).
                continue;
            }
            let mut args = vec![flag, "-c"];
            for (on, f) in [(ic, "-i"), (invert, "-v"), (word, "-w"), (whole_line, "-x")] {
                if on {
                    args.push(f);
                }
            }
            let gnu = tool("grep", &[&args[..], &["-e", pattern]].concat(), file.path())
                .expect("GNU grep must be installed for this test");
            for lines in [false, true] {
                let k = compile(&KernelSpec::Grep(GrepSpec {
                    ignore_case: ic,
                    lines,
                    invert,
                    word,
                    whole_line,
                    ..GrepSpec::new(pattern, syntax)
                }))
                .unwrap();
                let whole = grep_out(run_whole(&*k, &text));
                assert_eq!(
                    format!("{}\n", whole.matching_lines),
                    String::from_utf8_lossy(&gnu),
                    "round {round}: grep {args:?} -e {pattern:?} (lines: {lines})"
                );
                let cuts = random_cuts(&mut rng, text.len());
                let block = random_block(&mut rng);
                let got = grep_out(run_split(&*k, &text, &cuts, block, &mut rng));
                assert_eq!(got, whole, "{pattern:?} cuts {cuts:?} block {block}");
            }
        }
    }
}

#[test]
fn only_counts_unless_lines_are_asked_for() {
    let k = compile(&KernelSpec::Grep(GrepSpec {
        lines: false,
        ..GrepSpec::new("b", GrepSyntax::Fixed)
    }))
    .unwrap();
    let out = grep_out(run_whole(&*k, b"ab\ncd\nb"));
    assert_eq!(
        out,
        GrepOutput {
            matching_lines: 2,
            lines: vec![],
            first_nul: None,
        }
    );
}

/// Lines asked for, the kernel reports the target's first NUL byte (GNU
/// grep's sign of binary data), wherever the ranges and blocks are cut.
#[test]
fn the_first_nul_is_found_across_every_split() {
    let text = b"ab\ncd\0ef\ngh\0\nb";
    let k = compile(&spec("b", GrepSyntax::Fixed, false)).unwrap();
    let want = grep_out(run_whole(&*k, text));
    assert_eq!(want.first_nul, Some(5));
    let mut rng = StdRng::seed_from_u64(9);
    for a in 0..=text.len() {
        for b in a..=text.len() {
            for block in [1, 2, usize::MAX] {
                let got = grep_out(run_split(&*k, text, &[a, b], block, &mut rng));
                assert_eq!(got, want, "split {a} {b} in blocks of {block}");
            }
        }
    }
    let clean = grep_out(run_whole(&*k, b"ab\nb\n"));
    assert_eq!(clean.first_nul, None);
}

#[test]
fn bad_patterns_are_refused_with_a_reason() {
    for (syntax, pattern, why) in [
        (GrepSyntax::Basic, "\\(a\\)\\1", "back-reference"),
        (GrepSyntax::Extended, "(a)\\1", "back-reference"),
        (GrepSyntax::Fixed, "a\nb", "newline"),
        (GrepSyntax::Extended, "a\nb", "newline"),
        (GrepSyntax::Extended, "(a", "unmatched"),
        (GrepSyntax::Basic, "[a", "unmatched"),
        (GrepSyntax::Basic, "a\\{1", "\\{"),
        (GrepSyntax::Extended, "a\\", "backslash"),
    ] {
        match compile(&spec(pattern, syntax, false)) {
            Err(KernelError::BadArguments(msg)) => assert!(msg.contains(why), "{pattern:?}: {msg}"),
            Err(e) => panic!("{pattern:?}: wrong error {e}"),
            Ok(_) => panic!("{pattern:?} was accepted"),
        }
    }
}

/// A block whose matching lines are many before a line holding NULs: the
/// count looks at the rest of the block for a NUL once, and must still
/// count that line's pieces as GNU grep does; and a block whose NULs all
/// come before that check.
#[test]
fn many_matching_lines_then_nuls_count_as_gnu_grep_counts() {
    for (before, after) in [(40, 1), (1, 40), (100, 100)] {
        let mut text = Vec::new();
        text.extend("needle x\n".repeat(before).bytes());
        text.extend_from_slice(b"needle\0y\0needle\0\n");
        text.extend("needle z\n".repeat(after).bytes());
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&text).unwrap();
        file.flush().unwrap();
        for pattern in ["needle", "ne+dle", "needle [xz]"] {
            let gnu = tool("grep", &["-E", "-c", "-e", pattern], file.path())
                .expect("GNU grep must be installed for this test");
            let k = compile(&KernelSpec::Grep(GrepSpec {
                lines: false,
                ..GrepSpec::new(pattern, GrepSyntax::Extended)
            }))
            .unwrap();
            // The lines after the first are one block of complete lines.
            let mut whole = b"first\n".to_vec();
            whole.extend_from_slice(&text);
            let mut file2 = tempfile::NamedTempFile::new().unwrap();
            file2.write_all(&whole).unwrap();
            file2.flush().unwrap();
            let gnu_whole = tool("grep", &["-E", "-c", "-e", pattern], file2.path())
                .expect("GNU grep must be installed for this test");
            for (bytes, expected) in [(&text, &gnu), (&whole, &gnu_whole)] {
                let got = grep_out(run_whole(&*k, bytes)).matching_lines;
                assert_eq!(
                    format!("{got}\n"),
                    String::from_utf8_lossy(expected),
                    "{pattern:?}, {before} lines before, {after} after"
                );
            }
        }
    }
}

/// The entry node hands a target's lines on as its joined prefix grows
/// (`ScanKernel::drain`): over text much longer than GNU grep's 96 KiB
/// pieces, cut into many ranges, the lines taken on the way and those
/// `finish` gives after are the whole answer, and most are taken early.
#[test]
fn lines_taken_from_the_growing_prefix_are_the_whole_answer() {
    let mut rng = StdRng::seed_from_u64(19);
    let vocab: &[&[u8]] = &[b"a", b"b", b"needle", b"", b"xyz", b"a a"];
    let text = random_text(&mut rng, vocab, 60_000);
    assert!(text.len() > 4 * 96 * 1024, "{} bytes", text.len());
    let base = GrepSpec::new("", GrepSyntax::Basic);
    let specs = [
        base.clone(),
        GrepSpec {
            before_context: 2,
            after_context: 2,
            ..GrepSpec::new("needle", GrepSyntax::Fixed)
        },
        GrepSpec {
            invert: true,
            after_context: 1,
            max_count: Some(20_000),
            ..GrepSpec::new("a", GrepSyntax::Fixed)
        },
        GrepSpec {
            only_matching: true,
            before_context: 3,
            ..GrepSpec::new("a+", GrepSyntax::Extended)
        },
    ];
    for spec in &specs {
        let k = compile(&KernelSpec::Grep(spec.clone())).unwrap();
        let want = grep_out(run_whole(&*k, &text));
        let mut cuts: Vec<usize> = (0..40).map(|_| rng.gen_range(0..=text.len())).collect();
        cuts.sort_unstable();
        let got = grep_out(run_drained(&*k, &text, &cuts, random_block(&mut rng)));
        assert_eq!(got, want, "{spec:?}");
        // What finish still gives: no more than the last pieces' lines.
        let mut prefix = k.fold(k.empty(0), &text).unwrap();
        let taken: u64 = k
            .drain(&mut prefix)
            .unwrap()
            .iter()
            .map(|r| r.lines())
            .sum();
        let left = grep_out(k.finish(prefix).unwrap()).match_lines().count() as u64;
        assert!(taken > 2 * left, "{spec:?}: {taken} taken, {left} left");
    }
}

/// A node's answer of grep parts holding blocks of lines: every cut of its
/// encoding is an error, and random changes to it or random bytes are
/// errors or answers, never a panic.
#[test]
fn malformed_local_answers_of_blocks_never_panic() {
    use quarry_kernels::{decode, encode, ComputeAnswer, LineRun, LocalAnswer};
    let k = compile(&KernelSpec::Grep(GrepSpec::new("", GrepSyntax::Basic))).unwrap();
    let text = random_text(&mut StdRng::seed_from_u64(9), VOCAB, 200);
    let (a, b) = text.split_at(text.len() / 3);
    let parts = vec![
        (0, k.fold(k.empty(0), a).unwrap()),
        (0, k.fold(k.empty(a.len() as u64), b).unwrap()),
    ];
    // The parts hold blocks: the whole answer is made of them.
    let whole = k.combine(parts[0].1.clone(), parts[1].1.clone()).unwrap();
    let g = grep_out(k.finish(whole).unwrap());
    assert!(g
        .lines
        .iter()
        .any(|r| matches!(r, LineRun::Block(b) if b.lines() > 10)));
    let answer = ComputeAnswer::Local(LocalAnswer {
        parts,
        bytes_scanned: text.len() as u64,
        resume: None,
    });
    let encoded = encode(&answer);
    let back: ComputeAnswer = decode("answer", &encoded).unwrap();
    assert_eq!(back, answer);
    for len in 0..encoded.len() {
        assert!(decode::<ComputeAnswer>("answer", &encoded[..len]).is_err());
    }
    let mut rng = StdRng::seed_from_u64(10);
    for _ in 0..2000 {
        let mut changed = encoded.clone();
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(0..changed.len());
            changed[i] = rng.gen();
        }
        let _ = decode::<ComputeAnswer>("answer", &changed);
        let random: Vec<u8> = (0..rng.gen_range(0..300)).map(|_| rng.gen()).collect();
        let _ = decode::<ComputeAnswer>("answer", &random);
    }
}
