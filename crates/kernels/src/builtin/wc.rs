//! `wc`: lines, words and bytes as GNU wc (coreutils 9.1) counts them with
//! `LC_ALL=C` or in a UTF-8 locale, the occurrences of one word, and a word
//! histogram.
//!
//! GNU wc's word rule in the C locale (checked against coreutils 9.1 byte by
//! byte): the six `isspace` bytes `\t \n \v \f \r` and space separate words;
//! the printable non-space bytes `!`..`~` (0x21..=0x7e) make a word; every
//! other byte (0x00..=0x08, 0x0e..=0x1f, 0x7f, 0x80..=0xff) is neutral: it
//! neither starts nor ends a word. So a word is a maximal run of
//! non-separator bytes holding at least one printable byte; `a\0b` is one
//! word and a lone `\0` or `\x80` none.
//!
//! In a UTF-8 locale the same rule holds for characters: a printable
//! character that `iswspace` calls a space, or that wc lists as a
//! non-breaking space, separates words (U+00A0, U+1680, U+2000..=U+200A,
//! U+202F, U+205F, U+2060, U+3000 besides the ASCII six); every other
//! printable character makes a word; the rest, and every byte that does not
//! start a valid character, are neutral (wc skips an invalid byte and reads
//! on from the next one). `wc_utf8_classes.rs` holds each code point's
//! class as wc 9.1 on glibc 2.36 reads it (made by asking wc itself:
//! scripts/wc_utf8_classes.py).
//!
//! A range cut inside a character cannot read its first or last bytes
//! alone: a UTF-8 part keeps them raw (`lead`, `trail`) and the join reads
//! them once it knows the bytes on the other side.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::wc_utf8_classes::UTF8_CLASS_STARTS;
use crate::error::KernelError;
use crate::output::{Output, WcOutput};
use crate::scan::{Part, ScanKernel};
use crate::spec::{WcLocale, WcSpec};

/// Classes of a byte (C locale) or a character (UTF-8): it makes a word,
/// separates words, or does neither.
pub(super) const WORD: u8 = 0;
pub(super) const SEPARATOR: u8 = 1;
pub(super) const NEUTRAL: u8 = 2;

/// The longest UTF-8 character, in bytes.
const MAX_CHAR_BYTES: usize = 4;

fn is_separator(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ')
}

fn is_graphic(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

fn is_continuation(b: u8) -> bool {
    b & 0xc0 == 0x80
}

/// Byte classes for the word counter's inner loop (C locale; ASCII reads
/// the same in UTF-8).
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let u = b as u8;
        t[b] = if matches!(u, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ') {
            SEPARATOR
        } else if u >= 0x21 && u <= 0x7e {
            WORD
        } else {
            NEUTRAL
        };
        b += 1;
    }
    t
};

/// Classes of the Basic Multilingual Plane (where nearly all text lies),
/// a byte per code point, spread out from the ranges at compile time: a
/// lookup instead of a search per character (the search alone ran at
/// about two thirds of GNU wc's rate on mixed-script text).
static BMP_CLASS: [u8; 0x1_0000] = {
    let mut t = [NEUTRAL; 0x1_0000];
    let mut i = 0;
    while i < UTF8_CLASS_STARTS.len() {
        let (start, class) = UTF8_CLASS_STARTS[i];
        let end = if i + 1 < UTF8_CLASS_STARTS.len() {
            UTF8_CLASS_STARTS[i + 1].0
        } else {
            0x11_0000
        };
        let mut cp = start;
        while cp < end && cp < 0x1_0000 {
            t[cp as usize] = class;
            cp += 1;
        }
        i += 1;
    }
    t
};

/// A character's class in a UTF-8 locale.
fn char_class(c: char) -> u8 {
    let cp = c as u32;
    if let Some(&class) = BMP_CLASS.get(cp as usize) {
        return class;
    }
    // The table starts at 0, so the entry before the first start past `cp`
    // always exists.
    let i = UTF8_CLASS_STARTS.partition_point(|&(start, _)| start <= cp);
    UTF8_CLASS_STARTS[i.saturating_sub(1)].1
}

