//! A pipeline of memcached commands as key-value operations, and the
//! answers back as memcached's bytes: each command becomes zero or more
//! operations of one batch (a `get` of n keys, n operations), and a
//! [`Step`] remembers how to write its answer from its operations'.

use bytes::{Bytes, BytesMut};
use quarry_kv_api::{Expiry, FailKind, Item, KvAnswer, KvOp, StoreMode};
use quarry_memcache::{
    expiry_unix_secs, ArithmeticOp, ArithmeticOutcome, Command, DebugView, DeleteStatus, Get,
    ItemView, MetaArithmetic, MetaDebug, MetaDelete, MetaGet, MetaSet, MetaSetOutcome, Reply,
    SetMode, StoreOp, StoreStatus,
};

/// How one command's answer is written from its operations' answers.
pub(crate) enum Step {
    /// `get`/`gets`/`gat`/`gats` over `keys` (one operation each); a long
    /// one is cut into several, the last of which writes `END`.
    Get {
        keys: Vec<Bytes>,
        return_cas: bool,
        end: bool,
    },
    /// A classic storage, delete, incr/decr or touch command (one
    /// operation); nothing is written with `noreply`.
    Classic {
        noreply: bool,
        kind: ClassicKind,
    },
    /// `mg`, `ms`, `md`, `ma`, `me` (one operation each).
    MetaGet(Box<MetaGet>),
    MetaSet(Box<MetaSet>),
    MetaDelete(Box<MetaDelete>),
    MetaArithmetic(Box<MetaArithmetic>),
    MetaDebug(Box<MetaDebug>),
    /// An answer known without the store (`mn`, an error, `version`).
    Fixed(Bytes),
}

#[derive(Clone, Copy)]
pub(crate) enum ClassicKind {
    Store,
    Delete,
    Arith,
    Touch,
}

fn expiry(exptime: i64, now: u64) -> Expiry {
    match expiry_unix_secs(exptime, now) {
        quarry_memcache::Expiry::Never => Expiry::Never,
        quarry_memcache::Expiry::At(t) => Expiry::At(t.max(1)),
    }
}

fn get_op(key: Bytes, touch: Option<Expiry>) -> KvOp {
    KvOp::Get { key, touch }
}

/// A retrieval's keys in pieces of at most `max_ops`, each with its
/// operations.
pub(crate) fn plan_get(get: Get, now: u64, max_ops: usize) -> Vec<(Vec<KvOp>, Step)> {
    let touch = get.touch_exptime.map(|t| expiry(t, now));
    let pieces: Vec<&[Bytes]> = if get.keys.is_empty() {
        vec![&[]]
    } else {
        get.keys.chunks(max_ops.max(1)).collect()
    };
    let last = pieces.len() - 1;
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, keys)| {
            let ops = keys.iter().map(|k| get_op(k.clone(), touch)).collect();
            let step = Step::Get {
                keys: keys.to_vec(),
                return_cas: get.return_cas,
                end: i == last,
            };
            (ops, step)
        })
        .collect()
}

