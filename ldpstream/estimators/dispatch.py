"""One entry point that picks the decoder from the mechanism's ``decoder_family`` (no type dispatch)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.base import BitMechanism, Mechanism
from ldpstream.mechanisms.hadamard import HadamardCountMeanSketch, HadamardResponse

from .candidates import decode_bits, decode_orr
from .detection import detect
from .direct import estimate_krr, estimate_unary
from .estimate import Estimate
from .factor_cache import FactorCache

__all__ = ["DESIGN_CACHE_SIZE", "DesignCache", "design_matrix", "estimate"]

#: Number of (mechanism, candidate list) design matrices a :class:`DesignCache` keeps by default (a decoder of 100
#: metrics needs one per metric: each window decodes against it and measures its design effects with it; ≤ 1 MB
#: each).
DESIGN_CACHE_SIZE = 256

#: A design's cache key: the mechanism and its candidate list (``None``: a closed alphabet's own ``range(S)``).
DesignKey = tuple[Mechanism, tuple[Any, ...] | None]


def _build_design(mechanism: Mechanism, candidates: tuple[Any, ...] | None) -> sp.csr_matrix:
    X = sp.csr_matrix(mechanism.design_matrix(None if candidates is None else list(candidates)), dtype=np.float64)
    X.sum_duplicates()
    return X


class DesignCache:
    """A bounded, thread-safe LRU of read-only design matrices by ``(mechanism, tuple(candidates))``, owned by
    its caller (the decoder service keeps one) and passed to :func:`design_matrix` and :func:`estimate`.

    Mechanisms are frozen dataclasses, hashable and compared by parameters, so two equal mechanisms share an
    entry. ``hits`` / ``misses`` count lookups; ``max_entries`` bounds the entries (least recently used out).
    """

    def __init__(self, max_entries: int = DESIGN_CACHE_SIZE) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = int(max_entries)
        self._entries: OrderedDict[DesignKey, sp.csr_matrix] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def design(self, mechanism: Mechanism, candidates: tuple[Any, ...] | None) -> sp.csr_matrix:
        """The design of ``(mechanism, candidates)`` (hashable), built on a miss and kept read-only."""
        key: DesignKey = (mechanism, candidates)
        with self._lock:
            X = self._entries.get(key)
            if X is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return X
            self.misses += 1
        X = _build_design(mechanism, candidates)
        # Shared between calls: make accidental in-place edits fail loudly instead of corrupting later decodes.
        for arr in (X.data, X.indices, X.indptr):
            arr.flags.writeable = False
        with self._lock:
            self._entries[key] = X
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return X

    def clear(self) -> None:
        """Drop every entry and reset the counts (e.g. after changing hashing code in a long-lived process)."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0


def design_matrix(mechanism: Mechanism, candidates: Sequence[Any] | None,
                  cache: DesignCache | None = None) -> sp.csr_matrix:
    """``mechanism.design_matrix(candidates)`` (``None``: a closed alphabet's own ``range(S)``) as canonical
    float64 csr, from ``cache`` when one is given (then read-only and shared with later calls), else built.

    Hashing every candidate in every cohort (MD5 per (cohort, string)) costs far more than small decodes, so a
    caller that decodes the same metric repeatedly (the decoder service) passes its :class:`DesignCache`.
    Candidates that are not hashable (or a mechanism that is not) bypass the cache.
    """
    key = None if candidates is None else tuple(candidates)
    if cache is None:
        return _build_design(mechanism, key)
    try:
        hash((mechanism, key))
    except TypeError:
        return _build_design(mechanism, key)
    return cache.design(mechanism, key)


def _decode_direct_symbol(arr: np.ndarray, mechanism: Mechanism, method: str, **options: Any) -> Estimate:
    return estimate_krr(arr, mechanism.epsilon, method, **options)  # type: ignore[arg-type]


