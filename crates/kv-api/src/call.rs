//! The key-value call encoding (docs/kv.md, "Calls"): one call carries a
//! tenant's credentials and a batch of operations for one node, or asks for
//! the tenant's figures or a flush; one answer carries an answer per
//! operation, in order.

use bytes::Bytes;
use quarry_proto::{ByteReader, ByteWriter};

use crate::{
    Expiry, FailKind, Item, ItemKind, KvAnswer, KvError, KvOp, Result, StoreMode, TenantName,
    MAX_KEY_BYTES, MAX_SECRET_BYTES,
};

/// Most operations in one call: Minerva batches about a thousand small
/// operations into a command; a few times that bounds a batch's memory at a
/// node whatever a caller sends.
pub const MAX_OPS_PER_CALL: usize = 8192;

/// Most bytes of operations in one call, within a frame's body.
pub const MAX_CALL_BYTES: usize = 4 << 20;

/// Most bytes of answers in one reply: a node stops a batch before an
/// operation whose answer could take the reply past this, and answers the
/// operations before it; the caller sends the rest again. A frame's body
/// holds it with room to spare.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// Largest value one item holds: memcached's default item size. Larger
/// values are cut into slices of this size by the clients (Multes++).
pub const MAX_VALUE_BYTES: usize = 1 << 20;

const FORMAT: u8 = 1;

/// What a call asks of the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvRequest {
    /// Run these operations, in order, as one batch.
    Ops(Vec<KvOp>),
    /// The tenant's figures on this node.
    Stats,
    /// Drop every item of the tenant on this node (now, or at a time).
    FlushAll {
        /// When: items stored before then are gone from then on.
        at: Expiry,
    },
}

/// One call to a node's key-value service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCall {
    /// Whose keys.
    pub tenant: TenantName,
    /// The tenant's secret (empty when the node has no tenants configured).
    pub secret: Bytes,
    /// What to do.
    pub request: KvRequest,
}

/// A node's answer to a [`KvCall`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvReply {
    /// One answer per operation, in order.
    Answers(Vec<KvAnswer>),
    /// The tenant's figures on this node, by name.
    Stats(Vec<(String, u64)>),
    /// The flush is done (or set for its time).
    Flushed,
    /// The whole call was refused (credentials, a broken limit).
    Refused {
        /// Why, as a kind.
        kind: FailKind,
        /// Why, for people.
        message: String,
    },
}

/// A tenant's figures over a cluster: each node's, and their sum (a limit
/// of the cluster is the sum of its nodes'; `durable`, a setting the same
/// on every node, is taken as it is).
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterFigures {
    /// Each node's figures, by name.
    pub by_node: Vec<(quarry_proto::NodeId, Vec<(String, u64)>)>,
    /// The figures summed over the nodes, by name.
    pub total: std::collections::BTreeMap<String, u64>,
}

impl ClusterFigures {
    /// Sums `by_node`.
    pub fn new(by_node: Vec<(quarry_proto::NodeId, Vec<(String, u64)>)>) -> Self {
        let mut total = std::collections::BTreeMap::new();
        for (_, figures) in &by_node {
            for (name, value) in figures {
                let t: &mut u64 = total.entry(name.clone()).or_default();
                *t = if name == "durable" {
                    *value
                } else {
                    t.saturating_add(*value)
                };
            }
        }
        Self { by_node, total }
    }

    /// The summed figure `name` (0 when no node reports it).
    pub fn get(&self, name: &str) -> u64 {
        self.total.get(name).copied().unwrap_or(0)
    }

    /// Logical bytes over stored bytes (1 when nothing is stored).
    pub fn dedup_ratio(&self) -> f64 {
        match self.get("stored_bytes") {
            0 => 1.0,
            stored => self.get("logical_bytes") as f64 / stored as f64,
        }
    }
}

fn key(r: &mut ByteReader<'_>, source: &Bytes) -> Result<Bytes> {
    let n = usize::from(r.u8()?);
    if n == 0 || n > MAX_KEY_BYTES {
        return Err(r.malformed(format!("a key of {n} bytes")).into());
    }
    Ok(r.slice_of(source, n)?)
}

fn put_key(w: &mut ByteWriter, key: &[u8]) {
    debug_assert!(!key.is_empty() && key.len() <= MAX_KEY_BYTES);
    w.u8(key.len() as u8).raw(key);
}

fn cas_opt(r: &mut ByteReader<'_>) -> Result<Option<u64>> {
    let present = r.flag()?;
    let cas = r.u64()?;
    Ok(present.then_some(cas))
}

