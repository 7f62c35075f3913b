"""Factorizations of the candidate decoders' weighted Gram matrices, kept across decodes
(docs/math/estimators.md#the-sandwich-from-cached-factors).

**Reference weights.** The weighted least squares ``β = Ga⁻¹ Xaᵀ W z`` (``Ga = Xaᵀ W Xa``) is unbiased for any
fixed weights, with the exact sandwich covariance ``Ga⁻¹ M Ga⁻¹`` for them. A decode of the same design reuses
an earlier decode's weights ``W_ref`` with their ``Ga⁻¹`` and ``B = Xa Ga⁻¹`` (float32) when the weights its
own fit at ``W_ref`` implies are within a factor ``κ`` of them up to a common scale (``max r / min r ≤ κ``,
``r = w / w_ref``; default ``κ = 1.5``, at most ``1 − 4κ/(1 + κ)²`` of efficiency lost). Its estimate is then
the least squares with ``W_ref`` and its standard errors the exact sandwich for them
(:meth:`SandwichMeat.sandwich_diagonal` from ``B``: O((R + nnz)·P) instead of O(P³)).

:class:`FactorCache` keeps, per key (the mechanism, the candidate list and the decoder's options), up to
``per_key`` references, least recently used first out, bounded in bytes overall. Only the exact back end
(``S ≤ exact_se_max``) is cached.

**Information variances** (docs/math/estimators.md#information-variances-from-an-earlier-decode): for the
O-RR maximum likelihood, ``J = Bᵀ diag(d) B`` with ``d = n / m²``; when ``d`` lies within ``[a, b] · d_ref``
cell by cell and ``b/a ≤ κ_I`` (default 1.04), the cache returns ``var_ref / sqrt(a b)``, each standard error
within ``(b/a)^{1/4} − 1 ≤ 1%`` of the exact one (the bound is returned with it).

**Sandwich variances of a grown window** (docs/math/estimators.md#sandwich-variances-of-a-grown-window): when a
decode's counts hold every count of an earlier exact computation on the same reference, each cohort's reports
grew by at most ``variance_growth`` (default 1%), and the fit moved little: the model variance of every cell at
the new fit lies within ``[a, b]`` times its variance at the old one with ``b/a ≤ κ_V`` (default 1.04), the
earlier variances times ``sqrt(a b)`` are returned (``info["se_sandwich"] = "reused"``, with the growth and
``b/a``), each standard error within ``(b/a)^{1/4} − 1 ≤ 1%`` of the exact one; otherwise they are computed
exactly.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp

from .numerics.least_squares import FaceFactor, WeightedLeastSquares
from .numerics.linalg import sandwich_slope_terms, slopes_from_terms, weighted_gram
from .numerics.newton_mle import HeldInformation
from .numerics.sandwich import SandwichMeat

__all__ = ["DEFAULT_INFORMATION_TOLERANCE", "DEFAULT_MAX_BYTES", "DEFAULT_TOLERANCE", "DEFAULT_VARIANCE_GROWTH",
           "DEFAULT_VARIANCE_SPREAD",
           "CachedLeastSquares", "FactorCache", "InformationReference", "ReferenceFactor", "VarianceMemo",
           "symmetric_inverse"]

#: Default bound of a :class:`FactorCache` (bytes of ``Ga⁻¹`` and ``B`` held). The decoder visits every (metric,
#: window) once a refresh, a cyclic pattern: when the references it needs exceed the bound, least-recently-used
#: eviction drops each one just before its next use and most decodes miss. So the bound must hold the working set:
#: 100 metrics of 64 cohorts and 256 candidates (``bench/perf/decoder_scaling.py``) need 610 MB (B of a RAPPOR design of
#: 64 × 128 cells is 8.4 MB); at 512 MB, 96 of 180 decodes missed (4.7 s CPU a refresh against 3.2 s).
DEFAULT_MAX_BYTES = 1024 * 2**20
#: Default largest spread ``κ`` of ``w / w_ref`` for which reference weights are reused (≤ 4% of variance).
#: The weights hold the cohorts' report counts ``N_c``: in a window of one bucket (``1h``) with ~300 reports a
#: cohort they scatter by ±6% about those of ``all``, a spread of ≈ 1.35 over 64 cohorts.
DEFAULT_TOLERANCE = 1.5
#: Default largest spread ``κ_I = b/a`` of ``d / d_ref`` for which information variances are reused: standard
#: errors within ``κ_I^{1/4} − 1`` (1%) of the exact ones (module docstring).
DEFAULT_INFORMATION_TOLERANCE = 1.04
#: Default largest growth of any cohort's reports for which a reference's sandwich variances are reused (module
#: docstring): 1%.
DEFAULT_VARIANCE_GROWTH = 0.01
#: Default largest spread ``κ_V = b/a`` of the cells' model variances (new fit over old) for which a grown
#: window's sandwich variances are reused: standard errors within ``κ_V^{1/4} − 1`` (1%) of the exact ones.
DEFAULT_VARIANCE_SPREAD = 1.04
#: Exact sandwich computations kept per reference (the windows of one metric that share its weights).
VARIANCE_MEMOS = 3


def symmetric_inverse(G: np.ndarray) -> np.ndarray:
    """``G⁻¹`` of a symmetric positive definite ``G`` (LAPACK potrf + potri), the pseudo-inverse if singular."""
    try:
        chol, info = sl.lapack.dpotrf(G, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError("not positive definite")
        Gi, info = sl.lapack.dpotri(chol, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError("singular")
        return cast(np.ndarray, np.tril(Gi) + np.tril(Gi, -1).T)
    except np.linalg.LinAlgError:
        return cast(np.ndarray, np.linalg.pinv(G, hermitian=True))


@dataclass(eq=False)
class VarianceMemo:
    """The sandwich variances of one exact computation on a reference, with the counts they were computed from
    (``counts``, flattened) and the cohorts' report counts ``cohort_reports``."""

    counts: np.ndarray
    cohort_reports: np.ndarray
    variances: np.ndarray
    #: The model variance of each cell at the fit the variances were computed from.
    cell_variances: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.counts.nbytes + self.cohort_reports.nbytes + self.variances.nbytes
                   + self.cell_variances.nbytes)

    def spread(self, cell_variances: np.ndarray) -> tuple[float, float] | None:
        """``(a, b)``: the least and largest ratio of ``cell_variances`` to this computation's, over the cells
        finite in both (None when the cells with a finite variance differ)."""
        held = self.cell_variances
        live, now = np.isfinite(held) & (held > 0), np.isfinite(cell_variances) & (cell_variances > 0)
        if held.shape != cell_variances.shape or not np.array_equal(live, now) or not live.any():
            return None
        ratio = cell_variances[live] / held[live]
        return float(ratio.min()), float(ratio.max())

    def growth(self, counts: np.ndarray, cohort_reports: np.ndarray) -> float | None:
        """The largest relative growth of a cohort's reports since this computation, when ``counts`` hold every
        count it was computed from (no cell decreased, the same cohorts with reports); else None."""
        held, n_ref = self.counts, self.cohort_reports
        if counts.shape != held.shape or cohort_reports.shape != n_ref.shape:
            return None
        if not np.array_equal(n_ref > 0, cohort_reports > 0) or not np.all(counts >= held):
            return None
        used = n_ref > 0
        if not used.any():
            return None
        return float(np.max(cohort_reports[used] / n_ref[used])) - 1.0


