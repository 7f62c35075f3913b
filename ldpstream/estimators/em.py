"""Maximum likelihood for a multinomial channel by EM (optionally SQUAREM-accelerated).

Model (formula sheet, "Joint distributions", EM paragraph, specialized to a sketch): outputs ``y`` are
observed with counts ``n_y`` and probabilities ``m = p Q`` where ``Q`` is a row-stochastic
(inputs × outputs) channel and ``p`` lies on the simplex. The log-likelihood ``Σ_y n_y log m_y`` is
maximized by the fixed-point iteration

    p_x ← p_x · Σ_y Q(y|x) n_y / m_y / N,      N = Σ_y n_y,

started at the uniform distribution. Each step never decreases the likelihood. SQUAREM (Varadhan and
Roland 2008, scheme S3) extrapolates along two EM steps; a step that lowers the likelihood (or leaves the
simplex) is shrunk toward the plain double EM step, so the accelerated iteration is monotone too.

Stopping rule: the largest absolute change of ``p`` over one (accelerated) iteration below ``tol``
(default ``1e-8``; the RAPPOR reference uses 1e-6, which is coarse next to frequencies of 1e-4 when
thousands of candidates are decoded) or ``max_iter`` iterations; optionally also when an iteration gains
less than ``ll_tol`` nats of log-likelihood (the candidate decoders use 1e-7).

Channels are given as a dense or scipy.sparse (inputs × outputs) matrix, or as an
:class:`AffineChannel`, a structured operator that never materializes the channel of a hashed design.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError

__all__ = [
    "AffineChannel",
    "ChannelOperator",
    "EMResult",
    "MatrixChannel",
    "affine_constrained_variances",
    "as_channel",
    "cholesky_inverse_diagonal",
    "constrained_variances",
    "em_multinomial",
    "log_likelihood",
    "weighted_gram",
]

_TINY = 1e-300


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Inner product without BLAS. OpenBLAS threads ``ddot`` above ~10⁴ elements; on a loaded machine the
    second thread's wake-up then costs milliseconds per call (measured: 7 ms for 16k elements instead of
    3 µs), which dominated EM. ``einsum`` runs a single-threaded loop."""
    return float(np.einsum("i,i->", a, b))


class ChannelOperator(Protocol):
    """What the EM needs from a channel ``Q`` (inputs × outputs)."""

    @property
    def n_inputs(self) -> int: ...

    @property
    def n_outputs(self) -> int: ...

    def forward(self, p: np.ndarray) -> np.ndarray:
        """``m = p Q`` (length n_outputs)."""
        ...

    def adjoint(self, w: np.ndarray) -> np.ndarray:
        """``Q w`` (length n_inputs)."""
        ...

    def information(self, d: np.ndarray) -> np.ndarray:
        """Dense ``Q diag(d) Qᵀ`` (n_inputs × n_inputs)."""
        ...


class MatrixChannel:
    """A channel given explicitly as a dense or sparse (inputs × outputs) matrix."""

    def __init__(self, Q: ArrayLike | sp.spmatrix | sp.sparray) -> None:
        self.Q = sp.csr_matrix(Q) if sp.issparse(Q) else np.asarray(Q, dtype=np.float64)
        if self.Q.ndim != 2:
            raise ParameterError("channel must be a 2-D (inputs x outputs) matrix")

    @property
    def n_inputs(self) -> int:
        return int(self.Q.shape[0])

    @property
    def n_outputs(self) -> int:
        return int(self.Q.shape[1])

    def forward(self, p: np.ndarray) -> np.ndarray:
        return np.asarray(self.Q.T @ p).ravel()

    def adjoint(self, w: np.ndarray) -> np.ndarray:
        return np.asarray(self.Q @ w).ravel()

    def information(self, d: np.ndarray) -> np.ndarray:
        if sp.issparse(self.Q):
            return weighted_gram(sp.csr_matrix(self.Q.T), d)
        return (self.Q * d) @ self.Q.T


