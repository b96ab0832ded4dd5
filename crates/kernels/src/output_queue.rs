//! A command's output on its way to the client: [`OutputQueue`], the
//! pieces the entry node has made and the client has not read yet.
//!
//! The queue holds a bounded number of bytes: a command whose output comes
//! faster than its client reads waits in [`OutputQueue::push`] (and its
//! nodes wait for their next run), rather than growing the entry node's
//! memory. A client reads pieces from a number on
//! ([`OutputQueue::read`]); asking from `n` releases the pieces before `n`.
//! While no piece was released, the whole output is still here when the
//! command is done, and [`OutputQueue::whole`] gives it as one
//! [`CommandResult`], as a client that reads results whole expects.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::ser::{SerializeStructVariant, Serializer};
use serde::Serialize;

use tokio::sync::watch;

use crate::job::CommandResult;
use crate::output::{Assembler, LineRun, Output, OutputPiece};

/// Roughly how many bytes a run of lines takes, encoded or in memory.
pub(crate) fn run_bytes(run: &LineRun) -> u64 {
    match run {
        LineRun::One(l) => {
            32 + l.text.len() as u64
                + l.matches
                    .iter()
                    .map(|(_, m)| 16 + m.len() as u64)
                    .sum::<u64>()
        }
        LineRun::Block(b) => run_bytes_of_text(b.text().len()),
    }
}

/// [`run_bytes`] of a block of `len` bytes of text.
pub(crate) fn run_bytes_of_text(len: usize) -> u64 {
    32 + len as u64
}

/// Roughly how many bytes a piece takes, encoded or in memory.
pub(crate) fn piece_bytes(piece: &OutputPiece) -> u64 {
    let lines = |lines: &[LineRun]| -> u64 { lines.iter().map(run_bytes).sum() };
    match piece {
        OutputPiece::Lines { target, lines: l } => 16 + target.len() as u64 + lines(l),
        OutputPiece::Target(t) => {
            let body = match &t.output {
                Output::Grep(g) => lines(&g.lines),
                Output::Wc(w) => w.top.iter().map(|(w, _)| 16 + w.len() as u64).sum(),
                _ => 0,
            };
            64 + t.target.len() as u64 + body
        }
        OutputPiece::End { .. } => 32,
        OutputPiece::Whole(r) => match &r.outcome {
            crate::job::Outcome::Rmw { values } => 32 + 8 * values.len() as u64,
            crate::job::Outcome::Query(q) => 64 + q.arrow_ipc.len() as u64,
            crate::job::Outcome::Scan(t) => 32 + 64 * t.len() as u64,
        },
    }
}

#[derive(Default)]
struct Held {
    /// The number of the first piece held.
    first: u64,
    /// Shared with the answers that carry them, which encode them from
    /// here: a piece's lines are not copied to be sent.
    pieces: VecDeque<(Arc<OutputPiece>, u64)>,
    held_bytes: u64,
    /// The last piece is in.
    complete: bool,
    /// A reader released pieces: the output is no longer whole here.
    released: bool,
}

/// See the module's documentation.
pub(crate) struct OutputQueue {
    held: Mutex<Held>,
    /// Bumped on every change: a piece in, pieces released, the end.
    changed: watch::Sender<u64>,
    bound_bytes: u64,
}

/// Why pieces cannot be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The pieces before `first` were released by an earlier read.
    Released { first: u64 },
    /// There is no piece `wanted` yet: the output has `next` so far.
    Ahead { wanted: u64, next: u64 },
}

