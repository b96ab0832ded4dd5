#!/usr/bin/env python3
"""How many requests a disk has in flight while a command runs.

Samples /sys/block/DISK/inflight (reads) about every 0.3 ms while CMD runs
and prints the share of samples in each band of 8 requests. Used in
docs/benchmarks.md to compare fio's queue with the scan's.

    python3 scripts/disk_inflight.py [--disk vda] CMD [ARGS...]
"""
import collections
import subprocess
import sys
import time

MAX_SAMPLES = 10_000_000  # about 50 minutes at the sampling rate


def main() -> int:
    args = sys.argv[1:]
    disk = "vda"
    if len(args) >= 2 and args[0] == "--disk":
        disk, args = args[1], args[2:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    path = f"/sys/block/{disk}/inflight"
    try:
        f = open(path)
    except OSError as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
        return 2
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    bands = collections.Counter()
    samples = 0
    started = time.time()
    while proc.poll() is None and samples < MAX_SAMPLES:
        f.seek(0)
        reads = int(f.read().split()[0])
        bands[min(reads // 8, 10)] += 1
        samples += 1
        time.sleep(0.0003)
    proc.wait()
    elapsed = time.time() - started
    shares = "  ".join(
        f"{b * 8}-{b * 8 + 7}:{100 * n / max(samples, 1):.0f}%" for b, n in sorted(bands.items())
    )
    print(f"{elapsed:.2f} s, {samples} samples: {shares}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
