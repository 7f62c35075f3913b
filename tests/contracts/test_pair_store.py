"""The pair-statistic half of the store contract (associations' report tuples per time bucket), on both stores:
what a batch adds is read back as exactly the report pairs it carried, in the same compare-and-set as the
sketches, per bucket, summed over partitions, and gone when it expires."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from ldpstream.errors import ServiceError
from ldpstream.estimators.pairs import PairPatterns
from ldpstream.registry import AssociationConfig, Registry
from ldpstream.store import InMemorySketchStore, PartitionBatch, RedisSketchStore, SketchKey, StatusStore
from ldpstream.store import keys as key_schema
from ldpstream.store.contract import PairKey
from ldpstream.store.pair_layout import layout_of, pair_increment
from ldpstream.wire import payloads_from_reports

REGISTRY = Registry.from_dict({
    "defaults": {"retention": "30d"},
    "metrics": {
        "lang": {"id": 1, "mechanism": "krr", "k": 6, "epsilon": 1.0},
        "font": {"id": 2, "mechanism": "orr", "k": 8, "cohorts": 4, "support": 40, "epsilon": 1.0},
        "page": {"id": 3, "mechanism": "rappor", "k": 16, "hashes": 2, "cohorts": 4, "p": 0.25, "q": 0.75,
                 "f": 0.5},
        "wide": {"id": 4, "mechanism": "orr", "k": 32, "cohorts": 64, "support": 256, "epsilon": 1.0},
    },
    "associations": {
        "lang_font": {"id": 1, "metrics": ["lang", "font"]},  # symbols × symbols: sparse cells
        "lang_page": {"id": 2, "metrics": ["lang", "page"]},  # symbols × bits: packed rows
        "font_wide": {"id": 3, "metrics": ["font", "wide"]},  # symbols, a table of 2^18 cells: packed rows
    },
})


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def store(request) -> Iterator[StatusStore]:
    if request.param == "memory":
        yield InMemorySketchStore()
    else:
        yield RedisSketchStore.from_url(request.getfixturevalue("redis_url"), request.getfixturevalue("key_prefix"))


@pytest.fixture(params=["lang_font", "lang_page", "font_wide"])
def association(request) -> AssociationConfig:
    return REGISTRY.association(request.param)


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def reports(association: AssociationConfig, n: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Random (cohorts (n, 2), member reports) of the association's members."""
    rng = np.random.default_rng(seed)
    cohorts = np.column_stack([rng.integers(0, m.mechanism.cohorts, n) for m in association.metrics])
    out = []
    for m in association.metrics:
        if m.mechanism.report_kind == "symbol":
            out.append(rng.integers(0, m.mechanism.k, n))
        else:
            out.append(rng.integers(0, 2, (n, m.mechanism.k)).astype(np.uint8))
    return cohorts, out


def increment(association: AssociationConfig, cohorts: np.ndarray, values: list[np.ndarray], expire_at: int = 0):
    payloads = [payloads_from_reports(m.mechanism, v) for m, v in zip(association.metrics, values, strict=True)]
    return pair_increment(layout_of(association), cohorts, payloads, expire_at)


def canonical(p: PairPatterns) -> PairPatterns:
    """The same patterns in one order (the stores do not promise one)."""
    return PairPatterns.from_pairs(p.cohort_x, p.reports_x, p.cohort_y, p.reports_y, p.counts)


def assert_same(got: PairPatterns, want: PairPatterns) -> None:
    got, want = canonical(got), canonical(want)
    for column in ("cohort_x", "reports_x", "cohort_y", "reports_y", "counts"):
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column), err_msg=column)


def pairs_batch(topic, partition, expected, next_offset, pairs, increments=None) -> PartitionBatch:
    return PartitionBatch(topic, partition, expected, next_offset, increments or {}, {}, {}, pairs)


def test_an_empty_store_has_no_pair_buckets_and_no_pairs(store, association):
    assert store.pair_buckets(association) == []
    empty = store.pair_patterns(association, [1, 2])
    assert empty.total == 0 and len(empty) == 0
    member_y = association.metrics[1].mechanism
    assert empty.reports_y.ndim == (1 if member_y.report_kind == "symbol" else 2)


def test_pairs_read_back_exactly_summed_over_partitions_and_batches_per_bucket(store, association, topic):
    key = lambda bucket: PairKey(association.name, association.fingerprint, bucket)  # noqa: E731
    c1, r1 = reports(association, 500, seed=1)
    c2, r2 = reports(association, 300, seed=2)
    c3, r3 = reports(association, 200, seed=3)
    assert store.apply(pairs_batch(topic, 0, None, 10, {key(7): increment(association, c1, r1)})).applied
    assert store.apply(pairs_batch(topic, 1, None, 5, {key(7): increment(association, c2, r2)})).applied
    assert store.apply(pairs_batch(topic, 0, 10, 20, {key(8): increment(association, c3, r3)})).applied
    assert store.pair_buckets(association) == [7, 8]
    both = store.pair_patterns(association, [7])
    want = PairPatterns.from_pairs(np.r_[c1[:, 0], c2[:, 0]], np.concatenate([r1[0], r2[0]]),
                                   np.r_[c1[:, 1], c2[:, 1]], np.concatenate([r1[1], r2[1]]))
    assert_same(both, want)
    assert both.total == 800
    every = store.pair_patterns(association, [7, 8, 9])
    assert every.total == 1000
    assert_same(store.pair_patterns(association, [8]), PairPatterns.from_pairs(c3[:, 0], r3[0], c3[:, 1], r3[1]))


