"""Standard errors and coverage of O-RAPPOR's published 95% interval against the number of clients.

The setting of tests/statistical/test_window_intervals.py: O-RAPPOR with k = 32 bits, h = 2 hashes, ε = 2, C = 8
cohorts over the closed alphabet of S = 32 values with frequencies from 2% to 4% (``linspace(2, 1, 32)``
normalized). Per number of clients N, ``--trials`` populations (fixed seeds) are drawn, their one-bucket sketch
simulated exactly in distribution (:meth:`~ldpstream.mechanisms.orappor.ORappor.simulate_sketch`) and decoded:

- ``ls``: the unconstrained weighted least squares β̂ (no factor cache). ``SE/SD``: the mean reported sandwich
  standard error over the Monte Carlo sd of β̂ (about the population frequencies), per value, with its mean, min
  and max over the 32 values; the sd's own relative standard error is ``1/sqrt(2(T − 1))`` (normal data), so
  with 32 values the min and max lie about ±2 of those from 1 by chance alone. ``SE/SD emp``: the same about
  the sample's empirical frequencies (mean over values). ``cov pop`` / ``cov emp``: the Wald interval
  β̂ ± 1.96 SE over the population / the sample's empirical frequencies.
- ``published``: the metric's default decoder (``project``, whose interval is the least-squares one,
  ``interval_method = "ls-sandwich"``, clipped to [0, 1]) through the process's factor cache as in the live
  decoder: coverage of the sample's empirical frequencies, the test's truth.
- ``window``: the window of 8 buckets in which the same clients repeat their memoized reports (8 identical
  sketches), through :func:`~ldpstream.decoder.published.decode_window` (design effect 8): coverage of the
  same truth, and ``[0,0]``: the share of the summed sketch's intervals clipped wholly to [0, 0] before
  widening (where the window needs the interval's unclipped centre to reproduce one bucket's interval).

    OPENBLAS_NUM_THREADS=1 python -m bench.accuracy.orappor_coverage [--trials 2000] [--clients 2000,5000,...]
"""

from __future__ import annotations

import argparse
import time
from typing import cast

import numpy as np

from bench.harness import command_line
from ldpstream.decoder.published import decode_sketch, decode_window
from ldpstream.estimators.candidates import decode_bits
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.registry import Registry

Z95 = 1.959963984540054
SPEC = {"mechanism": "orappor", "k": 32, "hashes": 2, "epsilon": 2.0, "cohorts": 8, "support": 32}
BUCKETS = 8


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--clients", default="2000,5000,20000,100000")
    args = ap.parse_args(argv)
    print("# " + command_line("bench.accuracy.orappor_coverage", argv))
    metric = Registry.from_dict({"metrics": {"m": {"id": 1, "bucket_seconds": 3600, **SPEC}}})["m"]
    mech = cast(ORappor, metric.mechanism)
    X = mech.design_matrix(None)
    S = X.shape[1]
    p = np.linspace(2.0, 1.0, S)
    p /= p.sum()
    T = args.trials
    print(f"# {SPEC}, frequencies {p.min():.4f}..{p.max():.4f}, estimator {metric.estimator}, {T} trials per N; "
          f"relative SE of an sd: {1 / np.sqrt(2 * (T - 1)):.4f}")
    head = (f"{'N':>7} {'SE/SD mean':>10} {'min':>6} {'max':>6} {'SE/SD emp':>9} {'ls cov pop':>10} {'cov emp':>8} "
            f"{'published':>9} {'window':>7} {'[0,0]':>6} {'s':>5}")
    print(head)
    print("-" * len(head))
    for n in (int(x) for x in args.clients.split(",")):
        rng = np.random.default_rng(n)
        beta, se, emp = np.empty((T, S)), np.empty((T, S)), np.empty((T, S))
        hit_pub = hit_win = zero = 0
        t0 = time.perf_counter()
        for t in range(T):
            counts = rng.multinomial(n, p)
            sketch = mech.simulate_sketch(counts, rng)
            ls = decode_bits(sketch, X, mech.q_star, mech.p_star, "ls", other=False)
            beta[t], se[t], emp[t] = ls.frequencies, ls.std_errors, counts / n
            low, high = decode_sketch(metric, sketch).ci(0.95, clip=True)
            hit_pub += int(np.sum((low <= emp[t]) & (emp[t] <= high)))
            held = [sketch] * BUCKETS
            summed = np.sum(held, axis=0)
            zero += int(np.sum(decode_sketch(metric, summed).ci(0.95, clip=True).high <= 0))
            low, high = decode_window(metric, summed, held)[0].ci(0.95, clip=True)
            hit_win += int(np.sum((low <= emp[t]) & (emp[t] <= high)))
        ratio = se.mean(axis=0) / beta.std(axis=0, ddof=1)
        ratio_emp = float(np.mean(se.mean(axis=0) / (beta - emp).std(axis=0, ddof=1)))
        cov_pop = np.mean(np.abs(beta - p) <= Z95 * se)
        cov_emp = np.mean(np.abs(beta - emp) <= Z95 * se)
        print(f"{n:>7} {ratio.mean():>10.3f} {ratio.min():>6.3f} {ratio.max():>6.3f} {ratio_emp:>9.3f} "
              f"{cov_pop:>10.4f} {cov_emp:>8.4f} "
              f"{hit_pub / (T * S):>9.4f} {hit_win / (T * S):>7.4f} {zero / (T * S):>6.4f} "
              f"{time.perf_counter() - t0:>5.0f}", flush=True)
    print(f"# binomial SE of a pooled coverage near 0.95 over {T * S} intervals (values of one trial nearly "
          f"independent): {np.sqrt(0.95 * 0.05 / (T * S)):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
