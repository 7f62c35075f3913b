"""k-RAPPOR (basic one-time RAPPOR on a one-hot vector), Kairouz et al. 2016 §3
(docs/math/mechanisms.md#k-rappor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms._common import (
    as_index_array,
    bit_sketch_from_true_counts,
    ensure_generator,
    one_hot_input,
    perturb_bits,
    population_by_cohort,
)
from ldpstream.mechanisms.base import BitMechanism, DecoderFamily, DirectEncoding
from ldpstream.mechanisms.longitudinal import Memoizing
from ldpstream.mechanisms.randomness import SECURE, Randomness
from ldpstream.mechanisms.rates import bit_rates


@dataclass(frozen=True)
class KRappor(Memoizing, DirectEncoding, BitMechanism):
    """k-RAPPOR: one-hot encode x in ``0..k-1`` as k bits, keep each bit w.p. e^{ε/2}/(1 + e^{ε/2}).

    So q* = P(bit 1 | true 1) = e^{ε/2}/(1 + e^{ε/2}) and p* = P(bit 1 | true 0) = 1/(1 + e^{ε/2})
    (docs/math/mechanisms.md#k-rappor). Two inputs differ in two bits, each contributing at most
    q*/p* = e^{ε/2} to the likelihood ratio: ε-LDP, tight.

    ``memoize`` / ``epsilon_permanent``: how a real client protects repeated reports
    (:mod:`ldpstream.mechanisms.longitudinal`); one report is this channel either way.
    """

    name: ClassVar[str] = "krappor"
    cohorts: ClassVar[int] = 1  # type: ignore[misc]
    decoder_family: ClassVar[DecoderFamily] = "direct_bits"

    k: int
    epsilon: float
    memoize: bool = True
    epsilon_permanent: float | None = None

    def channel_input(self, value: Any, cohort: int) -> np.ndarray:
        """The one-hot ``(k,)`` bool vector of the symbol (one cohort)."""
        return one_hot_input(value, self.k)

    def unit_epsilon(self, epsilon: float) -> float:
        """Per-bit ε = ε/2 (two bits differ between any two inputs)."""
        return epsilon / 2.0

    @property
    def q_star(self) -> float:
        """e^{ε/2} / (1 + e^{ε/2})."""
        return bit_rates(self.epsilon / 2.0)[0]

    @property
    def p_star(self) -> float:
        """1 / (1 + e^{ε/2})."""
        return bit_rates(self.epsilon / 2.0)[1]

    def encode(self, x: int) -> np.ndarray:
        """Privatize one symbol with :data:`SECURE` randomness; returns ``(k,)`` bool."""
        bits: np.ndarray = self.encode_batch(np.asarray([x]), SECURE)[0]
        return bits

    def encode_batch(self, x: Any, rng: Randomness) -> np.ndarray:
        """Privatize a batch of symbols with ``rng``; returns ``(n, k)`` bool."""
        symbols = as_index_array("x", x, self.k)
        true_bits = np.zeros((symbols.shape[0], self.k), dtype=bool)
        true_bits[np.arange(symbols.shape[0]), symbols] = True
        return perturb_bits(true_bits, self.q_star, self.p_star, rng)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(1, k+1)`` sketch of ``sum(counts)`` reports, ``counts[x]`` with true symbol x (no value table:
        ``table`` is ignored).

        Exact in distribution: bit j is set in Binomial(counts[j], q*) + Binomial(n − counts[j], p*)
        reports, the law of the column sums of ``encode_batch`` (bits are independent given x).
        """
        rng = ensure_generator(rng)
        true_counts = population_by_cohort(counts, 1, self.k, rng)
        return bit_sketch_from_true_counts(true_counts, true_counts.sum(axis=1), self.q_star, self.p_star, rng)
