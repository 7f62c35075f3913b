"""The parameter grids of the hashed mechanisms and their search by the error model.

Docs: docs/math/tuning.md, "Search and selection".

Grids (:func:`grid`: each mechanism's :meth:`~ldpstream.mechanisms.base.Mechanism.tuning_grid`, built by
:mod:`ldpstream.mechanisms.tuning`): O-RR ``k ∈ {2, 3, 4, 5, 6, 8, 16, …}`` up to S (closed) or 2S (open), ``C``
powers of two up to :func:`max_cohorts` (4096, and at most n/100), identifiable points only (``C(k − 1) + 1 >= S``:
each cohort's k responses sum to 1). O-RAPPOR and O-OUE: ``k ∈ {16, …, 4096}`` (closed: up to S),
``C ∈ {1, …, 64}``, ``h ∈ {1, 2}``, ``k·C >= S``; CMS and HCMS the same with h = 1 (one hash per cohort). On an
open alphabet ``C >= 2``: with a single cohort two candidates whose hashes collide (birthday-likely: ~S²/(2k)
pairs) can never be told apart.

Search (:func:`ranked_predictions`): every point is ranked by :func:`ldpstream.simulation.error_model.predict`
under the :func:`~ldpstream.simulation.error_model.criterion` of the decoder. O-RR (its
:attr:`~ldpstream.mechanisms.base.Mechanism.staged_cohort_search`) is searched in two phases: every k with
C ≤ :data:`PHASE1_COHORTS` (and up to 8× its smallest identifiable C: small k are ill-conditioned there), then C
doubles for the 3 best k while each doubling improves the prediction by ≥ 1% (at ε = 0.5 the best points are
k = 3..5 with C = 2048..4096, as the paper found: more cohorts help at low ε). The model cannot rank points closer
than ~1%: among those the cheapest (smallest sketch k·C·h, :func:`cost`) comes first.

Speed (n = 10^6, S = 256, 2 shared cores): the O-RR hash tables dominate a cold start; they are cached per
process (:mod:`ldpstream.simulation.hash_tables`), largest C first so that smaller tables are slices.
Multi-threaded OpenBLAS on a busy 2-core machine made the 256 × 256 factorizations ~50× slower: set
OPENBLAS_NUM_THREADS=1 there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.factory import MECHANISMS
from ldpstream.mechanisms.tuning import MAX_COHORTS, max_cohorts, orr_identifiable
from ldpstream.simulation.error_model import criterion, predict
from ldpstream.simulation.setups import hashed_setup

#: Phase 1 of the staged search (O-RR) covers C up to this (all k); phase 2 doubles C further for the best k.
PHASE1_COHORTS = 256


def grid(name: str, support: int, closed: bool, n: int | None = None) -> list[dict[str, int]]:
    """The parameter grid searched for mechanism ``name``: its
    :meth:`~ldpstream.mechanisms.base.Mechanism.tuning_grid` (module docstring)."""
    cls = MECHANISMS.get(name)
    if cls is None:
        raise ParameterError(f"no grid for {name}")
    return cls.tuning_grid(support, closed, n)


def cost(params: dict[str, Any]) -> int:
    """Size of one sketch, ``k·C·h`` (cohorts and hashes default to 1): the decoding cost grows with it."""
    return int(params.get("k", 1)) * int(params.get("cohorts", 1)) * int(params.get("hashes", 1))


def ranked_predictions(
    name: str,
    epsilon: float,
    support: int,
    n: int,
    p: np.ndarray,
    closed: bool,
    *,
    k: int | None = None,
    cohorts: int | None = None,
    hashes: int | None = None,
    decoder: str = "project",
    reference: str = "empirical",
    refine: int = 3,
    rel_tol: float = 0.01,
    stop_tol: float = 0.01,
    loss: str = "l1",
) -> list[dict[str, Any]]:
    """Grid points of ``name`` (restricted to the given fixed values) with their predicted errors, best
    first by the model of ``decoder`` (:func:`criterion`).

    Search (module docstring): with nothing fixed, O-RR is evaluated on every k for
    C ≤ :data:`PHASE1_COHORTS` (and up to 8× the smallest identifiable C), then, for the ``refine``
    best k, C keeps doubling up to :func:`max_cohorts` while each doubling improves the prediction by at
    least ``stop_tol``. Order: the predicted value (rounded to 6 decimals), then — to prefer cheaper
    decoding when the model cannot tell — the cheapest point (fewest C·k·h) within ``rel_tol`` of the
    best is moved to the front. ``loss="l2sq"`` ranks by the predicted ℓ2² instead (``tune --loss l2sq``).
    """
    key = criterion(decoder) if loss == "l1" else "l2sq"
    points = grid(name, support, closed, n)
    fixed = k is not None or cohorts is not None or hashes is not None
    if fixed:
        want = {"k": k, "cohorts": cohorts, "hashes": hashes}
        points = [pt for pt in points if all(v is None or pt.get(f, 1) == v for f, v in want.items())]
        if not points:
            pt = {"k": k or support, "cohorts": cohorts or 1}
            if "hashes" in (MECHANISMS[name].tuning_parameters or ()):
                pt["hashes"] = hashes or 1
            points = [pt]

    def evaluate(pt: dict[str, int]) -> dict[str, Any]:
        setup = hashed_setup(name, epsilon, support, closed, pt["k"], pt["cohorts"], pt.get("hashes"))
        pred = predict(setup, p, n, reference)
        return {
            **pt, "predicted_l1": pred["l1"], "predicted_l2sq": pred["l2sq"],
            "predicted_l1_projected": pred["l1_projected"], "criterion": pred[key],
        }

    if fixed or not MECHANISMS[name].staged_cohort_search:
        # largest C first, so that the smaller tables are slices of the larger ones (see hash_tables)
        out = [evaluate(pt) for pt in sorted(points, key=lambda pt: -pt["cohorts"])]
    else:
        by_k: dict[int, list[int]] = {}
        for pt in points:
            by_k.setdefault(pt["k"], []).append(pt["cohorts"])
        out = []
        for kk, cs in by_k.items():
            # near the smallest identifiable C the design is ill-conditioned: look 8× above it before
            # judging a small k (k = 3 looked poor at C = 256 and is the best k at C = 4096, ε = 0.5)
            top = max(PHASE1_COHORTS, 8 * cs[0])
            first = [C for C in cs if top >= C]
            # largest C first: the smaller tables are then slices of its table (see hash_tables)
            out.extend(evaluate({"k": kk, "cohorts": C}) for C in reversed(first))
        best_k: dict[int, dict[str, Any]] = {}
        for r in out:
            if r["k"] not in best_k or r["criterion"] < best_k[r["k"]]["criterion"]:
                best_k[r["k"]] = r
        for kk in sorted(best_k, key=lambda v: best_k[v]["criterion"])[:refine]:
            done = {r["cohorts"] for r in out if r["k"] == kk}
            last = max((r for r in out if r["k"] == kk), key=lambda r: r["cohorts"])
            if by_k[kk][-1] not in done:
                # hash the largest table once; the doublings below are its slices
                hashed_setup(name, epsilon, support, closed, kk, by_k[kk][-1], None)
            for C in by_k[kk]:
                if C in done:
                    continue
                r = evaluate({"k": kk, "cohorts": C})
                out.append(r)
                if r["criterion"] > last["criterion"] * (1 - stop_tol):
                    break
                last = r
    if not out:
        raise ParameterError(f"no {name} parameters fit a support of {support} with k={k}, cohorts={cohorts}, "
                             f"hashes={hashes}")
    out.sort(key=lambda d: (round(d["criterion"], 6), d["cohorts"] * d["k"] * d.get("hashes", 1)))
    near = [d for d in out if d["criterion"] <= out[0]["criterion"] * (1 + rel_tol)]
    cheapest = min(near, key=lambda d: (cost(d), d["criterion"]))
    out.remove(cheapest)
    return [cheapest, *out]


__all__ = ["MAX_COHORTS", "PHASE1_COHORTS", "cost", "grid", "max_cohorts", "orr_identifiable", "ranked_predictions"]
