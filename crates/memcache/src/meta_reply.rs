//! A server's answers to meta commands, from the request and what the
//! server found: the flags come back in the order asked, keys in base64
//! when sent so, and `q` leaves out exactly what memcached leaves out.

use bytes::{BufMut, Bytes, BytesMut};

use crate::command::{
    MetaArithmetic, MetaDebug, MetaDelete, MetaGet, MetaSet, ReturnFlag, ReturnFlags,
    ARITHMETIC_RETURNS, DELETE_RETURNS, GET_RETURNS, SET_RETURNS,
};
use crate::encode::{put_key, put_u64};
use crate::reply::{put_meta_i64, put_meta_u64, MetaCode, MetaReply};
use crate::Reply;

/// What `mg` found: the item as the server holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ItemView {
    /// The client flags (`f`).
    pub client_flags: u32,
    /// The cas unique (`c`; compared with `C`).
    pub cas: u64,
    /// The value (`v`; its length is `s`).
    pub value: Bytes,
    /// Seconds of TTL left (`t`); `None` if it never expires (`t-1`).
    pub ttl_remaining_secs: Option<u64>,
    /// Seconds since it was last accessed, before this request (`l`).
    pub last_access_secs: u64,
    /// Whether it had been fetched before this request (`h`).
    pub fetched_before: bool,
    /// This client won the right to recache it (`W`): `N` created it, `R`
    /// found its TTL low, or it is stale and nobody had won yet.
    pub won_recache: bool,
    /// It was marked stale by `md` with `I` (`X`).
    pub stale: bool,
    /// Another client already won it (`Z`).
    pub recache_already_won: bool,
}

/// The values a request's return flags may ask for; what is `None` is
/// not sent even if asked (memcached sends only `O` and `k` with a miss).
#[derive(Default)]
struct Returned {
    cas: Option<u64>,
    client_flags: Option<u32>,
    hit: Option<bool>,
    last_access_secs: Option<u64>,
    size_bytes: Option<u64>,
    ttl_remaining_secs: Option<Option<u64>>,
}

/// The request fields every answer echoes.
struct Echo<'a> {
    key: &'a [u8],
    base64_key: bool,
    opaque: Option<&'a [u8]>,
}

fn put_returns(
    out: &mut BytesMut,
    returns: ReturnFlags,
    allowed: &[ReturnFlag],
    echo: &Echo<'_>,
    values: &Returned,
) {
    for flag in returns.iter().filter(|flag| allowed.contains(flag)) {
        match flag {
            ReturnFlag::Key => {
                out.put_slice(b" k");
                put_key(out, echo.key, echo.base64_key);
                if echo.base64_key {
                    out.put_slice(b" b");
                }
            }
            ReturnFlag::Opaque => {
                if let Some(opaque) = echo.opaque {
                    out.put_slice(b" O");
                    out.put_slice(opaque);
                }
            }
            ReturnFlag::Cas => values.cas.iter().for_each(|&n| put_meta_u64(out, b'c', n)),
            ReturnFlag::ClientFlags => values
                .client_flags
                .iter()
                .for_each(|&n| put_meta_u64(out, b'f', u64::from(n))),
            ReturnFlag::Hit => values
                .hit
                .iter()
                .for_each(|&hit| put_meta_u64(out, b'h', u64::from(hit))),
            ReturnFlag::LastAccess => values
                .last_access_secs
                .iter()
                .for_each(|&n| put_meta_u64(out, b'l', n)),
            ReturnFlag::Size => values
                .size_bytes
                .iter()
                .for_each(|&n| put_meta_u64(out, b's', n)),
            ReturnFlag::Ttl => match values.ttl_remaining_secs {
                Some(Some(secs)) => put_meta_u64(out, b't', secs),
                Some(None) => put_meta_i64(out, b't', -1),
                None => {}
            },
        }
    }
}

