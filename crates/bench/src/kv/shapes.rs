//! The figures of `quarry bench kv` that are shapes rather than races:
//! what deduplication adds to a set (Multes++ Fig. 4), Minerva's batched
//! gets against round trips and pipelines, reading array elements one or
//! many per call (Multes++ Fig. 5), and a quiet tenant's tail latency
//! beside a tenant over its rate limit.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use quarry_client::{Client, Expiry};
use quarry_local::LocalCluster;
use serde_json::{json, Value};

use super::load::{drive, key_of, preload, value_of, Conn, Mix, Target};
use super::peers::quarry_target;
use super::Plan;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) async fn figures(
    plan: &Plan,
    cluster: &LocalCluster,
    memcached: &Target,
) -> Result<Value> {
    Ok(json!({
        "dedup_added_latency": dedup_latency(plan, cluster).await?,
        "batched_gets": batching(plan, cluster, memcached).await?,
        "array_elements_per_call": arrays(plan, cluster).await?,
        "isolation": isolation(plan, cluster).await?,
    }))
}

/// One connection's set latency with and without dedup, rounds
/// alternating; the difference per 512 bytes (Multes++: about 3 us).
async fn dedup_latency(plan: &Plan, cluster: &LocalCluster) -> Result<Value> {
    let with = quarry_target(cluster, 0, "cache")?;
    let without = quarry_target(cluster, 0, "nodedup")?;
    let rounds = if plan.quick { 1 } else { 3 };
    let mut out = Vec::new();
    for size in [512usize, 2048, 8192, 65536] {
        let mix = Mix {
            get_fraction: 0.0,
            zipfian: false,
            value_bytes: size,
            keys: 1000,
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            a.push(
                drive(&with, mix, 1, plan.cell)
                    .await?
                    .latency
                    .quantile_us(0.5),
            );
            b.push(
                drive(&without, mix, 1, plan.cell)
                    .await?
                    .latency
                    .quantile_us(0.5),
            );
        }
        let (a, b) = (median(a), median(b));
        out.push(json!({
            "value_bytes": size,
            "set_us_p50_dedup": a,
            "set_us_p50_no_dedup": b,
            "added_us_per_512_bytes": (a - b) / (size as f64 / 512.0),
        }));
    }
    Ok(Value::Array(out))
}

/// 1000 gets: one batched call through the Rust client (one call per
/// node, run in the node as one operation) vs 1000 round trips vs 1000
/// pipelined gets vs one multi-key get, through Quarry's memcached face
/// and memcached's.
async fn batching(plan: &Plan, cluster: &LocalCluster, memcached: &Target) -> Result<Value> {
    let n = 1000u64;
    let rounds = if plan.quick { 3 } else { 15 };
    let client = Client::connect_cluster(&cluster.cluster).await?;
    let tables = client.kv("cache", "cache-pw").await?;
    let keys: Vec<Bytes> = (0..n)
        .map(|i| Bytes::from(format!("batch{i:015}")))
        .collect();
    let items = keys.iter().map(|k| (k.clone(), value_of(100, 7))).collect();
    tables.set_many(items, Expiry::Never).await?;
    let mut batched = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let got = tables.get_many(&keys).await?;
        batched.push(micros(t.elapsed()));
        anyhow::ensure!(got.iter().all(Option::is_some), "a batched get missed");
    }
    let ours = quarry_target(cluster, 0, "cache")?;
    preload(
        memcached,
        Mix {
            get_fraction: 1.0,
            zipfian: false,
            value_bytes: 100,
            keys: n,
        },
        4,
        64,
    )
    .await?;
    let mut rows = vec![
        json!({"system": "quarry", "how": "one batched call (Rust client)", "us_per_1000": median(batched)}),
    ];
    for (system, target, key) in [
        (
            "quarry",
            &ours,
            &(|i: u64| format!("batch{i:015}")) as &dyn Fn(u64) -> String,
        ),
        (
            "memcached",
            memcached,
            &(key_of as fn(u64) -> String) as &dyn Fn(u64) -> String,
        ),
    ] {
        let mut conn = Conn::open(target).await?;
        let (mut trips, mut piped, mut multi) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            for i in 0..n {
                conn.queue_get(key(i).as_bytes());
                conn.send().await?;
                conn.get_answer().await?;
            }
            trips.push(micros(t.elapsed()));
            let t = Instant::now();
            for i in 0..n {
                conn.queue_get(key(i).as_bytes());
            }
            conn.send().await?;
            for _ in 0..n {
                conn.get_answer().await?;
            }
            piped.push(micros(t.elapsed()));
            let line: Vec<String> = (0..n).map(key).collect();
            let t = Instant::now();
            conn.queue_raw(format!("get {}\r\n", line.join(" ")).as_bytes());
            conn.send().await?;
            let found = conn.values_until_end().await?;
            multi.push(micros(t.elapsed()));
            anyhow::ensure!(
                found == n as usize,
                "{system}: a multi-get found {found} of {n}"
            );
        }
        rows.push(
            json!({"system": system, "how": "1000 round trips", "us_per_1000": median(trips)}),
        );
        rows.push(
            json!({"system": system, "how": "1000 pipelined gets", "us_per_1000": median(piped)}),
        );
        rows.push(
            json!({"system": system, "how": "one get of 1000 keys", "us_per_1000": median(multi)}),
        );
    }
    Ok(Value::Array(rows))
}

