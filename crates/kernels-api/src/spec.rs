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

/// Arguments of [`KernelSpec::Grep`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepSpec {
    /// The pattern (one line; a pattern with a newline is refused).
    pub pattern: String,
    /// How `pattern` is read.
    pub syntax: GrepSyntax,
    /// `grep -i`.
    pub ignore_case: bool,
    /// Return the matching lines (text, line number, byte offset), not only
    /// their count.
    pub lines: bool,
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
