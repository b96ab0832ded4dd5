//! The node-to-node compute messages under hostile bytes: a local run
//! (`ComputeCall::RunLocal`, as a node takes it from an entry node) and its
//! answer (`ComputeAnswer::Local`, as the entry node takes it back), with
//! real parts of every kernel and segments of every source. Each, cut at
//! every length, is an error; with bytes changed, or as random bytes, it
//! is an error or a value that encodes back to itself; and none makes one
//! allocation over [`ALLOC_LIMIT_BYTES`]. (The client's messages are
//! `quarry-kernels-api`'s `tests/decode.rs`.)

use proptest::prelude::*;
use quarry_device::PageAddr;
use quarry_kernels::{
    compile, decode, encode, ComputeAnswer, ComputeCall, GrepSpec, GrepSyntax, KernelSpec,
    LocalAnswer, LocalRun, Resume, Segment, Source, WcLocale, WcSpec,
};
use quarry_testkit::LargestAlloc;

#[global_allocator]
static ALLOC: LargestAlloc = LargestAlloc;

/// No single allocation while one of these messages (under 8 KiB) is
/// decoded may be larger: serde sizes a sequence's first allocation by its
/// claimed length but never above 1 MiB.
const ALLOC_LIMIT_BYTES: usize = (1 << 20) + (64 << 10);

const TEXT: &[u8] = b"a needle!! here\nnothing\nthe needle!! again\nthe end\n";

fn specs() -> Vec<KernelSpec> {
    let mut grep = GrepSpec::new("needle", GrepSyntax::Fixed);
    grep.after_context = 1;
    vec![
        KernelSpec::Fgrep8 {
            pattern: *b"needle!!",
        },
        KernelSpec::Grep(grep),
        KernelSpec::Wc(WcSpec {
            words: true,
            word: Some(b"the".to_vec()),
            top: Some(3),
            locale: WcLocale::default(),
        }),
        KernelSpec::Checksum,
    ]
}

/// One run and one answer per kernel, with its real parts.
fn corpus() -> Vec<(ComputeCall, ComputeAnswer)> {
    specs()
        .into_iter()
        .map(|spec| {
            let k = compile(&spec).expect("a kernel");
            let (a, b) = TEXT.split_at(20);
            let first = k.fold(k.empty(0), a).expect("folded");
            let second = k.fold(k.empty(a.len() as u64), b).expect("folded");
            let run = ComputeCall::RunLocal(LocalRun {
                kernel: spec,
                segments: vec![
                    Segment {
                        target: 0,
                        offset: 0,
                        source: Source::Chunk {
                            fingerprint: [3; 32],
                            len: 100,
                            start: 0,
                            end: 50,
                        },
                    },
                    Segment {
                        target: 0,
                        offset: 50,
                        source: Source::VolumePage {
                            space: 4,
                            page: 5,
                            start: 0,
                            end: 4096,
                        },
                    },
                    Segment {
                        target: 1,
                        offset: 0,
                        source: Source::DevicePage {
                            page: PageAddr {
                                bus: 0,
                                chip: 1,
                                block: 2,
                                page: 3,
                            },
                            start: 10,
                            end: 20,
                        },
                    },
                ],
                carry: Some(first.clone()),
                time_left_ms: 1000,
                memory_bytes: 1 << 20,
                piece_bytes: 0,
            });
            let answer = ComputeAnswer::Local(LocalAnswer {
                parts: vec![(0, first), (1, second)],
                bytes_scanned: TEXT.len() as u64,
                resume: Some(Resume {
                    segment: 1,
                    bytes_done: 7,
                }),
            });
            (run, answer)
        })
        .collect()
}

/// Decodes `bytes` as `T` within the allocation limit; a value must encode
/// back to bytes that decode to it. Returns whether it decoded.
fn decode_checked<T>(what: &str, bytes: &[u8]) -> bool
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    quarry_testkit::decode_checked(
        what,
        bytes,
        ALLOC_LIMIT_BYTES,
        |b| decode::<T>(what, b),
        |v| encode(v),
    )
}

fn both(run: &ComputeCall, answer: &ComputeAnswer) -> [(bool, Vec<u8>); 2] {
    [(true, encode(run)), (false, encode(answer))]
}

fn check(is_call: bool, bytes: &[u8]) -> bool {
    if is_call {
        decode_checked::<ComputeCall>("local run", bytes)
    } else {
        decode_checked::<ComputeAnswer>("local run answer", bytes)
    }
}

#[test]
fn every_local_run_and_answer_cut_at_every_length_is_an_error() {
    for (run, answer) in corpus() {
        for (is_call, bytes) in both(&run, &answer) {
            assert!(check(is_call, &bytes));
            for cut in 0..bytes.len() {
                assert!(!check(is_call, &bytes[..cut]), "cut at {cut} of {bytes:?}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(!check(is_call, &longer), "a byte after the message");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn changed_local_runs_and_answers_are_errors_or_values(
        pick in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let corpus = corpus();
        let (run, answer) = pick.get(&corpus);
        for (is_call, mut bytes) in both(run, answer) {
            for (at, byte) in &flips {
                let i = at.index(bytes.len());
                bytes[i] = *byte;
            }
            check(is_call, &bytes);
        }
    }

    /// Random bytes, alone and after the run's and the answer's variant
    /// byte, are errors or values.
    #[test]
    fn random_local_runs_and_answers_are_errors_or_values(
        junk in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let corpus = corpus();
        let (run, answer) = &corpus[0];
        for (is_call, bytes) in both(run, answer) {
            check(is_call, &junk);
            let mut tagged = bytes[..1].to_vec();
            tagged.extend_from_slice(&junk);
            check(is_call, &tagged);
        }
    }
}
