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

import numpy as np
from scipy.linalg import blas

from ldpstream.errors import ParameterError

from .linalg import TINY

__all__ = ["INFORMATION_CHUNK", "JointFit", "PairChannel", "fit_joint", "log_likelihood", "warm_start"]

#: Patterns per block when the information matrix is accumulated (bounds memory to a block × (rc)).
INFORMATION_CHUNK = 65_536
#: Floor given to every cell of a warm start before renormalizing (EM cannot leave an exact zero).
WARM_FLOOR = 1e-4


class PairChannel:
    """The channel ``Q[(i, j), u] = Lx[u, i] Ly[u, j]`` of :mod:`ldpstream.estimators.channels`'s protocol,
    never materialized (``(D, r)`` and ``(D, c)`` factors)."""

    def __init__(self, lx: np.ndarray, ly: np.ndarray) -> None:
        if lx.ndim != 2 or ly.ndim != 2 or lx.shape[0] != ly.shape[0]:
            raise ParameterError("pair channel: Lx and Ly need one row per pattern")
        self.lx, self.ly = np.ascontiguousarray(lx), np.ascontiguousarray(ly)
        # (r, D) and (c, D) copies: the products below run 2-5× faster on short-and-wide operands.
        self.lx_t, self.ly_t = np.ascontiguousarray(lx.T), np.ascontiguousarray(ly.T)
        self.r, self.c = lx.shape[1], ly.shape[1]
        self._buffers: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def buffers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Work arrays of :func:`_em_step`: ``(c, D)``, ``(c, D)`` and ``(D,)``, allocated once."""
        if self._buffers is None:
            d = self.n_outputs
            self._buffers = (np.empty((self.c, d)), np.empty((self.c, d)), np.empty(d))
        return self._buffers

    @property
    def n_inputs(self) -> int:
        return int(self.r * self.c)

    @property
    def n_outputs(self) -> int:
        return int(self.lx.shape[0])

    def forward(self, p: np.ndarray) -> np.ndarray:
        """``m_u = Lx[u]ᵀ P Ly[u]``."""
        out: np.ndarray = ((p.reshape(self.r, self.c).T @ self.lx_t) * self.ly_t).sum(axis=0)
        return out

    def adjoint(self, w: np.ndarray) -> np.ndarray:
        """``Σ_u w_u c^u_ij`` = ``Lxᵀ diag(w) Ly`` (row-major)."""
        out: np.ndarray = ((self.ly_t * w) @ self.lx).T.ravel()
        return out

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


def _em_step(channel: PairChannel, p: np.ndarray, n: np.ndarray, total: float, with_ll: bool
             ) -> tuple[np.ndarray, float]:
    """One EM step ``F(p)`` and, when asked, ``ℓ(p)`` (scaled likelihoods): ``m = Σ_j (PᵀLxᵀ)_j ∘ (Lyᵀ)_j``,
    ``P ← P ∘ (Lyᵀ diag(n/m) Lx)ᵀ / N``. Every pattern has ``n_u ≥ 1``, so no masking is needed."""
    pm, lw, m = channel.buffers()  # reused: fresh (c × D) arrays every step would cost page faults
    np.matmul(np.ascontiguousarray(p.reshape(channel.r, channel.c).T), channel.lx_t, out=pm)
    np.einsum("ju,ju->u", pm, channel.ly_t, out=m)
    np.maximum(m, TINY, out=m)
    ll = float(n @ np.log(m)) if with_ll else float("nan")
    np.divide(n, m, out=m)
    np.multiply(channel.ly_t, m, out=lw)
    g = lw @ channel.lx
    new = p * g.T.ravel() / total
    out: np.ndarray = new / new.sum()
    return out, ll


def fit_joint(channel: PairChannel, counts: np.ndarray, log_scale: np.ndarray, *, start: np.ndarray | None,
              tolerance: float, max_iterations: int, accelerate: bool = True) -> JointFit:
    """Maximize ``Σ_u n_u log m_u`` on the simplex by (SQUAREM-accelerated) EM from ``start`` (row-major
    cells; ``None``: uniform, as in the paper). Stops when no cell moves by ``tolerance`` or more in one
    iteration, or after ``max_iterations`` (then ``converged`` is false).

    SQUAREM is :func:`ldpstream.estimators.em.em_multinomial`'s scheme (Varadhan and Roland 2008, S3, with its
    monotone safeguard: the extrapolation ``p' = p − 2αr + α²v`` is kept only if ``ℓ(p') ≥ ℓ(F(p))``, else α is
    halved toward −1, i.e. the double EM step), written here over the pair channel so that a step is two
    ``(6 × D)``-sized products and at most one ``log`` over the patterns (the generic loop masks and logs every
    step: about twice the cost at 10^6 patterns)."""
    n = np.asarray(counts, dtype=np.float64)
    total = float(n.sum())
    size = channel.n_inputs
    if total <= 0:
        return JointFit(np.full(size, 1.0 / size), 0.0, 0, True)
    p = np.full(size, 1.0 / size) if start is None else np.asarray(start, dtype=np.float64).ravel() / np.sum(start)
    p1, _ = _em_step(channel, p, n, total, False)
    converged = False
    it = 0
    for it in range(1, max_iterations + 1):  # noqa: B007
        if not accelerate:
            new = p1
        else:
            p2, ll1 = _em_step(channel, p1, n, total, True)
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
                        trial, llc = _em_step(channel, cand / cand.sum(), n, total, True)
                        if llc >= ll1:
                            nxt = trial
                            break
                    alpha = (alpha - 1.0) / 2.0
            new = nxt if nxt is not None else _em_step(channel, p2, n, total, False)[0]
        change = float(np.max(np.abs(new - p)))
        p = new
        p1, _ = _em_step(channel, p, n, total, False)
        if change < tolerance:
            converged = True
            break
    return JointFit(p, log_likelihood(channel, n, log_scale, p), it, converged)


def log_likelihood(channel: PairChannel, counts: np.ndarray, log_scale: np.ndarray, p: np.ndarray) -> float:
    """``Σ_u n_u log m_u(p)`` (exact, with the patterns' log scales)."""
    m = channel.forward(np.asarray(p, dtype=np.float64).ravel())
    with np.errstate(divide="ignore"):
        return float(np.dot(counts, np.log(m)) + np.dot(counts, log_scale))
