"""Distances between discrete distributions, vectorized over leading axes.

Every function takes ``estimate`` and ``truth`` arrays that broadcast against each other and reduces over
the **last** axis, so a ``(T, S)`` stack of trial estimates against one ``(S,)`` truth returns ``(T,)``.

=============  ============================================================  ========================
name           definition                                                    range on the simplex
=============  ============================================================  ========================
``l1``         ``Σ |p̂_i − p_i|``  (the error measure of Kairouz et al.)       [0, 2]
``l2sq``       ``Σ (p̂_i − p_i)²``  (squared ℓ2; the papers' "ℓ2² error")     [0, 2]
``linf``       ``max |p̂_i − p_i|``                                           [0, 1]
``tv``         ``½ Σ |p̂_i − p_i|``  (total variation)                        [0, 1]
``hellinger``  ``sqrt(½ Σ (√p̂_i − √p_i)²)``                                  [0, 1]
=============  ============================================================  ========================

ℓ1, ℓ2², ℓ∞ and TV accept any real vectors (unbiased estimates can be negative). The Hellinger distance
is defined for non-negative vectors only: negative entries are clipped to 0 first (documented, not
silent renormalization: a vector that is not on the simplex is used as is otherwise).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

LossFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _diff(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    return np.asarray(estimate, dtype=np.float64) - np.asarray(truth, dtype=np.float64)


def l1(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``Σ_i |p̂_i − p_i|`` over the last axis."""
    return np.asarray(np.abs(_diff(estimate, truth)).sum(axis=-1), dtype=np.float64)


def l2sq(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``Σ_i (p̂_i − p_i)²`` over the last axis (squared Euclidean distance)."""
    d = _diff(estimate, truth)
    return np.asarray(np.einsum("...i,...i->...", d, d), dtype=np.float64)


def linf(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``max_i |p̂_i − p_i|`` over the last axis."""
    return np.asarray(np.abs(_diff(estimate, truth)).max(axis=-1), dtype=np.float64)


def tv(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Total variation ``½ Σ_i |p̂_i − p_i|`` over the last axis."""
    return 0.5 * l1(estimate, truth)


def hellinger(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Hellinger distance ``sqrt(½ Σ_i (√p̂_i − √p_i)²)`` over the last axis (negatives clipped to 0)."""
    a = np.sqrt(np.clip(np.asarray(estimate, dtype=np.float64), 0.0, None))
    b = np.sqrt(np.clip(np.asarray(truth, dtype=np.float64), 0.0, None))
    d = a - b
    return np.asarray(np.sqrt(0.5 * np.einsum("...i,...i->...", d, d)), dtype=np.float64)


#: Every loss by name, in the order reports print them.
LOSSES: dict[str, LossFn] = {"l1": l1, "l2sq": l2sq, "linf": linf, "tv": tv, "hellinger": hellinger}


def all_losses(estimate: np.ndarray, truth: np.ndarray) -> dict[str, np.ndarray]:
    """Every loss of :data:`LOSSES` between ``estimate`` and ``truth`` (same broadcasting rules)."""
    return {name: fn(estimate, truth) for name, fn in LOSSES.items()}
