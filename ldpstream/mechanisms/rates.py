"""Closed-form report probabilities of the mechanisms: one home for each formula of docs/math/mechanisms.md.

- k-RR (docs/math/mechanisms.md#k-rr): ``Q(x|x) = e^ε/(e^ε + k − 1)``, ``Q(y|x) = 1/(e^ε + k − 1)``.
- Symmetric bit randomized response (k-RAPPOR with ε_bit = ε/2, O-RAPPOR with ε_bit = ε/(2h)):
  ``q* = e^{ε_bit}/(1 + e^{ε_bit})``, ``p* = 1/(1 + e^{ε_bit}) = 1 − q*``.
- RAPPOR (docs/math/mechanisms.md#rappor): ``q* = (1 − f/2) q + (f/2) p``, ``p* = (1 − f/2) p + (f/2) q``.

Inputs are assumed validated (the mechanisms' constructors check them).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["bit_rates", "krr_channel", "krr_keep_probability", "krr_rates", "rappor_rates"]


def krr_keep_probability(k: int, epsilon: float) -> float:
    """k-RR's ``Q(x|x) = e^ε / (e^ε + k − 1)`` (docs/math/mechanisms.md#k-rr)."""
    return krr_rates(k, epsilon)[0]


def krr_rates(k: int, epsilon: float) -> tuple[float, float]:
    """k-RR's ``(Q(x|x), Q(y|x)) = (e^ε/(e^ε + k − 1), 1/(e^ε + k − 1))`` (docs/math/mechanisms.md#k-rr)."""
    e = math.exp(epsilon)
    return e / (e + k - 1), 1.0 / (e + k - 1)


def krr_channel(k: int, epsilon: float) -> np.ndarray:
    """The k×k k-RR matrix ``Q(y|x)``, row x (docs/math/mechanisms.md#k-rr)."""
    keep, other = krr_rates(k, epsilon)
    q = np.full((k, k), other)
    np.fill_diagonal(q, keep)
    return q


def bit_rates(epsilon_per_bit: float) -> tuple[float, float]:
    """``(q*, p*) = (e^{ε_bit}/(1 + e^{ε_bit}), 1/(1 + e^{ε_bit}))``: each true bit kept w.p. q*, each false bit
    set w.p. p* (docs/math/mechanisms.md#k-rappor with ε_bit = ε/2, O-RAPPOR with ε_bit = ε/(2h))."""
    return 1.0 / (1.0 + math.exp(-epsilon_per_bit)), 1.0 / (1.0 + math.exp(epsilon_per_bit))


def rappor_rates(p: float, q: float, f: float) -> tuple[float, float]:
    """RAPPOR's effective per-report rates ``(q*, p*) = ((1 − f/2) q + (f/2) p, (1 − f/2) p + (f/2) q)``
    (docs/math/mechanisms.md#rappor): PRR with probability f, then IRR with p, q."""
    half = f / 2.0
    return (1.0 - half) * q + half * p, (1.0 - half) * p + half * q
