//! Meta command lines (`mg`, `ms`, `md`, `ma`, `mn`, `me`), as
//! proto_text.c takes them: every flag is one word, a letter and its
//! token; all meta commands share one flag checker
//! (`_meta_flag_preparse`), so a flag one command ignores (`md k v`) is
//! still accepted by it, and a malformed one refused.

use bytes::Bytes;

use crate::base64;
use crate::classic::{checked_data_len, reject, LineOutcome};
use crate::command::{
    ArithmeticOp, Command, MetaArithmetic, MetaDebug, MetaDelete, MetaGet, MetaSet, ReturnFlag,
    ReturnFlags, SetMode, ARITHMETIC_RETURNS, DELETE_RETURNS, SET_RETURNS,
};
use crate::words::{is_text_key, parse_i64, parse_u32, parse_u64, Head};
use crate::{Limits, ProtocolError};

/// memcached's `MFLAG_MAX_OPT_LENGTH` (20) counts the words of a line and
/// its end marker: 19 words at most.
const MAX_META_WORDS: usize = 19;

/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`, which it compares with the whole
/// word, the `O` included.
const MAX_OPAQUE_WORD_BYTES: usize = 32;

pub(crate) fn parse_meta(code: u8, head: &Head<'_>, limits: &Limits) -> LineOutcome {
    match code {
        b'g' => parse_meta_get(head, limits),
        b's' => parse_meta_set(head, limits),
        b'd' => parse_meta_delete(head, limits),
        b'a' => parse_meta_arithmetic(head, limits),
        b'e' => parse_meta_debug(head, limits),
        // `mn` ignores any words after it.
        b'n' => LineOutcome::Command(Command::MetaNoop),
        _ => reject(ProtocolError::UnknownCommand),
    }
}

/// The flags of one meta line, as `_meta_flag_preparse` reads them.
#[derive(Default)]
struct Flags<'a> {
    base64_key: bool,
    decoded_key: Option<Vec<u8>>,
    returns: ReturnFlags,
    opaque: Option<&'a [u8]>,
    opaque_too_long: bool,
    quiet: bool,
    value: bool,
    no_lru_bump: bool,
    invalidate: bool,
    remove_value: bool,
    vivify_exptime: Option<i64>,
    recache_exptime: Option<i64>,
    new_exptime: Option<i64>,
    client_flags: Option<u32>,
    compare_cas: Option<u64>,
    new_cas: Option<u64>,
    initial: Option<u64>,
    delta: Option<u64>,
    mode: Option<u8>,
}

impl Flags<'_> {
    fn key(&mut self, word: &[u8]) -> Bytes {
        match self.decoded_key.take() {
            Some(raw) => Bytes::from(raw),
            None => Bytes::copy_from_slice(word),
        }
    }

    fn opaque(&self) -> Option<Bytes> {
        self.opaque.map(Bytes::copy_from_slice)
    }
}

/// Reads the flag words. A repeated or unknown flag stops at once; a bad
/// token is noted and the words read on, the last such error winning
/// (`F` notes none of its own, leaving `bad command line format`).
fn preparse<'a>(key: &[u8], words: &[&'a [u8]]) -> Result<Flags<'a>, ProtocolError> {
    let mut seen = [false; 127];
    let mut flags = Flags::default();
    let mut failed = false;
    let mut error = ProtocolError::BadCommandLine;
    let mut fail = |e: Option<ProtocolError>| {
        failed = true;
        if let Some(e) = e {
            error = e;
        }
    };
    for &word in words {
        let Some((&letter, token)) = word.split_first() else {
            continue;
        };
        match seen.get_mut(usize::from(letter)) {
            Some(seen) if !*seen => *seen = true,
            _ => return Err(ProtocolError::DuplicateFlag),
        }
        match letter {
            b'b' => match base64::decode(key) {
                Some(raw) => {
                    flags.base64_key = true;
                    flags.decoded_key = Some(raw);
                }
                None => fail(Some(ProtocolError::KeyDecode)),
            },
            b'N' | b'T' | b'R' => match parse_i64(token) {
                Some(exptime) if letter == b'N' => flags.vivify_exptime = Some(exptime),
                Some(exptime) if letter == b'T' => flags.new_exptime = Some(exptime),
                Some(exptime) => flags.recache_exptime = Some(exptime),
                None => fail(Some(ProtocolError::BadFlagToken)),
            },
            b'C' | b'E' => match parse_u64(token) {
                Some(cas) if letter == b'C' => flags.compare_cas = Some(cas),
                Some(cas) => flags.new_cas = Some(cas),
                None => fail(Some(ProtocolError::BadFlagToken)),
            },
            b'F' => match parse_u32(token) {
                Some(client_flags) => flags.client_flags = Some(client_flags),
                None => fail(None),
            },
            b'J' => match parse_u64(token) {
                Some(initial) => flags.initial = Some(initial),
                None => fail(Some(ProtocolError::InvalidInitialValue)),
            },
            b'D' => match parse_u64(token) {
                Some(delta) => flags.delta = Some(delta),
                None => fail(Some(ProtocolError::InvalidDeltaValue)),
            },
            b'M' => match token {
                [mode] => flags.mode = Some(*mode),
                _ => fail(Some(ProtocolError::ModeTokenLength)),
            },
            b'O' => {
                flags.opaque = Some(token);
                flags.opaque_too_long = word.len() > MAX_OPAQUE_WORD_BYTES;
                flags.returns = flags.returns.with(ReturnFlag::Opaque);
            }
            b'c' | b'f' | b'h' | b'k' | b'l' | b's' | b't' => {
                if let Some(flag) = ReturnFlag::from_letter(letter) {
                    flags.returns = flags.returns.with(flag);
                }
            }
            b'q' => flags.quiet = true,
            b'v' => flags.value = true,
            b'u' => flags.no_lru_bump = true,
            b'I' => flags.invalidate = true,
            b'x' => flags.remove_value = true,
            // Hints for a proxy, ignored by the server.
            b'P' | b'L' => {}
            _ => return Err(ProtocolError::InvalidFlag),
        }
    }
    if failed {
        Err(error)
    } else {
        Ok(flags)
    }
}

/// The key checks before the flags: memcached's length check (on the
/// base64 text for a `b` key), and ours on a text key's bytes.
fn key_ok(head: &Head<'_>, first_flag: usize, limits: &Limits) -> bool {
    let key = head.word(1);
    let base64 = head
        .words_from(first_flag)
        .iter()
        .any(|word| word.first() == Some(&b'b'));
    if base64 {
        key.len() <= limits.max_key_bytes
    } else {
        is_text_key(key, limits)
    }
}

/// What `mg`, `md` and `ma` check before their flags.
fn check_line(head: &Head<'_>, limits: &Limits, too_long: ProtocolError) -> Option<LineOutcome> {
    if head.len() < 2 {
        return Some(reject(ProtocolError::UnknownCommand));
    }
    if !key_ok(head, 2, limits) {
        return Some(reject(ProtocolError::BadCommandLine));
    }
    if head.len() > MAX_META_WORDS {
        return Some(reject(too_long));
    }
    None
}

fn parse_meta_get(head: &Head<'_>, limits: &Limits) -> LineOutcome {
    if let Some(refused) = check_line(head, limits, ProtocolError::MetaGetFlagsTooLong) {
        return refused;
    }
    let mut flags = match preparse(head.word(1), head.words_from(2)) {
        Ok(flags) => flags,
        Err(error) => return reject(error),
    };
    if flags.opaque_too_long {
        return reject(ProtocolError::OpaqueTooLong);
    }
    LineOutcome::Command(Command::MetaGet(MetaGet {
        key: flags.key(head.word(1)),
        base64_key: flags.base64_key,
        returns: flags.returns,
        opaque: flags.opaque(),
        quiet: flags.quiet,
        return_value: flags.value,
        no_lru_bump: flags.no_lru_bump,
        vivify_exptime: flags.vivify_exptime,
        recache_exptime: flags.recache_exptime,
        new_exptime: flags.new_exptime,
        compare_cas: flags.compare_cas,
        new_cas: flags.new_cas,
    }))
}

/// `ms <key> <datalen> <flags>*`: errors before the length is known leave
/// the data block to be read as a command; later ones swallow it
/// (`process_mset_command`). An invalid mode is reported before a long
/// opaque.
fn parse_meta_set(head: &Head<'_>, limits: &Limits) -> LineOutcome {
    if head.len() < 2 {
        return reject(ProtocolError::UnknownCommand);
    }
    if !key_ok(head, 3, limits) || head.len() == 2 {
        return reject(ProtocolError::BadCommandLine);
    }
    if head.len() > MAX_META_WORDS {
        return reject(ProtocolError::MetaFlagsTooLong);
    }
    let Some(data_len) = parse_i64(head.word(2)).and_then(checked_data_len) else {
        return reject(ProtocolError::BadCommandLine);
    };
    let swallow = |error| LineOutcome::Rejected {
        error,
        noreply: false,
        swallow_bytes: data_len + 2,
    };
    let mut flags = match preparse(head.word(1), head.words_from(3)) {
        Ok(flags) => flags,
        Err(error) => return swallow(error),
    };
    let mode = match flags.mode {
        None | Some(b'S') => SetMode::Set,
        Some(b'E') => SetMode::Add,
        Some(b'A') => SetMode::Append,
        Some(b'P') => SetMode::Prepend,
        Some(b'R') => SetMode::Replace,
        Some(_) => return swallow(ProtocolError::InvalidSetMode),
    };
    if flags.opaque_too_long {
        return swallow(ProtocolError::OpaqueTooLong);
    }
    if data_len > limits.max_value_bytes {
        return swallow(ProtocolError::ObjectTooLarge);
    }
    let command = Command::MetaSet(MetaSet {
        key: flags.key(head.word(1)),
        base64_key: flags.base64_key,
        data: Bytes::new(),
        returns: flags.returns.only(SET_RETURNS),
        opaque: flags.opaque(),
        quiet: flags.quiet,
        client_flags: flags.client_flags.unwrap_or(0),
        exptime: flags.new_exptime.unwrap_or(0),
        compare_cas: flags.compare_cas,
        new_cas: flags.new_cas,
        invalidate: flags.invalidate,
        mode,
        vivify_exptime: flags.vivify_exptime,
    });
    LineOutcome::NeedsData { command, data_len }
}

/// `md`: any flag error is answered `invalid or duplicate flag`.
fn parse_meta_delete(head: &Head<'_>, limits: &Limits) -> LineOutcome {
    if let Some(refused) = check_line(head, limits, ProtocolError::MetaFlagsTooLong) {
        return refused;
    }
    let Ok(mut flags) = preparse(head.word(1), head.words_from(2)) else {
        return reject(ProtocolError::InvalidOrDuplicateFlag);
    };
    if flags.opaque_too_long {
        return reject(ProtocolError::OpaqueTooLong);
    }
    LineOutcome::Command(Command::MetaDelete(MetaDelete {
        key: flags.key(head.word(1)),
        base64_key: flags.base64_key,
        returns: flags.returns.only(DELETE_RETURNS),
        opaque: flags.opaque(),
        quiet: flags.quiet,
        compare_cas: flags.compare_cas,
        new_cas: flags.new_cas,
        invalidate: flags.invalidate,
        new_exptime: flags.new_exptime,
        remove_value: flags.remove_value,
    }))
}

/// `ma`: any flag error is answered `invalid or duplicate flag`; a bad
/// mode is found before a long opaque (which memcached only sees when it
/// writes the answer).
fn parse_meta_arithmetic(head: &Head<'_>, limits: &Limits) -> LineOutcome {
    if let Some(refused) = check_line(head, limits, ProtocolError::MetaFlagsTooLong) {
        return refused;
    }
    let Ok(mut flags) = preparse(head.word(1), head.words_from(2)) else {
        return reject(ProtocolError::InvalidOrDuplicateFlag);
    };
    let mode = match flags.mode {
        None | Some(b'I' | b'+') => ArithmeticOp::Incr,
        Some(b'D' | b'-') => ArithmeticOp::Decr,
        Some(_) => return reject(ProtocolError::InvalidArithmeticMode),
    };
    if flags.opaque_too_long {
        return reject(ProtocolError::OpaqueTooLong);
    }
    LineOutcome::Command(Command::MetaArithmetic(MetaArithmetic {
        key: flags.key(head.word(1)),
        base64_key: flags.base64_key,
        returns: flags.returns.only(ARITHMETIC_RETURNS),
        opaque: flags.opaque(),
        quiet: flags.quiet,
        return_value: flags.value,
        compare_cas: flags.compare_cas,
        new_cas: flags.new_cas,
        vivify_exptime: flags.vivify_exptime,
        initial: flags.initial.unwrap_or(0),
        delta: flags.delta.unwrap_or(1),
        new_exptime: flags.new_exptime,
        mode,
    }))
}

/// `me <key> [b]`: the only flag is `b`, and only as the third word; every
/// fault is `bad command line format` (`process_meta_command`).
fn parse_meta_debug(head: &Head<'_>, limits: &Limits) -> LineOutcome {
    let key = head.word(1);
    if head.len() < 2 || key.len() > limits.max_key_bytes {
        return reject(ProtocolError::BadCommandLine);
    }
    let base64_key = head.len() >= 3 && head.word(2) == b"b";
    let key = if base64_key {
        match base64::decode(key) {
            Some(raw) => Bytes::from(raw),
            None => return reject(ProtocolError::BadCommandLine),
        }
    } else if is_text_key(key, limits) {
        Bytes::copy_from_slice(key)
    } else {
        return reject(ProtocolError::BadCommandLine);
    };
    LineOutcome::Command(Command::MetaDebug(MetaDebug { key, base64_key }))
}
