//! Key-value operations over a cluster: each key's operations go to the
//! node its point names, a batch is split per node into calls that run at
//! once (Minerva's batching), and the answers come back in the caller's
//! order. Large values are cut into slices and arrays kept behind a
//! directory value (Multes++ §3), both on top of plain items.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use quarry_proto::NodeId;
use quarry_store_api::Placement;

use crate::{
    key_point, Expiry, FailKind, Item, ItemKind, KvAnswer, KvCall, KvError, KvOp, KvReply,
    KvRequest, Result, StoreMode, TenantName, MAX_ANSWER_BYTES, MAX_CALL_BYTES, MAX_KEY_BYTES,
    MAX_OPS_PER_CALL,
};

/// How a [`KvCluster`] reaches a node's key-value service: across the
/// wire (encoding the call), or straight to the node's own service when
/// the caller is the node.
pub trait KvTransport: Send + Sync + 'static {
    /// Sends `call` to `node` and returns its answer.
    fn call(&self, node: NodeId, call: KvCall) -> impl Future<Output = Result<KvReply>> + Send;
}

/// One tenant's view of the key-value tables of a cluster.
pub struct KvCluster<X> {
    placement: Placement,
    transport: Arc<X>,
    tenant: TenantName,
    secret: Bytes,
}

impl<X> Clone for KvCluster<X> {
    fn clone(&self) -> Self {
        Self {
            placement: self.placement.clone(),
            transport: Arc::clone(&self.transport),
            tenant: self.tenant.clone(),
            secret: self.secret.clone(),
        }
    }
}

fn failed(kind: FailKind, message: impl Into<String>) -> KvAnswer {
    KvAnswer::Failed {
        kind,
        message: message.into(),
    }
}

impl<X: KvTransport> KvCluster<X> {
    /// `tenant`'s keys over `members`, reached through `transport`.
    pub fn new(
        members: impl IntoIterator<Item = NodeId>,
        transport: Arc<X>,
        tenant: TenantName,
        secret: Bytes,
    ) -> Result<Self> {
        if secret.len() > crate::MAX_SECRET_BYTES {
            return Err(KvError::TooLarge(format!(
                "a secret of {} bytes; the limit is {}",
                secret.len(),
                crate::MAX_SECRET_BYTES
            )));
        }
        let placement = Placement::new(members).map_err(|e| KvError::Transport {
            node: 0,
            message: e.to_string(),
        })?;
        Ok(Self {
            placement,
            transport,
            tenant,
            secret,
        })
    }

    /// The tenant.
    pub fn tenant(&self) -> &TenantName {
        &self.tenant
    }

    /// The members keys are placed over.
    pub fn members(&self) -> &[NodeId] {
        self.placement.members()
    }

    /// The node `key` lives on.
    pub fn node_of(&self, key: &[u8]) -> NodeId {
        self.placement.owner(key_point(&self.tenant, key))
    }

    fn call_of(&self, request: KvRequest) -> KvCall {
        KvCall {
            tenant: self.tenant.clone(),
            secret: self.secret.clone(),
            request,
        }
    }