fn put_cas_opt(w: &mut ByteWriter, cas: Option<u64>) {
    w.flag(cas.is_some()).u64(cas.unwrap_or(0));
}

fn mode_code(mode: StoreMode) -> (u8, u64) {
    match mode {
        StoreMode::Set => (0, 0),
        StoreMode::Add => (1, 0),
        StoreMode::Replace => (2, 0),
        StoreMode::Append => (3, 0),
        StoreMode::Prepend => (4, 0),
        StoreMode::Cas(c) => (5, c),
    }
}

fn mode_of(r: &ByteReader<'_>, code: u8, cas: u64) -> Result<StoreMode> {
    Ok(match code {
        0 => StoreMode::Set,
        1 => StoreMode::Add,
        2 => StoreMode::Replace,
        3 => StoreMode::Append,
        4 => StoreMode::Prepend,
        5 => StoreMode::Cas(cas),
        other => return Err(r.malformed(format!("store mode {other}")).into()),
    })
}

/// Bytes of the smallest encoded operation ([`put_op`]): a touch of a
/// 1-byte key.
const MIN_OP_BYTES: usize = 1 + 1 + 1 + 8;

fn put_op(w: &mut ByteWriter, op: &KvOp) {
    match op {
        KvOp::Get { key, touch } => {
            w.u8(1);
            put_key(w, key);
            w.flag(touch.is_some())
                .u64(touch.map_or(0, Expiry::to_wire));
        }
        KvOp::Store {
            key,
            mode,
            flags,
            expiry,
            kind,
            value,
        } => {
            let (code, cas) = mode_code(*mode);
            w.u8(2);
            put_key(w, key);
            w.u8(code)
                .u64(cas)
                .u32(*flags)
                .u64(expiry.to_wire())
                .u8(*kind as u8)
                .u32(value.len() as u32)
                .raw(value);
        }
        KvOp::Delete { key, cas } => {
            w.u8(3);
            put_key(w, key);
            put_cas_opt(w, *cas);
        }
        KvOp::Arith {
            key,
            decrement,
            delta,
            vivify,
            cas,
        } => {
            w.u8(4);
            put_key(w, key);
            w.flag(*decrement).u64(*delta).flag(vivify.is_some());
            let (initial, expiry) = vivify.unwrap_or((0, Expiry::Never));
            w.u64(initial).u64(expiry.to_wire());
            put_cas_opt(w, *cas);
        }
        KvOp::Touch { key, expiry } => {
            w.u8(5);
            put_key(w, key);
            w.u64(expiry.to_wire());
        }
    }
}

fn op(r: &mut ByteReader<'_>, source: &Bytes) -> Result<KvOp> {
    let code = r.u8()?;
    let k = key(r, source)?;
    Ok(match code {
        1 => {
            let touch = r.flag()?;
            let at = Expiry::from_wire(r.u64()?);
            KvOp::Get {
                key: k,
                touch: touch.then_some(at),
            }
        }
        2 => {
            let code = r.u8()?;
            let cas = r.u64()?;
            let mode = mode_of(r, code, cas)?;
            let flags = r.u32()?;
            let expiry = Expiry::from_wire(r.u64()?);
            let kind_byte = r.u8()?;
            let kind = ItemKind::from_u8(kind_byte)
                .ok_or_else(|| r.malformed(format!("item kind {kind_byte}")))?;
            let n = r.u32()? as usize;
            if n > MAX_VALUE_BYTES {
                return Err(r.malformed(format!("a value of {n} bytes")).into());
            }
            let value = r.slice_of(source, n)?;
            KvOp::Store {
                key: k,
                mode,
                flags,
                expiry,
                kind,
                value,
            }
        }
        3 => KvOp::Delete {
            key: k,
            cas: cas_opt(r)?,
        },
        4 => {
            let decrement = r.flag()?;
            let delta = r.u64()?;
            let vivify = r.flag()?;
            let initial = r.u64()?;
            let expiry = Expiry::from_wire(r.u64()?);
            KvOp::Arith {
                key: k,
                decrement,
                delta,
                vivify: vivify.then_some((initial, expiry)),
                cas: cas_opt(r)?,
            }
        }
        5 => KvOp::Touch {
            key: k,
            expiry: Expiry::from_wire(r.u64()?),
        },
        other => return Err(r.malformed(format!("operation code {other}")).into()),
    })
}

