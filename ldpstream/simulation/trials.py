"""Monte Carlo trials: populations drawn from a distribution, privatized and decoded, with their losses.

Each trial draws ``n`` clients from ``p`` (:func:`ldpstream.distributions.sample_counts`), draws the count
sketch of that population through the exact aggregate simulation
(:meth:`~ldpstream.simulation.setups.Setup.simulate_sketch`; docs/math/mechanisms.md, "Count sketches") and
decodes it with every requested decoder. Losses (:mod:`ldpstream.simulation.losses`; docs/math/tuning.md,
"Losses") are measured against the sample's empirical distribution and against the true ``p``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.distributions import empirical_distribution, sample_counts
from ldpstream.errors import ParameterError
from ldpstream.simulation.losses import LOSSES
from ldpstream.simulation.setups import Setup


@dataclass
class TrialResults:
    """Losses of every trial: ``losses[reference][loss]`` is a ``(T,)`` array; reference is ``empirical``
    (the sample's distribution) or ``true``."""

    losses: dict[str, dict[str, np.ndarray]]
    seconds: float
    #: Fraction of (trial, value) pairs whose published 95% interval contains the value's TRUE probability,
    #: over every value with a true probability above 0, or every listed candidate when the set-up has a
    #: candidate list (None: the decoder publishes no interval).
    coverage: float | None = None
    #: The lowest per-value coverage among values with a true probability of 1% or more.
    coverage_min: float | None = None
    #: Mean candidates detected per trial (decoder ``detect``; None for the others).
    detections: float | None = None
    #: Mean detected candidates per trial that no client holds.
    false_detections: float | None = None

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{reference: {loss: {"mean": …, "median": …}}}``."""
        return {
            ref: {name: {"mean": float(np.mean(v)), "median": float(np.median(v))} for name, v in per.items()}
            for ref, per in self.losses.items()
        }

    def median_l1(self, reference: str = "empirical") -> float:
        return float(np.median(self.losses[reference]["l1"]))


def run_trials(
    setup: Setup,
    p: np.ndarray,
    n: int,
    decoders: str | Sequence[str],
    trials: int,
    rng: np.random.Generator,
    on_trial: Callable[[int], None] | None = None,
) -> dict[str, TrialResults]:
    """``trials`` independent populations of ``n`` clients from ``p``, each privatized (through the exact
    aggregate simulation) and decoded by every decoder in ``decoders`` (the same sketch for all decoders);
    ``on_trial`` receives the number of trials done after each.

    Returns ``{decoder: TrialResults}``; ``seconds`` counts sampling + simulation + that decoder.
    """
    names = [decoders] if isinstance(decoders, str) else list(decoders)
    if trials < 1:
        raise ParameterError(f"trials must be >= 1, got {trials}")
    if n < 1:
        raise ParameterError(f"n must be >= 1, got {n}")
    est: dict[str, list[np.ndarray]] = {d: [] for d in names}
    covered: dict[str, list[np.ndarray] | None] = {d: [] for d in names}
    detected: dict[str, list[tuple[int, int]]] = {d: [] for d in names}
    listed = np.arange(p.size) if setup.listed is None else setup.listed
    truth = p[listed]  # the candidates' true frequencies
    secs = dict.fromkeys(names, 0.0)
    emp = []
    for trial in range(trials):
        t0 = time.perf_counter()
        counts = sample_counts(p, n, rng)
        sketch = setup.simulate_sketch(counts, rng)
        shared = time.perf_counter() - t0
        emp.append(empirical_distribution(counts))
        for d in names:
            t1 = time.perf_counter()
            result = setup.decode_estimate(sketch, d)
            secs[d] += shared + time.perf_counter() - t1
            full = np.zeros(p.size)
            full[listed] = result.frequencies  # unlisted symbols: estimated 0
            est[d].append(full)
            hits = covered[d]
            if hits is not None:
                if result.std_errors is None and result.interval is None:
                    covered[d] = None
                else:
                    low, high = result.ci(0.95, clip=True)
                    hits.append((low <= truth) & (truth <= high))
            if d == "detect":
                mask = result.significant(result.info["alpha"], result.info["rule"])
                detected[d].append((int(mask.sum()), int(np.sum(mask & (truth == 0)))))
        if on_trial is not None:
            on_trial(trial + 1)
    emp_arr = np.asarray(emp)
    out = {}
    for d in names:
        e = np.asarray(est[d])
        losses = {
            "empirical": {name: fn(e, emp_arr) for name, fn in LOSSES.items()},
            "true": {name: fn(e, p) for name, fn in LOSSES.items()},
        }
        found = np.asarray(detected[d], dtype=np.float64).reshape(-1, 2)
        counts_of = (None, None) if not detected[d] else (float(found[:, 0].mean()), float(found[:, 1].mean()))
        coverage = per_value_coverage(covered[d], truth, setup.listed is not None)
        out[d] = TrialResults(losses, secs[d], *coverage, *counts_of)
    return out


def per_value_coverage(hits: list[np.ndarray] | None, p: np.ndarray,
                       every_candidate: bool = False) -> tuple[float | None, float | None]:
    """``(coverage, coverage_min)`` of :class:`TrialResults` from per-trial ``(S,)`` masks of covered values: over
    the values some client holds, or over ``every_candidate`` of a list (its decoys, at 0, included)."""
    if not hits:
        return None, None
    per_value = np.mean(hits, axis=0)
    present, heavy = (p >= 0) if every_candidate else (p > 0), p >= 0.01
    coverage = float(per_value[present].mean()) if present.any() else None
    coverage_min = float(per_value[heavy].min()) if heavy.any() else None
    return coverage, coverage_min
