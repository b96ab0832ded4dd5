//! The requesting end of a connection: tags from a free list, one writer task
//! that batches frames, one reader task that matches answers to waiters.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore, TryAcquireError};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use crate::frame::FrameCodec;
use crate::out_queue::OutQueue;
use crate::wire::{
    check_request, decode_response, encode_request, encode_request_pieces,
    has_payload_piece_request,
};
use crate::{ProtoError, Request, Response, Tag};

/// Bits of a tag that index the slot table; the bits above hold the slot's
/// generation, so an answer that arrives after its request timed out cannot be
/// mistaken for the answer to the slot's next request.
const TAG_INDEX_BITS: u32 = 16;
const TAG_INDEX_MASK: u32 = (1 << TAG_INDEX_BITS) - 1;
/// Largest `max_in_flight` a session accepts (the slot index must fit in the
/// low tag bits).
pub const MAX_IN_FLIGHT_LIMIT: usize = 1 << TAG_INDEX_BITS;
/// The writer sends what it has once this much is queued, so one burst never
/// builds an unbounded buffer.
pub(crate) const WRITE_BATCH_BYTES: usize = 256 * 1024;
/// Initial read buffer; a frame is at most ~66 KiB, so this holds a few.
pub(crate) const READ_BUFFER_BYTES: usize = 128 * 1024;

/// Bounds on one session or connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Requests in flight per connection (1..=65536; default 1024).
    pub max_in_flight: usize,
    /// Time to establish a connection (default 2 s).
    pub connect_timeout: Duration,
    /// Time from submitting a request to its answer, including any wait for a
    /// free tag (default 30 s).
    pub request_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_in_flight: 1024,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl SessionLimits {
    /// Checks every field; the error names the bad one.
    pub fn validate(&self) -> Result<(), ProtoError> {
        if self.max_in_flight == 0 || self.max_in_flight > MAX_IN_FLIGHT_LIMIT {
            return Err(ProtoError::InvalidLimits {
                reason: format!(
                    "max_in_flight = {}, must be in 1..={MAX_IN_FLIGHT_LIMIT}",
                    self.max_in_flight
                ),
            });
        }
        if self.connect_timeout.is_zero() {
            return Err(ProtoError::InvalidLimits {
                reason: "connect_timeout must be above zero".into(),
            });
        }
        if self.request_timeout.is_zero() {
            return Err(ProtoError::InvalidLimits {
                reason: "request_timeout must be above zero".into(),
            });
        }
        Ok(())
    }
}

type Answer = Result<Response, ProtoError>;

struct Slot {
    generation: u16,
    waiter: Option<oneshot::Sender<Answer>>,
}

struct Slots {
    entries: Vec<Slot>,
    free: Vec<u16>,
    /// Why the connection is gone, once it is.
    closed: Option<String>,
}

struct Shared {
    peer: String,
    limits: SessionLimits,
    slots: Mutex<Slots>,
    /// One permit per free tag; submitters wait here when all are taken.
    tags: Semaphore,
    closed: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        // A panic while holding this lock cannot leave the table inconsistent
        // (every update is a single assignment), so poisoning is ignored.
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the waiter of `tag` if that exact request (slot and generation)
    /// still waits, and returns its tag to the free list.
    fn take_waiter(&self, tag: Tag) -> Option<oneshot::Sender<Answer>> {
        let index = (tag & TAG_INDEX_MASK) as usize;
        let generation = (tag >> TAG_INDEX_BITS) as u16;
        let mut slots = self.lock();
        let slot = slots.entries.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let waiter = slot.waiter.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        slots.free.push(index as u16);
        drop(slots);
        self.tags.add_permits(1);
        Some(waiter)
    }

    fn lost_error(&self, reason: &str) -> ProtoError {
        ProtoError::ConnectionLost {
            peer: self.peer.clone(),
            reason: reason.to_string(),
        }
    }

    fn closed_error(&self) -> ProtoError {
        let reason = self
            .lock()
            .closed
            .clone()
            .unwrap_or_else(|| "session closed".to_string());
        self.lost_error(&reason)
    }

    /// Fails every waiter at once; later submits fail immediately.
    fn fail_all(&self, reason: String) {
        let waiters: Vec<_> = {
            let mut slots = self.lock();
            if slots.closed.is_none() {
                slots.closed = Some(reason.clone());
            }
            self.closed.store(true, Ordering::Release);
            slots
                .entries
                .iter_mut()
                .filter_map(|slot| {
                    slot.generation = slot.generation.wrapping_add(1);
                    slot.waiter.take()
                })
                .collect()
        };
        self.tags.close();
        if !waiters.is_empty() {
            tracing::warn!(peer = %self.peer, in_flight = waiters.len(), "connection lost: {reason}");
        }
        for waiter in waiters {
            let _ = waiter.send(Err(self.lost_error(&reason)));
        }
    }
}

