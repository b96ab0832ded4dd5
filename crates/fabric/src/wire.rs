//! The link protocol between neighbouring nodes: fixed 24-byte headers, then a
//! payload that is either link control (hello, advert, credits) or one
//! fragment of a client-protocol frame being carried hop by hop.
//!
//! A link connection starts with the magic `QL` where a client connection
//! starts with `QR`, so one listening port serves both.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use quarry_proto::NodeId;
use tokio_util::codec::Decoder;

use crate::FabricError;

/// First two bytes of every link frame: ASCII `QL`.
pub const LINK_MAGIC: u16 = 0x514C;
/// Version of the link protocol spoken by this build.
pub const LINK_VERSION: u8 = 2;
/// Bytes in a link frame header.
pub const LINK_HEADER_BYTES: usize = 24;
/// Largest payload of one control-channel fragment, and so the largest
/// message the control channel carries: commands and small answers.
pub const FRAGMENT_BYTES: usize = 2048;
/// Largest payload of one data-channel fragment any link accepts. Each link
/// cuts data into fragments of the size its receiver announced in its
/// [`Hello`] (`FabricConfig::data_fragment_bytes`), at most this.
pub const MAX_DATA_FRAGMENT_BYTES: usize = 1 << 20;
/// Largest payload of a control message (hello, advert); adverts list at
/// most [`crate::MAX_MEMBERS`] neighbours.
pub const MAX_CONTROL_PAYLOAD_BYTES: usize = 64 * 1024;

/// What a link frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// First frame each way: who is at this end (JSON [`Hello`]).
    Hello = 1,
    /// A link-state advertisement being flooded (JSON `LinkAdvert`).
    Advert = 2,
    /// Returns send credits: payload is two u32, control then data.
    Credit = 3,
    /// Sent when a link has been quiet for a while; proves the peer alive.
    Keepalive = 4,
    /// A fragment of a request travelling towards `dest`.
    Request = 5,
    /// A fragment of an answer travelling back along the request's path.
    Response = 6,
    /// The request stream `stream` (sent by the receiver's peer) is
    /// abandoned; whatever was received of it must be dropped.
    AbortRequest = 7,
    /// The answer stream `stream` (to a request the receiver sent) is broken
    /// off; the request failed.
    AbortResponse = 8,
}

impl Kind {
    fn from_u8(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Hello,
            2 => Kind::Advert,
            3 => Kind::Credit,
            4 => Kind::Keepalive,
            5 => Kind::Request,
            6 => Kind::Response,
            7 => Kind::AbortRequest,
            8 => Kind::AbortResponse,
            _ => return None,
        })
    }
}

/// A link's virtual channels. Commands and acknowledgements travel apart from
/// bulk data, each with its own credits and receive buffer, so a small request
/// never queues behind megabytes of someone else's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Channel {
    /// Requests and answers that fit in one fragment.
    Control = 0,
    /// Requests and answers that carry pages.
    Data = 1,
}

impl Channel {
    /// Both channels, by index.
    pub const ALL: [Channel; 2] = [Channel::Control, Channel::Data];

    /// The channel a message of `len_bytes` travels on.
    pub fn for_message(len_bytes: usize) -> Channel {
        if len_bytes <= FRAGMENT_BYTES {
            Channel::Control
        } else {
            Channel::Data
        }
    }

    /// Index into per-channel arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Fragment flags.
pub mod flags {
    /// The first fragment of a stream.
    pub const FIRST: u8 = 1;
    /// The last fragment of a stream.
    pub const LAST: u8 = 2;
}

/// The fixed header of every link frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkHeader {
    /// What follows.
    pub kind: Kind,
    /// The virtual channel (Request and Response only; 0 otherwise).
    pub channel: Channel,
    /// [`flags`] bits.
    pub flags: u8,
    /// Links the request has crossed, this one included.
    pub hops: u8,
    /// The stream: a tag of the node that sent the request on this link.
    pub stream: u32,
    /// Request: the node it is for.
    pub dest: NodeId,
    /// Request and Response: the node the request entered at.
    pub origin: NodeId,
    /// Request and Response: the requester's flow, for fair sharing.
    pub flow: u32,
    /// Payload bytes after the header.
    pub len_bytes: u32,
}

