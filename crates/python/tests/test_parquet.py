"""quarry.parquet.read_table: columns of a pyarrow-written Parquet object
stored page by page come back equal to pyarrow's own selection of them,
read from their pages and the footer only; errors carry the CLI's
messages."""

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import quarry
import quarry.parquet


@pytest.fixture(scope="module")
def table():
    rows = 20_000
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "carrier": pa.array([None if i % 13 == 0 else f"c{i % 9}" for i in range(rows)]),
            "delay": pa.array([(i * 31 % 997) / 10.0 for i in range(rows)]),
        }
    )


@pytest.fixture(scope="module")
def stored(client, table):
    client.make_bucket("py-columns", chunking="parquet")
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=5_000, data_page_size=4096)
    data = sink.getvalue()
    client.put("py-columns", "f.parquet", data)
    return len(data)


def test_read_table_returns_the_columns_asked_from_their_pages(client, table, stored):
    got = quarry.parquet.read_table(client, "py-columns", "f.parquet", ["delay", "carrier"])
    assert got.equals(table.select(["delay", "carrier"]))
    data, read, groups = client.get_columns("py-columns", "f.parquet", ["id"])
    assert pq.read_table(io.BytesIO(data)).equals(table.select(["id"]))
    assert 0 < read < stored and groups == 4


def test_filters_skip_the_row_groups_their_statistics_rule_out(client, table, stored):
    # ids run 0..20000 in four row groups of 5000: id >= 15000 is the last.
    _, read_all, _ = client.get_columns("py-columns", "f.parquet", ["delay"])
    _, read_one, groups = client.get_columns(
        "py-columns", "f.parquet", ["delay"], [("id", ">=", 15_000)]
    )
    assert groups == 1 and read_one < read_all
    got = quarry.parquet.read_table(
        client, "py-columns", "f.parquet", ["delay"], filters=[("id", ">=", 15_000)]
    )
    want = pq.read_table(
        io.BytesIO(client.get("py-columns", "f.parquet")),
        columns=["delay"],
        filters=[("id", ">=", 15_000)],
    )
    assert got.equals(want) and got.num_rows == 5_000
    _, _, none = client.get_columns("py-columns", "f.parquet", ["delay"], [("id", "<", 0)])
    assert none == 0
    with pytest.raises(quarry.QuarryError, match="unknown comparison"):
        client.get_columns("py-columns", "f.parquet", ["delay"], [("id", "~", 1)])


def test_bad_columns_and_whole_objects_are_errors(client, cli):
    with pytest.raises(quarry.QuarryError) as e:
        client.get_columns("py-columns", "f.parquet", ["nope"])
    assert 'no column "nope"; the file has id, carrier, delay' in str(e.value)
    client.make_bucket("py-columns-fixed")
    client.put("py-columns-fixed", "f.parquet", b"PAR1 not really")
    with pytest.raises(quarry.QuarryError) as e:
        client.get_columns("py-columns-fixed", "f.parquet", ["id"])
    message = cli.error("get", "py-columns-fixed/f.parquet", "x.parquet", "--columns", "id")
    assert str(e.value) in message