    /// Runs `ops` on one node, in order, in as many calls as the limits
    /// need: at most [`MAX_OPS_PER_CALL`] operations and [`MAX_CALL_BYTES`]
    /// a call, and a node that would answer more than a frame holds answers
    /// a prefix and is sent the rest again. A failure to reach the node, or
    /// a refusal of a whole call, is the answer of every operation not yet
    /// answered.
    pub async fn run_on(&self, node: NodeId, ops: Vec<KvOp>) -> Vec<KvAnswer> {
        let mut out = Vec::with_capacity(ops.len());
        let mut rest = ops;
        while !rest.is_empty() {
            let mut bytes = 0;
            let take = rest
                .iter()
                .take(MAX_OPS_PER_CALL)
                .take_while(|op| {
                    bytes += op.wire_bytes();
                    bytes <= MAX_CALL_BYTES
                })
                .count()
                .max(1);
            // The common case: everything fits one call and its answers
            // surely fit one reply, so nothing can come back to be sent
            // again and the operations go without a copy.
            let whole = take == rest.len()
                && rest.iter().map(KvAnswer::most_bytes_for).sum::<usize>() <= MAX_ANSWER_BYTES;
            let sent = if whole {
                std::mem::take(&mut rest)
            } else {
                rest[..take].to_vec()
            };
            let answer = self
                .transport
                .call(node, self.call_of(KvRequest::Ops(sent)))
                .await;
            // Every operation sent and not answered, and every one not sent.
            let unanswered = |rest: &mut Vec<KvOp>, answered: usize, a: KvAnswer| {
                let n = if whole {
                    take - answered
                } else {
                    rest.len() - answered
                };
                rest.clear();
                vec![a; n]
            };
            match answer {
                Ok(KvReply::Answers(answers)) if !answers.is_empty() && answers.len() <= take => {
                    let answered = answers.len();
                    out.extend(answers);
                    if whole && answered < take {
                        let message =
                            format!("node {node} answered {answered} operations of {take}");
                        out.extend(unanswered(
                            &mut rest,
                            answered,
                            failed(FailKind::Internal, message),
                        ));
                    } else if !whole {
                        rest.drain(..answered);
                    }
                }
                Ok(KvReply::Answers(answers)) => {
                    let message = format!(
                        "node {node} answered {} operations of {take}",
                        answers.len()
                    );
                    out.extend(unanswered(
                        &mut rest,
                        0,
                        failed(FailKind::Internal, message),
                    ));
                }
                Ok(KvReply::Refused { kind, message }) => {
                    out.extend(unanswered(&mut rest, 0, failed(kind, message)));
                }
                Ok(other) => {
                    let message = format!("node {node} answered operations with {other:?}");
                    out.extend(unanswered(
                        &mut rest,
                        0,
                        failed(FailKind::Internal, message),
                    ));
                }
                Err(e) => out.extend(unanswered(
                    &mut rest,
                    0,
                    failed(FailKind::Unavailable, e.to_string()),
                )),
            }
        }
        out
    }

