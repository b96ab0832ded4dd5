//! `grep`, `grep -E`, `grep -F` (with `-i`, `-v`, `-w`, `-x`, `-o`, `-m`,
//! several patterns, and context lines) as GNU grep 3.8 selects lines in the
//! C locale. Which lines a part keeps to print, and how they join across
//! parts, is in [`lines`].
//!
//! POSIX patterns are translated to the syntax of Rust's regex crate (see
//! [`translate`]) and run by regex-automata over bytes (no Unicode: the C
//! locale matches byte by byte); how a block is searched for its matching
//! lines is in [`search`].
//!
//! Binary data is counted as GNU grep counts it: once GNU grep sees a NUL
//! byte it reads every NUL from there on as a line end, so a line holding
//! NULs counts as the pieces between them that match. Every line holding a
//! NUL lies past the point GNU grep decides the data is binary (that point
//! is at or before the first NUL), so the rule needs no global view: each
//! line is judged by its own bytes.

use serde::{Deserialize, Serialize};

use crate::error::KernelError;
use crate::output::{GrepOutput, LineRun, Output};
use crate::scan::{Part, ScanKernel};
use crate::spec::{GrepSpec, GrepSyntax, MAX_CONTEXT_LINES, MAX_PATTERN_BYTES};

mod lines;
mod only;
mod search;

use lines::Span;
use only::OnlyMatching;
use search::LineSearch;

/// The part of a range of a target.
///
/// A range is cut into its *head* (the bytes before its first newline, which
/// may continue a line begun in the previous range), the complete lines
/// after that, and its *tail* (the bytes after its last newline, which a
/// later range may continue). Head and tail are matched only once the whole
/// line is known: when parts are joined, or at [`ScanKernel::finish`], where
/// the target's head starts its first line and its tail is its last,
/// unterminated line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepPart {
    start: u64,
    end: u64,
    /// Newlines in the range.
    newlines: u64,
    /// The bytes before the first newline; all of them if there is none.
    head: Vec<u8>,
    /// Selected lines that begin after the first newline and end with a
    /// newline inside the range (at most `-m`).
    count: u64,
    /// When the spec asks for lines: those of them and the lines around
    /// them that an answer may print (see [`lines`]), `line_number` counted
    /// from the range's head line (0) and `byte_offset` from the target's
    /// start; consecutive selected lines as blocks.
    lines: Vec<LineRun>,
    /// The bytes after the last newline (empty when there is none).
    tail: Vec<u8>,
    /// The offset in the target of the range's first NUL byte, looked for
    /// only when lines are wanted (a count needs no binary handling here).
    #[serde(default)]
    first_nul: Option<u64>,
    /// How many of `lines` are selected (not context): at most `-m`.
    #[serde(default)]
    selected: u64,
    /// The target's first line (the head) was decided into `lines`: the
    /// part starts at the target's start and the entry node takes its
    /// final lines as they are known ([`ScanKernel::drain`]).
    #[serde(default)]
    head_settled: bool,
    /// The last selected line taken from the part by a drain: lines after
    /// it within `-A` are its context.
    #[serde(default)]
    drained_selected: Option<u64>,
}

impl GrepPart {
    pub(crate) fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.head.capacity()
            + self.tail.capacity()
            + self.lines.iter().map(LineRun::size_bytes).sum::<usize>()
    }
}

/// The compiled kernel.
pub(crate) struct Grep {
    search: LineSearch,
    /// Under `-o` (with lines): what is printed of a line.
    only: Option<OnlyMatching>,
    want_lines: bool,
    /// The pattern has no line anchors and cannot match an empty line, so a
    /// piece of a line can match only if the whole line does: only matching
    /// lines need looking at for NULs. Otherwise every block is first
    /// searched for a NUL.
    pieces_match_within: bool,
    /// The pattern matches every line (`''`, `^`, `a*`) and no `-o` asks
    /// for what it matched: a block of lines without NULs is selected
    /// whole, with no search, as one block of text.
    every_line: bool,
    /// `-v`.
    invert: bool,
    /// `-m` (u64::MAX without it).
    cap: u64,
    /// `-B`.
    before: u64,
    /// `-A`.
    after: u64,
}

