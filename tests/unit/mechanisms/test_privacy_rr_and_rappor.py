"""ε-LDP of the exact channels: the ratio bound holds to float tolerance and is tight
(docs/math/mechanisms.md#local-differential-privacy; for bit vectors the ratio multiplies over bits)."""

import itertools
import math

import numpy as np
import pytest

from ldpstream.mechanisms import KRR, ORR, KRappor, ORappor, Rappor
from tests.unit.mechanisms.channels import max_log_ratio

EPSILONS = [0.1, 0.5, 1.0, math.log(3), 2.0, 5.0, 10.0]
RTOL = 1e-9


@pytest.mark.parametrize("k", [2, 3, 8, 64, 1000])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_krr_channel_is_tight_epsilon_ldp(k, epsilon):
    q = KRR(k, epsilon).channel()
    assert q.shape == (k, k)
    np.testing.assert_allclose(q.sum(axis=1), 1.0, rtol=1e-12)
    assert max_log_ratio(q) == pytest.approx(epsilon, rel=RTOL)
    np.testing.assert_allclose(KRR(k, epsilon).report_channel(), q, rtol=1e-12)  # what the conformance suite reads


def orr_report_channel(m: ORR, values: list) -> np.ndarray:
    """The exact channel of an O-RR report over its outputs (cohort, symbol): row v is
    P((c, y) | v) = (1/C) · Q_kRR(y | hash_c(v)), from the mechanism's own per-cohort hash table."""
    table = m.value_table(None if m.closed else values)  # (C, S): the hashed symbol of each value per cohort
    krr = KRR(m.k, m.epsilon).channel()
    return np.concatenate([krr[table[c]] / m.cohorts for c in range(m.cohorts)], axis=1)


@pytest.mark.parametrize(("k", "cohorts", "support"), [(2, 1, None), (16, 8, None), (7, 3, 50), (4, 4, 6)])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_orr_report_channel_over_cohorts_and_support_is_tight_epsilon_ldp(k, cohorts, support, epsilon):
    """The whole report (cohort and symbol) over the whole alphabet: the worst ratio over every pair of
    values and every output is e^ε exactly when two values hash apart in some cohort, and never more."""
    m = ORR(k, epsilon, cohorts, support)
    values = list(range(support)) if support else [f"value-{i}" for i in range(40)]
    channel = orr_report_channel(m, values)
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(m.report_channel(m.value_table(None if m.closed else values)), channel, rtol=1e-12)
    assert max_log_ratio(channel) == pytest.approx(epsilon, rel=RTOL)


def test_orr_reports_follow_that_channel():
    """Reports drawn by the mechanism (cohort and symbol) follow the enumerated channel: a chi-square test per
    value at level 1e-4 (Bonferroni over the values), so a mechanism that drew cohorts or hashed wrongly fails."""
    from scipy import stats

    m = ORR(4, 1.5, 3, 6)
    channel = orr_report_channel(m, list(range(6)))
    rng = np.random.default_rng(5)
    n = 60_000
    for value in range(6):
        cohorts, symbols = m.encode_clients(np.full(n, value), rng, table=m.value_table(None))
        observed = np.bincount(cohorts * m.k + symbols, minlength=m.cohorts * m.k)
        _, pvalue = stats.chisquare(observed, channel[value] * n)
        assert pvalue > 1e-4 / 6, (value, pvalue)


def bit_channel_log_ratio(q_star: float, p_star: float, only_x: int, only_xp: int) -> float:
    """Worst-case ln P(y|x)/P(y|x') over y when x sets `only_x` bits that x' does not and vice versa."""
    per_x = max(math.log(q_star / p_star), math.log((1 - q_star) / (1 - p_star)))
    per_xp = max(math.log(p_star / q_star), math.log((1 - p_star) / (1 - q_star)))
    return only_x * per_x + only_xp * per_xp


