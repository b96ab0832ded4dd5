//! One live link to a neighbour: its send queues (a rotating queue of flows
//! per virtual channel), its credits, and the tables that map the streams on
//! it to where their other end is.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::future::{AbortHandle, Abortable, BoxFuture, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use quarry_proto::NodeId;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};

use crate::wire::{encode_credit, flags, Channel, Kind, LinkHeader, ReceiveLimits};
use crate::FabricError;

/// Largest write the link's writer gathers before it writes.
const WRITE_BATCH_BYTES: usize = 256 * 1024;
/// Most unsent control frames (adverts, aborts) a link holds; a peer that
/// does not read them for this long is cut off rather than buffered for.
pub(crate) const MAX_CONTROL_BACKLOG: usize = 4096;

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A fragment waiting to be written, and the credit its writing frees on the
/// link it came in on (for a fragment being forwarded).
pub(crate) struct OutFragment {
    pub header: LinkHeader,
    pub payload: Bytes,
    pub release: Option<Release>,
}

/// A receive-buffer slot of `link`'s `channel`, freed once the fragment that
/// holds it has moved on.
pub(crate) struct Release {
    pub link: Arc<Link>,
    pub channel: Channel,
}

impl Release {
    pub fn run(self) {
        self.link.release(self.channel);
    }
}

/// Fragments of one channel, queued per flow and sent one fragment per flow
/// in turn (RFSA's rotating-priority arbiter): a requester streaming megabytes
/// and one asking for a single page share the link fragment by fragment.
#[derive(Default)]
struct FlowQueues {
    order: VecDeque<u32>,
    flows: HashMap<u32, VecDeque<OutFragment>>,
}

impl FlowQueues {
    fn push(&mut self, fragment: OutFragment) {
        let flow = fragment.header.flow;
        let queue = self.flows.entry(flow).or_default();
        if queue.is_empty() {
            self.order.push_back(flow);
        }
        queue.push_back(fragment);
    }

    fn pop(&mut self) -> Option<OutFragment> {
        let flow = self.order.pop_front()?;
        let queue = self.flows.get_mut(&flow)?;
        let fragment = queue.pop_front();
        if queue.is_empty() {
            self.flows.remove(&flow);
        } else {
            self.order.push_back(flow);
        }
        fragment
    }

    fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    fn drain(&mut self) -> Vec<OutFragment> {
        self.order.clear();
        self.flows.drain().flat_map(|(_, queue)| queue).collect()
    }

    /// Takes out the queued request fragments of `stream`, keeping every
    /// other fragment in its order.
    fn take_request(&mut self, stream: u32) -> Vec<OutFragment> {
        let mut taken = Vec::new();
        for queue in self.flows.values_mut() {
            if !queue
                .iter()
                .any(|f| f.header.stream == stream && f.header.kind == Kind::Request)
            {
                continue;
            }
            for fragment in std::mem::take(queue) {
                if fragment.header.stream == stream && fragment.header.kind == Kind::Request {
                    taken.push(fragment);
                } else {
                    queue.push_back(fragment);
                }
            }
        }
        if !taken.is_empty() {
            // A flow left with nothing queued leaves the rotation too: the
            // writer takes a flow in the order without a queue for an empty
            // channel.
            self.flows.retain(|_, queue| !queue.is_empty());
            let flows = &self.flows;
            self.order.retain(|flow| flows.contains_key(flow));
        }
        taken
    }
}

struct Outbox {
    /// Fragments this end may still send per channel before the peer frees
    /// buffer space.
    credits: [u32; 2],
    queues: [FlowQueues; 2],
    /// Encoded control frames that spend no credit.
    control: VecDeque<Bytes>,
    /// Credits to hand back to the peer in the next Credit frame.
    credit_return: [u32; 2],
    /// What a direct write ([`Link::flush`]) could not send at once: the
    /// writer task sends it before anything else.
    leftover: BytesMut,
    /// Someone (the writer task or a direct write) is between gathering a
    /// batch and writing it: frames must not interleave on the socket.
    writing: bool,
}

impl Outbox {
    /// Whether there is anything the writer could send now.
    fn has_work(&self) -> bool {
        !self.leftover.is_empty()
            || self.credit_return != [0; 2]
            || !self.control.is_empty()
            || Channel::ALL
                .iter()
                .any(|c| self.credits[c.index()] > 0 && !self.queues[c.index()].is_empty())
    }

    /// Moves what may be sent now into `batch` (credits owed, control
    /// frames, then each channel as far as its credits go), up to about
    /// [`WRITE_BATCH_BYTES`]; the receive slots upstream that the moved
    /// fragments held go to `releases`.
    fn gather(&mut self, batch: &mut BytesMut, releases: &mut Vec<Release>) {
        let [control_back, data_back] = self.credit_return;
        if control_back + data_back > 0 {
            encode_credit(control_back, data_back, batch);
            self.credit_return = [0; 2];
        }
        while batch.len() < WRITE_BATCH_BYTES {
            let Some(frame) = self.control.pop_front() else {
                break;
            };
            batch.extend_from_slice(&frame);
        }
        for channel in Channel::ALL {
            let index = channel.index();
            while self.credits[index] > 0 && batch.len() < WRITE_BATCH_BYTES {
                let Some(fragment) = self.queues[index].pop() else {
                    break;
                };
                self.credits[index] -= 1;
                fragment.header.put(batch);
                // One copy into the write buffer per hop: it turns a
                // burst of fragments into one write system call.
                batch.extend_from_slice(&fragment.payload);
                if let Some(release) = fragment.release {
                    releases.push(release);
                }
            }
        }
    }
}

