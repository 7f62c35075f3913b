"""Feeding associated report pairs to a store as the consumers do (the decoder's joint tests): version-2
records through :func:`ldpstream.consumers.fold.fold_messages` into one compare-and-set per batch."""

from __future__ import annotations

import numpy as np

from ldpstream.consumers.fold import fold_messages
from ldpstream.device import privatize_population
from ldpstream.registry import Registry
from ldpstream.store import InMemorySketchStore, PartitionBatch
from ldpstream.wire import encode_association_records, payloads_from_reports


def associated_values(n: int, kx: int, ky: int, on: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n clients' (x, y): 85% of x on ``on`` (decreasing weights), the rest uniform over 0..kx-1; y is
    ``x mod ky`` for 70% of the clients (a strong association), uniform over 0..ky-1 for the others."""
    rng = np.random.default_rng(seed)
    p = np.full(kx, 0.15 / kx)
    weights = np.arange(len(on), 0, -1, dtype=float)
    p[on] += 0.85 * weights / weights.sum()
    x = rng.choice(kx, size=n, p=p)
    y = np.where(rng.random(n) < 0.7, x % ky, rng.integers(0, ky, size=n))
    return x, y


class JointFeeder:
    """Privatizes both members' values of each client, encodes one version-2 record per client, folds them as
    a consumer does and applies the batch (marginal sketches and pair statistic together) to partition 0."""

    def __init__(self, registry: Registry, store: InMemorySketchStore, now: int) -> None:
        self.registry, self.store, self.now, self.offset = registry, store, now, None

    def add(self, association_name: str, x: np.ndarray, y: np.ndarray, event_time: int, seed: int) -> None:
        association = self.registry.associations[association_name]
        rng = np.random.default_rng(seed)
        privatized = [privatize_population(metric, values, rng)
                      for metric, values in zip(association.metrics, (x, y), strict=True)]
        rows = encode_association_records(
            association.id, association.fingerprint, np.column_stack([c for c, _ in privatized]),
            [payloads_from_reports(m.mechanism, r) for m, (_, r) in zip(association.metrics, privatized,
                                                                        strict=True)],
            event_time=event_time)
        folded = fold_messages([rows.tobytes()], np.zeros(1, dtype=np.int64), self.registry, now=self.now)
        assert folded.associated == {association_name: len(x)}, folded.rejections
        next_offset = (self.offset or 0) + 1
        assert self.store.apply(PartitionBatch(association.topic, 0, self.offset, next_offset, folded.increments,
                                               folded.stats(), folded.expire_at, folded.pairs)).applied
        self.offset = next_offset
