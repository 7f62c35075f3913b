"""Empirical-Bayes points (ldpstream.estimators.empirical_bayes): the NPMLE against an independent optimizer, the
posterior mean against a closed form and quadrature."""

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.empirical_bayes import default_grid, npmle_prior, posterior_mean


def _log_lik(x, se, grid, g):
    dens = stats.norm.pdf((x[:, None] - grid[None, :]) / se[:, None]) / se[:, None]
    return float(np.sum(np.log(dens @ g)))


def test_npmle_matches_scipy_optimizer():
    """The EM maximizer of the mixture likelihood against L-BFGS-B on the softmax parametrization of the
    weights (an independent optimizer): the likelihood is concave in the weights, so both reach the same
    maximum; EM's is not lower than the optimizer's by more than the optimizer's tolerance."""
    rng = np.random.default_rng(3)
    f = np.concatenate([np.zeros(20), rng.choice([0.01, 0.03], size=20)])
    se = rng.uniform(0.004, 0.008, size=f.size)
    x = f + se * rng.standard_normal(f.size)
    grid = np.linspace(0, 0.05, 11)
    a, g = npmle_prior(x, se, grid, tol=1e-12)
    dens = stats.norm.pdf((x[:, None] - grid[None, :]) / se[:, None]) / se[:, None]

    def negll(theta):
        w = np.exp(theta - theta.max())
        w /= w.sum()
        m = dens @ w
        grad_w = -(dens / m[:, None]).sum(axis=0)
        return -np.sum(np.log(m)), w * (grad_w - w @ grad_w)

    res = optimize.minimize(negll, np.zeros(grid.size), jac=True, method="L-BFGS-B",
                            options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 10_000})
    w_ref = np.exp(res.x - res.x.max())
    w_ref /= w_ref.sum()
    assert np.allclose(a, grid) and abs(g.sum() - 1) < 1e-12 and np.all(g >= 0)
    assert _log_lik(x, se, grid, g) >= -res.fun - 1e-6
    assert _log_lik(x, se, grid, g) - _log_lik(x, se, grid, w_ref) < 1e-3
    # the posterior means, which is what detect publishes, agree closely (1e-4 is 2% of the smallest se)
    assert np.allclose(posterior_mean(x, se, grid, g), posterior_mean(x, se, grid, w_ref), atol=1e-4)


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
