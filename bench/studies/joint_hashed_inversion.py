"""Two hashed members with a well-determined dictionary (issue 10; docs/math/joint.md#hashed-members-with-a-well-
determined-dictionary): the per-report inversion against the dictionary (shipped) beside the EM with the product
Other × Other law (the baseline, ``estimate_joint(inversion=False)``, every cell flagged by rule 2), on the
same report pairs.

The paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E): 100 Zipf(1) strings per variable, ρ = ``--rho``
(0.5: Y copies X half the time, hidden values included), top 5 + Other (6 × 6), the whole 100-string list as
each member's dictionary. ``--mechanism orr``: open O-RR, k = 32, 8 cohorts, ε = 3 (101 columns in 256 cells);
``rappor``: 32-bit RAPPOR, h = 2, 8 cohorts, p = 0.25, q = 0.75, f = 0 (101 columns in 256 cells).
``--y-prefix w``: Y reports other strings (distinct hashes). Per ``--n`` and estimator, over ``--trials``: pooled
coverage of the 36 cells (cluster SE), of the cells published as identified and how many were flagged, the
Other × Other mean error (MC SE) and its coverage, the largest |mean error| in MC SEs, how often the table was
projected onto the simplex, the mean SE relative to the EM's, CPU per decode.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.studies.joint_hashed_inversion --mechanism orr``
(``--n 100000,400000,1000000`` by default; ``--y-prefix w``; ``--mechanism rappor``)
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import collapse, sample_pairs, value_names, zipf_association

ESTIMATORS = {"inversion": True, "em": False}


def run(n: int, args: argparse.Namespace) -> None:
    names_x, names_y = value_names(100), value_names(100, args.y_prefix)
    joint = zipf_association(100, 1.0, args.rho)
    truth = collapse(joint, range(5), range(5))
    mech = (ORR(k=32, epsilon=3.0, cohorts=8) if args.mechanism == "orr"
            else Rappor(k=32, hashes=2, cohorts=8, p=0.25, q=0.75, f=0.0))
    tx, ty = mech.value_table(names_x), mech.value_table(names_y)
    vx = JointVariable(mech, names_x[:5], dictionary=names_x)
    vy = JointVariable(mech, names_y[:5], dictionary=names_y)
    rng = np.random.default_rng(args.seed)
    names = args.estimators.split(",")
    out: dict[str, dict[str, list[Any]]] = {m: {"cov": [], "err": [], "se": [], "id": [], "proj": []}
                                               for m in names}
    seconds = {m: 0.0 for m in names}
    for _ in range(args.trials):
        pairs = sample_pairs(joint, mech, mech, n, rng, tx, ty)
        for m in names:
            began = time.process_time()
            est = estimate_joint(pairs, vx, vy, inversion=ESTIMATORS[m])
            seconds[m] += time.process_time() - began
            out[m]["cov"].append((est.low <= truth) & (truth <= est.high))
            out[m]["err"].append(est.table - truth)
            out[m]["se"].append(est.std_error)
            out[m]["id"].append(est.identified_mask())
            out[m]["proj"].append(bool(est.info.get("projected", False)))
    base = np.mean(np.array(out[names[-1]]["se"]), axis=0)
    for m in names:
        c, e = np.array(out[m]["cov"]), np.array(out[m]["err"])
        ident = np.array(out[m]["id"]).reshape(args.trials, -1)
        flat = c.reshape(args.trials, -1)
        per = flat.mean(axis=1)
        share = np.array([row[k].mean() for row, k in zip(flat, ident, strict=True) if k.any()])
        shown = ("none" if len(share) == 0 else
                 f"{share.mean():.3f} (cluster SE {share.std(ddof=1) / np.sqrt(max(len(share), 2)):.4f})")
        oo = e[:, -1, -1]
        mc = e.std(axis=0, ddof=1) / np.sqrt(args.trials)
        print(f"{args.mechanism} Y='{args.y_prefix}*' ρ={args.rho} n={n:,} trials={args.trials} {m:9s}: coverage "
              f"{per.mean():.3f} (cluster SE {per.std(ddof=1) / np.sqrt(args.trials):.4f}); identified cells "
              f"{shown}, {(~ident).sum(axis=1).mean():.1f} of 36 flagged; Other×Other {oo.mean():+.4f} (MC SE "
              f"{oo.std(ddof=1) / np.sqrt(args.trials):.4f}, coverage {c[:, -1, -1].mean():.2f}); max |mean error|/MC "
              f"SE {np.max(np.abs(e.mean(axis=0)) / mc):.1f}; projected {np.mean(out[m]['proj']):.2f}; mean SE / EM's "
              f"{np.mean(np.mean(np.array(out[m]['se']), axis=0) / base):.2f}; "
              f"{seconds[m] / args.trials * 1000:.0f} ms CPU per decode", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mechanism", choices=("orr", "rappor"), default="orr")
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--y-prefix", default="v")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--n", default="100000,400000,1000000")
    ap.add_argument("--estimators", default="inversion,em", help="comma-separated, the baseline last")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    for size in a.n.split(","):
        run(int(size), a)
