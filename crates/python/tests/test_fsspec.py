"""quarry:// through fsspec: registration by entry point, ls/info/rm,
ranged and batched reads, buffered writes, and real Parquet files read by
pandas and pyarrow."""

import io

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quarry.fsspec import QuarryFileSystem
from conftest import pattern_bytes

MIB = 1 << 20


@pytest.fixture(scope="module")
def fs(cluster_file):
    return QuarryFileSystem(cluster=str(cluster_file))


@pytest.fixture(scope="module")
def parquet_table():
    """Three row groups of ints, strings with nulls, floats and dates."""
    rows = 30_000
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "carrier": pa.array([None if i % 17 == 0 else f"c{i % 7}" for i in range(rows)]),
            "delay": pa.array([(i * 37 % 1000) / 10.0 for i in range(rows)]),
            "day": pa.array([i % 365 for i in range(rows)], pa.int32()).cast(pa.date32()),
        }
    )


@pytest.fixture(scope="module")
def parquet_object(client, parquet_table):
    client.make_bucket("py-parquet", chunk_size=64 * 1024)
    sink = io.BytesIO()
    pq.write_table(parquet_table, sink, row_group_size=10_000)
    client.put("py-parquet", "flights/2013.parquet", sink.getvalue())
    return "py-parquet/flights/2013.parquet"


def test_the_protocol_is_registered_through_the_entry_point(cluster_file, monkeypatch):
    monkeypatch.setenv("QUARRY_CLUSTER", str(cluster_file))
    assert fsspec.get_filesystem_class("quarry") is QuarryFileSystem
    assert isinstance(fsspec.filesystem("quarry"), QuarryFileSystem)


def test_pandas_reads_columns_of_a_parquet_object(cluster_file, parquet_object, parquet_table):
    got = pd.read_parquet(
        f"quarry://{parquet_object}",
        columns=["carrier", "delay"],
        storage_options={"cluster": str(cluster_file)},
    )
    want = parquet_table.select(["carrier", "delay"]).to_pandas()
    pd.testing.assert_frame_equal(got, want)


def test_pyarrow_reads_a_parquet_object_through_the_file_system(fs, parquet_object, parquet_table):
    got = pq.read_table(parquet_object, filesystem=fs, columns=["id", "day"])
    assert got.equals(parquet_table.select(["id", "day"]))
    filtered = pq.read_table(parquet_object, filesystem=fs, filters=[("id", ">=", 25_000)])
    assert filtered.num_rows == 5_000
    assert pq.ParquetFile(fs.open(parquet_object)).metadata.num_row_groups == 3


def test_pandas_writes_a_parquet_object_and_reads_it_back(cluster_file, parquet_table, client):
    client.make_bucket("py-pandas-out")
    frame = parquet_table.to_pandas()
    options = {"cluster": str(cluster_file)}
    frame.to_parquet("quarry://py-pandas-out/out.parquet", storage_options=options)
    back = pd.read_parquet("quarry://py-pandas-out/out.parquet", storage_options=options)
    pd.testing.assert_frame_equal(back, frame)


def test_ls_info_and_rm(fs, client):
    client.make_bucket("py-fs")
    for key in ["a.txt", "dir/b.txt", "dir/sub/c.txt"]:
        client.put("py-fs", key, key.encode())
    assert "py-fs" in fs.ls("", detail=False)
    assert fs.ls("quarry://py-fs", detail=False) == ["py-fs/a.txt", "py-fs/dir"]
    assert fs.ls("py-fs/dir", detail=False) == ["py-fs/dir/b.txt", "py-fs/dir/sub"]
    assert fs.ls("py-fs/a.txt", detail=False) == ["py-fs/a.txt"]
    info = fs.info("quarry://py-fs/dir/b.txt")
    assert (info["type"], info["size"], info["version"]) == ("file", 9, 1)
    assert fs.info("py-fs/dir")["type"] == "directory"
    assert fs.info("py-fs")["type"] == "directory"
    assert fs.isfile("py-fs/a.txt") and fs.isdir("py-fs/dir")
    assert sorted(fs.find("py-fs")) == ["py-fs/a.txt", "py-fs/dir/b.txt", "py-fs/dir/sub/c.txt"]
    fs.rm("quarry://py-fs/a.txt")
    assert not fs.exists("py-fs/a.txt")
    with pytest.raises(FileNotFoundError):
        fs.info("py-fs/a.txt")
    with pytest.raises(FileNotFoundError):
        fs.cat_file("py-fs/a.txt")
    with pytest.raises(FileNotFoundError):
        fs.ls("py-fs/nothing-here")


