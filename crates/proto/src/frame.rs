//! Frame header, limits and the tokio-util codec that cuts a byte stream into
//! frames. Message bodies are in `wire.rs`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use quarry_geometry::{MAX_OOB_SIZE_BYTES, MAX_PAGE_SIZE_BYTES};
use tokio_util::codec::Decoder;

use crate::{ProtoError, Tag, PROTOCOL_VERSION};

/// First two bytes of every frame: ASCII `QR`.
pub const MAGIC: u16 = 0x5152;
/// Bytes in the fixed frame header. Its layout is the same in every protocol
/// version so that a peer can always read the version and skip the body.
pub const HEADER_LEN_BYTES: usize = 16;
/// Largest frame body: a service call carrying one maximal object-store chunk
/// (4 MiB) with its fields and 64 KiB of slack. It also bounds what one
/// request in flight may hold in memory. (A page message needs far less: one
/// maximal page plus maximal OOB plus 26 bytes of fields.)
pub const MAX_BODY_BYTES: u32 = (4 << 20) + (64 << 10);

// A maximal page message fits, with room for its fields.
const _: () = assert!(MAX_PAGE_SIZE_BYTES + MAX_OOB_SIZE_BYTES + 256 <= MAX_BODY_BYTES);
/// Largest error message carried in an `Error` answer; longer ones are cut.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4096;
/// Largest node address string (`host:port`) in any message.
pub const MAX_ADDR_BYTES: usize = 256;
/// Most members a `Cluster` answer may list.
pub const MAX_CLUSTER_MEMBERS: usize = 1024;

/// The fixed 16-byte header of every frame (see docs/protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Protocol version of the sender.
    pub version: u8,
    /// What the body holds.
    pub opcode: u8,
    /// 0 except in `Error` answers, where it is a [`crate::Status`].
    pub status: u8,
    /// Reserved for later versions; sent as 0, ignored on receipt.
    pub flags: u8,
    /// How many fabric links the request has crossed.
    pub hops: u8,
    /// The requester's tag; an answer carries its request's tag.
    pub tag: Tag,
    /// Body length; at most [`MAX_BODY_BYTES`].
    pub body_len_bytes: u32,
}

impl FrameHeader {
    /// A version-1 header with no flags.
    pub fn new(opcode: u8, status: u8, hops: u8, tag: Tag) -> FrameHeader {
        FrameHeader {
            version: PROTOCOL_VERSION,
            opcode,
            status,
            flags: 0,
            hops,
            tag,
            body_len_bytes: 0,
        }
    }

    /// Appends the header to `dst`.
    pub fn put(&self, dst: &mut BytesMut) {
        dst.put_u16(MAGIC);
        dst.put_u8(self.version);
        dst.put_u8(self.opcode);
        dst.put_u8(self.status);
        dst.put_u8(self.flags);
        dst.put_u8(self.hops);
        dst.put_u8(0);
        dst.put_u32(self.tag);
        dst.put_u32(self.body_len_bytes);
    }

    /// Parses a header from exactly [`HEADER_LEN_BYTES`] bytes, checking the
    /// magic and the body length limit (never the version: the caller answers
    /// an unknown version itself).
    pub fn parse(mut bytes: &[u8]) -> Result<FrameHeader, ProtoError> {
        if bytes.len() < HEADER_LEN_BYTES {
            return Err(ProtoError::Truncated {
                got_bytes: bytes.len(),
                expected_bytes: HEADER_LEN_BYTES,
            });
        }
        let magic = bytes.get_u16();
        if magic != MAGIC {
            return Err(ProtoError::BadMagic {
                found: magic,
                expected: MAGIC,
            });
        }
        let version = bytes.get_u8();
        let opcode = bytes.get_u8();
        let status = bytes.get_u8();
        let flags = bytes.get_u8();
        let hops = bytes.get_u8();
        let _reserved = bytes.get_u8();
        let tag = bytes.get_u32();
        let body_len_bytes = bytes.get_u32();
        if body_len_bytes > MAX_BODY_BYTES {
            return Err(ProtoError::BodyTooLarge {
                body_len_bytes: u64::from(body_len_bytes),
                limit_bytes: MAX_BODY_BYTES,
            });
        }
        Ok(FrameHeader {
            version,
            opcode,
            status,
            flags,
            hops,
            tag,
            body_len_bytes,
        })
    }
}

/// One frame: header plus body. The body is a slice of the read buffer, so page
/// data reaches the handler without a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The header.
    pub header: FrameHeader,
    /// Exactly `header.body_len_bytes` bytes.
    pub body: Bytes,
}

/// Cuts a byte stream into [`Frame`]s. Errors (bad magic, oversized body,
/// truncated stream) are fatal for the connection: after one, the stream's
/// framing can no longer be trusted.
#[derive(Debug, Default, Clone, Copy)]
pub struct FrameCodec;

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = ProtoError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
        // Check the magic as soon as two bytes are there, so a wrong peer (an
        // HTTP client, say) is refused without waiting for a whole header.
        if src.len() >= 2 {
            let magic = u16::from_be_bytes([src[0], src[1]]);
            if magic != MAGIC {
                return Err(ProtoError::BadMagic {
                    found: magic,
                    expected: MAGIC,
                });
            }
        }
        if src.len() < HEADER_LEN_BYTES {
            return Ok(None);
        }
        // The length is checked against the limit inside parse() before any
        // buffer is sized by it.
        let header = FrameHeader::parse(&src[..HEADER_LEN_BYTES])?;
        let total_bytes = HEADER_LEN_BYTES + header.body_len_bytes as usize;
        if src.len() < total_bytes {
            src.reserve(total_bytes - src.len());
            return Ok(None);
        }
        src.advance(HEADER_LEN_BYTES);
        let body = src.split_to(header.body_len_bytes as usize).freeze();
        Ok(Some(Frame { header, body }))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => {
                let expected_bytes = if src.len() >= HEADER_LEN_BYTES {
                    HEADER_LEN_BYTES
                        + u32::from_be_bytes([src[12], src[13], src[14], src[15]]) as usize
                } else {
                    HEADER_LEN_BYTES
                };
                Err(ProtoError::Truncated {
                    got_bytes: src.len(),
                    expected_bytes,
                })
            }
        }
    }
}
