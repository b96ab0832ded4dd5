//! What a command asks a kernel to compute: [`KernelSpec`] and its arguments.

use serde::{Deserialize, Serialize};

/// A scan kernel and its arguments, as submitted in a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelSpec {
    /// Minerva's fgrep-8: occurrences of an 8-byte pattern (overlapping ones
    /// included: `aaaaaaaaa` holds `aaaaaaaa` twice).
    Fgrep8 {
        /// The pattern.
        pattern: [u8; 8],
    },
    /// Lines that match a pattern, as GNU grep selects them.
    Grep(GrepSpec),
    /// Lines, words and bytes as GNU wc counts them (C or UTF-8 locale),
    /// the occurrences of one word, and a word histogram.
    Wc(WcSpec),
    /// CRC-32C and SHA-256 of each target's bytes.
    Checksum,
}

/// How a grep pattern is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GrepSyntax {
    /// A literal string (`grep -F`).
    Fixed,
    /// A POSIX basic regular expression (plain `grep`).
    Basic,
    /// A POSIX extended regular expression (`grep -E`).
    Extended,
}

/// Most context lines (`-A`, `-B`) a grep spec may ask for on each side.
pub const MAX_CONTEXT_LINES: u64 = 1 << 20;
/// Most bytes of patterns a grep spec may hold, all patterns together.
pub const MAX_PATTERN_BYTES: usize = 1 << 20;

/// Arguments of [`KernelSpec::Grep`], GNU grep's flags that choose lines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepSpec {
    /// The patterns (`-e`, `-f`): a line matches when any of them does.
    /// None matches no line. Each is one line (a pattern holding a newline
    /// is refused: GNU grep reads it as two, which the caller splits).
    pub patterns: Vec<String>,
    /// How the patterns are read.
    pub syntax: GrepSyntax,
    /// `grep -i`.
    pub ignore_case: bool,
    /// Return the lines (text, line number, byte offset), not only their
    /// count.
    pub lines: bool,
    /// `grep -v`: select the lines that do not match.
    pub invert: bool,
    /// `grep -w`: a match must be a whole word (not preceded or followed by
    /// a letter, digit or underscore).
    pub word: bool,
    /// `grep -x`: a match must be the whole line (wins over `word`, as in
    /// GNU grep).
    pub whole_line: bool,
    /// `grep -o`: return each selected line's non-empty matches, not its
    /// text.
    pub only_matching: bool,
    /// `grep -m N`: select at most N lines of each target (lines after the
    /// N-th are only context).
    pub max_count: Option<u64>,
    /// `grep -B N`: lines of context before each selected line.
    pub before_context: u64,
    /// `grep -A N`: lines of context after each selected line.
    pub after_context: u64,
}

impl GrepSpec {
    /// A spec for one pattern that returns the matching lines, with every
    /// other flag off.
    pub fn new(pattern: impl Into<String>, syntax: GrepSyntax) -> GrepSpec {
        GrepSpec {
            patterns: vec![pattern.into()],
            syntax,
            ignore_case: false,
            lines: true,
            invert: false,
            word: false,
            whole_line: false,
            only_matching: false,
            max_count: None,
            before_context: 0,
            after_context: 0,
        }
    }
}

/// Arguments of [`KernelSpec::Wc`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WcSpec {
    /// Count words (`wc -w`); off, only lines and bytes are counted, at
    /// memchr speed.
    pub words: bool,
    /// Count the occurrences of this word: BlueDBM's word-count accelerator
    /// (a word is what `wc -w` counts as one).
    pub word: Option<Vec<u8>>,
    /// Keep a histogram of every word and return the `top` most frequent.
    pub top: Option<u32>,
    /// Whose word rule: GNU wc's in the C locale or in a UTF-8 one (the
    /// client picks it from its own locale, as wc would).
    pub locale: WcLocale,
}

/// The locale whose word rule [`WcSpec`] follows: what separates words and
/// what makes one differs between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum WcLocale {
    /// `LC_ALL=C`: bytes; the six ASCII spaces separate words, the
    /// printable ASCII bytes make them, every other byte does neither.
    #[default]
    C,
    /// A UTF-8 locale (C.UTF-8, en_US.UTF-8): characters; Unicode spaces
    /// (U+00A0, U+2000..U+200A, U+3000, ...) separate words too, every
    /// printable character makes them, invalid bytes do neither.
    Utf8,
}
