"""O-RR maximum likelihood: its standard errors (the observed information of the exact multinomial likelihood,
restricted to the simplex) and the significance tests made with them, at small and large k
(docs/math/estimators.md#standard-errors-of-the-maximum-likelihood-estimate).

The published interval of the O-RR MLE is the least-squares sandwich interval (``ls-sandwich``, covered in
tests/statistical/test_estimators_candidates.py); its ``std_errors`` and ``significant()`` use the information.
Checked here, on the review's case (C = 4, S = 6, ε = 3, n = 20 000, one value absent), k = 4 and k = 32:

- the Wald interval ``p̂ ± 1.96 SE`` that the significance test inverts covers 93–97% over the present values
  (two-sided band);
- the mean SE over the Monte Carlo sd of the MLE (independent reference), each present value;
- the one-sided test of the absent value at α = 0.05 (no correction) rejects at most α of the time.

Trial count. T = 500 decodes: pooled over 5 values, the cluster standard error of the coverage (sd of the
per-trial coverage / sqrt(T), asserted) must leave the band ≥ 3 SE either side of 0.95, i.e. ≤ 0.0067; measured
≈ 0.004. The SE/sd ratio has relative standard error 1/sqrt(2(T − 1)) = 0.032; band: two-sided Bonferroni at
1e-3 over the 10 values of both k (z = 3.89), ±0.12. The size bound: binomial sd at α, sqrt(0.05·0.95/T) =
0.0097, one-sided z = 3.09 (1e-3).
"""

import numpy as np
import pytest
from scipy import stats

from ldpstream.estimators import decode_orr
from ldpstream.mechanisms.orr import ORR

pytestmark = pytest.mark.statistical

P6 = np.array([0.35, 0.25, 0.2, 0.12, 0.08, 0.0])
TRIALS = 500
Z95 = float(stats.norm.isf(0.025))


@pytest.mark.parametrize("k", [4, 32])
def test_orr_mle_information_standard_errors_and_tests(k):
    mech = ORR(k=k, epsilon=3.0, cohorts=4, support=6)
    X = mech.design_matrix(None)
    rng = np.random.default_rng(40 + k)
    est = np.empty((TRIALS, 6))
    se = np.empty((TRIALS, 6))
    flagged = np.empty(TRIALS, dtype=bool)
    for t in range(TRIALS):
        e = decode_orr(mech.simulate_sketch(rng.multinomial(20_000, P6), rng), X, 3.0, "mle", other=False)
        est[t], se[t] = e.frequencies, e.std_errors
        flagged[t] = e.significant(0.05, "none")[5]
    pos = P6 > 0
    hits = np.abs(est - P6) <= Z95 * se
    per_trial = hits[:, pos].mean(axis=1)
    cov, cov_se = per_trial.mean(), per_trial.std(ddof=1) / np.sqrt(TRIALS)
    ratio = se.mean(axis=0)[pos] / est.std(axis=0, ddof=1)[pos]
    print(f"\nO-RR k={k} MLE: Wald coverage {cov:.3f} ± {cov_se:.4f}, SE/sd {np.round(ratio, 3)}, "
          f"absent value flagged {flagged.mean():.3f}")
    assert cov_se <= 0.02 / 3
    assert 0.93 <= cov <= 0.97, cov
    band = stats.norm.isf(1e-3 / (2 * 10)) / np.sqrt(2 * (TRIALS - 1))
    assert np.all(np.abs(ratio - 1) <= band), ratio
    assert flagged.mean() <= 0.05 + stats.norm.isf(1e-3) * np.sqrt(0.05 * 0.95 / TRIALS)