/// Adds `command`'s operations to `ops` and returns how to answer it; the
/// commands that are not operations on keys (stats, flush_all, quit,
/// verbosity) are the caller's and never reach here, nor do retrievals
/// ([`plan_get`]).
pub(crate) fn plan(command: Command, now: u64, ops: &mut Vec<KvOp>) -> Step {
    match command {
        Command::Store(s) => {
            let mode = match s.op {
                StoreOp::Set => StoreMode::Set,
                StoreOp::Add => StoreMode::Add,
                StoreOp::Replace => StoreMode::Replace,
                StoreOp::Append => StoreMode::Append,
                StoreOp::Prepend => StoreMode::Prepend,
                StoreOp::Cas { unique } => StoreMode::Cas(unique),
            };
            ops.push(KvOp::Store {
                key: s.key,
                mode,
                flags: s.flags,
                expiry: expiry(s.exptime, now),
                kind: quarry_kv_api::ItemKind::Plain,
                value: s.data,
            });
            classic(s.noreply, ClassicKind::Store)
        }
        Command::Delete { key, noreply } => {
            ops.push(KvOp::Delete { key, cas: None });
            classic(noreply, ClassicKind::Delete)
        }
        Command::Arithmetic {
            op,
            key,
            delta,
            noreply,
        } => {
            ops.push(KvOp::Arith {
                key,
                decrement: op == ArithmeticOp::Decr,
                delta,
                vivify: None,
                cas: None,
            });
            classic(noreply, ClassicKind::Arith)
        }
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            ops.push(KvOp::Touch {
                key,
                expiry: expiry(exptime, now),
            });
            classic(noreply, ClassicKind::Touch)
        }
        Command::MetaNoop => Step::Fixed(Bytes::from_static(b"MN\r\n")),
        Command::MetaGet(m) => {
            ops.push(get_op(m.key.clone(), m.new_exptime.map(|t| expiry(t, now))));
            Step::MetaGet(Box::new(m))
        }
        Command::MetaDebug(m) => {
            ops.push(get_op(m.key.clone(), None));
            Step::MetaDebug(Box::new(m))
        }
        Command::MetaSet(m) => plan_meta_set(m, now, ops),
        Command::MetaDelete(m) => {
            ops.push(KvOp::Delete {
                key: m.key.clone(),
                cas: m.compare_cas,
            });
            Step::MetaDelete(Box::new(m))
        }
        Command::MetaArithmetic(m) => {
            ops.push(KvOp::Arith {
                key: m.key.clone(),
                decrement: m.mode == ArithmeticOp::Decr,
                delta: m.delta,
                vivify: m.vivify_exptime.map(|t| (m.initial, expiry(t, now))),
                cas: m.compare_cas,
            });
            Step::MetaArithmetic(Box::new(m))
        }
        other => Step::Fixed(Bytes::from(format!(
            "SERVER_ERROR {} is not run as a key operation\r\n",
            other.name()
        ))),
    }
}

fn classic(noreply: bool, kind: ClassicKind) -> Step {
    Step::Classic { noreply, kind }
}

fn plan_meta_set(m: MetaSet, now: u64, ops: &mut Vec<KvOp>) -> Step {
    let mode = match (m.mode, m.compare_cas) {
        (SetMode::Set | SetMode::Replace, Some(c)) => StoreMode::Cas(c),
        (SetMode::Set, None) => StoreMode::Set,
        (SetMode::Add, _) => StoreMode::Add,
        (SetMode::Replace, None) => StoreMode::Replace,
        (SetMode::Append, _) => StoreMode::Append,
        (SetMode::Prepend, _) => StoreMode::Prepend,
    };
    ops.push(KvOp::Store {
        key: m.key.clone(),
        mode,
        flags: m.client_flags,
        expiry: expiry(m.exptime, now),
        kind: quarry_kv_api::ItemKind::Plain,
        value: m.data.clone(),
    });
    Step::MetaSet(Box::new(m))
}

/// How many operations a step took.
pub(crate) fn op_count(step: &Step) -> usize {
    match step {
        Step::Get { keys, .. } => keys.len(),
        Step::Fixed(_) => 0,
        _ => 1,
    }
}

/// memcached's answer to a refusal: its own strings where it has one.
fn failure_reply(kind: FailKind, message: &str) -> Reply {
    let text = match kind {
        FailKind::TooLarge => "object too large for cache".to_string(),
        FailKind::OutOfMemory | FailKind::QuotaBytes | FailKind::QuotaKeys => {
            "out of memory storing object".to_string()
        }
        FailKind::NonNumeric => {
            return Reply::client_error("cannot increment or decrement non-numeric value")
        }
        FailKind::Denied => return Reply::client_error("unauthenticated"),
        FailKind::Throttled => "tenant over its rate limit".to_string(),
        FailKind::BadInput => return Reply::client_error(&one_line(message)),
        FailKind::Internal | FailKind::Unavailable => one_line(message),
    };
    Reply::server_error(&text)
}

/// A message fit for one protocol line: no line breaks, at most 200 bytes.
fn one_line(message: &str) -> String {
    message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect()
}

fn ttl_left(expiry: Expiry, now: u64) -> Option<u64> {
    match expiry {
        Expiry::Never => None,
        Expiry::At(t) => Some(t.saturating_sub(now)),
    }
}

fn item_view(item: &Item, now: u64) -> ItemView {
    ItemView {
        client_flags: item.flags,
        cas: item.cas,
        value: item.value.clone(),
        ttl_remaining_secs: ttl_left(item.expiry, now),
        ..ItemView::default()
    }
}