/// A stream this node sent a request on over this link, awaiting its answer.
pub(crate) enum Pending {
    /// The request entered here; the answer's fragments are kept as they
    /// arrived (no copy) for `reply`.
    Local {
        pieces: Vec<Bytes>,
        len_bytes: usize,
        reply: oneshot::Sender<Result<Vec<Bytes>, String>>,
    },
    /// The request is being forwarded for `up`'s stream `up_stream`; answer
    /// fragments go back there as they arrive.
    Forward {
        up: Arc<Link>,
        up_stream: u32,
        /// The node the request is for.
        dest: NodeId,
        /// Some answer fragment has already been passed back.
        started: bool,
        created: Instant,
    },
}

/// A request stream the peer sent on this link.
pub(crate) enum Inbound {
    /// For this node: its fragments are gathered, then the request runs.
    Local {
        buf: BytesMut,
        permit: tokio::sync::OwnedSemaphorePermit,
    },
    /// For a node further on: fragments pass to `down` as they arrive.
    Forward { down: Arc<Link>, down_stream: u32 },
    /// Already answered with an error; the rest of it is dropped.
    Discard,
}

/// Streams this node opened on a link, by tag. A tag is the slot index in its
/// low 16 bits and the slot's generation above, so an answer that comes after
/// its request gave up cannot be taken for the slot's next request.
pub(crate) struct TagTable {
    slots: Vec<(u16, Option<Pending>)>,
    free: Vec<u32>,
    limit: usize,
}

impl TagTable {
    fn new(limit: usize) -> TagTable {
        TagTable {
            slots: Vec::new(),
            free: Vec::new(),
            limit: limit.min(1 << 16),
        }
    }

    pub fn insert(&mut self, pending: Pending) -> Option<u32> {
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.slots.len() < self.limit => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.1.is_none(), "a free tag slot holds a stream");
        slot.1 = Some(pending);
        Some(u32::from(slot.0) << 16 | index)
    }

    fn slot(&mut self, tag: u32) -> Option<&mut (u16, Option<Pending>)> {
        let slot = self.slots.get_mut((tag & 0xFFFF) as usize)?;
        (u32::from(slot.0) == tag >> 16 && slot.1.is_some()).then_some(slot)
    }

    pub fn get_mut(&mut self, tag: u32) -> Option<&mut Pending> {
        self.slot(tag).and_then(|slot| slot.1.as_mut())
    }

    pub fn remove(&mut self, tag: u32) -> Option<Pending> {
        let slot = self.slot(tag)?;
        let pending = slot.1.take();
        slot.0 = slot.0.wrapping_add(1);
        self.free.push(tag & 0xFFFF);
        pending
    }

    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Tags of forwarded streams older than `max_age`.
    pub fn stale_forwards(&self, max_age: Duration) -> Vec<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, (generation, pending))| match pending {
                Some(Pending::Forward { created, .. }) if created.elapsed() > max_age => {
                    Some(u32::from(*generation) << 16 | index as u32)
                }
                _ => None,
            })
            .collect()
    }

    pub fn drain(&mut self) -> Vec<Pending> {
        let mut all = Vec::new();
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if let Some(pending) = slot.1.take() {
                slot.0 = slot.0.wrapping_add(1);
                self.free.push(index as u32);
                all.push(pending);
            }
        }
        all
    }
}

/// What each end of a link buffers of the other's fragments, as the two
/// ends announced them in their handshakes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkLimits {
    /// What this end takes.
    pub receive: ReceiveLimits,
    /// What the peer takes.
    pub send: ReceiveLimits,
}

/// One live link to a neighbour.
pub(crate) struct Link {
    /// Unique among this process's links.
    pub serial: u64,
    pub peer: NodeId,
    pub peer_addr: String,
    pub peer_instance: u64,
    /// The node that dialled; when both ends dial each other, the link dialled
    /// by the lower id is kept.
    pub dialer: NodeId,
    /// What this end buffers of the peer's fragments (it announced these).
    receive_limits: ReceiveLimits,
    /// What the peer buffers of this end's fragments (it announced these).
    send_limits: ReceiveLimits,
    out: Mutex<Outbox>,
    writer_wake: Notify,
    /// The link's socket, for direct writes ([`Link::flush`]) and the
    /// writer task; taken away when the link closes.
    socket: Mutex<Option<Arc<OwnedWriteHalf>>>,
    pub outbound: Mutex<TagTable>,
    pub inbound: Mutex<HashMap<u32, Inbound>>,
    /// Requests of the peer running on this node at once.
    pub local_permits: Arc<Semaphore>,
    /// How many `local_permits` there are.
    local_slots: usize,
    /// Requests of the peer to run on this node, started in arrival order
    /// (NAND takes a block's pages only in order, and a client that sends
    /// them in order must see them programmed in order).
    local_jobs: mpsc::UnboundedSender<BoxFuture<'static, ()>>,
    /// The peer's requests queued or running here that its withdrawal may
    /// still stop, by stream (at most one per local permit).
    stoppable: Mutex<HashMap<u32, AbortHandle>>,
    /// Fragments received per channel whose buffer space is not yet freed.
    held: [AtomicU32; 2],
    closed: AtomicBool,
    closed_notify: Notify,
    created: Instant,
    last_heard_ms: AtomicU64,
}