/// Matching lines of a block after which the rest of the block is looked
/// at for a NUL at once (see [`Grep::count_matching_lines`]).
const LINES_BEFORE_NUL_CHECK: u32 = 32;

/// A pattern that matches nothing: what no patterns at all (`grep -f
/// /dev/null`) select.
const NOTHING: &str = r"[^\x00-\xFF]";

/// The patterns of a spec as one expression in the regex crate's syntax
/// (any of them), and that as a whole line (`-x`) or as a whole word
/// (`-w`).
fn expressions(spec: &GrepSpec) -> Result<(String, String), KernelError> {
    let total: usize = spec.patterns.iter().map(String::len).sum();
    if total > MAX_PATTERN_BYTES {
        return Err(KernelError::BadArguments(format!(
            "grep patterns of {total} bytes; at most {MAX_PATTERN_BYTES}"
        )));
    }
    let mut alternatives = Vec::with_capacity(spec.patterns.len());
    for pattern in &spec.patterns {
        if pattern.contains('\n') {
            return Err(KernelError::BadArguments(
                "a grep pattern must be one line: it contains a newline".into(),
            ));
        }
        alternatives.push(match spec.syntax {
            GrepSyntax::Fixed => pattern.bytes().map(literal).collect(),
            GrepSyntax::Basic => translate(pattern.as_bytes(), false)?,
            GrepSyntax::Extended => translate(pattern.as_bytes(), true)?,
        });
    }
    let any = match alternatives.len() {
        0 => NOTHING.to_string(),
        1 => alternatives.remove(0),
        _ => alternatives
            .iter()
            .map(|a| format!("(?:{a})"))
            .collect::<Vec<_>>()
            .join("|"),
    };
    let selecting = if spec.whole_line {
        format!("^(?:{any})$")
    } else if spec.word {
        // GNU's test: no word byte just before the match or just after it.
        format!(r"\b{{start-half}}(?:{any})\b{{end-half}}")
    } else {
        any.clone()
    };
    Ok((any, selecting))
}

impl Grep {
    pub(crate) fn new(spec: &GrepSpec) -> Result<Grep, KernelError> {
        for (what, n) in [("-A", spec.after_context), ("-B", spec.before_context)] {
            if n > MAX_CONTEXT_LINES {
                return Err(KernelError::BadArguments(format!(
                    "grep {what} {n}: at most {MAX_CONTEXT_LINES} lines of context"
                )));
            }
        }
        let (any, pattern) = expressions(spec)?;
        let bad = |e: &dyn std::fmt::Display| {
            KernelError::BadArguments(format!("grep pattern {:?}: {e}", spec.patterns))
        };
        // A case-sensitive literal is found by memmem directly: the regex
        // engine's search for the same literal runs at half its speed here.
        let literal = match spec.patterns.as_slice() {
            [one]
                if spec.syntax == GrepSyntax::Fixed
                    && !spec.ignore_case
                    && !spec.word
                    && !spec.whole_line =>
            {
                Some(one.as_bytes())
            }
            _ => None,
        };
        let search = LineSearch::new(&pattern, spec.ignore_case, literal).map_err(|e| bad(&e))?;
        let only = if spec.only_matching && spec.lines {
            Some(OnlyMatching::new(&any, &pattern, spec)?)
        } else {
            None
        };
        let matches_empty = search.is_match(b"");
        let every_line = search.matches_every_line() && only.is_none();
        Ok(Grep {
            search,
            only,
            want_lines: spec.lines,
            pieces_match_within: !has_line_anchors(&pattern) && !matches_empty,
            every_line,
            invert: spec.invert,
            cap: spec.max_count.unwrap_or(u64::MAX),
            before: spec.before_context,
            after: spec.after_context,
        })
    }

