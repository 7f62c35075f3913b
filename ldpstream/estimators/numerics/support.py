"""OLH support counts ``Σ_c sketch[c, h_c(s)]`` of many candidates, compiled (docs/math/dictionary.md#prefix-extension).

The hash is :func:`~ldpstream.mechanisms.hashing.olh_table_from_keys`'s (``mix(x ⊕ seed_c) mod k``), evaluated in
the loop instead of as a ``(C, S)`` table: numpy needs a dozen passes over C·S words (28 ns per candidate and
cohort, measured), the compiled loop one (4 ns); the result is the same to the last bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["support_counts"]

_kernel: Any = None


def _compiled() -> Any:
    """The numba kernel, compiled on first use."""
    global _kernel
    if _kernel is None:
        import numba

        @numba.njit(nogil=True)  # compiled per process (about 0.4 s): no cache directory to depend on
        def kernel(flat: np.ndarray, k: int, seeds: np.ndarray, keys: np.ndarray, out: np.ndarray) -> None:
            cohorts = seeds.shape[0]
            width = np.uint64(k)
            for j in range(keys.shape[0]):
                x = keys[j]
                acc = 0.0
                for c in range(cohorts):
                    z = (x ^ seeds[c]) + np.uint64(0x9E3779B97F4A7C15)
                    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                    z = z ^ (z >> np.uint64(31))
                    acc += flat[c * k + np.int64(z % width)]
                out[j] = acc

        _kernel = kernel
    return _kernel


def support_counts(sketch: np.ndarray, keys: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """``(S,)`` float64: for each key (:func:`~ldpstream.mechanisms.hashing.olh_keys`), the sketch's count summed
    over the cohorts at the key's hashed symbol; ``sketch`` ``(C, k)``, ``seeds`` the C cohorts'
    (:func:`~ldpstream.mechanisms.hashing.olh_seeds`)."""
    counts = np.ascontiguousarray(sketch, dtype=np.float64)
    c, k = counts.shape
    if seeds.shape != (c,):
        raise ValueError(f"{seeds.shape[0]} seeds for {c} cohorts")
    out = np.empty(len(keys), dtype=np.float64)
    if len(keys):
        _compiled()(counts.ravel(), int(k), np.ascontiguousarray(seeds, dtype=np.uint64),
                    np.ascontiguousarray(keys, dtype=np.uint64), out)
    return out
