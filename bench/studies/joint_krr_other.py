"""Two direct members whose Others hide associated values (issue 10; docs/math/joint.md#direct-members-the-full-
alphabet): the inversion of the full alphabets (shipped) beside the EM with the product Other × Other law (the
baseline, ``estimate_joint(inversion=False)``), on the same report pairs.

The paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E; ``simulation/joint_trials.py``): ``--support`` (100)
Zipf(1) categories per variable, ρ = ``--rho`` (0.5: Y copies X half the time, hidden values included), top 5 +
Other (6 × 6), both variables through ``--mechanism`` k-RR (``--epsilon`` 4, k = the support: every value its own
symbol) or k-RAPPOR (k bits). Reports come from the mechanisms' ``encode_clients``. Per ``--n`` (comma-separated),
over ``--trials`` seeds, for each estimator: pooled coverage of the 36 cell intervals (cluster SE over trials),
the coverage of the cells published as identified (``JointEstimate.identified``) and how many were flagged, the
Other × Other mean error with its Monte Carlo SE and that cell's coverage, the largest |mean error| in Monte Carlo
SEs, and the mean standard error of the cells relative to the baseline's.

A bias that stays while the SEs shrink as n^{-1/2} makes coverage fall with n: the EM's signature. The inversion
is unbiased (linear in the counts), so its coverage should stay at 0.95 at every n.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.studies.joint_krr_other --n 100000,400000,1000000``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.krappor import KRappor
from ldpstream.mechanisms.krr import KRR
from ldpstream.simulation.joint_trials import collapse, sample_pairs, zipf_association

ESTIMATORS = {"inversion": True, "em": False}


def run(n: int, args: argparse.Namespace) -> None:
    joint = zipf_association(args.support, 1.0, args.rho)
    truth = collapse(joint, range(5), range(5))
    mech = (KRR(k=args.support, epsilon=args.epsilon) if args.mechanism == "krr"
            else KRappor(k=args.support, epsilon=args.epsilon))
    var = JointVariable(mech, list(range(5)))
    rng = np.random.default_rng(args.seed)
    names = [m for m in args.estimators.split(",")]
    covered: dict[str, list[np.ndarray]] = {m: [] for m in names}
    errors: dict[str, list[np.ndarray]] = {m: [] for m in names}
    ses: dict[str, list[np.ndarray]] = {m: [] for m in names}
    flags: dict[str, list[np.ndarray]] = {m: [] for m in names}
    seconds = {m: 0.0 for m in names}
    for _ in range(args.trials):
        pairs = sample_pairs(joint, mech, mech, n, rng)
        for m in names:
            began = time.process_time()
            est = estimate_joint(pairs, var, var, inversion=ESTIMATORS[m])
            seconds[m] += time.process_time() - began
            covered[m].append((est.low <= truth) & (truth <= est.high))
            errors[m].append(est.table - truth)
            ses[m].append(est.std_error)
            flags[m].append(est.identified_mask())
    base_se = np.mean(ses[names[-1]], axis=0)
    for m in names:
        c, e, ident = np.array(covered[m]), np.array(errors[m]), np.array(flags[m])
        per = c.reshape(args.trials, -1).mean(axis=1)
        mc = e.std(axis=0, ddof=1) / np.sqrt(args.trials)
        oo = e[:, -1, -1]
        kept = ident.reshape(args.trials, -1)
        if kept.any():
            share = np.array([row[k].mean() if k.any() else np.nan for row, k in
                              zip(c.reshape(args.trials, -1), kept, strict=True)])
            share = share[~np.isnan(share)]
            identified = (f"identified cells {share.mean():.3f} (cluster SE "
                          f"{share.std(ddof=1) / np.sqrt(len(share)) if len(share) > 1 else 0.0:.4f})")
        else:
            identified = "identified cells none"
        print(f"{args.mechanism} k={args.support} ε={args.epsilon} ρ={args.rho} n={n:,} trials={args.trials} "
              f"{m:9s}: coverage {per.mean():.3f} (cluster SE {per.std(ddof=1) / np.sqrt(args.trials):.4f}); "
              f"{identified}, {(~ident).sum(axis=(1, 2)).mean():.1f} of 36 flagged; Other×Other {oo.mean():+.4f} "
              f"(MC SE {oo.std(ddof=1) / np.sqrt(args.trials):.4f}, coverage {c[:, -1, -1].mean():.2f}); "
              f"max |mean error|/MC SE {np.max(np.abs(e.mean(axis=0)) / mc):.1f}; "
              f"mean SE / EM's {np.mean(np.mean(ses[m], axis=0) / base_se):.2f}; "
              f"{seconds[m] / args.trials * 1000:.0f} ms CPU per decode", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mechanism", choices=("krr", "krappor"), default="krr")
    ap.add_argument("--support", type=int, default=100)
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--n", default="100000,400000,1000000")
    ap.add_argument("--estimators", default="inversion,em", help="comma-separated, the baseline last")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    for size in a.n.split(","):
        run(int(size), a)
