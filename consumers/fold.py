"""Folding decoded reports into count-sketch increments: pure, vectorized, no Kafka or Redis.

Given the messages of one Kafka partition batch, :func:`fold_messages` validates every record against the
registry and returns, per (metric, fingerprint, time bucket), the ``(C, W)`` sketch of the accepted reports,
plus the messages it refused and why. A message is accepted or refused whole: if any of its records is bad,
none of them is counted and the whole message goes to the dead-letter topic, so replaying dead letters can
never count a report twice (docs/math/exactly-once.md#the-dead-letter-topic-is-at-least-once).

A version-2 record (one client's reports of an association's members, then of its riders) updates each
carried metric's sketches exactly as a version-1 record of that metric would, and the association's pair
statistic of its time bucket (members' reports only; :mod:`ldpstream.store.pair_layout`).

Reasons a message is refused (the ``reason`` label of ``ldpstream_messages_rejected_total``; each is defined
in docs/report-format.md#framing-one-record-or-many-per-message): ``malformed`` (see :mod:`ldpstream.wire`),
``unknown_metric``, ``unknown_association``, ``fingerprint_mismatch``, ``payload_size``, ``out_of_range``,
``event_time_out_of_range`` (an effective event time older than the metric's acceptance window or further
ahead than :data:`MAX_CLOCK_SKEW` of the consumer's clock) and ``too_many_buckets`` (one message's records
of one metric span more time buckets than one batch may touch, :func:`max_buckets_per_batch`).

A batch whose messages together span more buckets of a metric than that is not refused: it is cut at the first
message that would cross the limit (:attr:`FoldResult.deferred_from`); the messages from there on are neither
folded nor refused, and the consumer reads them again in its next batch. The late and future data policy:
``docs/late-and-future-data.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from ldpstream.registry import AssociationConfig, MetricConfig, Registry
from ldpstream.store import ALL_TIME, SketchKey
from ldpstream.store.contract import PairIncrement, PairKey
from ldpstream.store.pair_layout import layout_of, merge_increments, pair_increment
from ldpstream.wire import AssociationBatch, RecordBatch, decode_messages, payload_size, reports_from_payloads

REJECTION_REASONS = ("malformed", "unknown_metric", "unknown_association", "fingerprint_mismatch", "payload_size",
                     "out_of_range", "event_time_out_of_range", "too_many_buckets")
#: Oldest event time accepted, in seconds before the consumer's clock (a metric with a shorter
#: ``retention`` accepts no older data than its retention: such data would expire on arrival).
MAX_EVENT_AGE = 400 * 86400
#: Most time buckets the records of one metric in one batch may create (each is a Redis key).
MAX_BUCKETS_PER_BATCH = 256
#: Furthest event time accepted ahead of the consumer's clock (client clocks drift).
MAX_CLOCK_SKEW = 86400


@dataclass(frozen=True)
class Rejection:
    message_index: int
    reason: str
    detail: str


@dataclass
class FoldResult:
    increments: dict[SketchKey, np.ndarray] = field(default_factory=dict)
    #: When bucket sketches expire, for metrics with a retention.
    expire_at: dict[SketchKey, int] = field(default_factory=dict)
    applied: dict[str, int] = field(default_factory=dict)
    #: Increments of associations' pair statistics (per association, fingerprint and bucket).
    pairs: dict[PairKey, PairIncrement] = field(default_factory=dict)
    #: Report tuples applied per association (each also counts once in ``applied`` of every member).
    associated: dict[str, int] = field(default_factory=dict)
    #: Records decoded from the messages, accepted or not (malformed messages contribute none).
    records_decoded: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    #: The index of the first message left for a later batch (the batch crossed a metric's bucket limit), or
    #: None: every message was folded or refused. Increments and rejections cover the messages before it only.
    deferred_from: int | None = None

    @property
    def reports_applied(self) -> int:
        return sum(self.applied.values())

    def stats(self) -> dict[str, int]:
        """Counters stored with the batch: totals per metric and per rejection reason."""
        out = {"reports_applied": self.reports_applied}
        out.update({f"applied:{metric}": n for metric, n in self.applied.items()})
        out.update({f"associated:{association}": n for association, n in self.associated.items()})
        for rejection in self.rejections:
            key = f"rejected:{rejection.reason}"
            out[key] = out.get(key, 0) + 1
        return out


#: Kafka timestamps in seconds of the messages at the given indices (or all of them, as an array).
Timestamps = Callable[[np.ndarray], np.ndarray] | np.ndarray


def fold_messages(values: Sequence[bytes], timestamps: Timestamps, registry: Registry,
                  now: float | None = None) -> FoldResult:
    """Validate and fold message values into increments.

    ``timestamps`` gives the messages' Kafka timestamps in seconds, used for records that carry no event
    time; a callable is asked only for the messages that need it. ``now`` (default: the clock) bounds the
    event times accepted.
    """
    now = time.time() if now is None else now
    decoded = decode_messages(values)
    result = FoldResult(records_decoded=decoded.record_count)
    refused: dict[int, Rejection] = {
        m.message_index: Rejection(m.message_index, "malformed", m.reason) for m in decoded.malformed}
    accepted: list[tuple[MetricConfig, RecordBatch]] = []
    for metric, records in _split_by_id(decoded.batches, [b.metric_id for b in decoded.batches], registry.by_id,
                                        refused, "metric"):
        records = _with_effective_event_times(records, timestamps)
        ok = _validate(metric, records, refused, now)
        accepted.append((metric, records if ok.all() else records.take(ok)))
    associated: list[tuple[AssociationConfig, AssociationBatch]] = []
    for association, chosen in _split_by_id(decoded.association_batches,
                                            [t.association_id for t in decoded.association_batches],
                                            registry.associations_by_id, refused, "association"):
        chosen = _with_effective_event_times(chosen, timestamps)
        ok = _validate_association(association, chosen, refused, now)
        if not ok.any():
            continue
        chosen = chosen if ok.all() else chosen.take(ok)
        associated.append((association, chosen))
        # Every member's (and rider's) marginal sketches count its report, like a version-1 record of it.
        accepted.extend((member, chosen.member(j, member.id, member.fingerprint))
                        for j, member in enumerate(association.carried))
    accepted = [(metric, kept) for metric, records in accepted if len(kept := _without_refused(records, refused))]
    cut = min((_bucket_cut(metric, records, refused) for metric, records in accepted), default=len(values))
    if cut < len(values):
        result.deferred_from = cut
        result.records_decoded -= sum(int((b.message_index >= cut).sum()) for b in decoded.batches)
        result.records_decoded -= sum(int((b.message_index >= cut).sum()) for b in decoded.association_batches)
        refused = {i: r for i, r in refused.items() if i < cut}
        accepted = [(metric, records.take(records.message_index < cut)) for metric, records in accepted]
        associated = [(association, tuples.take(tuples.message_index < cut)) for association, tuples in associated]
    for metric, records in accepted:
        # A message with any bad record is refused whole, including its records of other metrics.
        records = _without_refused(records, refused)
        if len(records):
            _fold_metric(metric, records, result)
    for association, tuples in associated:
        tuples = _without_refused(tuples, refused)
        if len(tuples):
            _fold_pairs(association, tuples, result, now)
    result.rejections = sorted(refused.values(), key=lambda r: r.message_index)
    return result


def refusals(values: Sequence[bytes], timestamps: np.ndarray, registry: Registry,
             now: float | None = None) -> list[Rejection]:
    """What a consumer would refuse of ``values`` (Kafka timestamps in seconds), whatever batches it took them in:
    :func:`fold_messages` again from each deferral (:attr:`FoldResult.deferred_from`) on."""
    found: list[Rejection] = []
    start = 0
    while start < len(values):
        folded = fold_messages(values[start:], timestamps[start:], registry, now=now)
        found += [Rejection(r.message_index + start, r.reason, r.detail) for r in folded.rejections]
        start += len(values) - start if folded.deferred_from is None else folded.deferred_from
    return found


class _Records(Protocol):
    @property
    def message_index(self) -> np.ndarray: ...

    def take(self: B, index: np.ndarray) -> B: ...


B = TypeVar("B", bound=_Records)


def _without_refused(records: B, refused: dict[int, Rejection]) -> B:
    """The records whose message is not refused."""
    if not refused:
        return records
    keep = ~np.isin(records.message_index, np.fromiter(refused, dtype=np.int64, count=len(refused)))
    return records if keep.all() else records.take(keep)


def _refuse(refused: dict[int, Rejection], messages: np.ndarray, reason: str, detail: str) -> None:
    for i in np.unique(messages).tolist():
        refused.setdefault(i, Rejection(i, reason, detail))


R = TypeVar("R", RecordBatch, AssociationBatch)


Config = TypeVar("Config", MetricConfig, AssociationConfig)


def _split_by_id(batches: Sequence[R], ids: Sequence[np.ndarray], configs: Mapping[int, Config],
                 refused: dict[int, Rejection], what: str) -> Iterator[tuple[Config, R]]:
    """Each batch's records of each id (``ids[i]``: batch i's metric or association ids) with the configuration
    of that id, lazily; the messages of an id ``configs`` does not know are refused (``unknown_<what>``)."""
    for batch, batch_ids in zip(batches, ids, strict=True):
        distinct = _distinct(batch_ids)
        for ident in distinct:
            # The common case, one id per batch, keeps the batch's arrays as they are (no copies).
            records = batch if distinct.size == 1 else batch.take(batch_ids == ident)
            config = configs.get(int(ident))
            if config is None:
                _refuse(refused, records.message_index, f"unknown_{what}", f"no {what} with id {ident}")
                continue
            yield config, records


def _with_effective_event_times(records: R, timestamps: Timestamps) -> R:
    """The records with each event time of 0 (none given) replaced by its message's Kafka timestamp."""
    event_time = records.event_time.astype(np.int64)
    missing = np.flatnonzero(event_time == 0)
    if missing.size:
        owners = records.message_index[missing]
        event_time[missing] = timestamps(owners) if callable(timestamps) else timestamps[owners]
    if isinstance(records, AssociationBatch):
        return records.with_event_time(event_time)
    return RecordBatch(records.metric_id, records.fingerprint, records.cohort, event_time, records.payloads,
                       records.message_index)