    fn is_match(&self, bytes: &[u8]) -> bool {
        self.search.is_match(bytes)
    }

    /// How many lines GNU grep selects in `line` (without its newline): one
    /// if it matches (with `-v`, if it does not), or, when it holds NULs,
    /// its pieces that do.
    fn count_of(&self, line: &[u8]) -> u64 {
        if memchr::memchr(0, line).is_none() {
            return u64::from(self.is_match(line) != self.invert);
        }
        line.split(|&b| b == 0)
            .filter(|piece| self.is_match(piece) != self.invert)
            .count() as u64
    }

    /// [`Grep::count_of`] for a line already known to match as a whole,
    /// without `-v`.
    fn count_of_matching(&self, line: &[u8]) -> u64 {
        if memchr::memchr(0, line).is_none() {
            return 1;
        }
        line.split(|&b| b == 0)
            .filter(|piece| self.is_match(piece))
            .count() as u64
    }

    /// Whether the part has selected all the lines `-m` lets it.
    fn is_full(&self, p: &GrepPart) -> bool {
        if self.want_lines {
            p.selected >= self.cap
        } else {
            p.count >= self.cap
        }
    }

    /// Decides the complete lines of `slice` (each ending in a newline;
    /// `slice_lines` of them), whose first line is line `rel` of the part
    /// and starts at `offset` in the target.
    fn block(&self, p: &mut GrepPart, slice: &[u8], slice_lines: u64, rel: u64, offset: u64) {
        if self.is_full(p) {
            // Only the context after the last selected line can still be
            // printed.
            if self.want_lines {
                self.trailing(p, slice, 0, rel, offset);
            }
            return;
        }
        // A NUL could make a piece of a line selected where the whole line
        // is not (with -v: any NUL), so such a block is judged line by line.
        let by_line =
            (self.invert || !self.pieces_match_within) && memchr::memchr(0, slice).is_some();
        if by_line {
            self.lines_one_by_one(p, slice, rel, offset);
        } else if !self.want_lines {
            let matching = self.count_matching_lines(slice);
            let selected = if self.invert {
                memchr::memchr_iter(b'\n', slice).count() as u64 - matching
            } else {
                matching
            };
            p.count = p.count.saturating_add(selected).min(self.cap);
        } else if self.every_line
            && !self.invert
            && p.selected.saturating_add(slice_lines) <= self.cap
            && self.keep_selected_block(p, slice, rel, offset)
        {
            // No NUL here (`by_line` otherwise: a pattern that matches
            // every line matches the empty line), so every line counts once.
            p.count = p.count.saturating_add(slice_lines).min(self.cap);
            p.selected += slice_lines;
        } else {
            let spans = self.matching_spans(slice);
            self.walk(p, slice, slice_lines, rel, offset, &spans);
        }
    }

    /// Decides the complete lines of `slice` one at a time.
    fn lines_one_by_one(&self, p: &mut GrepPart, slice: &[u8], rel: u64, offset: u64) {
        let mut start = 0usize;
        for (i, end) in memchr::memchr_iter(b'\n', slice).enumerate() {
            if self.is_full(p) {
                if self.want_lines {
                    self.trailing(p, slice, start, rel + i as u64, offset);
                }
                return;
            }
            self.decide(p, &slice[start..end], rel + i as u64, offset + start as u64);
            start = end + 1;
        }
    }

    /// The matching lines of `slice` (complete lines, each ending in a
    /// newline), numbered from 0.
    fn matching_spans(&self, slice: &[u8]) -> Vec<Span> {
        let mut spans = Vec::new();
        // Newlines before `counted` are counted in `line`.
        let (mut line, mut counted) = (0u64, 0usize);
        let mut at = 0usize;
        while let Some((start, end)) = self.search.next_line(slice, at) {
            line += memchr::memchr_iter(b'\n', &slice[counted..start]).count() as u64;
            counted = start;
            spans.push(Span { line, start, end });
            at = end + 1;
        }
        spans
    }

