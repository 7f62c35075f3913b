"""Subset selection (SS), Ye & Barg 2018 §III and Wang et al. 2016 (docs/math/mechanisms.md#subset-selection).

A client holding x in ``0..k-1`` reports a subset S of ``d`` symbols, drawn with probability proportional to
e^ε when x ∈ S and to 1 otherwise: P(S | x) = e^ε / Z or 1 / Z with Z = C(k−1, d−1) e^ε + C(k−1, d). Two inputs
x, x' give likelihood ratios P(S | x)/P(S | x') ∈ {e^{−ε}, 1, e^ε}: ε-LDP, tight. The report travels as k bits
(bit j set iff j ∈ S), so it folds into the same ``(1, k + 1)`` count sketch as k-RAPPOR, and bit j is set with
probability q* = d e^ε/(d e^ε + k − d) when j = x and p* = (d − q*)/(k − 1) otherwise
(:func:`~ldpstream.mechanisms.rates.subset_rates`). The subset size ``d`` defaults to the one minimizing the
estimator's risk (:func:`~ldpstream.mechanisms.rates.optimal_subset_size`, docs/math/mechanisms.md#the-subset-size).
With d = 1 the mechanism is k-RR.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms._common import (
    as_index_array,
    bernoulli,
    check_int,
    check_mechanism_fields,
    ensure_generator,
    population_by_cohort,
)
from ldpstream.mechanisms.base import BitMechanism, DirectEncoding
from ldpstream.mechanisms.longitudinal import PermanentOnly
from ldpstream.mechanisms.randomness import Randomness
from ldpstream.mechanisms.rates import optimal_subset_size, subset_rates
from ldpstream.mechanisms.unary import UnaryEncoding

#: Cells drawn at a time by :func:`subset_bits` (bounds memory for large batches).
_CHUNK_CELLS = 1 << 22


def flip_uniform(block: np.ndarray, rows: np.ndarray, counts: np.ndarray, state: bool, rng: Randomness) -> None:
    """In each row ``rows[i]`` of ``block``, turn ``counts[i]`` cells that hold ``state`` into ``not state``, chosen
    uniformly among the cells holding ``state`` (in place).

    Rounds: every row still short draws uniform columns (about 1.5 times as many as it needs hits, given the
    share of its cells holding ``state``); in the order drawn, the first distinct draws landing on ``state`` cells
    are kept, up to what the row still needs, and the row draws again if it got too few. Each kept cell is uniform
    among the row's remaining ``state`` cells and the rule treats those cells symmetrically, so the cells flipped
    are a uniform subset of that size."""
    k = block.shape[1]
    missing = np.asarray(counts, dtype=np.int64).copy()
    while True:
        live = np.flatnonzero(missing > 0)
        if live.size == 0:
            return
        held = np.add.reduce(block[rows[live]].view(np.uint8), axis=1, dtype=np.int64)
        held = held if state else k - held
        draws = np.ceil(1.5 * missing[live] * k / np.maximum(held, 1)).astype(np.int64) + 4
        owner = np.repeat(live, draws)  # index into rows; draws of a row are consecutive, in draw order
        cols = np.asarray(rng.integers(0, k, size=owner.size), dtype=np.int64).reshape(owner.size)
        hit = np.flatnonzero(block[rows[owner], cols] == state)
        _, first = np.unique(owner[hit] * k + cols[hit], return_index=True)
        kept = hit[np.sort(first)]  # first occurrence of each distinct hit, in draw order (grouped by row)
        who = owner[kept]
        rank = np.arange(kept.size) - np.searchsorted(who, who)
        kept, who = kept[rank < missing[who]], who[rank < missing[who]]
        block[rows[who], cols[kept]] = not state
        missing -= np.bincount(who, minlength=rows.size)


def subset_bits(symbols: np.ndarray, k: int, d: int, q_star: float, rng: Randomness) -> np.ndarray:
    """``(n, k)`` bool reports of subset selection for true ``symbols`` (module docstring).

    The true symbol is in the subset with probability exactly q* (:func:`~ldpstream.mechanisms._common.bernoulli`).
    The other ``d − [x ∈ S]`` members must be a uniform subset of the k − 1 other symbols: each other symbol is
    first taken independently with probability p* = (d − q*)/(k − 1) (one random byte each), then a row that took
    too many releases a uniform subset of the surplus among the ones it took, and a row that took too few takes a
    uniform subset of the shortfall among the ones it did not (:func:`flip_uniform`; about sqrt(k) of them a row).
    Every step treats the other symbols symmetrically, so the resulting set of the right size is uniform among such
    sets: exact, at about one random byte per symbol.
    """
    n = symbols.shape[0]
    out = np.empty((n, k), dtype=bool)
    if n == 0:
        return out
    include = bernoulli(q_star, n, rng)
    p_star = (d - q_star) / (k - 1)
    rows = max(1, _CHUNK_CELLS // k)
    for start in range(0, n, rows):
        x = symbols[start:start + rows]
        m = x.shape[0]
        r = np.arange(m)
        block = out[start:start + m]
        bernoulli(p_star, m * k, rng, out=block.reshape(-1))
        block[r, x] = False  # the true symbol is never another member: not taken while others are released...
        taken = np.add.reduce(block.view(np.uint8), axis=1, dtype=np.int64)
        surplus = taken - (d - include[start:start + m].astype(np.int64))
        over = np.flatnonzero(surplus > 0)
        flip_uniform(block, over, surplus[over], True, rng)
        block[r, x] = True  # ... and marked taken while others are added
        under = np.flatnonzero(surplus < 0)
        flip_uniform(block, under, -surplus[under], False, rng)
        block[r, x] = include[start:start + m]
    return out


def subset_sketch_from_true_counts(
    true_counts: np.ndarray, d: int, q_star: float, rng: np.random.Generator
) -> np.ndarray:
    """The ``(k,)`` column sums of subset-selection reports of a population with ``true_counts[x]`` clients
    holding x, exact in distribution, at cost O(k·d) (docs/math/mechanisms.md#simulating-subset-selection).

    A report is, with probability a = (q* − d/k)/(1 − d/k), a uniform d-subset *containing* x ("anchored"),
    otherwise a uniform d-subset of all k symbols (independent of x): the mixture has P(x ∈ S) = q* and, given
    x ∈ S or x ∉ S, uniform other members, which is the channel. Column sums of many uniform subsets are drawn
    symbol by symbol: a report that still needs r members among ``rem`` remaining candidates takes the current
    symbol with probability r/rem, so reports are grouped by r and each group's takers are one binomial draw.
    Anchored reports exclude their own symbol from their candidates until it comes up; they are exchangeable
    until then, so the ones whose symbol it is are a multivariate hypergeometric draw from their groups.
    """
    counts = np.asarray(true_counts, dtype=np.int64)
    k = counts.shape[0]
    n = int(counts.sum())
    a = (q_star - d / k) / (1.0 - d / k)
    anchored = rng.binomial(counts, min(max(a, 0.0), 1.0))
    waiting = np.zeros(d, dtype=np.int64)  # anchored, own symbol not yet reached, by members still needed
    waiting[d - 1] = anchored.sum()
    free = np.zeros(d + 1, dtype=np.int64)  # unanchored, or anchored past their symbol, by members still needed
    free[d] = n - anchored.sum()
    r_wait = np.arange(d, dtype=np.float64)
    r_free = np.arange(d + 1, dtype=np.float64)
    out = np.empty(k, dtype=np.int64)
    for j in range(k):
        rem = k - j
        own = int(anchored[j])
        moved = rng.multivariate_hypergeometric(waiting, own) if own else None
        if moved is not None:  # their own symbol: counted, not a candidate for them; free from the next one on
            waiting -= moved
        took_w = rng.binomial(waiting, np.minimum(r_wait / max(rem - 1, 1), 1.0))
        took_f = rng.binomial(free, np.minimum(r_free / rem, 1.0))
        out[j] = own + took_w.sum() + took_f.sum()
        waiting -= took_w
        waiting[:-1] += took_w[1:]
        free -= took_f
        free[:-1] += took_f[1:]
        if moved is not None:
            free[:d] += moved
    return out


@dataclass(frozen=True)
class SubsetSelection(UnaryEncoding, PermanentOnly, DirectEncoding, BitMechanism):
    """Subset selection over ``0..k-1`` at ``epsilon``, subsets of ``subset_size`` symbols (default: the risk
    minimizer, :func:`~ldpstream.mechanisms.rates.optimal_subset_size`). Reports are ``(k,)`` bool.

    ``memoize``: as :class:`~ldpstream.mechanisms.longitudinal.PermanentOnly`."""

    name: ClassVar[str] = "ss"

    k: int
    epsilon: float
    subset_size: int | None = None
    memoize: bool = True
    epsilon_permanent: float | None = None

    def __post_init__(self) -> None:
        check_mechanism_fields(self)
        if self.subset_size is not None:
            object.__setattr__(self, "subset_size", check_int("subset_size", self.subset_size, 1, self.k - 1))
        self.check_longitudinal()

    @classmethod
    def examples(cls) -> tuple[SubsetSelection, ...]:
        return (cls(k=5, epsilon=1.5, subset_size=2), cls(k=6, epsilon=0.5))

    def report_channel(self, table: np.ndarray | None = None) -> np.ndarray:
        """P(S | x) = e^ε/Z when x ∈ S, 1/Z otherwise, for the d-subsets S (output o: bit j set iff j ∈ S), with
        Z = C(k − 1, d − 1) e^ε + C(k − 1, d); 0 for the outputs of another size. ``table`` is ignored."""
        k, d = self.k, self.d
        members = (np.arange(2**k)[:, None] >> np.arange(k)[None, :]) & 1 == 1  # (2^k, k)
        size_d = members.sum(axis=1) == d
        z = math.comb(k - 1, d - 1) * math.exp(self.epsilon) + math.comb(k - 1, d)
        weight = np.where(members.T, math.exp(self.epsilon), 1.0) / z  # (k, 2^k)
        return np.where(size_d[None, :], weight, 0.0)

    @property
    def bits_per_report(self) -> int:
        """Every report sets exactly d bits (the consumers refuse others as out of range)."""
        return self.d

    @property
    def d(self) -> int:
        """The subset size in use."""
        return self.subset_size if self.subset_size is not None else optimal_subset_size(self.k, self.epsilon)

    @property
    def q_star(self) -> float:
        """P(x ∈ S | x) = d e^ε/(d e^ε + k − d)."""
        return subset_rates(self.k, self.d, self.epsilon)[0]

    @property
    def p_star(self) -> float:
        """P(j ∈ S | x), j ≠ x: (d − q*)/(k − 1)."""
        return subset_rates(self.k, self.d, self.epsilon)[1]

    def privatize(self, inputs: np.ndarray, rng: Randomness) -> np.ndarray:
        """Reports of ``(n, k)`` one-hot inputs."""
        inputs = np.asarray(inputs, dtype=bool)
        if inputs.ndim != 2 or not np.all(inputs.sum(axis=1) == 1):
            raise ParameterError("subset selection privatizes one-hot vectors")
        return subset_bits(np.argmax(inputs, axis=1), self.k, self.d, self.q_star, rng)

    def encode_batch(self, x: Any, rng: Randomness) -> np.ndarray:
        """Privatize a batch of symbols with ``rng``; returns ``(n, k)`` bool with d bits set per row."""
        return subset_bits(as_index_array("x", x, self.k), self.k, self.d, self.q_star, rng)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(1, k+1)`` sketch, exact in distribution (:func:`subset_sketch_from_true_counts`); ``table`` ignored."""
        rng = ensure_generator(rng)
        true_counts = population_by_cohort(counts, 1, self.k, rng)[0]
        out = np.empty((1, self.k + 1), dtype=np.int64)
        out[0, 0] = true_counts.sum()
        out[0, 1:] = subset_sketch_from_true_counts(true_counts, self.d, self.q_star, rng)
        return out
