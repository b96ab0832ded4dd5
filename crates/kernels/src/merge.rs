//! The global kernel at the entry node: [`Merger`] joins each target's
//! parts in target order as they come back from the nodes, in whatever
//! order that is, and makes the command's output pieces as soon as they
//! are final: a target's lines as its joined prefix grows
//! ([`ScanKernel::drain`]), its answer once its last part is in, the
//! targets one after the other.

use std::collections::BTreeMap;

use crate::engine_error::ComputeError;
use crate::job::TargetOutput;
use crate::output::{LineRun, OutputPiece};
use crate::output_queue::{run_bytes, run_bytes_of_text};
use crate::scan::{Part, ScanKernel};

/// One target on its way through the merge.
struct TargetMerge {
    name: String,
    size_bytes: u64,
    /// Where its joined prefix ends: every byte before is in `prefix`.
    frontier: u64,
    /// The part of bytes `0..frontier`, less what was drained.
    prefix: Option<Part>,
    prefix_bytes: usize,
    /// Parts that came before the ones ahead of them: (start, end) → part
    /// and its size.
    waiting: BTreeMap<(u64, u64), (Part, usize)>,
}

/// See the module's documentation.
pub(crate) struct Merger<'k> {
    kernel: &'k dyn ScanKernel,
    targets: Vec<TargetMerge>,
    /// The first target whose answer is not out yet.
    next: usize,
    /// Bytes of parts held (waiting ones and prefixes).
    held_bytes: usize,
    /// Most bytes of lines in one output piece.
    piece_bytes: u64,
}

impl<'k> Merger<'k> {
    /// A merge of targets named and sized so, that cuts lines into pieces
    /// of about `piece_bytes`.
    pub(crate) fn new(
        kernel: &'k dyn ScanKernel,
        targets: impl IntoIterator<Item = (String, u64)>,
        piece_bytes: u64,
    ) -> Merger<'k> {
        let targets = targets
            .into_iter()
            .map(|(name, size_bytes)| TargetMerge {
                name,
                size_bytes,
                frontier: 0,
                prefix: None,
                prefix_bytes: 0,
                waiting: BTreeMap::new(),
            })
            .collect();
        Merger {
            kernel,
            targets,
            next: 0,
            held_bytes: 0,
            piece_bytes: piece_bytes.max(1),
        }
    }

    /// Bytes of parts the merge holds.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Whether every target's answer is out.
    pub(crate) fn done(&self) -> bool {
        self.next == self.targets.len()
    }

    /// Takes the part of bytes `start..end` of target `target`.
    pub(crate) fn add(
        &mut self,
        target: u32,
        start: u64,
        end: u64,
        part: Part,
    ) -> Result<(), ComputeError> {
        let t = self.targets.get_mut(target as usize).ok_or_else(|| {
            ComputeError::BadRequest(format!("a part for target {target}, which is not named"))
        })?;
        if start < t.frontier || end > t.size_bytes || end < start {
            return Err(ComputeError::BadRequest(format!(
                "a part for bytes {start}..{end} of target {target}, which has {} bytes and \
                 is joined up to {}",
                t.size_bytes, t.frontier
            )));
        }
        let size = part.size_bytes();
        if t.waiting.insert((start, end), (part, size)).is_some() {
            return Err(ComputeError::BadRequest(format!(
                "two parts for bytes {start}..{end} of target {target}"
            )));
        }
        self.held_bytes += size;
        Ok(())
    }

    /// Joins what can be joined and returns the output pieces that became
    /// final, in order.
    pub(crate) fn advance(&mut self) -> Result<Vec<OutputPiece>, ComputeError> {
        let mut out = Vec::new();
        while let Some(t) = self.targets.get_mut(self.next) {
            while let Some(entry) = t.waiting.first_entry() {
                if entry.key().0 != t.frontier {
                    break;
                }
                let ((_, end), (part, size)) = entry.remove_entry();
                self.held_bytes -= size;
                let joined = match t.prefix.take() {
                    None => part,
                    Some(left) => self.kernel.combine(left, part)?,
                };
                t.prefix = Some(joined);
                t.frontier = end;
            }
            if let Some(prefix) = t.prefix.as_mut() {
                let lines = self.kernel.drain(prefix)?;
                cut_lines(&t.name, lines, self.piece_bytes, &mut out);
                self.held_bytes -= t.prefix_bytes;
                t.prefix_bytes = prefix.size_bytes();
                self.held_bytes += t.prefix_bytes;
            }
            if t.frontier < t.size_bytes || !t.waiting.is_empty() {
                break;
            }
            let whole = t.prefix.take().unwrap_or_else(|| self.kernel.empty(0));
            self.held_bytes -= t.prefix_bytes;
            t.prefix_bytes = 0;
            out.push(OutputPiece::Target(TargetOutput {
                target: std::mem::take(&mut t.name),
                size_bytes: t.size_bytes,
                output: self.kernel.finish(whole)?,
            }));
            self.next += 1;
        }
        Ok(out)
    }
}

/// Cuts lines into pieces of about `piece_bytes` each; a block larger
/// than that is cut between its lines (a line longer than a piece makes a
/// piece of its own), a smaller one goes whole into the next piece it fits.
fn cut_lines(target: &str, lines: Vec<LineRun>, piece_bytes: u64, out: &mut Vec<OutputPiece>) {
    let piece_of = |lines| OutputPiece::Lines {
        target: target.to_string(),
        lines,
    };
    let mut piece: Vec<LineRun> = Vec::new();
    let mut bytes = 0u64;
    let mut add = |run: LineRun, piece: &mut Vec<LineRun>, out: &mut Vec<OutputPiece>| {
        let size = run_bytes(&run);
        if !piece.is_empty() && bytes + size > piece_bytes {
            out.push(piece_of(std::mem::take(piece)));
            bytes = 0;
        }
        bytes += size;
        piece.push(run);
    };
    for run in lines {
        match run {
            LineRun::Block(b) if run_bytes_of_text(b.text().len()) > piece_bytes => {
                let max = piece_bytes.saturating_sub(run_bytes_of_text(0)).max(1);
                for b in b.into_pieces(max as usize) {
                    add(LineRun::Block(b), &mut piece, out);
                }
            }
            run => add(run, &mut piece, out),
        }
    }
    if !piece.is_empty() {
        out.push(piece_of(piece));
    }
}
