//! The lines a grep part keeps, so that selected lines, their context
//! (`-A`, `-B`, `-C`) and the limit of `-m` come out as GNU grep prints
//! them however the target is cut into ranges.
//!
//! A part decides the lines that lie wholly inside its range (its head and
//! tail wait for their neighbours) and keeps those an answer may print:
//!
//! - its selected lines, at most `-m` of them (a selected line after that
//!   is only context: GNU grep prints up to `-A` lines after the `-m`-th
//!   selected line as context, whether they match or not);
//! - lines within `-B` before or `-A` after one of those;
//! - its first `-A` lines, which may follow a selected line of an earlier
//!   range, and, unless it has all its `-m` selected lines, its last `-B`
//!   lines, which may precede one of a later range.
//!
//! Joining two parts decides the line across the cut, counts the right's
//! selected lines against `-m` after the left's, and drops what the joined
//! part no longer needs: the left's last lines and the right's first ones
//! now have neighbours that are known. [`ScanKernel::finish`] decides the
//! target's first and last lines and keeps only what is printed.
//!
//! [`ScanKernel::finish`]: crate::scan::ScanKernel::finish

use super::{Grep, GrepPart};
use crate::output::{LineBlock, LineRun, MatchLine};

/// Most bytes of text one block of selected lines takes in before the
/// next lines start another: what the entry node holds back of a block
/// (its last line, or the lines past GNU grep's piece) is cut out of it,
/// so this bounds no memory, only how much one append copies.
const MAX_BLOCK_BYTES: usize = 1 << 20;

/// A block up to this size is moved to a larger buffer to take a line in
/// (the buffer doubles: a copy per byte at most, amortized); a larger one
/// with no room left is followed by a new block instead.
const MOVABLE_BLOCK_BYTES: usize = 64 << 10;

