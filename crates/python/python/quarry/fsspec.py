"""fsspec for Quarry: ``quarry://bucket/key`` for pandas, pyarrow, DuckDB and
Dask. Registered through fsspec's entry point (``fsspec.specs``), so
``fsspec.filesystem("quarry")`` and ``pandas.read_parquet("quarry://...")``
find it once the package is installed.

Buckets are the top-level directories; ``/`` in keys makes directories below
them, as in S3. Reads are ranged (``cat_file``, files opened for reading)
and ``cat_ranges`` is one batched call to the cluster. Files opened for
writing are buffered (in memory up to a bound, then in a temporary file) and
stored as one object, one new version, when closed.

>>> import pandas as pd
>>> df = pd.read_parquet("quarry://data/flights.parquet", columns=["carrier"])
>>> from quarry.fsspec import QuarryFileSystem
>>> fs = QuarryFileSystem(cluster=".quarry/cluster.toml")
>>> fs.ls("data")
['data/flights.parquet']
"""

import tempfile
from typing import Any, Dict, List, Optional, Tuple

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import NotFound, QuarryError, connect

#: Objects asked for in one listing call.
LIST_PAGE = 1000
#: Bytes a file being written keeps in memory before it spills to disk.
SPOOL_MEMORY_BYTES = 16 << 20


def _split(path: str) -> Tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key


