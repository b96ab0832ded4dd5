//! Decoding what comes off a socket never panics. A grep answer's blocks
//! of lines: random bytes, cut encodings and encodings with bytes changed
//! are errors or values whose blocks keep their invariants (text ending
//! with a newline, as many lines as newlines). Every message a client or a
//! node decodes ([`ComputeCall`] of every kind, as a node takes it from a
//! client; [`ComputeAnswer`] of every kind and [`CommandResult`], as a
//! client takes them): a valid one of each kind cut at every length is an
//! error, and with bytes changed or as random bytes it is an error or a
//! value that encodes back to itself, with no allocation over
//! [`ALLOC_LIMIT_BYTES`]. (The node-to-node runs, `ComputeCall::RunLocal`
//! and `ComputeAnswer::Local`, carry kernel parts: `quarry-kernels` tests
//! those in `tests/peer_decode.rs`.)

use proptest::prelude::*;
use quarry_kernels_api::{
    decode, encode, ChecksumOutput, CommandResult, CommandState, CommandStatus, ComputeAnswer,
    ComputeCall, Failure, FailureKind, GrepOutput, GrepSpec, GrepSyntax, Job, KernelSpec, Limits,
    LineBlock, LineRun, MatchLine, Outcome, Output, OutputPiece, RmwBatch, RmwOp, Target,
    TargetOutput, WcLocale, WcOutput, WcSpec,
};
use quarry_testkit::LargestAlloc;

#[global_allocator]
static ALLOC: LargestAlloc = LargestAlloc;

/// No single allocation while one message of these (all under 4 KiB) is
/// decoded may be larger. serde sizes a sequence's first allocation by its
/// claimed length but never above 1 MiB (`serde::__private::size_hint`),
/// so a claim of billions costs at most that before the bytes run out.
const ALLOC_LIMIT_BYTES: usize = (1 << 20) + (64 << 10);

/// A piece with blocks and single lines, as the entry node sends them.
fn sample_piece(texts: &[Vec<u8>]) -> OutputPiece {
    let mut lines = Vec::new();
    let mut offset = 0u64;
    let mut number = 1u64;
    for text in texts {
        let mut text = text.clone();
        text.push(b'\n');
        let block = LineBlock::new(number, offset, text).expect("a block");
        number = block.last_line() + 2;
        offset = block.end_offset() + 5;
        lines.push(LineRun::Block(block));
        lines.push(LineRun::One(MatchLine {
            line_number: number - 1,
            byte_offset: offset - 4,
            text: b"ctx".to_vec(),
            len_bytes: 3,
            context: true,
            matches: vec![(1, b"t".to_vec())],
        }));
    }
    OutputPiece::Lines {
        target: "b/k".into(),
        lines,
    }
}

/// Every block in a decoded value keeps its invariants.
fn check_blocks(runs: &[LineRun]) {
    for run in runs {
        if let LineRun::Block(b) = run {
            assert_eq!(b.text().last(), Some(&b'\n'));
            let newlines = b.text().iter().filter(|&&c| c == b'\n').count() as u64;
            assert_eq!(b.lines(), newlines);
            assert_eq!(b.each().count() as u64, newlines);
            assert!(b.last_line() >= b.first_line());
        }
    }
}

fn check_piece(piece: &OutputPiece) {
    match piece {
        OutputPiece::Lines { lines, .. } => check_blocks(lines),
        OutputPiece::Target(TargetOutput {
            output: Output::Grep(g),
            ..
        }) => check_blocks(&g.lines),
        _ => {}
    }
}