/// A matching line of a block: its number in the block (0 first), its
/// first byte and its newline.
pub(super) struct Span {
    pub(super) line: u64,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl Grep {
    /// Decides one whole line (without its newline), line `rel` of the
    /// part, starting at `offset` in the target.
    pub(super) fn decide(&self, p: &mut GrepPart, line: &[u8], rel: u64, offset: u64) {
        let weight = self.count_of(line);
        self.keep(p, line, rel, offset, weight);
    }

    /// Records a decided line: selected when `weight` (the lines GNU grep
    /// counts in it) is not 0, kept when an answer may print it.
    fn keep(&self, p: &mut GrepPart, text: &[u8], rel: u64, offset: u64, weight: u64) {
        let selected = weight > 0;
        if selected {
            p.count = p.count.saturating_add(weight).min(self.cap);
        }
        if !self.want_lines {
            return;
        }
        let context = !(selected && p.selected < self.cap);
        if !context {
            p.selected += 1;
        } else if self.before == 0 && self.after == 0 {
            return;
        }
        if !context && self.only.is_none() {
            self.keep_selected(p, text, rel, offset);
            return;
        }
        let (kept, matches) = match &self.only {
            None => (text.to_vec(), Vec::new()),
            // -o prints the matches of the selected lines, or with -v of
            // the context lines.
            Some(only) if context == self.invert => (Vec::new(), only.matches(text)),
            // With -v, a selected line may turn into context when the
            // parts before it fill -m: its text is kept when it may then
            // show matches.
            Some(only) if self.invert && self.cap < u64::MAX && only.matches_outside() => {
                (text.to_vec(), Vec::new())
            }
            Some(_) => (Vec::new(), Vec::new()),
        };
        p.lines.push(LineRun::One(MatchLine {
            line_number: rel,
            byte_offset: offset,
            text: kept,
            len_bytes: text.len() as u64,
            context,
            matches,
        }));
    }

    /// Adds a selected line (without its newline) to the part's last
    /// block when it follows that block's last line, else starts a block.
    fn keep_selected(&self, p: &mut GrepPart, text: &[u8], rel: u64, offset: u64) {
        if let Some(LineRun::Block(b)) = p.lines.last_mut() {
            // A large block whose buffer is full (one that came off the
            // wire: the line across two parts' cut) is not moved for a line.
            let cheap = b.spare_bytes() > text.len() || b.text().len() < MOVABLE_BLOCK_BYTES;
            if follows(b, rel, offset)
                && cheap
                && b.text().len() + text.len() < MAX_BLOCK_BYTES
                && b.push_line(text).is_ok()
            {
                return;
            }
        }
        p.lines.push(match LineBlock::one(rel, offset, text) {
            Ok(b) => LineRun::Block(b),
            // Past the largest offset: no block, the line alone.
            Err(_) => LineRun::One(MatchLine {
                line_number: rel,
                byte_offset: offset,
                text: text.to_vec(),
                len_bytes: text.len() as u64,
                context: false,
                matches: Vec::new(),
            }),
        });
    }

    /// Keeps complete lines (`text`, each with its newline), all selected,
    /// the first line `rel` of the part at `offset`, as one block (the
    /// part's count and selected lines are the caller's); false when they
    /// do not fit one.
    pub(super) fn keep_selected_block(
        &self,
        p: &mut GrepPart,
        text: &[u8],
        rel: u64,
        offset: u64,
    ) -> bool {
        if let Some(LineRun::Block(b)) = p.lines.last_mut() {
            if follows(b, rel, offset)
                && b.text().len() + text.len() <= MAX_BLOCK_BYTES
                && b.push_lines(text).is_ok()
            {
                return true;
            }
        }
        match LineBlock::new(rel, offset, text.to_vec()) {
            Ok(b) => {
                p.lines.push(LineRun::Block(b));
                true
            }
            Err(_) => false,
        }
    }

    /// Decides the complete lines of `slice` (`slice_lines` of them, the
    /// first line `rel` of the part at `offset` in the target), whose
    /// matching lines are `spans`: runs of lines between them are either
    /// all selected (with -v) or all not, and of a run not selected only
    /// the first `-A` and the last `-B` lines can be context.
    pub(super) fn walk(
        &self,
        p: &mut GrepPart,
        slice: &[u8],
        slice_lines: u64,
        rel: u64,
        offset: u64,
        spans: &[Span],
    ) {
        let mut at = 0usize;
        let mut line = 0u64;
        for span in spans {
            if !self.run(p, slice, (at, span.start), (line, span.line), rel, offset) {
                return;
            }
            let text = &slice[span.start..span.end];
            let weight = if self.invert {
                0
            } else {
                self.count_of_matching(text)
            };
            self.keep(p, text, rel + span.line, offset + span.start as u64, weight);
            at = span.end + 1;
            line = span.line + 1;
            if self.is_full(p) {
                self.trailing(p, slice, at, rel + line, offset);
                return;
            }
        }
        self.run(
            p,
            slice,
            (at, slice.len()),
            (line, slice_lines),
            rel,
            offset,
        );
    }

    /// Decides a run of lines of `slice` that do not match: bytes
    /// `bytes.0..bytes.1`, lines `lines.0..lines.1` of the slice. False
    /// when the part has all its `-m` selected lines.
    fn run(
        &self,
        p: &mut GrepPart,
        slice: &[u8],
        bytes: (usize, usize),
        lines: (u64, u64),
        rel: u64,
        offset: u64,
    ) -> bool {
        let (at, end) = bytes;
        if at >= end {
            return true;
        }
        if self.invert {
            let mut start = at;
            for (i, nl) in memchr::memchr_iter(b'\n', &slice[at..end]).enumerate() {
                let n = rel + lines.0 + i as u64;
                self.keep(p, &slice[start..at + nl], n, offset + start as u64, 1);
                start = at + nl + 1;
                if self.is_full(p) {
                    self.trailing(p, slice, start, n + 1, offset);
                    return false;
                }
            }
            return true;
        }
        let count = lines.1.saturating_sub(lines.0);
        let first = self.after.min(count);
        let start = self.context_lines(p, &slice[..end], at, first, rel + lines.0, offset);
        let last = self.before.min(count - first);
        if last > 0 {
            // Back over the run's last `last` newlines to where its last
            // lines start.
            let mut from = end;
            for _ in 0..last {
                if from <= start {
                    break;
                }
                from = memchr::memrchr(b'\n', &slice[start..from - 1])
                    .map_or(start, |i| start + i + 1);
            }
            self.context_lines(p, &slice[..end], from, last, rel + lines.1 - last, offset);
        }
        true
    }

    /// Keeps up to `-A` lines from `at` on as context: what follows the
    /// part's last selected line once it has all `-m` of them.
    pub(super) fn trailing(
        &self,
        p: &mut GrepPart,
        slice: &[u8],
        at: usize,
        rel: u64,
        offset: u64,
    ) {
        self.context_lines(p, slice, at, self.after, rel, offset);
    }

    /// Records up to `n` lines of `slice` from `at` (line `rel` of the
    /// part) as lines not selected; returns where the next line starts.
    fn context_lines(
        &self,
        p: &mut GrepPart,
        slice: &[u8],
        at: usize,
        n: u64,
        rel: u64,
        offset: u64,
    ) -> usize {
        let mut start = at;
        for i in 0..n {
            let Some(nl) = memchr::memchr(b'\n', &slice[start.min(slice.len())..]) else {
                break;
            };
            let end = start + nl;
            self.keep(p, &slice[start..end], rel + i, offset + start as u64, 0);
            start = end + 1;
        }
        start
    }

    /// Appends the kept lines of the range after `p`'s, numbered from
    /// `shift`: their selected lines count against `-m` after `p`'s.
    pub(super) fn append(&self, p: &mut GrepPart, lines: Vec<LineRun>, shift: u64) {
        let context_kept = self.before > 0 || self.after > 0;
        for run in lines {
            match run {
                LineRun::One(mut l) => {
                    l.line_number += shift;
                    if !l.context {
                        if p.selected < self.cap {
                            p.selected += 1;
                        } else {
                            l.context = true;
                            // With -v it shows the matches -o finds outside
                            // whole matches, from the text kept for that.
                            match &self.only {
                                Some(only) if self.invert && only.matches_outside() => {
                                    l.matches = only.matches(&l.text);
                                    l.text = Vec::new();
                                }
                                _ => {}
                            }
                        }
                    }
                    if !l.context || context_kept {
                        p.lines.push(LineRun::One(l));
                    }
                }
                LineRun::Block(mut b) => {
                    // A block whose numbers would pass u64 (only from a
                    // malformed part) keeps its own.
                    b.renumber(b.first_line().saturating_add(shift), b.byte_offset());
                    self.append_block(p, b);
                }
            }
        }
    }

    /// Appends a block of selected lines: those past `-m` become context,
    /// of which only the first `-A` can be printed (no selected line
    /// follows them).
    fn append_block(&self, p: &mut GrepPart, mut b: LineBlock) {
        let room = self.cap.saturating_sub(p.selected);
        if b.lines() <= room {
            p.selected += b.lines();
            p.lines.push(LineRun::Block(b));
            return;
        }
        p.selected = self.cap;
        let rest = if room == 0 {
            b
        } else {
            let Some(rest) = b.split_off(room) else {
                return;
            };
            p.lines.push(LineRun::Block(b));
            rest
        };
        for (line_number, byte_offset, text) in rest.each().take(self.after as usize) {
            p.lines.push(LineRun::One(MatchLine {
                line_number,
                byte_offset,
                text: text.to_vec(),
                len_bytes: text.len() as u64,
                context: true,
                matches: Vec::new(),
            }));
        }
    }

    /// Drops the kept lines numbered `from_line` or more that no answer can
    /// print (lines before were judged when they were kept, and lines added
    /// since lie too far after them to change that). `whole`: `p` is a
    /// whole target, with no neighbours to wait for. `prior_selected`: the
    /// last selected line a drain took from `p`, if any. Context lines are
    /// single lines; selected ones are always kept.
    pub(super) fn prune(
        &self,
        p: &mut GrepPart,
        from_line: u64,
        whole: bool,
        prior_selected: Option<u64>,
    ) {
        if self.before == 0 && self.after == 0 {
            // Only selected lines are kept.
            return;
        }
        let (after, before) = (self.after, self.before);
        let from = p.lines.partition_point(|l| l.first_line() < from_line);
        if from == p.lines.len() {
            return;
        }
        let full = p.selected >= self.cap;
        let n = p.newlines;
        // The nearest selected line before `from` that lines from `from`
        // on may follow as context: the lines kept between lie within
        // `-A` lines of `from_line`.
        let reach = from_line.saturating_sub(after);
        let mut last_selected = p.lines[..from]
            .iter()
            .rev()
            .take_while(|l| l.last_line() >= reach)
            .find(|l| !l.context())
            .map(LineRun::last_line)
            .or(prior_selected);
        let next_selected = next_selected_lines(&p.lines[from..], None);
        let mut kept = from;
        for i in from..p.lines.len() {
            let (line, context) = (p.lines[i].first_line(), p.lines[i].context());
            let needed = !context
                || last_selected.is_some_and(|s| line.saturating_sub(s) <= after)
                || next_selected[i - from].is_some_and(|s| s.saturating_sub(line) <= before)
                || (!whole && line <= after)
                || (!whole && !full && line + before >= n);
            if !context {
                last_selected = Some(p.lines[i].last_line());
            }
            if needed {
                p.lines.swap(kept, i);
                kept += 1;
            }
        }
        p.lines.truncate(kept);
    }
}

/// For each run, the first selected line after it (`then` after the last).
fn next_selected_lines(lines: &[LineRun], then: Option<u64>) -> Vec<Option<u64>> {
    let mut next_selected = vec![None; lines.len()];
    let mut next = then;
    for (i, l) in lines.iter().enumerate().rev() {
        next_selected[i] = next;
        if !l.context() {
            next = Some(l.first_line());
        }
    }
    next_selected
}

/// GNU grep reads a file in pieces of this size and withholds lines from
/// the piece holding the first NUL on (`crates/cli/src/grep_output.rs`):
/// a drain leaves the lines from there on for `finish`, so the printer
/// sees them together.
const GNU_GREP_READ_BYTES: u64 = 96 * 1024;

impl Grep {
    /// A line as an answer prints it: numbered from 1, its offset from the
    /// target's start, and under `-o` only the matches GNU grep prints
    /// (those of the selected lines, or with -v of the context lines).
    pub(super) fn printable(&self, l: &mut LineRun, start: u64) {
        match l {
            LineRun::One(l) => {
                l.line_number += 1;
                l.byte_offset -= start;
                if l.context != self.invert {
                    l.matches.clear();
                }
                if self.only.is_some() {
                    l.text.clear();
                }
            }
            LineRun::Block(b) => {
                b.renumber(
                    b.first_line().saturating_add(1),
                    b.byte_offset().saturating_sub(start),
                );
            }
        }
    }