def _validate_association(association: AssociationConfig, tuples: AssociationBatch, refused: dict[int, Rejection],
                          now: float) -> np.ndarray:
    """Mask of the version-2 records valid for ``association`` (its fingerprint, its number of members, and each
    member's report as :func:`_validate` checks it); refuses the messages of the others."""
    bad_fingerprint = tuples.fingerprint != association.fingerprint
    if bad_fingerprint.any():
        _refuse(refused, tuples.message_index[bad_fingerprint], "fingerprint_mismatch",
                f"association {association.name!r} expects fingerprint {association.fingerprint:08x}")
    ok: np.ndarray = ~bad_fingerprint
    carried = association.carried
    if tuples.cohorts.shape[1] != len(carried):
        _refuse(refused, tuples.message_index[ok], "payload_size",
                f"association {association.name!r} carries {len(carried)} reports, the record "
                f"{tuples.cohorts.shape[1]} payloads")
        return np.zeros(len(tuples), dtype=bool)
    for j, member in enumerate(carried):
        ok &= _validate(member, tuples.member(j, member.id, member.fingerprint), refused, now)
    return ok


def oldest_accepted(metric: MetricConfig, now: float) -> float:
    """The oldest effective event time a consumer accepts for ``metric`` at ``now``."""
    age = MAX_EVENT_AGE if metric.retention_seconds is None else min(MAX_EVENT_AGE, metric.retention_seconds)
    return now - age


