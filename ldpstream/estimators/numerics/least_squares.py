"""Weighted least squares of the candidate decoders: the unconstrained fit with its covariance diagonal, and
FISTA for the fit constrained to a convex set (docs/math/estimators.md#candidate-decoders; module docstring of
:mod:`ldpstream.estimators.candidates`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp
from scipy.sparse.linalg import lsqr

from ldpstream.errors import ParameterError

from .gram import WeightedGram
from .linalg import inverse_rows_at_nonzeros, sandwich_slopes
from .sandwich import SandwichMeat

__all__ = ["WeightedLeastSquares", "face_solve_constrained_ls", "fista_constrained_ls"]


def fista_constrained_ls(
    G: np.ndarray | Callable[[np.ndarray], np.ndarray],
    b: np.ndarray,
    project: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    tol: float = 1e-10,
    max_iter: int = 5000,
    lipschitz: float | None = None,
) -> tuple[np.ndarray, int]:
    """Minimize ``½ xᵀGx − bᵀx`` over a convex set given by its Euclidean ``project``ion (FISTA with restart).

    ``G`` is a dense matrix or a function ``v ↦ G v`` (then pass ``lipschitz``). Step ``1/L`` with ``L`` =
    largest absolute row sum of ``G`` (≥ its largest eigenvalue) unless given. Stops when the largest change
    of ``x`` is below ``tol`` times ``max(1, max|x|)``.
    """
    if callable(G):
        mv = G
        if lipschitz is None:
            raise ParameterError("pass lipschitz when G is an operator")
        L = float(lipschitz)
    else:
        Gm = np.asarray(G)
        mv = Gm.__matmul__
        L = float(np.max(np.abs(Gm).sum(axis=1))) if lipschitz is None else float(lipschitz)
    if L <= 0:
        return project(x0), 0
    x = project(x0)
    y = x.copy()
    t = 1.0
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007
        grad_y = mv(y) - b
        x_new = project(y - grad_y / L)
        change = float(np.max(np.abs(x_new - x)))
        t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
        y_next = x_new + ((t - 1) / t_new) * (x_new - x)
        # gradient restart (O'Donoghue and Candès): momentum against the gradient mapping at y
        if np.einsum("i,i->", y - x_new, x_new - x) > 0:
            y_next, t_new = x_new.copy(), 1.0
        y = y_next
        x, t = x_new, t_new
        if change < tol * max(1.0, float(np.max(np.abs(x)))):
            break
    return x, it


def face_solve_constrained_ls(
    matvec: Callable[[np.ndarray], np.ndarray],
    gram_of: Callable[[np.ndarray], np.ndarray],
    b: np.ndarray,
    x0: np.ndarray,
    *,
    simplex: bool,
    rounds: int = 6,
    kkt_tol: float = 1e-9,
    factors: dict[bytes, FaceFactor] | None = None,
) -> np.ndarray | None:
    """The minimizer of ``½ xᵀGx − bᵀx`` over the simplex (``simplex``) or the capped simplex ``{x ≥ 0, Σx ≤ 1}``,
    found by solving the KKT system on the face that the support of ``x0`` (a previous solution) spans, and
    certified by the KKT conditions; None when no face tried within ``rounds`` is certified
    (docs/math/estimators.md#non-negative-least-squares).

    On the face ``F`` (the other coordinates at 0): with the sum constraint active, ``[G_FF 1; 1ᵀ 0] [x_F; λ] =
    [b_F; 1]``; without it (capped simplex), ``G_FF x_F = b_F``. The point is the minimizer when ``x_F ≥ 0`` and the
    gradient ``g = Gx − b`` satisfies ``g_i ≥ μ`` off the face, ``μ = −λ`` the common gradient on it (``μ = 0``
    and ``Σx ≤ 1`` when the sum constraint is inactive; ``μ ≤ 0`` when active on the capped simplex), to
    ``kkt_tol`` times the scale of ``b``. Between rounds the coordinates the solve drove negative leave the face
    and those that violate the gradient condition join it (a primal-dual active-set step). ``gram_of(F)`` is
    ``G_FF`` (dense), ``matvec`` the product with ``G``. Cost per round: one Gram of the face and its
    factorization, O(|F|³), and one product with ``G``.

    ``factors``: the factorizations of earlier calls with the same ``G``, by face (a dict the caller keeps, e.g.
    with a cached Gram: the live decoder's next refresh starts on the same face): a face found there costs two
    triangular solves, O(|F|²). The Cholesky factor of ``G_FF`` solves both systems, the sum-constrained one by
    its Schur complement (``x = u − λv``, ``u = G_FF⁻¹b_F``, ``v = G_FF⁻¹1``, ``λ = (1ᵀu − 1)/1ᵀv``); a face whose
    ``G_FF`` is not positive definite is solved as a symmetric indefinite system, as without ``factors``."""
    n = b.size
    face = np.flatnonzero(np.asarray(x0) > 0)
    scale = max(float(np.max(np.abs(b))), np.finfo(np.float64).tiny)
    tol = kkt_tol * scale
    for _ in range(rounds):
        if face.size == 0:
            return None
        held = _face_factor(gram_of, face, factors)
        x_face = None
        mu = 0.0
        if not simplex and held.cholesky is not None:  # the sum constraint inactive first
            x_face = sl.cho_solve(held.cholesky, b[face], check_finite=False)
            if float(x_face.sum()) > 1.0:
                x_face = None
        if x_face is None:
            if held.cholesky is not None and held.ones is not None and float(held.ones.sum()) > 0:
                u = sl.cho_solve(held.cholesky, b[face], check_finite=False)
                lam = (float(u.sum()) - 1.0) / float(held.ones.sum())
                x_face, mu = u - lam * held.ones, -lam
            else:
                m = face.size
                K = np.zeros((m + 1, m + 1))
                K[:m, :m] = gram_of(face)
                K[:m, m] = K[m, :m] = 1.0
                try:
                    sol = sl.solve(K, np.append(b[face], 1.0), assume_a="sym", check_finite=False)
                except (np.linalg.LinAlgError, ValueError):
                    return None
                x_face, mu = sol[:m], -float(sol[m])
            if not simplex and mu > tol:
                return None  # the sum constraint would be pushing outwards: the optimum is elsewhere
        if not np.all(np.isfinite(x_face)):
            return None
        negative = x_face < 0
        if negative.any():
            face = face[~negative]
            continue
        x = np.zeros(n)
        x[face] = x_face
        g = matvec(x) - b
        off = np.ones(n, dtype=bool)
        off[face] = False
        on_face_spread = float(np.max(np.abs(g[face] - mu)))
        violating = off & (g < mu - tol)
        if on_face_spread <= tol and not violating.any():
            return x
        if not violating.any():
            return None  # the face system was solved badly (ill-conditioned): leave it to the iterative solver
        face = np.union1d(face, np.flatnonzero(violating))
    return None


#: Face factorizations a ``factors`` dict of :func:`face_solve_constrained_ls` keeps, least recently used out (the
#: faces the windows of one metric end on, and those their rounds try on the way).
FACE_FACTORS = 8


@dataclass(frozen=True, eq=False)
class FaceFactor:
    """The Cholesky factor of ``G_FF`` on one face and ``G_FF⁻¹1`` (both None when ``G_FF`` is not positive
    definite)."""

    cholesky: tuple[np.ndarray, bool] | None
    ones: np.ndarray | None

    @property
    def nbytes(self) -> int:
        return 0 if self.cholesky is None or self.ones is None else int(self.cholesky[0].nbytes + self.ones.nbytes)


def _face_factor(gram_of: Callable[[np.ndarray], np.ndarray], face: np.ndarray,
                 factors: dict[bytes, FaceFactor] | None) -> FaceFactor:
    """The factor of ``face`` from ``factors`` or made now (and kept there, at most :data:`FACE_FACTORS`, the
    least recently used out)."""
    name = face.tobytes()
    held = None if factors is None else factors.pop(name, None)
    if held is not None:
        assert factors is not None
        factors[name] = held  # the most recently used last
        return held
    try:
        chol = sl.cho_factor(gram_of(face), lower=True, check_finite=False)
        made = FaceFactor(chol, sl.cho_solve(chol, np.ones(face.size), check_finite=False))
    except (np.linalg.LinAlgError, ValueError):
        made = FaceFactor(None, None)
    if factors is not None:
        factors[name] = made
        for old in list(factors)[:-FACE_FACTORS]:
            factors.pop(old, None)
    return made


class WeightedLeastSquares:
    """Weighted least squares ``z ≈ X β (+ o β_o)`` with the fitted-value weights, and ``diag Cov``.

    ``G = Xᵀ W X`` goes through :class:`~ldpstream.estimators.numerics.gram.WeightedGram` (dense and exact up to
    ``exact_max`` candidates, sparse CG and the calibrated cavity diagonal beyond). The "other" column ``o``
    is eliminated exactly by its Schur complement ``σ = oᵀWo − gᵀG⁻¹g`` (``g = XᵀWo``):
    ``β_o = (oᵀWz − gᵀG⁻¹b)/σ``, ``β = G⁻¹b − G⁻¹g β_o``; the augmented inverse is
    ``Ga⁻¹ = [[G⁻¹ + y yᵀ/σ, −y/σ], [−yᵀ/σ, 1/σ]]`` with ``y = G⁻¹g``. Two right-hand sides (``b``, ``g``)
    in one block solve.

    Covariance (:meth:`variances`): the model-based ``diag(Ga⁻¹)`` (cells independent with variance ``1/w``),
    or, given the meat ``M`` of :mod:`ldpstream.estimators.numerics.sandwich`, the sandwich ``diag(Ga⁻¹ M Ga⁻¹)``:
    exact up to ``exact_max`` candidates (``M`` formed densely from sparse products, ``Ga⁻¹`` from its
    Cholesky factor (LAPACK potri, ≈ 2S³/3 flops) and one dense product ``Ga⁻¹ M`` (2 S³ flops)); beyond,
    exact for the probes, the ``top`` candidates and "other" (their ``Ga⁻¹``
    columns come from the block solve of the cavity calibration), and for the rest the calibrated cavity
    value of ``diag(Ga⁻¹)`` times the mean ratio sandwich / model-based over the probes.
    """

    def __init__(
        self,
        z: np.ndarray,
        X: sp.csr_matrix,
        other_col: np.ndarray | None,
        var_fn: Callable[[np.ndarray], np.ndarray],
        *,
        exact_max: int = 1024,
    ) -> None:
        Xa = sp.hstack([X, sp.csr_matrix(other_col[:, None])], format="csr") if other_col is not None else X
        null_var = var_fn(np.zeros_like(z))
        ok = np.isfinite(null_var) & (null_var > 0)
        sw = np.where(ok, 1 / np.sqrt(np.where(ok, null_var, 1.0)), 0.0)
        pilot = lsqr(sp.diags(sw) @ Xa, sw * z, atol=1e-10, btol=1e-10, iter_lim=100)[0]
        v = var_fn(Xa @ pilot)
        ok = np.isfinite(v) & (v > 0)
        w = np.where(ok, 1 / np.where(ok, v, 1.0), 0.0)
        self.w, self.z, self.X, self.o, self.Xa = w, z, X, other_col, sp.csr_matrix(Xa)
        self._var_fn = var_fn
        #: ``Ga⁻¹`` once :meth:`variances` formed it (the exact sandwich), for :meth:`variance_slopes`.
        self.inverse: np.ndarray | None = None
        self.gram = WeightedGram(X, w, exact_max=exact_max)
        self.b_x = X.T @ (w * z)
        rhs = [self.b_x]
        if other_col is not None:
            self.g = X.T @ (w * other_col)
            self.gamma = float(np.dot(other_col, w * other_col))
            self.b_o = float(np.dot(other_col, w * z))
            rhs.append(self.g)
        Y = self.gram.solve(np.column_stack(rhs))
        y_b = Y[:, 0]
        if other_col is not None:
            self.y_g = Y[:, 1]
            self.sigma = max(self.gamma - float(np.dot(self.g, self.y_g)), 1e-300)
            beta_o = (self.b_o - float(np.dot(self.g, y_b))) / self.sigma
            self.beta = np.concatenate([y_b - self.y_g * beta_o, [beta_o]])
            self.b = np.concatenate([self.b_x, [self.b_o]])
        else:
            self.beta = y_b
            self.b = self.b_x

    def fitted(self) -> np.ndarray:
        """``Xa β``: the fitted responses."""
        fit: np.ndarray = self.Xa @ self.beta
        return fit

    def cell_variances(self) -> np.ndarray:
        """The model variance of each cell at the fitted responses (``var_fn`` of :meth:`fitted`)."""
        return np.asarray(self._var_fn(self.fitted()), dtype=np.float64)

    def _augmented_columns(self, idx: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Columns ``idx`` of ``Ga⁻¹`` from the columns ``cols`` of ``G⁻¹`` (and the "other" column last)."""
        if self.o is None:
            return cols
        top = cols + self.y_g[:, None] * (self.y_g[idx] / self.sigma)[None, :]
        out = np.vstack([top, -self.y_g[idx][None, :] / self.sigma])
        other = np.concatenate([-self.y_g / self.sigma, [1.0 / self.sigma]])
        return np.column_stack([out, other])

    def variances(
        self, top: Sequence[int] | np.ndarray = (), meat: Callable[[np.ndarray], np.ndarray] | None = None
    ) -> np.ndarray:
        """``diag Cov(β)`` (candidates, then "other" if present); model-based without ``meat``, else the
        sandwich (class docstring). ``top`` candidates get exact values."""
        dinv = self.gram.inverse_diagonal(top)
        if self.o is not None:
            naive = np.concatenate([dinv + self.y_g**2 / self.sigma, [1.0 / self.sigma]])
        else:
            naive = dinv.copy()
        if meat is None:
            return np.asarray(np.maximum(naive, 0.0))
        G = self.gram.dense()
        if G is not None:
            if self.o is not None:
                G = np.block([[G, self.g[:, None]], [self.g[None, :], np.array([[self.gamma]])]])
            try:
                chol, info = sl.lapack.dpotrf(G, lower=1)
                if info != 0:
                    raise np.linalg.LinAlgError("Ga not positive definite")
                Gi, info = sl.lapack.dpotri(chol, lower=1)
                Gi = np.tril(Gi) + np.tril(Gi, -1).T
            except np.linalg.LinAlgError:
                Gi = np.linalg.pinv(G, hermitian=True)
            M = meat.dense() if isinstance(meat, SandwichMeat) else meat(np.eye(G.shape[0]))
            var = np.einsum("ij,ij->i", Gi @ M, Gi)
            self.inverse = Gi
            self.gram.info["se_sandwich"] = "exact"
            return np.asarray(np.maximum(var, 0.0))
        idx = self.gram.exact_idx
        A = self._augmented_columns(idx, self.gram.exact_columns)
        sand = np.einsum("ij,ij->j", A, meat(A))
        n_probe = self.gram.n_probes
        ratio = sand[:n_probe] / np.maximum(naive[idx[:n_probe]], 1e-300)
        factor = float(np.mean(ratio)) if n_probe else 1.0
        var = naive * factor
        var[idx] = sand[: idx.size]
        if self.o is not None:
            var[-1] = sand[-1]
        self.gram.info.update(se_sandwich="calibrated", sandwich_calibration=factor)
        return np.asarray(np.maximum(var, 0.0))

    def variance_slopes(self, cell_slope: np.ndarray) -> np.ndarray | None:
        """``∂ Var(β̂_s)/∂f_s`` per column (:func:`~ldpstream.estimators.numerics.linalg.sandwich_slopes`) once the
        exact sandwich formed ``Ga⁻¹``; None on the calibrated back end."""
        if self.inverse is None:
            return None
        return sandwich_slopes(self.Xa, inverse_rows_at_nonzeros(self.Xa, self.inverse), self.w, cell_slope)

    def dense_gram(self) -> np.ndarray | None:
        """``Ga`` (dense, with the "other" row and column when present) on the exact back end, else None."""
        G = self.gram.dense()
        if G is None or self.o is None:
            return G
        return np.block([[G, self.g[:, None]], [self.g[None, :], np.array([[self.gamma]])]])

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``Ga v`` for the augmented Gram (with the "other" column when present)."""
        if self.o is None:
            return self.gram.matvec(v)
        vs, vo = v[:-1], v[-1]
        return np.concatenate([self.gram.matvec(vs) + self.g * vo, [float(np.dot(self.g, vs)) + self.gamma * vo]])

    def lipschitz(self) -> float:
        """Largest row sum of ``Ga`` (its entries are non-negative: X, o >= 0, w >= 0)."""
        return float(np.max(np.abs(self.matvec(np.ones(self.beta.size)))))

