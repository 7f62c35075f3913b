"""Intervals, tests and standard errors for the direct (k-RR, k-RAPPOR) decoders
(docs/math/estimators.md#intervals-of-the-direct-decoders).

- :func:`affine_score_interval`: the Wilson (score) interval of a binomial rate ``r = base + slope · p``,
  mapped to ``p`` and intersected with [0, 1]. In both direct channels each coordinate's sketch count is
  exactly ``Binomial(n, base + slope · p_i)``, so the interval is a property of ``p_i`` alone: it does not
  depend on how the point estimate was put back onto the simplex.
- :func:`null_score_z`: the matching score statistic of ``H0: p_i = 0`` (rate ``base`` exactly under H0);
  its one-sided test at 2.5% rejects exactly when the score interval's lower bound is above 0.
- :func:`active_set_variances`: variances of a post-processed estimate ``p̂_A = s · A (u_A)`` (projection,
  truncation, maximum likelihood) linearized on its active set, from the exact covariance
  ``diag(d) − g gᵀ`` of the unbiased estimate ``u`` (a sandwich: for k-RAPPOR this carries the
  dependence of the bits of one report that the composite likelihood ignores).
- :func:`censored_moments`, :func:`censored_sd`: moments of ``max(X, 0)``, ``X ~ N(mean, sd²)``, for cells at
  and near 0.
- :class:`ScoreTestedEstimate`: an :class:`~ldpstream.estimators.estimate.Estimate` whose tests use the
  score statistic instead of ``frequency / std_error``.

All closed form and O(k): no resampling, so a live refresh can afford them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import special, stats

from .estimate import ConfidenceInterval, Estimate

__all__ = [
    "Z95",
    "ScoreTestedEstimate",
    "active_set_variances",
    "affine_score_interval",
    "censored_moments",
    "censored_sd",
    "null_score_z",
    "small_count_wilson",
    "wilson_interval",
]

Z95 = float(stats.norm.isf(0.025))


def wilson_interval(x: ArrayLike, n: float, z: float = Z95) -> ConfidenceInterval:
    """Wilson score interval of a binomial proportion: ``{r : |x/n − r| ≤ z sqrt(r(1 − r)/n)}``."""
    r = np.asarray(x, dtype=np.float64) / n
    z2n = z * z / n
    centre = (r + z2n / 2) / (1 + z2n)
    half = z * np.sqrt(np.maximum(r * (1 - r), 0.0) / n + z2n / (4 * n)) / (1 + z2n)
    return ConfidenceInterval(centre - half, centre + half)


#: Counts up to which a score interval's bound takes the Poisson bound when wider (:func:`small_count_wilson`).
SMALL_COUNT = 10.0


def small_count_wilson(x: ArrayLike, n: float, z: float = Z95) -> ConfidenceInterval:
    """The Wilson interval with Brown, Cai and DasGupta's (2001, §4.1.1) small-count bounds: for
    ``0 < x ≤ SMALL_COUNT`` the lower bound is at most the one-sided Poisson bound ``χ²_{2x}(α)/(2n)``
    (``α = Φ(−z)``), and likewise the upper bound for ``0 < n − x ≤ SMALL_COUNT``
    (docs/math/estimators.md#small-counts).
    ``x`` may be fractional (a window's effective count)."""
    x = np.asarray(x, dtype=np.float64)
    lo, hi = (np.array(b, dtype=np.float64) for b in wilson_interval(x, n, z))
    alpha = float(special.ndtr(-z))
    total = np.broadcast_to(np.asarray(n, dtype=np.float64), x.shape)
    # χ²_{2x}(α)/2 is the regularized incomplete gamma's inverse at (x, α); evaluated on the few small counts only
    small = (x > 0) & (x <= SMALL_COUNT)
    lo[small] = np.minimum(lo[small], special.gammaincinv(x[small], alpha) / total[small])
    rest = total - x
    small = (rest > 0) & (rest <= SMALL_COUNT)
    hi[small] = np.maximum(hi[small], 1.0 - special.gammaincinv(rest[small], alpha) / total[small])
    return ConfidenceInterval(lo, hi)


def affine_score_interval(x: ArrayLike, n: float, base: float, slope: float, z: float = Z95) -> ConfidenceInterval:
    """Score interval of ``p`` when ``x ~ Binomial(n, base + slope · p)`` (``slope > 0``), within [0, 1].

    The Wilson interval of the rate with small-count bounds (:func:`small_count_wilson`) is mapped through the
    increasing map ``p = (r − base)/slope`` and then intersected with the parameter space [0, 1] (which removes
    only impossible values: coverage is kept).
    """
    lo, hi = small_count_wilson(x, n, z)
    return ConfidenceInterval(
        np.clip((lo - base) / slope, 0.0, 1.0), np.clip((hi - base) / slope, 0.0, 1.0)
    )


def null_score_z(x: ArrayLike, n: float, base: float) -> np.ndarray:
    """``(x/n − base) / sqrt(base (1 − base)/n)``: the score statistic of ``p = 0`` (rate = ``base``)."""
    z: np.ndarray = (np.asarray(x, dtype=np.float64) / n - base) / np.sqrt(base * (1 - base) / n)
    return z


def active_set_variances(
    d: np.ndarray, g: np.ndarray, w: np.ndarray, scale: float = 1.0
) -> np.ndarray:
    """``diag(s² A C Aᵀ)`` with ``A = I − w 1ᵀ`` and ``C = diag(d) − g gᵀ`` (all on the active set).

    ``(A C Aᵀ)_jj = d_j (1 − 2 w_j) + w_j² Σd − (g_j − w_j Σg)²``: O(k), no matrix formed.
    """
    sd, sg = float(d.sum()), float(g.sum())
    var = d * (1 - 2 * w) + w * w * sd - (g - w * sg) ** 2
    out: np.ndarray = np.maximum(var, 0.0) * scale * scale
    return out


def censored_moments(mean: ArrayLike, sd: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``(E max(X, 0), E max(X, 0)²)`` for ``X ~ N(mean, sd²)`` (``sd = 0``: ``X = mean``)."""
    mu = np.asarray(mean, dtype=np.float64)
    s = np.asarray(sd, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(s > 0, mu / np.where(s > 0, s, 1.0), np.sign(mu) * np.inf)
    cdf = special.ndtr(a)
    pdf = np.where(np.isfinite(a), np.exp(-0.5 * np.where(np.isfinite(a), a, 0.0) ** 2) / np.sqrt(2 * np.pi), 0.0)
    m1 = mu * cdf + s * pdf
    m2 = (mu * mu + s * s) * cdf + mu * s * pdf
    return m1, m2


def censored_sd(mean: ArrayLike, sd: ArrayLike) -> np.ndarray:
    """Standard deviation of ``max(X, 0)`` for ``X ~ N(mean, sd²)`` (``sd = 0`` gives 0)."""
    m1, m2 = censored_moments(mean, sd)
    out: np.ndarray = np.sqrt(np.maximum(m2 - m1 * m1, 0.0))
    return out


@dataclass(frozen=True, eq=False, kw_only=True)
class ScoreTestedEstimate(Estimate):
    """An :class:`Estimate` whose significance tests use the score statistic of ``H0: p_s = 0``.

    ``null_z`` is that statistic; :meth:`z_scores` (and so :meth:`p_values` and :meth:`significant`)
    returns it. With a score interval published beside it, ``p_value < 0.025`` exactly when the
    interval's lower bound is above 0: the test and the interval agree, whatever the point estimate.
    """

    null_z: np.ndarray | None = None

    def z_scores(self) -> np.ndarray:
        """The score statistic of ``p_s = 0`` (``frequency / std_error`` when none was given)."""
        if self.null_z is None:
            return super().z_scores()
        return np.asarray(self.null_z, dtype=np.float64)
