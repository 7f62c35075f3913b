"""The sketch store in process memory: the twin of the Redis store that unit tests and offline tools use.
It keeps the same contract (:mod:`ldpstream.store.contract`), compare-and-set included."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import orjson

from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.registry import AssociationConfig
from ldpstream.store.contract import (
    ALL_TIME,
    MAX_PAIR_BYTES,
    ApplyResult,
    MetricSnapshot,
    PairIncrement,
    PartitionBatch,
    check_batch,
)
from ldpstream.store.pair_layout import (
    CELLS_FORM,
    layout_of,
    merge_increments,
    parse_form,
    read_patterns,
    rows_form,
    segment_bytes,
)


class InMemorySketchStore:
    """The same contract in process memory: the twin unit tests use instead of Redis."""

    def __init__(self, clock: Callable[[], float] = time.time, max_pair_bytes: int = MAX_PAIR_BYTES) -> None:
        """``clock``: the Unix time against which sketches' ``expire_at`` is checked (Redis' own clock).
        ``max_pair_bytes``: the most one rows segment of a pair statistic holds (as the Redis store's)."""
        if not 0 < max_pair_bytes <= MAX_PAIR_BYTES:
            raise ValueError(f"max_pair_bytes must be in 1..{MAX_PAIR_BYTES}, got {max_pair_bytes}")
        self._clock = clock
        self.max_pair_bytes = max_pair_bytes
        #: ("estimate" | "joint", metric or association, window) → published JSON, newest first / the latest.
        self._estimates: dict[tuple[str, str, str], list[str]] = {}
        self._latest: dict[tuple[str, str, str], str] = {}
        self._last_decode: str | None = None
        #: Simulations' truth per metric or association (:meth:`add_truth`).
        self._truth: dict[str, np.ndarray] = {}
        #: Names of the dictionaries ``discover --publish`` stored (their bodies are estimates of window all).
        self._dictionaries: set[str] = set()
        #: Simulations' strings of discovery metrics: name -> string -> count.
        self._string_truth: dict[str, dict[str, int]] = {}
        self._offsets: dict[tuple[str, int], int] = {}
        self._rebuild_until: dict[tuple[str, int], int] = {}
        self._stats: dict[tuple[str, int], dict[str, int]] = {}
        #: (metric, fingerprint) → (topic, partition, bucket) → flat int64 counters, like Redis' sketch keys
        #: (the sketches of one partition), so that expiry and retention behave as they do there.
        self._sketches: dict[tuple[str, int], dict[tuple[str, int, int], np.ndarray]] = {}
        #: Unix time at which a partition's sketch expires (as Redis' EXPIREAT).
        self._expire_at: dict[tuple[str, int, str, int, int], int] = {}
        #: (association, fingerprint) → (topic, partition, bucket, form) → the pair statistic, like Redis' pair keys
        #: (form ``cells``, or ``rows.<segment>`` holding at most ``max_pair_bytes`` each).
        self._pairs: dict[tuple[str, int], dict[tuple[str, int, int, str], PairIncrement]] = {}

    def check_safe(self) -> None:
        """Process memory evicts nothing."""

    def apply(self, batch: PartitionBatch) -> ApplyResult:
        check_batch(batch)
        where = (batch.topic, batch.partition)
        stored = self._offsets.get(where)
        if stored != batch.expected_offset:
            return ApplyResult(False, stored)
        capacities = {pair_key: segment_bytes(int(increment.rows.shape[1]), self.max_pair_bytes)
                      for pair_key, increment in batch.pairs.items()  # as the Redis script: refuse before writing
                      if increment.rows is not None and increment.rows.size}
        stats = self._stats.setdefault(where, {})
        for name, value in batch.stats.items():
            stats[name] = stats.get(name, 0) + int(value)
        now = self._clock()
        for key, counts in batch.increments.items():
            flat = np.asarray(counts, dtype=np.int64).reshape(-1)
            if not flat.any():
                continue  # as on Redis: an all-zero increment writes no sketch
            per_metric = self._sketches.setdefault((key.metric, key.fingerprint), {})
            sketch = (batch.topic, batch.partition, key.bucket)
            self._drop_if_expired(key.metric, key.fingerprint, sketch, now)
            current = per_metric.get(sketch)
            if current is None:
                per_metric[sketch] = flat.copy()
            else:
                size = max(current.size, flat.size)
                per_metric[sketch] = _padded(current, size) + _padded(flat, size)
            expire_at = int(batch.expire_at.get(key, 0))
            if expire_at > 0:
                self._expire_at[(key.metric, key.fingerprint, *sketch)] = expire_at
        for pair_key, increment in batch.pairs.items():
            written = increment.rows if increment.rows is not None else increment.cells
            if written is None or written.size == 0:
                continue
            per_association = self._pairs.setdefault((pair_key.association, pair_key.fingerprint), {})
            statistic = (batch.topic, batch.partition, pair_key.bucket)
            for gone in [k for k, held in per_association.items() if k[:3] == statistic and 0 < held.expire_at <= now]:
                del per_association[gone]  # expired keys are gone, as on Redis
            if increment.rows is None:
                _merge_into(per_association, (*statistic, CELLS_FORM), increment)
                continue
            rows_per_segment = capacities[pair_key] // increment.rows.shape[1]
            segment = max((parse_form(k[3])[1] for k in per_association if k[:3] == statistic and k[3] != CELLS_FORM),
                          default=0)
            rows = increment.rows
            while rows.shape[0]:  # fill the last segment, then spill into the next ones (as the Redis script)
                segment_key = (*statistic, rows_form(segment))
                held = per_association.get(segment_key)
                room = rows_per_segment - (0 if held is None or held.rows is None else held.rows.shape[0])
                if room > 0:
                    _merge_into(per_association, segment_key,
                                PairIncrement(rows=rows[:room], expire_at=increment.expire_at))
                    rows = rows[room:]
                segment += 1
        self._offsets[where] = batch.next_offset
        if self._rebuild_until.get(where, batch.next_offset + 1) <= batch.next_offset:
            del self._rebuild_until[where]
        return ApplyResult(True, batch.next_offset)

    def mark_rebuild(self, topic: str, partition: int, until_offset: int) -> None:
        where = (topic, partition)
        self._rebuild_until[where] = max(self._rebuild_until.get(where, -1), int(until_offset))

    def rebuilding(self, topic: str) -> dict[int, int]:
        return {p: until for (t, p), until in sorted(self._rebuild_until.items()) if t == topic}

    def _drop_if_expired(self, metric: str, fingerprint: int, sketch: tuple[str, int, int], now: float) -> None:
        expiry = self._expire_at.get((metric, fingerprint, *sketch))
        if expiry is not None and expiry <= now:
            self._sketches[(metric, fingerprint)].pop(sketch, None)
            del self._expire_at[(metric, fingerprint, *sketch)]

    def next_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int | None]:
        return {p: self._offsets.get((topic, p)) for p in partitions}

    def snapshot(self, metric: str, fingerprint: int, shape: tuple[int, int],
                 expired_before: int | None = None) -> MetricSnapshot:
        """``expired_before``: buckets below it have expired and are forgotten (as on Redis)."""
        per_metric = self._sketches.get((metric, fingerprint), {})
        now = self._clock()
        for sketch in list(per_metric):
            self._drop_if_expired(metric, fingerprint, sketch, now)
            if expired_before is not None and 0 <= sketch[2] < expired_before:
                per_metric.pop(sketch, None)
                self._expire_at.pop((metric, fingerprint, *sketch), None)
        size = shape[0] * shape[1]
        buckets: dict[int, np.ndarray] = {}
        total: np.ndarray | None = None
        for (_, _, bucket), flat in per_metric.items():
            counts = _padded(flat, size).reshape(shape)
            if bucket == ALL_TIME:
                total = counts if total is None else total + counts
            else:
                buckets[bucket] = counts if bucket not in buckets else buckets[bucket] + counts
        return MetricSnapshot(buckets, total)

    def stats(self, topic: str, partitions: Iterable[int]) -> dict[str, int]:
        total: dict[str, int] = {}
        for p in partitions:
            for name, value in self._stats.get((topic, p), {}).items():
                total[name] = total.get(name, 0) + value
        return total

    # ------------------------------------------------------------------ pair statistics

    def _live_pairs(self, association: AssociationConfig) -> dict[tuple[str, int, int, str], PairIncrement]:
        """The association's statistics that have not expired (expired ones are forgotten, as Redis does)."""
        per_association = self._pairs.get((association.name, association.fingerprint), {})
        now = self._clock()
        for where, held in list(per_association.items()):
            if 0 < held.expire_at <= now:
                del per_association[where]
        return per_association

    def pair_buckets(self, association: AssociationConfig) -> list[int]:
        return sorted({bucket for (_, _, bucket, _) in self._live_pairs(association)})

    def pair_patterns(self, association: AssociationConfig, buckets: Iterable[int],
                      members: tuple[int, int] | None = None) -> PairPatterns:
        layout = layout_of(association)
        wanted = set(buckets)
        chosen = [held for (_, _, bucket, _), held in self._live_pairs(association).items() if bucket in wanted]
        cells = [(h.cells, h.counts) for h in chosen if h.cells is not None and h.counts is not None]
        return read_patterns(layout, cells, [h.rows for h in chosen if h.rows is not None], members)

    def pair_segments(self, association: AssociationConfig, topic: str, partition: int, bucket: int) -> list[int]:
        """Bytes of each rows segment of one partition's pair statistic in one bucket, in segment order."""
        held = {parse_form(form)[1]: h.rows.nbytes for (t, p, b, form), h in self._live_pairs(association).items()
                if (t, p, b) == (topic, partition, bucket) and h.rows is not None}
        return [held[g] for g in sorted(held)]

    # ------------------------------------------------------------------ published estimates

    def publish_estimate(self, metric: str, window: str, body: str, history: int) -> None:
        _publish(self._latest, self._estimates, ("estimate", metric, window), body, history)

    def retract_estimate(self, metric: str, window: str) -> bool:
        return self._latest.pop(("estimate", metric, window), None) is not None

    def latest_estimate(self, metric: str, window: str = "all") -> dict[str, Any] | None:
        return _decoded(self._latest.get(("estimate", metric, window)))

    def estimate_history(self, metric: str, window: str = "all") -> list[dict[str, Any]]:
        return [json.loads(body) for body in self._estimates.get(("estimate", metric, window), [])]

    def publish_joint(self, association: str, window: str, body: str, history: int) -> None:
        _publish(self._latest, self._estimates, ("joint", association, window), body, history)

    def retract_joint(self, association: str, window: str) -> bool:
        return self._latest.pop(("joint", association, window), None) is not None

    def latest_joint(self, association: str, window: str = "all") -> dict[str, Any] | None:
        return _decoded(self._latest.get(("joint", association, window)))

    def joint_history(self, association: str, window: str = "all") -> list[dict[str, Any]]:
        return [json.loads(body) for body in self._estimates.get(("joint", association, window), [])]

    def record_decode(self, failed: Iterable[str], when: float | None = None) -> None:
        self._last_decode = json.dumps({"time": time.time() if when is None else when, "failed": list(failed)})

    def last_decode(self) -> dict[str, Any] | None:
        return None if self._last_decode is None else dict(json.loads(self._last_decode))

    def publish_dictionary(self, name: str, body: str, history: int) -> None:
        _check_readable(body)
        self.publish_estimate(name, "all", body, history)
        self._dictionaries.add(name)

    def dictionaries(self) -> dict[str, dict[str, Any]]:
        held = {name: self.latest_estimate(name, "all") for name in sorted(self._dictionaries)}
        return {name: body for name, body in held.items() if body is not None}

    def add_string_truth(self, name: str, counts: Mapping[str, int]) -> None:
        held = self._string_truth.setdefault(name, {})
        for text, count in counts.items():
            if count:
                held[text] = held.get(text, 0) + int(count)

    def string_truth(self, name: str) -> dict[str, int] | None:
        held = self._string_truth.get(name)
        return dict(held) if held else None

    def add_truth(self, name: str, counts: np.ndarray) -> None:
        counts = np.asarray(counts, dtype=np.int64)
        held = self._truth.get(name)
        self._truth[name] = counts.copy() if held is None or held.shape != counts.shape else held + counts

    def truth(self, name: str) -> np.ndarray | None:
        held = self._truth.get(name)
        return None if held is None else held.copy()


