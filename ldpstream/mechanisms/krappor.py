"""k-RAPPOR (basic one-time RAPPOR on a one-hot vector), Kairouz et al. 2016 §3
(docs/math/mechanisms.md#k-rappor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms._common import as_index_array, perturb_bits
from ldpstream.mechanisms.base import BitMechanism, DirectEncoding
from ldpstream.mechanisms.longitudinal import Memoizing
from ldpstream.mechanisms.randomness import Randomness
from ldpstream.mechanisms.rates import bit_rates
from ldpstream.mechanisms.unary import UnaryEncoding


@dataclass(frozen=True)
class KRappor(UnaryEncoding, Memoizing, DirectEncoding, BitMechanism):
    """k-RAPPOR: one-hot encode x in ``0..k-1`` as k bits, keep each bit w.p. e^{ε/2}/(1 + e^{ε/2}).

    So q* = P(bit 1 | true 1) = e^{ε/2}/(1 + e^{ε/2}) and p* = P(bit 1 | true 0) = 1/(1 + e^{ε/2})
    (docs/math/mechanisms.md#k-rappor). Two inputs differ in two bits, each contributing at most
    q*/p* = e^{ε/2} to the likelihood ratio: ε-LDP, tight.

    ``memoize`` / ``epsilon_permanent``: how a real client protects repeated reports
    (:mod:`ldpstream.mechanisms.longitudinal`); one report is this channel either way.
    """

    name: ClassVar[str] = "krappor"
    joint_member: ClassVar[bool] = True
    discovery_refusal: ClassVar[str | None] = (
        "k-RAPPOR keeps one bit per value of a closed alphabet, and the full string has none (|Σ|^M values)")

    k: int
    epsilon: float
    memoize: bool = True
    epsilon_permanent: float | None = None

    @classmethod
    def examples(cls) -> tuple[KRappor, ...]:
        return (cls(k=5, epsilon=1.5),)

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

    def encode_batch(self, x: Any, rng: Randomness) -> np.ndarray:
        """Privatize a batch of symbols with ``rng``; returns ``(n, k)`` bool."""
        symbols = as_index_array("x", x, self.k)
        true_bits = np.zeros((symbols.shape[0], self.k), dtype=bool)
        true_bits[np.arange(symbols.shape[0]), symbols] = True
        return perturb_bits(true_bits, self.q_star, self.p_star, rng)