fn check_answer(bytes: &[u8]) {
    if let Ok(piece) = decode::<OutputPiece>("piece", bytes) {
        check_piece(&piece);
    }
    if let Ok(ComputeAnswer::Pieces { pieces, .. }) = decode::<ComputeAnswer>("answer", bytes) {
        pieces.iter().for_each(check_piece);
    }
    if let Ok(g) = decode::<GrepOutput>("grep output", bytes) {
        check_blocks(&g.lines);
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_answer(&bytes);
        let _ = decode::<LineBlock>("block", &bytes);
    }

    #[test]
    fn cut_and_changed_encodings_never_panic(
        texts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..4),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let piece = sample_piece(&texts);
        let answer: ComputeAnswer =
            ComputeAnswer::Pieces { first_piece: 3, pieces: vec![piece.clone()], end: false };
        let piece_bytes = encode(&piece);
        // Every cut of the piece is an error.
        for len in 0..piece_bytes.len() {
            prop_assert!(decode::<OutputPiece>("piece", &piece_bytes[..len]).is_err());
        }
        for encoded in [piece_bytes.clone(), encode(&answer)] {
            check_answer(&encoded);
            // Every cut of it is an error or a value that holds together.
            for len in 0..encoded.len() {
                check_answer(&encoded[..len]);
            }
            let mut changed = encoded.clone();
            for (at, byte) in &flips {
                let i = at.index(changed.len());
                changed[i] = *byte;
            }
            check_answer(&changed);
        }
        let back: OutputPiece = decode("piece", &encode(&piece)).expect("the piece");
        prop_assert_eq!(back, piece);
    }
}

#[test]
fn a_block_without_its_last_newline_does_not_decode() {
    let block = LineBlock::new(1, 0, b"ab\ncd\n".to_vec()).expect("a block");
    let mut bytes = encode(&block);
    // The text's last byte is the encoding's last.
    let last = bytes.len() - 1;
    bytes[last] = b'x';
    // (postcard keeps no message of its own for it: the error names what
    // was decoded.)
    let err = decode::<LineBlock>("block", &bytes).expect_err("no newline at its end");
    assert!(err.to_string().contains("block"), "{err}");
    bytes.pop();
    assert!(decode::<LineBlock>("block", &bytes).is_err());
    let back: LineBlock = decode("block", &encode(&block)).expect("a block");
    assert_eq!((back.lines(), back.text()), (2, &b"ab\ncd\n"[..]));
}

/// A valid message of every kind a node or a client decodes.
enum Message {
    Call(ComputeCall),
    Answer(ComputeAnswer),
    Result(CommandResult),
}

impl Message {
    fn encode(&self) -> Vec<u8> {
        match self {
            Message::Call(m) => encode(m),
            Message::Answer(m) => encode(m),
            Message::Result(m) => encode(m),
        }
    }

    /// Decodes `bytes` as this message's type within the allocation
    /// limit; a value must encode back to bytes that decode to it, and its
    /// blocks of lines keep their invariants.
    fn decode_checked(&self, bytes: &[u8]) -> bool {
        fn again<T>(what: &str, bytes: &[u8]) -> bool
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
        check_answer(bytes);
        match self {
            Message::Call(_) => again::<ComputeCall>("compute call", bytes),
            Message::Answer(_) => again::<ComputeAnswer>("compute answer", bytes),
            Message::Result(_) => again::<CommandResult>("command result", bytes),
        }
    }
}

fn grep_output() -> GrepOutput {
    let LineRun::Block(block) = sample_lines() else {
        unreachable!()
    };
    GrepOutput {
        matching_lines: 2,
        lines: vec![LineRun::Block(block)],
        first_nul: Some(9),
    }
}

fn sample_lines() -> LineRun {
    LineRun::Block(LineBlock::new(3, 40, b"ab\ncd\n".to_vec()).expect("a block"))
}

fn target_outputs() -> Vec<TargetOutput> {
    let outputs = [
        Output::Count(7),
        Output::Grep(grep_output()),
        Output::Wc(WcOutput {
            lines: 1,
            words: 2,
            bytes: 3,
            word_count: Some(4),
            top: vec![(b"the".to_vec(), 5)],
        }),
        Output::Checksum(ChecksumOutput {
            bytes: 8,
            crc32c: 0xdead_beef,
            sha256: [7; 32],
        }),
    ];
    outputs
        .into_iter()
        .map(|output| TargetOutput {
            target: "b/k".into(),
            size_bytes: 100,
            output,
        })
        .collect()
}