    /// Matching lines of `slice` (complete lines, each ending in a
    /// newline), counted by searching the whole slice at once and skipping
    /// to the next line after each match, with no per-line work for lines
    /// that do not match.
    fn count_matching_lines(&self, slice: &[u8]) -> u64 {
        let mut count = 0u64;
        let mut at = 0usize;
        // Lines from here on hold no NUL: once a block has shown many
        // matching lines, the rest of it is looked at for a NUL once
        // rather than each line that matches.
        let mut nul_free_from = usize::MAX;
        let mut lines = 0u32;
        while let Some((start, end)) = self.search.next_line(slice, at) {
            count += if start >= nul_free_from {
                1
            } else {
                self.count_of_matching(&slice[start..end])
            };
            lines += 1;
            if lines == LINES_BEFORE_NUL_CHECK && memchr::memchr(0, &slice[end..]).is_none() {
                nul_free_from = end;
            }
            at = end + 1;
        }
        count
    }

    fn join(&self, mut left: GrepPart, right: GrepPart) -> Result<GrepPart, KernelError> {
        if left.end != right.start {
            return Err(KernelError::Disjoint {
                left_end: left.end,
                right_start: right.start,
            });
        }
        // The left range comes first in the target.
        left.first_nul = left.first_nul.or(right.first_nul);
        if right.newlines == 0 {
            if left.newlines == 0 {
                left.head.extend_from_slice(&right.head);
            } else {
                left.tail.extend_from_slice(&right.head);
            }
            left.end = right.end;
            return Ok(left);
        }
        let left_newlines = left.newlines;
        if left.newlines == 0 {
            left.head.extend_from_slice(&right.head);
        } else {
            // The left's tail and the right's head are one complete line.
            let mut line = std::mem::take(&mut left.tail);
            let offset = left.end - line.len() as u64;
            line.extend_from_slice(&right.head);
            self.decide(&mut left, &line, left_newlines, offset);
        }
        left.count = left.count.saturating_add(right.count).min(self.cap);
        self.append(&mut left, right.lines, left_newlines);
        left.newlines += right.newlines;
        left.tail = right.tail;
        left.end = right.end;
        let prior = left.drained_selected;
        self.prune(
            &mut left,
            left_newlines.saturating_sub(self.before),
            false,
            prior,
        );
        Ok(left)
    }
}

fn part(p: Part) -> Result<GrepPart, KernelError> {
    match p {
        Part::Grep(p) => Ok(p),
        other => Err(KernelError::WrongPart {
            expected: "grep",
            got: other.kernel_name(),
        }),
    }
}

impl ScanKernel for Grep {
    fn empty(&self, offset: u64) -> Part {
        Part::Grep(GrepPart {
            start: offset,
            end: offset,
            newlines: 0,
            head: Vec::new(),
            count: 0,
            lines: Vec::new(),
            tail: Vec::new(),
            first_nul: None,
            selected: 0,
            head_settled: false,
            drained_selected: None,
        })
    }

    fn fold(&self, state: Part, bytes: &[u8]) -> Result<Part, KernelError> {
        let mut p = part(state)?;
        if self.want_lines && p.first_nul.is_none() {
            p.first_nul = memchr::memchr(0, bytes).map(|i| p.end + i as u64);
        }
        let Some(first) = memchr::memchr(b'\n', bytes) else {
            if p.newlines == 0 {
                p.head.extend_from_slice(bytes);
            } else {
                p.tail.extend_from_slice(bytes);
            }
            p.end += bytes.len() as u64;
            return Ok(Part::Grep(p));
        };
        let old_newlines = p.newlines;
        // Line numbers need every newline counted; a count of selected
        // lines needs only to know that the range holds one (that pass
        // would cost as much as the search itself).
        let newlines = if self.want_lines {
            memchr::memchr_iter(b'\n', bytes).count() as u64
        } else {
            1
        };
        // The tail's buffer is reused for the next tail: one fold runs per
        // page, and a fresh allocation each time would be wasted.
        let mut tail = std::mem::take(&mut p.tail);
        if p.newlines == 0 {
            p.head.extend_from_slice(&bytes[..first]);
        } else {
            let offset = p.end - tail.len() as u64;
            tail.extend_from_slice(&bytes[..first]);
            self.decide(&mut p, &tail, old_newlines, offset);
        }
        let last = memchr::memrchr(b'\n', bytes).unwrap_or(first);
        if last > first {
            // The block's complete lines are searched in place.
            let (rel, offset) = (p.newlines + 1, p.end + first as u64 + 1);
            let slice = &bytes[first + 1..=last];
            self.block(&mut p, slice, newlines.saturating_sub(1), rel, offset);
        }
        p.newlines += newlines;
        tail.clear();
        tail.extend_from_slice(&bytes[last + 1..]);
        p.tail = tail;
        p.end += bytes.len() as u64;
        self.prune(
            &mut p,
            old_newlines.saturating_sub(self.before),
            false,
            None,
        );
        Ok(Part::Grep(p))
    }

