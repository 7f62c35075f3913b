"""Two k-RR members whose Others hide associated values: the inversion of the full alphabets covers at 10^6
pairs, where the EM with the product Other × Other law covered 0.879 (docs/math/joint.md#direct-members-the-
full-alphabet; bench/studies/joint_krr_other.py).

Setting: the paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E) through k-RR (k = 100, ε = 4): 100 Zipf(1)
values per variable, joint ``(1 − ρ) z zᵀ + ρ diag(z)`` with ρ = 0.5 (Y copies X half the time, hidden values
included), top 5 + Other (6 × 6), N = 10^6 pairs per trial.

Sampling. The count table of the report pairs is drawn directly as Multinomial(N, m) with
``m = Q_Xᵀ P Q_Y`` (k × k). That is exact in distribution: clients are i.i.d., each pair (x, y) ~ P, and the two
k-RR reports are drawn independently given it, so each report pair is i.i.d. with law m, and the table of N
of them is multinomial. It costs O(k²) per trial instead of O(N) (the argument of ``krr_sketch_from_true_counts``).

Criteria and why they are meaningful (T = 800 trials):

- Coverage, pooled over the 36 cells: in 0.93–0.97. Cells of one trial are dependent; the pooled share's standard
  error is the cluster one, ``sd(per-trial share)/√T``, measured and required to be at most 0.02/3 (so the band
  is ±3 SE or wider: correct intervals fail it with probability < 0.3%). Even with every cell of a trial
  perfectly correlated it would be √(0.95·0.05/800) = 0.0077.
- Coverage of Other × Other alone (the cell the EM got wrong: 0.47 there): in 0.93–0.97; T = 800 independent
  trials give a binomial SE of √(0.95·0.05/800) = 0.0077, so the band is ±2.6 SE (a false failure ≈ 1%), while
  the EM's 0.47 is 60 SE away.
- Unbiasedness: every cell's mean error within 4 Monte Carlo SEs (sd/√T; 36 correlated cells, each |z| > 4 with
  probability 6·10^-5: a false alarm below 0.3%). The estimator is linear in the counts, so exactly unbiased.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.mechanisms.krr import KRR
from ldpstream.simulation.joint_trials import collapse, zipf_association

pytestmark = pytest.mark.statistical

K = 100
N = 1_000_000
TRIALS = 800


def krr_pair_counts(m: np.ndarray, n: int, rng: np.random.Generator) -> PairPatterns:
    """The distinct report pairs of ``n`` clients, their count table drawn as Multinomial(n, m)."""
    counts = rng.multinomial(n, m.ravel()).reshape(m.shape)
    yx, yy = np.nonzero(counts)
    zeros = np.zeros(len(yx), dtype=np.int64)
    return PairPatterns(zeros, yx.astype(np.int64), zeros.copy(), yy.astype(np.int64), counts[yx, yy])


def test_inversion_covers_at_a_million_pairs_with_associated_hidden_values() -> None:
    mech = KRR(K, 4.0)
    Q = mech.channel()
    joint = zipf_association(K, 1.0, 0.5)
    truth = collapse(joint, range(5), range(5))
    m = Q.T @ joint @ Q
    var = JointVariable(mech, list(range(5)))
    rng = np.random.default_rng(20261201)
    covered, errors = [], []
    for _ in range(TRIALS):
        est = estimate_joint(krr_pair_counts(m, N, rng), var, var)
        assert est.identified_mask().all() and est.interval_method == "wald-clipped-inversion"
        covered.append((est.low <= truth) & (truth <= est.high))
        errors.append(est.table - truth)
    c, e = np.array(covered), np.array(errors)
    per_trial = c.reshape(TRIALS, -1).mean(axis=1)
    cluster_se = per_trial.std(ddof=1) / np.sqrt(TRIALS)
    assert cluster_se <= 0.02 / 3, cluster_se
    assert 0.93 <= per_trial.mean() <= 0.97, (per_trial.mean(), cluster_se)
    assert 0.93 <= c[:, -1, -1].mean() <= 0.97, c[:, -1, -1].mean()
    mc_se = e.std(axis=0, ddof=1) / np.sqrt(TRIALS)
    assert np.all(np.abs(e.mean(axis=0)) <= 4 * mc_se), e.mean(axis=0) / mc_se


def orr_pair_counts(m: np.ndarray, n: int, rng: np.random.Generator) -> PairPatterns:
    """The distinct (cohort_x, y_x, cohort_y, y_y) of ``n`` clients, drawn as Multinomial(n, m) over the
    ``C·k × C·k`` cells (exact in distribution, as for k-RR: i.i.d. pairs with independent uniform cohorts)."""
    counts = rng.multinomial(n, m.ravel()).reshape(m.shape)
    cx, yx, cy, yy = np.nonzero(counts)
    return PairPatterns(cx.astype(np.int64), yx.astype(np.int64), cy.astype(np.int64), yy.astype(np.int64),
                        counts[cx, yx, cy, yy])


def test_orr_inversion_against_the_dictionary_covers_at_a_million_pairs() -> None:
    """Two open O-RR members (k = 32, 8 cohorts, ε = 3) over the same 100 Zipf strings, ρ = 0.5, the whole list
    as each member's dictionary (101 columns in 256 cells), top 5 + Other: the per-report inversion against the
    dictionary (eq. J3) covers at 10^6 pairs, where the EM with its product Other × Other law covers 0.82
    (bench/results/joint_identified.txt). T = 400 trials: the pooled band is checked against the measured cluster
    SE as above (≤ 0.02/3); Other × Other alone has a binomial SE of √(0.95·0.05/400) = 0.011, so its band is
    widened to 0.92–0.98 (±2.7 SE; the EM's 0.43 at 4·10^5 is 45 SE away). Sampling: the pair table drawn as a
    multinomial over the cells, whose law is ``m = Σ_{v,v'} P(v, v') Q(· | v, c_x) Q(· | v', c_y) / C²``."""
    from ldpstream.estimators.joint.likelihood import candidate_truth
    from ldpstream.mechanisms.orr import ORR
    from ldpstream.simulation.joint_trials import value_names

    names = value_names(K)
    mech = ORR(k=32, epsilon=3.0, cohorts=8)
    hi, lo = mech.response_rates
    law = lo + (hi - lo) * candidate_truth(mech, names).astype(np.float64)  # (C, k, M)
    joint = zipf_association(K, 1.0, 0.5)
    truth = collapse(joint, range(5), range(5))
    C = law.shape[0]
    m = np.einsum("ab,cxa,dyb->cxdy", joint, law, law) / C**2
    var = JointVariable(mech, names[:5], dictionary=names)
    rng = np.random.default_rng(20261202)
    trials = 400
    covered, errors, flagged = [], [], 0
    for _ in range(trials):
        est = estimate_joint(orr_pair_counts(m, N, rng), var, var)
        assert est.info["estimator"] == "dictionary-inversion"
        # a complete list: only the misfit test's false alarms (1% per member) flag the table
        flagged += not est.identified_mask().all()
        assert all("misses mass" in reason for reason in est.identification)
        covered.append((est.low <= truth) & (truth <= est.high))
        errors.append(est.table - truth)
    assert flagged <= 20  # P(Binomial(400, 0.02) > 20) < 0.1%
    c, e = np.array(covered), np.array(errors)
    per_trial = c.reshape(trials, -1).mean(axis=1)
    cluster_se = per_trial.std(ddof=1) / np.sqrt(trials)
    assert cluster_se <= 0.02 / 3, cluster_se
    assert 0.93 <= per_trial.mean() <= 0.97, (per_trial.mean(), cluster_se)
    assert 0.92 <= c[:, -1, -1].mean() <= 0.98, c[:, -1, -1].mean()
    mc_se = e.std(axis=0, ddof=1) / np.sqrt(trials)
    assert np.all(np.abs(e.mean(axis=0)) <= 4 * mc_se), e.mean(axis=0) / mc_se
