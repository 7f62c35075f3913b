"""Tests of ldpstream.simulation: set-ups, the analytic error model against simulation, the grid search and the tuner.

Statistical checks use fixed seeds and tolerances from the spread of the simulated trials (5 standard
errors of the mean), plus, where the model is an approximation, its documented approximation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpstream.distributions import parse_distribution, sample_counts
from ldpstream.errors import ParameterError
from ldpstream.estimators.direct import krappor_expected_l2sq, krr_expected_l2sq
from ldpstream.estimators.numerics.simplex import project_simplex
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.error_model import predict, predicted_variances, projected_l1
from ldpstream.simulation.grid_search import cost, grid, ranked_predictions
from ldpstream.simulation.hash_tables import cached_table_count
from ldpstream.simulation.recommend import Alternative, select, tune
from ldpstream.simulation.scenarios import build_setup
from ldpstream.simulation.setups import hashed_setup, rappor_rates_for_epsilon
from ldpstream.simulation.trials import run_trials


@pytest.mark.parametrize(("eps", "h"), [(0.5, 1), (1.0743, 2), (4.0, 4)])
def test_rappor_rates_give_epsilon(eps, h):
    p, q, f = rappor_rates_for_epsilon(eps, h)
    assert f == 0 and p == pytest.approx(1 - q)
    assert Rappor(k=32, hashes=h, cohorts=1, p=p, q=q, f=f).epsilon == pytest.approx(eps)


@pytest.mark.parametrize("eps", [0.5, 2.0, 5.0])
def test_direct_predictions_match_expected_l2sq(eps):
    S, n = 64, 10**5
    p = parse_distribution("zipf:1", S)
    sampling = (1 - np.sum(p * p)) / n
    krr = predict(build_setup("krr", eps, S), p, n)
    assert krr["l2sq"] == pytest.approx(krr_expected_l2sq(p, n, eps) - sampling, rel=1e-9)
    kra = predict(build_setup("krappor", eps, S), p, n)
    assert kra["l2sq"] == pytest.approx(krappor_expected_l2sq(p, n, eps) - sampling, rel=1e-9)


def _check_model(setup, p, n, decoder, trials, seed):
    res = run_trials(setup, p, n, decoder, trials, np.random.default_rng(seed))[decoder]
    sim = res.losses["empirical"]["l2sq"]
    pred = predict(setup, p, n)["l2sq"]
    se = sim.std(ddof=1) / math.sqrt(trials)
    return sim.mean(), pred, se


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("name", "closed", "k", "cohorts", "hashes"),
    [("krr", True, None, None, None), ("krappor", True, None, None, None), ("orr", True, 8, 16, None),
     ("orr", False, 8, 16, None), ("orappor", False, 64, 8, 1), ("orappor", True, 16, 4, 2),
     ("ooue", False, 64, 8, 1), ("ooue", True, 16, 4, 2), ("cms", False, 64, 8, None), ("cms", True, 16, 4, None),
     ("hcms", False, 64, 8, None), ("hcms", True, 16, 4, None)],
)
def test_variance_model_matches_simulation(name, closed, k, cohorts, hashes):
    """The unprojected estimate's mean ℓ2² against the empirical distribution equals the prediction.

    The hashed models (O-RR, O-RAPPOR, O-OUE, CMS, HCMS) evaluate the weights at the true p while the decoder evaluates
    them at a pilot fit, and the bit model ignores the covariance between the bits of one report (both
    documented approximations of a few percent), so those get 5% of slack on top of 5 standard errors."""
    S, n, trials = 32, 200_000, 40
    p = parse_distribution("geometric", S)
    setup = build_setup(name, 2.0, S, closed=closed, k=k, cohorts=cohorts, hashes=hashes)
    decoder = "unbiased" if name in ("krr", "krappor") else "ls"
    mean, pred, se = _check_model(setup, p, n, decoder, trials, seed=5)
    slack = 0.0 if name in ("krr", "krappor") else 0.05 * pred
    assert abs(mean - pred) <= 5 * se + slack, (mean, pred, se)


def test_grid_identifiable_and_ranked():
    for name, closed in (("orr", True), ("orr", False), ("orappor", True), ("orappor", False)):
        pts = grid(name, 64, closed)
        assert pts and all(pt["k"] * pt["cohorts"] >= 64 for pt in pts)
        if name == "orr":  # each cohort gives k − 1 independent equations
            assert all(pt["cohorts"] * (pt["k"] - 1) + 1 >= 64 for pt in pts)
            assert {3, 4, 5, 6} <= {pt["k"] for pt in pts}
            assert max(pt["cohorts"] for pt in pts) == 4096
        if closed:
            assert max(pt["k"] for pt in pts) <= 64
    assert max(pt["cohorts"] for pt in grid("orr", 64, False, n=10**5)) == 512  # at most n/100 cohorts
    p = parse_distribution("uniform", 32)
    ranked = ranked_predictions("orr", 2.0, 32, 10**5, p, True)
    crit = [r["criterion"] for r in ranked]
    assert all(r["criterion"] == r["predicted_l1_projected"] for r in ranked)  # decoder "project"
    assert [round(c, 6) for c in crit[1:]] == sorted(round(c, 6) for c in crit[1:])
    # first: the cheapest point within 1% of the best prediction
    assert crit[0] <= min(crit) * 1.01
    assert cost(ranked[0]) == min(cost(r) for r in ranked if r["criterion"] <= min(crit) * 1.01)
    fixed = ranked_predictions("orr", 2.0, 32, 10**5, p, True, k=4)
    assert all(r["k"] == 4 for r in fixed)
    ls = ranked_predictions("orr", 2.0, 32, 10**5, p, True, k=4, decoder="ls")
    assert all(r["criterion"] == r["predicted_l1"] for r in ls)


@pytest.mark.parametrize("support", [6, 8])
def test_a_closed_alphabet_below_sixteen_symbols_still_has_o_rappor_points(support):
    points = grid("orappor", support, True, 20_000)
    assert points and all(pt["k"] <= support and pt["k"] * pt["cohorts"] >= support for pt in points)
    p = np.full(support, 1 / support)
    assert ranked_predictions("orappor", 2.0, support, 20_000, p, True)[0]["criterion"] > 0


def test_an_empty_grid_is_a_clear_error(monkeypatch):
    import ldpstream.simulation.grid_search as grid_search

    monkeypatch.setattr(grid_search, "grid", lambda *_args: [])
    with pytest.raises(ParameterError, match="no orappor parameters"):
        ranked_predictions("orappor", 2.0, 8, 20_000, np.full(8, 1 / 8), True)


@pytest.mark.parametrize(
    ("name", "closed", "h"), [("orr", False, None), ("orr", True, None), ("orappor", False, 1), ("orappor", True, 2)]
)
def test_table_of_fewer_cohorts_is_a_prefix(name, closed, h):
    """The tuner slices cached tables: cohort c's hash must not depend on the number of cohorts."""
    from ldpstream.mechanisms.factory import make_mechanism

    big = hashed_setup(name, 1.0, 40, closed, 8, 16, h)
    small = hashed_setup(name, 1.0, 40, closed, 8, 4, h)  # sliced from the cached 16-cohort table
    spec = {"mechanism": name, "k": 8, "epsilon": 1.0, "cohorts": 4}
    if h:
        spec["hashes"] = h
    if closed:
        spec["support"] = 40
    mech = make_mechanism(spec)
    fresh = mech.value_table(big.candidates)
    assert np.array_equal(small.table, fresh)
    assert np.array_equal(big.table[:4], fresh)
    assert cached_table_count() > 0