    fn parallel(&self) -> bool {
        true
    }

    fn combine(&self, left: Part, right: Part) -> Result<Part, KernelError> {
        Ok(Part::Grep(self.join(part(left)?, part(right)?)?))
    }

    fn drain(&self, prefix: &mut Part) -> Result<Vec<LineRun>, KernelError> {
        match prefix {
            Part::Grep(p) => Ok(self.drain_final(p)),
            other => Err(KernelError::WrongPart {
                expected: "grep",
                got: other.kernel_name(),
            }),
        }
    }

    fn finish(&self, whole: Part) -> Result<Output, KernelError> {
        let whole = part(whole)?;
        let mut out = part(self.empty(whole.start))?;
        // Selected lines a drain took count against -m before the ones left
        // (a last line without a newline, decided here, among them).
        let kept: u64 = whole
            .lines
            .iter()
            .filter(|l| !l.context())
            .map(LineRun::lines)
            .sum();
        out.selected = whole.selected.saturating_sub(kept);
        // The target's head is its first line, whole; an empty target has
        // no line at all.
        if !whole.head_settled && (whole.newlines > 0 || !whole.head.is_empty()) {
            self.decide(&mut out, &whole.head, 0, whole.start);
        }
        out.count = out.count.saturating_add(whole.count).min(self.cap);
        self.append(&mut out, whole.lines, 0);
        // A final line without a newline is a line too.
        if !whole.tail.is_empty() {
            let offset = whole.end - whole.tail.len() as u64;
            self.decide(&mut out, &whole.tail, whole.newlines, offset);
        }
        self.prune(&mut out, 0, true, whole.drained_selected);
        for l in &mut out.lines {
            self.printable(l, whole.start);
        }
        Ok(Output::Grep(GrepOutput {
            matching_lines: out.count,
            lines: out.lines,
            first_nul: whole.first_nul.map(|at| at - whole.start),
        }))
    }
}

/// Whether a translated pattern holds a line or text anchor (`^`, `$`),
/// which could match at a NUL once GNU grep reads NULs as line ends. A
/// pattern that does not parse counts as anchored.
fn has_line_anchors(pattern: &str) -> bool {
    use regex_syntax::hir::Look;
    let parsed = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .multi_line(true)
        .build()
        .parse(pattern);
    let Ok(hir) = parsed else {
        return true;
    };
    let looks = hir.properties().look_set();
    [
        Look::Start,
        Look::End,
        Look::StartLF,
        Look::EndLF,
        Look::StartCRLF,
        Look::EndCRLF,
    ]
    .into_iter()
    .any(|look| looks.contains(look))
}

