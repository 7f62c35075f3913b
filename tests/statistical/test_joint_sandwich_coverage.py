"""Coverage of the joint table's cell intervals where the observed information alone under-covered
(docs/math/joint.md#the-other-categorys-uncertainty): the stacked sandwich (``wald-clipped-sandwich``) adds the
noise of the "Other" law and of the candidate frequencies that the Other rule uses.

Criterion: the pooled share of cell intervals holding the true cell lies in 0.93–0.97. The cells of one trial
are dependent, so the share's standard error is the cluster one, sd(per-trial share)/√T, which the test measures
and requires to be at most 0.02/3 (the band is then ≥ ±3 SE around 0.95: correct intervals fail with
probability < 0.3%). Measured on these seeds, sandwich / observed information alone: few-bit RAPPOR 0.954 /
0.953 (cluster SE 0.005: with dictionary frequencies the nuisance's noise is small here, and the test checks
that the sandwich does not over-cover; the least-squares frequencies failed this regime by *bias*, 0.905, which
no variance fixes; a ``JointVariable.dictionary`` reaches 0.949: test_joint_dictionary_frequencies.py);
string × boolean 0.954 / 0.912 (cluster SE 0.0055 / 0.0072).

- Few-bit RAPPOR (k = 32 bits, h = 2, 8 cohorts, p = .25, q = .75), the paper's 100 Zipf(1) values, ρ = 0.5,
  top 5 + Other, 50,000 pairs; the candidates' frequencies from the marginal least squares against the whole
  dictionary (``JointVariable.frequencies``: least squares on the five candidates alone is biased here;
  ``JointVariable.dictionary`` does the same with its own Jacobian, test_joint_dictionary_frequencies.py).
- Google's association regime (``bench/accuracy/decode_assoc.py``): a domain (RAPPOR k = 32, h = 2, m = 32, p = .25,
  q = .75, f = .5; 4 candidates + one value outside) × a boolean (one bit, same rates), 40,000 clients; the
  domain's frequencies from least squares against its 5-string map, as ``decode-assoc`` takes them from its
  marginal decode.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.estimators.dispatch import estimate
from ldpstream.estimators.joint import SANDWICH_INTERVAL_METHOD, JointVariable, estimate_joint
from ldpstream.estimators.joint.likelihood import pattern_sketch
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.mechanisms.rappor_boolean import RapporBoolean
from ldpstream.simulation.joint_trials import collapse, sample_pairs, value_names, zipf_association

pytestmark = pytest.mark.statistical


def dictionary_frequencies(mech: Rappor, dictionary: list[str], count: int, cohorts: np.ndarray,
                           reports: np.ndarray, weights: np.ndarray) -> list[float]:
    sketch = pattern_sketch(mech, cohorts, reports, weights)
    f = np.asarray(estimate(sketch, mech, "ls", candidates=dictionary).frequencies)[:count]
    return [float(x) for x in np.clip(f, 0.0, 1.0)]


def check_coverage(covered: list[np.ndarray]) -> None:
    per_trial = np.array([c.mean() for c in covered])
    share = per_trial.mean()
    cluster_se = per_trial.std(ddof=1) / np.sqrt(len(per_trial))
    assert 3 * cluster_se <= 0.02, f"too few trials for the band: cluster SE {cluster_se:.4f}"
    assert 0.93 <= share <= 0.97, f"coverage {share:.4f} (cluster SE {cluster_se:.4f})"


def test_few_bit_rappor() -> None:
    names = value_names(100)
    joint = zipf_association(100, 1.0, 0.5)
    truth = collapse(joint, range(5), range(5))
    mech = Rappor(k=32, hashes=2, cohorts=8, p=0.25, q=0.75, f=0.0)
    table = mech.value_table(names)
    rng = np.random.default_rng(2016)
    covered = []
    for _ in range(50):
        pat = sample_pairs(joint, mech, mech, 50_000, rng, table, table)
        vx, vy = (JointVariable(mech, names[:5], frequencies=dictionary_frequencies(mech, names, 5, c, r, pat.counts))
                  for c, r in ((pat.cohort_x, pat.reports_x), (pat.cohort_y, pat.reports_y)))
        est = estimate_joint(pat, vx, vy)
        assert est.interval_method == SANDWICH_INTERVAL_METHOD
        covered.append((est.low <= truth) & (truth <= est.high))
    check_coverage(covered)


def test_string_by_boolean_google_regime() -> None:
    domains = ["google.com", "yahoo.com", "bing.com", "duck.com", "rare.org"]
    joint = np.array([[0.06, 0.30], [0.10, 0.10], [0.15, 0.05], [0.02, 0.10], [0.06, 0.06]])  # (domain, FALSE/TRUE)
    truth = np.vstack([joint[:4], joint[4:].sum(axis=0)])
    mech = Rappor(k=32, hashes=2, cohorts=32, p=0.25, q=0.75, f=0.5)
    flag = RapporBoolean(cohorts=32, p=0.25, q=0.75, f=0.5)
    table = mech.value_table(domains)
    rng = np.random.default_rng(2014)
    covered = []
    for _ in range(240):
        pat = sample_pairs(joint, mech, flag, 40_000, rng, table, None)
        vx = JointVariable(mech, domains[:4], frequencies=dictionary_frequencies(
            mech, domains, 4, pat.cohort_x, pat.reports_x, pat.counts))
        est = estimate_joint(pat, vx, JointVariable(flag, [0, 1], ["FALSE", "TRUE"], other=False))
        covered.append((est.low <= truth) & (truth <= est.high))
    check_coverage(covered)
