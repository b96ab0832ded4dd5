//! Typed errors of block volumes: each names what was wrong, and the ones a
//! caller acts on travel between nodes by kind (see `wire.rs`), so a full
//! node's refusal is still [`BlockVolumeError::NoSpace`] at the client.

use std::path::PathBuf;

use super::NodeId;

/// Everything a block-volume operation can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockVolumeError {
    /// The name breaks the naming rules.
    #[error("invalid volume name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// The size is zero, not a whole number of pages or too large.
    #[error("invalid volume size: {reason}")]
    InvalidSize {
        /// What was wrong.
        reason: String,
    },
    /// The member list is empty, repeats a node, names a node outside the
    /// cluster or is too long.
    #[error("invalid volume members: {reason}")]
    InvalidMembers {
        /// What was wrong.
        reason: String,
    },
    /// A volume of that name exists.
    #[error("a volume named {name:?} already exists (defined on node {node})")]
    Exists {
        /// The name.
        name: String,
        /// A node that holds its definition.
        node: NodeId,
    },
    /// The volume id is in use on a node by another volume (two creates
    /// raced; the one that lost is undone).
    #[error("volume id {id} is taken on node {node} by volume {by:?}")]
    IdTaken {
        /// The id.
        id: u32,
        /// The node.
        node: NodeId,
        /// The volume that has it.
        by: String,
    },
    /// No node holds a volume of that name.
    #[error("no volume named {name:?}")]
    NotFound {
        /// The name.
        name: String,
    },
    /// No node that answered holds the volume, and some did not answer.
    #[error("no volume named {name:?} on the nodes that answered; some did not: {failures}")]
    LookupIncomplete {
        /// The name.
        name: String,
        /// Each node that did not answer and why.
        failures: String,
    },
    /// Nodes hold different volumes under one name (two creates over
    /// disjoint node sets raced).
    #[error("volume name {name:?} is defined differently on different nodes: {detail}")]
    Ambiguous {
        /// The name.
        name: String,
        /// Which node holds which definition.
        detail: String,
    },
    /// Pages outside the volume.
    #[error("volume {name:?}: pages {first}..{} are outside its {pages} pages", first.saturating_add(*count))]
    OutOfRange {
        /// The volume (and the node, for a node's local pages).
        name: String,
        /// First page asked for.
        first: u64,
        /// Pages asked for.
        count: u64,
        /// Pages the volume (or the node's share of it) has.
        pages: u64,
    },
    /// Bytes outside the volume.
    #[error("volume {name:?}: bytes {offset}..{} are outside its {size_bytes} bytes", offset.saturating_add(*len_bytes))]
    OutOfRangeBytes {
        /// The volume.
        name: String,
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len_bytes: u64,
        /// The volume's size.
        size_bytes: u64,
    },
    /// An add of a batch ([`BlockVolume::add_u64s`](super::BlockVolume::add_u64s), the
    /// `AddU64` call) whose 8 bytes cross a page's end or lie outside the
    /// volume (or the node's share of it). The whole batch is refused:
    /// nothing of it was applied.
    #[error("volume {name:?}: add {index} at offset {offset}: {reason}; nothing of the batch was applied")]
    BadAdd {
        /// The volume (and the node, for a node's local pages).
        name: String,
        /// The add's position in its batch (the caller's slice, or the
        /// call's list on a node).
        index: u64,
        /// Its offset: a byte of the volume at the caller, a byte of the
        /// page on a node.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// Page data is not a whole, non-zero number of pages.
    #[error("page data is {got_bytes} bytes; writes take whole pages of {page_size_bytes} bytes")]
    PageData {
        /// The volume's page size.
        page_size_bytes: u32,
        /// What was given.
        got_bytes: u64,
    },
    /// A member's device has another page size than the volume.
    #[error(
        "node {node} has pages of {node_page_size_bytes} bytes, the volume's pages are \
         {volume_page_size_bytes} bytes; a volume's members must have one page size"
    )]
    PageSizeMismatch {
        /// The member.
        node: NodeId,
        /// Its page size.
        node_page_size_bytes: u32,
        /// The volume's.
        volume_page_size_bytes: u32,
    },
    /// The handle's volume was deleted (and maybe created again under the
    /// same name) since the handle was opened.
    #[error(
        "volume {name:?} on node {node} is not the one this handle opened (it was deleted, and \
         perhaps created again); open it again"
    )]
    Stale {
        /// The name.
        name: String,
        /// The node that noticed.
        node: NodeId,
    },
    /// A member's space manager is full (volumes are thin-provisioned: a
    /// write of a new page past the node's capacity is refused). Nothing
    /// stored is touched; trims and overwrites still work.
    #[error("node {node} is out of space: {message}")]
    NoSpace {
        /// The full node.
        node: NodeId,
        /// The space manager's explanation (live pages, capacity).
        message: String,
    },
    /// A bound would be exceeded (volumes per node, pages per call, ids).
    #[error("node {node}: {what} would exceed the limit of {limit}")]
    TooMany {
        /// The node that refused (the caller's own checks use the member
        /// that would hold the data).
        node: NodeId,
        /// What was counted.
        what: String,
        /// The limit.
        limit: u64,
    },
    /// One request asked for more bytes than a single read or write moves.
    #[error("{bytes} bytes in one request, more than the limit of {limit_bytes}; split it")]
    RangeTooLarge {
        /// Bytes asked for.
        bytes: u64,
        /// The limit.
        limit_bytes: u64,
    },
    /// The space manager failed (device error, corruption, closed).
    #[error("node {node}: {message}")]
    Storage {
        /// The node.
        node: NodeId,
        /// The space manager's error.
        message: String,
    },
    /// The registry file is unreadable, damaged or could not be written.
    #[error("volume registry {path}: {reason}")]
    Registry {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A call, answer or registry file does not decode.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What was being decoded.
        what: String,
        /// What was wrong.
        reason: String,
    },
    /// The node would not take the call (it runs its device raw, or does
    /// not serve volumes).
    #[error("node {node} refused the volume call: {message}")]
    Refused {
        /// The node.
        node: NodeId,
        /// Its explanation.
        message: String,
    },
    /// The call did not reach the node or its answer did not come back.
    #[error("volume call to node {node} failed: {reason}")]
    Transport {
        /// The node.
        node: NodeId,
        /// What went wrong.
        reason: String,
    },
    /// A create or delete reached some members and not others.
    #[error("{op} of volume {name:?} is incomplete: {reason}")]
    Incomplete {
        /// `create` or `delete`.
        op: &'static str,
        /// The volume.
        name: String,
        /// What failed where, and what to do.
        reason: String,
    },
    /// Any other failure on a node, as its message.
    #[error("node {node}: {message}")]
    Remote {
        /// The node.
        node: NodeId,
        /// Its error message.
        message: String,
    },
    /// A setting of the client view is out of bounds.
    #[error("invalid setting: {reason}")]
    Config {
        /// Which setting and why.
        reason: String,
    },
}
