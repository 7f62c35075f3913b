"""Detection (ldpstream.estimators.detection.detect): false detections controlled at the stated level over
fixed seeds, heavy hitters found, and no list of 'significant' strings from an underdetermined design."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.detection import detect
from ldpstream.estimators.estimate import Estimate
from ldpstream.mechanisms.rappor import Rappor

pytestmark = pytest.mark.statistical

SEEDS = range(20)


def _run(mech: Rappor, n_cands: int, probs: np.ndarray, n: int, seed: int):
    cands = [f"s{i}" for i in range(n_cands)]
    table = mech.bloom_table(cands)
    rng = np.random.default_rng(seed)
    counts = np.zeros(n_cands, dtype=np.int64)
    counts[: probs.size] = rng.multinomial(n, probs)
    sketch = mech.simulate_sketch(counts, rng, table)
    return sketch, mech.design_matrix(table), counts / n


def _probs(n_true: int) -> np.ndarray:
    w = 0.8 ** np.arange(n_true)
    return w / w.sum()


@pytest.mark.parametrize(("correction", "alpha"), [("bonferroni", 0.05), ("bh", 0.05), ("bh", 0.10)])
def test_false_detections_controlled_and_heavy_hitters_found(correction, alpha):
    """Well-determined design (C·k = 1024 rows, 80 candidates, 10 present). With Bonferroni the family-wise
    error rate is at most α per run, so over 20 independent seeds the number of runs with a false detection is
    Binomial(20, <= α)-bounded (its 99.7% quantile). With BH (adaptive: the full design of 80 candidates is
    well-determined) the false discovery rate E[V / max(R, 1)] is at most α: the mean false discovery
    proportion over the seeds stays below that + 3 standard errors.
    Power: the BH and Bonferroni thresholds are at most z_B = Φ⁻¹(1 − α/80), so a string whose frequency is
    at least (z_B + 3) standard errors is missed with probability below Φ(−3) = 0.00135 per string: over the
    ≈ 200 such (string, seed) pairs the expected number missed is < 0.3; allow 1."""
    mech = Rappor(32, 2, 32, 0.25, 0.75, 0.5)
    probs = _probs(10)
    runs_with_false = 0
    fdp = []
    missed = strong = 0
    z_b = stats.norm.isf(alpha / 80)
    for seed in SEEDS:
        sketch, X, truth = _run(mech, 80, probs, 50_000, seed)
        est = detect(sketch, X, mech.q_star, mech.p_star, correction, alpha)
        mask = est.significant(alpha, correction)
        assert est.info["rule"] == correction and est.info["determined"]
        assert np.flatnonzero(mask).tolist() == est.info["detected"]
        runs_with_false += bool(np.any(mask & (truth == 0)))
        fdp.append(np.sum(mask & (truth == 0)) / max(int(mask.sum()), 1))
        big = truth >= (z_b + 3) * est.std_errors
        strong += int(big.sum())
        missed += int(np.sum(big & ~mask))
        # every string above 5% is detected: its z-score is far above Φ⁻¹(1 − 0.05/80) ≈ 3.2
        assert np.all(mask[truth >= 0.05]), seed
    assert strong >= 5 * len(SEEDS)  # the power check covers the top strings of every run
    assert missed <= 1
    if correction == "bonferroni":
        assert runs_with_false <= stats.binom.ppf(0.997, len(SEEDS), alpha)
    else:
        assert np.mean(fdp) <= alpha + 3 * np.std(fdp, ddof=1) / np.sqrt(len(SEEDS))


def test_adaptive_bh_controls_fdr_and_posterior_means_remove_the_winners_curse():
    """Half the candidates present (40 Zipf(1) strings among 80; C·k = 1024 rows, so the full design is
    well-determined and both adaptive steps run), 10 seeds.

    - Two-stage BH at q = 0.10 (the default): the FDR is at most q (Benjamini, Krieger and Yekutieli 2006),
      so the mean false discovery proportion stays below q + 3 standard errors of that mean. Plain BH at the
      same q on the same z-scores controls q·π0 ≈ 0.05 and is conservative. When the first stage rejects at
      least a share q/(1 + q) of the candidates (``null_fraction = m̂0/m <= 1/(1 + q)``, every seed here:
      measured 0.68–0.78) the second stage's level q/(1 + q)/(m̂0/m) is at least q, so the two-stage rule
      rejects a superset of plain BH's; over the seeds strictly more (measured 236 against 229).
    - Storey's option (``adaptive="storey"``, the same estimate with Storey's π̂0 of the full LS): BH at
      q/π̂0 >= q, a superset of plain BH's; π̂0 is biased upwards, so its mean is at least 0.5 − 3 standard
      errors; its mean FDP also below q + 3 standard errors.
    - Points: the refit values of the detected strings are biased upwards (selected for large estimates):
      their summed error has a mean more than 3 standard errors above 0 over the seeds (measured +0.08 over 20
      seeds); the posterior means' summed error is centred on 0 (measured +0.002 ± 0.044 per seed): its mean
      lies within 3 standard errors of 0."""
    from dataclasses import replace

    from ldpstream.estimators.detection import storey_null_fraction

    mech = Rappor(32, 2, 32, 0.25, 0.75, 0.5)
    w = 1 / np.arange(1, 41)
    q = 0.10
    fdp, fdp_storey, n_adaptive, n_plain, pi0, err_post, err_refit = [], [], 0, 0, [], [], []
    for seed in range(10):
        sketch, X, truth = _run(mech, 80, w / w.sum(), 50_000, seed)
        est = detect(sketch, X, mech.q_star, mech.p_star)
        assert est.info["point"] == "posterior-mean" and est.info["adaptive"] == "two-stage"
        assert est.info["null_fraction"] <= 1 / (1 + q)
        mask = est.significant(q, "bh")
        plain = Estimate.significant(est, q, "bh")  # BH at q on the same refit z-scores
        assert np.all(mask[plain])
        fit = est.full_fit
        assert fit is not None
        storey = replace(est, adaptive="storey",
                         null_fraction=storey_null_fraction(stats.norm.sf(fit.estimates / fit.std_errors)))
        storey_mask = storey.significant(q, "bh")
        assert np.all(storey_mask[plain])
        n_adaptive += int(mask.sum())
        n_plain += int(plain.sum())
        pi0.append(storey.null_fraction)
        fdp.append(np.sum(mask & (truth == 0)) / max(int(mask.sum()), 1))
        fdp_storey.append(np.sum(storey_mask & (truth == 0)) / max(int(storey_mask.sum()), 1))
        refit = np.asarray(est.null_z) * est.std_errors
        err_post.append(float(np.sum(est.frequencies[mask] - truth[mask])))
        err_refit.append(float(np.sum(refit[mask] - truth[mask])))
    n = len(fdp)
    assert np.mean(fdp) <= q + 3 * np.std(fdp, ddof=1) / np.sqrt(n)
    assert np.mean(fdp_storey) <= q + 3 * np.std(fdp_storey, ddof=1) / np.sqrt(n)
    assert n_adaptive > n_plain
    assert np.mean(pi0) >= 0.5 - 3 * np.std(pi0, ddof=1) / np.sqrt(n)
    assert np.mean(err_refit) > 3 * np.std(err_refit, ddof=1) / np.sqrt(n)
    assert abs(np.mean(err_post)) < 3 * np.std(err_post, ddof=1) / np.sqrt(n)


def _mean_fdp(rule, mu: np.ndarray, n_null: int, rho: float, trials: int, rng: np.random.Generator):
    """Mean false discovery proportion of ``rule(p) -> mask`` over ``trials`` draws of one-sided z-tests
    ``z = μ + sqrt(ρ)·Z0 + sqrt(1 − ρ)·Z_s`` (the first ``n_null`` μ's are 0), and its Monte-Carlo standard
    error."""
    fdp = np.empty(trials)
    for t in range(trials):
        z = mu + np.sqrt(rho) * rng.standard_normal() + np.sqrt(1 - rho) * rng.standard_normal(mu.size)
        mask = rule(stats.norm.sf(z))
        fdp[t] = np.count_nonzero(mask[:n_null]) / max(int(np.count_nonzero(mask)), 1)
    return float(fdp.mean()), float(fdp.std(ddof=1) / np.sqrt(trials))


def test_two_stage_procedure_controls_the_fdr_on_simulated_z_scores():
    """The two-stage procedure (:func:`two_stage_step_up`) on simulated z-scores: 400 hypotheses, 200 null and
    200 with means spread evenly over [1, 4] (about the Zipf benchmark's spread of z), q = 0.10, 1,000
    trials per case. The FDR is the mean false discovery proportion; its Monte-Carlo standard error is the
    FDP's sample sd / sqrt(1000) (≈ 0.0007 independent, ≈ 0.004 correlated); a rule whose FDR is at most q
    exceeds q + 3 standard errors with probability below Φ(−3) = 0.00135.

    - Independent z's (the procedure's theorem, Benjamini, Krieger and Yekutieli 2006): FDR <= q + 3 se
      (measured 0.070), and above plain BH's FDR (q·π0 = 0.05) by more than 3 se of the difference: the
      procedure adapts to the share of nulls (measured 0.050 for BH).
    - Equicorrelated z's (ρ = 0.5, positive dependence, where their simulations found Storey's λ = 1/2
      adaptive BH anticonservative): the two-stage FDR stays <= q + 3 se (measured 0.079), and Storey's
      exceeds q by more than 3 of its standard errors (measured 0.150 ± 0.006), which is why the two-stage
      procedure is detect's default."""
    from ldpstream.estimators.detection import storey_null_fraction, two_stage_step_up

    q, n_null = 0.10, 200
    mu = np.concatenate([np.zeros(n_null), np.linspace(1.0, 4.0, 200)])

    def two_stage(p):
        return two_stage_step_up(p, q)[0]

    def plain(p):
        return stats.false_discovery_control(p) <= q

    def storey(p):
        return stats.false_discovery_control(p) <= min(q / storey_null_fraction(p), 1.0)

    fdr, se = _mean_fdp(two_stage, mu, n_null, 0.0, 1000, np.random.default_rng(11))
    fdr_bh, se_bh = _mean_fdp(plain, mu, n_null, 0.0, 1000, np.random.default_rng(11))
    assert fdr <= q + 3 * se
    assert fdr - fdr_bh > 3 * np.hypot(se, se_bh)
    fdr, se = _mean_fdp(two_stage, mu, n_null, 0.5, 1000, np.random.default_rng(12))
    fdr_storey, se_storey = _mean_fdp(storey, mu, n_null, 0.5, 1000, np.random.default_rng(12))
    assert fdr <= q + 3 * se
    assert fdr_storey > q + 3 * se_storey


