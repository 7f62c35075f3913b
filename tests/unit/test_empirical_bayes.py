"""Empirical-Bayes points (ldpstream.estimators.empirical_bayes) and Storey's null share
(ldpstream.estimators.detection.storey_null_fraction): each against its formula and an independent reference."""

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.detection import DetectionEstimate, storey_null_fraction
from ldpstream.estimators.empirical_bayes import default_grid, npmle_prior, posterior_mean


def _log_lik(x, se, grid, g):
    dens = stats.norm.pdf((x[:, None] - grid[None, :]) / se[:, None]) / se[:, None]
    return float(np.sum(np.log(dens @ g)))


def test_npmle_matches_scipy_optimizer():
    """The EM maximizer of the mixture likelihood against SLSQP on the simplex (an independent optimizer):
    the likelihood is concave in the weights, so both reach the same maximum; EM's is not lower."""
    rng = np.random.default_rng(3)
    f = np.concatenate([np.zeros(20), rng.choice([0.01, 0.03], size=20)])
    se = rng.uniform(0.004, 0.008, size=f.size)
    x = f + se * rng.standard_normal(f.size)
    grid = np.linspace(0, 0.05, 11)
    a, g = npmle_prior(x, se, grid, tol=1e-12)
    dens = stats.norm.pdf((x[:, None] - grid[None, :]) / se[:, None]) / se[:, None]
    res = optimize.minimize(lambda w: -np.sum(np.log(dens @ w + 1e-300)), np.full(grid.size, 1 / grid.size),
                            jac=lambda w: -(dens / (dens @ w)[:, None]).sum(axis=0), method="SLSQP",
                            bounds=[(0, 1)] * grid.size,
                            constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1}],
                            options={"ftol": 1e-14, "maxiter": 1000})
    assert res.success
    assert np.allclose(a, grid) and abs(g.sum() - 1) < 1e-12 and np.all(g >= 0)
    assert _log_lik(x, se, grid, g) >= -res.fun - 1e-6
    assert _log_lik(x, se, grid, g) - (-res.fun) < 1e-3
    # the posterior means, which is what detect publishes, agree closely
    assert np.allclose(posterior_mean(x, se, grid, g), posterior_mean(x, se, grid, np.maximum(res.x, 0)),
                       atol=1e-4)


def test_posterior_mean_two_point_prior_closed_form():
    """With g = (1 − w) δ_0 + w δ_a: E[f | x] = a w φ((x − a)/se) / ((1 − w) φ(x/se) + w φ((x − a)/se))."""
    x = np.array([-0.01, 0.0, 0.004, 0.01, 0.03])
    se = np.array([0.005, 0.005, 0.004, 0.006, 0.005])
    a, w = 0.01, 0.3
    got = posterior_mean(x, se, [0.0, a], [1 - w, w])
    at_a = w * stats.norm.pdf((x - a) / se)
    want = a * at_a / ((1 - w) * stats.norm.pdf(x / se) + at_a)
    assert np.allclose(got, want, rtol=1e-12)


def test_posterior_mean_matches_quadrature_for_a_continuous_prior():
    """An exponential prior discretized on a fine grid (trapezoid weights) against the posterior mean by
    numerical integration (scipy.integrate.quad): they agree to the discretization error, O(step²)."""
    lam = 100.0
    grid = np.linspace(0, 0.2, 4001)
    g = np.exp(-lam * grid)
    g[[0, -1]] /= 2
    g /= g.sum()
    for x, se in ((0.002, 0.005), (0.02, 0.004), (0.05, 0.01)):
        num = integrate.quad(lambda f, x=x, se=se: f * np.exp(-lam * f) * stats.norm.pdf((x - f) / se), 0, 0.2,
                             points=[x])[0]
        den = integrate.quad(lambda f, x=x, se=se: np.exp(-lam * f) * stats.norm.pdf((x - f) / se), 0, 0.2,
                             points=[x])[0]
        assert posterior_mean([x], [se], grid, g)[0] == pytest.approx(num / den, rel=1e-3)


def test_default_grid_is_fine_near_zero_and_keeps_large_estimates():
    x = np.array([-0.001, 0.0005, 0.003, 0.2, 0.5])
    se = np.full(5, 0.001)
    a = default_grid(x, se)
    assert a[0] == 0.0 and np.all(np.diff(a) > 0)
    assert np.max(np.diff(a[a <= 0.04])) <= 0.25 * 0.001 + 1e-12
    assert 0.2 in a and 0.5 in a


def test_bad_inputs():
    with pytest.raises(ParameterError):
        npmle_prior([0.1, 0.2], [0.01])
    with pytest.raises(ParameterError):
        posterior_mean([0.1], [0.0], [0.0, 1.0], [0.5, 0.5])
    with pytest.raises(ParameterError):
        storey_null_fraction(np.array([0.1, 0.9]), lam=1.0)


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
