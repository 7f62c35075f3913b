"""Folding messages into sketch increments, and the in-memory twin of the exactly-once store."""

from __future__ import annotations

import numpy as np

from ldpstream.consumers.fold import fold_messages
from ldpstream.mechanisms.base import pack_bits
from ldpstream.registry import Registry
from ldpstream.store import ALL_TIME, InMemorySketchStore, PartitionBatch, SketchKey, sum_buckets
from ldpstream.wire import encode_records, symbol_payloads

REGISTRY = Registry.from_dict({
    "defaults": {"bucket_seconds": 100},
    "metrics": {
        "sym": {"id": 1, "mechanism": "orr", "k": 8, "epsilon": 1.0, "cohorts": 4, "support": 32},
        "bits": {"id": 2, "mechanism": "krappor", "k": 12, "epsilon": 1.0},
    },
})


def _sym_rows(symbols, cohorts, event_time=0, fp=None):
    metric = REGISTRY["sym"]
    return encode_records(metric.id, fp if fp is not None else metric.fingerprint, cohorts,
                          symbol_payloads(symbols), event_time=event_time)


def test_symbol_reports_fold_into_per_cohort_counts_by_time_bucket():
    rows = _sym_rows([1, 1, 7, 0], [0, 0, 3, 2], event_time=250)
    late = _sym_rows([5], [1], event_time=0)  # no event time: the Kafka timestamp (999 s) decides
    values = [r.tobytes() for r in rows] + [late.tobytes()]
    folded = fold_messages(values, np.full(len(values), 999), REGISTRY, now=1000)
    fp = REGISTRY["sym"].fingerprint
    assert set(folded.increments) == {SketchKey("sym", fp, 2), SketchKey("sym", fp, 9), SketchKey("sym", fp, ALL_TIME)}
    by_bucket = {k.bucket: v for k, v in folded.increments.items()}
    np.testing.assert_array_equal(by_bucket[ALL_TIME], by_bucket[2] + by_bucket[9])
    sketch = folded.increments[SketchKey("sym", fp, 2)]
    assert sketch.shape == (4, 8)
    assert sketch[0, 1] == 2 and sketch[3, 7] == 1 and sketch[2, 0] == 1 and sketch.sum() == 4
    assert folded.increments[SketchKey("sym", fp, 9)][1, 5] == 1
    assert folded.applied == {"sym": 5}
    assert folded.rejections == []


def test_bit_reports_fold_into_report_and_bit_counts():
    metric = REGISTRY["bits"]
    bits = np.zeros((3, 12), dtype=np.uint8)
    bits[0, [0, 11]] = 1
    bits[1, 11] = 1
    rows = encode_records(metric.id, metric.fingerprint, [0, 0, 0], pack_bits(bits), event_time=50)
    folded = fold_messages([rows.tobytes()], np.zeros(1, dtype=np.int64), REGISTRY, now=1000)
    sketch = folded.increments[SketchKey("bits", metric.fingerprint, 0)]
    np.testing.assert_array_equal(folded.increments[SketchKey("bits", metric.fingerprint, ALL_TIME)], sketch)
    assert sketch[0, 0] == 3 and sketch[0, 1] == 1 and sketch[0, 12] == 2 and sketch.sum() == 6


def test_bad_reports_are_refused_with_their_reason_and_never_counted():
    good = _sym_rows([3], [1], event_time=10)
    cases = {
        "malformed": b"\x01\x00garbage",
        "unknown_metric": encode_records(77, 1, [0], symbol_payloads([0])).tobytes(),
        "fingerprint_mismatch": _sym_rows([3], [1], fp=REGISTRY["sym"].fingerprint ^ 1).tobytes(),
        "payload_size": encode_records(1, REGISTRY["sym"].fingerprint, [0], np.zeros((1, 2), np.uint8)).tobytes(),
        "out_of_range": _sym_rows([8], [0]).tobytes(),  # symbol 8 with k = 8
    }
    cohort_out = _sym_rows([0], [4]).tobytes()  # cohort 4 with C = 4
    bits = REGISTRY["bits"]
    padding = np.zeros((1, 2), dtype=np.uint8)
    padding[0, 1] = 0x10  # bit 12 set: beyond k = 12
    pad_out = encode_records(bits.id, bits.fingerprint, [0], padding).tobytes()
    values = [good.tobytes(), *cases.values(), cohort_out, pad_out]
    folded = fold_messages(values, np.zeros(len(values), dtype=np.int64), REGISTRY, now=1000)
    reasons = [r.reason for r in folded.rejections]
    assert reasons == [*cases, "out_of_range", "out_of_range"]
    assert folded.applied == {"sym": 1}
    assert sum(int(s.sum()) for k, s in folded.increments.items() if k.bucket != ALL_TIME) == 1
    stats = folded.stats()
    assert stats["reports_applied"] == 1 and stats["rejected:out_of_range"] == 3


