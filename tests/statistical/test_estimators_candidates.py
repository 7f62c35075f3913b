"""Candidate decoders on sketches drawn with the mechanisms' ``simulate_sketch`` (exact in distribution; fixed
seeds): recovery, two-sided coverage of the published 95% intervals, and the O-RR least-squares standard
errors against Monte Carlo."""

import numpy as np
import pytest
from scipy import stats

from ldpstream.estimators import decode_bits, decode_orr, detect
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.rappor import Rappor

pytestmark = pytest.mark.statistical

METHODS = ("ls", "nnls", "project", "mle")


def decode(mech, sketch, X, method, **kw):
    if isinstance(mech, ORR):
        return decode_orr(sketch, X, mech.epsilon, method, **kw)
    if method == "detect":  # screen, refit, tests: its published interval is the least-squares one
        return detect(sketch, X, mech.q_star, mech.p_star, **kw)
    return decode_bits(sketch, X, mech.q_star, mech.p_star, method, **kw)


# -- recovery with strings outside the candidate list ---------------------------------------------------------

C, K, S_ALL, S_LIST, N = 16, 32, 2050, 50, 200_000  # 2000 left-out strings share 0.3
EPS = 2.0


def open_problem(kind, rng):
    """Hash table for S_ALL strings (h = 1); the candidate list is the first S_LIST of them."""
    p = np.zeros(S_ALL)
    p[:4] = [0.3, 0.2, 0.12, 0.08]  # heavy hitters; listed candidates 4..S_LIST-1 are absent (p = 0)
    p[S_LIST:] = 0.3 / (S_ALL - S_LIST)  # strings left out of the candidate list
    if kind == "orr":
        mech, table = ORR(k=K, epsilon=EPS, cohorts=C), rng.integers(0, K, (C, S_ALL))
    else:
        mech, table = ORappor(k=K, epsilon=EPS, cohorts=C), rng.integers(0, K, (C, S_ALL, 1))
    X = mech.design_matrix(table)[:, :S_LIST]
    return mech, table, p, X


@pytest.mark.parametrize("kind", ["orr", "bits"])
@pytest.mark.parametrize("method", METHODS)
def test_recovers_heavy_hitters_and_residual(kind, method):
    rng = np.random.default_rng(3)
    mech, table, p, X = open_problem(kind, rng)
    e = decode(mech, mech.simulate_sketch(rng.multinomial(N, p), rng, table=table), X, method)
    assert {i for i, _ in e.top(4)} == {0, 1, 2, 3}
    # the published intervals (LS sandwich) cover the heavy hitters; z: two-sided Bonferroni at 1e-3 over
    # the 4 values of the 8 cases
    z = stats.norm.isf(1e-3 / (2 * 4 * 8))
    lo, hi = e.ci(0.95, clip=True)
    half = (hi - lo)[:4] / 2
    assert np.all(np.abs((lo + hi)[:4] / 2 - p[:4]) <= z / 1.96 * half)
    # unexplained mass: the LS residual is unbiased (Monte Carlo: mean 0.302, sd 0.021 for O-RR, SE 0.019).
    # The constrained residuals are biased low (≈ 2 SE here: the 46 absent candidates absorb mass at >= 0)
    tol = z if method in ("ls", "project") else 5.0
    assert abs(e.residual - p[S_LIST:].sum()) <= tol * e.residual_std_error
    sig = e.significant()
    assert sig[:4].all() and sig[4:].sum() <= 2
    bh = e.significant(correction="bh")
    assert bh[:4].all() and bh[4:].sum() <= 5


# -- coverage of the published intervals -------------------------------------------------------------------------

P6 = np.array([0.35, 0.25, 0.2, 0.12, 0.08, 0.0])
P16 = np.array([0.3, 0.2, 0.12, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02, 0, 0, 0, 0, 0, 0])
P16_PEAKED = np.array([0.5, 0.2, 0.1, 0.06, 0.05, 0.04, 0.03, 0.02, 0, 0, 0, 0, 0, 0, 0, 0])


def coverage_case(name):
    """(mechanism, table or None, p, n, other): the cases of the review."""
    if name == "orr-k4":
        return ORR(k=4, epsilon=3.0, cohorts=4, support=6), None, P6, 20_000, False
    if name == "orr-k32":
        return ORR(k=32, epsilon=3.0, cohorts=4, support=6), None, P6, 20_000, False
    if name == "orappor":
        return ORappor(k=32, epsilon=2.0, cohorts=8, hashes=1, support=16), None, P16, 50_000, False
    if name == "rappor-h2-sharp":
        # strong within-report dependence (δ = q* − p* = 0.8, a value at 0.5): the independent-bits covariance
        # gave SE/SD 0.82-0.85 for the heavy hitters and coverage 0.918 (mle) / 0.926 (ls, k = 16, C = 4)
        mech = Rappor(k=32, hashes=2, cohorts=8, p=0.1, q=0.9, f=0.0)
        return mech, mech.bloom_table([f"v{i}" for i in range(16)]), P16_PEAKED, 50_000, True
    h = int(name[-1])  # Google's parameters
    mech = Rappor(k=32, hashes=h, cohorts=8, p=0.25, q=0.75, f=0.5)
    return mech, mech.bloom_table([f"v{i}" for i in range(16)]), P16, 50_000, True


CASES = ["orr-k4", "orr-k32", "orappor", "rappor-h1", "rappor-h2", "rappor-h2-sharp"]
TRIALS = 250
BAND = (0.93, 0.97)
N_VALUE_TESTS = 5 + 5 + 10 + 10 + 10 + 8  # values with p >= 1% over the cases (methods share the interval)