    /// Decides the target's first line of `p`, a part from the target's
    /// start with a newline, as `finish` would, so that its lines are in
    /// target order from the first on.
    fn settle_head(&self, p: &mut GrepPart) {
        let mut out = GrepPart {
            start: p.start,
            end: p.end,
            newlines: p.newlines,
            head: Vec::new(),
            count: 0,
            lines: Vec::new(),
            tail: std::mem::take(&mut p.tail),
            first_nul: p.first_nul,
            selected: 0,
            head_settled: true,
            drained_selected: None,
        };
        let head = std::mem::take(&mut p.head);
        self.decide(&mut out, &head, 0, p.start);
        out.count = out.count.saturating_add(p.count).min(self.cap);
        self.append(&mut out, std::mem::take(&mut p.lines), 0);
        *p = out;
    }

    /// Takes from `p`, the part of a target's first bytes, the lines an
    /// answer prints whatever the bytes after it hold, in target order and
    /// as `finish` gives them. Left in `p`: its last selected line and the
    /// lines after it, its last `-B` lines (a later selected line may want
    /// them), and the lines of GNU grep's 96 KiB piece that holds its first
    /// NUL or its end and after (the printer judges binary data as a whole).
    /// A block is cut where lines must stay.
    pub(super) fn drain_final(&self, p: &mut GrepPart) -> Vec<LineRun> {
        if !self.want_lines || p.newlines == 0 || p.start != 0 {
            return Vec::new();
        }
        if !p.head_settled {
            self.settle_head(p);
        }
        let guard = p.first_nul.unwrap_or(p.end);
        let guard = guard - guard % GNU_GREP_READ_BYTES;
        let Some(mut last) = p.lines.iter().rposition(|l| !l.context()) else {
            return Vec::new();
        };
        // The last selected line stays, not the block it ends.
        if let LineRun::Block(b) = &mut p.lines[last] {
            if let Some(rest) = b.split_off(b.lines() - 1) {
                p.lines.insert(last + 1, LineRun::Block(rest));
                last += 1;
            }
        }
        let k = self.first_staying(p, last, guard);
        let taken: Vec<LineRun> = p.lines.drain(..k).collect();
        // The next selected line after each taken one (the part's last
        // selected line stays, so there is one).
        let then = p
            .lines
            .iter()
            .find(|l| !l.context())
            .map(LineRun::first_line);
        let next_selected = next_selected_lines(&taken, then);
        let mut prev = p.drained_selected;
        let mut out = Vec::with_capacity(taken.len());
        for (mut l, next) in taken.into_iter().zip(next_selected) {
            let line = l.first_line();
            let needed = !l.context()
                || prev.is_some_and(|s| line.saturating_sub(s) <= self.after)
                || next.is_some_and(|s| s.saturating_sub(line) <= self.before);
            if !l.context() {
                prev = Some(l.last_line());
            }
            if needed {
                self.printable(&mut l, p.start);
                out.push(l);
            }
        }
        p.drained_selected = prev;
        out
    }

