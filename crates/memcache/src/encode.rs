//! The bytes a client sends for each command.

use bytes::{BufMut, BytesMut};

use crate::base64;
use crate::command::{
    Command, Get, MetaArithmetic, MetaDebug, MetaDelete, MetaGet, MetaSet, ReturnFlag, ReturnFlags,
    SetMode, Store, StoreOp, ARITHMETIC_RETURNS, DELETE_RETURNS, GET_RETURNS, SET_RETURNS,
};

/// Appends `n` in decimal.
pub(crate) fn put_u64(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[start..]);
}

/// Appends `n` in decimal, with a `-` if negative.
pub(crate) fn put_i64(out: &mut BytesMut, n: i64) {
    if n < 0 {
        out.put_u8(b'-');
    }
    put_u64(out, n.unsigned_abs());
}

/// Appends a key as a request or answer carries it: base64 for a binary
/// key.
pub(crate) fn put_key(out: &mut BytesMut, key: &[u8], base64_key: bool) {
    if base64_key {
        base64::encode(key, out);
    } else {
        out.put_slice(key);
    }
}

fn put_flag_u64(out: &mut BytesMut, letter: u8, value: Option<u64>) {
    if let Some(value) = value {
        out.put_u8(b' ');
        out.put_u8(letter);
        put_u64(out, value);
    }
}

fn put_flag_i64(out: &mut BytesMut, letter: u8, value: Option<i64>) {
    if let Some(value) = value {
        out.put_u8(b' ');
        out.put_u8(letter);
        put_i64(out, value);
    }
}

fn put_flag(out: &mut BytesMut, letter: u8, given: bool) {
    if given {
        out.put_u8(b' ');
        out.put_u8(letter);
    }
}

/// The fields of a meta request up to its return flags.
struct MetaHead<'a> {
    key: &'a [u8],
    base64_key: bool,
    /// `ms`'s length, after the key.
    data_len: Option<usize>,
    returns: ReturnFlags,
    opaque: Option<&'a [u8]>,
}

/// A meta request's start: the key (and `ms`'s length), `b` if the key is
/// base64, and the return flags of those `allowed`, in order; an opaque
/// whose place is not marked goes last.
fn put_meta_head(out: &mut BytesMut, head: MetaHead<'_>, allowed: &[ReturnFlag]) {
    let MetaHead {
        key,
        base64_key,
        data_len,
        returns,
        opaque,
    } = head;
    out.put_u8(b' ');
    put_key(out, key, base64_key);
    if let Some(len) = data_len {
        out.put_u8(b' ');
        put_u64(out, len as u64);
    }
    put_flag(out, b'b', base64_key);
    for flag in returns.iter().filter(|flag| allowed.contains(flag)) {
        if flag == ReturnFlag::Opaque {
            if let Some(opaque) = opaque {
                out.put_slice(b" O");
                out.put_slice(opaque);
            }
        } else {
            put_flag(out, flag.letter(), true);
        }
    }
    if let (Some(opaque), false) = (opaque, returns.contains(ReturnFlag::Opaque)) {
        out.put_slice(b" O");
        out.put_slice(opaque);
    }
}

impl Command {
    /// Appends the exact bytes a client sends for this command, data block
    /// included. The fields are written as they are: a key with a space in
    /// it, or an opaque over 31 bytes, makes a line the server refuses.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Command::Get(get) => encode_get(get, out),
            Command::Store(store) => encode_store(store, out),
            Command::Delete { key, noreply } => {
                out.put_slice(b"delete ");
                out.put_slice(key);
                end_line(out, *noreply);
            }
            Command::Arithmetic {
                op,
                key,
                delta,
                noreply,
            } => {
                out.put_slice(op.name().as_bytes());
                out.put_u8(b' ');
                out.put_slice(key);
                out.put_u8(b' ');
                put_u64(out, *delta);
                end_line(out, *noreply);
            }
            Command::Touch {
                key,
                exptime,
                noreply,
            } => {
                out.put_slice(b"touch ");
                out.put_slice(key);
                out.put_u8(b' ');
                put_i64(out, *exptime);
                end_line(out, *noreply);
            }
            Command::FlushAll { delay, noreply } => {
                out.put_slice(b"flush_all");
                if let Some(delay) = delay {
                    out.put_u8(b' ');
                    put_i64(out, *delay);
                }
                end_line(out, *noreply);
            }
            Command::Verbosity { level, noreply } => {
                out.put_slice(b"verbosity ");
                put_u64(out, u64::from(*level));
                end_line(out, *noreply);
            }
            Command::Stats { args } => {
                out.put_slice(b"stats");
                for arg in args {
                    out.put_u8(b' ');
                    out.put_slice(arg);
                }
                out.put_slice(b"\r\n");
            }
            Command::Version => out.put_slice(b"version\r\n"),
            Command::Quit => out.put_slice(b"quit\r\n"),
            Command::MetaNoop => out.put_slice(b"mn\r\n"),
            Command::MetaGet(get) => encode_meta_get(get, out),
            Command::MetaSet(set) => encode_meta_set(set, out),
            Command::MetaDelete(delete) => encode_meta_delete(delete, out),
            Command::MetaArithmetic(arithmetic) => encode_meta_arithmetic(arithmetic, out),
            Command::MetaDebug(debug) => encode_meta_debug(debug, out),
        }
    }
}

fn end_line(out: &mut BytesMut, noreply: bool) {
    if noreply {
        out.put_slice(b" noreply");
    }
    out.put_slice(b"\r\n");
}

