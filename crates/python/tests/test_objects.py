"""Buckets and objects through the package, checked byte for byte and
against what the CLI says about the same objects."""

import io
import os
import pathlib

import pytest

import quarry
from conftest import pattern_bytes

MIB = 1 << 20


def test_buckets_are_made_listed_and_removed_as_the_cli_sees_them(client, cli):
    client.make_bucket("py-fixed", chunk_size=64 * 1024)
    client.make_bucket("py-cdc", chunking="fastcdc")
    ours = {b["bucket"]: b for b in client.buckets()}
    theirs = {b["bucket"]: b for b in cli.json("ls")}
    for name in ["py-fixed", "py-cdc"]:
        assert ours[name] == theirs[name]

    client.remove_bucket("py-fixed")
    assert "py-fixed" not in {b["bucket"] for b in client.buckets()}
    assert "py-fixed" not in {b["bucket"] for b in cli.json("ls")}


def test_a_second_bucket_of_a_name_is_the_clis_error(client, cli, bucket):
    cli_message = cli.error("mb", bucket)
    with pytest.raises(quarry.AlreadyExists) as raised:
        client.make_bucket(bucket)
    assert str(raised.value) == cli_message


def test_a_bad_bucket_name_is_the_clis_error(client, cli):
    cli_message = cli.error("mb", "Bad_Name!")
    with pytest.raises(quarry.InvalidInput) as raised:
        client.make_bucket("Bad_Name!")
    assert str(raised.value) == cli_message
    assert "Bad_Name!" in cli_message
    with pytest.raises(quarry.QuarryError):
        client.put("Bad_Name!", "k", b"x")


def test_a_bad_chunking_is_refused_naming_it(client):
    with pytest.raises(quarry.InvalidInput, match="zip"):
        client.make_bucket("py-zip", chunking="zip")


def test_put_and_get_bytes_a_file_and_a_stream_byte_for_byte(client, cli, bucket, tmp_path):
    data = pattern_bytes(3 * MIB + 12345)
    assert client.put(bucket, "bytes", data).size == len(data)
    assert client.get(bucket, "bytes") == data

    client.put(bucket, "bytearray", bytearray(data[:1000]))
    assert client.get(bucket, "bytearray") == data[:1000]

    path = tmp_path / "in.bin"
    path.write_bytes(data[::-1])
    assert client.put(bucket, "from-str-path", str(path)).size == len(data)
    assert client.put(bucket, "from-pathlike", pathlib.Path(path)).size == len(data)
    assert client.get(bucket, "from-str-path") == data[::-1]
    assert client.get(bucket, "from-pathlike") == data[::-1]
    # What the package stored, the CLI reads back the same.
    assert cli.ok("get", f"{bucket}/from-str-path", "-", "-q") == data[::-1]

    class Recording(io.RawIOBase):
        """A binary stream that records what each read() asked for."""

        def __init__(self, payload):
            self.inner = io.BytesIO(payload)
            self.asked = []

        def readable(self):
            return True

        def read(self, n=-1):
            self.asked.append(n)
            return self.inner.read(n)

    stream = Recording(data)
    assert client.put(bucket, "from-stream", stream).size == len(data)
    assert client.get(bucket, "from-stream") == data
    # Read in bounded pieces, never whole.
    assert len(stream.asked) > 3
    assert all(0 < n <= MIB for n in stream.asked), stream.asked

    with open(path, "rb") as f:
        client.put(bucket, "from-open-file", f)
    assert client.get(bucket, "from-open-file") == data[::-1]

    assert client.put(bucket, "empty", b"").size == 0
    assert client.get(bucket, "empty") == b""


def test_a_missing_local_file_is_the_clis_error(client, cli, bucket, tmp_path):
    missing = tmp_path / "no-such-file"
    with pytest.raises(quarry.NotFound) as raised:
        client.put(bucket, "k", missing)
    assert str(raised.value) == cli.error("put", str(missing), f"{bucket}/k", "-q")


def test_a_stream_that_fails_fails_the_put_with_its_own_error(client, bucket):
    class Broken(io.RawIOBase):
        def __init__(self):
            self.reads = 0

        def readable(self):
            return True

        def read(self, n=-1):
            self.reads += 1
            if self.reads > 2:
                raise ValueError("the disk went away")
            return b"x" * n

    with pytest.raises(ValueError, match="the disk went away"):
        client.put(bucket, "broken", Broken())
    with pytest.raises(quarry.NotFound):
        client.stat(bucket, "broken")
    with pytest.raises(TypeError, match="binary mode"):
        client.put(bucket, "text", io.StringIO("text, not bytes"))
    with pytest.raises(TypeError, match="int"):
        client.put(bucket, "number", 42)


def test_ranges_are_half_open_and_clip_at_the_end(client, cli, bucket):
    data = pattern_bytes(2 * MIB + 7, seed=3)
    client.put(bucket, "r", data)
    for start, end in [(0, 1), (5, 17), (MIB - 3, MIB + 3), (len(data) - 10, len(data)), (100, 100)]:
        assert client.get(bucket, "r", range=(start, end)) == data[start:end], (start, end)
    assert client.get(bucket, "r", range=(len(data) - 5, len(data) + 1000)) == data[-5:]
    past = len(data) + 1
    cli_message = cli.error("get", f"{bucket}/r", "-", "--range", f"{past}-")
    with pytest.raises(quarry.InvalidInput) as raised:
        client.get(bucket, "r", range=(past, past + 10))
    assert str(raised.value) == cli_message
    with pytest.raises(quarry.InvalidInput, match="before start"):
        client.get(bucket, "r", range=(10, 5))


