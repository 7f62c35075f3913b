"""Windows over a panel: the same clients report in every bucket of a window, memoized as the SDK does by default,
and a share of them changes value halfway (docs/math/estimators.md#drifting-values).

Each client is simulated: its cohort and its value's permanent response are drawn once (RAPPOR: the PRR; k-RR,
k-RAPPOR, O-RR, O-RAPPOR, OUE: the ε channel, or ``epsilon_permanent``'s with an instantaneous layer), every bucket
reports it (through the instantaneous layer or RAPPOR's IRR when there is one), and a client whose value changes at
bucket ``B // 2`` draws a new permanent response for the new value. A window's truth is the distribution of the
values over its reports. :func:`run_window_trials` decodes each window with the caller's window decoder (the live
decoder's, which widens the intervals for the repeated reports) and measures its coverage of that truth.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ldpstream.distributions import empirical_distribution
from ldpstream.errors import ParameterError
from ldpstream.estimators import Estimate
from ldpstream.mechanisms._common import perturb_bits
from ldpstream.registry import MetricConfig
from ldpstream.simulation.losses import LOSSES
from ldpstream.simulation.trials import TrialResults, per_value_coverage

__all__ = ["WindowDecoder", "channel_inputs", "panel_bucket_sketches", "run_window_trials"]

#: Decodes a window: ``(summed sketch, the buckets' sketches) -> estimate`` with the window's intervals.
WindowDecoder = Callable[[np.ndarray, Sequence[np.ndarray]], Estimate]


def channel_inputs(mechanism: Any, values: np.ndarray, cohorts: np.ndarray,
                   candidates: Sequence[str] | None = None) -> np.ndarray:
    """Each client's pre-noise channel input: its (hashed) symbol in its cohort, or its bits."""
    if mechanism.report_kind == "symbol":
        if mechanism.needs_value_table:
            return np.asarray(mechanism.value_table(None)[cohorts, values], dtype=np.int64)
        return values.astype(np.int64)
    if mechanism.needs_value_table:  # (C, S, h) Bloom bit indices
        bits = np.zeros((values.size, mechanism.k), dtype=bool)
        rows = np.arange(values.size)[:, None]
        bits[rows, np.asarray(mechanism.value_table(candidates))[cohorts, values]] = True
        return bits
    return np.asarray(np.eye(mechanism.k, dtype=bool)[values])


def panel_bucket_sketches(metric: MetricConfig, values: np.ndarray, buckets: int, rng: np.random.Generator, *,
                          changed: np.ndarray | None = None, panel: bool = True) -> list[np.ndarray]:
    """The ``buckets`` sketches of clients holding ``values`` (``changed``: their values from bucket
    ``buckets // 2`` on; module docstring). ``panel=False``: each bucket holds new clients with those values
    (cohorts and permanent responses drawn again), the control without repeated reports."""
    mech: Any = metric.mechanism
    rappor = mech.name == "rappor"
    if not rappor and not hasattr(mech, "layers"):
        raise ParameterError(f"{mech.name} has no longitudinal client model: --buckets needs RAPPOR, k-RR, k-RAPPOR, "
                             "O-RR, O-RAPPOR or OUE")
    half = buckets // 2 if changed is not None else buckets
    movers = np.zeros(values.size, dtype=bool) if changed is None else changed != values
    candidates = list(metric.candidates) if metric.candidates else None
    # RAPPOR: PRR (1 − f/2, f/2) memoized, IRR (q, p) on every report; the others: their two layers
    first, irr = ((1 - mech.f / 2, mech.f / 2), (mech.q, mech.p)) if rappor else mech.layers

    def permanent_of(inputs: np.ndarray) -> np.ndarray:
        return perturb_bits(inputs, first[0], first[1], rng) if rappor else np.asarray(mech.perturb(inputs, first, rng))

    out = []
    for b in range(buckets):
        now = values if b < half or changed is None else changed
        if b == 0 or not panel:
            cohorts = rng.integers(0, mech.cohorts, size=values.size)
            inputs = channel_inputs(mech, now, cohorts, candidates)
            permanent = permanent_of(inputs)
        elif b == half:
            inputs, permanent = inputs.copy(), permanent.copy()
            inputs[movers] = channel_inputs(mech, now[movers], cohorts[movers], candidates)
            permanent[movers] = permanent_of(inputs[movers])
        if rappor:
            reports = perturb_bits(permanent, irr[0], irr[1], rng)
        elif not mech.memoize:
            reports = mech.perturb(inputs, first, rng)
        else:
            reports = permanent if irr is None else mech.perturb(permanent, irr, rng)
        out.append(mech.sketch(cohorts, reports))
    return out


def run_window_trials(metric: MetricConfig, p: np.ndarray, n: int, buckets: int, change: float, trials: int,
                      rng: np.random.Generator, decode: WindowDecoder,
                      on_trial: Callable[[int], None] | None = None) -> TrialResults:
    """``trials`` windows of ``buckets`` buckets over a panel of ``n`` clients drawn from ``p``, a share ``change``
    of them drawing a new value from ``p`` halfway, each decoded by ``decode``. Losses and coverage are measured
    against the window's truth (``empirical``) and losses also against ``p`` (``true``)."""
    if buckets < 1 or not 0 <= change <= 1:
        raise ParameterError(f"need buckets >= 1 and change in [0, 1], got {buckets} and {change}")
    size = len(metric.value_names())
    if size != p.size:
        raise ParameterError(f"the metric has {size} values, the distribution {p.size}")
    half = buckets // 2
    estimates, truths, hits = [], [], []
    seconds = 0.0
    for trial in range(trials):
        t0 = time.perf_counter()
        values = rng.choice(size, size=n, p=p)
        changed = np.where(rng.random(n) < change, rng.choice(size, size=n, p=p), values) if change else None
        later = values if changed is None else changed
        counts = half * np.bincount(values, minlength=size) + (buckets - half) * np.bincount(later, minlength=size)
        truth = empirical_distribution(counts)
        held = panel_bucket_sketches(metric, values, buckets, rng, changed=changed)
        est = decode(np.sum(held, axis=0), held)
        seconds += time.perf_counter() - t0
        estimates.append(np.asarray(est.frequencies, dtype=np.float64))
        truths.append(truth)
        if est.std_errors is not None or est.interval is not None:
            low, high = est.ci(0.95, clip=True)
            hits.append((low <= truth + 1e-12) & (truth <= high + 1e-12))
        if on_trial is not None:
            on_trial(trial + 1)
    e, t = np.asarray(estimates), np.asarray(truths)
    losses = {"empirical": {name: fn(e, t) for name, fn in LOSSES.items()},
              "true": {name: fn(e, p) for name, fn in LOSSES.items()}}
    coverage, coverage_min = per_value_coverage(hits, p) if hits else (None, None)
    return TrialResults(losses, seconds, coverage, coverage_min)