@pytest.mark.parametrize("name", ["krr", "krappor"])
def test_direct_variances_are_the_estimators_single_home(name):
    """The error model of k-RR / k-RAPPOR is the variance of ldpstream.estimators.numerics.variance, less sampling."""
    from ldpstream.estimators.numerics.variance import krappor_variance, krr_variance
    from ldpstream.simulation.error_model import predicted_variances

    p = np.linspace(1.0, 2.0, 16)
    p /= p.sum()
    setup = build_setup(name, 1.5, 16)
    var, bias = predicted_variances(setup, p, 10**4, reference="true")
    home = krr_variance(p, 10**4, 1.5) if name == "krr" else krappor_variance(p, 10**4, 1.5)
    np.testing.assert_allclose(var, home, rtol=1e-12)
    assert not bias.any()


def test_projected_l1_matches_monte_carlo_projection():
    """The mean-field projection model against projecting Gaussian noise directly (no mechanism)."""
    S = 256
    p = parse_distribution("geometric", S)
    rng = np.random.default_rng(3)
    for sd in (2e-4, 1e-3, 4e-3):
        var = np.full(S, sd * sd) * (1 + p * 50)  # heteroscedastic, like k-RAPPOR
        u = p + rng.standard_normal((400, S)) * np.sqrt(var)
        sim = np.mean([np.abs(project_simplex(row) - p).sum() for row in u])
        assert projected_l1(p, var) == pytest.approx(sim, rel=0.03), sd
    assert projected_l1(p, np.full(S, 1e-20)) < 1e-6  # no noise: projection is the identity


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("name", "closed", "k", "cohorts", "hashes", "eps"),
    [("krr", True, None, None, None, 1.0), ("krappor", True, None, None, None, 0.5), ("orr", False, 4, 256, None, 0.5),
     ("orr", True, 16, 32, None, 2.0), ("orappor", False, 256, 4, 1, 1.0), ("ooue", False, 256, 4, 2, 2.0),
     ("cms", True, 64, 8, None, 1.0), ("hcms", False, 256, 8, None, 4.0)],
)
def test_projected_prediction_matches_simulation(name, closed, k, cohorts, hashes, eps):
    """The projected model against LS + projection (the paper's decoder): 6% plus 4 standard errors."""
    S, n, trials = 128, 200_000, 12
    p = parse_distribution("geometric", S)
    setup = build_setup(name, eps, S, closed=closed, k=k, cohorts=cohorts, hashes=hashes)
    res = run_trials(setup, p, n, "project", trials, np.random.default_rng(7))["project"]
    sim = res.losses["empirical"]["l1"]
    pred = predict(setup, p, n)["l1_projected"]
    se = sim.std(ddof=1) / math.sqrt(trials)
    assert abs(sim.mean() - pred) <= 4 * se + 0.06 * pred, (sim.mean(), pred, se)


