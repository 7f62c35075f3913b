"""The shortcuts a warm refresh of the live decoder takes (docs/math/estimators.md: "Non-negative least squares",
"Information variances from an earlier decode", "Maximum likelihood by projected Newton"), each against the
exact or cold computation it replaces and, for the solvers, against an independent optimizer (scipy):

- ``face_solve_constrained_ls``: the minimizer of the weighted least squares over the (capped) simplex from the
  face of a previous solution, certified by KKT, against SLSQP and against FISTA run to convergence;
- a warm ``nnls`` decode (face solve) against the cold decode (FISTA) with the same reference weights;
- O-RR ``mle`` information variances reused from an earlier decode: within the bound they publish of the exact
  ones, and the bound itself checked on random weights (Loewner);
- a warm ``mle`` decode (Newton reusing its information between steps) against the cold decode, within the
  gap certificate's 10⁻³ standard errors;
- the sandwich's pair pattern kept between calls: the same variances;
- Prometheus: a value that leaves the top and comes back is exported again.
"""

import numpy as np
import pytest
from scipy.optimize import minimize

from ldpstream.estimators import decode_bits, decode_orr
from ldpstream.estimators.factor_cache import FactorCache, InformationReference
from ldpstream.estimators.numerics.least_squares import face_solve_constrained_ls, fista_constrained_ls
from ldpstream.estimators.numerics.sandwich import bits_meat
from ldpstream.estimators.numerics.simplex import project_capped_simplex, project_simplex
from tests.unit.estimators.designs import hashed_design


def _quadratic(rng, n, zeros):
    """A positive definite ``G`` and a ``b`` whose constrained minimizer has about ``zeros`` coordinates at 0."""
    A = rng.normal(size=(3 * n, n))
    G = A.T @ A + 0.5 * np.eye(n)
    target = rng.dirichlet(np.ones(n))
    target[rng.choice(n, zeros, replace=False)] = 0.0
    b = G @ target + rng.normal(0, 0.05, n)
    b[target == 0] -= 2.0  # push them to the boundary
    return G, b


def _slsqp(G, b, simplex):
    n = b.size
    if simplex:
        cons = [{"type": "eq", "fun": lambda x: x.sum() - 1, "jac": lambda x: np.ones(n)}]
    else:
        cons = [{"type": "ineq", "fun": lambda x: 1 - x.sum(), "jac": lambda x: -np.ones(n)}]
    res = minimize(lambda x: 0.5 * x @ G @ x - b @ x, np.full(n, 1.0 / n), jac=lambda x: G @ x - b,
                   bounds=[(0, None)] * n, constraints=cons, method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000})
    return res.x


