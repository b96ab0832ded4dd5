//! Queries near the data: the entry node resolves the FROM into Parquet
//! objects, reads their footers, chooses for each row group the node that
//! holds most of the bytes it needs (the rest is fetched there), sends
//! each node a run over its row groups, and merges the partial results
//! (`quarry-query` does the SQL; this module moves the bytes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use quarry_proto::{NodeId, Service};
use quarry_query::{FilePlan, Merger, Query, QueryError};
use quarry_store::{
    BucketName, Fingerprint, Manifest, ObjectKey, ObjectStore, RemoteNode, StoreNode,
    MAX_PAGE_ITEMS, MAX_READ_CHUNKS, MAX_READ_CHUNKS_BYTES,
};

use crate::engine::{Command, Engine};
use crate::engine_error::ComputeError;
use crate::job::{CommandResult, Limits, Outcome, QueryOutcome, QuerySpec};
use crate::output::OutputPiece;
use crate::peers::{Peers, StoreVia};
use crate::wire::{
    decode, encode, ComputeAnswer, ComputeCall, QueryChunk, QueryPart, QueryRun,
    MAX_QUERY_RUN_CHUNKS, MAX_QUERY_RUN_ROW_GROUPS, MAX_RESOLVED_TARGETS,
};

/// Most chunk bytes one query run fetches: a node holds them while it
/// decodes (a row group whose columns need more cannot be queried).
pub const MAX_QUERY_RUN_BYTES: u64 = 512 << 20;

/// Chunk bytes the entry node gathers into one run: small enough that
/// runs of every node interleave and the last node to finish is not
/// left with a long tail (a row group is never split).
const RUN_TARGET_BYTES: u64 = 4 << 20;

/// Query runs in flight at once, over all nodes.
const QUERY_RUNS_IN_FLIGHT: usize = 8;

/// Chunk reads a run has in flight at once, each a call of up to
/// [`MAX_READ_CHUNKS`] chunks to one holder.
const CHUNK_CALLS_IN_FLIGHT: usize = 8;

/// Longest footer read (Parquet metadata of a very wide or very long file).
const MAX_FOOTER_BYTES: u64 = 64 << 20;

fn query_error(e: QueryError) -> ComputeError {
    ComputeError::Target(e.to_string())
}

/// A Parquet object the query reads, with its plan.
struct Object {
    name: String,
    manifest: Manifest,
    footer: Bytes,
    plan: FilePlan,
    /// The file offset of each of the manifest's chunks.
    offsets: Vec<u64>,
}

/// Work for one node: row groups of one object.
struct Run {
    node: NodeId,
    object: usize,
    row_groups: Vec<u32>,
    chunks: BTreeMap<u64, QueryChunk>,
    bytes: u64,
}

/// What a query moved, summed over its runs.
#[derive(Default)]
struct Moved {
    from_devices: u64,
    between_nodes: u64,
}

