"""Honesty of intervals and detections when the candidate list is wrong (docs/math/misfit.md).

RAPPOR k = 128, h = 2, C = 64, p = .25, q = .75, f = .5, 10^6 clients, 200 strings with Zipf(1) frequencies and
200 absent ones (the shape of Google's Chrome-like case). Three lists of 400 candidates: ``complete`` (all 200
true strings and 200 absent), ``unlisted`` (the ``--unlisted`` most frequent true strings replaced by as many
more absent ones), ``none`` (400 absent strings). Per list: the least-squares decoder's pooled coverage of the
listed candidates' 95% intervals, the dispersion φ̂, and detection's detections and false share, with the misfit
correction (ours) and without it (``inflate=False``: the decoders before it). Run::

    python -m bench.accuracy.misfit --seeds $(seq 0 19)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldpstream.estimators.candidates import decode_bits
from ldpstream.estimators.detection import detect
from ldpstream.mechanisms.rappor import Rappor

LISTS = ("complete", "unlisted", "none")


def run(seed: int, listing: str, unlisted: int, inflate: bool) -> dict[str, float]:
    """One seed of one list: coverage, dispersion, detections, false detections, detect's CPU seconds."""
    mech = Rappor(128, 2, 64, 0.25, 0.75, 0.5)
    values = [f"true-{i}" for i in range(200)] + [f"absent-{i}" for i in range(400)]
    table = mech.bloom_table(values)
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, 201)
    counts = np.zeros(len(values), dtype=np.int64)
    counts[:200] = rng.multinomial(10**6, weights / weights.sum())
    sketch = mech.simulate_sketch(counts, rng, table)
    drop = {"complete": 0, "unlisted": unlisted, "none": 200}[listing]
    listed = np.concatenate([np.arange(drop, 200), np.arange(200, 400 + drop)])
    truth = counts[listed] / counts.sum()
    design = mech.design_matrix(table).tocsc()[:, listed].tocsr()
    est = decode_bits(sketch, design, mech.q_star, mech.p_star, "ls", other=True, inflate=inflate)
    low, high = est.ci(0.95, clip=True)
    t0 = time.process_time()
    det = detect(sketch, design, mech.q_star, mech.p_star, other=True, inflate=inflate)
    cpu = time.process_time() - t0
    mask = det.significant(det.info["alpha"], det.info["rule"])
    return {"coverage": float(np.mean((truth >= low) & (truth <= high))),
            "dispersion": est.misfit.dispersion if est.misfit is not None else float("nan"),
            "detections": float(mask.sum()), "false": float(np.sum(mask & (truth == 0))),
            "false_share": float(np.sum(mask & (truth == 0)) / max(int(mask.sum()), 1)), "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--unlisted", type=int, default=10)
    args = parser.parse_args()
    print(f"RAPPOR k=128 h=2 C=64, 10^6 clients, 200 Zipf(1) strings, 400 candidates; seeds {args.seeds}")
    print(f"{'list':<10} {'decoders':<8} {'coverage':>9} {'dispersion':>10} {'detections':>10} {'false':>6} "
          f"{'false share':>11} {'seeds <= 2':>10} {'detect CPU s':>12}")
    for listing in LISTS:
        for inflate, name in ((False, "before"), (True, "ours")):
            rows = [run(seed, listing, args.unlisted, inflate) for seed in args.seeds]
            mean = {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
            few = sum(r["detections"] <= 2 for r in rows)  # seeds with at most 2 detections
            print(f"{listing:<10} {name:<8} {mean['coverage']:9.3f} {mean['dispersion']:10.2f} "
                  f"{mean['detections']:10.1f} {mean['false']:6.1f} {mean['false_share']:11.3f} "
                  f"{few:>4}/{len(rows):<5} {mean['cpu']:12.2f}", flush=True)


if __name__ == "__main__":
    main()