impl OutputQueue {
    /// A queue that holds at most `bound_bytes` of unread pieces (one piece
    /// at least, whatever its size).
    pub(crate) fn new(bound_bytes: u64) -> OutputQueue {
        OutputQueue {
            held: Mutex::new(Held::default()),
            changed: watch::channel(0).0,
            bound_bytes,
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        // Plain data: usable after a panic elsewhere.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Bytes of unread pieces held.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held().held_bytes
    }

    /// Adds a piece once there is room: waits while the unread pieces
    /// fill the bound (the command stalls until its client reads).
    pub(crate) async fn push(&self, piece: OutputPiece) {
        let size = piece_bytes(&piece);
        let mut rx = self.changed.subscribe();
        loop {
            {
                let mut held = self.held();
                if held.pieces.is_empty() || held.held_bytes + size <= self.bound_bytes {
                    held.pieces.push_back((Arc::new(piece), size));
                    held.held_bytes += size;
                    drop(held);
                    self.bump();
                    return;
                }
            }
            // The sender lives as long as the queue.
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Marks the output complete: its last piece is in.
    pub(crate) fn complete(&self) {
        self.held().complete = true;
        self.bump();
    }

    /// A receiver that sees every change to the queue.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Releases the pieces before `from` and returns those from `from` on,
    /// at most `max_bytes` of them (one at least), with whether the last
    /// piece of the output is among them.
    pub(crate) fn read(
        &self,
        from: u64,
        max_bytes: u64,
    ) -> Result<(Vec<Arc<OutputPiece>>, bool), ReadError> {
        let mut held = self.held();
        if from < held.first {
            return Err(ReadError::Released { first: held.first });
        }
        let next = held.first + held.pieces.len() as u64;
        if from > next {
            return Err(ReadError::Ahead { wanted: from, next });
        }
        let release = (from - held.first) as usize;
        if release > 0 {
            let freed: u64 = held.pieces.drain(..release).map(|(_, s)| s).sum();
            held.held_bytes -= freed;
            held.first = from;
            held.released = true;
        }
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for (piece, size) in &held.pieces {
            if !out.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            out.push(Arc::clone(piece));
        }
        let end = held.complete && out.len() == held.pieces.len();
        drop(held);
        if release > 0 {
            self.bump();
        }
        Ok((out, end))
    }

    /// The whole output as one result, when it is complete and no piece
    /// was released; `None` otherwise.
    pub(crate) fn whole(&self) -> Option<CommandResult> {
        let held = self.held();
        if !held.complete || held.released {
            return None;
        }
        let mut assembler = Assembler::default();
        for (piece, _) in &held.pieces {
            assembler.push((**piece).clone());
        }
        assembler.finish()
    }
}

/// `ComputeAnswer::Pieces` of shared pieces: encodes exactly as that
/// variant does (postcard writes a variant's index and its fields in
/// order; `the_pieces_answer_encodes_as_compute_answer_pieces` checks it).
pub(crate) struct PiecesAnswer {
    pub(crate) first_piece: u64,
    pub(crate) pieces: Vec<Arc<OutputPiece>>,
    pub(crate) end: bool,
}

/// The index of `Pieces` among `ComputeAnswer`'s variants.
const PIECES_VARIANT: u32 = 6;

impl Serialize for PiecesAnswer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let pieces: Vec<&OutputPiece> = self.pieces.iter().map(|p| &**p).collect();
        let mut s =
            serializer.serialize_struct_variant("ComputeAnswer", PIECES_VARIANT, "Pieces", 3)?;
        s.serialize_field("first_piece", &self.first_piece)?;
        s.serialize_field("pieces", &pieces)?;
        s.serialize_field("end", &self.end)?;
        s.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{LineBlock, LineRun};
    use crate::wire::{encode, ComputeAnswer};

    #[test]
    fn the_pieces_answer_encodes_as_compute_answer_pieces() {
        let block = LineBlock::new(1, 0, b"a\nbc\n".to_vec()).expect("a block");
        let pieces = vec![
            OutputPiece::Lines {
                target: "b/k".into(),
                lines: vec![LineRun::Block(block)],
            },
            OutputPiece::End {
                bytes_scanned: 5,
                bytes_from_nodes: 7,
            },
        ];
        let shared = PiecesAnswer {
            first_piece: 9,
            pieces: pieces.iter().cloned().map(Arc::new).collect(),
            end: true,
        };
        let plain = ComputeAnswer::Pieces {
            first_piece: 9,
            pieces,
            end: true,
        };
        assert_eq!(encode(&shared), encode(&plain));
    }
}
