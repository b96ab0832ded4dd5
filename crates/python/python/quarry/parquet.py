"""Parquet objects read by column: ``read_table`` fetches only the pages of
the columns asked (and the footer) from an object stored page by page (a
bucket made with ``chunking="parquet"`` or ``"auto"``), skipping the row
groups whose footer statistics rule out every row for a filter."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    import pyarrow

    from quarry._quarry import Client

__all__ = ["read_table"]

Filter = Tuple[str, str, Union[int, float, str]]


def read_table(
    client: "Client",
    bucket: str,
    key: str,
    columns: Sequence[str],
    filters: Optional[Sequence[Filter]] = None,
) -> "pyarrow.Table":
    """The ``columns`` of the Parquet object ``bucket/key`` as a
    ``pyarrow.Table``, read from those columns' pages only; with
    ``filters`` (pyarrow's form, ANDed: ``[("month", ">=", 6)]``) the row
    groups they rule out are not read and the rows are filtered exactly.

    >>> table = quarry.parquet.read_table(client, "flights", "2013.parquet", ["carrier"],
    ...                                   filters=[("month", ">=", 6)])
    >>> table.column_names
    ['carrier']
    """
    import pyarrow.parquet as pq

    filters = list(filters or [])
    wanted = list(columns)
    fetched = wanted + [c for c, _, _ in filters if c not in wanted]
    data, _read, _groups = client.get_columns(bucket, key, fetched, filters)
    return pq.read_table(io.BytesIO(data), columns=wanted, filters=filters or None)
