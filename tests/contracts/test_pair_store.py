"""The pair-statistic half of the store contract (associations' report tuples per time bucket), on both stores:
what a batch adds is read back as exactly the report pairs it carried, in the same compare-and-set as the
sketches, per bucket, summed over partitions, and gone when it expires. Rows past a segment's cap spill into
the next segments and are all read back; the two stored forms never share a key; an association of three
members gives the pair statistic of any two of them."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

from ldpstream.errors import ParameterError, ServiceError
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.registry import AssociationConfig, Registry
from ldpstream.store import InMemorySketchStore, PartitionBatch, RedisSketchStore, SketchKey, StatusStore, pair_layout
from ldpstream.store import keys as key_schema
from ldpstream.store.contract import MAX_PAIR_BYTES, PairKey
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
        "wide2": {"id": 6, "mechanism": "orr", "k": 32, "cohorts": 64, "support": 256, "epsilon": 1.0},
        "tiny": {"id": 5, "mechanism": "krr", "k": 3, "epsilon": 1.0},
    },
    "associations": {
        "lang_font": {"id": 1, "metrics": ["lang", "font"]},  # symbols × symbols: sparse cells
        "lang_page": {"id": 2, "metrics": ["lang", "page"]},  # symbols × bits: packed rows
        "font_wide": {"id": 3, "metrics": ["font", "wide"]},  # symbols, a table of 2^16 cells: the largest hash
        "wide_wide": {"id": 6, "metrics": ["wide", "wide2"]},  # symbols, a table of 2^22 cells: packed rows
        "three_rows": {"id": 4, "metrics": ["lang", "page", "font"]},  # three members, bits among them: rows
        "three_cells": {"id": 5, "metrics": ["lang", "font", "tiny"]},  # 6 · 32 · 3 = 576 cells
    },
})


def store_with_cap(kind: str, request, max_pair_bytes: int) -> StatusStore:
    """A store of ``kind`` ("memory" or "redis") whose rows segments hold at most ``max_pair_bytes``."""
    if kind == "memory":
        return InMemorySketchStore(max_pair_bytes=max_pair_bytes)
    return RedisSketchStore(request.getfixturevalue("redis_config").client(), request.getfixturevalue("key_prefix"),
                                     max_pair_bytes=max_pair_bytes)


STORE_KINDS = ["memory", pytest.param("redis", marks=pytest.mark.integration)]


@pytest.fixture(params=["lang_font", "lang_page", "font_wide"])
def association(request) -> AssociationConfig:
    return REGISTRY.association(request.param)


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def reports(association: AssociationConfig, n: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Random (cohorts (n, N), member reports) of the association's members."""
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
def test_on_redis_symbol_pairs_are_a_hash_of_cells_and_bit_pairs_an_appended_string(redis_config, key_prefix, topic):
    store = RedisSketchStore(redis_config.client(), key_prefix)
    now = int(time.time())
    for name, redis_type in (("lang_font", b"hash"), ("lang_page", b"string")):
        association = REGISTRY.association(name)
        c, r = reports(association, 64, seed=8)
        key = PairKey(association.name, association.fingerprint, 5)
        assert store.apply(pairs_batch(topic, 0, store.next_offsets(topic, [0])[0], now,
                                       {key: increment(association, c, r, expire_at=now + 600)})).applied
        redis_key = key_schema.pair_key(key_prefix, topic, 0, key, "cells" if redis_type == b"hash" else "rows.0")
        assert store.client.type(redis_key) == redis_type
        assert 0 < store.client.ttl(redis_key) <= 600
    page = REGISTRY.association("lang_page")
    assert store.client.strlen(key_schema.pair_key(key_prefix, topic, 0, PairKey(page.name, page.fingerprint, 5),
                                                   "rows.0")) == 64 * layout_of(page).row_size


@pytest.mark.integration
def test_on_redis_a_pair_key_of_the_wrong_type_refuses_the_batch_before_writing(redis_config, key_prefix, topic):
    store = RedisSketchStore(redis_config.client(), key_prefix)
    association = REGISTRY.association("lang_font")
    key = PairKey(association.name, association.fingerprint, 5)
    store.client.set(key_schema.pair_key(key_prefix, topic, 0, key, "cells"), b"not a hash")
    c, r = reports(association, 10, seed=9)
    with pytest.raises(ServiceError, match="pair statistic key holds a string"):
        store.apply(PartitionBatch(topic, 0, None, 1, {}, {"reports_applied": 10}, {},
                                   {key: increment(association, c, r)}))
    assert store.next_offsets(topic, [0]) == {0: None}
    assert store.stats(topic, [0]) == {}


