"""Weighted Gram matrices ``G = Xᵀ diag(w) X`` of sparse hashed designs: solves and ``diag(G⁻¹)``
(docs/math/estimators.md#large-candidate-lists-the-cavity-approximation).

Every candidate decoder needs ``G⁻¹ b`` for a few right-hand sides and the diagonal of ``G⁻¹`` (the
standard errors). Two back ends, chosen by the number of candidates ``S``:

- ``S <= exact_max`` (default 1024): dense ``G``, Cholesky, and the exact diagonal of ``G⁻¹`` as the column
  sums of squares of ``L⁻¹``; pseudo-inverse if ``G`` is singular.
- ``S > exact_max``: ``G`` is never formed. Solves use block conjugate gradients with the Jacobi
  preconditioner and two sparse products ``Xᵀ(w ⊙ (X V))`` per iteration; memory is O(nnz(X) + S).

**Approximate diagonal of ``G⁻¹`` (large S)**: the cavity (Gaussian belief-propagation) fixed point on the
factor graph of cells ``i`` and candidates ``s``,

    v_s = 1 / Σ_i  x_is² w_i / (1 + w_i (T_i − x_is² v_s)),      T_i = Σ_t x_it² v_t,

started at ``v_s = 1/G_ss`` (the dense path when it fails, S ≳ Ck), then calibrated: ``probes`` candidates
drawn with a fixed seed get their exact ``(G⁻¹)_ss`` from one block-CG solve, and all cavity values are
multiplied by the mean ratio exact/cavity. The probes and the ``top`` candidates the caller asks for keep
their exact values, and their exact columns (:attr:`WeightedGram.exact_idx`, :attr:`WeightedGram.exact_columns`)
serve the sandwich standard errors of :mod:`ldpstream.estimators.numerics.sandwich`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp

from .linalg import block_pcg, cholesky_inverse_diagonal, weighted_gram

__all__ = ["WeightedGram", "cavity_inverse_diagonal"]


def cavity_inverse_diagonal(
    X: sp.csr_matrix, w: np.ndarray, *, tol: float = 1e-9, max_iter: int = 2000
) -> tuple[np.ndarray, int, bool]:
    """The cavity approximation of ``diag((Xᵀ diag(w) X)⁻¹)`` (module docstring). O(nnz) per iteration.

    Returns ``(v, iterations, converged)``; ``converged`` is False when the iteration diverges or stalls.
    """
    X2 = X.multiply(X).tocsr()
    rows = np.repeat(np.arange(X2.shape[0]), np.diff(X2.indptr))
    cols = X2.indices
    x2 = X2.data
    wr = w[rows]
    S = X2.shape[1]
    prec0 = np.bincount(cols, weights=x2 * wr, minlength=S)
    if np.any(prec0 <= 0):
        return np.full(S, np.inf), 0, False
    v = 1.0 / prec0
    it = 0
    for it in range(1, max_iter + 1):
        T = X2 @ v
        prec = np.bincount(cols, weights=x2 * wr / (1.0 + wr * np.maximum(T[rows] - x2 * v[cols], 0.0)), minlength=S)
        new = 1.0 / prec
        if not np.all(np.isfinite(new)):
            return new, it, False
        change = float(np.max(np.abs(new - v) / new))
        v = new
        if change < tol:
            return v, it, True
    return v, it, False


class WeightedGram:
    """``G = Xᵀ diag(w) X`` for a sparse (R × S) ``X`` and weights ``w >= 0`` (module docstring).

    Args:
        X: sparse design.
        w: row weights (length R).
        exact_max: largest S handled with the dense exact back end.
        probes: random candidates solved exactly to calibrate the cavity diagonal (large S).
        seed: seed of the probe choice.
    """

    def __init__(
        self, X: Any, w: np.ndarray, *, exact_max: int = 1024, probes: int = 16, seed: int = 0
    ) -> None:
        self.X = sp.csr_matrix(X, dtype=np.float64)
        self.w = np.asarray(w, dtype=np.float64)
        self.S = int(self.X.shape[1])
        self.probes = int(probes)
        self.seed = int(seed)
        self.info: dict[str, Any] = {}
        self.exact = exact_max >= self.S
        self._XT: sp.csr_matrix | None = None
        self._factor: Any = None
        self._pinv: np.ndarray | None = None
        self._dinv: np.ndarray | None = None
        #: Large S: the candidates whose ``G⁻¹`` columns were solved exactly (probes first, then ``top``),
        #: the number of probes among them, and the solved columns (S × len(exact_idx)).
        self.exact_idx = np.zeros(0, dtype=np.int64)
        self.n_probes = 0
        self.exact_columns = np.zeros((self.S, 0))
        if self.exact:
            self._dense_setup()
        else:
            self._XT = sp.csr_matrix(self.X.T)
            self.diag = np.asarray(self.X.multiply(self.X).T @ self.w).ravel()
            self._precond = np.where(self.diag > 0, 1.0 / np.where(self.diag > 0, self.diag, 1.0), 0.0)

    # ---------------------------------------------------------------------------------------------
    def _dense_setup(self) -> np.ndarray:
        """Form ``G`` densely and factor it; returns the exact ``diag(G⁻¹)``."""
        G = weighted_gram(self.X, self.w)
        self.diag = np.diag(G).copy()
        dinv: np.ndarray
        try:
            self._factor, dinv = cholesky_inverse_diagonal(G)
        except np.linalg.LinAlgError:
            self._pinv = np.linalg.pinv(G, hermitian=True)
            dinv = np.diag(self._pinv).copy()
            self.info["se_method"] = "pinv"
        self._dinv = dinv
        self._G = G
        self.info.setdefault("se_method", "exact")
        self.exact = True
        return dinv

    def matvec(self, V: np.ndarray) -> np.ndarray:
        """``G V`` (V of shape (S,) or (S, m))."""
        if self.exact and self._XT is None:
            GV: np.ndarray = self._G @ V
            return GV
        assert self._XT is not None
        XV = self.X @ V
        out: np.ndarray = self._XT @ (self.w[:, None] * XV if XV.ndim == 2 else self.w * XV)
        return out

    def solve(self, B: np.ndarray, rtol: float = 1e-11) -> np.ndarray:
        """``G⁻¹ B`` (pseudo-inverse when the dense ``G`` is singular; minimum-norm-like CG otherwise)."""
        B = np.asarray(B, dtype=np.float64)
        if self.exact:
            if self._pinv is not None:
                solved: np.ndarray = self._pinv @ B
                return solved
            return sl.cho_solve(self._factor, B, check_finite=False)
        out, it, ok = block_pcg(self.matvec, B, self._precond, rtol=rtol, max_iter=max(2000, 4 * self.S))
        self.info["cg_iterations"] = self.info.get("cg_iterations", 0) + it
        if not ok:
            self.info["cg_converged"] = False
        return out

    def inverse_diagonal(self, top: Sequence[int] | np.ndarray = ()) -> np.ndarray:
        """``diag(G⁻¹)``: exact (dense back end) or calibrated cavity, exact at ``top`` and the probes."""
        if self._dinv is not None:
            return self._dinv
        v, n_iter, ok = cavity_inverse_diagonal(self.X, self.w)
        if not ok:
            # Nearly rank-deficient design: fall back to the dense exact computation (O(S²) memory).
            self.info["cavity_converged"] = False
            self._XT = None
            return self._dense_setup()
        rng = np.random.default_rng(self.seed)
        top_idx = np.unique(np.asarray(top, dtype=np.int64))
        pool = np.setdiff1d(np.arange(self.S), top_idx)
        probe_idx = np.sort(rng.choice(pool, size=min(self.probes, pool.size), replace=False))
        exact_idx = np.concatenate([probe_idx, top_idx])
        E = np.zeros((self.S, exact_idx.size))
        E[exact_idx, np.arange(exact_idx.size)] = 1.0
        # The quadratic form e_sᵀ y converges like the squared residual: rtol 1e-6 gives ~1e-12 accuracy.
        Y = self.solve(E, rtol=1e-6) if exact_idx.size else E
        exact_vals = Y[exact_idx, np.arange(exact_idx.size)]
        factor = float(np.mean(exact_vals[: probe_idx.size] / v[probe_idx])) if probe_idx.size else 1.0
        out = v * factor
        out[exact_idx] = exact_vals
        self.info.update(se_method="cavity", cavity_iterations=n_iter, cavity_calibration=factor,
                         se_exact=int(exact_idx.size))
        self._dinv = out
        self.exact_idx, self.n_probes, self.exact_columns = exact_idx, int(probe_idx.size), Y
        return out

    def dense(self) -> np.ndarray | None:
        """The dense ``G`` (exact back end), else ``None``."""
        return self._G if self.exact and self._XT is None else None
