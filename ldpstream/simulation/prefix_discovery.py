"""Simulated prefix-extension discovery: clients drawn from a ranked string list, split uniformly into the scheme's
groups, each group's OLH sketch drawn exactly in distribution (:meth:`~ldpstream.mechanisms.orr.ORR.simulate_sketch`
on the counts of each distinct prefix), decoded (:func:`~ldpstream.estimators.discovery.prefixes.discover_prefixes`)
and scored against the truth and against the perfect dictionary: every client reporting its whole string through
the same OLH, decoded against the true list with the same test (docs/math/dictionary.md#prefix-extension)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.discovery.prefixes import (
    PrefixResult,
    PrefixScheme,
    benjamini_hochberg,
    discover_prefixes,
    harmonic,
    prefix_estimates,
)

__all__ = ["PrefixRun", "run_prefix_discovery", "simulate_prefix_sketch"]


def simulate_prefix_sketch(scheme: PrefixScheme, strings: Sequence[str], probabilities: np.ndarray, n: int,
                           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The ``(G·H, k)`` sketch of ``n`` clients (each in a uniform cohort, so a uniform group), and their counts
    per string (seeded: simulation)."""
    if n < 1:
        raise ParameterError("need at least one client")
    mech = scheme.mechanism
    counts = rng.multinomial(n, np.asarray(probabilities, dtype=np.float64))
    return mech.simulate_sketch(counts, rng, table=mech.symbol_table(list(strings))), counts


@dataclass(frozen=True)
class PrefixRun:
    """A simulated prefix discovery, scored; ``perfect``: the strings the perfect dictionary finds."""

    result: PrefixResult
    true_positives: int
    false_positives: int
    seconds: dict[str, float]
    cpu_seconds: dict[str, float]
    perfect: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": "prefix",
            "discovered": [d.to_dict() for d in self.result.discovered],
            "true_positives": self.true_positives,
            "false_positives": self.false_positives,
            "seconds": dict(self.seconds),
            "cpu_seconds": dict(self.cpu_seconds),
            "steps": [s.to_dict() for s in self.result.steps],
            "alpha": self.result.alpha,
        }
        if self.perfect is not None:
            found = {d.string for d in self.result.discovered}
            out["perfect_dictionary"] = {
                "discovered": list(self.perfect), "true_positives": len(self.perfect),
                "recall": len(found & set(self.perfect)) / len(self.perfect) if self.perfect else None,
            }
        return out


def run_prefix_discovery(scheme: PrefixScheme, strings: Sequence[str], probabilities: np.ndarray, n: int,
                         seed: int, *, alpha: float = 0.10, alpha_step: float | None = None,
                         compare: bool = False) -> PrefixRun:
    """Simulate, discover, score (``compare``: also the perfect dictionary, the same clients' strings reported
    whole)."""
    rng = np.random.default_rng(seed)
    shape = scheme.shape
    truth = {shape.unpadded(shape.padded(s)) for s in strings}
    wall, cpu = time.perf_counter(), time.process_time()
    sketch, drawn = simulate_prefix_sketch(scheme, strings, probabilities, n, rng)
    seconds, cpu_seconds = {"simulate": time.perf_counter() - wall}, {"simulate": time.process_time() - cpu}
    wall, cpu = time.perf_counter(), time.process_time()
    result = discover_prefixes(scheme.mechanism, sketch, alpha=alpha, alpha_step=alpha_step)
    seconds["decode"], cpu_seconds["decode"] = time.perf_counter() - wall, time.process_time() - cpu
    for step in result.steps:
        seconds[f"step_{step.length}"], cpu_seconds[f"step_{step.length}"] = step.seconds, step.cpu_seconds
    found = {d.string for d in result.discovered}
    perfect = None
    if compare:  # every client's whole string through the same OLH: one group, of the whole length
        padded = [shape.padded(s) for s in strings]
        whole = PrefixScheme(epsilon=scheme.epsilon, length=scheme.length, step=1, first=scheme.length,
                             cohorts=scheme.cohorts, alphabet=scheme.alphabet, pad=scheme.pad).mechanism
        sketch = whole.simulate_sketch(drawn, rng, table=whole.symbol_table(list(strings)))  # the same clients
        f, null_se, _ = prefix_estimates(sketch, whole, 0, padded)
        chosen = benjamini_hochberg(stats.norm.sf(f / null_se), alpha / harmonic(len(padded)))  # the dictionary's BY
        perfect = [shape.unpadded(padded[i]) for i in sorted(chosen.tolist())]
    return PrefixRun(result, len(found & truth), len(found - truth), seconds, cpu_seconds, perfect)
