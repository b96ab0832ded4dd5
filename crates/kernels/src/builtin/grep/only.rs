//! What `grep -o` prints of a line: [`OnlyMatching`].

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input, MatchKind};

use crate::error::KernelError;
use crate::spec::{GrepSpec, GrepSyntax};

/// Finds the matches GNU grep 3.8's `-o` prints of a line.
pub(super) struct OnlyMatching {
    /// Where the leftmost match starts.
    leftmost: Regex,
    /// The same expression with POSIX's choice among the matches that
    /// start at one place, the longest: an anchored search that matches
    /// as much as it can (the regex crate picks as Perl does).
    longest: Regex,
    /// `-x` with `-w` (regular expressions): GNU grep 3.8's `-o` then prints a matching line
    /// whole with its newline (its `-x` test hands the match on as running
    /// to the line's end, newline included), so an empty line follows.
    through_newline: bool,
    /// `-x` without `-w` (regular expressions): the bare patterns look
    /// for matches.
    outside: bool,
}

impl OnlyMatching {
    /// For lines selected by `selecting` (`any` of the patterns, wrapped
    /// for `-x` or `-w`). For regular expressions, GNU grep's
    /// `-o` looks for matches of the bare patterns under `-x` alone (its
    /// `-x` test is skipped when it looks inside a line), so a line printed
    /// with matches that is not a whole match (a context line after `-m`
    /// with `-v`) shows its pieces.
    pub(super) fn new(
        any: &str,
        selecting: &str,
        spec: &GrepSpec,
    ) -> Result<OnlyMatching, KernelError> {
        // GNU grep reads a single -F pattern with -w as a regular
        // expression in the C locale (it finds words faster that way).
        let distinct: std::collections::BTreeSet<&String> = spec.patterns.iter().collect();
        let regex = spec.syntax != GrepSyntax::Fixed || (spec.word && distinct.len() == 1);
        let (whole_line, word) = (spec.whole_line, spec.word);
        let pattern = if regex && whole_line && !word {
            any
        } else {
            selecting
        };
        let syntax = regex_automata::util::syntax::Config::new()
            .unicode(false)
            .utf8(false)
            .multi_line(true)
            .case_insensitive(spec.ignore_case);
        let build = |kind: MatchKind| {
            Regex::builder()
                .syntax(syntax)
                .configure(Regex::config().match_kind(kind).utf8_empty(false))
                .build(pattern)
                .map_err(|e| KernelError::BadArguments(format!("grep pattern {pattern:?}: {e}")))
        };
        Ok(OnlyMatching {
            leftmost: build(MatchKind::LeftmostFirst)?,
            longest: build(MatchKind::All)?,
            through_newline: regex && whole_line && word,
            outside: regex && whole_line && !word,
        })
    }

    /// Whether a line that does not match may show matches: under `-x`
    /// alone, whose test `-o` skips.
    pub(super) fn matches_outside(&self) -> bool {
        self.outside
    }

    /// The non-empty matches of `line` (without its newline), as (offset,
    /// bytes): at each place the leftmost match starts, the longest one
    /// there; after an empty match the search goes on one byte later.
    pub(super) fn matches(&self, line: &[u8]) -> Vec<(u64, Vec<u8>)> {
        if self.through_newline {
            if !self.leftmost.is_match(line) {
                return Vec::new();
            }
            let mut whole = line.to_vec();
            whole.push(b'\n');
            return vec![(0, whole)];
        }
        let mut out = Vec::new();
        let mut at = 0usize;
        while at < line.len() {
            let Some(m) = self.leftmost.search(&Input::new(line).range(at..)) else {
                break;
            };
            let start = m.start();
            let input = Input::new(line).range(start..).anchored(Anchored::Yes);
            let end = self
                .longest
                .search(&input)
                .map_or(m.end(), |l| l.end().max(m.end()));
            if end == start {
                at = start + 1;
                continue;
            }
            out.push((start as u64, line[start..end].to_vec()));
            at = end;
        }
        out
    }
}
