"""Variances of the estimators: of the unbiased k-RR and bit (k-RAPPOR, O-RAPPOR, RAPPOR) responses, and of
estimates constrained to the simplex, from the information matrix of a channel.

- Response variances (docs/math/estimators.md#k-rr-unbiased-estimator, #k-rappor-unbiased-estimator): one
  home for each, used by the direct and the candidate decoders.
- Aitchison–Silvey: the covariance of a maximum-likelihood estimate on ``Σ p = 1`` is the inverse information
  restricted to the tangent space (docs/math/estimators.md#standard-errors-of-the-maximum-likelihood-estimate).

Inputs are assumed validated (ε by the public decoders or the mechanisms' constructors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import scipy.linalg as sl
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.rates import bit_rates

from ..channels import AffineChannel
from .gram import WeightedGram
from .linalg import cholesky_inverse_diagonal

__all__ = ["affine_constrained_variances", "bit_variance", "constrained_variances", "krappor_variance", "krr_variance"]


def krr_variance(p: ArrayLike, n: ArrayLike, epsilon: float, k: int | None = None) -> np.ndarray:
    """Per-coordinate variance of the unbiased k-RR estimator (docs/math/estimators.md#k-rr-unbiased-estimator):
    ``((e^ε + k − 1)/(e^ε − 1))² m_i (1 − m_i)/n`` with ``m = ((e^ε − 1) p + 1)/(e^ε + k − 1)``.

    ``k`` defaults to the length of ``p``'s last axis; give it when ``p`` holds the responses of several cohorts
    (O-RR: ``p`` = the fitted ``(X p)`` cells, ``n`` = each cell's cohort size).
    """
    p = np.asarray(p, dtype=np.float64)
    k = p.shape[-1] if k is None else k
    e = np.exp(epsilon)
    m = ((e - 1) * p + 1) / (e + k - 1)
    var: np.ndarray = ((e + k - 1) / (e - 1)) ** 2 * m * (1 - m) / n
    return var


def bit_variance(p: ArrayLike, n: ArrayLike, q_star: float, p_star: float) -> np.ndarray:
    """Per-coordinate variance of the unbiased bit estimator ``(T/n − p*)/(q* − p*)``
    (docs/math/estimators.md#k-rappor-unbiased-estimator): ``r (1 − r)/(n (q* − p*)²)`` with
    ``r = p* + (q* − p*) p``."""
    delta = q_star - p_star
    r = p_star + delta * np.asarray(p, dtype=np.float64)
    return r * (1 - r) / (np.asarray(n, dtype=np.float64) * delta**2)


def krappor_variance(p: ArrayLike, n: float, epsilon: float) -> np.ndarray:
    """:func:`bit_variance` of k-RAPPOR: ``m_j (1 − m_j) / (n (q* − p*)²)`` with
    ``m_j = ((e^{ε/2} − 1) p_j + 1)/(e^{ε/2} + 1)``, ``(q*, p*)`` = :func:`ldpstream.mechanisms.rates.bit_rates`
    at ε/2."""
    return bit_variance(p, n, *bit_rates(epsilon / 2))


def constrained_variances(information: np.ndarray, ridge: float = 1e-12) -> np.ndarray:
    """Variances of an estimate on the simplex from the (observed) information ``I`` of the free ``p``.

    ``Cov = I⁻¹ − (I⁻¹ 1)(I⁻¹ 1)ᵀ / (1ᵀ I⁻¹ 1)``: the inverse information restricted to the tangent space
    ``Σ p = 1`` (Aitchison and Silvey). For the multinomial likelihood at an interior maximum ``I p = N 1``,
    which makes this ``I⁻¹ − p pᵀ / N``; with ``Q`` the identity it is the multinomial covariance
    ``(diag(p) − p pᵀ) / N``. A tiny ridge keeps the factorization defined along flat directions; if it
    still fails, the pseudo-inverse is used. Returns the diagonal only (clipped at 0).
    """
    info_m = np.asarray(information, dtype=np.float64)
    try:
        factor, dinv = cholesky_inverse_diagonal(info_m, ridge)
        u = sl.cho_solve(factor, np.ones(info_m.shape[0]), check_finite=False)
    except np.linalg.LinAlgError:
        inv = np.linalg.pinv(info_m, hermitian=True)
        dinv, u = np.diag(inv).copy(), inv.sum(axis=1)
    total = float(u.sum())
    out = dinv - (u * u / total if total > 0 else 0.0)
    return np.maximum(out, 0.0)


def affine_constrained_variances(
    ch: AffineChannel,
    d: np.ndarray,
    *,
    exact_max: int = 1024,
    top: Sequence[int] | np.ndarray = (),
    info: dict[str, Any] | None = None,
) -> np.ndarray:
    """:func:`constrained_variances` of ``ch.information(d)`` without forming the information matrix.

    Only valid for an :class:`AffineChannel` with at most one extra column ("other"). Write the channel's
    (outputs × inputs) matrix as ``A = [A_S, e]`` with ``A_S = stack_b(diag(s_b) X + o_b 1ᵀ)``. On the
    tangent space of the simplex, ``d_o = −1ᵀ d_S``, so ``A d = B d_S`` with
    ``B = stack_b(diag(s_b) X + f_b 1ᵀ)``, ``f_b = o_b − e_b`` (``e = 0`` without "other"). The constrained
    covariance of the candidates is then ``J⁻¹`` with ``J = Bᵀ D B = G + g 1ᵀ + 1 gᵀ + c 11ᵀ``, where
    ``G = Xᵀ diag(Σ_b s_b² d_b) X`` (sparse Gram, :class:`~ldpstream.estimators.numerics.gram.WeightedGram`),
    ``g = Xᵀ Σ_b s_b d_b f_b`` and ``c = Σ_b f_bᵀ D_b f_b``; the variance of "other" is ``1ᵀ J⁻¹ 1``.
    ``diag(J⁻¹)`` follows from ``diag(G⁻¹)`` by Woodbury with ``U = [1, g]``, ``N = [[c, 1], [1, 0]]``:
    ``J⁻¹ = G⁻¹ − Y N (I + Uᵀ Y N)⁻¹ Yᵀ``, ``Y = G⁻¹ U`` (two solves). Without "other" the ``1``
    direction is removed instead: ``Cov = G⁻¹ − y yᵀ / (1ᵀ y)``, ``y = G⁻¹ 1`` (Aitchison–Silvey, as in
    :func:`constrained_variances`: the terms in ``1`` vanish on the tangent space). ``diag(G⁻¹)`` is exact up
    to ``exact_max`` candidates and the calibrated cavity approximation above (exact at ``top``).
    """
    R = ch.X.shape[0]
    S = ch.n_candidates
    n_extra = int(ch.extra.shape[1])
    if n_extra > 1:
        raise ParameterError("affine_constrained_variances handles at most one extra column")
    blocks = np.asarray(d, dtype=np.float64).reshape(ch.n_blocks, R)
    extra = ch.extra[:, 0].reshape(ch.n_blocks, R) if n_extra else np.zeros((ch.n_blocks, R))
    w = sum(s * s * db for s, db in zip(ch.scales, blocks, strict=True))
    gram = WeightedGram(ch.X, np.asarray(w), exact_max=exact_max)
    ones = np.ones(S)
    if not n_extra:
        y = gram.solve(ones)
        dinv = gram.inverse_diagonal(top)
        total = float(y.sum())
        out = dinv - (y * y / total if total > 0 else 0.0)
    else:
        f = [o - e for o, e in zip(ch.offsets, extra, strict=True)]
        g = ch.XT @ cast(np.ndarray, sum(s * db * fb for s, db, fb in zip(ch.scales, blocks, f, strict=True)))
        c = float(sum(np.dot(fb * fb, db) for fb, db in zip(f, blocks, strict=True)))
        U = np.column_stack([ones, g])
        Y = gram.solve(U)
        N = np.array([[c, 1.0], [1.0, 0.0]])
        K = np.eye(2) + np.einsum("ij,ik->jk", U, Y) @ N
        try:
            M = N @ np.linalg.inv(K)
        except np.linalg.LinAlgError:
            M = N @ np.linalg.pinv(K)
        dinv = gram.inverse_diagonal(top)
        YM = np.einsum("ij,jk->ik", Y, M)
        var_s = dinv - np.einsum("ij,ij->i", YM, Y)
        s1 = Y.sum(axis=0)
        var_o = float(Y[:, 0].sum() - s1 @ M @ s1)
        out = np.concatenate([var_s, [var_o]])
    if info is not None:
        info.update(gram.info)
    return np.maximum(out, 0.0)
