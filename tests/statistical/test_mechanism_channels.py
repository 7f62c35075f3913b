"""Monte Carlo checks that encoders follow their exact channels and that ``simulate_sketch`` has the law
of the sketch of individually encoded reports.

All seeded tests use fixed seeds and test at family-wise level ALPHA (Bonferroni over the cells or bits
tested); tolerances come from the exact variances, never hand-tuned. Tests drawing from SECURE (the OS
CSPRNG, not seedable) use SECURE_ALPHA so a false alarm has probability at most 1e-6 per test.
"""

import math

import numpy as np
import pytest
from scipy import stats

from ldpstream.mechanisms import KRR, ORR, SECURE, KRappor, ORappor, Rappor, RapporClient

pytestmark = pytest.mark.statistical

ALPHA = 1e-3
SECURE_ALPHA = 1e-6


def z_bound(alpha: float, cells: int) -> float:
    """Two-sided Bonferroni normal bound for `cells` simultaneous z-scores."""
    return float(stats.norm.isf(alpha / (2 * cells)))


# -- symbol mechanisms: chi-square goodness of fit ----------------------------------------------------


def crosstab_chisquare(true_symbols: np.ndarray, reports: np.ndarray, channel: np.ndarray) -> float:
    """Chi-square p-value of the (true, reported) table: row x is Multinomial(n_x, Q[x, :])."""
    k = channel.shape[0]
    table = np.bincount(true_symbols * k + reports, minlength=k * k).reshape(k, k)
    n_x = table.sum(axis=1)
    used = n_x > 0
    observed = table[used].ravel()
    expected = (n_x[used, None] * channel[used]).ravel()
    # Each used row has its total fixed: k - 1 free cells per row.
    ddof = int(used.sum()) - 1
    return float(stats.chisquare(observed, expected, ddof=ddof).pvalue)


@pytest.mark.parametrize(("k", "epsilon", "seed"), [(2, 0.5, 1), (5, 1.0, 2), (32, 2.0, 3), (8, 6.0, 4)])
def test_krr_encode_batch_follows_channel(k, epsilon, seed):
    rng = np.random.default_rng(seed)
    m = KRR(k, epsilon)
    x = rng.integers(0, k, size=40_000)
    y = m.encode_batch(x, rng)
    assert crosstab_chisquare(x, y, m.channel()) > ALPHA


def test_krr_secure_encoding_follows_channel():
    m = KRR(6, 1.0)
    x = np.repeat(np.arange(6), 1000)
    y = m.encode_batch(x, SECURE)
    assert y.shape == x.shape and y.dtype == np.int64 and y.min() >= 0 and y.max() < 6
    assert crosstab_chisquare(x, y, m.channel()) > SECURE_ALPHA
    singles = np.array([m.encode(2) for _ in range(600)])
    p = stats.chisquare(np.bincount(singles, minlength=6), 600 * m.channel()[2]).pvalue
    assert p > SECURE_ALPHA


@pytest.mark.parametrize("support", [None, 30])
def test_orr_encode_batch_follows_channel(support):
    rng = np.random.default_rng(11)
    m = ORR(k=8, epsilon=1.5, cohorts=5, support=support)
    cands = None if support else [f"url-{i}" for i in range(30)]
    table = m.symbol_table(cands)
    index = rng.integers(0, 30, size=40_000)
    cohorts, y = m.encode_batch(index, rng, table=table)
    # Cohorts are uniform and independent of the value.
    p_cohort = stats.chisquare(np.bincount(cohorts, minlength=5)).pvalue
    true_symbols = table[cohorts, index]
    p_channel = crosstab_chisquare(true_symbols, y, m.channel())
    assert min(p_cohort, p_channel) > ALPHA / 2


def test_orr_secure_encode_values():
    m = ORR(k=4, epsilon=1.0, cohorts=3)
    cohorts, y = m.encode_values(["same"] * 3000, SECURE)
    assert stats.chisquare(np.bincount(cohorts, minlength=3)).pvalue > SECURE_ALPHA
    true_symbols = m.symbol_table(["same"])[cohorts, 0]
    assert crosstab_chisquare(true_symbols, y, m.channel()) > SECURE_ALPHA


# -- bit mechanisms: per-bit binomial tests -----------------------------------------------------------


def per_bit_binomial_min_p(reports: np.ndarray, rates: np.ndarray) -> float:
    """Smallest exact binomial-test p-value over bits; column j is Binomial(n, rates[j])."""
    n = reports.shape[0]
    counts = reports.sum(axis=0)
    return min(stats.binomtest(int(c), n, float(r)).pvalue for c, r in zip(counts, rates, strict=True))


