//! The upload of a file written front to back, sent to the store while the
//! writes arrive, so that `close` waits only for the last chunks and the
//! commit instead of uploading the whole spool after the last write.
//!
//! The spool still gets every byte: reads of the open file, and any write
//! that is not an append (or a truncate, a rename, an unlink), drop the
//! stream and leave the upload to the spool as before. A dropped stream's
//! put sees its source fail, so it stores nothing and releases the chunks
//! it took.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use quarry_store_api::{BucketName, Condition, ObjectKey};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::backend::{ObjectBackend, ObjectMeta};

/// Writes a stream holds in flight to the store; a writer waits for room
/// beyond (each write is at most the kernel's `max_write`, 1 MiB here).
const STREAM_PIECES_IN_FLIGHT: usize = 8;

enum Piece {
    Data(Bytes),
    /// The writer is done: the source ends here. A channel that closes
    /// without it is an abandoned upload.
    End,
}

/// An upload under way, fed by appends to one spool.
pub(crate) struct UploadStream {
    tx: mpsc::Sender<Piece>,
    /// Bytes sent so far: the offset the next append must have.
    pub(crate) end: u64,
    bucket: BucketName,
    key: ObjectKey,
    task: JoinHandle<quarry_store_api::Result<ObjectMeta>>,
}

impl UploadStream {
    /// Starts a put of `bucket/key` under `condition`, fed by
    /// [`Self::append`].
    pub(crate) fn start<B: ObjectBackend>(
        runtime: &tokio::runtime::Handle,
        backend: std::sync::Arc<B>,
        bucket: BucketName,
        key: ObjectKey,
        condition: Condition,
    ) -> Self {
        let (tx, rx) = mpsc::channel(STREAM_PIECES_IN_FLIGHT);
        let (b, k) = (bucket.clone(), key.clone());
        let task = runtime.spawn(async move {
            let source = PieceReader {
                rx,
                current: Bytes::new(),
                ended: false,
            };
            backend.put_reader(&b, &k, source, condition).await
        });
        Self {
            tx,
            end: 0,
            bucket,
            key,
            task,
        }
    }

    /// Whether this stream stores `bucket/key`.
    pub(crate) fn is_for(&self, bucket: &BucketName, key: &ObjectKey) -> bool {
        &self.bucket == bucket && &self.key == key
    }

    /// Sends the bytes of an append at `offset`. `false`: not an append,
    /// or the upload has stopped; the caller drops the stream.
    /// Blocks while the store is behind (call it from a FUSE thread, never
    /// inside the runtime).
    pub(crate) fn append(&mut self, offset: u64, data: &[u8]) -> bool {
        if offset != self.end {
            return false;
        }
        // The one copy of the bytes for the store: the kernel's buffer is
        // only borrowed for this call.
        if self
            .tx
            .blocking_send(Piece::Data(Bytes::copy_from_slice(data)))
            .is_err()
        {
            return false;
        }
        self.end += data.len() as u64;
        true
    }

    /// Ends the source and waits for the commit. `None` if the upload had
    /// failed or could not be finished: the caller uploads the spool.
    pub(crate) fn finish(
        self,
        run: impl FnOnce(
            JoinHandle<quarry_store_api::Result<ObjectMeta>>,
        )
            -> Result<quarry_store_api::Result<ObjectMeta>, tokio::task::JoinError>,
    ) -> Option<quarry_store_api::Result<ObjectMeta>> {
        if self.tx.blocking_send(Piece::End).is_err() {
            // The put ended before its source did: it failed.
            tracing::debug!(key = %self.key, "streamed upload stopped early; uploading the spool");
            return None;
        }
        drop(self.tx);
        match run(self.task) {
            Ok(Ok(meta)) => Some(Ok(meta)),
            // A condition that fails will fail the spool's upload too: say
            // so now instead of uploading everything again.
            Ok(Err(e @ quarry_store_api::StoreError::VersionMismatch { .. })) => Some(Err(e)),
            Ok(Err(e)) => {
                tracing::debug!(key = %self.key, error = %e, "streamed upload failed; uploading the spool");
                None
            }
            Err(e) => {
                tracing::debug!(key = %self.key, error = %e, "streamed upload task failed; uploading the spool");
                None
            }
        }
    }
}

/// The put's source: the appends, in order, until [`Piece::End`].
struct PieceReader {
    rx: mpsc::Receiver<Piece>,
    current: Bytes,
    ended: bool,
}

impl AsyncRead for PieceReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        while this.current.is_empty() && !this.ended {
            match this.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Piece::Data(b))) => this.current = b,
                Poll::Ready(Some(Piece::End)) => this.ended = true,
                Poll::Ready(None) => {
                    return Poll::Ready(Err(std::io::Error::other(
                        "the file's streamed upload was abandoned",
                    )))
                }
            }
        }
        let n = this.current.len().min(buf.remaining());
        buf.put_slice(&this.current[..n]);
        this.current.advance(n);
        Poll::Ready(Ok(()))
    }
}
