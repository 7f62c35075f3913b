"""Why the joint table's cell intervals under-cover with few-bit RAPPOR: the "Other" nuisance, measured.

The paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E; ``simulation/joint_trials.py``): 100 Zipf(1)
categories, ρ = 0.5, top 5 + Other (6 × 6), ``--n`` pairs per trial, RAPPOR (p = .25, q = .75, f = 0). Per
mode, over ``--trials`` seeds: pooled coverage of the 36 cell intervals (cluster SE over trials), mean and sd
of the z-scores, the largest |mean error| and the Other × Other mean error; then how many cells the estimate
flags as not identified (``JointEstimate.identified``, docs/math/joint.md#cells-the-reports-do-not-identify) and
the coverage of the others.

Cell intervals as published (``interval_method``; the stacked sandwich once it exists).

Modes (what the Other rule of ``joint_likelihood`` is given; docs/math/joint.md#the-other-category):

- ``ls``: candidate frequencies f by least squares on the patterns' sketch (the candidates and a uniform
  "other" regressor), Other's per-bit rates from the sketch (the default before the self-consistent
  frequencies: ``estimate_joint(..., self_consistent=False)``);
- ``est``: ``ls``, then f refitted until it equals the fitted table's margins (the experimental fixed point
  of docs/math/joint.md, ``estimate_joint(self_consistent=True)``, with its sandwich);
- ``oracle_f``: the true f (``JointVariable.frequencies``), Other's rates still estimated from the sketch;
- ``oracle``: the true f and the true per-cohort Other rates (the population law of a report of a value
  outside the candidates), i.e. no nuisance estimated at all; what remains is the product-of-bits
  approximation of the Other law;
- ``dict``: f from the marginal least squares against the whole 100-value dictionary (what
  ``JointVariable.frequencies`` is for), Other's rates from the sketch;
- ``dictionary``: as shipped for a metric with a candidate list (``JointVariable.dictionary``): the same
  frequencies as ``dict``, with their own Jacobian in the sandwich, when the dictionary's design is
  well-determined; else the least squares on the candidates (``ls``);
- ``refineN``: ``ls``, then N times: f ← the fitted table's margins, Other rebuilt, EM warm-started (the
  sandwich of ``ls``: what was measured before the fixed point was shipped).

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.studies.joint_other_diagnosis --bits 32 --hashes 2``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ldpstream.estimators.joint.likelihood as jl
from ldpstream.estimators.dispatch import estimate
from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import collapse, sample_pairs, value_names, zipf_association


def dictionary_frequencies(mech: Rappor, names: list[str], cohorts: np.ndarray, reports: np.ndarray,
                           counts: np.ndarray) -> list[float]:
    """The five candidates' frequencies from the marginal least squares against the whole dictionary."""
    sketch = jl.pattern_sketch(mech, cohorts, reports, counts)
    f = np.asarray(estimate(sketch, mech, "ls", candidates=names).frequencies)[:5]
    return [float(x) for x in np.clip(f, 0.0, 1.0)]


def run(bits: int, hashes: int, cohorts: int, trials: int, n: int, mode: str, seed: int) -> None:
    support, top = 100, list(range(5))
    names = value_names(support)
    joint = zipf_association(support, 1.0, 0.5)
    truth = collapse(joint, top, top)
    mech = Rappor(k=bits, hashes=hashes, cohorts=cohorts, p=0.25, q=0.75, f=0.0)
    table = mech.value_table(names)
    z = joint.sum(axis=1)
    every = jl.candidate_truth(mech, names).astype(np.float64)  # (C, k, 100)
    qs, ps = mech.q_star, mech.p_star
    true_rates = ps + (qs - ps) * (every[:, :, 5:] @ z[5:]) / z[5:].sum()
    shipped = jl.other_bit_rates
    if mode == "oracle":
        jl.other_bit_rates = lambda *a, **kw: true_rates
    freq = z[:5].tolist() if mode in ("oracle", "oracle_f") else None
    rng = np.random.default_rng(seed)
    err, cov, zs, refits, sources, kept = [], [], [], [], [], []
    began = time.perf_counter()
    try:
        for _ in range(trials):
            pat = sample_pairs(joint, mech, mech, n, rng, table, table)
            if mode == "dict":
                vx, vy = (JointVariable(mech, names[:5],
                                        frequencies=dictionary_frequencies(mech, names, cohorts, r, pat.counts))
                          for cohorts, r in ((pat.cohort_x, pat.reports_x), (pat.cohort_y, pat.reports_y)))
                est = estimate_joint(pat, vx, vy)
            elif mode == "dictionary":
                var = JointVariable(mech, names[:5], dictionary=names)
                est = estimate_joint(pat, var, var, inversion=False)  # the EM (else the dictionary inversion)
            else:
                var = JointVariable(mech, names[:5], frequencies=freq)
                est = estimate_joint(pat, var, var, self_consistent=mode == "est")
                refits.append(est.info["frequency_refits"])
            for _ in range(int(mode[6:]) if mode.startswith("refine") else 0):
                fx, fy = est.table.sum(axis=1)[:5], est.table.sum(axis=0)[:5]
                est = estimate_joint(pat, JointVariable(mech, names[:5], frequencies=fx.tolist()),
                                     JointVariable(mech, names[:5], frequencies=fy.tolist()), start=est.table)
            sources.append(est.info["frequencies_x"])
            err.append(est.table - truth)
            cov.append((est.low <= truth) & (truth <= est.high))
            zs.append((est.table - truth) / est.std_error)
            kept.append(est.identified_mask())
    finally:
        jl.other_bit_rates = shipped
    e, c, zz, ok = np.array(err), np.array(cov), np.array(zs), np.array(kept).reshape(trials, -1)
    per = c.reshape(trials, -1).mean(axis=1)
    ident = (c.reshape(trials, -1) & ok).sum(axis=1)[ok.any(axis=1)] / ok.sum(axis=1)[ok.any(axis=1)]
    shown = "none" if len(ident) == 0 else f"{ident.mean():.3f}"
    print(f"k={bits} h={hashes} C={cohorts} n={n:,} {mode:<9} coverage {per.mean():.3f} "
          f"(cluster SE {per.std(ddof=1) / np.sqrt(trials):.4f}); z mean {zz.mean():+.2f} sd {zz.std():.2f}; "
          f"max|bias| {np.abs(e.mean(axis=0)).max():.4f}, Other×Other {e.mean(axis=0)[-1, -1]:+.4f} "
          f"({time.perf_counter() - began:.0f} s{f', mean refits {np.mean(refits):.1f}' if mode == 'est' else ''}; "
          f"frequencies {'/'.join(sorted(set(sources)))}); identified cells: {(~ok).sum(axis=1).mean():.1f} of "
          f"{ok.shape[1]} flagged, coverage of the rest {shown}",
          flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bits", type=int, default=32)
    ap.add_argument("--hashes", type=int, default=2)
    ap.add_argument("--cohorts", type=int, default=8)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default="ls,est,oracle_f,oracle")
    a = ap.parse_args()
    for m in a.modes.split(","):
        run(a.bits, a.hashes, a.cohorts, a.trials, a.n, m, a.seed)