def test_reference_true_adds_sampling_variance():
    S, n = 32, 10**4
    p = parse_distribution("geometric", S)
    setup = build_setup("krr", 1.0, S)
    v_emp, _ = predicted_variances(setup, p, n)
    v_true, _ = predicted_variances(setup, p, n, "true")
    assert np.allclose(v_true - v_emp, p * (1 - p) / n)
    with pytest.raises(ParameterError, match="reference"):
        predicted_variances(setup, p, n, "sample")


def _alt(mech, k, predicted, mean=None, se=None, C=1):
    a = Alternative(mech, {"k": k, "cohorts": C}, predicted, 0.0, predicted, predicted)
    a.simulated_mean, a.simulated_se = mean, se
    return a


def test_select_model_first_simulation_only_when_resolved():
    # within the noise: the model's choice stands although its simulated mean is higher
    a, b = _alt("orr", 4, 0.57, 0.59, 0.01), _alt("orr", 2, 0.62, 0.58, 0.01)
    assert select([a, b]) is a
    # a difference the trials resolve (> 2.5 pooled SE): simulation wins
    a, b = _alt("orr", 4, 0.57, 0.63, 0.005), _alt("orr", 2, 0.62, 0.58, 0.005)
    assert select([a, b]) is b
    # within 1% predicted: the cheaper sketch
    a, b = _alt("orr", 4, 0.570, C=2048), _alt("orr", 4, 0.574, C=1024)
    assert select([a, b]) is b
    with pytest.raises(ParameterError):
        select([])


