//! `quarry-kernels-api` — the compute service as a client and the nodes both
//! see it: what a command asks for ([`KernelSpec`], [`Job`], [`Target`],
//! [`Limits`]), what it answers ([`CommandStatus`], [`CommandResult`],
//! [`Output`]) and the calls and answers that carry them in the body of a
//! protocol `Call` to `Service::Compute` ([`ComputeCall`], [`ComputeAnswer`],
//! encoded with postcard by [`encode`] and [`decode`]).
//!
//! The kernels themselves (and their regex engines) live in
//! `quarry-kernels`, which builds on this crate; a client submits and
//! follows commands with this crate alone. The node-to-node runs of kernel
//! parts are the one message a client never sees: [`ComputeCall`] and
//! [`ComputeAnswer`] leave that variant's payload to the nodes
//! ([`PeerOnly`] in a client).
//!
//! ```
//! use quarry_kernels_api::{decode, encode, ComputeCall, Job, KernelSpec, Limits, Target};
//!
//! let call: ComputeCall = ComputeCall::Submit {
//!     job: Job::Scan(KernelSpec::Fgrep8 { pattern: *b"needle!!" }),
//!     targets: vec![Target::Prefix { bucket: "logs".into(), prefix: "2024/".into() }],
//!     limits: Limits::default(),
//!     members: vec![0, 1, 2],
//! };
//! let body = encode(&call);
//! assert_eq!(decode::<ComputeCall>("submit", &body)?, call);
//! // A cut message is an error naming what it was, never a guess.
//! let cut = decode::<ComputeCall>("submit", &body[..body.len() - 1]).unwrap_err();
//! assert!(cut.to_string().contains("submit"));
//! # Ok::<(), quarry_kernels_api::Malformed>(())
//! ```
#![deny(missing_docs)]

mod job;
mod lines;
mod output;
mod spec;
mod wire;

pub use job::{
    CommandId, CommandResult, CommandState, CommandStatus, Job, Limits, Outcome, QueryOutcome,
    QuerySpec, RmwBatch, RmwOp, Target, TargetOutput,
};
pub use lines::{BadBlock, LineBlock, LineRun};
pub use output::{Assembler, ChecksumOutput, GrepOutput, MatchLine, Output, OutputPiece, WcOutput};
pub use spec::{
    GrepSpec, GrepSyntax, KernelSpec, WcLocale, WcSpec, MAX_CONTEXT_LINES, MAX_PATTERN_BYTES,
};
pub use wire::{
    decode, encode, ComputeAnswer, ComputeCall, Failure, FailureKind, Malformed, PeerOnly,
    QueryChunk, QueryPart, QueryRun, MAX_AWAIT_MS, MAX_OUTPUT_SLICE_BYTES, MAX_OUTPUT_WAIT_MS,
    MAX_QUERY_RUN_CHUNKS, MAX_QUERY_RUN_ROW_GROUPS, MAX_RESOLVED_TARGETS, MAX_RESULT_SLICE_BYTES,
    MAX_RMW_OPS, MAX_SEGMENTS_PER_RUN, MAX_TARGETS,
};
