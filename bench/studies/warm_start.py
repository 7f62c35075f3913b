"""Warm-started against cold candidate decoders (``nnls``, ``mle``): one window decoded from its counts, then
again after ``--fresh`` more reports, cold (the decoder's default start) and warm (``start=`` the first
decode's estimate, as the decoder service passes it), in one run.

Setups as ``bench/perf/decoder_refresh.py``: O-RR (k = 32, 64 cohorts), O-RAPPOR (k = 128, 16 cohorts, one hash),
RAPPOR (k = 128, two hashes, 32 cohorts, Google's p, q, f), Zipf(1.1) over 64 and 1024 candidates, 26 buckets
of 20,000 reports. Printed per setup and method: iterations and CPU seconds of each decode, the largest
disagreement of the two points in standard errors, and (``mle``) the log-likelihood of the warm point minus the
cold one's (positive: the warm stop is nearer the maximum). docs/math/estimators.md, "Warm starts of the
iterative decoders".

Usage: python -m bench.studies.warm_start [--reports 20000] [--fresh 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import cast

import numpy as np

from bench.harness import command_line
from ldpstream.distributions import parse_distribution, sample_counts
from ldpstream.estimators import estimate
from ldpstream.registry import Registry

SETUPS = {
    "orr": {"mechanism": "orr", "k": 32, "epsilon": 2.0, "cohorts": 64},
    "orappor": {"mechanism": "orappor", "k": 128, "epsilon": 2.0, "cohorts": 16, "hashes": 1},
    "rappor": {"mechanism": "rappor", "k": 128, "hashes": 2, "cohorts": 32, "p": 0.25, "q": 0.75, "f": 0.5},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=20_000, help="reports per bucket (26 buckets)")
    ap.add_argument("--fresh", type=int, default=200, help="reports added before the second decode")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    metrics = {f"{family}_{S}": {"id": i + 1, **table, "candidates": [f"v{s}" for s in range(S)]}
               for i, (family, table, S) in enumerate((f, t, S) for f, t in SETUPS.items() for S in (64, 1024))}
    registry = Registry.from_dict({"metrics": metrics})
    print("# " + command_line("bench.studies.warm_start", argv))
    print(f"{'setup':<14} {'method':<6} {'cold it':>8} {'cold s':>8} {'warm it':>8} {'warm s':>8} "
          f"{'max|Δ|/SE':>10} {'Δℓ nats':>10}")
    for name, metric in registry.metrics.items():
        mech, candidates = metric.mechanism, metric.candidates
        assert candidates is not None
        table = mech.value_table(list(candidates))
        dist = parse_distribution("zipf:1.1", len(candidates))

        def sketch(n: int, buckets: int, mech: object = mech, dist: np.ndarray = dist,
                   table: object = table) -> np.ndarray:
            total: np.ndarray | np.int64 = np.int64(0)
            for _ in range(buckets):
                counts = sample_counts(dist, n, rng)
                total = total + np.asarray(mech.simulate_sketch(counts, rng, table=table),  # type: ignore[attr-defined]
                                           dtype=np.int64)
            return np.asarray(total)

        before = sketch(args.reports, 26)
        after = before + sketch(args.fresh, 1)
        for method in ("nnls", "mle"):
            first = estimate(before, mech, method, candidates=candidates)
            start = np.append(first.frequencies, cast(float, first.residual))
            t = time.process_time()
            cold = estimate(after, mech, method, candidates=candidates)
            t_cold = time.process_time() - t
            t = time.process_time()
            warm = estimate(after, mech, method, candidates=candidates, start=start)
            t_warm = time.process_time() - t
            diff = float(np.max(np.abs(warm.frequencies - cold.frequencies) / cold.std_errors))
            gain = (f"{warm.info['log_likelihood'] - cold.info['log_likelihood']:10.2e}" if method == "mle"
                    else f"{'':>10}")
            print(f"{name:<14} {method:<6} {cold.info['n_iter']:8d} {t_cold:8.3f} {warm.info['n_iter']:8d} "
                  f"{t_warm:8.3f} {diff:10.2e} {gain}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
