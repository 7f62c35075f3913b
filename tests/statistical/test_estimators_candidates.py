"""Candidate decoders on synthetic O-RR / O-RAPPOR sketches drawn exactly with numpy (fixed seeds)."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from ldpstream.estimators import decode_bits, decode_orr

pytestmark = pytest.mark.statistical

C, K, S_ALL, S_LIST, N = 16, 32, 2050, 50, 200_000  # 2000 left-out strings share 0.3


def setup(rng):
    """Hash table for S_ALL strings (h = 1); the candidate list is the first S_LIST of them."""
    table = rng.integers(0, K, (C, S_ALL))
    p = np.zeros(S_ALL)
    p[:4] = [0.3, 0.2, 0.12, 0.08]  # heavy hitters; listed candidates 4..S_LIST-1 are absent (p = 0)
    p[S_LIST:] = 0.3 / (S_ALL - S_LIST)  # strings left out of the candidate list
    rows = (np.arange(C)[:, None] * K + table).ravel()
    X_all = sp.csr_matrix((np.ones(C * S_ALL), (rows, np.tile(np.arange(S_ALL), C))), shape=(C * K, S_ALL))
    return table, p, X_all[:, :S_LIST]


def orr_sketch(table, p, eps, rng):
    Nc = rng.multinomial(N, np.full(C, 1 / C))
    out = np.zeros((C, K), dtype=np.int64)
    e = np.exp(eps)
    for c in range(C):
        x = np.bincount(table[c], weights=rng.multinomial(Nc[c], p), minlength=K)  # true symbols
        m = (x * (e - 1) + Nc[c]) / (e + K - 1) / Nc[c]
        out[c] = rng.multinomial(Nc[c], m)
    return out


def bits_sketch(table, p, q, ps, rng):
    Nc = rng.multinomial(N, np.full(C, 1 / C))
    out = np.zeros((C, K + 1), dtype=np.int64)
    for c in range(C):
        x = np.bincount(table[c], weights=rng.multinomial(Nc[c], p), minlength=K).astype(np.int64)
        out[c, 0] = Nc[c]
        out[c, 1:] = rng.binomial(x, q) + rng.binomial(Nc[c] - x, ps)
    return out


EPS = 2.0
A = np.exp(EPS / 2)
Q_STAR, P_STAR = A / (1 + A), 1 / (1 + A)


def decode(kind, sketch, X, method):
    if kind == "orr":
        return decode_orr(sketch, X, EPS, method)
    return decode_bits(sketch, X, Q_STAR, P_STAR, method)


def draw(kind, table, p, rng):
    return orr_sketch(table, p, EPS, rng) if kind == "orr" else bits_sketch(table, p, Q_STAR, P_STAR, rng)


@pytest.mark.parametrize("kind", ["orr", "bits"])
@pytest.mark.parametrize("method", ["ls", "nnls", "project", "mle"])
def test_recovers_heavy_hitters_and_residual(kind, method):
    rng = np.random.default_rng(3)
    table, p, X = setup(rng)
    e = decode(kind, draw(kind, table, p, rng), X, method)
    assert {i for i, _ in e.top(4)} == {0, 1, 2, 3}
    se = np.maximum(e.std_errors, 1e-6)
    assert np.all(np.abs(e.frequencies[:4] - p[:4]) <= 5 * se[:4])
    left_out = p[S_LIST:].sum()  # 0.3
    assert abs(e.residual - left_out) <= 5 * max(e.residual_std_error or 0.0, 0.005)
    sig = e.significant()
    assert sig[:4].all() and sig[4:].sum() <= 2
    bh = e.significant(correction="bh")
    assert bh[:4].all() and bh[4:].sum() <= 5


@pytest.mark.parametrize("kind", ["orr", "bits"])
@pytest.mark.parametrize("method", ["ls", "mle"])
def test_ci_coverage_candidates(kind, method):
    """Heavy-hitter intervals cover the truth ≈ 95% of the time (binomial tolerance, z = 4)."""
    rng = np.random.default_rng(5)
    table, p, X = setup(rng)
    trials = 150
    hits = np.array(
        [(lambda ci: (ci.low[:4] <= p[:4]) & (p[:4] <= ci.high[:4]))(decode(kind, draw(kind, table, p, rng), X,
                                                                             method).ci())
         for _ in range(trials)]
    )
    z = stats.norm.isf(1e-3 / 8)
    assert abs(hits.mean() - 0.95) <= z * np.sqrt(0.95 * 0.05 / trials)
