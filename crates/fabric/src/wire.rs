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

/// Bounded fuzzing of every decoder of link bytes (issue 20): the frame
/// codec, Credit, Hello and Advert payloads and announced limits. Each must
/// return a value or an error naming what was wrong, never panic, and never
/// reserve more than one frame's limit for a length a header claims.
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::LinkAdvert;
    use proptest::prelude::*;

    /// The largest buffer a decoder may hold for input of `input_bytes`: the
    /// input plus one frame of the largest kind, with room for `BytesMut`
    /// rounding its allocation up.
    fn capacity_bound(input_bytes: usize) -> usize {
        2 * (input_bytes + LINK_HEADER_BYTES + MAX_DATA_FRAGMENT_BYTES)
    }

    /// Decodes every frame of `bytes` as a link's reader would, then the end
    /// of the stream; returns the frames or the first error.
    fn decode_stream(bytes: &[u8]) -> Result<Vec<LinkFrame>, FabricError> {
        let mut buf = BytesMut::from(bytes);
        let mut frames = Vec::new();
        // Each frame takes at least a header, so this many turns suffice.
        for _ in 0..=bytes.len() / LINK_HEADER_BYTES {
            let next = LinkCodec.decode(&mut buf);
            assert!(
                buf.capacity() <= capacity_bound(bytes.len()),
                "{} bytes of input made a buffer of {}",
                bytes.len(),
                buf.capacity()
            );
            match next? {
                Some(frame) => frames.push(frame),
                None => break,
            }
        }
        match LinkCodec.decode_eof(&mut buf)? {
            Some(frame) => frames.push(frame),
            None if buf.is_empty() => {}
            None => panic!("{} bytes left undecoded at the end", buf.len()),
        }
        Ok(frames)
    }

    fn kind_strategy() -> impl Strategy<Value = Kind> {
        (1u8..=8).prop_map(|byte| Kind::from_u8(byte).expect("1..=8 are kinds"))
    }

    fn limits_strategy() -> impl Strategy<Value = ReceiveLimits> {
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(fragment, control, data)| {
            ReceiveLimits {
                data_fragment_bytes: fragment,
                control_window_fragments: control,
                data_window_fragments: data,
            }
        })
    }

    fn hello_strategy() -> impl Strategy<Value = Hello> {
        (
            "[a-z]{0,16}",
            any::<NodeId>(),
            "[0-9.:]{0,24}",
            any::<u64>(),
            proptest::option::of(any::<NodeId>()),
            limits_strategy(),
        )
            .prop_map(|(cluster, id, addr, instance, expect, receive)| Hello {
                cluster,
                id,
                addr,
                instance,
                expect,
                receive,
            })
    }

    fn advert_strategy() -> impl Strategy<Value = LinkAdvert> {
        (
            any::<NodeId>(),
            "[0-9.:]{0,24}",
            any::<u64>(),
            proptest::collection::btree_set(any::<NodeId>(), 0..16),
        )
            .prop_map(|(origin, addr, sequence, neighbors)| LinkAdvert {
                origin,
                addr,
                sequence,
                neighbors,
            })
    }

    /// One well-formed frame of any kind, encoded.
    fn frame_strategy() -> impl Strategy<Value = Vec<u8>> {
        (
            kind_strategy(),
            any::<bool>(),
            any::<(u8, u8, u32, u16, u16, u32)>(),
            proptest::collection::vec(any::<u8>(), 0..96),
            hello_strategy(),
            advert_strategy(),
        )
            .prop_map(|(kind, data, fields, payload, hello, advert)| {
                let (flags, hops, stream, dest, origin, flow) = fields;
                let mut buf = BytesMut::new();
                match kind {
                    Kind::Hello => encode_json(kind, &hello, &mut buf).expect("a small Hello"),
                    Kind::Advert => encode_json(kind, &advert, &mut buf).expect("a small Advert"),
                    Kind::Credit => encode_credit(stream, flow, &mut buf),
                    _ => {
                        let carries = matches!(kind, Kind::Request | Kind::Response);
                        let payload = if carries { &payload[..] } else { &[][..] };
                        LinkHeader {
                            kind,
                            channel: if carries && data {
                                Channel::Data
                            } else {
                                Channel::Control
                            },
                            flags,
                            hops,
                            stream,
                            dest,
                            origin,
                            flow,
                            len_bytes: payload.len() as u32,
                        }
                        .put(&mut buf);
                        buf.extend_from_slice(payload);
                    }
                }
                buf.to_vec()
            })
    }

    /// What a frame's payload decodes to, as the link's reader decodes it.
    fn decode_payload(frame: &LinkFrame) -> Result<(), FabricError> {
        match frame.header.kind {
            Kind::Hello => {
                let hello: Hello = decode_json(Kind::Hello, &frame.payload)?;
                let _ = hello.receive.check();
            }
            Kind::Advert => {
                decode_json::<LinkAdvert>(Kind::Advert, &frame.payload)?;
            }
            Kind::Credit => {
                decode_credit(&frame.payload)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A JSON value of any shape, for fields given the wrong type.
    fn json_strategy() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z_]{1,24}", inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// `value` encoded as JSON with field `field` (by index) replaced by
    /// `replacement`, or removed when `replacement` is None.
    fn with_field<T: serde::Serialize>(
        value: &T,
        field: usize,
        replacement: Option<serde_json::Value>,
    ) -> Vec<u8> {
        let mut json = serde_json::to_value(value).expect("encodes");
        let object = json.as_object_mut().expect("an object");
        let name = object
            .keys()
            .nth(field % object.len())
            .expect("in range")
            .clone();
        match replacement {
            Some(replacement) => object.insert(name, replacement),
            None => object.remove(&name),
        };
        serde_json::to_vec(&json).expect("encodes")
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_decode_to_frames_or_an_error(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            if let Ok(frames) = decode_stream(&bytes) {
                for frame in &frames {
                    let _ = decode_payload(frame);
                }
            }
        }

        /// Past a right magic and version, random bytes reach the kind,
        /// channel and length checks; the error names the first bad field.
        #[test]
        fn random_headers_after_the_version_are_refused_by_field(
            rest in proptest::collection::vec(any::<u8>(), 21..200),
        ) {
            let mut bytes = vec![0x51, 0x4C, LINK_VERSION];
            bytes.extend_from_slice(&rest);
            let result = decode_stream(&bytes);
            let kind = Kind::from_u8(rest[0]);
            let channel_ok = rest[1] <= 1;
            match (&result, kind) {
                (Err(e), None) => prop_assert!(e.to_string().contains("unknown kind"), "{e}"),
                (Err(e), Some(_)) if !channel_ok => {
                    prop_assert!(e.to_string().contains("unknown channel"), "{e}")
                }
                (Err(_), Some(_)) => {}
                (Ok(frames), kind) => {
                    prop_assert!(kind.is_some() && channel_ok, "{frames:?} from bad fields");
                    for frame in frames {
                        let _ = decode_payload(frame);
                    }
                }
            }
        }

        #[test]
        fn every_truncation_of_a_valid_frame_waits_then_fails_at_close(
            frame in frame_strategy(),
        ) {
            let whole = decode_stream(&frame).expect("a valid frame decodes");
            prop_assert_eq!(whole.len(), 1);
            prop_assert!(decode_payload(&whole[0]).is_ok());
            for cut in 0..frame.len() {
                let mut buf = BytesMut::from(&frame[..cut]);
                prop_assert!(LinkCodec.decode(&mut buf).expect("a prefix of a frame").is_none());
                let at_close = decode_stream(&frame[..cut]);
                if cut == 0 {
                    prop_assert!(at_close.expect("nothing sent").is_empty());
                } else {
                    let error = at_close.expect_err("a cut frame at close").to_string();
                    prop_assert!(error.contains("bytes remaining"), "{error}");
                }
            }
        }

        #[test]
        fn a_valid_frame_with_one_byte_changed_decodes_or_names_the_field(
            frame in frame_strategy(),
            position in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let position = position.index(frame.len());
            let mut mutated = frame.clone();
            mutated[position] = byte;
            let result = decode_stream(&mutated);
            let expected = match position {
                0 | 1 if frame[position] != byte => Some("magic"),
                2 if byte != LINK_VERSION => Some("version"),
                3 if Kind::from_u8(byte).is_none() => Some("unknown kind"),
                4 if byte > 1 => Some("unknown channel"),
                _ => None,
            };
            match (result, expected) {
                (Err(e), Some(expected)) => {
                    prop_assert!(e.to_string().contains(expected), "{e} lacks {expected}")
                }
                (Ok(frames), Some(expected)) => {
                    prop_assert!(false, "{frames:?} decoded despite a bad {expected}")
                }
                (Ok(frames), None) => {
                    for frame in &frames {
                        let _ = decode_payload(frame);
                    }
                }
                (Err(_), None) => {}
            }
        }

        /// A header may claim up to 4 GiB: beyond the kind's limit it is
        /// refused from the header alone, and within it the codec reserves
        /// at most that limit, never the claim.
        #[test]
        fn a_claimed_length_is_refused_or_bounded_before_it_is_read(
            kind in kind_strategy(),
            data in any::<bool>(),
            len_bytes in prop_oneof![any::<u32>(), 0u32..70_000, Just(u32::MAX)],
        ) {
            let mut header = LinkHeader::control(kind, 0);
            header.channel = if data { Channel::Data } else { Channel::Control };
            header.len_bytes = len_bytes;
            let limit = match (kind, header.channel) {
                (Kind::Request | Kind::Response, Channel::Control) => FRAGMENT_BYTES,
                (Kind::Request | Kind::Response, Channel::Data) => MAX_DATA_FRAGMENT_BYTES,
                (Kind::Hello | Kind::Advert, _) => MAX_CONTROL_PAYLOAD_BYTES,
                (Kind::Credit, _) => 8,
                _ => 0,
            };
            let mut buf = BytesMut::new();
            header.put(&mut buf);
            buf.extend_from_slice(b"abc");
            let result = LinkCodec.decode(&mut buf);
            prop_assert!(buf.capacity() <= capacity_bound(LINK_HEADER_BYTES + 3));
            if len_bytes as usize > limit {
                let error = result.expect_err("beyond the limit").to_string();
                prop_assert!(error.contains(&format!("exceeds limit {limit}")), "{error}");
            } else if len_bytes <= 3 {
                prop_assert_eq!(result.expect("within the limit").expect("whole").payload.len(), len_bytes as usize);
            } else {
                prop_assert!(result.expect("within the limit").is_none());
            }
        }

        #[test]
        fn credit_payloads_decode_only_at_eight_bytes(
            payload in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            match decode_credit(&payload) {
                Ok((control, data)) => {
                    prop_assert_eq!(payload.len(), 8);
                    prop_assert_eq!(&control.to_be_bytes()[..], &payload[..4]);
                    prop_assert_eq!(&data.to_be_bytes()[..], &payload[4..]);
                }
                Err(e) => {
                    prop_assert_ne!(payload.len(), 8);
                    prop_assert!(e.to_string().contains("expected 8"), "{e}");
                }
            }
        }

        #[test]
        fn json_payloads_of_random_bytes_are_refused_as_malformed(
            payload in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            if let Err(e) = decode_json::<Hello>(Kind::Hello, &payload) {
                prop_assert!(e.to_string().contains("malformed Hello"), "{e}");
            }
            if let Err(e) = decode_json::<LinkAdvert>(Kind::Advert, &payload) {
                prop_assert!(e.to_string().contains("malformed Advert"), "{e}");
            }
        }

        #[test]
        fn every_truncation_of_a_hello_and_an_advert_is_refused(
            hello in hello_strategy(),
            advert in advert_strategy(),
        ) {
            let hello_json = serde_json::to_vec(&hello).expect("encodes");
            let advert_json = serde_json::to_vec(&advert).expect("encodes");
            prop_assert_eq!(decode_json::<Hello>(Kind::Hello, &hello_json).expect("whole"), hello);
            prop_assert_eq!(decode_json::<LinkAdvert>(Kind::Advert, &advert_json).expect("whole"), advert);
            for cut in 0..hello_json.len() {
                prop_assert!(decode_json::<Hello>(Kind::Hello, &hello_json[..cut]).is_err());
            }
            for cut in 0..advert_json.len() {
                prop_assert!(decode_json::<LinkAdvert>(Kind::Advert, &advert_json[..cut]).is_err());
            }
        }

        /// One field of a Hello or an Advert given any value, or removed:
        /// the decoder takes it or refuses it, and a Hello it takes still
        /// has its announced limits checked.
        #[test]
        fn a_hello_or_advert_with_one_field_changed_decodes_or_is_refused(
            hello in hello_strategy(),
            advert in advert_strategy(),
            field in 0usize..8,
            replacement in proptest::option::of(json_strategy()),
        ) {
            let json = with_field(&hello, field, replacement.clone());
            if let Ok(decoded) = decode_json::<Hello>(Kind::Hello, &json) {
                let _ = decoded.receive.check();
            }
            let json = with_field(&advert, field, replacement);
            if let Ok(decoded) = decode_json::<LinkAdvert>(Kind::Advert, &json) {
                prop_assert!(decoded.neighbors.len() <= MAX_CONTROL_PAYLOAD_BYTES);
            }
        }

        #[test]
        fn announced_limits_are_taken_only_within_range(limits in limits_strategy()) {
            let fragment_ok = (FRAGMENT_BYTES..=MAX_DATA_FRAGMENT_BYTES)
                .contains(&(limits.data_fragment_bytes as usize));
            let windows_ok = [limits.control_window_fragments, limits.data_window_fragments]
                .iter()
                .all(|w| (2..=4096).contains(w));
            match limits.check() {
                Ok(()) => prop_assert!(fragment_ok && windows_ok),
                Err(reason) => {
                    prop_assert!(!(fragment_ok && windows_ok), "{reason}");
                    prop_assert!(reason.contains("fragments"), "{reason}");
                }
            }
        }
    }
}