struct Outgoing {
    tag: Tag,
    hops: u8,
    request: Request,
}

struct SessionInner {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Outgoing>,
}

/// The requesting end of one connection: take a free tag, send, get the answer
/// matched by tag. Cloneable; clones share the connection. Dropping the last
/// clone closes the connection once everything queued has been written.
#[derive(Clone)]
pub struct Session {
    inner: Arc<SessionInner>,
}

/// Releases a request's tag if its answer never arrived (timeout or the
/// completion was dropped); a no-op once the reader has delivered the answer.
struct Pending {
    shared: Arc<Shared>,
    tag: Tag,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let _ = self.shared.take_waiter(self.tag);
    }
}

impl Session {
    /// Connects to `addr` (`host:port`) within `limits.connect_timeout`, with
    /// TCP_NODELAY (frames are small and latency-bound).
    pub async fn connect(addr: &str, limits: SessionLimits) -> Result<Session, ProtoError> {
        limits.validate()?;
        let stream =
            match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(addr)).await {
                Err(_) => {
                    return Err(ProtoError::ConnectTimeout {
                        addr: addr.to_string(),
                        timeout_ms: limits.connect_timeout.as_millis() as u64,
                    })
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    return Err(ProtoError::ConnectRefused {
                        addr: addr.to_string(),
                    })
                }
                Ok(Err(source)) => {
                    return Err(ProtoError::Connect {
                        addr: addr.to_string(),
                        source,
                    })
                }
                Ok(Ok(stream)) => stream,
            };
        stream.set_nodelay(true).map_err(|source| ProtoError::Io {
            peer: addr.to_string(),
            source,
        })?;
        let (reader, writer) = stream.into_split();
        Ok(Session::start(reader, writer, addr.to_string(), limits))
    }

    /// Runs a session over an already connected stream (a Unix socket, an
    /// in-memory duplex in tests). `peer` names it in error messages.
    pub fn from_stream<S>(
        stream: S,
        peer: &str,
        limits: SessionLimits,
    ) -> Result<Session, ProtoError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        limits.validate()?;
        let (reader, writer) = tokio::io::split(stream);
        Ok(Session::start(reader, writer, peer.to_string(), limits))
    }

    fn start<R, W>(reader: R, writer: W, peer: String, limits: SessionLimits) -> Session
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let entries = (0..limits.max_in_flight)
            .map(|_| Slot {
                generation: 0,
                waiter: None,
            })
            .collect();
        // Reversed so that tag 0 is handed out first (easier to read in traces).
        let free = (0..limits.max_in_flight).rev().map(|i| i as u16).collect();
        let shared = Arc::new(Shared {
            peer,
            limits,
            slots: Mutex::new(Slots {
                entries,
                free,
                closed: None,
            }),
            tags: Semaphore::new(limits.max_in_flight),
            closed: AtomicBool::new(false),
        });
        // Each request in flight holds at most one queue entry, so the queue
        // never fills before the tags run out.
        let (tx, rx) = mpsc::channel(limits.max_in_flight);
        tokio::spawn(write_loop(writer, rx, shared.clone()));
        tokio::spawn(read_loop(reader, shared.clone()));
        Session {
            inner: Arc::new(SessionInner { shared, tx }),
        }
    }

    /// The address this session is connected to, as dialled.
    pub fn peer_addr(&self) -> &str {
        &self.inner.shared.peer
    }

    /// The limits in force.
    pub fn limits(&self) -> SessionLimits {
        self.inner.shared.limits
    }

    /// Requests sent and not yet answered (or timed out).
    pub fn in_flight(&self) -> usize {
        if self.is_closed() {
            return 0;
        }
        self.inner
            .shared
            .limits
            .max_in_flight
            .saturating_sub(self.inner.shared.tags.available_permits())
    }

    /// True once the connection is gone; every later request fails at once.
    pub fn is_closed(&self) -> bool {
        self.inner.shared.closed.load(Ordering::Acquire)
    }

    /// Sends `request` under a free tag and waits for its answer.
    pub async fn call(&self, request: Request) -> Result<Response, ProtoError> {
        self.submit_with_hops(request, 0).await?.await
    }

    /// [`Session::call`] for a request that has already crossed `hops` links.
    pub async fn call_with_hops(&self, request: Request, hops: u8) -> Result<Response, ProtoError> {
        self.submit_with_hops(request, hops).await?.await
    }

    /// Sends `request` now; the returned future completes with its answer.
    /// Waits for a free tag when all are taken (bounded by the request timeout).
    pub async fn submit(
        &self,
        request: Request,
    ) -> Result<impl Future<Output = Result<Response, ProtoError>> + Send + 'static, ProtoError>
    {
        self.submit_with_hops(request, 0).await
    }

    /// [`Session::submit`] with the frame's hop count set (used when forwarding).
    pub async fn submit_with_hops(
        &self,
        request: Request,
        hops: u8,
    ) -> Result<impl Future<Output = Result<Response, ProtoError>> + Send + 'static, ProtoError>
    {
        check_request(&request)?;
        let shared = &self.inner.shared;
        let deadline = Instant::now() + shared.limits.request_timeout;
        match shared.tags.try_acquire() {
            Ok(permit) => permit.forget(),
            Err(TryAcquireError::Closed) => return Err(shared.closed_error()),
            Err(TryAcquireError::NoPermits) => {
                match tokio::time::timeout_at(deadline, shared.tags.acquire()).await {
                    Err(_) => {
                        return Err(ProtoError::NoFreeTag {
                            peer: shared.peer.clone(),
                            max_in_flight: shared.limits.max_in_flight,
                            timeout_ms: shared.limits.request_timeout.as_millis() as u64,
                        })
                    }
                    Ok(Err(_)) => return Err(shared.closed_error()),
                    Ok(Ok(permit)) => permit.forget(),
                }
            }
        }
        let (waiter, answer) = oneshot::channel();
        let tag = {
            let mut slots = shared.lock();
            if let Some(reason) = slots.closed.clone() {
                return Err(shared.lost_error(&reason));
            }
            let Some(index) = slots.free.pop() else {
                // Unreachable while permits and free slots stay in step; fail
                // the request rather than the process if they ever do not.
                drop(slots);
                shared.tags.add_permits(1);
                return Err(shared.lost_error("tag table out of step with its permits"));
            };
            let slot = &mut slots.entries[usize::from(index)];
            slot.waiter = Some(waiter);
            (u32::from(slot.generation) << TAG_INDEX_BITS) | u32::from(index)
        };
        let pending = Pending {
            shared: shared.clone(),
            tag,
        };
        if self
            .inner
            .tx
            .send(Outgoing { tag, hops, request })
            .await
            .is_err()
        {
            return Err(shared.closed_error());
        }
        Ok(async move {
            let result = tokio::time::timeout_at(deadline, answer).await;
            match result {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err(pending.shared.closed_error()),
                Err(_) => Err(ProtoError::Timeout {
                    peer: pending.shared.peer.clone(),
                    tag: pending.tag,
                    timeout_ms: pending.shared.limits.request_timeout.as_millis() as u64,
                }),
            }
            // `pending` drops here: frees the tag if no answer came.
        })
    }
}