/// An array of 1000 elements of 1 KiB: reading k of them in one call
/// (the directory, then the k elements in one batch) for k = 1 .. 1000,
/// beside one plain get.
async fn arrays(plan: &Plan, cluster: &LocalCluster) -> Result<Value> {
    let rounds = if plan.quick { 5 } else { 50 };
    let client = Client::connect_cluster(&cluster.cluster).await?;
    let tables = client.kv("cache", "cache-pw").await?;
    let elements: Vec<Bytes> = (0..1000).map(|i| value_of(1024, i)).collect();
    tables.array_set(b"array", elements, Expiry::Never).await?;
    tables
        .set(b"plain", value_of(1024, 1), 0, Expiry::Never)
        .await?;
    let mut plain = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        tables
            .get(b"plain")
            .await?
            .context("the plain value is gone")?;
        plain.push(micros(t.elapsed()));
    }
    let mut rows = vec![
        json!({"elements": 1, "how": "plain get (one round trip)", "us_per_call": median(plain)}),
    ];
    for k in [1u32, 10, 100, 1000] {
        let indices: Vec<u32> = (0..k).collect();
        let mut times = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            let got = tables
                .array_get_many(b"array", &indices)
                .await?
                .context("no array")?;
            times.push(micros(t.elapsed()));
            anyhow::ensure!(got.len() == k as usize, "{} of {k} elements", got.len());
        }
        let us = median(times);
        rows.push(json!({"elements": k, "how": "array_get_many", "us_per_call": us, "us_per_element": us / f64::from(k)}));
    }
    Ok(Value::Array(rows))
}

/// A quiet tenant's get latency alone, then beside a tenant whose 32
/// connections run flat out over its rate limit, through the same node.
async fn isolation(plan: &Plan, cluster: &LocalCluster) -> Result<Value> {
    let quiet = quarry_target(cluster, 0, "quiet")?;
    let noisy = quarry_target(cluster, 0, "noisy")?;
    let mix = Mix {
        get_fraction: 0.9,
        zipfian: false,
        value_bytes: 1000,
        keys: 1000,
    };
    preload(&quiet, mix, 4, 64).await?;
    let cell = plan.cell.max(Duration::from_secs(1));
    let alone = drive(&quiet, mix, 1, cell).await?;
    let noisy_mix = Mix {
        get_fraction: 0.5,
        ..mix
    };
    let (beside, flood) = tokio::join!(
        drive(&quiet, mix, 1, cell),
        drive(&noisy, noisy_mix, 32, cell + Duration::from_millis(200))
    );
    let (beside, flood) = (beside?, flood?);
    let alone_p99 = alone.latency.quantile_us(0.99);
    let beside_p99 = beside.latency.quantile_us(0.99);
    Ok(json!({
        "quiet_alone_us_p99": alone_p99,
        "quiet_beside_noisy_us_p99": beside_p99,
        "p99_ratio": beside_p99 / alone_p99.max(1e-9),
        "quiet_ops_per_sec_alone": alone.ops_per_sec(),
        "quiet_ops_per_sec_beside": beside.ops_per_sec(),
        "noisy_ops_per_sec": flood.ops_per_sec(),
        "noisy_refused": flood.server_errors,
    }))
}
