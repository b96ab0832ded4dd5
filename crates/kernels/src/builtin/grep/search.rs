//! How a block of complete lines is searched for the lines that match:
//! [`LineSearch`].
//!
//! A line matches when the pattern matches somewhere in it. The pattern is
//! compiled so that it cannot match a newline (every class loses it), so a
//! match found in a whole block lies inside one line, and a block is
//! searched at once rather than line by line: the search only stops where
//! something may match. Where it looks first depends on the pattern:
//!
//! - a single case-sensitive `-F` literal: memmem, every hit a match;
//! - a pattern every match of which holds one of a few literals somewhere
//!   inside (the "inner literals" of ripgrep: `[A-Z][a-z]+ (of|the) x`
//!   holds ` of ` or ` the `), when its own prefilter looks only at how
//!   matches start (`[A-Z]`, every capital letter): the literals are
//!   searched for (Teddy or Aho-Corasick, through regex-automata), and only
//!   a line holding one is run through the pattern;
//! - otherwise the pattern itself over the block (regex-automata's meta
//!   regex, which picks its own prefilter: prefix literals, or an inner
//!   literal with a reverse search back to where the match starts).

use std::sync::atomic::{AtomicUsize, Ordering};

use regex_automata::meta::Regex;
use regex_automata::Input;
use regex_syntax::hir::literal::Extractor;
use regex_syntax::hir::{self, Class, ClassBytes, ClassBytesRange, Hir, HirKind};

/// Limits on what a pattern may compile to (ripgrep's defaults): a pattern
/// over them is refused with the regex engine's error.
const NFA_LIMIT_BYTES: usize = 100 << 20;
const ONEPASS_LIMIT_BYTES: usize = 10 << 20;
const DFA_LIMIT_BYTES: usize = 1 << 20;
const DFA_STATE_LIMIT: usize = 1_000;
const LAZY_DFA_CACHE_BYTES: usize = 1000 << 20;
/// How deep a pattern may nest (ripgrep's default).
const NEST_LIMIT: u32 = 250;
/// Inner literals shorter than this find too many places to be worth it.
const MIN_INNER_LITERAL_BYTES: usize = 2;
/// At most this many sets of inner literals are kept to choose from.
const MAX_INNER_SETS: usize = 4;
/// How much of the first block searched is used to choose among them.
const SAMPLE_BYTES: usize = 64 << 10;
/// [`LineSearch::choice`] before the choice is made.
const UNCHOSEN: usize = usize::MAX;

/// Finds the lines of a block that a pattern matches.
pub(super) struct LineSearch {
    /// The pattern (bytes, C locale), unable to match a newline.
    regex: Regex,
    candidates: Candidates,
    /// Which of several sets of inner literals is searched for: the one
    /// with the fewest hits in a sample of the first block searched (text
    /// decides which is rare: ` the ` or `ing`). Any choice finds the same
    /// lines, so parts that race to make it agree on the result.
    choice: AtomicUsize,
    /// See [`LineSearch::matches_every_line`].
    every_line: bool,
}