def _publish(latest: dict[tuple[str, str, str], str], histories: dict[tuple[str, str, str], list[str]],
             key: tuple[str, str, str], body: str, history: int) -> None:
    """``body`` as the latest under ``key`` and first in its history, keeping ``history`` (as Redis does)."""
    if history < 1:
        raise ValueError(f"history must keep at least one estimate, got {history}")
    _check_readable(body)
    latest[key] = body
    past = histories.setdefault(key, [])
    past.insert(0, body)
    del past[history:]


def _check_readable(body: str) -> None:
    """Refuse a body that reading it back would fail on (Redis would take anything): JSON as the standard library
    reads it (``NaN`` included), checked by orjson first (a fifth of the time; it refuses ``NaN``)."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        json.loads(body)


def _merge_into(statistics: dict[tuple[str, int, int, str], PairIncrement], key: tuple[str, int, int, str],
                increment: PairIncrement) -> None:
    """``increment`` added to the statistic held under ``key`` (a new expiry replaces the held one, as EXPIREAT)."""
    held = statistics.get(key)
    merged = increment if held is None else merge_increments(held, increment)
    statistics[key] = PairIncrement(merged.cells, merged.counts, merged.rows, increment.expire_at or merged.expire_at)


def _decoded(body: str | None) -> dict[str, Any] | None:
    return None if body is None else dict(json.loads(body))


def _padded(flat: np.ndarray, size: int) -> np.ndarray:
    """``flat`` cut or padded with zeros to ``size`` cells (Redis reads missing trailing cells as 0)."""
    if flat.size >= size:
        return flat[:size].copy()
    out = np.zeros(size, dtype=np.int64)
    out[: flat.size] = flat
    return out
