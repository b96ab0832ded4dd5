#!/usr/bin/env bash
# Installs what Quarry needs on a fresh Debian machine of this kind: system
# packages (fio for the side-by-side benchmarks, fuse3 for the mount, sqlite3
# for its application test, iproute2
# for the multi-host tests, ripgrep as the peer of grep near the data) and a Rust toolchain if none is present.
# Idempotent and quick when everything is already there.
set -euo pipefail

# The device nodes the build and the tests use must be devices. This machine
# has been seen with a regular file at /dev/null (left by whatever rebuilt its
# file tree), and then a build breaks in a way that names neither: build
# scripts write their probes' errors into the file, and cargo's next `rustc -`
# reads them back as source. So each is checked before anything writes to it,
# and made again when we are root. /dev/fuse is only mended, never made: where
# it is missing the kernel has no FUSE, and the mount tests say so.
ensure_device() { # PATH MAJOR MINOR MODE [only-if-present]
  local path=$1 major=$2 minor=$3 mode=$4
  [ -c "$path" ] && return 0
  if [ "${5:-}" = only-if-present ] && [ ! -e "$path" ]; then return 0; fi
  if [ "$(id -u)" -eq 0 ]; then
    echo "setup: $path is not the device it should be; making it again" >&2
    rm -f "$path"
    mknod -m "$mode" "$path" c "$major" "$minor"
  else
    echo "setup: $path is not the device it should be (ls -l $path); as root: rm $path && mknod -m $mode $path c $major $minor" >&2
    exit 1
  fi
}
ensure_device /dev/null 1 3 666
ensure_device /dev/zero 1 5 666
ensure_device /dev/urandom 1 9 666
ensure_device /dev/fuse 10 229 666 only-if-present

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
