"""Closed-alphabet decoders for k-RR and k-RAPPOR (docs/math/estimators.md: k-RR and k-RAPPOR unbiased
estimators, back onto the simplex).

Methods:

- ``"unbiased"``: the inversion estimator (may be negative).
- ``"truncate"``: negatives set to 0, renormalized.
- ``"project"``: Euclidean projection of the unbiased estimate onto the simplex.
- ``"mle"``: EM over the exact channel (:func:`ldpstream.estimators.em.em_multinomial`).

Every method publishes the same 95% interval for each coordinate (``interval_method = "wilson-score"``): each
sketch count is exactly binomial with a rate affine in that coordinate (k-RR: ``n_y ~ Bin(n, m_y)``,
``m_y = ((e^ε − 1) p_y + 1)/(e^ε + k − 1)``; k-RAPPOR: ``T_j ~ Bin(n, p* + (q* − p*) p_j)``), so the Wilson
score interval of the rate, mapped to ``p`` and intersected with [0, 1], covers ``p_y`` whatever the
post-processing. Tests of ``p_y = 0`` use the matching score statistic (the rate is known under H0), so a
Bonferroni or BH flag agrees with the interval. Standard errors describe the published point: exact for
``"unbiased"``; for ``"truncate"``, ``"project"`` and ``"mle"`` the linearization on the active set with the
exact covariance of the sketch (for k-RAPPOR a sandwich: the bits of a report are dependent), and for cells
at 0 the sd of the censored estimate (docs/math/estimators.md#intervals-of-the-direct-decoders). All closed
form (cost: docs/math/estimators.md#standard-errors-of-the-post-processed-estimates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, stats

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import KRR, check_epsilon
from ldpstream.mechanisms.base import DIRECT_METHODS
from ldpstream.mechanisms.rates import bit_rates

from .estimate import Estimate, detection_floor
from .intervals import (
    ScoreTestedEstimate,
    active_set_variances,
    affine_score_interval,
    censored_moments,
    censored_sd,
    null_score_z,
)
from .numerics.simplex import project_simplex, truncate_normalize
from .numerics.variance import bit_variance, krr_variance

__all__ = [
    "DirectMethod",
    "estimate_krappor",
    "estimate_krr",
    "estimate_unary",
    "krappor_channel",
    "krappor_expected_l1",
    "krappor_expected_l2sq",
    "krappor_mle",
    "krappor_unbiased",
    "krr_channel",
    "krr_expected_l1",
    "krr_expected_l2sq",
    "krr_mle",
    "krr_unbiased",
    "unary_expected_l1",
    "unary_expected_l2sq",
    "unary_mle",
    "unary_unbiased",
]

DirectMethod = Literal["unbiased", "truncate", "project", "mle"]
_METHODS = DIRECT_METHODS


# ------------------------------------------------------------------------------------------------ k-RR
def krr_channel(k: int, epsilon: float) -> np.ndarray:
    """The k-RR channel ``Q(y|x) = e^ε/(e^ε + k − 1)`` if ``y = x`` else ``1/(e^ε + k − 1)`` (k × k): the
    mechanism's own (:meth:`ldpstream.mechanisms.KRR.channel`)."""
    return KRR(k, epsilon).channel()


def krr_unbiased(counts: ArrayLike, epsilon: float) -> np.ndarray:
    """``p̂ = ((e^ε + k − 1) m̂ − 1)/(e^ε − 1)``, ``m̂ = counts / n``
    (docs/math/estimators.md#k-rr-unbiased-estimator). Last axis = symbols."""
    c = np.asarray(counts, dtype=np.float64)
    k = c.shape[-1]
    n = c.sum(axis=-1, keepdims=True)
    if np.any(n <= 0):
        raise ParameterError("no reports to decode")
    e = np.exp(epsilon)
    p_hat: np.ndarray = ((e + k - 1) * (c / n) - 1.0) / (e - 1.0)
    return p_hat


