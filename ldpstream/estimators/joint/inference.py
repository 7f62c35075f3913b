"""Uncertainty of a joint table: observed information, covariance, intervals, conditionals, independence
(docs/math/joint.md#uncertainty; Fanti, Pihur, Erlingsson 2016 §4.C).

Observed information. ``ℓ(p) = Σ_u n_u log(c_uᵀp)`` has Hessian ``−Σ_u n_u c_u c_uᵀ/(c_uᵀp)²`` in the
``rc`` cell probabilities, so ``I_p = Σ_u n_u c_u c_uᵀ / m_u²``. On the simplex the free parameters are
``θ = (p_1..p_{rc−1})`` with ``p_rc = 1 − Σθ``: ``p = e_rc + Jθ``, ``J = [I; −1ᵀ]``, so
``I_θ = Jᵀ I_p J`` and ``Cov(p̂) = J I_θ⁻¹ Jᵀ`` (the same whichever cell is dropped).

Intervals: Wald ``p̂ ± 1.96 SE`` clipped to ``[0, 1]`` (``"wald-clipped"``); conditionals
``P(y_j | x_i) = p_ij / p_i·`` (and ``P(x_i | y_j)``) with delta-method standard errors, same rule.

Independence (docs/math/joint.md#independence). Published: the paper's ``T = dᵀ I_p d``,
``d = p̂ − p̂_X ⊗ p̂_Y``, against χ²_{(r−1)(c−1)}. It is calibrated: at an independent truth the product channel
makes ``I_p = N A_X ⊗ A_Y`` with ``A_Y p_Y = 1`` (rows of a channel sum to one), so ``I_p d`` is orthogonal to
the tangent space of the independence model (``d`` has zero row and column sums), i.e. ``p̂_X ⊗ p̂_Y`` is to first
order the information-orthogonal projection of ``p̂`` and ``T`` is the likelihood-ratio statistic's quadratic
approximation. Beside it, the Wald test of the ``(r−1)(c−1)`` interaction contrasts
``h_ab(p) = p_ab − p_a· p_·b`` (a < r, b < c): ``W = ĥᵀ (Ĥ Cov(p̂) Ĥᵀ)⁻¹ ĥ`` with
``∂h_ab/∂p_ij = [i=a][j=b] − [i=a] p_·b − [j=b] p_a·`` (delta method), also χ²_{(r−1)(c−1)} under independence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "INDEPENDENCE_METHOD",
    "WALD_INDEPENDENCE_METHOD",
    "Z95",
    "ConditionalTable",
    "IndependenceTest",
    "conditional_tables",
    "covariance_from_information",
    "independence_test",
    "wald_clipped",
    "wald_independence_test",
]

Z95 = float(stats.norm.isf(0.025))


@dataclass(frozen=True)
class ConditionalTable:
    """A conditional distribution: ``table[i, j]`` is P(column j | row i) for Y|X, or P(row i | column j)
    for X|Y (each laid out like the joint table), with delta-method SEs and clipped Wald 95% bounds."""

    given: str
    table: np.ndarray
    std_error: np.ndarray
    low: np.ndarray
    high: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {"given": self.given, "table": self.table.tolist(), "std_error": self.std_error.tolist(),
                "low_95": self.low.tolist(), "high_95": self.high.tolist()}


@dataclass(frozen=True)
class IndependenceTest:
    """The published test of independence: ``statistic`` (the paper's T) against χ²(``df``), its ``p_value`` and
    ``method``; the Wald test of the interaction contrasts alongside (``wald_statistic``, ``wald_p_value``)."""

    statistic: float
    df: int
    p_value: float
    method: str
    wald_statistic: float
    wald_p_value: float

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "df": self.df, "p_value": self.p_value, "method": self.method,
                "wald_statistic": self.wald_statistic, "wald_p_value": self.wald_p_value}


def free_jacobian(size: int) -> np.ndarray:
    """``J = [I; −1ᵀ]`` (size × size−1): cells as a function of the first size−1 free coordinates."""
    return np.vstack([np.eye(size - 1), -np.ones((1, size - 1))])


def free_information_inverse(information: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(J, Jᵀ I_p J, (Jᵀ I_p J)⁻¹)``: the information on the free parameters and its inverse (pseudo-inverse
    when singular)."""
    J = free_jacobian(information.shape[0])
    info_free = J.T @ information @ J
    try:
        inv = np.linalg.inv(info_free)
    except np.linalg.LinAlgError:
        inv = np.linalg.pinv(info_free)
    return J, info_free, inv


def covariance_from_information(information: np.ndarray) -> np.ndarray:
    """``J (Jᵀ I_p J)⁻¹ Jᵀ`` (pseudo-inverse when singular), symmetrized."""
    if information.shape[0] == 1:
        return np.zeros((1, 1))
    J, _, inv = free_information_inverse(information)
    cov: np.ndarray = J @ inv @ J.T
    sym: np.ndarray = (cov + cov.T) / 2.0
    return sym


def wald_clipped(point: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``point ± 1.96 se`` clipped to ``[0, 1]``."""
    return np.clip(point - Z95 * se, 0.0, 1.0), np.clip(point + Z95 * se, 0.0, 1.0)


def conditional_tables(p: np.ndarray, cov: np.ndarray) -> tuple[ConditionalTable, ConditionalTable]:
    """``(X|Y, Y|X)`` with delta-method SEs. For ``q_ij = p_ij / p_i·``:
    ``Var q_ij = (Cov[ij,ij] − 2 q_ij Σ_l Cov[ij,il] + q_ij² Σ_{l,l'} Cov[il,il']) / p_i·²``."""
    r, c = p.shape
    cov4 = cov.reshape(r, c, r, c)

    def along_rows(pp: np.ndarray, cc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = pp.sum(axis=1, keepdims=True)
        safe = np.where(rows > 0, rows, 1.0)
        q = np.where(rows > 0, pp / safe, 1.0 / pp.shape[1])
        idx = np.arange(pp.shape[0])
        block = cc[idx, :, idx, :]  # (r, c, c): Cov[i, l, i, l']
        diag = np.einsum("ijj->ij", block)
        cross = block.sum(axis=2)
        total = block.sum(axis=(1, 2))[:, None]
        var = (diag - 2 * q * cross + q * q * total) / safe**2
        return q, np.sqrt(np.maximum(var, 0.0))

    qy, sy = along_rows(p, cov4)
    qx_t, sx_t = along_rows(p.T, cov4.transpose(1, 0, 3, 2))
    qx, sx = qx_t.T, sx_t.T
    ly, hy = wald_clipped(qy, sy)
    lx, hx = wald_clipped(qx, sx)
    return ConditionalTable("y", qx, sx, lx, hx), ConditionalTable("x", qy, sy, ly, hy)


def interaction_contrasts(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``h_ab = p_ab − p_a· p_·b`` for a < r−1, b < c−1 and its Jacobian ((r−1)(c−1) × rc)."""
    r, c = p.shape
    pr, pc = p.sum(axis=1), p.sum(axis=0)
    h = (p - np.outer(pr, pc))[: r - 1, : c - 1].ravel()
    grid_a, grid_b = np.meshgrid(np.arange(r - 1), np.arange(c - 1), indexing="ij")
    a, b = grid_a.ravel(), grid_b.ravel()
    jac = np.zeros((len(h), r, c))
    rows = np.arange(len(h))
    jac[rows, a, b] += 1.0
    jac[rows, a, :] -= pc[b][:, None]  # ∂(p_a· p_·b)/∂p_aj = p_·b
    jac[rows, :, b] -= pr[a][:, None]  # ∂(p_a· p_·b)/∂p_ib = p_a·
    return h, jac.reshape(len(h), r * c)


#: ``IndependenceTest.method`` of the published statistic.
INDEPENDENCE_METHOD = "information-quadratic-form"


def independence_test(p: np.ndarray, cov: np.ndarray, information: np.ndarray) -> IndependenceTest:
    """The paper's ``T = dᵀ I_p d`` and the Wald statistic of the interaction contrasts (module docstring)."""
    r, c = p.shape
    df = (r - 1) * (c - 1)
    d = (p - np.outer(p.sum(axis=1), p.sum(axis=0))).ravel()
    t = float(max(d @ information @ d, 0.0))
    if df == 0:
        return IndependenceTest(0.0, 0, 1.0, INDEPENDENCE_METHOD, 0.0, 1.0)
    w, w_p_value = _wald_interaction(p, cov, df)
    return IndependenceTest(t, df, float(stats.chi2.sf(t, df)), INDEPENDENCE_METHOD, w, w_p_value)


def _wald_interaction(p: np.ndarray, cov: np.ndarray, df: int) -> tuple[float, float]:
    """The Wald statistic ``hᵀ (J Σ Jᵀ)⁺ h`` of the interaction contrasts ``h`` of ``p`` (Jacobian ``J``) and its
    χ²(df) p-value."""
    h, jac = interaction_contrasts(p)
    cov_h = jac @ cov @ jac.T
    sol = np.linalg.lstsq(cov_h, h, rcond=None)[0]
    w = float(max(h @ sol, 0.0))
    return w, float(stats.chi2.sf(w, df))


#: ``IndependenceTest.method`` when the published statistic is the Wald statistic of the interaction contrasts
#: (estimates that are not the maximum likelihood of a product channel, e.g.
#: :mod:`ldpstream.estimators.joint.direct`'s, for which ``T = dᵀ I_p d`` has no information to weigh by).
WALD_INDEPENDENCE_METHOD = "wald-interaction-contrasts"


def wald_independence_test(p: np.ndarray, cov: np.ndarray) -> IndependenceTest:
    """The Wald test of the interaction contrasts published as the statistic (``statistic = wald_statistic``),
    calibrated by the delta method for any asymptotically normal ``p̂`` with a consistent ``cov``."""
    r, c = p.shape
    df = (r - 1) * (c - 1)
    if df == 0:
        return IndependenceTest(0.0, 0, 1.0, WALD_INDEPENDENCE_METHOD, 0.0, 1.0)
    w, p_value = _wald_interaction(p, cov, df)
    return IndependenceTest(w, df, p_value, WALD_INDEPENDENCE_METHOD, w, p_value)
