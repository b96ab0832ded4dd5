#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, property, integration and
# multi-process tests. CI runs exactly this (via .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --all-targets
cargo test --workspace --doc