/// Translates a POSIX regular expression, basic (`grep`) or extended
/// (`grep -E`), as GNU grep reads it, into the regex crate's syntax.
///
/// Every literal byte is written as an escape, so no character the regex
/// crate would read specially (`&&` or `[` in a class, `\` in a bracket
/// expression, a non-ASCII byte) keeps a meaning POSIX does not give it.
pub(crate) fn translate(pattern: &[u8], extended: bool) -> Result<String, KernelError> {
    let bad = |why: &str| {
        KernelError::BadArguments(format!(
            "grep pattern {:?}: {why}",
            String::from_utf8_lossy(pattern)
        ))
    };
    let mut out = Translation::default();
    let mut i = 0;
    while i < pattern.len() {
        let Some(tok) = token(pattern, &mut i, extended, &out).map_err(|why| bad(&why))? else {
            continue;
        };
        out.push(tok).map_err(bad)?;
    }
    if out.depth > 0 {
        return Err(bad(if extended {
            "unmatched ("
        } else {
            "unmatched \\("
        }));
    }
    Ok(out.text)
}

/// What a piece of a POSIX pattern means: an operator or an atom.
enum Tok {
    Atom(String),
    Repeat(String),
    Open,
    Close,
    Alt,
    Anchor(&'static str),
}

/// A pattern being translated.
#[derive(Default)]
struct Translation {
    text: String,
    /// Where the last atom (what a repetition applies to) begins in `text`;
    /// None at the start of an expression, where GNU reads a repetition
    /// operator as a literal (BRE) or as repeating nothing (ERE).
    atom: Option<usize>,
    after_repeat: bool,
    /// Groups open.
    depth: usize,
}

impl Translation {
    fn push(&mut self, tok: Tok) -> Result<(), &'static str> {
        let out = &mut self.text;
        match tok {
            Tok::Atom(s) => {
                self.atom = Some(out.len());
                self.after_repeat = false;
                out.push_str(&s);
            }
            Tok::Repeat(op) => {
                let Some(at) = self.atom else {
                    return Err("repetition without an operand");
                };
                if self.after_repeat {
                    // `a**` is `(a*)*`: the regex crate wants the group.
                    out.insert_str(at, "(?:");
                    out.push(')');
                }
                out.push_str(&op);
                self.after_repeat = true;
            }
            Tok::Open => {
                self.depth += 1;
                out.push_str("(?:");
                self.atom = None;
                self.after_repeat = false;
            }
            Tok::Close => {
                if self.depth == 0 {
                    return Err("unmatched \\)");
                }
                self.depth -= 1;
                // The group is the atom: find where it opened.
                let open = group_start(out);
                out.push(')');
                self.atom = Some(open);
                self.after_repeat = false;
            }
            Tok::Alt | Tok::Anchor(_) => {
                match tok {
                    Tok::Anchor(a) => out.push_str(a),
                    _ => out.push('|'),
                }
                self.atom = None;
                self.after_repeat = false;
            }
        }
        Ok(())
    }
}

/// Reads what the pattern means at `*i` and moves `*i` past it; None for
/// what GNU grep ignores (a repetition of nothing in an ERE).
fn token(
    pattern: &[u8],
    i: &mut usize,
    extended: bool,
    out: &Translation,
) -> Result<Option<Tok>, String> {
    let c = pattern[*i];
    *i += 1;
    let has_atom = out.atom.is_some();
    let tok = match (c, extended) {
        (b'\\', _) => return escape(pattern, i, extended, has_atom).map(Some),
        (b'[', _) => {
            let (class, next) = bracket(pattern, *i)?;
            *i = next;
            Tok::Atom(class)
        }
        (b'.', _) => Tok::Atom(".".into()),
        (b'*', _) if has_atom => Tok::Repeat("*".into()),
        (b'*', true) => return Ok(None),
        (b'+' | b'?', true) if has_atom => Tok::Repeat((c as char).to_string()),
        (b'+' | b'?', true) => return Ok(None),
        (b'{', true) => match interval(pattern, *i, b"}") {
            Some((rep, next)) => {
                *i = next;
                if !has_atom {
                    return Ok(None);
                }
                Tok::Repeat(rep)
            }
            // GNU reads a `{` that starts no valid interval as a literal.
            None => Tok::Atom(literal(b'{')),
        },
        (b'(', true) => Tok::Open,
        (b')', true) if out.depth > 0 => Tok::Close,
        (b'|', true) => Tok::Alt,
        (b'^', true) => Tok::Anchor("^"),
        (b'$', true) => Tok::Anchor("$"),
        // In a BRE, `^` anchors only where an expression starts and `$`
        // only where one ends.
        (b'^', false) if !has_atom && starts_expression(&out.text) => Tok::Anchor("^"),
        (b'$', false)
            if *i == pattern.len()
                || pattern[*i..].starts_with(b"\\)")
                || pattern[*i..].starts_with(b"\\|") =>
        {
            Tok::Anchor("$")
        }
        _ => Tok::Atom(literal(c)),
    };
    Ok(Some(tok))
}

