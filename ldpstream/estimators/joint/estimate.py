"""The joint distribution of an associated pair of metrics (docs/math/joint.md; Fanti, Pihur, Erlingsson
2016 §4).

:func:`estimate_joint` reads the distinct report pairs (:class:`~ldpstream.estimators.joint.pairs.PairPatterns`),
builds each variable's per-pattern likelihoods with an "Other" category
(:mod:`ldpstream.estimators.joint.likelihood`), runs the SQUAREM-accelerated EM over the patterns
(:mod:`ldpstream.estimators.joint.em`) and derives the covariance (the stacked sandwich with the Other law's
uncertainty, :mod:`ldpstream.estimators.joint.sandwich`), intervals, conditional tables and the independence
test (:mod:`ldpstream.estimators.joint.inference`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.base import Mechanism

from ..dispatch import DesignCache, estimate
from ..estimate import Estimate
from ..factor_cache import FactorCache
from ..misfit import Misfit
from ..numerics.simplex import project_simplex
from . import direct as joint_direct
from .em import JointFit, PairChannel, fit_joint, warm_start
from .identification import VariableIdentification, identified_cells
from .inference import (
    ConditionalTable,
    IndependenceTest,
    conditional_tables,
    covariance_from_information,
    independence_test,
    wald_clipped,
    wald_independence_test,
)
from .likelihood import VariableLikelihood, VariableModel, pattern_sketch, variable_model
from .pairs import PairPatterns
from .sandwich import frequency_score_jacobian, margin_matrix, nuisance_terms, sandwich_covariance

__all__ = [
    "INVERSION_INTERVAL_METHOD",
    "OTHER_LABEL",
    "SANDWICH_INTERVAL_METHOD",
    "ConditionalTable",
    "IndependenceTest",
    "JointEstimate",
    "JointVariable",
    "centred_intervals",
    "estimate_joint",
    "top_values",
]

#: ``interval_method`` of cells whose covariance includes the Other law's uncertainty (the stacked sandwich of
#: :mod:`ldpstream.estimators.joint.sandwich`); ``"wald-clipped"`` (observed information) without an Other law.
SANDWICH_INTERVAL_METHOD = "wald-clipped-sandwich"
#: ``interval_method`` of two direct members decoded by the unbiased inversion of their full alphabets'
#: channels (:mod:`ldpstream.estimators.joint.direct`): the covariance of the i.i.d. per-pair terms.
INVERSION_INTERVAL_METHOD = "wald-clipped-inversion"
#: The label of each variable's "Other" category.
OTHER_LABEL = "Other"


@dataclass(frozen=True)
class JointVariable:
    """One variable of the pair: its mechanism, candidate ``values`` (strings for open hashed mechanisms,
    alphabet indices for closed or direct ones) and the ``labels`` to publish (default ``str(value)``).

    ``frequencies``: the candidates' frequencies among all reports from the marginal decoder, used by the
    "Other" rule; ``None``: the candidates' rows of the least squares against ``dictionary`` on the patterns'
    own sketch when it is given and well-determined (hashed mechanisms; the metric's candidate list:
    :func:`~ldpstream.estimators.joint.likelihood.dictionary_frequencies`), else least squares on the
    candidates alone (:func:`~ldpstream.estimators.joint.likelihood.candidate_frequencies`;
    docs/math/joint.md#candidate-frequencies-from-the-dictionary).

    ``other``: whether this variable gets an "Other" category; ``None`` (default): :func:`estimate_joint`'s
    ``other``. ``False`` for a variable whose candidates are its whole alphabet (e.g. a boolean): nothing is
    left for "Other", whose likelihood would then be an unidentifiable mixture of the candidates'."""

    mechanism: Mechanism
    values: Sequence[Any]
    labels: Sequence[str] = ()
    frequencies: Sequence[float] | None = None
    other: bool | None = None
    dictionary: Sequence[Any] | None = None

    def names(self) -> tuple[str, ...]:
        if len(self.labels) == 0:
            return tuple(str(v) for v in self.values)
        if len(self.labels) != len(self.values):
            raise ParameterError(f"{len(self.values)} values but {len(self.labels)} labels")
        return tuple(str(x) for x in self.labels)


def centred_intervals(table: np.ndarray, se: np.ndarray, center: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Clipped Wald 95% bounds around ``center`` (``None``: ``table``), widened to hold ``table``: the interval
    covers whenever the Wald interval around the unbiased ``center`` does, and contains the published point."""
    if center is None:
        return wald_clipped(table, se)
    low, high = wald_clipped(center, se)
    return np.minimum(low, table), np.maximum(high, table)


def top_values(estimate: Estimate, count: int) -> list[int]:
    """Indices of the ``count`` largest frequencies of a marginal estimate, largest first (ties: lower index)."""
    freq = np.asarray(estimate.frequencies, dtype=np.float64)
    order = np.argsort(-freq, kind="stable")
    return [int(i) for i in order[: max(int(count), 0)]]


@dataclass(frozen=True)
class JointEstimate:
    """An estimated joint table with its uncertainty (docs/math/joint.md)."""

    row_labels: tuple[str, ...]
    column_labels: tuple[str, ...]
    #: ``(r, c)`` proportions summing to 1.
    table: np.ndarray
    std_error: np.ndarray
    #: ``(r·c, r·c)`` covariance of the row-major cells.
    covariance: np.ndarray
    low: np.ndarray
    high: np.ndarray
    interval_method: str
    x_given_y: ConditionalTable
    y_given_x: ConditionalTable
    independence: IndependenceTest
    n: int
    #: EM iterations, summed over the refits of self-consistent frequencies (``info["frequency_refits"]``).
    iterations: int
    converged: bool
    seconds: float
    log_likelihood: float = 0.0
    #: The EM's stopping rule, e.g. ``"max |Δp| < 1e-06 or 1000 iterations"``.
    stopping_rule: str = ""
    #: Seconds spent building the per-pattern likelihoods (included in ``seconds``).
    likelihood_seconds: float = 0.0
    #: Seconds spent in the EM iterations and the refits of self-consistent frequencies (included in ``seconds``).
    em_seconds: float = 0.0
    patterns: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    #: ``(r, c)`` bool: whether each cell's interval is a promise (docs/math/joint.md#cells-the-reports-do-not-
    #: identify; :mod:`ldpstream.estimators.joint.identification`); ``None``: every cell.
    identified: np.ndarray | None = None
    #: Why some cells are not identified (empty when all are).
    identification: tuple[str, ...] = ()
    #: ``(r, c)``: where the cells' Wald intervals are centred when that is not ``table`` (the unbiased table of
    #: an inversion whose published table was projected onto the simplex; the intervals are then the hull of
    #: the Wald interval around it and the published point); ``None``: ``table``.
    interval_center: np.ndarray | None = None
    #: Each member's misfit against its candidate list (hashed members with an Other; else ``None``):
    #: identification rule 3.
    fit: tuple[Misfit | None, Misfit | None] = (None, None)

    def intervals(self, se: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Clipped Wald 95% bounds for standard errors ``se`` around :attr:`interval_center` (or the table),
        widened to hold the published point."""
        return centred_intervals(self.table, se, self.interval_center)

    @property
    def point(self) -> str:
        """What ``table`` is: ``"unbiased"`` (the inversion), ``"projected"`` (the inversion put onto the simplex
        because a cell came out negative: consistent, biased at small n, its intervals centred on the unbiased table
        and holding the point), ``"maximum-likelihood"`` (the EM's, converged) or ``"early-stopped-em"`` (the EM's
        iterate at ``max_iterations``, short of convergence)."""
        if self.info.get("estimator") == "em":
            return "maximum-likelihood" if self.converged else "early-stopped-em"
        return "projected" if self.info.get("projected") else "unbiased"

    def identified_mask(self) -> np.ndarray:
        """``(r, c)`` bool, all true when not assessed."""
        return np.ones(self.table.shape, dtype=bool) if self.identified is None else self.identified

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (lists of floats, plain ints and strings)."""
        return {
            "row_labels": list(self.row_labels),
            "column_labels": list(self.column_labels),
            "table": self.table.tolist(),
            "std_error": self.std_error.tolist(),
            "low_95": self.low.tolist(),
            "high_95": self.high.tolist(),
            "interval_method": self.interval_method,
            "point": self.point,
            "covariance": self.covariance.tolist(),
            "x_given_y": self.x_given_y.to_dict(),
            "y_given_x": self.y_given_x.to_dict(),
            "independence": self.independence.to_dict(),
            "n": int(self.n),
            "patterns": int(self.patterns),
            "iterations": int(self.iterations),
            "converged": bool(self.converged),
            "seconds": float(self.seconds),
            "likelihood_seconds": float(self.likelihood_seconds),
            "em_seconds": float(self.em_seconds),
            "log_likelihood": float(self.log_likelihood),
            "stopping_rule": self.stopping_rule,
            "identified": self.identified_mask().tolist(),
            "identification": list(self.identification),
            "fit": [None if m is None else m.to_json() for m in self.fit],
            "info": dict(self.info),
        }


#: Self-consistent frequencies stop when no candidate frequency moves by this much in one refit.
FREQUENCY_TOLERANCE = 1e-5
#: At most this many refits of the self-consistent frequencies (``info["frequency_change"]`` says how far the
#: last one moved).
MAX_REFITS = 200


def _frequency_source(v: JointVariable, model: VariableModel, refined: bool) -> str:
    if v.frequencies is not None:
        return "given"
    if model.dictionary is not None:
        return "dictionary"
    return "self-consistent" if refined else "least-squares"


def _identification(model: VariableModel, source: str) -> VariableIdentification:
    hashed = bool(getattr(model.mechanism, "needs_value_table", True))
    support = getattr(model.mechanism, "support", None) if hashed else int(model.mechanism.k)
    hidden = None if support is None else int(support) - len(model.values)
    return VariableIdentification(other=model.other, hashed=hashed, bits=model.bits, frequency_source=source,
                                  hidden_values=hidden)


def member_misfit(v: JointVariable, other: bool, cohorts: np.ndarray, reports: np.ndarray, counts: np.ndarray, *,
                  design_cache: DesignCache | None = None, factor_cache: FactorCache | None = None) -> Misfit | None:
    """The Pearson misfit of one member's own reports (the patterns' sketch) against its candidate list, the
    dictionary when given, by the least-squares decode (identification rule 3); ``None`` for a direct member or one
    without an Other (its candidates are its whole alphabet)."""
    if not other or not getattr(v.mechanism, "needs_value_table", False):
        return None
    words = list(v.dictionary) if v.dictionary is not None else list(v.values)
    sketch = pattern_sketch(v.mechanism, cohorts, reports, counts)
    return estimate(sketch, v.mechanism, "ls", candidates=words, design_cache=design_cache,
                    factor_cache=factor_cache).misfit


def _count(likelihood: VariableLikelihood) -> int:
    return 0 if likelihood.frequencies is None else len(likelihood.frequencies)


def _self_consistent_fit(fit: JointFit, mx: VariableModel | None, my: VariableModel | None,
                         lx: VariableLikelihood, ly: VariableLikelihood, counts: np.ndarray,
                         patterns: PairPatterns, shape: tuple[int, int], *, tolerance: float, max_iterations: int,
                         accelerate: bool, frequency_tolerance: float, max_refits: int
                         ) -> tuple[JointFit, VariableLikelihood, VariableLikelihood, PairChannel, int, float, int]:
    """The fixed point ``f = G p̂(f)`` for the variables given a model
    (docs/math/joint.md#self-consistent-candidate-frequencies-an-experiment-off-by-default; ``None``: that
    variable's ``f`` stays), by Newton's method on ``G p̂(f) − f``, each refit's EM warm-started from the last
    table. The Jacobian is ``G ∂p̂/∂f − I`` with
    ``∂p̂/∂f_V = −J I_θ⁻¹ Jᵀ F_V/(1 − Σf_V)`` (the implicit function theorem on the EM's score equations;
    :func:`~ldpstream.estimators.joint.sandwich.frequency_score_jacobian`). Stops when no frequency differs from
    its margin by ``frequency_tolerance``. Returns the last fit, likelihoods and channel (whose Other laws are
    built from ``f`` equal to that fit's margins within the tolerance), the refits done, the last gap and the EM
    iterations of every fit (the first one's included)."""
    r, c = shape
    varying = [(axis, model) for axis, model in ((0, mx), (1, my)) if model is not None]
    refits, gap, iterations = 0, float("inf"), fit.iterations
    channel = PairChannel(lx.matrix, ly.matrix)
    while True:
        likelihoods = (lx, ly)
        current = np.concatenate([np.asarray(likelihoods[axis].frequencies) for axis, _ in varying])
        G = np.vstack([margin_matrix(r, c, axis, _count(likelihoods[axis])) for axis, _ in varying])
        residual = G @ fit.p - current
        gap = float(np.abs(residual).max())
        if gap < frequency_tolerance or refits >= max_refits:
            break
        m = np.maximum(channel.forward(fit.p), 1e-300)
        response = covariance_from_information(channel.information(counts / (m * m)))  # J I_θ⁻¹ Jᵀ
        columns = []
        for axis, _ in varying:
            vl = likelihoods[axis]
            assert vl.other_law is not None and vl.frequencies is not None
            cohorts, reports = ((patterns.cohort_x, patterns.reports_x) if axis == 0
                                else (patterns.cohort_y, patterns.reports_y))
            F = frequency_score_jacobian(channel, fit.p, counts, vl.other_law, cohorts, reports, axis)
            columns.append(-response @ F / max(1.0 - float(vl.frequencies.sum()), 1e-12))
        jacobian = G @ np.hstack(columns) - np.eye(len(current))
        try:
            step = -np.linalg.solve(jacobian, residual)
        except np.linalg.LinAlgError:
            step = residual  # a plain fixed-point step
        proposal = np.clip(current + step, 0.0, 1.0)
        offset = 0
        for axis, model in varying:
            size = _count(likelihoods[axis])
            f_new = proposal[offset:offset + size]
            offset += size
            if f_new.sum() >= 1.0:
                f_new = f_new / (f_new.sum() + 1e-6)
            if axis == 0:
                lx = model.likelihood(f_new, self_consistent=True)
            else:
                ly = model.likelihood(f_new, self_consistent=True)
        channel = PairChannel(lx.matrix, ly.matrix)
        fit = fit_joint(channel, counts, lx.log_scale + ly.log_scale, start=fit.p, tolerance=tolerance,
                        max_iterations=max_iterations, accelerate=accelerate)
        refits += 1
        iterations += fit.iterations
    if mx is not None and not (lx.other_law is not None and lx.other_law.self_consistent):
        lx = mx.likelihood(lx.frequencies, self_consistent=True)
    if my is not None and not (ly.other_law is not None and ly.other_law.self_consistent):
        ly = my.likelihood(ly.frequencies, self_consistent=True)
    return fit, lx, ly, PairChannel(lx.matrix, ly.matrix), refits, gap, iterations


def estimate_joint(
    patterns: PairPatterns,
    x: JointVariable,
    y: JointVariable,
    *,
    other: bool = True,
    start: np.ndarray | None = None,
    tolerance: float = 1e-6,
    max_iterations: int = 1000,
    accelerate: bool = True,
    nuisance_sandwich: bool = True,
    self_consistent: bool = False,
    frequency_tolerance: float = FREQUENCY_TOLERANCE,
    max_refits: int = MAX_REFITS,
    inversion: bool = True,
    design_cache: DesignCache | None = None,
    factor_cache: FactorCache | None = None,
) -> JointEstimate:
    """The joint table of X's and Y's candidates (plus "Other" rows and columns when ``other``; a variable's
    own :attr:`JointVariable.other`, when set, decides for it).

    EM (SQUAREM unless ``accelerate=False``) over the distinct patterns, from ``start`` (a previous table of
    the same shape, e.g. the last decode's, floored and renormalized; else uniform), stopping when no cell
    moves by ``tolerance`` in one iteration or after ``max_iterations``. Covariance: with an Other law and
    ``nuisance_sandwich`` (default), the stacked sandwich that adds the Other law's and the candidate
    frequencies' estimation noise (:mod:`ldpstream.estimators.joint.sandwich`); otherwise from the observed
    information on the ``rc − 1`` free parameters; cells and conditionals with clipped Wald 95% intervals;
    independence by the Wald test of the interaction contrasts (docs/math/joint.md).

    Candidate frequencies of the Other rule: a variable's :attr:`JointVariable.frequencies` when given; else the
    least squares against its ``dictionary`` when well-determined; else least squares on the candidates alone
    (docs/math/joint.md#candidate-frequencies-from-the-dictionary). ``self_consistent`` (off by default, an
    experiment) then refits the last ones, for hashed bit mechanisms,
    until they equal the fitted table's candidate margins: ``f ← G p̂(f)`` by Newton, EM warm-started, until no
    frequency moves by ``frequency_tolerance`` or after ``max_refits`` refits
    (docs/math/joint.md#self-consistent-candidate-frequencies-an-experiment-off-by-default).

    Two direct members (k-RR, k-RAPPOR) one of whose Other holds two values or more, each member's categories
    partitioning its alphabet (Other, or every value a candidate), are decoded instead, when
    ``inversion`` (default), by the unbiased inversion of their full alphabets' channels aggregated to the
    published categories (:mod:`ldpstream.estimators.joint.direct`;
    docs/math/joint.md#direct-members-the-full-alphabet): no Other law, no EM (``iterations`` 0; ``start`` and
    the EM's options unused), every cell identified, ``interval_method`` ``"wald-clipped-inversion"``,
    independence by the Wald test of the interaction contrasts. Likewise, when ``inversion``, two members that
    both have Other, at least one hashed, each either direct or hashed with a well-determined ``dictionary``
    holding its candidates: the per-report least squares against the dictionary (eq. J3;
    docs/math/joint.md#hashed-members-with-a-well-determined-dictionary),
    ``info["estimator"]`` ``"dictionary-inversion"``. ``inversion=False`` keeps the EM with its Other laws, whose
    cells rule 2 of :mod:`~ldpstream.estimators.joint.identification` flags.

    ``design_cache``, ``factor_cache``: the caller's caches of the members' designs and of the candidate
    frequencies' least squares (:func:`~ldpstream.estimators.estimate`); None: every call builds its own.
    """
    if len(x.values) == 0 or len(y.values) == 0:
        raise ParameterError("joint estimation needs at least one candidate value per variable")
    if patterns.total <= 0:
        raise ParameterError("no report pairs to decode")
    began = time.perf_counter()
    counts = np.asarray(patterns.counts, dtype=np.float64)
    other_x = other if x.other is None else x.other
    other_y = other if y.other is None else y.other
    if inversion and joint_direct.applies(x.mechanism, x.values, other_x, y.mechanism, y.values, other_y):
        return _estimate_direct(patterns, x, y, other_x, other_y, began)
    designs = (joint_direct.hashed_designs(x.mechanism, x.values, other_x, x.dictionary, y.mechanism, y.values,
                                           other_y, y.dictionary, design_cache) if inversion else None)
    if designs is not None:
        return _estimate_direct(patterns, x, y, other_x, other_y, began, designs=designs,
                                design_cache=design_cache, factor_cache=factor_cache)
    mx = variable_model(x.mechanism, x.values, patterns.cohort_x, patterns.reports_x, patterns.counts, other=other_x,
                        dictionary=x.dictionary, design_cache=design_cache, factor_cache=factor_cache)
    my = variable_model(y.mechanism, y.values, patterns.cohort_y, patterns.reports_y, patterns.counts, other=other_y,
                        dictionary=y.dictionary, design_cache=design_cache, factor_cache=factor_cache)
    fx = None if x.frequencies is None else np.asarray(x.frequencies, dtype=np.float64)
    fy = None if y.frequencies is None else np.asarray(y.frequencies, dtype=np.float64)
    lx, ly = mx.likelihood(fx), my.likelihood(fy)
    built = time.perf_counter()
    rows = x.names() + ((OTHER_LABEL,) if other_x else ())
    cols = y.names() + ((OTHER_LABEL,) if other_y else ())
    r, c = len(rows), len(cols)
    channel = PairChannel(lx.matrix, ly.matrix)
    fit = fit_joint(channel, counts, lx.log_scale + ly.log_scale, start=warm_start(start, (r, c)),
                    tolerance=tolerance, max_iterations=max_iterations, accelerate=accelerate)
    refine_x = self_consistent and fx is None and mx.dictionary is None and mx.refinable
    refine_y = self_consistent and fy is None and my.dictionary is None and my.refinable
    refits, refit_change, iterations = 0, 0.0, fit.iterations
    if refine_x or refine_y:
        fit, lx, ly, channel, refits, refit_change, iterations = _self_consistent_fit(
            fit, mx if refine_x else None, my if refine_y else None, lx, ly, counts, patterns, (r, c),
            tolerance=tolerance, max_iterations=max_iterations, accelerate=accelerate,
            frequency_tolerance=frequency_tolerance, max_refits=max_refits)
    fitted = time.perf_counter()
    p = fit.p
    m = np.maximum(channel.forward(p), 1e-300)
    information = channel.information(counts / (m * m))
    corrections, bread_shift = None, None
    if nuisance_sandwich:
        corrections, bread_shift = nuisance_terms(channel, p, counts, [
            (lx.other_law, patterns.cohort_x, patterns.reports_x),
            (ly.other_law, patterns.cohort_y, patterns.reports_y)])
    cov = (covariance_from_information(information) if corrections is None
           else sandwich_covariance(channel, p, counts, information, corrections, bread_shift))
    table = p.reshape(r, c)
    se = np.sqrt(np.maximum(np.diag(cov), 0.0)).reshape(r, c)
    low, high = wald_clipped(table, se)
    x_given_y, y_given_x = conditional_tables(table, cov)
    test = independence_test(table, cov, information)
    seconds = time.perf_counter() - began
    method = "wald-clipped" if corrections is None else SANDWICH_INTERVAL_METHOD
    source_x, source_y = _frequency_source(x, mx, refine_x), _frequency_source(y, my, refine_y)
    fits = (member_misfit(x, other_x, patterns.cohort_x, patterns.reports_x, patterns.counts,
                          design_cache=design_cache, factor_cache=factor_cache),
            member_misfit(y, other_y, patterns.cohort_y, patterns.reports_y, patterns.counts,
                          design_cache=design_cache, factor_cache=factor_cache))
    cells = identified_cells((r, c), _identification(mx, source_x), _identification(my, source_y), misfits=fits)
    return JointEstimate(
        row_labels=rows, column_labels=cols, table=table, std_error=se, covariance=cov, low=low, high=high,
        interval_method=method, x_given_y=x_given_y, y_given_x=y_given_x, independence=test,
        n=int(patterns.total), iterations=iterations, converged=fit.converged, seconds=seconds,
        log_likelihood=fit.log_likelihood,
        stopping_rule=f"max |Δp| < {tolerance:g} or {max_iterations} iterations"
                      + (" (SQUAREM)" if accelerate else " (plain EM)"),
        likelihood_seconds=built - began, em_seconds=fitted - built, patterns=len(patterns),
        info={"estimator": "em",
              "candidate_frequencies_x": None if lx.frequencies is None else lx.frequencies.tolist(),
              "candidate_frequencies_y": None if ly.frequencies is None else ly.frequencies.tolist(),
              "frequencies_x": source_x, "frequencies_y": source_y,
              "frequency_refits": refits, "frequency_change": refit_change},
        identified=cells.mask, identification=cells.reasons, fit=fits,
    )


def _estimate_direct(patterns: PairPatterns, x: JointVariable, y: JointVariable, other_x: bool, other_y: bool,
                     began: float, designs: tuple[joint_direct.Design, joint_direct.Design] | None = None, *,
                     design_cache: DesignCache | None = None, factor_cache: FactorCache | None = None
                     ) -> JointEstimate:
    """Two direct members, one of whose Other holds several values: the unbiased inversion of the full alphabets'
    channels aggregated to the published categories (:mod:`ldpstream.estimators.joint.direct`, eqs. J1–J2;
    docs/math/joint.md#direct-members-the-full-alphabet). No Other law and no EM: every cell is identified unless a
    hashed member's list misses mass (identification rule 3).
    The table is the unbiased one, projected onto the simplex only if a cell came out negative; intervals are
    clipped Wald with the covariance J2; independence by the Wald test of the interaction contrasts.

    ``designs`` (:func:`~ldpstream.estimators.joint.direct.hashed_designs`): a hashed member's categories come
    from the per-report least squares against its well-determined dictionary instead (eq. J3;
    docs/math/joint.md#hashed-members-with-a-well-determined-dictionary)."""
    hashed = designs is not None
    if designs is not None:
        ax = joint_direct.dictionary_category_estimates(x.mechanism, x.values, x.dictionary, patterns.cohort_x,
                                                        patterns.reports_x, patterns.counts, designs[0])
        ay = joint_direct.dictionary_category_estimates(y.mechanism, y.values, y.dictionary, patterns.cohort_y,
                                                        patterns.reports_y, patterns.counts, designs[1])
    else:
        ax = joint_direct.category_estimates(x.mechanism, x.values, patterns.reports_x, other_x)
        ay = joint_direct.category_estimates(y.mechanism, y.values, patterns.reports_y, other_y)
    built = time.perf_counter()
    direct = joint_direct.direct_joint_table(ax, ay, patterns.counts)
    r, c = direct.table.shape
    unbiased = direct.table
    projected = bool((unbiased < 0.0).any())
    table = project_simplex(unbiased.ravel()).reshape(r, c) if projected else unbiased
    center = unbiased if projected else None
    cov = direct.covariance
    se = np.sqrt(np.maximum(np.diag(cov), 0.0)).reshape(r, c)
    low, high = centred_intervals(table, se, center)
    x_given_y, y_given_x = conditional_tables(table, cov)
    test = wald_independence_test(table, cov)
    done = time.perf_counter()
    rows = x.names() + ((OTHER_LABEL,) if other_x else ())
    cols = y.names() + ((OTHER_LABEL,) if other_y else ())
    margins_x, margins_y = unbiased.sum(axis=1), unbiased.sum(axis=0)
    fits: tuple[Misfit | None, Misfit | None] = (None, None)
    if hashed:
        fits = (member_misfit(x, other_x, patterns.cohort_x, patterns.reports_x, patterns.counts,
                              design_cache=design_cache, factor_cache=factor_cache),
                member_misfit(y, other_y, patterns.cohort_y, patterns.reports_y, patterns.counts,
                              design_cache=design_cache, factor_cache=factor_cache))
    cells = identified_cells((r, c), None, None, misfits=fits)
    return JointEstimate(
        row_labels=rows, column_labels=cols, table=table, std_error=se, covariance=cov, low=low, high=high,
        interval_method=INVERSION_INTERVAL_METHOD, x_given_y=x_given_y, y_given_x=y_given_x, independence=test,
        n=int(patterns.total), iterations=0, converged=True, seconds=done - began, log_likelihood=0.0,
        stopping_rule="closed form, no iterations: unbiased inversion of the full alphabets' channels",
        likelihood_seconds=built - began, em_seconds=done - built, patterns=len(patterns),
        info={"estimator": "dictionary-inversion" if hashed else "direct-inversion",
              "candidate_frequencies_x": margins_x[: len(x.values)].tolist(),
              "candidate_frequencies_y": margins_y[: len(y.values)].tolist(),
              "frequencies_x": "inversion", "frequencies_y": "inversion",
              "frequency_refits": 0, "frequency_change": 0.0, "projected": projected,
              "hidden_x": joint_direct.hidden_values(x.mechanism, x.values, other_x),
              "hidden_y": joint_direct.hidden_values(y.mechanism, y.values, other_y)},
        identified=cells.mask, identification=cells.reasons, interval_center=center, fit=fits,
    )
