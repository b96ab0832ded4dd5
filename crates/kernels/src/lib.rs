//! `quarry-kernels` — layer 6 of Quarry: computation in the datapath.
//!
//! This crate owns what runs next to the data (BlueDBM §5, Minerva §III):
//! the built-in scan kernels ([`compile`] a [`KernelSpec`] into a
//! [`ScanKernel`]), the parts they exchange ([`Part`]: a partial result with
//! the edge fragments of the records cut at a range's ends, so records that
//! straddle a chunk or node boundary count exactly once), and their answers
//! ([`Output`]).
//!
//! ```
//! use quarry_kernels::{compile, KernelSpec, Output};
//!
//! let kernel = compile(&KernelSpec::Fgrep8 { pattern: *b"needle!!" }).unwrap();
//! // A target split over two nodes, the pattern across the cut.
//! let text = b"hay needle!! hay nee".to_vec();
//! let more = b"dle!! hay";
//! let left = kernel.fold(kernel.empty(0), &text).unwrap();
//! let right = kernel.fold(kernel.empty(text.len() as u64), more).unwrap();
//! let whole = kernel.combine(left, right).unwrap();
//! assert_eq!(kernel.finish(whole).unwrap(), Output::Count(2));
//! ```
#![deny(missing_docs)]

mod builtin;
mod engine;
mod engine_error;
mod error;
mod local;
mod merge;
mod output_queue;
mod peer_wire;
mod peers;
mod plan;
mod query;
mod scan;
mod tuner;

// The spec, job, output and client-facing message types live in
// quarry-kernels-api, which a client links without the kernels (and their
// regex engines); these modules keep the paths this crate names them by.
mod job {
    pub use quarry_kernels_api::*;
}
mod output {
    pub use quarry_kernels_api::*;
}
mod spec {
    pub use quarry_kernels_api::*;
}
mod wire {
    pub use crate::peer_wire::{
        ComputeAnswer, ComputeCall, LocalAnswer, LocalRun, Resume, Segment, Source,
    };
    pub use quarry_kernels_api::*;
}

pub use builtin::{ChecksumPart, Fgrep8Part, GrepPart, WcPart};
pub use engine::{
    Engine, MAX_FINISHED_COMMANDS, MAX_KEPT_RESULT_BYTES, MAX_RUNNING_COMMANDS,
    MAX_SEGMENTS_PER_COMMAND, MAX_UNFINISHED_COMMANDS,
};
pub use engine_error::ComputeError;
pub use error::KernelError;
pub use job::{
    CommandId, CommandResult, CommandState, CommandStatus, Job, Limits, Outcome, QueryOutcome,
    QuerySpec, RmwBatch, RmwOp, Target, TargetOutput,
};
pub use local::{LocalData, ManagedData, MAX_RUN_BYTES};
pub use output::{
    Assembler, BadBlock, ChecksumOutput, GrepOutput, LineBlock, LineRun, MatchLine, Output,
    OutputPiece, WcOutput,
};
pub use peers::Peers;
pub use plan::{RUNS_IN_FLIGHT, RUN_BYTES};
pub use query::MAX_QUERY_RUN_BYTES;
pub use scan::{compile, Part, ScanKernel};
pub use spec::{
    GrepSpec, GrepSyntax, KernelSpec, WcLocale, WcSpec, MAX_CONTEXT_LINES, MAX_PATTERN_BYTES,
};
pub use tuner::{ReadSetting, ReadTuner, WINDOW_BYTES, WINDOW_MIN};
pub use wire::{
    decode, encode, ComputeAnswer, ComputeCall, Failure, FailureKind, LocalAnswer, LocalRun,
    Resume, Segment, Source, MAX_AWAIT_MS, MAX_RESOLVED_TARGETS, MAX_RESULT_SLICE_BYTES,
    MAX_RMW_OPS, MAX_SEGMENTS_PER_RUN, MAX_TARGETS,
};
