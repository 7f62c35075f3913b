"""The unbiased estimators of OUE, subset selection and Hadamard response, their variance formulas, and the
intervals they publish (docs/math/estimators.md#the-unary-family).

- Formulas against independent forms: the papers' own closed forms (Wang et al. 2017 eq. for OUE; Ye & Barg
  2018 / Wang et al. 2016 for subset selection; Acharya, Sun, Zhang 2019 with a dense scipy Hadamard matrix for
  HR) and, for the risk, the exact covariance of one report enumerated over the whole output space.
- Statistically, with fixed seeds: over R sketches each coordinate's mean error is within Z standard errors
  of 0 (SE = sqrt(Var/R) from the formula), and the mean squared error ‖p̂ − p‖² over R trials is within Z of
  its own standard error of the formula; Z ≈ 4.4 is a Bonferroni bound for a 1e-3 family error over this
  module's checks. Sketches come from the mechanisms' aggregate simulators and, for subset selection (whose
  simulator is its own algorithm), also from the per-report encoder, two-sample tested against it.
- Coverage: the published 95% Wilson interval of one coordinate over T = 1100 independent trials; the band
  0.93–0.97 is 3 binomial standard errors (sqrt(0.95·0.05/1100) = 0.0066) on each side of 0.95.
"""

import itertools
import math

import numpy as np
import pytest
from scipy import linalg, stats

from ldpstream.estimators.count_mean import count_mean
from ldpstream.estimators.direct import unary_expected_l2sq, unary_unbiased
from ldpstream.estimators.dispatch import estimate
from ldpstream.estimators.numerics.variance import bit_variance
from ldpstream.mechanisms import (
    OUE,
    CountMeanSketch,
    HadamardCountMeanSketch,
    HadamardResponse,
    SubsetSelection,
)
from ldpstream.mechanisms.rates import unary_risk

pytestmark = pytest.mark.statistical

N_CHECKS = 40
Z = float(stats.norm.isf(1e-3 / (2 * N_CHECKS)))


def skewed(k):
    p = 0.7 ** np.arange(k)
    p[-1] = 0.0
    return p / p.sum()


# ------------------------------------------------------------------------------- formulas, independently
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_oue_unbiased_and_variance_are_wang_et_al(epsilon):
    e = math.exp(epsilon)
    m = OUE(16, epsilon)
    T = np.arange(16) * 37.0
    n = 1000.0
    np.testing.assert_allclose(unary_unbiased(T, n, m.q_star, m.p_star), 2 * ((e + 1) * T / n - 1) / (e - 1))
    # Wang et al. 2017 eq. (11): Var at p = 0 is 4e^ε/(n(e^ε − 1)²)
    assert bit_variance(0.0, n, m.q_star, m.p_star) == pytest.approx(4 * e / (n * (e - 1) ** 2), rel=1e-12)


@pytest.mark.parametrize(("k", "d", "epsilon"), [(8, 2, 1.0), (64, 17, 1.0), (256, 5, 4.0)])
def test_subset_selection_unbiased_is_ye_barg(k, d, epsilon):
    e = math.exp(epsilon)
    m = SubsetSelection(k, epsilon, subset_size=d)
    T = np.linspace(0, 900, k)
    n = 1000.0
    ye_barg = (k - 1) * (d * e + k - d) / ((k - d) * (e - 1) * d) * T / n - ((d - 1) * e + k - d) / ((k - d) * (e - 1))
    np.testing.assert_allclose(unary_unbiased(T, n, m.q_star, m.p_star), ye_barg, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("k", "d", "epsilon"), [(5, 2, 0.7), (6, 1, 2.0), (7, 3, 1.0), (6, 5, 3.0)])
def test_subset_selection_risk_is_the_enumerated_covariance(k, d, epsilon):
    """n·E‖p̂ − p‖² from the exact covariance of one report's bits, over all C(k, d) subsets and a skewed p."""
    subsets = list(itertools.combinations(range(k), d))
    member = np.array([[j in s for j in range(k)] for s in subsets], dtype=float)
    w = np.array([[math.exp(epsilon) if x in s else 1.0 for s in subsets] for x in range(k)])
    channel = w / w.sum(axis=1, keepdims=True)
    p = skewed(k)
    out = p @ channel  # law of the reported subset
    mean = out @ member
    cov = member.T @ (member * out[:, None]) - np.outer(mean, mean)
    m = SubsetSelection(k, epsilon, subset_size=d)
    delta = m.q_star - m.p_star
    exact = np.trace(cov) / delta**2
    assert unary_expected_l2sq(p, 1.0, m.q_star, m.p_star) == pytest.approx(exact, rel=1e-10)
    assert unary_risk(k, m.q_star, m.p_star) - np.sum(p * p) == pytest.approx(exact, rel=1e-10)
    # subset selection's unbiased estimate sums to one exactly (every report has d bits)
    T = np.full(k, 37.0)
    T[0] = d * 100 - T[1:].sum()  # any counts with Σ T = d·n
    assert unary_unbiased(T, 100.0, m.q_star, m.p_star).sum() == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize(("k", "epsilon"), [(7, 1.0), (100, 2.0)])
