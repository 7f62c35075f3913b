"""What the unary mechanisms over a closed alphabet share (k-RAPPOR, OUE, subset selection): a value x in
``0..k-1`` is the one-hot vector of k bits, privatized into a ``(k,)`` bool report in one cohort, whose count sketch
is k-RAPPOR's ``(1, k + 1)`` (docs/math/mechanisms.md#k-rappor, #oue, #subset-selection)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, cast

import numpy as np

from ldpstream.mechanisms._common import (
    bit_sketch_from_true_counts,
    ensure_generator,
    one_hot_input,
    population_by_cohort,
)
from ldpstream.mechanisms.base import BitMechanism, DecoderFamily
from ldpstream.mechanisms.randomness import SECURE, Randomness


class UnaryEncoding(ABC):
    """The one-hot channel input, one encode through ``encode_batch``, and the aggregate sketch of independent bits
    (bit j of a report set with probability q* when j = x, p* otherwise). Listed first among the bases, before the
    longitudinal mixin, :class:`~ldpstream.mechanisms.base.DirectEncoding` and
    :class:`~ldpstream.mechanisms.base.BitMechanism`. Subclasses give ``encode_batch`` and BitMechanism's ``q_star``
    and ``p_star``; one whose bits are not independent given x overrides :meth:`simulate_sketch`."""

    cohorts: ClassVar[int] = 1
    decoder_family: ClassVar[DecoderFamily] = "direct_bits"
    k: int

    @abstractmethod
    def encode_batch(self, x: Any, rng: Randomness) -> np.ndarray:
        """``(n, k)`` bool reports of a batch of symbols with ``rng``."""

    def channel_input(self, value: Any, cohort: int) -> np.ndarray:
        """The one-hot ``(k,)`` bool vector of the symbol (one cohort)."""
        return one_hot_input(value, self.k)

    def encode(self, x: int) -> np.ndarray:
        """Privatize one symbol with :data:`SECURE` randomness; returns ``(k,)`` bool."""
        bits: np.ndarray = self.encode_batch(np.asarray([x]), SECURE)[0]
        return bits

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(1, k+1)`` sketch of ``sum(counts)`` reports, ``counts[x]`` with true symbol x (no value table:
        ``table`` is ignored).

        Exact in distribution: bit j is set in Binomial(counts[j], q*) + Binomial(n − counts[j], p*) reports, the
        law of the column sums of ``encode_batch`` (bits are independent given x).
        """
        rng = ensure_generator(rng)
        true_counts = population_by_cohort(counts, 1, self.k, rng)
        q_star, p_star = cast(BitMechanism, self).response_rates  # (q*, p*): the subclass is a BitMechanism
        return bit_sketch_from_true_counts(true_counts, true_counts.sum(axis=1), q_star, p_star, rng)
