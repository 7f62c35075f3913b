"""Intervals of a window of several time buckets whose reports repeat from one client
(docs/math/estimators.md#windows-of-several-buckets-repeated-reports).

A window of ``B`` buckets holds up to ``B`` reports of one client, dependent under a memoized permanent
response; this module widens the decoders' intervals by a design effect.

**Model.** Cell ``j`` (a symbol, or a bit, of one cohort), with ``f_j`` the fraction of clients whose input
sets it (from the window's rate ``r_j = lo + (hi − lo) f_j``): per-report variance
``v_j = f_j hi (1 − hi) + (1 − f_j) lo (1 − lo)``, per-client covariance
``c_j = (q2 − p2)² [f_j q1 (1 − q1) + (1 − f_j) p1 (1 − p1)]`` (first layer ``(q1, p1)``, instantaneous layer
``(q2, p2)``), ``ρ_j = c_j / v_j`` (cohort-mix term: :func:`_cell_moments`). With the overlap ``φ ∈ [0, 1]``
(the share of a bucket's reports whose client also reports in another bucket) the design effect is
``deff_j = 1 + (B − 1) φ ρ_j``, ``B`` the effective number of buckets ``(Σ n_b)² / Σ n_b²``.

**Estimating φ**: ``φ̂ = Σ_j (d_j − X²_j) / Σ_j d_j ρ_j`` clamped to [0, 1], with
``X²_j = Σ_b (x_bj − n_b r_j)² / (n_b v_j)`` and ``d_j`` the cell's buckets with reports − 1; with too few
degrees of freedom (:data:`MIN_DOF`) the worst case ``φ = 1`` (rule ``"worst-case"``). Values that change
within the window spread the buckets' rates and lower ``φ̂``; the median over successive bucket pairs of their
own overlap replaces it when larger by :data:`DRIFT_Z` standard errors (:func:`_successive_overlap`).

**Per value**: ``deff_s`` from the variance-weighted mean ``ρ`` over the cells value ``s`` sets; a Wilson
interval is recomputed with the effective counts ``x / deff``, ``n / deff``, any other interval and the standard
errors are widened by ``sqrt(deff)``. **Joint tables** (:func:`joint_design_effect`, :func:`widen_joint`): the
covariance is multiplied by the largest ``1 + (B − 1) φ`` of the members' designs (the ``ρ = 1`` bound).

Every estimate states its assumptions (:meth:`WindowDesign.assumes`): a client's value does not change within
the window, and the population's distribution is stationary across its buckets.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import scipy.sparse as sp
from scipy import stats

from ldpstream.mechanisms.base import Mechanism
from ldpstream.mechanisms.longitudinal import Memoizing
from ldpstream.mechanisms.rates import bit_rates, krr_rates

from .estimate import ConfidenceInterval, Estimate
from .intervals import Z95, ScoreTestedEstimate, affine_score_interval
from .joint import JointEstimate
from .joint.inference import ConditionalTable, wald_clipped

__all__ = [
    "MAX_OVERLAP_SD",
    "MIN_DOF",
    "SYMMETRIC_CLIPPED",
    "WindowDesign",
    "joint_design_effect",
    "persistence_rates",
    "value_design_effects",
    "widen_estimate",
    "widen_joint",
    "window_design",
]

#: Fewest degrees of freedom of the dispersion statistic for which the overlap is estimated; below, φ = 1.
MIN_DOF = 30
#: Largest standard error of φ̂ (without repetition) for which it is used; above, the overlap cannot be told
#: from the noise (few cells or buckets, or a weak dependence ρ: an instantaneous layer) and φ = 1 is used.
MAX_OVERLAP_SD = 0.25
#: Standard errors by which the successive buckets' overlap must exceed the pooled one to be taken (the
#: population changed within the window: :func:`window_design`).
DRIFT_Z = 3.0


def persistence_rates(mechanism: Mechanism) -> tuple[float, float, float, float] | None:
    """``(q1, p1, q2, p2)``: rates of the permanent response of a sketch cell (its first layer) and of the
    instantaneous layer on top of it (``(1, 0)`` when there is none); ``None`` when every report draws fresh
    noise (``memoize=False``: reports of one client are independent given its value).

    k-RR / O-RR (symbols): k-RR rates over the ``k`` output symbols; k-RAPPOR / O-RAPPOR: per-bit rates
    (:attr:`~ldpstream.mechanisms.longitudinal.Memoizing.layers`); RAPPOR: PRR ``(1 − f/2, f/2)``, IRR ``(q, p)``.
    A mechanism this module does not know is treated as memoized without an instantaneous layer (the worst
    case for intervals)."""
    hi, lo = mechanism.response_rates
    own = getattr(mechanism, "persistence_rates", None)  # RAPPOR: its PRR and IRR
    if own is not None:
        return (float(own[0]), float(own[1]), float(own[2]), float(own[3]))
    if not isinstance(mechanism, Memoizing):
        return float(hi), float(lo), 1.0, 0.0
    layers = mechanism.layers
    if not mechanism.memoize:
        return None
    first, irr = layers
    if irr is None:
        return float(hi), float(lo), 1.0, 0.0
    if mechanism.report_kind == "symbol":
        return (*krr_rates(mechanism.k, first), *krr_rates(mechanism.k, irr))
    return (*bit_rates(first), *bit_rates(irr))


def _cells(mechanism: Mechanism, sketch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(counts (..., C, k), reports per cohort (..., C))`` of one sketch or a stack of them: the cells are the
    symbol columns (a symbol sketch's rows sum to its reports), or the bit columns (column 0 of a bit sketch
    counts reports)."""
    margins = getattr(mechanism, "margin_sketch", None)  # HR, HCMS: cells are the transform's agreement counts
    if margins is not None and not np.asarray(sketch).size:
        margins = None  # an empty stack: no cells either way
    arr = np.asarray(sketch if margins is None else margins(sketch), dtype=np.float64)
    if mechanism.report_kind == "symbol" and margins is None:
        return arr, arr.sum(axis=-1)
    return arr[..., 1:], arr[..., 0]