def brute_force_log_ratio(bloom_sets: list[set[int]], k: int, q_star: float, p_star: float) -> float:
    """Enumerate every output y in {0,1}^k and every pair of inputs: exact channel ratio."""
    ys = np.array(list(itertools.product([0, 1], repeat=k)), dtype=bool)  # (2^k, k)
    rows = []
    for bits in bloom_sets:
        b = np.zeros(k, dtype=bool)
        b[list(bits)] = True
        prob_one = np.where(b, q_star, p_star)
        rows.append(np.where(ys, prob_one, 1 - prob_one).prod(axis=1))
    return max_log_ratio(np.array(rows))


@pytest.mark.parametrize("k", [2, 5, 8])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_krappor_channel_is_tight_epsilon_ldp(k, epsilon):
    m = KRappor(k, epsilon)
    assert m.q_star == pytest.approx(math.exp(epsilon / 2) / (1 + math.exp(epsilon / 2)))
    assert m.p_star == pytest.approx(1 - m.q_star)
    assert bit_channel_log_ratio(m.q_star, m.p_star, 1, 1) == pytest.approx(epsilon, rel=RTOL)
    assert brute_force_log_ratio([{x} for x in range(k)], k, m.q_star, m.p_star) == pytest.approx(epsilon, rel=1e-7)


@pytest.mark.parametrize(("k", "hashes", "support"), [(8, 1, None), (8, 2, None), (8, 3, 40), (6, 3, None)])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_orappor_channel_is_tight_epsilon_ldp(k, hashes, support, epsilon):
    m = ORappor(k, epsilon, cohorts=2, hashes=hashes, support=support)
    # Analytic worst case: two filters with h set bits each, disjoint.
    assert bit_channel_log_ratio(m.q_star, m.p_star, hashes, hashes) == pytest.approx(epsilon, rel=RTOL)
    # Brute force over the actual Bloom filters of candidates (any collisions only lower the ratio),
    # plus two hand-made disjoint h-bit filters to reach the bound.
    cands = list(range(40)) if support else [f"value-{i}" for i in range(40)]
    table = m.bloom_table(cands if not support else None)
    sets = [set(table[c, s].tolist()) for c in range(2) for s in range(table.shape[1])]
    assert brute_force_log_ratio(sets, k, m.q_star, m.p_star) <= epsilon * (1 + RTOL)
    disjoint = [set(range(hashes)), set(range(hashes, 2 * hashes))]
    assert brute_force_log_ratio(sets + disjoint, k, m.q_star, m.p_star) == pytest.approx(epsilon, rel=1e-7)


@pytest.mark.parametrize(
    ("hashes", "p", "q", "f"),
    [(2, 0.5, 0.75, 0.5), (1, 0.25, 0.75, 0.0), (1, 0.0, 1.0, 0.5), (4, 0.1, 0.9, 0.25), (2, 0.4, 0.7, 0.3)],
)
def test_rappor_epsilon_one_report_and_permanent(hashes, p, q, f):
    m = Rappor(k=8, hashes=hashes, cohorts=1, p=p, q=q, f=f)
    eps1 = bit_channel_log_ratio(m.q_star, m.p_star, hashes, hashes)
    assert m.epsilon == pytest.approx(eps1, rel=RTOL)
    if 2 * hashes <= 8:
        disjoint = [set(range(hashes)), set(range(hashes, 2 * hashes))]
        assert brute_force_log_ratio(disjoint, 8, m.q_star, m.p_star) == pytest.approx(m.epsilon, rel=1e-7)
    if f > 0:
        # Permanent response: P(B'=1|B=1) = 1 - f/2, P(B'=1|B=0) = f/2, any number of reports.
        eps_inf = bit_channel_log_ratio(1 - f / 2, f / 2, hashes, hashes)
        assert m.epsilon_inf == pytest.approx(eps_inf, rel=RTOL)
        assert m.epsilon <= m.epsilon_inf * (1 + RTOL)
