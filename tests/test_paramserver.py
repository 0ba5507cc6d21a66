"""bench.backends.paramserver on its own: the slot cache's eviction, the private server's lifecycle, the row
store against a real redis-server on loopback (never a mock), and the row bytes."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from bench import registry
from bench.errors import UserError
from bench.models.dlrm import build_dlrm
from bench.backends.paramserver.cache import RowCache
from bench.backends.paramserver.rows import encode, row_bytes
from bench.backends.paramserver.server import RedisServer
from bench.backends.paramserver.redis_tables import Location, RowStore, TableRows, weights_digest
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables
from tests.redis_procs import gone, is_running, wait_until


def ids(*values):
    return torch.tensor(values, dtype=torch.int64)


def one_table(capacity, rows=10, policy="lru"):
    return RowCache([rows], [capacity], policy)


def cached(cache: RowCache, table: int = 0) -> set[int]:
    return set(cache.cached(table).tolist())


# ------------------------------------------------------------------------------------------ cache


def test_lru_evicts_the_row_used_longest_ago():
    cache = one_table(3, policy="lru")
    for batch in ([0], [1], [2], [0]):
        cache.assign(ids(*batch))
    a = cache.assign(ids(3))  # 1 is the oldest (0 was used again)
    assert a.miss.tolist() == [True] and a.staged == {0: 0}
    assert cached(cache) == {0, 2, 3}
    cache.assign(ids(4))
    assert cached(cache) == {0, 3, 4}


def test_lfu_evicts_the_least_used_row_then_the_oldest():
    cache = one_table(3, policy="lfu")
    for batch in ([0], [0], [1], [2]):
        cache.assign(ids(*batch))
    cache.assign(ids(3))  # uses: 0 -> 2, 1 -> 1, 2 -> 1: the older of 1 and 2 goes
    assert cached(cache) == {0, 2, 3}
    cache.assign(ids(4))  # 2 and 3 used once, 2 longer ago; 0 (twice) stays, where LRU would drop it
    assert cached(cache) == {0, 3, 4}


def test_hits_keep_their_slot_and_a_row_is_never_evicted_by_its_own_batch():
    cache = one_table(2)
    first = cache.assign(ids(0, 1))
    assert first.miss.tolist() == [True, True] and sorted(first.slots.tolist()) == [0, 1]
    slot_of_0 = int(first.slots[0])
    a = cache.assign(ids(0, 5, 6, 7))  # 0 hits; only 1 may go; 6 and 7 are staged past the capacity
    assert a.miss.tolist() == [False, True, True, True] and a.staged == {0: 2}
    assert int(a.slots[0]) == slot_of_0
    assert a.slots[1:].tolist() == [1 - slot_of_0, 2, 3]
    assert cached(cache) == {0, 5}
    rows, slots = a.misses[0]
    assert rows.tolist() == [5, 6, 7] and slots.tolist() == a.slots[1:].tolist()
    cache.reset()
    assert cached(cache) == set() and cache.assign(ids(0)).miss.tolist() == [True]


def test_tables_share_one_id_space_but_evict_only_their_own_rows():
    cache = RowCache([10, 4], [2, 4])  # table 1's rows are global ids 10..13
    cache.assign(ids(0, 1, 10, 11, 12, 13))
    a = cache.assign(ids(2, 10))  # table 0 is full: evicts one of its own; table 1 hits
    assert a.miss.tolist() == [True, False] and list(a.misses) == [0]
    assert len(cached(cache, 0)) == 2 and 2 in cached(cache, 0) and cached(cache, 1) == {0, 1, 2, 3}
    assert a.misses[0][0].tolist() == [2]  # row ids within the table, as the store keys them


def test_a_full_cache_hits_everything_after_the_first_pass():
    cache = one_table(10)
    assert cache.assign(ids(*range(10))).miss.all()
    again = cache.assign(ids(3, 4, 9))
    assert not again.miss.any() and again.misses == {}


# ----------------------------------------------------------------------------------------- server


def test_the_private_server_answers_and_stops():
    server = RedisServer.start()
    try:
        store = RowStore(Location(server.url))
        store.ping()
        assert store.server_version().startswith(("6.", "7."))
        store.close()
    finally:
        server.stop()
    assert wait_until(lambda: not is_running(server.pid), timeout=10)
    server.stop()  # idempotent


def test_the_server_dies_with_a_sigkilled_parent():
    """PR_SET_PDEATHSIG: killing only the Python process (not its group) still stops the server."""
    script = textwrap.dedent(
        """
        import sys, time
        from bench.backends.paramserver.server import RedisServer
        server = RedisServer.start()
        print(server.pid, flush=True)
        time.sleep(120)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pid = int(child.stdout.readline())
        assert is_running(pid)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        assert wait_until(lambda: gone([pid]), timeout=10), "redis-server outlived its SIGKILLed parent"
    finally:
        if child.poll() is None:
            child.kill()


# ------------------------------------------------------------------------------------------ store


@pytest.fixture
def server():
    srv = RedisServer.start()
    yield srv
    srv.stop()