async fn write_loop<W>(mut writer: W, mut rx: mpsc::Receiver<Outgoing>, shared: Arc<Shared>)
where
    W: AsyncWrite + Unpin,
{
    let mut out = OutQueue::with_capacity(64 * 1024);
    while let Some(first) = rx.recv().await {
        encode_outgoing(&first, &mut out, &shared);
        // Everything already queued goes out in the same write: one syscall
        // for a burst of requests.
        while out.len() < WRITE_BATCH_BYTES {
            match rx.try_recv() {
                Ok(next) => encode_outgoing(&next, &mut out, &shared),
                Err(_) => break,
            }
        }
        if let Err(e) = out.write_all(&mut writer).await {
            shared.fail_all(format!("write failed: {e}"));
            return;
        }
    }
    // Every Session clone is gone: tell the peer we are done.
    let _ = writer.shutdown().await;
}

fn encode_outgoing(outgoing: &Outgoing, out: &mut OutQueue, shared: &Shared) {
    // A call's body and a page's data are queued as the caller's bytes and
    // leave by a vectored write, not copied into a frame buffer first.
    let encoded = if has_payload_piece_request(&outgoing.request) {
        encode_request_pieces(outgoing.tag, outgoing.hops, &outgoing.request)
            .map(|pieces| out.push_pieces(pieces))
    } else {
        encode_request(outgoing.tag, outgoing.hops, &outgoing.request, out.buf())
    };
    if let Err(e) = encoded {
        if let Some(waiter) = shared.take_waiter(outgoing.tag) {
            let _ = waiter.send(Err(e));
        }
    }
}

async fn read_loop<R>(reader: R, shared: Arc<Shared>)
where
    R: AsyncRead + Unpin,
{
    let mut frames = FramedRead::with_capacity(reader, FrameCodec, READ_BUFFER_BYTES);
    let reason = loop {
        match frames.next().await {
            None => break "closed by peer".to_string(),
            Some(Err(e)) => break e.to_string(),
            Some(Ok(frame)) => {
                let tag = frame.header.tag;
                let answer = decode_response(&frame);
                if let Err(e) = &answer {
                    tracing::warn!(peer = %shared.peer, tag, "undecodable answer: {e}");
                }
                match shared.take_waiter(tag) {
                    Some(waiter) => {
                        let _ = waiter.send(answer);
                    }
                    None => tracing::debug!(
                        peer = %shared.peer,
                        tag,
                        "discarding answer: no request waits under this tag (timed out or cancelled)"
                    ),
                }
            }
        }
    };
    shared.fail_all(reason);
}
