"""k-ary randomized response (k-RR), Kairouz, Bonawitz, Ramage 2016 §3 (docs/math/mechanisms.md#k-rr)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms._common import (
    as_index_array,
    ensure_generator,
    krr_perturb,
    population_by_cohort,
)
from ldpstream.mechanisms.base import DecoderFamily, DirectEncoding, SymbolMechanism
from ldpstream.mechanisms.longitudinal import Memoizing
from ldpstream.mechanisms.randomness import SECURE, Randomness
from ldpstream.mechanisms.rates import krr_channel, krr_keep_probability


def krr_sketch_from_true_counts(
    true_counts: np.ndarray, k: int, epsilon: float, rng: np.random.Generator
) -> np.ndarray:
    """``(C, k)`` k-RR output counts given ``(C, k)`` true-symbol counts, exact in distribution.

    k-RR is the mixture Q(y|x) = a·[y = x] + (1 − a)/k with a = (e^ε − 1)/(e^ε + k − 1) (check:
    a + (1 − a)/k = e^ε/(e^ε + k − 1) and (1 − a)/k = 1/(e^ε + k − 1)). So per cohort the number of
    reports that keep their symbol by the first component is Binomial(T_x, a) per symbol x, and the
    others, pooled, are uniform over the k symbols: a multinomial. Reports are independent, so this is
    exactly the law of the sketch of n individual k-RR reports, at cost O(C·k).
    """
    e = np.exp(epsilon)
    a = (e - 1.0) / (e + k - 1.0)
    kept = rng.binomial(true_counts, a)
    rest = true_counts.sum(axis=1) - kept.sum(axis=1)
    uniform = rng.multinomial(rest, np.full(k, 1.0 / k))
    return (kept + uniform).astype(np.int64, copy=False)


@dataclass(frozen=True)
class KRR(Memoizing, DirectEncoding, SymbolMechanism):
    """k-RR over the alphabet ``0..k-1``: report the true symbol w.p. e^ε/(e^ε + k − 1), every other
    symbol w.p. 1/(e^ε + k − 1) (docs/math/mechanisms.md#k-rr). ε-LDP, tight.

    ``memoize`` / ``epsilon_permanent``: how a real client protects repeated reports
    (:mod:`ldpstream.mechanisms.longitudinal`); one report is this channel either way."""

    name: ClassVar[str] = "krr"
    cohorts: ClassVar[int] = 1  # type: ignore[misc]
    decoder_family: ClassVar[DecoderFamily] = "direct_symbol"
    joint_member: ClassVar[bool] = True
    discovery_refusal: ClassVar[str | None] = (
        "k-RR sends one symbol of a closed alphabet, and the full string has none (|Σ|^M values); the n-gram "
        "detection tests bit reports")

    k: int
    epsilon: float
    memoize: bool = True
    epsilon_permanent: float | None = None

    @classmethod
    def examples(cls) -> tuple[KRR, ...]:
        return (cls(k=5, epsilon=1.5),)

    def channel_input(self, value: Any, cohort: int) -> int:
        """The symbol itself (one cohort)."""
        return int(as_index_array("value", np.asarray([value]), self.k)[0])

    def unit_epsilon(self, epsilon: float) -> float:
        """k-RR is its own unit channel."""
        return epsilon

    @property
    def keep_probability(self) -> float:
        """Q(x|x) = e^ε / (e^ε + k − 1)."""
        return krr_keep_probability(self.k, self.epsilon)

    def channel(self) -> np.ndarray:
        """The exact k×k channel Q(y|x), row x = true symbol, column y = report."""
        return krr_channel(self.k, self.epsilon)

    def encode(self, x: int) -> int:
        """Privatize one symbol with :data:`SECURE` randomness (what a real client runs)."""
        return int(self.encode_batch(np.asarray([x]), SECURE)[0])

    def encode_batch(self, x: Any, rng: Randomness) -> np.ndarray:
        """Privatize a batch of symbols (int array in 0..k-1) with ``rng``; returns int64 symbols."""
        symbols = as_index_array("x", x, self.k)
        return krr_perturb(symbols, self.k, self.epsilon, rng)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(1, k)`` sketch of ``sum(counts)`` reports, ``counts[x]`` of them with true symbol x (no value
        table: ``table`` is ignored).

        Exact in distribution: equal in law to ``sketch(0, encode_batch(x, rng))`` (see
        :func:`krr_sketch_from_true_counts`).
        """
        rng = ensure_generator(rng)
        true_counts = population_by_cohort(counts, 1, self.k, rng)
        return krr_sketch_from_true_counts(true_counts, self.k, self.epsilon, rng)
