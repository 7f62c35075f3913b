"""The sketch-store contract that consumers write and the decoder reads.

A store keeps, per Kafka partition, the next offset to apply, stats counters, additive count sketches
per (metric, fingerprint, time bucket), and the pair statistics of associations per (association,
fingerprint, time bucket) (:mod:`ldpstream.store.pair_layout`: sparse cell counts for symbol members, packed
report tuples otherwise). :meth:`SketchStore.apply` is a compare-and-set: a
:class:`PartitionBatch` is applied whole, with its next offset, only when the store still holds the offset
the batch expects; otherwise nothing is written. That is the exactly-once argument of
``docs/math/exactly-once.md``. Implementations: :class:`~ldpstream.store.redis_store.RedisSketchStore` and
:class:`~ldpstream.store.memory_store.InMemorySketchStore`; ``tests/contracts`` runs one suite on both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.registry import AssociationConfig

#: The bucket number of the all-time rollup sketch (real buckets are ≥ 0).
ALL_TIME = -1

#: Cells one sketch may hold: a Redis string holds at most 2^32 bits, 64 bits a cell.
MAX_CELLS = 2**26
#: Largest cell index of a pair statistic (cells are exact integers in Redis' Lua numbers).
MAX_PAIR_CELL = 2**53 - 1
#: Bytes one batch may append to a packed pair statistic, and bytes one segment of such a statistic holds by
#: default (Redis strings hold 512 MiB; a batch that would pass it fills the last segment and spills into the
#: next ones, :mod:`ldpstream.store.pair_layout`).
MAX_PAIR_APPEND = 2**28
MAX_PAIR_BYTES = 2**29 - 2**20
#: The latest expiry a batch may set (9999-12-31T23:59:59Z); Redis refuses expiries that overflow in ms.
MAX_EXPIRE_AT = 253_402_300_799


@dataclass(frozen=True)
class SketchKey:
    """Which sketch an increment goes to (``bucket`` = :data:`ALL_TIME` for the all-time rollup)."""

    metric: str
    fingerprint: int
    bucket: int


@dataclass(frozen=True)
class PairKey:
    """Which pair statistic an increment goes to: an association's, in one time bucket (there is no all-time one)."""

    association: str
    fingerprint: int
    bucket: int


@dataclass(frozen=True)
class PairIncrement:
    """What one batch adds to a pair statistic (:mod:`ldpstream.store.pair_layout` says which form an
    association uses): ``cells`` (distinct, ``(M,)`` int64 ≥ 0) with their ``counts`` (``(M,)`` int64 ≥ 1), or
    ``rows`` (``(n, R)`` uint8, one packed report tuple a row, appended). ``expire_at``: Unix time at which the
    statistic expires (0: never)."""

    cells: np.ndarray | None = None
    counts: np.ndarray | None = None
    rows: np.ndarray | None = None
    expire_at: int = 0

    @property
    def kind(self) -> str:
        return "rows" if self.rows is not None else "cells"


@dataclass
class PartitionBatch:
    """Everything one Kafka partition batch changes: sketch increments, stats, and its offsets."""

    topic: str
    partition: int
    #: The partition's next offset the consumer expects the store to hold (None: nothing stored yet).
    expected_offset: int | None
    #: The next offset after the batch's last message.
    next_offset: int
    increments: dict[SketchKey, np.ndarray] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    #: Unix time at which a sketch key expires (keys absent here never do).
    expire_at: dict[SketchKey, int] = field(default_factory=dict)
    #: Increments of associations' pair statistics, applied in the same compare-and-set.
    pairs: dict[PairKey, PairIncrement] = field(default_factory=dict)


@dataclass(frozen=True)
class ApplyResult:
    applied: bool
    #: The partition's next offset after the call: ``batch.next_offset`` when applied; what the store holds
    #: (where the consumer must seek; None: nothing, start from the beginning) when refused.
    next_offset: int | None


@dataclass(frozen=True)
class MetricSnapshot:
    """All sketches of one metric and fingerprint, read at one instant: bucket → summed (C, W) counts, and
    the all-time rollup (None where no consumer has written one)."""

    buckets: dict[int, np.ndarray]
    total: np.ndarray | None = None

    def all_time(self, shape: tuple[int, int]) -> np.ndarray:
        """Every report ever: the rollup, or the sum of the buckets where there is none."""
        return self.total if self.total is not None else sum_buckets(self, None, shape)


