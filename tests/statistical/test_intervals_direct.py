"""Coverage, zero cells, standard errors and tests of the direct decoders' published intervals.

Every direct method (k-RR and k-RAPPOR; "unbiased", "truncate", "project", "mle") publishes the Wilson score
interval of each coordinate's binomial count mapped to p (docs/math/estimators.md#intervals-of-the-direct-decoders).
Sketches are simulated exactly in distribution with numpy, many at once; the interval, the score test and
the point estimates are computed for all trials in one vectorized call, and the decoders' own output is
checked to be identical on a subset of trials (so the coverage measured is the coverage published).

Trial count. The band for the pooled coverage is 0.93–0.97 and must be at least 3 standard errors of the
coverage estimate on each side of 0.95. Indicators in one trial are dependent; in the worst case (perfectly
dependent) the standard error is sqrt(0.95 · 0.05 / T), so 3 sqrt(0.0475 / T) ≤ 0.02 needs T ≥ 1069: T = 1100.
The measured cluster standard error (across trials) is also asserted to be within that bound.
"""

import numpy as np
import pytest
from scipy import stats

from ldpstream.estimators import (
    estimate_krappor,
    estimate_krr,
    krappor_unbiased,
    krappor_variance,
    krr_unbiased,
    krr_variance,
)
from ldpstream.estimators.direct import krappor_mle, krr_channel, krr_mle
from ldpstream.estimators.intervals import affine_score_interval, null_score_z
from ldpstream.estimators.numerics.simplex import project_simplex, truncate_normalize
from ldpstream.mechanisms.rates import bit_rates

pytestmark = pytest.mark.statistical

METHODS = ("unbiased", "truncate", "project", "mle")
CASES = [(32, 1.0, 5_000), (32, 6.0, 5_000), (256, 1.0, 100_000), (8, 0.5, 1_000)]
PARAMS = [(dec, *case) for dec in ("krr", "krappor") for case in CASES]
TRIALS = 1100
CHECKED = 25  # trials decoded through the public decoders (identity with the vectorized computation)
SE_TRIALS = 300  # trials whose published standard errors are compared with the Monte Carlo sd
# Family error of this module's two-sided checks ≈ 1e-3: Bonferroni over checks per case × cases.
N_CHECKS = 8 * len(PARAMS)
Z = float(stats.norm.isf(1e-3 / (2 * N_CHECKS)))


