//! The command engine of a node: [`Engine`]. It owns the commands that
//! entered at this node (Minerva's command/status blocks), resolves their
//! targets into segments on nodes, sends each node a local run over the
//! segments it holds, and merges the parts in target order (the global
//! kernel). It also serves the local runs other nodes send here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use quarry_fabric::LinearSpace;
use quarry_proto::{NodeId, Service};
use quarry_store::{BucketName, ObjectKey, ObjectStore, RemoteNode, MAX_PAGE_ITEMS};
use quarry_volume::BlockVolumes;
use tokio::sync::{watch, Notify, Semaphore};

use crate::engine_error::ComputeError;
use crate::job::{
    CommandId, CommandResult, CommandState, CommandStatus, Job, Limits, Outcome, QuerySpec,
    RmwBatch, Target, TargetOutput,
};
use crate::local::{run_local, LocalData};
use crate::merge::Merger;
use crate::output::OutputPiece;
use crate::output_queue::{piece_bytes, OutputQueue, PiecesAnswer, ReadError};
use crate::peers::{Peers, StoreVia, VolumesVia};
use crate::plan::{chain_runs, plan_runs, RUNS_IN_FLIGHT};
use crate::scan::{compile, Part, ScanKernel};
use crate::spec::KernelSpec;
use crate::tuner::ReadTuner;
use crate::wire::{
    decode, encode, ComputeAnswer, ComputeCall, FailureKind, LocalAnswer, LocalRun, Resume,
    Segment, Source, MAX_AWAIT_MS, MAX_OUTPUT_SLICE_BYTES, MAX_OUTPUT_WAIT_MS,
    MAX_RESOLVED_TARGETS, MAX_RESULT_SLICE_BYTES, MAX_RMW_OPS, MAX_SEGMENTS_PER_RUN, MAX_TARGETS,
};

/// Commands a node runs at once; more wait, queued.
pub const MAX_RUNNING_COMMANDS: usize = 16;
/// Unfinished (queued or running) commands a node holds; more are refused
/// as busy.
pub const MAX_UNFINISHED_COMMANDS: usize = 1024;
/// Finished commands a node keeps for their status and result; the oldest
/// are dropped first.
pub const MAX_FINISHED_COMMANDS: usize = 1024;
/// Bytes of results a node keeps for finished commands; past it, the
/// oldest finished commands are dropped (a client reads its result soon
/// after the command is done).
pub const MAX_KEPT_RESULT_BYTES: u64 = 1 << 30;
/// Segments (chunks, volume pages, linear pages) one command's targets may
/// resolve into: bounds the entry node's memory for the plan.
pub const MAX_SEGMENTS_PER_COMMAND: usize = 4 << 20;

pub(crate) struct Command {
    id: CommandId,
    kernel: &'static str,
    submitted: Instant,
    state: watch::Sender<CommandState>,
    bytes_done: AtomicU64,
    bytes_total: AtomicU64,
    finished_ms: AtomicU64,
    /// The output as the client reads it whole, encoded on the first
    /// `Result` call (see [`OutputQueue::whole`]).
    result: OnceLock<Bytes>,
    /// The output pieces not read yet.
    output: OutputQueue,
    /// Most bytes of the whole result the client may ask for.
    result_limit_bytes: u64,
    /// The most bytes of parts and output the entry node held at once.
    peak_memory_bytes: AtomicU64,
    cancel: Notify,
}

impl Command {
    pub(crate) fn add_bytes_total(&self, bytes: u64) {
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn add_bytes_done(&self, bytes: u64) {
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) async fn push_output(&self, piece: OutputPiece) {
        self.output.push(piece).await;
    }

    /// Bytes the command keeps for its client now.
    fn kept_bytes(&self) -> u64 {
        self.result.get().map_or(0, |r| r.len() as u64) + self.output.held_bytes()
    }

    /// Records what the entry node holds for the command now.
    fn note_memory(&self, held_bytes: u64) {
        self.peak_memory_bytes
            .fetch_max(held_bytes, Ordering::Relaxed);
    }

    fn status(&self) -> CommandStatus {
        let state = self.state.borrow().clone();
        let elapsed_ms = if state.is_final() {
            self.finished_ms.load(Ordering::Relaxed)
        } else {
            self.submitted.elapsed().as_millis() as u64
        };
        CommandStatus {
            id: self.id,
            kernel: self.kernel.to_string(),
            state,
            bytes_done: self.bytes_done.load(Ordering::Relaxed),
            bytes_total: self.bytes_total.load(Ordering::Relaxed),
            elapsed_ms,
            result_bytes: self.kept_bytes(),
            peak_memory_bytes: self.peak_memory_bytes.load(Ordering::Relaxed),
        }
    }

    fn finish(&self, state: CommandState) {
        self.finished_ms.store(
            self.submitted.elapsed().as_millis() as u64,
            Ordering::Relaxed,
        );
        // Only the first final state sticks: a cancel that races the end of
        // the work does not turn a done command into a cancelled one.
        self.state.send_if_modified(|s| {
            if s.is_final() {
                false
            } else {
                *s = state;
                true
            }
        });
    }
}

#[derive(Default)]
struct Table {
    next_id: CommandId,
    commands: BTreeMap<CommandId, Arc<Command>>,
}

impl Table {
    /// The finished commands, oldest first.
    fn finished(&self) -> Vec<CommandId> {
        self.commands
            .values()
            .filter(|c| c.state.borrow().is_final())
            .map(|c| c.id)
            .collect()
    }
}

/// A node's command engine.
pub struct Engine<P> {
    local: Arc<LocalData>,
    peers: Arc<P>,
    tuner: Arc<ReadTuner>,
    table: Mutex<Table>,
    slots: Arc<Semaphore>,
}

/// A target resolved into the segments that hold its bytes.
struct Resolved {
    name: String,
    size_bytes: u64,
    segments: Vec<(NodeId, Segment)>,
}

impl<P: Peers> Engine<P> {
    /// An engine over this node's data, reaching other nodes through
    /// `peers`.
    pub fn new(local: LocalData, peers: Arc<P>) -> Arc<Engine<P>> {
        Engine::with_tuner(local, peers, ReadTuner::new())
    }

