"""A real local cluster for the session, started with the built `quarry`
binary (`quarry up --detach`) and stopped in a finalizer. Nothing here
skips: a cluster that cannot start fails the tests, saying why."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import quarry

REPO = Path(__file__).resolve().parents[3]
NODES = 3
CAPACITY = "128M"


def quarry_binary() -> Path:
    """The CLI the tests compare with and start the cluster with."""
    path = Path(os.environ.get("QUARRY_BIN", REPO / "target" / "debug" / "quarry"))
    if not path.is_file():
        pytest.fail(
            f"no quarry binary at {path}: build it with `cargo build -p quarry-cli` "
            "(scripts/test.sh does) or set QUARRY_BIN"
        )
    return path


class Cli:
    """Runs `quarry ... --cluster FILE` the way a user would."""

    def __init__(self, binary: Path, cluster_file: Path):
        self.binary = binary
        self.cluster_file = cluster_file

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.binary), *args, "--cluster", str(self.cluster_file)],
            capture_output=True,
            timeout=300,
        )

    def ok(self, *args: str) -> bytes:
        done = self.run(*args)
        assert done.returncode == 0, f"quarry {' '.join(args)}: {done.stderr.decode()}"
        return done.stdout

    def json(self, *args: str):
        return json.loads(self.ok(*args, "--json"))

    def error(self, *args: str) -> str:
        """The message `quarry` prints for a failure, without `error: `."""
        done = self.run(*args)
        assert done.returncode != 0, f"quarry {' '.join(args)} succeeded"
        text = done.stderr.decode()
        said = [l for l in text.splitlines() if l.startswith("error: ")]
        assert said, text
        return said[-1][len("error: "):]


@pytest.fixture(scope="session")
def cluster_dir(tmp_path_factory, request) -> Path:
    binary = quarry_binary()
    directory = tmp_path_factory.mktemp("cluster")
    up = subprocess.run(
        [
            str(binary), "up", "--dir", str(directory), "--detach",
            "--nodes", str(NODES), "--device", "mem", "--capacity", CAPACITY,
        ],
        capture_output=True,
        timeout=300,
    )

    def down():
        subprocess.run([str(binary), "down", "--dir", str(directory)], capture_output=True, timeout=120)

    request.addfinalizer(down)
    if up.returncode != 0:
        pytest.fail(
            f"the local cluster did not start (quarry up exited {up.returncode}): "
            f"{up.stderr.decode()}{up.stdout.decode()}"
        )
    if not (directory / "cluster.toml").is_file():
        pytest.fail(f"quarry up wrote no {directory / 'cluster.toml'}")
    return directory


@pytest.fixture(scope="session")
def cluster_file(cluster_dir) -> Path:
    return cluster_dir / "cluster.toml"


@pytest.fixture(scope="session")
def cli(cluster_file) -> Cli:
    return Cli(quarry_binary(), cluster_file)


@pytest.fixture(scope="session")
def client(cluster_file) -> quarry.Client:
    return quarry.connect(cluster=str(cluster_file))


def node_addrs(cluster_file: Path):
    """The members' addresses, in file order."""
    return re.findall(r'^addr\s*=\s*"([^"]+)"', cluster_file.read_text(), re.M)


_buckets = iter(range(10**6))


@pytest.fixture
def bucket(client) -> str:
    """A new, empty bucket of its own for each test."""
    name = f"t{os.getpid()}-{next(_buckets)}"
    client.make_bucket(name)
    return name


def pattern_bytes(size: int, seed: int = 7) -> bytes:
    """`size` bytes that differ from chunk to chunk (no dedup hides a
    misplaced piece) and hold text lines for grep and wc."""
    import random

    rng = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"quarry", b"stone"]
    out = bytearray()
    line = 0
    while len(out) < size:
        out += b" ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        out += b" %d\n" % line
        line += 1
    return bytes(out[:size])
