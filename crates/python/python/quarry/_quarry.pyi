"""Type stubs of the compiled module ``quarry._quarry`` (see its docstrings)."""

import os
from typing import (
    Any,
    BinaryIO,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    final,
)

__all__ = [
    "AlreadyExists",
    "Client",
    "Conflict",
    "Denied",
    "InvalidInput",
    "KvError",
    "KvItem",
    "KvTable",
    "NonNumeric",
    "NotFound",
    "ObjectInfo",
    "OutOfMemory",
    "QuarryError",
    "Throttled",
    "Unavailable",
    "connect",
]

_Json = Dict[str, Any]
_PutData = Union[bytes, bytearray, str, "os.PathLike[str]", BinaryIO]
_Key = Union[str, bytes, bytearray]
_Value = Union[bytes, bytearray, memoryview]

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

class KvError(QuarryError):
    """A key-value operation a node refused, or an answer that breaks the large-value or array format."""

class OutOfMemory(KvError):
    """No room for the item: the node's memory or device is full, or the tenant's byte or key quota is used up."""

class Denied(KvError):
    """The tenant is not known to the cluster, or its secret is wrong."""

class Throttled(KvError):
    """The tenant is over its rate limit for longer than a request waits."""

class NonNumeric(KvError):
    """incr or decr of a value that is not a decimal number."""

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

    def kv(self, tenant: str = "default", secret: str = "") -> KvTable:
        """One tenant's key-value tables (the ``default`` tenant of a cluster
        with no tenants configured); the tables every memcached port serves.

        >>> table = client.kv()
        >>> table.set("user:1", b"ada")
        1
        """

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

@final
class KvItem:
    """An item as ``KvTable.get_item`` finds it.

    >>> item = table.get_item("user:1")
    >>> item.value, item.flags, item.expires_unix_secs
    (b'ada', 0, None)
    """

    @property
    def value(self) -> bytes: ...
    @property
    def flags(self) -> int: ...
    @property
    def cas(self) -> int: ...
    @property
    def expires_unix_secs(self) -> Optional[int]: ...