def _decode_direct_bits(arr: np.ndarray, mechanism: BitMechanism, method: str, **options: Any) -> Estimate:
    # k-RAPPOR (estimate_krappor), OUE, subset selection: the unary decoder at the mechanism's own margin rates
    return estimate_unary(arr, mechanism.q_star, mechanism.p_star, method, kind=mechanism.name,  # type: ignore[arg-type]
                          info={"epsilon": mechanism.epsilon}, **options)


def _decode_direct_hadamard(arr: np.ndarray, mechanism: HadamardResponse, method: str, **options: Any) -> Estimate:
    """HR: the transform to agreement counts (:meth:`~ldpstream.mechanisms.HadamardResponse.margin_sketch`,
    O(K log K)), then the unary decoder at ``(e^ε/(e^ε + 1), 1/2)``."""
    q_star, p_star = mechanism.response_rates
    return estimate_unary(mechanism.margin_sketch(arr), q_star, p_star, method, kind=mechanism.name,  # type: ignore[arg-type]
                          info={"epsilon": mechanism.epsilon}, **options)


def _decode_candidates_symbol(
    arr: np.ndarray, design: sp.csr_matrix, mechanism: Mechanism, method: str, **options: Any
) -> Estimate:
    if method == "detect":
        raise ParameterError(
            f"{mechanism.name}: method 'detect' decodes bit sketches (O-RAPPOR, RAPPOR) only; its weights and "
            "tests treat each (cohort, bit) cell as an independent binomial, which an O-RR cohort (one multinomial "
            "over k symbols) is not. Use 'ls', 'nnls', 'project' or 'mle' and Estimate.significant()"
        )
    if getattr(mechanism, "finite_family", False):
        options.setdefault("finite_family", True)
    return decode_orr(arr, design, mechanism.epsilon, method, **options)  # type: ignore[arg-type]


def _decode_candidates_bits(
    arr: np.ndarray, design: sp.csr_matrix, mechanism: BitMechanism | HadamardCountMeanSketch, method: str,
    **options: Any
) -> Estimate:
    if method == "detect":
        return detect(arr, design, mechanism.q_star, mechanism.p_star, **options)
    return decode_bits(arr, design, mechanism.q_star, mechanism.p_star, method, **options)  # type: ignore[arg-type]


def _decode_candidates_hadamard(
    arr: np.ndarray, design: sp.csr_matrix, mechanism: HadamardCountMeanSketch, method: str, **options: Any
) -> Estimate:
    """HCMS: the per-cohort transform to agreement counts, then the bit decoders (as O-RAPPOR with one hash)."""
    return _decode_candidates_bits(mechanism.margin_sketch(arr), design, mechanism, method, **options)


#: Decoders by :data:`~ldpstream.mechanisms.base.DecoderFamily`: over the closed alphabet ``0..k-1`` ...
_DIRECT: dict[str, Callable[..., Estimate]] = {
    "direct_symbol": _decode_direct_symbol,
    "direct_bits": _decode_direct_bits,
    "direct_hadamard": _decode_direct_hadamard,
}
#: ... or against a design matrix (candidates, or a closed alphabet's own).
_CANDIDATES: dict[str, Callable[..., Estimate]] = {
    "candidates_symbol": _decode_candidates_symbol,
    "candidates_bits": _decode_candidates_bits,
    "candidates_hadamard": _decode_candidates_hadamard,
}


