//! `wc`: lines, words and bytes as GNU wc (coreutils 9.1) counts them with
//! `LC_ALL=C`, the occurrences of one word, and a word histogram.
//!
//! GNU wc's word rule in the C locale (checked against coreutils 9.1 byte by
//! byte): the six `isspace` bytes `\t \n \v \f \r` and space separate words;
//! the printable non-space bytes `!`..`~` (0x21..=0x7e) make a word; every
//! other byte (0x00..=0x08, 0x0e..=0x1f, 0x7f, 0x80..=0xff) is neutral: it
//! neither starts nor ends a word. So a word is a maximal run of
//! non-separator bytes holding at least one printable byte; `a\0b` is one
//! word and a lone `\0` or `\x80` none.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::KernelError;
use crate::output::{Output, WcOutput};
use crate::scan::{Part, ScanKernel};
use crate::spec::WcSpec;

fn is_separator(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ')
}

fn is_graphic(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

/// The bytes of a run cut by a range's edge: a word fragment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Fragment {
    /// Its first bytes, as many as the kernel needs (all of them for a
    /// histogram, one more than the sought word's length to tell a longer
    /// word from it, none to only count words).
    bytes: Vec<u8>,
    /// Whether it holds a printable byte (makes a word).
    graphic: bool,
}

impl Fragment {
    fn extend(&mut self, more: &[u8], cap: usize) {
        self.graphic = self.graphic || more.iter().copied().any(is_graphic);
        if self.bytes.len() < cap {
            let take = (cap - self.bytes.len()).min(more.len());
            self.bytes.extend_from_slice(&more[..take]);
        }
    }

    fn join(mut self, more: &Fragment, cap: usize) -> Fragment {
        self.graphic |= more.graphic;
        if self.bytes.len() < cap {
            let take = (cap - self.bytes.len()).min(more.bytes.len());
            self.bytes.extend_from_slice(&more.bytes[..take]);
        }
        self
    }
}

/// The part of a range of a target: its counts, and the word fragments at
/// its edges (a range without a separator is all head).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WcPart {
    start: u64,
    end: u64,
    lines: u64,
    /// Whether the range holds a separator: if not, `head` is all of it.
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

impl WcPart {
    pub(crate) fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.head.bytes.capacity()
            + self.tail.bytes.capacity()
            + self
                .histogram
                .keys()
                .map(|k| k.capacity() + std::mem::size_of::<(Vec<u8>, u64)>())
                .sum::<usize>()
    }
}

/// The compiled kernel.
pub(crate) struct Wc {
    /// Whether words are looked at at all.
    scan_words: bool,
    want_words: bool,
    word: Option<Vec<u8>>,
    top: Option<u32>,
    /// How many bytes of an edge fragment to keep.
    cap: usize,
}

impl Wc {
    pub(crate) fn new(spec: &WcSpec) -> Result<Wc, KernelError> {
        if let Some(w) = &spec.word {
            if w.is_empty() {
                return Err(KernelError::BadArguments(
                    "wc: the word to count is empty".into(),
                ));
            }
            if w.iter().copied().any(is_separator) {
                return Err(KernelError::BadArguments(format!(
                    "wc: the word to count, {:?}, holds a separator (space, \\t, \\n, \\v, \\f or \\r), so it is not one word",
                    String::from_utf8_lossy(w)
                )));
            }
            if !w.iter().copied().any(is_graphic) {
                return Err(KernelError::BadArguments(format!(
                    "wc: the word to count, {:?}, has no printable byte, and wc counts no such word",
                    String::from_utf8_lossy(w)
                )));
            }
        }
        let cap = match (&spec.word, spec.top) {
            (_, Some(_)) => usize::MAX,
            (Some(w), None) => w.len() + 1,
            (None, None) => 0,
        };
        Ok(Wc {
            scan_words: spec.words || spec.word.is_some() || spec.top.is_some(),
            want_words: spec.words,
            word: spec.word.clone(),
            top: spec.top,
            cap,
        })
    }

    fn blank(&self, offset: u64) -> WcPart {
        WcPart {
            start: offset,
            end: offset,
            lines: 0,
            split: false,
            head: Fragment::default(),
            tail: Fragment::default(),
            words: 0,
            word_count: 0,
            histogram: HashMap::new(),
        }
    }

    /// Counts `run`, a whole run between separators, into `p`.
    fn word(&self, run: &[u8], graphic: bool, p: &mut WcPart) {
        if !graphic {
            return;
        }
        p.words += 1;
        if self.word.as_deref() == Some(run) {
            p.word_count += 1;
        }
        if self.top.is_some() {
            *p.histogram.entry(run.to_vec()).or_insert(0) += 1;
        }
    }

    fn summarize(&self, bytes: &[u8], start: u64) -> WcPart {
        let mut p = self.blank(start);
        p.end = start + bytes.len() as u64;
        p.lines = memchr::memchr_iter(b'\n', bytes).count() as u64;
        if !self.scan_words {
            return p;
        }
        let Some(first) = bytes.iter().position(|&b| is_separator(b)) else {
            p.head.extend(bytes, self.cap);
            return p;
        };
        let last = bytes
            .iter()
            .rposition(|&b| is_separator(b))
            .unwrap_or(first);
        p.split = true;
        p.head.extend(&bytes[..first], self.cap);
        p.tail.extend(&bytes[last + 1..], self.cap);
        if last > first {
            for run in bytes[first + 1..last].split(|&b| is_separator(b)) {
                let graphic = run.iter().copied().any(is_graphic);
                self.word(run, graphic, &mut p);
            }
        }
        p
    }

    fn join(&self, mut left: WcPart, right: WcPart) -> Result<WcPart, KernelError> {
        if left.end != right.start {
            return Err(KernelError::Disjoint {
                left_end: left.end,
                right_start: right.start,
            });
        }
        left.end = right.end;
        left.lines += right.lines;
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
        let mut p = part(whole)?;
        // The target's edges end its first and last runs.
        let head = std::mem::take(&mut p.head);
        self.word(&head.bytes, head.graphic, &mut p);
        if p.split {
            let tail = std::mem::take(&mut p.tail);
            self.word(&tail.bytes, tail.graphic, &mut p);
        }
        let top = match self.top {
            None => Vec::new(),
            Some(k) => {
                let mut all: Vec<(Vec<u8>, u64)> = p.histogram.into_iter().collect();
                all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                all.truncate(k as usize);
                all
            }
        };
        Ok(Output::Wc(WcOutput {
            lines: p.lines,
            words: if self.want_words { p.words } else { 0 },
            bytes: p.end - p.start,
            word_count: self.word.as_ref().map(|_| p.word_count),
            top,
        }))
    }
}