    /// An engine whose local runs read with `tuner` (adaptive, or pinned to
    /// one setting by the node's `[compute]` configuration).
    /// The tuner's setting is in force from here on, for every read on
    /// the node's device (see [`LocalData`]), not only from the first scan.
    pub fn with_tuner(local: LocalData, peers: Arc<P>, tuner: ReadTuner) -> Arc<Engine<P>> {
        local.apply(tuner.current());
        Arc::new(Engine {
            local: Arc::new(local),
            peers,
            tuner: Arc::new(tuner),
            table: Mutex::new(Table {
                next_id: 1,
                ..Table::default()
            }),
            slots: Arc::new(Semaphore::new(MAX_RUNNING_COMMANDS)),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table holds only Arcs and counters: usable after a panic
        // elsewhere.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn command(&self, id: CommandId) -> Result<Arc<Command>, ComputeError> {
        self.table()
            .commands
            .get(&id)
            .cloned()
            .ok_or(ComputeError::NoSuchCommand {
                id,
                node: self.local.node,
            })
    }

    /// Serves one encoded compute call; the answer is always bytes to send
    /// back (errors included).
    pub async fn serve_call(self: &Arc<Self>, body: Bytes) -> Bytes {
        let answer = match decode::<ComputeCall>("compute call", &body) {
            Ok(ComputeCall::Output {
                id,
                from_piece,
                max_bytes,
            }) => match self.output(id, from_piece, max_bytes).await {
                // Encoded from the queue's pieces themselves, not from
                // copies of them in an answer.
                Ok(pieces) => return Bytes::from(encode(&pieces)),
                Err(e) => Err(e),
            },
            Ok(call) => self.serve(call).await,
            Err(e) => Err(e.into()),
        };
        let answer = answer.unwrap_or_else(|e| ComputeAnswer::Failed(e.to_failure()));
        // A local run's parts may be megabytes of lines: encoded off the
        // node's reactor, so its links and other requests keep moving.
        let encoded = match answer {
            ComputeAnswer::Local(_) | ComputeAnswer::QueryPart(_) => {
                tokio::task::spawn_blocking(move || encode(&answer))
                    .await
                    .unwrap_or_else(|e| {
                        let e = ComputeError::Storage {
                            node: self.local.node,
                            message: format!("encoding the answer failed: {e}"),
                        };
                        encode(&ComputeAnswer::Failed(e.to_failure()))
                    })
            }
            _ => encode(&answer),
        };
        // An answer must fit one protocol frame (with room for the reply's
        // head): a local run whose parts do not is refused by name rather
        // than failing in the frame encoder with a generic error.
        let limit = quarry_proto::MAX_BODY_BYTES as usize - 1024;
        if encoded.len() > limit {
            let e = ComputeError::TooLarge {
                node: self.local.node,
                message: format!(
                    "node {}'s answer takes {} bytes, more than one message carries ({limit}); \
                     a local run's partial results (matching lines, a histogram) are too large: \
                     ask for counts, or name fewer or smaller targets",
                    self.local.node,
                    encoded.len()
                ),
            };
            return Bytes::from(encode(&ComputeAnswer::Failed(e.to_failure())));
        }
        Bytes::from(encoded)
    }

    async fn output(
        &self,
        id: CommandId,
        from_piece: u64,
        max_bytes: u32,
    ) -> Result<PiecesAnswer, ComputeError> {
        let command = self.command(id)?;
        read_output(&command, from_piece, max_bytes).await
    }

    async fn serve(self: &Arc<Self>, call: ComputeCall) -> Result<ComputeAnswer, ComputeError> {
        match call {
            ComputeCall::Submit {
                job,
                targets,
                limits,
                members,
            } => Ok(ComputeAnswer::Submitted {
                id: self.submit(job, targets, limits, members)?,
            }),
            ComputeCall::Status { id } => Ok(ComputeAnswer::Status(self.command(id)?.status())),
            ComputeCall::Await { id, timeout_ms } => {
                let command = self.command(id)?;
                let mut rx = command.state.subscribe();
                let wait = Duration::from_millis(timeout_ms.min(MAX_AWAIT_MS));
                // Timing out is an answer too: the status as it is.
                let _ = tokio::time::timeout(wait, rx.wait_for(|s| s.is_final())).await;
                Ok(ComputeAnswer::Status(command.status()))
            }
            ComputeCall::Cancel { id } => {
                let command = self.command(id)?;
                command.finish(CommandState::Cancelled);
                command.cancel.notify_one();
                Ok(ComputeAnswer::Status(command.status()))
            }
            ComputeCall::Result {
                id,
                offset,
                max_bytes,
            } => {
                let command = self.command(id)?;
                let result = self.whole_result(&command)?;
                let total = result.len() as u64;
                let start = offset.min(total) as usize;
                let take =
                    (max_bytes.min(MAX_RESULT_SLICE_BYTES) as usize).min(result.len() - start);
                Ok(ComputeAnswer::ResultSlice {
                    total_bytes: total,
                    bytes: result[start..start + take].to_vec(),
                })
            }
            ComputeCall::Output {
                id,
                from_piece,
                max_bytes,
            } => {
                let PiecesAnswer {
                    first_piece,
                    pieces,
                    end,
                } = self.output(id, from_piece, max_bytes).await?;
                Ok(ComputeAnswer::Pieces {
                    first_piece,
                    pieces: pieces.iter().map(|p| (**p).clone()).collect(),
                    end,
                })
            }
            ComputeCall::List => Ok(ComputeAnswer::Statuses(
                self.table().commands.values().map(|c| c.status()).collect(),
            )),
            ComputeCall::RunLocal(run) => Ok(ComputeAnswer::Local(
                run_local(&self.local, &self.tuner, run).await?,
            )),
            ComputeCall::RunQuery(run) => {
                let part =
                    self.spawn_query_run(run)
                        .await
                        .map_err(|e| ComputeError::Storage {
                            node: self.local.node,
                            message: format!("a query run stopped: {e}"),
                        })??;
                Ok(ComputeAnswer::QueryPart(part))
            }
        }
    }

    /// A done command's output as one encoded result: while no reader
    /// took pieces of it as it streamed, the engine still holds all of it.
    fn whole_result(&self, command: &Command) -> Result<Bytes, ComputeError> {
        let id = command.id;
        let state = command.state.borrow().clone();
        if state != CommandState::Done {
            return Err(ComputeError::NotDone {
                id,
                state: format!("{state:?}"),
            });
        }
        if let Some(result) = command.result.get() {
            return Ok(result.clone());
        }
        let whole = command.output.whole().ok_or_else(|| {
            ComputeError::BadRequest(format!(
                "command {id}'s output was read as it streamed: the pieces read are gone \
                 (read the rest with Output calls)"
            ))
        })?;
        let bytes = Bytes::from(encode(&whole));
        if bytes.len() as u64 > command.result_limit_bytes {
            return Err(result_too_large(
                bytes.len() as u64,
                command.result_limit_bytes,
            ));
        }
        Ok(command.result.get_or_init(|| bytes).clone())
    }

    /// Drops the oldest finished commands while what they keep exceeds
    /// [`MAX_KEPT_RESULT_BYTES`].
    fn drop_old_results(&self) {
        let mut table = self.table();
        let mut kept: u64 = table.commands.values().map(|c| c.kept_bytes()).sum();
        for id in table.finished() {
            if kept <= MAX_KEPT_RESULT_BYTES {
                break;
            }
            if let Some(c) = table.commands.remove(&id) {
                kept = kept.saturating_sub(c.kept_bytes());
            }
        }
    }

    /// Starts a command; returns its number at once.
    pub fn submit(
        self: &Arc<Self>,
        job: Job,
        targets: Vec<Target>,
        limits: Limits,
        members: Vec<NodeId>,
    ) -> Result<CommandId, ComputeError> {
        let kernel_name = job.kernel_name();
        let prepared = prepare(job, &targets, &limits)?;
        let command = self.register(kernel_name, &limits)?;
        let engine = Arc::clone(self);
        let id = command.id;
        tokio::spawn(async move {
            engine
                .run_command(&command, prepared, targets, limits, members)
                .await;
            engine.drop_old_results();
        });
        Ok(id)
    }

    /// Makes room for a new command in the table (dropping the oldest
    /// finished ones past [`MAX_FINISHED_COMMANDS`]) and enters it, queued;
    /// busy when the node holds [`MAX_UNFINISHED_COMMANDS`] already.
    fn register(
        &self,
        kernel_name: &'static str,
        limits: &Limits,
    ) -> Result<Arc<Command>, ComputeError> {
        let mut table = self.table();
        let unfinished = table
            .commands
            .values()
            .filter(|c| !c.state.borrow().is_final())
            .count();
        if unfinished >= MAX_UNFINISHED_COMMANDS {
            return Err(ComputeError::Busy {
                node: self.local.node,
                commands: MAX_UNFINISHED_COMMANDS,
            });
        }
        let finished = table.finished();
        for id in finished
            .iter()
            .take(finished.len().saturating_sub(MAX_FINISHED_COMMANDS - 1))
        {
            table.commands.remove(id);
        }
        let id = table.next_id;
        table.next_id += 1;
        let command = Arc::new(Command {
            id,
            kernel: kernel_name,
            submitted: Instant::now(),
            state: watch::channel(CommandState::Queued).0,
            bytes_done: AtomicU64::new(0),
            bytes_total: AtomicU64::new(0),
            finished_ms: AtomicU64::new(0),
            result: OnceLock::new(),
            output: OutputQueue::new(output_bound_bytes(limits)),
            result_limit_bytes: limits.result_bytes,
            peak_memory_bytes: AtomicU64::new(0),
            cancel: Notify::new(),
        });
        table.commands.insert(id, command.clone());
        Ok(command)
    }

    /// Runs a registered command once a slot is free, until it ends, is
    /// cancelled or runs out of time, and records how it ended.
    async fn run_command(
        &self,
        command: &Command,
        prepared: Prepared,
        targets: Vec<Target>,
        limits: Limits,
        members: Vec<NodeId>,
    ) {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(limits.time_ms);
        let work =
            async {
                let _slot =
                    self.slots.clone().acquire_owned().await.map_err(|_| {
                        ComputeError::BadRequest("the engine is shutting down".into())
                    })?;
                command.state.send_if_modified(|s| {
                    let queued = *s == CommandState::Queued;
                    if queued {
                        *s = CommandState::Running;
                    }
                    queued
                });
                self.execute(command, prepared, targets, limits, members)
                    .await
            };
        let outcome = tokio::select! {
            r = work => Some(r),
            _ = command.cancel.notified() => None,
            _ = tokio::time::sleep_until(deadline) => Some(Err(ComputeError::Limit {
                what: "time",
                detail: format!("the command ran past its {} ms", limits.time_ms),
            })),
        };
        match outcome {
            None => command.finish(CommandState::Cancelled),
            Some(Ok(())) => {
                command.output.complete();
                command.finish(CommandState::Done);
            }
            Some(Err(e)) => command.finish(CommandState::Failed {
                reason: e.to_string(),
            }),
        }
        let elapsed_s = command.submitted.elapsed().as_secs_f64();
        let bytes_done = command.bytes_done.load(Ordering::Relaxed);
        tracing::debug!(
            id = command.id,
            state = ?command.state.borrow().clone(),
            bytes_done,
            elapsed_ms = format!("{:.1}", elapsed_s * 1e3),
            mib_per_s = format!("{:.0}", bytes_done as f64 / f64::from(1 << 20) / elapsed_s.max(1e-9)),
            "command finished"
        );
    }

    async fn execute(
        &self,
        command: &Command,
        job: Prepared,
        targets: Vec<Target>,
        limits: Limits,
        members: Vec<NodeId>,
    ) -> Result<(), ComputeError> {
        let mut members = if members.is_empty() {
            self.peers.members()
        } else {
            members
        };
        members.sort_unstable();
        members.dedup();
        let deadline = command.submitted + Duration::from_millis(limits.time_ms);
        match job {
            Prepared::Scan(spec, kernel) => {
                let resolved = self.resolve(&targets, &members).await?;
                let total: u64 = resolved.iter().map(|r| r.size_bytes).sum();
                command.bytes_total.store(total, Ordering::Relaxed);
                self.scan(command, &spec, kernel, resolved, &limits, deadline)
                    .await
            }
            Prepared::Query(spec) => {
                self.query(command, &spec, &limits, &members, deadline)
                    .await
            }
            Prepared::Rmw(batch) => {
                let volumes = BlockVolumes::new(Arc::new(VolumesVia(self.peers.clone())), members);
                let volume = volumes
                    .open(&batch.volume)
                    .await
                    .map_err(|e| ComputeError::Target(e.to_string()))?;
                let ops: Vec<(u64, u64)> = batch
                    .ops
                    .iter()
                    .map(|o| (o.offset_bytes, o.delta))
                    .collect();
                command
                    .bytes_total
                    .store(ops.len() as u64 * 8, Ordering::Relaxed);
                let values = volume
                    .add_u64s(&ops)
                    .await
                    .map_err(|e| ComputeError::Target(e.to_string()))?;
                command
                    .bytes_done
                    .store(ops.len() as u64 * 8, Ordering::Relaxed);
                let result = CommandResult {
                    outcome: Outcome::Rmw { values },
                    bytes_scanned: ops.len() as u64 * 8,
                    bytes_from_nodes: ops.len() as u64 * 8,
                };
                command.output.push(OutputPiece::Whole(result)).await;
                Ok(())
            }
        }
    }

    /// Expands the targets into byte ranges and the segments holding them.
    async fn resolve(
        &self,
        targets: &[Target],
        members: &[NodeId],
    ) -> Result<Vec<Resolved>, ComputeError> {
        let mut out: Vec<Resolved> = Vec::new();
        let mut objects: Option<ObjectStore<RemoteNode<StoreVia<P>>>> = None;
        let mut linear: Option<LinearSpace> = None;
        for target in targets {
            match target {
                Target::Object { bucket, key } => {
                    let store = self.objects(&mut objects, members)?;
                    let (b, k) = names(bucket, key)?;
                    let m = store
                        .head(&b, &k)
                        .await
                        .map_err(|e| ComputeError::Target(format!("{target}: {e}")))?;
                    out.push(object_segments(store, &m, out.len()));
                }
                Target::Prefix { bucket, prefix } => {
                    let store = self.objects(&mut objects, members)?;
                    resolve_prefix(store, target, bucket, prefix, &mut out).await?;
                }
                Target::Volume {
                    name,
                    offset_bytes,
                    len_bytes,
                } => {
                    let range = (*offset_bytes, *len_bytes);
                    let resolved = self
                        .resolve_volume(target, name, range, members, out.len())
                        .await?;
                    out.push(resolved);
                }
                Target::Linear { first_page, pages } => {
                    if linear.is_none() {
                        linear = Some(self.linear_space(target, members).await?);
                    }
                    let Some(space) = linear.as_ref() else {
                        return Err(ComputeError::Target(format!("{target}: no linear space")));
                    };
                    out.push(linear_segments(
                        space,
                        target,
                        (*first_page, *pages),
                        out.len(),
                    )?);
                }
            }
            if out.len() > MAX_RESOLVED_TARGETS {
                return Err(too_many_targets());
            }
            let segments: usize = out.iter().map(|r| r.segments.len()).sum();
            if segments > MAX_SEGMENTS_PER_COMMAND {
                return Err(ComputeError::BadRequest(format!(
                    "the targets span {segments} chunks or pages, more than the \
                     {MAX_SEGMENTS_PER_COMMAND} one command may; split the command"
                )));
            }
        }
        Ok(out)
    }

    /// Bytes `range` (offset, length or to the end) of block volume
    /// `name`, target number `index`, page by page on the nodes of its
    /// stripe.
    async fn resolve_volume(
        &self,
        target: &Target,
        name: &str,
        range: (u64, Option<u64>),
        members: &[NodeId],
        index: usize,
    ) -> Result<Resolved, ComputeError> {
        let (offset_bytes, len_bytes) = range;
        let volumes = BlockVolumes::new(Arc::new(VolumesVia(self.peers.clone())), members.to_vec());
        let volume = volumes
            .open(name)
            .await
            .map_err(|e| ComputeError::Target(format!("{target}: {e}")))?;
        let size = volume.size_bytes();
        let len = len_bytes.unwrap_or(size.saturating_sub(offset_bytes));
        let end = offset_bytes
            .checked_add(len)
            .filter(|&e| e <= size && offset_bytes <= size)
            .ok_or_else(|| {
                ComputeError::Target(format!(
                    "{target}: bytes {offset_bytes}..+{len} are not inside the \
                     volume's {size} bytes"
                ))
            })?;
        let page_size = volume.page_size() as u64;
        let space = volume.def().space();
        let mut segments = Vec::new();
        let mut at = offset_bytes;
        while at < end {
            let page = at / page_size;
            let start = at % page_size;
            let take = (page_size - start).min(end - at);
            let (node, local) = volume
                .locate(page)
                .map_err(|e| ComputeError::Target(format!("{target}: {e}")))?;
            segments.push((
                node,
                Segment {
                    target: index as u32,
                    offset: at - offset_bytes,
                    source: Source::VolumePage {
                        space,
                        page: local,
                        start: start as u32,
                        end: (start + take) as u32,
                    },
                },
            ));
            at += take;
        }
        Ok(Resolved {
            name: target.to_string(),
            size_bytes: len,
            segments,
        })
    }

    /// The linear page space over `members`, from their geometries.
    async fn linear_space(
        &self,
        target: &Target,
        members: &[NodeId],
    ) -> Result<LinearSpace, ComputeError> {
        let mut geometries = Vec::with_capacity(members.len());
        for &node in members {
            let g = self
                .peers
                .geometry(node)
                .await
                .map_err(|message| ComputeError::Remote { node, message })?;
            geometries.push((node, g));
        }
        LinearSpace::new(geometries).map_err(|e| ComputeError::Target(format!("{target}: {e}")))
    }

    pub(crate) fn local_node(&self) -> NodeId {
        self.local.node
    }

    pub(crate) fn peers(&self) -> &Arc<P> {
        &self.peers
    }

    pub(crate) fn objects<'a>(
        &self,
        slot: &'a mut Option<ObjectStore<RemoteNode<StoreVia<P>>>>,
        members: &[NodeId],
    ) -> Result<&'a ObjectStore<RemoteNode<StoreVia<P>>>, ComputeError> {
        if slot.is_none() {
            let transport = Arc::new(StoreVia(self.peers.clone()));
            let nodes = members
                .iter()
                .map(|&id| Arc::new(RemoteNode::new(id, transport.clone())));
            *slot = Some(
                ObjectStore::new(nodes)
                    .map_err(|e| ComputeError::BadRequest(format!("placement members: {e}")))?,
            );
        }
        slot.as_ref()
            .ok_or_else(|| ComputeError::BadRequest("no object store".into()))
    }

