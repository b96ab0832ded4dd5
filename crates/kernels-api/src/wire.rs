//! The compute service's messages: what travels in the body of a protocol
//! `Call` to `Service::Compute` and in its `Reply`, encoded with postcard
//! (serde). Every decode is checked: a malformed body is an error answer
//! naming what was wrong, and the protocol's frame limit bounds every
//! length before decoding starts.

use quarry_proto::NodeId;
use serde::{Deserialize, Serialize};

use crate::job::{CommandId, CommandStatus, Job, Limits, Target};
use crate::output::OutputPiece;

/// Most bytes of a result one [`ComputeCall::Result`] answer carries: the
/// rest of a frame's 4 MiB + 64 KiB is left for the answer's head.
pub const MAX_RESULT_SLICE_BYTES: u32 = 4 << 20;
/// Most bytes of output pieces one [`ComputeCall::Output`] answer carries
/// (one piece at least).
pub const MAX_OUTPUT_SLICE_BYTES: u32 = 2 << 20;
/// Longest one [`ComputeCall::Output`] waits for a piece before it answers
/// none.
pub const MAX_OUTPUT_WAIT_MS: u64 = 10_000;
/// Most segments one local run covers.
pub const MAX_SEGMENTS_PER_RUN: usize = 8192;
/// Most targets one command names (a prefix counts once here, and its
/// objects count against [`MAX_RESOLVED_TARGETS`]).
pub const MAX_TARGETS: usize = 4096;
/// Most objects and ranges a command's targets expand to.
pub const MAX_RESOLVED_TARGETS: usize = 100_000;
/// Most read-modify-write operations in one command.
pub const MAX_RMW_OPS: usize = 1 << 20;
/// Longest wait one [`ComputeCall::Await`] holds a call open; a client
/// waiting longer calls again.
pub const MAX_AWAIT_MS: u64 = 30_000;

/// A call to the compute service. `L` is what [`ComputeCall::RunLocal`]
/// carries: a run of kernel parts that only nodes send one another
/// (`quarry-kernels` names it); a client never sends one and keeps the
/// default, [`PeerOnly`]. The parameter leaves the encoding as it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ComputeCall<L = PeerOnly> {
    /// Start a command at this node (it becomes the command's entry node,
    /// where partial results merge). `members` are the nodes objects are
    /// placed over (the client's configured cluster); empty means the
    /// members this node reaches.
    Submit {
        /// What to run.
        job: Job,
        /// What to run it over (none for [`Job::Rmw`]).
        targets: Vec<Target>,
        /// Its bounds.
        limits: Limits,
        /// The placement members.
        members: Vec<NodeId>,
    },
    /// A command's status.
    Status {
        /// The command.
        id: CommandId,
    },
    /// A command's status once it is final, or after `timeout_ms`
    /// (at most [`MAX_AWAIT_MS`]), whichever comes first.
    Await {
        /// The command.
        id: CommandId,
        /// How long to wait.
        timeout_ms: u64,
    },
    /// Stop a command; its status becomes cancelled (a final command is
    /// left as it is).
    Cancel {
        /// The command.
        id: CommandId,
    },
    /// Bytes `offset ..` (at most `max_bytes`) of a done command's encoded
    /// [`CommandResult`](crate::CommandResult).
    Result {
        /// The command.
        id: CommandId,
        /// Where to start.
        offset: u64,
        /// At most this many (at most [`MAX_RESULT_SLICE_BYTES`]).
        max_bytes: u32,
    },
    /// Every command this node holds, oldest first.
    List,
    /// Run a kernel over data this node holds (sent by an entry node).
    RunLocal(L),
    /// A command's output pieces from number `from_piece` on, as they
    /// come (waiting up to [`MAX_OUTPUT_WAIT_MS`] for one), at most
    /// `max_bytes` of them (one at least). Asking from `from_piece` says
    /// the pieces before it were read: the entry node forgets them, and
    /// the command, which holds a bounded amount of unread output, goes on.
    Output {
        /// The command.
        id: CommandId,
        /// The first piece wanted (0 first).
        from_piece: u64,
        /// At most this many bytes (at most [`MAX_OUTPUT_SLICE_BYTES`]).
        max_bytes: u32,
    },
    /// Evaluate a query over row groups of one object (sent by an entry
    /// node to the node it chose for them).
    RunQuery(QueryRun),
}

