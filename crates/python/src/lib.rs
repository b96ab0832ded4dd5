//! `quarry._quarry`: the Python face of Quarry, a thin layer over
//! `quarry-client`. Every call that waits on the cluster runs on one tokio
//! runtime per process with the GIL released ([`runtime::wait`]), so other
//! Python threads run meanwhile. Answers come back as the CLI's `--json`
//! shapes (dicts and lists, from `quarry-jobs`) or as [`ObjectInfo`];
//! failures as the exceptions of [`errors`], carrying the CLI's message.
//!
//! The Python package (`crates/python/python/quarry`) re-exports this
//! module; `pyproject.toml` builds it with maturin into one abi3 wheel.

mod client;
mod compute;
mod convert;
mod errors;
mod objects;
mod put_stream;
mod runtime;

use pyo3::prelude::*;

pub use client::Client;
pub use objects::ObjectInfo;

#[pymodule]
fn _quarry(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<ObjectInfo>()?;
    m.add_function(wrap_pyfunction!(client::connect, m)?)?;
    errors::register(m)?;
    Ok(())
}
