"""Connecting as the CLI does: a cluster file, $QUARRY_CLUSTER, ./.quarry,
or one node's address; a missing cluster file is the CLI's error."""

import pytest

import quarry
from conftest import Cli, node_addrs


def test_connect_through_a_cluster_file_the_environment_and_an_address(
    cluster_file, bucket, monkeypatch, tmp_path
):
    via_file = quarry.connect(cluster=str(cluster_file))
    via_file.put(bucket, "k", b"seen by all")

    monkeypatch.setenv("QUARRY_CLUSTER", str(cluster_file))
    assert quarry.connect().get(bucket, "k") == b"seen by all"

    # ./.quarry/cluster.toml when nothing else is named.
    monkeypatch.delenv("QUARRY_CLUSTER")
    (tmp_path / ".quarry").mkdir()
    (tmp_path / ".quarry" / "cluster.toml").write_text(cluster_file.read_text())
    monkeypatch.chdir(tmp_path)
    assert quarry.connect().get(bucket, "k") == b"seen by all"

    addr = node_addrs(cluster_file)[0]
    by_address = quarry.connect(address=addr)
    assert by_address.entry_addr == addr
    assert by_address.get(bucket, "k") == b"seen by all"


def test_a_missing_cluster_file_is_the_clis_error(cli, tmp_path, monkeypatch):
    missing = tmp_path / "nowhere" / "cluster.toml"
    cli_message = Cli(cli.binary, missing).error("ls")
    with pytest.raises(quarry.NotFound) as raised:
        quarry.connect(cluster=str(missing))
    assert str(raised.value) == cli_message
    assert "not found" in cli_message


def test_an_address_and_a_cluster_file_together_are_refused(cluster_file):
    with pytest.raises(quarry.InvalidInput, match="not both"):
        quarry.connect(address="127.0.0.1:1", cluster=str(cluster_file))


def test_an_unreachable_address_is_unavailable():
    # Port 1 on loopback: nothing listens there.
    with pytest.raises(quarry.Unavailable):
        quarry.connect(address="127.0.0.1:1")