@final
class KvTable:
    """One tenant's key-value tables (from ``Client.kv``); safe to share between threads."""

    @property
    def tenant(self) -> str:
        """The tenant whose keys these are.

        >>> client.kv().tenant
        'default'
        """

    @property
    def nodes(self) -> List[int]:
        """The nodes keys are placed over.

        >>> table.nodes
        [0, 1, 2]
        """

    def node_of(self, key: _Key) -> int:
        """The node ``key`` lives on.

        >>> table.node_of("user:1") in table.nodes
        True
        """

    def get(self, key: _Key) -> Optional[bytes]:
        """The value under ``key``, or ``None`` (a large value or an array raises ``KvError``).

        >>> table.get("user:1")
        b'ada'
        """

    def gets(self, key: _Key) -> Optional[Tuple[bytes, int]]:
        """The value and its CAS value (memcached's ``gets``), or ``None``.

        >>> value, cas = table.gets("user:1")
        """

    def get_item(self, key: _Key) -> Optional[KvItem]:
        """The item with its flags, CAS value and expiry, or ``None``.

        >>> table.get_item("user:2").flags
        7
        """

    def set(self, key: _Key, value: _Value, *, flags: int = 0, ttl: int = 0) -> int:
        """Stores a value of at most 1 MiB (``ttl`` seconds, 0: never); the new CAS value.

        >>> cas = table.set("greeting", b"hello", ttl=3600)
        """

    def add(self, key: _Key, value: _Value, *, flags: int = 0, ttl: int = 0) -> bool:
        """Stores only if ``key`` is absent; whether it stored.

        >>> table.add("greeting", b"hi")
        False
        """

    def replace(self, key: _Key, value: _Value, *, flags: int = 0, ttl: int = 0) -> bool:
        """Stores only if ``key`` is present; whether it stored.

        >>> table.replace("nobody", b"x")
        False
        """

    def append(self, key: _Key, value: _Value) -> bool:
        """Adds ``value`` after the present value; whether the key was there.

        >>> table.append("greeting", b", world")
        True
        """

    def prepend(self, key: _Key, value: _Value) -> bool:
        """Adds ``value`` before the present value; whether the key was there.

        >>> table.prepend("greeting", b"oh, ")
        True
        """

    def cas(
        self, key: _Key, value: _Value, cas: int, *, flags: int = 0, ttl: int = 0
    ) -> Optional[bool]:
        """Stores only if the item is still version ``cas``: ``True`` stored,
        ``False`` another version (``EXISTS``), ``None`` no item (``NOT_FOUND``).

        >>> table.cas("greeting", b"bye", cas)
        True
        """

    def delete(self, key: _Key) -> bool:
        """Deletes a plain item; whether it was there.

        >>> table.delete("greeting")
        True
        """

    def incr(self, key: _Key, delta: int = 1) -> Optional[int]:
        """Adds to the decimal number under ``key``; the new number, or ``None`` when absent.

        >>> table.incr("hits")
        42
        """

    def decr(self, key: _Key, delta: int = 1) -> Optional[int]:
        """Subtracts, stopping at 0; the new number, or ``None`` when absent.

        >>> table.decr("hits", 50)
        0
        """

    def touch(self, key: _Key, ttl: int) -> bool:
        """Sets the expiry to ``ttl`` seconds from now (0: never); whether the key was there.

        >>> table.touch("hits", 60)
        True
        """

    def get_many(self, keys: Iterable[_Key]) -> Dict[Any, bytes]:
        """The values of the keys found (misses left out), one call per node.

        >>> table.get_many(["user:1", "nobody"])
        {'user:1': b'ada'}
        """

    def set_many(
        self, items: Union[Mapping[Any, _Value], Iterable[Tuple[_Key, _Value]]], *, ttl: int = 0
    ) -> List[int]:
        """Stores many values, one call per node; their new CAS values in order.

        >>> len(table.set_many({f"k{i}": b"v" for i in range(1000)}))
        1000
        """

    def set_large(self, key: _Key, value: _Value, *, flags: int = 0, ttl: int = 0) -> None:
        """Stores a value of any size (up to 4 GiB), as 1 MiB slices beyond 1 MiB.

        >>> table.set_large("video", b"x" * (5 << 20))
        """

    def get_large(self, key: _Key) -> Optional[bytes]:
        """The value whatever its size, or ``None``.

        >>> len(table.get_large("video"))
        5242880
        """

    def delete_large(self, key: _Key) -> bool:
        """Deletes ``key`` and the slices or elements it names; whether it was there.

        >>> table.delete_large("video")
        True
        """

    def array_set(self, key: _Key, elements: Iterable[_Value], *, ttl: int = 0) -> None:
        """Stores ``elements`` (each at most 1 MiB) as an array behind a directory value.

        >>> table.array_set("frames", [b"f0", b"f1", b"f2"])
        """

    def array_get(self, key: _Key, index: int) -> Optional[bytes]:
        """Element ``index``, or ``None`` when there is no array; past the end raises ``KvError``.

        >>> table.array_get("frames", 1)
        b'f1'
        """

    def array_get_many(self, key: _Key, indices: Sequence[int]) -> Optional[List[bytes]]:
        """Elements ``indices`` in that order, read in one batch; ``None`` when there is no array.

        >>> table.array_get_many("frames", [2, 0])
        [b'f2', b'f0']
        """

    def array_len(self, key: _Key) -> Optional[int]:
        """The number of elements of the array, or ``None``.

        >>> table.array_len("frames")
        3
        """

    def stats(self, nodes: bool = False) -> _Json:
        """The figures of ``quarry kv stats --json`` (summed over nodes, ``dedup_ratio``).

        >>> table.stats()["dedup_ratio"] >= 1.0
        True
        """

    def flush_all(self, delay: int = 0) -> None:
        """Drops every item of the tenant on every node (after ``delay`` seconds).

        >>> table.flush_all()
        """