def estimate(
    sketch: ArrayLike,
    mechanism: Mechanism,
    method: str = "project",
    candidates: Sequence[Any] | None = None,
    *,
    design_cache: DesignCache | None = None,
    factor_cache: FactorCache | None = None,
    **options: Any,
) -> Estimate:
    """Decode ``sketch`` produced by ``mechanism``, by its ``decoder_family``
    (:data:`~ldpstream.mechanisms.base.DecoderFamily`).

    Without ``candidates``:

    - ``"direct_symbol"`` (k-RR): :func:`estimate_krr` (``mechanism.epsilon``); ``"direct_bits"`` (k-RAPPOR):
      :func:`estimate_krappor`.
    - ``"candidates_*"`` with a closed alphabet (``mechanism.closed`` true, ``support = S``: O-RR, O-RAPPOR):
      decoded against the mechanism's own ``design_matrix(None)`` over the symbols ``0..S−1`` (labels
      ``0..S−1``), with the candidate decoders below and ``other=False`` by default (nothing lies outside a
      closed alphabet). (Summing cohorts and treating the sketch as k-RR / k-RAPPOR would be wrong: each cohort
      permutes the symbols differently and ``mod k`` merges them.)
    - ``"candidates_*"`` with an open alphabet (O-RR, O-RAPPOR, RAPPOR): :class:`~ldpstream.errors.ParameterError`
      (their hashes are only defined on a candidate list).

    With ``candidates``: ``"candidates_symbol"`` (O-RR, :func:`decode_orr`) or ``"candidates_bits"`` (O-RAPPOR /
    RAPPOR: :func:`decode_bits` with ``mechanism.q_star``, ``mechanism.p_star``) against
    ``mechanism.design_matrix(candidates)`` (:func:`design_matrix`, from ``design_cache`` when one is given).

    Caches are the caller's: without them a call does all its work afresh, so two calls with the same input do
    the same work. ``design_cache``: a :class:`DesignCache` the design is taken from and kept in.
    ``factor_cache``: a :class:`~ldpstream.estimators.factor_cache.FactorCache` through which the candidate
    decoders (all methods but ``"detect"``) reuse the weighted Gram factors of earlier decodes of the same
    mechanism and candidates (exact sandwich standard errors for reference weights), keyed by the mechanism
    and the candidate list. The decoder service owns one of each and passes them.
    ``start=`` (a previous solution of the same metric: candidates' frequencies, then "other") warm-starts the
    iterative candidate decoders (``"nnls"``, ``"mle"``); the closed-form decoders and ``"detect"`` ignore it.

    Methods: ``"unbiased" | "truncate" | "project" | "mle"`` for k-RR / k-RAPPOR,
    ``"ls" | "nnls" | "project" | "mle"`` for the candidate decoders, and ``"detect"`` for bit sketches
    (O-RAPPOR, RAPPOR: :func:`~ldpstream.estimators.detection.detect`, default Benjamini–Hochberg at
    q = 0.10; O-RR refuses it with a :class:`~ldpstream.errors.ParameterError`). ``options`` go to the
    decoder (for ``"detect"``: ``correction``, ``alpha``, ``other``, ...).
    """
    family = getattr(mechanism, "decoder_family", None)
    if family not in _DIRECT and family not in _CANDIDATES:
        raise ParameterError(f"mechanism {mechanism!r} has no usable decoder_family")
    arr = np.asarray(sketch)
    if candidates is None:
        if family in _DIRECT:  # closed form, nothing to cache
            options.pop("cache_key", None)
            options.pop("start", None)
            return _DIRECT[family](arr, mechanism, method, **options)
        if not mechanism.closed:
            raise ParameterError(
                f"{mechanism.name}: an open-alphabet hashed mechanism (O-RR, O-RAPPOR, RAPPOR) needs a candidate "
                "list to decode against; pass candidates=[...]"
            )
        labels = options.pop("labels", list(range(int(getattr(mechanism, "support", 0)))))
        # The alphabet is complete: no mass can fall outside it, so no "other" term unless asked.
        options.setdefault("other", False)
        design = design_matrix(mechanism, None, design_cache)
    else:
        if family not in _CANDIDATES:
            raise ParameterError(f"{mechanism.name}: a {family} mechanism is decoded without a candidate list")
        labels = options.pop("labels", list(candidates))
        design = design_matrix(mechanism, candidates, design_cache)
    if method == "detect":
        options.pop("start", None)  # detection runs no iterative decoder to warm-start
    elif factor_cache is not None:
        key = (mechanism, None if candidates is None else tuple(candidates))
        try:
            hash(key)
            options.update(factor_cache=factor_cache, cache_key=key)
        except TypeError:  # unhashable candidates or mechanism: no cache
            pass
    return _CANDIDATES[family](arr, design, mechanism, method, labels=labels, **options)