class AffineChannel:
    """A channel whose transpose is stacked blocks ``A_b = diag(scale_b) X + offset_b 1ᵀ`` plus extra columns.

    ``X`` is a sparse (R × S) 0/1 design (row ``c*k + y``: cohort ``c``, symbol or bit ``y``). Output
    ``b*R + r`` has probability ``Σ_s p_s (scale_b[r] X[r, s] + offset_b[r]) + Σ_e p_e extra[b*R + r, e]``.
    The inputs are the S columns of ``X`` followed by the ``extra`` columns (e.g. an "other" string).

    - O-RR: one block, ``scale = (e^ε − 1)/(C(e^ε + k − 1))``, ``offset = 1/(C(e^ε + k − 1))``.
    - Bit mechanisms (composite likelihood): block 1 = "bit set" with ``scale = (q* − p*)/(Ck)``,
      ``offset = p*/(Ck)``; block 0 = "bit clear" with ``scale = −(q* − p*)/(Ck)``, ``offset = (1 − p*)/(Ck)``.
    """

    def __init__(
        self,
        X: sp.spmatrix | sp.sparray,
        scales: Sequence[ArrayLike],
        offsets: Sequence[ArrayLike],
        extra: ArrayLike | None = None,
    ) -> None:
        self.X = sp.csr_matrix(X, dtype=np.float64)
        self.XT = sp.csr_matrix(self.X.T)
        R = self.X.shape[0]
        if len(scales) != len(offsets) or not scales:
            raise ParameterError("need one scale and one offset per block")
        self.scales = [np.broadcast_to(np.asarray(s, dtype=np.float64), (R,)) for s in scales]
        self.offsets = [np.broadcast_to(np.asarray(o, dtype=np.float64), (R,)) for o in offsets]
        self.n_blocks = len(scales)
        if extra is None:
            self.extra = np.zeros((R * self.n_blocks, 0))
        else:
            e = np.asarray(extra, dtype=np.float64)
            self.extra = e.reshape(-1, 1) if e.ndim == 1 else e
            if self.extra.shape[0] != R * self.n_blocks:
                raise ParameterError("extra columns must have one row per output")

    @property
    def n_candidates(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_inputs(self) -> int:
        return self.n_candidates + int(self.extra.shape[1])

    @property
    def n_outputs(self) -> int:
        return int(self.X.shape[0]) * self.n_blocks

    def forward(self, p: np.ndarray) -> np.ndarray:
        S = self.n_candidates
        pc = p[:S]
        xp = self.X @ pc
        total = pc.sum()
        m = np.concatenate([s * xp + o * total for s, o in zip(self.scales, self.offsets, strict=True)])
        if self.extra.shape[1] == 1:
            m += self.extra[:, 0] * p[S]
        elif self.extra.shape[1]:
            m += np.einsum("ie,e->i", self.extra, p[S:])
        return m

    def adjoint(self, w: np.ndarray) -> np.ndarray:
        R = self.X.shape[0]
        blocks = w.reshape(self.n_blocks, R)
        sw = sum(s * wb for s, wb in zip(self.scales, blocks, strict=True))
        ow = sum(_dot(o, wb) for o, wb in zip(self.offsets, blocks, strict=True))
        out = self.XT @ sw + ow
        if self.extra.shape[1]:
            out = np.concatenate([out, np.einsum("ie,i->e", self.extra, w)])
        return out

    def information(self, d: np.ndarray) -> np.ndarray:
        """``Σ_b A_bᵀ diag(d_b) A_b`` with ``A_b`` the block's (outputs × inputs) matrix, dense."""
        R = self.X.shape[0]
        S = self.n_candidates
        blocks = d.reshape(self.n_blocks, R)
        w_gram = sum(s * s * db for s, db in zip(self.scales, blocks, strict=True))
        cross = sum(s * o * db for s, o, db in zip(self.scales, self.offsets, blocks, strict=True))
        const = float(sum(np.dot(o * o, db) for o, db in zip(self.offsets, blocks, strict=True)))
        u = self.XT @ cross
        n_in = self.n_inputs
        info = np.empty((n_in, n_in))
        info[:S, :S] = weighted_gram(self.X, w_gram)
        info[:S, :S] += u[:, None] + u[None, :] + const
        if n_in > S:
            E = self.extra
            dE = d[:, None] * E
            xe = sum(
                s[:, None] * dEb for s, dEb in zip(self.scales, dE.reshape(self.n_blocks, R, -1), strict=True)
            )
            oe = sum(o @ dEb for o, dEb in zip(self.offsets, dE.reshape(self.n_blocks, R, -1), strict=True))
            ce = self.XT @ xe + oe[None, :]
            info[:S, S:] = ce
            info[S:, :S] = ce.T
            info[S:, S:] = E.T @ dE
        return info


def as_channel(Q: ArrayLike | sp.spmatrix | sp.sparray | ChannelOperator) -> ChannelOperator:
    """Wrap a matrix as a :class:`MatrixChannel`; channel operators pass through."""
    if hasattr(Q, "forward") and hasattr(Q, "adjoint"):
        return Q  # type: ignore[return-value]
    return MatrixChannel(Q)  # type: ignore[arg-type]


def weighted_gram(X: sp.spmatrix | sp.sparray, w: ArrayLike, max_pairs: int = 1_000_000) -> np.ndarray:
    """Dense ``Xᵀ diag(w) X`` for a sparse (R × S) ``X`` without densifying ``X``.

    Each row with ``L`` nonzeros contributes an ``L × L`` outer product; when there are at most
    ``max_pairs`` such pairs they are generated vectorized and accumulated with ``np.bincount`` straight
    into the dense S × S result, otherwise scipy's sparse product is used and then densified.
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    R, S = X.shape
    w = np.broadcast_to(np.asarray(w, dtype=np.float64), (R,))
    lengths = np.diff(X.indptr).astype(np.int64)
    if int(np.sum(lengths**2)) > max_pairs:
        # Many pairs: scipy's sparse product is faster than generating them explicitly.
        return np.asarray((sp.csr_matrix(X.T) @ (sp.diags(w) @ X)).toarray())
    X.sum_duplicates()
    lengths = np.diff(X.indptr).astype(np.int64)
    sq = lengths**2
    n_pairs = int(sq.sum())
    out = np.zeros(S * S)
    if n_pairs:
        block_start = np.repeat(np.cumsum(sq) - sq, sq)
        local = np.arange(n_pairs) - block_start
        Lr = np.repeat(lengths, sq)
        a = local // Lr
        b = local - a * Lr
        base = np.repeat(X.indptr[:-1], sq)
        i = X.indices[base + a].astype(np.int64)
        j = X.indices[base + b].astype(np.int64)
        vals = X.data[base + a] * X.data[base + b] * np.repeat(w, sq)
        out = np.bincount(i * S + j, weights=vals, minlength=S * S).astype(np.float64, copy=False)
    return out.reshape(S, S)


def log_likelihood(counts: np.ndarray, m: np.ndarray) -> float:
    """``Σ_y n_y log m_y`` (terms with ``n_y = 0`` contribute 0)."""
    pos = counts > 0
    return _dot(counts[pos], np.log(np.maximum(m[pos], _TINY)))


@dataclass(frozen=True, eq=False)
class EMResult:
    """Output of :func:`em_multinomial`."""

    p: np.ndarray
    log_likelihood: float
    n_iter: int
    converged: bool
    history: list[float] = field(default_factory=list)


def em_multinomial(
    counts: ArrayLike,
    channel: ArrayLike | sp.spmatrix | sp.sparray | ChannelOperator,
    *,
    p0: ArrayLike | None = None,
    tol: float = 1e-8,
    max_iter: int = 10_000,
    accelerate: bool = True,
    track: bool = False,
    ll_tol: float | None = None,
) -> EMResult:
    """Maximum-likelihood ``p`` on the simplex for output ``counts`` observed through ``channel``.

    Args:
        counts: observed count of each output (length n_outputs).
        channel: row-stochastic (inputs × outputs) matrix (dense or sparse) or a :class:`ChannelOperator`.
        p0: starting point (default uniform). EM cannot move a coordinate away from 0, so give a strictly
            positive start (e.g. a projected least-squares fit mixed with the uniform distribution).
        tol: stop when ``max |p_new − p_old| < tol``.
        max_iter: at most this many (accelerated) iterations.
        accelerate: use SQUAREM (each iteration then costs three EM steps).
        track: record the log-likelihood of every iterate in ``history`` (non-decreasing).
        ll_tol: also stop when one iteration raises the log-likelihood by less than ``ll_tol`` (in nats;
            a gain δ means the iterate moved by about ``sqrt(2δ)`` standard errors along the direction of
            progress, so 1e-6 is far below statistical resolution).

    Each EM step ``F(q)`` computes ``m = qQ`` once and returns both ``F(q)`` and the log-likelihood at ``q``.
    SQUAREM iteration: ``p1 = F(p)``, ``p2 = F(p1)``, extrapolate ``p' = p − 2αr + α²v`` (``r = p1 − p``,
    ``v = p2 − 2p1 + p``), then ``p_new = F(p')``; the extrapolation is accepted when ``ℓ(p') >= ℓ(p1)``,
    else α is halved toward −1 (α = −1 gives ``p' = p2``). So ``ℓ(p) <= ℓ(p1) <= ℓ(p') <= ℓ(p_new)``: monotone,
    three channel products per iteration in the common case.
    """
    ch = as_channel(channel)
    n = np.asarray(counts, dtype=np.float64).ravel()
    if n.size != ch.n_outputs:
        raise ParameterError(f"{n.size} counts for a channel with {ch.n_outputs} outputs")
    if np.any(n < 0):
        raise ParameterError("counts must be non-negative")
    total = n.sum()
    k = ch.n_inputs
    if total <= 0:
        return EMResult(np.full(k, 1.0 / k), 0.0, 0, True)
    p = np.full(k, 1.0 / k) if p0 is None else np.asarray(p0, dtype=np.float64).copy()
    p = p / p.sum()
    pos = n > 0
    n_pos = n[pos]
    # Log-likelihoods are computed relative to the saturated model m̂ = n/N, i.e. as Σ n log(m/m̂) (minus half
    # the deviance): O(outputs) in size instead of O(N log N), so that gains of 1e-7 nats stay resolvable in
    # floating point. The constant Σ n log m̂ is added back to everything reported.
    log_emp = np.log(n_pos / total)
    ll_const = _dot(n_pos, log_emp)

    def step(q: np.ndarray) -> tuple[np.ndarray, float]:
        m = np.maximum(ch.forward(q), _TINY)
        ratio = np.zeros_like(m)
        mp = m[pos]
        ratio[pos] = n_pos / mp
        new = q * ch.adjoint(ratio) / total
        new /= new.sum()
        return new, _dot(n_pos, np.log(mp) - log_emp)

    history: list[float] = []
    converged = False
    it = 0
    p1, ll = step(p)  # ll = ℓ(p)
    for it in range(1, max_iter + 1):  # noqa: B007
        if track:
            history.append(ll + ll_const)
        if not accelerate:
            new = p1
            p1, ll_new = step(new)
        else:
            p2, ll1 = step(p1)
            r = p1 - p
            v = p2 - 2 * p1 + p
            nv = np.sqrt(_dot(v, v))
            accepted = False
            if nv > 0:
                alpha = min(-np.sqrt(_dot(r, r)) / nv, -1.0)
                for _ in range(6):
                    if alpha >= -1.0 - 1e-9:
                        break
                    cand = p - 2 * alpha * r + alpha * alpha * v
                    if cand.min() >= 0 and cand.sum() > 0:
                        nxt, llc = step(cand / cand.sum())
                        if llc >= ll1:
                            accepted = True
                            break
                    alpha = (alpha - 1.0) / 2.0
            if not accepted:
                nxt, _ = step(p2)
            # the next iterate is F(p') (or F(p2)); its own EM step starts the next iteration
            new = nxt
            p1, ll_new = step(new)
        change = float(np.max(np.abs(new - p)))
        gain = ll_new - ll
        p, ll = new, ll_new
        if change < tol or (ll_tol is not None and 0 <= gain < ll_tol):
            converged = True
            break
    if track:
        history.append(ll + ll_const)
    return EMResult(p, ll + ll_const, it, converged, history)


def cholesky_inverse_diagonal(G: np.ndarray, ridge: float = 0.0) -> tuple[object, np.ndarray]:
    """Cholesky factor of a symmetric positive definite ``G`` and ``diag(G⁻¹)``.

    The diagonal is the column sums of squares of ``L⁻¹`` (LAPACK ``trtri``), about a third of the cost of
    the full inverse. Raises ``numpy.linalg.LinAlgError`` if ``G`` (plus ``ridge·max diag``) is not positive
    definite.
    """
    A = np.array(G, dtype=np.float64, order="F")
    if ridge:
        A[np.diag_indices(A.shape[0])] += ridge * max(float(np.max(np.abs(np.diag(A)))), _TINY)
    factor = sl.cho_factor(A, lower=True, check_finite=False, overwrite_a=True)
    L = np.tril(factor[0])
    Linv, info = sl.lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError("singular Cholesky factor")
    return factor, np.einsum("ij,ij->j", Linv, Linv)


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
    info: dict | None = None,
) -> np.ndarray:
    """:func:`constrained_variances` of ``ch.information(d)`` without forming the information matrix.

    Only valid for an :class:`AffineChannel` with at most one extra column ("other"). Write the channel's
    (outputs × inputs) matrix as ``A = [A_S, e]`` with ``A_S = stack_b(diag(s_b) X + o_b 1ᵀ)``. On the
    tangent space of the simplex, ``d_o = −1ᵀ d_S``, so ``A d = B d_S`` with
    ``B = stack_b(diag(s_b) X + f_b 1ᵀ)``, ``f_b = o_b − e_b`` (``e = 0`` without "other"). The constrained
    covariance of the candidates is then ``J⁻¹`` with ``J = Bᵀ D B = G + g 1ᵀ + 1 gᵀ + c 11ᵀ``, where
    ``G = Xᵀ diag(Σ_b s_b² d_b) X`` (sparse Gram, :class:`~ldpstream.estimators.gram.WeightedGram`),
    ``g = Xᵀ Σ_b s_b d_b f_b`` and ``c = Σ_b f_bᵀ D_b f_b``; the variance of "other" is ``1ᵀ J⁻¹ 1``.
    ``diag(J⁻¹)`` follows from ``diag(G⁻¹)`` by Woodbury with ``U = [1, g]``, ``N = [[c, 1], [1, 0]]``:
    ``J⁻¹ = G⁻¹ − Y N (I + Uᵀ Y N)⁻¹ Yᵀ``, ``Y = G⁻¹ U`` (two solves). Without "other" the ``1``
    direction is removed instead: ``Cov = G⁻¹ − y yᵀ / (1ᵀ y)``, ``y = G⁻¹ 1`` (Aitchison–Silvey, as in
    :func:`constrained_variances`: the terms in ``1`` vanish on the tangent space). ``diag(G⁻¹)`` is exact up
    to ``exact_max`` candidates and the calibrated cavity approximation above (exact at ``top``).
    """
    from .gram import WeightedGram

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
        g = ch.XT @ sum(s * db * fb for s, db, fb in zip(ch.scales, blocks, f, strict=True))
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