def test_hadamard_unbiased_is_acharya_with_a_dense_hadamard_matrix(k, epsilon):
    m = HadamardResponse(k, epsilon)
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 50, size=m.order)
    n = counts.sum()
    e = math.exp(epsilon)
    dense = (e + 1) / (e - 1) * (linalg.hadamard(m.order) @ counts)[1:k + 1] / n  # Acharya et al. 2019 §3
    est = estimate(counts.reshape(1, -1), m, "unbiased")
    np.testing.assert_allclose(est.frequencies, dense, rtol=1e-12, atol=1e-14)
    # variance at p = 0: ((e^ε + 1)/(e^ε − 1))²/n
    q, p0 = m.response_rates
    assert bit_variance(0.0, n, q, p0) == pytest.approx(((e + 1) / (e - 1)) ** 2 / n, rel=1e-12)


def test_hcms_transform_is_the_agreement_count():
    m = HadamardCountMeanSketch(k=8, epsilon=1.0, cohorts=3, support=12)
    rng = np.random.default_rng(2)
    cohorts, symbols = m.encode_clients(rng.integers(0, 12, 500), rng, m.value_table(None))
    sketch = m.sketch(cohorts, symbols)
    H = linalg.hadamard(8)
    col, sign = symbols // 2, symbols % 2
    agree = np.zeros((3, 8), dtype=np.int64)
    for c, l_, b in zip(cohorts, col, sign, strict=True):  # per report, by definition (test only)
        agree[c] += (H[:, l_] == 1) == bool(b)
    np.testing.assert_array_equal(m.margin_sketch(sketch)[:, 1:], agree)
    np.testing.assert_array_equal(m.margin_sketch(sketch)[:, 0], np.bincount(cohorts, minlength=3))


def test_count_mean_is_apples_formula_by_a_loop():
    m = CountMeanSketch(k=16, epsilon=2.0, cohorts=4, support=30)
    rng = np.random.default_rng(3)
    sketch = m.simulate_sketch(rng.multinomial(5000, np.full(30, 1 / 30)), rng, m.value_table(None))
    table = m.bloom_table()[:, :, 0]
    n = sketch[:, 0].sum()
    expected = []
    for d in range(30):  # Apple 2017: f = m/(m−1) (Σ_j x̃[j, h_j(d)]/n − 1/m)
        total = sum((sketch[j, 1 + table[j, d]] - sketch[j, 0] * m.p_star) / (m.q_star - m.p_star) for j in range(4))
        expected.append(16 / 15 * (total / n - 1 / 16))
    np.testing.assert_allclose(count_mean(sketch, m.design_matrix(), m.q_star, m.p_star), expected, rtol=1e-12)


# ---------------------------------------------------------------------------------- unbiased, variance
MECHS = [OUE(16, 1.0), SubsetSelection(16, 1.0), SubsetSelection(64, 0.5), HadamardResponse(16, 1.0),
         HadamardResponse(64, 3.0), OUE(64, 4.0)]


@pytest.mark.parametrize("m", MECHS, ids=lambda m: f"{m.name}-{m.k}-{m.epsilon}")
def test_unbiased_with_the_formulas_variance(m):
    k, n, R = m.k, 5_000, 400
    p = skewed(k)
    rng = np.random.default_rng([15, k, int(10 * m.epsilon)])
    q_star, p_star = m.response_rates if m.name == "hr" else (m.q_star, m.p_star)
    est = np.array([estimate(m.simulate_sketch(rng.multinomial(n, p), rng), m, "unbiased").frequencies
                    for _ in range(R)])
    var = bit_variance(p, n, q_star, p_star)  # per coordinate, against the true p
    z = (est.mean(axis=0) - p) / np.sqrt(var / R)
    assert np.max(np.abs(z)) < Z, z
    sq = ((est - p) ** 2).sum(axis=1)
    expected = unary_expected_l2sq(p, n, q_star, p_star)
    assert abs(sq.mean() - expected) < Z * sq.std(ddof=1) / np.sqrt(R), (sq.mean(), expected)