def test_build_setup_defaults_and_errors():
    s = build_setup("orappor", 2.0, 32, n=10**5, dist=parse_distribution("uniform", 32))
    params = s.parameters()
    assert params["closed"] is False and params["k"] * params["cohorts"] >= 32 and params["hashes"] in (1, 2)
    r = build_setup("rappor", 1.0, 40)
    assert r.parameters()["k"] == 64 and r.parameters()["hashes"] == 2
    assert r.mechanism.epsilon == pytest.approx(1.0)
    with pytest.raises(ParameterError, match="k must equal"):
        build_setup("krr", 1.0, 16, k=8)
    with pytest.raises(ParameterError, match="unknown mechanism"):
        build_setup("hadamard", 1.0, 16)
    with pytest.raises(ParameterError, match="--p and --q"):
        build_setup("rappor", None, 16, p=0.25)
    with pytest.raises(ParameterError, match="no closed alphabet"):
        build_setup("rappor", 1.0, 16, closed=True)


@pytest.mark.statistical
@pytest.mark.parametrize(("name", "closed"), [("krr", True), ("krappor", True), ("orr", True), ("orappor", False)])
def test_every_decoder_is_right_on_average_and_the_constrained_ones_do_not_lose_to_it(name, closed):
    """Would catch a wrong estimator: the unbiased decoder's mean over T trials lies within a Bonferroni
    z · sd/√T of the truth for every symbol; the projection (a Euclidean projection onto the simplex, which
    holds the truth) is never farther from the truth in ℓ2 than the unbiased estimate, trial by trial; and
    NNLS and the MLE have a mean squared error no larger than the unbiased one's, up to 3 standard errors of
    the paired difference."""
    from scipy import stats

    S, n, trials = 16, 20_000, 60
    p = parse_distribution("geometric", S)
    setup = build_setup(name, 2.0, S, closed=closed, k=None if name.startswith("k") else 8,
                        cohorts=None if name.startswith("k") else 4, hashes=1 if name == "orappor" else None)
    rng = np.random.default_rng(11)
    decoders = ("unbiased", "project", "nnls", "mle")
    est = {d: [] for d in decoders}
    for _ in range(trials):
        sketch = setup.simulate_sketch(sample_counts(p, n, rng), rng)
        for d in decoders:
            est[d].append(setup.decode(sketch, d))
    arrays = {d: np.asarray(v) for d, v in est.items()}
    unbiased = arrays["unbiased"]
    z = stats.norm.isf(0.001 / (2 * S))
    bias = np.abs(unbiased.mean(axis=0) - p)
    assert np.all(bias <= z * unbiased.std(axis=0, ddof=1) / np.sqrt(trials)), bias
    l2 = {d: np.sum((a - p) ** 2, axis=1) for d, a in arrays.items()}
    assert np.all(l2["project"] <= l2["unbiased"] + 1e-12)
    for d in ("nnls", "mle"):
        diff = l2[d] - l2["unbiased"]
        assert diff.mean() <= 3 * diff.std(ddof=1) / np.sqrt(trials), (d, diff.mean())
    with pytest.raises(ParameterError, match="unknown decoder"):
        setup.decode(np.zeros((4, 9)), "magic")


@pytest.mark.statistical
def test_tune_recommends_sensibly():
    """At large ε on a closed alphabet k-RR-like mechanisms win; at tiny ε (ε = 0.5) k-RR loses to
    k-RAPPOR (their expected errors cross at ε ≈ 3.67 for k = 256; docs/math/estimators.md)."""
    S, n = 256, 10**6
    p = parse_distribution("geometric", S)
    res = tune(0.5, S, n, p, closed=True, trials=2, keep=2, seed=1)
    assert res.recommended.mechanism != "krr"
    assert res.best("krr").simulated_l1 > res.best("krappor").simulated_l1
    res8 = tune(8.0, 64, 10**5, parse_distribution("geometric", 64), closed=True, trials=2, keep=2, seed=1)
    assert res8.best("krr").simulated_l1 < res8.best("krappor").simulated_l1
    with pytest.raises(ParameterError, match="not available"):
        tune(1.0, 16, 1000, parse_distribution("uniform", 16), closed=False, mechanisms=["krr"])