def _validate(metric: MetricConfig, records: RecordBatch, refused: dict[int, Rejection], now: float) -> np.ndarray:
    """Mask of the records that are valid for ``metric``; refuses the messages of the others."""
    mechanism = metric.mechanism
    ok = np.ones(len(records), dtype=bool)
    checks: list[tuple[np.ndarray, str, str]] = []
    oldest = oldest_accepted(metric, now)
    when = records.event_time
    checks.append(((when < oldest) | (when > now + MAX_CLOCK_SKEW), "event_time_out_of_range",
                   f"event time (the record's, else the Kafka timestamp) more than {(now - oldest) / 86400:g} "
                   f"days old or more than {MAX_CLOCK_SKEW} s ahead"))
    fingerprint_bad = records.fingerprint != metric.fingerprint
    checks.append((fingerprint_bad, "fingerprint_mismatch",
                   f"metric {metric.name!r} expects fingerprint {metric.fingerprint:08x}"))
    if records.payloads.shape[1] != payload_size(metric.mechanism):
        checks.append((np.ones(len(records), dtype=bool), "payload_size",
                       f"metric {metric.name!r} has {payload_size(metric.mechanism)}-byte payloads, "
                       f"got {records.payloads.shape[1]}"))
    else:
        out_of_range = records.cohort >= mechanism.cohorts
        if mechanism.report_kind == "symbol":  # symbols 0..width-1 (k for k-RR/O-RR; HR's K, HCMS's 2m)
            out_of_range |= reports_from_payloads(metric.mechanism, records.payloads) >= mechanism.sketch_width
        elif mechanism.k % 8:
            out_of_range |= (records.payloads[:, -1] >> (mechanism.k % 8)) != 0
        bits_set = getattr(mechanism, "bits_per_report", None)  # subset selection: exactly d bits a report
        if bits_set is not None:
            out_of_range |= np.bitwise_count(records.payloads).sum(axis=1, dtype=np.int64) != bits_set
        checks.append((out_of_range, "out_of_range",
                       f"cohort, symbol or bit beyond metric {metric.name!r}'s mechanism"))
    for bad, reason, detail in checks:
        bad &= ok
        if bad.any():
            _refuse(refused, records.message_index[bad], reason, detail)
            ok &= ~bad
    return ok


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique`` with a fast path for the common case of a single value."""
    if values.size and values.min() == values.max():
        return values[:1]
    return np.unique(values)


#: Reports unpacked at a time, at most: bounds the fold's working memory whatever the size of the Kafka batch.
FOLD_CHUNK = 32_768
#: Report cells (bits, or symbols) unpacked at a time: a k-bit report unpacks to k bytes, then 4k as int32
#: counts, so wide reports are folded in proportionally fewer rows (2^22 cells: 4 MiB + 16 MiB).
FOLD_CELLS = 2**22
#: Sketch cells one batch may hold for one metric across its buckets (2^24 int64 cells: 128 MiB): a wide
#: metric gets fewer buckets per batch than :data:`MAX_BUCKETS_PER_BATCH`.
MAX_BATCH_SKETCH_CELLS = 2**24


def max_buckets_per_batch(metric: MetricConfig) -> int:
    """How many time buckets the records of ``metric`` in one batch may touch: :data:`MAX_BUCKETS_PER_BATCH`,
    fewer for wide sketches so that the batch's increments stay within :data:`MAX_BATCH_SKETCH_CELLS`."""
    cells = metric.mechanism.cohorts * metric.mechanism.sketch_width
    return int(min(MAX_BUCKETS_PER_BATCH, max(1, MAX_BATCH_SKETCH_CELLS // cells - 1)))  # - 1: the rollup


def _bucket_cut(metric: MetricConfig, records: RecordBatch, refused: dict[int, Rejection]) -> int:
    """Refuse (``too_many_buckets``) the messages whose own records of ``metric`` span more buckets than
    :func:`max_buckets_per_batch`; returns the index of the first message at which the others, in message order,
    cross that limit (a large number when they never do)."""
    limit = max_buckets_per_batch(metric)
    buckets = records.event_time // metric.bucket_seconds
    if buckets.max() - buckets.min() < limit:
        return np.iinfo(np.int64).max
    pairs = np.unique(np.stack([records.message_index, buckets]), axis=1)  # distinct (message, bucket), sorted
    messages, per_message = np.unique(pairs[0], return_counts=True)
    wide = messages[per_message > limit]
    if wide.size:
        _refuse(refused, wide, "too_many_buckets",
                f"metric {metric.name!r}: one message spans more than the {limit} time buckets a batch may touch")
        pairs = pairs[:, ~np.isin(pairs[0], wide)]
    # The message at which each bucket first appears, in message order: the (limit + 1)-th is the cut.
    bucket_values, first = np.unique(pairs[1], return_index=True)
    if bucket_values.size <= limit:
        return np.iinfo(np.int64).max
    return int(np.sort(pairs[0, first])[limit])


def _fold_metric(metric: MetricConfig, records: RecordBatch, result: FoldResult) -> None:
    buckets = records.event_time // metric.bucket_seconds
    if buckets.min() == buckets.max():
        parts = [(int(buckets[0]), records)]
    else:  # one sort, then each bucket is a contiguous run of the sorted records
        order = np.argsort(buckets, kind="stable")
        ordered, sorted_buckets = records.take(order), buckets[order]
        starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
        ends = np.r_[starts[1:], len(order)]
        parts = [(int(sorted_buckets[a]), ordered.take(slice(a, b))) for a, b in zip(starts, ends, strict=True)]
    shape = (metric.mechanism.cohorts, metric.mechanism.sketch_width)
    all_time = np.zeros(shape, dtype=np.int64)
    for bucket, part in parts:
        sketch = np.zeros(shape, dtype=np.int64)
        chunk = max(1, min(FOLD_CHUNK, FOLD_CELLS // metric.mechanism.k))
        for start in range(0, len(part), chunk):
            stop = start + chunk
            reports = reports_from_payloads(metric.mechanism, part.payloads[start:stop])
            sketch += metric.mechanism.sketch(part.cohort[start:stop], reports)
        key = SketchKey(metric.name, metric.fingerprint, bucket)
        _add(result, key, sketch)
        all_time += sketch
        if metric.retention_seconds is not None:
            result.expire_at[key] = (bucket + 1) * metric.bucket_seconds + metric.retention_seconds
    # The all-time rollup, updated in the same atomic call: the "all" window never depends on old buckets.
    _add(result, SketchKey(metric.name, metric.fingerprint, ALL_TIME), all_time)
    result.applied[metric.name] = result.applied.get(metric.name, 0) + len(records)


def _fold_pairs(association: AssociationConfig, tuples: AssociationBatch, result: FoldResult, now: float) -> None:
    """The pair statistic's increments of the tuples, one per time bucket (vectorized per bucket).

    A bucket already past the association's retention (its members may keep data longer) gets no pair
    increment: its tuples update the members' sketches only, as in every store (Redis would drop a key written
    with a past expiry at once, the in-memory store would keep it)."""
    layout = layout_of(association)
    members = len(association.metrics)  # the riders' reports, after the members', stay out of the pair statistic
    buckets = tuples.event_time // association.bucket_seconds
    for bucket in _distinct(buckets).tolist():
        expire_at = (bucket + 1) * association.bucket_seconds + association.retention_seconds
        if expire_at <= now:
            continue
        part = tuples if buckets.min() == buckets.max() else tuples.take(buckets == bucket)
        increment = pair_increment(layout, part.cohorts[:, :members], part.payloads[:members], expire_at)
        key = PairKey(association.name, association.fingerprint, int(bucket))
        current = result.pairs.get(key)
        result.pairs[key] = increment if current is None else merge_increments(current, increment)
    result.associated[association.name] = result.associated.get(association.name, 0) + len(tuples)


def _add(result: FoldResult, key: SketchKey, sketch: np.ndarray) -> None:
    current = result.increments.get(key)
    result.increments[key] = sketch if current is None else current + sketch