def test_full_design_null_z_scores_are_standard_normal():
    """The theoretical null the adaptive rule relies on (docs/math/estimators.md, "Local false discovery rates
    and the empirical null"): in a well-determined design the full weighted LS z-scores ``β̂_s/se_s`` of the
    absent candidates (``est.full_fit``) are N(0, 1), so no empirical null is needed. 40 Zipf(1) strings among
    80 candidates, 20 seeds: 800 null z's. Their mean has sd 1/sqrt(800) = 0.035 and their sample sd has sd
    ≈ 1/sqrt(2·800) = 0.025 (normal data); both within 4 of those sds of 0 and 1 (candidates of one run are
    nearly independent: the design is near-orthogonal; measured −0.014 and 1.026). ``full_fit`` is what
    Storey's null share (``adaptive="storey"``) and the published posterior means are computed from."""
    from ldpstream.estimators.detection import storey_null_fraction
    from ldpstream.estimators.empirical_bayes import posterior_mean

    mech = Rappor(32, 2, 32, 0.25, 0.75, 0.5)
    w = 1 / np.arange(1, 41)
    null_z = []
    for seed in range(20):
        sketch, X, truth = _run(mech, 80, w / w.sum(), 50_000, seed)
        est = detect(sketch, X, mech.q_star, mech.p_star, adaptive="storey")
        fit = est.full_fit
        assert fit is not None and fit.grid is not None and fit.prior is not None
        z = fit.estimates / fit.std_errors
        null_z.append(z[truth == 0])
        assert est.null_fraction == pytest.approx(storey_null_fraction(stats.norm.sf(z)))
        sel = np.flatnonzero(est.frequencies > 0)
        np.testing.assert_allclose(
            est.frequencies[sel], posterior_mean(fit.estimates[sel], fit.std_errors[sel], fit.grid, fit.prior))
    zz = np.concatenate(null_z)
    assert zz.size == 800
    assert abs(zz.mean()) < 4 / np.sqrt(zz.size)
    assert abs(zz.std(ddof=1) - 1) < 4 / np.sqrt(2 * zz.size)