@pytest.mark.parametrize(("k", "epsilon"), [(4, 0.5), (16, 2.0), (64, 5.0)])
def test_krappor_bits_follow_channel(k, epsilon):
    rng = np.random.default_rng(21)
    m = KRappor(k, epsilon)
    x = 1
    reports = m.encode_batch(np.full(5000, x), rng)
    rates = np.full(k, m.p_star)
    rates[x] = m.q_star
    assert per_bit_binomial_min_p(reports, rates) > ALPHA / k


def test_krappor_secure_bits_follow_channel():
    m = KRappor(8, 1.0)
    reports = m.encode_batch(np.full(3000, 7), SECURE)
    assert reports.shape == (3000, 8) and reports.dtype == bool
    rates = np.full(8, m.p_star)
    rates[7] = m.q_star
    assert per_bit_binomial_min_p(reports, rates) > SECURE_ALPHA / 8
    singles = np.array([m.encode(7) for _ in range(500)])
    assert per_bit_binomial_min_p(singles, rates) > SECURE_ALPHA / 8


@pytest.mark.parametrize(("hashes", "support"), [(1, None), (3, None), (2, 40)])
def test_orappor_bits_follow_channel(hashes, support):
    rng = np.random.default_rng(31)
    m = ORappor(k=32, epsilon=2.0, cohorts=4, hashes=hashes, support=support)
    table = m.bloom_table(None if support else ["alpha", "beta"])
    _, reports = m.encode_batch(np.full(5000, 1), rng, cohorts=np.full(5000, 2), table=table)
    rates = np.full(32, m.p_star)
    rates[table[2, 1]] = m.q_star
    assert per_bit_binomial_min_p(reports, rates) > ALPHA / 32


def test_rappor_fresh_client_bits_follow_q_star_p_star():
    rng = np.random.default_rng(41)
    m = Rappor(k=16, hashes=2, cohorts=4, p=0.5, q=0.75, f=0.5)
    table = m.bloom_table(["abc", "def"])
    reports = m.simulate_reports(np.zeros(6000, dtype=np.int64), np.full(6000, 3), rng, table)
    rates = np.full(16, m.p_star)
    rates[table[3, 0]] = m.q_star
    assert per_bit_binomial_min_p(reports, rates) > ALPHA / 16


def test_rappor_client_prr_over_secrets_has_rate_f():
    # Across clients (random secrets) the HMAC-derived PRR bit is 1 w.p. 1 - f/2 on Bloom bits, f/2 elsewhere.
    rng = np.random.default_rng(51)
    m = Rappor(k=32, hashes=2, cohorts=1, p=0.25, q=0.75, f=0.25)
    n = 4000
    prrs = np.empty((n, 32), dtype=bool)
    bloom = RapporClient(m, b"x", 0).bloom("some value")
    for i in range(n):
        client = RapporClient(m, rng.bytes(16), 0)
        prr = client.prr(bloom)
        prrs[i] = [(prr >> j) & 1 for j in range(32)]
    rates = np.array([1 - m.f / 2 if (bloom >> j) & 1 else m.f / 2 for j in range(32)])
    assert per_bit_binomial_min_p(prrs, rates) > ALPHA / 32


def test_rappor_client_irr_follows_p_q_given_prr():
    m = Rappor(k=16, hashes=2, cohorts=8, p=0.25, q=0.75, f=0.5)
    client = RapporClient(m, b"secret", 5)
    prr = client.prr(client.bloom("value"))
    reports = np.array([client.encode("value") for _ in range(2000)])
    rates = np.array([m.q if (prr >> j) & 1 else m.p for j in range(16)])
    assert per_bit_binomial_min_p(reports, rates) > SECURE_ALPHA / 16


# -- simulate_sketch has the law of the sketch of encoded reports -------------------------------------