    /// Runs `ops` where their keys live: split per node, every node's share
    /// at once, each node's in the order given ([`Self::run_on`]), so
    /// operations on one key keep their order. An operation with a bad key
    /// or a value over an item's size is answered `BadInput` without being
    /// sent. Answers in `ops`' order.
    pub async fn run(&self, ops: Vec<KvOp>) -> Vec<KvAnswer> {
        // The common case (one node, or every key on one): no split and no
        // reassembly.
        if let Some(node) = self.one_node_of(&ops) {
            return self.run_on(node, ops).await;
        }
        let total = ops.len();
        let mut answers: Vec<Option<KvAnswer>> = vec![None; total];
        let mut per_node: Vec<(NodeId, Vec<usize>, Vec<KvOp>)> = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            if let Some(refusal) = check_op(&op) {
                answers[i] = Some(refusal);
                continue;
            }
            let node = self.node_of(op.key());
            let slot = match per_node.iter().position(|(n, ..)| *n == node) {
                Some(s) => s,
                None => {
                    per_node.push((node, Vec::new(), Vec::new()));
                    per_node.len() - 1
                }
            };
            per_node[slot].1.push(i);
            per_node[slot].2.push(op);
        }
        let runs = per_node
            .into_iter()
            .map(|(node, idx, ops)| async move { (idx, self.run_on(node, ops).await) });
        for (idx, got) in futures::future::join_all(runs).await {
            for (i, a) in idx.into_iter().zip(got) {
                answers[i] = Some(a);
            }
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| failed(FailKind::Internal, "no answer")))
            .collect()
    }

    /// The node every operation of `ops` goes to, when it is one node and
    /// every operation passes [`check_op`].
    fn one_node_of(&self, ops: &[KvOp]) -> Option<NodeId> {
        let single = match self.placement.members() {
            [only] => Some(*only),
            _ => None,
        };
        let mut node = None;
        for op in ops {
            if check_op(op).is_some() {
                return None;
            }
            let here = single.unwrap_or_else(|| self.node_of(op.key()));
            if node.is_some_and(|n| n != here) {
                return None;
            }
            node = Some(here);
        }
        node
    }

    async fn one(&self, op: KvOp) -> KvAnswer {
        if let Some(refusal) = check_op(&op) {
            return refusal;
        }
        let node = self.node_of(op.key());
        self.run_on(node, vec![op])
            .await
            .pop()
            .unwrap_or_else(|| failed(FailKind::Internal, "no answer"))
    }

    /// The item under `key`.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Item>> {
        let op = KvOp::Get {
            key: Bytes::copy_from_slice(key),
            touch: None,
        };
        item_of(self.one(op).await)
    }

    /// The items under `keys`, in one batched call per node.
    pub async fn get_many(&self, keys: &[Bytes]) -> Result<Vec<Option<Item>>> {
        let ops = keys
            .iter()
            .map(|k| KvOp::Get {
                key: k.clone(),
                touch: None,
            })
            .collect();
        self.run(ops).await.into_iter().map(item_of).collect()
    }

    /// Stores `value` under `key` (memcached's set); the new CAS value.
    pub async fn set(&self, key: &[u8], value: Bytes, flags: u32, expiry: Expiry) -> Result<u64> {
        let op = set_op(
            Bytes::copy_from_slice(key),
            value,
            flags,
            expiry,
            ItemKind::Plain,
        );
        stored(self.one(op).await)
    }

    /// Stores each (key, value), in one batched call per node; the new CAS
    /// values.
    pub async fn set_many(&self, items: Vec<(Bytes, Bytes)>, expiry: Expiry) -> Result<Vec<u64>> {
        let ops = items
            .into_iter()
            .map(|(k, v)| set_op(k, v, 0, expiry, ItemKind::Plain))
            .collect();
        self.run(ops).await.into_iter().map(stored).collect()
    }

    /// Deletes `key`; whether it was there.
    pub async fn delete(&self, key: &[u8]) -> Result<bool> {
        let op = KvOp::Delete {
            key: Bytes::copy_from_slice(key),
            cas: None,
        };
        match self.one(op).await {
            KvAnswer::Deleted => Ok(true),
            KvAnswer::NotFound => Ok(false),
            other => Err(unexpected(other)),
        }
    }

    /// This tenant's figures on every node, and summed.
    pub async fn figures(&self) -> Result<crate::ClusterFigures> {
        Ok(crate::ClusterFigures::new(self.stats().await?))
    }

    /// Every node's figures for this tenant, by node.
    pub async fn stats(&self) -> Result<Vec<(NodeId, Vec<(String, u64)>)>> {
        let mut out = Vec::new();
        for &node in self.placement.members() {
            let call = self.call_of(KvRequest::Stats);
            match self.transport.call(node, call).await? {
                KvReply::Stats(s) => out.push((node, s)),
                KvReply::Refused { kind, message } => {
                    return Err(KvError::Failed { kind, message })
                }
                other => return Err(unexpected_reply(other)),
            }
        }
        Ok(out)
    }

    /// Drops every item of this tenant on every node (at `at`).
    pub async fn flush_all(&self, at: Expiry) -> Result<()> {
        for &node in self.placement.members() {
            let call = self.call_of(KvRequest::FlushAll { at });
            match self.transport.call(node, call).await? {
                KvReply::Flushed => {}
                KvReply::Refused { kind, message } => {
                    return Err(KvError::Failed { kind, message })
                }
                other => return Err(unexpected_reply(other)),
            }
        }
        Ok(())
    }
}