fn encode_get(get: &Get, out: &mut BytesMut) {
    out.put_slice(get.name().as_bytes());
    if let Some(exptime) = get.touch_exptime {
        out.put_u8(b' ');
        put_i64(out, exptime);
    }
    for key in &get.keys {
        out.put_u8(b' ');
        out.put_slice(key);
    }
    out.put_slice(b"\r\n");
}

fn encode_store(store: &Store, out: &mut BytesMut) {
    out.reserve(store.key.len() + store.data.len() + 64);
    out.put_slice(store.op.name().as_bytes());
    out.put_u8(b' ');
    out.put_slice(&store.key);
    out.put_u8(b' ');
    put_u64(out, u64::from(store.flags));
    out.put_u8(b' ');
    put_i64(out, store.exptime);
    out.put_u8(b' ');
    put_u64(out, store.data.len() as u64);
    if let StoreOp::Cas { unique } = store.op {
        out.put_u8(b' ');
        put_u64(out, unique);
    }
    end_line(out, store.noreply);
    out.put_slice(&store.data);
    out.put_slice(b"\r\n");
}

fn encode_meta_get(get: &MetaGet, out: &mut BytesMut) {
    out.put_slice(b"mg");
    let head = MetaHead {
        key: &get.key,
        base64_key: get.base64_key,
        data_len: None,
        returns: get.returns,
        opaque: get.opaque.as_deref(),
    };
    put_meta_head(out, head, GET_RETURNS);
    put_flag(out, b'v', get.return_value);
    put_flag(out, b'q', get.quiet);
    put_flag(out, b'u', get.no_lru_bump);
    put_flag_i64(out, b'N', get.vivify_exptime);
    put_flag_i64(out, b'R', get.recache_exptime);
    put_flag_i64(out, b'T', get.new_exptime);
    put_flag_u64(out, b'C', get.compare_cas);
    put_flag_u64(out, b'E', get.new_cas);
    out.put_slice(b"\r\n");
}

fn encode_meta_set(set: &MetaSet, out: &mut BytesMut) {
    out.reserve(set.key.len() + set.data.len() + 128);
    out.put_slice(b"ms");
    let head = MetaHead {
        key: &set.key,
        base64_key: set.base64_key,
        data_len: Some(set.data.len()),
        returns: set.returns,
        opaque: set.opaque.as_deref(),
    };
    put_meta_head(out, head, SET_RETURNS);
    put_flag(out, b'q', set.quiet);
    put_flag_u64(
        out,
        b'F',
        Some(u64::from(set.client_flags)).filter(|&f| f != 0),
    );
    put_flag_i64(out, b'T', Some(set.exptime).filter(|&e| e != 0));
    put_flag_u64(out, b'C', set.compare_cas);
    put_flag_u64(out, b'E', set.new_cas);
    put_flag(out, b'I', set.invalidate);
    if set.mode != SetMode::Set {
        out.put_slice(b" M");
        out.put_u8(set.mode.letter());
    }
    put_flag_i64(out, b'N', set.vivify_exptime);
    out.put_slice(b"\r\n");
    out.put_slice(&set.data);
    out.put_slice(b"\r\n");
}

fn encode_meta_delete(delete: &MetaDelete, out: &mut BytesMut) {
    out.put_slice(b"md");
    let head = MetaHead {
        key: &delete.key,
        base64_key: delete.base64_key,
        data_len: None,
        returns: delete.returns,
        opaque: delete.opaque.as_deref(),
    };
    put_meta_head(out, head, DELETE_RETURNS);
    put_flag(out, b'q', delete.quiet);
    put_flag_u64(out, b'C', delete.compare_cas);
    put_flag_u64(out, b'E', delete.new_cas);
    put_flag(out, b'I', delete.invalidate);
    put_flag_i64(out, b'T', delete.new_exptime);
    put_flag(out, b'x', delete.remove_value);
    out.put_slice(b"\r\n");
}

fn encode_meta_arithmetic(arithmetic: &MetaArithmetic, out: &mut BytesMut) {
    out.put_slice(b"ma");
    let head = MetaHead {
        key: &arithmetic.key,
        base64_key: arithmetic.base64_key,
        data_len: None,
        returns: arithmetic.returns,
        opaque: arithmetic.opaque.as_deref(),
    };
    put_meta_head(out, head, ARITHMETIC_RETURNS);
    put_flag(out, b'q', arithmetic.quiet);
    put_flag(out, b'v', arithmetic.return_value);
    put_flag_u64(out, b'C', arithmetic.compare_cas);
    put_flag_u64(out, b'E', arithmetic.new_cas);
    put_flag_i64(out, b'N', arithmetic.vivify_exptime);
    put_flag_u64(out, b'J', Some(arithmetic.initial).filter(|&j| j != 0));
    put_flag_u64(out, b'D', Some(arithmetic.delta).filter(|&d| d != 1));
    put_flag_i64(out, b'T', arithmetic.new_exptime);
    if arithmetic.mode == crate::ArithmeticOp::Decr {
        out.put_slice(b" MD");
    }
    out.put_slice(b"\r\n");
}

fn encode_meta_debug(debug: &MetaDebug, out: &mut BytesMut) {
    out.put_slice(b"me ");
    put_key(out, &debug.key, debug.base64_key);
    put_flag(out, b'b', debug.base64_key);
    out.put_slice(b"\r\n");
}
