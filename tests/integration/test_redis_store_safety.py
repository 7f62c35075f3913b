"""The Redis store refuses what would break exactly-once counting.

Regression: a batch that used to fail half-way through the apply script (after its first writes, which Redis
does not roll back, so the retried batch counted twice) is now refused before anything is written. And a
Redis that may evict keys (an offset without its counts, or the reverse) is refused at start."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from ldpstream.errors import ServiceError
from ldpstream.store import APPLY_SCRIPT, PartitionBatch, RedisSketchStore, SketchKey, keys
from ldpstream.store.contract import MAX_EXPIRE_AT, PairKey

pytestmark = pytest.mark.integration


def _written(client: redis.Redis, prefix: str) -> list[bytes]:
    return sorted(client.scan_iter(f"{prefix}:*"))


def test_a_sketch_key_of_the_wrong_type_refuses_the_whole_batch(redis_url, key_prefix):
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    good, bad = SketchKey("m", 1, 0), SketchKey("m", 1, 1)
    bad_name = keys.sketch_key(key_prefix, "t", 0, bad)
    store.client.hset(bad_name, "not", "a sketch")  # the old script wrote stats and `good`, then failed here
    before = _written(store.client, key_prefix)
    batch = PartitionBatch("t", 0, None, 10, increments={good: np.array([[1, 2]]), bad: np.array([[3, 4]])},
                           stats={"reports_applied": 10})
    with pytest.raises(ServiceError, match="sketch key holds a hash"):
        store.apply(batch)
    index = keys.index_key(key_prefix, "m", 1)
    assert [k for k in _written(store.client, key_prefix) if k.decode() != index] == before  # nothing counted
    store.client.delete(bad_name)
    assert store.apply(batch).applied  # and once the key is fixed, the same batch applies exactly once
    assert store.stats("t", [0]) == {"reports_applied": 10}
    assert not store.apply(batch).applied


@pytest.mark.parametrize(("expire_at", "cell"), [(MAX_EXPIRE_AT + 1, 0), (10**17, 0), (0, 2**26), (-1, 0)])
def test_the_script_itself_checks_expiry_and_cell_range_before_writing(redis_url, key_prefix, expire_at, cell):
    client = redis.Redis.from_url(redis_url)
    script = client.register_script(APPLY_SCRIPT)
    names = [keys.offset_key(key_prefix, "t", 0), keys.stats_key(key_prefix, "t", 0),
             keys.rebuild_key(key_prefix, "t", 0), keys.sketch_versions_key(key_prefix, "t", 0),
             keys.sketch_key(key_prefix, "t", 0, SketchKey("m", 1, 0)),
             keys.sketch_key(key_prefix, "t", 0, SketchKey("m", 1, 1))]
    args = ["", 5, 1, "reports_applied", 5, 2, 1, 0, 0, 5, 1, expire_at, cell, 5]  # 2 sketch keys
    status, reason = script(keys=names, args=args)
    assert status == -1 and b"out of range" in reason
    assert _written(client, key_prefix) == []


ROW = b"r" * 12


@pytest.mark.parametrize(("pair_args", "status", "reason"), [
    (["x", 0, b"rows"], -1, b"unknown pair statistic form"),
    (["h", 0, 1, -1, 1], -1, b"pair cell or count out of range"),
    (["h", 0, 1, 2**53, 1], -1, b"pair cell or count out of range"),
    (["h", 0, 1, 7, 0], -1, b"pair cell or count out of range"),
    (["h", MAX_EXPIRE_AT + 1, 0], -1, b"pair statistic expiry out of range"),
    (["a", -1, 12, 12, 2, 0, ROW], -1, b"pair statistic expiry out of range"),
    (["a", 0, 13, 12, 2, 0, ROW], -1, b"not whole rows"),  # a capacity of 13 bytes for 12-byte rows
    (["a", 0, 24, 12, 2, 0, ROW[:5]], -1, b"not whole rows"),
    (["a", 0, 2**29, 12, 2, 0, ROW], -1, b"out of range"),  # a segment past Redis' string limit
    (["a", 0, 24, 12, 3, 0, ROW], -1, b"out of range"),  # three segment keys named, two given
    (["a", 0, 24, 12, 2, 0, ROW * 5], -1, b"cannot hold the rows"),  # 60 bytes, two segments of 24
    (["a", 0, 24, 12, 2, 1, ROW], -2, b"the last pair segment moved"),  # segment 1 named last, but it is not there
])
def test_the_script_checks_pair_statistics_before_writing(redis_url, key_prefix, pair_args, status, reason):
    client = redis.Redis.from_url(redis_url)
    script = client.register_script(APPLY_SCRIPT)
    names = [keys.offset_key(key_prefix, "t", 0), keys.stats_key(key_prefix, "t", 0),
             keys.rebuild_key(key_prefix, "t", 0), keys.sketch_versions_key(key_prefix, "t", 0),
             keys.sketch_key(key_prefix, "t", 0, SketchKey("m", 1, 0)),
             keys.pair_key(key_prefix, "t", 0, PairKey("a", 1, 0), "rows.1"),
             keys.pair_key(key_prefix, "t", 0, PairKey("a", 1, 0), "rows.2")]
    args = ["", 5, 1, "reports_applied", 5, 1, 1, 0, 0, 5, *pair_args]  # one sketch key: one cell, no expiry
    got, message = script(keys=names, args=args)
    assert got == status and reason in message
    assert _written(client, key_prefix) == []


def test_python_refuses_an_expiry_no_store_could_set(redis_url, key_prefix):
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    key = SketchKey("m", 1, 0)
    batch = PartitionBatch("t", 0, None, 1, increments={key: np.array([[1]])}, expire_at={key: MAX_EXPIRE_AT + 1})
    with pytest.raises(ValueError, match="expiry"):
        store.apply(batch)
    assert _written(store.client, key_prefix) == []


def test_consumers_and_the_decoder_refuse_a_redis_that_may_evict_keys(redis_url, key_prefix):
    from ldpstream.config import KafkaConfig
    from ldpstream.consumers import ConsumerSettings, SketchConsumer
    from ldpstream.decoder import DecoderService
    from ldpstream.registry import Registry

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    registry = Registry.from_dict({"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}})
    before = store.client.config_get("maxmemory-policy")["maxmemory-policy"]
    store.client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with pytest.raises(ServiceError, match="maxmemory-policy is 'allkeys-lru'"):
            store.check_safe()
        consumer = SketchConsumer(registry, store, ConsumerSettings(KafkaConfig("127.0.0.1:1"), group_id="g"))
        with pytest.raises(ServiceError, match="noeviction"):
            consumer.start()
        with pytest.raises(ServiceError, match="noeviction"):
            DecoderService(registry, store).run(1.0, iterations=1)
    finally:
        store.client.config_set("maxmemory-policy", before)
    store.check_safe()
