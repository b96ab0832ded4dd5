"""The DuckDB peers of `quarry bench query`: DuckDB reading a Parquet
object from Quarry through fsspec (`quarry://`, with fsspec's default
read-ahead cache, or with none so that DuckDB fetches exactly the ranges
it asks for), or a local copy of the file. Reads one JSON request on
stdin: {"mode": "fsspec"|"fsspec_exact"|"local",
"address": "host:port", "path": "...", "queries": [sql, ...], "rounds": n};
prints one JSON object: per query the seconds of each round, the rows of
the answer (for the bench to compare with Quarry's), and for fsspec the
bytes the filesystem fetched from the cluster."""

import json
import sys
import time

import duckdb


def fetched_counter():
    """quarry:// with every byte it returns counted."""
    import quarry
    import quarry.fsspec as qfs

    counted = {"bytes": 0}
    file_fetch = qfs.QuarryFile._fetch_range
    fs_cat = qfs.QuarryFileSystem.cat_file
    fs_ranges = qfs.QuarryFileSystem.cat_ranges

    def fetch_range(self, start, end):
        data = file_fetch(self, start, end)
        counted["bytes"] += len(data)
        return data

    def cat_file(self, path, start=None, end=None, **kwargs):
        data = fs_cat(self, path, start=start, end=end, **kwargs)
        counted["bytes"] += len(data)
        return data

    def cat_ranges(self, *args, **kwargs):
        out = fs_ranges(self, *args, **kwargs)
        counted["bytes"] += sum(len(d) for d in out if isinstance(d, (bytes, bytearray)))
        return out

    qfs.QuarryFile._fetch_range = fetch_range
    qfs.QuarryFileSystem.cat_file = cat_file
    qfs.QuarryFileSystem.cat_ranges = cat_ranges
    return quarry, qfs, counted


def main():
    request = json.load(sys.stdin)
    # Its progress bar writes to standard output, where the answer goes.
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    counted = {"bytes": 0}
    source = request["path"]
    if request["mode"] in ("fsspec", "fsspec_exact"):
        quarry, qfs, counted = fetched_counter()
        if request["mode"] == "fsspec_exact":
            plain_open = qfs.QuarryFileSystem._open

            def exact_open(self, path, mode="rb", **kwargs):
                kwargs["cache_type"] = "none"
                return plain_open(self, path, mode=mode, **kwargs)

            qfs.QuarryFileSystem._open = exact_open
        fs = qfs.QuarryFileSystem(client=quarry.connect(address=request["address"]))
        con.register_filesystem(fs)
        source = "quarry://" + request["path"]
    out = []
    for sql in request["queries"]:
        sql = sql.replace("'tpch/lineitem.parquet'", f"read_parquet('{source}')")
        seconds = []
        bytes_fetched = []
        rows = None
        # One unmeasured run first, as for the near-data side: DuckDB
        # reads the footer and fsspec connects.
        con.execute(sql).fetchall()
        for _ in range(request["rounds"]):
            before = counted["bytes"]
            started = time.perf_counter()
            rows = con.execute(sql).fetchall()
            seconds.append(time.perf_counter() - started)
            bytes_fetched.append(counted["bytes"] - before)
        out.append(
            {
                "seconds": seconds,
                "bytes_fetched": bytes_fetched,
                "rows": [[str(v) for v in row] for row in rows],
            }
        )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