def krr_unbiased_count(x: ArrayLike, n: float, epsilon: float, k: int) -> np.ndarray:
    """:func:`krr_unbiased` of one coordinate from its count ``x`` (any shape) out of ``n`` reports."""
    e = np.exp(epsilon)
    out: np.ndarray = ((e + k - 1) * np.asarray(x, dtype=np.float64) / n - 1.0) / (e - 1.0)
    return out


def krr_expected_l2sq(p: ArrayLike, n: float, epsilon: float) -> float:
    """``E‖p̂ − p‖² = (1 − Σ p_i²)/n + (k − 1)(k + 2(e^ε − 1)) / (n (e^ε − 1)²)`` (unbiased k-RR)."""
    p = np.asarray(p, dtype=np.float64)
    k = p.size
    em1 = np.expm1(epsilon)
    return float((1 - np.sum(p * p)) / n + (k - 1) * (k + 2 * em1) / (n * em1**2))


def krr_expected_l1(p: ArrayLike, n: float, epsilon: float) -> float:
    """``E‖p̂ − p‖₁ ≈ Σ_i sqrt(2((e^ε − 1)p_i + 1)((e^ε − 1)(1 − p_i) + k − 1) / (π n (e^ε − 1)²))``."""
    p = np.asarray(p, dtype=np.float64)
    k = p.size
    em1 = np.expm1(epsilon)
    return float(np.sum(np.sqrt(2 * (em1 * p + 1) * (em1 * (1 - p) + k - 1) / (np.pi * n * em1**2))))


# -------------------------------------------------------------------------------------------- k-RAPPOR
def krappor_channel(k: int, epsilon: float) -> tuple[float, float]:
    """``(q*, p*) = (e^{ε/2}/(1 + e^{ε/2}), 1/(1 + e^{ε/2}))``: each one-hot bit kept w.p. q*, flipped w.p. p*
    (:func:`ldpstream.mechanisms.rates.bit_rates` at ε/2)."""
    del k
    return bit_rates(epsilon / 2)


