"""The projected Newton MLE (ldpstream/estimators/numerics/newton_mle.py) against its formula (the KKT conditions of the
simplex-constrained likelihood, the duality-gap certificate), against EM run far past its default stopping rule,
and against scipy optimizers (SLSQP on the simplex, L-BFGS-B on the bound-constrained reformulation)."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from ldpstream.errors import ParameterError
from ldpstream.estimators.channels import AffineChannel, MatrixChannel, compressed_affine_channel
from ldpstream.estimators.em import em_multinomial
from ldpstream.estimators.numerics.newton_mle import GAP_TOL, _information, gap_certificate, newton_multinomial


def _channel(seed, k_in=8, k_out=20):
    rng = np.random.default_rng(seed)
    Q = rng.uniform(0.05, 1.0, size=(k_in, k_out))
    return Q / Q.sum(axis=1, keepdims=True)


def _counts(Q, p, n, seed):
    return np.random.default_rng(seed).multinomial(n, p @ Q).astype(float)


TRUTH = np.array([0.4, 0.25, 0.15, 0.1, 0.1, 0.0, 0.0, 0.0])


def _loglik(counts, Q, p):
    return float(counts @ np.log(p @ Q))


def _slsqp(counts, Q):
    k = Q.shape[0]
    res = minimize(lambda p: -_loglik(counts, Q, p) / counts.sum(), np.full(k, 1.0 / k),
                   jac=lambda p: -(Q @ (counts / (p @ Q))) / counts.sum(), method="SLSQP",
                   bounds=[(0.0, 1.0)] * k, constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0}],
                   options={"ftol": 1e-15, "maxiter": 2000})
    return res.x


def _lbfgsb(counts, Q):
    """The bound-constrained reformulation min −Σ n log(pQ) + N Σp, p ≥ 0 (its minimizer sums to one)."""
    k, N = Q.shape[0], counts.sum()
    res = minimize(lambda p: (-_loglik(counts, Q, p) + N * p.sum()) / N, np.full(k, 1.0 / k),
                   jac=lambda p: (-(Q @ (counts / (p @ Q))) + N) / N, method="L-BFGS-B",
                   bounds=[(0.0, None)] * k, options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 5000})
    return res.x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_newton_satisfies_the_kkt_conditions_and_its_certificate(seed):
    """KKT of max ℓ on the simplex: r_x = Q(n/m)_x / N equals 1 where p_x > 0 and is ≤ 1 where p_x = 0; the
    reported gap is the certificate N log max r, below the tolerance."""
    Q = _channel(seed)
    counts = _counts(Q, TRUTH, 20_000, seed)
    res = newton_multinomial(counts, Q)
    assert res.converged and res.gap < GAP_TOL
    assert np.all(res.p >= 0) and res.p.sum() == pytest.approx(1.0, abs=1e-12)
    r = Q @ (counts / (res.p @ Q)) / counts.sum()
    # a gap of GAP_TOL nats bounds N (max r − 1) ≤ GAP_TOL (log(1 + x) ≈ x)
    assert r.max() - 1 <= 2 * GAP_TOL / counts.sum()
    free = res.p > 1e-9
    np.testing.assert_allclose(r[free], 1.0, atol=1e-9)
    assert res.log_likelihood == pytest.approx(_loglik(counts, Q, res.p), rel=1e-12)
    assert gap_certificate(counts, MatrixChannel(Q), res.p) < GAP_TOL


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_newton_matches_em_far_past_its_stopping_rule_and_scipy(seed):
    """The same maximizer as EM run to a step of 1e-13 (no likelihood-gain rule), SLSQP on the simplex and
    L-BFGS-B on the bound-constrained form; its likelihood is at least theirs (it certifies the optimum)."""
    Q = _channel(seed)
    counts = _counts(Q, TRUTH, 20_000, seed)
    res = newton_multinomial(counts, Q)
    em = em_multinomial(counts, Q, tol=1e-13, max_iter=200_000)
    ll = _loglik(counts, Q, res.p)
    for ref in (em.p, _slsqp(counts, Q), _lbfgsb(counts, Q) / _lbfgsb(counts, Q).sum()):
        assert ll >= _loglik(counts, Q, ref) - 1e-6
    # the information bounds the distance: |Δp| ≤ sqrt(2 gap) SE; SE ≈ sqrt(p/N) ≤ 0.004 here
    np.testing.assert_allclose(res.p, em.p, atol=1e-5)


def test_the_certificate_bounds_the_gap_at_any_point():
    """ℓ(p*) − ℓ(p) ≤ N log max_x r_x(p) (Jensen) at random points of the simplex."""
    Q = _channel(5)
    counts = _counts(Q, TRUTH, 5_000, 5)
    best = newton_multinomial(counts, Q)
    ll_star = _loglik(counts, Q, best.p)
    rng = np.random.default_rng(9)
    for _ in range(50):
        p = rng.dirichlet(np.full(Q.shape[0], 0.5))
        bound = gap_certificate(counts, MatrixChannel(Q), p)
        assert ll_star - _loglik(counts, Q, p) <= bound + 1e-9


def test_a_warm_start_with_zeros_reaches_the_cold_optimum():
    """From the solution of other counts (exact zeros included), Newton moves coordinates away from 0 when their
    gradient says so, and stops at the cold decode's point."""
    Q = _channel(3)
    first = newton_multinomial(_counts(Q, TRUTH, 20_000, 3), Q)
    assert np.any(first.p == 0)
    shifted = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05])
    counts = _counts(Q, shifted, 20_000, 4)
    cold = newton_multinomial(counts, Q)
    warm = newton_multinomial(counts, Q, p0=first.p)
    assert warm.converged and warm.em_iter == 0
    np.testing.assert_allclose(warm.p, cold.p, atol=1e-8)


