"""Detection: which candidate strings of a RAPPOR / O-RAPPOR collection are really there
(docs/math/estimators.md#detection-which-candidates-are-there).

:func:`detect` decodes a ``(C, k + 1)`` bit sketch against a ``(C·k, S)`` candidate design in four steps, on
the responses ``z_cj = (c_cj/N_c − p*)/(q* − p*)`` (``E z = X f``), weights ``W``, ``G = XᵀWX``, ``g = XᵀWz``:

1. **Screen**: minimize ``½ fᵀGf − gᵀf + λ Σ_s sqrt(G_ss) f_s`` over ``f >= 0`` (:func:`nn_lasso`), "other"
   unpenalized, ``λ = Φ⁻¹(1 − alpha_screen)``, raised until the selected columns are well-determined; when the
   full design is not, candidates whose score at that fit exceeds ``prune_z`` are selected too.
2. **Refit**: weighted NNLS on the selected columns, standard errors of the unconstrained weighted LS on them;
   candidates with refit ``z < prune_z`` are dropped and the rest refit until none drops.
3. **Test**: one-sided ``z = refit / se`` (0 for the unselected), corrected over all S candidates:
   ``"bonferroni"`` or ``"bh"``, adaptive (``adaptive="two-stage"``: :func:`two_stage_step_up`;
   ``"storey"``: :func:`storey_null_fraction`) when the full design is well-determined, plain BH otherwise.
4. **Points** (``shrink=True``): empirical-Bayes posterior means of the full LS
   (:mod:`ldpstream.estimators.empirical_bayes`), with the full LS sandwich interval
   (``interval_method = "ls-sandwich"``); in an underdetermined design the refit and its clipped Wald interval
   (``"wald-refit"``).

Default: two-stage adaptive Benjamini–Hochberg at q = 0.10. The detected set is
:meth:`DetectionEstimate.significant` at the same ``alpha`` and ``correction``, also ``info["detected"]``.

``info`` also records ``rule``, ``alpha``, ``adaptive`` (the procedure that ran: ``"two-stage"``, ``"storey"`` or
``"none"``), ``lambda``, ``alpha_screen``, ``selected`` (count after pruning), ``pruned``, ``determined`` (a
well-determined selected set was found), ``lambda_raised`` (number of λ increases), ``null_fraction`` (π̂0, 1 when
not estimated), ``point`` (``"posterior-mean"`` or ``"refit"``) and ``detected_mass`` (the published frequencies of
the detected strings summed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp
from numpy.typing import ArrayLike
from scipy import optimize, stats

from ldpstream.errors import ParameterError

from .candidates import decode_bits
from .empirical_bayes import npmle_prior, posterior_mean
from .estimate import ConfidenceInterval, detection_floor
from .intervals import Z95, ScoreTestedEstimate
from .misfit import pearson_misfit, robust_variance_ratio

__all__ = [
    "AdaptiveProcedure", "Correction", "DetectionEstimate", "FullDesignFit", "WeightedColumns", "detect",
    "nn_lasso", "nonnegative_quadratic", "storey_null_fraction", "two_stage_step_up",
]

Correction = Literal["bonferroni", "bh"]
_CORRECTIONS = ("bonferroni", "bh")
#: How the Benjamini–Hochberg rule adapts to the share of absent candidates (module docstring, step 3):
#: ``"two-stage"`` (Benjamini, Krieger and Yekutieli 2006, the default) or ``"storey"`` (Storey, Taylor and
#: Siegmund 2004; docs/math/estimators.md compares them).
AdaptiveProcedure = Literal["two-stage", "storey"]
_ADAPTIVE = ("two-stage", "storey")
#: :func:`nn_lasso` adds at most this many violators of the optimality conditions to its working set at once
#: (or as many as the working set holds, if more).
WORKING_SET_STEP = 32


class WeightedColumns:
    """Blocks, products and the diagonal of ``G = Xᵀ diag(w) X`` for a sparse design ``X``: from the dense ``G``
    when ``dense`` (formed once, for a caller that needs all of it), else from sparse products of the columns asked
    for (memory O(nnz(X)), never S × S)."""

    full: np.ndarray | None

    def __init__(self, X: Any, w: np.ndarray, *, dense: bool) -> None:
        self.X = sp.csc_matrix(X, dtype=np.float64)
        self.WX = sp.csc_matrix(sp.diags(np.asarray(w, dtype=np.float64)) @ self.X)
        self.diagonal = np.asarray(self.X.multiply(self.WX).sum(axis=0), dtype=np.float64).ravel()
        self.full = np.asarray((self.X.T @ self.WX).todense()) if dense else None

    @classmethod
    def of_dense(cls, G: np.ndarray) -> WeightedColumns:
        """The operator of an already formed symmetric ``G``."""
        self = cls.__new__(cls)
        self.full = np.asarray(G, dtype=np.float64)
        self.diagonal = np.diag(self.full).copy()
        return self

    def block(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``G[rows][:, cols]``, dense."""
        if self.full is not None:
            return np.asarray(self.full[np.ix_(rows, cols)])
        return np.asarray((self.X[:, rows].T @ self.WX[:, cols]).todense())

    def times(self, x: np.ndarray, support: np.ndarray) -> np.ndarray:
        """``G x`` for an ``x`` that is zero off ``support``."""
        if self.full is not None:
            return np.asarray(self.full[:, support] @ x[support])
        return np.asarray(self.X.T @ (self.WX[:, support] @ x[support])).ravel()


