//! How a grep answer's lines travel: [`LineRun`], a run of selected lines
//! as one [`LineBlock`] of text, or one line with what is printed of it.
//!
//! A grep that selects much (`grep ''` selects every line) would pay per
//! line if each line were a record of its own: an allocation where the
//! node keeps it, an encoding at the node, a decoding and an encoding at
//! the entry node and a decoding at the client. A block carries the text of
//! consecutive selected lines as the target holds them, newlines included,
//! with the first line's number and byte offset: the numbers and offsets of
//! the others follow from the newlines, which the printer counts only when
//! it prints them (`-n`, `-b`). Its text is encoded as one byte string
//! (one copy), and decoding checks it (see [`LineBlock`]).

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

use crate::output::MatchLine;

/// Lines of a grep answer, in target order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LineRun {
    /// One line: a context line, or a line of which `-o` prints matches.
    One(MatchLine),
    /// Consecutive selected lines.
    Block(LineBlock),
}

/// Consecutive selected lines of a target, as its bytes: each line with its
/// newline (a target's last line without one is given one, as GNU grep
/// prints it).
///
/// Invariants, checked when one is made or decoded (a malformed block is an
/// error, never a panic later): the text is not empty and ends with a
/// newline; the last line's number and the text's end offset fit a `u64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineBlock {
    first_line: u64,
    byte_offset: u64,
    /// Newlines in `text`: its lines.
    lines: u64,
    text: Vec<u8>,
}

