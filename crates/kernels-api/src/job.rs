//! What a command names and answers: [`Job`], [`Target`], [`Limits`],
//! [`CommandStatus`] and [`CommandResult`].

use serde::{Deserialize, Serialize};

use crate::output::Output;
use crate::spec::KernelSpec;

/// A command's number, unique on the node where it entered (Minerva's
/// command sequence number).
pub type CommandId = u64;

/// What a command runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Job {
    /// A scan kernel over every target.
    Scan(KernelSpec),
    /// A batch of read-modify-write operations on a block volume (Minerva's
    /// RMW): each adds a delta to a little-endian u64, atomically.
    Rmw(RmwBatch),
    /// A SQL query over Parquet objects (the objects are named by its FROM,
    /// not by targets): filters and partial aggregates run where the pages
    /// live, the entry node merges.
    Query(QuerySpec),
}

/// A SQL query (the subset docs/query.md lists).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuerySpec {
    /// The SQL text.
    pub sql: String,
}

impl Job {
    /// The kernel's name, as `quarry jobs` shows it.
    pub fn kernel_name(&self) -> &'static str {
        match self {
            Job::Scan(KernelSpec::Fgrep8 { .. }) => "fgrep8",
            Job::Scan(KernelSpec::Grep(_)) => "grep",
            Job::Scan(KernelSpec::Wc(_)) => "wc",
            Job::Scan(KernelSpec::Checksum) => "checksum",
            Job::Rmw(_) => "rmw",
            Job::Query(_) => "query",
        }
    }
}

/// Read-modify-write operations on one block volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RmwBatch {
    /// The volume.
    pub volume: String,
    /// The operations, applied each atomically; their new values come back
    /// in this order.
    pub ops: Vec<RmwOp>,
}

/// Add `delta` (wrapping) to the little-endian u64 at `offset_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RmwOp {
    /// Byte offset in the volume; the 8 bytes must lie in one page.
    pub offset_bytes: u64,
    /// What to add.
    pub delta: u64,
}

/// What a scan runs over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// One object.
    Object {
        /// Its bucket.
        bucket: String,
        /// Its key.
        key: String,
    },
    /// Every object of a bucket whose key starts with `prefix`.
    Prefix {
        /// The bucket.
        bucket: String,
        /// The prefix ("" for the whole bucket).
        prefix: String,
    },
    /// Bytes of a block volume.
    Volume {
        /// The volume.
        name: String,
        /// The first byte.
        offset_bytes: u64,
        /// How many bytes (`None`: to the volume's end).
        len_bytes: Option<u64>,
    },
    /// Pages of the cluster's linear page space (raw device pages, striped
    /// over the nodes).
    Linear {
        /// The first linear page.
        first_page: u64,
        /// How many pages.
        pages: u64,
    },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Object { bucket, key } => write!(f, "{bucket}/{key}"),
            Target::Prefix { bucket, prefix } => write!(f, "{bucket}/{prefix}*"),
            Target::Volume {
                name,
                offset_bytes,
                len_bytes: Some(len),
            } => write!(f, "volume:{name}@{offset_bytes}+{len}"),
            Target::Volume {
                name, offset_bytes, ..
            } => write!(f, "volume:{name}@{offset_bytes}"),
            Target::Linear { first_page, pages } => write!(f, "linear:{first_page}+{pages}"),
        }
    }
}

/// A command's bounds; exceeding one fails the command, not the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock time from submission.
    pub time_ms: u64,
    /// Memory its partial results may hold at once, at any node.
    pub memory_bytes: u64,
    /// Size of its encoded result, when the client reads it whole
    /// ([`ComputeCall::Result`](crate::ComputeCall::Result)); output read
    /// as it streams ([`ComputeCall::Output`](crate::ComputeCall::Output))
    /// is bounded by the memory limit instead.
    pub result_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            time_ms: 10 * 60 * 1000,
            memory_bytes: 256 << 20,
            result_bytes: 64 << 20,
        }
    }
}

impl Limits {
    /// The largest limits a node accepts.
    pub const MAX: Limits = Limits {
        time_ms: 24 * 60 * 60 * 1000,
        memory_bytes: 4 << 30,
        result_bytes: 1 << 30,
    };
}

/// Where a command is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandState {
    /// Waiting for a slot (the node runs a bounded number at once).
    Queued,
    /// Running.
    Running,
    /// Finished; its result can be read.
    Done,
    /// Failed; the reason says why (a limit, a missing object, a dead node).
    Failed {
        /// Why.
        reason: String,
    },
    /// Cancelled by a client.
    Cancelled,
}

impl CommandState {
    /// Whether the command has stopped (done, failed or cancelled).
    pub fn is_final(&self) -> bool {
        !matches!(self, CommandState::Queued | CommandState::Running)
    }
}

/// A command's status block (Minerva §III.B).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandStatus {
    /// The command.
    pub id: CommandId,
    /// Its kernel's name.
    pub kernel: String,
    /// Where it is.
    pub state: CommandState,
    /// Bytes of its targets scanned so far.
    pub bytes_done: u64,
    /// Bytes of its targets in all (0 until the targets are resolved).
    pub bytes_total: u64,
    /// Time since submission, or its run time once final.
    pub elapsed_ms: u64,
    /// Bytes of its output the entry node holds now (unread pieces, or
    /// the whole encoded result once done and kept).
    pub result_bytes: u64,
    /// The most bytes its partial results and unread output held at once
    /// at the entry node: at most the memory limit.
    pub peak_memory_bytes: u64,
}

/// A command's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    /// What the kernel answered.
    pub outcome: Outcome,
    /// Bytes the kernels read at the nodes.
    pub bytes_scanned: u64,
    /// Bytes of partial results the nodes sent to the node where the
    /// command entered.
    pub bytes_from_nodes: u64,
}

/// The kernel's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Of a scan: one output per target object or range, in target order
    /// (a prefix expands to its objects in key order).
    Scan(Vec<TargetOutput>),
    /// Of a read-modify-write batch: each operation's new value, in order.
    Rmw {
        /// The new values.
        values: Vec<u64>,
    },
    /// Of a query: its answer and what it moved.
    Query(QueryOutcome),
}

/// A query's answer and the bytes it moved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryOutcome {
    /// The answer as an Arrow IPC stream.
    pub arrow_ipc: Vec<u8>,
    /// Rows in the answer.
    pub rows: u64,
    /// Objects the FROM named.
    pub objects: u64,
    /// Row groups in those objects.
    pub row_groups: u64,
    /// Row groups read (the others ruled out by footer statistics).
    pub row_groups_read: u64,
    /// Bytes read from the nodes' devices (footers and the chunks holding
    /// the columns read).
    pub bytes_from_devices: u64,
    /// Bytes that crossed the fabric between nodes: chunks fetched by the
    /// node evaluating a row group from the nodes holding them, the runs
    /// sent to the nodes, and their partial results.
    pub bytes_between_nodes: u64,
}

/// One target's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetOutput {
    /// The target (`bucket/key`, `volume:NAME@OFFSET+LEN`, `linear:FIRST+PAGES`).
    pub target: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// The kernel's answer for it.
    pub output: Output,
}
