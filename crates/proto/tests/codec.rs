//! Encoders and decoders: round trips, limits, and arbitrary input.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use quarry_proto::*;
use quarry_proto::{BackendKind, BlockAddr, DeviceInfo, Geometry, PageAddr};
use tokio_util::codec::Decoder;

fn page(node: NodeId) -> GlobalPageAddr {
    GlobalPageAddr {
        node,
        page: PageAddr {
            bus: 1,
            chip: 2,
            block: 3,
            page: 4,
        },
    }
}

fn requests() -> Vec<Request> {
    vec![
        Request::Ping,
        Request::ReadPage(page(7)),
        Request::ProgramPage {
            addr: page(65535),
            data: Bytes::from(vec![0xA5; 8192]),
            oob: Bytes::from(vec![1, 2, 3]),
        },
        Request::ProgramPage {
            addr: page(0),
            data: Bytes::from(vec![7; 65536]),
            oob: Bytes::from(vec![9; 1024]),
        },
        Request::EraseBlock(GlobalBlockAddr {
            node: 3,
            block: BlockAddr {
                bus: 0,
                chip: u32::MAX,
                block: 9,
            },
        }),
        Request::NodeInfo(12),
        Request::Cluster,
        Request::Routes(7),
    ]
}

fn responses() -> Vec<Response> {
    vec![
        Response::Pong,
        Response::Done,
        Response::Page {
            data: Bytes::from(vec![3; 8192]),
            oob: Bytes::from(vec![4; 64]),
            erased: false,
            corrected_bytes: 5,
        },
        Response::Page {
            data: Bytes::from(vec![0xFF; 512]),
            oob: Bytes::new(),
            erased: true,
            corrected_bytes: 0,
        },
        Response::NodeInfo(Box::new(NodeInfo {
            id: 2,
            cluster: "quarry".into(),
            addr: "127.0.0.1:7402".into(),
            uptime_secs: 99,
            device: DeviceInfo {
                backend: BackendKind::Mem,
                preset: None,
                geometry: Geometry::default(),
                direct_io: false,
                bad_blocks: vec![BlockAddr {
                    bus: 1,
                    chip: 1,
                    block: 1,
                }],
                erase_count_min: 0,
                erase_count_max: 3,
                erase_count_mean: 1.5,
                programmed_pages: 10,
                io_engine: "memory".into(),
            },
        })),
        Response::Cluster(vec![
            NodeEntry {
                id: 0,
                addr: "127.0.0.1:7400".into(),
            },
            NodeEntry {
                id: 1,
                addr: "127.0.0.1:7401".into(),
            },
        ]),
        Response::Routes(Box::new(RoutesInfo {
            node: 1,
            links: vec![LinkEntry {
                peer: 2,
                addr: "127.0.0.1:7402".into(),
                in_flight: 3,
                inbound: 2,
                local: 1,
            }],
            routes: vec![RouteEntry {
                dest: 3,
                next_hop: 2,
                hops: 2,
            }],
        })),
        Response::Error {
            status: Status::UnknownNode,
            message: "node 9 is not a member".into(),
        },
    ]
}

fn one_frame(bytes: &[u8]) -> Result<Option<Frame>, ProtoError> {
    let mut buf = BytesMut::from(bytes);
    FrameCodec.decode_eof(&mut buf)
}

#[test]
fn every_request_round_trips() {
    for (i, request) in requests().into_iter().enumerate() {
        let mut buf = BytesMut::new();
        encode_request(i as Tag * 0x10001, 3, &request, &mut buf).unwrap();
        let frame = FrameCodec.decode(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty());
        assert_eq!(frame.header.tag, i as Tag * 0x10001);
        assert_eq!(frame.header.hops, 3);
        assert_eq!(frame.header.version, PROTOCOL_VERSION);
        assert_eq!(decode_request(&frame).unwrap(), request);
    }
}

#[test]
fn every_response_round_trips() {
    for (i, response) in responses().into_iter().enumerate() {
        let mut buf = BytesMut::new();
        encode_response(i as Tag, &response, &mut buf).unwrap();
        let frame = FrameCodec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.header.tag, i as Tag);
        assert_eq!(decode_response(&frame).unwrap(), response);
    }
}

#[test]
fn frames_split_anywhere_reassemble() {
    let mut wire = BytesMut::new();
    for (i, request) in requests().iter().enumerate() {
        encode_request(i as Tag, 0, request, &mut wire).unwrap();
    }
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for chunk in wire.chunks(777) {
        buf.extend_from_slice(chunk);
        while let Some(frame) = FrameCodec.decode(&mut buf).unwrap() {
            got.push(decode_request(&frame).unwrap());
        }
    }
    assert_eq!(got, requests());
}

#[test]
fn header_layout_is_as_documented() {
    let mut buf = BytesMut::new();
    encode_request(0x01020304, 5, &Request::NodeInfo(0x0A0B), &mut buf).unwrap();
    assert_eq!(
        &buf[..],
        &[b'Q', b'R', 1, 0x05, 0, 0, 5, 0, 1, 2, 3, 4, 0, 0, 0, 2, 0x0A, 0x0B]
    );
}

#[test]
fn bad_magic_is_refused_after_two_bytes() {
    let err = one_frame(b"GE").unwrap_err();
    assert!(matches!(err, ProtoError::BadMagic { .. }), "{err}");
    assert!(err.to_string().contains("0x4745"), "{err}");
}

