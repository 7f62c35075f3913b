"""The Redis store remembers the index entries it added (one SADD per new key, not one per batch) and adds them
again whenever they may have gone: on an assignment, after a refused batch, when the key's expiry comes, and
in a new store (a restarted consumer). Each test removes an entry behind the store's back and checks whether
the next batch puts it back; the counts stay exact throughout. Runs on a standalone Redis or a Redis Cluster
(``LDPSTREAM_REDIS=redis+cluster://...``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ldpstream.config import RedisConfig
from ldpstream.store import PartitionBatch, RedisSketchStore, SketchKey, keys
from ldpstream.store.contract import ALL_TIME, PairIncrement, PairKey

pytestmark = pytest.mark.integration

ALL = SketchKey("m", 1, ALL_TIME)
CELLS = np.array([[1, 0, 2]])


def _batch(expected: int | None, after: int, **extra: object) -> PartitionBatch:
    return PartitionBatch("t", 0, expected, after, increments={ALL: CELLS}, stats={"reports_applied": 3},
                          **extra)  # type: ignore[arg-type]


def _listed(store: RedisSketchStore, index: str) -> set[str]:
    return {m.decode() if isinstance(m, bytes) else m for m in store.client.smembers(index)}


@pytest.fixture
def store(redis_config: RedisConfig, key_prefix: str) -> RedisSketchStore:
    return RedisSketchStore(redis_config.client(), key_prefix)


def test_an_entry_is_added_once_then_again_after_an_assignment_and_in_a_new_store(store, redis_config, key_prefix):
    index = keys.index_key(key_prefix, "m", 1)
    name = keys.sketch_key(key_prefix, "t", 0, ALL)
    assert store.apply(_batch(None, 10)).applied
    assert _listed(store, index) == {name}
    store.client.delete(index)  # behind the store's back
    assert store.apply(_batch(10, 20)).applied
    assert _listed(store, index) == set()  # remembered: no SADD with this batch
    assert store.next_offsets("t", [0]) == {0: 20}  # an assignment of the partition: forget
    assert store.apply(_batch(20, 30)).applied
    assert _listed(store, index) == {name}
    store.client.delete(index)
    restarted = RedisSketchStore(redis_config.client(), key_prefix)
    assert restarted.apply(_batch(30, 40)).applied
    assert _listed(store, index) == {name}
    assert store.snapshot("m", 1, (1, 3)).total.tolist() == [[4, 0, 8]]  # four batches, each counted once


def test_a_refused_batch_makes_the_store_add_the_entries_again(store, redis_config, key_prefix):
    """A rebalance: another consumer wrote the partition (and the entry went meanwhile); this store's next
    batch is refused, and the batch it sends from the stored offset adds the entry again."""
    index = keys.index_key(key_prefix, "m", 1)
    assert store.apply(_batch(None, 10)).applied
    other = RedisSketchStore(redis_config.client(), key_prefix)
    assert other.apply(_batch(10, 20)).applied
    store.client.delete(index)
    refused = store.apply(_batch(10, 20))
    assert not refused.applied and refused.next_offset == 20
    assert store.apply(_batch(20, 30)).applied
    assert _listed(store, index) == {keys.sketch_key(key_prefix, "t", 0, ALL)}
    assert store.snapshot("m", 1, (1, 3)).total.tolist() == [[3, 0, 6]]


def test_an_entry_is_forgotten_when_its_key_expires(store, key_prefix):
    """A bucket key that expires in two seconds is remembered no longer than that: a batch after its expiry
    adds its entry again (with a fresh key; the decoder removes entries only past the retention)."""
    bucket = SketchKey("m", 1, 7)
    index = keys.index_key(key_prefix, "m", 1)
    name = keys.sketch_key(key_prefix, "t", 0, bucket)
    expire_at = int(time.time()) + 2
    assert store.apply(PartitionBatch("t", 0, None, 1, increments={bucket: CELLS},
                                      expire_at={bucket: expire_at})).applied
    store.client.delete(index)
    assert store.apply(PartitionBatch("t", 0, 1, 2, increments={bucket: CELLS},
                                      expire_at={bucket: expire_at})).applied
    assert _listed(store, index) == set()
    time.sleep(max(0.0, expire_at - time.time()) + 0.5)
    assert store.apply(PartitionBatch("t", 0, 2, 3, increments={bucket: CELLS},
                                      expire_at={bucket: int(time.time()) + 60})).applied
    assert _listed(store, index) == {name}


def test_pair_statistic_entries_are_remembered_too(store, key_prefix):
    pair = PairKey("a", 1, 0)
    increment = PairIncrement(cells=np.array([3]), counts=np.array([2]))
    index = keys.pair_index_key(key_prefix, "a", 1)
    assert store.apply(_batch(None, 1, pairs={pair: increment})).applied
    assert _listed(store, index) == {keys.pair_key(key_prefix, "t", 0, pair, "cells")}
    store.client.delete(index)
    assert store.apply(_batch(1, 2, pairs={pair: increment})).applied
    assert _listed(store, index) == set()
    store.mark_rebuild("t", 0, 5)  # a rebuild: forget
    assert store.apply(_batch(2, 3, pairs={pair: increment})).applied
    assert _listed(store, index) == {keys.pair_key(key_prefix, "t", 0, pair, "cells")}


def test_without_memory_every_batch_adds_its_entries(redis_config, key_prefix):
    store = RedisSketchStore(redis_config.client(), key_prefix, remember_index=False)
    index = keys.index_key(key_prefix, "m", 1)
    assert store.apply(_batch(None, 10)).applied
    store.client.delete(index)
    assert store.apply(_batch(10, 20)).applied
    assert _listed(store, index) == {keys.sketch_key(key_prefix, "t", 0, ALL)}
