"""Parquet objects read by column: ``read_table`` fetches only the pages of
the columns asked (and the footer) from an object stored page by page
(a bucket made with ``chunking="parquet"`` or ``"auto"``)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import pyarrow

    from quarry._quarry import Client

__all__ = ["read_table"]


def read_table(client: "Client", bucket: str, key: str, columns: Sequence[str]) -> "pyarrow.Table":
    """The ``columns`` of the Parquet object ``bucket/key`` as a
    ``pyarrow.Table``, read from those columns' pages only.

    >>> table = quarry.parquet.read_table(client, "flights", "2013.parquet", ["carrier"])
    >>> table.column_names
    ['carrier']
    """
    import pyarrow.parquet as pq

    data, _read = client.get_columns(bucket, key, list(columns))
    return pq.read_table(io.BytesIO(data))
