//! Jobs as people type and read them, below every face that takes them:
//! `quarry run`/`grep`/`wc` and the mount's `.quarry/KERNEL/input` files parse
//! their kernel and target arguments here ([`parse_job`], [`parse_target`],
//! sizes with [`parse_size`]), and print the answers here as GNU grep 3.8
//! ([`format_grep`]) and GNU wc 9.1 ([`format_wc`], in the locale
//! [`wc_locale`] reads) print them, and as JSON ([`result_json`],
//! [`status_json`]) for `--json` and the Python package. It links only
//! `quarry-kernels-api` (and serde_json), so a face gets the same text
//! without the command line.
//!
//! ```
//! use quarry_jobs::{format_wc, parse_job, parse_size, parse_target};
//! use quarry_kernels_api::{Output, Target, TargetOutput, WcOutput};
//!
//! let args = ["4K:1".to_string()];
//! let (job, rest) = parse_job("checksum", &args)?;
//! assert_eq!(job.kernel_name(), "checksum");
//! assert_eq!(rest, args);
//! assert_eq!(parse_size("64M")?, 64 << 20);
//! let Target::Prefix { bucket, prefix } = parse_target("logs/2024/*")? else { panic!() };
//! assert_eq!((bucket.as_str(), prefix.as_str()), ("logs", "2024/"));
//!
//! let counted = TargetOutput {
//!     target: "logs/a.txt".into(),
//!     size_bytes: 12,
//!     output: Output::Wc(WcOutput { lines: 2, words: 3, bytes: 12, ..WcOutput::default() }),
//! };
//! assert_eq!(format_wc(&[counted], true, true, true), " 2  3 12 logs/a.txt\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod chunking_text;
mod grep_options;
mod grep_output;
mod job;
mod objects_json;
mod result_json;
mod size;
mod wc_output;

pub use chunking_text::{describe_chunking, parse_chunking, ChunkingTextError};
pub use grep_options::{GrepOptions, GrepOptionsError};
pub use grep_output::{format_grep, GrepFormat, GrepPrint, GrepPrinter, ListFiles};
pub use job::{parse_job, parse_target, JobParseError};
pub use objects_json::{buckets_json, usage_json};
pub use result_json::{query_stats_json, result_json, state_text, status_json};
pub use size::{human_bytes, parse_size, SizeError};
pub use wc_output::{format_wc, is_utf8_codeset, wc_locale};