    /// Runs a scan kernel over resolved targets and hands the merged
    /// output to the command's queue, piece by piece.
    async fn scan(
        &self,
        command: &Command,
        spec: &KernelSpec,
        kernel: Arc<dyn ScanKernel>,
        targets: Vec<Resolved>,
        limits: &Limits,
        deadline: Instant,
    ) -> Result<(), ComputeError> {
        let (bytes_scanned, bytes_from_nodes) = if kernel.parallel() {
            self.scan_parallel(command, spec, kernel.as_ref(), targets, limits, deadline)
                .await?
        } else {
            self.scan_chained(command, spec, kernel.as_ref(), targets, limits, deadline)
                .await?
        };
        command
            .output
            .push(OutputPiece::End {
                bytes_scanned,
                bytes_from_nodes,
            })
            .await;
        Ok(())
    }

    /// A kernel whose parts join in any order: runs on every node at once,
    /// their parts merged in target order as they come (see [`Merger`]).
    /// Returns the bytes scanned and the bytes the nodes sent.
    async fn scan_parallel(
        &self,
        command: &Command,
        spec: &KernelSpec,
        kernel: &dyn ScanKernel,
        targets: Vec<Resolved>,
        limits: &Limits,
        deadline: Instant,
    ) -> Result<(u64, u64), ComputeError> {
        let pacing = Pacing::new(spec, limits);
        let names = targets.iter().map(|t| (t.name.clone(), t.size_bytes));
        let mut merger = Merger::new(kernel, names, pacing.output_piece_bytes);
        let mut pending = plan_runs(targets.iter().map(|t| t.segments.as_slice()));
        drop(targets);
        let mut in_flight = futures::stream::FuturesUnordered::new();
        let mut in_flight_keys: Vec<(u32, u64)> = Vec::new();
        let mut totals = (0u64, 0u64);
        emit(command, &mut merger, limits).await?;
        loop {
            while in_flight.len() < pacing.runs_in_flight {
                let held = merger.held_bytes() + command.output.held_bytes() as usize;
                let Some(i) = pacing.next_work(&pending, &in_flight_keys, held) else {
                    break;
                };
                let (node, segments) = pending.remove(i);
                in_flight_keys.push(work_key(&segments));
                let bounds = RunBounds {
                    limits,
                    deadline,
                    piece_bytes: pacing.node_piece_bytes,
                };
                in_flight.push(async move {
                    let answer = self
                        .run_on(node, spec, segments.clone(), None, bounds)
                        .await;
                    (node, segments, answer)
                });
            }
            let Some((node, segments, answer)) = in_flight.next().await else {
                break;
            };
            let key = work_key(&segments);
            in_flight_keys.retain(|k| *k != key);
            let (answer, wire) = match answer {
                Err(ComputeError::TooLarge { .. }) if covers_more_than_a_byte(&segments) => {
                    // Runs change nothing: the halves run again.
                    let (a, b) = halve(segments);
                    pending.insert(0, (node, b));
                    pending.insert(0, (node, a));
                    continue;
                }
                other => other?,
            };
            totals.0 += answer.bytes_scanned;
            totals.1 += wire;
            command
                .bytes_done
                .fetch_add(answer.bytes_scanned, Ordering::Relaxed);
            if let Some(rest) = accept(&mut merger, node, &segments, answer)? {
                pending.insert(0, (node, rest));
            }
            emit(command, &mut merger, limits).await?;
        }
        if !merger.done() {
            return Err(ComputeError::BadRequest(
                "the nodes' parts left bytes of a target uncovered".into(),
            ));
        }
        Ok(totals)
    }