@pytest.mark.integration
def test_on_redis_an_indexed_key_not_yet_written_stays_indexed_and_an_expired_one_is_forgotten(
        redis_config, key_prefix, topic):
    store = RedisSketchStore(redis_config.client(), key_prefix)
    association = REGISTRY.association("lang_font")
    index = key_schema.pair_index_key(key_prefix, association.name, association.fingerprint)
    current = int(time.time()) // association.bucket_seconds
    pending = key_schema.pair_key(key_prefix, topic, 0, PairKey(association.name, association.fingerprint, current),
                                  "cells")
    expired = key_schema.pair_key(key_prefix, topic, 0, PairKey(association.name, association.fingerprint, 5),
                                  "cells")
    store.client.sadd(index, pending, expired)  # a consumer indexes its keys just before its script writes them
    assert store.pair_buckets(association) == []
    assert store.client.smembers(index) == {pending.encode()}


# ------------------------------------------------------------------------------------ segments past the cap

ROWS_PER_SEGMENT = 5


def sent_pairs(parts: list[tuple[np.ndarray, list[np.ndarray]]], i: int = 0, j: int = 1) -> PairPatterns:
    """The report pairs of members (i, j) of every (cohorts, reports) part, as sent."""
    return PairPatterns.from_pairs(np.concatenate([c[:, i] for c, _ in parts]),
                                   np.concatenate([r[i] for _, r in parts]),
                                   np.concatenate([c[:, j] for c, _ in parts]),
                                   np.concatenate([r[j] for _, r in parts]))


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("name", ["lang_page", "wide_wide", "three_rows"])
def test_rows_past_the_cap_spill_into_segments_and_are_read_back_exactly(kind, name, request, topic):
    association = REGISTRY.association(name)
    row = layout_of(association).row_size
    cap = ROWS_PER_SEGMENT * row + row - 1  # not a whole number of rows: a segment holds the 5 rows that fit
    store = store_with_cap(kind, request, cap)
    key = PairKey(association.name, association.fingerprint, 9)
    # One row, a batch that fills the first segment exactly, one that spans four segments, then a few more.
    sizes = [1, 4, 17, 3, 1, 10]
    parts = [reports(association, n, seed=20 + b) for b, n in enumerate(sizes)]
    offset = None
    for b, (c, r) in enumerate(parts):
        assert store.apply(pairs_batch(topic, 0, offset, b + 1, {key: increment(association, c, r)})).applied
        offset = b + 1
    total = sum(sizes)
    segments = store.pair_segments(association, topic, 0, 9)
    assert segments == [ROWS_PER_SEGMENT * row] * (total // ROWS_PER_SEGMENT) + [total % ROWS_PER_SEGMENT * row]
    assert sum(segments) == total * row and max(segments) <= cap
    # A replay of the batch that spilled is refused whole: no segment grows.
    c, r = parts[2]
    refused = store.apply(pairs_batch(topic, 0, 2, 3, {key: increment(association, c, r)}))
    assert not refused.applied and refused.next_offset == len(sizes)
    assert store.pair_segments(association, topic, 0, 9) == segments
    # Another partition's statistic in the same bucket has its own segments; the reader sums every one.
    c2, r2 = reports(association, 7, seed=40)
    assert store.apply(pairs_batch(topic, 1, None, 1, {key: increment(association, c2, r2)})).applied
    assert store.pair_segments(association, topic, 1, 9) == [5 * row, 2 * row]
    members = None if len(association.metrics) == 2 else (0, 1)
    got = store.pair_patterns(association, [9], members)
    assert got.total == total + 7
    assert_same(got, sent_pairs([*parts, (c2, r2)]))
    assert store.pair_buckets(association) == [9]


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_lower_cap_later_starts_a_new_segment_and_loses_nothing(kind, request, topic):
    association = REGISTRY.association("lang_page")
    row = layout_of(association).row_size
    key = PairKey(association.name, association.fingerprint, 4)
    parts = [reports(association, n, seed=50 + b) for b, n in enumerate([8, 3, 4])]
    wide = store_with_cap(kind, request, 10 * row)
    assert wide.apply(pairs_batch(topic, 0, None, 1, {key: increment(association, *parts[0])})).applied
    narrow = wide if kind == "memory" else store_with_cap(kind, request, 2 * row)
    if kind == "memory":
        narrow.max_pair_bytes = 2 * row  # the same store restarted with another cap
    for b in (1, 2):
        assert narrow.apply(pairs_batch(topic, 0, b, b + 1, {key: increment(association, *parts[b])})).applied
    # The first segment keeps its 8 rows (more than the new cap); the next ones hold 2 rows each.
    assert narrow.pair_segments(association, topic, 0, 4) == [8 * row] + [2 * row] * 3 + [1 * row]
    assert_same(narrow.pair_patterns(association, [4]), sent_pairs(parts))


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_cap_smaller_than_one_row_is_refused_before_anything_is_written(kind, request, topic):
    association = REGISTRY.association("lang_page")
    store = store_with_cap(kind, request, layout_of(association).row_size - 1)
    c, r = reports(association, 3, seed=60)
    with pytest.raises(ParameterError, match="cannot hold"):
        store.apply(pairs_batch(topic, 0, None, 1, {PairKey(association.name, association.fingerprint, 1):
                                                    increment(association, c, r)}))
    assert store.next_offsets(topic, [0]) == {0: None}


@pytest.mark.integration
def test_on_redis_every_segment_is_in_the_slot_indexed_and_expires_with_the_bucket(redis_config, key_prefix, topic):
    association = REGISTRY.association("lang_page")
    row = layout_of(association).row_size
    store = RedisSketchStore(redis_config.client(), key_prefix, max_pair_bytes=3 * row)
    key = PairKey(association.name, association.fingerprint, 6)
    c, r = reports(association, 10, seed=70)
    expire_at = int(time.time()) + 900
    assert store.apply(pairs_batch(topic, 2, None, 1, {key: increment(association, c, r, expire_at)})).applied
    names = [key_schema.pair_key(key_prefix, topic, 2, key, f"rows.{s}") for s in range(4)]
    assert [store.client.strlen(n) for n in names] == [3 * row, 3 * row, 3 * row, row]
    for name in names:
        assert name.startswith(key_schema.partition_tag(key_prefix, topic, 2) + ":")  # one slot with the offset
        assert 0 < store.client.ttl(name) <= 900
        assert store.client.sismember(key_schema.pair_index_key(key_prefix, association.name,
                                                                association.fingerprint), name)


@pytest.mark.integration
def test_on_redis_a_consumer_whose_idea_of_the_last_segment_is_stale_looks_again_and_counts_once(
        redis_config, key_prefix, topic):
    association = REGISTRY.association("lang_page")
    row = layout_of(association).row_size
    first = RedisSketchStore(redis_config.client(), key_prefix, max_pair_bytes=2 * row)
    key = PairKey(association.name, association.fingerprint, 3)
    parts = [reports(association, n, seed=80 + b) for b, n in enumerate([5, 4, 3, 6])]
    assert first.apply(pairs_batch(topic, 0, None, 1, {key: increment(association, *parts[0])})).applied
    # A second consumer (after a rebalance) starts with no idea of the segments: it guesses segment 0.
    second = RedisSketchStore(redis_config.client(), key_prefix, max_pair_bytes=2 * row)
    assert second.apply(pairs_batch(topic, 0, 1, 2, {key: increment(association, *parts[1])})).applied
    # The first one, partition back, still believes segment 2 is the last: the script sends it to look again.
    assert first.apply(pairs_batch(topic, 0, 2, 3, {key: increment(association, *parts[2])})).applied
    assert second.apply(pairs_batch(topic, 0, 3, 4, {key: increment(association, *parts[3])})).applied
    assert first.pair_segments(association, topic, 0, 3) == [2 * row] * 9
    assert_same(first.pair_patterns(association, [3]), sent_pairs(parts))


# ------------------------------------------------------------------------------ the form is in the key's name

@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_change_of_the_hash_threshold_writes_the_other_form_elsewhere_and_both_are_read(
        kind, request, topic, monkeypatch):
    association = REGISTRY.association("lang_font")
    store = store_with_cap(kind, request, MAX_PAIR_BYTES)
    key = PairKey(association.name, association.fingerprint, 2)
    before = reports(association, 300, seed=90)
    assert layout_of(association).kind == "cells"
    assert store.apply(pairs_batch(topic, 0, None, 1, {key: increment(association, *before)})).applied
    monkeypatch.setattr(pair_layout, "MAX_HASH_CELLS", 16)  # a release that lowered the threshold
    assert layout_of(association).kind == "rows"
    after = reports(association, 200, seed=91)
    assert store.apply(pairs_batch(topic, 0, 1, 2, {key: increment(association, *after)})).applied
    assert_same(store.pair_patterns(association, [2]), sent_pairs([before, after]))
    monkeypatch.setattr(pair_layout, "MAX_HASH_CELLS", 2**16)  # and back: the hash goes on counting
    again = reports(association, 100, seed=92)
    assert store.apply(pairs_batch(topic, 0, 2, 3, {key: increment(association, *again)})).applied
    assert_same(store.pair_patterns(association, [2]), sent_pairs([before, after, again]))
    if kind == "redis":
        client = store.client  # type: ignore[attr-defined]
        prefix = request.getfixturevalue("key_prefix")
        assert client.type(key_schema.pair_key(prefix, topic, 0, key, "cells")) == b"hash"
        assert client.type(key_schema.pair_key(prefix, topic, 0, key, "rows.0")) == b"string"


def test_the_form_is_read_from_the_key_name():
    key = PairKey("a", 0xABC, 12)
    assert key_schema.pair_key("P", "t", 3, key, "cells") == "P:{t:3}:pr:a:00000abc:cells:12"
    assert key_schema.pair_key("P", "t", 3, key, "rows.4") == "P:{t:3}:pr:a:00000abc:rows.4:12"
    assert key_schema.pair_form_of("P:{t:3}:pr:a:00000abc:rows.4:12") == "rows.4"
    assert key_schema.pair_form_of("P:{t:3}:pr:a:00000abc:12") is None  # named before the form was
    assert key_schema.bucket_of("P:{t:3}:pr:a:00000abc:rows.4:12") == 12
    assert pair_layout.parse_form("rows.17") == ("rows", 17)
    with pytest.raises(ParameterError):
        pair_layout.parse_form("rows")


@pytest.mark.integration
def test_on_redis_a_key_named_before_the_form_was_in_the_name_is_still_read(redis_config, key_prefix, topic):
    store = RedisSketchStore(redis_config.client(), key_prefix)
    association = REGISTRY.association("lang_page")
    key = PairKey(association.name, association.fingerprint, 8)
    old, new = reports(association, 30, seed=95), reports(association, 20, seed=96)
    legacy = f"{key_schema.partition_tag(key_prefix, topic, 0)}:pr:{key.association}:{key.fingerprint:08x}:8"
    store.client.set(legacy, increment(association, *old).rows.tobytes())
    store.client.sadd(key_schema.pair_index_key(key_prefix, association.name, association.fingerprint), legacy)
    assert store.apply(pairs_batch(topic, 0, None, 1, {key: increment(association, *new)})).applied
    assert_same(store.pair_patterns(association, [8]), sent_pairs([old, new]))


# ------------------------------------------------------------------------------ associations of three members

@pytest.mark.parametrize("name", ["three_rows", "three_cells"])
def test_three_members_give_the_pair_statistic_of_any_two(store, name, topic):
    association = REGISTRY.association(name)
    key = PairKey(association.name, association.fingerprint, 5)
    parts = [reports(association, 400, seed=100), reports(association, 250, seed=101)]
    assert store.apply(pairs_batch(topic, 0, None, 1, {key: increment(association, *parts[0])})).applied
    assert store.apply(pairs_batch(topic, 1, None, 1, {key: increment(association, *parts[1])})).applied
    for i, j in [(0, 1), (0, 2), (1, 2), (2, 0), (1, 0)]:
        got = store.pair_patterns(association, [5], members=(i, j))
        assert got.total == 650
        assert_same(got, sent_pairs(parts, i, j))
    empty = store.pair_patterns(association, [6], members=(2, 1))
    assert empty.total == 0 and empty.reports_y.ndim == (1 if association.metrics[1].mechanism.report_kind ==
                                                          "symbol" else 2)
    with pytest.raises(ParameterError, match="has 3 members: name the two"):
        store.pair_patterns(association, [5])
    with pytest.raises(ParameterError, match="not two distinct member positions"):
        store.pair_patterns(association, [5], members=(1, 1))
    with pytest.raises(ParameterError, match="not two distinct member positions"):
        store.pair_patterns(association, [5], members=(0, 3))