def test_ranged_reads(fs, client):
    client.make_bucket("py-ranges")
    data = pattern_bytes(3 * MIB + 11, seed=41)
    client.put("py-ranges", "r.bin", data)
    assert fs.cat_file("py-ranges/r.bin") == data
    assert fs.cat_file("py-ranges/r.bin", start=5, end=MIB + 9) == data[5 : MIB + 9]
    assert fs.cat_file("py-ranges/r.bin", start=-100) == data[-100:]
    assert fs.cat_file("py-ranges/r.bin", start=len(data) + 5) == b""
    with fs.open("quarry://py-ranges/r.bin", "rb", block_size=64 * 1024) as f:
        f.seek(2 * MIB + 3)
        assert f.read(1000) == data[2 * MIB + 3 : 2 * MIB + 1003]
        f.seek(10)
        assert f.read(20) == data[10:30]


def test_cat_ranges_is_one_batched_call(fs, client):
    client.make_bucket("py-batch")
    data = pattern_bytes(2 * MIB, seed=43)
    client.put("py-batch", "one", data)
    client.put("py-batch", "two", data[::-1])

    class Counting:
        """The real client, with its calls counted."""

        def __init__(self, inner):
            self.inner = inner
            self.calls = []

        def __getattr__(self, name):
            method = getattr(self.inner, name)

            def counted(*args, **kwargs):
                self.calls.append(name)
                return method(*args, **kwargs)

            return counted

    counting = Counting(client)
    batched = QuarryFileSystem(client=counting, skip_instance_cache=True)
    paths = ["py-batch/one", "py-batch/two", "quarry://py-batch/one", "py-batch/two"]
    starts = [0, 100, MIB - 5, 2 * MIB - 10]
    ends = [10, 200, MIB + 5, 2 * MIB]
    got = batched.cat_ranges(paths, starts, ends)
    assert got == [data[0:10], data[::-1][100:200], data[MIB - 5 : MIB + 5], data[::-1][-10:]]
    assert counting.calls == ["get_ranges"]


def test_writes_are_buffered_into_one_object(fs, client):
    client.make_bucket("py-write")
    data = pattern_bytes(5 * MIB + 3, seed=47)
    with fs.open("quarry://py-write/w.bin", "wb", block_size=MIB) as f:
        for at in range(0, len(data), 300_000):
            f.write(data[at : at + 300_000])
        # Nothing is stored before the file is closed.
        assert not fs.exists("py-write/w.bin")
    assert client.get("py-write", "w.bin") == data
    assert client.stat("py-write", "w.bin").version == 1
    fs.pipe_file("quarry://py-write/small", b"small")
    assert fs.cat_file("py-write/small") == b"small"


def test_duckdb_reads_a_parquet_object_through_the_file_system(fs, parquet_object, parquet_table):
    import duckdb

    con = duckdb.connect()
    con.register_filesystem(fs)
    got = con.sql(
        f"SELECT carrier, count(*) AS n, sum(delay) AS delay "
        f"FROM read_parquet('quarry://{parquet_object}') "
        f"WHERE id >= 1000 GROUP BY carrier ORDER BY carrier NULLS FIRST"
    ).fetchall()
    frame = parquet_table.to_pandas()
    frame = frame[frame["id"] >= 1000]
    want = []
    for carrier, group in sorted(
        frame.groupby("carrier", dropna=False), key=lambda kv: (kv[0] == kv[0], str(kv[0]))
    ):
        want.append((None if carrier != carrier else carrier, len(group), group["delay"].sum()))
    assert [(c, n) for c, n, _ in got] == [(c, n) for c, n, _ in want]
    for (_, _, a), (_, _, b) in zip(got, want):
        assert a == pytest.approx(b)


def test_dask_reads_a_parquet_object(cluster_file, parquet_object, parquet_table):
    import dask.dataframe as dd

    frame = dd.read_parquet(
        f"quarry://{parquet_object}",
        columns=["id", "delay"],
        storage_options={"cluster": str(cluster_file)},
    )
    got = frame.compute().reset_index(drop=True)
    want = parquet_table.select(["id", "delay"]).to_pandas()
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert frame["delay"].sum().compute() == pytest.approx(want["delay"].sum())
