"""The pieces of detect's result (ldpstream.estimators.detection): the two-stage step-up procedure (the default
adaptive BH) against a second implementation written from its definition, Storey's null share against its
formula, Storey's adaptive BH rule against BH at the adjusted level, and a window's design effect applied to a
detection estimate."""

import numpy as np
import pytest
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.detection import DetectionEstimate, storey_null_fraction, two_stage_step_up
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


def _step_up_loop(p: np.ndarray, level: float) -> np.ndarray:
    """The linear step-up procedure written as its definition reads (Benjamini and Hochberg 1995): find the
    largest i with p_(i) <= i·level/m, scanning down from i = m, and reject the i smallest p-values."""
    m = p.size
    order = np.argsort(p, kind="stable")
    rejected = np.zeros(m, dtype=bool)
    for i in range(m, 0, -1):
        if p[order[i - 1]] <= i * level / m:
            for j in range(i):
                rejected[order[j]] = True
            break
    return rejected


def _two_stage_reference(p: np.ndarray, q: float) -> np.ndarray:
    """Benjamini, Krieger and Yekutieli (2006), Definition 6, step by step with the loop above."""
    m = p.size
    q1 = q / (1 + q)
    r1 = int(_step_up_loop(p, q1).sum())
    if r1 == 0:
        return np.zeros(m, dtype=bool)
    if r1 == m:
        return np.ones(m, dtype=bool)
    return _step_up_loop(p, q1 * m / (m - r1))


def test_two_stage_step_up_matches_the_definition():
    """On random p-vectors (uniform nulls mixed with Beta(0.05, 1) signals in varying shares, several sizes and
    levels) the vectorized procedure (scipy's BH-adjusted p-values compared with the two levels) rejects the
    same hypotheses as the loop implementation, and its null share is m̂0/m = 1 − r1/m."""
    rng = np.random.default_rng(7)
    cases = 0
    for m in (1, 2, 5, 40, 400):
        for share in (0.0, 0.2, 0.5, 0.9, 1.0):
            for q in (0.01, 0.05, 0.10, 0.25):
                for _ in range(5):
                    signal = rng.uniform(size=m) < share
                    p = np.where(signal, rng.beta(0.05, 1.0, size=m), rng.uniform(size=m))
                    mask, null_share = two_stage_step_up(p, q)
                    want = _two_stage_reference(p, q)
                    assert np.array_equal(mask, want), (m, share, q)
                    r1 = int(_step_up_loop(p, q / (1 + q)).sum())
                    assert null_share == pytest.approx(1.0 if r1 == 0 else (m - r1) / m)
                    cases += 1
    assert cases == 500


def test_two_stage_step_up_edge_cases():
    """r1 = 0: nothing rejected, even p-values that BH at q itself would reject (stage 1 runs at q/(1 + q));
    r1 = m: everything rejected, even a p-value that the second stage's level alone would not reach; a
    second stage that rejects more than the first; an empty vector."""
    q = 0.10
    # m = 2: BH at q rejects both (0.09 <= 0.1·1/2? no; 0.095 <= 0.1·2/2 yes), at q/(1+q) = 0.0909 neither
    p = np.array([0.09, 0.095])
    assert _step_up_loop(p, q).all() and not _step_up_loop(p, q / (1 + q)).any()
    mask, share = two_stage_step_up(p, q)
    assert not mask.any() and share == 1.0
    assert np.array_equal(mask, _two_stage_reference(p, q))
    # r1 = m: all p-values below q/(1 + q)·i/m
    p = np.array([0.001, 0.002, 0.09])
    mask, share = two_stage_step_up(p, q)
    assert mask.all() and share == 0.0
    # stage 1 at 0.0909 rejects 1 of 4 (0.01 <= 0.0227; 0.05 > 0.0455), stage 2 at 0.0909·4/3 = 0.121 two
    # (0.05 <= 0.0606)
    p = np.array([0.01, 0.05, 0.5, 0.9])
    r1 = int(_step_up_loop(p, q / (1 + q)).sum())
    assert r1 == 1
    mask, share = two_stage_step_up(p, q)
    assert share == pytest.approx((p.size - r1) / p.size)
    assert mask.sum() == 2 and np.array_equal(mask, _two_stage_reference(p, q))
    mask, share = two_stage_step_up(np.zeros(0), q)
    assert mask.size == 0 and share == 1.0
    with pytest.raises(ParameterError):
        two_stage_step_up(p, 1.0)


def test_two_stage_rule_is_computed_at_the_level_asked_for():
    """DetectionEstimate.significant("bh", q) with adaptive "two-stage" is the procedure at q (its first stage
    depends on q, so nothing fixed at detect's level is reused) on the one-sided p-values, positive z only;
    Bonferroni and the other corrections are unchanged."""
    rng = np.random.default_rng(3)
    z = np.concatenate([rng.normal(2.5, 1.0, 30), rng.normal(0.0, 1.0, 70), np.zeros(20)])
    se = np.full(z.size, 0.01)
    base = DetectionEstimate(frequencies=z * se, std_errors=se, n_reports=1000, method="t", null_z=z)
    tst = DetectionEstimate(frequencies=z * se, std_errors=se, n_reports=1000, method="t", null_z=z,
                            null_fraction=0.9, adaptive="two-stage")
    p = stats.norm.sf(z)
    masks = []
    for q in (0.02, 0.05, 0.10, 0.2):
        masks.append(tst.significant(q, "bh"))
        assert np.array_equal(masks[-1], _two_stage_reference(p, q) & (z > 0))
    assert len({int(m.sum()) for m in masks}) > 1
    for corr in ("bonferroni", "none"):
        assert np.array_equal(tst.significant(0.05, corr), base.significant(0.05, corr))


def test_storey_adaptive_bh_is_bh_at_level_over_null_fraction():
    """DetectionEstimate.significant("bh") with adaptive "storey" at q is plain BH at q/π̂0 on z > 0 (Storey's
    rule), Bonferroni is unchanged, and π̂0 = 1 gives plain BH."""
    z = np.array([4.0, 2.6, 2.2, 2.0, 1.7, 1.2, 0.3, 0.0, -0.5, -1.0])
    se = np.full(z.size, 0.01)
    base = DetectionEstimate(frequencies=z * se, std_errors=se, n_reports=1000, method="t", null_z=z)
    adapt = DetectionEstimate(frequencies=z * se, std_errors=se, n_reports=1000, method="t", null_z=z,
                              null_fraction=0.5, adaptive="storey")
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
    one = DetectionEstimate(frequencies=z * se, std_errors=se, n_reports=1000, method="t", null_z=z,
                            null_fraction=1.0, adaptive="storey")
    assert np.array_equal(one.significant(0.10, "bh"), base.significant(0.10, "bh"))


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
    est = DetectionEstimate(frequencies=point, std_errors=se, n_reports=1000, method="bits/detect", interval=iv,
                            interval_method="wald-refit",
                            null_z=refit / se, null_fraction=0.6, adaptive="two-stage")
    wide = widen_estimate(est, np.full(3, 4.0), None, np.zeros((1, 2)))
    assert isinstance(wide, DetectionEstimate) and wide.null_fraction == 0.6 and wide.adaptive == "two-stage"
    assert np.allclose(wide.std_errors, 2 * se)
    assert np.allclose(np.asarray(wide.null_z), refit / se / 2)
    low, high = wide.interval
    assert np.allclose(low, np.clip(refit - 2 * z95 * se, 0, 1))
    assert np.allclose(high, refit + 2 * z95 * se)
    assert low[2] == 0.0 and low[1] == 0.0
