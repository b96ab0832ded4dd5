//! The JSON of buckets and usage, as the CLI's `quarry ls --json` and
//! `quarry df --json` print it and the Python package returns it: one
//! shape for both faces.

use quarry_store_api::{BucketConfig, BucketName, Usage};
use serde_json::{json, Value};

use crate::chunking_text::describe_chunking;

/// The buckets as `quarry ls --json` lists them.
pub fn buckets_json(buckets: &[(BucketName, BucketConfig)]) -> Value {
    Value::Array(
        buckets
            .iter()
            .map(|(b, c)| {
                json!({
                    "bucket": b.as_str(),
                    "chunking": describe_chunking(&c.chunking),
                    "created_unix_ms": c.created_unix_ms,
                })
            })
            .collect(),
    )
}

/// Usage as `quarry df --json` prints it: per bucket and for the cluster.
pub fn usage_json(usage: &Usage) -> Value {
    let buckets: serde_json::Map<String, Value> = usage
        .buckets
        .iter()
        .map(|(b, u)| {
            (
                b.to_string(),
                json!({
                    "objects": u.objects,
                    "logical_bytes": u.logical_bytes,
                    "stored_bytes": u.stored_bytes,
                    "chunks": u.chunks,
                    "dedup_ratio": u.dedup_ratio(),
                }),
            )
        })
        .collect();
    json!({
        "buckets": buckets,
        "cluster": {
            "objects": usage.objects,
            "logical_bytes": usage.logical_bytes,
            "stored_bytes": usage.stored_bytes,
            "chunks": usage.chunks,
            "dedup_ratio": usage.dedup_ratio(),
        }
    })
}
