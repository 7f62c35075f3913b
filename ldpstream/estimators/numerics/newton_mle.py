"""Maximum likelihood for a multinomial channel by projected Newton steps on the information.

Same model and maximizer as :func:`ldpstream.estimators.em.em_multinomial`
(docs/math/estimators.md#maximum-likelihood-by-projected-newton): outputs ``y`` with counts ``n_y``,
probabilities ``m = p Q`` (``Q`` row-stochastic, inputs × outputs), ``p`` on the simplex. Because every row of
``Q`` sums to one, maximizing ``ℓ(p) = Σ_y n_y log m_y`` on the simplex is the same as minimizing

    f(p) = −Σ_y n_y log (pQ)_y + N Σ_x p_x,      N = Σ_y n_y,

over ``p ≥ 0`` alone (the Lagrangian of the sum constraint with its multiplier N): at a minimizer of ``f``,
``Σ_x p_x ∂f/∂p_x = N Σp − N = 0`` by homogeneity, so ``Σ p = 1`` there. That leaves bound constraints only,
for which Bertsekas's (1982) projected Newton method converges quadratically once the set of zero coordinates
is identified: gradient ``g = N (1 − r)`` with ``r = Q(n/m)/N`` (the factor of the EM update), Hessian
``H = Q diag(n/m²) Qᵀ`` (the observed information), the Newton step on the free coordinates, the binding ones
(at 0 with ``g > 0``) left at 0, and an Armijo search along the projection onto ``p ≥ 0``.

Stopping rule: the duality-gap certificate of the EM section, ``ℓ(p*) − ℓ(p) ≤ N log max_x r_x`` at the
normalized iterate, below ``gap_tol`` nats (default 5·10⁻⁷: then every coordinate is within 10⁻³ model-based
standard errors of the maximizer, docs/math/estimators.md#warm-starts-of-the-iterative-decoders). The rule is a
bound on the distance to the optimum, not a step size, so it is as strict from a cold start as from a warm
one; EM could not reach it in reasonable time, Newton does in a few steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError

from ..channels import AffineChannel, ChannelOperator, channel_and_counts
from ..em import em_multinomial
from .linalg import TINY, dot

__all__ = ["HeldInformation", "NewtonResult", "gap_certificate", "newton_multinomial"]

#: Largest coordinate that counts as "at 0" when its gradient pushes it there (Bertsekas's ε).
EPS_BINDING = 1e-6

#: Default bound on the log-likelihood gap to the maximizer, in nats (10⁻³ standard errors: ``δ²/2``).
GAP_TOL = 5e-7


@dataclass(frozen=True, eq=False)
class NewtonResult:
    """Output of :func:`newton_multinomial`: ``converged`` means the gap certificate fell below ``gap_tol``
    (``gap`` is its last value); ``em_iter`` and ``em_converged`` describe the EM run before Newton, if any
    (0 and False from a given start that Newton alone finished)."""

    p: np.ndarray
    log_likelihood: float
    n_iter: int
    converged: bool
    gap: float
    em_iter: int
    em_converged: bool = False


def gap_certificate(counts: np.ndarray, channel: ChannelOperator, p: np.ndarray) -> float:
    """``N log max_x r_x`` at ``p / Σp`` (``r = Q(n/m)/N``): an upper bound on ``ℓ(p*) − ℓ(p)`` for any ``p``
    with ``m_y > 0`` where ``n_y > 0`` (Jensen; docs/math/estimators.md#warm-starts-of-the-iterative-decoders)."""
    n = np.asarray(counts, dtype=np.float64)
    q = p / p.sum()
    m = np.maximum(channel.forward(q), TINY)
    total = float(n.sum())
    r = channel.adjoint(np.where(n > 0, n / m, 0.0)) / total
    return float(total * np.log(max(float(r.max()), TINY)))


def _objective(n_pos: np.ndarray, pos: np.ndarray, log_emp: np.ndarray, total: float,
               ch: ChannelOperator, p: np.ndarray) -> tuple[float, np.ndarray]:
    """``f(p)`` relative to the saturated model (so that small changes stay resolvable) and ``m = pQ``."""
    m = np.maximum(ch.forward(p), TINY)
    return -dot(n_pos, np.log(m[pos]) - log_emp) + total * (float(p.sum()) - 1.0), m


def newton_multinomial(
    counts: ArrayLike,
    channel: ArrayLike | sp.spmatrix | sp.sparray | ChannelOperator,
    *,
    p0: ArrayLike | None = None,
    gap_tol: float = GAP_TOL,
    max_iter: int = 30,
    em_tol: float = 1e-8,
    em_max_iter: int = 5000,
    em_ll_tol: float = 1e-7,
    held: list[HeldInformation] | None = None,
) -> NewtonResult:
    """Maximum-likelihood ``p`` on the simplex for output ``counts`` observed through ``channel``.

    Args:
        counts: observed count of each output.
        channel: row-stochastic (inputs × outputs) matrix or a channel operator with ``information``.
        p0: starting point on the simplex (zeros allowed: a coordinate with a positive gradient leaves 0),
            e.g. the previous solution of nearly the same counts. Default: SQUAREM EM from the uniform
            distribution with its own stopping rule (``em_tol``, ``em_max_iter``, ``em_ll_tol``), then Newton.
        gap_tol: stop when the gap certificate is below this many nats.
        max_iter: at most this many Newton steps. Newton's quadratic convergence is local: from a ``p0`` that
            is not near, or when the zero set moves a lot, the certificate may still be above ``gap_tol`` then;
            EM (from Newton's point) and Newton run once more, and the result says ``converged=False`` if that
            fails too. Newton never raises ``f``, so its point is then still at least as likely as its start.
        held: informations formed by earlier calls with the same channel (a list the caller keeps, e.g. per
            design across refreshes; this call adds the ones it forms, at most :data:`HELD_INFORMATIONS`): a
            step takes one whose weights are within :data:`HELD_INFORMATION_TOLERANCE` of its own (see
            :func:`_direction`) instead of forming the information again. The result is the same maximizer (the
            stopping rule is the exact certificate).

    Each step: ``r = Q(n/m)/N``, gradient ``g = N(1 − r)``; binding set ``B = {p_x ≤ ε, g_x > 0}`` with
    ``ε = min(10⁻⁶, ‖p − max(p − g/N, 0)‖)`` (Bertsekas 1982); Newton direction ``d_F = −H_FF⁻¹ g_F`` on the
    rest (Cholesky; a ridge is added if the information is singular on ``F``), ``d_B = −p_B``; then the
    largest ``α ∈ {1, ½, ¼, …}`` with ``f(P(p + αd)) ≤ f(p) + 10⁻⁴ α g_Fᵀ d_F`` (Armijo along the projection
    ``P = max(·, 0)``).
    """
    ch, n = channel_and_counts(channel, counts)
    total = float(n.sum())
    k = ch.n_inputs
    if total <= 0:
        return NewtonResult(np.full(k, 1.0 / k), 0.0, 0, True, 0.0, 0)
    em_iter, em_converged = 0, False
    if p0 is None:
        warm = em_multinomial(n, ch, tol=em_tol, max_iter=em_max_iter, ll_tol=em_ll_tol)
        p, em_iter, em_converged = warm.p, warm.n_iter, warm.converged
    else:
        p = np.maximum(np.asarray(p0, dtype=np.float64).ravel(), 0.0)
        if p.size != k or not np.all(np.isfinite(p)) or p.sum() <= 0:
            raise ParameterError(f"a start needs {k} finite non-negative values with a positive sum")
        p = p / p.sum()
    pool = [] if held is None else held
    result = _newton(n, ch, p, gap_tol, max_iter, pool)
    n_iter = result.n_iter
    if not result.converged and p0 is not None:
        # far from the start's optimum (the counts or the zero set moved a lot): EM from Newton's point (every
        # coordinate given 10⁻⁶ of the uniform distribution, so that EM can move it), then Newton again
        warm = em_multinomial(n, ch, p0=(1 - 1e-6) * result.p + 1e-6 / k, tol=em_tol, max_iter=em_max_iter,
                              ll_tol=em_ll_tol)
        em_iter, em_converged = warm.n_iter, warm.converged
        result = _newton(n, ch, warm.p, gap_tol, max_iter, pool)
        n_iter += result.n_iter
    return NewtonResult(result.p, result.log_likelihood, n_iter, result.converged, result.gap, em_iter, em_converged)


def _newton(n: np.ndarray, ch: ChannelOperator, p: np.ndarray, gap_tol: float, max_iter: int,
            pool: list[HeldInformation]) -> NewtonResult:
    """Projected Newton from ``p`` (on the simplex); see :func:`newton_multinomial`. The steps look for an
    information in the ones this call formed, then in ``pool``; the last one formed goes to ``pool`` at the end
    (the one nearest the maximizer: the earlier ones are of no use to the next call), see :func:`_keep`."""
    held: list[HeldInformation] = []
    total = float(n.sum())
    pos = n > 0
    n_pos = n[pos]
    log_emp = np.log(n_pos / total)
    f, m = _objective(n_pos, pos, log_emp, total, ch, p)
    # rounding of f: N(Σp − 1) and Σ n log m each carry about N·2⁻⁵² per unit of their terms
    resolution = 64 * np.finfo(np.float64).eps * total
    converged = False
    gap = np.inf
    it = 0
    for it in range(max_iter + 1):
        # r − 1 = Q(n/m − N)/N (Q1 = 1): the differences are small next to N, so r − 1 keeps its precision
        # where N (in the composite likelihood of bits, bits × reports) reaches 10⁸–10⁹
        r1 = ch.adjoint(np.where(pos, n / m, 0.0) - total) / total
        # certificate at the normalized iterate (f's iterates need not sum to 1; scaling p by c scales r by 1/c)
        gap = total * np.log1p(float(np.max((1.0 + r1) * float(p.sum()) - 1.0)))
        if gap < gap_tol:
            converged = True
            break
        if it == max_iter:
            break
        g = -total * r1
        eps = min(EPS_BINDING, float(np.linalg.norm(p - np.maximum(p - g / total, 0.0))))
        binding = (p <= eps) & (g > 0)
        d, slope = _direction(ch, n, pos, m, p, g, binding, eps, held, pool)
        if -slope < resolution:
            # the predicted decrease ½·|gᵀd| is below the rounding of f (N Σp alone carries N·2⁻⁵²): Armijo cannot
            # tell, and so close to the optimum the quadratic model is exact to far below that: take the step
            p = np.maximum(p + d, 0.0)
            f, m = _objective(n_pos, pos, log_emp, total, ch, p)
            continue
        # Armijo along the projection arc: α = 1, ½, ¼, … (the projection sets to 0 the coordinates that the step
        # drives below it; they bind at the next iteration while their gradient keeps pushing them there).
        # Binding at once every coordinate the full step drives below 0 (and solving again) was tried: at
        # k = 4096 bits, S = 256 from EM's point the full step overshoots, those coordinates are not the
        # optimum's zeros, and f rose.
        accepted = False
        for alpha in 0.5 ** np.arange(41):
            cand = np.maximum(p + alpha * d, 0.0)
            f_new, m_new = _objective(n_pos, pos, log_emp, total, ch, cand)
            if f_new <= f + 1e-4 * alpha * slope:
                accepted = True
                break
        if not accepted:
            break
        p, f, m = cand, f_new, m_new
    if held:
        _keep(pool, held[0])  # the one used last
    p = p / p.sum()
    m = np.maximum(ch.forward(p), TINY)
    ll = dot(n_pos, np.log(m[pos]))
    return NewtonResult(p, ll, it, converged, float(gap), 0)


def _direction(ch: ChannelOperator, n: np.ndarray, pos: np.ndarray, m: np.ndarray, p: np.ndarray, g: np.ndarray,
               binding: np.ndarray, eps: float, held: list[HeldInformation] | None = None,
               pool: Sequence[HeldInformation] = ()) -> tuple[np.ndarray, float]:
    """The projected Newton direction for the binding set ``binding`` (modified in place) and its slope
    ``g_Fᵀ d_F``: ``d_B = −p_B``, ``d_F = −H_FF⁻¹ g_F``.

    ``held`` (kept by the caller between steps; ``pool``, read only, between calls with the same channel):
    informations formed earlier, with their free sets and weights ``d = n/m²``, most recent first (one found in
    ``pool`` joins ``held``). When the free set is a subset of one's and every weight is within 1% of those it was
    formed with, its rows and columns are taken from it instead of forming it again (one sparse Gram per step is
    most of a step's cost). The information then differs from the current one by at most 1% in the Loewner order
    (``H = Bᵀ diag(d) B``), so the step is a Newton step with a Hessian within 1%: the iteration still descends
    (Armijo) and converges linearly at a rate ≤ 0.01 where Newton's is quadratic, and the stopping rule, the gap
    certificate at the exact gradient, is unchanged.

    A coordinate at 0 (``p ≤ eps``) whose Newton step is negative would be clipped by the projection, and the
    rest of the step (solved as if it could go below 0) need not descend: it binds too, and the step on the
    others is solved again. At the optimum of a face, a coordinate with ``g_x < 0`` gets ``d_x > 0`` (the Schur
    complement of ``H`` is positive), so a coordinate that must leave 0 is never held there.
    """
    d = -p.copy()
    free = np.flatnonzero(~binding)
    H = np.zeros((0, 0))
    d_free = np.zeros(0)
    weights = np.where(pos, n / (m * m), 0.0)
    for _ in range(10):
        free = np.flatnonzero(~binding)
        source: HeldInformation | None = None
        for candidate in (*(held or ()), *pool):
            from_held = candidate.rows(weights, free)
            if from_held is not None:
                H, source = from_held, candidate
                if held is not None and (not held or held[0] is not candidate):
                    held.insert(0, candidate)  # from the pool: it is this call's now
                break
        else:
            H = _information(ch, weights, free)
            if held is not None:
                source = HeldInformation(free, weights, H)
                held.insert(0, source)
                del held[HELD_INFORMATIONS:]
        d_free = _newton_direction(H, g[free], source, free.tobytes())
        stuck = (p[free] <= eps) & (d_free < 0)
        if not np.any(stuck):
            break
        binding[free[stuck]] = True
    d[free] = d_free
    slope = dot(g[free], d_free)
    if slope >= 0:  # not a descent direction (numerically flat): the scaled gradient
        d[free] = -g[free] / np.maximum(np.diag(H), TINY)
        slope = dot(g[free], d[free])
    return d, slope


#: Largest relative change of the information's weights ``n/m²`` for which a held information is reused.
HELD_INFORMATION_TOLERANCE = 0.01
#: Informations kept in a ``held`` list (:func:`newton_multinomial`): the windows of one metric (three), and the
#: previous one of a window that forms a new one at every refresh.
HELD_INFORMATIONS = 4


@dataclass(eq=False)
class HeldInformation:
    """An information ``Bᵀ diag(weights) B`` formed on the inputs ``free``, and the Cholesky factor of its rows
    and columns on the last free set solved with (``factor``: ``(free set's bytes, cho_factor)``, replaced
    whole, so that threads sharing the entry never see a factor with another set's name)."""

    free: np.ndarray
    weights: np.ndarray
    information: np.ndarray
    factor: tuple[bytes, Any] | None = None

    @property
    def nbytes(self) -> int:
        held = 0 if self.factor is None else int(self.factor[1][0].nbytes)
        return int(self.free.nbytes + self.weights.nbytes + self.information.nbytes) + held

    def rows(self, weights: np.ndarray, free: np.ndarray) -> np.ndarray | None:
        """The rows and columns ``free`` of the information when ``free`` is a subset of its free set and the
        weights moved by at most :data:`HELD_INFORMATION_TOLERANCE` (relative) since it was formed; else None."""
        old = self.weights
        if old.shape != weights.shape:
            return None
        used = old > 0
        if not np.array_equal(used, weights > 0):
            return None
        if used.any() and float(np.max(np.abs(weights[used] / old[used] - 1.0))) > HELD_INFORMATION_TOLERANCE:
            return None
        at = np.searchsorted(self.free, free)
        if np.any(at >= self.free.size) or not np.array_equal(self.free[np.minimum(at, self.free.size - 1)], free):
            return None
        H: np.ndarray = self.information[np.ix_(at, at)]
        return H


def _keep(pool: list[HeldInformation], last: HeldInformation) -> None:
    """Put ``last`` (the information a call used last, formed or found in ``pool``) first in ``pool``, least
    recently used out: a window that forms a new one at every refresh (few reports, its weights move by more than
    1%) pushes out only its own older one while the others are used at every refresh."""
    pool[:] = [last, *(h for h in pool if h is not last)][:HELD_INFORMATIONS]


def _newton_direction(H: np.ndarray, g: np.ndarray, held: HeldInformation | None = None, name: bytes = b""
                      ) -> np.ndarray:
    """``−H⁻¹ g`` by Cholesky; if ``H`` is singular on the free set, with a growing ridge (Levenberg).
    ``held``: where ``H`` came from; its factor is reused when it was made for the same free set (``name``),
    else replaced by this one's."""
    made = None if held is None else held.factor
    if made is not None and made[0] == name:
        step_held: np.ndarray = -sl.cho_solve(made[1], g, check_finite=False)
        return step_held
    scale = max(float(np.max(np.diag(H))), TINY)
    ridge = 0.0
    for _ in range(12):
        A = H if ridge == 0.0 else H + ridge * scale * np.eye(H.shape[0])
        try:
            factor = sl.cho_factor(A, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            ridge = 1e-12 if ridge == 0.0 else ridge * 100.0
            continue
        if held is not None:
            held.factor = (name, factor)
        step: np.ndarray = -sl.cho_solve(factor, g, check_finite=False)
        return step
    return -g / scale


def _information(ch: ChannelOperator, d: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``(Q diag(d) Qᵀ)`` restricted to the inputs ``columns``: for an :class:`AffineChannel` only those columns'
    Gram is formed (the free set is often a third of the candidates); otherwise the full information, indexed."""
    if isinstance(ch, AffineChannel):
        S = ch.n_candidates
        cand = columns[columns < S]
        extra = columns[columns >= S] - S
        sub = AffineChannel(ch.X[:, cand], ch.scales, ch.offsets, ch.extra[:, extra])
        return sub.information(d)
    full: np.ndarray = ch.information(d)
    sub_info: np.ndarray = full[np.ix_(columns, columns)]
    return sub_info
