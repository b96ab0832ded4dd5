//! The answering end of a connection.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::task::Poll;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::FramedRead;

use crate::frame::{Frame, FrameCodec};
use crate::out_queue::OutQueue;
use crate::relay::Answer;
use crate::session::{READ_BUFFER_BYTES, WRITE_BATCH_BYTES};
use crate::wire::{decode_request, encode_response, has_payload_piece};
use crate::{ProtoError, Request, Response, SessionLimits, Status, Tag, PROTOCOL_VERSION};

/// A decoded request with the frame fields a node needs besides the message.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// The request.
    pub request: Request,
    /// Fabric links it has crossed so far (0 from a client).
    pub hops: u8,
}

/// Serves one accepted connection: decodes requests, runs `handler` on each
/// concurrently (at most `limits.max_in_flight` at once), and writes each answer
/// under its request's tag as soon as it is ready.
pub async fn serve_connection<S, H, F>(
    stream: S,
    handler: H,
    limits: SessionLimits,
) -> Result<(), ProtoError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    serve_connection_with(
        stream,
        limits,
        std::future::pending(),
        move |incoming: Incoming| handler(incoming.request),
    )
    .await
}

/// [`serve_connection`] with the hop count passed to the handler and a `stop`
/// future: once it completes, no further request is read, the requests in
/// flight are answered, and the connection is closed.
///
/// Returns `Ok` when the peer closed cleanly or `stop` fired, and the
/// protocol violation or I/O error that closed the connection otherwise.
///
/// One task does everything for the connection: it reads frames, polls the
/// handlers' futures, and writes answers. A handler that finishes at once
/// (Ping, a DRAM page) is answered in the same pass, and one that waits on the
/// disk wakes only this task, not a task of its own and then a writer task:
/// at queue depth 32 that halves the wake-ups per request.
pub async fn serve_connection_with<S, H, F, St>(
    stream: S,
    limits: SessionLimits,
    stop: St,
    handler: H,
) -> Result<(), ProtoError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    H: Fn(Incoming) -> F + Send + Sync + 'static,
    F: Future + Send + 'static,
    F::Output: Into<Answer>,
    St: Future<Output = ()> + Send,
{
    limits.validate()?;
    let (reader, mut writer) = tokio::io::split(stream);
    let mut frames = FramedRead::with_capacity(reader, FrameCodec, READ_BUFFER_BYTES);
    let mut in_flight: FuturesUnordered<BoxFuture<'static, (Tag, Answer)>> =
        FuturesUnordered::new();
    let mut out = OutQueue::with_capacity(64 * 1024);
    let mut reading = true;
    let mut outcome = Ok(());
    tokio::pin!(stop);
    loop {
        if !reading && in_flight.is_empty() && out.is_empty() {
            break;
        }
        // A full connection stops reading, which pushes back on the sender
        // through TCP; so does a peer that does not read its answers.
        let can_read =
            reading && in_flight.len() < limits.max_in_flight && out.len() < WRITE_BATCH_BYTES;
        tokio::select! {
            biased;
            _ = &mut stop, if reading => reading = false,
            Some((tag, answer)) = in_flight.next(), if !in_flight.is_empty() => {
                encode_answer(tag, &answer, &mut out);
                // Gather every other finished answer into the same write.
                while out.len() < WRITE_BATCH_BYTES {
                    match futures::poll!(in_flight.next()) {
                        Poll::Ready(Some((tag, answer))) => encode_answer(tag, &answer, &mut out),
                        _ => break,
                    }
                }
            }
            written = out.write_some(&mut writer), if !out.is_empty() => match written {
                Ok(0) => return Err(ProtoError::Io {
                    peer: "requester".to_string(),
                    source: std::io::ErrorKind::WriteZero.into(),
                }),
                Ok(n) => out.advance(n),
                Err(source) => return Err(ProtoError::Io {
                    peer: "requester".to_string(),
                    source,
                }),
            },
            frame = frames.next(), if can_read => {
                let mut frame = frame;
                // Take every frame already buffered before answering any, so
                // a burst of requests costs one read and one write syscall,
                // not one of each per request.
                for taken in 1..=READ_BURST_FRAMES {
                    match frame {
                        None => reading = false,
                        Some(Err(e)) => {
                            tracing::warn!("closing connection: {e}");
                            reading = false;
                            outcome = Err(e);
                        }
                        Some(Ok(frame)) => {
                            if let Err(e) = accept(frame, &handler, &mut in_flight, &mut out) {
                                reading = false;
                                outcome = Err(e);
                            }
                        }
                    }
                    if !reading
                        || in_flight.len() >= limits.max_in_flight
                        || taken == READ_BURST_FRAMES
                    {
                        break;
                    }
                    match futures::poll!(frames.next()) {
                        Poll::Ready(next) => frame = next,
                        Poll::Pending => break,
                    }
                }
            }
        }
    }
    let _ = writer.shutdown().await;
    outcome
}

/// Most frames taken from the read buffer in one pass before answers are
/// gathered and written.
const READ_BURST_FRAMES: usize = 64;

/// Starts the handler for one frame, or queues the error answer for a frame
/// that is not a request. Returns the error that must close the connection
/// (a version this end does not speak).
fn accept<H, F>(
    frame: Frame,
    handler: &H,
    in_flight: &mut FuturesUnordered<BoxFuture<'static, (Tag, Answer)>>,
    out: &mut OutQueue,
) -> Result<(), ProtoError>
where
    H: Fn(Incoming) -> F,
    F: Future + Send + 'static,
    F::Output: Into<Answer>,
{
    let tag = frame.header.tag;
    if frame.header.version != PROTOCOL_VERSION {
        let error = ProtoError::UnsupportedVersion {
            found: frame.header.version,
            supported: PROTOCOL_VERSION,
        };
        tracing::warn!("closing connection: {error}");
        let answer = Response::Error {
            status: Status::UnsupportedVersion,
            message: error.to_string(),
        };
        encode_answer(tag, &answer.into(), out);
        return Err(error);
    }
    match decode_request(&frame) {
        // The header was sound, so framing is intact: answer this tag and
        // keep serving.
        Err(e) => {
            tracing::debug!(tag, "bad request: {e}");
            let answer = Response::Error {
                status: Status::BadRequest,
                message: e.to_string(),
            };
            encode_answer(tag, &answer.into(), out);
        }
        Ok(request) => {
            let future = handler(Incoming {
                request,
                hops: frame.header.hops,
            });
            // A panicking handler must not leave its requester waiting for
            // the full timeout.
            in_flight.push(Box::pin(async move {
                let answer = AssertUnwindSafe(future)
                    .catch_unwind()
                    .await
                    .map_or_else(|_| panicked().into(), Into::into);
                (tag, answer)
            }));
        }
    }
    Ok(())
}

fn panicked() -> Response {
    Response::Error {
        status: Status::Internal,
        message: "request handler panicked".to_string(),
    }
}

fn encode_answer(tag: Tag, answer: &Answer, out: &mut OutQueue) {
    // A large payload is queued as the bytes its producer holds and leaves
    // by a vectored write: no copy into a frame buffer at this node.
    if let Answer::Message(response) = answer {
        if !has_payload_piece(response) && encode_response(tag, response, out.buf()).is_ok() {
            return;
        }
    }
    out.push_pieces(answer.frame_pieces(tag));
}