def test_a_gateway_message_with_one_bad_record_is_refused_whole():
    rows = _sym_rows([1, 2, 3], [0, 0, 0])
    rows[2, 4:8] = 0  # break the last record's fingerprint
    folded = fold_messages([rows.tobytes()], np.zeros(1, dtype=np.int64), REGISTRY, now=1000)
    assert [r.reason for r in folded.rejections] == ["fingerprint_mismatch"]
    assert folded.increments == {}


def test_in_memory_store_applies_a_batch_only_where_the_consumer_expects_the_partition():
    store = InMemorySketchStore()
    key = SketchKey("sym", 1, 0)
    one = np.ones((4, 8), dtype=np.int64)
    assert store.apply(PartitionBatch("t", 0, None, 10, {key: one})).applied
    replay = store.apply(PartitionBatch("t", 0, None, 12, {key: one}))
    assert not replay.applied and replay.next_offset == 10
    assert store.apply(PartitionBatch("t", 0, 10, 20, {key: one})).applied
    assert store.apply(PartitionBatch("t", 1, None, 3, {key: one})).applied  # other partition: own offsets
    assert store.next_offsets("t", [0, 1, 2]) == {0: 20, 1: 3, 2: None}
    total = sum_buckets(store.snapshot("sym", 1, (4, 8)))
    np.testing.assert_array_equal(total, 3 * one)


