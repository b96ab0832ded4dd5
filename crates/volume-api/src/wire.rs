//! The volume call encoding: what travels in the body of a protocol
//! `Call` to `Service::Volume` and in its `Reply`.
//!
//! A call is `op:u8` and the op's fields; an answer is `0` and the op's
//! result, or `1`, an error kind and its fields, so a full node's refusal
//! is still [`BlockVolumeError::NoSpace`] at the caller. Integers are
//! little-endian; a volume name is `len:u8` + ASCII; other strings are
//! `len:u16` + UTF-8. Every length and count is checked against the bytes
//! present before anything is allocated, and a message must end where its
//! last field ends. The table is in `docs/volume.md`.

use bytes::Bytes;

use super::def::{validate_name, NodeSpace, VolumeDef, MAX_VOLUME_MEMBERS, MAX_VOLUME_NAME_BYTES};
use super::{BlockVolumeError, NodeId};
use quarry_proto::{ByteReader, ByteWriter, CodecError};

/// Most page bytes one read or write call carries (its body stays within
/// the protocol's 4 MiB + 64 KiB).
pub const MAX_CALL_DATA_BYTES: usize = 4 << 20;
/// Most pages one read or write call carries, whatever the page size: bounds
/// the per-page flags of a read answer and the pages a node has in flight
/// for one call.
pub const MAX_PAGES_PER_CALL: u64 = 4096;

/// Most adds one `AddU64` call carries. Its body is then at most
/// [`ADD_CALL_MAX_BYTES`] (well within the protocol's 4 MiB + 64 KiB) and
/// its answer 128 KiB; a node touches at most this many pages for it, 64 at
/// a time, so a call's run time stays near a full write call's.
pub const MAX_ADDS_PER_CALL: usize = 16_384;
/// Bytes of one add in an `AddU64` call: local page u64, offset in the
/// page u32, delta u64.
pub const ADD_OP_BYTES: usize = 8 + 4 + 8;
/// Bytes of an `AddU64` call before its adds, at most: op, the longest
/// name, instance, count.
const ADD_CALL_HEAD_MAX_BYTES: usize = 1 + 1 + MAX_VOLUME_NAME_BYTES + 8 + 4;
/// The largest `AddU64` call body.
pub const ADD_CALL_MAX_BYTES: usize = ADD_CALL_HEAD_MAX_BYTES + MAX_ADDS_PER_CALL * ADD_OP_BYTES;
const _: () = assert!(ADD_CALL_MAX_BYTES <= (4 << 20) + (64 << 10));

/// Pages one data call carries for pages of `page_size_bytes`.
pub fn max_pages_per_call(page_size_bytes: u32) -> u64 {
    (MAX_CALL_DATA_BYTES as u64 / u64::from(page_size_bytes.max(1))).clamp(1, MAX_PAGES_PER_CALL)
}

/// The fewest bytes an encoded definition takes (a one-letter name, one
/// member): what a count of definitions is checked against.
pub const MIN_DEF_BYTES: usize = 4 + 8 + 2 + 8 + 4 + 8 + 2 + 2;

/// Decodes the status of a volume answer from node `node`: `Ok` for a
/// success answer, the error it carries otherwise (for transports that log
/// or test answers; the views decode answers themselves).
pub fn answer_error(node: NodeId, answer: &Bytes) -> Result<(), BlockVolumeError> {
    Reader::new("volume answer", answer).answer_status(node)
}

/// The volume call opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Define a volume on a member.
    Define = 1,
    /// Delete a volume's definition and pages.
    Delete = 2,
    /// List the volumes a node holds.
    List = 3,
    /// A volume's definition and the node's space.
    Info = 4,
    /// Read pages.
    Read = 5,
    /// Write pages.
    Write = 6,
    /// Drop pages (they read as zeros).
    Trim = 7,
    /// Add to `u64` counters in place.
    AddU64 = 8,
}

impl Op {
    /// The opcode of a byte, if it names one.
    pub fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Define,
            2 => Op::Delete,
            3 => Op::List,
            4 => Op::Info,
            5 => Op::Read,
            6 => Op::Write,
            7 => Op::Trim,
            8 => Op::AddU64,
            _ => return None,
        })
    }
}

/// Status byte of an answer that succeeded.
pub const ANSWER_OK: u8 = 0;
/// Status byte of an error answer (an encoded error follows).
pub const ANSWER_ERROR: u8 = 1;
/// Flag of a page in a read answer: never written (it reads as zeros).
pub const PAGE_UNWRITTEN: u8 = 0;
/// Flag of a page in a read answer: its data follows.
pub const PAGE_DATA: u8 = 1;

/// The writer of volume calls and answers: the protocol's field codec,
/// with the volume fields of [`VolumeFields`].
pub type Writer = ByteWriter;

