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
source scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --all-targets
cargo test --workspace --doc
# The Python package's suite (crates/python/tests): setup.sh built the
# package into .venv; the tests start a local cluster of the `quarry` binary
# `cargo test` built above for the CLI's tests (a `cargo build --bin quarry`
# would resolve features for the CLI alone and build four crates again).
export QUARRY_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/quarry"
.venv/bin/python -m pytest -q crates/python/tests
