"""The misfit statistic (ldpstream.estimators.misfit) against its formula computed independently, and what
watch prints of it."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy import stats

from ldpstream.decoder.watch import fit_line
from ldpstream.estimators.misfit import pearson_misfit, robust_variance_ratio


def test_pearson_statistic_df_and_p_value_are_the_formulas():
    rng = np.random.default_rng(1)
    z, fitted = rng.normal(size=12), rng.normal(size=12)
    variance = rng.uniform(0.5, 2.0, size=12)
    reports = np.repeat([10.0, 0.0, 7.0], 4)  # the middle cohort has no reports: left out
    m = pearson_misfit(z, fitted, variance, 3, width=4, reports=reports)
    live = reports > 0
    expected = float(np.sum((z[live] - fitted[live]) ** 2 / variance[live]))
    assert np.isclose(m.statistic, expected) and m.df == 8 - 3
    assert np.isclose(m.p_value, stats.chi2.sf(expected, 5))
    assert np.isclose(m.dispersion, expected / 5)
    assert m.inflation == (max(1.0, np.sqrt(expected / 5)) if m.p_value < 0.01 else 1.0)
    far = pearson_misfit(z, fitted, variance / 100, 3, width=4, reports=reports)  # rejected: widened by sqrt(φ̂)
    assert far.rejected and far.inflation == np.sqrt(far.dispersion) == np.sqrt(100 * m.dispersion)
    fixed = pearson_misfit(z, fitted, variance, 3, width=4, reports=reports, fixed_cohort_sums=True)
    assert fixed.df == 5 - 1  # two cohorts with reports: one more constraint
    assert pearson_misfit(z, fitted, variance, 8, width=4, reports=reports) is None


def test_the_largest_cells_and_the_excess_name_where_the_residual_sits():
    z = np.zeros(8)
    z[5] = 1.0  # cohort 1, cell 1
    m = pearson_misfit(z, np.zeros(8), np.full(8, 1e-4), 1, width=4, reports=np.full(8, 1000.0), cells_per_value=2)
    assert m.cells[0][:2] == (1, 1) and m.cells[0][2] == 100.0
    noise = 8 * 1000 * 0.01 / np.sqrt(2 * np.pi)
    assert np.isclose(m.excess_reports, (1000 - noise) / 2)


def test_robust_variance_ratio_is_the_hc0_sandwich_over_the_model():
    rng = np.random.default_rng(2)
    X = sp.random(60, 5, density=0.4, random_state=3, format="csr") + sp.eye(60, 5)
    w = rng.uniform(1, 3, size=60)
    G = (X.T @ sp.diags(w) @ X).toarray()
    u = rng.normal(size=60)
    Gi = np.linalg.inv(G)
    Xd = X.toarray()
    sandwich = Gi @ Xd.T @ np.diag(u**2) @ Xd @ Gi
    np.testing.assert_allclose(robust_variance_ratio(X, G, u, block=7), np.diag(sandwich) / np.diag(Gi), rtol=1e-10)


def test_watch_says_when_the_candidates_miss_mass():
    good = {"statistic": 100.0, "df": 100, "dispersion": 1.0, "p_value": 0.48, "inflation": 1.0,
            "excess_reports": 0.0, "cells": []}
    assert fit_line(good) == "fit: dispersion 1.00 on 100 df (p = 0.48)"
    bad = {**good, "dispersion": 3.9, "p_value": 0.0, "inflation": 1.97, "excess_reports": 241000.0,
           "cells": [{"cohort": 3, "cell": 17, "z": 9.0}]}
    line = fit_line(bad)
    assert "p < 1e-16" in line and "241,000 reports unexplained" in line and "cohort 3 cell 17" in line
    assert "widened by 1.97" in line
