//! Owns no code, only dependency features (see its `Cargo.toml`).
//!
//! Cargo resolves a dependency's features from the packages one build
//! selects. `maturin develop` builds the Python package alone and `cargo
//! test --workspace` builds everything, so a feature that one turned on and
//! the other did not gave every crate above it (arrow and parquet among
//! them) a second build. quarry-python depends on this crate, which turns
//! on the features the rest of the workspace does; the two builds then
//! share one build of every dependency. The test `aligned` fails when they
//! drift apart, naming the packages.
//!
//! There is nothing to call:
//!
//! ```
//! // The crate is linked for its Cargo.toml only.
//! ```
#![deny(missing_docs)]
