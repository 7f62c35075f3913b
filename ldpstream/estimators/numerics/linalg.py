"""Dense and sparse linear algebra shared by the decoders: single-threaded inner products, the weighted Gram
``Xᵀ diag(w) X`` of a sparse design, Cholesky with ``diag(G⁻¹)``, and block preconditioned conjugate gradients.

Equations: ``docs/math/estimators.md`` (each function's docstring says which identity it computes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp
from numpy.typing import ArrayLike

__all__ = [
    "TINY", "block_pcg", "cholesky_inverse_diagonal", "dot", "inverse_rows_at_nonzeros", "sandwich_slope_terms",
    "sandwich_slopes", "slopes_from_terms", "weighted_gram",
]

#: Floor for probabilities and divisors that must stay positive.
TINY = 1e-300


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """Inner product ``aᵀb`` without BLAS, by ``einsum``'s single-threaded loop (OpenBLAS threads ``ddot`` above
    ~10⁴ elements, and on a loaded machine the second thread's wake-up costs milliseconds per call:
    docs/math/estimators.md#maximum-likelihood-by-em)."""
    return float(np.einsum("i,i->", a, b))


def _row_pairs(Xc: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every ordered pair ``(a, b)`` of nonzeros within a row of the csr ``Xc``, as positions into
    ``Xc.data`` / ``Xc.indices``, with the row of each: ``(first, second, row)``, ``Σ_i L_i²`` pairs for rows of
    ``L_i`` nonzeros, row-major."""
    lengths = np.diff(Xc.indptr).astype(np.int64)
    sq = lengths**2
    n_pairs = int(sq.sum())
    if n_pairs == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    block_start = np.repeat(np.cumsum(sq) - sq, sq)
    local = np.arange(n_pairs) - block_start
    Lr = np.repeat(lengths, sq)
    a = local // Lr
    b = local - a * Lr
    base = np.repeat(Xc.indptr[:-1], sq)
    row = np.repeat(np.arange(Xc.shape[0]), sq)
    return base + a, base + b, row


def weighted_gram(X: sp.spmatrix | sp.sparray, w: ArrayLike, max_pairs: int = 1_000_000) -> np.ndarray:
    """Dense ``Xᵀ diag(w) X`` for a sparse (R × S) ``X`` without densifying ``X``.

    Each row with ``L`` nonzeros contributes an ``L × L`` outer product; when there are at most
    ``max_pairs`` such pairs they are generated vectorized and accumulated with ``np.bincount`` straight
    into the dense S × S result, otherwise scipy's sparse product is used and then densified.
    """
    Xc: sp.csr_matrix = sp.csr_matrix(cast(Any, X), dtype=np.float64)
    R, S = Xc.shape
    w = np.broadcast_to(np.asarray(w, dtype=np.float64), (R,))
    lengths = np.diff(Xc.indptr).astype(np.int64)
    if int(np.sum(lengths**2)) > max_pairs:
        # Many pairs: scipy's sparse product is faster than generating them explicitly.
        return np.asarray((sp.csr_matrix(Xc.T) @ (sp.diags(w) @ Xc)).toarray())
    Xc.sum_duplicates()
    first, second, row = _row_pairs(Xc)
    out = np.zeros(S * S)
    if first.size:
        i = Xc.indices[first].astype(np.int64)
        j = Xc.indices[second].astype(np.int64)
        vals = Xc.data[first] * Xc.data[second] * w[row]
        out = np.bincount(i * S + j, weights=vals, minlength=S * S).astype(np.float64, copy=False)
    return out.reshape(S, S)



def cholesky_inverse_diagonal(G: np.ndarray, ridge: float = 0.0) -> tuple[Any, np.ndarray]:
    """Cholesky factor of a symmetric positive definite ``G`` and ``diag(G⁻¹)``.

    The diagonal is the column sums of squares of ``L⁻¹`` (LAPACK ``trtri``), about a third of the cost of
    the full inverse. Raises ``numpy.linalg.LinAlgError`` if ``G`` (plus ``ridge·max diag``) is not positive
    definite.
    """
    A = np.array(G, dtype=np.float64, order="F")
    if ridge:
        A[np.diag_indices(A.shape[0])] += ridge * max(float(np.max(np.abs(np.diag(A)))), TINY)
    factor = sl.cho_factor(A, lower=True, check_finite=False, overwrite_a=True)
    L = np.tril(factor[0])
    Linv, info = sl.lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError("singular Cholesky factor")
    return factor, np.einsum("ij,ij->j", Linv, Linv)



def block_pcg(
    matvec: Callable[[np.ndarray], np.ndarray],
    B: np.ndarray,
    precond: np.ndarray,
    *,
    rtol: float = 1e-10,
    max_iter: int = 2000,
) -> tuple[np.ndarray, int, bool]:
    """Conjugate gradients on each column of ``B`` at once (``matvec`` maps S×m to S×m), Jacobi ``precond``
    (the inverse diagonal). Stops when every column's relative residual is below ``rtol``.
    Returns ``(X, iterations, converged)``."""
    Bm = np.asarray(B, dtype=np.float64)
    one_d = Bm.ndim == 1
    if one_d:
        Bm = Bm[:, None]
    Xs = np.zeros_like(Bm)
    R = Bm.copy()
    bn = np.linalg.norm(Bm, axis=0)
    bn[bn == 0] = 1.0
    if not np.any(np.linalg.norm(R, axis=0) > 0):
        return (Xs[:, 0] if one_d else Xs), 0, True
    Z = precond[:, None] * R
    P = Z.copy()
    rz = np.einsum("ij,ij->j", R, Z)
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007
        AP = matvec(P)
        pap = np.einsum("ij,ij->j", P, AP)
        alpha = np.where(pap > 0, rz / np.where(pap > 0, pap, 1.0), 0.0)
        Xs += alpha * P
        R -= alpha * AP
        if np.max(np.linalg.norm(R, axis=0) / bn) < rtol:
            converged = True
            break
        Z = precond[:, None] * R
        rz_new = np.einsum("ij,ij->j", R, Z)
        beta = np.where(rz > 0, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        P = Z + beta * P
        rz = rz_new
    return (Xs[:, 0] if one_d else Xs), it, converged



def sandwich_slope_terms(X: sp.csr_matrix, rows_at_nonzeros: np.ndarray, w: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """``(w_i B_is)² X_is`` at the nonzeros ``(i, s)`` of ``X`` (aligned with ``X.data``) and each nonzero's row
    ``i``: what :func:`sandwich_slopes` weighs by the cells' slopes (kept by a cached reference factor)."""
    Xc = sp.csr_matrix(X)
    cell = np.repeat(np.arange(Xc.shape[0]), np.diff(Xc.indptr))
    return (w[cell] * rows_at_nonzeros) ** 2 * Xc.data, cell


def slopes_from_terms(X: sp.csr_matrix, terms: tuple[np.ndarray, np.ndarray], cell_slope: np.ndarray
                      ) -> np.ndarray:
    """:func:`sandwich_slopes` from its :func:`sandwich_slope_terms`: ``Σ_i terms_is cell_slope_i`` per column."""
    weights, cell = terms
    return np.bincount(X.indices, weights=weights * cell_slope[cell], minlength=X.shape[1]).astype(np.float64)


def sandwich_slopes(X: sp.csr_matrix, rows_at_nonzeros: np.ndarray, w: np.ndarray,
                    cell_slope: np.ndarray) -> np.ndarray:
    """``∂ diag Cov(β̂)_s / ∂f_s`` of the weighted least squares ``β̂ = G⁻¹XᵀWz`` when the cell variances are
    ``V_i(Xf)`` with slope ``cell_slope_i = dV_i/d(Xf)_i``: ``Σ_i (w_i B_is)² X_is cell_slope_i`` over the nonzeros of
    column s, ``B = X G⁻¹`` given at X's nonzeros (``rows_at_nonzeros``, aligned with ``X.data``;
    docs/math/estimators.md#small-counts-of-the-candidate-decoders)."""
    Xc = sp.csr_matrix(X)
    return slopes_from_terms(Xc, sandwich_slope_terms(Xc, rows_at_nonzeros, w), cell_slope)


def inverse_rows_at_nonzeros(X: sp.csr_matrix, inverse: np.ndarray) -> np.ndarray:
    """``(X G⁻¹)_is`` at the nonzeros ``(i, s)`` of ``X`` (aligned with ``X.data``; a duplicate entry gets the
    whole value), from each row's nonzeros alone: ``Σ_i L_i²`` products for rows of ``L_i`` nonzeros, not
    ``nnz · S``."""
    Xc = sp.csr_matrix(X)
    first, second, _ = _row_pairs(Xc)  # entry ``second`` of the row (the output's column), summed over ``first``
    if first.size == 0:
        return np.zeros(Xc.nnz)
    terms = Xc.data[first] * inverse[Xc.indices[first], Xc.indices[second]]
    return np.bincount(second, weights=terms, minlength=Xc.nnz).astype(np.float64)
