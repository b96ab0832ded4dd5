//! Commands' answers as JSON, the one shape every face prints or hands
//! back: `quarry run/grep/wc --json` and `quarry jobs --json` print it, and
//! the Python package returns it as dicts and lists.

use quarry_kernels_api::{
    CommandResult, CommandState, CommandStatus, Outcome, Output, QueryOutcome, TargetOutput,
};
use serde_json::{json, Value};

/// A result as JSON, with the bytes scanned and sent.
pub fn result_json(result: &CommandResult, sent_to_client_bytes: u64) -> Value {
    let outcome = match &result.outcome {
        Outcome::Scan(targets) => Value::Array(targets.iter().map(target_json).collect()),
        Outcome::Rmw { values } => json!({ "rmw_values": values }),
        Outcome::Query(q) => query_stats_json(q, sent_to_client_bytes),
    };
    let scanned = result.bytes_scanned;
    json!({
        "results": outcome,
        "bytes_scanned": scanned,
        "bytes_from_nodes": result.bytes_from_nodes,
        "bytes_sent_to_client": sent_to_client_bytes,
        "scanned_per_sent": if sent_to_client_bytes > 0 { scanned as f64 / sent_to_client_bytes as f64 } else { 0.0 },
    })
}

/// What a query read and moved (`quarry query --json` prints it on
/// standard error; Python's `client.query(sql, stats=True)` returns it).
pub fn query_stats_json(q: &QueryOutcome, sent_to_client_bytes: u64) -> Value {
    json!({
        "rows": q.rows,
        "objects": q.objects,
        "row_groups": q.row_groups,
        "row_groups_read": q.row_groups_read,
        "bytes_from_devices": q.bytes_from_devices,
        "bytes_between_nodes": q.bytes_between_nodes,
        "bytes_to_client": sent_to_client_bytes,
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn target_json(t: &TargetOutput) -> Value {
    let output = match &t.output {
        Output::Count(n) => json!({ "count": n }),
        Output::Grep(g) => json!({
            "matching_lines": g.matching_lines,
            "first_nul": g.first_nul,
            "lines": g.match_lines().map(|l| json!({
                "line_number": l.line_number,
                "byte_offset": l.byte_offset,
                "text": text(&l.text),
                "context": l.context,
                "matches": l.matches.iter().map(|(at, m)| json!([at, text(m)])).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }),
        Output::Wc(w) => json!({
            "lines": w.lines,
            "words": w.words,
            "bytes": w.bytes,
            "word_count": w.word_count,
            "top": w.top.iter().map(|(word, n)| json!([text(word), n])).collect::<Vec<_>>(),
        }),
        Output::Checksum(c) => json!({
            "bytes": c.bytes,
            "crc32c": format!("{:08x}", c.crc32c),
            "sha256": c.sha256.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        }),
    };
    json!({ "target": t.target, "size_bytes": t.size_bytes, "output": output })
}

/// A command state as `quarry jobs` prints it (`failed: REASON` for a failure).
pub fn state_text(state: &CommandState) -> String {
    match state {
        CommandState::Queued => "queued".into(),
        CommandState::Running => "running".into(),
        CommandState::Done => "done".into(),
        CommandState::Failed { reason } => format!("failed: {reason}"),
        CommandState::Cancelled => "cancelled".into(),
    }
}

/// A command's status as `quarry jobs --json` prints each row.
pub fn status_json(status: &CommandStatus) -> Value {
    json!({
        "id": status.id,
        "kernel": status.kernel,
        "state": state_text(&status.state),
        "bytes_done": status.bytes_done,
        "bytes_total": status.bytes_total,
        "elapsed_ms": status.elapsed_ms,
        "result_bytes": status.result_bytes,
        "peak_memory_bytes": status.peak_memory_bytes,
    })
}