def half_zero_geometric(k):
    """Geometric with mean ≈ k/5 on the first half of the symbols, zero on the second half."""
    theta = 1 / (1 + k / 5)
    p = theta * (1 - theta) ** np.arange(k)
    p[k // 2 :] = 0.0
    return p / p.sum()


def simulate(dec, k, eps, n, trials, seed):
    """Sketches, the rate map (base, slope) and every method's point estimate, vectorized over trials."""
    rng = np.random.default_rng(seed)
    p = half_zero_geometric(k)
    if dec == "krr":
        e = np.exp(eps)
        counts = rng.multinomial(n, p @ krr_channel(k, eps), size=trials).astype(float)
        u = krr_unbiased(counts, eps)
        mle = krr_mle(counts, eps)
        sketches, base, slope = counts, 1 / (e + k - 1), (e - 1) / (e + k - 1)
        se_unbiased = np.sqrt(krr_variance(project_simplex(u), n, eps))
    else:
        q, ps = bit_rates(eps / 2)
        true = rng.multinomial(n, p, size=trials)
        counts = (rng.binomial(true, q) + rng.binomial(n - true, ps)).astype(float)
        u = krappor_unbiased(counts, n, eps)
        mle = krappor_mle(counts, n, eps)[0]
        sketches, base, slope = np.column_stack([np.full(trials, n), counts]), ps, q - ps
        se_unbiased = np.sqrt(krappor_variance(project_simplex(u), n, eps))
    points = {"unbiased": u, "truncate": truncate_normalize(u), "project": project_simplex(u), "mle": mle}
    return p, counts, sketches, base, slope, points, se_unbiased


def decode(dec, sketch, eps, method):
    return (estimate_krr if dec == "krr" else estimate_krappor)(sketch, eps, method)


@pytest.fixture(scope="module", params=PARAMS, ids=lambda c: f"{c[0]}-k{c[1]}-eps{c[2]}-n{c[3]}")
def case(request):
    dec, k, eps, n = request.param
    seed = 7919 * k + int(100 * eps) + n % 1009 + (0 if dec == "krr" else 1)
    p, counts, sketches, base, slope, points, se_unbiased = simulate(dec, k, eps, n, TRIALS, seed)
    low, high = affine_score_interval(counts, n, base, slope)
    return {
        "dec": dec, "k": k, "eps": eps, "n": n, "p": p, "counts": counts, "sketches": sketches, "base": base,
        "points": points, "low": low, "high": high, "z_score": null_score_z(counts, n, base),
        "se_unbiased": se_unbiased,
    }


def test_published_interval_is_the_score_interval(case):
    """Every method publishes the vectorized score interval (and its test), named, inside [0, 1]."""
    for i in range(CHECKED):
        for method in METHODS:
            est = decode(case["dec"], case["sketches"][i], case["eps"], method)
            assert est.interval_method == "wilson-score"
            low, high = est.ci(0.95, clip=True)
            assert np.array_equal(low, case["low"][i]) and np.array_equal(high, case["high"][i])
            assert np.all((low >= 0) & (low <= high) & (high <= 1))
            np.testing.assert_allclose(est.frequencies, case["points"][method][i], rtol=0, atol=1e-9)
            np.testing.assert_array_equal(est.z_scores(), case["z_score"][i])


def test_coverage_two_sided(case):
    """Pooled coverage of the values with p > 0 in 0.93–0.97; each value with p ≥ 1% at least 0.93."""
    p, low, high = case["p"], case["low"], case["high"]
    cov = (low <= p) & (p <= high)
    pos = p > 0
    pooled = cov[:, pos].mean()
    cluster_se = cov[:, pos].mean(axis=1).std(ddof=1) / np.sqrt(TRIALS)
    assert 3 * cluster_se <= 0.02
    print(f"{case['dec']} k={case['k']} eps={case['eps']} n={case['n']}: coverage {pooled:.4f} ± {cluster_se:.4f}")
    assert 0.93 <= pooled <= 0.97
    # per value: true coverage ≥ 0.93, one-sided at the family level over the values checked
    big = p >= 0.01
    per_value = cov[:, big].mean(axis=0)
    z_v = stats.norm.isf(1e-3 / (N_CHECKS * big.sum()))
    assert np.all(per_value >= 0.93 - z_v * np.sqrt(0.93 * 0.07 / TRIALS)), per_value


def test_zero_cells(case):
    """Cells with p = 0: the lower bound is 0 except in ≈ 2.5% of cases (the test's level), never negative."""
    p, low = case["p"], case["low"]
    zero = p == 0
    assert np.all(low >= 0)
    above = (low[:, zero] > 0).mean(axis=1)
    rate, se = above.mean(), max(above.std(ddof=1), np.sqrt(0.025 * 0.975)) / np.sqrt(TRIALS)
    # P(lower > 0 | p = 0) = P(score z > 1.96) = 0.025 up to the normal approximation of the binomial tail;
    # its size is bounded by the exact binomial tail at the null rate.
    exact = stats.binom.sf(np.floor(case["n"] * case["base"] + 1.96 * np.sqrt(
        case["n"] * case["base"] * (1 - case["base"]))), case["n"], case["base"])
    assert abs(rate - 0.025) <= Z * se + abs(exact - 0.025), (rate, exact)


def test_significance_consistent_and_powerful(case):
    """Score test ⇔ interval; Bonferroni power not below the unbiased Wald test's; family error ≤ α."""
    p, z_score, low = case["p"], case["z_score"], case["low"]
    # the one-sided score test at 2.5% rejects exactly when the score interval's lower bound is above 0
    crit = stats.norm.isf(0.025)
    clear = np.abs(z_score - crit) > 1e-6
    np.testing.assert_array_equal((z_score > crit)[clear], (low > 0)[clear])
    k = p.size
    z_bonf = stats.norm.isf(0.05 / k)
    flagged = z_score >= z_bonf
    old = case["points"]["unbiased"] / case["se_unbiased"] >= z_bonf
    pos = p > 0
    assert flagged[:, pos].mean() >= old[:, pos].mean()
    assert np.all(flagged[:, pos] >= old[:, pos])  # the score statistic dominates the Wald one where p̂ > 0
    fwer = flagged[:, ~pos].any(axis=1).mean()
    assert fwer <= 0.05 + Z * np.sqrt(0.05 * 0.95 / TRIALS)
    for i in range(CHECKED):
        for method in METHODS:
            est = decode(case["dec"], case["sketches"][i], case["eps"], method)
            np.testing.assert_array_equal(est.significant(0.05, "bonferroni"), flagged[i])


def _unstable_active_set(case):
    """Whether the projection's active set changes from sample to sample: the sd of a zero cell's unbiased
    estimate exceeds the smallest true frequency (then absent cells regularly enter the active set and present
    ones leave it)."""
    p = case["p"]
    return case["points"]["unbiased"][:, p == 0].std(axis=0, ddof=1).mean() > p[p > 0].min()


@pytest.mark.parametrize("method", ("truncate", "project", "mle"))
def test_zero_cell_standard_errors(case, method):
    """Cells estimated at 0 (true p = 0): published SE ≈ the Monte Carlo sd of the estimator at p = 0.

    Tolerance: 3 Monte Carlo standard errors of the sd (cluster, across trials) plus one sd of the published
    SE's own spread across trials (it is a plug-in estimate).

    Where the active set is unstable (:func:`_unstable_active_set`: only k-RR and k-RAPPOR at k = 8,
    ε = 0.5, n = 1000 here) the zero-cell SE is, by design, a linearization with the active set held at the
    one observed (docs/math/estimators.md#standard-errors-of-the-post-processed-estimates): a projection or an
    MLE whose active set moves with the sample pulls an absent cell back to 0 more often than a fixed set
    would, so the SE then over-states its sd (measured 1.13–1.19×). What it promises there is to be
    conservative: SE ≥ the Monte Carlo sd, up to the same tolerance (this replaces a strict xfail of the
    two-sided check at k-RR project). The published interval and test do not use the SE.
    """
    p, est_points = case["p"], case["points"][method]
    zero = p == 0
    mc_var = est_points[:, zero].var(axis=0, ddof=1).mean()
    mc_sd = np.sqrt(mc_var)
    # cluster standard error of the pooled variance, by the delta method to the sd
    per_trial = ((est_points[:, zero] - est_points[:, zero].mean(axis=0)) ** 2).mean(axis=1)
    rel_se = per_trial.std(ddof=1) / np.sqrt(TRIALS) / mc_var / 2
    ses = []
    for i in range(SE_TRIALS):
        est = decode(case["dec"], case["sketches"][i], case["eps"], method)
        at0 = zero & (est.frequencies == 0)
        ses.extend(est.std_errors[at0])
    ses = np.array(ses)
    ratio = ses.mean() / mc_sd
    print(f"{case['dec']} k={case['k']} eps={case['eps']} {method}: zero-cell SE/MC sd {ratio:.3f}")
    tolerance = 3 * rel_se + ses.std() / ses.mean()
    if _unstable_active_set(case):
        assert ratio >= 1 - tolerance  # conservative: never narrower than the sd of the point
    else:
        assert abs(ratio - 1) <= tolerance


def _exact_coverage(interval, n, expected):
    """The exact coverage of ``interval(x, n)`` for a binomial rate of ``expected/n``: Σ_x pmf(x)·[rate inside]."""
    x = np.arange(0, min(n, 400) + 1)
    low, high = interval(x, n)
    rate = np.asarray(expected)[:, None] / n
    inside = (low[None, :] <= rate) & (rate <= high[None, :])
    return np.sum(stats.binom.pmf(x[None, :], n, rate) * inside, axis=1)


@pytest.mark.parametrize("n", [100, 1000, 100_000])
def test_small_count_score_interval_covers_down_to_half_a_report(n):
    """Exact binomial coverage (summed over every count, not simulated) of the published score interval of a
    rate: at least 0.93 at every expected count from 0.5 to 40 reports, where the plain Wilson interval dips to
    0.895 (expected 0.5) and 0.917 (1.5). Below 5 expected reports a discrete count reaches at most
    0.9965, from 5 to 10 (where the Poisson bounds still reach) 0.985, from 10 on 0.97
    (docs/math/estimators.md#small-counts)."""
    from ldpstream.estimators.intervals import small_count_wilson, wilson_interval

    expected = np.linspace(0.5, 40, 3000)
    ours = _exact_coverage(lambda x, m: small_count_wilson(x, m), n, expected)
    plain = _exact_coverage(lambda x, m: wilson_interval(x, m), n, expected)
    assert ours.min() >= 0.93, (ours.min(), expected[ours.argmin()])
    assert ours[expected < 5].max() <= 0.9965 and ours[expected >= 5].max() <= 0.985
    assert ours[expected >= 10].max() <= 0.97
    assert plain.min() < 0.92


def test_oue_cells_expecting_half_a_report_are_covered():
    """The review's case: OUE (unary encoding, q = 1/2, p = 1/(e^ε + 1)), k = 1000, ε = 8, n = 1000 over Zipf(1)
    values, so most cells expect 0.4–1 reports. Each cell's coverage over 2000 trials is at least 0.93 less 4
    standard errors (one-sided: the small-count rule), and the pooled coverage of cells expecting at least 5
    reports is in the 0.93–0.97 band."""
    k, eps, n, trials = 1000, 8.0, 1000, 2000
    q, p = 0.5, 1 / (np.exp(eps) + 1)
    rng = np.random.default_rng(21)
    f = 1 / np.arange(1, k + 1)
    f /= f.sum()
    values = rng.multinomial(n, f, size=trials)
    ones = rng.binomial(values, q) + rng.binomial(n - values, p)  # each bit is one of n independent reports
    low, high = affine_score_interval(ones, n, p, q - p)
    covered = (low <= f) & (f <= high)  # x ~ Binomial(n, p + (q − p) f): the interval is of the population's f
    expected = n * (p + (q - p) * f)
    per_cell = covered.mean(axis=0)
    floor = 0.93 - 4 * np.sqrt(0.93 * 0.07 / trials)
    assert per_cell[expected >= 0.5].min() >= floor, per_cell[expected >= 0.5].min()
    big = covered[:, expected >= 5]
    assert 0.93 <= big.mean() <= 0.97, big.mean()
