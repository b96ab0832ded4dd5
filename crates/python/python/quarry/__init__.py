"""Quarry from Python: buckets, objects, near-data commands and key-value tables.

A thin layer over Quarry's Rust client (``quarry._quarry``). Every call that
waits on the cluster releases the GIL, so other threads run meanwhile.
Failures raise :class:`QuarryError` subclasses whose message is the one the
``quarry`` command line prints for the same failure.

>>> import quarry
>>> client = quarry.connect()          # $QUARRY_CLUSTER or ./.quarry/cluster.toml
>>> client.make_bucket("logs")
>>> client.put("logs", "a.txt", b"hello\\nworld\\n").size
12
>>> client.grep("world", "logs/a.txt")["results"][0]["output"]["matching_lines"]
1
>>> table = client.kv()                # the default tenant's key-value tables
>>> table.set("user:1", b"ada")
1
>>> table.get_many(["user:1", "nobody"])
{'user:1': b'ada'}
"""

from ._quarry import (
    AlreadyExists,
    Client,
    Conflict,
    Denied,
    InvalidInput,
    KvError,
    KvItem,
    KvTable,
    NonNumeric,
    NotFound,
    ObjectInfo,
    OutOfMemory,
    QuarryError,
    Throttled,
    Unavailable,
    connect,
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