impl LinkHeader {
    /// A header of `kind` with every other field zero.
    pub fn control(kind: Kind, len_bytes: usize) -> LinkHeader {
        LinkHeader {
            kind,
            channel: Channel::Control,
            flags: 0,
            hops: 0,
            stream: 0,
            dest: 0,
            origin: 0,
            flow: 0,
            len_bytes: len_bytes as u32,
        }
    }

    /// True for the first fragment of a stream.
    pub fn is_first(&self) -> bool {
        self.flags & flags::FIRST != 0
    }

    /// True for the last fragment of a stream.
    pub fn is_last(&self) -> bool {
        self.flags & flags::LAST != 0
    }

    /// Appends the header to `dst`.
    pub fn put(&self, dst: &mut BytesMut) {
        dst.put_u16(LINK_MAGIC);
        dst.put_u8(LINK_VERSION);
        dst.put_u8(self.kind as u8);
        dst.put_u8(self.channel as u8);
        dst.put_u8(self.flags);
        dst.put_u8(self.hops);
        dst.put_u8(0);
        dst.put_u32(self.stream);
        dst.put_u16(self.dest);
        dst.put_u16(self.origin);
        dst.put_u32(self.flow);
        dst.put_u32(self.len_bytes);
    }

    fn parse(mut bytes: &[u8]) -> Result<LinkHeader, FabricError> {
        let bad = |reason: String| FabricError::BadLinkFrame { reason };
        let magic = bytes.get_u16();
        if magic != LINK_MAGIC {
            return Err(bad(format!(
                "magic 0x{magic:04x}, expected 0x{LINK_MAGIC:04x}"
            )));
        }
        let version = bytes.get_u8();
        if version != LINK_VERSION {
            return Err(bad(format!(
                "link protocol version {version}, this node speaks {LINK_VERSION}"
            )));
        }
        let kind_byte = bytes.get_u8();
        let kind =
            Kind::from_u8(kind_byte).ok_or_else(|| bad(format!("unknown kind {kind_byte}")))?;
        let channel = match bytes.get_u8() {
            0 => Channel::Control,
            1 => Channel::Data,
            other => return Err(bad(format!("unknown channel {other}"))),
        };
        let flags = bytes.get_u8();
        let hops = bytes.get_u8();
        let _reserved = bytes.get_u8();
        let stream = bytes.get_u32();
        let dest = bytes.get_u16();
        let origin = bytes.get_u16();
        let flow = bytes.get_u32();
        let len_bytes = bytes.get_u32();
        let limit = match (kind, channel) {
            (Kind::Request | Kind::Response, Channel::Control) => FRAGMENT_BYTES,
            (Kind::Request | Kind::Response, Channel::Data) => MAX_DATA_FRAGMENT_BYTES,
            (Kind::Hello | Kind::Advert, _) => MAX_CONTROL_PAYLOAD_BYTES,
            (Kind::Credit, _) => 8,
            (Kind::Keepalive | Kind::AbortRequest | Kind::AbortResponse, _) => 0,
        };
        if len_bytes as usize > limit {
            return Err(bad(format!(
                "{kind:?} payload of {len_bytes} bytes exceeds limit {limit}"
            )));
        }
        Ok(LinkHeader {
            kind,
            channel,
            flags,
            hops,
            stream,
            dest,
            origin,
            flow,
            len_bytes,
        })
    }
}

/// One link frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkFrame {
    /// Its header.
    pub header: LinkHeader,
    /// Exactly `header.len_bytes` bytes.
    pub payload: Bytes,
}

/// Cuts a link's byte stream into frames; any error ends the link.
#[derive(Debug, Default, Clone, Copy)]
pub struct LinkCodec;