impl KvCall {
    /// The call's bytes.
    pub fn encode(&self) -> Bytes {
        let mut w = ByteWriter::starting(FORMAT);
        let kind = match &self.request {
            KvRequest::Ops(_) => 1,
            KvRequest::Stats => 2,
            KvRequest::FlushAll { .. } => 3,
        };
        w.u8(kind).u8(self.tenant.as_str().len() as u8);
        w.raw(self.tenant.as_str().as_bytes());
        w.u16(self.secret.len() as u16).raw(&self.secret);
        match &self.request {
            KvRequest::Ops(ops) => {
                w.u32(ops.len() as u32);
                for op in ops {
                    put_op(&mut w, op);
                }
            }
            KvRequest::Stats => {}
            KvRequest::FlushAll { at } => {
                w.u64(at.to_wire());
            }
        }
        Bytes::from(w.0)
    }

    /// Decodes a call; values are slices of `body`, not copies.
    pub fn decode(body: &Bytes) -> Result<Self> {
        if body.len() > MAX_CALL_BYTES + (64 << 10) {
            return Err(KvError::TooLarge(format!(
                "a key-value call of {} bytes; the limit is {MAX_CALL_BYTES}",
                body.len()
            )));
        }
        let mut r = ByteReader::new("key-value call", body);
        let format = r.u8()?;
        if format != FORMAT {
            return Err(r.malformed(format!("format {format}")).into());
        }
        let kind = r.u8()?;
        let tenant_len = usize::from(r.u8()?);
        let tenant = std::str::from_utf8(r.take(tenant_len)?)
            .map_err(|_| r.malformed("a tenant name that is not UTF-8".to_string()))?;
        let tenant = TenantName::new(tenant)?;
        let secret_len = usize::from(r.u16()?);
        if secret_len > MAX_SECRET_BYTES {
            return Err(r
                .malformed(format!("a secret of {secret_len} bytes"))
                .into());
        }
        let secret = r.slice_of(body, secret_len)?;
        let request = match kind {
            1 => {
                // The smallest operation takes 11 bytes: a touch of a
                // 1-byte key (code, key length, key, expiry).
                let n = r.count(MIN_OP_BYTES)?;
                if n > MAX_OPS_PER_CALL {
                    return Err(KvError::TooLarge(format!(
                        "a batch of {n} operations; the limit is {MAX_OPS_PER_CALL}"
                    )));
                }
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    ops.push(op(&mut r, body)?);
                }
                KvRequest::Ops(ops)
            }
            2 => KvRequest::Stats,
            3 => KvRequest::FlushAll {
                at: Expiry::from_wire(r.u64()?),
            },
            other => return Err(r.malformed(format!("call kind {other}")).into()),
        };
        r.end()?;
        Ok(Self {
            tenant,
            secret,
            request,
        })
    }
}

fn put_answer(w: &mut ByteWriter, a: &KvAnswer) {
    match a {
        KvAnswer::Value(item) => {
            w.u8(1)
                .u32(item.flags)
                .u64(item.cas)
                .u64(item.expiry.to_wire())
                .u8(item.kind as u8)
                .u32(item.value.len() as u32)
                .raw(&item.value);
        }
        KvAnswer::Miss => {
            w.u8(2);
        }
        KvAnswer::Stored { cas } => {
            w.u8(3).u64(*cas);
        }
        KvAnswer::NotStored => {
            w.u8(4);
        }
        KvAnswer::Exists => {
            w.u8(5);
        }
        KvAnswer::NotFound => {
            w.u8(6);
        }
        KvAnswer::Deleted => {
            w.u8(7);
        }
        KvAnswer::Touched => {
            w.u8(8);
        }
        KvAnswer::Number { value, cas } => {
            w.u8(9).u64(*value).u64(*cas);
        }
        KvAnswer::Failed { kind, message } => {
            put_failure(w.u8(10), *kind, message);
        }
    }
}

fn put_failure(w: &mut ByteWriter, kind: FailKind, message: &str) {
    let message = &message.as_bytes()[..message.len().min(1024)];
    w.u8(kind as u8).u16(message.len() as u16).raw(message);
}

fn failure(r: &mut ByteReader<'_>) -> Result<(FailKind, String)> {
    let k = r.u8()?;
    let kind = FailKind::from_u8(k).ok_or_else(|| r.malformed(format!("failure kind {k}")))?;
    let n = usize::from(r.u16()?);
    let message = String::from_utf8_lossy(r.take(n)?).into_owned();
    Ok((kind, message))
}