@pytest.mark.parametrize("case", CASES)
def test_ci_coverage_candidates(case):
    """Two-sided coverage of the published 95% interval (``ci(0.95, clip=True)``) of every method (and of
    ``detect`` for the bit mechanisms), over every value with p > 0, and per value for p >= 1%.

    Band: pooled over the values, ``TRIALS · #values`` >= 1250 intervals, binomial SE <= 0.0062, so
    [0.93, 0.97] is >= 3.2 SE either side of 0.95 (checked below). Per value, ``TRIALS`` intervals: coverage
    >= 0.95 − z·sqrt(0.95·0.05/TRIALS) with z one-sided Bonferroni at 1e-3 over the values of all cases
    (z = 4.10: >= 0.894)."""
    mech, table, p, n, other = coverage_case(case)
    X = mech.design_matrix(table)
    rng = np.random.default_rng(7)
    methods = METHODS if isinstance(mech, ORR) else (*METHODS, "detect")  # detect decodes bit sketches
    hits = {m: np.zeros((TRIALS, p.size), dtype=bool) for m in methods}
    for t in range(TRIALS):
        sketch = mech.simulate_sketch(rng.multinomial(n, p), rng, table=table)
        for m in methods:
            lo, hi = decode(mech, sketch, X, m, other=other).ci(0.95, clip=True)
            assert np.all((lo >= 0) & (hi <= 1))
            hits[m][t] = (lo <= p) & (p <= hi)
    pos = p > 0
    n_pooled = TRIALS * int(pos.sum())
    assert min(0.95 - BAND[0], BAND[1] - 0.95) >= 3 * np.sqrt(0.95 * 0.05 / n_pooled)
    floor = 0.95 - stats.norm.isf(1e-3 / N_VALUE_TESTS) * np.sqrt(0.95 * 0.05 / TRIALS)
    for m, h in hits.items():
        pooled = h[:, pos].mean()
        assert BAND[0] <= pooled <= BAND[1], (m, pooled)
        per_value = h[:, p >= 0.01].mean(axis=0)
        assert per_value.min() >= floor, (m, per_value)


@pytest.mark.parametrize("k", [4, 32])
def test_orr_ls_standard_errors_match_monte_carlo(k):
    """O-RR at small k (C = 4, S = 6, ε = 3): mean reported SE / Monte Carlo SD of the LS estimate.

    With T draws the SD's relative standard error is 1/sqrt(2(T − 1)) (normal data); band: z of a two-sided
    Bonferroni at 1e-3 over the 12 coordinates of both k, i.e. ±3.9·0.0224 = ±0.087 at T = 1000. The model
    covariance of the old decoder was 0.81× (k = 4) and 0.91× (k = 32) of the truth."""
    mech = ORR(k=k, epsilon=3.0, cohorts=4, support=6)
    X = mech.design_matrix(None)
    rng = np.random.default_rng(11)
    T = 1000
    est = np.empty((T, 6))
    se = np.empty((T, 6))
    for t in range(T):
        e = decode_orr(mech.simulate_sketch(rng.multinomial(20_000, P6), rng), X, 3.0, "ls", other=False)
        est[t], se[t] = e.frequencies, e.std_errors
    ratio = se.mean(axis=0) / est.std(axis=0, ddof=1)
    band = stats.norm.isf(1e-3 / (2 * 12)) / np.sqrt(2 * (T - 1))
    assert np.all(np.abs(ratio - 1) <= band), ratio


def test_orappor_two_hashes_ls_standard_errors_match_monte_carlo_at_few_clients():
    """O-RAPPOR over a closed alphabet with h = 2 hashes (k = 32, ε = 2, C = 8, S = 32 values of 2-4%) at 5000
    clients, the setting of the window tests: the mean reported sandwich SE over the Monte Carlo SD of the LS
    estimate, per value and on average over the values. A plug-in bias of the meat (``p = max(β̂, 0)`` and the
    fitted rates in it) or a missing covariance term would show here; measured 1.000 at 2000-100000 clients
    (bench/accuracy/orappor_coverage.py, 4000 trials), i.e. none at this size.

    Band: the SD's relative standard error is 1/sqrt(2(T − 1)) = 0.0158 at T = 2000; per value, z of a
    two-sided Bonferroni at 1e-3 over the 32 values (4.17: ±0.066); the mean over values, whose SE is at most
    that of one value (perfectly dependent values), at z = 3.29 (±0.052). SE/SD = 1.17 (the 0.978 coverage once
    seen for this setting) fails both."""
    mech = ORappor(k=32, epsilon=2.0, cohorts=8, hashes=2, support=32)
    X = mech.design_matrix(None)
    p = np.linspace(2.0, 1.0, 32)
    p /= p.sum()
    rng = np.random.default_rng(13)
    T = 2000
    est = np.empty((T, 32))
    se = np.empty((T, 32))
    for t in range(T):
        e = decode_bits(mech.simulate_sketch(rng.multinomial(5000, p), rng), X, mech.q_star, mech.p_star, "ls",
                        other=False)
        est[t], se[t] = e.frequencies, e.std_errors
    ratio = se.mean(axis=0) / est.std(axis=0, ddof=1)
    rel = 1 / np.sqrt(2 * (T - 1))
    assert np.all(np.abs(ratio - 1) <= stats.norm.isf(1e-3 / (2 * 32)) * rel), ratio
    assert abs(ratio.mean() - 1) <= stats.norm.isf(1e-3 / 2) * rel, ratio.mean()
    assert np.all(np.abs(est.mean(axis=0) - p) <= stats.norm.isf(1e-3 / (2 * 32)) * est.std(axis=0) / np.sqrt(T))