def expected_sketch(mech, design, per_cohort: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean and variance of every sketch cell given per-cohort candidate counts (C, S)."""
    C, k = mech.cohorts, mech.k
    dense = design.toarray().reshape(C, k, -1)  # [c, j, s]
    true = np.einsum("cjs,cs->cj", dense, per_cohort.astype(float))  # true-symbol / true-bit counts
    totals = per_cohort.sum(axis=1).astype(float)
    if mech.report_kind == "symbol":
        q = mech.channel()
        return true @ q, true @ (q * (1 - q))
    qs, ps = mech.q_star, mech.p_star
    mean = np.column_stack([totals, true * qs + (totals[:, None] - true) * ps])
    var = np.column_stack([np.zeros(C), true * qs * (1 - qs) + (totals[:, None] - true) * ps * (1 - ps)])
    return mean, var


def _cases():
    krr = KRR(8, 1.0)
    krappor = KRappor(8, 1.0)
    orr = ORR(16, 2.0, 4)
    orr_closed = ORR(8, 1.0, 3, support=20)
    orappor = ORappor(32, 2.0, 4, hashes=2)
    orappor_closed = ORappor(16, 2.0, 3, hashes=1, support=20)
    rappor = Rappor(16, 2, 4, 0.5, 0.75, 0.5)
    cands = [f"cand-{i}" for i in range(12)]
    return [
        ("krr", krr, None, 8),
        ("krappor", krappor, None, 8),
        ("orr", orr, orr.symbol_table(cands), 12),
        ("orr-closed", orr_closed, orr_closed.symbol_table(), 20),
        ("orappor", orappor, orappor.bloom_table(cands), 12),
        ("orappor-closed", orappor_closed, orappor_closed.bloom_table(), 20),
        ("rappor", rappor, rappor.bloom_table(cands), 12),
    ]


CASES = _cases()


def _simulate(mech, table, counts, rng):
    return mech.simulate_sketch(counts, rng) if table is None else mech.simulate_sketch(counts, rng, table)


def _encode_sketch(mech, table, per_cohort, rng):
    C, S = per_cohort.shape
    cohorts = np.repeat(np.repeat(np.arange(C), S), per_cohort.ravel())
    index = np.repeat(np.tile(np.arange(S), C), per_cohort.ravel())
    if table is None:
        reports = mech.encode_batch(index, rng)
    else:
        cohorts, reports = mech.encode_batch(index, rng, cohorts=cohorts, table=table)
    return mech.sketch(cohorts, reports)


@pytest.mark.parametrize(("name", "mech", "table", "S"), CASES, ids=[c[0] for c in CASES])
def test_simulate_sketch_matches_encoded_sketch_given_cohorts(name, mech, table, S):
    rng = np.random.default_rng(61 + len(name))
    per_cohort = rng.integers(0, 400, size=(mech.cohorts, S))
    design = mech.design_matrix() if table is None else mech.design_matrix(table)
    mean, var = expected_sketch(mech, design, per_cohort)
    simulated = _simulate(mech, table, per_cohort, rng)
    encoded = _encode_sketch(mech, table, per_cohort, rng)
    assert simulated.shape == encoded.shape == mean.shape
    random_cells = var > 0
    np.testing.assert_array_equal(simulated[~random_cells], mean[~random_cells])
    np.testing.assert_array_equal(encoded[~random_cells], mean[~random_cells])
    bound = z_bound(ALPHA, 2 * int(random_cells.sum()))
    for sketch in (simulated, encoded):
        z = (sketch[random_cells] - mean[random_cells]) / np.sqrt(var[random_cells])
        assert np.abs(z).max() < bound


@pytest.mark.parametrize(("name", "mech", "table", "S"), CASES, ids=[c[0] for c in CASES])
def test_simulate_sketch_with_random_cohorts_has_right_mean(name, mech, table, S):
    # With (S,) counts the cohorts are drawn uniformly: E[sketch] is the given-cohorts mean at counts / C.
    rng = np.random.default_rng(71 + len(name))
    counts = rng.integers(0, 300, size=S)
    reps = 300
    draws = np.stack([_simulate(mech, table, counts, rng) for _ in range(reps)])
    if mech.report_kind == "bits":
        assert (draws[:, :, 0].sum(axis=1) == counts.sum()).all()
    else:
        assert (draws.reshape(reps, -1).sum(axis=1) == counts.sum()).all()
    design = mech.design_matrix() if table is None else mech.design_matrix(table)
    mean, _ = expected_sketch(mech, design, np.tile(counts / mech.cohorts, (mech.cohorts, 1)))
    sd = draws.std(axis=0, ddof=1)
    cells = sd > 0
    # Sample-mean z-scores with the sample variance (t with reps-1 df; Bonferroni over cells).
    t = (draws.mean(axis=0)[cells] - mean[cells]) / (sd[cells] / math.sqrt(reps))
    bound = float(stats.t.isf(ALPHA / (2 * int(cells.sum())), reps - 1))
    assert np.abs(t).max() < bound
