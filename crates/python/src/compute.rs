//! The command/status API: what `quarry grep/wc/run/jobs/cancel` do, with
//! their `--json` answers as Python values.

use quarry_client::{CommandId, Compute, Job, KernelSpec, Limits, Target, WcSpec};
use quarry_jobs::{parse_job, parse_target, result_json, status_json, GrepOptions};
use serde_json::Value;

use crate::errors::Failure;

/// The limits of a command (the CLI's defaults where not given).
pub fn limits(
    time_limit_ms: Option<u64>,
    memory_limit_bytes: Option<u64>,
    result_limit_bytes: Option<u64>,
) -> Limits {
    let default = Limits::default();
    Limits {
        time_ms: time_limit_ms.unwrap_or(default.time_ms),
        memory_bytes: memory_limit_bytes.unwrap_or(default.memory_bytes),
        result_bytes: result_limit_bytes.unwrap_or(default.result_bytes),
    }
}

/// Targets as `quarry grep` reads them: `BUCKET/KEY`, `BUCKET/PREFIX*`,
/// `BUCKET/`, `volume:NAME[@OFFSET[+LEN]]`, `linear:FIRST+PAGES`.
pub fn targets(texts: &[String]) -> Result<Vec<Target>, Failure> {
    if texts.is_empty() {
        return Err(Failure::invalid(
            "name what to search: BUCKET/KEY, BUCKET/PREFIX*, BUCKET/, volume:NAME or \
             linear:FIRST+PAGES",
        ));
    }
    Ok(texts
        .iter()
        .map(|t| parse_target(t))
        .collect::<Result<_, _>>()?)
}

/// The wc kernel's spec as `quarry wc` builds it: words are counted unless
/// only `word` or `top` is asked for.
pub fn wc_spec(words: Option<bool>, word: Option<String>, top: Option<u32>) -> WcSpec {
    let words = words.unwrap_or(word.is_none() && top.is_none());
    WcSpec {
        words,
        word: word.map(String::into_bytes),
        top,
        locale: quarry_jobs::wc_locale(),
    }
}

/// Runs a kernel to its end; its result as `--json` prints it.
pub async fn run(
    compute: &Compute,
    job: Job,
    targets: Vec<Target>,
    limits: Limits,
) -> Result<Value, Failure> {
    let (result, sent) = compute.run(job, targets, limits).await?;
    Ok(result_json(&result, sent))
}

/// Runs a query to its end: its answer (an Arrow IPC stream) and what it
/// read and moved, as `quarry query --json` prints it.
pub async fn query(
    compute: &Compute,
    sql: String,
    limits: Limits,
) -> Result<(Vec<u8>, Value), Failure> {
    let job = Job::Query(quarry_client::QuerySpec { sql });
    let (result, sent) = compute.run(job, Vec::new(), limits).await?;
    match result.outcome {
        quarry_client::Outcome::Query(q) => {
            let stats = quarry_jobs::query_stats_json(&q, sent);
            Ok((q.arrow_ipc, stats))
        }
        _ => Err(Failure::invalid(
            "the command answered something other than a query",
        )),
    }
}

/// A grep job.
pub fn grep_job(options: GrepOptions) -> Result<Job, Failure> {
    let spec = options
        .spec()
        .map_err(|e| Failure::invalid(e.to_string()))?;
    Ok(Job::Scan(KernelSpec::Grep(spec)))
}

/// `quarry run KERNEL ARGS... TARGETS...` read as the CLI reads it.
pub fn parse_run(kernel: &str, args: &[String]) -> Result<(Job, Vec<Target>), Failure> {
    let (job, rest) = parse_job(kernel, args)?;
    Ok((job, targets(&rest)?))
}

/// Submits without waiting; the command's number.
pub async fn submit(
    compute: &Compute,
    job: Job,
    targets: Vec<Target>,
    limits: Limits,
) -> Result<CommandId, Failure> {
    Ok(compute.submit(job, targets, limits).await?)
}

/// A command's status as a `quarry jobs --json` row.
pub async fn status(compute: &Compute, id: CommandId) -> Result<Value, Failure> {
    Ok(status_json(&compute.status(id).await?))
}

/// Waits until the command is final or `timeout_ms` passes.
pub async fn wait(compute: &Compute, id: CommandId, timeout_ms: u64) -> Result<Value, Failure> {
    let status = compute
        .wait(id, std::time::Duration::from_millis(timeout_ms))
        .await?;
    Ok(status_json(&status))
}

/// Cancels a command; its status then.
pub async fn cancel(compute: &Compute, id: CommandId) -> Result<Value, Failure> {
    Ok(status_json(&compute.cancel(id).await?))
}

/// A done command's result.
pub async fn result(compute: &Compute, id: CommandId) -> Result<Value, Failure> {
    let (result, sent) = compute.result(id).await?;
    Ok(result_json(&result, sent))
}

/// Every command the entry node holds.
pub async fn jobs(compute: &Compute) -> Result<Value, Failure> {
    let list = compute.list().await?;
    Ok(Value::Array(list.iter().map(status_json).collect()))
}
