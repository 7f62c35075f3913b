"""Discovery of the frequent strings of a population from its n-gram and full-string reports, without a
dictionary (Fanti, Pihur, Erlingsson 2016 §5; docs/math/dictionary.md).

:func:`discover` runs the stages of the paper on a :class:`~ldpstream.estimators.discovery.reports.DiscoveryCollection`:

1. **n-grams** (``"ngrams"``): each slot's sketch is decoded against all |Σ|^n n-grams with
   :func:`~ldpstream.estimators.detection.detect` (screen, refit, test: the n-grams outnumber the bits, so the
   screening is what makes the test possible); the detected n-grams of slot j form part j of the graph.
2. **pairs** (``"pairs"``): for every pair of slots (a, b), the joint table of the detected n-grams of a and
   of b (each with an "Other" category) is estimated by the joint EM
   (:func:`~ldpstream.estimators.joint.estimate_joint`) on the clients that sent exactly slots a and b.
3. **threshold** (in ``"pairs"``): a cell (u, v) becomes an edge when ``p̂_uv / se_uv ≥ z_edge``, with
   ``z_edge = Φ⁻¹(1 − alpha_edge)`` (default α = 0.05, z = 1.645): a one-sided test of the cell against 0 at
   its own noise level. An absent pair passes with probability about α; a false string needs all
   ``k(k − 1)/2`` of its pairs to pass, and still faces stage 6.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from ..detection import Correction, DetectionEstimate, detect
from ..joint import JointVariable, estimate_joint
from .cliques import k_partite_cliques
from .reports import DiscoveryCollection
from .scheme import DiscoveryScheme

__all__ = ["DiscoveredString", "DiscoveryResult", "decode_full", "discover"]

STAGES = ("ngrams", "pairs", "cliques", "final")


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "discovered": [d.to_dict() for d in self.discovered],
            "ngrams": self.ngrams,
            "edges": {f"{a},{b}": e for (a, b), e in self.edges.items()},
            "candidates": len(self.candidates),
            "seconds": dict(self.seconds),
            "info": dict(self.info),
        }


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
    alpha_edge: float = 0.05,
    alpha: float = 0.10,
    correction: Correction = "bh",
    pattern: str | None = None,
    predicate: Callable[[str], bool] | None = None,
    max_cliques: int = 100_000,
) -> DiscoveryResult:
    """Stages 1–6 (module docstring). ``alpha_ngram``: the level of the n-gram detection (stage 1, with
    ``correction``); ``alpha_edge``: the per-cell level of the pair threshold (stage 3); ``alpha``: the level
    of the final detection (stage 6); ``pattern``/``predicate``: the semantic filters (stage 5), applied to
    the unpadded string; ``max_cliques``: the cap of stage 4."""
    shape, mech = scheme.shape, scheme.ngram
    k = shape.slots
    seconds: dict[str, float] = {}

    began = time.perf_counter()
    grams = shape.all_ngrams()
    design = mech.design_matrix(grams)
    kept: list[np.ndarray] = []
    kept_freq: list[np.ndarray] = []
    for j in range(k):
        est = detect(collection.ngram_sketches[j], design, mech.q_star, mech.p_star, correction, alpha_ngram)
        idx = np.flatnonzero(est.significant(alpha_ngram, correction))
        kept.append(idx)
        kept_freq.append(np.asarray(est.frequencies)[idx])
    seconds["ngrams"] = time.perf_counter() - began

    began = time.perf_counter()
    z_edge = float(stats.norm.isf(alpha_edge))
    edges: dict[tuple[int, int], np.ndarray] = {}
    if all(part.size for part in kept):
        for (a, b), patterns in sorted(collection.pairs.items()):
            if patterns.total == 0:
                edges[(a, b)] = np.zeros((kept[a].size, kept[b].size), dtype=bool)
                continue
            x = JointVariable(mech, [grams[i] for i in kept[a]], frequencies=kept_freq[a].tolist())
            y = JointVariable(mech, [grams[i] for i in kept[b]], frequencies=kept_freq[b].tolist())
            joint = estimate_joint(patterns, x, y, other=True)
            cells = joint.table[: kept[a].size, : kept[b].size]
            se = joint.std_error[: kept[a].size, : kept[b].size]
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.where(se > 0, cells / se, 0.0)
            edges[(a, b)] = z >= z_edge
    seconds["pairs"] = time.perf_counter() - began

    began = time.perf_counter()
    candidates: list[str] = []
    unfiltered = 0
    if len(edges) == k * (k - 1) // 2:
        cliques = k_partite_cliques([part.size for part in kept], edges, limit=max_cliques)
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
    seconds["cliques"] = time.perf_counter() - began

    began = time.perf_counter()
    found: list[DiscoveredString] = []
    if candidates:
        found, _est = decode_full(collection, scheme, candidates, correction, alpha)
    seconds["final"] = time.perf_counter() - began
    seconds["decode"] = sum(seconds[s] for s in STAGES)
    return DiscoveryResult(
        discovered=found,
        ngrams=[[grams[i] for i in part] for part in kept],
        edges={key: int(m.sum()) for key, m in edges.items()},
        candidates=candidates,
        seconds=seconds,
        info={"z_edge": z_edge, "cliques": unfiltered, "alpha_ngram": alpha_ngram, "alpha_edge": alpha_edge,
              "alpha": alpha, "correction": correction},
    )
