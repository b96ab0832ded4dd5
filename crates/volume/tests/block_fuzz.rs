//! The block volume wire under hostile bytes, both ways. Every call a view
//! makes (define, delete, list, info, read, write, trim, add) and every
//! answer a node gives (error answers included) is recorded from a run of
//! the view's operations against a node, then fed on in three kinds: cut
//! at every length, changed in single bytes, and random bytes. A node
//! answers each call, and a call it refuses changes nothing it stored; a
//! view gets `Ok` or `Err` from each answer, and a cut data answer is
//! always an error. Neither side panics or makes one allocation over its
//! limit.

mod common;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{open, quiet, small};
use proptest::prelude::*;
use quarry_device::BackendKind;
use quarry_testkit::{largest_alloc_bytes, LargestAlloc};
use quarry_volume::{
    serve_volume_call, BlockVolumeError, BlockVolumes, LogicalPage, SpaceManager, VolumeRegistry,
    VolumeTransport, MAX_VOLUME_PAGE_SIZE_BYTES,
};

#[global_allocator]
static ALLOC: LargestAlloc = LargestAlloc;

/// Most pages one step asks to read.
const MAX_PAGES_A_STEP_READS: usize = 8;
/// No single allocation while a view decodes one of these answers (all
/// under 8 KiB) may be larger: a read's buffer is sized by the pages asked
/// for and the page size an answer names, at most the largest page.
const ANSWER_ALLOC_LIMIT_BYTES: usize =
    MAX_PAGES_A_STEP_READS * MAX_VOLUME_PAGE_SIZE_BYTES as usize + 64 * 1024;
/// The same for a node serving one of these calls: besides the call's own
/// bytes, the node reads and writes whole pages and its registry file.
const CALL_ALLOC_LIMIT_BYTES: usize = 256 * 1024;

const PS: usize = 512;

/// One node: a space manager on a `mem` device and a registry, in a
/// temporary directory.
struct Node {
    registry: VolumeRegistry,
    space: SpaceManager,
    _dir: tempfile::TempDir,
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A node holding volume `v` of 16 pages with pages 0..4 written and a
/// counter of 7 at page 5, and volume `e`, empty.
async fn seeded() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let (space, _) = open(BackendKind::Mem, small(), dir.path(), quiet()).await;
    let registry = VolumeRegistry::open(0, dir.path()).unwrap();
    let node = Arc::new(Node {
        registry,
        space,
        _dir: dir,
    });
    let volumes = BlockVolumes::new(Arc::new(Direct(node.clone())), vec![0]);
    volumes.create("v", 16 * PS as u64, None).await.unwrap();
    volumes.create("e", 4 * PS as u64, None).await.unwrap();
    let v = volumes.open("v").await.unwrap();
    v.write_pages(0, &pattern(4 * PS, 1)).await.unwrap();
    v.add_u64s(&[(5 * PS as u64, 7)]).await.unwrap();
    drop((v, volumes));
    Arc::into_inner(node).expect("the view is gone")
}

/// Serves calls on a shared node.
struct Direct(Arc<Node>);

impl VolumeTransport for Direct {
    async fn call(&self, _: u16, _: bool, body: Bytes) -> Result<Bytes, BlockVolumeError> {
        Ok(serve_volume_call(&self.0.registry, &self.0.space, body).await)
    }
}

/// Everything a node stores, to tell whether a call changed it.
async fn state(n: &Node) -> String {
    let mut out = format!(
        "{:?}\n{}\n",
        n.registry.volumes(),
        n.space.stats().live_pages
    );
    for def in n.registry.volumes() {
        for page in n.space.pages_in(def.space()) {
            let data = n.space.read(LogicalPage::new(def.space(), page)).await;
            out.push_str(&format!("{page} {data:?}\n"));
        }
    }
    out
}

/// The steps: every op of the wire, with arguments that succeed on the
/// seeded node and with arguments it refuses.
const STEPS: usize = 14;

