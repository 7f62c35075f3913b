"""The pieces of detect's result (ldpstream.estimators.detection): Storey's null share against its formula, the
adaptive BH rule against BH at the adjusted level, and a window's design effect applied to a detection estimate."""

import numpy as np
import pytest
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.detection import DetectionEstimate, storey_null_fraction
from ldpstream.estimators.estimate import ConfidenceInterval
from ldpstream.estimators.windows import widen_estimate


def test_storey_null_fraction_formula_and_uniform_nulls():
    """Formula on a hand-made vector; for S uniform p-values (all null) E π̂0 = min(1, ...) ≈ 1 + 2/S, and
    with half the p-values at 0 (non-null, sure) π̂0 ≈ 1/2."""
    p = np.array([0.01, 0.2, 0.6, 0.7, 0.9, 0.95])
    assert storey_null_fraction(p) == pytest.approx(min(1.0, (4 + 1) / (6 * 0.5)))
    assert storey_null_fraction(np.array([0.1, 0.6, 0.8, 0.02])) == pytest.approx(min(1.0, (2 + 1) / (4 * 0.5)))
    assert storey_null_fraction(np.array([0.1, 0.6, 0.01, 0.02, 0.3, 0.001])) == pytest.approx((1 + 1) / (6 * 0.5))
    rng = np.random.default_rng(0)
    null = rng.uniform(size=20_000)
    # sd of the estimate: sqrt(S·½·½)/(S/2) = 1/sqrt(S) = 0.007; allow 4 sd
    assert storey_null_fraction(null) > 1 - 4 / np.sqrt(null.size)
    mixed = np.concatenate([null[:10_000], np.zeros(10_000)])
    assert storey_null_fraction(mixed) == pytest.approx(0.5, abs=4 * np.sqrt(10_000) / 10_000)


def test_adaptive_bh_is_bh_at_level_over_null_fraction():
    """DetectionEstimate.significant("bh") at q is plain BH at q/π̂0 on z > 0 (Storey's rule), Bonferroni is
    unchanged, and π̂0 = 1 gives plain BH."""
    z = np.array([4.0, 2.6, 2.2, 2.0, 1.7, 1.2, 0.3, 0.0, -0.5, -1.0])
    se = np.full(z.size, 0.01)
    base = DetectionEstimate(z * se, se, 1000, "t", null_z=z)
    adapt = DetectionEstimate(z * se, se, 1000, "t", null_z=z, null_fraction=0.5)
    p = stats.norm.sf(z)
    for q in (0.05, 0.10, 0.2):
        order = np.argsort(p)
        ok = p[order] <= (q / 0.5) * np.arange(1, z.size + 1) / z.size
        want = np.zeros(z.size, bool)
        if ok.any():
            want[order[: np.flatnonzero(ok)[-1] + 1]] = True
        assert np.array_equal(adapt.significant(q, "bh"), want & (z > 0))
        assert np.all(adapt.significant(q, "bh")[base.significant(q, "bh")])
    assert np.array_equal(adapt.significant(0.05, "bonferroni"), base.significant(0.05, "bonferroni"))


def test_storey_rejects_bad_lambda():
    with pytest.raises(ParameterError):
        storey_null_fraction(np.array([0.1, 0.9]), lam=1.0)


def test_window_design_effect_widens_the_refit_interval_and_shrinks_the_test():
    """A design effect d on a detection estimate: standard errors × sqrt(d), the test statistic (the refit's z)
    ÷ sqrt(d), and the refit interval (centre ≠ the published posterior mean) widened about its own centre."""
    refit = np.array([0.05, 0.01, 0.0])
    se = np.array([0.005, 0.004, 0.01])
    point = np.array([0.049, 0.007, 0.0])
    z95 = 1.959963984540054
    iv = ConfidenceInterval(np.clip(refit - z95 * se, 0, 1), np.clip(refit + z95 * se, 0, 1))
    est = DetectionEstimate(point, se, 1000, "bits/detect", interval=iv, interval_method="wald-refit",
                            null_z=refit / se, null_fraction=0.6)
    wide = widen_estimate(est, np.full(3, 4.0), None, np.zeros((1, 2)))
    assert isinstance(wide, DetectionEstimate) and wide.null_fraction == 0.6
    assert np.allclose(wide.std_errors, 2 * se)
    assert np.allclose(np.asarray(wide.null_z), refit / se / 2)
    low, high = wide.interval
    assert np.allclose(low, np.clip(refit - 2 * z95 * se, 0, 1))
    assert np.allclose(high, refit + 2 * z95 * se)
    assert low[2] == 0.0 and low[1] == 0.0
