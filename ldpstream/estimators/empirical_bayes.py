"""Empirical-Bayes point estimates of many frequencies measured with Gaussian noise (docs/math/estimators.md#
empirical-bayes-point-estimates-of-detected-strings).

Model: unbiased estimates ``x_s ~ N(f_s, se_s²)`` of S frequencies ``f_s`` that are themselves draws from an
unknown distribution ``g`` on [0, ∞) (the "prior": the population of candidate frequencies, many of them 0).

- :func:`npmle_prior`: the nonparametric maximum-likelihood estimate of ``g`` (Kiefer and Wolfowitz 1956;
  computed on a fixed grid as in Jiang and Zhang 2009 and Koenker and Mizera 2014): maximize
  ``Σ_s log Σ_j g_j φ((x_s − a_j)/se_s)/se_s`` over the simplex of weights ``g_j`` on grid points ``a_j``. This
  is a mixture likelihood, maximized by the same EM fixed point as a multinomial channel
  (:func:`ldpstream.estimators.em.em_multinomial`: inputs = grid points, outputs = the S estimates, one count
  each, ``Q(s | j) = φ((x_s − a_j)/se_s)/se_s``; the EM step ``g_j ← g_j Σ_s Q(s|j)/m_s / S`` needs no row
  normalization of ``Q``).
- :func:`posterior_mean`: ``E[f_s | x_s] = Σ_j a_j g_j φ_sj / Σ_j g_j φ_sj`` under the estimated ``g``.

Why: a list of detected strings is chosen because their estimates are large, so the estimates of the
strings near the detection threshold are biased upwards (the winner's curse). The posterior mean given
``x_s`` does not depend on how the list was chosen (the selection is a function of the data it conditions
on: Dawid 1994; Efron 2011, "Tweedie's formula and selection bias", JASA 106), so it removes that bias
without modelling the selection rule, and under squared loss it is the best estimate of each ``f_s`` from
``x_s`` (for the true ``g``; with the NPMLE it attains that risk asymptotically, Jiang and Zhang 2009).
Cost: O(S · grid) per EM step.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError

from .em import em_multinomial

__all__ = ["default_grid", "npmle_prior", "posterior_mean"]


def _kernel(x: np.ndarray, se: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``Q[j, s] = φ((x_s − a_j)/se_s)/se_s`` scaled per ``s`` by its largest entry (a per-estimate constant
    that changes neither the NPMLE nor any posterior)."""
    d = (x[None, :] - grid[:, None]) / se[None, :]
    logq = -0.5 * d * d
    return np.asarray(np.exp(logq - logq.max(axis=0, keepdims=True)))


def _check(x: ArrayLike, se: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    xa = np.asarray(x, dtype=np.float64).ravel()
    sa = np.asarray(se, dtype=np.float64).ravel()
    if xa.shape != sa.shape:
        raise ParameterError(f"{xa.size} estimates for {sa.size} standard errors")
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(sa)) and np.all(sa > 0)):
        raise ParameterError("estimates must be finite and standard errors finite and positive")
    return xa, sa


def default_grid(x: ArrayLike, se: ArrayLike, step_se: float = 0.25, dense_se: float = 40.0) -> np.ndarray:
    """Support points for the NPMLE: 0 to ``dense_se`` median standard errors in steps of ``step_se`` median
    standard errors (where shrinkage acts: an estimate a few standard errors from 0), then every positive
    estimate beyond that (there the likelihood is sharp, so the NPMLE's atoms sit at the estimates)."""
    xa, sa = _check(x, se)
    unit = float(np.median(sa)) if sa.size else 1.0
    top = float(max(xa.max(initial=0.0), 0.0) + 3 * sa.max(initial=0.0))
    dense = np.arange(0.0, min(top, dense_se * unit) + step_se * unit / 2, step_se * unit)
    return np.unique(np.concatenate([dense, xa[xa > dense[-1]]]))


def npmle_prior(
    x: ArrayLike, se: ArrayLike, grid: ArrayLike | None = None, *, tol: float = 1e-6
) -> tuple[np.ndarray, np.ndarray]:
    """NPMLE of the distribution of the ``f_s`` from ``x_s ~ N(f_s, se_s²)`` on ``grid`` (default
    :func:`default_grid`; frequencies are non-negative, so the grid starts at 0). EM (SQUAREM) stops when
    the weights move by less than ``tol`` or an iteration gains less than ``tol`` nats
    (docs/math/estimators.md#empirical-bayes-point-estimates-of-detected-strings). Returns ``(grid, weights)``."""
    xa, sa = _check(x, se)
    a = default_grid(xa, sa) if grid is None else np.asarray(grid, dtype=np.float64).ravel()
    if a.size == 0:
        raise ParameterError("empty grid")
    if xa.size == 0:
        return a, np.full(a.size, 1.0 / a.size)
    res = em_multinomial(np.ones(xa.size), _kernel(xa, sa, a), tol=tol, ll_tol=tol)
    return a, np.asarray(res.p)


def posterior_mean(x: ArrayLike, se: ArrayLike, grid: ArrayLike, weights: ArrayLike) -> np.ndarray:
    """``E[f_s | x_s]`` when ``f_s`` has the discrete distribution ``weights`` on ``grid``."""
    xa, sa = _check(x, se)
    a = np.asarray(grid, dtype=np.float64).ravel()
    g = np.asarray(weights, dtype=np.float64).ravel()
    if a.shape != g.shape:
        raise ParameterError("grid and weights differ in length")
    joint = _kernel(xa, sa, a) * g[:, None]
    out: np.ndarray = (a @ joint) / np.maximum(joint.sum(axis=0), 1e-300)
    return out