/// Where the character that `bytes` begin but do not end starts (its lead
/// byte in the last three bytes, and what follows a valid beginning), or
/// `bytes.len()` if they end on a whole character or on bytes no later byte
/// could make valid.
fn cut_char_start(bytes: &[u8]) -> usize {
    for back in 1..MAX_CHAR_BYTES.min(bytes.len() + 1) {
        let at = bytes.len() - back;
        if !is_continuation(bytes[at]) {
            return match std::str::from_utf8(&bytes[at..]) {
                Err(e) if e.valid_up_to() == 0 && e.error_len().is_none() => at,
                _ => bytes.len(),
            };
        }
    }
    bytes.len()
}

/// Words in `inner`, a range that starts and ends next to separators: the
/// runs of non-separators that hold a printable byte. Text without neutral
/// bytes (nearly all text) is counted by separator-to-word transitions in
/// one table-driven pass; the rare block with neutral bytes takes the run
/// by run path, which checks each run for a printable byte.
fn count_words(inner: &[u8]) -> u64 {
    let mut words = 0u64;
    let mut neutral = 0u8;
    // The byte before `inner` is a separator.
    let mut prev_sep = 1u8;
    for &b in inner {
        let c = CLASS[b as usize];
        let sep = c & 1;
        words += u64::from(prev_sep & (sep ^ 1));
        neutral |= c & 2;
        prev_sep = sep;
    }
    if neutral == 0 {
        return words;
    }
    inner
        .split(|&b| is_separator(b))
        .filter(|run| run.iter().copied().any(is_graphic))
        .count() as u64
}

/// The bytes of a run cut by a range's edge: a word fragment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Fragment {
    /// Its first bytes, as many as the kernel needs (all of them for a
    /// histogram, one more than the sought word's length to tell a longer
    /// word from it, none to only count words).
    bytes: Vec<u8>,
    /// Whether it holds a printable byte or character (makes a word).
    graphic: bool,
}

impl Fragment {
    fn extend(&mut self, more: &[u8], graphic: bool, cap: usize) {
        self.graphic |= graphic;
        if self.bytes.len() < cap {
            let take = (cap - self.bytes.len()).min(more.len());
            self.bytes.extend_from_slice(&more[..take]);
        }
    }

    fn join(mut self, more: &Fragment, cap: usize) -> Fragment {
        self.extend(&more.bytes, more.graphic, cap);
        self
    }
}

/// The words of a stretch of bytes read as a whole (every character in it
/// known): the counts of the runs between its separators, and the runs cut
/// by its two ends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Runs {
    /// Whether the stretch holds a separator: if not, `head` is all of it.
    split: bool,
    /// The run before the first separator (it may continue a word).
    head: Fragment,
    /// The run after the last separator (a later range may continue it).
    tail: Fragment,
    /// Words between the first and the last separator.
    words: u64,
    /// Of them, occurrences of the sought word.
    word_count: u64,
    /// Of them, how many times each occurs, when a histogram is kept.
    histogram: HashMap<Vec<u8>, u64>,
}

/// The part of a range of a target: its counts, and the word fragments at
/// its edges (a range without a separator is all head).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WcPart {
    start: u64,
    end: u64,
    lines: u64,
    /// UTF-8: the continuation bytes the range starts with (at most three):
    /// they may end a character begun before the range.
    lead: Vec<u8>,
    /// UTF-8: the beginning of a character the range's end cuts.
    trail: Vec<u8>,
    /// The words of the bytes between `lead` and `trail`.
    runs: Runs,
}

impl WcPart {
    pub(crate) fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.lead.capacity()
            + self.trail.capacity()
            + self.runs.head.bytes.capacity()
            + self.runs.tail.bytes.capacity()
            + self
                .runs
                .histogram
                .keys()
                .map(|k| k.capacity() + std::mem::size_of::<(Vec<u8>, u64)>())
                .sum::<usize>()
    }

    /// The bytes between `lead` and `trail`.
    fn middle_bytes(&self) -> u64 {
        self.end - self.start - (self.lead.len() + self.trail.len()) as u64
    }
}

/// Builds [`Runs`] from a stretch read a character at a time.
struct RunsBuilder<'a> {
    bytes: &'a [u8],
    runs: Runs,
    run_start: usize,
    graphic: bool,
}

