"""Could a goodness-of-fit test of the Other × Other product law narrow rule 2 for hashed members? (issue 10;
docs/math/joint.md#cells-the-reports-do-not-identify, "A test of the product law, measured").

Rule 2 flags every cell of two members whose Others hold several unknown values, because the EM takes the
Other × Other report-pair law as the product of the two Other laws, which an association among the hidden values
breaks. A test of that product on the pair counts could flag only when the misfit is detectable. For two O-RR
members over the same strings the misfit has a known direction: when both hidden values are the same string and
the two cohorts coincide, both reports are noisy copies of the same symbol, an excess of matching symbols the
product cannot produce. The targeted statistic here is

``Z = (O − E)/√E``, ``O`` = report pairs with ``c_X = c_Y`` and ``y_X = y_Y``, ``E = Σ_c N_cc Σ_y m_(c,y,c,y)(p̂)``
under the fitted model (its Other laws and table; ``N_cc`` the pairs whose two cohorts are both c, since the
likelihoods are conditional on the cohorts),

compared, per n, with what it is meant to guard: the table's coverage and the Other × Other bias in SEs. A test
can keep the promise only if it rejects (|Z| > 2, say) with high probability wherever the coverage of the
cells it would leave identified falls below 0.93; and it must not reject under independence (ρ = 0, where the
product holds). The EM absorbs most of the misfit into its parameters (that is the bias), so what a test of the
fit sees is only the residual part; this script measures how large it is.

The paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E) through open O-RR (k = 32, 8 cohorts, ε = 3), top 5 +
Other, the candidates' frequencies from the whole 100-value dictionary (the live decoder's).

``--y-prefix w``: Y reports other strings (what a per-member hash salt gives), so a hidden value's two reports
no longer share a symbol; the association still biases the EM (docs: coverage 0.920 at 4·10^5), and this
statistic has nothing to see.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.studies.joint_other_gof --n 100000,400000,1000000``
(``--rho``, ``--trials``, ``--y-prefix``)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.estimators.joint.likelihood import variable_model
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.mechanisms.orr import ORR
from ldpstream.simulation.joint_trials import collapse, sample_pairs, value_names, zipf_association


def matching_statistic(pat: PairPatterns, mech: ORR, var: JointVariable, var_y: JointVariable, table: np.ndarray,
                       frequencies: tuple[list[float], list[float]]) -> float:
    """``Z`` of the module docstring: the observed matching pairs against the fitted model's expectation."""
    C, k = int(mech.cohorts), int(mech.k)
    cells = np.arange(C * k)
    cohort, symbol = cells // k, cells % k
    # The observed patterns plus every matching cell with count 0, so that one model gives both likelihoods
    # (the Other laws come from the counts, which the zero rows do not change).
    cx = np.concatenate([pat.cohort_x, cohort])
    rx = np.concatenate([pat.reports_x, symbol])
    cy = np.concatenate([pat.cohort_y, cohort])
    ry = np.concatenate([pat.reports_y, symbol])
    counts = np.concatenate([pat.counts, np.zeros(C * k, dtype=np.int64)])
    mx = variable_model(mech, var.values, cx, rx, counts)
    lx = mx.likelihood(np.asarray(frequencies[0]))
    ly = variable_model(mech, var_y.values, cy, ry, counts).likelihood(np.asarray(frequencies[1]))
    tail = slice(len(pat.counts), None)
    m = ((lx.matrix[tail] @ table) * ly.matrix[tail]).sum(axis=1) * np.exp(lx.log_scale[tail] + ly.log_scale[tail])
    # The likelihoods are conditional on the cohorts, so the expectation is conditional on the cohort-pair counts.
    same = pat.cohort_x == pat.cohort_y
    pairs_in = np.bincount(pat.cohort_x[same], weights=pat.counts[same], minlength=C)  # N_{c,c}
    match = same & (pat.reports_x == pat.reports_y)
    observed = float(pat.counts[match].sum())
    expected = float(pairs_in @ m.reshape(C, k).sum(axis=1))
    return float((observed - expected) / np.sqrt(expected))


def run(n: int, rho: float, args: argparse.Namespace) -> None:
    names = value_names(100)
    names_y = value_names(100, args.y_prefix)
    joint = zipf_association(100, 1.0, rho)
    truth = collapse(joint, range(5), range(5))
    mech = ORR(k=32, epsilon=3.0, cohorts=8)
    table_x, table_y = mech.value_table(names), mech.value_table(names_y)
    var = JointVariable(mech, names[:5], dictionary=names)
    var_y = JointVariable(mech, names_y[:5], dictionary=names_y)
    rng = np.random.default_rng(args.seed)
    zs, covered, oo = [], [], []
    began = time.perf_counter()
    for _ in range(args.trials):
        pat = sample_pairs(joint, mech, mech, n, rng, table_x, table_y)
        est = estimate_joint(pat, var, var_y, inversion=False)  # the EM's fit is what the test examines
        covered.append((est.low <= truth) & (truth <= est.high))
        oo.append((est.table[-1, -1] - truth[-1, -1]) / est.std_error[-1, -1])
        zs.append(matching_statistic(pat, mech, var, var_y, est.table, (est.info["candidate_frequencies_x"],
                                                                 est.info["candidate_frequencies_y"])))
    c, z = np.array(covered), np.array(zs)
    per = c.reshape(args.trials, -1).mean(axis=1)
    print(f"O-RR k=32 C=8 ε=3 ρ={rho} Y='{args.y_prefix}*' n={n:,} trials={args.trials}: coverage "
          f"{per.mean():.3f} (cluster SE "
          f"{per.std(ddof=1) / np.sqrt(args.trials):.4f}); Other×Other error/SE mean {np.mean(oo):+.2f}; "
          f"Z mean {z.mean():+.2f} sd {z.std(ddof=1):.2f}, |Z| > 2 in {np.mean(np.abs(z) > 2):.2f} of trials "
          f"({time.perf_counter() - began:.0f} s)", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="100000,400000,1000000")
    ap.add_argument("--rho", default="0.5,0")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--y-prefix", default="v", help="'w': Y reports other strings (distinct hashes)")
    a = ap.parse_args()
    for size in a.n.split(","):
        for r in a.rho.split(","):
            run(int(size), float(r), a)
