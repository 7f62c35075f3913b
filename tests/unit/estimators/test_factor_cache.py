"""The candidate decoders' factor cache (ldpstream/estimators/factor_cache.py): the sandwich from cached
factors against the dense sandwich and against a covariance enumerated per report, hits and misses, and the
bound."""

import numpy as np
import pytest
import scipy.sparse as sp

from ldpstream.estimators import decode_bits, decode_orr
from ldpstream.estimators.factor_cache import FactorCache
from ldpstream.estimators.numerics.sandwich import bits_meat, orr_meat
from tests.unit.estimators.designs import enumerated_covariance, hashed_design


@pytest.mark.parametrize("other", [False, True])
@pytest.mark.parametrize(("kind", "h"), [("orr", 1), ("bits", 1), ("bits", 2), ("bits", 3)])
def test_sandwich_diagonal_matches_dense_meat(kind, h, other):
    """``diag(A M A)`` from ``B = Xa A`` (sums of squares of cell combinations) equals the dense product with
    the meat formed by :meth:`SandwichMeat.dense` (sparse products), for any symmetric ``A``."""
    rng = np.random.default_rng(3)
    C, k, S = 5, 12, 30
    X = hashed_design(rng, C, k, S, h).tocsr()
    R = C * k
    o = np.full(R, h / k) if other else None
    P = S + other
    w = rng.uniform(0.5, 2.0, R)
    Nc = rng.uniform(50, 100, C)
    if kind == "orr":
        meat = orr_meat(X, o, w, rng.uniform(0.0, 0.3, R), Nc, 2.0)
    else:
        meat = bits_meat(X, o, w, rng.normal(0.03, 0.05, P), Nc, 0.75, 0.25, float(h))
    Xa = X if o is None else sp.hstack([X, sp.csr_matrix(o[:, None])]).tocsr()
    A = rng.normal(size=(P, P))
    A = A + A.T
    expected = np.einsum("ij,ji->i", A, meat.dense() @ A)
    np.testing.assert_allclose(meat.sandwich_diagonal(np.asarray(Xa @ A)), expected, rtol=1e-10,
                               atol=1e-12 * np.abs(expected).max())


def _expected_sketch(kind, X, p, Nc, k):
    C = Nc.size
    if kind == "orr":
        e = np.exp(3.0)
        return Nc[:, None] * ((1 + (e - 1) * (X @ p)) / (e + k - 1)).reshape(C, k), 3.0
    qs, ps = 0.75, 0.25
    return np.column_stack([Nc, Nc[:, None] * (ps + (qs - ps) * X @ p).reshape(C, k)]), (qs, ps)


def _decode(kind, sketch, X, rates, cache, other, method="ls"):
    if kind == "orr":
        return decode_orr(sketch, X, rates, method, other=other, factor_cache=cache, cache_key="design")
    return decode_bits(sketch, X, *rates, method, other=other, factor_cache=cache, cache_key="design")


@pytest.mark.parametrize("other", [False, True])
@pytest.mark.parametrize(("kind", "h"), [("orr", 1), ("bits", 2)])
def test_warm_decode_is_the_exact_sandwich_of_its_reference_weights(kind, h, other):
    """A decode that reuses the weights of an earlier one is the least squares with those weights: unbiased at
    the expected sketch, and its SEs are the sandwich enumerated per report for those weights (an
    independent computation), not for its own. The first decode (a miss) equals the uncached decoder."""
    rng = np.random.default_rng(21)
    C, k, S = 4, 8, 6
    X = hashed_design(rng, C, k, S, h).tocsr()
    p_ref = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    p = np.array([0.38, 0.26, 0.16, 0.1, 0.06, 0.04])  # close enough for the reference to be reused
    cache = FactorCache()
    Nc = np.full(C, 10_000.0)
    sketch_ref, rates = _expected_sketch(kind, X, p_ref, Nc, k)
    cold = _decode(kind, sketch_ref, X, rates, cache, other)
    plain = _decode(kind, sketch_ref, X, rates, None, other)
    assert cold.info["factor_cache"] == "miss"
    np.testing.assert_allclose(cold.frequencies, plain.frequencies, rtol=1e-12, atol=1e-15)
    # B = Xa Ga⁻¹ is cached in float32: SEs agree to ~1e-8
    np.testing.assert_allclose(cold.std_errors, plain.std_errors, rtol=1e-7)
    w_ref = cache.references(("design", "orr" if kind == "orr" else "bits", other, X.shape))[0].weights

    Nc2 = np.array([30_000.0, 31_000.0, 29_500.0, 30_200.0])
    sketch, _ = _expected_sketch(kind, X, p, Nc2, k)
    warm = _decode(kind, sketch, X, rates, cache, other)
    assert warm.info["factor_cache"] == "hit"
    np.testing.assert_allclose(warm.frequencies, p, atol=1e-9)
    cov = enumerated_covariance(kind, X, p, Nc2, k, rates, w_ref, other)
    np.testing.assert_allclose(warm.std_errors**2, np.diag(cov)[:S], rtol=1e-6)
    if other:
        assert warm.residual_std_error**2 == pytest.approx(cov[S, S], rel=1e-6)
    # ... and its variances are within Kantorovich's factor of those with the decode's own weights
    fresh = _decode(kind, sketch, X, rates, None, other)
    ratio = (warm.std_errors / fresh.std_errors) ** 2
    kappa = cache.tolerance
    bound = (1 + kappa) ** 2 / (4 * kappa)
    assert np.all((ratio >= 1 / bound) & (ratio <= bound))


