"""Does the Other × Other product pair law also bias a direct mechanism's joint table (issue 10;
docs/math/joint.md#cells-the-reports-do-not-identify)?

The paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E; ``simulation/joint_trials.py``): 100 Zipf(1)
categories per variable, ρ = 0.5 (Y copies X half the time, hidden values included), top 5 + Other (6 × 6),
both variables through k-RR (``--k`` 100, ``--epsilon`` 4: every value its own symbol, so the candidate
frequencies are exact and nothing is hashed). Per ``--n`` (comma-separated), over ``--trials`` seeds: pooled
coverage of the 36 cell intervals (cluster SE over trials), the Other × Other mean error with its Monte Carlo SE
and that cell's coverage, and whether the estimate flagged any cell (``JointEstimate.identified``).

A bias that stays while the SEs shrink as n^{-1/2} makes coverage fall with n: that is the signature of the
model error (the Other × Other report-pair law taken as the product of the two Other laws), not of noise.

Run: ``OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python bench/joint_krr_other.py --n 100000,400000,1000000``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.krr import KRR
from ldpstream.simulation.joint_trials import collapse, sample_pairs, zipf_association


def run(n: int, args: argparse.Namespace) -> None:
    joint = zipf_association(100, 1.0, args.rho)
    truth = collapse(joint, range(5), range(5))
    mech = KRR(k=args.k, epsilon=args.epsilon)
    var = JointVariable(mech, list(range(5)))
    rng = np.random.default_rng(args.seed)
    covered, errors, flagged = [], [], []
    began = time.perf_counter()
    for _ in range(args.trials):
        est = estimate_joint(sample_pairs(joint, mech, mech, n, rng), var, var)
        covered.append((est.low <= truth) & (truth <= est.high))
        errors.append(est.table - truth)
        flagged.append(int((~est.identified_mask()).sum()))
    c, e = np.array(covered), np.array(errors)
    per = c.reshape(args.trials, -1).mean(axis=1)
    oo = e[:, -1, -1]
    print(f"k-RR k={args.k} ε={args.epsilon} ρ={args.rho} n={n:,} trials={args.trials}: coverage {per.mean():.3f} "
          f"(cluster SE {per.std(ddof=1) / np.sqrt(args.trials):.4f}); Other×Other {oo.mean():+.4f} "
          f"(MC SE {oo.std(ddof=1) / np.sqrt(args.trials):.4f}, coverage {c[:, -1, -1].mean():.2f}); "
          f"cells flagged {np.mean(flagged):.1f} of {e[0].size} ({time.perf_counter() - began:.0f} s)", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--n", default="100000,400000,1000000")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    for size in a.n.split(","):
        run(int(size), a)
