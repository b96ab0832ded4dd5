//! Encoded frames waiting for a socket. Small frames are gathered in one
//! buffer; a large payload (a reply's body, a page, a relayed fragment)
//! stays the `Bytes` its producer holds and goes out by a vectored write,
//! so it is not copied into a frame buffer before the kernel copies it
//! into the socket.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Pieces at most in one vectored write (Linux takes 1024; a few dozen
/// already amortise the system call).
const SLICES_PER_WRITE_MAX: usize = 64;

/// Below this a piece is copied into the gathering buffer: one more slice
/// in a write costs more than copying a few hundred bytes.
const COPY_BELOW_BYTES: usize = 1024;

/// Frames waiting to be written, in order. It holds no bound of its own:
/// each owner stops adding past its batch size (`WRITE_BATCH_BYTES`) and
/// writes before taking more.
#[derive(Debug, Default)]
pub(crate) struct OutQueue {
    /// Sealed pieces, oldest first; `tail` follows the last of them.
    pieces: VecDeque<Bytes>,
    pieces_bytes: usize,
    /// Where small frames are encoded.
    tail: BytesMut,
}

impl OutQueue {
    pub fn with_capacity(bytes: usize) -> OutQueue {
        OutQueue {
            pieces: VecDeque::new(),
            pieces_bytes: 0,
            tail: BytesMut::with_capacity(bytes),
        }
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.pieces_bytes + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer to encode a small frame into; it is written after
    /// everything queued before.
    pub fn buf(&mut self) -> &mut BytesMut {
        &mut self.tail
    }

    /// Queues a frame given as pieces whose concatenation is the frame.
    pub fn push_pieces(&mut self, pieces: impl IntoIterator<Item = Bytes>) {
        for piece in pieces {
            if piece.len() < COPY_BELOW_BYTES {
                self.tail.extend_from_slice(&piece);
                continue;
            }
            if !self.tail.is_empty() {
                let sealed = self.tail.split().freeze();
                self.pieces_bytes += sealed.len();
                self.pieces.push_back(sealed);
            }
            self.pieces_bytes += piece.len();
            self.pieces.push_back(piece);
        }
    }

    /// Drops the first `n` bytes, which were written.
    pub fn advance(&mut self, mut n: usize) {
        assert!(n <= self.len(), "advanced past the queued bytes");
        while n > 0 {
            let Some(front) = self.pieces.front_mut() else {
                self.tail.advance(n);
                return;
            };
            let step = n.min(front.len());
            front.advance(step);
            self.pieces_bytes -= step;
            n -= step;
            if front.is_empty() {
                self.pieces.pop_front();
            }
        }
    }

    /// One vectored write of what is queued, from the front; returns the
    /// bytes the writer took (the caller then calls [`OutQueue::advance`]).
    pub async fn write_some<W: AsyncWrite + Unpin>(
        &self,
        writer: &mut W,
    ) -> std::io::Result<usize> {
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(SLICES_PER_WRITE_MAX);
        slices.extend(
            self.pieces
                .iter()
                .take(SLICES_PER_WRITE_MAX)
                .map(|p| IoSlice::new(p)),
        );
        // The tail follows the last piece: it may go only in a write that
        // carries every piece before it.
        if self.pieces.len() < SLICES_PER_WRITE_MAX && !self.tail.is_empty() {
            slices.push(IoSlice::new(&self.tail));
        }
        writer.write_vectored(&slices).await
    }

    /// Writes everything queued.
    pub async fn write_all<W: AsyncWrite + Unpin>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        while !self.is_empty() {
            let n = self.write_some(writer).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.advance(n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `step` bytes a call, to cut writes
    /// inside pieces.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Trickle {
        /// Takes up to `step` bytes across the slices, in order, as a
        /// socket's `writev` does.
        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut taken = 0;
            for buf in bufs {
                let n = buf.len().min(self.step - taken);
                self.got.extend_from_slice(&buf[..n]);
                taken += n;
                if taken == self.step {
                    break;
                }
            }
            std::task::Poll::Ready(Ok(taken))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.got.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn bytes_leave_in_the_order_they_were_queued_whatever_the_write_sizes() {
        for step in [1, 7, 1000, 5000, usize::MAX] {
            let mut queue = OutQueue::with_capacity(16);
            let mut expected = Vec::new();
            for i in 0..200u32 {
                let small = i.to_be_bytes();
                queue.buf().extend_from_slice(&small);
                expected.extend_from_slice(&small);
                let big: Vec<u8> = (0..(i as usize * 37) % 4000).map(|b| b as u8).collect();
                queue.push_pieces([Bytes::from_static(b"hd"), Bytes::from(big.clone())]);
                expected.extend_from_slice(b"hd");
                expected.extend_from_slice(&big);
            }
            // Small frames after many pieces: they must wait for all of them.
            queue.buf().extend_from_slice(b"end");
            expected.extend_from_slice(b"end");
            assert_eq!(queue.len(), expected.len());
            let mut w = Trickle {
                got: Vec::new(),
                step,
            };
            queue.write_all(&mut w).await.unwrap();
            assert!(queue.is_empty());
            assert!(w.got == expected, "step {step}");
        }
    }
}