/// The compiled kernel.
pub(crate) struct Wc {
    /// Whether words are looked at at all.
    scan_words: bool,
    want_words: bool,
    word: Option<Vec<u8>>,
    /// Finds the sought word: whole-word occurrences are found by search,
    /// not by splitting every word out (8x faster on text).
    finder: Option<memchr::memmem::Finder<'static>>,
    top: Option<u32>,
    /// How many bytes of an edge fragment to keep.
    cap: usize,
    locale: WcLocale,
}

impl Wc {
    pub(crate) fn new(spec: &WcSpec) -> Result<Wc, KernelError> {
        let cap = match (&spec.word, spec.top) {
            (_, Some(_)) => usize::MAX,
            (Some(w), None) => w.len() + 1,
            (None, None) => 0,
        };
        let wc = Wc {
            scan_words: spec.words || spec.word.is_some() || spec.top.is_some(),
            want_words: spec.words,
            word: spec.word.clone(),
            finder: spec
                .word
                .as_ref()
                .map(|w| memchr::memmem::Finder::new(w).into_owned()),
            top: spec.top,
            cap,
            locale: spec.locale,
        };
        if let Some(w) = &spec.word {
            wc.check_word(w)?;
        }
        Ok(wc)
    }

    /// Refuses a sought word that wc would never count as one word.
    fn check_word(&self, w: &[u8]) -> Result<(), KernelError> {
        let shown = String::from_utf8_lossy(w);
        if w.is_empty() {
            return Err(KernelError::BadArguments(
                "wc: the word to count is empty".into(),
            ));
        }
        let runs = self.runs(w);
        if runs.split {
            let which = match self.locale {
                WcLocale::C => "space, \\t, \\n, \\v, \\f or \\r",
                WcLocale::Utf8 => {
                    "space, \\t, \\n, \\v, \\f, \\r or a Unicode space such as U+00A0 or U+3000"
                }
            };
            return Err(KernelError::BadArguments(format!(
                "wc: the word to count, {shown:?}, holds a separator ({which}), so it is not one word"
            )));
        }
        if !runs.head.graphic {
            return Err(KernelError::BadArguments(format!(
                "wc: the word to count, {shown:?}, has no printable {}, and wc counts no such word",
                match self.locale {
                    WcLocale::C => "byte",
                    WcLocale::Utf8 => "character",
                }
            )));
        }
        Ok(())
    }

    fn blank(&self, offset: u64) -> WcPart {
        WcPart {
            start: offset,
            end: offset,
            lines: 0,
            lead: Vec::new(),
            trail: Vec::new(),
            runs: Runs::default(),
        }
    }

    /// Counts `run`, a whole run between separators, into `r`.
    fn word(&self, run: &[u8], graphic: bool, r: &mut Runs) {
        if !graphic {
            return;
        }
        r.words += 1;
        if self.word.as_deref() == Some(run) {
            r.word_count += 1;
        }
        if self.top.is_some() {
            // Allocate a key only for a word not seen yet.
            match r.histogram.get_mut(run) {
                Some(n) => *n += 1,
                None => {
                    r.histogram.insert(run.to_vec(), 1);
                }
            }
        }
    }

    /// Whole-word occurrences of the sought word in `inner` (a range that
    /// starts and ends next to separators; C rule).
    fn count_word(&self, inner: &[u8]) -> u64 {
        let (Some(finder), Some(word)) = (&self.finder, &self.word) else {
            return 0;
        };
        let n = word.len();
        finder
            .find_iter(inner)
            .filter(|&i| {
                (i == 0 || is_separator(inner[i - 1]))
                    && (i + n == inner.len() || is_separator(inner[i + n]))
            })
            .count() as u64
    }

    /// The words of `bytes` read as a whole in the kernel's locale.
    fn runs(&self, bytes: &[u8]) -> Runs {
        match self.locale {
            // ASCII reads the same in both locales, and the byte path is the
            // fast one.
            WcLocale::Utf8 if !bytes.is_ascii() => self.runs_utf8(bytes),
            _ => self.runs_bytes(bytes),
        }
    }