@dataclass(eq=False)
class ReferenceFactor:
    """Reference weights ``w_ref`` of one design, ``Ga⁻¹`` for them, and ``B = Xa Ga⁻¹`` (made on first use)."""

    weights: np.ndarray
    inverse: np.ndarray
    rows: np.ndarray | None = None
    hits: int = field(default=0)
    #: ``Ga`` itself (dense), made on first use by the non-negative least squares' face solves.
    gram: np.ndarray | None = None
    #: The design-only pattern of the sandwich's pair part (:meth:`SandwichMeat.sandwich_diagonal`), made on
    #: first use.
    pair_structure: dict[str, Any] = field(default_factory=dict)
    #: ``Xa = [X, o]`` (sparse), shared by the references of one key: the design of the key, not rebuilt per decode.
    design: sp.csr_matrix | None = None
    #: The last exact sandwich computations on this reference, most recent first (module docstring).
    variance_memos: list[VarianceMemo] = field(default_factory=list)
    #: The non-negative least squares' face factorizations of ``gram`` (:func:`face_solve_constrained_ls`).
    face_factors: dict[bytes, FaceFactor] = field(default_factory=dict)
    #: ``(w_i B_is)² X_is`` at the design's nonzeros and each nonzero's cell, made on first use: the sandwich
    #: slopes are their sums weighted by the cells' variance slopes (:meth:`CachedLeastSquares.variance_slopes`).
    slope_terms: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def nbytes(self) -> int:
        return int(self.weights.nbytes + self.inverse.nbytes + (0 if self.rows is None else self.rows.nbytes)
                   + (0 if self.gram is None else self.gram.nbytes)
                   + sum(a.nbytes for a in self.pair_structure.values())
                   + sum(m.nbytes for m in self.variance_memos)
                   + sum(f.nbytes for f in list(self.face_factors.values()))
                   + (0 if self.slope_terms is None else sum(a.nbytes for a in self.slope_terms)))

    def matches(self, w: np.ndarray, tolerance: float) -> bool:
        """Whether ``w`` is within ``tolerance`` (``max r / min r``, ``r = w / w_ref``) of the reference, with
        the same cells weighted (a cell without reports has weight 0 in both)."""
        ref = self.weights
        used = ref > 0
        if w.shape != ref.shape or not np.array_equal(used, w > 0):
            return False
        if not used.any():
            return False
        ratio = w[used] / ref[used]
        return bool(np.max(ratio) <= tolerance * np.min(ratio))


