"""Candidate frequencies from the metric's candidate list (docs/math/joint.md#candidate-frequencies-from-the-dictionary,
``JointVariable.dictionary``, what the live decoder passes): the joint table is unbiased and its intervals cover
where the least-squares frequencies on the candidates alone left Other × Other off by 0.014.

Setting: the paper's simulation (Fanti, Pihur, Erlingsson 2016 §4.E) with few-bit RAPPOR: 100 Zipf(1) values per
variable, ρ = 0.5, top 5 + Other (6 × 6), 32-bit Bloom filters, h = 2, 8 cohorts, p = .25, q = .75, f = 0;
the dictionary is the 100 values (101 columns with the "other" regressor, 256 cells: well-determined);
T = 24 trials of 100,000 pairs, fixed seed (about 0.6 s of CPU per trial).

Criteria:

- **Bias** (the issue's criterion, with the Monte Carlo error derived from the trials): each cell's mean error
  over T trials is within z Monte Carlo SEs (sd/√T) or below 0.005 (the issue's floor). z is Bonferroni over
  the 36 cells at a family-wise 1% (z = Φ⁻¹(1 − 0.01/72) = 3.81), so an unbiased estimator fails with
  probability < 1%. Power check: the least-squares frequencies on the candidates alone fail it in Other × Other
  (−0.014, ≈ 3.5 cell SEs; 12 trials suffice).
- **Coverage** (the cells, and the conditional tables Y | X and X | Y alike). The T × 36 intervals would give a
  binomial count with SD √(0.95 · 0.05 / (36 T)) = 0.0074 of the share if they were independent; the cells of one
  trial are dependent (they sum to 1 and share the Other law), so the share's SE is taken as the larger of that
  and the cluster SE, sd(per-trial share)/√T, which the test measures. The band is 0.95 ± 3 such SEs (a correct
  95% interval fails it with probability < 0.3%), and its half-width must stay below 0.035, so that it excludes
  the 0.905 of the candidates-only frequencies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import collapse, sample_pairs, value_names, zipf_association

pytestmark = pytest.mark.statistical

TRIALS = 24
PAIRS = 100_000
#: The issue's absolute floor for a cell's mean error.
BIAS_FLOOR = 0.005
#: Bonferroni over the 36 cells at a family-wise 1%.
Z_FAMILY = float(stats.norm.isf(0.01 / (2 * 36)))


def trials(dictionary: bool, count: int = TRIALS) -> dict[str, Any]:
    names = value_names(100)
    joint = zipf_association(100, 1.0, 0.5)
    truth = collapse(joint, range(5), range(5))
    mech = Rappor(k=32, hashes=2, cohorts=8, p=0.25, q=0.75, f=0.0)
    table = mech.value_table(names)
    var = JointVariable(mech, names[:5], dictionary=names if dictionary else None)
    rng = np.random.default_rng(20260)
    errors, ses, covered, conditionals = [], [], [], []
    y_given_x = truth / truth.sum(axis=1, keepdims=True)
    x_given_y = truth / truth.sum(axis=0, keepdims=True)
    for _ in range(count):
        pat = sample_pairs(joint, mech, mech, PAIRS, rng, table, table)
        est = estimate_joint(pat, var, var, inversion=False)  # the EM's Other rule (the inversion: its own tests)
        assert est.converged
        errors.append(est.table - truth)
        ses.append(est.std_error)
        covered.append((est.low <= truth) & (truth <= est.high))
        conditionals.append(np.stack([
            (est.y_given_x.low <= y_given_x) & (y_given_x <= est.y_given_x.high),
            (est.x_given_y.low <= x_given_y) & (x_given_y <= est.x_given_y.high)]))
        assert est.info["frequencies_x"] == ("dictionary" if dictionary else "least-squares")
        # The frequencies are identified with the dictionary, not without it; the table is flagged either way by
        # the Other x Other rule, whose bias shows at 10^6 pairs, not at these 10^5
        # (docs/math/joint.md#cells-the-reports-do-not-identify).
        assert any("candidate frequencies by least squares" in r for r in est.identification) is not dictionary
    both = np.array(conditionals)
    return {"errors": np.array(errors), "se": np.array(ses), "covered": np.array(covered),
            "y_given_x": both[:, 0], "x_given_y": both[:, 1]}


def biased_cells(result: dict[str, Any]) -> np.ndarray:
    """Cells whose mean error is beyond both Z_FAMILY Monte Carlo SEs and BIAS_FLOOR."""
    errors = result["errors"]
    mean = errors.mean(axis=0)
    mcse = errors.std(axis=0, ddof=1) / np.sqrt(len(errors))
    out: np.ndarray = (np.abs(mean) > Z_FAMILY * mcse) & (np.abs(mean) > BIAS_FLOOR)
    return out


def coverage_band(result: dict[str, Any], key: str = "covered") -> tuple[float, float]:
    """(pooled share, its SE: the larger of the binomial and the cluster one)."""
    covered = result[key]
    per_trial = covered.reshape(len(covered), -1).mean(axis=1)
    binomial = np.sqrt(0.95 * 0.05 / covered.size)
    cluster = per_trial.std(ddof=1) / np.sqrt(len(per_trial))
    return float(per_trial.mean()), float(max(binomial, cluster))


@pytest.fixture(scope="module")
def shipped() -> dict[str, Any]:
    return trials(dictionary=True)


def test_dictionary_frequencies_are_unbiased(shipped: dict[str, Any]) -> None:
    bad = biased_cells(shipped)
    mean = shipped["errors"].mean(axis=0)
    assert not bad.any(), f"biased cells: {np.round(mean[bad], 4)}"


@pytest.mark.parametrize("key", ["covered", "y_given_x", "x_given_y"])
def test_dictionary_intervals_cover(shipped: dict[str, Any], key: str) -> None:
    """The cells' intervals, and those of the two conditional tables (delta method on the same covariance),
    with the band of the module docstring. Measured: 0.949 (cells, 30 trials), 0.961 (Y | X), 0.964 (X | Y)."""
    share, se = coverage_band(shipped, key)
    assert 3 * se <= 0.035, f"too few trials for the band: SE {se:.4f}"
    assert abs(share - 0.95) <= 3 * se, f"{key}: coverage {share:.4f} outside 0.95 ± {3 * se:.4f}"


def test_candidates_only_frequencies_fail_the_bias_criterion() -> None:
    """The power check: the criterion above rejects the least squares on the candidates alone (the defect)."""
    before = trials(dictionary=False, count=12)
    assert biased_cells(before)[-1, -1]  # Other × Other: measured −0.014
