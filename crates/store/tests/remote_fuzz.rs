//! The store's call encoding under hostile bytes, both ways. Every op's
//! call as `RemoteNode` encodes it, and every answer a node gives (error
//! answers included), is fed on in three kinds: cut at every length,
//! mutated in single bytes, and random bytes. A node answers each call
//! (an error answer or a value), and a call it refuses changes nothing it
//! stored; a caller gets `Ok` or `Err` from each answer. Neither side
//! panics or makes one allocation larger than [`ALLOC_LIMIT_BYTES`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use proptest::prelude::*;
use quarry_store::{
    serve_call, BucketConfig, BucketName, ChunkRef, Chunking, Condition, Fingerprint, Manifest,
    MemChunkStore, MemTableStore, NodeId, NodeStore, ObjectKey, RemoteNode, Result, StoreError,
    StoreNode, StoreTransport,
};
use quarry_testkit::{largest_alloc_bytes, LargestAlloc};

#[global_allocator]
static ALLOC: LargestAlloc = LargestAlloc;

/// No single allocation while one call or answer of these (all under 1 KiB)
/// is decoded and served may be larger: a decoder that sized a buffer by a
/// claimed count would pass it at once.
const ALLOC_LIMIT_BYTES: usize = 64 * 1024;

type Node = NodeStore<Arc<MemTableStore>, Arc<MemChunkStore>>;

/// The names and bytes every step uses.
struct Fixture {
    b: BucketName,
    /// A bucket the seeded node does not have.
    c: BucketName,
    /// An empty bucket the seeded node has.
    e: BucketName,
    /// A key with a two-chunk manifest whose chunks are stored apart.
    k: ObjectKey,
    /// A small object's key, kept with its chunk.
    s: ObjectKey,
    /// A key nobody wrote.
    none: ObjectKey,
    data: Bytes,
    fp: Fingerprint,
    data2: Bytes,
    fp2: Fingerprint,
    small: Bytes,
    config: BucketConfig,
    /// Where the seeded node's first page of one manifest ends.
    cursor: Vec<u8>,
}

fn bytes(len: usize, seed: u64) -> Bytes {
    quarry_testkit::noise_bytes(len, seed).into()
}

fn manifest(b: &BucketName, k: &ObjectKey, chunks: &[&[u8]]) -> Manifest {
    Manifest::new(
        b.clone(),
        k.clone(),
        0,
        1,
        Chunking::fixed(4096).unwrap(),
        chunks
            .iter()
            .map(|d| ChunkRef {
                fingerprint: Fingerprint::of(d),
                len: d.len() as u32,
            })
            .collect(),
    )
    .unwrap()
}

impl Fixture {
    async fn new() -> Fixture {
        let data = bytes(4096, 1);
        let data2 = bytes(70, 2);
        let mut fx = Fixture {
            b: BucketName::new("b").unwrap(),
            c: BucketName::new("c").unwrap(),
            e: BucketName::new("e").unwrap(),
            k: ObjectKey::new("k").unwrap(),
            s: ObjectKey::new("s").unwrap(),
            none: ObjectKey::new("none").unwrap(),
            fp: Fingerprint::of(&data),
            fp2: Fingerprint::of(&data2),
            data,
            data2,
            small: bytes(48, 3),
            config: BucketConfig {
                chunking: Chunking::fixed(4096).unwrap(),
                created_unix_ms: 1,
            },
            cursor: Vec::new(),
        };
        let n = fx.seeded().await;
        let (page, cursor) = n.manifests_page(None, 1).await.unwrap();
        assert_eq!(page.len(), 1);
        fx.cursor = cursor.expect("the seeded node has more than one manifest");
        fx
    }

    /// A node with buckets `b` and `e`, the chunk `data` referenced by `b`
    /// and named by `k`'s manifest (version 1), and the small object `s`.
    async fn seeded(&self) -> Node {
        let (n, _) = NodeStore::open(
            1,
            Arc::new(MemTableStore::new()),
            Arc::new(MemChunkStore::default()),
        )
        .await
        .unwrap();
        n.create_bucket(&self.b, self.config).await.unwrap();
        n.create_bucket(&self.e, self.config).await.unwrap();
        n.put_chunk(&self.b, self.fp, self.data.clone())
            .await
            .unwrap();
        let m = manifest(&self.b, &self.k, &[&self.data, &self.data2]);
        n.put_manifest(m, Condition::IfAbsent).await.unwrap();
        let small = manifest(&self.b, &self.s, &[&self.small])
            .with_chunk_at_manifest_node()
            .unwrap();
        n.put_with_chunk(small, Condition::IfAbsent, self.small.clone())
            .await
            .unwrap();
        n
    }
}

