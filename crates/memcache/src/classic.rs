//! One command line, classic commands, as proto_text.c's
//! `process_command_ascii` takes it: the word-count checks first (`ERROR`),
//! then each command's own, in memcached's order, so that a line with two
//! faults gets memcached's answer to the first it checks.

use bytes::Bytes;

use crate::command::{ArithmeticOp, Command, Get, Store, StoreOp};
use crate::meta;
use crate::words::{
    is_text_key, parse_i64, parse_u32, parse_u64, until_nul, Head, WordSpans, MAX_WORDS,
};
use crate::{Limits, ProtocolError};

/// What a command line asks, before any data block.
#[derive(Debug)]
pub(crate) enum LineOutcome {
    /// A whole command.
    Command(Command),
    /// A storage command whose `data_len` bytes and `\r\n` follow the
    /// line; its data is empty until they are read.
    NeedsData { command: Command, data_len: usize },
    /// Refused; `swallow_bytes` after the line are discarded with it.
    Rejected {
        error: ProtocolError,
        noreply: bool,
        swallow_bytes: usize,
    },
}

pub(crate) fn reject(error: ProtocolError) -> LineOutcome {
    LineOutcome::Rejected {
        error,
        noreply: false,
        swallow_bytes: 0,
    }
}

fn reject_quietly(error: ProtocolError, noreply: bool) -> LineOutcome {
    LineOutcome::Rejected {
        error,
        noreply,
        swallow_bytes: 0,
    }
}

/// Commands memcached 1.6 has that this crate does not parse: they are
/// answered `ERROR` rather than looked at for `HTTP/`.
const OTHER_MEMCACHED_COMMANDS: &[&[u8]] = &[
    b"shutdown",
    b"slabs",
    b"cache_memlimit",
    b"lru_crawler",
    b"watch",
    b"lru",
    b"extstore",
    b"refresh_certs",
    b"misbehave",
    b"debugtime",
];

/// Parses one command line (without its `\n`, and without the `\r` before
/// it when the line has more than that).
pub(crate) fn parse_line(line: &[u8], limits: &Limits) -> LineOutcome {
    let line = until_nul(line);
    let head = Head::new(line);
    let name = head.word(0);
    if name.len() < 2 {
        return reject(ProtocolError::UnknownCommand);
    }
    if let [b'm', code] = name {
        return meta::parse_meta(*code, &head, limits);
    }
    match name {
        b"get" | b"bget" => parse_get(&head, line, false, false, limits),
        b"gets" => parse_get(&head, line, true, false, limits),
        b"gat" => parse_get(&head, line, false, true, limits),
        b"gats" => parse_get(&head, line, true, true, limits),
        b"set" => parse_store(&head, StoreOp::Set, limits),
        b"add" => parse_store(&head, StoreOp::Add, limits),
        b"replace" => parse_store(&head, StoreOp::Replace, limits),
        b"append" => parse_store(&head, StoreOp::Append, limits),
        b"prepend" => parse_store(&head, StoreOp::Prepend, limits),
        b"cas" => parse_store(&head, StoreOp::Cas { unique: 0 }, limits),
        b"delete" => parse_delete(&head, limits),
        b"incr" => parse_arithmetic(&head, ArithmeticOp::Incr, limits),
        b"decr" => parse_arithmetic(&head, ArithmeticOp::Decr, limits),
        b"touch" => parse_touch(&head, limits),
        b"flush_all" => parse_flush_all(&head),
        b"verbosity" => parse_verbosity(&head),
        b"version" => LineOutcome::Command(Command::Version),
        b"quit" => LineOutcome::Command(Command::Quit),
        b"stats" => LineOutcome::Command(Command::Stats {
            args: head
                .words_from(1)
                .iter()
                .take(MAX_WORDS - 1)
                .map(|word| Bytes::copy_from_slice(word))
                .collect(),
        }),
        _ => unknown(&head),
    }
}

