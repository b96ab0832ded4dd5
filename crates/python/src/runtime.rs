//! The one tokio runtime of the process, and the only way the extension
//! waits on it: with the GIL released.

use std::future::Future;
use std::sync::OnceLock;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::{Failure, Kind};

/// Worker threads of the runtime: the client's work is I/O and hashing of
/// chunks, which two threads keep up with (the CLI uses as many).
const WORKER_THREADS: usize = 2;

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The process's runtime, built on first use.
pub fn get() -> Result<&'static Runtime, Failure> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(WORKER_THREADS)
                .thread_name("quarry-client")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the async runtime: {e}"))
        })
        .as_ref()
        .map_err(|message| Failure::new(Kind::Other, message.clone()))
}

/// Runs `work` to completion on the runtime with the GIL released, so
/// other Python threads run while this one waits on the network.
pub fn wait<T, F>(py: Python<'_>, work: F) -> Result<T, Failure>
where
    F: Future<Output = Result<T, Failure>> + Send,
    T: Send,
{
    let runtime = get()?;
    py.detach(|| runtime.block_on(work))
}