impl Decoder for LinkCodec {
    type Item = LinkFrame;
    type Error = FabricError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<LinkFrame>, FabricError> {
        if src.len() < LINK_HEADER_BYTES {
            return Ok(None);
        }
        let header = LinkHeader::parse(&src[..LINK_HEADER_BYTES])?;
        let total_bytes = LINK_HEADER_BYTES + header.len_bytes as usize;
        if src.len() < total_bytes {
            src.reserve(total_bytes - src.len());
            return Ok(None);
        }
        src.advance(LINK_HEADER_BYTES);
        let payload = src.split_to(header.len_bytes as usize).freeze();
        Ok(Some(LinkFrame { header, payload }))
    }
}

impl From<std::io::Error> for FabricError {
    fn from(source: std::io::Error) -> FabricError {
        FabricError::LinkIo { source }
    }
}

/// What each end of a new link says first.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    /// The name of the sender's cluster: nodes of two clusters never link,
    /// even when one dials an address the other now listens on.
    pub cluster: String,
    /// The sender's node id.
    pub id: NodeId,
    /// The address it accepts connections on.
    pub addr: String,
    /// Distinguishes runs of the same node id (its start time in
    /// microseconds), so a restarted node is told apart from its old self.
    pub instance: u64,
    /// The node id the sender expects at the other end, when it dialled a
    /// configured neighbour.
    pub expect: Option<NodeId>,
    /// What the sender accepts: the size of the data fragments it takes and
    /// its receive window per channel, in fragments. The other end cuts
    /// data to that size and starts with that many credits. A Hello
    /// without it is from an implementation that predates it, which takes
    /// 2 KiB fragments and 128 of each.
    #[serde(default)]
    pub receive: ReceiveLimits,
}

/// What one end of a link can receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReceiveLimits {
    /// Largest data-channel fragment, bytes.
    pub data_fragment_bytes: u32,
    /// Control-channel fragments buffered at once.
    pub control_window_fragments: u32,
    /// Data-channel fragments buffered at once.
    pub data_window_fragments: u32,
}

impl Default for ReceiveLimits {
    /// What a peer that announces nothing takes: the limits of the link
    /// protocol before fragments had sizes of their own.
    fn default() -> Self {
        ReceiveLimits {
            data_fragment_bytes: FRAGMENT_BYTES as u32,
            control_window_fragments: 128,
            data_window_fragments: 128,
        }
    }
}

impl ReceiveLimits {
    /// Checks limits a peer announced; the error says which is out of range.
    pub fn check(&self) -> Result<(), String> {
        let fragment = self.data_fragment_bytes as usize;
        if !(FRAGMENT_BYTES..=MAX_DATA_FRAGMENT_BYTES).contains(&fragment) {
            return Err(format!(
                "data fragments of {fragment} bytes, not in {FRAGMENT_BYTES}..={MAX_DATA_FRAGMENT_BYTES}"
            ));
        }
        for (name, window) in [
            ("control", self.control_window_fragments),
            ("data", self.data_window_fragments),
        ] {
            if !(2..=4096).contains(&window) {
                return Err(format!(
                    "a {name} window of {window} fragments, not in 2..=4096"
                ));
            }
        }
        Ok(())
    }

    /// The window of `channel`, in fragments.
    pub fn window(&self, channel: Channel) -> u32 {
        match channel {
            Channel::Control => self.control_window_fragments,
            Channel::Data => self.data_window_fragments,
        }
    }

    /// The largest fragment of `channel`, bytes.
    pub fn fragment_bytes(&self, channel: Channel) -> usize {
        match channel {
            Channel::Control => FRAGMENT_BYTES,
            Channel::Data => self.data_fragment_bytes as usize,
        }
    }
}

/// Encodes a control frame whose payload is `value` as JSON.
pub fn encode_json<T: serde::Serialize>(
    kind: Kind,
    value: &T,
    dst: &mut BytesMut,
) -> Result<(), FabricError> {
    let json = serde_json::to_vec(value).map_err(|e| FabricError::BadLinkFrame {
        reason: format!("cannot encode {kind:?}: {e}"),
    })?;
    if json.len() > MAX_CONTROL_PAYLOAD_BYTES {
        return Err(FabricError::BadLinkFrame {
            reason: format!(
                "{kind:?} of {} bytes exceeds limit {MAX_CONTROL_PAYLOAD_BYTES}",
                json.len()
            ),
        });
    }
    LinkHeader::control(kind, json.len()).put(dst);
    dst.extend_from_slice(&json);
    Ok(())
}

