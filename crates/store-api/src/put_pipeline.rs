//! The chunk half of a put: read chunks, hash them on the cores that are
//! free, and send each to the node its fingerprint names, all three
//! overlapping, with the bytes between reading and acknowledgement bounded.
//!
//! Hashing is the put's largest cost (SHA-256: ~1.7 GiB/s a core here), so
//! chunks are hashed in groups on tokio's blocking threads, up to one group
//! per core at once, while the puts of groups already hashed are on the
//! network. A group is ~1 MiB so that handing it to another thread (~30 us
//! to wake one on this VM) costs a few percent of hashing it; a group too
//! small to pay for that (a small object) is hashed where it is.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::io::AsyncRead;

use crate::chunking::AsyncChunker;
use crate::error::{Result, StoreError};
use crate::fingerprint::Fingerprint;
use crate::manifest::ChunkRef;
use crate::name::BucketName;
use crate::remote::StoreNode;

/// Chunk bytes hashed as one task on a blocking thread.
const HASH_GROUP_BYTES: usize = 1 << 20;
/// Below this a group is hashed in the putting task: a thread hand-off
/// would cost more than it saves.
const INLINE_HASH_BYTES: usize = 256 << 10;

/// Chunks read and waiting to be hashed together: (index in the object, bytes).
type Group = Vec<(usize, Bytes)>;
/// A group's chunks with their fingerprints.
type Hashed = Vec<(usize, Fingerprint, Bytes)>;
type HashFuture = Pin<Box<dyn Future<Output = Result<Hashed>> + Send>>;

fn hash_group(group: Group) -> Hashed {
    group
        .into_iter()
        .map(|(index, data)| (index, Fingerprint::of(&data), data))
        .collect()
}

/// Hashes a group where it pays: on a blocking thread, or here if small.
fn spawn_hash(group: Group) -> HashFuture {
    let bytes: usize = group.iter().map(|(_, d)| d.len()).sum();
    if bytes < INLINE_HASH_BYTES {
        let hashed = hash_group(group);
        return Box::pin(async move { Ok(hashed) });
    }
    let task = tokio::task::spawn_blocking(move || hash_group(group));
    Box::pin(async move {
        task.await
            .map_err(|e| StoreError::Backend(format!("hashing a chunk group failed: {e}")))
    })
}

/// Hashing groups at once: one per core this process may use.
fn hash_groups_at_once() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The state of one put's chunk pipeline.
pub(crate) struct ChunkPuts<'a, N> {
    pub bucket: &'a BucketName,
    /// The node each fingerprint is put on.
    pub node_of: &'a (dyn Fn(&Fingerprint) -> &'a N + Sync),
    /// Bound on the bytes read and not yet acknowledged.
    pub in_flight_bytes_max: u64,
    /// Bound on the chunks of one object.
    pub chunks_max: usize,
}

impl<N: StoreNode> ChunkPuts<'_, N> {
    /// Puts every chunk of `chunker`'s source. Every chunk whose put
    /// succeeded is pushed onto `taken` as it succeeds (what a failure
    /// must release), failures included; the object's references come back
    /// in object order once all succeeded.
    pub async fn run<R: AsyncRead + Unpin>(
        &self,
        chunker: &mut AsyncChunker<R>,
        taken: &mut Vec<ChunkRef>,
    ) -> Result<Vec<ChunkRef>> {
        let mut refs: Vec<Option<ChunkRef>> = Vec::new();
        let mut hashing: FuturesUnordered<HashFuture> = FuturesUnordered::new();
        let mut putting = FuturesUnordered::new();
        let mut in_flight_bytes: u64 = 0;
        let mut first_error: Option<StoreError> = None;
        let mut source_done = false;
        let groups_max = hash_groups_at_once();
        loop {
            if first_error.is_none() && !source_done && hashing.len() < groups_max {
                let mut group = Group::new();
                let mut group_bytes = 0;
                // Read while the bound allows (always at least one chunk
                // when nothing is in flight, so a put always progresses).
                while group_bytes < HASH_GROUP_BYTES
                    && (in_flight_bytes < self.in_flight_bytes_max
                        || (putting.is_empty() && hashing.is_empty() && group.is_empty()))
                {
                    let Some(chunk) = chunker.next_chunk().await? else {
                        source_done = true;
                        break;
                    };
                    if refs.len() == self.chunks_max {
                        first_error = Some(StoreError::TooManyChunks {
                            limit: self.chunks_max,
                        });
                        break;
                    }
                    group_bytes += chunk.data.len();
                    in_flight_bytes += chunk.data.len() as u64;
                    group.push((refs.len(), chunk.data));
                    refs.push(None);
                }
                if !group.is_empty() {
                    hashing.push(spawn_hash(group));
                }
            }
            tokio::select! {
                Some(hashed) = hashing.next() => {
                    for (index, fingerprint, data) in hashed? {
                        let chunk_ref = ChunkRef { fingerprint, len: data.len() as u32 };
                        let node = (self.node_of)(&fingerprint);
                        let bucket = self.bucket;
                        putting.push(async move {
                            let put = node.put_chunk(bucket, fingerprint, data).await;
                            (index, chunk_ref, put)
                        });
                    }
                }
                Some((index, chunk_ref, put)) = putting.next() => {
                    in_flight_bytes -= u64::from(chunk_ref.len);
                    match put {
                        Ok(_) => {
                            refs[index] = Some(chunk_ref);
                            taken.push(chunk_ref);
                        }
                        // The rest in flight are waited for, so every
                        // reference taken is known and released.
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                else => {
                    if first_error.is_some() || source_done {
                        break;
                    }
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // Every chunk was read, hashed and acknowledged: no slot is empty.
        refs.into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| StoreError::Backend("a put lost track of one of its chunks".into()))
    }
}
