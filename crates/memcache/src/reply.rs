//! What a server answers, as values a client reads and a server writes.

use bytes::{BufMut, Bytes, BytesMut};

use crate::encode::{put_i64, put_u64};

/// One answer unit as it travels: one line and, for `VALUE` and `VA`, its
/// data block. A retrieval's answer is several (`Value`s, then `End`), a
/// `stats` answer too (`Stat`s, then `End`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `VALUE <key> <flags> <bytes> [<cas>]` and the data: one hit of a
    /// retrieval.
    Value {
        /// The key, as the request named it.
        key: Bytes,
        /// The client flags stored with the item.
        flags: u32,
        /// The cas unique, for `gets` and `gats`.
        cas: Option<u64>,
        /// The value.
        data: Bytes,
    },
    /// `END`: the end of a retrieval's or of `stats`' answer.
    End,
    /// `STORED`.
    Stored,
    /// `NOT_STORED`: add/replace/append/prepend's condition failed.
    NotStored,
    /// `EXISTS`: cas mismatch.
    Exists,
    /// `NOT_FOUND`.
    NotFound,
    /// `DELETED`.
    Deleted,
    /// `TOUCHED`.
    Touched,
    /// `OK` (`flush_all`, `verbosity`).
    Ok,
    /// `RESET` (`stats reset`).
    Reset,
    /// An `incr`/`decr` result.
    Number(u64),
    /// `VERSION <version>`.
    Version(Bytes),
    /// `STAT <name> <value>`; the value may hold spaces.
    Stat {
        /// The statistic.
        name: Bytes,
        /// Its value as text.
        value: Bytes,
    },
    /// `ERROR`: an unknown command.
    Error,
    /// `CLIENT_ERROR <message>`.
    ClientError(Bytes),
    /// `SERVER_ERROR <message>`.
    ServerError(Bytes),
    /// A meta answer (`HD`, `VA`, `EN`, `NS`, `EX`, `NF`, `MN`).
    Meta(MetaReply),
    /// `ME <key> <info>`: `me`'s answer for a hit.
    MetaDebug {
        /// The key as sent back (base64 for a binary key).
        key: Bytes,
        /// The rest of the line: `exp=.. la=.. cas=.. fetch=.. cls=..
        /// size=..`; [`Reply::meta_debug_fields`] splits it.
        info: Bytes,
    },
}

/// The status of a meta answer: its two-letter code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaCode {
    /// `HD`: success, no value.
    Success,
    /// `VA <size>`: success with a value.
    Value,
    /// `EN`: a miss (`mg`, `me`).
    Miss,
    /// `NS`: not stored.
    NotStored,
    /// `EX`: cas mismatch.
    Exists,
    /// `NF`: not found.
    NotFound,
    /// `MN`: the answer to `mn`.
    Noop,
}

impl MetaCode {
    /// The code as sent.
    pub fn code(self) -> &'static [u8; 2] {
        match self {
            MetaCode::Success => b"HD",
            MetaCode::Value => b"VA",
            MetaCode::Miss => b"EN",
            MetaCode::NotStored => b"NS",
            MetaCode::Exists => b"EX",
            MetaCode::NotFound => b"NF",
            MetaCode::Noop => b"MN",
        }
    }

    pub(crate) fn from_code(code: &[u8]) -> Option<MetaCode> {
        Some(match code {
            b"HD" => MetaCode::Success,
            b"VA" => MetaCode::Value,
            b"EN" => MetaCode::Miss,
            b"NS" => MetaCode::NotStored,
            b"EX" => MetaCode::Exists,
            b"NF" => MetaCode::NotFound,
            b"MN" => MetaCode::Noop,
            _ => return None,
        })
    }
}

/// A meta answer: its code, its flags in order, and for `VA` its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaReply {
    /// The status.
    pub code: MetaCode,
    /// The returned flags, in the order sent.
    pub flags: Vec<MetaFlag>,
    /// The data block: `Some` exactly when `code` is [`MetaCode::Value`].
    pub value: Option<Bytes>,
}

impl MetaReply {
    /// The token of the first flag `letter` (`c` gives the cas unique as
    /// text, `b` an empty token), if it was returned.
    pub fn flag(&self, letter: u8) -> Option<&Bytes> {
        self.flags
            .iter()
            .find(|flag| flag.letter == letter)
            .map(|flag| &flag.token)
    }

    /// The token of flag `letter` as a number, if returned and numeric
    /// (`t` of an item that never expires is `-1`).
    pub fn flag_number(&self, letter: u8) -> Option<i64> {
        let token = self.flag(letter)?;
        std::str::from_utf8(token).ok()?.parse().ok()
    }
}

/// One returned meta flag: its letter and the token after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFlag {
    /// The flag's letter (`c`, `f`, `k`, `O`, `W`, ...).
    pub letter: u8,
    /// What follows the letter up to the next space.
    pub token: Bytes,
}

