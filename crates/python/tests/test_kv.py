"""Key-value tables through the package (`Client.kv()`), against the
session's cluster: memcached's semantics, batches, large values, arrays,
dedup in the figures, bad input, and a third-party memcached client
(pymemcache) on every node's memcached port reading and writing the same
tables.

`quarry up` configures no tenants, so the cluster serves the one open
`default` tenant: these tests use it, and check only that another tenant
is denied (tenants with secrets, quotas and modes are tested in Rust, in
crates/kv and crates/node)."""

import itertools
import os
import re
import time

import pytest
from pymemcache.client.base import Client as Memcache

import quarry
from conftest import node_addrs
from test_gil import counting_while

KIB = 1 << 10
MIB = 1 << 20
ITEM_LIMIT_BYTES = MIB

_names = itertools.count()


@pytest.fixture(scope="module")
def table(client) -> quarry.KvTable:
    return client.kv()


@pytest.fixture
def ns() -> str:
    """A key prefix of each test's own: tests share the default tenant."""
    return f"t{os.getpid()}-{next(_names)}:"


def memcached_ports(cluster_file):
    """Each node's memcached `host:port`, from the cluster file `quarry up`
    wrote."""
    text = cluster_file.read_text()
    ports = re.findall(r'^memcached\s*=\s*"([^"]+)"', text, re.M)
    assert len(ports) == len(node_addrs(cluster_file)) >= 2, text
    return ports


class KeepFlags:
    """A pymemcache serde that hands back the flags with the value, so the
    flags a node stored can be compared."""

    def serialize(self, key, value):
        return value, 0

    def deserialize(self, key, value, flags):
        return value, flags


def memcache(addr: str, **kwargs) -> Memcache:
    host, port = addr.rsplit(":", 1)
    # Replies are waited for: the default noreply would make every store
    # and delete "succeed" unseen.
    return Memcache((host, int(port)), default_noreply=False, timeout=30, **kwargs)


# ---- one key at a time ------------------------------------------------


def test_set_get_and_delete_with_str_and_bytes_keys(table, ns, cli):
    key = ns + "user"
    cas = table.set(key, b"ada")
    assert isinstance(cas, int) and cas > 0
    assert table.get(key) == b"ada"
    # A str key is its UTF-8 bytes.
    assert table.get(key.encode()) == b"ada"
    assert table.gets(key) == (b"ada", cas)

    # Any bytes-like value; a new set is a new version with a new CAS.
    assert table.set(key, bytearray(b"bob")) != cas
    assert table.get(key) == b"bob"
    table.set(key, memoryview(b"carol"))
    assert table.get(key) == b"carol"

    # What the package stored, the CLI reads back the same.
    assert cli.ok("kv", "get", key) == b"carol"

    unicode_key = ns + "naïve ключ"
    table.set(unicode_key, "ü".encode())
    assert table.get(unicode_key.encode("utf-8")) == "ü".encode()

    assert table.delete(key) is True
    assert table.delete(key) is False
    assert table.get(key) is None
    assert table.gets(key) is None
    assert table.get_item(key) is None


def test_flags_cas_and_expiry_are_kept_with_the_item(table, ns):
    key = ns + "item"
    before = int(time.time())
    cas = table.set(key, b"v", flags=0xDEADBEEF, ttl=3600)
    item = table.get_item(key)
    assert (item.value, item.flags, item.cas) == (b"v", 0xDEADBEEF, cas)
    assert before + 3600 <= item.expires_unix_secs <= int(time.time()) + 3600
    table.set(key, b"v")
    assert table.get_item(key).expires_unix_secs is None
    assert table.get_item(key).flags == 0
    assert "KvItem(value=<1 bytes" in repr(table.get_item(key))


def test_add_replace_append_and_prepend_follow_memcached(table, ns):
    key = ns + "k"
    # replace, append and prepend need the key; add needs it absent.
    assert table.replace(key, b"x") is False
    assert table.append(key, b"x") is False
    assert table.prepend(key, b"x") is False
    assert table.get(key) is None
    assert table.add(key, b"middle", flags=3) is True
    assert table.add(key, b"other") is False
    assert table.get(key) == b"middle"
    assert table.append(key, b">") is True
    assert table.prepend(key, b"<") is True
    assert table.get(key) == b"<middle>"
    # append and prepend keep the item's flags.
    assert table.get_item(key).flags == 3
    assert table.replace(key, b"new", flags=4) is True
    assert table.get_item(key).value == b"new"
    assert table.get_item(key).flags == 4


