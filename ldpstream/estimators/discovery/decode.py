"""Discovery of the frequent strings of a population from its n-gram and full-string reports, without a
dictionary (Fanti, Pihur, Erlingsson 2016 §5; docs/math/dictionary.md).

:func:`discover` runs the stages of the paper on a :class:`~ldpstream.estimators.discovery.reports.DiscoveryCollection`:

1. **n-grams** (``"ngrams"``): each slot's sketch is decoded against all |Σ|^n n-grams with
   :func:`~ldpstream.estimators.detection.detect` (screen, refit, test: the n-grams outnumber the bits, so the
   screening is what makes the test possible); the detected n-grams of slot j form part j of the graph.
2. **pairs** (``"pairs"``): for every pair of slots (a, b), the joint table of the detected n-grams of a and
   of b (each with an "Other" category) is estimated by the joint EM
   (:func:`~ldpstream.estimators.joint.estimate_joint`) on the clients that sent exactly slots a and b.
3. **threshold** (in ``"pairs"``): a cell (u, v) becomes an edge when ``p̂_uv / se_uv ≥ z_edge`` (and
   ``p̂_uv > 0``): a one-sided test of the cell against 0 at its own noise level, at the level ``α_edge``
   (:func:`edge_level`) at which the expected number of k-cliques made of absent pairs alone,
   ``Π_j m_j · α_edge^(k(k − 1)/2)`` (``m_j`` n-grams kept at slot j), equals ``null_cliques`` (default 1);
   if the graph still holds more than ``max_candidates`` cliques, α_edge is halved until it does not.
4. **cliques** (``"cliques"``): the k-cliques of the k-partite graph
   (:func:`~ldpstream.estimators.discovery.cliques.k_partite_cliques`) are the candidate strings.
5. **filters** (in ``"cliques"``): optional semantic filters drop candidates (a regular expression that the
   unpadded string must match in full, and/or a predicate).
6. **final** (``"final"``): the full-string reports are decoded against the candidates with
   :func:`~ldpstream.estimators.detection.detect`; the strings its test calls significant (default:
   adaptive Benjamini–Hochberg at 0.10, the marginal decoders' rule) are the discovered dictionary, with
   the published frequency and the refit's standard error.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from ..detection import Correction, DetectionEstimate, detect
from ..dispatch import DesignCache
from ..factor_cache import FactorCache
from ..joint import JointVariable, estimate_joint
from .cliques import CliqueLimitError, k_partite_cliques
from .reports import DiscoveryCollection
from .scheme import DiscoveryScheme

__all__ = ["DiscoveredString", "DiscoveryResult", "decode_full", "discover", "edge_level"]

STAGES = ("ngrams", "pairs", "cliques", "final")

#: A slot pair's joint table and what its rows and columns are: ``(n-grams of slot a, n-grams of slot b, table)``
#: (the table has one more row and column, "Other").
PairTable = tuple[tuple[str, ...], tuple[str, ...], np.ndarray]


@dataclass(frozen=True)
class DiscoveredString:
    """One discovered string (padding removed), its estimated share of the clients and standard error."""

    string: str
    estimate: float
    std_error: float

    def to_dict(self) -> dict[str, Any]:
        return {"string": self.string, "estimate": float(self.estimate), "std_error": float(self.std_error)}


@dataclass(frozen=True)
class DiscoveryResult:
    """The discovered dictionary and what each stage found and cost."""

    discovered: list[DiscoveredString]
    #: detected n-grams per slot
    ngrams: list[list[str]]
    #: kept pairs (edges) per pair of slots
    edges: dict[tuple[int, int], int]
    #: candidate strings (padded) after the filters
    candidates: list[str]
    seconds: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)
    #: The final decode's estimate over every candidate (labels: the padded candidates), when it ran.
    final: DetectionEstimate | None = None
    #: Each slot pair's fitted joint table with its rows' and columns' n-grams (the next decode's EM start).
    pair_tables: dict[tuple[int, int], PairTable] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "discovered": [d.to_dict() for d in self.discovered],
            "ngrams": self.ngrams,
            "edges": {f"{a},{b}": e for (a, b), e in self.edges.items()},
            "candidates": len(self.candidates),
            "seconds": dict(self.seconds),
            "info": dict(self.info),
        }


def edge_level(part_sizes: Sequence[int], null_cliques: float = 1.0, cap: float = 0.5) -> float:
    """The per-cell level α of the pair threshold (stage 3): ``(null_cliques / Π m_j)^(1/E)`` with
    ``E = k(k − 1)/2`` pairs, so that if absent pairs passed independently with probability α the graph would
    hold ``null_cliques`` cliques made of them alone in expectation; at most ``cap``."""
    k = len(part_sizes)
    pairs = k * (k - 1) // 2
    log_tuples = float(np.sum(np.log(np.maximum(np.asarray(part_sizes, dtype=np.float64), 1.0))))
    if pairs == 0 or log_tuples <= 0:
        return cap
    return float(min(cap, np.exp((np.log(null_cliques) - log_tuples) / pairs)))


def decode_full(collection: DiscoveryCollection, scheme: DiscoveryScheme, candidates: Sequence[str],
                correction: Correction = "bh", alpha: float = 0.10) -> tuple[list[DiscoveredString], DetectionEstimate]:
    """Stage 6 (also the perfect-dictionary baseline): :func:`detect` of the full-string sketch against the
    padded ``candidates``; the significant ones, largest estimate first."""
    padded = [scheme.shape.padded(c) for c in candidates]
    est = detect(collection.full_sketch, scheme.full.design_matrix(padded), scheme.full.q_star,
                 scheme.full.p_star, correction, alpha, labels=padded)
    mask = est.significant(alpha, correction)
    se = est.std_errors if est.std_errors is not None else np.full(len(padded), np.nan)
    found = [DiscoveredString(scheme.shape.unpadded(padded[i]), float(est.frequencies[i]), float(se[i]))
             for i in np.flatnonzero(mask)]
    found.sort(key=lambda d: (-d.estimate, d.string))
    return found, est


def discover(
    collection: DiscoveryCollection,
    scheme: DiscoveryScheme,
    *,
    alpha_ngram: float = 0.10,
    alpha_edge: float | None = None,
    null_cliques: float = 1.0,
    alpha: float = 0.10,
    correction: Correction = "bh",
    pattern: str | None = None,
    predicate: Callable[[str], bool] | None = None,
    max_candidates: int = 2_000,
    tolerance: float = 1e-5,
    extra_candidates: Sequence[str] = (),
    pair_starts: Mapping[tuple[int, int], PairTable] | None = None,
    design_cache: DesignCache | None = None,
    factor_cache: FactorCache | None = None,
) -> DiscoveryResult:
    """Stages 1–6 (module docstring). ``alpha_ngram``: the level of the n-gram detection (stage 1, with
    ``correction``); ``alpha_edge``: the per-cell level of the pair threshold (stage 3; ``None``:
    :func:`edge_level` with ``null_cliques``); ``alpha``: the level of the final detection (stage 6);
    ``pattern``/``predicate``: the semantic filters (stage 5), applied to the unpadded string;
    ``max_candidates``: the most cliques the final decode takes (its Gram matrix is dense), reached by raising
    the threshold; ``tolerance``: the pair EM's stopping rule (max |Δp|); ``extra_candidates``: strings decoded
    in the final stage whether or not the graph holds them (the live decoder's dictionary of earlier decodes),
    after the same filters;
    ``pair_starts``: a previous decode's :attr:`DiscoveryResult.pair_tables`: a slot pair whose kept n-grams are
    the same starts its EM from that table (the live decoder's refresh: fewer iterations to the same stopping
    rule); ``design_cache``, ``factor_cache``: the caller's caches for the pairs' joint decodes
    (:func:`~ldpstream.estimators.joint.estimate_joint`); without a design cache, one kept for this call only
    (each slot's n-gram design is built once for all its pairs).

    The pair threshold's standard errors are the observed-information ones of each pair's EM fit (stage 3), not
    the stacked sandwich of the published joint intervals (docs/math/dictionary.md#where-recovery-stops)."""
    shape, mech = scheme.shape, scheme.ngram
    k = shape.slots
    designs = DesignCache() if design_cache is None else design_cache
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}  # process CPU time per stage (wall times mean little on a loaded machine)

    began, began_cpu = time.perf_counter(), time.process_time()
    grams = shape.all_ngrams()
    design = mech.design_matrix(grams)
    kept: list[np.ndarray] = []
    kept_freq: list[np.ndarray] = []
    for j in range(k):
        if mech.reports_per_cohort(collection.ngram_sketches[j]).sum() == 0:
            # no report at this slot yet (a live window's first clients reported other slots): no n-gram kept,
            # so no clique, and the final decode tests only the candidates it is given
            kept.append(np.zeros(0, dtype=np.int64))
            kept_freq.append(np.zeros(0))
            continue
        est = detect(collection.ngram_sketches[j], design, mech.q_star, mech.p_star, correction, alpha_ngram,
                     ls_interval=False)  # only the selection is used: no interval to publish
        idx = np.flatnonzero(est.significant(alpha_ngram, correction))
        kept.append(idx)
        kept_freq.append(np.asarray(est.frequencies)[idx])
    seconds["ngrams"] = time.perf_counter() - began
    cpu["ngrams"] = time.process_time() - began_cpu

    began, began_cpu = time.perf_counter(), time.process_time()
    level = edge_level([part.size for part in kept], null_cliques) if alpha_edge is None else float(alpha_edge)
    zscores: dict[tuple[int, int], np.ndarray] = {}
    pair_tables: dict[tuple[int, int], PairTable] = {}
    iterations = 0
    if all(part.size for part in kept):
        for (a, b), patterns in sorted(collection.pairs.items()):
            if patterns.total == 0:
                zscores[(a, b)] = np.zeros((kept[a].size, kept[b].size))
                continue
            x = JointVariable(mech, [grams[i] for i in kept[a]], frequencies=kept_freq[a].tolist())
            y = JointVariable(mech, [grams[i] for i in kept[b]], frequencies=kept_freq[b].tolist())
            names_a = tuple(grams[i] for i in kept[a])
            names_b = tuple(grams[i] for i in kept[b])
            previous = (pair_starts or {}).get((a, b))
            start = previous[2] if previous is not None and previous[:2] == (names_a, names_b) else None
            joint = estimate_joint(patterns, x, y, other=True, tolerance=tolerance, start=start,
                                   nuisance_sandwich=False, design_cache=designs, factor_cache=factor_cache)
            pair_tables[(a, b)] = (names_a, names_b, joint.table)
            iterations += joint.iterations
            cells = joint.table[: kept[a].size, : kept[b].size]
            se = joint.std_error[: kept[a].size, : kept[b].size]
            with np.errstate(divide="ignore", invalid="ignore"):
                zscores[(a, b)] = np.where((se > 0) & (cells > 0), cells / se, 0.0)
    seconds["pairs"] = time.perf_counter() - began
    cpu["pairs"] = time.process_time() - began_cpu

    began, began_cpu = time.perf_counter(), time.process_time()
    candidates: list[str] = []
    unfiltered = 0
    raised = 0
    edges: dict[tuple[int, int], np.ndarray] = {}
    if len(zscores) == k * (k - 1) // 2:
        while True:
            z_edge = max(float(stats.norm.isf(level)), 0.0)
            edges = {key: (z > 0) & (z >= z_edge) for key, z in zscores.items()}
            try:
                cliques = k_partite_cliques([part.size for part in kept], edges, limit=max_candidates)
                break
            except CliqueLimitError:
                level /= 2
                raised += 1
        unfiltered = len(cliques)
        regex = re.compile(pattern) if pattern is not None else None
        for row in cliques:
            text = shape.assemble([grams[kept[j][row[j]]] for j in range(k)])
            plain = shape.unpadded(text)
            if regex is not None and regex.fullmatch(plain) is None:
                continue
            if predicate is not None and not predicate(plain):
                continue
            candidates.append(text)
    from_graph = len(candidates)
    known = set(candidates)
    for extra in extra_candidates:
        text = shape.padded(extra)
        plain = shape.unpadded(text)
        if text in known or (pattern is not None and re.fullmatch(pattern, plain) is None) or (
                predicate is not None and not predicate(plain)):
            continue
        known.add(text)
        candidates.append(text)
    seconds["cliques"] = time.perf_counter() - began
    cpu["cliques"] = time.process_time() - began_cpu

    began, began_cpu = time.perf_counter(), time.process_time()
    found: list[DiscoveredString] = []
    final = None
    if candidates:
        found, final = decode_full(collection, scheme, candidates, correction, alpha)
    seconds["final"] = time.perf_counter() - began
    cpu["final"] = time.process_time() - began_cpu
    cpu["decode"] = sum(cpu[s] for s in STAGES)
    seconds["decode"] = sum(seconds[s] for s in STAGES)
    return DiscoveryResult(
        discovered=found,
        ngrams=[[grams[i] for i in part] for part in kept],
        edges={key: int(m.sum()) for key, m in edges.items()},
        candidates=candidates,
        seconds=seconds,
        info={"alpha_edge": level, "z_edge": max(float(stats.norm.isf(level)), 0.0), "threshold_raised": raised,
              "cliques": unfiltered, "alpha_ngram": alpha_ngram, "alpha": alpha, "correction": correction,
              "from_graph": from_graph, "carried_over": len(candidates) - from_graph,
              "pair_em_iterations": iterations, "cpu_seconds": cpu,
              "pair_em_warm_starts": sum(1 for key, t in pair_tables.items()
                                         if (pair_starts or {}).get(key, (None, None))[:2] == t[:2])},
        final=final,
        pair_tables=pair_tables,
    )
