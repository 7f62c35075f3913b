"""Calibration of the joint independence tests with an estimated "Other" law ("if that statistic is not
calibrated for these estimates, use one that is").

``tests/statistical/test_joint_em.py`` calibrates both published statistics on k-RR, whose Other law is exact in
expectation. Here: RAPPOR (``--bits``, h = 2, 8 cohorts, p = .25, q = .75, f = 0) on the paper's 100 Zipf(1)
values, X and Y *independent* (ρ = 0), top 5 + Other (df 25), ``--n`` pairs per trial, ``--trials`` seeds. Printed
per statistic (the paper's T = dᵀ I_p d, which weighs by the observed information alone, and the Wald test of the
interaction contrasts, which uses the published covariance: the stacked sandwich): the Kolmogorov–Smirnov
p-value of its p-values against uniform, the share of p-values below 0.05 and 0.01, and the mean statistic
(its reference, χ²(25), has mean 25).

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.accuracy.joint_independence [--bits 32] [--trials 200]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import sample_pairs, value_names, zipf_association


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bits", type=int, default=32)
    ap.add_argument("--cohorts", type=int, default=8)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    names = value_names(100)
    joint = zipf_association(100, 1.0, 0.0)
    mech = Rappor(k=a.bits, hashes=2, cohorts=a.cohorts, p=0.25, q=0.75, f=0.0)
    table = mech.value_table(names)
    var = JointVariable(mech, names[:5])
    rng = np.random.default_rng(a.seed)
    paper, wald, t_stat, w_stat = [], [], [], []
    began = time.process_time()
    for _ in range(a.trials):
        est = estimate_joint(sample_pairs(joint, mech, mech, a.n, rng, table, table), var, var)
        paper.append(est.independence.p_value)
        wald.append(est.independence.wald_p_value)
        t_stat.append(est.independence.statistic)
        w_stat.append(est.independence.wald_statistic)
    print(f"RAPPOR k={a.bits} h=2 C={a.cohorts}, independent, top 5 + Other (df 25), n={a.n:,}, {a.trials} trials "
          f"({time.process_time() - began:.0f} s CPU)")
    for name, pv, st in (("paper T (information)", paper, t_stat), ("Wald contrasts (sandwich)", wald, w_stat)):
        p = np.array(pv)
        print(f"  {name:<26} KS p {stats.kstest(p, 'uniform').pvalue:.3f}; P(p < .05) {np.mean(p < 0.05):.3f}, "
              f"P(p < .01) {np.mean(p < 0.01):.3f}; mean statistic {np.mean(st):.1f} (χ²(25): 25)", flush=True)


if __name__ == "__main__":
    main()