/// Reads the escape whose `\` is just before `*i` and moves `*i` past it.
fn escape(pattern: &[u8], i: &mut usize, extended: bool, has_atom: bool) -> Result<Tok, String> {
    let Some(&e) = pattern.get(*i) else {
        return Err("trailing backslash".into());
    };
    *i += 1;
    Ok(match (e, extended) {
        (b'1'..=b'9', _) => return Err("back-references (\\1 to \\9) are not supported".into()),
        (b'(', false) => Tok::Open,
        (b')', false) => Tok::Close,
        (b'|', false) => Tok::Alt,
        (b'+' | b'?', false) if has_atom => Tok::Repeat((e as char).to_string()),
        (b'{', false) if has_atom => {
            let (rep, next) =
                interval(pattern, *i, b"\\}").ok_or("unmatched or invalid \\{...\\}")?;
            *i = next;
            Tok::Repeat(rep)
        }
        (b'w', _) => Tok::Atom("[_[:alnum:]]".into()),
        (b'W', _) => Tok::Atom("[^_[:alnum:]]".into()),
        (b's', _) => Tok::Atom("[[:space:]]".into()),
        (b'S', _) => Tok::Atom("[^[:space:]]".into()),
        (b'b', _) => Tok::Anchor(r"\b"),
        (b'B', _) => Tok::Anchor(r"\B"),
        (b'<', _) => Tok::Anchor(r"\b{start}"),
        (b'>', _) => Tok::Anchor(r"\b{end}"),
        (b'`', _) => Tok::Anchor("^"),
        (b'\'', _) => Tok::Anchor("$"),
        // GNU warns about a stray `\` and matches the byte.
        _ => Tok::Atom(literal(e)),
    })
}

/// Whether `out` ends where a BRE expression starts (the pattern's start,
/// after a group's opening or an alternation).
fn starts_expression(out: &str) -> bool {
    out.is_empty() || out.ends_with("(?:") || out.ends_with('|')
}

/// Where the group that `out` ends inside begins: the `(?:` whose `)` is
/// about to be written. Escapes are `\xNN` and classes are bracketed, so
/// parentheses in `out` are only groups' (and `(?:` is never escaped).
fn group_start(out: &str) -> usize {
    let bytes = out.as_bytes();
    let mut in_class = 0usize;
    let mut opens = Vec::new();
    let mut j = 0;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 1,
            b'[' => in_class += 1,
            b']' if in_class > 0 => in_class -= 1,
            b'(' if in_class == 0 => {
                opens.push(j);
            }
            b')' if in_class == 0 => {
                opens.pop();
            }
            _ => {}
        }
        j += 1;
    }
    opens.last().copied().unwrap_or(0)
}

/// A literal byte in the regex crate's syntax.
fn literal(b: u8) -> String {
    if b.is_ascii_alphanumeric() {
        (b as char).to_string()
    } else {
        format!("\\x{b:02X}")
    }
}