fn status(state: CommandState) -> CommandStatus {
    CommandStatus {
        id: 12,
        kernel: "grep".into(),
        state,
        bytes_done: 1,
        bytes_total: 2,
        elapsed_ms: 3,
        result_bytes: 4,
        peak_memory_bytes: 5,
    }
}

fn corpus() -> Vec<Message> {
    let mut out = calls();
    out.extend(answers());
    out
}

/// A submit of every job over every kind of target, and every other call.
fn calls() -> Vec<Message> {
    let mut grep = GrepSpec::new("a.*b", GrepSyntax::Extended);
    grep.patterns.push("c".into());
    (grep.ignore_case, grep.max_count, grep.after_context) = (true, Some(3), 2);
    let jobs = [
        Job::Scan(KernelSpec::Fgrep8 {
            pattern: *b"needle!!",
        }),
        Job::Scan(KernelSpec::Grep(grep)),
        Job::Scan(KernelSpec::Wc(WcSpec {
            words: true,
            word: Some(b"w".to_vec()),
            top: Some(10),
            locale: WcLocale::default(),
        })),
        Job::Scan(KernelSpec::Checksum),
        Job::Rmw(RmwBatch {
            volume: "v".into(),
            ops: vec![RmwOp {
                offset_bytes: 8,
                delta: 1,
            }],
        }),
    ];
    let targets = vec![
        Target::Object {
            bucket: "b".into(),
            key: "k".into(),
        },
        Target::Prefix {
            bucket: "b".into(),
            prefix: "p/".into(),
        },
        Target::Volume {
            name: "v".into(),
            offset_bytes: 4096,
            len_bytes: Some(100),
        },
        Target::Linear {
            first_page: 1,
            pages: 2,
        },
    ];
    let mut out: Vec<Message> = jobs
        .into_iter()
        .map(|job| {
            Message::Call(ComputeCall::Submit {
                job,
                targets: targets.clone(),
                limits: Limits::default(),
                members: vec![0, 1, 2],
            })
        })
        .collect();
    out.extend(
        [
            ComputeCall::Status { id: 1 },
            ComputeCall::Await {
                id: 1,
                timeout_ms: 500,
            },
            ComputeCall::Cancel { id: 1 },
            ComputeCall::Result {
                id: 1,
                offset: 10,
                max_bytes: 4096,
            },
            ComputeCall::List,
            ComputeCall::Output {
                id: 1,
                from_piece: 2,
                max_bytes: 4096,
            },
        ]
        .map(Message::Call),
    );
    out
}

/// Every answer, and a result of each outcome.
fn answers() -> Vec<Message> {
    let mut out = Vec::new();
    let result = CommandResult {
        outcome: Outcome::Scan(target_outputs()),
        bytes_scanned: 10,
        bytes_from_nodes: 20,
    };
    let states = [
        CommandState::Queued,
        CommandState::Running,
        CommandState::Done,
        CommandState::Failed {
            reason: "no".into(),
        },
        CommandState::Cancelled,
    ];
    out.push(Message::Answer(ComputeAnswer::Submitted { id: 9 }));
    out.push(Message::Answer(ComputeAnswer::Statuses(
        states.iter().cloned().map(status).collect(),
    )));
    out.extend(
        states
            .into_iter()
            .map(|s| Message::Answer(ComputeAnswer::Status(status(s)))),
    );
    out.push(Message::Answer(ComputeAnswer::ResultSlice {
        total_bytes: 100,
        bytes: vec![1, 2, 3],
    }));
    out.extend(
        [
            FailureKind::BadRequest,
            FailureKind::NoSuchCommand,
            FailureKind::NotDone,
            FailureKind::Busy,
            FailureKind::TooLarge,
            FailureKind::Internal,
        ]
        .map(|kind| {
            Message::Answer(ComputeAnswer::Failed(Failure {
                kind,
                message: "why".into(),
            }))
        }),
    );
    out.push(Message::Answer(ComputeAnswer::Pieces {
        first_piece: 4,
        pieces: vec![
            OutputPiece::Lines {
                target: "b/k".into(),
                lines: vec![sample_lines()],
            },
            OutputPiece::Target(target_outputs().remove(1)),
            OutputPiece::End {
                bytes_scanned: 1,
                bytes_from_nodes: 2,
            },
            OutputPiece::Whole(result.clone()),
        ],
        end: true,
    }));
    out.push(Message::Result(result));
    out.push(Message::Result(CommandResult {
        outcome: Outcome::Rmw {
            values: vec![1, 2, 3],
        },
        bytes_scanned: 0,
        bytes_from_nodes: 0,
    }));
    out
}

