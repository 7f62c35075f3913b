"""Decode time of the candidate decoders before/after a change, in one run (default: ``main`` against the
working tree): the cost of the exact sandwich standard errors.

Each source tree runs in its own subprocess (the ``before`` tree is exported with ``git archive`` to a
temporary directory); each decodes the same simulated sketches (the O-RAPPOR / O-RR set-ups of
bench/orappor_decode.py: C = 64, k = 128, ε = 4, n = 10⁶, Zipf(1.1), h = 1) and reports the fastest of
``--repeat`` wall times (``perf_counter``, no tracemalloc) per method and S, side by side.

Usage: python bench/candidate_se_cost.py [--before main] [--supports 256,1024,4096] [--methods ls,project]
                                         [--mechanisms orappor,orr] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKER = r"""
import json, sys, time
import numpy as np
from ldpstream.distributions import parse_distribution, sample_counts
from ldpstream.estimators.candidates import decode_orappor, decode_orr
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.orr import ORR
cfg = json.loads(sys.argv[1])
out = {}
for kind in cfg["mechanisms"]:
    for S in cfg["supports"]:
        mech = ORR(k=128, epsilon=4.0, cohorts=64) if kind == "orr" else ORappor(k=128, epsilon=4.0, cohorts=64)
        rng = np.random.default_rng(0)
        table = rng.integers(0, 128, (64, S)) if kind == "orr" else rng.integers(0, 128, (64, S, 1))
        X = mech.design_matrix(table)
        sketch = mech.simulate_sketch(sample_counts(parse_distribution("zipf:1.1", S), 10**6, rng), rng, table=table)
        for m in cfg["methods"]:
            best = float("inf")
            for _ in range(cfg["repeat"]):
                t0 = time.perf_counter()
                if kind == "orr":
                    decode_orr(sketch, X, 4.0, m)
                else:
                    decode_orappor(sketch, X, mech.q_star, mech.p_star, m)
                best = min(best, time.perf_counter() - t0)
            out[f"{kind} S={S} {m}"] = best
print(json.dumps(out))
"""


def run(tree: Path, cfg: dict[str, object]) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", WORKER, json.dumps(cfg)], env=env, cwd=tree, check=True,
                         capture_output=True, text=True)
    out: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="main", help="git ref of the 'before' tree")
    ap.add_argument("--supports", default="256,1024,4096")
    ap.add_argument("--methods", default="ls,project")
    ap.add_argument("--mechanisms", default="orappor,orr")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    cfg = {"supports": [int(s) for s in args.supports.split(",")], "methods": args.methods.split(","),
           "mechanisms": args.mechanisms.split(","), "repeat": args.repeat}
    rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    print("# " + " ".join(["python", "bench/candidate_se_cost.py", *(argv if argv is not None else sys.argv[1:])]))
    print(f"# before = {args.before} ({rev}), after = working tree (HEAD {head}); single-threaded BLAS; "
          f"fastest of {args.repeat}; {time.strftime('%Y-%m-%d %H:%M:%S')}")
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "before.tar"
        with archive.open("wb") as fh:
            subprocess.run(["git", "archive", args.before], cwd=ROOT, check=True, stdout=fh)
        tree = Path(tmp) / "before"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        before = run(tree, cfg)
    after = run(ROOT, cfg)
    print(f"{'case':<24} {'before s':>9} {'after s':>9} {'ratio':>6}")
    for key, b in before.items():
        a = after[key]
        print(f"{key:<24} {b:>9.3f} {a:>9.3f} {a / b:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
