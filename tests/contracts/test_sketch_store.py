"""One suite of the store contract (:mod:`ldpstream.store.contract`), run on both implementations: the
in-memory twin unit tests use, and Redis (real, integration). Whatever one store does, the other must too."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

from ldpstream.store import (
    ALL_TIME,
    ApplyResult,
    MetricSnapshot,
    PartitionBatch,
    RedisSketchStore,
    SketchKey,
    sum_buckets,
)
from ldpstream.store import keys as key_schema

SHAPE = (2, 3)
FP = 0xABCDEF01


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def counts(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64).reshape(SHAPE)


def batch(topic: str, partition: int, expected: int | None, next_offset: int,
          increments: dict[SketchKey, np.ndarray] | None = None, stats: dict[str, int] | None = None,
          expire_at: dict[SketchKey, int] | None = None) -> PartitionBatch:
    return PartitionBatch(topic, partition, expected, next_offset, increments or {}, stats or {}, expire_at or {})


def with_rollup(metric: str, bucket: int, c: np.ndarray) -> dict[SketchKey, np.ndarray]:
    """Increments of one bucket and the all-time rollup, as a consumer writes them."""
    return {SketchKey(metric, FP, bucket): c, SketchKey(metric, FP, ALL_TIME): c}


# --------------------------------------------------------------------------------------- apply, snapshot


def test_a_fresh_store_has_no_offsets_no_stats_and_an_empty_snapshot(store, topic):
    assert store.next_offsets(topic, [0, 1]) == {0: None, 1: None}
    assert store.next_offsets(topic, []) == {}
    assert store.stats(topic, [0, 1]) == {}
    snap = store.snapshot("m", FP, SHAPE)
    assert snap.buckets == {} and snap.total is None
    assert (snap.all_time(SHAPE) == 0).all() and snap.all_time(SHAPE).shape == SHAPE


def test_apply_then_snapshot_sums_partitions_per_bucket_and_the_all_time_rollup(store, topic):
    a, b, c = counts(1, 2, 3, 4, 5, 6), counts(10, 0, 0, 0, 0, 1), counts(0, 7, 0, 0, 0, 0)
    assert store.apply(batch(topic, 0, None, 5, with_rollup("m", 100, a))) == ApplyResult(True, 5)
    assert store.apply(batch(topic, 1, None, 3, with_rollup("m", 100, b))) == ApplyResult(True, 3)
    assert store.apply(batch(topic, 1, 3, 9, with_rollup("m", 101, c))) == ApplyResult(True, 9)

    snap = store.snapshot("m", FP, SHAPE)
    assert isinstance(snap, MetricSnapshot)
    assert sorted(snap.buckets) == [100, 101]
    np.testing.assert_array_equal(snap.buckets[100], a + b)
    np.testing.assert_array_equal(snap.buckets[101], c)
    assert snap.total is not None
    np.testing.assert_array_equal(snap.total, a + b + c)
    np.testing.assert_array_equal(snap.all_time(SHAPE), a + b + c)
    np.testing.assert_array_equal(sum_buckets(snap, [101], SHAPE), c)
    np.testing.assert_array_equal(sum_buckets(snap, None, SHAPE), a + b + c)
    for array in (*snap.buckets.values(), snap.total):
        assert array.shape == SHAPE and array.dtype == np.int64


def test_increments_add_up_across_batches_and_may_be_negative(store, topic):
    key = SketchKey("m", FP, 7)
    store.apply(batch(topic, 0, None, 1, {key: counts(1, 1, 1, 1, 1, 1)}))
    store.apply(batch(topic, 0, 1, 2, {key: counts(2, 0, -1, 0, 0, 2**40)}))
    np.testing.assert_array_equal(store.snapshot("m", FP, SHAPE).buckets[7], counts(3, 1, 0, 1, 1, 1 + 2**40))


def test_metrics_and_fingerprints_are_kept_apart(store, topic):
    store.apply(batch(topic, 0, None, 1, {SketchKey("m", FP, 1): counts(1, 0, 0, 0, 0, 0),
                                         SketchKey("m", FP + 1, 1): counts(0, 2, 0, 0, 0, 0),
                                         SketchKey("n", FP, 1): counts(0, 0, 3, 0, 0, 0)}))
    np.testing.assert_array_equal(store.snapshot("m", FP, SHAPE).buckets[1], counts(1, 0, 0, 0, 0, 0))
    np.testing.assert_array_equal(store.snapshot("m", FP + 1, SHAPE).buckets[1], counts(0, 2, 0, 0, 0, 0))
    np.testing.assert_array_equal(store.snapshot("n", FP, SHAPE).buckets[1], counts(0, 0, 3, 0, 0, 0))
    assert store.snapshot("m", FP, SHAPE).total is None


def test_an_all_zero_increment_creates_no_bucket(store, topic):
    store.apply(batch(topic, 0, None, 1, {SketchKey("m", FP, 1): np.zeros(SHAPE, dtype=np.int64),
                                         SketchKey("m", FP, 2): counts(0, 0, 0, 0, 0, 1)}))
    assert sorted(store.snapshot("m", FP, SHAPE).buckets) == [2]
    assert store.next_offsets(topic, [0]) == {0: 1}


def test_a_snapshot_is_a_copy(store, topic):
    store.apply(batch(topic, 0, None, 1, with_rollup("m", 1, counts(1, 1, 1, 1, 1, 1))))
    snap = store.snapshot("m", FP, SHAPE)
    snap.buckets[1][:] = 99
    assert snap.total is not None
    snap.total[:] = 99
    again = store.snapshot("m", FP, SHAPE)
    np.testing.assert_array_equal(again.buckets[1], counts(1, 1, 1, 1, 1, 1))
    np.testing.assert_array_equal(again.total, counts(1, 1, 1, 1, 1, 1))


# ------------------------------------------------------------------------------------- compare-and-set


def test_a_wrong_expected_offset_writes_nothing_and_returns_the_stored_offset(store, topic):
    first = with_rollup("m", 1, counts(1, 0, 0, 0, 0, 0))
    assert store.apply(batch(topic, 0, None, 10, first, {"reports_applied": 1})).applied
    refused = store.apply(batch(topic, 0, 7, 20, with_rollup("m", 2, counts(5, 5, 5, 5, 5, 5)),
                                {"reports_applied": 30}))
    assert refused == ApplyResult(False, 10)
    assert store.next_offsets(topic, [0]) == {0: 10}
    assert store.stats(topic, [0]) == {"reports_applied": 1}
    snap = store.snapshot("m", FP, SHAPE)
    assert sorted(snap.buckets) == [1]
    np.testing.assert_array_equal(snap.total, counts(1, 0, 0, 0, 0, 0))


def test_expecting_an_offset_where_none_is_stored_is_refused_with_none(store, topic):
    assert store.apply(batch(topic, 0, 4, 8, with_rollup("m", 1, counts(1, 0, 0, 0, 0, 0)))) == \
        ApplyResult(False, None)
    assert store.next_offsets(topic, [0]) == {0: None}
    assert store.snapshot("m", FP, SHAPE).buckets == {}


def test_a_replayed_batch_is_refused(store, topic):
    replay = batch(topic, 0, None, 5, with_rollup("m", 1, counts(1, 2, 3, 0, 0, 0)), {"reports_applied": 6})
    assert store.apply(replay) == ApplyResult(True, 5)
    assert store.apply(replay) == ApplyResult(False, 5)
    following = batch(topic, 0, 5, 9, with_rollup("m", 1, counts(1, 0, 0, 0, 0, 0)), {"reports_applied": 1})
    assert store.apply(following) == ApplyResult(True, 9)
    assert store.apply(following) == ApplyResult(False, 9)
    np.testing.assert_array_equal(store.snapshot("m", FP, SHAPE).buckets[1], counts(2, 2, 3, 0, 0, 0))
    assert store.stats(topic, [0]) == {"reports_applied": 7}


def test_partitions_and_topics_have_their_own_offsets(store, topic):
    other = topic + "-other"
    store.apply(batch(topic, 0, None, 4))
    store.apply(batch(topic, 2, None, 11))
    store.apply(batch(other, 0, None, 100))
    assert store.next_offsets(topic, [0, 1, 2]) == {0: 4, 1: None, 2: 11}
    assert store.next_offsets(other, iter([0, 1])) == {0: 100, 1: None}
    assert store.apply(batch(topic, 0, 100, 120)) == ApplyResult(False, 4)


# ---------------------------------------------------------------------------------------------- stats


def test_stats_are_summed_over_the_partitions_asked_for(store, topic):
    store.apply(batch(topic, 0, None, 1, stats={"reports_applied": 5, "applied:m": 5, "rejected:bad": 1}))
    store.apply(batch(topic, 0, 1, 2, stats={"reports_applied": 2, "applied:m": 2}))
    store.apply(batch(topic, 1, None, 1, stats={"reports_applied": 4, "applied:n": 4}))
    store.apply(batch(topic + "-other", 0, None, 1, stats={"reports_applied": 1000}))
    assert store.stats(topic, [0, 1]) == {"reports_applied": 11, "applied:m": 7, "applied:n": 4,
                                          "rejected:bad": 1}
    assert store.stats(topic, [1]) == {"reports_applied": 4, "applied:n": 4}
    assert store.stats(topic, [5]) == {}
    assert store.stats(topic, iter([0])) == {"reports_applied": 7, "applied:m": 7, "rejected:bad": 1}


# -------------------------------------------------------------------------------------------- retention


def test_expired_before_drops_buckets_below_it_for_good_but_keeps_the_rollup(store, topic):
    for offset, bucket in enumerate([10, 11, 12]):
        store.apply(batch(topic, 0, offset or None, offset + 1, with_rollup("m", bucket, counts(1, 0, 0, 0, 0, 0))))
    assert sorted(store.snapshot("m", FP, SHAPE, expired_before=0).buckets) == [10, 11, 12]
    snap = store.snapshot("m", FP, SHAPE, expired_before=11)
    assert sorted(snap.buckets) == [11, 12]
    np.testing.assert_array_equal(snap.total, counts(3, 0, 0, 0, 0, 0))
    # An expired bucket stays forgotten (Redis drops it from the metric's index).
    assert sorted(store.snapshot("m", FP, SHAPE).buckets) == [11, 12]
    snap = store.snapshot("m", FP, SHAPE, expired_before=13)
    assert snap.buckets == {}
    np.testing.assert_array_equal(snap.all_time(SHAPE), counts(3, 0, 0, 0, 0, 0))


def test_expire_at_in_the_past_makes_a_bucket_disappear(store, topic):
    old, kept = SketchKey("m", FP, 1), SketchKey("m", FP, 2)
    store.apply(batch(topic, 0, None, 1, {old: counts(1, 0, 0, 0, 0, 0), kept: counts(0, 1, 0, 0, 0, 0)},
                      expire_at={old: int(time.time()) - 10, kept: int(time.time()) + 3600}))
    assert sorted(store.snapshot("m", FP, SHAPE).buckets) == [2]
    assert store.next_offsets(topic, [0]) == {0: 1}
    # A later increment of the expired sketch starts it over from zero.
    store.apply(batch(topic, 0, 1, 2, {old: counts(0, 0, 5, 0, 0, 0)}))
    np.testing.assert_array_equal(store.snapshot("m", FP, SHAPE).buckets[1], counts(0, 0, 5, 0, 0, 0))


def test_sketches_shorter_than_the_shape_read_as_zeros_in_the_missing_cells(store, topic):
    store.apply(batch(topic, 0, None, 1, {SketchKey("m", FP, 1): np.array([4, 5], dtype=np.int64)}))
    np.testing.assert_array_equal(store.snapshot("m", FP, SHAPE).buckets[1], counts(4, 5, 0, 0, 0, 0))


@pytest.mark.integration
def test_on_redis_expire_at_sets_a_ttl_on_the_bucket_sketch_only(redis_config, key_prefix, topic):
    store = RedisSketchStore(redis_config.client(), key_prefix)
    bucket, rollup = SketchKey("m", FP, 5), SketchKey("m", FP, ALL_TIME)
    expire_at = int(time.time()) + 3600
    store.apply(batch(topic, 0, None, 1, {bucket: counts(1, 0, 0, 0, 0, 0), rollup: counts(1, 0, 0, 0, 0, 0)},
                      expire_at={bucket: expire_at}))
    client = store.client
    ttl = client.ttl(key_schema.sketch_key(key_prefix, topic, 0, bucket))
    assert 3590 <= ttl <= 3600
    assert client.ttl(key_schema.sketch_key(key_prefix, topic, 0, rollup)) == -1  # never expires
    assert client.ttl(key_schema.offset_key(key_prefix, topic, 0)) == -1


def _snapshot_equal(a: MetricSnapshot, b: MetricSnapshot) -> None:
    assert sorted(a.buckets) == sorted(b.buckets)
    for bucket in a.buckets:
        np.testing.assert_array_equal(a.buckets[bucket], b.buckets[bucket])
    np.testing.assert_array_equal(a.all_time(SHAPE), b.all_time(SHAPE))


@pytest.mark.integration
def test_on_redis_a_cached_snapshot_equals_a_fresh_read_through_changes_expiry_and_retention(
        redis_config, key_prefix, topic):
    """The store that re-reads only sketches whose version moved returns what a store without a cache reads,
    after new batches (two partitions), a bucket whose key expired by itself, and buckets past retention."""
    cached = RedisSketchStore(redis_config.client(), key_prefix)
    offsets = {0: None, 1: None}

    def write(partition: int, increments: dict[SketchKey, np.ndarray], expire_at: dict[SketchKey, int] | None = None,
              ) -> None:
        start = offsets[partition] or 0
        cached.apply(batch(topic, partition, offsets[partition], start + 1, increments, expire_at=expire_at))
        offsets[partition] = start + 1

    def check(expired_before: int | None = None) -> None:
        uncached = RedisSketchStore(redis_config.client(), key_prefix)
        uncached.sketch_cache_bytes = 0
        # the uncached read first: the cached store's own read may remove expired index entries
        expected = uncached.snapshot("m", FP, SHAPE, expired_before)
        _snapshot_equal(cached.snapshot("m", FP, SHAPE, expired_before), expected)

    for bucket in (10, 11, 12):
        write(0, with_rollup("m", bucket, counts(bucket, 1, 0, 0, 0, 0)))
    check()
    write(1, with_rollup("m", 12, counts(0, 0, 7, 0, 0, 0)))
    check()
    write(0, with_rollup("m", 11, counts(0, 0, 0, 2, 0, 0)))
    check()
    short = SketchKey("m", FP, 13)
    write(0, {short: counts(1, 1, 1, 0, 0, 0)}, expire_at={short: int(time.time()) + 1})
    check()
    time.sleep(2.1)  # the key expires by itself; its version field stays until retention removes it
    check()
    check(expired_before=12)
    write(0, with_rollup("m", 12, counts(0, 0, 0, 0, 0, 9)))
    check(expired_before=12)
    versions = cached.client.hgetall(key_schema.sketch_versions_key(key_prefix, topic, 0))
    assert not any(key_schema.bucket_of(k.decode()) in (10, 11) for k in versions)  # removed with retention


@pytest.mark.integration
def test_on_redis_a_sketch_whose_version_did_not_move_is_not_read_again(redis_config, key_prefix, topic):
    store = RedisSketchStore(redis_config.client(), key_prefix)
    if store.cluster:
        pytest.skip("on Redis Cluster the decoder reads every sketch, per slot (no transaction spans the slots)")
    store.apply(batch(topic, 0, None, 1, with_rollup("m", 1, counts(1, 0, 0, 0, 0, 0))))
    store.apply(batch(topic, 0, 1, 2, {SketchKey("m", FP, 2): counts(0, 1, 0, 0, 0, 0)}))
    store.snapshot("m", FP, SHAPE)
    index = key_schema.index_key(key_prefix, "m", FP)
    bucket_1 = key_schema.sketch_key(key_prefix, topic, 0, SketchKey("m", FP, 1))
    version, _ = store._sketch_cache[index][bucket_1]
    marker = np.array([42, 0, 0, 0, 0, 0], dtype=">i8").tobytes()
    store._sketch_cache[index][bucket_1] = (version, marker)  # what the cache holds is what is returned
    store.apply(batch(topic, 0, 2, 3, {SketchKey("m", FP, 2): counts(0, 1, 0, 0, 0, 0)}))
    snap = store.snapshot("m", FP, SHAPE)
    np.testing.assert_array_equal(snap.buckets[1], counts(42, 0, 0, 0, 0, 0))
    np.testing.assert_array_equal(snap.buckets[2], counts(0, 2, 0, 0, 0, 0))  # its version moved: read again
    store.sketch_cache_bytes = 0
    np.testing.assert_array_equal(store.snapshot("m", FP, SHAPE).buckets[1], counts(1, 0, 0, 0, 0, 0))


# ------------------------------------------------------------------------------------ published estimates


def test_publish_estimate_sets_the_latest_and_a_bounded_history_newest_first(store):
    assert store.latest_estimate("m") is None
    assert store.estimate_history("m") == []
    for i in range(5):
        store.publish_estimate("m", "1h", f'{{"metric": "m", "n": {i}}}', history=3)
    assert store.latest_estimate("m", "1h") == {"metric": "m", "n": 4}
    assert [e["n"] for e in store.estimate_history("m", "1h")] == [4, 3, 2]
    assert store.latest_estimate("m") is None  # window "all" by default: nothing published there
    store.publish_estimate("m", "all", '{"n": 9}', history=1)
    store.publish_estimate("m", "all", '{"n": 10}', history=1)
    assert store.latest_estimate("m") == {"n": 10}
    assert store.estimate_history("m") == [{"n": 10}]


def test_a_history_of_less_than_one_estimate_is_refused(store):
    with pytest.raises(ValueError, match="at least one"):
        store.publish_estimate("m", "all", '{"n": 1}', history=0)


def test_retract_estimate_drops_the_latest_and_keeps_the_history(store):
    assert store.retract_estimate("m", "all") is False
    store.publish_estimate("m", "all", '{"n": 1}', history=10)
    store.publish_estimate("m", "1h", '{"n": 2}', history=10)
    assert store.retract_estimate("m", "all") is True
    assert store.latest_estimate("m", "all") is None
    assert store.estimate_history("m", "all") == [{"n": 1}]
    assert store.latest_estimate("m", "1h") == {"n": 2}
    assert store.retract_estimate("m", "all") is False


def test_estimates_read_back_are_independent_copies(store):
    store.publish_estimate("m", "all", '{"values": [1, 2]}', history=10)
    store.latest_estimate("m")["values"].append(3)
    store.estimate_history("m")[0]["values"].append(3)
    assert store.latest_estimate("m") == {"values": [1, 2]}
    assert store.estimate_history("m") == [{"values": [1, 2]}]


def test_joint_estimates_have_their_own_latest_and_bounded_history_apart_from_marginals(store):
    assert store.latest_joint("pair") is None
    assert store.joint_history("pair") == []
    for i in range(4):
        store.publish_joint("pair", "1h", f'{{"association": "pair", "n": {i}}}', history=2)
    assert store.latest_joint("pair", "1h") == {"association": "pair", "n": 3}
    assert [e["n"] for e in store.joint_history("pair", "1h")] == [3, 2]
    # An association and a metric of the same name do not share keys.
    assert store.latest_estimate("pair", "1h") is None
    store.publish_estimate("pair", "1h", '{"n": 99}', history=2)
    assert store.latest_joint("pair", "1h") == {"association": "pair", "n": 3}
    with pytest.raises(ValueError, match="at least one"):
        store.publish_joint("pair", "all", '{"n": 1}', history=0)


def test_retract_joint_drops_the_latest_and_keeps_the_history(store):
    assert store.retract_joint("pair", "all") is False
    store.publish_joint("pair", "all", '{"n": 1}', history=10)
    store.publish_estimate("pair", "all", '{"n": 2}', history=10)
    assert store.retract_joint("pair", "all") is True
    assert store.latest_joint("pair", "all") is None
    assert store.joint_history("pair", "all") == [{"n": 1}]
    assert store.latest_estimate("pair", "all") == {"n": 2}  # the marginal of that name stays


@pytest.mark.integration
def test_on_redis_joint_estimates_live_under_the_documented_keys(redis_config, key_prefix):
    store = RedisSketchStore(redis_config.client(), key_prefix)
    store.publish_joint("pair", "1h", '{"n": 1}', history=5)
    assert store.client.get(f"{key_prefix}:joint:pair:1h") == b'{"n": 1}'
    assert store.client.lrange(f"{key_prefix}:joint-history:pair:1h", 0, -1) == [b'{"n": 1}']


def test_record_decode_and_last_decode(store):
    assert store.last_decode() is None
    store.record_decode(["a", "b"], when=1234.5)
    assert store.last_decode() == {"time": 1234.5, "failed": ["a", "b"]}
    before = time.time()
    store.record_decode(iter([]))
    last = store.last_decode()
    assert last is not None and last["failed"] == [] and before <= last["time"] <= time.time()


# --------------------------------------------------------------------------------------- rebuild markers


def test_a_rebuild_marker_lasts_until_an_apply_reaches_its_offset(store, topic):
    assert store.rebuilding(topic) == {}
    store.mark_rebuild(topic, 1, 300)
    store.mark_rebuild(topic, 1, 200)  # the larger target is kept
    store.mark_rebuild(topic, 2, 50)
    assert store.rebuilding(topic) == {1: 300, 2: 50}
    assert store.rebuilding(f"{topic}-other") == {}
    assert store.apply(batch(topic, 1, None, 100, with_rollup("m", 0, counts(1, 0, 0, 0, 0, 0)))).applied
    assert store.rebuilding(topic) == {1: 300, 2: 50}
    assert store.apply(batch(topic, 1, 100, 300, with_rollup("m", 0, counts(1, 0, 0, 0, 0, 0)))).applied
    assert store.rebuilding(topic) == {2: 50}
    assert store.apply(batch(topic, 2, None, 80)).applied  # past the target also clears it
    assert store.rebuilding(topic) == {}


def test_a_refused_apply_does_not_clear_a_rebuild_marker(store, topic):
    store.mark_rebuild(topic, 0, 10)
    assert not store.apply(batch(topic, 0, 5, 20)).applied  # nothing stored yet: expected 5 is refused
    assert store.rebuilding(topic) == {0: 10}


def test_a_published_dictionary_is_the_estimate_of_its_name_over_all(store):
    assert store.dictionaries() == {}
    store.publish_dictionary("urls", '{"metric": "urls", "values": []}', 2)
    store.publish_dictionary("urls", '{"metric": "urls", "values": [{"value": "ab"}]}', 2)
    store.publish_dictionary("apps", '{"metric": "apps", "values": []}', 2)
    assert store.dictionaries() == {"apps": {"metric": "apps", "values": []},
                                    "urls": {"metric": "urls", "values": [{"value": "ab"}]}}
    assert store.latest_estimate("urls", "all") == {"metric": "urls", "values": [{"value": "ab"}]}
    assert len(store.estimate_history("urls", "all")) == 2
    assert store.retract_estimate("apps", "all")
    assert set(store.dictionaries()) == {"urls"}  # a listed name without an estimate is left out
