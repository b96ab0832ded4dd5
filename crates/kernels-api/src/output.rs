//! What a kernel answers for one target: [`Output`].

use serde::{Deserialize, Serialize};

use crate::job::{CommandResult, TargetOutput};
use crate::lines::{bytes_field, LineRun};

/// A kernel's answer for one whole target (an object, a volume range, a
/// linear range).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    /// [`KernelSpec::Fgrep8`](crate::KernelSpec::Fgrep8): how many times the
    /// pattern occurs.
    Count(u64),
    /// [`KernelSpec::Grep`](crate::KernelSpec::Grep).
    Grep(GrepOutput),
    /// [`KernelSpec::Wc`](crate::KernelSpec::Wc).
    Wc(WcOutput),
    /// [`KernelSpec::Checksum`](crate::KernelSpec::Checksum).
    Checksum(ChecksumOutput),
}

/// The lines of one target that matched.
///
/// Two answers are equal when they print the same: the same counts and
/// the same lines, however the lines are cut into runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GrepOutput {
    /// How many lines were selected (`grep -c`: matching ones, or with
    /// `-v` the others; at most `-m`).
    pub matching_lines: u64,
    /// The lines to print in target order, when the spec asked for them:
    /// the selected lines (at most `-m` of them) and their context lines;
    /// consecutive selected lines may come as one block.
    pub lines: Vec<LineRun>,
    /// The offset of the target's first NUL byte, looked for when lines
    /// were asked for: GNU grep treats data holding one as binary and
    /// prints no lines from there on.
    #[serde(default)]
    pub first_nul: Option<u64>,
}

impl GrepOutput {
    /// The lines to print, one by one.
    pub fn match_lines(&self) -> impl Iterator<Item = MatchLine> + '_ {
        self.lines.iter().flat_map(LineRun::match_lines)
    }
}

impl PartialEq for GrepOutput {
    fn eq(&self, other: &GrepOutput) -> bool {
        self.matching_lines == other.matching_lines
            && self.first_nul == other.first_nul
            && self.match_lines().eq(other.match_lines())
    }
}

impl Eq for GrepOutput {}

/// One line to print.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchLine {
    /// 1-based line number in the target (`grep -n`).
    pub line_number: u64,
    /// Offset of the line's first byte in the target (`grep -b`).
    pub byte_offset: u64,
    /// The line without its terminating newline; empty under `-o`
    /// ([`GrepSpec::only_matching`](crate::GrepSpec::only_matching)),
    /// where `matches` holds what is printed.
    #[serde(with = "bytes_field")]
    pub text: Vec<u8>,
    /// The line's length without its newline (`text` may be left out).
    #[serde(default)]
    pub len_bytes: u64,
    /// A context line (`-A`, `-B`, `-C`, or a line after the `-m`-th
    /// selected one): GNU grep prints `-` after its name and numbers where
    /// a selected line has `:`.
    #[serde(default)]
    pub context: bool,
    /// Under `-o`: the non-empty matches GNU grep prints of this line, as
    /// (offset in the line, bytes); empty for a line whose matches are not
    /// printed.
    #[serde(default)]
    pub matches: Vec<(u64, Vec<u8>)>,
}

/// Counts of one target, as GNU wc makes them in the C or a UTF-8 locale.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WcOutput {
    /// Newlines (`wc -l`).
    pub lines: u64,
    /// Words (`wc -w`), when the spec asked for them (else 0).
    pub words: u64,
    /// Bytes (`wc -c`).
    pub bytes: u64,
    /// Occurrences of the spec's word, when it named one.
    pub word_count: Option<u64>,
    /// The most frequent words and their counts, most frequent first (ties
    /// in byte order of the word), when the spec asked for a histogram.
    pub top: Vec<(Vec<u8>, u64)>,
}

/// Checksums of one target's bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumOutput {
    /// Bytes hashed.
    pub bytes: u64,
    /// CRC-32C (Castagnoli).
    pub crc32c: u32,
    /// SHA-256.
    pub sha256: [u8; 32],
}

/// One piece of a command's output as it streams from the entry node to
/// the client, in order ([`ComputeCall::Output`](crate::ComputeCall::Output)):
/// a scan's targets one after the other, each as the lines that are final
/// so far and then its answer, and the command's totals last.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputPiece {
    /// Lines of the next target's answer, in order (grep's lines: printed
    /// whatever the rest of the target holds); more follow.
    Lines {
        /// The target, as its answer names it.
        target: String,
        /// The lines.
        lines: Vec<LineRun>,
    },
    /// A target's answer: for grep, its lines after those of the `Lines`
    /// pieces before it.
    Target(TargetOutput),
    /// The last piece of a scan: bytes the kernels read and bytes the
    /// nodes sent the entry node.
    End {
        /// Bytes the kernels read at the nodes.
        bytes_scanned: u64,
        /// Bytes of partial results the nodes sent the entry node.
        bytes_from_nodes: u64,
    },
    /// The whole answer of a command that does not stream (a
    /// read-modify-write batch): the only piece.
    Whole(CommandResult),
}

/// Joins a command's output pieces, in order, into its result: what a
/// client that keeps the whole answer makes of the stream.
#[derive(Debug, Default)]
pub struct Assembler {
    targets: Vec<TargetOutput>,
    lines: Vec<LineRun>,
    result: Option<CommandResult>,
}

impl Assembler {
    /// Adds the next piece.
    pub fn push(&mut self, piece: OutputPiece) {
        match piece {
            OutputPiece::Lines { mut lines, .. } => self.lines.append(&mut lines),
            OutputPiece::Target(mut t) => {
                if let Output::Grep(g) = &mut t.output {
                    self.lines.append(&mut g.lines);
                    g.lines = std::mem::take(&mut self.lines);
                }
                self.lines.clear();
                self.targets.push(t);
            }
            OutputPiece::End {
                bytes_scanned,
                bytes_from_nodes,
            } => {
                self.result = Some(CommandResult {
                    outcome: crate::job::Outcome::Scan(std::mem::take(&mut self.targets)),
                    bytes_scanned,
                    bytes_from_nodes,
                });
            }
            OutputPiece::Whole(result) => self.result = Some(result),
        }
    }

    /// The result, once the last piece is in.
    pub fn finish(self) -> Option<CommandResult> {
        self.result
    }
}