def test_event_times_far_from_the_clock_are_refused_and_buckets_fold_in_one_pass():
    now = 1_800_000_000
    times = [now - 10, now - 3600, now + 60, now - 500 * 86400, now + 2 * 86400]
    values = [_sym_rows([i % 8], [0], event_time=t).tobytes() for i, t in enumerate(times)]
    folded = fold_messages(values, np.zeros(len(values), dtype=np.int64), REGISTRY, now=now)
    assert [(r.message_index, r.reason) for r in folded.rejections] == [
        (3, "event_time_out_of_range"), (4, "event_time_out_of_range")]
    fp = REGISTRY["sym"].fingerprint
    buckets = sorted(k.bucket for k in folded.increments if k.bucket != ALL_TIME)
    assert buckets == sorted({t // 100 for t in times[:3]})
    assert all(int(folded.increments[SketchKey("sym", fp, b)].sum()) == 1 for b in buckets)
    assert int(folded.increments[SketchKey("sym", fp, ALL_TIME)].sum()) == 3


def test_bucket_sketches_of_a_metric_with_retention_expire_after_it_and_the_rollup_never():
    table = {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0, "bucket_seconds": 100, "retention": "1h",
             "windows": ["all", "1h"]}
    registry = Registry.from_dict({"metrics": {"m": table}})
    metric = registry["m"]
    rows = encode_records(metric.id, metric.fingerprint, [0, 0], symbol_payloads([1, 2]), event_time=[1050, 1250])
    folded = fold_messages([rows.tobytes()], np.zeros(1, dtype=np.int64), registry, now=2000)
    fp = metric.fingerprint
    assert folded.expire_at == {SketchKey("m", fp, 10): 1100 + 3600, SketchKey("m", fp, 12): 1300 + 3600}
    store = InMemorySketchStore(clock=lambda: 2000)  # the store's clock agrees with the fold's ``now``
    assert store.apply(PartitionBatch("t", 0, None, 1, folded.increments, expire_at=folded.expire_at)).applied
    snapshot = store.snapshot("m", fp, (1, 4), expired_before=11)  # bucket 10 has expired
    assert list(snapshot.buckets) == [12]
    np.testing.assert_array_equal(snapshot.all_time((1, 4)), [[0, 1, 1, 0]])



def test_the_kafka_timestamp_is_bounded_like_an_event_time():
    """A record without its own event time takes its message's Kafka timestamp, which the producer chooses:
    it is range-checked the same way (a far-future or ancient timestamp must not create sketch keys)."""
    from ldpstream.consumers.fold import MAX_CLOCK_SKEW, MAX_EVENT_AGE

    now = 10**9
    values = [_sym_rows([1], [0]).tobytes() for _ in range(4)]
    stamps = np.array([now, now + MAX_CLOCK_SKEW + 1, now - MAX_EVENT_AGE - 1, 2**40])
    folded = fold_messages(values, stamps, REGISTRY, now=now)
    assert [(r.message_index, r.reason) for r in folded.rejections] == [
        (1, "event_time_out_of_range"), (2, "event_time_out_of_range"), (3, "event_time_out_of_range")]
    assert folded.applied == {"sym": 1}
    assert {k.bucket for k in folded.increments} == {now // 100, ALL_TIME}


def test_a_metric_with_retention_accepts_no_data_older_than_its_retention():
    registry = Registry.from_dict({"defaults": {"bucket_seconds": 3600, "retention": "1d"},
                                   "metrics": {"sym": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}})
    metric = registry["sym"]
    now = 10**9
    rows = [encode_records(metric.id, metric.fingerprint, [0], symbol_payloads([1]), event_time=t).tobytes()
            for t in (now - 86400 + 10, now - 86400 - 10)]
    folded = fold_messages(rows, np.zeros(2, dtype=np.int64), registry, now=now)
    assert [(r.message_index, r.reason) for r in folded.rejections] == [(1, "event_time_out_of_range")]


def test_a_batch_spanning_more_buckets_than_its_limit_is_cut_and_the_rest_left_for_the_next_batch():
    """Regression: the messages of the oldest buckets beyond the limit were refused (dead-lettered) although each
    was valid. Now the batch stops at the first message that would cross the limit; the rest is neither folded
    nor refused, and every message is applied once over the batches that follow."""
    from ldpstream.consumers.fold import MAX_BUCKETS_PER_BATCH, refusals

    now = 10**9
    spread = MAX_BUCKETS_PER_BATCH + 44
    times = now - 100 * np.arange(spread)  # one message per bucket, newest first
    values = [_sym_rows([1], [0], event_time=int(t)).tobytes() for t in times]
    values.insert(MAX_BUCKETS_PER_BATCH + 5, b"garbage")  # beyond the cut: refused later, not now
    stamps = np.zeros(len(values), dtype=np.int64)
    folded = fold_messages(values, stamps, REGISTRY, now=now)
    assert folded.deferred_from == MAX_BUCKETS_PER_BATCH
    assert len([k for k in folded.increments if k.bucket != ALL_TIME]) == MAX_BUCKETS_PER_BATCH
    assert folded.rejections == [] and folded.applied == {"sym": MAX_BUCKETS_PER_BATCH}
    assert folded.records_decoded == MAX_BUCKETS_PER_BATCH
    rest = fold_messages(values[MAX_BUCKETS_PER_BATCH:], stamps[MAX_BUCKETS_PER_BATCH:], REGISTRY, now=now)
    assert rest.deferred_from is None and rest.applied == {"sym": 44}
    assert [(r.message_index, r.reason) for r in rest.rejections] == [(5, "malformed")]
    assert [(r.message_index, r.reason) for r in refusals(values, stamps, REGISTRY, now=now)] == [
        (MAX_BUCKETS_PER_BATCH + 5, "malformed")]


def test_a_message_spanning_more_buckets_than_a_batch_may_touch_is_refused_as_it_can_never_be_applied():
    from ldpstream.consumers.fold import MAX_BUCKETS_PER_BATCH

    now = 10**9
    times = now - 100 * np.arange(MAX_BUCKETS_PER_BATCH + 1)
    values = [_sym_rows([2], [0], event_time=now).tobytes(), b"".join(
        _sym_rows([1], [0], event_time=int(t)).tobytes() for t in times), _sym_rows([3], [0], event_time=now).tobytes()]
    folded = fold_messages(values, np.zeros(3, dtype=np.int64), REGISTRY, now=now)
    assert [(r.message_index, r.reason) for r in folded.rejections] == [(1, "too_many_buckets")]
    assert folded.deferred_from is None and folded.applied == {"sym": 2}


def test_the_fold_of_wide_reports_stays_within_a_bounded_working_memory():
    """A k = 16,384 bit metric once made one batch allocate 1.6 GB (32,768 unpacked reports as int32): the
    fold now unpacks at most FOLD_CELLS report cells at a time."""
    import tracemalloc

    from ldpstream.consumers.fold import FOLD_CELLS

    k, n = 16_384, 4_000
    registry = Registry.from_dict({"metrics": {"wide": {"id": 9, "mechanism": "krappor", "k": k, "epsilon": 1.0}}})
    metric = registry["wide"]
    bits = np.zeros((n, k), dtype=np.uint8)
    bits[np.arange(n), np.arange(n) % k] = 1
    rows = encode_records(metric.id, metric.fingerprint, np.zeros(n, dtype=np.int64), pack_bits(bits),
                          event_time=500)
    values = [rows[i:i + 100].tobytes() for i in range(0, n, 100)]
    del bits
    tracemalloc.start()
    folded = fold_messages(values, np.zeros(len(values), dtype=np.int64), registry, now=1000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert folded.applied == {"wide": n}
    # Unpacked chunk (1 byte a cell) and its int32 copy, plus the decoded batch and the sketches.
    budget = 5 * FOLD_CELLS + 3 * len(rows.tobytes()) + 4 * 8 * (k + 1)
    assert peak < budget, (peak, budget)
