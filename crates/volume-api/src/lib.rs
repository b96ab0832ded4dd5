//! `quarry-volume-api` — block volumes as a caller sees them: named logical
//! page spaces striped over nodes.
//!
//! A volume of `size_pages` pages over the member nodes `members` keeps
//! logical page `L` on node `members[L % n]`, at index `L / n` of that
//! node's space for the volume ([`stripe`], [`runs`]). This crate owns the
//! definitions ([`VolumeDef`]), the volume calls' encoding and error
//! answers, and the caller's view: [`BlockVolumes`] and [`BlockVolume`] over
//! any [`VolumeTransport`] create, list and delete volumes by name, read and
//! write pages and byte ranges with a bounded number of calls in flight,
//! and add to `u64` counters in place. The node's side (its registry, and
//! serving a call against its space manager) is in `quarry-volume`; a
//! client needs only this crate. The call format and limits are in
//! `docs/volume.md` ("Block volumes").
//!
//! ```
//! use quarry_volume_api::{runs, stripe, validate_name, Run};
//!
//! // Page 7 of a volume over 3 nodes: the second member, its third page.
//! assert_eq!(stripe(7, 3), (1, 2));
//! // Pages 0..6 over 2 members move in one run per member.
//! assert_eq!(
//!     runs(0, 6, 2, 64),
//!     vec![
//!         Run { member: 0, first_local: 0, count: 3 },
//!         Run { member: 1, first_local: 0, count: 3 },
//!     ]
//! );
//! validate_name("disk-1")?;
//! assert!(validate_name("no spaces").is_err());
//! # Ok::<(), quarry_volume_api::BlockVolumeError>(())
//! ```
#![deny(missing_docs)]

mod def;
mod error;
mod view;
mod wire;

use quarry_proto::NodeId;

pub use def::{
    member_pages, runs, stripe, validate_members, validate_name, NodeSpace, Run, VolumeDef,
    MAX_VOLUMES_PER_NODE, MAX_VOLUME_ID, MAX_VOLUME_MEMBERS, MAX_VOLUME_NAME_BYTES,
    MAX_VOLUME_PAGES, MAX_VOLUME_PAGE_SIZE_BYTES, VOLUME_SPACE_BASE,
};
pub use error::BlockVolumeError;
pub use view::{
    BlockVolume, BlockVolumes, MemberStatus, VolumeListing, VolumeStatus, VolumeSummary,
    VolumeTransport, DEFAULT_MAX_IN_FLIGHT_CALLS, MAX_IN_FLIGHT_CALLS, MAX_RANGE_BYTES,
};
pub use wire::{
    answer_error, max_pages_per_call, ADD_CALL_MAX_BYTES, MAX_ADDS_PER_CALL, MAX_CALL_DATA_BYTES,
    MAX_PAGES_PER_CALL,
};
// The codec's pieces a node serves calls with.
pub use wire::{
    encode_error, Op as VolumeOp, Reader as VolumeReader, VolumeFields, Writer as VolumeWriter,
    ADD_OP_BYTES, ANSWER_ERROR, ANSWER_OK, MIN_DEF_BYTES, PAGE_DATA, PAGE_UNWRITTEN,
};
