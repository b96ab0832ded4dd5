//! The answering end of a connection.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::Poll;

use bytes::BytesMut;
use futures::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::codec::FramedRead;

use crate::frame::FrameCodec;
use crate::session::{READ_BUFFER_BYTES, WRITE_BATCH_BYTES};
use crate::wire::{decode_request, encode_response};
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
pub async fn serve_connection_with<S, H, F, St>(
    stream: S,
    limits: SessionLimits,
    stop: St,
    handler: H,
) -> Result<(), ProtoError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    H: Fn(Incoming) -> F + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
    St: Future<Output = ()> + Send,
{
    limits.validate()?;
    let (reader, writer) = tokio::io::split(stream);
    // Each request holds one permit from decode until its answer is queued, and
    // the reader waits for a permit before reading the next frame: a full
    // connection stops reading, which pushes back on the sender through TCP.
    let permits = Arc::new(Semaphore::new(limits.max_in_flight));
    // +1: the one answer the reader itself may queue (an error) with no permit.
    let (tx, rx) = mpsc::channel::<(Tag, Response)>(limits.max_in_flight + 1);
    let write_failed = Arc::new(Notify::new());
    let read = read_loop(
        reader,
        Arc::new(handler),
        permits,
        tx,
        stop,
        write_failed.clone(),
    );
    let write = write_loop(writer, rx, write_failed);
    let (read_result, write_result) = tokio::join!(read, write);
    read_result.and(write_result)
}

async fn read_loop<R, H, F, St>(
    reader: R,
    handler: Arc<H>,
    permits: Arc<Semaphore>,
    tx: mpsc::Sender<(Tag, Response)>,
    stop: St,
    write_failed: Arc<Notify>,
) -> Result<(), ProtoError>
where
    R: AsyncRead + Unpin,
    H: Fn(Incoming) -> F + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
    St: Future<Output = ()>,
{
    let mut frames = FramedRead::with_capacity(reader, FrameCodec, READ_BUFFER_BYTES);
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = write_failed.notified() => return Ok(()),
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                // The semaphore is never closed; treat it as a stop if it were.
                Err(_) => return Ok(()),
            },
        };
        let frame = tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = write_failed.notified() => return Ok(()),
            frame = frames.next() => frame,
        };
        let frame = match frame {
            None => return Ok(()),
            Some(Err(e)) => {
                tracing::warn!("closing connection: {e}");
                return Err(e);
            }
            Some(Ok(frame)) => frame,
        };
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
            let _ = tx.send((tag, answer)).await;
            return Err(error);
        }
        match decode_request(&frame) {
            Err(e) => {
                // The header was sound, so framing is intact: answer this tag
                // and keep serving.
                tracing::debug!(tag, "bad request: {e}");
                let answer = Response::Error {
                    status: Status::BadRequest,
                    message: e.to_string(),
                };
                if tx.send((tag, answer)).await.is_err() {
                    return Ok(());
                }
            }
            Ok(request) => {
                // A panicking handler must not leave its requester waiting
                // for the full timeout.
                let mut future = Box::pin(
                    AssertUnwindSafe(handler(Incoming {
                        request,
                        hops: frame.header.hops,
                    }))
                    .catch_unwind(),
                );
                // Poll once here: answers that are ready at once (Ping, a DRAM
                // page) skip a task spawn and a cross-thread wake.
                match futures::poll!(&mut future) {
                    Poll::Ready(answer) => {
                        drop(permit);
                        if tx
                            .send((tag, answer.unwrap_or_else(|_| panicked())))
                            .await
                            .is_err()
                        {
                            return Ok(());
                        }
                    }
                    Poll::Pending => {
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            let answer = future.await.unwrap_or_else(|_| panicked());
                            let _ = tx.send((tag, answer)).await;
                            drop(permit);
                        });
                    }
                }
            }
        }
    }
}

fn panicked() -> Response {
    Response::Error {
        status: Status::Internal,
        message: "request handler panicked".to_string(),
    }
}

async fn write_loop<W>(
    mut writer: W,
    mut rx: mpsc::Receiver<(Tag, Response)>,
    write_failed: Arc<Notify>,
) -> Result<(), ProtoError>
where
    W: AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(64 * 1024);
    // Ends when the reader and every handler task have dropped their senders,
    // i.e. after the last answer in flight is queued.
    while let Some((tag, answer)) = rx.recv().await {
        encode_answer(tag, &answer, &mut buf);
        while buf.len() < WRITE_BATCH_BYTES {
            match rx.try_recv() {
                Ok((tag, answer)) => encode_answer(tag, &answer, &mut buf),
                Err(_) => break,
            }
        }
        if let Err(source) = writer.write_all(&buf).await {
            write_failed.notify_one();
            return Err(ProtoError::Io {
                peer: "requester".to_string(),
                source,
            });
        }
        buf.clear();
    }
    let _ = writer.shutdown().await;
    Ok(())
}

fn encode_answer(tag: Tag, answer: &Response, buf: &mut BytesMut) {
    if let Err(e) = encode_response(tag, answer, buf) {
        let fallback = Response::Error {
            status: Status::Internal,
            message: format!("answer could not be encoded: {e}"),
        };
        // An error answer with a bounded message always encodes.
        if let Err(e) = encode_response(tag, &fallback, buf) {
            tracing::error!(tag, "dropping answer: {e}");
        }
    }
}