/// Whether `key` matches `pattern`: `*` any characters and `?` one, never
/// across a `/`.
pub(crate) fn glob_match(pattern: &[u8], key: &[u8]) -> bool {
    let (mut p, mut k) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while k < key.len() {
        if p < pattern.len() && (pattern[p] == b'?' && key[k] != b'/' || pattern[p] == key[k]) {
            p += 1;
            k += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, k));
            p += 1;
        } else if let Some((sp, sk)) = star.filter(|&(_, sk)| key[sk] != b'/') {
            p = sp + 1;
            k = sk + 1;
            star = Some((sp, sk + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl<P: Peers> Engine<P> {
    /// Runs a query command to its end.
    pub(crate) async fn query(
        &self,
        command: &Command,
        spec: &QuerySpec,
        limits: &Limits,
        members: &[NodeId],
        deadline: Instant,
    ) -> Result<(), ComputeError> {
        let query = Query::parse(&spec.sql).map_err(query_error)?;
        let mut slot = None;
        let store = self.objects(&mut slot, members)?;
        let manifests = resolve_source(store, query.source()).await?;
        let mut moved = Moved::default();
        let mut objects = Vec::with_capacity(manifests.len());
        for m in manifests {
            objects.push(read_object(store, &query, m, &mut moved).await?);
        }
        let first = objects.first().ok_or_else(|| {
            ComputeError::Target(format!("no object matches '{}'", query.source()))
        })?;
        let mut merger = Merger::new(&first.plan, limits.memory_bytes).map_err(query_error)?;
        let (runs, row_groups, row_groups_read) = plan_runs(store, &objects)?;
        let total: u64 = runs.iter().map(|r| r.bytes).sum();
        command.add_bytes_total(total);
        let sends: Vec<_> = runs
            .into_iter()
            .map(|run| {
                let o = &objects[run.object];
                let body = QueryRun {
                    sql: spec.sql.clone(),
                    object: o.name.clone(),
                    footer: o.footer.to_vec(),
                    file_len: o.manifest.size(),
                    row_groups: run.row_groups,
                    chunks: run.chunks.into_values().collect(),
                    memory_bytes: limits.memory_bytes,
                };
                let (node, object, bytes) = (run.node, run.object, run.bytes);
                async move { (object, bytes, self.send_query_run(node, body).await) }
            })
            .collect();
        let mut answers = stream::iter(sends).buffer_unordered(QUERY_RUNS_IN_FLIGHT);
        while let Some((object, bytes, answer)) = answers.next().await {
            if Instant::now() >= deadline {
                // Never an answer from some of the runs: the command fails.
                return Err(ComputeError::Limit {
                    what: "time",
                    detail: format!("the query ran past its {} ms", limits.time_ms),
                });
            }
            let (part, wire_bytes) = answer?;
            moved.from_devices += part.bytes_from_devices;
            moved.between_nodes += wire_bytes + part.bytes_fetched;
            command.add_bytes_done(bytes);
            merger
                .add(&part.arrow_ipc, &objects[object].name)
                .map_err(query_error)?;
        }
        let answer = merger.finish().map_err(query_error)?;
        let arrow_ipc =
            quarry_query::write(&answer, quarry_query::Format::Arrow).map_err(query_error)?;
        let outcome = QueryOutcome {
            arrow_ipc,
            rows: answer.num_rows() as u64,
            objects: objects.len() as u64,
            row_groups,
            row_groups_read,
            bytes_from_devices: moved.from_devices,
            bytes_between_nodes: moved.between_nodes,
        };
        let result = CommandResult {
            outcome: Outcome::Query(outcome),
            bytes_scanned: moved.from_devices,
            bytes_from_nodes: moved.between_nodes,
        };
        command.push_output(OutputPiece::Whole(result)).await;
        Ok(())
    }

    /// Sends a run to `node` (here: runs it) and returns its part and the
    /// bytes that crossed the fabric for it (the run and its answer).
    async fn send_query_run(
        &self,
        node: NodeId,
        run: QueryRun,
    ) -> Result<(QueryPart, u64), ComputeError> {
        if node == self.local_node() {
            return Ok((self.run_query(run).await?, 0));
        }
        let body = Bytes::from(encode(&ComputeCall::RunQuery(run)));
        let sent = body.len() as u64;
        let answer = self
            .peers()
            .call(node, Service::Compute, true, body)
            .await
            .map_err(|message| ComputeError::Remote { node, message })?;
        let wire = sent + answer.len() as u64;
        match decode::<ComputeAnswer>("query run answer", &answer)? {
            ComputeAnswer::QueryPart(part) => Ok((part, wire)),
            ComputeAnswer::Failed(f) => Err(ComputeError::Remote {
                node,
                message: f.message,
            }),
            other => Err(ComputeError::Remote {
                node,
                message: format!("answered a query run with {other:?}"),
            }),
        }
    }

    /// [`Engine::run_query`] on a task of its own. A run reads chunks
    /// through the peers, whose calls reach this engine's `serve` again:
    /// the task (started from a plain function) keeps the compiler from
    /// following that loop through the future types.
    pub(crate) fn spawn_query_run(
        self: &Arc<Self>,
        run: QueryRun,
    ) -> tokio::task::JoinHandle<Result<QueryPart, ComputeError>> {
        let engine = self.clone();
        tokio::spawn(async move { engine.run_query(run).await })
    }

    /// Evaluates a run sent here: fetches its chunks (its own from its
    /// device, the others from their holders), then filters and
    /// aggregates its row groups.
    pub(crate) async fn run_query(&self, run: QueryRun) -> Result<QueryPart, ComputeError> {
        if run.row_groups.len() > MAX_QUERY_RUN_ROW_GROUPS
            || run.chunks.len() > MAX_QUERY_RUN_CHUNKS
        {
            return Err(ComputeError::BadRequest(format!(
                "a query run of {} row groups and {} chunks (at most {MAX_QUERY_RUN_ROW_GROUPS} \
                 and {MAX_QUERY_RUN_CHUNKS})",
                run.row_groups.len(),
                run.chunks.len()
            )));
        }
        let bytes: u64 = run.chunks.iter().map(|c| u64::from(c.len)).sum();
        if bytes > MAX_QUERY_RUN_BYTES {
            return Err(ComputeError::BadRequest(format!(
                "a query run of {bytes} chunk bytes (at most {MAX_QUERY_RUN_BYTES})"
            )));
        }
        let here = self.local_node();
        let transport = Arc::new(StoreVia(self.peers().clone()));
        let object = run.object.as_str();
        // The run's chunks in one call per holder (more when they pass a
        // call's bounds): a run reads about a hundred chunks (a page each
        // under `parquet` chunking), and a call each cost more CPU at both
        // ends than the bytes did.
        let calls = holder_calls(&run.chunks);
        let fetches: Vec<_> = calls
            .into_iter()
            .map(|(holder, chunks)| {
                let node = RemoteNode::new(holder, transport.clone());
                async move {
                    let fingerprints: Vec<Fingerprint> =
                        chunks.iter().map(|c| Fingerprint(c.fingerprint)).collect();
                    let read = node.read_chunks(&fingerprints).await.map_err(|e| {
                        ComputeError::Storage {
                            node: holder,
                            message: format!("reading chunks of {object}: {e}"),
                        }
                    })?;
                    let mut out = Vec::with_capacity(chunks.len());
                    for (c, data) in chunks.iter().zip(read) {
                        if data.len() != c.len as usize {
                            return Err(ComputeError::Storage {
                                node: holder,
                                message: format!(
                                    "a chunk of {} is {} bytes, its manifest says {}",
                                    object,
                                    data.len(),
                                    c.len
                                ),
                            });
                        }
                        out.push((c.file_offset, data));
                    }
                    Ok::<_, ComputeError>(out)
                }
            })
            .collect();
        let fetched: Vec<(u64, Bytes)> = stream::iter(fetches)
            .buffered(CHUNK_CALLS_IN_FLIGHT)
            .try_collect::<Vec<Vec<(u64, Bytes)>>>()
            .await?
            .into_iter()
            .flatten()
            .collect();
        let bytes_fetched = run
            .chunks
            .iter()
            .filter(|c| c.holder != here)
            .map(|c| u64::from(c.len))
            .sum();
        let evaluate = move || -> Result<Vec<u8>, QueryError> {
            let plan = Query::parse(&run.sql)?.bind(&run.object, &run.footer, run.file_len)?;
            let groups: Vec<usize> = run.row_groups.iter().map(|&g| g as usize).collect();
            plan.evaluate(&groups, fetched, run.memory_bytes)
        };
        let arrow_ipc = tokio::task::spawn_blocking(evaluate)
            .await
            .map_err(|e| ComputeError::Storage {
                node: here,
                message: format!("a query run stopped: {e}"),
            })?
            .map_err(query_error)?;
        Ok(QueryPart {
            arrow_ipc,
            bytes_from_devices: bytes,
            bytes_fetched,
        })
    }
}

/// The objects the FROM string names, in key order.
async fn resolve_source<N: StoreNode>(
    store: &ObjectStore<N>,
    source: &str,
) -> Result<Vec<Manifest>, ComputeError> {
    let Some((bucket, pattern)) = source.split_once('/') else {
        return Err(ComputeError::Target(format!(
            "FROM '{source}': name objects as 'bucket/key' or 'bucket/prefix*.parquet'"
        )));
    };
    let b = BucketName::new(bucket)
        .map_err(|e| ComputeError::Target(format!("FROM '{source}': {e}")))?;
    let wild = pattern.find(['*', '?']);
    let Some(at) = wild else {
        let k = ObjectKey::new(pattern)
            .map_err(|e| ComputeError::Target(format!("FROM '{source}': {e}")))?;
        let m = store
            .head(&b, &k)
            .await
            .map_err(|e| ComputeError::Target(format!("{source}: {e}")))?;
        return Ok(vec![m]);
    };
    let prefix = &pattern[..at];
    let mut out = Vec::new();
    let mut after: Option<ObjectKey> = None;
    loop {
        let page = store
            .list(&b, prefix, after.as_ref(), MAX_PAGE_ITEMS)
            .await
            .map_err(|e| ComputeError::Target(format!("FROM '{source}': {e}")))?;
        for m in &page {
            if glob_match(pattern.as_bytes(), m.key().as_str().as_bytes()) {
                if out.len() >= MAX_RESOLVED_TARGETS {
                    return Err(ComputeError::BadRequest(format!(
                        "FROM '{source}' matches more than {MAX_RESOLVED_TARGETS} objects"
                    )));
                }
                out.push(m.clone());
            }
        }
        match page.last() {
            Some(m) if page.len() == MAX_PAGE_ITEMS => after = Some(m.key().clone()),
            _ => break,
        }
    }
    if out.is_empty() {
        return Err(ComputeError::Target(format!(
            "no object matches '{source}'"
        )));
    }
    Ok(out)
}

/// Bytes `at..at+len` of the version `m` describes, and the bytes of the
/// chunks read for them.
async fn read_bytes<N: StoreNode>(
    store: &ObjectStore<N>,
    m: &Manifest,
    at: u64,
    len: u64,
) -> Result<(Bytes, u64), ComputeError> {
    let name = format!("{}/{}", m.bucket(), m.key());
    let chunk_bytes: u64 = m
        .locate(at, len)
        .map_err(|e| ComputeError::Target(format!("{name}: {e}")))?
        .iter()
        .map(|p| u64::from(p.chunk.len))
        .sum();
    let pieces: Vec<Bytes> = store
        .stream_manifest(m, at, len)
        .map_err(|e| ComputeError::Target(format!("{name}: {e}")))?
        .try_collect()
        .await
        .map_err(|e| ComputeError::Target(format!("{name}: {e}")))?;
    Ok((quarry_proto::join_pieces(&pieces), chunk_bytes))
}

/// An object's footer read and the query bound to it.
async fn read_object<N: StoreNode>(
    store: &ObjectStore<N>,
    query: &Query,
    m: Manifest,
    moved: &mut Moved,
) -> Result<Object, ComputeError> {
    let name = format!("{}/{}", m.bucket(), m.key());
    let size = m.size();
    let not_parquet = |reason: &str| {
        ComputeError::Target(format!(
            "{name}: not a Parquet file the query can read: {reason}"
        ))
    };
    if size < 12 {
        return Err(not_parquet(&format!("{size} bytes is too short")));
    }
    // The object's last chunk holds the trailer and, stored page by page,
    // exactly the footer: read whole, it is fetched once, not twice.
    let last_chunk = m.chunks().last().map_or(size, |c| u64::from(c.len));
    let tail_len = last_chunk.clamp(8, size.min(MAX_FOOTER_BYTES));
    let (tail, read) = read_bytes(store, &m, size - tail_len, tail_len).await?;
    moved.from_devices += read;
    let trailer = &tail[tail.len() - 8..];
    if &trailer[4..] != b"PAR1" {
        return Err(not_parquet("no PAR1 at its end"));
    }
    let mut len_bytes = [0u8; 4];
    len_bytes.copy_from_slice(&trailer[..4]);
    let footer_len = u64::from(u32::from_le_bytes(len_bytes)) + 8;
    if footer_len > size - 4 || footer_len > MAX_FOOTER_BYTES {
        return Err(not_parquet(&format!(
            "its footer claims {footer_len} bytes of a {size}-byte file"
        )));
    }
    let footer = if footer_len <= tail_len {
        tail.slice((tail_len - footer_len) as usize..)
    } else {
        let (footer, read) = read_bytes(store, &m, size - footer_len, footer_len).await?;
        moved.from_devices += read;
        footer
    };
    let plan = query.bind(&name, &footer, size).map_err(query_error)?;
    let mut offsets = Vec::with_capacity(m.chunks().len());
    let mut at = 0u64;
    for c in m.chunks() {
        offsets.push(at);
        at += u64::from(c.len);
    }
    Ok(Object {
        name,
        manifest: m,
        footer,
        plan,
        offsets,
    })
}

/// `chunks` grouped by holder into calls of at most [`MAX_READ_CHUNKS`]
/// chunks and [`MAX_READ_CHUNKS_BYTES`].
fn holder_calls(chunks: &[QueryChunk]) -> Vec<(NodeId, Vec<&QueryChunk>)> {
    let mut by_holder: BTreeMap<NodeId, Vec<&QueryChunk>> = BTreeMap::new();
    for c in chunks {
        by_holder.entry(c.holder).or_default().push(c);
    }
    let mut calls: Vec<(NodeId, Vec<&QueryChunk>)> = Vec::new();
    for (holder, chunks) in by_holder {
        let mut batch: Vec<&QueryChunk> = Vec::new();
        let mut batch_bytes = 0u64;
        for c in chunks {
            let full = batch.len() == MAX_READ_CHUNKS
                || batch_bytes + u64::from(c.len) > MAX_READ_CHUNKS_BYTES;
            if full && !batch.is_empty() {
                calls.push((holder, std::mem::take(&mut batch)));
                batch_bytes = 0;
            }
            batch_bytes += u64::from(c.len);
            batch.push(c);
        }
        if !batch.is_empty() {
            calls.push((holder, batch));
        }
    }
    calls
}

/// The runs of a query: each kept row group goes to the node holding
/// most of the bytes of its column chunks (ties to the node given least
/// so far), and a node's row groups of one object form runs of at most
/// [`RUN_TARGET_BYTES`]. Also returns the row groups in all and read.
fn plan_runs<N: StoreNode>(
    store: &ObjectStore<N>,
    objects: &[Object],
) -> Result<(Vec<Run>, u64, u64), ComputeError> {
    let mut runs: Vec<Run> = Vec::new();
    let mut given: BTreeMap<NodeId, u64> = BTreeMap::new();
    let (mut total, mut read) = (0u64, 0u64);
    for (index, o) in objects.iter().enumerate() {
        total += o.plan.row_groups_total() as u64;
        let kept = o.plan.row_groups().map_err(query_error)?;
        read += kept.len() as u64;
        let mut open: BTreeMap<NodeId, usize> = BTreeMap::new();
        for g in kept {
            let chunks = row_group_chunks(store, o, g)?;
            let mut by_node: BTreeMap<NodeId, u64> = BTreeMap::new();
            for c in chunks.values() {
                *by_node.entry(c.holder).or_default() += u64::from(c.len);
            }
            let Some(node) = evaluating_node(&by_node, &given) else {
                return Err(ComputeError::Target(format!(
                    "{}: row group {g} has no column chunk to read",
                    o.name
                )));
            };
            let bytes: u64 = chunks.values().map(|c| u64::from(c.len)).sum();
            *given.entry(node).or_default() += bytes;
            let fits = |r: &Run| {
                r.bytes + bytes <= RUN_TARGET_BYTES
                    && r.row_groups.len() < MAX_QUERY_RUN_ROW_GROUPS
                    && r.chunks.len() + chunks.len() <= MAX_QUERY_RUN_CHUNKS
            };
            let at = match open.get(&node) {
                Some(&i) if fits(&runs[i]) => i,
                _ => {
                    runs.push(Run {
                        node,
                        object: index,
                        row_groups: Vec::new(),
                        chunks: BTreeMap::new(),
                        bytes: 0,
                    });
                    open.insert(node, runs.len() - 1);
                    runs.len() - 1
                }
            };
            let run = &mut runs[at];
            run.row_groups.push(g as u32);
            for (offset, c) in chunks {
                let len = u64::from(c.len);
                if run.chunks.insert(offset, c).is_none() {
                    run.bytes += len;
                }
            }
        }
    }
    Ok((runs, total, read))
}

/// Where a row group is evaluated, from the bytes of its chunks each node
/// holds (`by_node`): the node holding most of them, so the fewest cross
/// the fabric; among equals, the node given the fewest bytes so far
/// (`given`), so the work spreads. None when it needs no bytes.
fn evaluating_node(
    by_node: &BTreeMap<NodeId, u64>,
    given: &BTreeMap<NodeId, u64>,
) -> Option<NodeId> {
    by_node
        .iter()
        .max_by_key(|(n, b)| (**b, std::cmp::Reverse(given.get(n).copied().unwrap_or(0))))
        .map(|(n, _)| *n)
}

/// The chunks holding row group `g`'s column chunks, by file offset.
fn row_group_chunks<N: StoreNode>(
    store: &ObjectStore<N>,
    o: &Object,
    g: usize,
) -> Result<BTreeMap<u64, QueryChunk>, ComputeError> {
    let mut out = BTreeMap::new();
    let chunks = o.manifest.chunks();
    for range in o.plan.ranges(g).map_err(query_error)? {
        // The first chunk holding range.start, then every chunk up to its end.
        let mut i = o
            .offsets
            .partition_point(|&at| at <= range.start)
            .saturating_sub(1);
        while i < chunks.len() && o.offsets[i] < range.end {
            let c = &chunks[i];
            out.insert(
                o.offsets[i],
                QueryChunk {
                    file_offset: o.offsets[i],
                    fingerprint: c.fingerprint.0,
                    len: c.len,
                    holder: store.placement().chunk_holder(&o.manifest, &c.fingerprint),
                },
            );
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{evaluating_node, glob_match, holder_calls};
    use crate::wire::QueryChunk;
    use quarry_store::{MAX_READ_CHUNKS, MAX_READ_CHUNKS_BYTES};

    #[test]
    fn a_runs_chunks_are_read_in_calls_per_holder_within_a_calls_bounds() {
        let chunk = |i: u64, holder: u16, len: u32| QueryChunk {
            file_offset: i * 10_000_000,
            fingerprint: [i as u8; 32],
            len,
            holder,
        };
        let mut chunks: Vec<QueryChunk> = (0..40).map(|i| chunk(i, 1, 1000)).collect();
        chunks.push(chunk(40, 2, 1000));
        // Three chunks of 6 MiB: the third passes a call's byte bound.
        let big = 6 << 20;
        chunks.extend((41..44).map(|i| chunk(i, 3, big)));
        let calls = holder_calls(&chunks);
        let shape: Vec<(u16, usize)> = calls.iter().map(|(h, c)| (*h, c.len())).collect();
        assert_eq!(
            shape,
            [
                (1, MAX_READ_CHUNKS),
                (1, 40 - MAX_READ_CHUNKS),
                (2, 1),
                (3, 2),
                (3, 1)
            ]
        );
        for (holder, call) in &calls {
            assert!(call.iter().all(|c| c.holder == *holder));
            let bytes: u64 = call.iter().map(|c| u64::from(c.len)).sum();
            assert!(bytes <= MAX_READ_CHUNKS_BYTES);
        }
        // Every chunk is read exactly once.
        let read: usize = calls.iter().map(|(_, c)| c.len()).sum();
        assert_eq!(read, chunks.len());
    }

    #[test]
    fn a_row_group_runs_where_most_of_its_bytes_are() {
        let held = BTreeMap::from([(0, 100), (1, 700), (2, 200)]);
        assert_eq!(evaluating_node(&held, &BTreeMap::new()), Some(1));
        // Even a node given much work already: moving 700 bytes costs more.
        let given = BTreeMap::from([(1, 1 << 30)]);
        assert_eq!(evaluating_node(&held, &given), Some(1));
        // Equal holdings: the node given least so far.
        let tie = BTreeMap::from([(0, 300), (1, 300), (2, 300)]);
        let given = BTreeMap::from([(0, 900), (1, 100), (2, 500)]);
        assert_eq!(evaluating_node(&tie, &given), Some(1));
        assert_eq!(evaluating_node(&BTreeMap::new(), &given), None);
    }

    #[test]
    fn globs_match_within_one_path_segment() {
        assert!(glob_match(b"2013/*.parquet", b"2013/01.parquet"));
        assert!(glob_match(b"2013/??.parquet", b"2013/12.parquet"));
        assert!(!glob_match(b"2013/*.parquet", b"2013/x/01.parquet"));
        assert!(!glob_match(b"*.parquet", b"2013/01.parquet"));
        assert!(glob_match(b"*/*.parquet", b"2013/01.parquet"));
        assert!(!glob_match(b"2013/*.parquet", b"2013/01.csv"));
        assert!(glob_match(b"a*b*c", b"axxbyyc"));
        assert!(!glob_match(b"a*b*c", b"axxbyy"));
    }
}