def test_get_to_file_writes_the_object_whole(client, bucket, tmp_path):
    data = pattern_bytes(MIB + 99, seed=5)
    client.put(bucket, "f", data)
    out = tmp_path / "out.bin"
    info = client.get_to_file(bucket, "f", out)
    assert out.read_bytes() == data
    assert info.size == len(data)
    # No temporary file is left beside it.
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]
    with pytest.raises(quarry.NotFound):
        client.get_to_file(bucket, "missing", tmp_path / "never.bin")
    assert not (tmp_path / "never.bin").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_stat_says_what_the_cli_says(client, cli, bucket):
    data = pattern_bytes(2 * MIB + 1, seed=11)
    first = client.put(bucket, "s", data)
    second = client.put(bucket, "s", data[:1000])
    info = client.stat(bucket, "s")
    assert (first.version, second.version, info.version) == (1, 2, 2)
    theirs = cli.json("stat", f"{bucket}/s")
    assert isinstance(info, quarry.ObjectInfo)
    assert info.bucket == theirs["bucket"] == bucket
    assert info.key == theirs["key"] == "s"
    assert info.size == theirs["size"] == 1000
    assert info.version == theirs["version"]
    assert info.created_unix_ms == theirs["created_unix_ms"]
    assert info.chunking == theirs["chunking"]
    assert info.chunk_count == theirs["chunk_count"]
    assert first.chunk_count == 3  # 1 MiB fixed chunks: two whole and a byte
    assert "ObjectInfo(" in repr(info)


def test_ls_lists_a_prefix_in_key_order(client, cli, bucket):
    for key in ["b/1", "a/2", "a/1", "ab", "c"]:
        client.put(bucket, key, key.encode())
    assert [o.key for o in client.ls(bucket, prefix="a/")] == ["a/1", "a/2"]
    assert [o.key for o in client.ls(bucket, prefix="a")] == ["a/1", "a/2", "ab"]
    assert [o.key for o in client.ls(bucket)] == ["a/1", "a/2", "ab", "b/1", "c"]
    assert [o.key for o in client.ls(bucket, limit=2)] == ["a/1", "a/2"]
    theirs = cli.json("ls", f"{bucket}/a")
    assert [(o.key, o.size, o.version) for o in client.ls(bucket, prefix="a")] == [
        (o["key"], o["size"], o["version"]) for o in theirs
    ]
    assert client.ls(bucket, prefix="zz") == []
    assert [o.key for o in client.ls(bucket, limit=2, start_after="a/2")] == ["ab", "b/1"]
    with pytest.raises(quarry.InvalidInput, match="start_after"):
        client.ls(bucket, limit=10**9)


def test_rm_then_get_is_not_found_with_the_clis_message(client, cli, bucket):
    client.put(bucket, "gone", b"soon")
    assert client.rm(bucket, "gone").version == 1
    cli_message = cli.error("get", f"{bucket}/gone", "-")
    with pytest.raises(quarry.NotFound) as raised:
        client.get(bucket, "gone")
    assert str(raised.value) == cli_message == f"no such object {bucket}/gone"
    with pytest.raises(quarry.NotFound) as raised:
        client.rm(bucket, "gone")
    assert str(raised.value) == cli.error("rm", f"{bucket}/gone")
    with pytest.raises(quarry.NotFound) as raised:
        client.stat("no-such-bucket-here", "k")
    assert str(raised.value) == cli.error("stat", "no-such-bucket-here/k")


def test_conditions_hold_or_raise_conflict(client, cli, bucket, tmp_path):
    client.put(bucket, "c", b"one")
    with pytest.raises(quarry.Conflict) as raised:
        client.put(bucket, "c", b"two", if_absent=True)
    (tmp_path / "two").write_bytes(b"two")
    cli_message = cli.error("put", str(tmp_path / "two"), f"{bucket}/c", "--if-absent", "-q")
    assert str(raised.value) == cli_message
    assert client.put(bucket, "c", b"two", if_version=1).version == 2
    with pytest.raises(quarry.Conflict):
        client.rm(bucket, "c", if_version=1)
    with pytest.raises(quarry.Conflict, match="not empty"):
        client.remove_bucket(bucket)


def test_df_counts_a_put(client, cli, bucket):
    before = client.df()
    assert before == cli.json("df")
    client.put(bucket, "d", pattern_bytes(MIB + 5, seed=13))
    after = client.df()
    assert after["cluster"]["objects"] == before["cluster"]["objects"] + 1
    assert after["cluster"]["logical_bytes"] == before["cluster"]["logical_bytes"] + MIB + 5
    assert after["cluster"]["stored_bytes"] > before["cluster"]["stored_bytes"]
    assert after["buckets"][bucket]["objects"] == 1
    assert after == cli.json("df")