impl MetaGet {
    /// Appends the answer to this request: for a hit, `VA <size>` and the
    /// value if `v` was asked (and `C` does not match the item's cas), else
    /// `HD`, with the flags asked for and then `Z`, `X`, `W` as the item
    /// says; for a miss (`None`), `EN` with `O` and `k`, or nothing with
    /// `q`.
    pub fn encode_reply(&self, item: Option<&ItemView>, out: &mut BytesMut) {
        let echo = Echo {
            key: &self.key,
            base64_key: self.base64_key,
            opaque: self.opaque.as_deref(),
        };
        let Some(item) = item else {
            if !self.quiet {
                out.put_slice(b"EN");
                put_returns(out, self.returns, GET_RETURNS, &echo, &Returned::default());
                out.put_slice(b"\r\n");
            }
            return;
        };
        let send_value = self.return_value && self.compare_cas != Some(item.cas);
        if send_value {
            out.reserve(item.value.len() + 64);
            out.put_slice(b"VA ");
            put_u64(out, item.value.len() as u64);
        } else {
            out.put_slice(b"HD");
        }
        let values = Returned {
            cas: Some(item.cas),
            client_flags: Some(item.client_flags),
            hit: Some(item.fetched_before),
            last_access_secs: Some(item.last_access_secs),
            size_bytes: Some(item.value.len() as u64),
            ttl_remaining_secs: Some(item.ttl_remaining_secs),
        };
        put_returns(out, self.returns, GET_RETURNS, &echo, &values);
        // memcached's order, after the asked flags (process_mget_command).
        for (set, flag) in [
            (item.recache_already_won, b" Z"),
            (item.stale, b" X"),
            (item.won_recache, b" W"),
        ] {
            if set {
                out.put_slice(flag);
            }
        }
        out.put_slice(b"\r\n");
        if send_value {
            out.put_slice(&item.value);
            out.put_slice(b"\r\n");
        }
    }
}

/// How a store went: the classic answers' and `ms`'s statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreStatus {
    /// `STORED` / `HD`.
    Stored,
    /// `NOT_STORED` / `NS`: the mode's condition failed.
    NotStored,
    /// `EXISTS` / `EX`: cas mismatch.
    Exists,
    /// `NOT_FOUND` / `NF`: cas (or `ms` with `C`) on a missing key.
    NotFound,
}

impl StoreStatus {
    /// The classic answer.
    pub fn reply(self) -> Reply {
        match self {
            StoreStatus::Stored => Reply::Stored,
            StoreStatus::NotStored => Reply::NotStored,
            StoreStatus::Exists => Reply::Exists,
            StoreStatus::NotFound => Reply::NotFound,
        }
    }
}

/// How an `ms` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetaSetOutcome {
    /// The status.
    pub status: StoreStatus,
    /// The stored item's cas unique (`c`; memcached sends 0 when nothing
    /// was stored).
    pub cas: u64,
    /// The item's size after the store, in bytes (`s`; after an append,
    /// the whole value's).
    pub size_bytes: u64,
}

impl MetaSet {
    /// Appends the answer: `HD` (nothing with `q`), `NS`, `EX` or `NF`,
    /// with `O`, `k`, `c`, `s` as asked.
    pub fn encode_reply(&self, outcome: &MetaSetOutcome, out: &mut BytesMut) {
        let code = match outcome.status {
            StoreStatus::Stored if self.quiet => return,
            StoreStatus::Stored => MetaCode::Success,
            StoreStatus::NotStored => MetaCode::NotStored,
            StoreStatus::Exists => MetaCode::Exists,
            StoreStatus::NotFound => MetaCode::NotFound,
        };
        out.put_slice(code.code());
        let echo = Echo {
            key: &self.key,
            base64_key: self.base64_key,
            opaque: self.opaque.as_deref(),
        };
        let values = Returned {
            cas: Some(outcome.cas),
            size_bytes: Some(outcome.size_bytes),
            ..Returned::default()
        };
        put_returns(out, self.returns, SET_RETURNS, &echo, &values);
        out.put_slice(b"\r\n");
    }
}

/// How an `md` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeleteStatus {
    /// `HD`: deleted (or, with `I`, marked stale).
    Deleted,
    /// `NF`.
    NotFound,
    /// `EX`: `C` did not match.
    Exists,
}

impl MetaDelete {
    /// Appends the answer: `HD` (nothing with `q`), `NF` or `EX`, with `O`
    /// and `k` as asked.
    pub fn encode_reply(&self, status: DeleteStatus, out: &mut BytesMut) {
        let code = match status {
            DeleteStatus::Deleted if self.quiet => return,
            DeleteStatus::Deleted => MetaCode::Success,
            DeleteStatus::NotFound => MetaCode::NotFound,
            DeleteStatus::Exists => MetaCode::Exists,
        };
        out.put_slice(code.code());
        let echo = Echo {
            key: &self.key,
            base64_key: self.base64_key,
            opaque: self.opaque.as_deref(),
        };
        put_returns(
            out,
            self.returns,
            DELETE_RETURNS,
            &echo,
            &Returned::default(),
        );
        out.put_slice(b"\r\n");
    }
}

