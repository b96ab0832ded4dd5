"""Writes the Parquet fixtures of crates/store/tests/parquet.rs's
content-defined chunking test (pyarrow >= 21; run from this directory):

    python3 make_cdc_parquet.py

cdc_a.parquet is a table written with Parquet's content-defined page
boundaries; cdc_b.parquet is the same table with one row inserted in the
middle, written the same way. fixed_a/fixed_b.parquet are the same two
tables with pyarrow's ordinary pages (cut at 8 KiB here), to show
what the page boundaries buy."""

import pyarrow as pa
import pyarrow.parquet as pq

ROWS = 4000


def table(insert_at=None):
    ids = list(range(ROWS))
    names = [f"station-{(i * 7919) % 613:04d}" for i in ids]
    values = [((i * 37) % 1000) / 7.0 for i in ids]
    if insert_at is not None:
        ids.insert(insert_at, 10**9)
        names.insert(insert_at, names[insert_at])
        values.insert(insert_at, 123.25)
    return pa.table({"id": ids, "name": names, "value": values})


def write(t, path, cdc):
    extra = {}
    if cdc:
        extra["use_content_defined_chunking"] = {
            "min_chunk_size": 2 * 1024,
            "max_chunk_size": 8 * 1024,
        }
    else:
        extra["data_page_size"] = 8 * 1024
        extra["write_batch_size"] = 64
    pq.write_table(
        t,
        path,
        compression="none",
        use_dictionary=["name"],
        write_statistics=False,
        **extra,
    )


write(table(), "cdc_a.parquet", True)
write(table(ROWS // 2), "cdc_b.parquet", True)
write(table(), "fixed_a.parquet", False)
write(table(ROWS // 2), "fixed_b.parquet", False)