fn answer(r: &mut ByteReader<'_>, source: &Bytes) -> Result<KvAnswer> {
    Ok(match r.u8()? {
        1 => {
            let flags = r.u32()?;
            let cas = r.u64()?;
            let expiry = Expiry::from_wire(r.u64()?);
            let k = r.u8()?;
            let kind = ItemKind::from_u8(k).ok_or_else(|| r.malformed(format!("item kind {k}")))?;
            let n = r.u32()? as usize;
            let value = r.slice_of(source, n)?;
            KvAnswer::Value(Item {
                flags,
                cas,
                expiry,
                kind,
                value,
            })
        }
        2 => KvAnswer::Miss,
        3 => KvAnswer::Stored { cas: r.u64()? },
        4 => KvAnswer::NotStored,
        5 => KvAnswer::Exists,
        6 => KvAnswer::NotFound,
        7 => KvAnswer::Deleted,
        8 => KvAnswer::Touched,
        9 => KvAnswer::Number {
            value: r.u64()?,
            cas: r.u64()?,
        },
        10 => {
            let (kind, message) = failure(r)?;
            KvAnswer::Failed { kind, message }
        }
        other => return Err(r.malformed(format!("answer code {other}")).into()),
    })
}

impl KvReply {
    /// The answer's bytes.
    pub fn encode(&self) -> Bytes {
        let mut w = ByteWriter::starting(FORMAT);
        match self {
            KvReply::Answers(answers) => {
                w.u8(1).u32(answers.len() as u32);
                for a in answers {
                    put_answer(&mut w, a);
                }
            }
            KvReply::Stats(stats) => {
                w.u8(2).u32(stats.len() as u32);
                for (name, value) in stats {
                    let name = &name.as_bytes()[..name.len().min(255)];
                    w.u8(name.len() as u8).raw(name).u64(*value);
                }
            }
            KvReply::Flushed => {
                w.u8(3);
            }
            KvReply::Refused { kind, message } => {
                put_failure(w.u8(4), *kind, message);
            }
        }
        Bytes::from(w.0)
    }

    /// Decodes an answer; values are slices of `body`, not copies.
    pub fn decode(body: &Bytes) -> Result<Self> {
        let mut r = ByteReader::new("key-value answer", body);
        let format = r.u8()?;
        if format != FORMAT {
            return Err(r.malformed(format!("format {format}")).into());
        }
        let reply = match r.u8()? {
            1 => {
                let n = r.count(1)?;
                let mut answers = Vec::with_capacity(n.min(MAX_OPS_PER_CALL));
                for _ in 0..n {
                    answers.push(answer(&mut r, body)?);
                }
                KvReply::Answers(answers)
            }
            2 => {
                let n = r.count(9)?;
                let mut stats = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = usize::from(r.u8()?);
                    let name = String::from_utf8_lossy(r.take(len)?).into_owned();
                    stats.push((name, r.u64()?));
                }
                KvReply::Stats(stats)
            }
            3 => KvReply::Flushed,
            4 => {
                let (kind, message) = failure(&mut r)?;
                KvReply::Refused { kind, message }
            }
            other => return Err(r.malformed(format!("answer kind {other}")).into()),
        };
        r.end()?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn arb_key() -> impl Strategy<Value = Bytes> {
        prop::collection::vec(any::<u8>(), 1..=MAX_KEY_BYTES).prop_map(Bytes::from)
    }

    fn arb_expiry() -> impl Strategy<Value = Expiry> {
        prop_oneof![Just(Expiry::Never), (1u64..).prop_map(Expiry::At)]
    }

    fn arb_op() -> impl Strategy<Value = KvOp> {
        let mode = prop_oneof![
            Just(StoreMode::Set),
            Just(StoreMode::Add),
            Just(StoreMode::Replace),
            Just(StoreMode::Append),
            Just(StoreMode::Prepend),
            any::<u64>().prop_map(StoreMode::Cas),
        ];
        let kind = prop_oneof![
            Just(ItemKind::Plain),
            Just(ItemKind::LargeHead),
            Just(ItemKind::ArrayDirectory)
        ];
        prop_oneof![
            (arb_key(), prop::option::of(arb_expiry()))
                .prop_map(|(key, touch)| KvOp::Get { key, touch }),
            (
                arb_key(),
                mode,
                any::<u32>(),
                arb_expiry(),
                kind,
                prop::collection::vec(any::<u8>(), 0..300)
            )
                .prop_map(|(key, mode, flags, expiry, kind, v)| KvOp::Store {
                    key,
                    mode,
                    flags,
                    expiry,
                    kind,
                    value: Bytes::from(v)
                }),
            (arb_key(), prop::option::of(any::<u64>()))
                .prop_map(|(key, cas)| KvOp::Delete { key, cas }),
            (
                arb_key(),
                any::<bool>(),
                any::<u64>(),
                prop::option::of((any::<u64>(), arb_expiry())),
                prop::option::of(any::<u64>())
            )
                .prop_map(|(key, decrement, delta, vivify, cas)| KvOp::Arith {
                    key,
                    decrement,
                    delta,
                    vivify,
                    cas
                }),
            (arb_key(), arb_expiry()).prop_map(|(key, expiry)| KvOp::Touch { key, expiry }),
        ]
    }

