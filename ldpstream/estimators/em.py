"""Maximum likelihood for a multinomial channel by EM (optionally SQUAREM-accelerated).

Model (docs/math/estimators.md#maximum-likelihood-by-em): outputs ``y`` are
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

Channels are given as a dense or scipy.sparse (inputs × outputs) matrix, or as a channel operator of
:mod:`ldpstream.estimators.channels`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from .channels import ChannelOperator, channel_and_counts
from .numerics.linalg import TINY, dot

__all__ = ["EMResult", "em_multinomial", "log_likelihood"]


def log_likelihood(counts: np.ndarray, m: np.ndarray) -> float:
    """``Σ_y n_y log m_y`` (terms with ``n_y = 0`` contribute 0)."""
    pos = counts > 0
    return dot(counts[pos], np.log(np.maximum(m[pos], TINY)))


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
    ch, n = channel_and_counts(channel, counts)
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
    ll_const = dot(n_pos, log_emp)

    def step(q: np.ndarray) -> tuple[np.ndarray, float]:
        m = np.maximum(ch.forward(q), TINY)
        ratio = np.zeros_like(m)
        mp = m[pos]
        ratio[pos] = n_pos / mp
        new = q * ch.adjoint(ratio) / total
        new /= new.sum()
        return new, dot(n_pos, np.log(mp) - log_emp)

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
            nv = np.sqrt(dot(v, v))
            accepted = False
            if nv > 0:
                alpha = min(-np.sqrt(dot(r, r)) / nv, -1.0)
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