/// Writes `step`'s answer from `answers` (its operations', in order).
pub(crate) fn answer(step: Step, answers: &[KvAnswer], now: u64, out: &mut BytesMut) {
    // A failure of a meta command's operation is a line of its own.
    if !matches!(
        step,
        Step::Get { .. } | Step::Classic { .. } | Step::Fixed(_)
    ) {
        if let Some(KvAnswer::Failed { kind, message }) = answers.first() {
            failure_reply(*kind, message).encode(out);
            return;
        }
    }
    match step {
        Step::Get {
            keys,
            return_cas,
            end,
        } => {
            for (key, a) in keys.into_iter().zip(answers) {
                match a {
                    KvAnswer::Value(item) => Reply::Value {
                        key,
                        flags: item.flags,
                        cas: return_cas.then_some(item.cas),
                        data: item.value.clone(),
                    }
                    .encode(out),
                    KvAnswer::Failed { kind, message } => {
                        // memcached ends a retrieval at its first error.
                        failure_reply(*kind, message).encode(out);
                        return;
                    }
                    _ => {}
                }
            }
            if end {
                Reply::End.encode(out);
            }
        }
        Step::Classic { noreply, kind } => {
            if !noreply {
                if let Some(a) = answers.first() {
                    classic_reply(kind, a).encode(out);
                }
            }
        }
        Step::MetaGet(m) => {
            let item = match answers.first() {
                Some(KvAnswer::Value(item)) => Some(item_view(item, now)),
                _ => None,
            };
            m.encode_reply(item.as_ref(), out);
        }
        Step::MetaDebug(m) => {
            let item = match answers.first() {
                Some(KvAnswer::Value(item)) => Some(DebugView {
                    ttl_remaining_secs: ttl_left(item.expiry, now),
                    cas: item.cas,
                    slab_class: 1,
                    size_bytes: item.value.len() as u64,
                    ..DebugView::default()
                }),
                _ => None,
            };
            m.encode_reply(item.as_ref(), out);
        }
        Step::MetaSet(m) => {
            let (status, cas) = match answers.first() {
                Some(KvAnswer::Stored { cas }) => (StoreStatus::Stored, *cas),
                Some(KvAnswer::NotStored) => (StoreStatus::NotStored, 0),
                Some(KvAnswer::Exists) => (StoreStatus::Exists, 0),
                _ => (StoreStatus::NotFound, 0),
            };
            let outcome = MetaSetOutcome {
                status,
                cas,
                size_bytes: m.data.len() as u64,
            };
            m.encode_reply(&outcome, out);
        }
        Step::MetaDelete(m) => {
            let status = match answers.first() {
                Some(KvAnswer::Deleted) => DeleteStatus::Deleted,
                Some(KvAnswer::Exists) => DeleteStatus::Exists,
                _ => DeleteStatus::NotFound,
            };
            m.encode_reply(status, out);
        }
        Step::MetaArithmetic(m) => {
            let outcome = match answers.first() {
                Some(KvAnswer::Number { value, cas }) => ArithmeticOutcome::Done {
                    value: *value,
                    cas: *cas,
                    ttl_remaining_secs: None,
                },
                Some(KvAnswer::Exists) => ArithmeticOutcome::Exists,
                Some(KvAnswer::NotStored) => ArithmeticOutcome::NotStored,
                _ => ArithmeticOutcome::NotFound,
            };
            m.encode_reply(&outcome, out);
        }
        Step::Fixed(bytes) => out.extend_from_slice(&bytes),
    }
}

fn classic_reply(kind: ClassicKind, a: &KvAnswer) -> Reply {
    match (kind, a) {
        (_, KvAnswer::Failed { kind, message }) => failure_reply(*kind, message),
        (_, KvAnswer::Stored { .. }) => Reply::Stored,
        (_, KvAnswer::NotStored) => Reply::NotStored,
        (_, KvAnswer::Exists) => Reply::Exists,
        (_, KvAnswer::NotFound | KvAnswer::Miss) => Reply::NotFound,
        (_, KvAnswer::Deleted) => Reply::Deleted,
        (_, KvAnswer::Touched) => Reply::Touched,
        (_, KvAnswer::Number { value, .. }) => Reply::Number(*value),
        (
            ClassicKind::Store | ClassicKind::Delete | ClassicKind::Arith | ClassicKind::Touch,
            KvAnswer::Value(_),
        ) => Reply::server_error("unexpected answer"),
    }
}
