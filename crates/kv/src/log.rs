//! The durable tenants' log: changes reach the node's tables in the order
//! they were made in memory, many batches to one commit (group commit),
//! and a reader of a change not yet committed waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use quarry_store::{Batch, TableStore, MAX_BATCH_BYTES, MAX_BATCH_OPS};
use tokio::sync::{mpsc, oneshot, watch};

/// Batches waiting for the writer: beyond, a durable operation waits before
/// it runs (backpressure, not memory).
const QUEUED_BATCHES: usize = 1024;

/// Most changes one commit of the writer carries: a group stops growing
/// here (a single batch beyond it is committed alone, in pieces).
const GROUP_OPS: usize = MAX_BATCH_OPS / 2;
const GROUP_BYTES: usize = MAX_BATCH_BYTES / 2;

struct Submitted {
    seq: u64,
    batch: Batch,
    bytes: usize,
    done: Option<oneshot::Sender<Result<(), String>>>,
}

/// The log writer's handle.
pub(crate) struct KvLog {
    tx: mpsc::Sender<Submitted>,
    /// The last sequence number handed out; taken with the send so the
    /// channel's order is the numbers' order.
    order: Mutex<u64>,
    durable: watch::Receiver<u64>,
    failed: Arc<AtomicBool>,
}

/// A place in the writer's queue, taken before the change is made.
pub(crate) struct Slot<'a> {
    log: &'a KvLog,
    permit: mpsc::Permit<'a, Submitted>,
}

/// About what a change takes in a log record.
fn op_bytes(op: &quarry_store::Op) -> usize {
    match op {
        quarry_store::Op::Put { key, value, .. } => 16 + key.len() + value.len(),
        quarry_store::Op::Delete { key, .. } => 8 + key.len(),
    }
}

fn batch_bytes(batch: &Batch) -> usize {
    batch.ops().iter().map(op_bytes).sum()
}

impl KvLog {
    /// Starts the writer over `tables`.
    pub(crate) fn start<T: TableStore>(tables: Arc<T>) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(QUEUED_BATCHES);
        let (durable_tx, durable) = watch::channel(0);
        let failed = Arc::new(AtomicBool::new(false));
        tokio::spawn(write_loop(tables, rx, durable_tx, Arc::clone(&failed)));
        Arc::new(Self {
            tx,
            order: Mutex::new(0),
            durable,
            failed,
        })
    }

    /// Whether a commit has failed: memory may then hold changes the log
    /// does not, so the durable tenants refuse everything until a restart
    /// reloads them from what is committed.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Waits for a place in the queue.
    pub(crate) async fn slot(&self) -> Result<Slot<'_>, String> {
        let permit = self
            .tx
            .reserve()
            .await
            .map_err(|_| "the key-value log writer has stopped".to_string())?;
        Ok(Slot { log: self, permit })
    }

    /// The sequence number of the last batch handed to the writer.
    pub(crate) fn last_submitted(&self) -> u64 {
        *self
            .order
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until every batch up to `seq` is committed.
    pub(crate) async fn durable(&self, seq: u64) -> Result<(), String> {
        let mut rx = self.durable.clone();
        rx.wait_for(|&d| d >= seq)
            .await
            .map(|_| ())
            .map_err(|_| "the key-value log writer has stopped".to_string())
    }
}

impl Slot<'_> {
    /// Hands `batch` to the writer (it must be called while the changes'
    /// table is still locked, so the log's order is memory's); the
    /// receiver answers once it is committed.
    pub(crate) fn send(self, batch: Batch) -> oneshot::Receiver<Result<(), String>> {
        let (done, rx) = oneshot::channel();
        let mut order = self
            .log
            .order
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *order += 1;
        let bytes = batch_bytes(&batch);
        self.permit.send(Submitted {
            seq: *order,
            batch,
            bytes,
            done: Some(done),
        });
        rx
    }
}

async fn write_loop<T: TableStore>(
    tables: Arc<T>,
    mut rx: mpsc::Receiver<Submitted>,
    durable: watch::Sender<u64>,
    failed: Arc<AtomicBool>,
) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        let (mut ops, mut bytes) = (group[0].batch.ops().len(), group[0].bytes);
        while ops < GROUP_OPS && bytes < GROUP_BYTES {
            match rx.try_recv() {
                Ok(next) => {
                    ops += next.batch.ops().len();
                    bytes += next.bytes;
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        let last = group.iter().map(|s| s.seq).max().unwrap_or(0);
        let result = if failed.load(Ordering::Acquire) {
            Err("an earlier key-value log commit failed; restart the node".to_string())
        } else {
            commit_group(&*tables, &mut group).await
        };
        if result.is_err() {
            failed.store(true, Ordering::Release);
        }
        for s in &mut group {
            if let Some(done) = s.done.take() {
                let _ = done.send(result.clone());
            }
        }
        if result.is_ok() {
            durable.send_replace(last);
        }
    }
}

/// Commits the group's changes in order: as one batch when it is within
/// the table store's limits, else in pieces that are.
async fn commit_group<T: TableStore>(tables: &T, group: &mut [Submitted]) -> Result<(), String> {
    let mut piece = Batch::new();
    let mut piece_bytes = 0;
    for s in group.iter_mut() {
        for op in std::mem::take(&mut s.batch).into_ops() {
            let n = op_bytes(&op);
            if piece.ops().len() + 1 > GROUP_OPS || piece_bytes + n > GROUP_BYTES {
                tables
                    .commit(std::mem::take(&mut piece))
                    .await
                    .map_err(|e| e.to_string())?;
                piece_bytes = 0;
            }
            piece_bytes += n;
            match op {
                quarry_store::Op::Put { table, key, value } => piece.put(table, key, value),
                quarry_store::Op::Delete { table, key } => piece.delete(table, key),
            }
        }
    }
    tables.commit(piece).await.map_err(|e| e.to_string())
}
