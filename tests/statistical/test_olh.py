"""OLH's finite hash family (docs/math/mechanisms.md#olh): the collision shares κ it rests on are Binomial(C, 1/g)/C;
the square sum F₂ of eq. OLH2 is unbiased for its value given the family; and the published intervals cover, pooled
over the candidates, with a complete list and with the heaviest strings off it (where the family's collisions
with them are carried in the variance).

Bands: a mean of T values within 4 of its standard errors; coverage pooled over T trials × S values in
0.93–0.97 widened by 3 cluster standard errors (trials are the clusters); with a complete list every value covers
at least 0.93 − z_B·sqrt(0.93·0.07/T), z_B = Φ⁻¹(1 − 0.01/S) (a family-wise 1%). With strings unlisted a candidate's
collision with them is a fixed bias given the family (sd 1.5 SE here): it is honest over candidates, not each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpstream.distributions import parse_distribution, sample_counts
from ldpstream.estimators.candidates import family_variance
from ldpstream.mechanisms import OLH
from ldpstream.simulation.scenarios import build_setup
from ldpstream.simulation.setups import with_candidate_list

pytestmark = pytest.mark.statistical


def test_collision_shares_are_binomial_over_the_family():
    C, g, S = 4096, 82, 120
    table = OLH(k=g, epsilon=4.39, cohorts=C).symbol_table([f"https://site{i}.example/" for i in range(S)])
    i, j = np.triu_indices(S, 1)
    kappa = np.stack([(table[:, a] == table[:, b]).mean() for a, b in zip(i[::7], j[::7], strict=True)])
    mean, var = 1 / g, (1 / g) * (1 - 1 / g) / C
    assert abs(kappa.mean() - mean) < 4 * math.sqrt(var / kappa.size)
    # the sample variance of m binomial shares: (m − 1) s² / var ~ χ²(m − 1)
    chi2 = (kappa.size - 1) * kappa.var(ddof=1) / var
    assert stats.chi2.ppf(1e-4, kappa.size - 1) < chi2 < stats.chi2.ppf(1 - 1e-4, kappa.size - 1)


def test_the_square_sum_is_unbiased_given_the_family():
    m = OLH(k=8, epsilon=2.0, cohorts=512)
    S, n, T = 40, 100_000, 60
    p = parse_distribution("zipf:1", S, np.random.default_rng(1))
    table = m.symbol_table([f"v{i}" for i in range(S)])
    shares = np.zeros((m.cohorts, m.k))
    np.add.at(shares, (np.repeat(np.arange(m.cohorts), S), table.ravel()), np.tile(p, m.cohorts))
    target = ((shares**2).sum(axis=1).mean() - 1 / m.k) / (1 - 1 / m.k)  # eq. OLH2 on the true shares
    rng = np.random.default_rng(2)
    scale = m.cohorts * (m.k - 1)
    draws = np.array([family_variance(m.simulate_sketch(sample_counts(p, n, rng), rng, table=table), m.epsilon,
                                      np.zeros(0), np.zeros(0)) * scale for _ in range(T)])
    assert abs(draws.mean() - target) < 4 * draws.std(ddof=1) / math.sqrt(T)
    assert abs(target - float(p @ p)) < 0.01  # and the family's own term is small beside Σ f²


@pytest.mark.parametrize("unlisted", [0, 3])
def test_intervals_cover_with_the_heaviest_strings_off_the_list(unlisted):
    S, n, T = 60, 200_000, 100
    rng = np.random.default_rng(11)
    p = parse_distribution("zipf:1", S, rng)
    setup = build_setup("olh", 2.0, S, n=n, dist=p, decoder="project", k=8, cohorts=1024)
    if unlisted:
        setup = with_candidate_list(setup, p, unlisted, 0)
    listed = np.arange(S) if setup.listed is None else setup.listed
    covered = []
    for _ in range(T):
        est = setup.decode_estimate(setup.simulate_sketch(sample_counts(p, n, rng), rng), "project")
        low, high = est.ci(0.95, clip=True)
        covered.append((low <= p[listed]) & (p[listed] <= high))
        if unlisted:
            assert est.info["family_variance"] > 0
    hits = np.array(covered)
    per_trial = hits.mean(axis=1)
    se = per_trial.std(ddof=1) / math.sqrt(T)
    assert 0.93 - 3 * se <= hits.mean() <= 0.97 + 3 * se
    if not unlisted:
        z_b = stats.norm.ppf(1 - 0.01 / listed.size)
        assert hits.mean(axis=0).min() >= 0.93 - z_b * math.sqrt(0.93 * 0.07 / T)
