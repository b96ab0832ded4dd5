//! A command line as memcached's tokenizer sees it (proto_text.c,
//! `tokenize_command`): words are split on spaces only (a tab is part of a
//! word), runs of spaces count as one, and the line ends at its first NUL
//! (memcached measures it with `strlen`).

use std::ops::Range;

use crate::Limits;

/// memcached's `MAX_TOKENS` (24) less its end marker: it looks at no more
/// than this many words of a line (a `get` re-reads the rest for keys).
pub(crate) const MAX_WORDS: usize = 23;

/// The line up to its first NUL.
pub(crate) fn until_nul(line: &[u8]) -> &[u8] {
    match memchr::memchr(0, line) {
        Some(nul) => &line[..nul],
        None => line,
    }
}

/// The spans of a line's words, in order.
#[derive(Clone)]
pub(crate) struct WordSpans<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> WordSpans<'a> {
    pub(crate) fn new(line: &'a [u8]) -> Self {
        WordSpans { line, at: 0 }
    }
}

impl Iterator for WordSpans<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let rest = self.line.get(self.at..)?;
        let start = self.at + rest.iter().position(|&b| b != b' ')?;
        let end = memchr::memchr(b' ', &self.line[start..]).map_or(self.line.len(), |n| start + n);
        self.at = end;
        Some(start..end)
    }
}

/// The first words of a line: all memcached looks at for every command
/// but the retrievals. `len` stops at `MAX_WORDS + 1`, enough to tell a
/// line with more words than memcached reads.
pub(crate) struct Head<'a> {
    words: [&'a [u8]; MAX_WORDS + 1],
    len: usize,
}

impl<'a> Head<'a> {
    pub(crate) fn new(line: &'a [u8]) -> Self {
        let mut head = Head {
            words: [&[][..]; MAX_WORDS + 1],
            len: 0,
        };
        for (slot, span) in head.words.iter_mut().zip(WordSpans::new(line)) {
            *slot = &line[span];
            head.len += 1;
        }
        head
    }

    /// Words on the line, or `MAX_WORDS + 1` if there are more.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Word `i`, or empty past the end.
    pub(crate) fn word(&self, i: usize) -> &'a [u8] {
        if i < self.len {
            self.words[i]
        } else {
            &[]
        }
    }

    /// The words from `i` on (at most `MAX_WORDS + 1` in all).
    pub(crate) fn words_from(&self, i: usize) -> &[&'a [u8]] {
        self.words.get(i..self.len).unwrap_or(&[])
    }

    /// The last word memcached's tokenizer split off: where it looks for
    /// `noreply` and for `HTTP/`.
    pub(crate) fn last(&self) -> &'a [u8] {
        self.word(self.len.min(MAX_WORDS).saturating_sub(1))
    }

    /// Whether the last word is `noreply` (`set_noreply_maybe`).
    pub(crate) fn says_noreply(&self) -> bool {
        self.last() == b"noreply"
    }
}

/// An unsigned decimal: digits, optionally after `+`.
pub(crate) fn parse_u64(word: &[u8]) -> Option<u64> {
    let digits = word.strip_prefix(b"+").unwrap_or(word);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// An unsigned decimal that fits 32 bits.
pub(crate) fn parse_u32(word: &[u8]) -> Option<u32> {
    parse_u64(word).and_then(|n| u32::try_from(n).ok())
}

/// A signed decimal: digits after an optional `+` or `-`.
pub(crate) fn parse_i64(word: &[u8]) -> Option<i64> {
    let (negative, digits) = match word.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, word),
    };
    if digits.first() == Some(&b'+') {
        return None;
    }
    let magnitude = i128::from(parse_u64(digits)?);
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// Whether a text key keeps the rules: 1 to `max_key_bytes` bytes, no
/// control character and no space (protocol.txt, "Keys"; memcached itself
/// checks only the length).
pub(crate) fn is_text_key(key: &[u8], limits: &Limits) -> bool {
    !key.is_empty()
        && key.len() <= limits.max_key_bytes
        && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_on_spaces_only() {
        let line = b"  get a\tb  c ";
        let words: Vec<&[u8]> = WordSpans::new(line).map(|s| &line[s]).collect();
        assert_eq!(words, [&b"get"[..], b"a\tb", b"c"]);
        assert_eq!(WordSpans::new(b"   ").count(), 0);
        assert_eq!(until_nul(b"get a\0b"), b"get a");
    }

    #[test]
    fn head_stops_after_memcached_words() {
        let line = (0..30).map(|i| i.to_string()).collect::<Vec<_>>().join(" ");
        let head = Head::new(line.as_bytes());
        assert_eq!(head.len(), MAX_WORDS + 1);
        assert_eq!(head.last(), b"22");
        let head = Head::new(b"set k 0 0 1 noreply");
        assert_eq!(head.len(), 6);
        assert!(head.says_noreply());
        assert_eq!(head.word(9), b"");
    }

    #[test]
    fn numbers_parse_as_strtol_would_but_strictly() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"-0"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"+"), None);
        assert_eq!(parse_u64(b"1x"), None);
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"+-1"), None);
        assert_eq!(parse_i64(b"-+1"), None);
        assert_eq!(parse_i64(b"-"), None);
    }

    #[test]
    fn text_keys() {
        let limits = Limits::default();
        assert!(is_text_key(b"a", &limits));
        assert!(is_text_key("ключ".as_bytes(), &limits));
        assert!(is_text_key(&[b'k'; 250], &limits));
        assert!(!is_text_key(&[b'k'; 251], &limits));
        assert!(!is_text_key(b"", &limits));
        assert!(!is_text_key(b"a\tb", &limits));
        assert!(!is_text_key(b"a\x7f", &limits));
        assert!(!is_text_key(b"a\r", &limits));
    }
}