    /// The words of `bytes` by the C locale's rule.
    fn runs_bytes(&self, bytes: &[u8]) -> Runs {
        let mut r = Runs::default();
        let graphic = |s: &[u8]| s.iter().copied().any(is_graphic);
        let Some(first) = bytes.iter().position(|&b| is_separator(b)) else {
            r.head.extend(bytes, graphic(bytes), self.cap);
            return r;
        };
        let last = bytes
            .iter()
            .rposition(|&b| is_separator(b))
            .unwrap_or(first);
        r.split = true;
        let head = &bytes[..first];
        r.head.extend(head, graphic(head), self.cap);
        let tail = &bytes[last + 1..];
        r.tail.extend(tail, graphic(tail), self.cap);
        if last > first {
            let inner = &bytes[first + 1..last];
            if self.top.is_some() {
                for run in inner.split(|&b| is_separator(b)) {
                    self.word(run, graphic(run), &mut r);
                }
            } else {
                if self.want_words {
                    r.words += count_words(inner);
                }
                r.word_count += self.count_word(inner);
            }
        }
        r
    }

    /// The words of `bytes` read as UTF-8 characters, to its end (a
    /// character cut there is invalid bytes).
    fn runs_utf8(&self, bytes: &[u8]) -> Runs {
        let mut b = RunsBuilder {
            bytes,
            runs: Runs::default(),
            run_start: 0,
            graphic: false,
        };
        let mut at = 0;
        while at < bytes.len() {
            let (valid, invalid) = match std::str::from_utf8(&bytes[at..]) {
                Ok(s) => (s, 0),
                Err(e) => {
                    // Valid by construction: `valid_up_to` says so.
                    let s = std::str::from_utf8(&bytes[at..at + e.valid_up_to()]).unwrap_or("");
                    // wc skips one invalid byte at a time; the bytes of one
                    // error are a lead and continuation bytes, which no
                    // restart reads as a character either, so all are
                    // neutral.
                    (s, e.error_len().unwrap_or(bytes.len() - at - s.len()))
                }
            };
            for (i, c) in valid.char_indices() {
                match char_class(c) {
                    WORD => b.graphic = true,
                    SEPARATOR => self.separator(&mut b, at + i, c.len_utf8()),
                    _ => {}
                }
            }
            at += valid.len() + invalid;
        }
        let rest = &bytes[b.run_start..];
        let fragment = if b.runs.split {
            &mut b.runs.tail
        } else {
            &mut b.runs.head
        };
        fragment.extend(rest, b.graphic, self.cap);
        b.runs
    }

    /// Ends the run before the separator at `at` (`len` bytes).
    fn separator(&self, b: &mut RunsBuilder, at: usize, len: usize) {
        let run = &b.bytes[b.run_start..at];
        if b.runs.split {
            self.word(run, b.graphic, &mut b.runs);
        } else {
            b.runs.head.extend(run, b.graphic, self.cap);
            b.runs.split = true;
        }
        b.run_start = at + len;
        b.graphic = false;
    }

    fn summarize(&self, bytes: &[u8], start: u64) -> WcPart {
        let mut p = self.blank(start);
        p.end = start + bytes.len() as u64;
        p.lines = memchr::memchr_iter(b'\n', bytes).count() as u64;
        if !self.scan_words {
            return p;
        }
        let middle = match self.locale {
            WcLocale::C => bytes,
            WcLocale::Utf8 => {
                let lead = bytes
                    .iter()
                    .take(MAX_CHAR_BYTES - 1)
                    .take_while(|&&b| is_continuation(b))
                    .count();
                let trail = lead + cut_char_start(&bytes[lead..]);
                p.lead = bytes[..lead].to_vec();
                p.trail = bytes[trail..].to_vec();
                &bytes[lead..trail]
            }
        };
        p.runs = self.runs(middle);
        p
    }