#[test]
fn oversized_body_is_refused_before_allocation() {
    let mut buf = BytesMut::new();
    FrameHeader {
        body_len_bytes: 10 * 1024 * 1024,
        ..FrameHeader::new(opcode::PING, 0, 0, 1)
    }
    .put(&mut buf);
    let err = one_frame(&buf).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("frame body of 10485760 bytes exceeds limit {MAX_BODY_BYTES}")
    );
}

#[test]
fn truncated_stream_is_an_error() {
    let mut buf = BytesMut::new();
    encode_request(1, 0, &Request::ReadPage(page(1)), &mut buf).unwrap();
    for cut in 1..buf.len() {
        let err = one_frame(&buf[..cut]).unwrap_err();
        assert!(
            matches!(err, ProtoError::Truncated { .. }),
            "cut {cut}: {err}"
        );
    }
    assert!(one_frame(&[]).unwrap().is_none());
}

#[test]
fn malformed_bodies_are_refused() {
    let frame = |op: u8, status: u8, body: &[u8]| Frame {
        header: FrameHeader {
            body_len_bytes: body.len() as u32,
            ..FrameHeader::new(op, status, 0, 1)
        },
        body: Bytes::copy_from_slice(body),
    };
    // Short, long, and lying about its lengths.
    assert!(decode_request(&frame(opcode::READ_PAGE, 0, &[0; 17])).is_err());
    assert!(decode_request(&frame(opcode::READ_PAGE, 0, &[0; 19])).is_err());
    assert!(decode_request(&frame(opcode::PING, 0, &[0])).is_err());
    let mut body = BytesMut::new();
    body.put_slice(&[0; 18]);
    body.put_u32(u32::MAX);
    body.put_u32(0);
    let err = decode_request(&frame(opcode::PROGRAM_PAGE, 0, &body)).unwrap_err();
    assert!(err.to_string().contains("exceeds limit 65536"), "{err}");
    assert!(matches!(
        decode_request(&frame(0x7E, 0, &[])),
        Err(ProtoError::UnknownOpcode { .. })
    ));
    assert!(decode_response(&frame(opcode::ERROR, 0, b"x")).is_err());
    assert!(decode_response(&frame(opcode::ERROR, 200, b"x")).is_err());
    assert!(decode_response(&frame(opcode::ERROR, 1, &[0xFF, 0xFE])).is_err());
    assert!(decode_response(&frame(opcode::PONG, 3, &[])).is_err());
    assert!(decode_response(&frame(opcode::CLUSTER_ANSWER, 0, b"[{\"id\":1}]")).is_err());
    assert!(decode_response(&frame(opcode::NODE_INFO_ANSWER, 0, b"{")).is_err());
}

#[test]
fn encoding_refuses_oversized_messages() {
    let mut buf = BytesMut::new();
    let big = Request::ProgramPage {
        addr: page(0),
        data: Bytes::from(vec![0; 65537]),
        oob: Bytes::new(),
    };
    assert!(encode_request(1, 0, &big, &mut buf).is_err());
    assert!(
        buf.is_empty(),
        "a failed encode leaves the buffer as it was"
    );
    assert!(check_request(&big).is_err());
    let many = Response::Cluster(
        (0..2000)
            .map(|id| NodeEntry {
                id,
                addr: "x".into(),
            })
            .collect(),
    );
    assert!(encode_response(1, &many, &mut buf).is_err());
    // Long error messages are cut, not refused.
    let long = Response::Error {
        status: Status::Internal,
        message: "é".repeat(5000),
    };
    encode_response(1, &long, &mut buf).unwrap();
    let frame = FrameCodec.decode(&mut buf).unwrap().unwrap();
    match decode_response(&frame).unwrap() {
        Response::Error { message, .. } => assert!(message.len() <= MAX_ERROR_MESSAGE_BYTES),
        other => panic!("{other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn frame_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = FrameCodec.decode(&mut buf) {}
        let mut buf = BytesMut::from(&bytes[..]);
        let _ = FrameCodec.decode_eof(&mut buf);
    }

    #[test]
    fn frame_decoder_never_panics_on_valid_magic(tail in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut bytes = vec![b'Q', b'R'];
        bytes.extend_from_slice(&tail);
        let mut buf = BytesMut::from(&bytes[..]);
        let _ = FrameCodec.decode_eof(&mut buf);
    }

    #[test]
    fn body_decoders_never_panic(op in any::<u8>(), status in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let frame = Frame {
            header: FrameHeader { body_len_bytes: body.len() as u32, ..FrameHeader::new(op, status, 0, 0) },
            body: Bytes::from(body),
        };
        let _ = decode_request(&frame);
        let _ = decode_response(&frame);
    }

    #[test]
    fn page_requests_round_trip(node in any::<u16>(), bus in any::<u32>(), len in 0usize..9000, oob_len in 0usize..1025, hops in any::<u8>(), tag in any::<u32>()) {
        let request = Request::ProgramPage {
            addr: GlobalPageAddr { node, page: PageAddr { bus, chip: 1, block: 2, page: 3 } },
            data: Bytes::from(vec![0x5A; len]),
            oob: Bytes::from(vec![0xC3; oob_len]),
        };
        let mut buf = BytesMut::new();
        encode_request(tag, hops, &request, &mut buf).unwrap();
        let frame = FrameCodec.decode(&mut buf).unwrap().unwrap();
        prop_assert_eq!(frame.header.hops, hops);
        prop_assert_eq!(decode_request(&frame).unwrap(), request);
    }
}
