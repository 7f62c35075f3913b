"""Unit tests of the decoder building blocks: simplex projection, the Estimate object, EM."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from ldpstream.errors import ParameterError
from ldpstream.estimators import (
    AffineChannel,
    Estimate,
    MatrixChannel,
    em_multinomial,
    estimate_krr,
    krr_channel,
    project_capped_simplex,
    project_simplex,
    truncate_normalize,
    weighted_gram,
)
from tests.unit.estimators.designs import enumerated_covariance, hashed_design


def _reference_projection(v):
    k = v.size
    res = minimize(
        lambda x: 0.5 * np.sum((x - v) ** 2),
        np.full(k, 1 / k),
        jac=lambda x: x - v,
        bounds=[(0, None)] * k,
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1, "jac": lambda x: np.ones(k)}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    return res.x


def test_projection_matches_scipy_reference():
    rng = np.random.default_rng(0)
    for k in (1, 2, 5, 17, 40):
        for _ in range(5):
            v = rng.normal(scale=rng.uniform(0.1, 3), size=k)
            np.testing.assert_allclose(project_simplex(v), _reference_projection(v), atol=1e-6)


def test_projection_on_simplex_idempotent_and_rowwise():
    rng = np.random.default_rng(1)
    V = rng.normal(size=(50, 33))
    P = project_simplex(V)
    assert np.all(P >= 0)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_allclose(project_simplex(P), P, atol=1e-12)
    for i in range(V.shape[0]):
        np.testing.assert_allclose(P[i], project_simplex(V[i]))
    x = rng.dirichlet(np.ones(10))
    np.testing.assert_allclose(project_simplex(x), x, atol=1e-12)


def test_capped_simplex_and_truncate():
    v = np.array([0.2, -0.1, 0.3])
    np.testing.assert_allclose(project_capped_simplex(v), [0.2, 0, 0.3])
    w = np.array([0.9, 0.8, -1.0])
    np.testing.assert_allclose(project_capped_simplex(w), project_simplex(w))
    np.testing.assert_allclose(truncate_normalize([0.5, -0.2, 1.5]), [0.25, 0, 0.75])
    np.testing.assert_allclose(truncate_normalize([-1.0, -2.0]), [0.5, 0.5])


def test_sandwich_slopes_are_the_derivative_of_the_sandwich_variance():
    """``inverse_rows_at_nonzeros`` against the dense ``X G⁻¹``; ``sandwich_slopes`` against central differences of
    ``diag(A V(Xf) Aᵀ)`` in ``f_s`` (``A = G⁻¹XᵀW`` fixed, binomial cells ``V = r(1 − r)/N``, duplicates summed)."""
    from ldpstream.estimators.numerics.linalg import inverse_rows_at_nonzeros, sandwich_slopes

    rng = np.random.default_rng(8)
    X = sp.random(80, 12, density=0.25, random_state=9, format="csr")
    X.data[:] = 1.0
    X = sp.csr_matrix(sp.vstack([X, X[:5]]))  # repeated rows; and one duplicate entry
    X = sp.csr_matrix((np.append(X.data, 1.0), np.append(X.indices, X.indices[0]),
                       np.append(X.indptr[:-1], X.nnz + 1)), shape=X.shape)
    w = rng.uniform(0.5, 2.0, X.shape[0])
    Xd = X.toarray()
    G = Xd.T @ (w[:, None] * Xd)
    Gi = np.linalg.inv(G)
    cell = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    np.testing.assert_allclose(inverse_rows_at_nonzeros(X, Gi), (Xd @ Gi)[cell, X.indices], rtol=1e-10, atol=1e-14)
    f, N = rng.dirichlet(np.ones(12)), 1000.0
    A = Gi @ Xd.T * w[None, :]

    def variances(f):
        r = 0.25 + 0.5 * (Xd @ f)
        return (A**2 * (r * (1 - r) / N)[None, :]).sum(axis=1)

    r = 0.25 + 0.5 * (Xd @ f)
    slopes = sandwich_slopes(X, inverse_rows_at_nonzeros(X, Gi), w, 0.5 * (1 - 2 * r) / N)
    h = 1e-6
    for s in range(12):
        e = np.zeros(12)
        e[s] = h
        np.testing.assert_allclose(slopes[s], (variances(f + e)[s] - variances(f - e)[s]) / (2 * h), rtol=1e-6)


def test_weighted_gram_matches_sparse_product():
    rng = np.random.default_rng(2)
    X = sp.random(60, 25, density=0.2, random_state=3, format="csr")
    w = rng.uniform(size=60)
    ref = (X.T @ sp.diags(w) @ X).toarray()
    np.testing.assert_allclose(weighted_gram(X, w), ref, atol=1e-12)
    np.testing.assert_allclose(weighted_gram(X, w, max_pairs=1), ref, atol=1e-12)


def test_affine_channel_matches_dense():
    rng = np.random.default_rng(4)
    C, k, S = 3, 5, 7
    rows = (np.arange(C)[:, None] * k + rng.integers(0, k, (C, S))).ravel()
    X = sp.csr_matrix((np.ones(C * S), (rows, np.tile(np.arange(S), C))), shape=(C * k, S))
    extra = rng.uniform(size=(2 * C * k, 1))
    ch = AffineChannel(X, [0.3, -0.3], [0.1, 0.2], extra)
    Xd = X.toarray()
    A = np.hstack([np.vstack([0.3 * Xd + 0.1, -0.3 * Xd + 0.2]), extra])  # outputs x inputs
    p = rng.dirichlet(np.ones(S + 1))
    w = rng.uniform(size=2 * C * k)
    np.testing.assert_allclose(ch.forward(p), A @ p)
    np.testing.assert_allclose(ch.adjoint(w), A.T @ w)
    np.testing.assert_allclose(ch.information(w), A.T @ (w[:, None] * A))
    np.testing.assert_allclose(MatrixChannel(A.T).information(w), A.T @ (w[:, None] * A))


@pytest.mark.parametrize("accelerate", [False, True])
def test_em_recovers_p_from_expected_counts(accelerate):
    rng = np.random.default_rng(5)
    k = 12
    p = rng.dirichlet(np.ones(k))
    Q = krr_channel(k, 1.5)
    res = em_multinomial(1e6 * (p @ Q), Q, tol=1e-12, max_iter=200_000, accelerate=accelerate)
    assert res.converged
    np.testing.assert_allclose(res.p, p, atol=1e-6)


@pytest.mark.parametrize("accelerate", [False, True])
def test_em_likelihood_monotone(accelerate):
    rng = np.random.default_rng(6)
    k = 30
    p = rng.dirichlet(np.full(k, 0.3))
    Q = krr_channel(k, 0.7)
    counts = rng.multinomial(20_000, p @ Q)
    res = em_multinomial(counts, sp.csr_matrix(Q), tol=1e-10, max_iter=500, accelerate=accelerate, track=True)
    h = np.array(res.history)
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[:-1]))
    assert np.all(res.p >= 0) and res.p.sum() == pytest.approx(1.0)


def test_em_accelerated_matches_plain():
    rng = np.random.default_rng(7)
    k = 20
    Q = krr_channel(k, 1.0)
    counts = rng.multinomial(50_000, rng.dirichlet(np.ones(k)) @ Q)
    a = em_multinomial(counts, Q, tol=1e-13, max_iter=100_000, accelerate=True)
    b = em_multinomial(counts, Q, tol=1e-13, max_iter=200_000, accelerate=False)
    assert a.log_likelihood >= b.log_likelihood - 1e-6
    np.testing.assert_allclose(a.p, b.p, atol=1e-4)


def test_estimate_object_api():
    est = Estimate(
        frequencies=np.array([0.5, 0.3, 0.01, 0.0]),
        std_errors=np.array([0.01, 0.01, 0.01, 0.01]),
        n_reports=1000,
        method="test",
        labels=["a", "b", "c", "d"],
        detection_floor=0.03,
    )
    low, high = est.ci(0.95)
    np.testing.assert_allclose(high - low, 2 * 1.959964 * 0.01, rtol=1e-5)
    assert est.significant().tolist() == [True, True, False, False]
    assert est.significant(correction="bh").tolist() == [True, True, False, False]
    assert est.top(2) == [("a", 0.5), ("b", 0.3)]
    d = json.loads(json.dumps(est.to_dict()))
    assert d["labels"] == ["a", "b", "c", "d"] and d["n_reports"] == 1000
    np.testing.assert_allclose(est.counts, [500, 300, 10, 0])
    with pytest.raises(ParameterError):
        Estimate(frequencies=np.zeros(2), std_errors=None, n_reports=1, method="x").significant()
    with pytest.raises(ParameterError):
        est.significant(correction="holm")  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # built by keyword only: a field out of place cannot pass unnoticed
        Estimate(np.zeros(2), None, 1, "x")  # type: ignore[misc]


def test_bh_more_liberal_than_bonferroni():
    z = np.array([5.0, 2.3, 2.2, 2.1, 0.0, 0.0])
    est = Estimate(frequencies=z * 0.01, std_errors=np.full(6, 0.01), n_reports=100, method="t")
    bonf, bh = est.significant(), est.significant(correction="bh")
    assert bonf.sum() == 1 and bh.sum() == 4
    assert np.all(bh >= bonf)


def test_direct_validation():
    with pytest.raises(ParameterError):
        estimate_krr(np.zeros(4), 1.0)
    with pytest.raises(ParameterError):
        estimate_krr(np.ones(4), -1.0)
    with pytest.raises(ParameterError):
        estimate_krr(np.ones(4), 1.0, method="magic")  # type: ignore[arg-type]


@pytest.mark.parametrize("with_other", [False, True])
def test_affine_constrained_variances_match_dense(with_other):
    """The sparse tangent-space/Woodbury route equals constrained_variances of the dense information."""
    from ldpstream.estimators import constrained_variances
    from ldpstream.estimators.numerics.variance import affine_constrained_variances

    rng = np.random.default_rng(8)
    C, k, S = 6, 16, 25
    R = C * k
    rows = (np.arange(C)[:, None] * k + rng.integers(0, k, (C, S))).ravel()
    X = sp.csr_matrix((np.ones(C * S), (rows, np.tile(np.arange(S), C))), shape=(R, S))
    extra = np.concatenate([np.full(R, 0.3 / R), np.full(R, 0.7 / R)]) if with_other else None
    ch = AffineChannel(X, [0.4 / R, -0.4 / R], [0.2 / R, 0.8 / R], extra)
    p = rng.dirichlet(np.ones(ch.n_inputs))
    m = ch.forward(p)
    d = rng.poisson(1e5 * m) / m**2
    np.testing.assert_allclose(affine_constrained_variances(ch, d), constrained_variances(ch.information(d)),
                               rtol=1e-8)


@pytest.mark.parametrize("kind", ["orr", "bits"])
def test_compressed_channel_same_mle(kind):
    """Merging the cells no candidate touches leaves the EM maximizer and log-likelihood unchanged."""
    from ldpstream.estimators.channels import compressed_affine_channel as _compressed_channel

    rng = np.random.default_rng(9)
    C, k, S = 4, 64, 6  # most of the C·k cells are empty
    rows = (np.arange(C)[:, None] * k + rng.integers(0, k, (C, S))).ravel()
    X = sp.csr_matrix((np.ones(C * S), (rows, np.tile(np.arange(S), C))), shape=(C * k, S))
    p = rng.dirichlet(np.ones(S))
    if kind == "orr":
        scales, offsets, extra = [0.5 / (C * k)], [0.5 / (C * k)], [1.0 / (C * k)]
    else:
        scales, offsets, extra = [0.5 / (C * k), -0.5 / (C * k)], [0.25 / (C * k), 0.75 / (C * k)], [0.3, 0.7]
        extra = [e / (C * k) for e in extra]
    full = AffineChannel(X, scales, offsets, np.concatenate([np.full(C * k, e) for e in extra]))
    counts = rng.poisson(1e5 * full.forward(np.append(0.9 * p, 0.1)))
    blocks = list(counts.reshape(len(scales), C * k))
    small, small_counts, shift = _compressed_channel(X, scales, offsets, extra, blocks)
    assert small.n_outputs < full.n_outputs
    a = em_multinomial(counts, full, tol=1e-12, max_iter=100_000)
    b = em_multinomial(small_counts, small, tol=1e-12, max_iter=100_000)
    np.testing.assert_allclose(a.p, b.p, atol=1e-9)
    assert a.log_likelihood == pytest.approx(b.log_likelihood + shift, abs=1e-6 * abs(a.log_likelihood))


# -- candidate decoders: sandwich covariance, intervals, MLE ------------------------------------------------

@pytest.mark.parametrize("other", [False, True])
@pytest.mark.parametrize(("kind", "h"), [("orr", 1), ("bits", 1), ("bits", 2)])
def test_ls_sandwich_matches_brute_force(kind, h, other):
    """At the expected sketch (fit = truth) the decoder's SEs equal the sandwich built from the per-report
    covariance enumerated over values (multinomial for O-RR; Bloom bits set together for h = 2)."""
    from ldpstream.estimators import decode_bits, decode_orr

    rng = np.random.default_rng(21)
    C, k, S, N = 4, 8, 6, 40_000.0
    X = hashed_design(rng, C, k, S, h)
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    Nc = np.full(C, N / C)
    if kind == "orr":
        eps = 3.0
        e = np.exp(eps)
        sketch = Nc[:, None] * ((1 + (e - 1) * (X @ p)) / (e + k - 1)).reshape(C, k)
        est = decode_orr(sketch, X, eps, "ls", other=other)
        rates: object = eps
    else:
        qs, ps = 0.75, 0.25
        sketch = np.column_stack([Nc, Nc[:, None] * (ps + (qs - ps) * X @ p).reshape(C, k)])
        est = decode_bits(sketch, X, qs, ps, "ls", other=other)
        rates = (qs, ps)
    np.testing.assert_allclose(est.frequencies, p, atol=1e-9)
    cov = enumerated_covariance(kind, X, p, Nc, k, rates, None, other)
    np.testing.assert_allclose(est.std_errors**2, np.diag(cov)[:S], rtol=1e-6)
    if other:
        assert est.residual_std_error**2 == pytest.approx(cov[S, S], rel=1e-6)


def test_orr_ls_se_matches_error_model():
    """The decoder and the tuning error model (ldpstream.simulation.error_model) agree on O-RR at small k."""
    from ldpstream.estimators import decode_orr
    from ldpstream.mechanisms.orr import ORR
    from ldpstream.simulation.error_model import predicted_variances
    from ldpstream.simulation.setups import Setup

    mech = ORR(k=4, epsilon=3.0, cohorts=4, support=6)
    X = mech.design_matrix(None)
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    n = 40_000
    e = np.exp(3.0)
    sketch = (n / 4) * ((1 + (e - 1) * (X @ p)) / (e + 3)).reshape(4, 4)
    est = decode_orr(sketch, X, 3.0, "ls", other=False)
    var, _ = predicted_variances(Setup("orr", mech, 6, True), p, n, reference="true")
    np.testing.assert_allclose(est.std_errors**2, var, rtol=1e-6)


@pytest.mark.parametrize("method", ["project", "nnls", "mle"])
def test_constrained_decoders_publish_the_ls_interval(method):
    """Constrained points carry the LS sandwich interval (its score form), clipped to [0, 1], and say so."""
    from ldpstream.estimators import decode_bits

    rng = np.random.default_rng(22)
    C, k, S = 4, 16, 6
    X = hashed_design(rng, C, k, S, 2)
    p = np.array([0.5, 0.3, 0.2, 0.0, 0.0, 0.0])
    Nc = np.full(C, 2000)
    sketch = np.column_stack([Nc, rng.binomial(Nc[:, None], (0.25 + 0.5 * X @ p).reshape(C, k))])
    ls = decode_bits(sketch, X, 0.75, 0.25, "ls")
    est = decode_bits(sketch, X, 0.75, 0.25, method)
    assert est.interval_method == "ls-sandwich" and ls.interval_method == "wald"
    low, high = est.ci()
    assert np.all((low >= 0) & (high <= 1) & (low <= high))
    # the bounds before clipping (for a window's widening): the score form about β̂_LS, centred z²b/2 away from it
    # with half-width sqrt((z²b/2)² + (z SE_LS)²), negative for the absent values (sandwich_slopes gives b)
    raw = est.unclipped_interval
    z = 1.959963984540054
    shift = (raw.low + raw.high) / 2 - ls.frequencies
    np.testing.assert_allclose((raw.high - raw.low) / 2, np.sqrt(shift**2 + (z * ls.std_errors) ** 2), rtol=1e-10)
    assert np.all(np.abs(shift) < 0.1 * z * ls.std_errors)  # a small-count correction at 2,000 reports a cohort
    np.testing.assert_array_equal(np.clip(raw.low, 0, 1), low)
    np.testing.assert_array_equal(np.clip(raw.high, 0, 1), high)
    assert ls.unclipped_interval is None and np.any(raw.low < 0)


def _scipy_mle(kind, sketch, X, rates):
    """Maximize the O-RR multinomial / bit composite log-likelihood over the simplex with SLSQP."""
    S = X.shape[1]
    if kind == "orr":
        e = np.exp(rates)
        k = sketch.shape[1]
        n = sketch.ravel()

        def nll(p):
            m = (1 + (e - 1) * (X @ p)) / (e + k - 1)
            return -float(n @ np.log(m))
    else:
        qs, ps = rates
        Nc, bits = sketch[:, 0], sketch[:, 1:].ravel()
        k = sketch.shape[1] - 1
        Nrow = np.repeat(Nc, k)

        def nll(p):
            r = ps + (qs - ps) * (X @ p)
            return -float(bits @ np.log(r) + (Nrow - bits) @ np.log(1 - r))

    res = minimize(nll, np.full(S, 1.0 / S), method="SLSQP", bounds=[(0.0, 1.0)] * S,
                   constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0}],
                   options={"ftol": 1e-14, "maxiter": 1000})
    return res.x, nll


@pytest.mark.parametrize("kind", ["orr", "bits"])
def test_candidate_mle_matches_scipy_optimizer(kind):
    """EM's candidate MLE (other=False) attains the optimum an independent optimizer finds."""
    from ldpstream.estimators import decode_bits, decode_orr

    rng = np.random.default_rng(23)
    C, k, S = 4, 8, 6
    X = hashed_design(rng, C, k, S, 1 if kind == "orr" else 2)
    p = np.array([0.45, 0.3, 0.15, 0.1, 0.0, 0.0])
    Nc = np.full(C, 5000)
    if kind == "orr":
        e = np.exp(2.0)
        m = ((1 + (e - 1) * (X @ p)) / (e + k - 1)).reshape(C, k)
        sketch = np.array([rng.multinomial(Nc[c], m[c]) for c in range(C)], dtype=float)
        est, rates = decode_orr(sketch, X, 2.0, "mle", other=False, tol=1e-12), 2.0
    else:
        rates = (0.75, 0.25)
        sketch = np.column_stack([Nc, rng.binomial(Nc[:, None], (0.25 + 0.5 * X @ p).reshape(C, k))]).astype(float)
        est = decode_bits(sketch, X, *rates, "mle", other=False, tol=1e-12)
    ref, nll = _scipy_mle(kind, sketch, X, rates)
    # EM stops on gains below 1e-7 nats an iteration; 1e-4 nats is a displacement of ~sqrt(2e-4) = 0.014 SE
    assert abs(nll(est.frequencies) - nll(ref)) <= 1e-4
    np.testing.assert_allclose(est.frequencies, ref, atol=2e-4)