/// Reads an interval `m}`, `m,}`, `,n}` or `m,n}` (after its opening brace,
/// `close` its closing) at `i`; None if it is not one.
fn interval(pattern: &[u8], i: usize, close: &[u8]) -> Option<(String, usize)> {
    let rest = &pattern[i..];
    let end = rest.windows(close.len()).position(|w| w == close)?;
    let body = std::str::from_utf8(&rest[..end]).ok()?;
    let (min, max) = match body.split_once(',') {
        None => (body, Some(body)),
        Some((a, b)) => (a, if b.is_empty() { None } else { Some(b) }),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(min.is_empty() || digits(min)) || !max.is_none_or(digits) {
        return None;
    }
    let min: u32 = if min.is_empty() { 0 } else { min.parse().ok()? };
    let rep = match max {
        None => format!("{{{min},}}"),
        Some(m) => {
            let max: u32 = m.parse().ok()?;
            if max < min {
                return None;
            }
            format!("{{{min},{max}}}")
        }
    };
    Some((rep, i + end + close.len()))
}

/// Reads a POSIX bracket expression whose `[` is just before `i`; returns
/// the class in the regex crate's syntax and where the pattern goes on.
fn bracket(pattern: &[u8], mut i: usize) -> Result<(String, usize), String> {
    const CLASSES: [&str; 12] = [
        "alpha", "digit", "alnum", "upper", "lower", "space", "blank", "punct", "print", "graph",
        "cntrl", "xdigit",
    ];
    let mut out = String::from("[");
    if pattern.get(i) == Some(&b'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let Some(&c) = pattern.get(i) else {
            return Err("unmatched [".into());
        };
        if c == b']' && !first {
            out.push(']');
            return Ok((out, i + 1));
        }
        first = false;
        // `[:class:]`, `[=c=]`, `[.c.]`.
        if c == b'[' && matches!(pattern.get(i + 1), Some(b':' | b'=' | b'.')) {
            let kind = pattern[i + 1];
            let body_start = i + 2;
            let close = [kind, b']'];
            let Some(len) = pattern[body_start..].windows(2).position(|w| w == close) else {
                return Err("unmatched [".into());
            };
            let body = &pattern[body_start..body_start + len];
            i = body_start + len + 2;
            if kind == b':' {
                let name = String::from_utf8_lossy(body);
                if !CLASSES.contains(&name.as_ref()) {
                    return Err(format!("invalid character class [:{name}:]"));
                }
                out.push_str(&format!("[:{name}:]"));
            } else if body.len() == 1 {
                out.push_str(&literal(body[0]));
            } else {
                return Err("multi-character collating elements are not supported".into());
            }
            continue;
        }
        i += 1;
        if pattern.get(i) == Some(&b'-') && pattern.get(i + 1).is_some_and(|&d| d != b']') {
            let d = pattern[i + 1];
            if d < c {
                return Err("invalid range end".into());
            }
            out.push_str(&format!("{}-{}", literal(c), literal(d)));
            i += 2;
        } else {
            out.push_str(&literal(c));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_posix_syntax() {
        let t = |p: &str, e| translate(p.as_bytes(), e).unwrap();
        assert_eq!(t(r"a\(b\)*", false), r"a(?:b)*");
        assert_eq!(t("a(b)+", false), r"a\x28b\x29\x2B");
        assert_eq!(t("*a", false), r"\x2Aa");
        assert_eq!(t("*a", true), "a");
        assert_eq!(t(r"a\{2,3\}", false), "a{2,3}");
        assert_eq!(t("a{,3}", true), "a{0,3}");
        assert_eq!(t("a{x", true), r"a\x7Bx");
        assert_eq!(t(r"[]a\]", true), r"[\x5Da\x5C]");
        assert_eq!(t("a**", true), "(?:a*)*");
        assert_eq!(t("x^y$z$", false), r"x\x5Ey\x24z$");
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        for (p, e) in [
            (r"\(a\)\1", false),
            ("a\\", true),
            ("[a", true),
            (r"\(a", false),
            ("(a", true),
            ("[[:nope:]]", true),
            ("[z-a]", true),
            (r"a\{1", false),
        ] {
            let err = translate(p.as_bytes(), e).unwrap_err();
            assert!(matches!(err, KernelError::BadArguments(_)), "{p}: {err}");
        }
    }
}