def small_tables(precision="fp32"):
    torch.manual_seed(0)
    weights = {"a": torch.randn(50, 8), "b": torch.randn(7, 8)}
    return [TableRows(n, w.shape[0], w.shape[1], precision) for n, w in weights.items()], weights


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_rows_round_trip_in_one_pipelined_pull(server, precision):
    tables, weights = small_tables(precision)
    store = RowStore(Location.parse(server.url + "?prefix=m1"))
    report = store.load(tables, weights, weights_digest(weights))
    assert report.loaded and report.rows == 57 and report.payload_bytes == 57 * row_bytes(precision, 8)
    got = store.pull([(tables[0], [3, 0, 49]), (tables[1], [6])])
    assert torch.equal(got[0], encode(weights["a"][[3, 0, 49]], precision))
    assert torch.equal(got[1], encode(weights["b"][[6]], precision))
    if precision == "fp32":
        assert torch.equal(got[0].view(torch.float32), weights["a"][[3, 0, 49]])
    manifest = json.loads(store.client.get("m1:manifest"))
    assert manifest["writer"] == "bench ps_redis" and manifest["status"] == "complete"
    assert manifest["tables"]["a"] == {"rows": 50, "dim": 8, "row_bytes": row_bytes(precision, 8), "precision": precision}


def test_the_same_rows_are_reused_and_foreign_data_is_refused_untouched(server):
    tables, weights = small_tables()
    digest = weights_digest(weights)
    assert RowStore(Location.parse(server.url + "?prefix=m")).load(tables, weights, digest).loaded
    again = RowStore(Location.parse(server.url + "?prefix=m")).load(tables, weights, digest)
    assert not again.loaded  # same tables, same weights: nothing written

    other = {"a": weights["a"] + 1, "b": weights["b"]}
    store = RowStore(Location.parse(server.url + "?prefix=m"))
    before = store.client.get("m:a:0")
    with pytest.raises(UserError, match="holds another model's rows .*use another prefix.*nothing was changed"):
        store.load(tables, other, weights_digest(other))
    assert store.client.get("m:a:0") == before

    store.client.set("users:1", b"alice")  # someone else's key under the prefix, no manifest
    foreign = RowStore(Location.parse(server.url + "?prefix=users"))
    with pytest.raises(UserError, match="keys that bench did not write .*'users:1'"):
        foreign.load(tables, weights, digest)
    assert store.client.get("users:1") == b"alice" and store.client.get("users:manifest") is None

    store.client.set("x:manifest", b"not json")
    with pytest.raises(UserError, match="was not written by bench"):
        RowStore(Location.parse(server.url + "?prefix=x")).load(tables, weights, digest)


def test_an_interrupted_load_of_the_same_rows_is_written_again(server):
    tables, weights = small_tables()
    store = RowStore(Location(server.url))
    store.load(tables, weights, weights_digest(weights))
    store.client.delete("bench:a:7")
    manifest = json.loads(store.client.get("bench:manifest"))
    store.client.set("bench:manifest", json.dumps({**manifest, "status": "loading"}))
    assert store.load(tables, weights, weights_digest(weights)).loaded
    assert store.client.get("bench:a:7") is not None


def test_a_missing_row_fails_the_pull(server):
    tables, weights = small_tables()
    store = RowStore(Location(server.url))
    store.load(tables, weights, weights_digest(weights))
    store.client.delete("bench:b:2")
    with pytest.raises(RuntimeError, match="bench:b:2 is missing"):
        store.pull([(tables[1], [1, 2])])


def test_urls_and_prefixes():
    loc = Location.parse("redis://:secret@10.0.0.1:6380/3?prefix=dlrm.v2")
    assert loc.prefix == "dlrm.v2" and loc.url == "redis://:secret@10.0.0.1:6380/3"
    assert "secret" not in loc.shown() and loc.shown().endswith("/3?prefix=dlrm.v2")
    assert Location.parse("redis://h:1/0").prefix == "bench"
    with pytest.raises(UserError, match="not a Redis URL"):
        Location.parse("http://h:1/0")
    with pytest.raises(UserError, match="prefix 'a\\*'"):
        Location.parse("redis://h:1/0?prefix=a*")


def test_unreachable_server_is_one_line():
    port = __import__("bench.backends.paramserver.server", fromlist=["free_port"]).free_port()
    with pytest.raises(UserError) as err:
        RowStore(Location(f"redis://127.0.0.1:{port}/0"), timeout_s=2).ping()
    assert "cannot reach the Redis server" in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------- rows


@pytest.mark.parametrize("backend,precision", [("int8_tbe", "int8"), ("uint4", "int4")])
def test_row_bytes_equal_the_in_memory_tbe_tables(backend, precision):
    """The int rows Redis holds are byte for byte what int8_tbe / uint4 (with torchrec's min-max rows) store in their TBE."""
    torch.manual_seed(0)
    tables = tiny_tables()
    model = build_dlrm(tiny_model_config(8), tables, 13).eval()
    entry = registry.get("backend", backend)
    prepared = entry.factory(dataclasses.replace(entry.config(), row_range="minmax")).prepare(model, [random_batch(tables, 64)], torch.device("cpu"))
    from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEBC

    qebc = next(m for m in prepared.modules() if isinstance(m, QuantEBC))
    stored = {spec[0]: w for k in qebc._emb_modules for spec, (w, _) in zip(k.embedding_specs, k.split_embedding_weights(split_scale_shifts=False))}
    ebc = model.sparse_arch.embedding_bag_collection
    for name, bag in ebc.embedding_bags.items():
        assert torch.equal(encode(bag.weight, precision), stored[name]), name