def check_batch(batch: PartitionBatch) -> None:
    """Refuse, before anything is written, a batch no store could apply whole: offsets that are not
    non-negative integers, sketches wider than :data:`MAX_CELLS`, expiries outside ``0..MAX_EXPIRE_AT``.

    Raises :class:`ValueError` naming the problem. Every store calls it first: a store that failed
    half-way through a batch would count the applied half again when the batch is retried.
    """
    if batch.next_offset < 0 or (batch.expected_offset is not None and batch.expected_offset < 0):
        raise ValueError(f"batch of {batch.topic}[{batch.partition}]: offsets must be non-negative")
    for key, counts in batch.increments.items():
        if np.size(counts) > MAX_CELLS:
            raise ValueError(f"sketch {key} has {np.size(counts):,} cells; a sketch holds at most {MAX_CELLS:,}")
        expire_at = batch.expire_at.get(key, 0)
        if not 0 <= expire_at <= MAX_EXPIRE_AT:
            raise ValueError(f"sketch {key}: expiry {expire_at} is outside 0..{MAX_EXPIRE_AT} (Unix seconds)")
    for pair_key, increment in batch.pairs.items():
        if pair_key.bucket < 0:
            raise ValueError(f"pair statistic {pair_key}: buckets are ≥ 0 (there is no all-time pair statistic)")
        if not 0 <= increment.expire_at <= MAX_EXPIRE_AT:
            raise ValueError(f"pair statistic {pair_key}: expiry {increment.expire_at} is outside 0..{MAX_EXPIRE_AT}")
        if increment.rows is not None:
            if increment.rows.dtype != np.uint8 or increment.rows.ndim != 2 or increment.rows.shape[1] == 0:
                raise ValueError(f"pair statistic {pair_key}: rows must be a 2-D (n, R) uint8 array")
            if increment.rows.size > MAX_PAIR_APPEND:
                raise ValueError(f"pair statistic {pair_key}: {increment.rows.size:,} bytes in one batch; at most "
                                 f"{MAX_PAIR_APPEND:,}")
        else:
            cells, cell_counts = increment.cells, increment.counts
            if cells is None or cell_counts is None or cells.shape != cell_counts.shape or cells.ndim != 1:
                raise ValueError(f"pair statistic {pair_key}: cells and counts must be 1-D arrays of one length")
            if cells.size and (cells.min() < 0 or cell_counts.min() < 1 or cells.max() > MAX_PAIR_CELL):
                raise ValueError(f"pair statistic {pair_key}: cells must be in 0..2^53 and counts ≥ 1")


class SketchStore(Protocol):
    """What consumers, the decoder and ``status`` need of a store."""

    def check_safe(self) -> None:
        """Raise :class:`~ldpstream.errors.ServiceError` when the store could lose part of its state on its
        own (a Redis that evicts keys under memory pressure could drop an offset but keep its counts, and the
        replayed batch would count twice). Consumers and the decoder call it before they start."""
        ...

    def apply(self, batch: PartitionBatch) -> ApplyResult:
        """Apply ``batch`` whole if the stored next offset equals ``batch.expected_offset``; else refuse."""
        ...

    def next_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int | None]:
        """The stored next offset of each partition (None: nothing applied yet)."""
        ...

    def mark_rebuild(self, topic: str, partition: int, until_offset: int) -> None:
        """Record that the partition's counts are being re-applied from Kafka (the store lost them) until its
        next offset reaches ``until_offset`` (the larger target is kept); the apply that reaches it clears it."""
        ...

    def rebuilding(self, topic: str) -> dict[int, int]:
        """The partitions of ``topic`` being rebuilt, with the next offset each must reach."""
        ...

    def snapshot(self, metric: str, fingerprint: int, shape: tuple[int, int],
                 expired_before: int | None = None) -> MetricSnapshot:
        """Every sketch of the metric as of one instant. Buckets below ``expired_before`` have expired: they
        are left out, and forgotten (later snapshots do not show them either)."""
        ...

    def stats(self, topic: str, partitions: Iterable[int]) -> dict[str, int]:
        """The stats counters of the partitions, summed."""
        ...

    def pair_buckets(self, association: AssociationConfig) -> list[int]:
        """The time buckets (sorted) in which the association's pair statistic holds reports and has not
        expired, over every partition."""
        ...

    def pair_patterns(self, association: AssociationConfig, buckets: Iterable[int],
                      members: tuple[int, int] | None = None) -> PairPatterns:
        """The distinct report pairs of two members of the association over ``buckets`` (summed over partitions
        and over every key of the statistic: its cells, its rows segments), read at one instant; buckets without
        a statistic contribute nothing. ``members``: the positions ``(i, j)`` of the members read as X and Y
        (``(0, 1)`` by default for an association of two; required for one of more, whose stored tuples are
        projected onto the two)."""
        ...