@pytest.mark.parametrize("method", ["project", "nnls", "mle"])
def test_constrained_methods_hit_and_publish_the_same_point(method):
    """Every candidate method goes through the cache; a second decode of the same sketch is a hit and
    publishes what the first did."""
    rng = np.random.default_rng(5)
    C, k, S = 4, 16, 10
    X = hashed_design(rng, C, k, S, 2).tocsr()
    p = np.r_[np.full(5, 0.15), np.full(5, 0.05)]
    sketch, rates = _expected_sketch("bits", X, p, np.full(C, 5000.0), k)
    cache = FactorCache()
    a = _decode("bits", sketch, X, rates, cache, True, method)
    b = _decode("bits", sketch, X, rates, cache, True, method)
    assert (a.info["factor_cache"], b.info["factor_cache"]) == ("miss", "hit")
    np.testing.assert_allclose(b.frequencies, a.frequencies, atol=1e-8)
    np.testing.assert_allclose(b.std_errors, a.std_errors, rtol=1e-7)
    np.testing.assert_allclose(b.interval.low, a.interval.low, atol=1e-9)
    assert b.interval_method == a.interval_method == "ls-sandwich"
    # the score form's shift from the cached B (float32) is the uncached decode's from Ga⁻¹
    plain = _decode("bits", sketch, X, rates, None, True, method)
    assert a.interval_shift is not None and plain.interval_shift is not None and np.all(plain.interval_shift > 0)
    np.testing.assert_allclose(b.interval_shift, plain.interval_shift, rtol=1e-5)
    np.testing.assert_allclose(a.interval_shift, plain.interval_shift, rtol=1e-5)


def test_distant_weights_miss_and_the_bound_holds():
    """A sketch whose implied weights are outside the tolerance gets its own reference; at most ``per_key``
    references per key; the bytes held stay under ``max_bytes``; ``resize(0)`` disables and empties."""
    rng = np.random.default_rng(8)
    C, k, S = 4, 8, 6
    X = hashed_design(rng, C, k, S, 1).tocsr()
    cache = FactorCache(per_key=2)
    sketches = []
    for top in (0.4, 0.9, 0.05):
        p = np.r_[top, np.full(S - 1, (1 - top) / (S - 1))]
        sketches.append(_expected_sketch("orr", X, p, np.full(C, 10_000.0), k))
    outcomes = [_decode("orr", s, X, r, cache, False).info["factor_cache"] for s, r in sketches]
    assert outcomes == ["miss", "miss", "miss"]
    assert len(cache) == 2 and cache.misses == 3
    assert _decode("orr", sketches[2][0], X, sketches[2][1], cache, False).info["factor_cache"] == "hit"
    # the first reference was dropped (two per key)
    assert _decode("orr", sketches[0][0], X, sketches[0][1], cache, False).info["factor_cache"] == "miss"
    one = cache.nbytes / len(cache)
    small = FactorCache(max_bytes=int(1.5 * one))
    for s, r in sketches:
        _decode("orr", s, X, r, small, False)
    assert len(small) == 1 and small.nbytes <= small.max_bytes
    small.resize(0)
    assert len(small) == 0 and not small.enabled
    assert "factor_cache" not in _decode("orr", sketches[0][0], X, sketches[0][1], small, False).info


def test_estimate_uses_the_callers_cache_and_none_without_one():
    """``estimate`` reuses factors only through the cache it is handed (keyed by the mechanism and candidates):
    called twice on the same input without one, it does the same work both times (no factor is reused)."""
    from ldpstream.estimators import estimate
    from ldpstream.mechanisms.orappor import ORappor

    mech = ORappor(k=32, epsilon=2.0, cohorts=4)
    cands = [f"c{i}" for i in range(20)]
    rng = np.random.default_rng(0)
    sketch = mech.simulate_sketch(rng.multinomial(20_000, np.full(20, 0.05)), rng, table=mech.value_table(cands))
    cache = FactorCache()
    first = estimate(sketch, mech, "project", candidates=cands, factor_cache=cache)
    second = estimate(sketch, mech, "project", candidates=cands, factor_cache=cache)
    assert (first.info["factor_cache"], second.info["factor_cache"]) == ("miss", "hit")
    assert (cache.misses, cache.hits) == (1, 1)
    plain = [estimate(sketch, mech, "project", candidates=cands) for _ in range(2)]
    assert all("factor_cache" not in est.info for est in plain)
    np.testing.assert_array_equal(plain[0].frequencies, plain[1].frequencies)
    np.testing.assert_array_equal(plain[0].std_errors, plain[1].std_errors)
    assert (cache.misses, cache.hits) == (1, 1)  # the calls without it left it alone
    np.testing.assert_allclose(plain[0].std_errors, first.std_errors, rtol=1e-7)
    # a cache of another caller starts cold
    other = estimate(sketch, mech, "project", candidates=cands, factor_cache=FactorCache())
    assert other.info["factor_cache"] == "miss"
    # the direct decoders (closed form) accept a cache and ignore it
    from ldpstream.mechanisms.krr import KRR

    counts, krr = np.array([50, 30, 20, 0]), KRR(k=4, epsilon=2.0)
    plain_krr = estimate(counts, krr, "project")
    np.testing.assert_array_equal(estimate(counts, krr, "project", factor_cache=cache).frequencies,
                                  plain_krr.frequencies)
    assert (cache.misses, cache.hits) == (1, 1)