/// Everything a node stores, to tell whether a call changed it.
async fn state(n: &Node) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}",
        n.usage(),
        n.buckets().await,
        n.all_manifests().await,
        n.chunks().await
    )
}

/// The steps: every op of the call encoding at least once, with arguments
/// that succeed on the seeded node and, for most ops, with arguments it
/// refuses, so error answers of most kinds are in the corpus.
const STEPS: usize = 33;

/// Runs step `step` on `n`, returning its value's `Debug` text.
async fn run_step<N: StoreNode>(n: &N, fx: &Fixture, step: usize) -> Result<String> {
    let show = |v: &dyn std::fmt::Debug| format!("{v:?}");
    let small = |key: &ObjectKey| {
        manifest(&fx.b, key, &[&fx.small])
            .with_chunk_at_manifest_node()
            .unwrap()
    };
    Ok(match step {
        0 => show(&n.put_chunk(&fx.b, fx.fp2, fx.data2.clone()).await?),
        1 => show(&n.put_chunk(&fx.b, fx.fp, fx.data.clone()).await?),
        2 => show(&n.release_chunk(&fx.b, fx.fp).await?),
        3 => show(&n.release_chunk(&fx.e, fx.fp).await?),
        4 => show(&n.read_chunk(fx.fp).await?),
        5 => show(&n.read_chunk(fx.fp2).await?),
        6 => show(&n.get_manifest(&fx.b, &fx.k).await?),
        7 => show(&n.get_manifest(&fx.b, &fx.none).await?),
        8 => {
            let m = manifest(&fx.b, &fx.k, &[&fx.data]);
            show(&n.put_manifest(m, Condition::IfVersion(1)).await?)
        }
        9 => {
            let m = manifest(&fx.b, &fx.k, &[&fx.data]);
            show(&n.put_manifest(m, Condition::IfAbsent).await?)
        }
        10 => show(&n.delete_manifest(&fx.b, &fx.k, Condition::Always).await?),
        11 => show(
            &n.delete_manifest(&fx.b, &fx.none, Condition::Always)
                .await?,
        ),
        12 => show(&n.list_manifests(&fx.b, "", None, 10).await?),
        13 => show(&n.list_manifests(&fx.b, "s", Some(&fx.k), 1).await?),
        14 => show(&n.create_bucket(&fx.c, fx.config).await?),
        15 => show(&n.create_bucket(&fx.b, fx.config).await?),
        16 => show(&n.bucket(&fx.b).await?),
        17 => show(&n.bucket(&fx.c).await?),
        18 => show(&n.delete_bucket(&fx.e).await?),
        19 => show(&n.delete_bucket(&fx.b).await?),
        20 => show(&n.buckets().await?),
        21 => show(&n.usage().await?),
        22 => show(&n.manifests_page(None, 1).await?),
        23 => show(&n.manifests_page(Some(fx.cursor.clone()), 10).await?),
        24 => show(&n.chunks_page(None, 10).await?),
        25 => show(&n.chunks_page(Some(fx.fp), 10).await?),
        26 => {
            let expected = BTreeMap::from([(fx.b.clone(), 1)]);
            show(&n.lower_refs(fx.fp, expected, u64::MAX).await?)
        }
        27 => show(
            &n.put_with_chunk(small(&fx.none), Condition::IfAbsent, fx.small.clone())
                .await?,
        ),
        28 => show(
            &n.put_with_chunk(small(&fx.s), Condition::IfAbsent, fx.small.clone())
                .await?,
        ),
        29 => show(&n.get_with_chunk(&fx.b, &fx.s).await?),
        30 => show(&n.get_with_chunk(&fx.b, &fx.k).await?),
        31 => {
            let m = manifest(&fx.c, &fx.k, &[&fx.data]);
            show(&n.put_manifest(m, Condition::Always).await?)
        }
        // `data2` claimed as `data`: its length disagrees with the record.
        32 => show(&n.put_chunk(&fx.b, fx.fp, fx.data2.clone()).await?),
        _ => unreachable!("step {step} of {STEPS}"),
    })
}

/// Hands each call to a node's `serve_call` and keeps the last call and
/// answer.
struct Recorder {
    node: Node,
    last: Mutex<Option<(Bytes, Bytes)>>,
}

impl StoreTransport for Recorder {
    async fn call(&self, _node: NodeId, _idempotent: bool, body: Bytes) -> Result<Bytes> {
        let answer = serve_call(&self.node, body.clone()).await;
        *self.last.lock().unwrap() = Some((body, answer.clone()));
        Ok(answer)
    }
}

