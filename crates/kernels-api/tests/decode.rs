//! Decoding a grep answer's blocks of lines never panics: random bytes,
//! cut encodings and encodings with bytes changed are errors or values
//! whose blocks keep their invariants (text ending with a newline, as many
//! lines as newlines).

use proptest::prelude::*;
use quarry_kernels_api::{
    decode, encode, ComputeAnswer, GrepOutput, LineBlock, LineRun, MatchLine, Output, OutputPiece,
    TargetOutput,
};

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