/// Every message decodes as itself, and cut at any length does not decode.
#[test]
fn every_message_cut_at_every_length_is_an_error() {
    let corpus = corpus();
    assert!(corpus.len() >= 28, "{} messages", corpus.len());
    for m in &corpus {
        let bytes = m.encode();
        assert!(m.decode_checked(&bytes), "{bytes:?}");
        for cut in 0..bytes.len() {
            assert!(
                !m.decode_checked(&bytes[..cut]),
                "cut at {cut} of {bytes:?}"
            );
        }
    }
}

/// Bytes after a whole message are an error that says so, not ignored.
#[test]
fn bytes_after_a_message_are_an_error() {
    for m in &corpus() {
        let mut bytes = m.encode();
        bytes.push(0);
        assert!(!m.decode_checked(&bytes), "{bytes:?}");
    }
    let mut bytes = encode(&ComputeCall::<quarry_kernels_api::PeerOnly>::List);
    bytes.extend_from_slice(&[1, 2]);
    let e = decode::<ComputeCall>("compute call", &bytes).unwrap_err();
    assert!(e.to_string().contains("2 bytes trail the message"), "{e}");
}

/// A claimed length of billions after a few bytes is refused once the
/// bytes run out, within the allocation limit.
#[test]
fn huge_claimed_lengths_are_refused_within_the_limit() {
    let huge = [0xFF, 0xFF, 0xFF, 0xFF, 0x0F];
    let corpus = corpus();
    let first = |kind: fn(&Message) -> bool| corpus.iter().find(|m| kind(m)).unwrap();
    // Submit (0) of a scan (0) with Fgrep8 (0) and its pattern, then a
    // target count of 2^32 - 1.
    let mut submit = vec![0, 0, 0];
    submit.extend_from_slice(b"needle!!");
    submit.extend_from_slice(&huge);
    let call = first(|m| matches!(m, Message::Call(_)));
    assert!(!call.decode_checked(&submit));
    // Statuses (2), then a count of 2^32 - 1.
    let mut statuses = vec![2];
    statuses.extend_from_slice(&huge);
    let answer = first(|m| matches!(m, Message::Answer(_)));
    assert!(!answer.decode_checked(&statuses));
    // A scan's outcome (0), then 2^32 - 1 outputs.
    let mut outputs = vec![0];
    outputs.extend_from_slice(&huge);
    let result = first(|m| matches!(m, Message::Result(_)));
    assert!(!result.decode_checked(&outputs));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A valid message with bytes changed is an error or a value that
    /// encodes back to itself.
    #[test]
    fn changed_messages_are_errors_or_values(
        pick in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let corpus = corpus();
        let m = pick.get(&corpus);
        let mut bytes = m.encode();
        for (at, byte) in &flips {
            let i = at.index(bytes.len());
            bytes[i] = *byte;
        }
        m.decode_checked(&bytes);
    }

    /// Random bytes, alone and after each kind's first byte, are errors or
    /// values that encode back to themselves.
    #[test]
    fn random_messages_are_errors_or_values(
        pick in any::<prop::sample::Index>(),
        junk in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let corpus = corpus();
        let m = pick.get(&corpus);
        m.decode_checked(&junk);
        let mut bytes = m.encode()[..1].to_vec();
        bytes.extend_from_slice(&junk);
        m.decode_checked(&bytes);
    }
}
