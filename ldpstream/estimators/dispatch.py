"""One entry point that picks the decoder from the mechanism (duck-typed)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError

from .candidates import decode_bits, decode_orr
from .direct import estimate_krappor, estimate_krr
from .estimate import Estimate

__all__ = ["clear_design_cache", "design_matrix", "estimate"]

#: Number of (mechanism, candidate list) design matrices kept by :func:`design_matrix`.
DESIGN_CACHE_SIZE = 64


@functools.lru_cache(maxsize=DESIGN_CACHE_SIZE)
def _cached_design(mechanism: Any, candidates: tuple[Any, ...] | None) -> sp.csr_matrix:
    X = sp.csr_matrix(mechanism.design_matrix(None if candidates is None else list(candidates)), dtype=np.float64)
    X.sum_duplicates()
    # Shared between calls: make accidental in-place edits fail loudly instead of corrupting later decodes.
    for arr in (X.data, X.indices, X.indptr):
        arr.flags.writeable = False
    return X


def design_matrix(mechanism: Any, candidates: Sequence[Any] | None) -> sp.csr_matrix:
    """``mechanism.design_matrix(candidates)`` (``None``: a closed alphabet's own ``range(S)``), cached.

    The production decoder calls :func:`estimate` every few seconds per metric with the same candidate
    list, and hashing every candidate in every cohort (MD5 per (cohort, string)) costs far more than small
    decodes. The cache is an LRU of :data:`DESIGN_CACHE_SIZE` entries keyed by ``(mechanism,
    tuple(candidates))``: mechanisms are frozen dataclasses, hashable and compared by parameters, so two
    equal mechanisms share an entry. The returned matrix is read-only (canonical csr, float64). Candidates
    that are not hashable (or a mechanism that is not) bypass the cache.
    """
    key = None if candidates is None else tuple(candidates)
    try:
        hash((mechanism, key))
    except TypeError:
        X = sp.csr_matrix(mechanism.design_matrix(None if key is None else list(key)), dtype=np.float64)
        X.sum_duplicates()
        return X
    return _cached_design(mechanism, key)


def clear_design_cache() -> None:
    """Empty the design-matrix cache (e.g. after changing hashing code in a long-lived process)."""
    _cached_design.cache_clear()


def estimate(
    sketch: ArrayLike,
    mechanism: Any,
    method: str = "project",
    candidates: Sequence[Any] | None = None,
    **options: Any,
) -> Estimate:
    """Decode ``sketch`` produced by ``mechanism``.

    Without ``candidates``:

    - closed-alphabet O-RR / O-RAPPOR (``mechanism.closed`` true, ``support = S``): decoded against the
      mechanism's own ``design_matrix(None)`` over the symbols ``0..S−1`` (labels ``0..S−1``), with the
      candidate decoders below and ``other=False`` by default (nothing lies outside a closed alphabet).
      (Summing cohorts and treating the sketch as k-RR / k-RAPPOR would be
      wrong: each cohort permutes the symbols differently and ``mod k`` merges them.)
    - open-alphabet O-RR / O-RAPPOR and RAPPOR: :class:`~ldpstream.errors.ParameterError` (their
      hashes are only defined on a candidate list).
    - k-RR (``report_kind == "symbol"``): :func:`estimate_krr` (``mechanism.epsilon``).
    - k-RAPPOR (``report_kind == "bits"``): :func:`estimate_krappor`.

    With ``candidates``: O-RR (:func:`decode_orr`) or O-RAPPOR / RAPPOR (:func:`decode_bits` with
    ``mechanism.q_star``, ``mechanism.p_star``) against ``mechanism.design_matrix(candidates)``, which is
    cached (:func:`design_matrix`).

    Methods: ``"unbiased" | "truncate" | "project" | "mle"`` for k-RR / k-RAPPOR,
    ``"ls" | "nnls" | "project" | "mle"`` for the candidate decoders. ``options`` go to the decoder.
    """
    kind = getattr(mechanism, "report_kind", None)
    if kind not in ("symbol", "bits"):
        raise ParameterError(f"mechanism {mechanism!r} has no usable report_kind")
    arr = np.asarray(sketch)
    if candidates is None:
        if getattr(mechanism, "closed", False):
            support = int(mechanism.support)
            labels = options.pop("labels", list(range(support)))
            # The alphabet is complete: no mass can fall outside it, so no "other" term unless asked.
            options.setdefault("other", False)
            design = design_matrix(mechanism, None)
        else:
            hashed = hasattr(mechanism, "closed") or hasattr(mechanism, "hashes")
            if hashed or getattr(mechanism, "cohorts", 1) != 1:
                name = getattr(mechanism, "name", type(mechanism).__name__)
                raise ParameterError(
                    f"{name}: an open-alphabet hashed mechanism (O-RR, O-RAPPOR, RAPPOR) needs a candidate "
                    "list to decode against; pass candidates=[...]"
                )
            if kind == "symbol":
                return estimate_krr(arr, mechanism.epsilon, method, **options)  # type: ignore[arg-type]
            return estimate_krappor(arr, mechanism.epsilon, method, **options)  # type: ignore[arg-type]
    else:
        labels = options.pop("labels", list(candidates))
        design = design_matrix(mechanism, candidates)
    if kind == "symbol":
        return decode_orr(arr, design, mechanism.epsilon, method, labels=labels, **options)  # type: ignore[arg-type]
    return decode_bits(
        arr, design, mechanism.q_star, mechanism.p_star, method, labels=labels, **options  # type: ignore[arg-type]
    )