impl Reply {
    /// `CLIENT_ERROR <message>`, for errors a server finds while executing
    /// a command; memcached's include `cannot increment or decrement
    /// non-numeric value` and `flush_all not allowed`.
    pub fn client_error(message: &str) -> Reply {
        Reply::ClientError(Bytes::copy_from_slice(message.as_bytes()))
    }

    /// `SERVER_ERROR <message>`; memcached's include `out of memory
    /// storing object` and `out of memory`.
    pub fn server_error(message: &str) -> Reply {
        Reply::ServerError(Bytes::copy_from_slice(message.as_bytes()))
    }

    /// `ME`'s `name=value` pairs, in order.
    pub fn meta_debug_fields(info: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
        info.split(|&b| b == b' ')
            .filter(|field| !field.is_empty())
            .map(|field| match memchr::memchr(b'=', field) {
                Some(eq) => (&field[..eq], &field[eq + 1..]),
                None => (field, &field[field.len()..]),
            })
    }

    /// Appends the exact bytes of this answer.
    pub fn encode(&self, out: &mut BytesMut) {
        let line: &[u8] = match self {
            Reply::Value {
                key,
                flags,
                cas,
                data,
            } => {
                encode_value_header(key, *flags, *cas, data.len(), out);
                out.reserve(data.len() + 2);
                out.put_slice(data);
                b"\r\n"
            }
            Reply::End => b"END\r\n",
            Reply::Stored => b"STORED\r\n",
            Reply::NotStored => b"NOT_STORED\r\n",
            Reply::Exists => b"EXISTS\r\n",
            Reply::NotFound => b"NOT_FOUND\r\n",
            Reply::Deleted => b"DELETED\r\n",
            Reply::Touched => b"TOUCHED\r\n",
            Reply::Ok => b"OK\r\n",
            Reply::Reset => b"RESET\r\n",
            Reply::Error => b"ERROR\r\n",
            Reply::Number(n) => {
                put_u64(out, *n);
                b"\r\n"
            }
            Reply::Version(version) => return put_line(out, b"VERSION ", &[version]),
            Reply::Stat { name, value } => return put_line(out, b"STAT ", &[name, value]),
            Reply::ClientError(message) => return put_line(out, b"CLIENT_ERROR ", &[message]),
            Reply::ServerError(message) => return put_line(out, b"SERVER_ERROR ", &[message]),
            Reply::MetaDebug { key, info } => return put_line(out, b"ME ", &[key, info]),
            Reply::Meta(meta) => return encode_meta(meta, out),
        };
        out.put_slice(line);
    }
}

/// `prefix`, the words joined by spaces, `\r\n`.
fn put_line(out: &mut BytesMut, prefix: &[u8], words: &[&Bytes]) {
    out.put_slice(prefix);
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            out.put_u8(b' ');
        }
        out.put_slice(word);
    }
    out.put_slice(b"\r\n");
}

fn encode_meta(meta: &MetaReply, out: &mut BytesMut) {
    out.put_slice(meta.code.code());
    if meta.code == MetaCode::Value {
        out.put_u8(b' ');
        put_u64(out, meta.value.as_ref().map_or(0, |v| v.len() as u64));
    }
    for flag in &meta.flags {
        out.put_u8(b' ');
        out.put_u8(flag.letter);
        out.put_slice(&flag.token);
    }
    out.put_slice(b"\r\n");
    if meta.code == MetaCode::Value {
        if let Some(value) = &meta.value {
            out.put_slice(value);
        }
        out.put_slice(b"\r\n");
    }
}

/// Appends `VALUE <key> <flags> <bytes> [<cas>]\r\n`: the line before a
/// hit's data, for a server that sends the data itself (without a copy)
/// and then `\r\n`.
pub fn encode_value_header(
    key: &[u8],
    flags: u32,
    cas: Option<u64>,
    data_len: usize,
    out: &mut BytesMut,
) {
    out.reserve(key.len() + 64);
    out.put_slice(b"VALUE ");
    out.put_slice(key);
    out.put_u8(b' ');
    put_u64(out, u64::from(flags));
    out.put_u8(b' ');
    put_u64(out, data_len as u64);
    if let Some(cas) = cas {
        out.put_u8(b' ');
        put_u64(out, cas);
    }
    out.put_slice(b"\r\n");
}

/// Appends a meta flag with a signed number (`t-1`).
pub(crate) fn put_meta_i64(out: &mut BytesMut, letter: u8, n: i64) {
    out.put_u8(b' ');
    out.put_u8(letter);
    put_i64(out, n);
}

/// Appends a meta flag with an unsigned number.
pub(crate) fn put_meta_u64(out: &mut BytesMut, letter: u8, n: u64) {
    out.put_u8(b' ');
    out.put_u8(letter);
    put_u64(out, n);
}
