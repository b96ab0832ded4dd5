#!/usr/bin/env bash
# Installs what Quarry needs on a fresh Debian machine of this kind: system
# packages (fio for the side-by-side benchmarks, fuse3 for the mount, sqlite3
# for its application test, iproute2
# for the multi-host tests, ripgrep as the peer of grep near the data) and a Rust toolchain if none is present.
# Idempotent and quick when everything is already there.
set -euo pipefail

# /dev/null must be the null device. This machine has been seen with a regular
# file there (left by whatever rebuilt its file tree), and then a build breaks
# in a way that names neither: build scripts write their probes' errors into
# the file, and cargo's next `rustc -` reads them back as source. So the device
# is checked before anything writes to it, and made again when we are root.
if [ ! -c /dev/null ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "setup: /dev/null is not the null device; making it again" >&2
    rm -f /dev/null
    mknod -m 666 /dev/null c 1 3
  else
    echo "setup: /dev/null is not the null device (ls -l /dev/null); as root: rm /dev/null && mknod -m 666 /dev/null c 1 3" >&2
    exit 1
  fi
fi

need=()
command -v fio >/dev/null 2>&1 || need+=(fio)
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v rg >/dev/null 2>&1 || need+=(ripgrep)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: no Rust toolchain found; install one with rustup (https://rustup.rs)" >&2
    exit 1
  fi
fi
