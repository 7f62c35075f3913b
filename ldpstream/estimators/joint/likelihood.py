"""Per-pattern likelihoods of one variable of an associated pair (docs/math/joint.md#likelihoods).

For a variable X with candidate values ``v_1..v_S`` and distinct patterns ``u`` (cohort ``c_u``, report
``R_u``), this module builds the ``(D, S)`` matrix ``L[u, s] = P(R_u | v_s, c_u)`` and, optionally, an extra
column ``P(R_u | Other, c_u)`` (Fanti, Pihur, Erlingsson 2016, §4.A–B). Rows are scaled by their largest
entry; the log of the scale is returned so the log-likelihood can be reported exactly.

The true report of every candidate comes from the mechanism's design matrix ``H`` (``(C·k, S)`` 0/1,
cohort-major rows, :meth:`~ldpstream.mechanisms.base.Mechanism.design_matrix`):

- symbol mechanisms (k-RR, O-RR): ``P(y | s, c) = hi`` when ``H[c·k + y, s] = 1`` else ``lo``;
- bit mechanisms (k-RAPPOR, O-RAPPOR, RAPPOR): ``log P(b | s, c) = Σ_j [b_j log p* + (1 − b_j) log(1 − p*)]
  + A·(bᵀH_c)_s + B·(h_{c,s} − (bᵀH_c)_s)``, ``A = log(q*/p*)``, ``B = log((1 − q*)/(1 − p*))``,
  ``h_{c,s}`` the number of bits candidate s sets in cohort c.

"Other" (docs/math/joint.md#the-other-category), per cohort c: ``f_s`` are the candidates' frequencies among
all reports (given, or least squares on the patterns' sketch: :func:`dictionary_frequencies`,
:func:`candidate_frequencies`), ``N_c^O = N_c (1 − Σ_s f_s)`` the reports left to Other;

- bits: ``t^O_{c,j} = (Y_{c,j} − Σ_s N_c f_s t_{c,j,s}) / N_c^O`` clipped to ``[p*, q*]``,
  ``P(b | Other, c) = Π_j (t^O)^{b_j} (1 − t^O)^{1 − b_j}``;
- symbols: ``P(y | Other, c) = (Y_{c,y} − Σ_s N_c f_s Q(y | s, c)) / N_c^O`` clipped to ``[lo, hi]`` and
  renormalized over y.

With fewer than :data:`MIN_OTHER_REPORTS` reports of a cohort left to Other, its likelihood is that of a value
hashed uniformly at random (``1/k`` per symbol; ``t = p* + (q* − p*)·h/k`` per bit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
import scipy.sparse as sp

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.base import BitMechanism, Mechanism

from ..dispatch import DesignCache, design_matrix, estimate
from ..factor_cache import FactorCache

__all__ = [
    "MIN_OTHER_REPORTS",
    "DictionaryFit",
    "OtherLaw",
    "VariableLikelihood",
    "VariableModel",
    "candidate_frequencies",
    "candidate_truth",
    "dictionary_design",
    "dictionary_frequencies",
    "other_bit_rates",
    "other_regressor",
    "other_symbol_rates",
    "pattern_sketch",
    "star_rates",
    "variable_likelihood",
    "variable_model",
]

#: Below this many reports left to "Other" in a cohort, its likelihood is the uniformly-hashed fallback.
MIN_OTHER_REPORTS = 1.0
#: Patterns per matrix product (bounds the float copy of the bits).
CHUNK_ROWS = 65_536


@dataclass(frozen=True)
class OtherLaw:
    """The estimated "Other" report law of one variable and what its influence function needs
    (docs/math/joint.md#the-other-categorys-uncertainty): per cohort c and cell j (bit or symbol),
    ``raw = (ȳ_c − R_c f)/(1 − Σf)`` before clipping, ``law`` the published rates (clipped; symbols also
    renormalized by ``clipped_sum``), ``free`` where the law moves with ``raw`` (neither clipped nor the
    fallback), the cohort means ``means`` = ȳ_c and sizes ``n_c``, the candidates' cell rates ``rates``
    (``(C, k, S)``: ``t_{c,j,s}`` or ``Q(y | s, c)``), the frequencies ``f`` and their Jacobian
    ``freq_jacobian`` (``(S, C, k)``: ∂f_s/∂ȳ_{c,j})."""

    bits: bool
    raw: np.ndarray
    law: np.ndarray
    free: np.ndarray
    clipped_sum: np.ndarray
    means: np.ndarray
    n_c: np.ndarray
    rates: np.ndarray
    frequencies: np.ndarray
    freq_jacobian: np.ndarray
    #: ``f`` are the fitted table's own margins
    #: (docs/math/joint.md#self-consistent-candidate-frequencies-an-experiment-off-by-default):
    #: ``freq_jacobian`` is zero and ``f``'s influence enters the sandwich's bread instead.
    self_consistent: bool = False


@dataclass(frozen=True)
class VariableLikelihood:
    """``(D, S[+1])`` likelihood matrix of one variable, rows scaled to a maximum of 1."""

    #: ``L[u, s] / scale_u``; the last column is "Other" when ``has_other``.
    matrix: np.ndarray
    #: ``log scale_u`` (so ``log P(R_u | s) = log matrix[u, s] + log_scale[u]``).
    log_scale: np.ndarray
    has_other: bool
    #: Candidate frequencies used by the Other rule (``None`` without Other).
    frequencies: np.ndarray | None
    #: The Other law's nuisance estimate and its ingredients (``None`` without Other).
    other_law: OtherLaw | None = None


def _is_bits(mechanism: Mechanism) -> TypeGuard[BitMechanism]:
    return str(mechanism.report_kind) == "bits"


def star_rates(mechanism: Mechanism) -> tuple[float, float]:
    """``(q*, p*)`` of a bit mechanism (:class:`~ldpstream.mechanisms.base.BitMechanism`)."""
    if not _is_bits(mechanism):
        raise ParameterError(f"{mechanism.name}: not a bit mechanism")
    return float(mechanism.q_star), float(mechanism.p_star)


def candidate_truth(mechanism: Mechanism, values: Sequence[Any], design_cache: DesignCache | None = None
                    ) -> np.ndarray:
    """``(C, k, S)`` bool: whether candidate s's true report sets cell (symbol or bit) j in cohort c.

    Direct mechanisms (k-RR, k-RAPPOR): the identity's columns ``values`` (alphabet indices), one cohort;
    hashed ones: their :meth:`design_matrix` of the candidates (closed alphabets: of the indices), from
    ``design_cache`` when given."""
    k, C = int(mechanism.k), int(mechanism.cohorts)
    if not getattr(mechanism, "needs_value_table", True):
        index = np.asarray(values, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= k):
            raise ParameterError(f"{mechanism.name}: values must be alphabet indices in 0..{k - 1}")
        return np.eye(k, dtype=bool)[:, index].reshape(1, k, len(index))
    H = design_matrix(mechanism, list(values), design_cache)
    dense = np.asarray(sp.csr_matrix(H).toarray() > 0)
    if dense.shape[0] != C * k:
        raise ParameterError(f"{mechanism.name}: design has {dense.shape[0]} rows, expected {C * k}")
    return dense.reshape(C, k, -1)


def pattern_sketch(mechanism: Mechanism, cohorts: np.ndarray, reports: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The mechanism's ``(C, sketch_width)`` count sketch of patterns with multiplicities ``counts``
    (symbols: ``[c, y]``; bits: ``[c, 0]`` reports and ``[c, 1 + j]`` reports with bit j set)."""
    C, k = int(mechanism.cohorts), int(mechanism.k)
    w = np.asarray(counts, dtype=np.float64)
    cohorts = np.asarray(cohorts, dtype=np.int64)
    if len(cohorts) and (cohorts.min() < 0 or cohorts.max() >= C):
        raise ParameterError(f"{mechanism.name}: cohorts must lie in 0..{C - 1}")
    if not _is_bits(mechanism):
        y = np.asarray(reports, dtype=np.int64)
        if len(y) and (y.min() < 0 or y.max() >= k):
            raise ParameterError(f"{mechanism.name}: symbols must lie in 0..{k - 1}")
        flat = np.bincount(cohorts * k + y, weights=w, minlength=C * k)
        return np.rint(flat).astype(np.int64).reshape(C, k)
    bits = np.asarray(reports)
    if bits.ndim != 2 or bits.shape[1] != k:
        raise ParameterError(f"{mechanism.name}: bit reports must be (D, {k})")
    out = np.zeros((C, k + 1), dtype=np.float64)
    out[:, 0] = np.bincount(cohorts, weights=w, minlength=C)
    indicator = sp.csr_matrix((w, (cohorts, np.arange(len(w)))), shape=(C, len(w)))
    out[:, 1:] = np.asarray(indicator @ bits.astype(np.float64))
    return np.rint(out).astype(np.int64)


def candidate_frequencies(mechanism: Mechanism, values: Sequence[Any], sketch: np.ndarray, *,
                          design_cache: DesignCache | None = None, factor_cache: FactorCache | None = None
                          ) -> np.ndarray:
    """The candidates' frequencies among all reports, from the marginal decoders' unbiased least squares
    (``"ls"``; direct mechanisms: ``"unbiased"`` over the alphabet, then the values' entries), clipped to
    ``[0, 1]`` and scaled down if they sum past 1. The caches go to :func:`~ldpstream.estimators.estimate`."""
    if not getattr(mechanism, "needs_value_table", True):
        est = estimate(sketch, mechanism, "unbiased")
        f = np.asarray(est.frequencies, dtype=np.float64)[np.asarray(values, dtype=np.int64)]
    else:
        est = estimate(sketch, mechanism, "ls", candidates=list(values), design_cache=design_cache,
                       factor_cache=factor_cache)
        f = np.asarray(est.frequencies, dtype=np.float64)[: len(values)]
    f = np.clip(f, 0.0, 1.0)
    total = f.sum()
    return f / total if total > 1.0 else f


def frequency_jacobian(mechanism: Mechanism, values: Sequence[Any], truth: np.ndarray, freq: np.ndarray,
                       n_c: np.ndarray, dictionary: DictionaryFit | None = None) -> np.ndarray:
    """``(S, C, k)``: ∂f_s/∂ȳ_{c,j} of :func:`candidate_frequencies` at ``freq`` (its linearization,
    docs/math/joint.md#the-other-categorys-uncertainty). Direct mechanisms: ``f_s = (ȳ_{v_s} − lo)/Δ``.
    Hashed: the weighted least squares of the candidate decoders, ``f = [(XaᵀWXa)⁻¹XaᵀW]_{1..S} (ȳ − lo)/Δ``
    with ``Xa = [X, o]`` (``o``: the "other" regressor, ``h̄/k`` per bit or ``1/k`` per symbol) and
    ``W = N_c / (r (1 − r))`` at the fitted rates ``r`` (the weights held fixed). With a ``dictionary`` (the
    frequencies are the candidates' rows of a least squares against a larger candidate list,
    :func:`dictionary_frequencies`), ``X`` is that list's design and the rows kept are the candidates'.
    Rows of clipped frequencies are zero."""
    C, k, S = truth.shape
    bits = _is_bits(mechanism)
    if bits:
        qs, lo = star_rates(mechanism)
        delta = qs - lo
    else:
        hi, lo = mechanism.response_rates
        delta = float(hi) - float(lo)
    out = np.zeros((S, C, k))
    if not getattr(mechanism, "needs_value_table", True):
        out[np.arange(S), 0, np.asarray(values, dtype=np.int64)] = 1.0 / delta
    else:
        design, fitted, rows = ((truth, freq, np.arange(S)) if dictionary is None
                                else (dictionary.truth, dictionary.frequencies, dictionary.positions))
        M = design.shape[2]
        X = design.reshape(C * k, M).astype(np.float64)
        o = X.sum() / max(M * C, 1) / k if bits else 1.0 / k
        Xa = np.column_stack([X, np.full(C * k, o)])
        beta = np.concatenate([fitted, [max(1.0 - float(fitted.sum()), 0.0)]])
        r = np.clip(lo + delta * (Xa @ beta), 1e-9, 1.0 - 1e-9)
        w = np.repeat(np.asarray(n_c, dtype=np.float64), k) / (r * (1.0 - r))
        gram = Xa.T @ (w[:, None] * Xa)
        out = (np.linalg.pinv(gram) @ (Xa.T * w))[rows].reshape(S, C, k) / delta
    out[(freq <= 0.0) | (freq >= 1.0)] = 0.0
    return out


@dataclass(frozen=True)
class DictionaryFit:
    """The candidates' frequencies from a least squares against a larger candidate list (the metric's
    dictionary): the list's truth ``(C, k, M)``, its fitted frequencies ``(M,)`` (clipped to [0, 1]) and the
    candidates' positions in it ``(S,)``."""

    truth: np.ndarray
    frequencies: np.ndarray
    positions: np.ndarray


#: A dictionary design is used only when its columns (plus the "other" regressor) are at most this share of
#: the cohorts' cells and its scaled Gram matrix's condition number is below :data:`DICTIONARY_COND_MAX`
#: (the thresholds of the detection's well-determined design, ``detection.py``).
DICTIONARY_MAX_FRACTION = 0.5
DICTIONARY_COND_MAX = 1e6


def dictionary_frequencies(mechanism: Mechanism, values: Sequence[Any], dictionary: Sequence[Any] | None,
                           sketch: np.ndarray, *, design_cache: DesignCache | None = None,
                           factor_cache: FactorCache | None = None) -> DictionaryFit | None:
    """The candidates' frequencies as rows of the unbiased least squares (``"ls"``) against ``dictionary``
    on the patterns' sketch (docs/math/joint.md#candidate-frequencies-from-the-dictionary), or ``None`` when
    that does not apply: a direct mechanism (its frequencies are exact already), no dictionary, a candidate
    outside it, or a design that is not well-determined (more columns than half the cells, or ill-conditioned:
    there the least squares is worse than the candidates' own). The caches go to
    :func:`~ldpstream.estimators.estimate`."""
    design = dictionary_design(mechanism, values, dictionary, design_cache)
    if design is None:
        return None
    truth, positions = design
    words = list(dictionary or [])
    M = truth.shape[2]
    est = estimate(sketch, mechanism, "ls", candidates=words, design_cache=design_cache, factor_cache=factor_cache)
    fitted = np.clip(np.asarray(est.frequencies, dtype=np.float64)[:M], 0.0, 1.0)
    return DictionaryFit(truth, fitted, positions)


def other_regressor(mechanism: Mechanism, truth: np.ndarray) -> float:
    """The "other" regressor's value per cell (the hidden mass spread evenly): ``h̄/k`` per bit, ``1/k`` per
    symbol, for a design ``truth`` of shape ``(C, k, M)``."""
    C, k, M = truth.shape
    return float(truth.sum() / max(M * C, 1) / k) if _is_bits(mechanism) else 1.0 / float(k)


def dictionary_design(mechanism: Mechanism, values: Sequence[Any], dictionary: Sequence[Any] | None,
                      design_cache: DesignCache | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(truth (C, k, M), positions of the candidates in it)`` of a hashed mechanism's dictionary when its design
    with the "other" regressor is well-determined (at most :data:`DICTIONARY_MAX_FRACTION` of the cells, scaled
    Gram condition number below :data:`DICTIONARY_COND_MAX`) and holds every candidate; else ``None`` (also for a
    direct mechanism or no dictionary). The design comes from ``design_cache`` when given."""
    if dictionary is None or not getattr(mechanism, "needs_value_table", True):
        return None
    words = list(dictionary)
    index = {str(v): i for i, v in enumerate(words)}
    if any(str(v) not in index for v in values):
        return None
    truth = candidate_truth(mechanism, words, design_cache)
    C, k, M = truth.shape
    if DICTIONARY_MAX_FRACTION * C * k < M + 1:
        return None
    X = truth.reshape(C * k, M).astype(np.float64)
    Xa = np.column_stack([X, np.full(C * k, other_regressor(mechanism, truth))])
    gram = Xa.T @ Xa
    d = np.sqrt(np.diag(gram))
    if np.any(d <= 0):
        return None
    eig = np.linalg.eigvalsh(gram / np.outer(d, d))
    if not (eig[0] > 0 and eig[-1] / eig[0] < DICTIONARY_COND_MAX):
        return None
    return truth, np.array([index[str(v)] for v in values], dtype=np.int64)


def other_bit_rates(truth: np.ndarray, freq: np.ndarray, sketch: np.ndarray, q_star: float, p_star: float,
                    hashes: int) -> np.ndarray:
    """``(C, k)`` P(bit j set | Other, cohort c): the module docstring's rule, clipped to ``[p*, q*]``."""
    n_c = sketch[:, 0].astype(np.float64)
    rates = p_star + (q_star - p_star) * truth  # (C, k, S)
    expected = n_c[:, None] * (rates @ freq)  # (C, k)
    left = n_c * (1.0 - float(freq.sum()))
    fallback = p_star + (q_star - p_star) * min(hashes, truth.shape[1]) / truth.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (sketch[:, 1:] - expected) / left[:, None]
    t = np.where(left[:, None] >= MIN_OTHER_REPORTS, t, fallback)
    out: np.ndarray = np.clip(t, p_star, q_star)
    return out


def other_symbol_rates(truth: np.ndarray, freq: np.ndarray, sketch: np.ndarray, hi: float, lo: float) -> np.ndarray:
    """``(C, k)`` P(symbol y | Other, cohort c): the module docstring's rule, clipped to ``[lo, hi]`` and
    renormalized."""
    n_c = sketch.sum(axis=1).astype(np.float64)
    rates = lo + (hi - lo) * truth
    expected = n_c[:, None] * (rates @ freq)
    left = n_c * (1.0 - float(freq.sum()))
    k = truth.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        g = (sketch - expected) / left[:, None]
    g = np.where(left[:, None] >= MIN_OTHER_REPORTS, g, 1.0 / k)
    g = np.clip(g, lo, hi)
    out: np.ndarray = g / g.sum(axis=1, keepdims=True)
    return out


def _cohort_groups(cohorts: np.ndarray, C: int) -> list[np.ndarray]:
    order = np.argsort(cohorts, kind="stable")
    bounds = np.searchsorted(cohorts[order], np.arange(C + 1))
    return [order[bounds[c]:bounds[c + 1]] for c in range(C)]


@dataclass(frozen=True)
class VariableModel:
    """What one variable's likelihoods need that does not depend on the candidate frequencies ``f``: the
    candidates' truth ``(C, k, S)``, the patterns' sketch, and the candidates' log-likelihoods ``(D, S)``
    (built once; :meth:`likelihood` adds the Other column for a given ``f``, so that the self-consistent
    frequencies (docs/math/joint.md#self-consistent-candidate-frequencies-an-experiment-off-by-default) rebuild
    only that column)."""

    mechanism: Mechanism
    values: Sequence[Any]
    cohorts: np.ndarray
    reports: np.ndarray
    other: bool
    truth: np.ndarray
    sketch: np.ndarray | None
    candidate_log: np.ndarray
    groups: list[np.ndarray]
    #: The least squares against the metric's dictionary when it applies (:func:`dictionary_frequencies`).
    dictionary: DictionaryFit | None = None
    #: The caller's caches, for :func:`candidate_frequencies` (None: none).
    design_cache: DesignCache | None = field(default=None, compare=False, repr=False)
    factor_cache: FactorCache | None = field(default=None, compare=False, repr=False)

    @property
    def bits(self) -> bool:
        return _is_bits(self.mechanism)

    @property
    def refinable(self) -> bool:
        """Whether the self-consistent frequencies apply: an Other category of a hashed bit mechanism (O-RAPPOR,
        RAPPOR). Direct mechanisms' frequencies are exactly unbiased; a symbol report identifies nothing beyond
        the cohort means, so for symbols every ``f`` is a fixed point (docs)."""
        return self.other and self.bits and bool(getattr(self.mechanism, "needs_value_table", True))

    def default_frequencies(self) -> np.ndarray:
        """The candidates' rows of the dictionary's least squares when it applies, else
        :func:`candidate_frequencies` of the patterns' own sketch."""
        assert self.sketch is not None
        if self.dictionary is not None:
            f: np.ndarray = self.dictionary.frequencies[self.dictionary.positions]
            total = float(f.sum())
            return f / total if total > 1.0 else f
        return candidate_frequencies(self.mechanism, self.values, self.sketch, design_cache=self.design_cache,
                                     factor_cache=self.factor_cache)

    def likelihood(self, frequencies: np.ndarray | None = None, *, self_consistent: bool = False
                   ) -> VariableLikelihood:
        """The ``(D, S[+1])`` scaled likelihoods with the Other column built from ``frequencies`` (default:
        :meth:`default_frequencies`). ``self_consistent``: ``frequencies`` are the fitted table's own margins
        (a fixed point), so the Other law's influence carries no least-squares Jacobian
        (:attr:`OtherLaw.self_consistent`)."""
        mechanism, truth = self.mechanism, self.truth
        S = truth.shape[2]
        D = len(self.cohorts)
        freq: np.ndarray | None = None
        dictionary = self.dictionary if frequencies is None and not self_consistent else None
        if self.other:
            freq = (self.default_frequencies() if frequencies is None
                    else np.clip(np.asarray(frequencies, dtype=np.float64).ravel()[:S], 0.0, 1.0))
            if freq.shape != (S,):
                raise ParameterError(f"{S} candidates but {freq.size} frequencies")
        width = S + int(self.other)
        logL = np.empty((D, width))
        logL[:, :S] = self.candidate_log
        law: OtherLaw | None = None
        if self.other:
            assert freq is not None and self.sketch is not None
            sketch = self.sketch
            if not self.bits:
                hi, lo = mechanism.response_rates
                g = other_symbol_rates(truth, freq, sketch, hi, lo)
                logL[:, S] = np.log(g[self.cohorts, np.asarray(self.reports, dtype=np.int64)])
                law = _other_law(mechanism, self.values, truth, freq, sketch.astype(np.float64),
                                 sketch.sum(axis=1).astype(np.float64), lo + (hi - lo) * truth, float(lo),
                                 float(hi), g, self_consistent, dictionary)
            else:
                qs, ps = star_rates(mechanism)
                t_other = other_bit_rates(truth, freq, sketch, qs, ps, int(getattr(mechanism, "hashes", 1)))
                law = _other_law(mechanism, self.values, truth, freq, sketch[:, 1:].astype(np.float64),
                                 sketch[:, 0].astype(np.float64), ps + (qs - ps) * truth, ps, qs, t_other,
                                 self_consistent, dictionary)
                for c, group in enumerate(self.groups):
                    logit = np.log(t_other[c] / (1.0 - t_other[c]))
                    const = np.log(1.0 - t_other[c]).sum()
                    for start in range(0, len(group), CHUNK_ROWS):
                        idx = group[start:start + CHUNK_ROWS]
                        logL[idx, S] = self.reports[idx].astype(np.float32) @ logit + const
        log_scale = logL.max(axis=1) if D else np.zeros(0)
        matrix = np.exp(logL - log_scale[:, None]) if D else np.zeros((0, width))
        return VariableLikelihood(matrix, log_scale, self.other, freq, law)


def variable_model(mechanism: Mechanism, values: Sequence[Any], cohorts: np.ndarray, reports: np.ndarray,
                   counts: np.ndarray, *, other: bool = True, dictionary: Sequence[Any] | None = None,
                   design_cache: DesignCache | None = None, factor_cache: FactorCache | None = None
                   ) -> VariableModel:
    """The candidates' log-likelihoods (module docstring), vectorized, and what the Other column needs
    (``dictionary``: the metric's candidate list, for :func:`dictionary_frequencies`). The caches (the
    caller's; None: none) serve the designs and the candidate frequencies' least squares."""
    truth = candidate_truth(mechanism, values, design_cache)  # (C, k, S)
    C, k, S = truth.shape
    cohorts = np.asarray(cohorts, dtype=np.int64)
    D = len(cohorts)
    sketch = pattern_sketch(mechanism, cohorts, reports, counts) if other else None
    logL = np.empty((D, S))
    groups: list[np.ndarray] = []
    if not _is_bits(mechanism):
        hi, lo = mechanism.response_rates
        y = np.asarray(reports, dtype=np.int64)
        logL[:] = np.where(truth[cohorts, y, :], np.log(hi), np.log(lo))
    else:
        qs, ps = star_rates(mechanism)
        if not (0.0 < ps < qs < 1.0):
            raise ParameterError(f"{mechanism.name}: joint estimation needs 0 < p* < q* < 1")
        bits = np.asarray(reports)
        A, B = np.log(qs / ps), np.log((1.0 - qs) / (1.0 - ps))
        set_bits = truth.sum(axis=1).astype(np.float64)  # (C, S)
        popcount = bits.sum(axis=1, dtype=np.int64).astype(np.float64)
        base = popcount * np.log(ps) + (k - popcount) * np.log(1.0 - ps)
        groups = _cohort_groups(cohorts, C)
        for c, group in enumerate(groups):
            weights = truth[c].astype(np.float32)
            for start in range(0, len(group), CHUNK_ROWS):
                idx = group[start:start + CHUNK_ROWS]
                match = (bits[idx].astype(np.float32) @ weights).astype(np.float64)  # exact: sums of 0/1 products
                logL[idx] = base[idx, None] + A * match + B * (set_bits[c] - match)
    fit = (None if sketch is None else dictionary_frequencies(mechanism, values, dictionary, sketch,
                                                              design_cache=design_cache, factor_cache=factor_cache))
    return VariableModel(mechanism, values, cohorts, np.asarray(reports), other, truth, sketch, logL, groups, fit,
                         design_cache, factor_cache)


def variable_likelihood(
    mechanism: Mechanism,
    values: Sequence[Any],
    cohorts: np.ndarray,
    reports: np.ndarray,
    counts: np.ndarray,
    *,
    other: bool = True,
    frequencies: np.ndarray | None = None,
) -> VariableLikelihood:
    """The ``(D, S[+1])`` per-pattern likelihoods of one variable (module docstring), vectorized.

    ``frequencies``: the candidates' frequencies among all reports for the Other rule (default:
    :func:`candidate_frequencies` of the patterns' own sketch)."""
    return variable_model(mechanism, values, cohorts, reports, counts, other=other).likelihood(frequencies)


def _other_law(mechanism: Mechanism, values: Sequence[Any], truth: np.ndarray, freq: np.ndarray,
               cell_counts: np.ndarray, n_c: np.ndarray, rates: np.ndarray, lo: float, hi: float, law: np.ndarray,
               self_consistent: bool = False, dictionary: DictionaryFit | None = None) -> OtherLaw:
    """The :class:`OtherLaw` of :func:`other_bit_rates` / :func:`other_symbol_rates` (same formulas); with
    ``self_consistent`` frequencies (the fitted margins) no least-squares Jacobian."""
    safe = np.where(n_c > 0, n_c, 1.0)
    means = cell_counts / safe[:, None]
    left = 1.0 - float(freq.sum())
    raw = (means - rates @ freq) / max(left, 1e-12)
    enough = (n_c * left >= MIN_OTHER_REPORTS)[:, None]
    free = enough & (raw > lo) & (raw < hi)
    clipped_sum = np.where(enough[:, 0], np.clip(raw, lo, hi).sum(axis=1), 1.0)
    if _is_bits(mechanism):
        clipped_sum = np.ones_like(clipped_sum)
    jacobian = (np.zeros((len(freq), *means.shape)) if self_consistent
                else frequency_jacobian(mechanism, values, truth, freq, n_c, dictionary))
    return OtherLaw(_is_bits(mechanism), raw, law, free, clipped_sum, means, n_c, rates, freq, jacobian,
                    self_consistent)
