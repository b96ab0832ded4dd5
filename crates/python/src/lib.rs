//! `quarry._quarry`: the Python face of Quarry, a thin layer over
//! `quarry-client`. Every call that waits on the cluster runs on one tokio
//! runtime per process with the GIL released ([`runtime::wait`]), so other
//! Python threads run meanwhile. Answers come back as the CLI's `--json`
//! shapes (dicts and lists, from `quarry-jobs`) or as [`ObjectInfo`];
//! failures as the exceptions of [`errors`], carrying the CLI's message.
//!
//! The Python package (`crates/python/python/quarry`) re-exports this
//! module; `pyproject.toml` builds it with maturin into one abi3 wheel.
//!
//! ```python
//! import quarry
//!
//! client = quarry.connect()            # as the CLI finds the cluster
//! client.make_bucket("photos")
//! client.put("photos", "2024/cat.jpg", b"meow")
//! assert client.get("photos", "2024/cat.jpg") == b"meow"
//! print(client.grep("meow", "photos/", count=True))
//! ```
//!
//! (Python, so rustdoc does not run it; the package's pytest suite calls
//! every method against a real cluster, and `tests/test_stubs.py` checks
//! that each method's docstring has an example.)
#![deny(missing_docs)]

mod client;
mod compute;
mod convert;
mod errors;
mod kv;
mod objects;
mod put_stream;
mod runtime;

use pyo3::prelude::*;

pub use client::Client;
pub use kv::{KvItem, KvTable};
pub use objects::ObjectInfo;

#[pymodule]
fn _quarry(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<ObjectInfo>()?;
    m.add_class::<KvTable>()?;
    m.add_class::<KvItem>()?;
    m.add_function(wrap_pyfunction!(client::connect, m)?)?;
    errors::register(m)?;
    Ok(())
}