def test_pairs_and_sketches_land_in_one_compare_and_set(store, association, topic):
    c, r = reports(association, 100, seed=4)
    key = PairKey(association.name, association.fingerprint, 3)
    sketch = SketchKey("lang", association.metrics[0].fingerprint, 3)
    ones = np.ones((1, 6), dtype=np.int64)
    assert store.apply(pairs_batch(topic, 0, None, 10, {key: increment(association, c, r)}, {sketch: ones})).applied
    refused = store.apply(pairs_batch(topic, 0, None, 20, {key: increment(association, c, r)}, {sketch: ones}))
    assert not refused.applied and refused.next_offset == 10  # a replay: neither the pairs nor the counts
    assert store.pair_patterns(association, [3]).total == 100
    np.testing.assert_array_equal(store.snapshot("lang", sketch.fingerprint, (1, 6)).buckets[3], ones)


def test_associations_and_fingerprints_are_kept_apart(store, topic):
    font, page = REGISTRY.association("lang_font"), REGISTRY.association("lang_page")
    c, r = reports(font, 50, seed=5)
    assert store.apply(pairs_batch(topic, 0, None, 1, {
        PairKey(font.name, font.fingerprint, 1): increment(font, c, r),
        PairKey(font.name, font.fingerprint ^ 1, 2): increment(font, c, r)})).applied
    assert store.pair_buckets(font) == [1]
    assert store.pair_buckets(page) == []


def test_expired_pair_statistics_disappear(store, association, topic):
    c, r = reports(association, 40, seed=6)
    now = int(time.time())
    key = lambda bucket: PairKey(association.name, association.fingerprint, bucket)  # noqa: E731
    assert store.apply(pairs_batch(topic, 0, None, 1, {key(1): increment(association, c, r, expire_at=now - 1),
                                                       key(2): increment(association, c, r, expire_at=now + 3600)})
                       ).applied
    assert store.pair_buckets(association) == [2]
    assert store.pair_patterns(association, [1, 2]).total == 40


def test_a_pair_statistic_has_no_all_time_bucket(store, association, topic):
    c, r = reports(association, 10, seed=7)
    with pytest.raises(ValueError, match="no all-time"):
        store.apply(pairs_batch(topic, 0, None, 1, {PairKey(association.name, association.fingerprint, -1):
                                                    increment(association, c, r)}))
    assert store.next_offsets(topic, [0]) == {0: None}


@pytest.mark.integration
def test_on_redis_symbol_pairs_are_a_hash_of_cells_and_bit_pairs_an_appended_string(redis_url, key_prefix, topic):
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    now = int(time.time())
    for name, redis_type in (("lang_font", b"hash"), ("lang_page", b"string")):
        association = REGISTRY.association(name)
        c, r = reports(association, 64, seed=8)
        key = PairKey(association.name, association.fingerprint, 5)
        assert store.apply(pairs_batch(topic, 0, store.next_offsets(topic, [0])[0], now,
                                       {key: increment(association, c, r, expire_at=now + 600)})).applied
        redis_key = key_schema.pair_key(key_prefix, topic, 0, key)
        assert store.client.type(redis_key) == redis_type
        assert 0 < store.client.ttl(redis_key) <= 600
    page = REGISTRY.association("lang_page")
    assert store.client.strlen(key_schema.pair_key(key_prefix, topic, 0, PairKey(page.name, page.fingerprint, 5))) \
        == 64 * layout_of(page).row_size


@pytest.mark.integration
def test_on_redis_a_pair_key_of_the_wrong_type_refuses_the_batch_before_writing(redis_url, key_prefix, topic):
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    association = REGISTRY.association("lang_font")
    key = PairKey(association.name, association.fingerprint, 5)
    store.client.set(key_schema.pair_key(key_prefix, topic, 0, key), b"not a hash")
    c, r = reports(association, 10, seed=9)
    with pytest.raises(ServiceError, match="pair statistic key holds a string"):
        store.apply(PartitionBatch(topic, 0, None, 1, {}, {"reports_applied": 10}, {},
                                   {key: increment(association, c, r)}))
    assert store.next_offsets(topic, [0]) == {0: None}
    assert store.stats(topic, [0]) == {}


@pytest.mark.integration
def test_on_redis_an_indexed_key_not_yet_written_stays_indexed_and_an_expired_one_is_forgotten(
        redis_url, key_prefix, topic):
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    association = REGISTRY.association("lang_font")
    index = key_schema.pair_index_key(key_prefix, association.name, association.fingerprint)
    current = int(time.time()) // association.bucket_seconds
    pending = key_schema.pair_key(key_prefix, topic, 0, PairKey(association.name, association.fingerprint, current))
    expired = key_schema.pair_key(key_prefix, topic, 0, PairKey(association.name, association.fingerprint, 5))
    store.client.sadd(index, pending, expired)  # a consumer indexes its keys just before its script writes them
    assert store.pair_buckets(association) == []
    assert store.client.smembers(index) == {pending.encode()}