@pytest.mark.parametrize(("m", "n"), [(64, 600), (8, 2_000)])
def test_hcms_simulator_matches_its_encoder(m, n):
    """HCMS's aggregate simulator (the mixture of its docstring) against the per-report encoder: each of the
    2m columns' mean (z-test) and variance (F-test), Bonferroni over the columns. m = 64, n = 600 takes its
    per-report branch (fewer informative reports than bucket × column cells), m = 8, n = 2,000 its
    multinomial branch."""
    S, C, R = 10, 2, 300
    mech = HadamardCountMeanSketch(k=m, epsilon=1.0, cohorts=C, support=S)
    table = mech.value_table(None)
    p = skewed(S)
    rng = np.random.default_rng(17)
    sim = np.array([mech.simulate_sketch(rng.multinomial(n, p), rng, table).ravel() for _ in range(R)], dtype=float)
    enc = np.array([mech.sketch(*mech.encode_clients(rng.choice(S, size=n, p=p), rng, table)).ravel()
                    for _ in range(R)], dtype=float)
    assert sim.sum(axis=1).tolist() == [n] * R
    live = (sim.var(0, ddof=1) > 0) & (enc.var(0, ddof=1) > 0)
    alpha = 1e-3 / live.sum()
    zm = (sim.mean(0) - enc.mean(0))[live] / np.sqrt((sim.var(0, ddof=1) + enc.var(0, ddof=1))[live] / R)
    assert np.max(np.abs(zm)) < stats.norm.isf(alpha / 2), zm
    f = sim.var(0, ddof=1)[live] / enc.var(0, ddof=1)[live]
    pf = 2 * np.minimum(stats.f.cdf(f, R - 1, R - 1), stats.f.sf(f, R - 1, R - 1))
    assert pf.min() > alpha, pf


def test_subset_selection_simulator_matches_its_encoder():
    """Two samples of sketches, the aggregate simulator's and the per-report encoder's: each column's mean and
    variance agree (z-test of means; F-test of variances), and so does the mean of ‖p̂ − p‖²."""
    m = SubsetSelection(8, 1.0)
    p = skewed(8)
    n, R = 2_000, 300
    rng = np.random.default_rng(11)
    sim = np.array([m.simulate_sketch(rng.multinomial(n, p), rng)[0, 1:] for _ in range(R)], dtype=float)
    enc = np.array([m.sketch(np.zeros(n, dtype=np.int64), m.encode_batch(rng.choice(8, size=n, p=p), rng))[0, 1:]
                    for _ in range(R)], dtype=float)
    zm = (sim.mean(0) - enc.mean(0)) / np.sqrt((sim.var(0, ddof=1) + enc.var(0, ddof=1)) / R)
    assert np.max(np.abs(zm)) < Z, zm
    f = sim.var(0, ddof=1) / enc.var(0, ddof=1)
    pf = 2 * np.minimum(stats.f.cdf(f, R - 1, R - 1), stats.f.sf(f, R - 1, R - 1))
    assert pf.min() > 1e-3 / N_CHECKS / 8, pf
    # the covariance of two columns (the bits of a subset are dependent) also agrees
    c_sim, c_enc = np.cov(sim[:, 2], sim[:, 3])[0, 1], np.cov(enc[:, 2], enc[:, 3])[0, 1]
    se = np.sqrt((sim[:, 2].var() * sim[:, 3].var() + enc[:, 2].var() * enc[:, 3].var()) / R)
    assert abs(c_sim - c_enc) < Z * se, (c_sim, c_enc, se)


# -------------------------------------------------------------------------------------------- coverage
@pytest.mark.parametrize("m", [SubsetSelection(16, 1.0), HadamardResponse(16, 1.0), OUE(16, 2.0)],
                         ids=lambda m: m.name)
@pytest.mark.parametrize("method", ["project", "mle"])
def test_published_interval_covers_95_percent(m, method):
    T, n = 1100, 3_000
    p = skewed(16)
    rng = np.random.default_rng([7, len(m.name), len(method)])
    hits = np.zeros(16)
    for _ in range(T):
        e = estimate(m.simulate_sketch(rng.multinomial(n, p), rng), m, method)
        low, high = e.ci()
        hits += (low <= p) & (p <= high)
    cover = hits / T
    for j in (0, 3, 8):  # a large, a middle and a small frequency, each over T independent trials
        assert 0.93 <= cover[j] <= 0.97, (j, cover)
    assert cover[15] >= 0.93  # p = 0 sits at the interval's clipped edge: covered at least as often


@pytest.mark.parametrize("m", [HadamardCountMeanSketch(k=16, epsilon=2.0, cohorts=4, support=12),
                               CountMeanSketch(k=16, epsilon=2.0, cohorts=4, support=12)], ids=lambda m: m.name)
def test_hashed_sandwich_interval_covers_95_percent(m):
    """HCMS through its agreement counts (pairwise independent given the bucket, so the bit decoders' sandwich
    holds) and CMS: the ``ls`` interval of a large and a small frequency over T = 1100 trials, band 0.93–0.97."""
    T, n = 1100, 3_000
    p = skewed(12)
    rng = np.random.default_rng([8, len(m.name)])
    table = m.value_table(None)
    hits = np.zeros(12)
    for _ in range(T):
        low, high = estimate(m.simulate_sketch(rng.multinomial(n, p), rng, table), m, "ls").ci()
        hits += (low <= p) & (p <= high)
    cover = hits / T
    for j in (0, 5):
        assert 0.93 <= cover[j] <= 0.97, (j, cover)