def test_cas_stores_only_over_the_version_it_names(table, ns):
    key = ns + "counter"
    assert table.cas(key, b"x", 12345) is None  # NOT_FOUND
    first = table.set(key, b"1")
    value, cas = table.gets(key)
    assert (value, cas) == (b"1", first)
    assert table.cas(key, b"2", cas) is True
    assert table.cas(key, b"3", cas) is False  # EXISTS: another version
    assert table.get(key) == b"2"
    _, newer = table.gets(key)
    assert newer != cas
    assert table.cas(key, b"3", newer) is True
    assert table.get(key) == b"3"


def test_incr_and_decr_follow_memcached(table, ns):
    key = ns + "n"
    assert table.incr(key) is None  # NOT_FOUND, no item made
    assert table.decr(key) is None
    assert table.get(key) is None
    table.set(key, b"41")
    assert table.incr(key) == 42
    assert table.incr(key, 8) == 50
    assert table.get(key) == b"50"
    assert table.decr(key, 45) == 5
    # decr stops at 0; incr wraps at 2**64.
    assert table.decr(key, 100) == 0
    table.set(key, str(2**64 - 1).encode())
    assert table.incr(key, 2) == 1
    table.set(key, b"not a number")
    with pytest.raises(quarry.NonNumeric, match="non-numeric"):
        table.incr(key)
    with pytest.raises(quarry.KvError):
        table.decr(key)
    assert table.get(key) == b"not a number"


def test_ttl_and_touch_expire_items(table, ns):
    short, kept, missing = ns + "short", ns + "kept", ns + "missing"
    table.set(short, b"s", ttl=1)
    table.set(kept, b"k", ttl=1)
    assert table.touch(kept, 0) is True  # 0: never
    assert table.touch(missing, 10) is False
    time.sleep(2.2)
    assert table.get(short) is None
    assert table.get(kept) == b"k"
    # A touch sets a new expiry on a live item.
    assert table.touch(kept, 1) is True
    assert table.get_item(kept).expires_unix_secs is not None
    time.sleep(2.2)
    assert table.get(kept) is None
    assert table.touch(kept, 10) is False


# ---- batches ------------------------------------------------------------


def test_get_many_and_set_many_of_1000_keys(table, ns):
    values = {f"{ns}{i}": b"value %d" % i for i in range(1000)}
    before = table.stats()
    cas = table.set_many(values)
    # CAS values are a node's counter: unique per key's versions, not
    # across keys.
    assert len(cas) == 1000 and all(isinstance(c, int) and c > 0 for c in cas)
    got = table.get_many(list(values) + [ns + "absent-1", ns + "absent-2"])
    # Misses are left out; keys come back as given.
    assert got == values
    after = table.stats()
    assert after["cmd_set"] - before["cmd_set"] == 1000
    assert after["get_hits"] - before["get_hits"] == 1000
    assert after["get_misses"] - before["get_misses"] == 2

    # Pairs, bytes keys, and a ttl for the whole batch.
    pairs = [(f"{ns}p{i}".encode(), bytes([i % 256]) * 10) for i in range(1000)]
    table.set_many(pairs, ttl=3600)
    by_bytes = table.get_many(k for k, _ in pairs)
    assert by_bytes == dict(pairs)
    assert all(isinstance(k, bytes) for k in by_bytes)
    assert table.get_item(pairs[0][0]).expires_unix_secs is not None

    # The keys are spread over every node, yet each is one batch call.
    assert {table.node_of(k) for k in values} == set(table.nodes)
    assert table.get_many([]) == {}
    assert table.set_many({}) == []


def test_batches_release_the_gil_while_they_wait(table, ns):
    values = {f"{ns}{i}": os.urandom(1024) for i in range(2000)}
    advanced, _ = counting_while(lambda: table.set_many(values))
    assert advanced > 0, "the counting thread never ran during set_many"
    advanced, got = counting_while(lambda: table.get_many(list(values)))
    assert got == values
    assert advanced > 0, "the counting thread never ran during get_many"