    /// A kernel that folds each target in order (SHA-256 is a chain):
    /// each target's ranges node after node, the state handed on.
    async fn scan_chained(
        &self,
        command: &Command,
        spec: &KernelSpec,
        kernel: &dyn ScanKernel,
        targets: Vec<Resolved>,
        limits: &Limits,
        deadline: Instant,
    ) -> Result<(u64, u64), ComputeError> {
        let scanned = AtomicU64::new(0);
        let from_nodes = AtomicU64::new(0);
        let chains: Vec<_> = targets
            .iter()
            .map(|target| {
                let (scanned, from_nodes) = (&scanned, &from_nodes);
                async move {
                    let mut state = kernel.empty(0);
                    for (node, segments) in chain_runs(&target.segments) {
                        let (answer, wire) = self
                            .run_on(
                                node,
                                spec,
                                segments,
                                Some(state),
                                RunBounds {
                                    limits,
                                    deadline,
                                    piece_bytes: 0,
                                },
                            )
                            .await?;
                        scanned.fetch_add(answer.bytes_scanned, Ordering::Relaxed);
                        from_nodes.fetch_add(wire, Ordering::Relaxed);
                        command
                            .bytes_done
                            .fetch_add(answer.bytes_scanned, Ordering::Relaxed);
                        let mut parts = answer.parts;
                        state = match (parts.pop(), parts.is_empty()) {
                            (Some((_, p)), true) => p,
                            _ => {
                                return Err(ComputeError::Remote {
                                    node,
                                    message: "a chained run must answer one part".into(),
                                })
                            }
                        };
                    }
                    Ok::<_, ComputeError>(state)
                }
            })
            .collect();
        // In order: each target's answer goes out as soon as it and the
        // ones before it are done.
        let results = stream::iter(chains).buffered(RUNS_IN_FLIGHT);
        let mut results = std::pin::pin!(results);
        let mut names = targets.iter();
        while let Some(state) = results.try_next().await? {
            let Some(target) = names.next() else {
                return Err(ComputeError::BadRequest("more answers than targets".into()));
            };
            let piece = OutputPiece::Target(TargetOutput {
                target: target.name.clone(),
                size_bytes: target.size_bytes,
                output: kernel.finish(state)?,
            });
            command.output.push(piece).await;
        }
        Ok((
            scanned.load(Ordering::Relaxed),
            from_nodes.load(Ordering::Relaxed),
        ))
    }

