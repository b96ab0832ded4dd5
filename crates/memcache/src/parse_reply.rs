//! A client reading a server's answers: one answer unit at a time, held
//! to the same bounds as the command parser.

use bytes::{Buf, Bytes, BytesMut};

use crate::reply::{MetaCode, MetaFlag, MetaReply};
use crate::words::{parse_u32, parse_u64, WordSpans};
use crate::{Limits, Reply, ReplyError};

/// What [`parse_reply`] found at the front of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedReply {
    /// One answer unit (a line, and its data block for `VALUE` and `VA`).
    Complete {
        /// The answer.
        reply: Reply,
        /// Its bytes at the front of the buffer.
        consumed: usize,
    },
    /// More bytes are needed; at most `max_line_bytes` plus one data block
    /// of `max_value_bytes` and its `\r\n` are ever waited for.
    Incomplete,
    /// Not an answer memcached sends: close the connection.
    Invalid(ReplyError),
}

/// Parses the answer unit at the front of `buf`, copying its data.
pub fn parse_reply(buf: &[u8], limits: &Limits) -> ParsedReply {
    match frame_reply(buf, limits) {
        ReplyFrame::Incomplete => ParsedReply::Incomplete,
        ReplyFrame::Invalid(error) => ParsedReply::Invalid(error),
        ReplyFrame::Line { reply, line_bytes } => ParsedReply::Complete {
            reply,
            consumed: line_bytes,
        },
        ReplyFrame::WithData {
            mut reply,
            line_bytes,
            data_bytes,
        } => {
            set_data(
                &mut reply,
                Bytes::copy_from_slice(&buf[line_bytes..line_bytes + data_bytes]),
            );
            ParsedReply::Complete {
                reply,
                consumed: line_bytes + data_bytes + 2,
            }
        }
    }
}

/// Parses the answer unit at the front of `buf` and takes it off (a data
/// block without a copy); an `Invalid` leaves `buf` as it was.
pub fn parse_reply_bytes(buf: &mut BytesMut, limits: &Limits) -> ParsedReply {
    match frame_reply(buf, limits) {
        ReplyFrame::Incomplete => ParsedReply::Incomplete,
        ReplyFrame::Invalid(error) => ParsedReply::Invalid(error),
        ReplyFrame::Line { reply, line_bytes } => {
            buf.advance(line_bytes);
            ParsedReply::Complete {
                reply,
                consumed: line_bytes,
            }
        }
        ReplyFrame::WithData {
            mut reply,
            line_bytes,
            data_bytes,
        } => {
            buf.advance(line_bytes);
            set_data(&mut reply, buf.split_to(data_bytes).freeze());
            buf.advance(2);
            ParsedReply::Complete {
                reply,
                consumed: line_bytes + data_bytes + 2,
            }
        }
    }
}

fn set_data(reply: &mut Reply, bytes: Bytes) {
    match reply {
        Reply::Value { data, .. } => *data = bytes,
        Reply::Meta(meta) => meta.value = Some(bytes),
        _ => {}
    }
}

enum ReplyFrame {
    Incomplete,
    Invalid(ReplyError),
    Line {
        reply: Reply,
        line_bytes: usize,
    },
    WithData {
        reply: Reply,
        line_bytes: usize,
        data_bytes: usize,
    },
}

fn frame_reply(buf: &[u8], limits: &Limits) -> ReplyFrame {
    let window = buf.len().min(limits.max_line_bytes + 1);
    let Some(newline) = memchr::memchr(b'\n', &buf[..window]) else {
        if buf.len() > limits.max_line_bytes {
            return ReplyFrame::Invalid(ReplyError::LineTooLong {
                limit_bytes: limits.max_line_bytes,
            });
        }
        return ReplyFrame::Incomplete;
    };
    let line = buf[..newline]
        .strip_suffix(b"\r")
        .unwrap_or(&buf[..newline]);
    let line_bytes = newline + 1;
    let (reply, data_bytes) = match parse_reply_line(line, limits) {
        Ok(parsed) => parsed,
        Err(error) => return ReplyFrame::Invalid(error),
    };
    let Some(data_bytes) = data_bytes else {
        return ReplyFrame::Line { reply, line_bytes };
    };
    let total = line_bytes + data_bytes + 2;
    if buf.len() < total {
        return ReplyFrame::Incomplete;
    }
    if &buf[total - 2..total] != b"\r\n" {
        return ReplyFrame::Invalid(ReplyError::BadDataChunk);
    }
    ReplyFrame::WithData {
        reply,
        line_bytes,
        data_bytes,
    }
}