/// memcached dispatches on a name's first letter (and on `m` with two
/// letters, the meta commands); a name it has no branch for ends in the
/// last `else`, which closes the connection on an HTTP request line
/// ("GET / HTTP/1.1") instead of answering `ERROR`.
fn unknown(head: &Head<'_>) -> LineOutcome {
    let name = head.word(0);
    let has_branch = matches!(name[0], b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't');
    if !has_branch && !OTHER_MEMCACHED_COMMANDS.contains(&name) && head.last().starts_with(b"HTTP/")
    {
        return reject(ProtocolError::HttpRequest);
    }
    reject(ProtocolError::UnknownCommand)
}

/// `get`/`gets`/`gat`/`gats`: memcached wants at least one word after the
/// name (`gat <exptime>` alone is answered `END`), fails the whole command
/// on the first key over 250 bytes, and reads every key however many.
fn parse_get(
    head: &Head<'_>,
    line: &[u8],
    return_cas: bool,
    touch: bool,
    limits: &Limits,
) -> LineOutcome {
    if head.len() < 2 {
        return reject(ProtocolError::UnknownCommand);
    }
    let mut spans = WordSpans::new(line);
    spans.next();
    let touch_exptime = if touch {
        match spans.next().and_then(|span| parse_i64(&line[span])) {
            Some(exptime) => Some(exptime),
            None => return reject(ProtocolError::InvalidExptime),
        }
    } else {
        None
    };
    let mut count = 0;
    let mut region: Option<(usize, usize)> = None;
    for span in spans.clone() {
        if !is_text_key(&line[span.clone()], limits) {
            return reject(ProtocolError::BadCommandLine);
        }
        count += 1;
        if count > limits.max_keys_per_get {
            return reject(ProtocolError::TooManyKeys {
                limit: limits.max_keys_per_get,
            });
        }
        region = Some((region.map_or(span.start, |(start, _)| start), span.end));
    }
    // One copy of the keys, sliced: a key kept by the server pins this
    // line's keys, never the caller's read buffer.
    let keys = match region {
        None => Vec::new(),
        Some((start, end)) => {
            let all = Bytes::copy_from_slice(&line[start..end]);
            let mut keys = Vec::with_capacity(count);
            keys.extend(spans.map(|span| all.slice(span.start - start..span.end - start)));
            keys
        }
    };
    LineOutcome::Command(Command::Get(Get {
        keys,
        return_cas,
        touch_exptime,
    }))
}

/// `<op> <key> <flags> <exptime> <bytes> [noreply]`, `cas` with its
/// unique before `noreply` (`process_update_command`). A bad length is
/// refused without swallowing the data block (memcached then reads the
/// block as a command line); a length over the limit swallows it.
fn parse_store(head: &Head<'_>, op: StoreOp, limits: &Limits) -> LineOutcome {
    let is_cas = matches!(op, StoreOp::Cas { .. });
    let words = head.len();
    let arity_ok = if is_cas {
        words == 6 || words == 7
    } else {
        words == 5 || words == 6
    };
    if !arity_ok {
        return reject(ProtocolError::UnknownCommand);
    }
    let noreply = head.says_noreply();
    let key = head.word(1);
    if !is_text_key(key, limits) {
        return reject_quietly(ProtocolError::BadCommandLine, noreply);
    }
    let (Some(flags), Some(exptime), Some(data_len)) = (
        parse_u32(head.word(2)),
        parse_i64(head.word(3)),
        parse_i64(head.word(4)),
    ) else {
        return reject_quietly(ProtocolError::BadCommandLine, noreply);
    };
    let op = if is_cas {
        match parse_u64(head.word(5)) {
            Some(unique) => StoreOp::Cas { unique },
            None => return reject_quietly(ProtocolError::BadCommandLine, noreply),
        }
    } else {
        op
    };
    let data_len = match checked_data_len(data_len) {
        Some(len) => len,
        None => return reject_quietly(ProtocolError::BadCommandLine, noreply),
    };
    if data_len > limits.max_value_bytes {
        return LineOutcome::Rejected {
            error: ProtocolError::ObjectTooLarge,
            noreply,
            swallow_bytes: data_len + 2,
        };
    }
    let command = Command::Store(Store {
        op,
        key: Bytes::copy_from_slice(key),
        flags,
        exptime,
        data: Bytes::new(),
        noreply,
    });
    LineOutcome::NeedsData { command, data_len }
}