    /// Runs segments on `node`: here directly, elsewhere by a call. Returns
    /// the answer and the bytes that crossed the fabric for it.
    async fn run_on(
        &self,
        node: NodeId,
        spec: &KernelSpec,
        segments: Vec<Segment>,
        carry: Option<Part>,
        bounds: RunBounds<'_>,
    ) -> Result<(LocalAnswer, u64), ComputeError> {
        let RunBounds {
            limits,
            deadline,
            piece_bytes,
        } = bounds;
        let time_left_ms = deadline
            .checked_duration_since(Instant::now())
            .map_or(0, |d| d.as_millis() as u64);
        let run = LocalRun {
            kernel: spec.clone(),
            segments,
            carry,
            time_left_ms,
            memory_bytes: limits.memory_bytes,
            piece_bytes,
        };
        if node == self.local.node {
            return Ok((run_local(&self.local, &self.tuner, run).await?, 0));
        }
        let body = Bytes::from(encode(&ComputeCall::RunLocal(run)));
        let answer = self
            .peers
            .call(node, Service::Compute, true, body)
            .await
            .map_err(|message| ComputeError::Remote { node, message })?;
        // Megabytes of parts are decoded off the reactor, as they were
        // encoded.
        let wire_bytes = answer.len() as u64;
        let decoded = tokio::task::spawn_blocking(move || {
            decode::<ComputeAnswer>("local run answer", &answer)
        })
        .await
        .map_err(|e| ComputeError::Storage {
            node: self.local.node,
            message: format!("decoding node {node}'s answer failed: {e}"),
        })??;
        match decoded {
            ComputeAnswer::Local(local) => Ok((local, wire_bytes)),
            ComputeAnswer::Failed(f) if f.kind == FailureKind::TooLarge => {
                Err(ComputeError::TooLarge {
                    node,
                    message: f.message,
                })
            }
            ComputeAnswer::Failed(f) => Err(ComputeError::Remote {
                node,
                message: f.message,
            }),
            other => Err(ComputeError::Remote {
                node,
                message: format!("answered a local run with {other:?}"),
            }),
        }
    }
}

/// Every object of `bucket` whose key starts with `prefix`, in key order,
/// appended to `out`.
async fn resolve_prefix<N: quarry_store::StoreNode>(
    store: &ObjectStore<N>,
    target: &Target,
    bucket: &str,
    prefix: &str,
    out: &mut Vec<Resolved>,
) -> Result<(), ComputeError> {
    let b =
        BucketName::new(bucket).map_err(|e| ComputeError::BadRequest(format!("{target}: {e}")))?;
    let mut after: Option<ObjectKey> = None;
    loop {
        let page = store
            .list(&b, prefix, after.as_ref(), MAX_PAGE_ITEMS)
            .await
            .map_err(|e| ComputeError::Target(format!("{target}: {e}")))?;
        for m in &page {
            if out.len() >= MAX_RESOLVED_TARGETS {
                return Err(too_many_targets());
            }
            out.push(object_segments(store, m, out.len()));
        }
        match page.last() {
            Some(m) if page.len() == MAX_PAGE_ITEMS => {
                after = Some(m.key().clone());
            }
            _ => return Ok(()),
        }
    }
}

/// Pages `first_page..+pages` of the linear space, target number `index`:
/// one segment per page, on the page's node.
fn linear_segments(
    space: &LinearSpace,
    target: &Target,
    (first_page, pages): (u64, u64),
    index: usize,
) -> Result<Resolved, ComputeError> {
    let page_size = space.geometry().page_size_bytes;
    let end = first_page
        .checked_add(pages)
        .filter(|&e| e <= space.pages())
        .ok_or_else(|| {
            ComputeError::Target(format!(
                "{target}: the linear space has {} pages",
                space.pages()
            ))
        })?;
    if pages > MAX_SEGMENTS_PER_RUN as u64 * 1024 {
        return Err(ComputeError::BadRequest(format!(
            "{target}: at most {} pages per linear target",
            MAX_SEGMENTS_PER_RUN * 1024
        )));
    }
    let mut segments = Vec::with_capacity(pages as usize);
    for (i, linear_page) in (first_page..end).enumerate() {
        let addr = space
            .to_global(linear_page)
            .map_err(|e| ComputeError::Target(format!("{target}: {e}")))?;
        segments.push((
            addr.node,
            Segment {
                target: index as u32,
                offset: i as u64 * u64::from(page_size),
                source: Source::DevicePage {
                    page: addr.page,
                    start: 0,
                    end: page_size,
                },
            },
        ));
    }
    Ok(Resolved {
        name: target.to_string(),
        size_bytes: pages * u64::from(page_size),
        segments,
    })
}

fn too_many_targets() -> ComputeError {
    ComputeError::BadRequest(format!(
        "the targets expand to more than {MAX_RESOLVED_TARGETS} objects or ranges"
    ))
}

fn result_too_large(bytes: u64, limit: u64) -> ComputeError {
    ComputeError::Limit {
        what: "result size",
        detail: format!("the result takes {bytes} bytes, the limit is {limit}"),
    }
}

/// Bytes of unread output a command holds before it waits for its client:
/// a quarter of its memory limit.
fn output_bound_bytes(limits: &Limits) -> u64 {
    (limits.memory_bytes / 4).max(1)
}

/// A command's output pieces from `from` on, once there is one, the output
/// is complete, or [`MAX_OUTPUT_WAIT_MS`] passed.
async fn read_output(
    command: &Command,
    from: u64,
    max_bytes: u32,
) -> Result<PiecesAnswer, ComputeError> {
    let max = u64::from(max_bytes.clamp(1, MAX_OUTPUT_SLICE_BYTES));
    let until = tokio::time::Instant::now() + Duration::from_millis(MAX_OUTPUT_WAIT_MS);
    let mut pieces_rx = command.output.subscribe();
    let mut state_rx = command.state.subscribe();
    loop {
        pieces_rx.borrow_and_update();
        let state = state_rx.borrow_and_update().clone();
        if matches!(state, CommandState::Failed { .. } | CommandState::Cancelled) {
            return Err(ComputeError::NotDone {
                id: command.id,
                state: format!("{state:?}"),
            });
        }
        let (pieces, end) = command.output.read(from, max).map_err(|e| match e {
            ReadError::Released { first } => ComputeError::BadRequest(format!(
                "command {}'s output pieces before {first} were read and are gone",
                command.id
            )),
            ReadError::Ahead { wanted, next } => ComputeError::BadRequest(format!(
                "command {} has no output piece {wanted}: the next is {next}",
                command.id
            )),
        })?;
        if !pieces.is_empty() || end || tokio::time::Instant::now() >= until {
            return Ok(PiecesAnswer {
                first_piece: from,
                pieces,
                end,
            });
        }
        tokio::select! {
            _ = pieces_rx.changed() => {}
            _ = state_rx.changed() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}

fn memory_limit(limits: &Limits) -> ComputeError {
    ComputeError::Limit {
        what: "memory",
        detail: format!(
            "the partial results at the entry node grew past {} bytes",
            limits.memory_bytes
        ),
    }
}

fn names(bucket: &str, key: &str) -> Result<(BucketName, ObjectKey), ComputeError> {
    let b = BucketName::new(bucket).map_err(|e| ComputeError::BadRequest(e.to_string()))?;
    let k = ObjectKey::new(key).map_err(|e| ComputeError::BadRequest(e.to_string()))?;
    Ok((b, k))
}

/// A checked job, its kernel compiled once (the node compiles it where the
/// command entered; data nodes compile it for their runs).
enum Prepared {
    Scan(KernelSpec, Arc<dyn ScanKernel>),
    Rmw(RmwBatch),
    Query(QuerySpec),
}

/// Checks a submission and prepares its job.
fn prepare(job: Job, targets: &[Target], limits: &Limits) -> Result<Prepared, ComputeError> {
    if targets.len() > MAX_TARGETS {
        return Err(ComputeError::BadRequest(format!(
            "{} targets in one command (at most {MAX_TARGETS})",
            targets.len()
        )));
    }
    let max = Limits::MAX;
    if limits.time_ms == 0 || limits.time_ms > max.time_ms {
        return Err(ComputeError::BadRequest(format!(
            "a time limit of {} ms (1 to {})",
            limits.time_ms, max.time_ms
        )));
    }
    if limits.memory_bytes == 0 || limits.memory_bytes > max.memory_bytes {
        return Err(ComputeError::BadRequest(format!(
            "a memory limit of {} bytes (1 to {})",
            limits.memory_bytes, max.memory_bytes
        )));
    }
    if limits.result_bytes == 0 || limits.result_bytes > max.result_bytes {
        return Err(ComputeError::BadRequest(format!(
            "a result limit of {} bytes (1 to {})",
            limits.result_bytes, max.result_bytes
        )));
    }
    match job {
        Job::Scan(spec) => {
            if targets.is_empty() {
                return Err(ComputeError::BadRequest(
                    "a scan needs at least one target".into(),
                ));
            }
            let kernel = compile(&spec)?;
            Ok(Prepared::Scan(spec, kernel))
        }
        Job::Rmw(batch) => {
            if batch.ops.len() > MAX_RMW_OPS {
                return Err(ComputeError::BadRequest(format!(
                    "{} read-modify-write operations in one command (at most {MAX_RMW_OPS})",
                    batch.ops.len()
                )));
            }
            if !targets.is_empty() {
                return Err(ComputeError::BadRequest(
                    "a read-modify-write batch names its volume, not targets".into(),
                ));
            }
            Ok(Prepared::Rmw(batch))
        }
        Job::Query(spec) => {
            if !targets.is_empty() {
                return Err(ComputeError::BadRequest(
                    "a query names its objects in its FROM, not as targets".into(),
                ));
            }
            // A query that does not parse fails at submission.
            quarry_query::Query::parse(&spec.sql)
                .map_err(|e| ComputeError::BadRequest(e.to_string()))?;
            Ok(Prepared::Query(spec))
        }
    }
}

/// The segments of an object's bytes: one per chunk, on the node that
/// holds the chunk (a small object's is its manifest's node).
fn object_segments<N: quarry_store::StoreNode>(
    store: &ObjectStore<N>,
    m: &quarry_store::Manifest,
    index: usize,
) -> Resolved {
    let mut offset = 0u64;
    let segments = m
        .chunks()
        .iter()
        .map(|c| {
            let seg = Segment {
                target: index as u32,
                offset,
                source: Source::Chunk {
                    fingerprint: c.fingerprint.0,
                    len: c.len,
                    start: 0,
                    end: c.len,
                },
            };
            offset += u64::from(c.len);
            (store.placement().chunk_holder(m, &c.fingerprint), seg)
        })
        .collect();
    Resolved {
        name: format!("{}/{}", m.bucket(), m.key()),
        size_bytes: m.size(),
        segments,
    }
}

/// The byte ranges of the parts a run answers, with their targets: a node
/// folds adjacent segments of one target into one part, exactly as this
/// groups them.
fn part_ranges(segments: &[Segment]) -> Vec<(u32, u64, u64)> {
    let mut out: Vec<(u32, u64, u64)> = Vec::new();
    for seg in segments {
        let end = seg.offset + seg.source.len_bytes();
        match out.last_mut() {
            Some((t, _, e)) if *t == seg.target && *e == seg.offset => *e = end,
            _ => out.push((seg.target, seg.offset, end)),
        }
    }
    out
}

/// Where a run's first segment lies: the order in which the merge needs
/// runs' parts.
fn work_key(segments: &[Segment]) -> (u32, u64) {
    segments
        .first()
        .map_or((u32::MAX, u64::MAX), |s| (s.target, s.offset))
}

fn covers_more_than_a_byte(segments: &[Segment]) -> bool {
    segments.len() > 1 || segments.iter().any(|s| s.source.len_bytes() > 1)
}

/// A run cut in two: its segments halved, or its one segment's bytes.
fn halve(mut segments: Vec<Segment>) -> (Vec<Segment>, Vec<Segment>) {
    if segments.len() == 1 {
        let seg = &segments[0];
        let (a, b) = seg.split_at(seg.source.len_bytes() / 2);
        return (vec![a], vec![b]);
    }
    let b = segments.split_off(segments.len() / 2);
    (segments, b)
}

/// Hands a run's parts to the merge; returns the segments still to run
/// when the run answered before its end.
fn accept(
    merger: &mut Merger<'_>,
    node: NodeId,
    segments: &[Segment],
    answer: LocalAnswer,
) -> Result<Option<Vec<Segment>>, ComputeError> {
    let (ranges, rest) = match answer.resume {
        None => (part_ranges(segments), None),
        Some(Resume {
            segment,
            bytes_done,
        }) => {
            let i = segment as usize;
            let seg = segments
                .get(i)
                .filter(|s| bytes_done <= s.source.len_bytes())
                .ok_or_else(|| ComputeError::Remote {
                    node,
                    message: format!("stopped at byte {bytes_done} of segment {segment}"),
                })?;
            let (head, tail) = seg.split_at(bytes_done);
            let mut done = segments[..i].to_vec();
            if bytes_done > 0 {
                done.push(head);
            }
            if done.iter().all(|s| s.source.len_bytes() == 0) {
                return Err(ComputeError::Remote {
                    node,
                    message: "a run stopped before it folded a byte".into(),
                });
            }
            let mut rest = vec![tail];
            rest.extend_from_slice(&segments[i + 1..]);
            (part_ranges(&done), Some(rest))
        }
    };
    if ranges.len() != answer.parts.len() {
        return Err(ComputeError::Remote {
            node,
            message: format!(
                "answered {} parts for {} ranges",
                answer.parts.len(),
                ranges.len()
            ),
        });
    }
    for ((target, start, end), (t, part)) in ranges.into_iter().zip(answer.parts) {
        if t != target {
            return Err(ComputeError::BadRequest(format!(
                "a part for target {t} where target {target} was expected"
            )));
        }
        merger.add(target, start, end, part)?;
    }
    Ok(rest)
}

/// Joins what the merge can join and hands the pieces that became final to
/// the command's output, waiting for room there; fails the command when
/// what the entry node holds for it outgrows its memory limit.
async fn emit(
    command: &Command,
    merger: &mut Merger<'_>,
    limits: &Limits,
) -> Result<(), ComputeError> {
    let held =
        |m: &Merger<'_>, unsent: u64| m.held_bytes() as u64 + command.output.held_bytes() + unsent;
    let before = held(merger, 0);
    command.note_memory(before);
    if before > limits.memory_bytes {
        return Err(memory_limit(limits));
    }
    let pieces = merger.advance()?;
    let mut unsent: u64 = pieces.iter().map(piece_bytes).sum();
    command.note_memory(held(merger, unsent));
    for piece in pieces {
        unsent -= piece_bytes(&piece);
        command.output.push(piece).await;
        command.note_memory(held(merger, unsent));
    }
    Ok(())
}

/// What bounds one local run: the command's limits and time, and the
/// bytes of parts after which it answers ([`LocalRun::piece_bytes`]).
#[derive(Clone, Copy)]
struct RunBounds<'a> {
    limits: &'a Limits,
    deadline: Instant,
    piece_bytes: u64,
}

/// How a scan's runs go out: for grep's lines (an answer that grows with
/// the data) in bounded pieces, few enough at once that the parts waiting
/// at the entry node stay within the memory limit; for other kernels, as
/// many runs as [`RUNS_IN_FLIGHT`], each answered once.
struct Pacing {
    /// See [`LocalRun::piece_bytes`].
    node_piece_bytes: u64,
    runs_in_flight: usize,
    /// Bytes of lines in one output piece.
    output_piece_bytes: u64,
    /// Past this many bytes held, only the run the merge waits for goes
    /// out.
    throttle_bytes: usize,
}

impl Pacing {
    fn new(spec: &KernelSpec, limits: &Limits) -> Pacing {
        let output_piece_bytes = (output_bound_bytes(limits) / 2).clamp(4 << 10, 1 << 20);
        if !matches!(spec, KernelSpec::Grep(g) if g.lines) {
            return Pacing {
                node_piece_bytes: 0,
                runs_in_flight: RUNS_IN_FLIGHT,
                output_piece_bytes,
                throttle_bytes: usize::MAX,
            };
        }
        let memory = limits.memory_bytes;
        // A run may hold twice its piece before it stops inside a segment;
        // lines take more memory than their encoding (a line's bookkeeping
        // is about 90 bytes, its encoding's about 12), so twice 1.5 MiB
        // still fits one message.
        let piece = (memory / (4 * RUNS_IN_FLIGHT as u64)).clamp(16 << 10, 3 << 19);
        Pacing {
            node_piece_bytes: piece,
            runs_in_flight: (memory / (12 * piece)).clamp(1, RUNS_IN_FLIGHT as u64) as usize,
            output_piece_bytes,
            throttle_bytes: (memory / 2) as usize,
        }
    }

    /// Which pending run goes out next, if one does: the first, while the
    /// entry node holds little; past that only the one the merge waits for
    /// (the first in target order), when no run in flight comes before it.
    fn next_work(
        &self,
        pending: &[(NodeId, Vec<Segment>)],
        in_flight: &[(u32, u64)],
        held_bytes: usize,
    ) -> Option<usize> {
        if pending.is_empty() {
            return None;
        }
        if held_bytes <= self.throttle_bytes {
            return Some(0);
        }
        let (i, key) = pending
            .iter()
            .enumerate()
            .map(|(i, (_, s))| (i, work_key(s)))
            .min_by_key(|(_, k)| *k)?;
        in_flight.iter().all(|k| key < *k).then_some(i)
    }
}