def krappor_unbiased(bit_counts: ArrayLike, n: ArrayLike, epsilon: float) -> np.ndarray:
    """``p̂_j = ((e^{ε/2} + 1) T_j / n − 1)/(e^{ε/2} − 1)`` (docs/math/estimators.md#k-rappor-unbiased-estimator)."""
    T = np.asarray(bit_counts, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    if np.any(n_arr <= 0):
        raise ParameterError("no reports to decode")
    a = np.exp(epsilon / 2)
    p_hat: np.ndarray = ((a + 1) * T / n_arr - 1) / (a - 1)
    return p_hat


def unary_unbiased(bit_counts: ArrayLike, n: ArrayLike, q_star: float, p_star: float) -> np.ndarray:
    """``p̂_j = (T_j/n − p*)/(q* − p*)``, unbiased when ``E T_j = n(p* + (q* − p*) p_j)``
    (docs/math/estimators.md#the-unary-family; Wang et al. 2017 eq. 2)."""
    T = np.asarray(bit_counts, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    if np.any(n_arr <= 0):
        raise ParameterError("no reports to decode")
    p_hat: np.ndarray = (T / n_arr - p_star) / (q_star - p_star)
    return p_hat


def unary_expected_l2sq(p: ArrayLike, n: float, q_star: float, p_star: float) -> float:
    """``E‖p̂ − p‖² = Σ_j π_j(1 − π_j)/(n δ²)``, π_j = p* + δ p_j, δ = q* − p*, of :func:`unary_unbiased`
    (docs/math/estimators.md#the-risk-of-the-unary-family); equals ``(unary_risk(k, q*, p*) − Σ p_j²)/n``."""
    p = np.asarray(p, dtype=np.float64)
    delta = q_star - p_star
    pi = p_star + delta * p
    return float(np.sum(pi * (1 - pi)) / (n * delta * delta))


def unary_expected_l1(p: ArrayLike, n: float, q_star: float, p_star: float) -> float:
    """``E‖p̂ − p‖₁ ≈ Σ_j sqrt(2 π_j(1 − π_j)/(π n δ²))`` (normal approximation) of :func:`unary_unbiased`."""
    p = np.asarray(p, dtype=np.float64)
    delta = q_star - p_star
    pi = p_star + delta * p
    return float(np.sum(np.sqrt(2 * pi * (1 - pi) / (np.pi * n * delta * delta))))


def krappor_expected_l2sq(p: ArrayLike, n: float, epsilon: float) -> float:
    """``E‖p̂ − p‖² = (1 − Σ p_i²)/n + k e^{ε/2} / (n (e^{ε/2} − 1)²)`` (unbiased k-RAPPOR)."""
    p = np.asarray(p, dtype=np.float64)
    k = p.size
    a = np.exp(epsilon / 2)
    return float((1 - np.sum(p * p)) / n + k * a / (n * (a - 1) ** 2))


def krappor_expected_l1(p: ArrayLike, n: float, epsilon: float) -> float:
    """``E‖p̂ − p‖₁ ≈ Σ_i sqrt(2((e^{ε/2} − 1)p_i + 1)((e^{ε/2} − 1)(1 − p_i) + 1) / (π n (e^{ε/2} − 1)²))``."""
    p = np.asarray(p, dtype=np.float64)
    am1 = np.expm1(epsilon / 2)
    return float(np.sum(np.sqrt(2 * (am1 * p + 1) * (am1 * (1 - p) + 1) / (np.pi * n * am1**2))))


# ------------------------------------------------------------------------------------------- decoders
def _post_process(p_hat: np.ndarray, method: str) -> np.ndarray:
    if method == "unbiased":
        return p_hat
    if method == "truncate":
        return truncate_normalize(p_hat)
    if method == "project":
        return project_simplex(p_hat)
    raise ParameterError(f"unknown method {method!r}; use one of {_METHODS}")


def krr_mle(counts: ArrayLike, epsilon: float) -> np.ndarray:
    """The k-RR maximum-likelihood estimate in closed form (docs/math/estimators.md#k-rr-maximum-likelihood).

    Maximizing ``Σ_y c_y log((e^ε − 1) p_y + 1)`` on the simplex, the KKT conditions give
    ``p_y = max(c_y/μ − 1/(e^ε − 1), 0)``: a threshold on the counts, with ``μ = S_ρ/(1 + ρ/(e^ε − 1))`` over
    the ``ρ`` largest counts (sort-based, like the simplex projection). Last axis = symbols; rows independent.
    """
    c = np.asarray(counts, dtype=np.float64)
    a = np.expm1(epsilon)
    u = -np.sort(-c, axis=-1)
    css = np.cumsum(u, axis=-1)
    r = np.arange(1, c.shape[-1] + 1, dtype=np.float64)
    mu_r = css / (1 + r / a)
    rho = np.maximum(np.count_nonzero(a * u > mu_r, axis=-1, keepdims=True), 1)
    mu = np.take_along_axis(mu_r, rho - 1, axis=-1)
    p = np.maximum(c / mu - 1 / a, 0.0)
    out: np.ndarray = p / p.sum(axis=-1, keepdims=True)
    return out


def _bit_root(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The root in [0, 1] of ``x − π − t π (1 − π) = 0`` (maximizer of ``x log π + (1 − x) log(1 − π) − t π``)."""
    disc = np.sqrt(np.maximum((1 + t) ** 2 - 4 * t * x, 0.0))
    den = (1 + t) + disc
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.where(den > 0, 2 * x / np.where(den > 0, den, 1.0), 0.0)
        zero_x = np.where(t < -1, (1 + t) / np.where(t < -1, t, 1.0), 0.0)
    out: np.ndarray = np.clip(np.where(x > 0, root, zero_x), 0.0, 1.0)
    return out


def krappor_mle(bit_counts: ArrayLike, n: float, epsilon: float, iters: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """The k-RAPPOR composite-likelihood estimate and its multiplier ``t``
    (docs/math/estimators.md#k-rappor-composite-maximum-likelihood).

    Maximizes ``Σ_j T_j log π_j + (n − T_j) log(1 − π_j)``, ``π_j = p* + δ p_j``, on the simplex. At a given
    multiplier ``t`` each coordinate is a one-dimensional concave problem with root
    ``π_j(t) = 2x_j / (1 + t + sqrt((1 + t)² − 4 t x_j))``, ``x_j = T_j/n``, clipped to ``[p*, q*]``;
    ``Σ_j p_j(t)`` decreases in ``t`` and is bisected to 1. Rows independent. Returns ``(p, t)``.
    """
    return unary_mle(bit_counts, n, *bit_rates(epsilon / 2), iters=iters)


def unary_mle(
    bit_counts: ArrayLike, n: float, q_star: float, p_star: float, iters: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`krappor_mle` for any margin rates ``(q*, p*)``, q* > p* (OUE, subset selection, Hadamard response:
    docs/math/estimators.md#the-unary-family)."""
    x = np.asarray(bit_counts, dtype=np.float64) / n
    delta = q_star - p_star

    def p_of(t: np.ndarray) -> np.ndarray:
        return np.clip((_bit_root(x, t) - p_star) / delta, 0.0, 1.0)

    lo = np.min((x - q_star) / (q_star * (1 - q_star)), axis=-1, keepdims=True) - 1.0
    hi = np.max((x - p_star) / (p_star * (1 - p_star)), axis=-1, keepdims=True) + 1.0
    if x.ndim == 1:  # one sketch: Brent's method on the scalar equation (a few evaluations)
        t1 = optimize.brentq(lambda t: float(p_of(np.array(t)).sum()) - 1.0, float(lo[0]), float(hi[0]),
                             xtol=1e-14, rtol=4 * np.finfo(float).eps)
        lo = hi = np.array([t1])
    for _ in range(0 if x.ndim == 1 else iters):
        mid = 0.5 * (lo + hi)
        above = p_of(mid).sum(axis=-1, keepdims=True) > 1.0
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        if np.all(hi - lo <= 1e-13 * np.maximum(1.0, np.abs(hi))):
            break
    t = 0.5 * (lo + hi)
    p = p_of(t)
    s = p.sum(axis=-1, keepdims=True)
    p = np.where(s > 0, p / np.where(s > 0, s, 1.0), 1.0 / x.shape[-1])
    return p, t[..., 0]


_EXACT_SD_MAX = 100.0  # sd of a zero cell's count up to which its law is summed term by term


def _post_processed_se(
    p: np.ndarray,
    d: np.ndarray,
    g: np.ndarray,
    w: np.ndarray,
    scale: float,
    omega: float,
    latent: Callable[[np.ndarray], np.ndarray],
    n: float,
    base: float,
) -> np.ndarray:
    """Standard errors of a post-processed estimate ``p̂ = max(latent, 0)``, from the covariance
    ``diag(d) − g gᵀ`` of the unbiased estimate
    (docs/math/estimators.md#standard-errors-of-the-post-processed-estimates).

    Active cells (``p > 0``): the linearized ``s A (u_A)``, ``A = I − w 1ᵀ`` (:func:`active_set_variances`),
    censored at 0. Cells at 0: the estimate is ``max(latent(x_y) + s ω (Σ_A u − E Σ_A u), 0)`` with ``x_y`` the
    cell's own count, ``Binomial(n, base)`` at ``p_y = 0`` (summed exactly over its pmf, as small expected counts
    are skewed; beyond a count sd of 100, its normal limit with the latent value linear across it), and
    the shift or threshold set by the active cells treated as normal, of variance
    ``s² (ω² Σ_A d − (g_y − ω Σ_A g)² + g_y²)``.
    """
    act = p > 0
    se = np.empty_like(p)
    se[act] = censored_sd(p[act], np.sqrt(active_set_variances(d[act], g[act], w[act], scale)))
    if act.all():
        return se
    y = int(np.flatnonzero(~act)[0])  # every cell at 0 has the same law (d, g evaluated at p = 0)
    sd_a, sg_a = float(d[act].sum()), float(g[act].sum())
    tau = scale * np.sqrt(max(omega * omega * sd_a - (g[y] - omega * sg_a) ** 2 + g[y] ** 2, 0.0))
    sd_x = np.sqrt(n * base * (1 - base))
    if sd_x <= _EXACT_SD_MAX:
        x = np.arange(max(0.0, np.floor(n * base - 12 * sd_x)), min(n, np.ceil(n * base + 12 * sd_x)) + 1)
        pmf = stats.binom.pmf(x, n, base)
        m1, m2 = censored_moments(latent(x), np.full(x.shape, tau))
        mean1, mean2 = float(np.dot(pmf, m1)), float(np.dot(pmf, m2))
    else:  # count sd > 100: the count is normal (skewness < 0.01) and the latent value linear across it
        lo_hi = latent(np.array([n * base - sd_x, n * base, n * base + sd_x]))
        slope_sd = 0.5 * float(lo_hi[2] - lo_hi[0])
        m1a, m2a = censored_moments(lo_hi[1], np.sqrt(slope_sd**2 + tau**2))
        mean1, mean2 = float(m1a), float(m2a)
    se[~act] = np.sqrt(max(mean2 - mean1 * mean1, 0.0))
    return se


def _score_estimate(
    p: np.ndarray, se: np.ndarray, n: float, method: str, labels: Sequence[Any] | None, floor: float,
    info: dict[str, Any], x: np.ndarray, base: float, slope: float,
) -> ScoreTestedEstimate:
    interval = affine_score_interval(x, n, base, slope)
    return ScoreTestedEstimate(
        frequencies=p, std_errors=se, n_reports=round(n), method=method, labels=labels, residual=None,
        residual_std_error=None, detection_floor=floor, info=info, interval=interval, interval_method=INTERVAL_METHOD,
        null_z=null_score_z(x, n, base),
    )


INTERVAL_METHOD = "wilson-score"


def estimate_krr(
    sketch: ArrayLike,
    epsilon: float,
    method: DirectMethod = "project",
    labels: Sequence[Any] | None = None,
    *,
    tol: float = 1e-9,
    max_iter: int = 20_000,
) -> Estimate:
    """Decode a k-RR count sketch (``(k,)`` or ``(C, k)``; cohorts are summed).

    ``"mle"`` maximizes the exact multinomial likelihood ``Σ_y n_y log (pQ)_y`` (closed form,
    :func:`krr_mle`). Every method publishes the same 95% interval, the Wilson score interval of each
    count ``n_y ~ Binomial(n, m_y)`` mapped to ``p_y`` (``interval_method = "wilson-score"``), and tests
    ``p_y = 0`` with the matching score statistic (:class:`~ldpstream.estimators.intervals.ScoreTestedEstimate`).
    ``tol`` and ``max_iter`` are accepted for compatibility (the MLE needs no iterations).
    """
    del tol, max_iter
    counts = np.asarray(sketch, dtype=np.float64)
    counts = counts.reshape(-1, counts.shape[-1]).sum(axis=0)
    k = counts.size
    n = float(counts.sum())
    if n <= 0:
        raise ParameterError("no reports to decode")
    if method not in _METHODS:
        raise ParameterError(f"unknown method {method!r}; use one of {_METHODS}")
    epsilon = check_epsilon(epsilon)
    e = np.exp(epsilon)
    a, D = e - 1.0, e + k - 1.0
    sd0 = float(np.sqrt(krr_variance(0.0, n, epsilon, k)))
    floor = detection_floor(sd0, k)
    info: dict[str, Any] = {"epsilon": epsilon, "k": k}
    unbiased = krr_unbiased(counts, epsilon)
    if method == "unbiased":
        # Var p̂_i at the fitted report distribution of the projected estimate (m_i ≥ 1/(e^ε + k − 1) > 0).
        se = np.sqrt(krr_variance(project_simplex(unbiased), n, epsilon))
        return _score_estimate(unbiased, se, n, "krr/unbiased", labels, floor, info, counts, 1 / D, a / D)
    if method == "mle":
        p = krr_mle(counts, epsilon)
        m = (a * p + 1) / D
        info.update(n_iter=0, converged=True, log_likelihood=float(np.dot(counts, np.log(m))))
    else:
        p = _post_process(unbiased, method)
    # Covariance of the unbiased estimate at the fit: (D/a)² (diag(m) − m mᵀ)/n.
    m = (a * p + 1) / D
    d, g = (D / a) ** 2 * m / n, (D / a) * m / np.sqrt(n)
    act = p > 0
    rho = max(int(act.sum()), 1)
    if method == "project":
        w, scale = np.full(k, 1.0 / rho), 1.0
        lam, omega = float(np.mean(p[act] - unbiased[act])), 1.0 / rho

        def latent(x: np.ndarray) -> np.ndarray:
            return krr_unbiased_count(x, n, epsilon, k) + lam
    elif method == "truncate":
        s = float(np.maximum(unbiased, 0.0).sum())
        w, scale, omega = p, 1.0 / s if s > 0 else 1.0, 0.0

        def latent(x: np.ndarray) -> np.ndarray:
            return krr_unbiased_count(x, n, epsilon, k) * scale
    else:
        # p = c/μ − 1/a on the active set, μ = Σ_A c / (1 + ρ/a); c = n(a u + 1)/D.
        mu = float(counts[act].sum() / (1 + rho / a))
        w = (p + 1 / a) / (1 + rho / a)
        scale = n * a / (D * mu)
        omega = (n / (D * mu)) / (1 + rho / a)

        def latent(x: np.ndarray) -> np.ndarray:
            out: np.ndarray = x / mu - 1 / a
            return out
    se = _post_processed_se(p, d, g, w, scale, omega, latent, n, 1 / D)
    return _score_estimate(p, se, n, f"krr/{method}", labels, floor, info, counts, 1 / D, a / D)


def estimate_krappor(
    sketch: ArrayLike,
    epsilon: float,
    method: DirectMethod = "project",
    labels: Sequence[Any] | None = None,
    *,
    tol: float = 1e-9,
    max_iter: int = 20_000,
) -> Estimate:
    """Decode a k-RAPPOR bit sketch (``(k + 1,)`` or ``(C, k + 1)``: column 0 reports, column 1 + j bit j).

    ``"mle"`` maximizes the composite likelihood ``Σ_j [T_j log π_j + (n − T_j) log(1 − π_j)]``,
    ``π_j = p* + (q* − p*) p_j`` (:func:`krappor_mle`), treating the k bit sums as independent binomials. It is
    a composite (not the full) likelihood: the bits of one report are dependent and the sketch keeps only
    their margins. Its standard errors are the sandwich (Godambe) ones, from the exact covariance of the bit
    sums (docs/math/estimators.md#standard-errors-of-the-post-processed-estimates). Every method publishes
    the Wilson score interval of each ``T_j ~ Binomial(n, π_j)`` mapped to ``p_j`` (exact margins: no
    independence assumed) and tests ``p_j = 0`` with the matching score statistic.
    ``tol`` and ``max_iter`` are accepted for compatibility.
    """
    epsilon = check_epsilon(epsilon)
    return estimate_unary(sketch, *bit_rates(epsilon / 2), method, labels, kind="krappor",
                          info={"epsilon": epsilon}, tol=tol, max_iter=max_iter)


def estimate_unary(
    sketch: ArrayLike,
    q_star: float,
    p_star: float,
    method: DirectMethod = "project",
    labels: Sequence[Any] | None = None,
    *,
    kind: str = "unary",
    info: dict[str, Any] | None = None,
    tol: float = 1e-9,
    max_iter: int = 20_000,
) -> Estimate:
    """Decode a unary sketch ``[n, T_0, …, T_{k−1}]`` (``(k + 1,)`` or ``(C, k + 1)``, cohorts summed) whose count
    ``T_j`` is ``Binomial(n, p* + (q* − p*) p_j)``: k-RAPPOR, OUE, subset selection, and Hadamard response after
    its transform (docs/math/estimators.md#the-unary-family). As :func:`estimate_krappor`, with these rates;
    the method is named ``kind/method``. The standard errors of the post-processed points use the covariance
    of one-hot reports with independent flips (exact for k-RAPPOR and OUE; for subset selection and HR the
    diagonal is exact and the cross terms are those of that model, docs/math/estimators.md#the-unary-family);
    the Wilson intervals and score tests use the exact margins for all.
    """
    del tol, max_iter
    arr = np.asarray(sketch, dtype=np.float64)
    arr = arr.reshape(-1, arr.shape[-1]).sum(axis=0)
    n = float(arr[0])
    T = arr[1:]
    k = T.size
    if n <= 0:
        raise ParameterError("no reports to decode")
    if method not in _METHODS:
        raise ParameterError(f"unknown method {method!r}; use one of {_METHODS}")
    q_star, p_star = float(q_star), float(p_star)
    if not 0.0 <= p_star < q_star <= 1.0:
        raise ParameterError(f"need rates 0 <= p* < q* <= 1, got q*={q_star}, p*={p_star}")
    delta = q_star - p_star
    sd0 = float(np.sqrt(bit_variance(0.0, n, q_star, p_star)))
    floor = detection_floor(sd0, k)
    info = {**(info or {}), "k": k}

    def unbiased_of(x: np.ndarray) -> np.ndarray:
        return unary_unbiased(x, n, q_star, p_star)

    unbiased = unbiased_of(T)
    if method == "unbiased":
        # Var p̂_j at the fitted bit rate π = p* + (q* − p*) p of the projected estimate (in [p*, q*]).
        se = np.sqrt(bit_variance(project_simplex(unbiased), n, q_star, p_star))
        return _score_estimate(unbiased, se, n, f"{kind}/unbiased", labels, floor, info, T, p_star, delta)
    t = 0.0
    if method == "mle":
        p, t_arr = unary_mle(T, n, q_star, p_star)
        t = float(t_arr)
        pi = p_star + delta * p
        ll = float(np.dot(T, np.log(pi)) + np.dot(n - T, np.log1p(-pi)))
        info.update(n_iter=0, converged=True, log_likelihood=ll, multiplier=t)
    else:
        p = _post_process(unbiased, method)
    # Exact covariance of the unbiased estimate (one-hot reports, bits flipped independently):
    # diag(π(1 − π)/(n δ²) + p²/n) − p pᵀ/n.
    pi = p_star + delta * p
    d, g = pi * (1 - pi) / (n * delta**2) + p * p / n, p / np.sqrt(n)
    act = p > 0
    rho = max(int(act.sum()), 1)
    if method == "project":
        w, scale = np.full(k, 1.0 / rho), 1.0
        lam, omega = float(np.mean(p[act] - unbiased[act])), 1.0 / rho

        def latent(x: np.ndarray) -> np.ndarray:
            return unbiased_of(x) + lam
    elif method == "truncate":
        s = float(np.maximum(unbiased, 0.0).sum())
        w, scale, omega = p, 1.0 / s if s > 0 else 1.0, 0.0

        def latent(x: np.ndarray) -> np.ndarray:
            return unbiased_of(x) * scale
    else:
        # Linearizing x_j − π_j − t π_j(1 − π_j) = 0 with Σ_A dπ = 0: dπ = dy − w Σ_A dy, dy_j = dx_j / h_j,
        # h_j = 1 + t(1 − 2π_j), w ∝ π(1 − π)/h; a cell at 0 has latent root π0 = π(t; x = p*).
        pi0 = float(_bit_root(np.array(p_star), np.array(t)))
        h = np.where(act, 1 + t * (1 - 2 * pi), 1 + t * (1 - 2 * pi0))
        v = pi * (1 - pi) / h
        w, scale = v / v[act].sum(), 1.0
        d, g = d / h**2, g / h
        omega = (pi0 * (1 - pi0) / (1 + t * (1 - 2 * pi0))) / float(v[act].sum())

        def latent(x: np.ndarray) -> np.ndarray:
            out: np.ndarray = (_bit_root(x / n, np.array(t)) - p_star) / delta
            return out
    se = _post_processed_se(p, d, g, w, scale, omega, latent, n, p_star)
    return _score_estimate(p, se, n, f"{kind}/{method}", labels, floor, info, T, p_star, delta)