/// One answer line, and the length of the data block after it.
fn parse_reply_line(line: &[u8], limits: &Limits) -> Result<(Reply, Option<usize>), ReplyError> {
    let fixed = match line {
        b"END" => Some(Reply::End),
        b"STORED" => Some(Reply::Stored),
        b"NOT_STORED" => Some(Reply::NotStored),
        b"EXISTS" => Some(Reply::Exists),
        b"NOT_FOUND" => Some(Reply::NotFound),
        b"DELETED" => Some(Reply::Deleted),
        b"TOUCHED" => Some(Reply::Touched),
        b"OK" => Some(Reply::Ok),
        b"RESET" => Some(Reply::Reset),
        b"ERROR" => Some(Reply::Error),
        b"CLIENT_ERROR" => Some(Reply::ClientError(Bytes::new())),
        b"SERVER_ERROR" => Some(Reply::ServerError(Bytes::new())),
        _ => None,
    };
    if let Some(reply) = fixed {
        return Ok((reply, None));
    }
    let copy = Bytes::copy_from_slice;
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        return parse_value_line(rest, limits);
    }
    let reply = if let Some(rest) = line.strip_prefix(b"VERSION ") {
        Reply::Version(copy(rest))
    } else if let Some(rest) = line.strip_prefix(b"CLIENT_ERROR ") {
        Reply::ClientError(copy(rest))
    } else if let Some(rest) = line.strip_prefix(b"SERVER_ERROR ") {
        Reply::ServerError(copy(rest))
    } else if let Some(rest) = line.strip_prefix(b"STAT ") {
        let (name, value) = split_word(rest);
        if name.is_empty() {
            return Err(ReplyError::Malformed { what: "STAT" });
        }
        Reply::Stat {
            name: copy(name),
            value: copy(value),
        }
    } else if let Some(rest) = line.strip_prefix(b"ME ") {
        let (key, info) = split_word(rest);
        if key.is_empty() {
            return Err(ReplyError::Malformed { what: "ME" });
        }
        Reply::MetaDebug {
            key: copy(key),
            info: copy(info),
        }
    } else if let Some(code) = meta_code(line) {
        return parse_meta_line(code, &line[2..], limits);
    } else if let Some(n) = parse_number_line(line) {
        Reply::Number(n)
    } else {
        let shown = &line[..line.len().min(64)];
        return Err(ReplyError::Unrecognised {
            line: String::from_utf8_lossy(shown).into_owned(),
        });
    };
    Ok((reply, None))
}

/// The first word and what follows the space after it.
fn split_word(text: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b' ', text) {
        Some(space) => (&text[..space], &text[space + 1..]),
        None => (text, &[]),
    }
}

fn checked_value_len(
    word: &[u8],
    what: &'static str,
    limits: &Limits,
) -> Result<usize, ReplyError> {
    let len = parse_u64(word).ok_or(ReplyError::Malformed { what })?;
    match usize::try_from(len) {
        Ok(len) if len <= limits.max_value_bytes => Ok(len),
        _ => Err(ReplyError::ValueTooLarge {
            len_bytes: len,
            limit_bytes: limits.max_value_bytes,
        }),
    }
}

/// `<key> <flags> <bytes> [<cas>]`.
fn parse_value_line(rest: &[u8], limits: &Limits) -> Result<(Reply, Option<usize>), ReplyError> {
    let malformed = ReplyError::Malformed { what: "VALUE" };
    let mut words = WordSpans::new(rest).map(|span| &rest[span]);
    let (Some(key), Some(flags), Some(len)) = (words.next(), words.next(), words.next()) else {
        return Err(malformed);
    };
    let flags = parse_u32(flags).ok_or(malformed.clone())?;
    let len = checked_value_len(len, "VALUE", limits)?;
    let cas = match words.next() {
        Some(cas) => Some(parse_u64(cas).ok_or(malformed.clone())?),
        None => None,
    };
    if words.next().is_some() {
        return Err(malformed);
    }
    let reply = Reply::Value {
        key: Bytes::copy_from_slice(key),
        flags,
        cas,
        data: Bytes::new(),
    };
    Ok((reply, Some(len)))
}

fn meta_code(line: &[u8]) -> Option<MetaCode> {
    match line {
        [a, b] | [a, b, b' ', ..] => MetaCode::from_code(&[*a, *b]),
        _ => None,
    }
}

/// A meta answer after its code: `VA`'s size, then flags.
fn parse_meta_line(
    code: MetaCode,
    rest: &[u8],
    limits: &Limits,
) -> Result<(Reply, Option<usize>), ReplyError> {
    let mut spans = WordSpans::new(rest);
    let value_len = if code == MetaCode::Value {
        let size = spans.next().ok_or(ReplyError::Malformed { what: "VA" })?;
        Some(checked_value_len(&rest[size], "VA", limits)?)
    } else {
        None
    };
    // One copy of the flags, sliced into tokens: one allocation for a
    // line of many flags, not one a flag.
    let flags = match spans.clone().next() {
        None => Vec::new(),
        Some(first) => {
            let all = Bytes::copy_from_slice(&rest[first.start..]);
            spans
                .map(|span| MetaFlag {
                    letter: rest[span.start],
                    token: all.slice(span.start + 1 - first.start..span.end - first.start),
                })
                .collect()
        }
    };
    let reply = Reply::Meta(MetaReply {
        code,
        flags,
        value: None,
    });
    Ok((reply, value_len))
}

/// An `incr`/`decr` answer: digits (memcached may pad a shrunk number
/// with spaces in the item, so trailing spaces are allowed).
fn parse_number_line(line: &[u8]) -> Option<u64> {
    let end = line.iter().rposition(|&b| b != b' ')? + 1;
    let digits = &line[..end];
    if digits.first().is_some_and(u8::is_ascii_digit) {
        parse_u64(digits)
    } else {
        None
    }
}
