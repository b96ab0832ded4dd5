//! The compute service's messages between nodes: an entry node asks a
//! node to run a kernel over segments of the data it holds, and gets the
//! kernel's parts back. These carry kernel parts, which only the kernels
//! know, so they live here rather than in `quarry-kernels-api` with the
//! calls a client makes; [`ComputeCall`] and [`ComputeAnswer`] are that
//! crate's messages with these filled in.

use quarry_device::PageAddr;
use serde::{Deserialize, Serialize};

use crate::scan::Part;
use crate::spec::KernelSpec;

/// A call to the compute service, as a node decodes it.
pub type ComputeCall = quarry_kernels_api::ComputeCall<LocalRun>;

/// A compute service answer, as a node encodes it.
pub type ComputeAnswer = quarry_kernels_api::ComputeAnswer<LocalAnswer>;

/// A kernel over segments of this node's data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LocalRun {
    /// The kernel.
    pub kernel: KernelSpec,
    /// The segments, in target order.
    pub segments: Vec<Segment>,
    /// For a kernel that must see a target in order: the part of the
    /// target's bytes before the first segment (the segments are then one
    /// contiguous range of one target).
    pub carry: Option<Part>,
    /// Time left for this run.
    pub time_left_ms: u64,
    /// Memory its parts may hold.
    pub memory_bytes: u64,
    /// Once its parts hold more than this (after a page), the run answers
    /// what it has and where it stopped, and the entry node sends the
    /// rest as a new run: a run over a range full of matching lines answers
    /// in bounded pieces. 0: the run answers once, at its end.
    pub piece_bytes: u64,
}

/// Bytes of one target held by one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Which of the command's targets (resolved) they belong to.
    pub target: u32,
    /// Offset of the first byte in the target.
    pub offset: u64,
    /// Where the bytes are.
    pub source: Source,
}

/// Where a segment's bytes are on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// Bytes `start..end` of a chunk of the object store.
    Chunk {
        /// The chunk's fingerprint.
        fingerprint: [u8; 32],
        /// Its length, as the manifest says.
        len: u32,
        /// First byte.
        start: u32,
        /// End byte (exclusive).
        end: u32,
    },
    /// Bytes `start..end` of a local page of a block volume's space.
    VolumePage {
        /// The volume's space on the node.
        space: u32,
        /// The local page.
        page: u64,
        /// First byte.
        start: u32,
        /// End byte (exclusive).
        end: u32,
    },
    /// Bytes `start..end` of a raw device page.
    DevicePage {
        /// The page.
        page: PageAddr,
        /// First byte.
        start: u32,
        /// End byte (exclusive).
        end: u32,
    },
}

impl Source {
    /// How many bytes the segment covers.
    pub fn len_bytes(&self) -> u64 {
        let (start, end) = match self {
            Source::Chunk { start, end, .. }
            | Source::VolumePage { start, end, .. }
            | Source::DevicePage { start, end, .. } => (*start, *end),
        };
        u64::from(end.saturating_sub(start))
    }
}

impl Segment {
    /// The segment cut after its first `at` bytes (at most its length):
    /// the two ranges of the same bytes.
    pub fn split_at(&self, at: u64) -> (Segment, Segment) {
        let at32 = at.min(self.source.len_bytes()) as u32;
        let mut first = self.clone();
        let mut rest = self.clone();
        match (&mut first.source, &mut rest.source) {
            (Source::Chunk { end, .. }, Source::Chunk { start, .. })
            | (Source::VolumePage { end, .. }, Source::VolumePage { start, .. })
            | (Source::DevicePage { end, .. }, Source::DevicePage { start, .. }) => {
                *start += at32;
                *end = *start;
            }
            _ => {}
        }
        rest.offset += u64::from(at32);
        (first, rest)
    }
}

/// What a local run answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LocalAnswer {
    /// Parts in segment order, each with its target; adjacent segments of
    /// one target are folded into one part.
    pub parts: Vec<(u32, Part)>,
    /// Bytes read from the device.
    pub bytes_scanned: u64,
    /// Where the run stopped, when its parts grew past its piece bytes
    /// before its end: the parts cover the segments before it and the
    /// first bytes of it.
    pub resume: Option<Resume>,
}

/// Where a run that answered early stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    /// The first segment not folded whole.
    pub segment: u32,
    /// Its bytes that were folded.
    pub bytes_done: u64,
}
