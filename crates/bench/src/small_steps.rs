//! The per-step breakdown of `quarry bench small`: each store call a
//! small put or get is made of, timed alone at QD1 against the entry node
//! and against another member (reached as the client reaches it: over its
//! own connection when the cluster file gives its address, else one hop
//! through the entry node), beside the client's ping of the entry node
//! (the floor of one call through Quarry's stack).

use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use quarry_client::{BucketName, Chunking, Client, Condition, Manifest, ObjectKey, Objects};
use quarry_store_api::{ChunkRef, Fingerprint, NodeId, StoreNode};
use serde::Serialize;

/// One timed step: what it is and its mean latency.
#[derive(Debug, Serialize)]
pub struct Step {
    /// What was timed.
    pub step: String,
    /// Its mean latency at QD1, in microseconds.
    pub us_mean: f64,
}

/// The bytes of a small object of the breakdown, different for every
/// `(round, i)` so no put deduplicates against another.
fn step_bytes(round: u8, i: usize, len: usize) -> Bytes {
    let mut x = (u64::from(round) << 40 | i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// Mean microseconds of `rounds` runs of `call(i)`, one at a time.
async fn time_mean<F, Fut>(rounds: usize, mut call: F) -> Result<f64>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let started = Instant::now();
    for i in 0..rounds {
        call(i).await?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / rounds as f64)
}

/// Times every step of a small put and get, `rounds` times each, on the
/// entry node `entry` and on `other`, another member.
pub async fn breakdown(
    client: &Client,
    objects: &Objects,
    bucket: &BucketName,
    (entry, other): (NodeId, NodeId),
    rounds: usize,
    object_bytes: usize,
) -> Result<Vec<Step>> {
    let mut steps = vec![Step {
        step: "ping of the entry node".into(),
        us_mean: time_mean(rounds, |_| async { Ok(client.ping().await?) }).await?,
    }];
    for (id, place) in [(entry, "entry node"), (other, "another node")] {
        let node = objects.node(id)?;
        let label = |what: &str| format!("{what}, {place}");
        steps.extend(node_steps(&**node, bucket, rounds, object_bytes, id as u8, &label).await?);
    }
    Ok(steps)
}

/// The steps timed against one node: the calls of the two-call put and
/// get (chunk, then manifest; manifest, then chunk) and of the one-call
/// small object put and get.
async fn node_steps<N: StoreNode>(
    node: &N,
    bucket: &BucketName,
    rounds: usize,
    object_bytes: usize,
    round: u8,
    label: &dyn Fn(&str) -> String,
) -> Result<Vec<Step>> {
    let chunks: Vec<Bytes> = (0..rounds)
        .map(|i| step_bytes(round, i, object_bytes))
        .collect();
    let fps: Vec<Fingerprint> = chunks.iter().map(|c| Fingerprint::of(c)).collect();
    let key = |what: &str, i: usize| ObjectKey::new(&format!("steps/{round}/{what}{i:06}"));
    let put_chunk = time_mean(rounds, |i| {
        let data = chunks[i].clone();
        let fp = fps[i];
        async move {
            node.put_chunk(bucket, fp, data).await?;
            Ok(())
        }
    })
    .await?;
    let put_manifest = time_mean(rounds, |i| async move {
        let m = Manifest::new(
            bucket.clone(),
            key("empty", i)?,
            0,
            0,
            Chunking::default(),
            Vec::new(),
        )?;
        node.put_manifest(m, Condition::Always).await?;
        Ok(())
    })
    .await?;
    let get_manifest = time_mean(rounds, |i| async move {
        node.get_manifest(bucket, &key("empty", i)?)
            .await?
            .context("a manifest just put is missing")?;
        Ok(())
    })
    .await?;
    let read_chunk = time_mean(rounds, |i| {
        let fp = fps[i];
        async move {
            if node.read_chunk(fp).await?.len() != object_bytes {
                bail!("a chunk read back with another length");
            }
            Ok(())
        }
    })
    .await?;
    let small = small_steps(node, bucket, rounds, object_bytes, round, &key).await?;
    Ok(vec![
        Step {
            step: label("put_chunk 4 KiB (two-call put, 1st)"),
            us_mean: put_chunk,
        },
        Step {
            step: label("put_manifest (two-call put, 2nd)"),
            us_mean: put_manifest,
        },
        Step {
            step: label("get_manifest (two-call get, 1st)"),
            us_mean: get_manifest,
        },
        Step {
            step: label("read_chunk 4 KiB (two-call get, 2nd)"),
            us_mean: read_chunk,
        },
        Step {
            step: label("put_with_chunk 4 KiB (one-call put)"),
            us_mean: small.0,
        },
        Step {
            step: label("get_with_chunk 4 KiB (one-call get)"),
            us_mean: small.1,
        },
    ])
}

/// Mean us of the one-call put and get of small objects held at `node`.
async fn small_steps<N: StoreNode>(
    node: &N,
    bucket: &BucketName,
    rounds: usize,
    object_bytes: usize,
    round: u8,
    key: &dyn Fn(&str, usize) -> Result<ObjectKey, quarry_client::StoreError>,
) -> Result<(f64, f64)> {
    // Other bytes than the two-call steps put, so these store new chunks.
    let chunks: Vec<Bytes> = (0..rounds)
        .map(|i| step_bytes(round | 0x80, i, object_bytes))
        .collect();
    let put = time_mean(rounds, |i| {
        let data = chunks[i].clone();
        async move {
            let chunk = ChunkRef {
                fingerprint: Fingerprint::of(&data),
                len: data.len() as u32,
            };
            let m = Manifest::new(
                bucket.clone(),
                key("small", i)?,
                0,
                0,
                Chunking::default(),
                vec![chunk],
            )?
            .with_chunk_at_manifest_node()?;
            node.put_with_chunk(m, Condition::Always, data).await?;
            Ok(())
        }
    })
    .await?;
    let get = time_mean(rounds, |i| {
        let want = chunks[i].clone();
        async move {
            let found = node
                .get_with_chunk(bucket, &key("small", i)?)
                .await?
                .context("a small object just put is missing")?;
            if found.chunk.as_deref() != Some(&want[..]) {
                bail!("a small object read back other bytes than were put");
            }
            Ok(())
        }
    })
    .await?;
    Ok((put, get))
}
