"""Optimized unary encoding (OUE), Wang, Blocki, Li, Jha, USENIX Security 2017 §4.1.3
(docs/math/mechanisms.md#oue), and its hashed cohort form O-OUE.

OUE one-hot encodes x in ``0..k-1`` like k-RAPPOR but flips the bits asymmetrically: the true bit is kept
with probability q* = 1/2, every other bit is set with probability p* = 1/(e^ε + 1). Two inputs differ in two
bits, whose likelihood ratios multiply to at most (q*/p*)·((1 − p*)/(1 − q*)) = e^ε: ε-LDP, tight. Among unary
encodings this choice of (q*, p*) minimizes the variance of a cell at frequency 0 (Wang et al. 2017, eq. 11),
which for k > 2 beats k-RAPPOR's symmetric e^{ε/2}/(1 + e^{ε/2}).

O-OUE is O-RAPPOR's hashed, per-cohort Bloom filter with OUE's flips at ε/h per pair of differing bits:
q* = 1/2, p* = 1/(e^{ε/h} + 1) (two filters of h bits each differ in at most h pairs of bits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms._common import as_index_array, bernoulli, perturb_bits
from ldpstream.mechanisms.base import BitMechanism, DirectEncoding
from ldpstream.mechanisms.longitudinal import PermanentOnly
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.randomness import Randomness
from ldpstream.mechanisms.rates import oue_rates
from ldpstream.mechanisms.unary import UnaryEncoding

#: Bits drawn at a time by :meth:`OUE.encode_batch` (bounds memory for large batches).
_CHUNK_BITS = 1 << 24


@dataclass(frozen=True)
class OUE(UnaryEncoding, PermanentOnly, DirectEncoding, BitMechanism):
    """OUE over the alphabet ``0..k-1``: k bits, q* = 1/2, p* = 1/(e^ε + 1) (module docstring).

    ``memoize``: a real client reports the same permanent response for a value (default) or fresh noise each
    time (:class:`~ldpstream.mechanisms.longitudinal.PermanentOnly`)."""

    name: ClassVar[str] = "oue"

    k: int
    epsilon: float
    memoize: bool = True
    epsilon_permanent: float | None = None

    @classmethod
    def examples(cls) -> tuple[OUE, ...]:
        return (cls(k=5, epsilon=1.5),)

    @property
    def q_star(self) -> float:
        """1/2."""
        return oue_rates(self.epsilon)[0]

    @property
    def p_star(self) -> float:
        """1/(e^ε + 1)."""
        return oue_rates(self.epsilon)[1]

    def privatize(self, inputs: np.ndarray, rng: Randomness) -> np.ndarray:
        """Flip ``(n, k)`` one-hot vectors: P(1 | true 1) = 1/2, P(1 | true 0) = 1/(e^ε + 1)."""
        return perturb_bits(inputs, self.q_star, self.p_star, rng)

    def encode_batch(self, x: Any, rng: Randomness) -> np.ndarray:
        """Privatize a batch of symbols with ``rng``; returns ``(n, k)`` bool."""
        symbols = as_index_array("x", x, self.k)
        n = symbols.shape[0]
        # Same law as privatize(one-hot): every bit Bernoulli(p*), then the true bit redrawn as Bernoulli(q*);
        # without a one-hot matrix to scan (the true bits' positions are the symbols themselves).
        out = np.empty((n, self.k), dtype=bool)
        rows = max(1, _CHUNK_BITS // self.k)
        for start in range(0, n, rows):
            block = out[start:start + rows]
            bernoulli(self.p_star, block.size, rng, out=block.reshape(-1))
            block[np.arange(block.shape[0]), symbols[start:start + rows]] = bernoulli(self.q_star, block.shape[0], rng)
        return out


@dataclass(frozen=True)
class HashedOUE(PermanentOnly, ORappor):
    """O-OUE: O-RAPPOR's per-cohort Bloom filters (``cohorts``, ``hashes``, ``k`` bits, ``support``) with OUE's
    asymmetric flips at ε/h: q* = 1/2, p* = 1/(e^{ε/h} + 1) (module docstring). Decoded by the candidate
    decoders like O-RAPPOR."""

    name: ClassVar[str] = "ooue"
    joint_member: ClassVar[bool] = False
    discovery_carrier: ClassVar[bool] = False

    @classmethod
    def examples(cls) -> tuple[HashedOUE, ...]:
        return (cls(k=4, epsilon=1.5, cohorts=2, hashes=2), cls(k=4, epsilon=1.5, cohorts=3, hashes=1, support=6))

    def hashing_twin(self) -> ORappor:
        """The O-RAPPOR of the same (k, C, h, support): O-OUE hashes as it does."""
        return ORappor(k=self.k, epsilon=self.epsilon, cohorts=self.cohorts, hashes=self.hashes, support=self.support)

    @property
    def q_star(self) -> float:
        """1/2."""
        return oue_rates(self.epsilon / self.hashes)[0]

    @property
    def p_star(self) -> float:
        """1/(e^{ε/h} + 1)."""
        return oue_rates(self.epsilon / self.hashes)[1]

    def privatize(self, inputs: np.ndarray, rng: Randomness) -> np.ndarray:
        """Flip ``(n, k)`` Bloom filters with (q*, p*)."""
        return perturb_bits(inputs, self.q_star, self.p_star, rng)