    fn arb_answer() -> impl Strategy<Value = KvAnswer> {
        prop_oneof![
            (
                any::<u32>(),
                any::<u64>(),
                arb_expiry(),
                prop::collection::vec(any::<u8>(), 0..300)
            )
                .prop_map(|(flags, cas, expiry, v)| KvAnswer::Value(Item {
                    flags,
                    cas,
                    expiry,
                    kind: ItemKind::Plain,
                    value: Bytes::from(v)
                })),
            Just(KvAnswer::Miss),
            any::<u64>().prop_map(|cas| KvAnswer::Stored { cas }),
            Just(KvAnswer::NotStored),
            Just(KvAnswer::Exists),
            Just(KvAnswer::NotFound),
            Just(KvAnswer::Deleted),
            Just(KvAnswer::Touched),
            (any::<u64>(), any::<u64>()).prop_map(|(value, cas)| KvAnswer::Number { value, cas }),
            "[a-z ]{0,40}".prop_map(|message| KvAnswer::Failed {
                kind: FailKind::QuotaBytes,
                message
            }),
        ]
    }

    /// The smallest operations, alone and many: a call of touches of
    /// 1-byte keys was refused as "cannot fit" when the decoder took 12
    /// bytes for the smallest operation.
    #[test]
    fn calls_of_the_smallest_operations_round_trip() {
        let touch = |k: u8| KvOp::Touch {
            key: Bytes::from(vec![k]),
            expiry: Expiry::Never,
        };
        for n in [1u8, 2, 200] {
            let call = KvCall {
                tenant: TenantName::new("t").unwrap(),
                secret: Bytes::new(),
                request: KvRequest::Ops((0..n).map(touch).collect()),
            };
            let bytes = call.encode();
            assert_eq!(KvCall::decode(&bytes).unwrap(), call, "{n} touches");
        }
        let mut smallest = ByteWriter(Vec::new());
        put_op(&mut smallest, &touch(0));
        assert_eq!(smallest.0.len(), MIN_OP_BYTES);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn calls_and_answers_round_trip(ops in prop::collection::vec(arb_op(), 0..20), answers in prop::collection::vec(arb_answer(), 0..20)) {
            let call = KvCall {
                tenant: TenantName::new("t-1").unwrap(),
                secret: Bytes::from_static(b"s3cret"),
                request: KvRequest::Ops(ops),
            };
            prop_assert_eq!(KvCall::decode(&call.encode()).unwrap(), call);
            let reply = KvReply::Answers(answers);
            prop_assert_eq!(KvReply::decode(&reply.encode()).unwrap(), reply);
        }

        /// A call cut short or with a byte changed is refused or decodes to
        /// something, never a panic; random bytes likewise.
        #[test]
        fn damaged_calls_never_panic(ops in prop::collection::vec(arb_op(), 1..5), at in any::<prop::sample::Index>(), byte in any::<u8>(), noise in prop::collection::vec(any::<u8>(), 0..200)) {
            let call = KvCall {
                tenant: TenantName::new("t").unwrap(),
                secret: Bytes::new(),
                request: KvRequest::Ops(ops),
            };
            let bytes = call.encode();
            let i = at.index(bytes.len());
            prop_assert!(KvCall::decode(&bytes.slice(..i)).is_err());
            let mut changed = bytes.to_vec();
            changed[i] = byte;
            let _ = KvCall::decode(&Bytes::from(changed));
            let _ = KvCall::decode(&Bytes::from(noise.clone()));
            let _ = KvReply::decode(&Bytes::from(noise));
        }
    }

    #[test]
    fn claimed_counts_beyond_the_bytes_are_refused_before_allocating() {
        let mut w = ByteWriter::starting(FORMAT);
        w.u8(1).u8(1).raw(b"t").u16(0).u32(u32::MAX);
        let e = KvCall::decode(&Bytes::from(w.0)).unwrap_err().to_string();
        assert!(e.contains("cannot fit"), "{e}");
        let mut w = ByteWriter::starting(FORMAT);
        w.u8(1).u32(u32::MAX);
        assert!(KvReply::decode(&Bytes::from(w.0)).is_err());
    }
}
