"""Type stubs of the compiled module ``quarry._quarry`` (see its docstrings)."""

import os
from typing import Any, BinaryIO, Dict, List, Optional, Sequence, Tuple, Union, final

__all__ = [
    "AlreadyExists",
    "Client",
    "Conflict",
    "InvalidInput",
    "NotFound",
    "ObjectInfo",
    "QuarryError",
    "Unavailable",
    "connect",
]

_Json = Dict[str, Any]
_PutData = Union[bytes, bytearray, str, "os.PathLike[str]", BinaryIO]

class QuarryError(Exception):
    """Base class of every error Quarry raises."""

class NotFound(QuarryError):
    """No such bucket, object, command or cluster file."""

class AlreadyExists(QuarryError):
    """The bucket (or object, with if_absent) already exists."""

class InvalidInput(QuarryError):
    """An argument is malformed: a bucket name, key, range, size, kernel or target."""

class Conflict(QuarryError):
    """A condition did not hold: a version mismatch, a bucket not empty, an object that changed while read."""

class Unavailable(QuarryError):
    """The cluster, or a node of it, could not be reached or did not answer in time."""

@final
class ObjectInfo:
    """What ``stat`` says about an object (its manifest without the chunk list).

    >>> info = client.stat("logs", "a.txt")
    >>> info.size, info.version
    (12, 1)
    """

    @property
    def bucket(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def created_unix_ms(self) -> int: ...
    @property
    def chunking(self) -> str: ...
    @property
    def chunk_count(self) -> int: ...

def connect(
    address: Optional[str] = None, cluster: Optional[Union[str, "os.PathLike[str]"]] = None
) -> Client:
    """Connects as the CLI does: ``address`` (``host:port``), else the cluster
    file ``cluster``, else ``$QUARRY_CLUSTER``, else ``./.quarry/cluster.toml``.

    >>> client = quarry.connect(cluster=".quarry/cluster.toml")
    """

@final
class Client:
    """A connection to a Quarry cluster; safe to share between threads."""

    @property
    def entry_addr(self) -> str:
        """The node this client entered the cluster through.

        >>> client.entry_addr
        '127.0.0.1:7400'
        """

    def make_bucket(
        self, name: str, chunking: str = "fixed", chunk_size: Optional[int] = None
    ) -> None:
        """Makes a bucket (``quarry mb``): chunking ``fixed[:SIZE]`` or
        ``fastcdc[:MIN,AVG,MAX]``; ``chunk_size`` in bytes for fixed chunks.

        >>> client.make_bucket("raw", chunk_size=64 * 1024)
        """

    def buckets(self) -> List[_Json]:
        """The buckets (``quarry ls --json``).

        >>> [b["bucket"] for b in client.buckets()]
        ['logs']
        """

    def remove_bucket(self, name: str) -> None:
        """Removes an empty bucket (``quarry rb``).

        >>> client.remove_bucket("raw")
        """

    def put(
        self,
        bucket: str,
        key: str,
        data: _PutData,
        *,
        if_absent: bool = False,
        if_version: Optional[int] = None,
    ) -> ObjectInfo:
        """Stores bytes, a file (by path) or a binary stream (read in 1 MiB pieces).

        >>> client.put("logs", "a.txt", b"hello\\nworld\\n").size
        12
        """

    def get(self, bucket: str, key: str, range: Optional[Tuple[int, int]] = None) -> bytes:
        """The object's bytes, or those of the half-open range ``[start, end)``.

        >>> client.get("logs", "a.txt", range=(6, 11))
        b'world'
        """

    def get_ranges(self, ranges: Sequence[Tuple[str, str, int, int]]) -> List[bytes]:
        """Many ``(bucket, key, start, end)`` half-open ranges in one call, each cut
        at its object's end; fsspec's ``cat_ranges`` is this call.

        >>> client.get_ranges([("logs", "a.txt", 0, 5), ("logs", "a.txt", 6, 11)])
        [b'hello', b'world']
        """

    def get_columns(
        self,
        bucket: str,
        key: str,
        columns: Sequence[str],
        filters: Sequence[Tuple[str, str, Union[int, float, str]]] = ...,
    ) -> Tuple[bytes, int, int]:
        """The top-level ``columns`` of a Parquet object stored page by page
        (``quarry get --columns``): a Parquet file of only them, read from
        their pages and the footer, skipping the row groups whose statistics
        rule out every row for one of ``filters`` (``(column, op, value)``,
        op one of ``=``, ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``; rows of
        the row groups read are not filtered); and the bytes and row groups
        read.

        >>> data, read, groups = client.get_columns("flights", "2013.parquet", ["carrier"])
        >>> read < client.stat("flights", "2013.parquet").size
        True
        """

    def get_to_file(
        self, bucket: str, key: str, path: Union[str, "os.PathLike[str]"]
    ) -> ObjectInfo:
        """Writes the object to ``path``, renamed into place once whole.

        >>> client.get_to_file("logs", "a.txt", "/tmp/a.txt").size
        12
        """

    def stat(self, bucket: str, key: str) -> ObjectInfo:
        """What ``quarry stat`` says about the object.

        >>> client.stat("logs", "a.txt").version
        1
        """

    def ls(
        self, bucket: str, prefix: str = "", limit: int = ..., start_after: Optional[str] = None
    ) -> List[ObjectInfo]:
        """Objects whose keys start with ``prefix``, in key order (after ``start_after``);
        ``limit`` defaults to 10,000 (at most 1,000,000).

        >>> [o.key for o in client.ls("logs", prefix="a")]
        ['a.txt']
        """

    def rm(self, bucket: str, key: str, *, if_version: Optional[int] = None) -> ObjectInfo:
        """Deletes the object; returns what was deleted.

        >>> client.rm("logs", "a.txt").version
        1
        """

    def df(self) -> _Json:
        """Usage per bucket and for the cluster (``quarry df --json``).

        >>> client.df()["cluster"]["objects"]
        1
        """

    def grep(
        self,
        pattern: Union[str, Sequence[str]],
        *targets: str,
        fixed: bool = False,
        extended: bool = False,
        ignore_case: bool = False,
        invert: bool = False,
        word: bool = False,
        line: bool = False,
        count: bool = False,
        only_matching: bool = False,
        max_count: Optional[int] = None,
        before_context: int = 0,
        after_context: int = 0,
        time_limit_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        result_limit_bytes: Optional[int] = None,
    ) -> _Json:
        """Searches near the data; the answer of ``quarry grep --json``.

        >>> client.grep("world", "logs/a.txt")["results"][0]["output"]["matching_lines"]
        1
        """

    def wc(
        self,
        *targets: str,
        words: Optional[bool] = None,
        word: Optional[str] = None,
        top: Optional[int] = None,
        time_limit_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        result_limit_bytes: Optional[int] = None,
    ) -> _Json:
        """Counts near the data; the answer of ``quarry wc --json``.

        >>> client.wc("logs/a.txt")["results"][0]["output"]["lines"]
        2
        """

    def query(
        self,
        sql: str,
        stats: bool = False,
        time_limit_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        result_limit_bytes: Optional[int] = None,
    ) -> Any:
        """Runs SQL over Parquet objects where their pages live; a
        ``pyarrow.Table`` (with ``stats=True``: the table and a dict of what
        the query read and moved).

        >>> t = client.query("SELECT carrier, count(*) AS n FROM 'flights/2013/*.parquet' GROUP BY carrier")
        >>> t.to_pandas().shape[1]
        2
        """
    def run(
        self,
        kernel: str,
        *args: str,
        time_limit_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        result_limit_bytes: Optional[int] = None,
    ) -> _Json:
        """Runs any kernel (``quarry run KERNEL ARGS... TARGETS...``).

        >>> client.run("checksum", "logs/a.txt")["results"][0]["output"]["bytes"]
        12
        """

    def submit(
        self,
        kernel: str,
        *args: str,
        time_limit_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        result_limit_bytes: Optional[int] = None,
    ) -> int:
        """Submits without waiting (``quarry run --detach``); the command's number.

        >>> id = client.submit("wc", "logs/")
        """

    def status(self, id: int) -> _Json:
        """A command's status (a ``quarry jobs --json`` row).

        >>> client.status(id)["state"]
        'running'
        """

    def wait(self, id: int, timeout_ms: int = 60000) -> _Json:
        """Waits until the command is final or the timeout passes; its status.

        >>> client.wait(id)["state"]
        'done'
        """

    def cancel(self, id: int) -> _Json:
        """Cancels a command (``quarry cancel``); its status.

        >>> client.cancel(id)["state"]
        'cancelled'
        """

    def result(self, id: int) -> _Json:
        """A done command's result, as ``run`` returns it.

        >>> client.result(id)["results"][0]["output"]["lines"]
        2
        """

    def jobs(self) -> List[_Json]:
        """Every command the entry node holds (``quarry jobs --json``).

        >>> [j["state"] for j in client.jobs()]
        ['done']
        """
