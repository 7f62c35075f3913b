"""Closed-form report probabilities of the mechanisms: one home for each formula of docs/math/mechanisms.md.

- k-RR (docs/math/mechanisms.md#k-rr): ``Q(x|x) = e^ε/(e^ε + k − 1)``, ``Q(y|x) = 1/(e^ε + k − 1)``.
- Symmetric bit randomized response (k-RAPPOR with ε_bit = ε/2, O-RAPPOR with ε_bit = ε/(2h)):
  ``q* = e^{ε_bit}/(1 + e^{ε_bit})``, ``p* = 1/(1 + e^{ε_bit}) = 1 − q*``.
- RAPPOR (docs/math/mechanisms.md#rappor): ``q* = (1 − f/2) q + (f/2) p``, ``p* = (1 − f/2) p + (f/2) q``.

- Memoized permanent response + instantaneous layer (docs/math/privacy-accounting.md#composing-the-two-layers):
  the instantaneous ε that makes the composition of a permanent channel at ε_∞ and an instantaneous one
  exactly the one-report channel at ε, for k-RR (:func:`krr_irr_epsilon`) and for symmetric bit flips
  (:func:`bit_irr_epsilon`).

Inputs are assumed validated (the mechanisms' constructors check them).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "bit_irr_epsilon",
    "bit_rates",
    "hadamard_rates",
    "krr_channel",
    "krr_irr_epsilon",
    "krr_keep_probability",
    "krr_rates",
    "optimal_subset_size",
    "oue_rates",
    "rappor_rates",
    "subset_rates",
    "unary_risk",
]


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


def krr_irr_epsilon(k: int, epsilon: float, epsilon_inf: float) -> float:
    """ε₂ of the instantaneous k-RR such that k-RR_ε₂ ∘ k-RR_{ε_∞} is exactly k-RR_ε (needs ε_∞ > ε > 0).

    Derivation (docs/math/privacy-accounting.md#composing-the-two-layers): k-RR_ε is the mixture
    λ·identity + (1 − λ)·uniform with λ(ε) = (e^ε − 1)/(e^ε + k − 1), and mixing weights multiply under
    composition, so λ(ε₂) = λ(ε)/λ(ε_∞); inverting λ gives e^ε₂ = (1 + (k − 1)λ₂)/(1 − λ₂). Equivalently the
    keep probabilities satisfy a = a₁a₂ + (1 − a₁)(1 − a₂)/(k − 1).
    """
    lam = _krr_mixing(k, epsilon) / _krr_mixing(k, epsilon_inf)
    return math.log1p(k * lam / (1.0 - lam))


def _krr_mixing(k: int, epsilon: float) -> float:
    """k-RR's identity weight λ = (e^ε − 1)/(e^ε + k − 1) = expm1(ε)/(expm1(ε) + k)."""
    em1 = math.expm1(epsilon)
    return em1 / (em1 + k)


def bit_irr_epsilon(epsilon_bit: float, epsilon_bit_inf: float) -> float:
    """Per-bit ε₂ of the instantaneous flip such that flip_ε₂ ∘ flip_{ε_∞,bit} is exactly flip_{ε_bit}
    (symmetric bit randomized response, keep probability b(ε) = e^ε/(1 + e^ε); needs ε_∞,bit > ε_bit > 0).

    Derivation (docs/math/privacy-accounting.md#composing-the-two-layers): a kept-or-flipped bit keeps its
    value with b = b₁b₂ + (1 − b₁)(1 − b₂), i.e. 2b − 1 = (2b₁ − 1)(2b₂ − 1), and 2b(ε) − 1 = tanh(ε/2); so
    tanh(ε₂/2) = tanh(ε_bit/2)/tanh(ε_∞,bit/2).
    """
    ratio = math.tanh(epsilon_bit / 2.0) / math.tanh(epsilon_bit_inf / 2.0)
    return 2.0 * math.atanh(ratio)


# ----------------------------------------------------- OUE, subset selection, Hadamard (docs/math/mechanisms.md)
def oue_rates(epsilon: float) -> tuple[float, float]:
    """Optimized unary encoding's ``(q*, p*) = (1/2, 1/(e^ε + 1))`` (Wang et al. 2017 §4.1.3;
    docs/math/mechanisms.md#oue): the one-hot bit is kept w.p. 1/2, every other bit set w.p. 1/(e^ε + 1)."""
    return 0.5, 1.0 / (math.exp(epsilon) + 1.0)


def subset_rates(k: int, d: int, epsilon: float) -> tuple[float, float]:
    """Subset selection's bit margins ``(q*, p*)`` (Ye & Barg 2018 §III; docs/math/mechanisms.md#subset-selection):
    the true symbol is in the reported d-subset w.p. ``q* = d e^ε/(d e^ε + k − d)``; any other given symbol w.p.
    ``p* = (d − q*)/(k − 1)`` (the other ``d − [x ∈ S]`` members are uniform among the k − 1 others)."""
    e = math.exp(epsilon)
    q = d * e / (d * e + k - d)
    return q, (d - q) / (k - 1)


def unary_risk(k: int, q_star: float, p_star: float) -> float:
    """``n·E‖p̂ − p‖² + Σ p_j²`` of an unbiased estimate ``p̂_j = (T_j/n − p*)/(q* − p*)`` whose counts ``T_j`` are
    ``Binomial(n, p* + (q* − p*) p_j)``: ``(k p*(1 − p*) + δ(1 − 2p*))/δ²``, δ = q* − p*, whatever p
    (docs/math/estimators.md#the-risk-of-the-unary-family)."""
    delta = q_star - p_star
    return (k * p_star * (1.0 - p_star) + delta * (1.0 - 2.0 * p_star)) / (delta * delta)


def optimal_subset_size(k: int, epsilon: float) -> int:
    """The subset size d in ``1..k−1`` that minimizes subset selection's risk :func:`unary_risk` (p-free, so one d
    is best for every distribution); exhaustive over d (docs/math/mechanisms.md#the-subset-size). It lands on
    ``⌊k/(e^ε + 1)⌋`` or ``⌈k/(e^ε + 1)⌉`` (Ye & Barg 2018, Wang et al. 2016)."""
    if k == 2:
        return 1
    d = np.arange(1, k, dtype=np.float64)
    e = math.exp(epsilon)
    q = d * e / (d * e + k - d)
    p = (d - q) / (k - 1)
    delta = q - p
    risk = (k * p * (1 - p) + delta * (1 - 2 * p)) / (delta * delta)
    return int(np.argmin(risk)) + 1


def hadamard_rates(epsilon: float) -> tuple[float, float]:
    """Hadamard response's (and HCMS's) margin rates ``(q*, p*) = (e^ε/(e^ε + 1), 1/2)``: a report falls in its
    value's half of the Hadamard outputs w.p. e^ε/(e^ε + 1), in another value's half w.p. 1/2 (Acharya, Sun,
    Zhang 2019 §3; docs/math/mechanisms.md#hadamard-response)."""
    return 1.0 / (1.0 + math.exp(-epsilon)), 0.5