# ---- large values and arrays -------------------------------------------


def test_a_5_mb_value_through_set_large_and_get_large_byte_for_byte(table, ns):
    key = ns + "video"
    data = os.urandom(5 * 1000 * 1000)
    items_before = table.stats()["curr_items"]
    table.set_large(key, data, flags=9)
    assert table.get_large(key) == data
    # Five 1 MiB slices behind a head: six items.
    assert table.stats()["curr_items"] - items_before == 6
    with pytest.raises(quarry.KvError, match="get_large"):
        table.get(key)

    # Replaced by a small value: the old slices go.
    table.set_large(key, b"small now")
    assert table.get_large(key) == b"small now"
    assert table.get(key) == b"small now"
    assert table.stats()["curr_items"] - items_before == 1

    table.set_large(key, data[:3 * MIB + 1])
    assert table.get_large(key) == data[:3 * MIB + 1]
    assert table.delete_large(key) is True
    assert table.delete_large(key) is False
    assert table.get_large(key) is None
    assert table.stats()["curr_items"] == items_before


def test_a_20_mb_value_through_set_large_and_get_large(table, ns):
    # 20 slices over 3 nodes put at least 7 on one node: 7 MiB, more than
    # one reply holds, so the node answers in pieces.
    data = os.urandom(20 * MIB)
    table.set_large(ns + "big", data)
    try:
        assert table.get_large(ns + "big") == data
    finally:
        table.delete_large(ns + "big")


def test_arrays_of_one_element_and_many(table, ns):
    one, many = ns + "one", ns + "many"
    assert table.array_len(one) is None
    assert table.array_get(one, 0) is None
    assert table.array_get_many(one, [0]) is None

    table.array_set(one, [b"only"])
    assert table.array_len(one) == 1
    assert table.array_get(one, 0) == b"only"

    elements = [os.urandom(i % 300) for i in range(500)]
    table.array_set(many, elements)
    assert table.array_len(many) == 500
    assert table.array_get(many, 499) == elements[499]
    picks = [7, 0, 499, 7, 250]
    assert table.array_get_many(many, picks) == [elements[i] for i in picks]
    assert table.array_get_many(many, range(500)) == elements
    assert table.array_get_many(many, []) == []

    # Replaced by a shorter array: the old elements are gone.
    table.array_set(many, [b"a", b"b"])
    assert table.array_get_many(many, [1, 0]) == [b"b", b"a"]
    with pytest.raises(quarry.KvError, match="array_get"):
        table.get(many)
    # A caller's mistake, whatever the cluster holds: InvalidInput.
    with pytest.raises(quarry.InvalidInput, match="holds an array"):
        table.get_large(many)
    assert table.delete_large(many) is True
    assert table.array_len(many) is None


def test_an_index_past_an_arrays_end_raises_naming_it(table, ns):
    key = ns + "arr"
    table.array_set(key, [b"a", b"b", b"c"])
    with pytest.raises(quarry.InvalidInput, match="index 3 of an array of 3 elements"):
        table.array_get(key, 3)
    with pytest.raises(quarry.InvalidInput, match="index 9 of an array of 3"):
        table.array_get_many(key, [0, 9])
    with pytest.raises(OverflowError):
        table.array_get(key, -1)
    # A plain value is no array.
    table.set(ns + "plain", b"x")
    with pytest.raises(quarry.InvalidInput, match="no array"):
        table.array_len(ns + "plain")


# ---- figures and flush ---------------------------------------------------


