"""Goodness of fit of a candidate model: Pearson's statistic of its residual and the quasi-likelihood inflation
it implies (docs/math/misfit.md).

For responses ``z_r`` (one per cohort and output cell) with model variances ``v_r`` at the fitted values ``ẑ_r``,
``X² = Σ_r (z_r − ẑ_r)² / v_r`` over the cells with reports, on ``df = cells − parameters`` degrees of freedom;
under the model ``X² ≈ χ²_df`` and the dispersion ``φ̂ = X²/df ≈ 1``. Mass on strings outside the candidate list
sits on their own cells and inflates ``φ̂``; when the fit is rejected at :data:`MISFIT_LEVEL` the standard
errors are multiplied by ``sqrt(φ̂)`` (McCullagh and Nelder 1989, §9.2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy import special

__all__ = ["MISFIT_LEVEL", "Misfit", "pearson_misfit", "robust_variance_ratio"]

#: The level at which a fit is rejected (its p-value below it) and detection's tests are made robust.
MISFIT_LEVEL = 0.01
#: Cells of the largest standardized residuals a :class:`Misfit` keeps (where the unexplained mass sits).
LARGEST_CELLS = 8


@dataclass(frozen=True)
class Misfit:
    """Pearson's ``statistic`` on ``df`` degrees of freedom and its upper-tail ``p_value`` (χ²_df).

    ``excess_reports``: reports the fit leaves unexplained, ``Σ_r N_r·max(z_r − ẑ_r, 0) / cells_per_value`` less
    what noise alone leaves (its null mean); ``cells``: ``(cohort, cell, standardized residual)`` of the
    :data:`LARGEST_CELLS` largest positive residuals."""

    statistic: float
    df: int
    p_value: float
    excess_reports: float
    cells: tuple[tuple[int, int, float], ...] = ()

    @property
    def dispersion(self) -> float:
        """``φ̂ = X²/df``."""
        return self.statistic / self.df

    @property
    def rejected(self) -> bool:
        """The model is rejected: ``p_value`` below :data:`MISFIT_LEVEL`."""
        return self.p_value < MISFIT_LEVEL

    @property
    def inflation(self) -> float:
        """The factor on standard errors: ``sqrt(max(1, φ̂))`` when the fit is :attr:`rejected`, else 1."""
        return float(np.sqrt(max(1.0, self.dispersion))) if self.rejected else 1.0

    def scaled(self, factor: float) -> Misfit:
        """This misfit with the responses' variance taken as ``factor`` times the model's (a window's repeated
        reports, its mean design effect): ``X²/factor`` on the same ``df``, residuals ``z/sqrt(factor)``."""
        if factor == 1.0:
            return self
        statistic = self.statistic / factor
        return replace(self, statistic=statistic, p_value=float(special.chdtrc(self.df, statistic)),
                       cells=tuple((c, j, z / float(np.sqrt(factor))) for c, j, z in self.cells))

    def to_json(self) -> dict[str, object]:
        return {
            "statistic": self.statistic, "df": self.df, "dispersion": self.dispersion, "p_value": self.p_value,
            "inflation": self.inflation, "excess_reports": self.excess_reports,
            "cells": [{"cohort": c, "cell": j, "z": z} for c, j, z in self.cells],
        }


def pearson_misfit(
    z: np.ndarray, fitted: np.ndarray, variance: np.ndarray, parameters: int, *, width: int,
    reports: np.ndarray, cells_per_value: float = 1.0, fixed_cohort_sums: bool = False,
) -> Misfit | None:
    """The :class:`Misfit` of responses ``z`` (cohort-major, ``width`` cells per cohort) against ``fitted`` with
    model ``variance`` per cell, ``parameters`` fitted coefficients and ``reports`` per cell (``N_c``); cells with
    no reports or a non-finite variance are left out. ``fixed_cohort_sums``: a cohort's cells sum to its reports
    (symbol reports), which takes one more degree of freedom per cohort but one (docs/math/misfit.md#the-statistic).
    ``None`` when no degree of freedom is left."""
    z, fitted, variance = (np.asarray(a, dtype=np.float64).ravel() for a in (z, fitted, variance))
    reports = np.asarray(reports, dtype=np.float64).ravel()
    live = (reports > 0) & np.isfinite(variance) & (variance > 0)
    df = int(live.sum()) - int(parameters)
    if fixed_cohort_sums:
        df -= max(int(np.count_nonzero(reports.reshape(-1, width)[:, 0] > 0)) - 1, 0)
    if df < 1:
        return None
    residual = np.where(live, z - fitted, 0.0)
    scaled = np.where(live, residual / np.sqrt(np.where(live, variance, 1.0)), 0.0)
    statistic = float(np.dot(scaled, scaled))
    # excess reports: N·max(residual, 0) summed, less its null mean N·sd·φ(0) (a half-normal's mean, per cell)
    sd = np.sqrt(np.where(live, variance, 0.0))
    excess = float(np.sum(reports * np.maximum(residual, 0.0)) - np.sum(reports * sd) / np.sqrt(2 * np.pi))
    top = min(LARGEST_CELLS, scaled.size)
    order = np.argpartition(-scaled, top - 1)[:top] if top < scaled.size else np.arange(scaled.size)
    order = order[np.argsort(-scaled[order], kind="stable")]
    cells = tuple((int(i // width), int(i % width), float(scaled[i])) for i in order if scaled[i] > 0)
    return Misfit(statistic=statistic, df=df, p_value=float(special.chdtrc(df, statistic)),
                  excess_reports=max(excess, 0.0) / max(cells_per_value, 1e-12), cells=cells)


def robust_variance_ratio(design: Any, gram: np.ndarray, weighted_residual: np.ndarray,
                          block: int = 2048) -> np.ndarray:
    """Per coefficient, the residual-based (HC0) variance of a weighted least-squares fit over its model-based
    one: ``diag(G⁻¹ Xᵀ diag(u²) X G⁻¹) / diag(G⁻¹)`` with ``u = W (z − Xβ̂)`` (``weighted_residual``) and
    ``G = XᵀWX`` (``gram``); rows in blocks of ``block`` (docs/math/misfit.md#detection)."""
    inverse = np.linalg.inv(gram)
    X = sp.csr_matrix(design)
    robust = np.zeros(inverse.shape[0])
    u2 = np.asarray(weighted_residual, dtype=np.float64) ** 2
    for start in range(0, X.shape[0], block):
        rows = slice(start, min(start + block, X.shape[0]))
        B = np.asarray(X[rows] @ inverse)
        robust += np.einsum("rs,rs->s", B, B * u2[rows, None])
    model = np.maximum(np.diag(inverse), 1e-300)
    ratio: np.ndarray = robust / model
    return ratio