impl Link {
    pub fn new(
        serial: u64,
        peer: NodeId,
        peer_addr: String,
        peer_instance: u64,
        dialer: NodeId,
        limits: LinkLimits,
        max_streams: usize,
    ) -> (Link, mpsc::UnboundedReceiver<BoxFuture<'static, ()>>) {
        let LinkLimits {
            receive: receive_limits,
            send: send_limits,
        } = limits;
        // Unbounded in type only: a job exists per held permit, at most
        // `max_streams`.
        let (local_jobs, jobs) = mpsc::unbounded_channel();
        let link = Link {
            serial,
            peer,
            peer_addr,
            peer_instance,
            dialer,
            receive_limits,
            send_limits,
            out: Mutex::new(Outbox {
                credits: Channel::ALL.map(|c| send_limits.window(c)),
                queues: [FlowQueues::default(), FlowQueues::default()],
                control: VecDeque::new(),
                credit_return: [0; 2],
                leftover: BytesMut::new(),
                writing: false,
            }),
            writer_wake: Notify::new(),
            socket: Mutex::new(None),
            outbound: Mutex::new(TagTable::new(max_streams)),
            inbound: Mutex::new(HashMap::new()),
            local_permits: Arc::new(Semaphore::new(max_streams)),
            local_slots: max_streams,
            local_jobs,
            stoppable: Mutex::new(HashMap::new()),
            held: [AtomicU32::new(0), AtomicU32::new(0)],
            closed: AtomicBool::new(false),
            closed_notify: Notify::new(),
            created: Instant::now(),
            last_heard_ms: AtomicU64::new(0),
        };
        (link, jobs)
    }

    /// Requests of the peer that hold a slot here: arriving, waiting,
    /// running or answering.
    pub fn local_requests(&self) -> usize {
        self.local_slots
            .saturating_sub(self.local_permits.available_permits())
    }

    /// Queues the peer's request on `stream` to run here. Until the job
    /// calls [`Link::keep_local`], [`Link::stop_local`] drops it.
    ///
    /// With `poll_first`, the job is polled once here, on the caller's task,
    /// before it is queued: a request that finishes at once (a page held in
    /// memory) is then answered without waking the runner task, a wake-up
    /// that measured 10-20 us here when it crosses threads. Only for jobs
    /// whose first poll is short (a page request), since it holds up the
    /// caller (the link's reader) meanwhile, and only when it is the only
    /// request of the peer's here.
    pub fn run_local(
        &self,
        stream: u32,
        job: impl Future<Output = ()> + Send + 'static,
        poll_first: bool,
    ) {
        let (handle, registration) = AbortHandle::new_pair();
        lock(&self.stoppable).insert(stream, handle);
        let mut job = Abortable::new(job, registration).map(|_| ()).boxed();
        if poll_first {
            // The no-op waker is never the one that matters: a job still
            // pending is polled again by the runner at once, which
            // registers the runner's waker in its place.
            let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
            if job.as_mut().poll(&mut cx).is_ready() {
                return;
            }
        }
        // Fails only once the runner has stopped with the link; the request
        // is then dropped with it.
        let _ = self.local_jobs.send(job);
    }

    /// Makes the job on `stream` run to its end from here on.
    pub fn keep_local(&self, stream: u32) {
        lock(&self.stoppable).remove(&stream);
    }

    /// Drops the job on `stream`, if it may still be stopped.
    pub fn stop_local(&self, stream: u32) {
        if let Some(handle) = lock(&self.stoppable).remove(&stream) {
            handle.abort();
        }
    }

    /// Drops every job that may still be stopped (the link is gone, and with
    /// it whoever waited for the answers).
    pub fn stop_all_local(&self) {
        for (_, handle) in lock(&self.stoppable).drain() {
            handle.abort();
        }
    }

    /// Runs the peer's requests for this node: each is polled first in the
    /// order it arrived, and all run concurrently.
    pub async fn local_runner(
        self: Arc<Self>,
        mut jobs: mpsc::UnboundedReceiver<BoxFuture<'static, ()>>,
    ) {
        let mut running = FuturesUnordered::new();
        loop {
            tokio::select! {
                biased;
                job = jobs.recv() => match job {
                    Some(job) => running.push(job),
                    None => break,
                },
                Some(()) = running.next(), if !running.is_empty() => {}
                _ = self.closed(), if running.is_empty() => break,
            }
        }
        while running.next().await.is_some() {}
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the link closed, wakes its tasks, and frees the receive slots
    /// held by the fragments still queued on it. Returns false if it already was.
    pub fn close(&self) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.closed_notify.notify_waiters();
        self.writer_wake.notify_one();
        lock(&self.socket).take();
        let dropped: Vec<OutFragment> = {
            let mut out = lock(&self.out);
            out.control.clear();
            let mut all = out.queues[0].drain();
            all.extend(out.queues[1].drain());
            all
        };
        for fragment in dropped {
            if let Some(release) = fragment.release {
                release.run();
            }
        }
        true
    }