def test_underdetermined_full_design_keeps_plain_bh_and_refit_points():
    """More candidates than half the rows: no valid p-value exists for an unselected candidate, so π̂0 = 1
    (plain BH, whichever adaptive procedure is asked for) and the published points are the refit's."""
    mech = Rappor(8, 2, 16, 0.25, 0.75, 0.5)
    sketch, X, _ = _run(mech, 400, _probs(10), 50_000, 0)
    est = detect(sketch, X, mech.q_star, mech.p_star)
    assert est.info["null_fraction"] == 1.0 and est.info["point"] == "refit" and est.full_fit is None
    assert est.info["adaptive"] == "none" and est.adaptive is None
    assert np.allclose(est.frequencies, np.asarray(est.null_z) * est.std_errors)
    assert np.array_equal(est.significant(0.10, "bh"), Estimate.significant(est, 0.10, "bh"))
    storey = detect(sketch, X, mech.q_star, mech.p_star, adaptive="storey")
    assert np.array_equal(storey.significant(0.10, "bh"), est.significant(0.10, "bh"))


def test_default_rule_is_bh_at_010_and_finds_more_than_bonferroni():
    """The default (Benjamini–Hochberg at q = 0.10) rejects a superset of Bonferroni at 0.05 on the same
    estimate (every p-value <= 0.05/S passes BH's first step at q = 0.10), so it never detects fewer."""
    mech = Rappor(32, 2, 32, 0.25, 0.75, 0.5)
    for seed in range(3):
        sketch, X, _ = _run(mech, 80, _probs(10), 50_000, seed)
        est = detect(sketch, X, mech.q_star, mech.p_star)
        assert (est.info["rule"], est.info["alpha"]) == ("bh", 0.10)
        bonf = est.significant(0.05, "bonferroni")
        assert np.all(est.significant(0.10, "bh")[bonf])
        assert est.info["n_detected"] >= int(bonf.sum())


