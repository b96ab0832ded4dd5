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
    CommandId, CommandResult, CommandState, CommandStatus, Job, Limits, Outcome, RmwBatch, Target,
    TargetOutput,
};
use crate::local::{run_local, LocalData};
use crate::peers::{Peers, StoreVia, VolumesVia};
use crate::plan::{chain_runs, plan_runs, RUNS_IN_FLIGHT};
use crate::scan::{compile, Part, ScanKernel};
use crate::spec::KernelSpec;
use crate::tuner::ReadTuner;
use crate::wire::{
    decode, encode, ComputeAnswer, ComputeCall, FailureKind, LocalAnswer, LocalRun, Segment,
    Source, MAX_AWAIT_MS, MAX_RESOLVED_TARGETS, MAX_RESULT_SLICE_BYTES, MAX_RMW_OPS,
    MAX_SEGMENTS_PER_RUN, MAX_TARGETS,
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

struct Command {
    id: CommandId,
    kernel: &'static str,
    submitted: Instant,
    state: watch::Sender<CommandState>,
    bytes_done: AtomicU64,
    bytes_total: AtomicU64,
    finished_ms: AtomicU64,
    result: OnceLock<Bytes>,
    cancel: Notify,
}

impl Command {
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
            result_bytes: self.result.get().map_or(0, |r| r.len() as u64),
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
        let answer = match self.serve(body).await {
            Ok(a) => a,
            Err(e) => ComputeAnswer::Failed(e.to_failure()),
        };
        // A local run's parts may be megabytes of lines: encoded off the
        // node's reactor, so its links and other requests keep moving.
        let encoded = match answer {
            ComputeAnswer::Local(_) => tokio::task::spawn_blocking(move || encode(&answer))
                .await
                .unwrap_or_else(|e| {
                    let e = ComputeError::Storage {
                        node: self.local.node,
                        message: format!("encoding the answer failed: {e}"),
                    };
                    encode(&ComputeAnswer::Failed(e.to_failure()))
                }),
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

    async fn serve(self: &Arc<Self>, body: Bytes) -> Result<ComputeAnswer, ComputeError> {
        let call: ComputeCall = decode("compute call", &body)?;
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
                let Some(result) = command.result.get() else {
                    return Err(ComputeError::NotDone {
                        id,
                        state: format!("{:?}", command.state.borrow().clone()),
                    });
                };
                let total = result.len() as u64;
                let start = offset.min(total) as usize;
                let take =
                    (max_bytes.min(MAX_RESULT_SLICE_BYTES) as usize).min(result.len() - start);
                Ok(ComputeAnswer::ResultSlice {
                    total_bytes: total,
                    bytes: result[start..start + take].to_vec(),
                })
            }
            ComputeCall::List => Ok(ComputeAnswer::Statuses(
                self.table().commands.values().map(|c| c.status()).collect(),
            )),
            ComputeCall::RunLocal(run) => Ok(ComputeAnswer::Local(
                run_local(&self.local, &self.tuner, run).await?,
            )),
        }
    }

    /// Drops the oldest finished commands while their results exceed
    /// [`MAX_KEPT_RESULT_BYTES`].
    fn drop_old_results(&self) {
        let mut table = self.table();
        let mut kept: u64 = table
            .commands
            .values()
            .filter_map(|c| c.result.get().map(|r| r.len() as u64))
            .sum();
        for id in table.finished() {
            if kept <= MAX_KEPT_RESULT_BYTES {
                break;
            }
            if let Some(c) = table.commands.remove(&id) {
                kept -= c.result.get().map_or(0, |r| r.len() as u64);
            }
        }
    }

    /// Starts a command; returns its number at once.
    // TODO(issue 19): split (left whole while this file is being edited elsewhere).
    #[allow(clippy::too_many_lines)]
    pub fn submit(
        self: &Arc<Self>,
        job: Job,
        targets: Vec<Target>,
        limits: Limits,
        members: Vec<NodeId>,
    ) -> Result<CommandId, ComputeError> {
        let kernel_name = job.kernel_name();
        let prepared = prepare(job, &targets, &limits)?;
        let command = {
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
                cancel: Notify::new(),
            });
            table.commands.insert(id, command.clone());
            command
        };
        let engine = Arc::clone(self);
        let id = command.id;
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(limits.time_ms);
            let work = async {
                let _slot =
                    engine.slots.clone().acquire_owned().await.map_err(|_| {
                        ComputeError::BadRequest("the engine is shutting down".into())
                    })?;
                command.state.send_if_modified(|s| {
                    let queued = *s == CommandState::Queued;
                    if queued {
                        *s = CommandState::Running;
                    }
                    queued
                });
                engine
                    .execute(&command, prepared, targets, limits, members)
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
                Some(Ok(result)) => {
                    let bytes = Bytes::from(encode(&result));
                    if bytes.len() as u64 > limits.result_bytes {
                        command.finish(CommandState::Failed {
                            reason: ComputeError::Limit {
                                what: "result size",
                                detail: format!(
                                    "the result takes {} bytes, the limit is {}",
                                    bytes.len(),
                                    limits.result_bytes
                                ),
                            }
                            .to_string(),
                        });
                    } else {
                        let _ = command.result.set(bytes);
                        command.finish(CommandState::Done);
                    }
                }
                Some(Err(e)) => command.finish(CommandState::Failed {
                    reason: e.to_string(),
                }),
            }
            let elapsed_s = command.submitted.elapsed().as_secs_f64();
            let bytes_done = command.bytes_done.load(Ordering::Relaxed);
            tracing::debug!(
                id,
                state = ?command.state.borrow().clone(),
                bytes_done,
                elapsed_ms = format!("{:.1}", elapsed_s * 1e3),
                mib_per_s = format!("{:.0}", bytes_done as f64 / f64::from(1 << 20) / elapsed_s.max(1e-9)),
                "command finished"
            );
            engine.drop_old_results();
        });
        Ok(id)
    }

    async fn execute(
        &self,
        command: &Command,
        job: Prepared,
        targets: Vec<Target>,
        limits: Limits,
        members: Vec<NodeId>,
    ) -> Result<CommandResult, ComputeError> {
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
                Ok(CommandResult {
                    outcome: Outcome::Rmw { values },
                    bytes_scanned: ops.len() as u64 * 8,
                    bytes_from_nodes: ops.len() as u64 * 8,
                })
            }
        }
    }

    /// Expands the targets into byte ranges and the segments holding them.
    // TODO(issue 19): split (left whole while this file is being edited elsewhere).
    #[allow(clippy::too_many_lines)]
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
                    let b = BucketName::new(bucket)
                        .map_err(|e| ComputeError::BadRequest(format!("{target}: {e}")))?;
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
                            _ => break,
                        }
                    }
                }
                Target::Volume {
                    name,
                    offset_bytes,
                    len_bytes,
                } => {
                    let volumes = BlockVolumes::new(
                        Arc::new(VolumesVia(self.peers.clone())),
                        members.to_vec(),
                    );
                    let volume = volumes
                        .open(name)
                        .await
                        .map_err(|e| ComputeError::Target(format!("{target}: {e}")))?;
                    let size = volume.size_bytes();
                    let len = len_bytes.unwrap_or(size.saturating_sub(*offset_bytes));
                    let end = offset_bytes
                        .checked_add(len)
                        .filter(|&e| e <= size && *offset_bytes <= size)
                        .ok_or_else(|| {
                            ComputeError::Target(format!(
                                "{target}: bytes {offset_bytes}..+{len} are not inside the \
                                 volume's {size} bytes"
                            ))
                        })?;
                    let page_size = volume.page_size() as u64;
                    let space = volume.def().space();
                    let index = out.len() as u32;
                    let mut segments = Vec::new();
                    let mut at = *offset_bytes;
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
                                target: index,
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
                    out.push(Resolved {
                        name: target.to_string(),
                        size_bytes: len,
                        segments,
                    });
                }
                Target::Linear { first_page, pages } => {
                    if linear.is_none() {
                        let mut geometries = Vec::with_capacity(members.len());
                        for &node in members {
                            let g = self
                                .peers
                                .geometry(node)
                                .await
                                .map_err(|message| ComputeError::Remote { node, message })?;
                            geometries.push((node, g));
                        }
                        linear = Some(
                            LinearSpace::new(geometries)
                                .map_err(|e| ComputeError::Target(format!("{target}: {e}")))?,
                        );
                    }
                    let Some(space) = linear.as_ref() else {
                        return Err(ComputeError::Target(format!("{target}: no linear space")));
                    };
                    let page_size = space.geometry().page_size_bytes;
                    let end = first_page
                        .checked_add(*pages)
                        .filter(|&e| e <= space.pages())
                        .ok_or_else(|| {
                            ComputeError::Target(format!(
                                "{target}: the linear space has {} pages",
                                space.pages()
                            ))
                        })?;
                    if *pages > MAX_SEGMENTS_PER_RUN as u64 * 1024 {
                        return Err(ComputeError::BadRequest(format!(
                            "{target}: at most {} pages per linear target",
                            MAX_SEGMENTS_PER_RUN * 1024
                        )));
                    }
                    let index = out.len() as u32;
                    let mut segments = Vec::with_capacity(*pages as usize);
                    for (i, linear_page) in (*first_page..end).enumerate() {
                        let addr = space
                            .to_global(linear_page)
                            .map_err(|e| ComputeError::Target(format!("{target}: {e}")))?;
                        segments.push((
                            addr.node,
                            Segment {
                                target: index,
                                offset: i as u64 * u64::from(page_size),
                                source: Source::DevicePage {
                                    page: addr.page,
                                    start: 0,
                                    end: page_size,
                                },
                            },
                        ));
                    }
                    out.push(Resolved {
                        name: target.to_string(),
                        size_bytes: *pages * u64::from(page_size),
                        segments,
                    });
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

    fn objects<'a>(
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

    /// Runs a scan kernel over resolved targets and merges the parts.
    // TODO(issue 19): split (left whole while this file is being edited elsewhere).
    #[allow(clippy::too_many_lines)]
    async fn scan(
        &self,
        command: &Command,
        spec: &KernelSpec,
        kernel: Arc<dyn ScanKernel>,
        targets: Vec<Resolved>,
        limits: &Limits,
        deadline: Instant,
    ) -> Result<CommandResult, ComputeError> {
        let scanned = AtomicU64::new(0);
        let from_nodes = AtomicU64::new(0);
        let mut parts: Vec<BTreeMap<u64, Part>> = targets.iter().map(|_| BTreeMap::new()).collect();
        if kernel.parallel() {
            let runs = plan_runs(targets.iter().map(|t| t.segments.as_slice()));
            let runs: Vec<_> = runs
                .into_iter()
                .map(|(node, segments)| {
                    let scanned = &scanned;
                    let from_nodes = &from_nodes;
                    async move {
                        // A run whose parts do not fit one message is cut
                        // in two and each half run again (runs change
                        // nothing, so running again is safe), down to one
                        // segment.
                        let mut pending = vec![segments];
                        let mut starts = Vec::new();
                        let mut parts = Vec::new();
                        while let Some(segments) = pending.pop() {
                            let expected = part_starts(&segments);
                            let answer = self
                                .run_on(node, spec, segments.clone(), None, limits, deadline)
                                .await;
                            let (answer, wire) = match answer {
                                Err(ComputeError::TooLarge { .. }) if segments.len() > 1 => {
                                    let half = segments.len() / 2;
                                    let (a, b) = segments.split_at(half);
                                    // Popped last first: keep target order.
                                    pending.push(b.to_vec());
                                    pending.push(a.to_vec());
                                    continue;
                                }
                                other => other?,
                            };
                            if answer.parts.len() != expected.len() {
                                return Err(ComputeError::Remote {
                                    node,
                                    message: format!(
                                        "answered {} parts for {} ranges",
                                        answer.parts.len(),
                                        expected.len()
                                    ),
                                });
                            }
                            scanned.fetch_add(answer.bytes_scanned, Ordering::Relaxed);
                            from_nodes.fetch_add(wire, Ordering::Relaxed);
                            command
                                .bytes_done
                                .fetch_add(answer.bytes_scanned, Ordering::Relaxed);
                            starts.extend(expected);
                            parts.extend(answer.parts);
                        }
                        Ok::<_, ComputeError>((starts, parts))
                    }
                })
                .collect();
            let answers = stream::iter(runs).buffer_unordered(RUNS_IN_FLIGHT);
            let mut answers = std::pin::pin!(answers);
            let mut held = 0usize;
            while let Some((starts, answer_parts)) = answers.try_next().await? {
                for ((target, offset), (t, part)) in starts.into_iter().zip(answer_parts) {
                    if t != target {
                        return Err(ComputeError::BadRequest(format!(
                            "a part for target {t} where target {target} was expected"
                        )));
                    }
                    held += part.size_bytes();
                    if held as u64 > limits.memory_bytes {
                        return Err(memory_limit(limits));
                    }
                    parts[target as usize].insert(offset, part);
                }
            }
        } else {
            // A chain: each target's ranges in order, the state handed on.
            let chains: Vec<_> = targets
                .iter()
                .enumerate()
                .map(|(i, target)| {
                    let scanned = &scanned;
                    let from_nodes = &from_nodes;
                    let kernel = &kernel;
                    async move {
                        let mut state = kernel.empty(0);
                        for (node, segments) in chain_runs(&target.segments) {
                            let (answer, wire) = self
                                .run_on(node, spec, segments, Some(state), limits, deadline)
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
                        Ok::<_, ComputeError>((i, state))
                    }
                })
                .collect();
            let results = stream::iter(chains).buffer_unordered(RUNS_IN_FLIGHT);
            let mut results = std::pin::pin!(results);
            while let Some((i, state)) = results.try_next().await? {
                parts[i].insert(0, state);
            }
        }
        // Joining and finishing take time in proportion to what the parts
        // hold (megabytes of matching lines): off the node's reactor, so
        // its links keep their keepalives and its other requests move.
        let outputs = tokio::task::spawn_blocking(move || {
            let mut outputs = Vec::with_capacity(targets.len());
            for (target, target_parts) in targets.into_iter().zip(parts) {
                let whole = join_parts(kernel.as_ref(), target_parts)?;
                outputs.push(TargetOutput {
                    target: target.name,
                    size_bytes: target.size_bytes,
                    output: kernel.finish(whole)?,
                });
            }
            Ok::<_, ComputeError>(outputs)
        })
        .await
        .map_err(|e| ComputeError::Storage {
            node: self.local.node,
            message: format!("joining the parts failed: {e}"),
        })??;
        Ok(CommandResult {
            outcome: Outcome::Scan(outputs),
            bytes_scanned: scanned.into_inner(),
            bytes_from_nodes: from_nodes.into_inner(),
        })
    }

    /// Runs segments on `node`: here directly, elsewhere by a call. Returns
    /// the answer and the bytes that crossed the fabric for it.
    async fn run_on(
        &self,
        node: NodeId,
        spec: &KernelSpec,
        segments: Vec<Segment>,
        carry: Option<Part>,
        limits: &Limits,
        deadline: Instant,
    ) -> Result<(LocalAnswer, u64), ComputeError> {
        let time_left_ms = deadline
            .checked_duration_since(Instant::now())
            .map_or(0, |d| d.as_millis() as u64);
        let run = LocalRun {
            kernel: spec.clone(),
            segments,
            carry,
            time_left_ms,
            memory_bytes: limits.memory_bytes,
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

fn too_many_targets() -> ComputeError {
    ComputeError::BadRequest(format!(
        "the targets expand to more than {MAX_RESOLVED_TARGETS} objects or ranges"
    ))
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
    }
}

/// The segments of an object's bytes: one per chunk, on the chunk's node.
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
            (store.placement().chunk_node(&c.fingerprint), seg)
        })
        .collect();
    Resolved {
        name: format!("{}/{}", m.bucket(), m.key()),
        size_bytes: m.size(),
        segments,
    }
}

/// Where each part a run answers starts: a node folds adjacent segments of
/// one target into one part, exactly as this groups them.
fn part_starts(segments: &[Segment]) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    let mut end: Option<(u32, u64)> = None;
    for seg in segments {
        if end != Some((seg.target, seg.offset)) {
            out.push((seg.target, seg.offset));
        }
        end = Some((seg.target, seg.offset + seg.source.len_bytes()));
    }
    out
}

/// Joins a target's parts, in offset order, into the part of the whole.
fn join_parts(kernel: &dyn ScanKernel, parts: BTreeMap<u64, Part>) -> Result<Part, ComputeError> {
    let mut whole: Option<Part> = None;
    for (_, part) in parts {
        whole = Some(match whole {
            None => part,
            Some(left) => kernel.combine(left, part)?,
        });
    }
    Ok(whole.unwrap_or_else(|| kernel.empty(0)))
}