    /// The first of `p`'s runs before run `last` that must stay: it holds
    /// one of the last `-B` lines or reaches GNU grep's piece from
    /// `guard` on (a block that does is cut there first), else `last`.
    fn first_staying(&self, p: &mut GrepPart, last: usize, guard: u64) -> usize {
        let n = p.newlines;
        for i in 0..last {
            let l = &mut p.lines[i];
            if l.last_line().saturating_add(self.before) < n && l.end_offset() < guard {
                continue;
            }
            if let LineRun::Block(b) = l {
                // Its first line that must stay.
                let by_number = n.saturating_sub(self.before).saturating_sub(b.first_line());
                let by_offset = if guard > b.end_offset() {
                    b.lines()
                } else {
                    let before_guard = guard.saturating_sub(b.byte_offset()) as usize;
                    memchr::memchr_iter(b'\n', &b.text()[..before_guard]).count() as u64
                };
                if let Some(rest) = b.split_off(by_number.min(by_offset)) {
                    p.lines.insert(i + 1, LineRun::Block(rest));
                    return i + 1;
                }
            }
            return i;
        }
        last
    }
}

/// Whether the line numbered `rel` at `offset` follows `b`'s last line.
fn follows(b: &LineBlock, rel: u64, offset: u64) -> bool {
    b.last_line().checked_add(1) == Some(rel) && b.end_offset().checked_add(1) == Some(offset)
}
