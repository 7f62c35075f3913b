"""Where the O-RR joint table's Other × Other bias comes from (issue 10; docs/math/joint.md#the-other-category).

The paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E; ``simulation/joint_trials.py``): 100 Zipf(1)
categories per variable, association ρ (``--rho``, default 0.5: Y copies X half the time), top 5 + Other
(6 × 6), ``--n`` pairs per trial, both variables through open O-RR (k = 32, 8 cohorts, ε = 3). Per mode, over
``--trials`` seeds: pooled coverage of the 36 cell intervals (cluster SE over trials), the z-scores' mean and
sd, the largest |mean error| and the Other × Other mean error with its Monte Carlo SE, and the coverage of the
cells published as identified (``JointEstimate.identified``; docs/math/joint.md#cells-the-reports-do-not-identify:
two O-RR members: every cell is flagged) and of the 35 cells other than Other × Other.

Modes (what the Other rule of ``joint_likelihood`` is given):

- ``est``: f by least squares on the patterns' sketch (the five candidates and a uniform "other" regressor),
  Other's per-cohort symbol law from the sketch: ``estimate_joint`` without a dictionary;
- ``dict``: f by least squares against the whole 100-value dictionary (the point of the live decoder, which
  passes the metric's candidate list as ``JointVariable.dictionary``), given as ``JointVariable.frequencies``;
- ``oracle``: the true f and the true per-cohort Other law g_c(y) = Σ_{v hidden} z_v Q(y | h_c(v)) / Σ z_hidden,
  i.e. no nuisance estimated at all.

What ``oracle`` leaves is the model's own approximation: the Other × Other cell's report-pair law is taken as
the product g^X_c ⊗ g^Y_c' of the two Other laws, which is exact only when X's hidden value and Y's hidden value
are independent given that both are hidden. Two switches remove that dependence: ``--rho 0`` (independent
variables) and ``--y-prefix w`` (Y's values are other strings, so the same hidden value no longer hashes to the
same symbol in X and Y; the association of the *indices* stays). ``--n`` changes the sample size (a
finite-sample effect shrinks with n; a model error does not).

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.studies.joint_orr_other`` (``--modes``, ``--rho``,
``--y-prefix``, ``--n``, ``--trials``, ``--per-cell``).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import ldpstream.estimators.joint.likelihood as jl
from ldpstream.estimators.dispatch import estimate
from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.orr import ORR
from ldpstream.simulation.joint_trials import collapse, sample_pairs, value_names, zipf_association


def run(args: argparse.Namespace, mode: str) -> None:
    support, top = 100, list(range(5))
    names_x, names_y = value_names(support), value_names(support, args.y_prefix)
    joint = zipf_association(support, 1.0, args.rho)
    truth = collapse(joint, top, top)
    mech = ORR(k=args.k, epsilon=args.epsilon, cohorts=args.cohorts)
    tx, ty = mech.value_table(names_x), mech.value_table(names_y)
    z = joint.sum(axis=1)
    hi, lo = mech.response_rates
    laws: dict[bytes, np.ndarray] = {}
    for names in (names_x, names_y):
        every = jl.candidate_truth(mech, names).astype(np.float64)  # (C, k, 100)
        g = lo + (hi - lo) * (every[:, :, 5:] @ z[5:]) / z[5:].sum()
        laws[jl.candidate_truth(mech, names[:5]).tobytes()] = g
    shipped = jl.other_symbol_rates

    def oracle_rates(truth_c: np.ndarray, *_: Any) -> np.ndarray:
        return laws[truth_c.tobytes()]

    if mode == "oracle":
        jl.other_symbol_rates = oracle_rates  # type: ignore[assignment]
    rng = np.random.default_rng(args.seed)
    err, cov, zs, kept = [], [], [], []
    began = time.perf_counter()
    try:
        for _ in range(args.trials):
            pat = sample_pairs(joint, mech, mech, args.n, rng, tx, ty)
            fx: list[float] | None = None
            fy: list[float] | None = None
            if mode == "oracle":
                fx = fy = z[:5].tolist()
            elif mode == "dict":
                fx, fy = (np.clip(np.asarray(estimate(jl.pattern_sketch(mech, c, r, pat.counts), mech, "ls",
                                                      candidates=nm).frequencies)[:5], 0, 1).tolist()
                          for c, r, nm in ((pat.cohort_x, pat.reports_x, names_x),
                                           (pat.cohort_y, pat.reports_y, names_y)))
            est = estimate_joint(pat, JointVariable(mech, names_x[:5], frequencies=fx),
                                 JointVariable(mech, names_y[:5], frequencies=fy))
            err.append(est.table - truth)
            cov.append((est.low <= truth) & (truth <= est.high))
            zs.append((est.table - truth) / est.std_error)
            kept.append(est.identified_mask())
    finally:
        jl.other_symbol_rates = shipped
    e, c, zz, ok = np.array(err), np.array(cov), np.array(zs), np.array(kept)
    per = c.reshape(args.trials, -1).mean(axis=1)
    some = ok.reshape(args.trials, -1).any(axis=1)
    ident = (c & ok).reshape(args.trials, -1).sum(axis=1)[some] / ok.reshape(args.trials, -1).sum(axis=1)[some]
    shown = ("none" if len(ident) < 2 else
             f"{ident.mean():.3f} (cluster SE {ident.std(ddof=1) / np.sqrt(len(ident)):.4f})")
    flagged = (~ok).reshape(args.trials, -1).sum(axis=1).mean()
    rest = np.ones(e[0].shape, dtype=bool)
    rest[-1, -1] = False
    off = c[:, rest].mean(axis=1)
    oo = e[:, -1, -1]
    print(f"O-RR k={args.k} C={args.cohorts} ε={args.epsilon} ρ={args.rho} Y='{args.y_prefix}*' n={args.n:,} "
          f"{mode:<6} coverage {per.mean():.3f} (cluster SE {per.std(ddof=1) / np.sqrt(args.trials):.4f}); "
          f"z mean {zz.mean():+.2f} sd {zz.std():.2f}; max|bias| {np.abs(e.mean(axis=0)).max():.4f}; "
          f"Other×Other {oo.mean():+.4f} (MC SE {oo.std(ddof=1) / np.sqrt(len(oo)):.4f}, "
          f"coverage {c[:, -1, -1].mean():.2f}); the other 35 cells {off.mean():.3f} "
          f"(cluster SE {off.std(ddof=1) / np.sqrt(args.trials):.4f}); "
          f"identified cells {shown} ({flagged:.1f} of {e[0].size} flagged) "
          f"({time.perf_counter() - began:.0f} s)", flush=True)
    if args.per_cell:
        with np.printoptions(precision=2, suppress=True, linewidth=120):
            print(f"  per-cell coverage\n{c.mean(axis=0)}\n  per-cell z mean\n{zz.mean(axis=0)}", flush=True)
        with np.printoptions(precision=4, suppress=True, linewidth=120):
            print(f"  per-cell mean error\n{e.mean(axis=0)}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--cohorts", type=int, default=8)
    ap.add_argument("--epsilon", type=float, default=3.0)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--y-prefix", default="v")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--modes", default="est,dict,oracle")
    ap.add_argument("--per-cell", action="store_true", help="also print each cell's coverage, mean error, z mean")
    a = ap.parse_args()
    for m in a.modes.split(","):
        run(a, m)