def nonnegative_quadratic(G: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``argmin ½ xᵀGx − bᵀx`` over ``x >= 0`` for a positive definite ``G``: with ``G = LLᵀ`` it is the NNLS
    ``min ‖Lᵀx − L⁻¹b‖²`` (the same objective up to a constant), solved by Lawson–Hanson (``scipy.optimize.nnls``)
    on the ``n × n`` factor. A numerically singular ``G`` gets the smallest ridge ``10^j · 1e-12 · max G_ss`` that
    factors."""
    n = b.size
    if n == 0:
        return np.zeros(0)
    scale = float(np.max(np.diag(G)))
    ridge = 0.0
    for _ in range(12):
        chol, status = sl.lapack.dpotrf(G + ridge * np.eye(n) if ridge else G, lower=1, clean=1)
        if status == 0:
            break
        ridge = 1e-12 * scale if ridge == 0.0 else ridge * 10
    else:
        raise ParameterError("the working set's Gram matrix does not factor")
    target = sl.solve_triangular(chol, b, lower=True, check_finite=False)
    x, _rnorm = optimize.nnls(chol.T, target, maxiter=50 * n)
    return np.asarray(x, dtype=np.float64)


def nn_lasso(
    G: np.ndarray | WeightedColumns,
    g: np.ndarray,
    penalty: np.ndarray,
    x0: np.ndarray | None = None,
    *,
    tol: float = 1e-9,
    max_iter: int = 200,
) -> tuple[np.ndarray, int]:
    """Minimize ``½ xᵀGx − gᵀx + penaltyᵀx`` over ``x >= 0`` exactly, by working sets; returns ``(x, rounds)``.

    Each round solves the problem restricted to the working set (:func:`nonnegative_quadratic`), keeps its
    support, and adds the coordinates that most violate the optimality conditions ``(Gx − g + penalty)_s >= 0``
    (scaled by ``sqrt(G_ss)``; at most :data:`WORKING_SET_STEP` or the support's size at once). It stops when no
    scaled violation exceeds ``tol · max(1, max |g − penalty|_s / sqrt(G_ss))``
    (docs/math/estimators.md#detection-which-candidates-are-there, "Cost").
    ``G`` dense or a :class:`WeightedColumns`: only working-set blocks and products ``G x`` are used.
    """
    gram = G if isinstance(G, WeightedColumns) else WeightedColumns.of_dense(np.asarray(G, dtype=np.float64))
    b = np.asarray(g, dtype=np.float64) - np.asarray(penalty, dtype=np.float64)
    n = b.size
    x = np.zeros(n) if x0 is None else np.maximum(np.asarray(x0, dtype=np.float64), 0.0)
    if n == 0:
        return x, 0
    scale = np.sqrt(np.maximum(gram.diagonal, 1e-300))
    threshold = tol * max(1.0, float(np.max(np.abs(b) / scale)))
    support = np.flatnonzero(x)
    rounds = 0
    for rounds in range(1, max_iter + 1):
        violation = (b - gram.times(x, support)) / scale  # minus the scaled gradient: > 0 wants to grow
        violation[support] = 0.0
        worst = np.flatnonzero(violation > threshold)
        if worst.size == 0 and rounds > 1:
            break
        step = max(WORKING_SET_STEP, support.size)
        if worst.size > step:
            worst = worst[np.argpartition(-violation[worst], step - 1)[:step]]
        work = np.union1d(support, worst)
        x = np.zeros(n)
        x[work] = nonnegative_quadratic(gram.block(work, work), b[work])
        support = np.flatnonzero(x)
    return x, rounds


def storey_null_fraction(p_values: np.ndarray, lam: float = 0.5) -> float:
    """Storey's estimate of the share of true null hypotheses, ``π̂0 = (#{p_s > λ} + 1)/(S(1 − λ))`` capped
    at 1 (Storey 2002, JRSS-B 64; the ``+ 1`` is the finite-sample version of Storey, Taylor and Siegmund
    2004, JRSS-B 66, Theorem 3, with which BH at ``q/π̂0`` controls the FDR at ``q`` for independent
    p-values). Null p-values are uniform, so about ``S0(1 − λ)`` of them exceed λ; non-null ones rarely do:
    the estimate is biased upwards (conservative) by ``#{non-null p > λ}/(S(1 − λ))``."""
    p = np.asarray(p_values, dtype=np.float64).ravel()
    if p.size == 0:
        return 1.0
    if not 0 < lam < 1:
        raise ParameterError(f"lambda must lie in (0, 1), got {lam}")
    return float(min(1.0, (np.sum(p > lam) + 1) / (p.size * (1 - lam))))


def two_stage_step_up(p_values: ArrayLike, q: float) -> tuple[np.ndarray, float]:
    """The two-stage linear step-up procedure of Benjamini, Krieger and Yekutieli (2006, Biometrika 93,
    Definition 6): BH at ``q' = q/(1 + q)`` rejects ``r1`` of the ``m`` hypotheses; none are rejected when
    ``r1 = 0`` and all when ``r1 = m``; otherwise ``m̂0 = m − r1`` and the rejections are those of BH at
    ``q'·m/m̂0``. Controls the FDR at ``q`` for independent p-values (their Theorem 2). Both stages compare the
    BH-adjusted p-values (``scipy.stats.false_discovery_control``) with their level: BH at level ``t`` rejects
    exactly the hypotheses whose adjusted p-value is at most ``t``. Returns ``(rejected mask, m̂0/m)``, the
    second the share of null hypotheses the procedure estimated (1 when ``r1 = 0``, 0 when ``r1 = m``)."""
    if not 0 < q < 1:
        raise ParameterError(f"q must be in (0, 1), got {q}")
    p = np.asarray(p_values, dtype=np.float64).ravel()
    m = p.size
    if m == 0:
        return np.zeros(0, dtype=bool), 1.0
    adjusted = np.asarray(stats.false_discovery_control(p, method="bh"))
    level = q / (1 + q)
    r1 = int(np.count_nonzero(adjusted <= level))
    if r1 == 0:
        return np.zeros(m, dtype=bool), 1.0
    if r1 == m:
        return np.ones(m, dtype=bool), 0.0
    return adjusted <= level * m / (m - r1), (m - r1) / m


@dataclass(frozen=True, eq=False)
class FullDesignFit:
    """The weighted least squares of *every* candidate at the refit's weights (step 3 of :func:`detect`),
    computed only when that design is well-determined: ``estimates`` ``β̂ = G⁻¹XᵀWz`` and ``std_errors``
    ``sqrt(diag G⁻¹)`` (absent candidates' ``β̂/se`` are N(0, 1)), and the empirical-Bayes prior fitted to them
    (:func:`~ldpstream.estimators.empirical_bayes.npmle_prior`: support ``grid``, masses ``prior``; ``None``
    when ``shrink`` is off). Kept for diagnostics and for evaluating other detection rules on the same fit;
    not published."""

    estimates: np.ndarray
    std_errors: np.ndarray
    grid: np.ndarray | None = None
    prior: np.ndarray | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class DetectionEstimate(ScoreTestedEstimate):
    """What :func:`detect` returns: an :class:`~ldpstream.estimators.estimate.Estimate` whose tests use the
    refit's z-scores (``null_z``: ``refit / se``, 0 for unselected candidates), not the published point
    (which may be the empirical-Bayes posterior mean), and whose Benjamini–Hochberg rule may be adaptive
    (``adaptive``; ``None``: plain BH). ``"two-stage"``: ``"bh"`` at level ``q`` is
    :func:`two_stage_step_up` at ``q`` on the one-sided p-values, computed at the level asked for (its first
    stage depends on it); ``null_fraction`` then records ``m̂0/m`` at :func:`detect`'s level, for information.
    ``"storey"``: BH at ``q / null_fraction``, ``null_fraction`` being Storey's π̂0 of the full least
    squares. Either way only positive z-scores are rejected (an unselected candidate, estimate 0, is never
    detected). Bonferroni is unchanged. ``full_fit``: the weighted LS of all candidates and its
    empirical-Bayes prior (:class:`FullDesignFit`), ``None`` when the full design is not well-determined."""

    null_fraction: float = 1.0
    adaptive: AdaptiveProcedure | None = None
    full_fit: FullDesignFit | None = None

    def null_share(self, alpha: float) -> float:
        """The share of absent candidates the ``"bh"`` rule at level ``alpha`` estimates from these tests:
        ``m̂0/m`` of the two-stage procedure (computed from these tests, so it follows a window's widened ones),
        Storey's ``null_fraction``, or 1 for plain BH."""
        if self.adaptive == "two-stage":
            return two_stage_step_up(self.p_values(), alpha)[1]
        return self.null_fraction if self.adaptive == "storey" else 1.0

    def significant(
        self, alpha: float = 0.05, correction: Literal["bonferroni", "bh", "none"] = "bonferroni"
    ) -> np.ndarray:
        """As :meth:`Estimate.significant`; ``"bh"`` is the adaptive procedure ``adaptive`` (class docstring)."""
        if correction != "bh" or self.adaptive is None:
            return super().significant(alpha, correction)
        if not 0 < alpha < 1:
            raise ParameterError(f"alpha must be in (0, 1), got {alpha}")
        mask: np.ndarray
        if self.adaptive == "two-stage":
            mask, _share = two_stage_step_up(self.p_values(), alpha)
        elif self.adaptive == "storey":
            if self.null_fraction >= 1.0:
                return super().significant(alpha, "bh")
            mask = super().significant(min(alpha / self.null_fraction, 1.0 - 1e-12), "bh")
        else:
            raise ParameterError(f"unknown adaptive procedure {self.adaptive!r}; use one of {_ADAPTIVE}")
        # a one-sided test: a p-value of 1/2 or more (z <= 0, an unselected candidate's) is never a detection
        return mask & (self.z_scores() > 0)


def _well_determined(G_sel: np.ndarray, rows: int, max_fraction: float, cond_max: float) -> bool:
    s = G_sel.shape[0]
    if s == 0:
        return True
    if s > max_fraction * rows:
        return False
    d = np.sqrt(np.diag(G_sel))
    if np.any(d <= 0):
        return False
    eig = np.linalg.eigvalsh(G_sel / np.outer(d, d))
    return bool(eig[0] > 0 and eig[-1] / eig[0] < cond_max)


def _full_least_squares(
    G: np.ndarray, g: np.ndarray, rows: int, max_fraction: float, cond_max: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(G⁻¹g, sqrt(diag G⁻¹))``: the weighted LS of every column and its model-based standard errors, or
    ``None`` when the design is not well-determined (more columns than ``max_fraction`` of the rows, ``G`` not
    positive definite, or a variance inflation factor ``G_ss (G⁻¹)_ss`` of ``cond_max`` or more)."""
    n = G.shape[0]
    if n == 0 or n > max_fraction * rows:
        return None
    d = np.sqrt(np.diag(G))
    if np.any(d <= 0):
        return None
    R = G / np.outer(d, d)
    chol, status = sl.lapack.dpotrf(R, lower=1, clean=1)
    if status != 0:
        return None
    # diag R⁻¹ = column sums of squares of L⁻¹ (R = LLᵀ, R⁻¹ = L⁻ᵀL⁻¹): one triangular inverse, a third of
    # the flops of forming R⁻¹; the estimate itself by the two triangular solves
    inverse_factor, status = sl.lapack.dtrtri(chol, lower=1)
    if status != 0:
        return None
    vif = np.einsum("ki,ki->i", inverse_factor, inverse_factor)
    if not np.all(np.isfinite(vif)) or float(vif.max()) >= cond_max:
        return None
    beta = sl.cho_solve((chol, True), g / d, check_finite=False) / d
    return beta, np.sqrt(vif) / d


def detect(
    sketch: ArrayLike,
    design: Any,
    q_star: float,
    p_star: float,
    correction: Correction = "bh",
    alpha: float = 0.10,
    *,
    alpha_screen: float = 0.05,
    other: bool = True,
    bits_per_string: float | None = None,
    labels: Sequence[Any] | None = None,
    max_fraction: float = 0.5,
    cond_max: float = 1e6,
    prune_z: float = 1.0,
    adaptive: AdaptiveProcedure | bool = "two-stage",
    shrink: bool = True,
    ls_interval: bool = True,
    inflate: bool = True,
) -> DetectionEstimate:
    """Screen, refit, test (default: two-stage adaptive Benjamini–Hochberg at q = 0.10) and estimate the
    candidates of ``design`` (``(C·k, S)``, cohort-major) against a ``(C, k + 1)`` bit sketch (module
    docstring). Returns a :class:`DetectionEstimate` over all S candidates (zero for the unselected);
    ``est.significant(alpha, correction)`` is the detected set, also in ``info["detected"]``. ``adaptive``
    (used when the full design is well-determined, step 3): ``"two-stage"`` (Benjamini, Krieger and
    Yekutieli 2006; ``True`` means the same), ``"storey"`` (BH at ``alpha/π̂0``, Storey's π̂0) or ``False``
    (plain BH); ``shrink``: empirical-Bayes posterior means as the published points (step 4); with
    ``adaptive=False, shrink=False``, plain BH on the refit values.
    ``ls_interval``: the interval and standard errors of the least squares of all candidates when that design is
    well-determined (False: the refit's, for a caller that uses the selection only; the tests are the same).
    ``inflate``: tests and standard errors scaled by the fit's misfit inflation (``est.misfit``; False: the
    model's alone, the misfit still measured).
    """
    if correction not in _CORRECTIONS:
        raise ParameterError(f"unknown correction {correction!r}; use one of {_CORRECTIONS}")
    procedure: AdaptiveProcedure | None
    if adaptive is True:
        procedure = "two-stage"
    elif adaptive is False:
        procedure = None
    elif adaptive in _ADAPTIVE:
        procedure = adaptive
    else:
        raise ParameterError(f"unknown adaptive procedure {adaptive!r}; use one of {_ADAPTIVE}, True or False")
    if not 0 < alpha < 1 or not 0 < alpha_screen < 1:
        raise ParameterError("alpha and alpha_screen must lie in (0, 1)")
    arr = np.asarray(sketch, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise ParameterError("bit sketch must be (C, k + 1)")
    q_star, p_star = float(q_star), float(p_star)
    if not (0 <= p_star <= 1 and 0 <= q_star <= 1) or q_star == p_star:
        raise ParameterError(f"need distinct rates in [0, 1], got q*={q_star}, p*={p_star}")
    C, k = arr.shape[0], arr.shape[1] - 1
    X = sp.csr_matrix(design, dtype=np.float64)
    if X.shape[0] != C * k:
        raise ParameterError(f"design matrix has {X.shape[0]} rows, the sketch implies {C * k} (C·k)")
    S = X.shape[1]
    if labels is not None and len(labels) != S:
        raise ParameterError(f"{len(labels)} labels for {S} candidates")
    Nc = arr[:, 0]
    N = float(Nc.sum())
    if N <= 0:
        raise ParameterError("no reports to decode")
    delta = q_star - p_star
    live = np.repeat(Nc > 0, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = ((arr[:, 1:] / Nc[:, None] - p_star) / delta).ravel()
    z = np.where(live & np.isfinite(z), z, 0.0)
    hbar = float(bits_per_string) if bits_per_string is not None else float(X.sum()) / max(S * C, 1)
    Nrow = np.repeat(Nc, k)

    def weights(rate: np.ndarray) -> np.ndarray:
        r = np.clip(rate, 1e-6, 1 - 1e-6)
        return np.where(live, Nrow * delta**2 / (r * (1 - r)), 0.0)

    with np.errstate(invalid="ignore", divide="ignore"):
        cohort_rate = np.where(Nc > 0, arr[:, 1:].sum(axis=1) / (np.maximum(Nc, 1) * k), p_star)
    w = weights(np.repeat(cohort_rate, k))
    # columns: the S candidates, then "other" (unpenalized)
    Xf = sp.hstack([X, sp.csr_matrix(np.full((C * k, 1), hbar / k))]).tocsc() if other else X.tocsc()
    n_other = 1 if other else 0
    rows = int(live.sum())
    # G is formed densely only when the least squares of every column may be computed (step 3); otherwise its
    # blocks come from sparse products and nothing S × S is held
    dense = S + n_other <= max_fraction * rows
    gram = WeightedColumns(Xf, w, dense=dense)
    g = np.asarray(gram.WX.T @ z).ravel()
    diag = np.sqrt(np.maximum(gram.diagonal, 0.0))

    lam = lam_start = float(stats.norm.isf(alpha_screen))
    raised = 0
    fit = np.zeros(S + n_other)
    sel = np.zeros(0, dtype=np.int64)
    determined = False
    for _ in range(40):
        penalty = lam * diag
        if other:
            penalty[S] = 0.0
        fit, _n = nn_lasso(gram, g, penalty, fit)
        kept = fit[:S] > 0
        if not dense and prune_z > 0:
            # no least squares of every candidate to test against: the refit's tests decide, so the candidates the
            # lasso's shrinkage left at 0 with a score at its fit the pruning would keep are admitted too
            score = (g - gram.times(fit, np.flatnonzero(fit)))[:S] / np.maximum(diag[:S], 1e-300)
            kept |= score > prune_z * lam / lam_start
        sel = np.flatnonzero(kept)
        cols = np.concatenate([sel, [S]]).astype(np.int64) if other else sel
        if _well_determined(gram.block(cols, cols), rows, max_fraction, cond_max):
            determined = True
            break
        lam *= 1.25
        raised += 1
    if not determined:
        sel = np.zeros(0, dtype=np.int64)
    cols = np.concatenate([sel, [S]]).astype(np.int64) if other else sel

    g_now = g  # the right-hand side XᵀWz at the weights of the current Gram G
    freq = np.zeros(S)
    se = np.ones(S)
    residual: float | None = None
    residual_se: float | None = None
    pruned = 0
    if cols.size:
        # refit with weights at the screened fit
        w = weights(p_star + delta * np.asarray(Xf[:, cols] @ fit[cols]).ravel())
        gram = WeightedColumns(Xf, w, dense=dense)  # the Gram at the refit weights
        g_now = np.asarray(gram.WX.T @ z).ravel()
        while True:
            # the weighted NNLS min ‖W^½(z − X_A c)‖², c >= 0, in its Gram form
            G_AA = gram.block(cols, cols)
            coef = nonnegative_quadratic(G_AA, g_now[cols])
            inv = np.linalg.inv(G_AA)
            se_sel = np.sqrt(np.maximum(np.diag(inv), 0.0))
            drop = coef[: sel.size] < prune_z * se_sel[: sel.size]
            if prune_z <= 0 or not drop.any():
                break
            pruned += int(drop.sum())
            sel = sel[~drop]
            cols = np.concatenate([sel, [S]]).astype(np.int64) if other else sel
        freq[sel] = coef[: sel.size]
        se[sel] = se_sel[: sel.size]
        if other:
            residual, residual_se = float(coef[-1]), float(se_sel[-1])
        rest = np.setdiff1d(np.arange(S), sel)
        if rest.size:
            G_RA = gram.block(rest, cols)
            schur = gram.diagonal[rest] - np.einsum("ij,ij->i", G_RA @ inv, G_RA)
            with np.errstate(divide="ignore"):
                se[rest] = np.minimum(np.where(schur > 0, 1 / np.sqrt(np.maximum(schur, 1e-300)), 1.0), 1.0)
    else:
        dG = gram.diagonal[:S]
        se = np.where(dG > 0, 1 / np.sqrt(np.maximum(dG, 1e-300)), 1.0)
    refit = freq.copy()
    full = None if gram.full is None else _full_least_squares(gram.full, g_now, rows, max_fraction, cond_max)
    # the fit's misfit: of the least squares of every candidate when determined, else of the refit (which leaves
    # the unselected candidates' mass in the residual: larger, so conservative); its inflation scales every test
    # and standard error (quasi-likelihood, docs/math/misfit.md)
    if full is not None:
        fitted, parameters = np.asarray(Xf @ full[0]).ravel(), S + n_other
    else:
        fitted = np.asarray(Xf[:, cols] @ coef).ravel() if cols.size else np.zeros(C * k)
        parameters = int(cols.size)
    rate = np.clip(p_star + delta * fitted, 1e-6, 1 - 1e-6)
    with np.errstate(divide="ignore"):
        variance = np.where(live, rate * (1 - rate) / (np.maximum(Nrow, 1) * delta**2), np.inf)
    misfit = pearson_misfit(z, fitted, variance, parameters, width=k, reports=Nrow, cells_per_value=hbar)
    # tests and standard errors: unchanged when the fit is not rejected at MISFIT_LEVEL; else each candidate's
    # inflated by its own robust (residual-based) variance over the model's when the full design is determined,
    # by the global quasi-likelihood factor otherwise (docs/math/misfit.md#detection)
    factor: float | np.ndarray = 1.0
    if misfit is not None and inflate and misfit.rejected:
        if full is not None and gram.full is not None:
            residual_cells = np.where(live, w * (z - fitted), 0.0)
            factor = np.sqrt(np.maximum(1.0, robust_variance_ratio(Xf, gram.full, residual_cells)))[:S]
        else:
            factor = misfit.inflation
    se = se * factor
    residual_se = None if residual_se is None or misfit is None or not inflate else residual_se * misfit.inflation
    null_z = refit / se
    # The weighted LS of every candidate (and "other") at the same weights, when that design is itself
    # well-determined: its z-scores are exactly N(0, 1) for absent candidates, so they estimate the share of
    # absent candidates (Storey's adaptive BH) and show that the candidates' p-values are valid (either
    # adaptive BH), and its estimates feed the empirical-Bayes points.
    null_fraction = 1.0
    eb = False
    full_fit: FullDesignFit | None = None
    used: AdaptiveProcedure | None = None
    if full is not None:
        beta, beta_se = full[0][:S], full[1][:S] * factor
        full_fit = FullDesignFit(beta, beta_se)
        used = procedure
        if procedure == "storey":
            null_fraction = storey_null_fraction(stats.norm.sf(beta / beta_se))
        elif procedure == "two-stage" and S:
            null_fraction = two_stage_step_up(stats.norm.sf(null_z), alpha)[1]
        if shrink and S:
            grid, prior = npmle_prior(beta, beta_se)
            freq = np.zeros(S)
            freq[sel] = posterior_mean(beta[sel], beta_se[sel], grid, prior)
            full_fit = FullDesignFit(beta, beta_se, grid, prior)
            eb = True
    info: dict[str, Any] = {
        "candidates": S,
        "other": bool(other),
        "rule": correction,
        "alpha": float(alpha),
        "alpha_screen": float(alpha_screen),
        "lambda": lam,
        "lambda_raised": raised,
        "selected": int(sel.size),
        "pruned": pruned,
        "determined": determined,
        "tests": S,
        "adaptive": used if correction == "bh" and used is not None else "none",
        "null_fraction": null_fraction,
        "point": "posterior-mean" if eb else "refit",
    }
    if full is not None and ls_interval:
        # A well-determined design of all candidates: publish the interval of their weighted least squares with
        # its sandwich standard errors (the "ls" decoder's), unbiased whatever the selection did; the refit's is
        # conditional on the selection made from the same data and under-covers near the threshold.
        # Its standard errors are published with it (the tests keep the refit's z-scores, ``null_z``).
        ls = decode_bits(sketch, design, q_star, p_star, "ls", other=other, bits_per_string=bits_per_string,
                         inflate=inflate)
        unclipped, interval_method = ls.ci(0.95), "ls-sandwich"
        se = np.asarray(ls.std_errors, dtype=np.float64)
    else:
        unclipped, interval_method = ConfidenceInterval(refit - Z95 * se, refit + Z95 * se), "wald-refit"
    # published clipped to [0, 1]; the bounds before clipping kept for a window's widening
    interval = ConfidenceInterval(np.clip(unclipped.low, 0.0, 1.0), np.clip(unclipped.high, 0.0, 1.0))
    est = DetectionEstimate(
        frequencies=freq, std_errors=se, n_reports=round(N), method="bits/detect", labels=labels, residual=residual,
        residual_std_error=residual_se,
        detection_floor=detection_floor(float(np.median(se[sel])) if sel.size else float(np.median(se)), S, alpha),
        info=info, interval=interval, interval_method=interval_method, unclipped_interval=unclipped, null_z=null_z,
        null_fraction=null_fraction, adaptive=used,
        full_fit=full_fit, misfit=misfit)
    info["detected"] = np.flatnonzero(est.significant(alpha, correction)).tolist()
    info["n_detected"] = len(info["detected"])
    info["detected_mass"] = float(freq[info["detected"]].sum())
    return est