@dataclass(eq=False)
class InformationReference:
    """Weights ``d_ref`` of an information matrix ``Bᵀ diag(d_ref) B`` and the variances computed from it."""

    weights: np.ndarray
    variances: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.weights.nbytes + self.variances.nbytes)

    def spread(self, d: np.ndarray) -> tuple[float, float] | None:
        """``(min, max)`` of ``d / d_ref`` over the cells weighted in both, or None when the shapes or the sets of
        weighted cells differ (then no bound holds)."""
        ref = self.weights
        used = ref > 0
        if d.shape != ref.shape or not np.array_equal(used, d > 0) or not used.any():
            return None
        ratio = d[used] / ref[used]
        return float(np.min(ratio)), float(np.max(ratio))


class FactorCache:
    """A bounded, thread-safe cache of :class:`ReferenceFactor` per key (module docstring).

    Args:
        max_bytes: bound on the bytes held (``0`` disables the cache: every decode is computed afresh).
        per_key: references kept per key.
        tolerance: ``κ``, the largest spread of ``w / w_ref`` for which a reference is reused.
        information_tolerance: ``κ_I``, the largest spread of ``d / d_ref`` for which information variances are
            reused.
        variance_growth: the largest growth of a cohort's reports for which sandwich variances are reused
            (``0`` computes every one).
        variance_spread: ``κ_V``, the largest spread of the cells' model variances (new fit over old) for which
            they are reused.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, per_key: int = 4,
                 tolerance: float = DEFAULT_TOLERANCE,
                 information_tolerance: float = DEFAULT_INFORMATION_TOLERANCE,
                 variance_growth: float = DEFAULT_VARIANCE_GROWTH,
                 variance_spread: float = DEFAULT_VARIANCE_SPREAD) -> None:
        if tolerance < 1:
            raise ValueError(f"tolerance must be >= 1, got {tolerance}")
        if information_tolerance < 1:
            raise ValueError(f"information_tolerance must be >= 1, got {information_tolerance}")
        self.max_bytes = int(max_bytes)
        self.per_key = int(per_key)
        self.tolerance = float(tolerance)
        self.information_tolerance = float(information_tolerance)
        if variance_growth < 0:
            raise ValueError(f"variance_growth must be >= 0, got {variance_growth}")
        self.variance_growth = float(variance_growth)
        if variance_spread < 1:
            raise ValueError(f"variance_spread must be >= 1, got {variance_spread}")
        self.variance_spread = float(variance_spread)
        self._entries: OrderedDict[Hashable, list[ReferenceFactor]] = OrderedDict()
        #: Information variances per key (:class:`InformationReference`), most recently stored first.
        self._information: OrderedDict[Hashable, list[InformationReference]] = OrderedDict()
        #: Informations the maximum likelihood's Newton steps formed, per key (:meth:`newton_held`).
        self._newton: OrderedDict[Hashable, list[HeldInformation]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.information_hits = 0
        self.information_misses = 0
        self.variance_hits = 0
        #: The bytes held, as of the last exact count plus what :meth:`grown` was told since (an upper bound of
        #: the growth between exact counts; what was dropped by replacement is only subtracted at the next one).
        self._running = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._held()

    def _held(self) -> int:
        return (sum(e.nbytes for refs in self._entries.values() for e in refs)
                + sum(e.nbytes for refs in self._information.values() for e in refs)
                + sum(e.nbytes for held in self._newton.values() for e in held))

    def newton_held(self, key: Hashable) -> list[HeldInformation] | None:
        """The list of informations that :func:`~ldpstream.estimators.numerics.newton_mle.newton_multinomial`
        keeps for the design ``key`` across decodes (its ``held``; the windows of a metric find theirs in it when
        their weights are within 1%: the same maximizer, fewer informations formed); None when the cache is
        disabled. The bytes it grows by are counted at the next bound check (:meth:`grown`)."""
        with self._lock:
            if not self.enabled:
                return None
            held = self._newton.setdefault(key, [])
            self._newton.move_to_end(key)
            return held

    def information_variances(self, key: Hashable, d: np.ndarray) -> tuple[np.ndarray, float] | None:
        """Variances of the information ``Bᵀ diag(d) B`` of ``key`` from a stored reference whose weights are
        within the spread ``information_tolerance`` of ``d`` (module docstring): ``(var_ref / sqrt(a b), bound)``
        with ``bound = (b/a)^{1/4} − 1`` the largest relative error of their square roots; None (a miss) when
        no reference is that close."""
        with self._lock:
            refs = self._information.get(key)
            if not refs:
                return None
            self._information.move_to_end(key)
            for ref in refs:
                spread = ref.spread(d)
                if spread is None:
                    continue
                a, b = spread
                if b <= self.information_tolerance * a:
                    self.information_hits += 1
                    refs.remove(ref)  # most recently used first, so that misses evict the unused ones
                    refs.insert(0, ref)
                    return ref.variances / np.sqrt(a * b), float((b / a) ** 0.25 - 1.0)
        return None

    def add_information(self, key: Hashable, d: np.ndarray, variances: np.ndarray) -> None:
        """Store the exact variances of the information ``Bᵀ diag(d) B`` of ``key`` (a miss)."""
        with self._lock:
            self.information_misses += 1
            if not self.enabled:
                return
            refs = self._information.setdefault(key, [])
            self._information.move_to_end(key)
            refs.insert(0, InformationReference(np.array(d, dtype=np.float64), np.array(variances, dtype=np.float64)))
            del refs[self.per_key:]
            self._shrink()

    def counted_variance_hit(self) -> None:
        """Count a reuse of sandwich variances (:meth:`CachedLeastSquares.variances`)."""
        with self._lock:
            self.variance_hits += 1

    def __len__(self) -> int:
        with self._lock:
            return sum(len(refs) for refs in self._entries.values())

    def references(self, key: Hashable) -> list[ReferenceFactor]:
        """The references of ``key``, most recently used first."""
        with self._lock:
            refs = self._entries.get(key)
            if refs is None:
                return []
            self._entries.move_to_end(key)
            return list(refs)

    def used(self, key: Hashable, ref: ReferenceFactor) -> None:
        """Record a hit: ``ref`` becomes the first of its key."""
        with self._lock:
            self.hits += 1
            ref.hits += 1
            refs = self._entries.get(key)
            if refs is not None and ref in refs:
                refs.remove(ref)
                refs.insert(0, ref)

    def add(self, key: Hashable, ref: ReferenceFactor) -> None:
        """Store a new reference for ``key`` (a miss)."""
        with self._lock:
            self.misses += 1
            if not self.enabled:
                return
            refs = self._entries.setdefault(key, [])
            self._entries.move_to_end(key)
            refs.insert(0, ref)
            del refs[self.per_key:]
            self._shrink()

    def grown(self, added: int | None = None) -> None:
        """Something held grew (a reference's ``B`` was made, Newton kept an information): re-apply the bound.
        ``added``: by how many bytes; the bound is then checked against a running total (summing every entry is a
        pass over all of them), recomputed exactly when it exceeds the bound. ``None``: check exactly now."""
        with self._lock:
            if added is None:
                self._shrink()
                return
            self._running += int(added)
            if self._running > self.max_bytes:
                self._shrink()

    def resize(self, max_bytes: int) -> None:
        """Change the bound (``0``: disable and empty)."""
        with self._lock:
            self.max_bytes = int(max_bytes)
            self._shrink()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._information.clear()
            self._newton.clear()
            self.hits = self.misses = self.information_hits = self.information_misses = self.variance_hits = 0

    def _shrink(self) -> None:
        """Drop references, least recently used first, until the bytes held are within the bound (called
        when references are added or grow, not on hits)."""
        total = self._held()
        self._running = total
        while self._entries and total > self.max_bytes:
            key, refs = next(iter(self._entries.items()))  # least recently used key
            dropped = refs.pop()  # its least recently used reference
            total -= dropped.nbytes
            if not refs:
                del self._entries[key]
        # Newton's informations (P × P each) before the Gram factors: one refresh forms them again
        while self._newton and total > self.max_bytes:
            key, newton = next(iter(self._newton.items()))
            total -= sum(e.nbytes for e in newton)
            del self._newton[key]
        # information references are small (R + S floats): they go only once no Gram factor is left
        while self._information and total > self.max_bytes:
            key, info_refs = next(iter(self._information.items()))
            total -= info_refs.pop().nbytes
            if not info_refs:
                del self._information[key]
        self._running = total


class CachedLeastSquares:
    """The weighted least squares of :class:`~ldpstream.estimators.numerics.least_squares.WeightedLeastSquares` (same
    attributes and methods as the candidate decoders use) through a :class:`FactorCache`, for the exact back
    end (``S ≤ exact_max``).

    A reference of ``key`` whose weights match those implied by its own fit (module docstring) is used:
    ``β = Ga⁻¹ Xaᵀ W_ref z``, sandwich variances from ``B``. Otherwise the fit is made afresh
    (:class:`WeightedLeastSquares`, pilot weights) and its ``Ga⁻¹`` stored as a new reference.
    ``info["factor_cache"]`` says which (``"hit"`` or ``"miss"``).
    """

    def __init__(
        self,
        z: np.ndarray,
        X: sp.csr_matrix,
        other_col: np.ndarray | None,
        var_fn: Callable[[np.ndarray], np.ndarray],
        *,
        cache: FactorCache,
        key: Hashable,
        exact_max: int = 1024,
        counts: np.ndarray | None = None,
        cohort_reports: np.ndarray | None = None,
    ) -> None:
        references = cache.references(key)
        #: The window's counts and its cohorts' reports, for reusing the sandwich variances of an earlier exact
        #: computation on the same reference (module docstring); None: always computed.
        self._counts = None if counts is None else np.asarray(counts, dtype=np.float64).ravel()
        self._cohort_reports = None if cohort_reports is None else np.asarray(cohort_reports, dtype=np.float64)
        self._var_fn = var_fn
        self._fitted: np.ndarray | None = None
        # the key names the design (mechanism, candidates, "other"): its Xa is the one an earlier decode built
        held = references[0].design if references else None
        width = X.shape[1] + (other_col is not None)
        if held is not None and held.shape == (X.shape[0], width):
            Xa = held
        else:
            Xa = sp.csr_matrix(sp.hstack([X, sp.csr_matrix(other_col[:, None])], format="csr")
                               if other_col is not None else X, copy=True)
            for arr in (Xa.data, Xa.indices, Xa.indptr):  # shared by later decodes: never edited in place
                arr.flags.writeable = False
        self.z, self.X, self.o, self.Xa = z, X, other_col, Xa
        self.info: dict[str, Any] = {"se_method": "exact"}
        self._cache, self._key = cache, key
        #: ``Ga`` when this decode formed it (a miss), for :meth:`dense_gram`.
        self._fresh_gram: np.ndarray | None = None
        #: The model variance of each cell at this decode's fit, once computed (:meth:`cell_variances`).
        self._variances: np.ndarray | None = None
        for ref in references:
            b = np.asarray(self.Xa.T @ (ref.weights * z))
            beta = ref.inverse @ b
            fit = np.asarray(self.Xa @ beta)
            variances = np.asarray(var_fn(fit), dtype=np.float64)
            if ref.matches(self._weights(variances), cache.tolerance):
                cache.used(key, ref)
                self.ref, self.w, self.b, self.beta = ref, ref.weights, b, beta
                self._fitted, self._variances = fit, variances
                self.info["factor_cache"] = "hit"
                return
        wls = WeightedLeastSquares(z, X, other_col, var_fn, exact_max=exact_max)
        G = wls.gram.dense()
        if G is None:  # the dense back end fell back to CG (should not happen for S <= exact_max)
            raise ValueError("CachedLeastSquares needs the dense back end")
        if other_col is not None:
            G = np.block([[G, wls.g[:, None]], [wls.g[None, :], np.array([[wls.gamma]])]])
        self.ref = ReferenceFactor(wls.w, symmetric_inverse(G), design=self.Xa)
        self._fresh_gram = G
        self.w, self.b, self.beta = wls.w, wls.b, wls.beta
        self.info.update(wls.gram.info)
        self.info["factor_cache"] = "miss"
        cache.add(key, self.ref)

    @staticmethod
    def _weights(v: np.ndarray) -> np.ndarray:
        ok = np.isfinite(v) & (v > 0)
        return np.where(ok, 1 / np.where(ok, v, 1.0), 0.0)

    def fitted(self) -> np.ndarray:
        """``Xa β``: the fitted responses (computed once: ``β`` is fixed when the decode is made)."""
        if self._fitted is None:
            self._fitted = np.asarray(self.Xa @ self.beta)
        return self._fitted

    def variances(self, top: Any = (), meat: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """``diag Cov(β)``: ``diag(Ga⁻¹)`` without ``meat``, else the sandwich from ``B = Xa Ga⁻¹`` (exact;
        ``top`` is accepted for the interface and unused)."""
        del top
        if meat is None:
            return np.asarray(np.maximum(np.diag(self.ref.inverse), 0.0))
        if not isinstance(meat, SandwichMeat):
            raise TypeError("CachedLeastSquares needs a SandwichMeat")
        if self.ref.rows is None:
            # float32 halves the largest part of the cache; the variances are sums of squares of its entries
            # (relative error ≈ 1e-7 per entry, ≤ 1e-5 on a standard error,
            # tests/unit/estimators/test_factor_cache.py)
            self.ref.rows = np.asarray(self.Xa @ self.ref.inverse, dtype=np.float32)
            self._cache.grown(self.ref.rows.nbytes)
        self.info["se_sandwich"] = "exact"
        made = not self.ref.pair_structure
        var = np.asarray(np.maximum(meat.sandwich_diagonal(self.ref.rows, self.ref.pair_structure), 0.0))
        if made and self.ref.pair_structure:
            self._cache.grown(sum(a.nbytes for a in self.ref.pair_structure.values()))
        if self._counts is not None and self._cohort_reports is not None and self._cache.variance_growth > 0:
            memos = self.ref.variance_memos
            memos.insert(0, VarianceMemo(self._counts.copy(), self._cohort_reports.copy(), var.copy(),
                                         self.cell_variances()))
            del memos[VARIANCE_MEMOS:]  # small beside B (R + C + P floats each): counted at the next bound check
        return var

    def cell_variances(self) -> np.ndarray:
        """The model variance of each cell at this decode's least-squares fit (what the sandwich's meat holds;
        computed once)."""
        if self._variances is None:
            self._variances = np.asarray(self._var_fn(self.fitted()), dtype=np.float64)
        return self._variances

    def reused_variances(self) -> np.ndarray | None:
        """The variances of an earlier exact computation on this reference whose counts this decode's hold, grown
        by at most ``variance_growth`` per cohort, with every cell's model variance within a spread ``κ_V`` of its
        old one, times ``sqrt(a b)`` (module docstring); None when there is none (then :meth:`variances`
        computes them, and keeps them for the next decodes)."""
        counts, reports, limit = self._counts, self._cohort_reports, self._cache.variance_growth
        if counts is None or reports is None or limit <= 0 or not self.ref.variance_memos:
            return None
        cells: np.ndarray | None = None
        for memo in self.ref.variance_memos:
            growth = memo.growth(counts, reports)
            if growth is None or growth > limit:
                continue
            cells = self.cell_variances() if cells is None else cells
            spread = memo.spread(cells)
            if spread is None or spread[1] > self._cache.variance_spread * spread[0]:
                continue
            self._cache.counted_variance_hit()
            self.info.update(se_sandwich="reused", se_reused_growth=growth, se_reused_spread=spread[1] / spread[0])
            return memo.variances * float(np.sqrt(spread[0] * spread[1]))
        return None

    def variance_slopes(self, cell_slope: np.ndarray) -> np.ndarray | None:
        """``∂ Var(β̂_s)/∂f_s`` per column from the reference's ``B = Xa Ga⁻¹`` (at Xa's nonzeros, O(nnz);
        :func:`~ldpstream.estimators.numerics.linalg.sandwich_slopes`); None before ``B`` is formed."""
        if self.ref.rows is None:
            return None
        Xa = self.Xa
        if self.ref.slope_terms is None:
            cell = np.repeat(np.arange(Xa.shape[0]), np.diff(Xa.indptr))
            at = np.asarray(self.ref.rows[cell, Xa.indices], dtype=np.float64)  # B at Xa's nonzeros
            self.ref.slope_terms = sandwich_slope_terms(Xa, at, self.w)
            self._cache.grown(sum(a.nbytes for a in self.ref.slope_terms))
        return slopes_from_terms(Xa, self.ref.slope_terms, cell_slope)

    def dense_gram(self) -> np.ndarray:
        """``Ga`` (dense, P × P) for the reference weights, kept with the reference once made."""
        if self.ref.gram is None:
            G = self._fresh_gram if self._fresh_gram is not None else weighted_gram(self.Xa, self.w)
            self.ref.gram = G
            self._cache.grown(G.nbytes)
        return self.ref.gram

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``Ga v`` through the sparse design (``Xaᵀ(w ⊙ (Xa v))``)."""
        out: np.ndarray = self.Xa.T @ (self.w * (self.Xa @ v))
        return out

    def lipschitz(self) -> float:
        """Largest row sum of ``Ga`` (its entries are non-negative)."""
        return float(np.max(np.abs(self.matvec(np.ones(self.beta.size)))))
