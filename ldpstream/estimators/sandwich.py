"""Exact covariance ("meat") of the weighted least-squares score of the candidate decoders.

The weighted least-squares estimate ``β = Ga⁻¹ Xaᵀ W z`` (``Xa`` = design with the optional "other" column,
``Ga = Xaᵀ W Xa``) has covariance ``Ga⁻¹ M Ga⁻¹`` with the meat ``M = Xaᵀ W Σ_z W Xa`` and ``Σ_z`` the exact
covariance of the responses. The sketch of a cohort is a sum of ``N_c`` independent reports, so
``Σ_z`` is block diagonal over cohorts with block ``Σ_c / N_c``, ``Σ_c`` the covariance of one report's
response vector (docs/math/estimators.md#sandwich-covariance-of-the-least-squares-estimate):

- O-RR (one symbol per report, multinomial): ``Σ_c = c² (diag(m_c) − m_c m_cᵀ)``,
  ``c = (e^ε + k − 1)/(e^ε − 1)``, ``m = (1 + (e^ε − 1) Xp)/(e^ε + k − 1)``.
- bits (O-RAPPOR, RAPPOR; bits randomized independently given the value): with ``x(v)`` the Bloom bits of
  value ``v`` and ``π = E x = X_c p`` (plus ``p_o h̄/k`` from "other"), ``Cov(b) = diag(E r(v)(1 − r(v)))
  + δ² Cov x`` where ``δ = q* − p*``; divided by δ²:
  ``Σ_c = diag(r(1 − r))/δ² − diag(P2) + diag(π²) + P2 − π πᵀ``, ``P2 = E x xᵀ = X_c D_p X_cᵀ +
  p_o (h̄/k I + κ (11ᵀ − I))``, ``κ = h̄(h̄ − 1)/(k(k − 1))`` (a string outside the list sets h̄ random bits),
  ``r = p* + δ π``. The diagonal is the usual ``r(1 − r)/δ²``; off the diagonal two bits set by one
  value (h ≥ 2) covary positively, and the one-hot part ``−π πᵀ`` is negative (h = 1 too).

``M`` is applied as an operator on a block ``Y`` (``P × m``) in O((nnz(Xa) + R)·m + C·P·m): a diagonal
part ``Xaᵀ diag(α) Xa``, rank-``C`` parts ``Σ_c γ_c V_c V_cᵀ`` with ``V_c = Xa_cᵀ v_c`` (one vector per
cohort), and for bits the "pair" part ``Σ_c N_c⁻¹ Xa_cᵀ W_c X_c D_p X_cᵀ W_c Xa_c`` (two sparse products
through a cohort-split copy of the design; ``p`` of "other" set to 0 there). ``p`` and ``π`` are plugged
in from the fit (negative coordinates set to 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

__all__ = ["SandwichMeat", "bits_meat", "cohort_split", "orr_meat"]


def cohort_split(A: Any, k: int, C: int) -> sp.csr_matrix:
    """The (R × C·P) matrix whose row ``r`` of cohort ``c = r // k`` holds row ``r`` of ``A`` in columns
    ``c·P .. c·P + P − 1``: ``splitᵀ u`` stacks the per-cohort sums ``A_cᵀ u_c``."""
    A = sp.csr_matrix(A)
    P = A.shape[1]
    row_cohort = np.repeat(np.arange(A.shape[0], dtype=np.int64) // k, np.diff(A.indptr))
    cols = row_cohort * P + A.indices
    return sp.csr_matrix((A.data, cols, A.indptr), shape=(A.shape[0], C * P))


class SandwichMeat:
    """``Y ↦ M Y`` for the meat ``M = Xaᵀ W Σ_z W Xa`` (module docstring)."""

    def __init__(
        self,
        Xa: sp.csr_matrix,
        alpha: np.ndarray,
        low_rank: Sequence[tuple[np.ndarray, np.ndarray]],
        pair: tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.Xa = Xa
        self.XaT = sp.csr_matrix(Xa.T)
        self.alpha = alpha
        self.low_rank = [(np.asarray(V), np.asarray(g)) for V, g in low_rank]  # V: (C, P), γ: (C,)
        self.pair = pair  # (split Xa (R × C·P), p (P,; 0 for "other"), 1/N_c (C,), w (R,))
        self.max_block = 1 << 19

    def __call__(self, Y: np.ndarray) -> np.ndarray:
        """``M Y``, in blocks of columns so that no temporary exceeds ``max_block`` elements (the (R × m)
        products with the design and the (C·S × m) per-cohort sums of the pair part)."""
        Y2 = Y.reshape(Y.shape[0], -1)
        R = self.Xa.shape[0]
        width = max(R, self.pair[0].shape[1] if self.pair is not None else 0, 1)
        step = max(1, self.max_block // width)
        out = np.empty_like(Y2, dtype=np.float64)
        for j in range(0, Y2.shape[1], step):
            out[:, j:j + step] = self._apply(Y2[:, j:j + step])
        return out.reshape(Y.shape)

    def _apply(self, Y2: np.ndarray) -> np.ndarray:
        XY = self.Xa @ Y2
        out = cast(np.ndarray, self.XaT @ (self.alpha[:, None] * XY))
        for V, g in self.low_rank:
            out = out + V.T @ (g[:, None] * (V @ Y2))
        if self.pair is not None:
            split, p, inv_n, w = self.pair
            C = inv_n.size
            S = p.size
            T = cast(np.ndarray, split.T @ (w[:, None] * XY)).reshape(C, S, -1)
            T *= p[None, :, None] * inv_n[:, None, None]
            back = cast(np.ndarray, split @ T.reshape(C * S, -1))
            out = out + self.XaT @ (w[:, None] * back)
        return out


def _per_cohort(Xa: sp.csr_matrix, u: np.ndarray, k: int, C: int) -> np.ndarray:
    """``(C, P)``: row ``c`` is ``Xa_cᵀ u_c``."""
    split = cohort_split(Xa, k, C)
    return np.asarray(split.T @ u).reshape(C, Xa.shape[1])


def _inv(n: np.ndarray) -> np.ndarray:
    return np.where(n > 0, 1.0 / np.where(n > 0, n, 1.0), 0.0)


def orr_meat(
    Xa: sp.csr_matrix, w: np.ndarray, fit: np.ndarray, Nc: np.ndarray, epsilon: float, k: int
) -> SandwichMeat:
    """Meat of the O-RR least squares: ``α = w² c² m / N_c``, ``γ_c = −c²/N_c``, ``v_c = w_c m_c``."""
    C = Nc.size
    e = np.exp(epsilon)
    cc = (e + k - 1) / (e - 1)
    m = (1 + (e - 1) * np.clip(fit, 0.0, 1.0)) / (e + k - 1)
    inv_row = np.repeat(_inv(Nc), k)
    alpha = w * w * cc * cc * m * inv_row
    V = _per_cohort(Xa, w * m, k, C)
    return SandwichMeat(Xa, alpha, [(V, -cc * cc * _inv(Nc))])


def bits_meat(
    Xa: sp.csr_matrix,
    w: np.ndarray,
    beta: np.ndarray,
    Nc: np.ndarray,
    q_star: float,
    p_star: float,
    k: int,
    hbar: float,
) -> SandwichMeat:
    """Meat of the bit least squares (module docstring), ``p = max(β, 0)``."""
    C = Nc.size
    S = beta.size if Xa.shape[1] == beta.size else beta.size - 1
    p = np.maximum(beta, 0.0)
    p_o = float(p[S]) if p.size > S else 0.0
    p_cand = np.concatenate([p[:S], np.zeros(p.size - S)])  # the pair part has the candidates only
    delta = q_star - p_star
    xp = Xa @ p_cand
    pi = xp + (p_o * hbar / k)
    r = np.clip(p_star + delta * pi, 0.0, 1.0)
    kappa = hbar * (hbar - 1) / (k * (k - 1)) if k > 1 else 0.0
    inv_n = _inv(Nc)
    inv_row = np.repeat(inv_n, k)
    alpha = w * w * (r * (1 - r) / delta**2 + pi * pi - xp - p_o * kappa) * inv_row
    split = cohort_split(Xa, k, C)
    low = [(np.asarray(split.T @ (w * pi)).reshape(C, -1), -inv_n)]
    if p_o * kappa > 0:
        low.append((np.asarray(split.T @ w).reshape(C, -1), p_o * kappa * inv_n))
    pair = (split, p_cand, inv_n, w)
    return SandwichMeat(Xa, alpha, low, pair)
