"""The repetition model of a window's buckets (:mod:`ldpstream.estimators.windows`): its rules, rates and the
widening of the published intervals. Coverage is in tests/statistical/test_window_intervals.py."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.estimators import estimate_krr
from ldpstream.estimators.windows import (
    persistence_rates,
    value_design_effects,
    widen_estimate,
    window_design,
)
from ldpstream.mechanisms import KRR, ORR, KRappor, Rappor

MECH = KRR(32, 2.0)


def buckets(mech, n: int, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [mech.simulate_sketch(np.bincount(rng.integers(0, mech.k, n), minlength=mech.k), rng) for _ in range(count)]


def test_identical_buckets_have_the_full_design_effect():
    one = buckets(MECH, 5000, 1, seed=1)[0]
    design = window_design(MECH, [one] * 6)
    assert design.rule == "estimated" and design.overlap == pytest.approx(1.0) and design.span == pytest.approx(6)
    deff = value_design_effects(design, MECH.design_matrix())
    assert deff == pytest.approx(np.full(32, 6.0))


def test_independent_buckets_have_a_design_effect_near_one():
    design = window_design(MECH, buckets(MECH, 5000, 8, seed=2))
    assert design.rule == "estimated" and design.overlap < 0.3
    assert value_design_effects(design, MECH.design_matrix()).max() < 1 + 7 * 0.3


def test_one_bucket_fresh_noise_and_no_detail():
    one = buckets(MECH, 1000, 1, seed=3)[0]
    assert window_design(MECH, [one]).rule == "single-bucket"
    fresh = KRR(32, 2.0, memoize=False)
    assert window_design(fresh, [one, one]).rule == "fresh-noise"
    nothing = window_design(MECH, [], one)
    assert nothing.rule == "unknown-independent" and nothing.overlap == 0.0
    for design in (window_design(MECH, [one]), window_design(fresh, [one, one]), nothing):
        assert np.all(value_design_effects(design, MECH.design_matrix()) == 1.0)


def test_too_few_degrees_of_freedom_take_the_worst_case():
    small = KRR(4, 1.0)
    design = window_design(small, buckets(small, 500, 3, seed=4))  # 2 × 4 = 8 degrees of freedom
    assert design.rule == "worst-case" and design.overlap == 1.0


def test_a_rollup_extrapolates_the_span_from_the_held_buckets():
    held = buckets(MECH, 1000, 4, seed=5)
    rollup = 3 * np.sum(held, axis=0)  # as many reports again in expired buckets, twice over
    design = window_design(MECH, held, rollup)
    assert design.span == pytest.approx(12, rel=0.05)
    assert window_design(MECH, held, np.sum(held, axis=0)).span == pytest.approx(window_design(MECH, held).span)


def test_persistence_rates():
    assert persistence_rates(KRR(8, 1.0, memoize=False)) is None
    assert persistence_rates(KRR(8, 1.0)) == (*MECH.__class__(8, 1.0).response_rates, 1.0, 0.0)
    q1, _p1, q2, p2 = persistence_rates(KRR(8, 1.0, epsilon_permanent=3.0))
    hi, _lo = KRR(8, 1.0).response_rates
    assert q2 * q1 + p2 * (1 - q1) == pytest.approx(hi)  # the layers compose to the ε channel (true symbol)
    q1, _p1, q2, p2 = persistence_rates(KRappor(8, 1.0, epsilon_permanent=3.0))
    assert q1 * q2 + (1 - q1) * p2 == pytest.approx(KRappor(8, 1.0).q_star)
    rappor = Rappor(k=16, hashes=2, cohorts=4, p=0.5, q=0.75, f=0.5)
    assert persistence_rates(rappor) == (0.75, 0.25, 0.75, 0.5)
    orr = ORR(16, 2.0, 4, support=32, epsilon_permanent=4.0)
    design = window_design(orr, [orr.simulate_sketch(np.full(32, 50), np.random.default_rng(s)) for s in range(3)])
    assert 0 < design.rho.max() < 1


def test_widening_a_wilson_interval_uses_the_effective_counts():
    sketch = buckets(MECH, 4000, 1, seed=6)[0]
    est = estimate_krr(sketch, 2.0)
    assert widen_estimate(est, np.ones(32), MECH, sketch) is est
    wide = widen_estimate(est, np.full(32, 4.0), MECH, sketch)
    assert wide.interval_method == "wilson-score"
    np.testing.assert_allclose(wide.frequencies, est.frequencies)
    np.testing.assert_allclose(wide.std_errors, 2 * est.std_errors)
    # The Wilson interval of 1000 reports with a quarter of the counts: the same as decoding them.
    quarter = estimate_krr(sketch / 4, 2.0)
    np.testing.assert_allclose(wide.interval.low, quarter.interval.low)
    np.testing.assert_allclose(wide.interval.high, quarter.interval.high)
    np.testing.assert_allclose(wide.z_scores(), est.z_scores() / 2)
    assert np.all(wide.interval.high - wide.interval.low >= est.interval.high - est.interval.low)


def test_a_values_own_share_leaves_the_cohort_mix_term():
    orr = ORR(16, 2.0, 8, support=32, epsilon_permanent=4.0)
    rng = np.random.default_rng(7)
    held = [orr.simulate_sketch(np.full(32, 100), rng)] * 4  # identical buckets: overlap 1
    design = window_design(orr, held)
    X = orr.design_matrix(None)
    full = value_design_effects(design, X)
    own = value_design_effects(design, X, np.full(32, 1 / 32))
    assert design.mix_scale > 0 and np.all(own <= full + 1e-12) and np.all(own > 1) and np.any(own < full)
    assert value_design_effects(window_design(MECH, buckets(MECH, 500, 4, 8)), MECH.design_matrix(),
                                np.full(32, 1 / 32)).shape == (32,)


def test_a_clipped_interval_beside_the_point_is_widened_about_its_own_centre():
    from ldpstream.estimators.estimate import ConfidenceInterval, Estimate
    from ldpstream.estimators.intervals import Z95

    beta = np.array([0.30, 0.01, 0.69, 0.995])
    se = np.full(4, 0.01)
    clip = lambda a: np.clip(a, 0.0, 1.0)  # noqa: E731
    est = Estimate(frequencies=np.array([0.29, 0.0, 0.70, 0.99]), std_errors=se, n_reports=1000, method="x/project",
                   interval=ConfidenceInterval(clip(beta - Z95 * se), clip(beta + Z95 * se)),
                   interval_method="ls-sandwich")
    wide = widen_estimate(est, np.full(4, 4.0), MECH, np.zeros((1, 32)))
    np.testing.assert_allclose(wide.interval.low, clip(beta - 2 * Z95 * se))
    np.testing.assert_allclose(wide.interval.high, clip(beta + 2 * Z95 * se))


def test_an_interval_clipped_wholly_to_zero_is_widened_from_its_bounds_before_clipping():
    """``[0, 0]`` only bounds its centre (≤ −half): without the unclipped bounds the widest centre is taken (never
    narrower than the exact interval); with them the widening is exact, and the widened estimate keeps its own."""
    from ldpstream.estimators.estimate import ConfidenceInterval, Estimate
    from ldpstream.estimators.intervals import Z95

    beta = np.array([-0.045, -0.021, 0.30, 1.04])  # first two: β + Z95·se < 0 (clipped to [0, 0]); last above 1
    se = np.full(4, 0.01)
    raw = ConfidenceInterval(beta - Z95 * se, beta + Z95 * se)
    clipped = ConfidenceInterval(np.clip(raw.low, 0.0, 1.0), np.clip(raw.high, 0.0, 1.0))
    point = np.array([0.0, 0.0, 0.29, 0.71])
    est = Estimate(frequencies=point, std_errors=se, n_reports=1000, method="x/project", interval=clipped,
                   interval_method="ls-sandwich")
    exact = Estimate(frequencies=point, std_errors=se, n_reports=1000, method="x/project", interval=clipped,
                     interval_method="ls-sandwich",
                     unclipped_interval=raw)
    wide_raw = ConfidenceInterval(beta - 2 * Z95 * se, beta + 2 * Z95 * se)
    deff = np.full(4, 4.0)
    got = widen_estimate(exact, deff, MECH, np.zeros((1, 32)))
    np.testing.assert_allclose(got.interval.low, np.clip(wide_raw.low, 0.0, 1.0))
    np.testing.assert_allclose(got.interval.high, np.clip(wide_raw.high, 0.0, 1.0))
    assert got.interval.high[0] == 0.0 and 0.0 < got.interval.high[1] < Z95 * se[1]  # [0, 0], [0, 0.0182]
    np.testing.assert_allclose(got.unclipped_interval.low, wide_raw.low)
    np.testing.assert_allclose(got.unclipped_interval.high, wide_raw.high)
    # widened again: as once by the product of the design effects
    twice = widen_estimate(got, deff, MECH, np.zeros((1, 32)))
    np.testing.assert_allclose(twice.interval.high, np.clip(beta + 4 * Z95 * se, 0.0, 1.0))
    # without the bounds before clipping: the conservative centre −half, never narrower than the exact interval
    old = widen_estimate(est, deff, MECH, np.zeros((1, 32)))
    np.testing.assert_allclose(old.interval.high[:2], Z95 * se[:2])  # centre −Z95·se, half 2·Z95·se
    assert np.all(old.interval.high >= got.interval.high - 1e-15)
    assert np.all(old.interval.low <= got.interval.low + 1e-15)
    assert old.unclipped_interval is None


def test_an_unclipped_interval_needs_the_frequencies_shape_and_a_published_interval():
    from ldpstream.errors import ParameterError
    from ldpstream.estimators.estimate import ConfidenceInterval, Estimate

    iv = ConfidenceInterval(np.zeros(2), np.ones(2))
    with pytest.raises(ParameterError):
        Estimate(frequencies=np.zeros(2), std_errors=None, n_reports=1, method="x", unclipped_interval=iv)
    with pytest.raises(ParameterError):
        Estimate(frequencies=np.zeros(2), std_errors=None, n_reports=1, method="x", interval=iv,
                 unclipped_interval=ConfidenceInterval(np.zeros(3), np.ones(3)))
