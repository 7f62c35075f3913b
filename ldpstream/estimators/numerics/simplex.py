"""Putting unbiased estimates back on the probability simplex.

See docs/math/estimators.md#back-onto-the-simplex. Every function works on the last axis, so a
2-D input is treated as a stack of independent rows.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["project_capped_simplex", "project_simplex", "truncate_normalize"]


def project_simplex(v: ArrayLike, total: float = 1.0) -> np.ndarray:
    """Euclidean projection of ``v`` onto ``{x : x >= 0, sum(x) = total}`` along the last axis.

    The sort-based algorithm of docs/math/estimators.md#euclidean-projection-onto-the-simplex: sort ``u`` descending,
    ``rho = max{j : u_j + (total - sum_{r<=j} u_r) / j > 0}``, ``lambda = (total - sum_{r<=rho} u_r) / rho``,
    ``x_i = max(u_i + lambda, 0)``. O(k log k) per row, fully vectorized over rows.
    """
    if total <= 0:
        raise ValueError("total must be positive")
    x = np.asarray(v, dtype=np.float64)
    if x.ndim == 0:
        raise ValueError("project_simplex needs at least one axis")
    if x.shape[-1] == 0:
        return x.copy()
    u = -np.sort(-x, axis=-1)
    css = np.cumsum(u, axis=-1)
    j = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    # The condition holds on a prefix j = 1..rho, so rho is the number of indices where it holds.
    rho = np.count_nonzero(u + (total - css) / j > 0, axis=-1, keepdims=True)
    rho = np.maximum(rho, 1)
    lam = (total - np.take_along_axis(css, rho - 1, axis=-1)) / rho
    return np.maximum(x + lam, 0.0)


def project_capped_simplex(v: ArrayLike, total: float = 1.0) -> np.ndarray:
    """Euclidean projection onto ``{x : x >= 0, sum(x) <= total}`` (the simplex with an unexplained remainder).

    If clipping the negatives leaves a sum within ``total`` that is the projection; otherwise the
    projection lies on the face ``sum(x) = total`` and equals :func:`project_simplex`.
    """
    x = np.asarray(v, dtype=np.float64)
    clipped = np.maximum(x, 0.0)
    over = clipped.sum(axis=-1, keepdims=True) > total
    if not np.any(over):
        return clipped
    return np.where(over, project_simplex(x, total), clipped)


def truncate_normalize(v: ArrayLike) -> np.ndarray:
    """Set negative entries to zero and rescale each row to sum to one (uniform if nothing is positive)."""
    x = np.maximum(np.asarray(v, dtype=np.float64), 0.0)
    if x.ndim == 0:
        raise ValueError("truncate_normalize needs at least one axis")
    s = x.sum(axis=-1, keepdims=True)
    k = x.shape[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(s > 0, x / np.where(s > 0, s, 1.0), 1.0 / max(k, 1))
    return out