class QuarryFileSystem(AbstractFileSystem):
    """Quarry's buckets and objects as an fsspec file system.

    ``address`` or ``cluster`` are those of :func:`quarry.connect` (default:
    ``$QUARRY_CLUSTER``, else ``./.quarry/cluster.toml``); ``client`` uses a
    connection already made.

    >>> fs = QuarryFileSystem()
    >>> fs.cat_file("quarry://logs/a.txt", start=0, end=5)
    b'hello'
    """

    protocol = ("quarry",)
    root_marker = ""

    def __init__(self, address: Optional[str] = None, cluster: Optional[str] = None, client=None, **kwargs):
        super().__init__(**kwargs)
        self.client = client if client is not None else connect(address=address, cluster=cluster)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("quarry://"):
            path = path[len("quarry://"):]
        return path.strip("/")

    def _file_entry(self, info) -> Dict[str, Any]:
        return {
            "name": f"{info.bucket}/{info.key}",
            "size": info.size,
            "type": "file",
            "version": info.version,
            "created": info.created_unix_ms / 1000.0,
            "chunking": info.chunking,
        }

    def _objects(self, bucket: str, prefix: str):
        """Every object of ``bucket`` under ``prefix``, a page at a time."""
        after = None
        while True:
            page = self.client.ls(bucket, prefix=prefix, limit=LIST_PAGE, start_after=after)
            yield from page
            if len(page) < LIST_PAGE:
                return
            after = page[-1].key

    def ls(self, path, detail=True, **kwargs):
        """The entries of a directory (a bucket, or a prefix ending at ``/``);
        the file itself for a file.

        >>> fs.ls("quarry://logs", detail=False)
        ['logs/2024', 'logs/a.txt']
        """
        path = self._strip_protocol(path)
        if path == "":
            entries = [{"name": b["bucket"], "size": 0, "type": "directory"} for b in self.client.buckets()]
            return entries if detail else [e["name"] for e in entries]
        bucket, key = _split(path)
        prefix = f"{key}/" if key else ""
        files, dirs = [], {}
        try:
            for info in self._objects(bucket, prefix):
                rest = info.key[len(prefix):]
                if "/" in rest:
                    name = f"{bucket}/{prefix}{rest.split('/', 1)[0]}"
                    dirs[name] = {"name": name, "size": 0, "type": "directory"}
                else:
                    files.append(self._file_entry(info))
        except QuarryError as e:
            raise FileNotFoundError(path) from e
        entries = sorted(files + list(dirs.values()), key=lambda e: e["name"])
        if not entries:
            if key:
                entries = [self.info(path)]  # a file, or FileNotFoundError
            elif bucket not in {b["bucket"] for b in self.client.buckets()}:
                raise FileNotFoundError(path)
        return entries if detail else [e["name"] for e in entries]

    def info(self, path, **kwargs):
        """What there is at ``path``: an object (``type`` file, ``size``,
        ``version``, ``created``) or a directory.

        >>> fs.info("quarry://logs/a.txt")["size"]
        12
        """
        path = self._strip_protocol(path)
        if path == "":
            return {"name": "", "size": 0, "type": "directory"}
        bucket, key = _split(path)
        if not key:
            if bucket in {b["bucket"] for b in self.client.buckets()}:
                return {"name": bucket, "size": 0, "type": "directory"}
            raise FileNotFoundError(path)
        try:
            return self._file_entry(self.client.stat(bucket, key))
        except NotFound:
            pass
        except QuarryError as e:
            raise FileNotFoundError(path) from e
        if self.client.ls(bucket, prefix=key + "/", limit=1):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def _rm(self, path):
        bucket, key = _split(self._strip_protocol(path))
        if not key:
            self.client.remove_bucket(bucket)
            return
        try:
            self.client.rm(bucket, key)
        except NotFound as e:
            raise FileNotFoundError(path) from e

    def rm_file(self, path):
        """Deletes one object.

        >>> fs.rm_file("quarry://logs/a.txt")
        """
        self._rm(path)

    def mkdir(self, path, create_parents=True, **kwargs):
        """Makes a bucket (a directory below one exists once an object does).

        >>> fs.mkdir("quarry://newbucket")
        """
        bucket, key = _split(self._strip_protocol(path))
        if not key:
            self.client.make_bucket(bucket, **kwargs)

    def makedirs(self, path, exist_ok=False):
        bucket, _ = _split(self._strip_protocol(path))
        if bucket not in {b["bucket"] for b in self.client.buckets()}:
            self.client.make_bucket(bucket)
        elif not exist_ok and self.exists(path):
            raise FileExistsError(path)

    def rmdir(self, path):
        bucket, key = _split(self._strip_protocol(path))
        if not key:
            self.client.remove_bucket(bucket)

    def _span(self, path: str, start: Optional[int], end: Optional[int], size: Optional[int]) -> Tuple[int, int]:
        """``[start, end)`` with fsspec's conventions: None is an end of the
        file, a negative number counts from its end."""
        if (start is not None and start < 0) or (end is not None and end < 0) or end is None:
            if size is None:
                size = self.info(path)["size"]
        start = 0 if start is None else (max(size + start, 0) if start < 0 else start)
        end = size if end is None else (max(size + end, 0) if end < 0 else end)
        return start, max(start, end)

    def cat_file(self, path, start=None, end=None, **kwargs):
        """An object's bytes, or those of ``[start, end)``.

        >>> fs.cat_file("quarry://logs/a.txt", start=-6)
        b'world\\n'
        """
        path = self._strip_protocol(path)
        bucket, key = _split(path)
        try:
            if start is None and end is None:
                return self.client.get(bucket, key)
            start, end = self._span(path, start, end, None)
            return self.client.get_ranges([(bucket, key, start, end)])[0]
        except NotFound as e:
            raise FileNotFoundError(path) from e

    def cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return", **kwargs):
        """Many ranges, of one object or many, in one call to the cluster
        (``Client.get_ranges``), not one round trip per range.

        >>> fs.cat_ranges(["logs/a.txt"] * 2, [0, 6], [5, 11])
        [b'hello', b'world']
        """
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        n = len(paths)
        starts = starts if isinstance(starts, list) else [starts] * n
        ends = ends if isinstance(ends, list) else [ends] * n
        if len(starts) != n or len(ends) != n:
            raise ValueError("paths, starts and ends must be as long as each other")
        paths = [self._strip_protocol(p) for p in paths]
        sizes: Dict[str, int] = {}
        requests = []
        try:
            for path, start, end in zip(paths, starts, ends):
                needs_size = end is None or (start is not None and start < 0) or end < 0
                if needs_size and path not in sizes:
                    sizes[path] = self.info(path)["size"]
                s, e = self._span(path, start, end, sizes.get(path))
                requests.append((*_split(path), s, e))
            return self.client.get_ranges(requests)
        except (QuarryError, FileNotFoundError) as e:
            if on_error == "raise":
                raise FileNotFoundError(str(e)) if isinstance(e, NotFound) else e
            # Which range failed: each alone, its own error in its place.
            out: List[Any] = []
            for path, start, end in zip(paths, starts, ends):
                try:
                    out.append(self.cat_file(path, start, end))
                except Exception as one:  # noqa: BLE001 - fsspec's contract
                    out.append(one)
            return out

    def created(self, path):
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["created"], tz=datetime.timezone.utc)

    modified = created

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        return QuarryFile(
            self, path, mode=mode, block_size=block_size or "default",
            autocommit=autocommit, cache_options=cache_options, **kwargs,
        )


class QuarryFile(AbstractBufferedFile):
    """An object opened through :class:`QuarryFileSystem`: reads fetch the
    ranges they need; writes are buffered and stored as one new version on
    close (nothing is stored if the file is discarded)."""

    def _fetch_range(self, start, end):
        bucket, key = _split(self.path)
        return self.fs.client.get_ranges([(bucket, key, start, end)])[0]

    def _initiate_upload(self):
        self._spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)

    def _upload_chunk(self, final=False):
        self.buffer.seek(0)
        while True:
            piece = self.buffer.read(1 << 20)
            if not piece:
                break
            self._spool.write(piece)
        if final:
            self._spool.seek(0)
            bucket, key = _split(self.path)
            try:
                self.fs.client.put(bucket, key, self._spool)
            finally:
                self._spool.close()
        return True

    def discard(self):
        spool = getattr(self, "_spool", None)
        if spool is not None:
            spool.close()
