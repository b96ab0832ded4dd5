"""Quarry from Python: buckets, objects and near-data commands.

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
"""

from ._quarry import (
    AlreadyExists,
    Client,
    Conflict,
    InvalidInput,
    NotFound,
    ObjectInfo,
    QuarryError,
    Unavailable,
    connect,
)

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
