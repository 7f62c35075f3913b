"""The reports of a population of discovery clients, encoded in one vectorized pass (simulation), and what the
aggregator keeps of them (docs/math/dictionary.md, "Collection").

:func:`draw_slots` draws each client's two distinct n-gram slots (uniform over ordered pairs);
:func:`encode_population` runs the mechanisms' batch encoders
(:meth:`~ldpstream.mechanisms.base.Mechanism.encode_clients`) for the full strings and the n-grams;
:class:`DiscoveryCollection` is the aggregate the decoder reads: one bit sketch of the full reports, one per
n-gram slot, and for every pair of slots the distinct report pairs of the clients that sent that pair
(:class:`~ldpstream.estimators.joint.pairs.PairPatterns`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.randomness import Randomness

from ..joint.pairs import PairPatterns
from .scheme import DiscoveryScheme

__all__ = ["ClientReports", "DiscoveryCollection", "draw_slots", "encode_population"]


def draw_slots(n: int, slots: int, rng: Randomness) -> np.ndarray:
    """``(n, 2)`` int64: two distinct slots per client, uniform over the ``slots·(slots − 1)`` ordered pairs
    (the second is the first shifted by 1 + a uniform draw from ``0..slots − 2``, modulo ``slots``)."""
    if slots < 2:
        raise ParameterError("need at least two slots")
    first = np.asarray(rng.integers(0, slots, size=n), dtype=np.int64).reshape(n)
    shift = np.asarray(rng.integers(0, slots - 1, size=n), dtype=np.int64).reshape(n)
    return np.stack([first, (first + 1 + shift) % slots], axis=1)


@dataclass(frozen=True)
class ClientReports:
    """Reports of n clients: their ``(n, 2)`` slots, the n-gram reports' ``(n, 2)`` cohorts and ``(n, 2, k_n)``
    bits, the full reports' ``(n,)`` cohorts and ``(n, k_f)`` bits."""

    slots: np.ndarray
    ngram_cohorts: np.ndarray
    ngram_bits: np.ndarray
    full_cohorts: np.ndarray
    full_bits: np.ndarray


def encode_population(scheme: DiscoveryScheme, strings: Sequence[str], value_index: np.ndarray,
                      rng: Randomness) -> ClientReports:
    """One report triple per client holding ``strings[value_index[i]]`` (randomness from ``rng``: seeded for
    simulation only), vectorized: n-gram reports against the table of all |Σ|^n n-grams, full reports
    against the table of ``strings`` (padded)."""
    shape = scheme.shape
    index = np.asarray(value_index, dtype=np.int64).reshape(-1)
    n = index.size
    grams = shape.ngram_indices(strings)  # (S, k)
    slots = draw_slots(n, shape.slots, rng)
    ngram_table = scheme.ngram.value_table(shape.all_ngrams())
    gram_index = grams[index[:, None], slots]  # (n, 2)
    cohorts, bits = scheme.ngram.encode_clients(gram_index.reshape(-1), rng, ngram_table)
    full_table = scheme.full.value_table([shape.padded(s) for s in strings])
    full_cohorts, full_bits = scheme.full.encode_clients(index, rng, full_table)
    return ClientReports(slots, np.asarray(cohorts).reshape(n, 2), np.asarray(bits).reshape(n, 2, -1),
                         np.asarray(full_cohorts), np.asarray(full_bits))


@dataclass(frozen=True)
class DiscoveryCollection:
    """What the decoder reads: ``full_sketch`` ``(C, k_f + 1)``, ``ngram_sketches`` ``(k, C, k_n + 1)`` (slot j:
    every n-gram report sent for slot j) and ``pairs[(a, b)]`` (a < b) the report pairs of the clients whose
    two slots were a and b (X = slot a, Y = slot b)."""

    full_sketch: np.ndarray
    ngram_sketches: np.ndarray
    pairs: dict[tuple[int, int], PairPatterns]

    @property
    def clients(self) -> int:
        return int(self.full_sketch[:, 0].sum())

    @classmethod
    def fold(cls, scheme: DiscoveryScheme, reports: ClientReports) -> DiscoveryCollection:
        """Aggregate a batch of reports (vectorized: one sketch per slot, one pattern collapse per slot pair)."""
        k = scheme.shape.slots
        slots = np.asarray(reports.slots, dtype=np.int64)
        lo, hi = slots.min(axis=1), slots.max(axis=1)
        swap = slots[:, 0] > slots[:, 1]
        rows = np.arange(len(slots))
        first, second = swap.astype(np.int64), 1 - swap.astype(np.int64)  # column of slot lo, of slot hi
        coh_lo, coh_hi = reports.ngram_cohorts[rows, first], reports.ngram_cohorts[rows, second]
        bits_lo, bits_hi = reports.ngram_bits[rows, first], reports.ngram_bits[rows, second]
        flat_slots = slots.reshape(-1)
        flat_cohorts = reports.ngram_cohorts.reshape(-1)
        flat_bits = reports.ngram_bits.reshape(len(flat_slots), -1)
        sketches = np.stack([scheme.ngram.sketch(flat_cohorts[flat_slots == j], flat_bits[flat_slots == j])
                             for j in range(k)])
        pair_key = lo * k + hi
        order = np.argsort(pair_key, kind="stable")
        bounds = np.searchsorted(pair_key[order], np.arange(k * k + 1))
        pairs: dict[tuple[int, int], PairPatterns] = {}
        for a in range(k):
            for b in range(a + 1, k):
                members = order[bounds[a * k + b]:bounds[a * k + b + 1]]
                pairs[(a, b)] = PairPatterns.from_pairs(coh_lo[members], bits_lo[members].astype(np.uint8),
                                                        coh_hi[members], bits_hi[members].astype(np.uint8))
        full = scheme.full.sketch(reports.full_cohorts, reports.full_bits)
        return cls(np.asarray(full, dtype=np.int64), sketches.astype(np.int64), pairs)

    @classmethod
    def combine(cls, parts: Sequence[DiscoveryCollection]) -> DiscoveryCollection:
        """The collection of several batches of one scheme: sketches added, report pairs re-collapsed once."""
        if not parts:
            raise ParameterError("nothing to combine")
        first = parts[0]
        if any(p.ngram_sketches.shape != first.ngram_sketches.shape or set(p.pairs) != set(first.pairs)
               for p in parts):
            raise ParameterError("collections of different schemes")
        pairs = {}
        for key in first.pairs:
            group = [p.pairs[key] for p in parts]
            pairs[key] = PairPatterns.from_pairs(
                np.concatenate([g.cohort_x for g in group]), np.concatenate([g.reports_x for g in group]),
                np.concatenate([g.cohort_y for g in group]), np.concatenate([g.reports_y for g in group]),
                np.concatenate([g.counts for g in group]))
        return cls(sum((p.full_sketch for p in parts[1:]), first.full_sketch.copy()),
                   sum((p.ngram_sketches for p in parts[1:]), first.ngram_sketches.copy()), pairs)

    def memory_bytes(self) -> int:
        """Bytes held in memory by the sketches and the report pairs."""
        total = self.full_sketch.nbytes + self.ngram_sketches.nbytes
        for p in self.pairs.values():
            total += p.cohort_x.nbytes + p.cohort_y.nbytes + p.reports_x.nbytes + p.reports_y.nbytes + p.counts.nbytes
        return int(total)
