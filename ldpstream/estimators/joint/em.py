"""EM for the joint distribution of an associated pair over distinct patterns (docs/math/joint.md#em).

Fanti, Pihur, Erlingsson 2016 §4.A. Cell ``(i, j)`` (row-major index ``i·c + j``) has probability ``p_ij``;
pattern ``u`` (count ``n_u``) has likelihood ``c^u_ij = Lx[u, i] · Ly[u, j]`` (reports of X and Y are
independent given the true pair), so ``m_u = Σ_ij c^u_ij p_ij = Lx[u]ᵀ P Ly[u]`` and the log-likelihood is
``ℓ(p) = Σ_u n_u log m_u``. EM: ``p_ij ← p_ij · Σ_u n_u c^u_ij / m_u / N``, i.e.
``P ← P ∘ Lxᵀ diag(n/m) Ly / N``: two ``(D × r)·(r × c)``-sized products per step, over distinct patterns
weighted by their counts, never over reports.

The iteration (SQUAREM acceleration with a monotone safeguard; stopping rule: largest absolute change of a cell
below ``tolerance``) is :func:`ldpstream.estimators.em.em_multinomial`'s, specialized (:func:`fit_joint`) to this
multinomial over patterns with the Khatri–Rao structured channel ``Q[(i,j), u] = c^u_ij`` (:class:`PairChannel`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import blas

from ldpstream.errors import ParameterError

from ..numerics.linalg import TINY

__all__ = ["INFORMATION_CHUNK", "JointFit", "PairChannel", "fit_joint", "log_likelihood", "warm_start"]

#: Patterns per block when the information matrix is accumulated (bounds memory to a block × (rc)).
INFORMATION_CHUNK = 65_536
#: Patterns per block of :meth:`PairChannel.em_step` (its ``(c × B)`` intermediates stay in the L2 cache).
EM_BLOCK = 8192
#: float32 steps are used while the stopping tolerance is at least this (the float32 step's error is about
#: 1e-8 of a cell); a tighter tolerance is finished by float64 steps from where float32 stopped.
FLOAT32_TOLERANCE = 1e-6
#: The smallest m_u of a float32 step (float32's smallest normal number is 1.2e-38).
TINY32 = 1e-30
#: Floor given to every cell of a warm start before renormalizing (EM cannot leave an exact zero).
WARM_FLOOR = 1e-4


class PairChannel:
    """The channel ``Q[(i, j), u] = Lx[u, i] Ly[u, j]`` of :mod:`ldpstream.estimators.channels`'s protocol,
    never materialized (``(D, r)`` and ``(D, c)`` factors)."""

    def __init__(self, lx: np.ndarray, ly: np.ndarray) -> None:
        if lx.ndim != 2 or ly.ndim != 2 or lx.shape[0] != ly.shape[0]:
            raise ParameterError("pair channel: Lx and Ly need one row per pattern")
        self.lx = np.ascontiguousarray(lx, dtype=np.float64)
        self.ly = np.ascontiguousarray(ly, dtype=np.float64)
        self.r, self.c = lx.shape[1], ly.shape[1]
        self._transposed: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def transposed(self, dtype: type[np.floating[Any]]) -> tuple[np.ndarray, np.ndarray]:
        """``(r, D)`` and ``(c, D)`` copies of the factors in ``dtype``, made once: the products of
        :meth:`em_step` run 2-5× faster on short-and-wide operands, and float32 halves the bytes read."""
        key = np.dtype(dtype).name
        if key not in self._transposed:
            self._transposed[key] = (np.ascontiguousarray(self.lx.T, dtype=dtype),
                                     np.ascontiguousarray(self.ly.T, dtype=dtype))
        return self._transposed[key]

    @property
    def n_inputs(self) -> int:
        return int(self.r * self.c)

    @property
    def n_outputs(self) -> int:
        return int(self.lx.shape[0])

    def forward(self, p: np.ndarray) -> np.ndarray:
        """``m_u = Lx[u]ᵀ P Ly[u]``."""
        out: np.ndarray = ((self.lx @ p.reshape(self.r, self.c)) * self.ly).sum(axis=1)
        return out

    def adjoint(self, w: np.ndarray) -> np.ndarray:
        """``Σ_u w_u c^u_ij`` = ``Lxᵀ diag(w) Ly`` (row-major)."""
        out: np.ndarray = (self.lx.T @ (self.ly * w[:, None])).ravel()
        return out

    def em_step(self, p: np.ndarray, n: np.ndarray, total: float, with_ll: bool,
                dtype: type[np.floating[Any]] = np.float32) -> tuple[np.ndarray, float]:
        """One EM step ``F(p)`` and, when asked, ``ℓ(p)`` (scaled likelihoods): ``m = Σ_j (PᵀLxᵀ)_j ∘ (Lyᵀ)_j``,
        ``P ← P ∘ (Lyᵀ diag(n/m) Lx)ᵀ / N`` (docs/math/joint.md#em).

        One pass over the patterns in blocks of :data:`EM_BLOCK` (each block's ``(c × B)`` intermediates stay
        in cache: the factors are read once per step, nothing of size D is written), with the factors and the
        products in ``dtype``. float32 is exact enough for the step: each block's sums are of ``B`` positive
        terms (relative error about 1e-8, measured), accumulated across blocks in float64, far below the
        default stopping tolerance of 1e-6 (``fit_joint`` finishes tighter tolerances in float64). The
        log-likelihood's terms are summed in float64. Every pattern has ``n_u ≥ 1``, so no masking."""
        lx_t, ly_t = self.transposed(dtype)
        d, r, c = self.n_outputs, self.r, self.c
        pt = np.ascontiguousarray(p.reshape(r, c).T, dtype=dtype)
        width = min(EM_BLOCK, max(d, 1))
        pm = np.empty((c, width), dtype=dtype)
        m = np.empty(width, dtype=dtype)
        g = np.zeros((c, r))
        ll = 0.0
        nd = n.astype(dtype, copy=False)
        for start in range(0, d, width):
            stop = min(start + width, d)
            w = stop - start
            a, b, pw, mw = lx_t[:, start:stop], ly_t[:, start:stop], pm[:, :w], m[:w]
            np.matmul(pt, a, out=pw)
            np.einsum("ju,ju->u", pw, b, out=mw)
            np.maximum(mw, TINY32 if dtype == np.float32 else TINY, out=mw)
            if with_ll:
                ll += float(np.dot(n[start:stop], np.log(mw, dtype=np.float64)))
            np.divide(nd[start:stop], mw, out=mw)
            np.multiply(b, mw, out=pw)
            g += pw @ a.T
        new = p * g.T.ravel() / total
        out: np.ndarray = new / new.sum()
        return out, (ll if with_ll else float("nan"))

    def information(self, d: np.ndarray) -> np.ndarray:
        """``Σ_u d_u c^u c^uᵀ`` (rc × rc, ``d ≥ 0``), accumulated over blocks of patterns."""
        rc = self.r * self.c
        upper = np.zeros((rc, rc))
        root = np.sqrt(np.maximum(d, 0.0))
        for start in range(0, self.n_outputs, INFORMATION_CHUNK):
            sl = slice(start, start + INFORMATION_CHUNK)
            a = (self.lx[sl, :, None] * (self.ly[sl, None, :] * root[sl, None, None])).reshape(-1, rc)
            # aᵀa by a symmetric rank-k update (half the flops of a general product); a.T is Fortran-ordered.
            upper += blas.dsyrk(1.0, a.T, trans=0)
        out: np.ndarray = np.triu(upper) + np.triu(upper, 1).T
        return out


@dataclass(frozen=True)
class JointFit:
    """The EM's output: ``p`` (row-major cells), the log-likelihood (of the scaled likelihoods plus the
    patterns' log scales: the exact ``Σ_u n_u log m_u``), iterations, convergence."""

    p: np.ndarray
    log_likelihood: float
    iterations: int
    converged: bool


def warm_start(start: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray | None:
    """A previous table as a start: floored at :data:`WARM_FLOOR` and renormalized (an exact zero would stay
    zero under EM); ``None`` (uniform start) when its shape does not match the table's."""
    if start is None:
        return None
    arr = np.asarray(start, dtype=np.float64)
    if arr.shape != shape or not np.all(np.isfinite(arr)):
        return None
    arr = np.maximum(arr, 0.0)
    arr = arr / arr.sum() if arr.sum() > 0 else np.full(shape, 1.0 / arr.size)
    arr = np.maximum(arr, WARM_FLOOR)
    out: np.ndarray = (arr / arr.sum()).ravel()
    return out


def fit_joint(channel: PairChannel, counts: np.ndarray, log_scale: np.ndarray, *, start: np.ndarray | None,
              tolerance: float, max_iterations: int, accelerate: bool = True, precision: str = "auto") -> JointFit:
    """Maximize ``Σ_u n_u log m_u`` on the simplex by (SQUAREM-accelerated) EM from ``start`` (row-major
    cells; ``None``: uniform, as in the paper). Stops when no cell moves by ``tolerance`` or more in one
    iteration, or after ``max_iterations`` (then ``converged`` is false).

    SQUAREM is :func:`ldpstream.estimators.em.em_multinomial`'s scheme (Varadhan and Roland 2008, S3, with its
    monotone safeguard: the extrapolation ``p' = p − 2αr + α²v`` is kept only if ``ℓ(p') ≥ ℓ(F(p))``, else α is
    halved toward −1, i.e. the double EM step), written here over the pair channel so that a step is one
    blocked pass over the patterns (:meth:`PairChannel.em_step`) with at most one ``log`` (the generic loop
    masks and logs every step: about twice the cost at 10^6 patterns).

    Steps run in float32 down to :data:`FLOAT32_TOLERANCE` (the default tolerance); a tighter ``tolerance`` is
    reached by continuing in float64 from there (same rule, the iterations counted together);
    ``precision="float64"`` runs every step in float64."""
    if precision not in ("auto", "float64"):
        raise ParameterError(f"precision must be 'auto' or 'float64', not {precision!r}")
    n = np.asarray(counts, dtype=np.float64)
    total = float(n.sum())
    size = channel.n_inputs
    if total <= 0:
        return JointFit(np.full(size, 1.0 / size), 0.0, 0, True)
    p = np.full(size, 1.0 / size) if start is None else np.asarray(start, dtype=np.float64).ravel() / np.sum(start)
    first = np.float32 if precision == "auto" else np.float64
    p, it, converged = _iterate(channel, p, n, total, max(tolerance, FLOAT32_TOLERANCE), max_iterations,
                                accelerate, first)
    if converged and tolerance < FLOAT32_TOLERANCE:
        p, more, converged = _iterate(channel, p, n, total, tolerance, max_iterations - it, accelerate, np.float64)
        it += more
    return JointFit(p, log_likelihood(channel, n, log_scale, p), it, converged)


def _iterate(channel: PairChannel, p: np.ndarray, n: np.ndarray, total: float, tolerance: float,
             max_iterations: int, accelerate: bool, dtype: type[np.floating[Any]]) -> tuple[np.ndarray, int, bool]:
    """:func:`fit_joint`'s loop with steps in ``dtype``: ``(p, iterations, converged)``."""

    def step(q: np.ndarray, with_ll: bool) -> tuple[np.ndarray, float]:
        return channel.em_step(q, n, total, with_ll, dtype)

    p1, _ = step(p, False)
    it = 0
    for it in range(1, max_iterations + 1):
        if not accelerate:
            new = p1
        else:
            p2, ll1 = step(p1, True)
            r = p1 - p
            v = p2 - 2 * p1 + p
            nv = float(np.sqrt(v @ v))
            nxt = None
            if nv > 0:
                alpha = min(-float(np.sqrt(r @ r)) / nv, -1.0)
                for _ in range(6):
                    if alpha >= -1.0 - 1e-9:
                        break
                    cand = p - 2 * alpha * r + alpha * alpha * v
                    if cand.min() >= 0 and cand.sum() > 0:
                        trial, llc = step(cand / cand.sum(), True)
                        if llc >= ll1:
                            nxt = trial
                            break
                    alpha = (alpha - 1.0) / 2.0
            new = nxt if nxt is not None else step(p2, False)[0]
        change = float(np.max(np.abs(new - p)))
        p = new
        if change < tolerance:
            return p, it, True
        p1, _ = step(p, False)
    return p, it, False


def log_likelihood(channel: PairChannel, counts: np.ndarray, log_scale: np.ndarray, p: np.ndarray) -> float:
    """``Σ_u n_u log m_u(p)`` (exact, with the patterns' log scales)."""
    m = channel.forward(np.asarray(p, dtype=np.float64).ravel())
    with np.errstate(divide="ignore"):
        return float(np.dot(counts, np.log(m)) + np.dot(counts, log_scale))