/// The volume's own fields, written on top of the protocol's field codec.
pub trait VolumeFields {
    /// A volume name: callers validate names first, so it fits a `u8`
    /// length; a longer one is cut (and then refused by the decoder).
    fn name(&mut self, name: &str) -> &mut Self;
    /// A string of at most 64 KiB; longer messages are cut at a character
    /// boundary (they are explanations, not data).
    fn str(&mut self, s: &str) -> &mut Self;
    /// A volume definition.
    fn def(&mut self, d: &VolumeDef) -> &mut Self;
    /// A node's space figures.
    fn node_space(&mut self, s: &NodeSpace) -> &mut Self;
}

impl VolumeFields for ByteWriter {
    fn name(&mut self, name: &str) -> &mut Self {
        let b = &name.as_bytes()[..name.len().min(usize::from(u8::MAX))];
        self.u8(b.len() as u8).raw(b)
    }
    fn str(&mut self, s: &str) -> &mut Self {
        let mut end = s.len().min(usize::from(u16::MAX));
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16).raw(&s.as_bytes()[..end])
    }
    fn def(&mut self, d: &VolumeDef) -> &mut Self {
        self.u32(d.id).u64(d.instance);
        self.name(&d.name)
            .u64(d.size_pages)
            .u32(d.page_size_bytes)
            .u64(d.created_unix_ms)
            .u16(d.members.len().min(usize::from(u16::MAX)) as u16);
        for m in d.members.iter().take(usize::from(u16::MAX)) {
            self.u16(*m);
        }
        self
    }
    fn node_space(&mut self, s: &NodeSpace) -> &mut Self {
        self.u16(s.node)
            .u32(s.page_size_bytes)
            .u64(s.capacity_pages)
            .u64(s.live_pages)
    }
}

impl From<CodecError> for BlockVolumeError {
    fn from(e: CodecError) -> Self {
        BlockVolumeError::Malformed {
            what: e.what.to_string(),
            reason: e.reason,
        }
    }
}

/// A decoder over a volume message: the protocol's field codec (every read
/// checks the bytes left), the message for zero-copy slices, and the
/// volume's own fields.
pub struct Reader<'a> {
    fields: ByteReader<'a>,
    buf: &'a Bytes,
}

impl<'a> std::ops::Deref for Reader<'a> {
    type Target = ByteReader<'a>;
    fn deref(&self) -> &ByteReader<'a> {
        &self.fields
    }
}

impl std::ops::DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.fields
    }
}

impl<'a> Reader<'a> {
    /// A reader over `buf`; `what` names the message in errors.
    pub fn new(what: &'static str, buf: &'a Bytes) -> Self {
        Reader {
            fields: ByteReader::new(what, buf),
            buf,
        }
    }
    /// The error for a malformed message, naming it and `reason`.
    pub fn malformed(&self, reason: String) -> BlockVolumeError {
        self.fields.malformed(reason).into()
    }
    /// `n` bytes as a zero-copy slice of the message.
    pub fn bytes(&mut self, n: usize) -> Result<Bytes, BlockVolumeError> {
        Ok(self.fields.slice_of(self.buf, n)?)
    }
    /// A volume name, checked against the naming rules.
    pub fn name(&mut self) -> Result<String, BlockVolumeError> {
        let len = usize::from(self.u8()?);
        let b = self.take(len)?;
        let name = std::str::from_utf8(b)
            .map_err(|_| self.malformed("a volume name is not UTF-8".into()))?
            .to_string();
        validate_name(&name)?;
        Ok(name)
    }
    /// A UTF-8 string of at most `u16::MAX` bytes.
    pub fn str(&mut self) -> Result<String, BlockVolumeError> {
        let len = usize::from(self.u16()?);
        let b = self.take(len)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.malformed("a string is not UTF-8".into()))
    }
    /// A definition, checked against every rule.
    pub fn def(&mut self) -> Result<VolumeDef, BlockVolumeError> {
        let id = self.u32()?;
        let instance = self.u64()?;
        let name = self.name()?;
        let size_pages = self.u64()?;
        let page_size_bytes = self.u32()?;
        let created_unix_ms = self.u64()?;
        let n = usize::from(self.u16()?);
        if n > MAX_VOLUME_MEMBERS || n * 2 > self.left() {
            return Err(self.malformed(format!(
                "{n} members (at most {MAX_VOLUME_MEMBERS}) in {} bytes left",
                self.left()
            )));
        }
        let members = (0..n).map(|_| self.u16()).collect::<Result<Vec<_>, _>>()?;
        let def = VolumeDef {
            name,
            id,
            instance,
            size_pages,
            page_size_bytes,
            members,
            created_unix_ms,
        };
        def.validate()?;
        Ok(def)
    }
    /// A node's space report.
    pub fn node_space(&mut self) -> Result<NodeSpace, BlockVolumeError> {
        Ok(NodeSpace {
            node: self.u16()?,
            page_size_bytes: self.u32()?,
            capacity_pages: self.u64()?,
            live_pages: self.u64()?,
        })
    }
    /// Reads an answer's status byte; an error answer becomes its error.
    pub fn answer_status(&mut self, node: NodeId) -> Result<(), BlockVolumeError> {
        match self.u8()? {
            ANSWER_OK => Ok(()),
            ANSWER_ERROR => Err(decode_error(self, node)?),
            other => Err(self.malformed(format!("answer status byte {other}"))),
        }
    }
}

