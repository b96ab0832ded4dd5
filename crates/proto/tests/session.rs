//! Session and serve_connection over real loopback TCP.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quarry_proto::PageAddr;
use quarry_proto::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Decoder;

fn addr_of(n: u32) -> GlobalPageAddr {
    GlobalPageAddr {
        node: 0,
        page: PageAddr {
            bus: 0,
            chip: 0,
            block: n,
            page: n % 7,
        },
    }
}

/// A server that answers ReadPage with the block number in the data after a
/// random delay, so answers come back out of order.
async fn echo_server(limits: SessionLimits) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, handle, limits));
        }
    });
    addr
}

async fn handle(request: Request) -> Response {
    match request {
        Request::Ping => Response::Pong,
        Request::ReadPage(addr) => {
            let delay_us = u64::from(addr.page.block.wrapping_mul(2654435761) % 20_000);
            tokio::time::sleep(Duration::from_micros(delay_us)).await;
            Response::Page {
                data: Bytes::from(addr.page.block.to_be_bytes().to_vec()),
                oob: Bytes::new(),
                erased: false,
                corrected_bytes: addr.page.page,
            }
        }
        Request::NodeInfo(_) => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Response::Done
        }
        _ => Response::Done,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_each_get_their_own_answer() {
    let limits = SessionLimits::default();
    let addr = echo_server(limits).await;
    let session = Session::connect(&addr, limits).await.unwrap();
    assert_eq!(session.peer_addr(), addr);
    let mut completions = Vec::new();
    for n in 0..600u32 {
        completions.push((
            n,
            session.submit(Request::ReadPage(addr_of(n))).await.unwrap(),
        ));
    }
    assert!(
        session.in_flight() > 256,
        "in flight: {}",
        session.in_flight()
    );
    for (n, completion) in completions {
        match completion.await.unwrap() {
            Response::Page {
                data,
                corrected_bytes,
                ..
            } => {
                assert_eq!(&data[..], &n.to_be_bytes());
                assert_eq!(corrected_bytes, n % 7);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(session.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_waits_for_a_free_tag() {
    let limits = SessionLimits {
        max_in_flight: 4,
        ..SessionLimits::default()
    };
    let addr = echo_server(SessionLimits::default()).await;
    let session = Session::connect(&addr, limits).await.unwrap();
    let tasks: Vec<_> = (0..64u32)
        .map(|n| {
            let session = session.clone();
            tokio::spawn(async move { (n, session.call(Request::ReadPage(addr_of(n))).await) })
        })
        .collect();
    for task in tasks {
        let (n, answer) = task.await.unwrap();
        match answer.unwrap() {
            Response::Page { data, .. } => assert_eq!(&data[..], &n.to_be_bytes()),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn request_timeout_frees_the_tag_and_late_answers_are_dropped() {
    let limits = SessionLimits {
        max_in_flight: 1,
        request_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let addr = echo_server(SessionLimits::default()).await;
    let session = Session::connect(&addr, limits).await.unwrap();
    let started = Instant::now();
    let err = session.call(Request::NodeInfo(1)).await.unwrap_err();
    assert!(matches!(err, ProtoError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("timed out after 200 ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The only tag is free again and the next request gets its own answer.
    assert_eq!(session.call(Request::Ping).await.unwrap(), Response::Pong);
}

#[tokio::test]
async fn late_answer_for_a_reused_slot_is_not_delivered() {
    // A hand-written server that answers the first request only after the
    // second one has been sent on the same (only) slot.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = BytesMut::new();
        let mut tags = Vec::new();
        while tags.len() < 2 {
            stream.read_buf(&mut buf).await.unwrap();
            while let Some(frame) = FrameCodec.decode(&mut buf).unwrap() {
                tags.push(frame.header.tag);
            }
        }
        assert_ne!(tags[0], tags[1], "a reused slot gets a new generation");
        let mut out = BytesMut::new();
        encode_response(
            tags[0],
            &Response::Error {
                status: Status::Internal,
                message: "stale".into(),
            },
            &mut out,
        )
        .unwrap();
        encode_response(tags[1], &Response::Pong, &mut out).unwrap();
        stream.write_all(&out).await.unwrap();
        let _ = stream.read_buf(&mut buf).await;
    });
    let limits = SessionLimits {
        max_in_flight: 1,
        request_timeout: Duration::from_millis(100),
        ..Default::default()
    };
    let session = Session::connect(&addr, limits).await.unwrap();
    assert!(matches!(
        session.call(Request::Ping).await,
        Err(ProtoError::Timeout { .. })
    ));
    let limits_ok = session.submit(Request::Ping).await.unwrap();
    assert_eq!(limits_ok.await.unwrap(), Response::Pong);
}

#[tokio::test]
async fn connection_loss_fails_every_waiter_naming_the_peer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let received = Arc::new(AtomicUsize::new(0));
    let seen = received.clone();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = BytesMut::new();
        while seen.load(Ordering::SeqCst) < 50 {
            stream.read_buf(&mut buf).await.unwrap();
            while FrameCodec.decode(&mut buf).unwrap().is_some() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        }
        drop(stream);
    });
    let session = Session::connect(&addr, SessionLimits::default())
        .await
        .unwrap();
    let mut completions = Vec::new();
    for _ in 0..50 {
        completions.push(session.submit(Request::Ping).await.unwrap());
    }
    let started = Instant::now();
    for completion in completions {
        let err = completion.await.unwrap_err();
        assert!(matches!(err, ProtoError::ConnectionLost { .. }), "{err}");
        assert!(err.to_string().contains(&addr), "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(session.is_closed());
    let err = session.call(Request::Ping).await.unwrap_err();
    assert!(err.to_string().contains(&addr), "{err}");
}

#[tokio::test]
async fn refused_connection_names_the_address() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let err = Session::connect(&addr, SessionLimits::default())
        .await
        .err()
        .unwrap();
    assert_eq!(err.to_string(), format!("connection to {addr} refused"));
}

/// Raw client helpers for protocol-violation tests.
async fn raw_server() -> (String, tokio::task::JoinHandle<Result<(), ProtoError>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        serve_connection(stream, handle, SessionLimits::default()).await
    });
    (addr, task)
}

async fn read_answers(stream: &mut TcpStream) -> Vec<Frame> {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read_buf(&mut buf))
            .await
            .unwrap()
            .unwrap();
        while let Some(frame) = FrameCodec.decode(&mut buf).unwrap() {
            frames.push(frame);
        }
        if n == 0 {
            return frames;
        }
    }
}

#[tokio::test]
async fn malformed_body_gets_bad_request_and_the_connection_continues() {
    let (addr, server) = raw_server().await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let mut out = BytesMut::new();
    FrameHeader {
        body_len_bytes: 3,
        ..FrameHeader::new(opcode::READ_PAGE, 0, 0, 77)
    }
    .put(&mut out);
    out.extend_from_slice(&[1, 2, 3]);
    encode_request(78, 0, &Request::Ping, &mut out).unwrap();
    stream.write_all(&out).await.unwrap();
    stream.shutdown().await.unwrap();
    let frames = read_answers(&mut stream).await;
    assert_eq!(frames.len(), 2);
    let bad = frames.iter().find(|f| f.header.tag == 77).unwrap();
    match decode_response(bad).unwrap() {
        Response::Error {
            status: Status::BadRequest,
            message,
        } => assert!(message.contains("ReadPage"), "{message}"),
        other => panic!("{other:?}"),
    }
    let good = frames.iter().find(|f| f.header.tag == 78).unwrap();
    assert_eq!(decode_response(good).unwrap(), Response::Pong);
    assert!(server.await.unwrap().is_ok());
}

#[tokio::test]
async fn unsupported_version_is_answered_then_closed() {
    let (addr, server) = raw_server().await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let mut out = BytesMut::new();
    FrameHeader {
        version: 9,
        ..FrameHeader::new(opcode::PING, 0, 0, 5)
    }
    .put(&mut out);
    stream.write_all(&out).await.unwrap();
    let frames = read_answers(&mut stream).await;
    assert_eq!(frames.len(), 1);
    match decode_response(&frames[0]).unwrap() {
        Response::Error {
            status: Status::UnsupportedVersion,
            message,
        } => {
            assert!(message.contains("version 9"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        server.await.unwrap(),
        Err(ProtoError::UnsupportedVersion { found: 9, .. })
    ));
}

#[tokio::test]
async fn bad_magic_and_oversized_frames_close_the_connection() {
    for garbage in [b"GET / HTTP/1.1\r\n\r\n".to_vec(), {
        let mut out = BytesMut::new();
        FrameHeader {
            body_len_bytes: 10 << 20,
            ..FrameHeader::new(opcode::PING, 0, 0, 5)
        }
        .put(&mut out);
        out.to_vec()
    }] {
        let (addr, server) = raw_server().await;
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(&garbage).await.unwrap();
        assert!(read_answers(&mut stream).await.is_empty());
        assert!(server.await.unwrap().is_err());
    }
}

#[tokio::test]
async fn truncated_frame_closes_the_connection() {
    let (addr, server) = raw_server().await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let mut out = BytesMut::new();
    encode_request(1, 0, &Request::ReadPage(addr_of(1)), &mut out).unwrap();
    stream.write_all(&out[..out.len() - 3]).await.unwrap();
    stream.shutdown().await.unwrap();
    assert!(read_answers(&mut stream).await.is_empty());
    assert!(matches!(
        server.await.unwrap(),
        Err(ProtoError::Truncated { .. })
    ));
}

#[tokio::test]
async fn panicking_handler_answers_internal_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let handler = |request: Request| async move {
            if request == Request::Cluster {
                panic!("boom");
            }
            Response::Pong
        };
        serve_connection(stream, handler, SessionLimits::default()).await
    });
    let session = Session::connect(&addr, SessionLimits::default())
        .await
        .unwrap();
    match session.call(Request::Cluster).await.unwrap() {
        Response::Error {
            status: Status::Internal,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(session.call(Request::Ping).await.unwrap(), Response::Pong);
}