/// Where a block is looked at first.
enum Candidates {
    /// Every hit of this literal is a match.
    Literal(Box<memchr::memmem::Finder<'static>>),
    /// Sets of literals every match holds one of: a line holding one of
    /// the chosen set is a candidate.
    Inner(Vec<Regex>),
    /// The pattern itself.
    Whole,
}

impl LineSearch {
    /// Compiles `pattern` (the regex crate's syntax); `literal`: the
    /// pattern is that literal, byte for byte.
    pub(super) fn new(
        pattern: &str,
        ignore_case: bool,
        literal: Option<&[u8]>,
    ) -> Result<LineSearch, String> {
        let parsed = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .multi_line(true)
            .case_insensitive(ignore_case)
            .nest_limit(NEST_LIMIT)
            .build()
            .parse(pattern)
            .map_err(|e| e.to_string())?;
        let hir = without_newline(&parsed);
        let every_line = matches_every_line(&hir);
        let regex = build(&hir)?;
        let candidates = match literal {
            Some(l) if !l.is_empty() && !l.contains(&b'\n') => {
                Candidates::Literal(Box::new(memchr::memmem::Finder::new(l).into_owned()))
            }
            _ => {
                let sets = inner_literals(&hir, &regex)
                    .into_iter()
                    .map(|set| {
                        build(&Hir::alternation(
                            set.into_iter().map(Hir::literal).collect(),
                        ))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if sets.is_empty() {
                    Candidates::Whole
                } else {
                    Candidates::Inner(sets)
                }
            }
        };
        Ok(LineSearch {
            regex,
            candidates,
            choice: AtomicUsize::new(UNCHOSEN),
            every_line,
        })
    }

    /// Whether the pattern matches every line, whatever it holds (`''`,
    /// `^`, `a*`, `x*$`): it matches the empty string with no condition
    /// but line starts, or none but line ends.
    pub(super) fn matches_every_line(&self) -> bool {
        self.every_line
    }

    /// Whether the pattern matches somewhere in `bytes`.
    pub(super) fn is_match(&self, bytes: &[u8]) -> bool {
        self.regex.is_match(bytes)
    }

    /// The first line of `slice` from `at` on (`at` starts a line) that
    /// the pattern matches: where it starts and where its newline is (or
    /// the slice's end).
    pub(super) fn next_line(&self, slice: &[u8], mut at: usize) -> Option<(usize, usize)> {
        while at < slice.len() {
            // A byte of a line that matches or may match, and whether it
            // is known to match.
            // Where a match ends: no match holds a newline, so the line
            // holding `pos` (or ending at it) is the match's line, even for
            // an empty match.
            let (pos, confirmed) = match &self.candidates {
                Candidates::Literal(finder) => (at + finder.find(&slice[at..])?, true),
                Candidates::Inner(sets) => {
                    let set = &sets[self.chosen(sets, slice)];
                    (
                        set.search_half(&Input::new(slice).range(at..))?.offset(),
                        false,
                    )
                }
                Candidates::Whole => (
                    self.regex
                        .search_half(&Input::new(slice).range(at..))?
                        .offset(),
                    true,
                ),
            };
            // An empty match after the last newline is on no line (the
            // slice ends with a newline, so no other match ends there).
            if pos >= slice.len() {
                return None;
            }
            let start = memchr::memrchr(b'\n', &slice[at..pos]).map_or(at, |i| at + i + 1);
            let end = memchr::memchr(b'\n', &slice[pos..]).map_or(slice.len(), |i| pos + i);
            if confirmed || self.regex.is_match(&slice[start..end]) {
                return Some((start, end));
            }
            at = end + 1;
        }
        None
    }
}

impl LineSearch {
    /// The index in `sets` of the set searched for, chosen on `slice`'s
    /// start if not yet chosen.
    fn chosen(&self, sets: &[Regex], slice: &[u8]) -> usize {
        let choice = self.choice.load(Ordering::Relaxed);
        if choice != UNCHOSEN {
            return choice;
        }
        let sample = &slice[..slice.len().min(SAMPLE_BYTES)];
        let choice = sets
            .iter()
            .enumerate()
            .min_by_key(|(_, set)| set.find_iter(sample).count())
            .map_or(0, |(i, _)| i);
        self.choice.store(choice, Ordering::Relaxed);
        choice
    }
}

/// See [`LineSearch::matches_every_line`]: an empty match whose looks all
/// hold at a line's start (or all at its end) is found in every line.
fn matches_every_line(hir: &Hir) -> bool {
    use regex_syntax::hir::{Look, LookSet};
    let props = hir.properties();
    let starts = LookSet::empty()
        .insert(Look::Start)
        .insert(Look::StartLF)
        .insert(Look::StartCRLF);
    let ends = LookSet::empty()
        .insert(Look::End)
        .insert(Look::EndLF)
        .insert(Look::EndCRLF);
    let looks = props.look_set();
    props.minimum_len() == Some(0)
        && (looks.subtract(starts).is_empty() || looks.subtract(ends).is_empty())
}

/// The meta regex for `hir`, with ripgrep's limits.
fn build(hir: &Hir) -> Result<Regex, String> {
    let config = Regex::config()
        .utf8_empty(false)
        .nfa_size_limit(Some(NFA_LIMIT_BYTES))
        .onepass_size_limit(Some(ONEPASS_LIMIT_BYTES))
        .dfa_size_limit(Some(DFA_LIMIT_BYTES))
        .dfa_state_limit(Some(DFA_STATE_LIMIT))
        .hybrid_cache_capacity(LAZY_DFA_CACHE_BYTES);
    Regex::builder()
        .configure(config)
        .build_from_hir(hir)
        .map_err(|e| e.to_string())
}

/// `hir` with the newline taken out of every class, and a literal holding
/// one made to match nothing: grep matches within lines.
fn without_newline(hir: &Hir) -> Hir {
    match hir.kind() {
        HirKind::Literal(hir::Literal(bytes)) if bytes.contains(&b'\n') => Hir::fail(),
        HirKind::Class(class) => {
            let mut bytes = match class {
                Class::Bytes(b) => b.clone(),
                // Unicode is off, so classes are of bytes; a Unicode class
                // here is ASCII-only and converts.
                Class::Unicode(u) => match u.to_byte_class() {
                    Some(b) => b,
                    None => return hir.clone(),
                },
            };
            bytes.difference(&ClassBytes::new([ClassBytesRange::new(b'\n', b'\n')]));
            Hir::class(Class::Bytes(bytes))
        }
        HirKind::Repetition(r) => {
            let mut r = r.clone();
            r.sub = Box::new(without_newline(&r.sub));
            Hir::repetition(r)
        }
        HirKind::Capture(c) => {
            let mut c = c.clone();
            c.sub = Box::new(without_newline(&c.sub));
            Hir::capture(c)
        }
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(without_newline).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(without_newline).collect()),
        HirKind::Empty | HirKind::Literal(_) | HirKind::Look(_) => hir.clone(),
    }
}

/// Sets of literals one of which every match of `hir` holds, when they
/// find fewer places than `regex`'s own prefilter: each from a run of
/// consecutive parts of a top-level concatenation whose literals are known
/// (at most [`MAX_INNER_SETS`], longest literals first). None when the
/// regex's own search is as good (its prefix literals are good) or the
/// pattern is no concatenation.
fn inner_literals(hir: &Hir, regex: &Regex) -> Vec<Vec<Vec<u8>>> {
    let mut top = hir;
    while let HirKind::Capture(c) = top.kind() {
        top = &c.sub;
    }
    let HirKind::Concat(parts) = top.kind() else {
        return Vec::new();
    };
    if regex.is_accelerated() && prefix_is_good(hir) {
        return Vec::new();
    }
    let extract = |h: &Hir| Extractor::new().extract(h);
    // (shortest literal, literals) of each set.
    let mut sets: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for i in 0..parts.len() {
        let mut seq = extract(&parts[i]);
        for part in &parts[i + 1..] {
            if !seq.is_exact() {
                break;
            }
            seq.cross_forward(&mut extract(part));
        }
        let (Some(len), Some(literals)) = (seq.min_literal_len(), seq.literals()) else {
            continue;
        };
        if len < MIN_INNER_LITERAL_BYTES || literals.is_empty() {
            continue;
        }
        let set: Vec<Vec<u8>> = literals.iter().map(|l| l.as_bytes().to_vec()).collect();
        // A run inside a longer run found before finds more places.
        if sets
            .iter()
            .any(|(_, s)| s.iter().all(|l| set.iter().any(|m| contains(l, m))))
        {
            continue;
        }
        sets.push((len, set));
    }
    sets.sort_by_key(|(len, set)| (std::cmp::Reverse(*len), set.len()));
    sets.truncate(MAX_INNER_SETS);
    sets.into_iter().map(|(_, set)| set).collect()
}

/// Whether `haystack` holds `needle`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// Whether the literals every match starts with are good enough to search
/// for: long enough, and few.
fn prefix_is_good(hir: &Hir) -> bool {
    let seq = Extractor::new().extract(hir);
    seq.min_literal_len()
        .is_some_and(|n| n >= MIN_INNER_LITERAL_BYTES)
        && seq.len().is_some_and(|n| n <= 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `text` that `search` finds, by searching whole blocks.
    fn found(search: &LineSearch, text: &[u8]) -> Vec<(usize, usize)> {
        let mut lines = Vec::new();
        let mut at = 0;
        while let Some((start, end)) = search.next_line(text, at) {
            lines.push((start, end));
            at = end + 1;
        }
        lines
    }

    /// The lines of `text` the pattern matches, one line at a time.
    fn each_line(search: &LineSearch, text: &[u8]) -> Vec<(usize, usize)> {
        let mut lines = Vec::new();
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', text) {
            if search.is_match(&text[start..end]) {
                lines.push((start, end));
            }
            start = end + 1;
        }
        lines
    }

    #[test]
    fn a_block_search_finds_the_lines_a_line_by_line_search_finds() {
        let text = b"The House of the rising sun\nthe end of nothing\n\nA Tale of Morning\n\
            Error: x\nwarning here\n[^a]\naaaa\nTime of the thing\nbuilding of the thing\n";
        for (pattern, ignore_case) in [
            ("[A-Z][a-z]+ (?:of|the) [a-z]+ing", false),
            ("error|warning", true),
            (r"\b(?:of|the)\b", false),
            ("^[A-Z][a-z]+ ", false),
            (r"[_[:alnum:]]+ing", false),
            ("[^a]", false),
            ("a*", false),
            ("$", false),
            ("^$", false),
            (r"[^x]+ of ", false),
        ] {
            let search = LineSearch::new(pattern, ignore_case, None).unwrap();
            assert_eq!(
                found(&search, text),
                each_line(&search, text),
                "{pattern:?}"
            );
        }
    }

    #[test]
    fn a_class_never_matches_a_newline() {
        let search = LineSearch::new("a[^b]c", false, None).unwrap();
        assert!(found(&search, b"a\nc\n").is_empty());
        assert_eq!(found(&search, b"x\naxc\n"), vec![(2, 5)]);
    }

    #[test]
    fn inner_literals_come_from_runs_of_known_literals() {
        let hir = |p: &str| {
            let parsed = regex_syntax::ParserBuilder::new()
                .unicode(false)
                .utf8(false)
                .build()
                .parse(p)
                .unwrap();
            without_newline(&parsed)
        };
        let h = hir("[A-Z][a-z]+ (?:of|the) [a-z]+ing");
        let sets = inner_literals(&h, &build(&h).unwrap());
        let text: Vec<Vec<String>> = sets
            .iter()
            .map(|set| {
                set.iter()
                    .map(|l| String::from_utf8_lossy(l).into_owned())
                    .collect()
            })
            .collect();
        assert_eq!(text, vec![vec![" of ", " the "], vec!["ing"]]);
        // Good prefix literals are left to the regex's own search.
        let h = hir("water(?:fall|way)s?");
        assert!(inner_literals(&h, &build(&h).unwrap()).is_empty());
    }

    #[test]
    fn the_rarer_set_of_inner_literals_is_chosen_on_the_data() {
        let search = LineSearch::new("[A-Z][a-z]+ (?:of|the) [a-z]+ing", false, None).unwrap();
        // ` of `/` the ` on every line, `ing` on one: `ing` (the second
        // set) is searched for.
        let text = "A piece of the cake\n".repeat(50) + "Tale of running\n";
        assert_eq!(found(&search, text.as_bytes()).len(), 1);
        assert_eq!(search.choice.load(Ordering::Relaxed), 1);
    }
}