def test_stats_show_dedup_and_match_the_cli(table, ns, cli):
    before = table.stats()
    page = os.urandom(4 * KIB)
    keys = [f"{ns}copy{i}" for i in range(30)]
    table.set_many({k: page for k in keys})
    after = table.stats()
    logical = after["logical_bytes"] - before["logical_bytes"]
    stored = after["stored_bytes"] - before["stored_bytes"]
    assert logical == 30 * len(page)
    # At most one copy of the value per node holds it.
    assert stored <= len(table.nodes) * len(page)
    assert after["stored_bytes"] < after["logical_bytes"]
    assert after["dedup_ratio"] == pytest.approx(after["logical_bytes"] / after["stored_bytes"])
    assert after["dedup_ratio"] > 1.0
    assert after["tenant"] == "default"

    # Two keys on one node share one stored value.
    by_node = {}
    for k in keys:
        by_node.setdefault(table.node_of(k), []).append(k)
    assert max(len(v) for v in by_node.values()) >= 2

    # The same figures as `quarry kv stats --json`, node by node too.
    assert table.stats() == cli.json("kv", "stats")
    per_node = table.stats(nodes=True)
    assert per_node == cli.json("kv", "stats", "--nodes")
    assert sorted(per_node["nodes"]) == [str(n) for n in table.nodes]
    assert sum(n["logical_bytes"] for n in per_node["nodes"].values()) == after["logical_bytes"]


def test_flush_all_drops_every_key(client, ns):
    table = client.kv()
    keys = {f"{ns}{i}": b"x" for i in range(100)}
    table.set_many(keys)
    table.array_set(ns + "arr", [b"1", b"2"])
    assert len(table.get_many(keys)) == 100
    table.flush_all()
    assert table.get_many(keys) == {}
    assert table.array_len(ns + "arr") is None
    assert table.stats()["curr_items"] == 0
    # The table works on after a flush.
    table.set(ns + "after", b"y")
    assert table.get(ns + "after") == b"y"


# ---- tenants and bad input -------------------------------------------------


def test_an_unknown_tenant_is_denied_and_a_bad_name_is_invalid(client):
    stranger = client.kv("nobody", "guess")
    assert stranger.tenant == "nobody"
    with pytest.raises(quarry.Denied, match="nobody"):
        stranger.get("k")
    with pytest.raises(quarry.Denied):
        stranger.set_many({"k": b"v"})
    with pytest.raises(quarry.Denied):
        stranger.stats()
    with pytest.raises(quarry.InvalidInput, match="invalid tenant name"):
        client.kv("two words")
    with pytest.raises(quarry.InvalidInput, match="secret of 300 bytes"):
        client.kv("default", "s" * 300)


def test_bad_keys_are_refused_before_any_call(table, ns):
    with pytest.raises(quarry.InvalidInput, match="251 bytes; the limit is 250"):
        table.set("k" * 251, b"v")
    with pytest.raises(quarry.InvalidInput, match="300 bytes; the limit is 250"):
        table.get(b"k" * 300)
    # 250 bytes is a key; a UTF-8 key counts its bytes, not its characters.
    table.set("k" * 250, b"longest")
    assert table.get("k" * 250) == b"longest"
    assert table.delete("k" * 250)
    with pytest.raises(quarry.InvalidInput, match="252 bytes"):
        table.get("é" * 126)
    with pytest.raises(quarry.InvalidInput, match="empty key"):
        table.get("")
    with pytest.raises(quarry.InvalidInput, match="empty key"):
        table.get_many([ns + "fine", b""])
    with pytest.raises(quarry.InvalidInput, match="empty key"):
        table.set_many([(b"", b"v")])
    # Large values and arrays name children after their key: 14 bytes less.
    with pytest.raises(quarry.InvalidInput, match="large value or array; the limit is 236"):
        table.set_large("k" * 240, b"v")
    with pytest.raises(TypeError, match="a key is str or bytes"):
        table.get(42)
    with pytest.raises(TypeError, match="not one key"):
        table.get_many("abc")
    with pytest.raises(quarry.InvalidInput, match="more than 65536 keys"):
        table.get_many(f"k{i}" for i in range(65_537))


def test_a_value_over_1_mib_needs_set_large(table, ns):
    key = ns + "big"
    big = os.urandom(ITEM_LIMIT_BYTES + 1)
    with pytest.raises(quarry.InvalidInput, match=r"1048577 bytes; one item holds at most 1048576"):
        table.set(key, big)
    assert table.get(key) is None
    for store in (table.add, table.replace, table.append, table.prepend):
        with pytest.raises(quarry.InvalidInput, match="1048576"):
            store(key, big)
    with pytest.raises(quarry.InvalidInput, match="1048576"):
        table.set_many({key: big})
    with pytest.raises(quarry.InvalidInput, match="1048576"):
        table.array_set(key, [b"ok", big])
    # Exactly 1 MiB is one item.
    table.set(key, big[:ITEM_LIMIT_BYTES])
    assert table.get(key) == big[:ITEM_LIMIT_BYTES]
    table.set_large(key, big)
    assert table.get_large(key) == big
    assert table.delete_large(key)