/// Runs step `step` through `volumes`, returning its value's `Debug` text.
async fn run_step<X: VolumeTransport>(
    volumes: &BlockVolumes<X>,
    step: usize,
) -> Result<String, BlockVolumeError> {
    let show = |v: &dyn std::fmt::Debug| format!("{v:?}");
    Ok(match step {
        0 => show(&volumes.create("w", 8 * PS as u64, None).await?),
        1 => show(&volumes.create("v", 8 * PS as u64, None).await?),
        2 => show(&volumes.list().await?),
        3 => show(&volumes.status("v").await?),
        4 => show(&volumes.open("v").await?.read_pages(0, 4).await?),
        5 => show(&volumes.open("v").await?.read_pages(2, 8).await?),
        6 => show(
            &volumes
                .open("v")
                .await?
                .write_pages(6, &pattern(2 * PS, 2))
                .await?,
        ),
        7 => show(&volumes.open("v").await?.trim_pages(0, 2).await?),
        8 => show(
            &volumes
                .open("v")
                .await?
                .add_u64s(&[(5 * PS as u64, 3), (5 * PS as u64 + 8, 1)])
                .await?,
        ),
        9 => show(&volumes.delete("v").await?),
        10 => show(&volumes.delete("e").await?),
        11 => show(volumes.open("nope").await?.def()),
        12 => show(&volumes.open("e").await?.read_range(100, 900).await?),
        13 => show(
            &volumes
                .open("e")
                .await?
                .write_range(300, &pattern(400, 3))
                .await?,
        ),
        _ => unreachable!("step {step} of {STEPS}"),
    })
}

/// Steps whose calls carry or return page data: a cut answer to any of
/// their calls must be an error, never other bytes.
fn is_data_step(step: usize) -> bool {
    (4..=8).contains(&step) || step >= 12
}

/// Serves each call on its node and keeps every call and answer.
struct Recorder {
    node: Node,
    log: Mutex<Vec<(Bytes, Bytes)>>,
}

impl VolumeTransport for Recorder {
    async fn call(&self, _: u16, _: bool, body: Bytes) -> Result<Bytes, BlockVolumeError> {
        let answer = serve_volume_call(&self.node.registry, &self.node.space, body.clone()).await;
        self.log.lock().unwrap().push((body, answer.clone()));
        Ok(answer)
    }
}

/// One step as it crossed the wire from the seeded node's state.
struct Recorded {
    step: usize,
    /// Every call the step made, with its answer, in order.
    exchanges: Vec<(Bytes, Bytes)>,
    /// What the view made of the answers (`Debug` of the `Result`).
    outcome: String,
}

async fn record(step: usize) -> Recorded {
    let transport = Arc::new(Recorder {
        node: seeded().await,
        log: Mutex::new(Vec::new()),
    });
    let volumes = BlockVolumes::new(transport.clone(), vec![0]);
    let outcome = format!("{:?}", run_step(&volumes, step).await);
    let exchanges = std::mem::take(&mut *transport.log.lock().unwrap());
    Recorded {
        step,
        exchanges,
        outcome,
    }
}

async fn corpus() -> Vec<Recorded> {
    let mut out = Vec::new();
    for step in 0..STEPS {
        out.push(record(step).await);
    }
    out
}

/// Answers with the recorded answers in order, call `replace` getting
/// `with` instead; calls past the record get a transport error.
struct Scripted {
    answers: Mutex<VecDeque<Bytes>>,
}

