"""Closed-alphabet decoders for k-RR and k-RAPPOR (docs/math/estimators.md: k-RR and k-RAPPOR unbiased
estimators, back onto the simplex).

Methods:

- ``"unbiased"``: the inversion estimator (may be negative).
- ``"truncate"``: negatives set to 0, renormalized.
- ``"project"``: Euclidean projection of the unbiased estimate onto the simplex.
- ``"mle"``: EM over the exact channel (:func:`ldpstream.estimators.em.em_multinomial`).

Standard errors are analytic. For the unbiased estimator, ``Var(p̂_i) = c² m_i (1 − m_i) / n`` with
``m`` the report distribution, evaluated at the empirical ``m̂`` (plug-in); ``c = (e^ε + k − 1)/(e^ε − 1)``
for k-RR and ``c = 1/(q* − p*) = (e^{ε/2} + 1)/(e^{ε/2} − 1)`` for k-RAPPOR. ``"truncate"`` and
``"project"`` report the same standard errors (those of the estimator they post-process: conservative
near the interior, not exact at the boundary); ``"mle"`` reports the observed-information standard errors
(see :func:`ldpstream.estimators.variance.constrained_variances`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import KRR, check_epsilon
from ldpstream.mechanisms.base import DIRECT_METHODS
from ldpstream.mechanisms.rates import bit_rates

from .channels import AffineChannel
from .em import em_multinomial
from .estimate import Estimate, detection_floor
from .simplex import project_simplex, truncate_normalize
from .variance import bit_variance, constrained_variances, krr_variance

__all__ = [
    "DirectMethod",
    "estimate_krappor",
    "estimate_krr",
    "krappor_channel",
    "krappor_expected_l1",
    "krappor_expected_l2sq",
    "krappor_unbiased",
    "krr_channel",
    "krr_expected_l1",
    "krr_expected_l2sq",
    "krr_unbiased",
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

    ``"mle"`` maximizes the exact multinomial likelihood ``Σ_y n_y log (pQ)_y`` by EM.
    """
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
    floor = detection_floor(float(np.sqrt(krr_variance(0.0, n, epsilon, k))), k)
    info: dict[str, Any] = {"epsilon": epsilon, "k": k}
    if method == "mle":
        ch = AffineChannel(sp.identity(k, format="csr"), [(e - 1) / (e + k - 1)], [1 / (e + k - 1)])
        res = em_multinomial(counts, ch, tol=tol, max_iter=max_iter)
        p = res.p
        m = np.maximum(ch.forward(p), 1e-300)
        # Expected (Fisher) information n Σ_y (∂m_y)²/m_y: unlike the observed one it stays positive for
        # outputs seen zero times, so a small sample cannot publish a zero-width interval.
        var = constrained_variances(ch.information(n / m))
        info.update(n_iter=res.n_iter, converged=res.converged, log_likelihood=res.log_likelihood)
    else:
        unbiased = krr_unbiased(counts, epsilon)
        p = _post_process(unbiased, method)
        # Var p̂_i at the fitted report distribution m = ((e^ε − 1)p + 1)/(e^ε + k − 1) of the projected
        # estimate: m_i ≥ 1/(e^ε + k − 1) > 0, where the empirical m̂_i can be 0 or 1.
        var = krr_variance(project_simplex(unbiased), n, epsilon)
    return Estimate(p, np.sqrt(var), round(n), f"krr/{method}", labels, None, None, floor, info)


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
    ``π_j = p* + (q* − p*) p_j``, treating the k bit sums as independent binomials. It is a composite (not
    the full) likelihood because the bit sums are not sufficient: the reports are vectors of k dependent
    bits and the sketch keeps only their margins. Its EM is the multinomial EM over 2k pseudo-outputs
    ("bit j set", "bit j clear"), and its standard errors come from the naive composite information
    (they ignore the within-report dependence of the bits, which is of order (q* − p*)² p).
    """
    arr = np.asarray(sketch, dtype=np.float64)
    arr = arr.reshape(-1, arr.shape[-1]).sum(axis=0)
    n = float(arr[0])
    T = arr[1:]
    k = T.size
    if n <= 0:
        raise ParameterError("no reports to decode")
    if method not in _METHODS:
        raise ParameterError(f"unknown method {method!r}; use one of {_METHODS}")
    epsilon = check_epsilon(epsilon)
    q_star, p_star = bit_rates(epsilon / 2)
    delta = q_star - p_star
    floor = detection_floor(float(np.sqrt(bit_variance(0.0, n, q_star, p_star))), k)
    info: dict[str, Any] = {"epsilon": epsilon, "k": k}
    if method == "mle":
        ch = AffineChannel(
            sp.identity(k, format="csr"), [delta / k, -delta / k], [p_star / k, (1 - p_star) / k]
        )
        pseudo = np.concatenate([T, n - T])
        res = em_multinomial(pseudo, ch, tol=tol, max_iter=max_iter)
        p = res.p
        m = np.maximum(ch.forward(p), 1e-300)
        var = constrained_variances(ch.information(pseudo.sum() / m))  # expected information (see k-RR)
        info.update(n_iter=res.n_iter, converged=res.converged, log_likelihood=res.log_likelihood)
    else:
        unbiased = krappor_unbiased(T, n, epsilon)
        p = _post_process(unbiased, method)
        # Var p̂_j at the fitted bit rate π = p* + (q* − p*) p of the projected estimate, which lies in
        # [p*, q*], where the empirical T_j/n can be 0 or 1.
        var = bit_variance(project_simplex(unbiased), n, q_star, p_star)
    return Estimate(p, np.sqrt(var), round(n), f"krappor/{method}", labels, None, None, floor, info)