def test_underdetermined_design_gives_no_long_false_list():
    """Candidates outnumber the cells (k = 8, m = 16: 128 rows, 400 candidates, 10 present): the screen stops at
    a well-determined subset, and the detected list is short and almost all true. At the 0.05 levels at most 3
    false detections over the 10 runs (regression guard, 1 measured); for the default (BH at q = 0.10) the FDR
    bound gives E[Σ V] <= q·E[Σ R]: the observed count stays below q·Σ R + 3·sqrt(q·Σ R) (1 measured)."""
    mech = Rappor(8, 2, 16, 0.25, 0.75, 0.5)
    probs = _probs(10)
    false_total = 0
    false_default = detected_default = 0
    for seed in range(5):
        sketch, X, truth = _run(mech, 400, probs, 50_000, seed)
        for correction, alpha in (("bonferroni", 0.05), ("bh", 0.05), ("bh", 0.10)):
            est = detect(sketch, X, mech.q_star, mech.p_star, correction, alpha)  # type: ignore[arg-type]
            mask = est.significant(alpha, correction)  # type: ignore[arg-type]
            assert est.info["selected"] <= 0.5 * 128
            assert mask.sum() <= 15
            assert mask[0], seed  # the top string (≈ 21%) is found
            if alpha == 0.10:
                false_default += int(np.sum(mask & (truth == 0)))
                detected_default += int(mask.sum())
            else:
                false_total += int(np.sum(mask & (truth == 0)))
    assert false_total <= 3
    bound = 0.10 * detected_default
    assert false_default <= bound + 3 * np.sqrt(bound)


def test_bad_arguments():
    mech = Rappor(8, 2, 2, 0.25, 0.75, 0.5)
    sketch, X, _ = _run(mech, 5, _probs(2), 1000, 0)
    with pytest.raises(ParameterError):
        detect(sketch, X, mech.q_star, mech.p_star, "holm")  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        detect(sketch, X[:3], mech.q_star, mech.p_star)


def test_detect_is_a_live_decoder_method_for_bit_sketches_only():
    """``estimate(..., method="detect")`` routes RAPPOR / O-RAPPOR to :func:`detect` (default rule, labels from the
    candidate list) and is listed for ``candidates_bits`` only; O-RR refuses it."""
    from ldpstream.estimators import estimate
    from ldpstream.mechanisms import ORR
    from ldpstream.mechanisms.base import DECODER_METHODS

    assert "detect" in DECODER_METHODS["candidates_bits"]
    assert "detect" not in DECODER_METHODS["candidates_symbol"]
    mech = Rappor(32, 2, 32, 0.25, 0.75, 0.5)
    sketch, _, _ = _run(mech, 40, _probs(5), 20_000, 0)
    cands = [f"s{i}" for i in range(40)]
    est = estimate(sketch, mech, "detect", cands)
    direct = detect(sketch, mech.design_matrix(mech.bloom_table(cands)), mech.q_star, mech.p_star)
    assert (est.method, est.info["rule"], est.info["alpha"]) == ("bits/detect", "bh", 0.10)
    assert est.info["detected"] == direct.info["detected"] and 0 in est.info["detected"]
    assert list(est.labels or []) == cands
    orr = ORR(k=16, epsilon=2.0, cohorts=4)
    with pytest.raises(ParameterError, match="detect"):
        estimate(np.zeros((4, 16)) + 5, orr, "detect", ["a", "b"])