/// Why a block cannot be made of the given text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed block of lines: {0}")]
pub struct BadBlock(&'static str);

impl LineBlock {
    /// A block of the lines in `text` (each ending with a newline), the
    /// first of them line `first_line`, starting at `byte_offset`.
    pub fn new(first_line: u64, byte_offset: u64, text: Vec<u8>) -> Result<LineBlock, BadBlock> {
        if text.last() != Some(&b'\n') {
            return Err(BadBlock("its text does not end with a newline"));
        }
        let lines = memchr::memchr_iter(b'\n', &text).count() as u64;
        if first_line.checked_add(lines).is_none()
            || byte_offset.checked_add(text.len() as u64).is_none()
        {
            return Err(BadBlock("its last line lies past the largest number"));
        }
        Ok(LineBlock {
            first_line,
            byte_offset,
            lines,
            text,
        })
    }

    /// A block of one line (`line` without its newline).
    pub fn one(first_line: u64, byte_offset: u64, line: &[u8]) -> Result<LineBlock, BadBlock> {
        let mut text = Vec::with_capacity(line.len() + 1);
        text.extend_from_slice(line);
        text.push(b'\n');
        LineBlock::new(first_line, byte_offset, text)
    }

    /// The first line's number.
    pub fn first_line(&self) -> u64 {
        self.first_line
    }

    /// The last line's number.
    pub fn last_line(&self) -> u64 {
        self.first_line + self.lines - 1
    }

    /// How many lines.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The offset of the first line's first byte in the target.
    pub fn byte_offset(&self) -> u64 {
        self.byte_offset
    }

    /// The lines, each with its newline.
    pub fn text(&self) -> &[u8] {
        &self.text
    }

    /// The offset in the target of the last line's newline (or of the
    /// target's end, for a last line without one).
    pub fn end_offset(&self) -> u64 {
        self.byte_offset + self.text.len() as u64 - 1
    }

    /// Bytes of memory it holds.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<LineBlock>() + self.text.capacity()
    }

    /// Bytes that can be appended without moving the text.
    pub fn spare_bytes(&self) -> usize {
        self.text.capacity() - self.text.len()
    }

    /// Moves the block: its first line becomes `first_line`, at
    /// `byte_offset`; false (and unchanged) if its last line would lie past
    /// the largest number.
    pub fn renumber(&mut self, first_line: u64, byte_offset: u64) -> bool {
        let fits = first_line.checked_add(self.lines).is_some()
            && byte_offset.checked_add(self.text.len() as u64).is_some();
        if fits {
            self.first_line = first_line;
            self.byte_offset = byte_offset;
        }
        fits
    }

    /// Appends the line that follows the block (`line` without its
    /// newline, starting at the block's end).
    pub fn push_line(&mut self, line: &[u8]) -> Result<(), BadBlock> {
        self.check_room(1, line.len() as u64 + 1)?;
        self.text.extend_from_slice(line);
        self.text.push(b'\n');
        self.lines += 1;
        Ok(())
    }

    /// Appends the lines that follow the block (`text`, each line with its
    /// newline).
    pub fn push_lines(&mut self, text: &[u8]) -> Result<(), BadBlock> {
        if text.last() != Some(&b'\n') {
            return Err(BadBlock("its text does not end with a newline"));
        }
        let lines = memchr::memchr_iter(b'\n', text).count() as u64;
        self.check_room(lines, text.len() as u64)?;
        self.text.extend_from_slice(text);
        self.lines += lines;
        Ok(())
    }

    fn check_room(&self, lines: u64, bytes: u64) -> Result<(), BadBlock> {
        let fits = self
            .first_line
            .checked_add(self.lines)
            .and_then(|n| n.checked_add(lines))
            .is_some()
            && self
                .byte_offset
                .checked_add(self.text.len() as u64)
                .and_then(|n| n.checked_add(bytes))
                .is_some();
        if fits {
            Ok(())
        } else {
            Err(BadBlock("its last line lies past the largest number"))
        }
    }

    /// The lines from the `k`-th (0 first) on, taken out of the block;
    /// `None` when `k` is 0 or not less than its lines (nothing is cut).
    pub fn split_off(&mut self, k: u64) -> Option<LineBlock> {
        if k == 0 || k >= self.lines {
            return None;
        }
        let at = memchr::memchr_iter(b'\n', &self.text).nth(k as usize - 1)? + 1;
        let rest = LineBlock {
            first_line: self.first_line + k,
            byte_offset: self.byte_offset + at as u64,
            lines: self.lines - k,
            text: self.text.split_off(at),
        };
        self.lines = k;
        Some(rest)
    }

    /// The block cut between lines into blocks of at most `max_bytes` of
    /// text each (a line longer than that is a block of its own), each byte
    /// copied once; the block itself when it is no larger.
    pub fn into_pieces(self, max_bytes: usize) -> Vec<LineBlock> {
        let max_bytes = max_bytes.max(1);
        if self.text.len() <= max_bytes {
            return vec![self];
        }
        let mut out = Vec::with_capacity(self.text.len() / max_bytes + 1);
        let (mut start, mut line) = (0usize, self.first_line);
        let len = self.text.len();
        while start < len {
            let end = if len - start <= max_bytes {
                len
            } else {
                let window = &self.text[start..start + max_bytes];
                match memchr::memrchr(b'\n', window) {
                    Some(i) => start + i + 1,
                    // One line longer than a piece: it alone.
                    None => memchr::memchr(b'\n', &self.text[start + max_bytes..])
                        .map_or(len, |i| start + max_bytes + i + 1),
                }
            };
            let text = self.text[start..end].to_vec();
            let lines = memchr::memchr_iter(b'\n', &text).count() as u64;
            out.push(LineBlock {
                first_line: line,
                byte_offset: self.byte_offset + start as u64,
                lines,
                text,
            });
            line += lines;
            start = end;
        }
        out
    }

    /// Each line as (number, byte offset, text without its newline).
    pub fn each(&self) -> impl Iterator<Item = (u64, u64, &[u8])> + '_ {
        let mut start = 0usize;
        memchr::memchr_iter(b'\n', &self.text)
            .enumerate()
            .map(move |(i, end)| {
                let line = (
                    self.first_line + i as u64,
                    self.byte_offset + start as u64,
                    &self.text[start..end],
                );
                start = end + 1;
                line
            })
    }

    /// Each line as a [`MatchLine`] of a selected line.
    pub fn match_lines(&self) -> impl Iterator<Item = MatchLine> + '_ {
        self.each()
            .map(|(line_number, byte_offset, text)| MatchLine {
                line_number,
                byte_offset,
                text: text.to_vec(),
                len_bytes: text.len() as u64,
                context: false,
                matches: Vec::new(),
            })
    }
}

impl LineRun {
    /// The first line's number.
    pub fn first_line(&self) -> u64 {
        match self {
            LineRun::One(l) => l.line_number,
            LineRun::Block(b) => b.first_line(),
        }
    }

    /// The last line's number.
    pub fn last_line(&self) -> u64 {
        match self {
            LineRun::One(l) => l.line_number,
            LineRun::Block(b) => b.last_line(),
        }
    }

    /// How many lines.
    pub fn lines(&self) -> u64 {
        match self {
            LineRun::One(_) => 1,
            LineRun::Block(b) => b.lines(),
        }
    }

    /// Whether these are context lines (a block never is).
    pub fn context(&self) -> bool {
        matches!(self, LineRun::One(l) if l.context)
    }

    /// The offset of the first line's first byte in the target.
    pub fn byte_offset(&self) -> u64 {
        match self {
            LineRun::One(l) => l.byte_offset,
            LineRun::Block(b) => b.byte_offset(),
        }
    }

    /// The offset of the last line's newline (or the target's end).
    pub fn end_offset(&self) -> u64 {
        match self {
            LineRun::One(l) => l.byte_offset + l.len_bytes,
            LineRun::Block(b) => b.end_offset(),
        }
    }