def _cell_moments(rate: np.ndarray, rates: tuple[float, float], persistence: tuple[float, float, float, float],
                  cohorts: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-report variance and per-client covariance (two reports of one client) of each cell's indicator.

    ``f = (rate − lo)/(hi − lo)``: the fraction of the cohort's clients whose input sets the cell. Given who is
    in the cohort: ``v = f hi (1 − hi) + (1 − f) lo (1 − lo)`` and ``c = (q2 − p2)² [f q1 (1 − q1) +
    (1 − f) p1 (1 − p1)]``. With several cohorts a client's cohort is random and kept: which clients share a
    cohort (the cells' mix of values) is then persistent too and adds ``(1 − 1/C) (m(1 − m) − v)`` (the
    spread of the clients' rates ``m_i``, with ``m = rate``) to both."""
    hi, lo = rates
    q1, p1, q2, p2 = persistence
    f = np.clip((rate - lo) / (hi - lo), 0.0, 1.0)
    v = f * hi * (1 - hi) + (1 - f) * lo * (1 - lo)
    c = (q2 - p2) ** 2 * (f * q1 * (1 - q1) + (1 - f) * p1 * (1 - p1))
    if cohorts > 1:
        m = lo + (hi - lo) * f
        mix = (1.0 - 1.0 / cohorts) * np.maximum(m * (1 - m) - v, 0.0)
        v, c = v + mix, c + mix
    return v, c


@dataclass(frozen=True, eq=False)
class WindowDesign:
    """How the reports of one window repeat, and the model its intervals use.

    Attributes:
        buckets: buckets with reports from which the overlap was estimated.
        span: effective number of buckets the window's reports come from (``(Σ n_b)²/Σ n_b²``; for a window
            read from the all-time rollup, extrapolated to its reports, see :func:`window_design`).
        overlap: ``φ`` used (in [0, 1]).
        rule: ``"single-bucket"`` (span ≤ 1: no repetition), ``"fresh-noise"`` (reports of one client are
            independent), ``"estimated"`` (φ̂ from the dispersion), ``"worst-case"`` (too few degrees of
            freedom: φ = 1), ``"unknown-independent"`` (no per-bucket detail: independence assumed).
        dof: degrees of freedom of the dispersion statistic.
        overlap_estimate: the unclamped φ̂ (``None`` when not estimated).
        rho: per-cell correlation ``ρ_j`` of two reports of one client, ``(C, k)``.
        weight: per-cell variance ``n_c v_j`` (weights of the per-value design effects), ``(C, k)``.
        share: per-cell fraction ``f_j`` of the cohort's clients whose input sets the cell (``None``: unused).
        mix_scale: ``(1 − 1/C)(hi − lo)²``, the cohort-mix term per unit of ``f(1 − f)`` (0 with one cohort).
        reports: reports of each cell's cohort, ``(C, k)`` (``None``: unused).
    """

    buckets: int
    span: float
    overlap: float
    rule: str
    dof: float
    overlap_estimate: float | None
    rho: np.ndarray
    weight: np.ndarray
    share: np.ndarray | None = None
    mix_scale: float = 0.0
    reports: np.ndarray | None = None

    def assumes(self) -> str:
        """What the window's interval assumes, in words (published with the estimate)."""
        if self.rule == "single-bucket":
            return "one report per client (a single bucket)"
        if self.rule == "fresh-noise":
            return "independent reports (fresh noise on every report)"
        if self.rule == "unknown-independent":
            return "independent reports (no per-bucket counts to measure repetition)"
        how = ("every client reports in every bucket (too few buckets to measure the overlap)"
               if self.rule == "worst-case" else "the client overlap between buckets measured from their dispersion")
        return (f"repeated reports of unchanged values over {self.span:.3g} buckets with memoized permanent "
                f"responses; {how}; a population stationary between the buckets where values change")

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "buckets": self.buckets, "span": self.span, "overlap": self.overlap,
                "overlap_estimate": self.overlap_estimate, "dof": self.dof}


def _independent(mechanism: Mechanism, sketch: np.ndarray, rule: str, buckets: int, span: float) -> WindowDesign:
    cells, _ = _cells(mechanism, sketch)
    zero = np.zeros(cells.shape)
    return WindowDesign(buckets, span, 0.0, rule, 0.0, None, zero, np.ones(cells.shape))


def window_design(mechanism: Mechanism, bucket_sketches: Sequence[np.ndarray], window_sketch: np.ndarray | None = None,
                  *, min_dof: int = MIN_DOF, max_overlap_sd: float = MAX_OVERLAP_SD) -> WindowDesign:
    """The repetition model of a window from the sketches of its buckets (module docstring).

    ``window_sketch``: the sketch actually decoded when it is not the sum of ``bucket_sketches`` (the
    all-time rollup, which also holds expired buckets): the overlap is measured on the buckets given and the
    span extrapolated to its reports, ``n_window / (n_held / span_held)`` (as many buckets as the rollup's
    reports fill at the held buckets' average size; with clients that churn the overlap decays with the lag,
    so applying the recent buckets' overlap to the whole span is conservative). Without any bucket, the rule
    is ``"unknown-independent"``. O(B·C·k)."""
    stack = np.stack(list(bucket_sketches), dtype=np.float64) if len(bucket_sketches) else np.zeros((0, 1, 1))
    x, nb = _cells(mechanism, stack)  # (B, C, k), (B, C)
    keep = nb.sum(axis=1) > 0
    if not keep.all():
        stack, x, nb = stack[keep], x[keep], nb[keep]
    decoded = stack.sum(axis=0) if window_sketch is None else np.asarray(window_sketch, dtype=np.float64)
    if not len(stack):
        if window_sketch is None:
            raise ValueError("a window with no bucket needs its sketch")
        return _independent(mechanism, decoded, "unknown-independent", 0, 1.0)
    sizes = nb.sum(axis=1)
    span = float(sizes.sum() ** 2 / np.sum(sizes**2))
    if window_sketch is not None:
        n_window = float(_cells(mechanism, decoded)[1].sum())
        span = max(span, n_window / (float(sizes.sum()) / span))
    persistence = persistence_rates(mechanism)
    if persistence is None:
        return _independent(mechanism, decoded, "fresh-noise", len(stack), span)
    hi, lo = (float(r) for r in mechanism.response_rates)
    cells, n = _cells(mechanism, decoded)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(n[:, None] > 0, cells / np.where(n > 0, n, 1.0)[:, None], lo)
    v, c = _cell_moments(rate, (hi, lo), persistence, int(mechanism.cohorts))
    rho = np.clip(np.where(v > 0, c / np.where(v > 0, v, 1.0), 1.0), 0.0, 1.0)
    weight = n[:, None] * v
    cohorts = int(mechanism.cohorts)
    share = np.clip((rate - lo) / (hi - lo), 0.0, 1.0)
    mix_scale = (1.0 - 1.0 / cohorts) * (hi - lo) ** 2 if cohorts > 1 else 0.0
    reports = np.broadcast_to(n[:, None], rate.shape)
    if span <= 1.0 + 1e-9:
        return WindowDesign(len(stack), span, 0.0, "single-bucket", 0.0, None, rho, weight, share, mix_scale, reports)
    # Dispersion of the held buckets about their own pooled rate, in one pass over (B, C, k):
    # Σ_b (x_b − n_b r)²/n_b = Σ_b x_b²/n_b − r Σ_b x_b (a cohort without reports has no counts either).
    x_sum = x.sum(axis=0)
    n_held = nb.sum(axis=0)[:, None]  # (C, 1)
    r_held = np.where(n_held > 0, x_sum / np.maximum(n_held, 1.0), lo)
    v_h, c_h = _cell_moments(r_held, (hi, lo), persistence, int(mechanism.cohorts))
    rho_h = np.clip(c_h / v_h, 0.0, 1.0)
    mean = x / np.maximum(nb, 1.0)[:, :, None]  # each bucket's rate per cell (0 in a cohort without reports)
    squares = np.einsum("bck,bck->ck", mean, x)
    terms = np.maximum(squares - r_held * x_sum, 0.0) / v_h
    dof_cell = np.broadcast_to(np.maximum((nb > 0).sum(axis=0) - 1, 0)[:, None], r_held.shape)
    dof = float(dof_cell.sum())
    denominator = float((dof_cell * rho_h).sum())
    # sd of φ̂ when no client repeats (Var X²_j ≈ 2 d_j): known before the data are looked at, so choosing
    # the worst case on it biases nothing. With ρ = 1 it exceeds MAX_OVERLAP_SD exactly when dof < 32.
    overlap_sd = float(np.sqrt(2.0 * dof) / denominator) if denominator > 0 else np.inf
    if dof < min_dof or overlap_sd > max_overlap_sd:
        return WindowDesign(len(stack), span, 1.0, "worst-case", dof, None, rho, weight, share, mix_scale, reports)
    phi_hat = float((dof - terms.sum()) / denominator)
    # a population that changes within the window moves the buckets' rates apart, which the dispersion about the
    # pooled rate reads as clients that do not repeat; the successive buckets' differences see a change only
    # where it happens, so their median estimate is taken when it is larger by more than noise allows
    # (docs/math/estimators.md#drifting-values)
    successive = _successive_overlap(mean, nb, v_h, rho_h, max_overlap_sd)
    if successive is not None and successive[0] - phi_hat > DRIFT_Z * float(np.hypot(successive[1], overlap_sd)):
        phi_hat = successive[0]
    return WindowDesign(len(stack), span, float(np.clip(phi_hat, 0.0, 1.0)), "estimated", dof, phi_hat, rho,
                        weight, share, mix_scale, reports)


def _successive_overlap(mean: np.ndarray, nb: np.ndarray, v: np.ndarray, rho: np.ndarray,
                        max_overlap_sd: float) -> tuple[float, float] | None:
    """The overlap from each pair of successive buckets' cell rates ``mean`` (``x̄_bj``, shape (B, C, k)) and
    reports ``nb`` (B, C), ``φ̂_b = Σ_j (1 − T_bj) / Σ_j κ_b ρ_j`` with
    ``T_bj = (x̄_bj − x̄_{b−1,j})² / (v_j (1/n_b + 1/n_{b−1}))`` and ``κ_b = 2 min(n_b, n_{b−1})/(n_b + n_{b−1})``
    per cohort: their median over ``b`` and its sd without repetition (``1.2533 max_b sd(φ̂_b)/sqrt(B − 1)``,
    ``sd(φ̂_b) = sqrt(2 cells)/Σ_j κ_b ρ_j``); None with fewer than 3 pairs or an ``sd(φ̂_b)`` above
    ``max_overlap_sd``. O(B·C·k)."""
    if mean.shape[0] < 4:
        return None
    n0, n1 = nb[:-1], nb[1:]  # (B − 1, C)
    both = (n0 > 0) & (n1 > 0)
    # T_bj = (x̄_b − x̄_{b−1})² h_bc / v_j with h = n_b n_{b−1}/(n_b + n_{b−1}), 0 where either bucket is empty:
    # summed over cells in one pass, no (B − 1, C, k) quotient formed
    h = np.where(both, n0 * n1 / np.maximum(n0 + n1, 1.0), 0.0)
    inv_v = np.where(v > 0, 1.0 / np.where(v > 0, v, 1.0), 0.0)
    step = np.subtract(mean[1:], mean[:-1])
    np.square(step, out=step)
    t = np.einsum("bck,bc,ck->b", step, h, inv_v)
    kappa = np.where(both, 2 * np.minimum(n0, n1) / np.maximum(n0 + n1, 1.0), 0.0)  # (B − 1, C)
    cells = both.sum(axis=1) * mean.shape[2]  # cells with both buckets' reports, per pair
    denominators = kappa @ rho.sum(axis=1)
    if np.any(denominators <= 0):
        return None
    sd = float(np.max(np.sqrt(2.0 * cells) / denominators))
    if sd > max_overlap_sd:
        return None
    return statistics.median(((cells - t) / denominators).tolist()), 1.2533 * sd / np.sqrt(len(denominators))


def value_design_effects(design: WindowDesign, value_cells: Any, frequencies: np.ndarray | None = None
                         ) -> np.ndarray:
    """``deff_s = 1 + (span − 1) φ ρ_s`` for each value (column) of the ``(C·k, S)`` design matrix, ``ρ_s`` the
    variance-weighted mean of ``ρ_j`` over the cells value ``s`` sets (a value that sets none: the largest ρ).

    With several cohorts and the values' estimated ``frequencies``, the cohort-mix term of a cell counts only
    the other values behind it, ``(1 − 1/C)(hi − lo)² g(1 − g)`` with ``g = f_j − p_s``: the fluctuation of
    the value's own share between cohorts cancels in its estimate (its clients are all counted somewhere)."""
    # the decoder passes its cached (read-only) design: used as it is, not copied
    X = (value_cells if isinstance(value_cells, sp.csr_matrix) and value_cells.dtype == np.float64
         else sp.csr_matrix(value_cells, dtype=np.float64))
    factor = max(design.span - 1.0, 0.0) * design.overlap
    if factor == 0.0:
        return np.ones(X.shape[1])
    w = design.weight.ravel()
    if frequencies is not None and design.mix_scale > 0 and design.share is not None:
        # the nonzeros of the canonical csr design in order: rows repeated by their counts (tocoo, less its checks)
        cell = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        value = X.indices
        # per cell first (R of them), then gathered to the nonzeros: share f, its own term f(1 − f), per-report
        # variance v and covariance c = ρv, reports n
        share = design.share.ravel()
        n_cell = design.reports.ravel() if design.reports is not None else np.ones(share.size)
        v_cell = np.where(n_cell > 0, w / np.where(n_cell > 0, n_cell, 1.0), 0.0)
        f = share[cell]
        g = np.maximum(f - np.clip(np.asarray(frequencies, dtype=np.float64)[value], 0.0, 1.0), 0.0)
        shift = design.mix_scale * (g * (1 - g) - (share * (1 - share))[cell])  # ≤ 0: the value's own share removed
        v_own = np.maximum(v_cell[cell] + shift, 0.0)
        c_own = np.maximum((design.rho.ravel() * v_cell)[cell] + shift, 0.0)
        # the weight n v_own x and the correlation c_own / v_own (in [0, 1]: c ≤ v, as ρ ≤ 1) of each nonzero,
        # multiplied out
        scale = n_cell[cell] * X.data
        num = np.bincount(value, scale * c_own, minlength=X.shape[1])
        den = np.bincount(value, scale * v_own, minlength=X.shape[1])
    else:
        num = np.asarray(X.T @ (w * design.rho.ravel())).ravel()
        den = np.asarray(X.T @ w).ravel()
    rho_max = float(design.rho.max()) if design.rho.size else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rho_s = np.where(den > 0, num / np.where(den > 0, den, 1.0), rho_max)
    out: np.ndarray = 1.0 + factor * np.clip(rho_s, 0.0, 1.0)
    return out


#: Intervals ``centre ± half`` (``half >= Z95 · se``) clipped to [0, 1] whose centre is not the published point
#: (the candidate decoders' least-squares interval, in its score form, beside a constrained point; detect's refit
#: interval beside its empirical-Bayes point): widened about their own centre.
SYMMETRIC_CLIPPED = frozenset({"ls-sandwich", "wald-refit"})


def _widen_symmetric(interval: ConfidenceInterval, se: np.ndarray, point: np.ndarray, root: np.ndarray,
                     unclipped: ConfidenceInterval | None = None, shift: np.ndarray | None = None
                     ) -> tuple[ConfidenceInterval, ConfidenceInterval]:
    """``clip(centre ± root · half)`` of ``clip(centre ± half)``, with the widened bounds before clipping.

    With ``unclipped`` (the bounds before clipping, :attr:`Estimate.unclipped_interval`) centre and half-width
    are exact. Without: from the two bounds when neither was clipped, else ``half = Z95 · se`` from the unclipped
    bound (both clipped: the point). An interval wholly below 0 (``[0, 0]``) then only bounds its centre,
    ``≤ −half``: ``−half`` is taken, the widest (conservative) choice; likewise above 1. A score-form interval
    (``shift`` ``s = z²b/2`` from the least-squares estimate, half-width ``sqrt(s² + z²v)``) takes the variance and
    its slope both times ``root²``: centre ``β̂ + root² s``, half-width ``sqrt(root⁴ s² + root² z² v)``."""
    if unclipped is not None:
        low, high = (np.asarray(b, dtype=np.float64) for b in unclipped)
        centre, half = (low + high) / 2, (high - low) / 2
        if shift is not None:
            d = root * root
            wald2 = np.maximum(half * half - shift * shift, 0.0)  # z² v
            centre = centre - shift + d * shift
            wide = ConfidenceInterval(centre - np.sqrt(d * d * shift * shift + d * wald2),
                                      centre + np.sqrt(d * d * shift * shift + d * wald2))
            return ConfidenceInterval(np.clip(wide.low, 0.0, 1.0), np.clip(wide.high, 0.0, 1.0)), wide
    else:
        low, high = (np.asarray(b, dtype=np.float64) for b in interval)
        z_half = Z95 * np.asarray(se, dtype=np.float64)
        free_low, free_high = low > 0.0, high < 1.0
        centre = np.where(free_low & free_high, (low + high) / 2,
                          np.where(free_high, high - z_half, np.where(free_low, low + z_half, point)))
        half = np.where(free_low & free_high, (high - low) / 2, z_half)
    wide = ConfidenceInterval(centre - root * half, centre + root * half)
    return ConfidenceInterval(np.clip(wide.low, 0.0, 1.0), np.clip(wide.high, 0.0, 1.0)), wide


def widen_estimate(est: Estimate, deff: np.ndarray, mechanism: Mechanism, sketch: np.ndarray) -> Estimate:
    """``est`` with its uncertainty inflated by the design effects ``deff`` (one per value).

    Standard errors × ``sqrt(deff)``; the score interval of a direct decoder (``"wilson-score"``) recomputed
    with the effective counts ``x/deff`` out of ``n/deff``; a clipped symmetric interval beside the point
    (:data:`SYMMETRIC_CLIPPED`) widened about its own centre (exactly from its bounds before clipping when the
    estimate keeps them); any other interval of the decoder widened about
    the estimate by ``sqrt(deff)`` (a Wald interval follows the standard errors). The score statistics of
    ``p = 0`` shrink by ``sqrt(deff)``, so tests stay consistent with the interval."""
    d = np.maximum(np.asarray(deff, dtype=np.float64), 1.0)
    if d.shape != est.frequencies.shape:
        raise ValueError(f"{d.shape[0]} design effects for {est.frequencies.shape[0]} values")
    changes: dict[str, Any] = {}
    if est.misfit is not None:
        # repeated reports inflate the window's dispersion by its design effect too: the misfit is tested with
        # that part taken out, and the standard errors carry its inflation instead of the summed sketch's
        # (docs/math/misfit.md#windows)
        fit = est.misfit.scaled(float(np.mean(d)))
        changes["misfit"] = fit
        d = d * (fit.inflation / est.misfit.inflation) ** 2
    if np.all(d == 1.0):
        return est
    root = np.sqrt(d)
    changes["info"] = {**est.info, "design_effect_max": float(d.max())}
    if est.std_errors is not None:
        changes["std_errors"] = est.std_errors * root
    if est.residual_std_error is not None:
        changes["residual_std_error"] = est.residual_std_error * float(root.max())
    if est.detection_floor is not None:
        changes["detection_floor"] = est.detection_floor * float(np.sqrt(np.median(d)))
    if est.interval is not None:
        changes["unclipped_interval"] = None  # kept below where it is widened with the interval
        if est.interval_method == "wilson-score" and mechanism.decoder_family.startswith("direct"):
            cells, n = _cells(mechanism, sketch)
            x, total = cells.sum(axis=0), float(n.sum())
            hi, lo = (float(r) for r in mechanism.response_rates)
            # Element-wise in n: each value's own effective number of reports.
            low, high = affine_score_interval(x / d, cast(float, total / d), lo, hi - lo)
            changes["interval"] = ConfidenceInterval(low, high)
        elif est.interval_method in SYMMETRIC_CLIPPED and est.std_errors is not None:
            changes["interval"], wide = _widen_symmetric(est.interval, est.std_errors, est.frequencies, root,
                                                         est.unclipped_interval, est.interval_shift)
            if est.unclipped_interval is not None:
                changes["unclipped_interval"] = wide
                if est.interval_shift is not None:
                    changes["interval_shift"] = est.interval_shift * root * root
        else:
            f = est.frequencies
            low, high = est.interval
            changes["interval"] = ConfidenceInterval(f - (f - low) * root, f + (high - f) * root)
    if isinstance(est, ScoreTestedEstimate) and est.null_z is not None:
        changes["null_z"] = np.asarray(est.null_z) / root
    return replace(est, **changes)


def joint_design_effect(designs: Sequence[WindowDesign | None]) -> float:
    """The design effect of the joint table of an association's members over a window: the largest
    ``1 + (B − 1) φ`` of the members' window designs (``B`` their span, ``φ`` their overlap; 1 without a design).

    A client's report pairs in different buckets share both members' permanent responses, so two of them are
    correlated by at most 1 (exactly 1, identical pairs, for memoized responses without an instantaneous
    layer): the model's ``deff = 1 + (B − 1) φ ρ`` (module docstring) with ``ρ = 1`` bounds every cell's. The
    members' overlaps measure the same clients (both reports travel in one record); the larger is used."""
    return max((1.0 + max(d.span - 1.0, 0.0) * d.overlap for d in designs if d is not None), default=1.0)


def widen_joint(est: JointEstimate, deff: float) -> JointEstimate:
    """``est`` with its covariance multiplied by the design effect ``deff`` of its window's repeated pairs:
    standard errors × ``sqrt(deff)`` and their clipped Wald intervals recomputed, for the cells and both
    conditional tables; both statistics of independence (the paper's ``T``, a quadratic form in the observed
    information, and the Wald statistic ``θ̂ᵀ V⁻¹ θ̂``) divided by ``deff``, which is exact when the covariance
    becomes ``deff`` times larger (the information ``1/deff`` times), with their χ² p-values."""
    d = float(deff)
    if not d > 1.0:
        return est
    root = float(np.sqrt(d))

    def conditional(table: ConditionalTable) -> ConditionalTable:
        se = table.std_error * root
        low, high = wald_clipped(table.table, se)
        return replace(table, std_error=se, low=low, high=high)

    se = est.std_error * root
    low, high = est.intervals(se)
    test = est.independence
    statistic, wald = test.statistic / d, test.wald_statistic / d
    p_value, wald_p = ((float(stats.chi2.sf(statistic, test.df)), float(stats.chi2.sf(wald, test.df)))
                       if test.df > 0 else (test.p_value, test.wald_p_value))
    return replace(est, std_error=se, covariance=est.covariance * d, low=low, high=high,
                   x_given_y=conditional(est.x_given_y), y_given_x=conditional(est.y_given_x),
                   independence=replace(test, statistic=statistic, p_value=p_value, wald_statistic=wald,
                                        wald_p_value=wald_p),
                   info={**est.info, "design_effect": d})
