#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, property, integration and
# multi-process tests (the network-namespace test too: it needs root and
# iproute2, as every test's need is met by scripts/setup.sh or fails the test).
# CI runs exactly this (via .ci/run, with CI set). On a development machine
# without, say, FUSE, QUARRY_ALLOW_MISSING=1 skips the tests that need it,
# each saying so; CI never does.
set -euo pipefail
cd "$(dirname "$0")/.."
# CI builds from a clean clone once: incremental compilation's caches (and
# its finer codegen units) only cost time there.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
# The lints run inside the test build: clippy-driver is rustc with clippy's
# lints added (it is how `cargo clippy` runs them), so as the workspace's
# wrapper it lints each crate of the workspace while compiling it, with every
# warning an error, as `cargo clippy --workspace --all-targets -- -D warnings`
# would. A separate `cargo clippy` type-checked the whole tree a second time
# (377 s of a clean build here). Exported before setup, so the Python package's
# build (maturin) compiles the workspace's crates the same way and the test
# build reuses them.
clippy_driver="$(command -v clippy-driver || command -v "$HOME/.cargo/bin/clippy-driver" || true)"
if [ -z "$clippy_driver" ]; then
  echo "test: clippy-driver is missing; rustup component add clippy" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
source scripts/setup.sh
cargo fmt --all -- --check
cargo test --workspace --all-targets
cargo test --workspace --doc
# The Python package's suite (crates/python/tests): setup.sh built the
# package into .venv; the tests start a local cluster of the `quarry` binary
# `cargo test` built above for the CLI's tests (a `cargo build --bin quarry`
# would resolve features for the CLI alone and build four crates again).
export QUARRY_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/quarry"
.venv/bin/python -m pytest -q crates/python/tests