    /// Bytes of memory it holds.
    pub fn size_bytes(&self) -> usize {
        match self {
            LineRun::One(l) => {
                std::mem::size_of::<LineRun>()
                    + l.text.capacity()
                    + l.matches.iter().map(|m| 16 + m.1.capacity()).sum::<usize>()
            }
            LineRun::Block(b) => b.size_bytes(),
        }
    }

    /// Each line as a [`MatchLine`].
    pub fn match_lines(&self) -> Box<dyn Iterator<Item = MatchLine> + '_> {
        match self {
            LineRun::One(l) => Box::new(std::iter::once(l.clone())),
            LineRun::Block(b) => Box::new(b.match_lines()),
        }
    }
}

// On the wire a block is its first line's number, its offset and its text
// as one byte string (postcard: a length and the bytes, copied once);
// the line count is not sent but counted when it is decoded.
impl Serialize for LineBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("LineBlock", 3)?;
        s.serialize_field("first_line", &self.first_line)?;
        s.serialize_field("byte_offset", &self.byte_offset)?;
        s.serialize_field("text", &ByteText(&self.text))?;
        s.end()
    }
}

/// Bytes serialized as one byte string rather than a sequence of numbers.
pub(crate) struct ByteText<'a>(pub(crate) &'a [u8]);

impl Serialize for ByteText<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// A byte string as [`ByteText`] writes it (or, from a format without
/// byte strings, a sequence of bytes).
pub(crate) struct ByteBuf(pub(crate) Vec<u8>);

impl<'de> Deserialize<'de> for ByteBuf {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ByteBuf, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ByteBuf;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ByteBuf, A::Error> {
                // Bounded by what the format holds: no size hint is trusted.
                let mut out = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(ByteBuf(out))
            }
        }
        deserializer.deserialize_byte_buf(V)
    }
}

/// `#[serde(with = "bytes_field")]` for a `Vec<u8>` field: one byte string.
pub(crate) mod bytes_field {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        super::ByteText(v).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Ok(super::ByteBuf::deserialize(d)?.0)
    }
}

impl<'de> Deserialize<'de> for LineBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LineBlock, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename = "LineBlock")]
        struct Wire {
            first_line: u64,
            byte_offset: u64,
            text: ByteBuf,
        }
        let w = Wire::deserialize(deserializer)?;
        LineBlock::new(w.first_line, w.byte_offset, w.text.0).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_splits_and_numbers_its_lines() {
        let mut b = LineBlock::new(3, 100, b"ab\n\ncde\n".to_vec()).unwrap();
        assert_eq!((b.lines(), b.last_line(), b.end_offset()), (3, 5, 107));
        let each: Vec<_> = b.each().collect();
        assert_eq!(
            each,
            vec![
                (3, 100, &b"ab"[..]),
                (4, 103, &b""[..]),
                (5, 104, &b"cde"[..])
            ]
        );
        let rest = b.split_off(2).unwrap();
        assert_eq!((b.text(), b.lines()), (&b"ab\n\n"[..], 2));
        assert_eq!(
            (rest.first_line(), rest.byte_offset(), rest.text()),
            (5, 104, &b"cde\n"[..])
        );
        assert!(b.split_off(2).is_none() && b.split_off(0).is_none());
        let whole = LineBlock::new(7, 10, b"a\nbb\nccccc\nd\n".to_vec()).unwrap();
        let pieces = whole.clone().into_pieces(5);
        let shown: Vec<_> = pieces
            .iter()
            .map(|p| (p.first_line(), p.byte_offset(), p.text()))
            .collect();
        assert_eq!(
            shown,
            vec![
                (7, 10, &b"a\nbb\n"[..]),
                (9, 15, &b"ccccc\n"[..]),
                (10, 21, &b"d\n"[..])
            ]
        );
        assert_eq!(whole.clone().into_pieces(100), vec![whole]);
        b.push_line(b"x").unwrap();
        b.push_lines(b"y\nz\n").unwrap();
        assert!(b.push_lines(b"w").is_err());
        assert_eq!((b.lines(), b.text()), (5, &b"ab\n\nx\ny\nz\n"[..]));
    }

    #[test]
    fn a_block_must_end_with_a_newline_and_fit() {
        assert!(LineBlock::new(0, 0, Vec::new()).is_err());
        assert!(LineBlock::new(0, 0, b"a".to_vec()).is_err());
        assert!(LineBlock::new(u64::MAX, 0, b"a\n".to_vec()).is_err());
        assert!(LineBlock::new(0, u64::MAX - 1, b"a\n".to_vec()).is_err());
        let mut b = LineBlock::new(0, 0, b"a\n".to_vec()).unwrap();
        assert!(!b.renumber(u64::MAX, 0));
        assert_eq!(b.first_line(), 0);
    }
}
