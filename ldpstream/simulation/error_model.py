"""The error model: predicted variance, bias and ℓ1 / ℓ2² error of a set-up's estimate.

For the unprojected least-squares or inversion estimate, the per-coordinate variance conditional on the sample:
k-RR ``((e^ε + k − 1)/(e^ε − 1))² m_i(1 − m_i)/n − p_i(1 − p_i)/n``, k-RAPPOR ``m_j(1 − m_j)/(n (q* − p*)²) −
p_j(1 − p_j)/n``, and for the hashed mechanisms the weighted least squares ``(Xᵀ V⁻¹ X)⁻¹`` (the sandwich for
O-RR's multinomial cells; the pseudo-inverse and the squared bias ``‖(I − X⁺X)p‖²`` when ``X`` has rank < S).
Then ``E ℓ2² ≈ Σ v_i + b_i²`` and ``E ℓ1 ≈ Σ sqrt(b_i² + 2 v_i/π)``; :func:`projected_l1` predicts the ℓ1 of the
projected estimate by a mean-field model of the projection threshold. ``reference="true"`` keeps the
population's sampling variance (errors against the true p). Derivations and their checks against simulation:
docs/math/tuning.md#variance-of-the-unprojected-estimate, #from-variances-to-expected-losses and
#projected-l1-a-mean-field-model.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq
from scipy.special import ndtr

from ldpstream.errors import ParameterError
from ldpstream.estimators.numerics.variance import bit_variance, krr_variance
from ldpstream.mechanisms.base import Mechanism
from ldpstream.simulation.setups import DECODERS, Setup, is_direct

#: Reference distributions the errors are measured against.
REFERENCES: tuple[str, ...] = ("empirical", "true")
#: O-RR with at most this many symbols is predicted with dense products (see :func:`predicted_variances`).
DENSE_ORR_MAX_K = 8


def predicted_variances(
    setup: Setup,
    p: np.ndarray,
    n: int,
    reference: str = "empirical",
    *,
    dense_max_k: int = DENSE_ORR_MAX_K,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-coordinate ``(variance, bias)`` of the unprojected estimate (module docstring; docs/math/tuning.md)
    against the sample's ``empirical`` distribution (default) or the ``true`` one (the sampling variance
    ``p(1 − p)/n`` of the population is then kept).

    O-RR with ``k <= dense_max_k`` is computed with dense products, otherwise with sparse ones (same
    numbers, different speed)."""
    if reference not in REFERENCES:
        raise ParameterError(f"reference must be one of {REFERENCES}, got {reference!r}")
    p = np.asarray(p, dtype=np.float64)
    sampling = p * (1 - p) / n if reference == "empirical" else np.zeros_like(p)
    mech = setup.mechanism
    if is_direct(mech):
        return np.maximum(response_variance(mech, p, n) - sampling, 0.0), np.zeros_like(p)
    X = setup.design
    C = mech.cohorts
    Nc = n / C
    xp = np.clip(X @ p, 0.0, 1.0)
    v = response_variance(mech, xp, Nc)
    symbols = mech.decoder_family == "candidates_symbol"  # O-RR's multinomial cells (not HCMS's agreements)
    w = 1.0 / v
    dense = symbols and setup.table is not None and mech.k <= dense_max_k
    if dense:
        # O-RR with few symbols: X has C·S ones in C·k rows; Xᵀ diag(w) X as k dense (S×C)(C×S) products
        # (BLAS, ~k·C·S² flops) beats the sparse product (~C·S²/k operations, ~100× slower each).
        T = np.asarray(setup.table)
        onehot = [np.equal(T, y).astype(np.float64) for y in range(mech.k)]
        wk = w.reshape(C, mech.k)
        G = sum(A.T @ (A * wk[:, y, None]) for y, A in enumerate(onehot))
    else:
        G = np.asarray((X.T @ sp.diags(w) @ X).todense())
    try:
        L = np.linalg.cholesky(G + 1e-12 * np.trace(G) / G.shape[0] * np.eye(G.shape[0]))
        full_rank = np.min(np.abs(np.diag(L))) ** 2 > 1e-9 * np.max(np.diag(G))
    except np.linalg.LinAlgError:
        full_rank = False
    Gi = np.linalg.inv(G) if full_rank else np.linalg.pinv(G, hermitian=True)
    bias = np.zeros_like(p) if full_rank else -(p - Gi @ (G @ p))
    if not symbols:
        var = np.diag(Gi).copy()
    else:
        # O-RR cells of one cohort are multinomial: Cov z_c = c²/N_c (diag(m_c) − m_c m_cᵀ), not diagonal.
        # Sandwich for the estimator A = G⁻¹XᵀW: diag(A Cov Aᵀ) = diag(G⁻¹ Xᵀ diag(w² c² m/N_c) X G⁻¹)
        # − (c²/N_c) Σ_c (A m_c)², with A m_c the columns of U = G⁻¹ Xᵀ (W M), M the cohort blocks of m,
        # m = Q(y|x) + (Q(x|x) − Q(y|x)) Xp the cells' response rates and c = 1/(Q(x|x) − Q(y|x)).
        keep, other = mech.response_rates
        c = 1.0 / (keep - other)
        m = other + (keep - other) * xp
        bw = w * w * c * c * m / Nc
        if dense:
            bk = bw.reshape(C, mech.k)
            B = sum(A.T @ (A * bk[:, y, None]) for y, A in enumerate(onehot))
            wm = (w * m).reshape(C, mech.k)
            XtWM = wm[np.arange(C)[:, None], T].T  # (S, C): (w m) of the cell candidate s falls in, cohort c
        else:
            B = np.asarray((X.T @ sp.diags(bw) @ X).todense())
            R = X.shape[0]
            blocks = sp.csr_matrix((w * m, (np.arange(R), np.arange(R) // mech.k)), shape=(R, C))
            XtWM = np.asarray((X.T @ blocks).todense())
        U = Gi @ XtWM
        var = np.einsum("ij,ij->i", Gi @ B, Gi) - (c * c / Nc) * np.einsum("ij,ij->i", U, U)
    return np.maximum(var - sampling, 0.0), bias


def response_variance(mech: Mechanism, p: np.ndarray, n: float | np.ndarray) -> np.ndarray:
    """Per-cell variance of the unbiased response of ``n`` reports (per cohort) whose true cells have
    frequencies ``p`` (``Xp`` for a hashed mechanism): :func:`~ldpstream.estimators.numerics.variance.krr_variance` over
    the ``k`` symbols of a symbol mechanism, :func:`~ldpstream.estimators.numerics.variance.bit_variance` at the
    :attr:`~ldpstream.mechanisms.base.Mechanism.response_rates` of a bit mechanism."""
    if mech.decoder_family in ("direct_symbol", "candidates_symbol"):
        return krr_variance(p, n, float(mech.epsilon), k=mech.k)
    # bits, and the agreement counts of HR / HCMS: binomial margins at the response rates
    return bit_variance(p, n, *mech.response_rates)


def _phi(z: np.ndarray) -> np.ndarray:
    """The standard normal density φ(z)."""
    density: np.ndarray = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return density


def projected_l1(p: np.ndarray, var: np.ndarray, bias: np.ndarray | None = None) -> float:
    """Predicted ℓ1 of the simplex projection of ``u = p + b + σZ`` (independent Gaussian coordinates).

    Mean-field model of the projection ``x_i = max(u_i + λ, 0)`` (docs/math/tuning.md, "Projected l1"; the projection
    itself: docs/math/estimators.md, "Euclidean projection onto the simplex"): with S large the threshold λ
    is nearly deterministic, so it is taken as the root of ``Σ_i E max(u_i + λ, 0) = 1``, where
    ``E max(a + σZ, 0) = aΦ(a/σ) + σφ(a/σ)``. Then
    ``E ℓ1 = Σ_i [ p_i Φ(z0_i) + E(|μ_i + σ_i Z|; Z ≥ z0_i) ]`` with ``μ_i = λ + b_i``,
    ``z0_i = −(p_i + μ_i)/σ_i`` (the coordinate is zeroed below z0_i, costing p_i) in closed form.
    Checked against simulation of the paper's decoder (LS + projection) at n = 10^6, S = 256: within
    ±4% for k-RR, k-RAPPOR, O-RR, O-RAPPOR over ε = 0.5..8 (the unprojected formula overestimates the
    projected error by up to ×3.5 at low ε, and not uniformly across parameters, which misranked them).
    """
    p = np.asarray(p, dtype=np.float64)
    b = np.zeros_like(p) if bias is None else np.asarray(bias, dtype=np.float64)
    s = np.sqrt(np.maximum(np.asarray(var, dtype=np.float64), 1e-300))

    def excess_mass(lam: float) -> float:
        a = p + b + lam
        return float(np.sum(a * ndtr(a / s) + s * _phi(a / s))) - 1.0

    lo, hi = -1.0, 1.0
    while excess_mass(lo) > 0:
        lo *= 2.0
    while excess_mass(hi) < 0:
        hi *= 2.0
    lam = brentq(excess_mass, lo, hi, xtol=1e-14, rtol=1e-12)
    mu = lam + b
    z0 = -(p + mu) / s
    zc = -mu / s
    # E(|μ + σZ|; Z ≥ z0) with the sign change at zc ≥ z0 (p ≥ 0)
    pos = mu * (1 - ndtr(zc)) + s * _phi(zc)
    neg = mu * (ndtr(zc) - ndtr(z0)) + s * (_phi(z0) - _phi(zc))
    return float(np.sum(p * ndtr(z0) + pos - neg))


def predict(setup: Setup, p: np.ndarray, n: int, reference: str = "empirical") -> dict[str, float]:
    """Predicted errors against the ``reference`` distribution: ``l1`` and ``l2sq`` of the unprojected
    estimate, ``l1_projected`` of the estimate projected onto the simplex (:func:`projected_l1`)."""
    var, bias = predicted_variances(setup, p, n, reference)
    return {
        "l1": float(np.sum(np.sqrt(bias * bias + 2.0 * var / math.pi))),
        "l2sq": float(np.sum(var + bias * bias)),
        "l1_projected": projected_l1(p, var, bias),
    }


def criterion(decoder: str) -> str:
    """The :func:`predict` key that models ``decoder``: ``l1_projected`` for the decoders whose output is
    on the simplex (``project``, ``nnls``, ``mle``, ``truncate``; MLE measured within a few % of the
    projection in the paper's setting), ``l1`` for the unconstrained ``ls`` / ``unbiased``."""
    if decoder not in DECODERS:
        raise ParameterError(f"unknown decoder {decoder!r}; expected one of {DECODERS}")
    return "l1" if decoder in ("ls", "unbiased") else "l1_projected"