    /// The runs of two adjacent stretches as one.
    fn join_runs(&self, mut left: Runs, right: Runs) -> Runs {
        left.words += right.words;
        left.word_count += right.word_count;
        let mut more = right.histogram;
        // Merge the smaller histogram into the larger.
        if left.histogram.len() < more.len() {
            std::mem::swap(&mut left.histogram, &mut more);
        }
        for (w, n) in more {
            *left.histogram.entry(w).or_insert(0) += n;
        }
        match (left.split, right.split) {
            (false, false) => left.head = left.head.join(&right.head, self.cap),
            (true, false) => left.tail = left.tail.join(&right.head, self.cap),
            (false, true) => {
                left.head = left.head.join(&right.head, self.cap);
                left.tail = right.tail;
                left.split = true;
            }
            (true, true) => {
                // The left's tail and the right's head are one whole run.
                let seam = std::mem::take(&mut left.tail).join(&right.head, self.cap);
                self.word(&seam.bytes, seam.graphic, &mut left);
                left.tail = right.tail;
            }
        }
        left
    }

    fn join(&self, mut left: WcPart, right: WcPart) -> Result<WcPart, KernelError> {
        if left.end != right.start {
            return Err(KernelError::Disjoint {
                left_end: left.end,
                right_start: right.start,
            });
        }
        let left_whole = left.middle_bytes() > 0 || !left.trail.is_empty();
        let right_whole = right.middle_bytes() > 0 || !right.trail.is_empty();
        left.end = right.end;
        left.lines += right.lines;
        if !left_whole {
            // The left is continuation bytes only: with the right's they
            // begin the joined range; past three no character can own them.
            left.lead.extend_from_slice(&right.lead);
            let orphans = left.lead.split_off(left.lead.len().min(MAX_CHAR_BYTES - 1));
            left.runs = self.join_runs(self.runs(&orphans), right.runs);
            left.trail = right.trail;
            return Ok(left);
        }
        let mut seam = std::mem::take(&mut left.trail);
        seam.extend_from_slice(&right.lead);
        if !right_whole && cut_char_start(&seam) == 0 && !seam.is_empty() {
            // The right only continues a character that is still not whole.
            left.trail = seam;
            return Ok(left);
        }
        let runs = std::mem::take(&mut left.runs);
        let runs = if seam.is_empty() {
            runs
        } else {
            self.join_runs(runs, self.runs(&seam))
        };
        left.runs = self.join_runs(runs, right.runs);
        left.trail = right.trail;
        Ok(left)
    }
}

fn part(p: Part) -> Result<WcPart, KernelError> {
    match p {
        Part::Wc(p) => Ok(p),
        other => Err(KernelError::WrongPart {
            expected: "wc",
            got: other.kernel_name(),
        }),
    }
}

impl ScanKernel for Wc {
    fn empty(&self, offset: u64) -> Part {
        Part::Wc(self.blank(offset))
    }

    fn fold(&self, state: Part, bytes: &[u8]) -> Result<Part, KernelError> {
        let state = part(state)?;
        let next = self.summarize(bytes, state.end);
        Ok(Part::Wc(self.join(state, next)?))
    }

    fn parallel(&self) -> bool {
        true
    }

    fn combine(&self, left: Part, right: Part) -> Result<Part, KernelError> {
        Ok(Part::Wc(self.join(part(left)?, part(right)?)?))
    }

    fn finish(&self, whole: Part) -> Result<Output, KernelError> {
        let p = part(whole)?;
        // Bytes left raw at the target's edges belong to no character.
        let runs = self.join_runs(self.runs(&p.lead), p.runs);
        let mut runs = self.join_runs(runs, self.runs(&p.trail));
        // The target's edges end its first and last runs.
        let head = std::mem::take(&mut runs.head);
        self.word(&head.bytes, head.graphic, &mut runs);
        if runs.split {
            let tail = std::mem::take(&mut runs.tail);
            self.word(&tail.bytes, tail.graphic, &mut runs);
        }
        let top = match self.top {
            None => Vec::new(),
            Some(k) => {
                let mut all: Vec<(Vec<u8>, u64)> = runs.histogram.into_iter().collect();
                all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                all.truncate(k as usize);
                all
            }
        };
        Ok(Output::Wc(WcOutput {
            lines: p.lines,
            words: if self.want_words { runs.words } else { 0 },
            bytes: p.end - p.start,
            word_count: self.word.as_ref().map(|_| runs.word_count),
            top,
        }))
    }
}