class EstimateStore(Protocol):
    """Where the decoder publishes estimates (the latest one and a bounded history per metric and window; the
    same for the joint estimate of each association and window) and its last run, and where ``watch`` and
    ``status`` read them."""

    def publish_estimate(self, metric: str, window: str, body: str, history: int) -> None:
        """Store ``body`` (JSON) as the latest estimate and push it on the history, keeping ``history``."""
        ...

    def retract_estimate(self, metric: str, window: str) -> bool:
        """Drop the latest estimate (the history stays); True when there was one."""
        ...

    def latest_estimate(self, metric: str, window: str = "all") -> dict[str, Any] | None:
        """The latest published estimate, decoded from JSON (None when none)."""
        ...

    def estimate_history(self, metric: str, window: str = "all") -> list[dict[str, Any]]:
        """The published estimates, newest first."""
        ...

    def publish_joint(self, association: str, window: str, body: str, history: int) -> None:
        """Store ``body`` (the JSON of a joint estimate, :class:`ldpstream.decoder.published.PublishedJoint`) as
        the association's latest joint estimate of ``window`` and push it on its history, keeping ``history``."""
        ...

    def retract_joint(self, association: str, window: str) -> bool:
        """Drop the latest joint estimate (the history stays); True when there was one."""
        ...

    def latest_joint(self, association: str, window: str = "all") -> dict[str, Any] | None:
        """The latest published joint estimate, decoded from JSON (None when none)."""
        ...

    def joint_history(self, association: str, window: str = "all") -> list[dict[str, Any]]:
        """The published joint estimates, newest first."""
        ...

    def record_decode(self, failed: Iterable[str], when: float | None = None) -> None:
        """Record a decoder pass that ended at ``when`` (now by default) and the metrics that failed."""
        ...

    def last_decode(self) -> dict[str, Any] | None:
        """``{"time": ..., "failed": [...]}`` of the last recorded pass (None when none)."""
        ...

    def publish_dictionary(self, name: str, body: str, history: int) -> None:
        """Store ``body`` (JSON, schema ``dictionary/2``: what ``ldpstream discover --publish NAME`` found) where
        the decoder publishes a live discovery metric's dictionary, as the latest estimate of ``name`` over window
        ``all`` pushed on its history (keeping ``history``), and list ``name`` among the published dictionaries."""
        ...

    def dictionaries(self) -> dict[str, dict[str, Any]]:
        """The latest estimate (window ``all``) of every dictionary :meth:`publish_dictionary` listed, by name
        (a listed name without an estimate is left out)."""
        ...


class StatusStore(SketchStore, EstimateStore, Protocol):
    """A store that keeps both sketches and published estimates (both implementations do): what the
    decoder and ``status`` take."""


def sum_buckets(snapshot: MetricSnapshot, buckets: Iterable[int] | None = None,
                shape: tuple[int, int] | None = None) -> np.ndarray:
    """Sum the sketches of the given buckets (all when None); sketches are additive."""
    chosen: Mapping[int, np.ndarray] = snapshot.buckets if buckets is None else {
        b: snapshot.buckets[b] for b in buckets if b in snapshot.buckets}
    if not chosen:
        if shape is None:
            raise ValueError("no buckets to sum and no shape given")
        return np.zeros(shape, dtype=np.int64)
    return np.asarray(np.sum(list(chosen.values()), axis=0), dtype=np.int64)