/// Error kinds carried in error answers; the rest travel as `Remote` with
/// their message.
mod kind {
    pub const INVALID_NAME: u8 = 1;
    pub const INVALID_SIZE: u8 = 2;
    pub const INVALID_MEMBERS: u8 = 3;
    pub const EXISTS: u8 = 4;
    pub const ID_TAKEN: u8 = 5;
    pub const NOT_FOUND: u8 = 6;
    pub const OUT_OF_RANGE: u8 = 7;
    pub const PAGE_DATA: u8 = 8;
    pub const PAGE_SIZE_MISMATCH: u8 = 9;
    pub const STALE: u8 = 10;
    pub const NO_SPACE: u8 = 11;
    pub const TOO_MANY: u8 = 12;
    pub const STORAGE: u8 = 13;
    pub const MALFORMED: u8 = 14;
    pub const BAD_ADD: u8 = 15;
    pub const OTHER: u8 = 255;
}

/// Encodes an error answer.
pub fn encode_error(e: &BlockVolumeError) -> Bytes {
    use BlockVolumeError as E;
    let mut w = Writer::starting(ANSWER_ERROR);
    match e {
        E::InvalidName { name, reason } => {
            w.u8(kind::INVALID_NAME).str(name).str(reason);
        }
        E::InvalidSize { reason } => {
            w.u8(kind::INVALID_SIZE).str(reason);
        }
        E::InvalidMembers { reason } => {
            w.u8(kind::INVALID_MEMBERS).str(reason);
        }
        E::Exists { name, node } => {
            w.u8(kind::EXISTS).str(name).u16(*node);
        }
        E::IdTaken { id, node, by } => {
            w.u8(kind::ID_TAKEN).u32(*id).u16(*node).str(by);
        }
        E::NotFound { name } => {
            w.u8(kind::NOT_FOUND).str(name);
        }
        E::OutOfRange {
            name,
            first,
            count,
            pages,
        } => {
            w.u8(kind::OUT_OF_RANGE)
                .str(name)
                .u64(*first)
                .u64(*count)
                .u64(*pages);
        }
        E::PageData {
            page_size_bytes,
            got_bytes,
        } => {
            w.u8(kind::PAGE_DATA).u32(*page_size_bytes).u64(*got_bytes);
        }
        E::PageSizeMismatch {
            node,
            node_page_size_bytes,
            volume_page_size_bytes,
        } => {
            w.u8(kind::PAGE_SIZE_MISMATCH)
                .u16(*node)
                .u32(*node_page_size_bytes)
                .u32(*volume_page_size_bytes);
        }
        E::Stale { name, node } => {
            w.u8(kind::STALE).str(name).u16(*node);
        }
        E::NoSpace { node, message } => {
            w.u8(kind::NO_SPACE).u16(*node).str(message);
        }
        E::TooMany { node, what, limit } => {
            w.u8(kind::TOO_MANY).u16(*node).str(what).u64(*limit);
        }
        E::Storage { node, message } => {
            w.u8(kind::STORAGE).u16(*node).str(message);
        }
        E::Malformed { what, reason } => {
            w.u8(kind::MALFORMED).str(what).str(reason);
        }
        E::BadAdd {
            name,
            index,
            offset,
            reason,
        } => {
            w.u8(kind::BAD_ADD)
                .str(name)
                .u64(*index)
                .u64(*offset)
                .str(reason);
        }
        other => {
            w.u8(kind::OTHER).str(&other.to_string());
        }
    }
    Bytes::from(w.0)
}