    /// Completes when the link is closed.
    pub async fn closed(&self) {
        loop {
            let notified = self.closed_notify.notified();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    pub fn heard(&self) {
        let ms = self.created.elapsed().as_millis() as u64;
        self.last_heard_ms.store(ms, Ordering::Relaxed);
    }

    pub fn silent_for(&self) -> Duration {
        let now_ms = self.created.elapsed().as_millis() as u64;
        Duration::from_millis(now_ms.saturating_sub(self.last_heard_ms.load(Ordering::Relaxed)))
    }

    /// Counts a received fragment of `len_bytes` against its channel's
    /// window; a peer that sends beyond its credits, or a fragment larger
    /// than this end announced, breaks the protocol.
    pub fn receive(&self, channel: Channel, len_bytes: usize) -> Result<(), FabricError> {
        let largest = self.receive_limits.fragment_bytes(channel);
        if len_bytes > largest {
            return Err(FabricError::BadLinkFrame {
                reason: format!(
                    "node {} sent a {channel:?} fragment of {len_bytes} bytes; this node takes at most {largest}",
                    self.peer
                ),
            });
        }
        let window = self.receive_limits.window(channel);
        let held = self.held[channel.index()].fetch_add(1, Ordering::AcqRel) + 1;
        if held > window {
            return Err(FabricError::BadLinkFrame {
                reason: format!(
                    "node {} sent {held} {channel:?} fragments against a window of {window}",
                    self.peer
                ),
            });
        }
        Ok(())
    }

    /// Frees one receive slot of `channel` and owes the peer a credit for it.
    pub fn release(&self, channel: Channel) {
        let before = self.held[channel.index()].fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "released more {channel:?} slots than were held");
        if self.is_closed() {
            return;
        }
        let owed = {
            let mut out = lock(&self.out);
            out.credit_return[channel.index()] += 1;
            out.credit_return[channel.index()]
        };
        // Credits ride along with whatever the link sends next; a Credit
        // frame of its own is worth a write only once a quarter of the window
        // is owed. Waking the writer per freed slot would double the system
        // calls of every forwarded fragment. The sender always keeps at least
        // three quarters of its window, so it never stalls waiting for them.
        if owed >= (self.receive_limits.window(channel) / 4).max(1) {
            self.writer_wake.notify_one();
        }
    }

    pub fn add_credits(&self, control: u32, data: u32) -> Result<(), FabricError> {
        let mut out = lock(&self.out);
        for (channel, more) in Channel::ALL.into_iter().zip([control, data]) {
            let index = channel.index();
            let window = self.send_limits.window(channel);
            let credits = out.credits[index].saturating_add(more);
            if credits > window {
                return Err(FabricError::BadLinkFrame {
                    reason: format!(
                        "node {} returned {channel:?} credits beyond the window of {window}",
                        self.peer
                    ),
                });
            }
            out.credits[index] = credits;
        }
        drop(out);
        self.writer_wake.notify_one();
        Ok(())
    }

    /// Queues a fragment. On a closed link it is dropped and its receive slot
    /// upstream freed; returns whether it was queued.
    pub fn send(&self, fragment: OutFragment) -> bool {
        if self.is_closed() {
            if let Some(release) = fragment.release {
                release.run();
            }
            return false;
        }
        lock(&self.out).queues[fragment.header.channel.index()].push(fragment);
        self.flush();
        true
    }

    /// Queues a whole message (a client-protocol frame) as fragments of one
    /// stream.
    pub fn send_message(&self, header: LinkHeader, message: Bytes) -> bool {
        self.send_pieces(header, vec![message])
    }

    /// Queues a message given as pieces (their concatenation is the frame)
    /// as fragments of one stream: each piece is cut on its own, so a page
    /// or a call body the caller holds goes out as slices of itself, never
    /// copied into a buffer of the whole message.
    pub fn send_pieces(&self, mut header: LinkHeader, pieces: Vec<Bytes>) -> bool {
        let total: usize = pieces.iter().map(Bytes::len).sum();
        header.channel = Channel::for_message(total);
        let fragment_bytes = self.send_limits.fragment_bytes(header.channel);
        let count = pieces
            .iter()
            .map(|p| p.len().div_ceil(fragment_bytes))
            .sum::<usize>()
            .max(1);
        // Each piece cut on its own, as slices of itself; an empty message
        // is one empty fragment.
        let slices = pieces.iter().flat_map(|piece| {
            (0..piece.len().div_ceil(fragment_bytes)).map(move |i| {
                piece.slice(i * fragment_bytes..((i + 1) * fragment_bytes).min(piece.len()))
            })
        });
        let mut out = lock(&self.out);
        if self.is_closed() {
            return false;
        }
        let empty = (total == 0).then(Bytes::new);
        for (index, payload) in slices.chain(empty).enumerate() {
            let mut h = header;
            h.flags = 0;
            if index == 0 {
                h.flags |= flags::FIRST;
            }
            if index + 1 == count {
                h.flags |= flags::LAST;
            }
            h.len_bytes = payload.len() as u32;
            out.queues[h.channel.index()].push(OutFragment {
                header: h,
                payload,
                release: None,
            });
        }
        drop(out);
        self.flush();
        true
    }

    /// Queues an encoded control frame (advert, abort, keepalive). Returns
    /// false if the link is closed or its control backlog is full.
    pub fn send_control(&self, frame: Bytes) -> bool {
        if self.is_closed() {
            return false;
        }
        let mut out = lock(&self.out);
        if out.control.len() >= MAX_CONTROL_BACKLOG {
            return false;
        }
        out.control.push_back(frame);
        drop(out);
        self.writer_wake.notify_one();
        true
    }

    /// Withdraws this node's request on `stream` if it still waits for its
    /// answer: frees its tag (a late answer then finds none) and
    /// [`Link::withdraw_request`]s it.
    pub fn withdraw(&self, stream: u32) {
        if lock(&self.outbound).remove(stream).is_some() {
            self.withdraw_request(stream);
        }
    }

    /// Withdraws the request on `stream`: takes its fragments still queued
    /// here (freeing the receive slots upstream that forwarded ones hold) and
    /// sends the peer an abort, unless the peer never got any of it. An abort
    /// therefore never overtakes its request's first fragment.
    pub fn withdraw_request(&self, stream: u32) {
        let taken: Vec<OutFragment> = {
            let mut out = lock(&self.out);
            out.queues
                .iter_mut()
                .flat_map(|queues| queues.take_request(stream))
                .collect()
        };
        let first_unsent = taken.iter().any(|f| f.header.is_first());
        for fragment in taken {
            if let Some(release) = fragment.release {
                release.run();
            }
        }
        if !first_unsent {
            self.send_abort(Kind::AbortRequest, stream);
        }
    }

    pub fn send_abort(&self, kind: Kind, stream: u32) -> bool {
        let mut header = LinkHeader::control(kind, 0);
        header.stream = stream;
        let mut frame = BytesMut::with_capacity(crate::wire::LINK_HEADER_BYTES);
        header.put(&mut frame);
        self.send_control(frame.freeze())
    }

    pub fn in_flight(&self) -> usize {
        lock(&self.outbound).len()
    }

    /// Writes what is queued from the caller's task, when no one else is
    /// writing and the socket takes it all at once (it never waits);
    /// whatever is left goes to the writer task. A request or answer then
    /// leaves without a wake-up of the writer task, which measured 10-20 us
    /// here when it crosses threads, once per hop each way.
    fn flush(&self) {
        // Only a link carrying one request at a time writes from the
        // caller. With more in flight the writer task's batches turn many
        // fragments into one system call, which is what keeps a busy link's
        // throughput up (writing each fragment at once measured at about
        // half the IOPS at QD32 here). A table someone holds counts as busy.
        let streams = match self.outbound.try_lock() {
            Ok(outbound) => outbound.len(),
            Err(_) => usize::MAX,
        };
        if streams.saturating_add(self.local_requests()) > 1 {
            self.writer_wake.notify_one();
            return;
        }
        let socket = lock(&self.socket).clone();
        let Some(socket) = socket else {
            self.writer_wake.notify_one();
            return;
        };
        let mut batch = BytesMut::new();
        let mut releases = Vec::new();
        {
            let mut out = lock(&self.out);
            if out.writing || !out.leftover.is_empty() {
                drop(out);
                self.writer_wake.notify_one();
                return;
            }
            out.writing = true;
            out.gather(&mut batch, &mut releases);
        }
        for release in releases {
            release.run();
        }
        let mut written = 0;
        while written < batch.len() {
            // Would block, or failed: the writer task sends the rest (and
            // meets the error itself).
            match socket.try_write(&batch[written..]) {
                Ok(n) if n > 0 => written += n,
                _ => break,
            }
        }
        let more = {
            let mut out = lock(&self.out);
            out.writing = false;
            if written < batch.len() {
                out.leftover.extend_from_slice(&batch[written..]);
            }
            out.has_work()
        };
        if more {
            self.writer_wake.notify_one();
        }
    }

    /// Hands the link its socket's writing half (for [`Link::flush`] and
    /// [`Link::write_loop`]).
    pub fn attach(&self, socket: OwnedWriteHalf) {
        if !self.is_closed() {
            *lock(&self.socket) = Some(Arc::new(socket));
        }
    }

    /// Writes whatever is queued, control frames first, then each channel as
    /// far as its credits go, until the link closes. Sends a keepalive when
    /// there has been nothing to send for `keepalive`.
    pub async fn write_loop(self: Arc<Self>, keepalive: Duration) -> Result<(), FabricError> {
        let Some(socket) = lock(&self.socket).clone() else {
            return Ok(());
        };
        let largest = self.send_limits.fragment_bytes(Channel::Data);
        let mut batch = BytesMut::with_capacity(WRITE_BATCH_BYTES + largest);
        let mut releases = Vec::new();
        loop {
            if self.is_closed() {
                return Ok(());
            }
            {
                let mut out = lock(&self.out);
                if !out.writing {
                    out.writing = true;
                    let leftover = out.leftover.split();
                    batch.extend_from_slice(&leftover);
                    out.gather(&mut batch, &mut releases);
                    if batch.is_empty() {
                        out.writing = false;
                    }
                }
            }
            // Buffer space upstream is freed only now that the fragment has
            // left this node: that is the hop-by-hop back-pressure.
            for release in releases.drain(..) {
                release.run();
            }
            if batch.is_empty() {
                // Nothing to send, or a direct write under way (it wakes
                // this task if it leaves anything).
                let woken = tokio::time::timeout(keepalive, self.writer_wake.notified()).await;
                if woken.is_err() {
                    let mut frame = BytesMut::with_capacity(crate::wire::LINK_HEADER_BYTES);
                    LinkHeader::control(Kind::Keepalive, 0).put(&mut frame);
                    self.send_control(frame.freeze());
                }
                continue;
            }
            // A peer that stops reading must not pin this task once the link
            // is declared dead.
            let written = tokio::select! {
                written = write_all(&socket, &batch) => written,
                _ = self.closed() => return Ok(()),
            };
            lock(&self.out).writing = false;
            written?;
            batch.clear();
        }
    }
}

/// Writes all of `bytes` to `socket`, waiting while it is full.
async fn write_all(socket: &OwnedWriteHalf, bytes: &[u8]) -> std::io::Result<()> {
    let mut written = 0;
    while written < bytes.len() {
        socket.writable().await?;
        match socket.try_write(&bytes[written..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragment(flow: u32, stream: u32) -> OutFragment {
        let mut header = LinkHeader::control(Kind::Response, 0);
        header.channel = Channel::Data;
        header.flow = flow;
        header.stream = stream;
        OutFragment {
            header,
            payload: Bytes::new(),
            release: None,
        }
    }

    #[test]
    fn flows_take_turns_one_fragment_each() {
        let mut queues = FlowQueues::default();
        // A bulk flow queues a hundred fragments before a small one arrives.
        for i in 0..100 {
            queues.push(fragment(1, i));
        }
        queues.push(fragment(2, 1000));
        queues.push(fragment(2, 1001));
        let order: Vec<(u32, u32)> = std::iter::from_fn(|| queues.pop())
            .map(|f| (f.header.flow, f.header.stream))
            .take(5)
            .collect();
        assert_eq!(order, vec![(1, 0), (2, 1000), (1, 1), (2, 1001), (1, 2)]);
        // Within a flow, order is kept.
        let rest: Vec<u32> = std::iter::from_fn(|| queues.pop())
            .map(|f| f.header.stream)
            .collect();
        assert_eq!(rest, (3..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_stale_tag_does_not_find_the_slots_next_stream() {
        let mut table = TagTable::new(2);
        let (reply, _answer) = oneshot::channel();
        let first = table
            .insert(Pending::Local {
                pieces: Vec::new(),
                len_bytes: 0,
                reply,
            })
            .unwrap();
        assert!(table.remove(first).is_some());
        let (reply, _answer) = oneshot::channel();
        let second = table
            .insert(Pending::Local {
                pieces: Vec::new(),
                len_bytes: 0,
                reply,
            })
            .unwrap();
        assert_eq!(first & 0xFFFF, second & 0xFFFF, "the slot is reused");
        assert_ne!(first, second, "under a new generation");
        assert!(table.get_mut(first).is_none());
        assert!(table.get_mut(second).is_some());
        let (reply, _answer) = oneshot::channel();
        assert!(table
            .insert(Pending::Local {
                pieces: Vec::new(),
                len_bytes: 0,
                reply
            })
            .is_some());
        let (reply, _answer) = oneshot::channel();
        assert!(
            table
                .insert(Pending::Local {
                    pieces: Vec::new(),
                    len_bytes: 0,
                    reply
                })
                .is_none(),
            "the table is bounded"
        );
        assert_eq!(table.drain().len(), 2);
        assert_eq!(table.len(), 0);
    }

    /// Windows of `window` fragments on both channels, 4 KiB data fragments.
    fn limits(window: u32) -> ReceiveLimits {
        ReceiveLimits {
            data_fragment_bytes: 4096,
            control_window_fragments: window,
            data_window_fragments: window,
        }
    }

    fn both(window: u32) -> LinkLimits {
        LinkLimits {
            receive: limits(window),
            send: limits(window),
        }
    }

    #[test]
    fn fragments_larger_than_announced_break_the_link() {
        let (link, _jobs) = Link::new(1, 7, "peer".into(), 1, 0, both(8), 16);
        link.receive(Channel::Data, 4096).unwrap();
        let error = link.receive(Channel::Data, 4097).unwrap_err().to_string();
        assert!(error.contains("takes at most 4096"), "{error}");
        let error = link
            .receive(Channel::Control, 2049)
            .unwrap_err()
            .to_string();
        assert!(error.contains("takes at most 2048"), "{error}");
    }

    #[test]
    fn data_is_cut_to_the_size_the_peer_announced() {
        let theirs = ReceiveLimits {
            data_fragment_bytes: 3000,
            ..limits(8)
        };
        let (link, _jobs) = Link::new(
            1,
            7,
            "peer".into(),
            1,
            0,
            LinkLimits {
                receive: limits(8),
                send: theirs,
            },
            16,
        );
        let header = LinkHeader::control(Kind::Response, 0);
        assert!(link.send_message(header, Bytes::from(vec![7u8; 7000])));
        let mut out = lock(&link.out);
        let queue = &mut out.queues[Channel::Data.index()];
        let sizes: Vec<u32> =
            std::iter::from_fn(|| queue.pop().map(|f| f.header.len_bytes)).collect();
        assert_eq!(sizes, vec![3000, 3000, 1000]);
    }

    #[test]
    fn credits_bound_what_a_peer_may_send_and_return() {
        let (link, _jobs) = Link::new(1, 7, "peer".into(), 1, 0, both(2), 16);
        link.receive(Channel::Data, 10).unwrap();
        link.receive(Channel::Data, 10).unwrap();
        let error = link.receive(Channel::Data, 10).unwrap_err().to_string();
        assert!(error.contains("against a window of 2"), "{error}");
        // The control channel has its own window.
        link.receive(Channel::Control, 10).unwrap();
        let error = link.add_credits(0, 1).unwrap_err().to_string();
        assert!(error.contains("beyond the window"), "{error}");
    }

    #[test]
    fn a_closed_link_frees_the_slots_of_what_it_held() {
        let (upstream, _jobs) = Link::new(1, 1, "up".into(), 1, 0, both(4), 16);
        let upstream = Arc::new(upstream);
        let (down, _jobs) = Link::new(2, 2, "down".into(), 1, 0, both(4), 16);
        upstream.receive(Channel::Data, 10).unwrap();
        let mut queued = fragment(3, 1);
        queued.release = Some(Release {
            link: upstream.clone(),
            channel: Channel::Data,
        });
        assert!(down.send(queued));
        assert_eq!(upstream.held[1].load(Ordering::Acquire), 1);
        assert!(down.close());
        assert_eq!(upstream.held[1].load(Ordering::Acquire), 0);
        assert_eq!(lock(&upstream.out).credit_return, [0, 1]);
        let mut late = fragment(3, 2);
        upstream.receive(Channel::Data, 10).unwrap();
        late.release = Some(Release {
            link: upstream.clone(),
            channel: Channel::Data,
        });
        assert!(!down.send(late), "a closed link takes nothing");
        assert_eq!(upstream.held[1].load(Ordering::Acquire), 0);
    }

    fn request(flow: u32, stream: u32, first: bool) -> OutFragment {
        let mut fragment = fragment(flow, stream);
        fragment.header.kind = Kind::Request;
        fragment.header.flags = if first { flags::FIRST } else { 0 };
        fragment
    }

    fn queued_aborts(link: &Link) -> usize {
        lock(&link.out).control.len()
    }

    #[test]
    fn a_withdrawn_request_leaves_the_queues_and_is_aborted_only_if_it_began() {
        let (upstream, _jobs) = Link::new(1, 1, "up".into(), 1, 0, both(8), 16);
        let upstream = Arc::new(upstream);
        let (down, _jobs) = Link::new(2, 2, "down".into(), 1, 0, both(8), 16);
        // Flow 1 queues stream 10 whole (forwarded: each holds a slot
        // upstream) between two fragments of stream 11; flow 2 queues one
        // answer fragment for stream 10, which is not the request's.
        down.send(request(1, 11, true));
        for first in [true, false, false] {
            upstream.receive(Channel::Data, 10).unwrap();
            let mut forwarded = request(1, 10, first);
            forwarded.release = Some(Release {
                link: upstream.clone(),
                channel: Channel::Data,
            });
            down.send(forwarded);
        }
        down.send(request(1, 11, false));
        down.send(fragment(2, 10));
        down.withdraw_request(10);
        assert_eq!(
            upstream.held[1].load(Ordering::Acquire),
            0,
            "the slots upstream are free"
        );
        assert_eq!(queued_aborts(&down), 0, "the peer never got any of it");
        let left: Vec<(u32, u32, Kind)> = {
            let mut out = lock(&down.out);
            std::iter::from_fn(|| out.queues[Channel::Data.index()].pop())
                .map(|f| (f.header.flow, f.header.stream, f.header.kind))
                .collect()
        };
        assert_eq!(
            left,
            vec![
                (1, 11, Kind::Request),
                (2, 10, Kind::Response),
                (1, 11, Kind::Request)
            ],
            "the rest keep their order and their turns"
        );
        // A request whose first fragment went out is aborted.
        down.send(request(3, 12, false));
        down.withdraw_request(12);
        assert_eq!(queued_aborts(&down), 1);
        assert!(lock(&down.out).queues[Channel::Data.index()]
            .pop()
            .is_none());
    }

    #[tokio::test]
    async fn a_job_polled_first_finishes_there_or_goes_on_in_the_runner() {
        use std::sync::atomic::AtomicUsize;
        let (link, jobs) = Link::new(1, 7, "peer".into(), 1, 0, both(8), 16);
        let link = Arc::new(link);
        let done = Arc::new(AtomicUsize::new(0));
        // Ready at once: it ran on this task, and no job reached the queue.
        let counter = done.clone();
        link.run_local(
            1,
            async move {
                counter.fetch_add(1, Ordering::AcqRel);
            },
            true,
        );
        assert_eq!(done.load(Ordering::Acquire), 1);
        // Waiting on its first poll: the runner finishes it, woken by what
        // it waits for (not by the no-op waker of the first poll).
        let (go, wait) = oneshot::channel::<()>();
        let counter = done.clone();
        link.run_local(
            2,
            async move {
                let _ = wait.await;
                counter.fetch_add(1, Ordering::AcqRel);
            },
            true,
        );
        assert_eq!(done.load(Ordering::Acquire), 1);
        let runner = tokio::spawn(link.clone().local_runner(jobs));
        tokio::task::yield_now().await;
        go.send(()).unwrap();
        for _ in 0..1000 {
            if done.load(Ordering::Acquire) == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(done.load(Ordering::Acquire), 2);
        // A job that may still be stopped is dropped by stop_local after
        // its first poll too.
        let (_keep, never) = oneshot::channel::<()>();
        let counter = done.clone();
        link.run_local(
            3,
            async move {
                let _ = never.await;
                counter.fetch_add(1, Ordering::AcqRel);
            },
            true,
        );
        link.stop_local(3);
        link.close();
        runner.await.unwrap();
        assert_eq!(done.load(Ordering::Acquire), 2);
    }

    #[tokio::test]
    async fn a_link_with_one_request_writes_from_the_sender_and_a_busy_one_leaves_it_queued() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dialled = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (dialled, accepted) = tokio::join!(dialled, listener.accept());
        let (_, writer) = dialled.unwrap().into_split();
        let (mut peer, _) = accepted.unwrap();
        let (link, _jobs) = Link::new(1, 7, "peer".into(), 1, 0, both(8), 16);
        link.attach(writer);
        let queued = |link: &Link| {
            let out = lock(&link.out);
            !out.queues[0].is_empty() || !out.queues[1].is_empty()
        };
        // One request in flight, no writer task: the bytes reach the peer.
        let (reply, _answer) = oneshot::channel();
        let stream = lock(&link.outbound)
            .insert(Pending::Local {
                pieces: Vec::new(),
                len_bytes: 0,
                reply,
            })
            .unwrap();
        let mut header = LinkHeader::control(Kind::Request, 0);
        header.stream = stream;
        assert!(link.send_message(header, Bytes::from(vec![7u8; 100])));
        assert!(!queued(&link), "written by the sender");
        let mut got = vec![0u8; crate::wire::LINK_HEADER_BYTES + 100];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[crate::wire::LINK_HEADER_BYTES..], &[7u8; 100][..]);
        // A second request in flight: the fragments wait for the writer
        // task, which batches them.
        let (reply, _answer) = oneshot::channel();
        lock(&link.outbound)
            .insert(Pending::Local {
                pieces: Vec::new(),
                len_bytes: 0,
                reply,
            })
            .unwrap();
        assert!(link.send_message(header, Bytes::from(vec![8u8; 100])));
        assert!(queued(&link), "left to the writer task");
        let link = Arc::new(link);
        let writer = tokio::spawn(link.clone().write_loop(Duration::from_secs(60)));
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[crate::wire::LINK_HEADER_BYTES..], &[8u8; 100][..]);
        link.close();
        writer.await.unwrap().unwrap();
    }

    /// What a peer's frames do to a link's receive windows and send credits.
    #[derive(Debug, Clone)]
    enum PeerAct {
        /// A fragment of `len_bytes` arrives on the channel.
        Fragment(bool, usize),
        /// This end frees a slot of the channel, if it holds one.
        Release(bool),
        /// A Credit frame returns `control` and `data` credits.
        Credits(u32, u32),
    }

    fn peer_acts() -> impl proptest::strategy::Strategy<Value = Vec<PeerAct>> {
        use proptest::prelude::*;
        let length = prop_oneof![
            0usize..5000,
            Just(usize::MAX),
            any::<u32>().prop_map(|n| n as usize)
        ];
        let credits = prop_oneof![Just(0u32), 0u32..4, Just(u32::MAX), any::<u32>()];
        let act = prop_oneof![
            4 => (any::<bool>(), length).prop_map(|(data, len)| PeerAct::Fragment(data, len)),
            3 => any::<bool>().prop_map(PeerAct::Release),
            1 => (credits.clone(), credits).prop_map(|(c, d)| PeerAct::Credits(c, d)),
        ];
        proptest::collection::vec(act, 0..40)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 256,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Whatever a peer sends, a fragment is taken only within the size
        /// and window this end announced, and credits only up to the
        /// window; the first breach is an error (which ends the link), never
        /// an overflow or a panic.
        #[test]
        fn windows_and_credits_hold_against_any_peer(acts in peer_acts()) {
            let window = 4;
            let (link, _jobs) = Link::new(1, 7, "peer".into(), 1, 0, both(window), 16);
            let mut held = [0u32; 2];
            let channel_of = |data: bool| if data { Channel::Data } else { Channel::Control };
            for act in acts {
                match act {
                    PeerAct::Fragment(data, len_bytes) => {
                        let channel = channel_of(data);
                        let fits = len_bytes <= limits(window).fragment_bytes(channel)
                            && held[channel.index()] < window;
                        let result = link.receive(channel, len_bytes);
                        proptest::prop_assert_eq!(result.is_ok(), fits, "{:?}", result);
                        if !fits {
                            break;
                        }
                        held[channel.index()] += 1;
                    }
                    PeerAct::Release(data) => {
                        let channel = channel_of(data);
                        if held[channel.index()] > 0 {
                            link.release(channel);
                            held[channel.index()] -= 1;
                        }
                    }
                    PeerAct::Credits(control, data) => {
                        // Nothing was sent, so every credit is still here.
                        let result = link.add_credits(control, data);
                        proptest::prop_assert_eq!(result.is_ok(), control == 0 && data == 0);
                        if result.is_err() {
                            break;
                        }
                    }
                }
            }
        }
    }
}