/// Decodes a JSON control payload.
pub fn decode_json<T: serde::de::DeserializeOwned>(
    kind: Kind,
    payload: &[u8],
) -> Result<T, FabricError> {
    serde_json::from_slice(payload).map_err(|e| FabricError::BadLinkFrame {
        reason: format!("malformed {kind:?}: {e}"),
    })
}

/// Encodes a Credit frame returning `control` and `data` credits.
pub fn encode_credit(control: u32, data: u32, dst: &mut BytesMut) {
    LinkHeader::control(Kind::Credit, 8).put(dst);
    dst.put_u32(control);
    dst.put_u32(data);
}

/// Decodes a Credit payload into (control, data).
pub fn decode_credit(mut payload: &[u8]) -> Result<(u32, u32), FabricError> {
    if payload.len() != 8 {
        return Err(FabricError::BadLinkFrame {
            reason: format!("Credit payload of {} bytes, expected 8", payload.len()),
        });
    }
    Ok((payload.get_u32(), payload.get_u32()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: Kind, len_bytes: u32) -> LinkHeader {
        LinkHeader {
            kind,
            channel: Channel::Data,
            flags: flags::FIRST | flags::LAST,
            hops: 3,
            stream: 0xDEAD_BEEF,
            dest: 7,
            origin: 2,
            flow: 99,
            len_bytes,
        }
    }

    #[test]
    fn a_fragment_round_trips() {
        let mut buf = BytesMut::new();
        let h = header(Kind::Response, 5);
        h.put(&mut buf);
        buf.extend_from_slice(b"hello");
        buf.extend_from_slice(&[0x51, 0x4C]); // start of the next frame
        let frame = LinkCodec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.header, h);
        assert_eq!(&frame.payload[..], b"hello");
        assert_eq!(LinkCodec.decode(&mut buf).unwrap(), None);
    }

    #[test]
    fn malformed_headers_are_refused_with_the_reason() {
        type Corruption = Box<dyn Fn(&mut BytesMut)>;
        let cases: Vec<(Corruption, &str)> = vec![
            (Box::new(|b| b[0] = b'X'), "magic"),
            (Box::new(|b| b[2] = 9), "version 9"),
            (Box::new(|b| b[3] = 42), "unknown kind 42"),
            (Box::new(|b| b[4] = 5), "unknown channel 5"),
            (
                Box::new(|b| {
                    b[4] = Channel::Control as u8;
                    b[20..24].copy_from_slice(&4096u32.to_be_bytes());
                }),
                "exceeds limit 2048",
            ),
            (
                Box::new(|b| b[20..24].copy_from_slice(&(2u32 << 20).to_be_bytes())),
                "exceeds limit 1048576",
            ),
        ];
        for (corrupt, expected) in cases {
            let mut buf = BytesMut::new();
            header(Kind::Request, 0).put(&mut buf);
            corrupt(&mut buf);
            let error = LinkCodec.decode(&mut buf).unwrap_err().to_string();
            assert!(error.contains(expected), "{error} lacks {expected}");
        }
    }

    #[test]
    fn credits_and_json_round_trip() {
        let mut buf = BytesMut::new();
        encode_credit(3, 4, &mut buf);
        let hello = Hello {
            cluster: "quarry".into(),
            id: 3,
            addr: "10.0.0.3:7400".into(),
            instance: 5,
            expect: Some(2),
            receive: ReceiveLimits {
                data_fragment_bytes: 65536,
                control_window_fragments: 128,
                data_window_fragments: 64,
            },
        };
        encode_json(Kind::Hello, &hello, &mut buf).unwrap();
        let credit = LinkCodec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(decode_credit(&credit.payload).unwrap(), (3, 4));
        let frame = LinkCodec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.header.kind, Kind::Hello);
        assert_eq!(
            decode_json::<Hello>(Kind::Hello, &frame.payload).unwrap(),
            hello
        );
        assert!(decode_json::<Hello>(Kind::Hello, b"{").is_err());
    }
}
