"""The cells published as identified keep their promise (docs/math/joint.md#cells-the-reports-do-not-identify).

Setting: the paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E) through open O-RR, the case where the
whole table under-covers: 100 Zipf(1) values per variable, ρ = 0.5 (Y copies X half the time, hidden values
included), both members O-RR with k = 32, 8 cohorts, ε = 3 and the same hash, top 5 + Other (6 × 6), the
frequencies from the metric's 100-value dictionary (the live decoder's path). T = 30 trials of 100,000 pairs,
fixed seed (O-RR pair tables: well under a second per trial).

Measured (``bench/joint_orr_other.py``, 60 trials): all 36 cells cover 0.938, Other × Other 0.78 (its product
pair law is biased by +0.0065 and does not shrink with n); the 35 identified cells cover 0.942. At 4·10^5 pairs
the whole table falls to 0.84–0.88 (``bench/results/joint_orr_other.txt``).

Criteria:

- Other × Other is flagged in every trial, no other cell is.
- **Coverage of the identified cells**: the T × 35 intervals would give a binomial share with SD
  √(0.95 · 0.05 / (35 T)) = 0.0067 if they were independent; the cells of one trial are dependent (they sum to 1
  and share the Other laws), so the share's SE is the larger of that and the cluster SE sd(per-trial share)/√T,
  measured. The band is 0.95 ± 3 SE (a correct 95% interval fails it with probability < 0.3%); its half-width must
  stay below 0.035.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.orr import ORR
from ldpstream.simulation.joint_trials import collapse, sample_pairs, value_names, zipf_association

pytestmark = pytest.mark.statistical

TRIALS = 30
PAIRS = 100_000


def test_orr_cells_published_as_identified_cover_at_the_nominal_rate() -> None:
    names = value_names(100)
    joint = zipf_association(100, 1.0, 0.5)
    truth = collapse(joint, range(5), range(5))
    mech = ORR(k=32, epsilon=3.0, cohorts=8)
    table = mech.value_table(names)
    var = JointVariable(mech, names[:5], dictionary=names)
    rng = np.random.default_rng(20261)
    expected = np.ones((6, 6), dtype=bool)
    expected[-1, -1] = False
    shares = []
    for _ in range(TRIALS):
        est = estimate_joint(sample_pairs(joint, mech, mech, PAIRS, rng, table, table), var, var)
        assert est.converged and est.info["frequencies_x"] == "dictionary"
        np.testing.assert_array_equal(est.identified_mask(), expected)
        covered = (est.low <= truth) & (truth <= est.high)
        shares.append(covered[expected].mean())
    per_trial = np.array(shares)
    binomial = np.sqrt(0.95 * 0.05 / (TRIALS * int(expected.sum())))
    se = max(binomial, per_trial.std(ddof=1) / np.sqrt(TRIALS))
    assert 3 * se <= 0.035, f"too few trials for the band: SE {se:.4f}"
    assert abs(per_trial.mean() - 0.95) <= 3 * se, f"coverage {per_trial.mean():.4f} outside 0.95 ± {3 * se:.4f}"
