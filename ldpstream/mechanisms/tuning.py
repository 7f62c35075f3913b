"""The parameter grids that the tuner (:mod:`ldpstream.simulation.grid_search`) searches for the hashed mechanisms;
each mechanism's :meth:`~ldpstream.mechanisms.base.Mechanism.tuning_grid` builds its own from these.

O-RR: ``k ∈ {2, 3, 4, 5, 6, 8, 16, …}`` up to S (closed) or 2S (open), ``C`` powers of two up to :func:`max_cohorts`,
identifiable points only (``C(k − 1) + 1 >= S``). Bloom-filter grids (O-RAPPOR, O-OUE, and with h = 1 CMS, HCMS):
``k ∈ {16, …, 4096}`` (closed: up to S), ``C ∈ {1, …, 64}``, ``h ∈ {1, 2}``, ``k·C >= S``. On an open alphabet
``C >= 2``. Reasons: docs/math/tuning.md, "Search and selection".
"""

from __future__ import annotations

#: Largest cohort count searched (and never more than n/100, so that a cohort holds ~100 reports).
MAX_COHORTS = 4096


def powers_of_two(lo: int, hi: int) -> list[int]:
    """The powers of two in ``lo..hi``."""
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


def max_cohorts(n: int | None) -> int:
    """The largest C searched for a population of ``n`` (a power of two, at most :data:`MAX_COHORTS`)."""
    cap = MAX_COHORTS if n is None else min(MAX_COHORTS, max(2, int(n) // 100))
    return 1 << (cap.bit_length() - 1)


def orr_identifiable(k: int, cohorts: int, support: int) -> bool:
    """Whether O-RR can identify S candidates: each cohort gives k − 1 independent equations (its k
    responses sum to one), plus the total, so ``C(k − 1) + 1 >= S`` is needed."""
    return cohorts * (k - 1) + 1 >= support


def cohort_range(closed: bool, n: int | None) -> tuple[int, int]:
    """``(C_min, C_max)``: an open alphabet needs two cohorts (with one, two candidates whose hashes collide never
    separate); at most :func:`max_cohorts`."""
    c_min = 1 if closed else 2
    return c_min, max(c_min, max_cohorts(n))


def symbol_grid(support: int, closed: bool, n: int | None) -> list[dict[str, int]]:
    """O-RR's grid of ``(k, cohorts)`` (module docstring)."""
    c_min, c_max = cohort_range(closed, n)
    k_max = support if closed else 2 * support
    ks = sorted({k for k in (2, 3, 4, 5, 6) if k <= k_max} | set(powers_of_two(8, k_max)))
    return [
        {"k": k, "cohorts": C} for k in ks for C in powers_of_two(c_min, c_max) if orr_identifiable(k, C, support)
    ]


def bloom_grid(support: int, closed: bool, n: int | None, hashes: tuple[int, ...]) -> list[dict[str, int]]:
    """The Bloom-filter grid of ``(k, cohorts, hashes)``, or of ``(k, cohorts)`` when ``hashes`` is ``(1,)`` (one
    hash per cohort, Apple's sketches: the cohorts are the hash functions)."""
    c_min, c_max = cohort_range(closed, n)
    k_max = support if closed else 4096
    # a closed alphabet smaller than 16 symbols gets the largest power of two within it (k·C ≥ S below)
    ks = powers_of_two(16, k_max) or powers_of_two(2, k_max)[-1:]
    cs = powers_of_two(c_min, min(64, c_max))
    if hashes == (1,):
        return [{"k": k, "cohorts": C} for k in ks for C in cs if k * C >= support]
    return [{"k": k, "cohorts": C, "hashes": h} for k in ks for C in cs for h in hashes if k * C >= support]