/// Most row groups one query run covers.
pub const MAX_QUERY_RUN_ROW_GROUPS: usize = 4096;

/// Most chunks one query run fetches.
pub const MAX_QUERY_RUN_CHUNKS: usize = 1 << 16;

/// A query over row groups of one Parquet object, at the node chosen to
/// evaluate them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryRun {
    /// The SQL (each node parses and binds it itself).
    pub sql: String,
    /// The object, `bucket/key` (named in errors).
    pub object: String,
    /// The file's tail: metadata, its length, `PAR1`.
    pub footer: Vec<u8>,
    /// The file's size.
    pub file_len: u64,
    /// The row groups to evaluate.
    pub row_groups: Vec<u32>,
    /// The chunks holding their column chunks.
    pub chunks: Vec<QueryChunk>,
    /// Memory the run's groups or rows may hold.
    pub memory_bytes: u64,
}

/// A chunk of the object a query run reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryChunk {
    /// Where its first byte is in the file.
    pub file_offset: u64,
    /// Its fingerprint.
    pub fingerprint: [u8; 32],
    /// Its length.
    pub len: u32,
    /// The node that holds it.
    pub holder: NodeId,
}

/// A query run's partial result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryPart {
    /// The partial result (Arrow IPC), for the entry node's merger.
    pub arrow_ipc: Vec<u8>,
    /// Bytes of chunks read from devices.
    pub bytes_from_devices: u64,
    /// Bytes of chunks fetched from other nodes.
    pub bytes_fetched: u64,
}

/// A node-to-node message in a client's view of the compute service: no
/// value of it exists, so a client cannot send one, and an answer that
/// carries one does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerOnly {}

/// A compute service answer. `A` is what [`ComputeAnswer::Local`] carries,
/// as `L` of [`ComputeCall`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ComputeAnswer<A = PeerOnly> {
    /// The submitted command's number.
    Submitted {
        /// The command.
        id: CommandId,
    },
    /// A command's status.
    Status(CommandStatus),
    /// Every command's status.
    Statuses(Vec<CommandStatus>),
    /// A slice of a result.
    ResultSlice {
        /// The encoded result's whole length.
        total_bytes: u64,
        /// The slice.
        bytes: Vec<u8>,
    },
    /// A local run's parts.
    Local(A),
    /// The call failed.
    Failed(Failure),
    /// Output pieces of a command.
    Pieces {
        /// The number of the first piece here.
        first_piece: u64,
        /// The pieces, in order (none when none came in time).
        pieces: Vec<OutputPiece>,
        /// The last piece of the output is here: nothing follows.
        end: bool,
    },
    /// A query run's partial result.
    QueryPart(QueryPart),
}

/// A failed call, as it crosses the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// What went wrong, for people.
    pub message: String,
}

/// The kinds of [`Failure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureKind {
    /// The call is malformed or its arguments wrong.
    BadRequest,
    /// No such command.
    NoSuchCommand,
    /// The command is not done (or failed): no result to read.
    NotDone,
    /// The node holds too many commands.
    Busy,
    /// The answer would not fit one message.
    TooLarge,
    /// Anything else (a storage error, an unreachable node).
    Internal,
}

/// Encodes a message.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // Sized first, so the bytes are written once into a buffer of their
    // size: a Vec that grows copied a large answer's bytes again at each
    // doubling (blocks of lines are megabytes).
    let size = postcard::serialize_with_flavor(message, postcard::ser_flavors::Size::default())
        .unwrap_or(0);
    // Serializing into a Vec fails only for sequences of unknown length,
    // which none of these types has.
    postcard::to_io(message, Vec::with_capacity(size))
        .expect("postcard encodes every compute message")
}

/// A compute message that did not decode: what it was meant to be, its
/// length and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed compute message: {0}")]
pub struct Malformed(pub String);

/// Decodes a message; `what` names it in the error. The message must be
/// all of `bytes`: bytes after it are an error, not ignored.
pub fn decode<'a, T: Deserialize<'a>>(what: &str, bytes: &'a [u8]) -> Result<T, Malformed> {
    let (message, rest) = postcard::take_from_bytes(bytes)
        .map_err(|e| Malformed(format!("{what} of {} bytes: {e}", bytes.len())))?;
    if !rest.is_empty() {
        return Err(Malformed(format!(
            "{what} of {} bytes: {} bytes trail the message",
            bytes.len(),
            rest.len()
        )));
    }
    Ok(message)
}