/// A data length memcached takes: 0 to `INT_MAX - 2`.
pub(crate) fn checked_data_len(len: i64) -> Option<usize> {
    const MAX_DATA_LEN: i64 = i32::MAX as i64 - 2;
    if (0..=MAX_DATA_LEN).contains(&len) {
        usize::try_from(len).ok()
    } else {
        None
    }
}

/// `delete <key> [0] [noreply]`: memcached still takes the hold time of
/// old versions, but only `0` (`process_delete_command`).
fn parse_delete(head: &Head<'_>, limits: &Limits) -> LineOutcome {
    let words = head.len();
    if !(2..=4).contains(&words) {
        return reject(ProtocolError::UnknownCommand);
    }
    let mut noreply = false;
    if words > 2 {
        let hold_is_zero = head.word(2) == b"0";
        noreply = head.says_noreply();
        let valid =
            (words == 3 && (hold_is_zero || noreply)) || (words == 4 && hold_is_zero && noreply);
        if !valid {
            return reject_quietly(ProtocolError::BadDeleteArguments, noreply);
        }
    }
    let key = head.word(1);
    if !is_text_key(key, limits) {
        return reject_quietly(ProtocolError::BadCommandLine, noreply);
    }
    LineOutcome::Command(Command::Delete {
        key: Bytes::copy_from_slice(key),
        noreply,
    })
}

/// `incr|decr <key> <delta> [noreply]`. A fourth word that is not
/// `noreply` is taken and ignored, as memcached does.
fn parse_arithmetic(head: &Head<'_>, op: ArithmeticOp, limits: &Limits) -> LineOutcome {
    if !(3..=4).contains(&head.len()) {
        return reject(ProtocolError::UnknownCommand);
    }
    let noreply = head.says_noreply();
    let key = head.word(1);
    if !is_text_key(key, limits) {
        return reject_quietly(ProtocolError::BadCommandLine, noreply);
    }
    let Some(delta) = parse_u64(head.word(2)) else {
        return reject_quietly(ProtocolError::InvalidDelta, noreply);
    };
    LineOutcome::Command(Command::Arithmetic {
        op,
        key: Bytes::copy_from_slice(key),
        delta,
        noreply,
    })
}

/// `touch <key> <exptime> [noreply]`.
fn parse_touch(head: &Head<'_>, limits: &Limits) -> LineOutcome {
    if !(3..=4).contains(&head.len()) {
        return reject(ProtocolError::UnknownCommand);
    }
    let noreply = head.says_noreply();
    let key = head.word(1);
    if !is_text_key(key, limits) {
        return reject_quietly(ProtocolError::BadCommandLine, noreply);
    }
    let Some(exptime) = parse_i64(head.word(2)) else {
        return reject_quietly(ProtocolError::InvalidExptime, noreply);
    };
    LineOutcome::Command(Command::Touch {
        key: Bytes::copy_from_slice(key),
        exptime,
        noreply,
    })
}

/// `flush_all [delay] [noreply]`: memcached reads a delay whenever the
/// words are not exactly the name and an optional `noreply`.
fn parse_flush_all(head: &Head<'_>) -> LineOutcome {
    let words = head.len();
    if !(1..=3).contains(&words) {
        return reject(ProtocolError::UnknownCommand);
    }
    let noreply = head.says_noreply();
    let delay = if words == 1 + usize::from(noreply) {
        None
    } else {
        match parse_i64(head.word(1)) {
            Some(delay) => Some(delay),
            None => return reject_quietly(ProtocolError::InvalidExptime, noreply),
        }
    };
    LineOutcome::Command(Command::FlushAll { delay, noreply })
}

/// `verbosity <level> [noreply]`.
fn parse_verbosity(head: &Head<'_>) -> LineOutcome {
    if !(2..=3).contains(&head.len()) {
        return reject(ProtocolError::UnknownCommand);
    }
    let noreply = head.says_noreply();
    match parse_u32(head.word(1)) {
        Some(level) => LineOutcome::Command(Command::Verbosity { level, noreply }),
        None => reject_quietly(ProtocolError::BadCommandLine, noreply),
    }
}