def test_bad_values_and_numbers_are_refused(table, ns):
    with pytest.raises(TypeError, match="bytes-like"):
        table.set(ns + "k", "a str")
    with pytest.raises(TypeError, match="bytes-like"):
        table.set(ns + "k", 5)
    with pytest.raises(OverflowError):
        table.set(ns + "k", b"v", ttl=-1)
    with pytest.raises(OverflowError):
        table.set(ns + "k", b"v", flags=1 << 32)
    with pytest.raises(quarry.InvalidInput, match="ttl"):
        table.set(ns + "k", b"v", ttl=2**64 - 1)
    assert table.get(ns + "k") is None


# ---- a third-party memcached client on the nodes' memcached ports ---------


def test_pymemcache_through_every_nodes_port(cluster_file, ns):
    clients = [memcache(addr) for addr in memcached_ports(cluster_file)]
    try:
        n = len(clients)
        for i, mc in enumerate(clients):
            other = clients[(i + 1) % n]
            key = f"{ns}mc{i}"
            assert mc.set(key, b"from port %d" % i) is True
            # Any node's port serves every key.
            assert other.get(key) == b"from port %d" % i

            value, cas = other.gets(key)
            assert value == b"from port %d" % i
            assert mc.cas(key, b"swapped", cas) is True
            assert other.cas(key, b"again", cas) is False
            assert mc.get(key) == b"swapped"

            counter = f"{ns}count{i}"
            assert mc.incr(counter, 1) is None
            mc.set(counter, b"10")
            assert other.incr(counter, 5) == 15
            assert mc.decr(counter, 20) == 0

            assert other.add(key, b"x") is False
            assert other.delete(key) is True
            assert mc.delete(key) is False
            assert mc.get(key) is None

        keys = [f"{ns}many{i}" for i in range(200)]
        clients[0].set_many({k: k.encode() for k in keys})
        got = clients[-1].get_many(keys + [ns + "absent"])
        assert got == {k: k.encode() for k in keys}
    finally:
        for mc in clients:
            mc.close()


def test_values_cross_between_pymemcache_and_the_python_client(cluster_file, table, ns):
    ports = memcached_ports(cluster_file)
    mc = memcache(ports[0], serde=KeepFlags())
    try:
        # pymemcache writes, the package reads: value and flags.
        mc.set(ns + "from-mc", b"written by pymemcache", flags=77)
        assert table.get(ns + "from-mc") == b"written by pymemcache"
        assert table.get_item(ns + "from-mc").flags == 77

        # The package writes, pymemcache reads, through each port.
        cas = table.set(ns + "from-py", b"written by quarry", flags=5)
        for addr in ports:
            reader = memcache(addr, serde=KeepFlags())
            try:
                assert reader.get(ns + "from-py") == (b"written by quarry", 5)
                assert reader.gets(ns + "from-py") == ((b"written by quarry", 5), str(cas).encode())
            finally:
                reader.close()

        # A CAS from one face is good in the other.
        _, mc_cas = mc.gets(ns + "from-mc")
        assert table.cas(ns + "from-mc", b"swapped by quarry", int(mc_cas)) is True
        assert mc.get(ns + "from-mc") == (b"swapped by quarry", 0)
        assert mc.cas(ns + "from-py", b"stale", str(cas)) is True
        assert table.get(ns + "from-py") == b"stale"

        # incr from one face, read from the other; batches both ways.
        table.set(ns + "n", b"1")
        assert mc.incr(ns + "n", 41) == 42
        assert table.incr(ns + "n") == 43
        table.set_many({f"{ns}b{i}": b"%d" % i for i in range(100)})
        got = mc.get_many([f"{ns}b{i}" for i in range(100)])
        assert {k: v for k, (v, _) in got.items()} == {f"{ns}b{i}": b"%d" % i for i in range(100)}
        mc.delete(ns + "b7")
        assert f"{ns}b7" not in table.get_many([f"{ns}b{i}" for i in range(100)])
    finally:
        mc.close()
