"""The worker of bench/perf/candidate_se_cost.py: decode time of the candidate decoders on simulated O-RAPPOR /
O-RR sketches, in the tree it runs against.

Run by path (bench.harness.run_worker: ``PYTHONPATH=TREE python -P bench/perf/candidate_se_worker.py CONFIG``), so
it imports only the standard library, numpy and that tree's ldpstream. CONFIG is a JSON object with
``mechanisms`` (``orappor``, ``orr``), ``supports`` (S), ``methods`` and ``repeat``; printed: one JSON object, the
fastest wall seconds of ``repeat`` decodes per ``"KIND S=S METHOD"``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

from ldpstream.distributions import parse_distribution, sample_counts
from ldpstream.estimators.candidates import decode_orappor, decode_orr
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.orr import ORR


def measure(cfg: dict[str, Any]) -> dict[str, float]:
    """The fastest of ``cfg["repeat"]`` decode wall times per mechanism, S and method (C = 64, k = 128, ε = 4,
    n = 10⁶, Zipf(1.1), one hash)."""
    out: dict[str, float] = {}
    for kind in cfg["mechanisms"]:
        for S in cfg["supports"]:
            mech = ORR(k=128, epsilon=4.0, cohorts=64) if kind == "orr" else ORappor(k=128, epsilon=4.0, cohorts=64)
            rng = np.random.default_rng(0)
            table = rng.integers(0, 128, (64, S)) if kind == "orr" else rng.integers(0, 128, (64, S, 1))
            X = mech.design_matrix(table)
            counts = sample_counts(parse_distribution("zipf:1.1", S), 10**6, rng)
            sketch = mech.simulate_sketch(counts, rng, table=table)
            for m in cfg["methods"]:
                best = float("inf")
                for _ in range(cfg["repeat"]):
                    t0 = time.perf_counter()
                    if isinstance(mech, ORR):
                        decode_orr(sketch, X, 4.0, m)
                    else:
                        decode_orappor(sketch, X, mech.q_star, mech.p_star, m)
                    best = min(best, time.perf_counter() - t0)
                out[f"{kind} S={S} {m}"] = best
    return out


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
