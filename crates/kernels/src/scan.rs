//! The interface every scan kernel implements: [`ScanKernel`], over
//! [`Part`]s that summarize contiguous byte ranges of a target.

use serde::{Deserialize, Serialize};

use crate::builtin::{ChecksumPart, Fgrep8Part, GrepPart, WcPart};
use crate::error::KernelError;
use crate::output::{LineRun, Output};
use crate::spec::KernelSpec;

/// A kernel's summary of one contiguous byte range of a target.
///
/// A part carries the kernel's partial result for the records wholly inside
/// its range, and the *edge fragments* (the bytes of records cut by the
/// range's start and end) so that joining parts counts every record that
/// straddles a chunk or node boundary exactly once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Part {
    /// Of [`KernelSpec::Fgrep8`].
    Fgrep8(Fgrep8Part),
    /// Of [`KernelSpec::Grep`].
    Grep(GrepPart),
    /// Of [`KernelSpec::Wc`].
    Wc(WcPart),
    /// Of [`KernelSpec::Checksum`].
    Checksum(ChecksumPart),
}

/// A compiled scan kernel.
///
/// The engine streams a target's bytes in order through [`fold`]
/// (block by block, as pages come off the device), one range per node, and
/// joins the ranges' parts with [`combine`] at the node where the command
/// entered; [`finish`] turns the part of the whole target into its
/// [`Output`]. For every split of a target into ranges, the result must be
/// the same as folding the whole target at once: this is what the tests of
/// each kernel check.
///
/// [`fold`]: ScanKernel::fold
/// [`combine`]: ScanKernel::combine
/// [`finish`]: ScanKernel::finish
pub trait ScanKernel: Send + Sync {
    /// The part of an empty range starting at `offset` in the target.
    fn empty(&self, offset: u64) -> Part;

    /// Extends `state`, the part of the range that ends where `bytes`
    /// starts, by `bytes`.
    fn fold(&self, state: Part, bytes: &[u8]) -> Result<Part, KernelError>;

    /// Whether parts of adjacent ranges computed apart can be joined with
    /// [`combine`](ScanKernel::combine). When false (SHA-256 is a chain),
    /// the engine folds a target's ranges in order, handing each node the
    /// state the previous range ended with.
    fn parallel(&self) -> bool;

    /// Joins the part of a range and the part of the range right after it.
    fn combine(&self, left: Part, right: Part) -> Result<Part, KernelError>;

    /// The answer for a whole target whose part is `whole`.
    fn finish(&self, whole: Part) -> Result<Output, KernelError>;

    /// Takes from `prefix`, the part of a target's first bytes, what its
    /// answer holds whatever the bytes after it are (grep's lines, in
    /// order, as [`finish`](ScanKernel::finish) gives them), so that the
    /// entry node hands them on and forgets them; `finish` of the rest
    /// then gives the answer without them. Kernels whose answer is small
    /// take nothing.
    fn drain(&self, prefix: &mut Part) -> Result<Vec<LineRun>, KernelError> {
        let _ = prefix;
        Ok(Vec::new())
    }
}

impl Part {
    /// Roughly how many bytes of memory the part holds: the engine fails a
    /// command whose parts outgrow its memory limit.
    pub fn size_bytes(&self) -> usize {
        match self {
            Part::Fgrep8(p) => p.size_bytes(),
            Part::Grep(p) => p.size_bytes(),
            Part::Wc(p) => p.size_bytes(),
            Part::Checksum(p) => p.size_bytes(),
        }
    }

    /// The name of the kernel the part belongs to.
    pub fn kernel_name(&self) -> &'static str {
        match self {
            Part::Fgrep8(_) => "fgrep8",
            Part::Grep(_) => "grep",
            Part::Wc(_) => "wc",
            Part::Checksum(_) => "checksum",
        }
    }
}

/// Compiles a spec into a kernel; an error names what is wrong with its
/// arguments (a bad regex, an empty word).
pub fn compile(spec: &KernelSpec) -> Result<std::sync::Arc<dyn ScanKernel>, KernelError> {
    crate::builtin::compile(spec)
}