/// How an `ma` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArithmeticOutcome {
    /// Applied (or the item was created with `N`).
    Done {
        /// The new value.
        value: u64,
        /// The item's cas unique now (`c`).
        cas: u64,
        /// Its TTL left (`t`), `None` if it never expires.
        ttl_remaining_secs: Option<u64>,
    },
    /// `NF`: no such item and no `N`.
    NotFound,
    /// `NS`: `N` could not create it.
    NotStored,
    /// `EX`: `C` did not match.
    Exists,
}

impl MetaArithmetic {
    /// Appends the answer: on success `HD`, or `VA` and the number with
    /// `v` (nothing at all with `q`), with `c`, `t`, `O`, `k` as asked;
    /// otherwise `NF`, `NS` or `EX` with `O` and `k`.
    pub fn encode_reply(&self, outcome: &ArithmeticOutcome, out: &mut BytesMut) {
        let echo = Echo {
            key: &self.key,
            base64_key: self.base64_key,
            opaque: self.opaque.as_deref(),
        };
        let (code, values, number) = match *outcome {
            ArithmeticOutcome::Done { .. } if self.quiet => return,
            ArithmeticOutcome::Done {
                value,
                cas,
                ttl_remaining_secs,
            } => {
                let values = Returned {
                    cas: Some(cas),
                    ttl_remaining_secs: Some(ttl_remaining_secs),
                    ..Returned::default()
                };
                let number = self.return_value.then_some(value);
                let code = if number.is_some() {
                    MetaCode::Value
                } else {
                    MetaCode::Success
                };
                (code, values, number)
            }
            ArithmeticOutcome::NotFound => (MetaCode::NotFound, Returned::default(), None),
            ArithmeticOutcome::NotStored => (MetaCode::NotStored, Returned::default(), None),
            ArithmeticOutcome::Exists => (MetaCode::Exists, Returned::default(), None),
        };
        out.put_slice(code.code());
        if let Some(number) = number {
            let digits = number.checked_ilog10().map_or(1, |log| log + 1);
            out.put_u8(b' ');
            put_u64(out, u64::from(digits));
        }
        put_returns(out, self.returns, ARITHMETIC_RETURNS, &echo, &values);
        out.put_slice(b"\r\n");
        if let Some(number) = number {
            put_u64(out, number);
            out.put_slice(b"\r\n");
        }
    }
}

/// What `me` found: an item's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DebugView {
    /// Seconds of TTL left, `None` if it never expires (`exp=-1`).
    pub ttl_remaining_secs: Option<u64>,
    /// Seconds since last access (`la`).
    pub last_access_secs: u64,
    /// The cas unique (`cas`).
    pub cas: u64,
    /// Fetched since stored (`fetch=yes`).
    pub fetched: bool,
    /// The slab class (`cls`); a server without slabs may send 1.
    pub slab_class: u32,
    /// The item's whole size in memory, in bytes (`size`).
    pub size_bytes: u64,
}

impl MetaDebug {
    /// Appends the answer: `ME <key> exp=.. la=.. cas=.. fetch=yes|no
    /// cls=.. size=..` (the key in base64 if sent so, without a `b`), or
    /// `EN` for a miss.
    pub fn encode_reply(&self, item: Option<&DebugView>, out: &mut BytesMut) {
        let Some(item) = item else {
            out.put_slice(b"EN\r\n");
            return;
        };
        out.put_slice(b"ME ");
        put_key(out, &self.key, self.base64_key);
        out.put_slice(b" exp=");
        match item.ttl_remaining_secs {
            Some(secs) => put_u64(out, secs),
            None => out.put_slice(b"-1"),
        }
        out.put_slice(b" la=");
        put_u64(out, item.last_access_secs);
        out.put_slice(b" cas=");
        put_u64(out, item.cas);
        out.put_slice(if item.fetched {
            b" fetch=yes cls="
        } else {
            b" fetch=no cls="
        });
        put_u64(out, u64::from(item.slab_class));
        out.put_slice(b" size=");
        put_u64(out, item.size_bytes);
        out.put_slice(b"\r\n");
    }
}

impl MetaReply {
    /// `MN`, the answer to `mn`.
    pub fn noop() -> MetaReply {
        MetaReply {
            code: MetaCode::Noop,
            flags: Vec::new(),
            value: None,
        }
    }
}