@pytest.mark.statistical
def test_tune_orr_open_low_epsilon_matches_paper():
    """Regression: at ε = 0.5 (n = 10^6, S = 256, geometric) the tuner once took O-RR k = 2, C = 1024
    (ℓ1 0.627 against the published 0.588) over k = 4 (0.574). Now the model of the projected estimate
    ranks, and the grid has k = 3..6 and C up to 4096."""
    S, n = 256, 10**6
    p = parse_distribution("geometric", S)
    res = tune(0.5, S, n, p, closed=False, trials=3, keep=2, seed=2, mechanisms=["orr"])
    best = res.best("orr")
    assert best.params["k"] in (3, 4, 5, 6) and best.params["cohorts"] >= 1024, best.params
    assert best.predicted <= 0.588 * 1.02
    assert best.simulated_mean is not None and best.simulated_mean <= 0.588 * 1.04  # 3 trials: ~2% SE
    assert all(a.simulated_se is not None and a.simulated_se > 0 for a in res.alternatives)
    assert len({a.params["k"] for a in res.alternatives}) == len(res.alternatives)  # distinct k simulated


def test_the_hashed_grids_of_o_oue_cms_and_hcms():
    """O-OUE searches O-RAPPOR's (k, C, h) grid; CMS and HCMS the same (k, C) with one hash per cohort."""
    S = 64
    assert grid("ooue", S, False, 10**6) == grid("orappor", S, False, 10**6)
    for name in ("cms", "hcms"):
        pts = grid(name, S, True, 10**6)
        assert pts and all("hashes" not in pt and pt["k"] * pt["cohorts"] >= S for pt in pts)
        assert {(pt["k"], pt["cohorts"]) for pt in pts} == {
            (pt["k"], pt["cohorts"]) for pt in grid("orappor", S, True, 10**6) if pt["hashes"] == 1}
    # simulate without --k / --cohorts: the grid point the model ranks first
    setup = build_setup("hcms", 2.0, S, closed=True, n=10**5, dist=parse_distribution("geometric", S))
    first = ranked_predictions("hcms", 2.0, S, 10**5, parse_distribution("geometric", S), True)[0]
    assert (setup.mechanism.k, setup.mechanism.cohorts) == (first["k"], first["cohorts"])
    with pytest.raises(ParameterError, match="hashes = 1"):
        build_setup("cms", 1.0, S, k=16, cohorts=4, hashes=2)


@pytest.mark.parametrize("closed", [False, True])
def test_o_oue_cms_and_hcms_share_o_rappors_cached_tables_and_they_are_their_own(closed):
    """The tuner's set-ups of O-OUE, CMS, HCMS take O-RAPPOR's cached table and design; those must be exactly
    what each mechanism builds itself (value_table, design_matrix)."""
    S = 40
    cands = None if closed else [f"s{i}" for i in range(S)]
    for name, h in (("ooue", 2), ("cms", None), ("hcms", None)):
        setup = hashed_setup(name, 1.0, S, closed, 16, 4, h)
        own = setup.mechanism.value_table(cands)
        np.testing.assert_array_equal(setup.table, own)
        assert (setup.design != setup.mechanism.design_matrix(own)).nnz == 0