/// The refusal of an operation no node would take: a bad key, a value
/// over an item's size.
fn check_op(op: &KvOp) -> Option<KvAnswer> {
    if let Err(e) = crate::check_key(op.key()) {
        return Some(failed(FailKind::BadInput, e.to_string()));
    }
    match op {
        KvOp::Store { value, .. } if value.len() > crate::MAX_VALUE_BYTES => Some(failed(
            FailKind::TooLarge,
            format!(
                "a value of {} bytes; the limit is {} (store larger values with set_large)",
                value.len(),
                crate::MAX_VALUE_BYTES
            ),
        )),
        _ => None,
    }
}

/// A plain set of `key` to `value`.
pub(crate) fn set_op(key: Bytes, value: Bytes, flags: u32, expiry: Expiry, kind: ItemKind) -> KvOp {
    KvOp::Store {
        key,
        mode: StoreMode::Set,
        flags,
        expiry,
        kind,
        value,
    }
}

fn unexpected(a: KvAnswer) -> KvError {
    match a {
        KvAnswer::Failed { kind, message } => KvError::Failed { kind, message },
        other => KvError::Format(format!("unexpected answer {other:?}")),
    }
}

fn unexpected_reply(r: KvReply) -> KvError {
    KvError::Format(format!("unexpected answer {r:?}"))
}

fn item_of(a: KvAnswer) -> Result<Option<Item>> {
    match a {
        KvAnswer::Value(item) => Ok(Some(item)),
        KvAnswer::Miss => Ok(None),
        other => Err(unexpected(other)),
    }
}

fn stored(a: KvAnswer) -> Result<u64> {
    match a {
        KvAnswer::Stored { cas } => Ok(cas),
        other => Err(unexpected(other)),
    }
}

/// Bytes a slice or element key adds to its parent's: a NUL and a letter
/// (which no memcached client can send, so no user key collides), the
/// 8-byte nonce of the version and a 4-byte index.
const SUFFIX_BYTES: usize = 14;

/// The longest key a large value or an array can have.
pub const MAX_PARENT_KEY_BYTES: usize = MAX_KEY_BYTES - SUFFIX_BYTES;

pub(crate) fn child_key(parent: &[u8], letter: u8, nonce: u64, index: u32) -> Bytes {
    let mut k = BytesMut::with_capacity(parent.len() + SUFFIX_BYTES);
    k.put_slice(parent);
    k.put_u8(0);
    k.put_u8(letter);
    k.put_u64(nonce);
    k.put_u32(index);
    k.freeze()
}

/// A number no other version of any key of this process had: a version's
/// children are named with it, so a reader holding an older head or
/// directory never mixes in a newer version's slices.
pub(crate) fn nonce() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(nanos.to_le_bytes());
    h.update(n.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    let d = h.finalize();
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// A large value's head or an array's directory: magic, nonce, count,
/// total bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) nonce: u64,
    pub(crate) count: u32,
    pub(crate) total_bytes: u64,
}

impl Head {
    pub(crate) fn encode(&self, magic: &[u8; 4]) -> Bytes {
        let mut b = BytesMut::with_capacity(24);
        b.put_slice(magic);
        b.put_u64_le(self.nonce);
        b.put_u32_le(self.count);
        b.put_u64_le(self.total_bytes);
        b.freeze()
    }

    pub(crate) fn decode(magic: &[u8; 4], v: &[u8]) -> Result<Self> {
        if v.len() != 24 || &v[..4] != magic {
            return Err(KvError::Format(format!(
                "a head of {} bytes that is not a {} head",
                v.len(),
                String::from_utf8_lossy(magic)
            )));
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&v[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let mut c = [0u8; 4];
        c.copy_from_slice(&v[12..16]);
        Ok(Self {
            nonce: u64_at(4),
            count: u32::from_le_bytes(c),
            total_bytes: u64_at(16),
        })
    }
}

/// Most slices of one large value (with 1 MiB slices, 4 GiB).
pub const MAX_SLICES: u32 = 4096;

/// Most elements of one array.
pub const MAX_ARRAY_ELEMENTS: u32 = 1 << 20;
