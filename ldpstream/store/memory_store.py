"""The sketch store in process memory: the twin of the Redis store that unit tests and offline tools use.
It keeps the same contract (:mod:`ldpstream.store.contract`), compare-and-set included."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from ldpstream.store.contract import ALL_TIME, ApplyResult, MetricSnapshot, PartitionBatch, check_batch


class InMemorySketchStore:
    """The same contract in process memory: the twin unit tests use instead of Redis."""

    def __init__(self) -> None:
        self._estimates: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._latest: dict[tuple[str, str], dict[str, Any]] = {}
        self._last_decode: dict[str, Any] | None = None
        self._offsets: dict[tuple[str, int], int] = {}
        self._stats: dict[tuple[str, int], dict[str, int]] = {}
        self._sketches: dict[tuple[str, int], dict[int, np.ndarray]] = {}

    def apply(self, batch: PartitionBatch) -> ApplyResult:
        check_batch(batch)
        where = (batch.topic, batch.partition)
        stored = self._offsets.get(where)
        if stored != batch.expected_offset:
            return ApplyResult(False, stored)
        stats = self._stats.setdefault(where, {})
        for name, value in batch.stats.items():
            stats[name] = stats.get(name, 0) + int(value)
        for key, counts in batch.increments.items():
            per_bucket = self._sketches.setdefault((key.metric, key.fingerprint), {})
            current = per_bucket.get(key.bucket)
            per_bucket[key.bucket] = counts.astype(np.int64) if current is None else current + counts
        self._offsets[where] = batch.next_offset
        return ApplyResult(True, batch.next_offset)

    def next_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int | None]:
        return {p: self._offsets.get((topic, p)) for p in partitions}

    def snapshot(self, metric: str, fingerprint: int, shape: tuple[int, int],
                 expired_before: int | None = None) -> MetricSnapshot:
        stored = self._sketches.get((metric, fingerprint), {})
        buckets = {b: c.reshape(shape).copy() for b, c in stored.items()
                   if b != ALL_TIME and (expired_before is None or b >= expired_before)}
        total = stored.get(ALL_TIME)
        return MetricSnapshot(buckets, None if total is None else total.reshape(shape).copy())

    def stats(self, topic: str, partitions: Iterable[int]) -> dict[str, int]:
        total: dict[str, int] = {}
        for p in partitions:
            for name, value in self._stats.get((topic, p), {}).items():
                total[name] = total.get(name, 0) + value
        return total

    # ------------------------------------------------------------------ published estimates

    def publish_estimate(self, metric: str, window: str, body: str, history: int) -> None:
        value = json.loads(body)
        self._latest[(metric, window)] = value
        past = self._estimates.setdefault((metric, window), [])
        past.insert(0, value)
        del past[history:]

    def retract_estimate(self, metric: str, window: str) -> bool:
        return self._latest.pop((metric, window), None) is not None

    def latest_estimate(self, metric: str, window: str = "all") -> dict[str, Any] | None:
        return self._latest.get((metric, window))

    def estimate_history(self, metric: str, window: str = "all") -> list[dict[str, Any]]:
        return list(self._estimates.get((metric, window), []))

    def record_decode(self, failed: Iterable[str], when: float | None = None) -> None:
        self._last_decode = {"time": time.time() if when is None else when, "failed": list(failed)}

    def last_decode(self) -> dict[str, Any] | None:
        return self._last_decode