@pytest.mark.parametrize(("closed", "loss"), [(True, "l2sq"), (False, "l1")])
def test_tune_considers_every_mechanism(closed, loss):
    """tune searches every family the alphabet allows, the hashed O-OUE, CMS and HCMS among them, and its
    recommendation is the model's best (within rel_tol, cheapest first) over all of them."""
    S = 64
    p = parse_distribution("geometric", S)
    decoder = "unbiased" if loss == "l2sq" else "project"
    res = tune(2.0, S, 10**5, p, closed=closed, trials=0, loss=loss, decoder=decoder)
    seen = {a.mechanism for a in res.alternatives}
    hashed = {"orr", "orappor", "ooue", "cms", "hcms", "olh"}
    assert seen == (hashed | {"krr", "krappor", "oue", "ss", "hr"} if closed else hashed)
    lowest = min(a.predicted for a in res.alternatives)
    assert res.recommended.predicted <= lowest * 1.01
    # at ε = 2 on an open alphabet of 64 the asymmetric flips beat O-RAPPOR's symmetric ones at equal (k, C, h)
    if not closed:
        assert res.best("ooue").predicted < res.best("orappor").predicted


def test_tune_model_only_and_errors():
    p = parse_distribution("geometric", 32)
    res = tune(2.0, 32, 10**5, p, closed=True, trials=0)
    assert all(a.simulated_l1 is None for a in res.alternatives)
    assert res.recommended is min(res.alternatives, key=lambda a: (a.predicted > min(
        b.predicted for b in res.alternatives) * 1.01, cost(a.params)))
    with pytest.raises(ParameterError, match="reference"):
        tune(2.0, 32, 10**5, p, reference="both")


def test_dense_and_sparse_orr_predictions_agree():
    """Small-k O-RR is predicted with dense products; the sparse path must give the same numbers."""
    p = parse_distribution("geometric", 64)
    for closed in (False, True):
        setup = hashed_setup("orr", 1.0, 64, closed, 4, 64, None)
        dense_var, dense_bias = predicted_variances(setup, p, 10**5, dense_max_k=8)
        sparse_var, sparse_bias = predicted_variances(setup, p, 10**5, dense_max_k=0)
        assert dense_var == pytest.approx(sparse_var, rel=1e-9)
        assert dense_bias == pytest.approx(sparse_bias, rel=1e-9, abs=1e-15)


def test_hadamard_response_risk_is_k_coth_squared_and_never_below_subset_selection():
    """docs/math/tuning.md, "Hadamard response and the tuner": HR's n·ℓ2² + Σp² is k·coth²(ε/2) for every p (the
    error model, a second implementation of the unary risk, agrees), above SS's at its best d on the whole grid,
    and HR/SS tends to cosh²(ε/2) when k ≫ e^ε (Ye & Barg's 4k e^ε/(e^ε − 1)² for SS)."""
    from ldpstream.mechanisms.rates import hadamard_rates, optimal_subset_size, subset_rates, unary_risk

    n = 10_000
    for eps in (0.5, 1.0, 2.0, 4.0, 8.0):
        for k in (2, 8, 64, 256, 4096):
            hr = unary_risk(k, *hadamard_rates(eps))
            assert hr == pytest.approx(k / math.tanh(eps / 2) ** 2, rel=1e-12)
            ss = unary_risk(k, *subset_rates(k, optimal_subset_size(k, eps), eps))
            assert hr > ss, (k, eps)
        p = parse_distribution("geometric", 64)
        pred = predict(build_setup("hr", eps, 64), p, n, reference="true")["l2sq"]
        assert n * pred + np.sum(p * p) == pytest.approx(64 / math.tanh(eps / 2) ** 2, rel=1e-9)
        big = 2**20
        ratio = unary_risk(big, *hadamard_rates(eps)) / unary_risk(
            big, *subset_rates(big, optimal_subset_size(big, eps), eps))
        assert ratio == pytest.approx(math.cosh(eps / 2) ** 2, rel=0.01)


@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_tune_does_not_pick_hadamard_response(eps):
    res = tune(eps, 256, 10**6, parse_distribution("geometric", 256), closed=True, trials=0, loss="l2sq",
               decoder="unbiased", mechanisms=["hr", "ss", "oue", "krr"])
    assert res.recommended.mechanism != "hr"
    assert res.best("hr").predicted > res.best("ss").predicted