@pytest.mark.parametrize("simplex", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_face_solve_is_the_constrained_minimizer(simplex, seed):
    """From the support of a perturbed solution (a coordinate wrongly free, one wrongly at 0), the face solve
    returns the minimizer: equal to scipy's SLSQP and to FISTA run to convergence, and KKT-exact."""
    rng = np.random.default_rng(seed)
    n = 25
    G, b = _quadratic(rng, n, 8)
    proj = project_simplex if simplex else project_capped_simplex
    x_ref, _ = fista_constrained_ls(G, b, proj, np.full(n, 1.0 / n), tol=1e-15, max_iter=200000)
    x_sls = _slsqp(G, b, simplex)
    np.testing.assert_allclose(x_ref, x_sls, atol=1e-6)
    x0 = x_ref.copy()
    zero, pos = np.flatnonzero(x0 == 0), np.flatnonzero(x0 > 0)
    x0[zero[0]] = 0.01  # a coordinate of the optimum's zeros taken as free
    x0[pos[-1]] = 0.0  # and one of its positive coordinates taken as zero
    x = face_solve_constrained_ls(G.__matmul__, lambda F: G[np.ix_(F, F)], b, x0, simplex=simplex)
    assert x is not None
    np.testing.assert_allclose(x, x_ref, atol=1e-9)
    assert x.min() >= 0 and (abs(x.sum() - 1) < 1e-12 if simplex else x.sum() <= 1 + 1e-12)


@pytest.mark.parametrize("simplex", [True, False])
def test_face_factors_kept_between_calls_give_the_same_minimizer(simplex):
    """With a ``factors`` dict, a second solve from the same start forms no Gram of its faces (they are kept) and
    returns the minimizer the solve without it returns, to rounding (a Cholesky and its Schur complement against
    the symmetric solve of the bordered system)."""
    rng = np.random.default_rng(3)
    n = 25
    G, b = _quadratic(rng, n, 8)
    proj = project_simplex if simplex else project_capped_simplex
    x_ref, _ = fista_constrained_ls(G, b, proj, np.full(n, 1.0 / n), tol=1e-15, max_iter=200000)
    x0 = x_ref.copy()
    x0[np.flatnonzero(x0 == 0)[0]] = 0.01
    formed = []

    def gram_of(F):
        formed.append(F.size)
        return G[np.ix_(F, F)]

    factors: dict = {}
    plain = face_solve_constrained_ls(G.__matmul__, lambda F: G[np.ix_(F, F)], b, x0, simplex=simplex)
    first = face_solve_constrained_ls(G.__matmul__, gram_of, b, x0, simplex=simplex, factors=factors)
    assert formed and factors
    formed.clear()
    again = face_solve_constrained_ls(G.__matmul__, gram_of, b + 1e-6, x0, simplex=simplex, factors=factors)
    assert formed == []
    assert plain is not None and first is not None and again is not None
    np.testing.assert_allclose(first, plain, atol=1e-12)
    np.testing.assert_allclose(first, x_ref, atol=1e-9)
    np.testing.assert_allclose(again, first, atol=1e-4)


def test_face_solve_declines_when_no_face_is_certified():
    """A start whose face is far from the optimum's and too few rounds: None (the caller runs FISTA)."""
    rng = np.random.default_rng(5)
    G, b = _quadratic(rng, 30, 12)
    x0 = np.zeros(30)
    x0[:2] = 0.5
    assert face_solve_constrained_ls(G.__matmul__, lambda F: G[np.ix_(F, F)], b, x0, simplex=True, rounds=1) is None


def _sketches(kind, rng, C, k, S, n, fresh):
    """A sketch of ``n`` reports and the same plus ``fresh`` more (a refresh)."""
    p = rng.dirichlet(np.full(S, 0.3))
    p = 0.9 * p  # 10% outside the candidates
    X = hashed_design(rng, C, k, S, 1 if kind == "orr" else 2)
    if kind == "orr":
        e = np.exp(3.0)
        m = ((1 + (e - 1) * (X @ p + 0.1 / k)) / (e + k - 1)).reshape(C, k)

        def draw(size):
            return np.stack([rng.multinomial(size, row / row.sum()) for row in m]).astype(float)
    else:
        r = (0.25 + 0.5 * (X @ p + 0.1 * 2 / k)).reshape(C, k)

        def draw(size):
            return np.column_stack([np.full(C, size), rng.binomial(size, r)]).astype(float)
    first = draw(n)
    return X, first, first + draw(fresh)


def _decode(kind, sketch, X, method, cache, **kw):
    key = "design" if cache is not None else None
    if kind == "orr":
        return decode_orr(sketch, X, 3.0, method, factor_cache=cache, cache_key=key, **kw)
    return decode_bits(sketch, X, 0.75, 0.25, method, factor_cache=cache, cache_key=key, **kw)


@pytest.mark.parametrize("kind", ["orr", "bits"])
def test_warm_nnls_equals_the_cold_decode_of_the_same_weights(kind):
    """The refresh's nnls from its previous estimate (face solve) equals FISTA from the least squares on the same
    reference weights, to 10⁻⁶ standard errors."""
    rng = np.random.default_rng(11)
    X, first, second = _sketches(kind, rng, 16, 16, 40, 4000, 40)
    cache = FactorCache()
    previous = _decode(kind, first, X, "nnls", cache)
    start = np.append(previous.frequencies, previous.residual)
    warm = _decode(kind, second, X, "nnls", cache, start=start)
    cold = _decode(kind, second, X, "nnls", cache)
    assert warm.info["factor_cache"] == cold.info["factor_cache"] == "hit"
    assert warm.info["nnls_solver"] == "face-kkt" and cold.info["nnls_solver"] == "fista"
    np.testing.assert_allclose(warm.frequencies, cold.frequencies, atol=1e-6 * warm.std_errors.min())
    np.testing.assert_array_equal(warm.std_errors, cold.std_errors)


def _reports(kind, sketch):
    return sketch.sum(axis=1) if kind == "orr" else sketch[:, 0]


@pytest.mark.parametrize("kind", ["orr", "bits"])
def test_a_grown_window_reuses_its_sandwich_variances_within_one_percent(kind):
    """A window whose counts only grew, by at most 1% per cohort, with its cells' model variances within a
    spread of 1.04 of the old ones, publishes the sandwich variances of its last exact computation times
    sqrt(a b) (factor_cache module docstring), and says so; its standard errors stay within 1% of the exact ones.
    A window that grew by more, or lost reports, is computed exactly again."""
    rng = np.random.default_rng(13)
    X, first, second = _sketches(kind, rng, 16, 16, 40, 40_000, 200)  # +0.5% of reports
    cache = FactorCache()
    ref = _decode(kind, first, X, "project", cache)
    assert ref.info["se_sandwich"] == "exact"
    grown = _decode(kind, second, X, "project", cache)
    assert grown.info["factor_cache"] == "hit" and grown.info["se_sandwich"] == "reused"
    n_ref, n = _reports(kind, first), _reports(kind, second)
    assert grown.info["se_reused_growth"] == pytest.approx(np.max(n / n_ref) - 1)
    spread = grown.info["se_reused_spread"]
    assert 1 <= spread <= 1.04
    ratio = grown.std_errors**2 / ref.std_errors**2  # one common factor sqrt(a b), with b/a = spread
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
    assert n_ref.sum() / n.sum() / spread <= ratio[0] <= n_ref.sum() / n.sum() * spread
    cache.variance_growth = 0.0  # the same reference, the sandwich computed
    exact = _decode(kind, second, X, "project", cache)
    cache.variance_growth = 0.01
    assert exact.info["factor_cache"] == "hit" and exact.info["se_sandwich"] == "exact"
    assert np.max(np.abs(grown.std_errors / exact.std_errors - 1)) <= 0.01
    much = first + 5 * (second - first)  # +2.5%
    assert _decode(kind, much, X, "project", cache).info["se_sandwich"] == "exact"
    lost = first.copy()
    lost[0, 1] -= 1  # a cell fell: the window lost reports (an expired bucket)
    assert _decode(kind, lost, X, "project", cache).info["se_sandwich"] == "exact"


def test_a_burst_of_an_absent_value_moves_the_fit_and_its_variances_are_computed_again():
    """O-RAPPOR, S = 32, C = 8, k = 256, ε = 8, h = 1: a 0.8% burst of reports of a value that was absent grows every
    cohort by under 1%, but moves that value's cells' model variances far: the variances are computed exactly, so
    the published standard errors equal the exact ones (reused, that value's was 0.84 of the exact)."""
    rng = np.random.default_rng(5)
    C, k, S, n = 8, 256, 32, 200_000
    e = np.exp(8.0 / 2)
    q, p = e / (1 + e), 1 / (1 + e)
    X = hashed_design(rng, C, k, S, 1)
    truth = np.r_[rng.dirichlet(np.ones(S - 1)), 0.0]
    burst = np.zeros(S)
    burst[-1] = 1.0

    def draw(freq, size):
        r = (p + (q - p) * (X @ freq)).reshape(C, k)
        return np.column_stack([np.full(C, size), rng.binomial(size, r)]).astype(float)

    first = draw(truth, n // C)
    second = first + draw(burst, int(0.008 * n) // C)
    def decode(sketch, cache, growth=0.01, spread=1.04):
        cache.variance_growth, cache.variance_spread = growth, spread
        return decode_bits(sketch, X, q, p, "project", factor_cache=cache, cache_key="d")

    cache = FactorCache()
    assert decode(first, cache).info["se_sandwich"] == "exact"
    grown = decode(second, cache)
    assert grown.info["factor_cache"] == "hit" and grown.info["se_sandwich"] == "exact"
    exact = decode(second, cache, growth=0.0)  # the same reference, the sandwich computed
    np.testing.assert_allclose(grown.std_errors, exact.std_errors, rtol=1e-12)
    gated_on_growth = FactorCache()  # the burst's value is then off by more than 2%
    decode(first, gated_on_growth, spread=np.inf)
    reused = decode(second, gated_on_growth, spread=np.inf)
    assert reused.info["se_sandwich"] == "reused"
    exact = decode(second, gated_on_growth, growth=0.0)
    assert abs(reused.std_errors[-1] / exact.std_errors[-1] - 1) > 0.02


def test_information_variances_within_their_published_bound():
    """O-RR mle: a refresh's information variances, reused from the previous decode, are within the bound they
    publish of the exact ones (decoded without the cache), and the bound is at most 1%."""
    rng = np.random.default_rng(4)
    X, first, second = _sketches("orr", rng, 16, 16, 40, 40000, 40)
    cache = FactorCache()
    _decode("orr", first, X, "mle", cache)
    warm = _decode("orr", second, X, "mle", cache)
    exact = _decode("orr", second, X, "mle", None)
    assert warm.info["information_variances"] == "reused"
    bound = warm.info["information_se_bound"]
    assert 0 < bound <= 0.01
    np.testing.assert_allclose(warm.frequencies, exact.frequencies, rtol=0, atol=1e-12)
    ratio = warm.std_errors / exact.std_errors
    assert np.all(np.abs(ratio - 1) <= bound * (1 + 1e-9)), (ratio.min(), ratio.max(), bound)
    assert abs(warm.residual_std_error / exact.residual_std_error - 1) <= bound * (1 + 1e-9)
    # a common scale is free (4× the reports: the same bound), a window of other counts is computed exactly
    assert _decode("orr", second * 4, X, "mle", cache).info["information_variances"] == "reused"
    assert _decode("orr", second - first, X, "mle", cache).info["information_variances"] == "exact"


def test_information_bound_holds_on_random_weights():
    """``J = Bᵀ diag(d) B``: with ``d`` within ``[a, b]·d_ref`` cell by cell, every diagonal of ``J⁻¹`` lies within
    ``[1/b, 1/a]`` of the reference one (the Loewner argument the reuse rests on), so the geometric middle the
    cache returns is within ``sqrt(b/a)``."""
    rng = np.random.default_rng(8)
    B = rng.normal(size=(60, 12))
    d_ref = rng.uniform(0.5, 2.0, 60)
    var_ref = np.diag(np.linalg.inv(B.T @ (d_ref[:, None] * B)))
    cache = FactorCache(information_tolerance=1.3)
    cache.add_information("k", d_ref, var_ref)
    for _ in range(20):
        d = d_ref * rng.uniform(0.9, 1.15, 60)
        exact = np.diag(np.linalg.inv(B.T @ (d[:, None] * B)))
        a, b = InformationReference(d_ref, var_ref).spread(d)
        assert np.all(exact >= var_ref / b * (1 - 1e-12)) and np.all(exact <= var_ref / a * (1 + 1e-12))
        got = cache.information_variances("k", d)
        if b / a <= 1.3:
            assert got is not None
            var, bound = got
            assert np.all(np.abs(np.sqrt(var / exact) - 1) <= bound + 1e-12)
        else:
            assert got is None


@pytest.mark.parametrize("kind", ["orr", "bits"])
def test_warm_mle_equals_the_cold_decode(kind):
    """A refresh's mle from the previous estimate (projected Newton reusing its information between steps)
    reaches the cold decode's maximizer: every coordinate within 10⁻³ of its standard error, as the gap
    certificate promises for both."""
    rng = np.random.default_rng(6)
    X, first, second = _sketches(kind, rng, 16, 16, 40, 20000, 200)
    previous = _decode(kind, first, X, "mle", None)
    start = np.append(previous.frequencies, previous.residual)
    warm = _decode(kind, second, X, "mle", None, start=start)
    cold = _decode(kind, second, X, "mle", None)
    assert warm.info["certified"] and cold.info["certified"]
    assert np.all(np.abs(warm.frequencies - cold.frequencies) <= 2e-3 * cold.std_errors)


def test_pair_pattern_kept_between_calls_gives_the_same_variances():
    """The sandwich's pair part with its design-only pattern made once and kept (the factor cache's use) equals
    the variances computed from scratch."""
    rng = np.random.default_rng(2)
    C, k, S = 6, 16, 40
    X = hashed_design(rng, C, k, S, 3)
    R = C * k
    B = rng.normal(size=(R, S + 1)).astype(np.float32)
    o = np.full(R, 3 / k)
    kept: dict = {}
    for _ in range(3):
        meat = bits_meat(X, o, rng.uniform(0.5, 2, R), rng.normal(0.02, 0.03, S + 1), rng.uniform(50, 90, C),
                         0.75, 0.25, 3.0)
        np.testing.assert_allclose(meat.sandwich_diagonal(B, kept), meat.sandwich_diagonal(B), rtol=1e-12)
        assert kept


def test_a_value_back_in_the_top_is_exported_again():
    """The decoder's Prometheus series of a value are looked up once while shown; a value that leaves the top
    (its series removed) and comes back is exported again."""
    from prometheus_client import CollectorRegistry, generate_latest

    from ldpstream.decoder.metrics import DecoderMetrics
    from ldpstream.decoder.published import PublishedEstimate
    from ldpstream.estimators import Estimate

    registry = CollectorRegistry()
    metrics = DecoderMetrics(registry)

    def publish(freqs):
        est = Estimate(frequencies=np.array(freqs), std_errors=np.full(3, 0.01), n_reports=100, method="krr/project")
        metrics.observe(PublishedEstimate("m", "all", 0.0, 0.0, 1, est, ("a", "b", "c")), top_n=1)
        return generate_latest(registry).decode()

    assert 'value="a"' in publish([0.6, 0.3, 0.1])
    shown = publish([0.2, 0.7, 0.1])
    assert 'value="a"' not in shown and 'value="b"' in shown
    back = publish([0.5, 0.4, 0.1])
    assert 'ldpstream_estimate_ratio{metric="m",value="a",window="all"} 0.5' in back


def test_published_body_is_the_json_of_the_estimate_and_of_its_republished_copy():
    """The body published is ``json_text(to_json())`` byte for byte, also for a copy republished unchanged
    (which reuses the text of its values) and for a discovery dictionary (a subclass with more keys)."""
    from dataclasses import replace

    from ldpstream.decoder.discovery import PublishedDictionary
    from ldpstream.decoder.published import PublishedEstimate, json_text
    from ldpstream.estimators import Estimate

    est = Estimate(frequencies=np.array([0.5, 0.25, np.nan]), std_errors=np.array([0.1, 0.05, 0.2]), n_reports=100,
                   method="krr/project",
                   residual=0.1, info={"x": 1})
    published = PublishedEstimate("m", "all", 1.0, 0.5, 3, est, ('a"', "é", "c"), (0, 3600), None,
                                  np.array([1.0, 1.5, 2.0]))
    assert published.body() == json_text(published.to_json())
    again = replace(published, snapshot_time=2.0, reused=True)
    assert again.values_text == published.values_text
    assert again.body() == json_text(again.to_json()) != published.body()
    dictionary = PublishedDictionary("d", "all", 1.0, 0.5, 1, est, ("a", "b", "c"), discovery={"k": 2})
    assert dictionary.body() == json_text(dictionary.to_json())