def test_the_hashed_channel_information_on_a_subset_is_the_full_one_indexed():
    rng = np.random.default_rng(1)
    X = sp.random(60, 12, density=0.2, random_state=rng, data_rvs=lambda n: np.ones(n), format="csr")
    ch, _counts_merged, _ = compressed_affine_channel(X, [0.3 / 60, -0.3 / 60], [0.25 / 60, 0.75 / 60],
                                              [0.4 / 60, 0.6 / 60], [rng.integers(0, 50, 60).astype(float)] * 2)
    assert isinstance(ch, AffineChannel)
    d = rng.uniform(0.5, 2.0, ch.n_outputs)
    cols = np.array([0, 3, 4, 9, 12])  # 12 = the "other" column
    np.testing.assert_allclose(_information(ch, d, cols), ch.information(d)[np.ix_(cols, cols)], rtol=1e-12)


def test_bad_input_is_refused():
    Q = _channel(0)
    with pytest.raises(ParameterError):
        newton_multinomial(np.ones(3), Q)
    with pytest.raises(ParameterError):
        newton_multinomial(-np.ones(Q.shape[1]), Q)
    with pytest.raises(ParameterError):
        newton_multinomial(np.ones(Q.shape[1]), Q, p0=np.zeros(Q.shape[0]))
    empty = newton_multinomial(np.zeros(Q.shape[1]), Q)
    np.testing.assert_allclose(empty.p, 1.0 / Q.shape[0])


def test_informations_held_across_calls_give_the_same_maximizer_and_are_reused(monkeypatch):
    """A refresh's Newton (a few more reports, started from the previous maximizer) takes the information an
    earlier call left in ``held`` when its weights are within 1%, and stops at the same certified maximizer as
    a call that forms its own; the list keeps at most HELD_INFORMATIONS."""
    import ldpstream.estimators.numerics.newton_mle as newton_mle

    Q = _channel(7)
    shifted = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05])
    counts = _counts(Q, shifted, 500_000, 8)
    grown = counts + _counts(Q, shifted, 500, 9)  # +0.1%: weights n/m² move by far less than 1%
    formed = []
    real = newton_mle._information

    def counted(*args):
        formed.append(1)
        return real(*args)

    monkeypatch.setattr(newton_mle, "_information", counted)
    held: list = []
    first = newton_multinomial(counts, Q, held=held)
    assert held and first.converged
    formed.clear()
    warm = newton_multinomial(grown, Q, p0=first.p, held=held)
    assert formed == [] and warm.converged
    alone = newton_multinomial(grown, Q, p0=first.p)
    assert formed  # without the list, the same call forms its information
    np.testing.assert_allclose(warm.p, alone.p, atol=1e-9)
    assert gap_certificate(grown, MatrixChannel(Q), warm.p) < GAP_TOL
    for seed in range(10, 10 + 2 * newton_mle.HELD_INFORMATIONS):  # counts far apart: each call forms its own
        newton_multinomial(_counts(Q, TRUTH, 2_000 * (seed - 8), seed), Q, held=held)
    assert len(held) <= newton_mle.HELD_INFORMATIONS