/// One step as it crossed the wire from the seeded node's state.
struct Recorded {
    step: usize,
    call: Bytes,
    answer: Bytes,
    /// What the caller made of the answer (`Debug` of the `Result`).
    outcome: String,
}

/// Every step, recorded against its own freshly seeded node.
async fn corpus(fx: &Fixture) -> Vec<Recorded> {
    let mut out = Vec::new();
    for step in 0..STEPS {
        out.push(corpus_step(fx, step).await);
    }
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Blocks on `f`, returning its value and the largest allocation it made.
fn measured<T>(rt: &tokio::runtime::Runtime, f: impl Future<Output = T>) -> (T, usize) {
    largest_alloc_bytes(|| rt.block_on(f))
}

/// Serves `call` on `n` and checks the answer: a status byte of 0 or 1,
/// no allocation over the limit, and, when refused, `n` unchanged.
/// Returns the answer.
fn serve_checked(rt: &tokio::runtime::Runtime, n: &Node, call: &[u8]) -> Bytes {
    let before = rt.block_on(state(n));
    let (answer, largest) = measured(rt, serve_call(n, Bytes::copy_from_slice(call)));
    assert!(
        largest <= ALLOC_LIMIT_BYTES,
        "call {call:?} made an allocation of {largest} bytes"
    );
    match answer.first() {
        Some(0) => {}
        Some(1) => assert_eq!(
            rt.block_on(state(n)),
            before,
            "refused call {call:?} changed the node: {}",
            String::from_utf8_lossy(&answer)
        ),
        _ => panic!("call {call:?} got answer {answer:?}"),
    }
    answer
}

/// Runs `step` at a caller whose node answers `answer`, checking the
/// allocation limit; returns the caller's outcome.
fn decode_checked(
    rt: &tokio::runtime::Runtime,
    fx: &Fixture,
    step: usize,
    answer: &[u8],
) -> Result<String> {
    let node = RemoteNode::new(1, Arc::new(Canned(Bytes::copy_from_slice(answer))));
    let (outcome, largest) = measured(rt, run_step(&node, fx, step));
    assert!(
        largest <= ALLOC_LIMIT_BYTES,
        "step {step}'s answer {answer:?} made an allocation of {largest} bytes"
    );
    outcome
}

/// Answers a fixed byte string to every call.
struct Canned(Bytes);

impl StoreTransport for Canned {
    async fn call(&self, _node: NodeId, _idempotent: bool, _body: Bytes) -> Result<Bytes> {
        Ok(self.0.clone())
    }
}

/// The corpus covers every op, and both answer statuses.
#[test]
fn the_corpus_reaches_every_op_and_error_answers() {
    let rt = runtime();
    let fx = rt.block_on(Fixture::new());
    let corpus = rt.block_on(corpus(&fx));
    let ops: std::collections::BTreeSet<u8> = corpus.iter().map(|r| r.call[0]).collect();
    assert_eq!(ops, (1..=17).collect(), "ops called");
    let refused = corpus.iter().filter(|r| r.answer[0] == 1).count();
    assert!(refused >= 7, "only {refused} error answers in the corpus");
    assert!(corpus.iter().filter(|r| r.answer[0] == 0).count() >= 17);
}

/// A chunk put whose fingerprint is not its bytes' hash, but whose CRC-32C
/// is right, is filed as the writer named it (docs/store.md, "Checks"),
/// and does not panic the node: it used to trip a debug assertion, found
/// by `mutated_calls_get_answers_and_refusals_change_nothing`.
#[test]
fn a_chunk_put_under_another_fingerprint_does_not_panic_the_node() {
    let rt = runtime();
    let fx = rt.block_on(Fixture::new());
    let transport = Arc::new(Recorder {
        node: rt.block_on(fx.seeded()),
        last: Mutex::new(None),
    });
    let remote = RemoteNode::new(1, transport);
    let wrong = Fingerprint::of(b"other bytes");
    let put = rt.block_on(remote.put_chunk(&fx.b, wrong, fx.data2.clone()));
    assert!(put.is_ok_and(|p| p.stored));
    let m = Manifest::new(
        fx.b.clone(),
        fx.none.clone(),
        0,
        1,
        Chunking::fixed(4096).unwrap(),
        vec![ChunkRef {
            fingerprint: Fingerprint::of(b"yet other bytes"),
            len: fx.small.len() as u32,
        }],
    )
    .unwrap()
    .with_chunk_at_manifest_node()
    .unwrap();
    let put = rt.block_on(remote.put_with_chunk(m, Condition::IfAbsent, fx.small.clone()));
    assert!(put.is_ok_and(|p| p.manifest.version() == 1));
}

/// Every call cut short at every length is refused with an error answer
/// that names the store call, and changes nothing.
#[test]
fn every_call_cut_at_every_length_is_refused_and_changes_nothing() {
    let rt = runtime();
    let fx = rt.block_on(Fixture::new());
    let n = rt.block_on(fx.seeded());
    for r in rt.block_on(corpus(&fx)) {
        for cut in 0..r.call.len() {
            let answer = serve_checked(&rt, &n, &r.call[..cut]);
            assert_eq!(answer[0], 1, "step {} cut at {cut} was taken", r.step);
            // The refusal decodes at the caller as an error, not a value.
            assert!(decode_checked(&rt, &fx, r.step, &answer).is_err());
        }
    }
}

/// Every answer cut short at every length is an error at the caller.
#[test]
fn every_answer_cut_at_every_length_is_an_error() {
    let rt = runtime();
    let fx = rt.block_on(Fixture::new());
    for r in rt.block_on(corpus(&fx)) {
        // The whole answer gives the caller what it gave through the node.
        let whole = decode_checked(&rt, &fx, r.step, &r.answer);
        assert_eq!(format!("{whole:?}"), r.outcome, "step {}", r.step);
        for cut in 0..r.answer.len() {
            let got = decode_checked(&rt, &fx, r.step, &r.answer[..cut]);
            assert!(
                matches!(got, Err(StoreError::Malformed { .. })),
                "step {} answer cut at {cut}: {got:?}",
                r.step
            );
        }
    }
}

fn mutate(bytes: &[u8], flips: &[(usize, u8)]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(at, x) in flips {
        if !out.is_empty() {
            let i = at % out.len();
            out[i] ^= x;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A valid call with one to three bytes changed gets an answer from a
    /// node, and if refused changes nothing.
    #[test]
    fn mutated_calls_get_answers_and_refusals_change_nothing(
        step in 0..STEPS,
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
    ) {
        let rt = runtime();
        let fx = rt.block_on(Fixture::new());
        let r = rt.block_on(corpus_step(&fx, step));
        let n = rt.block_on(fx.seeded());
        let answer = serve_checked(&rt, &n, &mutate(&r.call, &flips));
        let _ = decode_checked(&rt, &fx, step, &answer);
    }

    /// Random bytes, alone or after a valid op byte, get an answer from a
    /// node, and if refused change nothing.
    #[test]
    fn random_calls_get_answers_and_refusals_change_nothing(
        op in 0u8..=18,
        junk in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let rt = runtime();
        let fx = rt.block_on(Fixture::new());
        let n = rt.block_on(fx.seeded());
        let mut call = vec![op];
        call.extend_from_slice(&junk);
        serve_checked(&rt, &n, &call);
        serve_checked(&rt, &n, &junk);
    }

    /// A valid answer with one to three bytes changed is `Ok` or `Err` at
    /// the caller, within the allocation limit.
    #[test]
    fn mutated_answers_are_values_or_errors(
        step in 0..STEPS,
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
    ) {
        let rt = runtime();
        let fx = rt.block_on(Fixture::new());
        let r = rt.block_on(corpus_step(&fx, step));
        let _ = decode_checked(&rt, &fx, step, &mutate(&r.answer, &flips));
    }

    /// Random answers, alone or after a status byte, are `Ok` or `Err` at
    /// the caller of every step, within the allocation limit.
    #[test]
    fn random_answers_are_values_or_errors(
        step in 0..STEPS,
        status in 0u8..=2,
        junk in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let rt = runtime();
        let fx = rt.block_on(Fixture::new());
        let mut answer = vec![status];
        answer.extend_from_slice(&junk);
        let _ = decode_checked(&rt, &fx, step, &answer);
        let _ = decode_checked(&rt, &fx, step, &junk);
    }
}

/// One step recorded against a freshly seeded node.
async fn corpus_step(fx: &Fixture, step: usize) -> Recorded {
    let transport = Arc::new(Recorder {
        node: fx.seeded().await,
        last: Mutex::new(None),
    });
    let remote = RemoteNode::new(1, transport.clone());
    let outcome = format!("{:?}", run_step(&remote, fx, step).await);
    let (call, answer) = transport.last.lock().unwrap().take().unwrap();
    Recorded {
        step,
        call,
        answer,
        outcome,
    }
}