fn decode_error(r: &mut Reader<'_>, node: NodeId) -> Result<BlockVolumeError, BlockVolumeError> {
    use BlockVolumeError as E;
    let e = match r.u8()? {
        kind::INVALID_NAME => E::InvalidName {
            name: r.str()?,
            reason: r.str()?,
        },
        kind::INVALID_SIZE => E::InvalidSize { reason: r.str()? },
        kind::INVALID_MEMBERS => E::InvalidMembers { reason: r.str()? },
        kind::EXISTS => E::Exists {
            name: r.str()?,
            node: r.u16()?,
        },
        kind::ID_TAKEN => E::IdTaken {
            id: r.u32()?,
            node: r.u16()?,
            by: r.str()?,
        },
        kind::NOT_FOUND => E::NotFound { name: r.str()? },
        kind::OUT_OF_RANGE => E::OutOfRange {
            name: r.str()?,
            first: r.u64()?,
            count: r.u64()?,
            pages: r.u64()?,
        },
        kind::PAGE_DATA => E::PageData {
            page_size_bytes: r.u32()?,
            got_bytes: r.u64()?,
        },
        kind::PAGE_SIZE_MISMATCH => E::PageSizeMismatch {
            node: r.u16()?,
            node_page_size_bytes: r.u32()?,
            volume_page_size_bytes: r.u32()?,
        },
        kind::STALE => E::Stale {
            name: r.str()?,
            node: r.u16()?,
        },
        kind::NO_SPACE => E::NoSpace {
            node: r.u16()?,
            message: r.str()?,
        },
        kind::TOO_MANY => E::TooMany {
            node: r.u16()?,
            what: r.str()?,
            limit: r.u64()?,
        },
        kind::STORAGE => E::Storage {
            node: r.u16()?,
            message: r.str()?,
        },
        // The node could not decode what this side sent.
        kind::MALFORMED => E::Malformed {
            what: format!("{} (node {node} says)", r.str()?),
            reason: r.str()?,
        },
        kind::BAD_ADD => E::BadAdd {
            name: r.str()?,
            index: r.u64()?,
            offset: r.u64()?,
            reason: r.str()?,
        },
        kind::OTHER => E::Remote {
            node,
            message: r.str()?,
        },
        other => return Err(r.malformed(format!("error kind {other}"))),
    };
    r.end()?;
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: BlockVolumeError) -> BlockVolumeError {
        let answer = encode_error(&e);
        let mut r = Reader::new("volume answer", &answer);
        r.answer_status(9).unwrap_err()
    }

    #[test]
    fn errors_keep_their_kind_across_the_wire() {
        let e = round_trip(BlockVolumeError::NoSpace {
            node: 3,
            message: "full".into(),
        });
        assert!(
            matches!(&e, BlockVolumeError::NoSpace { node: 3, message } if message == "full"),
            "{e}"
        );
        let e = round_trip(BlockVolumeError::OutOfRange {
            name: "v".into(),
            first: 10,
            count: 2,
            pages: 11,
        });
        assert_eq!(
            e.to_string(),
            "volume \"v\": pages 10..12 are outside its 11 pages"
        );
        let e = round_trip(BlockVolumeError::BadAdd {
            name: "v".into(),
            index: 4,
            offset: 510,
            reason: "crosses".into(),
        });
        assert!(
            matches!(
                &e,
                BlockVolumeError::BadAdd {
                    index: 4,
                    offset: 510,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "volume \"v\": add 4 at offset 510: crosses; nothing of the batch was applied"
        );
        let e = round_trip(BlockVolumeError::Registry {
            path: "x".into(),
            reason: "bad".into(),
        });
        assert!(
            matches!(&e, BlockVolumeError::Remote { node: 9, message } if message.contains("bad")),
            "{e}"
        );
    }

    #[test]
    fn definitions_round_trip_and_are_checked() {
        let def = VolumeDef {
            name: "disk".into(),
            id: 7,
            instance: 99,
            size_pages: 1000,
            page_size_bytes: 4096,
            members: vec![2, 0, 1],
            created_unix_ms: 1234,
        };
        let mut w = Writer::default();
        w.def(&def);
        let bytes = Bytes::from(w.0);
        let mut r = Reader::new("test", &bytes);
        assert_eq!(r.def().unwrap(), def);
        let smallest = VolumeDef {
            name: "d".into(),
            members: vec![0],
            ..def.clone()
        };
        let mut w = Writer::default();
        w.def(&smallest);
        assert_eq!(w.0.len(), MIN_DEF_BYTES);
        r.end().unwrap();
        // Every truncation is an error, never a panic.
        for cut in 0..bytes.len() {
            let short = bytes.slice(..cut);
            assert!(Reader::new("test", &short).def().is_err());
        }
        // A repeated member is refused by the decoder.
        let mut bad = def.clone();
        bad.members = vec![1, 1];
        let mut w = Writer::default();
        w.def(&bad);
        let bytes = Bytes::from(w.0);
        assert!(Reader::new("test", &bytes)
            .def()
            .unwrap_err()
            .to_string()
            .contains("listed twice"));
    }

    #[test]
    fn calls_carry_at_most_4_mib_of_pages() {
        assert_eq!(max_pages_per_call(8192), 512);
        assert_eq!(max_pages_per_call(512), MAX_PAGES_PER_CALL);
        assert_eq!(max_pages_per_call(65536), 64);
    }
}
