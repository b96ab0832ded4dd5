#!/usr/bin/env bash
# The main job: build Quarry, start the embedded 4-node local cluster (if none
# is running) and run the demo against it. `target/release/quarry down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release --quiet --bin quarry
exec target/release/quarry demo "$@"