impl VolumeTransport for Scripted {
    async fn call(&self, node: u16, _: bool, _: Bytes) -> Result<Bytes, BlockVolumeError> {
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .ok_or(BlockVolumeError::Transport {
                node,
                reason: "no more answers recorded".into(),
            })
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// A proptest runs its cases on its test's thread: each test records the
// corpus once, and keeps a seeded node until a call changes it (seeding
// one takes tens of milliseconds).
thread_local! {
    static RT: tokio::runtime::Runtime = runtime();
    static CORPUS: Rc<Vec<Recorded>> = Rc::new(RT.with(|rt| rt.block_on(corpus())));
    static NODE: RefCell<Option<Node>> = const { RefCell::new(None) };
}

fn cached_corpus() -> Rc<Vec<Recorded>> {
    CORPUS.with(Rc::clone)
}

/// Serves `call` on this thread's seeded node (see [`serve_checked`]); a
/// node a call changed is dropped, and the next call gets a fresh one.
fn serve_on_seeded(call: &[u8]) {
    RT.with(|rt| {
        let node = NODE.with(|n| n.borrow_mut().take());
        let node = node.unwrap_or_else(|| rt.block_on(seeded()));
        if !serve_checked(rt, &node, call) {
            NODE.with(|n| *n.borrow_mut() = Some(node));
        }
    });
}

/// Runs `r`'s step at a view whose node gives the recorded answers, with
/// answer `replace` swapped for `with`; checks the allocation limit.
fn decode_checked(
    rt: &tokio::runtime::Runtime,
    r: &Recorded,
    replace: usize,
    with: &[u8],
) -> Result<String, BlockVolumeError> {
    let mut answers: VecDeque<Bytes> = r.exchanges.iter().map(|(_, a)| a.clone()).collect();
    answers[replace] = Bytes::copy_from_slice(with);
    let volumes = BlockVolumes::new(
        Arc::new(Scripted {
            answers: Mutex::new(answers),
        }),
        vec![0],
    );
    let (outcome, largest) = largest_alloc_bytes(|| rt.block_on(run_step(&volumes, r.step)));
    assert!(
        largest <= ANSWER_ALLOC_LIMIT_BYTES,
        "step {} answer {replace} {with:?} made an allocation of {largest} bytes",
        r.step
    );
    outcome
}

/// Serves `call` on `n` and checks the answer: decodable status, within
/// the allocation limit, and when refused, `n` unchanged. Returns whether
/// it was taken.
fn serve_checked(rt: &tokio::runtime::Runtime, n: &Node, call: &[u8]) -> bool {
    let before = rt.block_on(state(n));
    let (answer, largest) = largest_alloc_bytes(|| {
        rt.block_on(serve_volume_call(
            &n.registry,
            &n.space,
            Bytes::copy_from_slice(call),
        ))
    });
    assert!(
        largest <= CALL_ALLOC_LIMIT_BYTES,
        "call {call:?} made an allocation of {largest} bytes"
    );
    match quarry_volume::answer_error(0, &answer) {
        Ok(()) => true,
        Err(e) => {
            assert!(
                !matches!(&e, BlockVolumeError::Malformed { what, .. } if what == "volume answer"),
                "call {call:?}: the node's answer does not decode: {e}"
            );
            assert_eq!(
                rt.block_on(state(n)),
                before,
                "refused call {call:?} changed the node: {e}"
            );
            false
        }
    }
}

#[test]
fn the_corpus_reaches_every_op_and_error_answers() {
    let rt = runtime();
    let corpus = rt.block_on(corpus());
    let calls = || corpus.iter().flat_map(|r| r.exchanges.iter());
    let ops: std::collections::BTreeSet<u8> = calls().map(|(c, _)| c[0]).collect();
    assert_eq!(ops, (1..=8).collect(), "ops called");
    for r in &corpus {
        assert!(!r.exchanges.is_empty(), "step {} made no call", r.step);
    }
}

/// A volume's page is a device page: the bound the wire checks is the
/// geometry's.
#[test]
fn the_largest_volume_page_is_the_largest_device_page() {
    assert_eq!(
        MAX_VOLUME_PAGE_SIZE_BYTES,
        quarry_device::MAX_PAGE_SIZE_BYTES
    );
}

/// An info answer naming a page size of megabytes or gigabytes is refused
/// before a read sizes its buffer by it. Found by
/// `changed_answers_are_values_or_errors`: a view allocated 32 MiB for a
/// read of 4 pages (and would have tried 16 GiB at 4 GiB pages).
#[test]
fn an_answer_naming_a_huge_page_size_is_refused_before_a_read_allocates() {
    let rt = runtime();
    let r = rt.block_on(record(4));
    let info = &r.exchanges[0].1;
    // status, node space (2 + 4 + 8 + 8), present flag, id, instance,
    // name (1 + 1), size in pages: then the page size.
    let at = 1 + 22 + 1 + 4 + 8 + 2 + 8;
    assert_eq!(info[at..at + 4], 512u32.to_le_bytes(), "{info:?}");
    for page_size in [0x007C_0200u32, u32::MAX, MAX_VOLUME_PAGE_SIZE_BYTES + 512] {
        let mut answer = info.to_vec();
        answer[at..at + 4].copy_from_slice(&page_size.to_le_bytes());
        let got = decode_checked(&rt, &r, 0, &answer);
        let e = got.expect_err("a page size past the limit");
        assert!(
            e.to_string()
                .contains(&format!("a page size of {page_size} bytes")),
            "{e}"
        );
    }
}

/// Every call cut short at every length is refused and changes nothing.
#[test]
fn every_call_cut_at_every_length_is_refused_and_changes_nothing() {
    let rt = runtime();
    let n = rt.block_on(seeded());
    for r in rt.block_on(corpus()) {
        for (call, _) in &r.exchanges {
            for cut in 0..call.len() {
                assert!(
                    !serve_checked(&rt, &n, &call[..cut]),
                    "step {} call cut at {cut} was taken",
                    r.step
                );
            }
        }
    }
}

/// Every answer cut short is `Ok` or `Err` at the view, and an error
/// wherever page data or a data call's result was cut.
#[test]
fn every_answer_cut_at_every_length_is_handled() {
    let rt = runtime();
    for r in rt.block_on(corpus()) {
        let whole = format!("{:?}", decode_checked(&rt, &r, 0, &r.exchanges[0].1));
        // A create draws its instance and time at the view: only whether
        // it succeeded can match.
        if r.step == 0 {
            assert_eq!(whole.starts_with("Ok"), r.outcome.starts_with("Ok"));
        } else {
            assert_eq!(
                whole, r.outcome,
                "step {}: the recorded answers give what the node gave",
                r.step
            );
        }
        for (i, (_, answer)) in r.exchanges.iter().enumerate() {
            for cut in 0..answer.len() {
                let got = decode_checked(&rt, &r, i, &answer[..cut]);
                if is_data_step(r.step) {
                    assert!(
                        got.is_err(),
                        "step {} answer {i} cut at {cut}: {got:?}",
                        r.step
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A valid call with one to three bytes changed gets an answer, and if
    /// refused changes nothing.
    #[test]
    fn changed_calls_get_answers_and_refusals_change_nothing(
        step in 0..STEPS,
        pick in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let corpus = cached_corpus();
        let (call, _) = pick.get(&corpus[step].exchanges);
        let mut call = call.to_vec();
        for (at, x) in &flips {
            let i = at.index(call.len());
            call[i] ^= x;
        }
        serve_on_seeded(&call);
    }

    /// Random bytes, alone and after each op byte, get answers, and if
    /// refused change nothing.
    #[test]
    fn random_calls_get_answers_and_refusals_change_nothing(
        op in 0u8..=9,
        junk in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut call = vec![op];
        call.extend_from_slice(&junk);
        serve_on_seeded(&call);
        serve_on_seeded(&junk);
    }

    /// A valid answer with one to three bytes changed is `Ok` or `Err` at
    /// the view, within the allocation limit.
    #[test]
    fn changed_answers_are_values_or_errors(
        step in 0..STEPS,
        pick in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let corpus = cached_corpus();
        let r = &corpus[step];
        let i = pick.index(r.exchanges.len());
        let mut answer = r.exchanges[i].1.to_vec();
        for (at, x) in &flips {
            let j = at.index(answer.len());
            answer[j] ^= x;
        }
        RT.with(|rt| decode_checked(rt, r, i, &answer)).ok();
    }

    /// Random answers, alone and after a status byte, are `Ok` or `Err`.
    #[test]
    fn random_answers_are_values_or_errors(
        step in 0..STEPS,
        pick in any::<prop::sample::Index>(),
        status in 0u8..=2,
        junk in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let corpus = cached_corpus();
        let r = &corpus[step];
        let i = pick.index(r.exchanges.len());
        let mut answer = vec![status];
        answer.extend_from_slice(&junk);
        RT.with(|rt| {
            decode_checked(rt, r, i, &answer).ok();
            decode_checked(rt, r, i, &junk).ok();
        });
    }

    /// An error answer of any kind, changed in one to three bytes, is
    /// decoded as an error (or refused as malformed) within the limit.
    #[test]
    fn changed_error_answers_are_errors(
        pick in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let errors = error_answers();
        let mut answer = pick.get(&errors).to_vec();
        for (at, x) in &flips {
            let j = at.index(answer.len());
            answer[j] ^= x;
        }
        let (got, largest) =
            largest_alloc_bytes(|| quarry_volume::answer_error(0, &Bytes::from(answer)));
        prop_assert!(largest <= ANSWER_ALLOC_LIMIT_BYTES, "{}", largest);
        let _ = got;
    }
}

/// An error answer of every kind the wire carries by kind, and one that
/// travels as a message.
fn error_answers() -> Vec<Bytes> {
    use BlockVolumeError as E;
    let s = || "x".to_string();
    [
        E::InvalidName {
            name: s(),
            reason: s(),
        },
        E::InvalidSize { reason: s() },
        E::InvalidMembers { reason: s() },
        E::Exists { name: s(), node: 1 },
        E::IdTaken {
            id: 2,
            node: 1,
            by: s(),
        },
        E::NotFound { name: s() },
        E::OutOfRange {
            name: s(),
            first: 1,
            count: 2,
            pages: 3,
        },
        E::PageData {
            page_size_bytes: 512,
            got_bytes: 3,
        },
        E::PageSizeMismatch {
            node: 1,
            node_page_size_bytes: 512,
            volume_page_size_bytes: 4096,
        },
        E::Stale { name: s(), node: 1 },
        E::NoSpace {
            node: 1,
            message: s(),
        },
        E::TooMany {
            node: 1,
            what: s(),
            limit: 9,
        },
        E::Storage {
            node: 1,
            message: s(),
        },
        E::Malformed {
            what: s(),
            reason: s(),
        },
        E::BadAdd {
            name: s(),
            index: 1,
            offset: 2,
            reason: s(),
        },
        E::Transport {
            node: 1,
            reason: s(),
        },
    ]
    .iter()
    .map(quarry_volume_api::encode_error)
    .collect()
}

/// Every error answer decodes as an error; cut at any length it is
/// refused as a malformed answer.
#[test]
fn error_answers_cut_at_every_length_are_malformed() {
    for answer in error_answers() {
        let e = quarry_volume::answer_error(0, &answer).unwrap_err();
        assert!(
            !matches!(&e, BlockVolumeError::Malformed { what, .. } if what == "volume answer"),
            "{e}"
        );
        for cut in 0..answer.len() {
            let got = quarry_volume::answer_error(0, &answer.slice(..cut));
            assert!(
                matches!(&got, Err(BlockVolumeError::Malformed { what, .. }) if what == "volume answer"),
                "cut at {cut}: {got:?}"
            );
        }
    }
}
