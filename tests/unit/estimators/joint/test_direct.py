"""Two direct members decoded by the unbiased inversion of their full alphabets' channels
(``ldpstream.estimators.joint.direct``; docs/math/joint.md#direct-members-the-full-alphabet).

Against the formula: fed the exact report-pair law as its "counts", eq. J1 returns the true aggregated table
``A_X P A_Yᵀ`` exactly (unbiasedness) and eq. J2 the exact covariance of one pair's term. Against independent
implementations: for k-RR the linear inversion ``Q_X⁻ᵀ N Q_Y⁻¹`` with ``np.linalg.inv`` and the multinomial
covariance ``K (diag m − m mᵀ) Kᵀ`` of its linear aggregation; for k-RAPPOR the report law enumerated bit
pattern by bit pattern and the covariance summed pattern pair by pattern pair in plain Python."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.estimators.joint import direct as joint_direct
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.mechanisms.krappor import KRappor
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.orr import ORR
from ldpstream.simulation.joint_trials import collapse, sample_pairs, zipf_association


def _aggregation(k: int, values: list[int], other: bool) -> np.ndarray:
    """``A``: rows = published categories (candidates, then Other), columns = alphabet values."""
    rows = len(values) + int(other)
    A = np.zeros((rows, k))
    A[np.arange(len(values)), values] = 1.0
    if other:
        A[-1] = 1.0
        A[-1, values] = 0.0
    return A


def _random_joint(kx: int, ky: int, seed: int) -> np.ndarray:
    p = np.random.default_rng(seed).dirichlet(np.full(kx * ky, 0.7)).reshape(kx, ky)
    return p


def _symbol_patterns(weights: np.ndarray) -> PairPatterns:
    kx, ky = weights.shape
    yx, yy = np.meshgrid(np.arange(kx), np.arange(ky), indexing="ij")
    zeros = np.zeros(kx * ky, dtype=np.int64)
    return PairPatterns(zeros, yx.ravel(), zeros.copy(), yy.ravel(), np.ones(kx * ky, dtype=np.int64))


def test_krr_pair_law_gives_the_true_table_and_the_multinomial_covariance_of_the_inversion():
    mx, my = KRR(7, 1.5), KRR(5, 0.8)
    vx, vy = [3, 0], [1]
    P = _random_joint(7, 5, 1)
    Qx, Qy = mx.channel(), my.channel()
    m = Qx.T @ P @ Qy  # the report-pair law
    pat = _symbol_patterns(m)
    ax = joint_direct.category_estimates(mx, vx, pat.reports_x, True)
    ay = joint_direct.category_estimates(my, vy, pat.reports_y, True)
    got = joint_direct.direct_joint_table(ax, ay, m.ravel())  # "counts" = the exact law, N = 1
    Ax, Ay = _aggregation(7, vx, True), _aggregation(5, vy, True)
    np.testing.assert_allclose(got.table, Ax @ P @ Ay.T, atol=1e-12)
    # Independent: the aggregated linear inversion, K = (A_X Q_X⁻ᵀ) ⊗ (A_Y Q_Y⁻ᵀ), multinomial covariance.
    K = np.kron(Ax @ np.linalg.inv(Qx).T, Ay @ np.linalg.inv(Qy).T)
    mm = m.ravel()
    np.testing.assert_allclose(got.covariance, K @ (np.diag(mm) - np.outer(mm, mm)) @ K.T, atol=1e-12)


def test_krr_on_sampled_pairs_equals_the_linear_inversion_of_the_count_table():
    krr = KRR(100, 4.0)
    joint = zipf_association(100, 1.0, 0.5)
    pat = sample_pairs(joint, krr, krr, 50_000, np.random.default_rng(3))
    var = JointVariable(krr, [0, 1, 2, 3, 4])
    est = estimate_joint(pat, var, var)
    N = np.zeros((100, 100))
    np.add.at(N, (pat.reports_x, pat.reports_y), pat.counts)
    Qi = np.linalg.inv(krr.channel())
    A = _aggregation(100, [0, 1, 2, 3, 4], True)
    reference = A @ Qi.T @ (N / N.sum()) @ Qi @ A.T
    assert not est.info["projected"]
    np.testing.assert_allclose(est.table, reference, atol=1e-12)
    assert est.table.sum() == pytest.approx(1.0, abs=1e-12)
    K = np.kron(A @ Qi.T, A @ Qi.T)
    m = (N / N.sum()).ravel()
    cov = ((K * m) @ K.T - np.outer(K @ m, K @ m)) / N.sum()  # K (diag m − m mᵀ) Kᵀ / N
    np.testing.assert_allclose(est.covariance, cov, atol=1e-14, rtol=1e-9)
    np.testing.assert_allclose(est.std_error.ravel(), np.sqrt(np.diag(cov)), rtol=1e-9)
    assert est.identified_mask().all() and est.iterations == 0 and est.converged
    assert est.independence.method == "wald-interaction-contrasts"
    assert est.independence.statistic == est.independence.wald_statistic


def _bit_law(mech: KRappor) -> tuple[np.ndarray, np.ndarray]:
    """Every bit pattern of k bits and ``(2^k, k)`` P(pattern | value), enumerated."""
    k = mech.k
    patterns = np.array(list(itertools.product([0, 1], repeat=k)), dtype=np.uint8)
    q, p = mech.q_star, mech.p_star
    law = np.ones((len(patterns), k))
    for w in range(k):
        for j in range(k):
            rate = q if j == w else p
            law[:, w] *= np.where(patterns[:, j] == 1, rate, 1.0 - rate)
    return patterns, law


def test_krappor_and_krr_pair_law_enumerated_gives_the_true_table_and_covariance():
    mx, my = KRappor(4, 2.0), KRR(3, 1.0)
    vx, vy = [2], [0, 1, 2]  # Y without Other: its candidates are its whole alphabet
    P = _random_joint(4, 3, 2)
    bits, Lx = _bit_law(mx)  # (16, 4)
    Qy = my.channel()  # (3, 3): row value, column report
    m = (Lx @ P) @ Qy  # (16 patterns, 3 symbols)
    bx = np.repeat(bits, 3, axis=0)
    sy = np.tile(np.arange(3), len(bits))
    zeros = np.zeros(len(sy), dtype=np.int64)
    pat = PairPatterns(zeros, bx, zeros.copy(), sy, np.ones(len(sy), dtype=np.int64))
    ax = joint_direct.category_estimates(mx, vx, pat.reports_x, True)
    ay = joint_direct.category_estimates(my, vy, pat.reports_y, False)
    got = joint_direct.direct_joint_table(ax, ay, m.ravel())
    truth = _aggregation(4, vx, True) @ P @ _aggregation(3, vy, False).T
    np.testing.assert_allclose(got.table, truth, atol=1e-12)
    # The covariance of one pair's term, summed pattern by pattern in plain Python.
    cov = np.zeros((6, 6))
    for u in range(len(sy)):
        t = np.outer(ax[u], ay[u]).ravel()
        cov += m.ravel()[u] * np.outer(t - truth.ravel(), t - truth.ravel())
    np.testing.assert_allclose(got.covariance, cov, atol=1e-12)


def test_estimate_joint_takes_the_inversion_only_for_direct_members_with_a_spread_other():
    krr, kr = KRR(6, 2.0), KRappor(6, 2.0)
    orr = ORR(k=8, epsilon=2.0, cohorts=2)
    assert joint_direct.applies(krr, [0, 1], True, kr, [0], True)
    assert joint_direct.applies(krr, [0, 1], True, krr, list(range(6)), False)  # one Other of four values
    assert not joint_direct.applies(krr, list(range(5)), True, krr, list(range(5)), True)  # Others of one value
    assert not joint_direct.applies(krr, [0, 1], True, krr, [0, 1], False)  # Y's categories leave values out
    assert not joint_direct.applies(krr, [0, 1], True, orr, ["a"], True)  # a hashed member
    assert joint_direct.hidden_values(krr, [0, 1], True) == 4 and joint_direct.hidden_values(orr, ["a"], True) is None


def test_a_negative_unbiased_cell_is_projected_onto_the_simplex():
    krr = KRR(20, 0.5)
    joint = zipf_association(20, 1.0, 0.0)
    pat = sample_pairs(joint, krr, krr, 300, np.random.default_rng(0))
    var = JointVariable(krr, [0, 1, 2, 3])
    est = estimate_joint(pat, var, var)
    assert est.info["projected"] and est.interval_center is not None
    assert est.table.min() >= 0.0 and est.table.sum() == pytest.approx(1.0)
    assert np.all(est.low <= est.table) and np.all(est.table <= est.high)
    # The intervals hold the Wald interval around the unbiased table (the promise) and the published point.
    unbiased = est.interval_center
    assert unbiased.min() < 0.0 and unbiased.sum() == pytest.approx(1.0)
    z = 1.959963984540054
    np.testing.assert_allclose(est.low, np.minimum(np.clip(unbiased - z * est.std_error, 0, 1), est.table))
    np.testing.assert_allclose(est.high, np.maximum(np.clip(unbiased + z * est.std_error, 0, 1), est.table))
    # A window's design effect widens them around the same centre.
    from ldpstream.estimators.windows import widen_joint

    wide = widen_joint(est, 4.0)
    np.testing.assert_allclose(wide.high, np.maximum(np.clip(unbiased + 2 * z * est.std_error, 0, 1), est.table))


def test_the_table_is_unbiased_over_repeated_krappor_samples():
    """Monte Carlo on real k-RAPPOR reports: 200 samples of 4,000 pairs; each cell's mean error within 4
    standard errors of the mean, the SE taken from the estimator's own covariance averaged over the samples
    (J2 is consistent, so that is the Monte Carlo SE; 4 sd on 12 cells keeps a false alarm under 0.1%)."""
    mx, my = KRappor(8, 3.0), KRR(6, 3.0)
    joint = zipf_association(8, 1.0, 0.5)[:, :6]
    joint /= joint.sum()
    truth = collapse(joint, [0, 1, 2], [0])
    rng = np.random.default_rng(11)
    errors, variances = [], []
    for _ in range(200):
        est = estimate_joint(sample_pairs(joint, mx, my, 4000, rng), JointVariable(mx, [0, 1, 2]),
                             JointVariable(my, [0]))
        assert est.info["estimator"] == "direct-inversion" and not est.info["projected"]
        errors.append(est.table - truth)
        variances.append(est.std_error ** 2)
    e = np.array(errors)
    mc_se = np.sqrt(np.mean(variances, axis=0) / len(e))
    assert np.all(np.abs(e.mean(axis=0)) < 4 * mc_se), (e.mean(axis=0), mc_se)
    # The reported SEs match the spread of the estimates (ratio within 15%: 200 samples give ±10% at 2 sd).
    np.testing.assert_allclose(e.std(axis=0, ddof=1), np.sqrt(np.mean(variances, axis=0)), rtol=0.15)


# ------------------------------------------------------------------------ hashed members with a dictionary


def _symbol_law_by_cohort(mech: ORR, words: list[str]) -> np.ndarray:
    """``(C, k, M)`` P(report y | value, cohort c) of O-RR, from its design."""
    from ldpstream.estimators.joint.likelihood import candidate_truth

    hi, lo = mech.response_rates
    return lo + (hi - lo) * candidate_truth(mech, words).astype(np.float64)


def test_orr_with_a_dictionary_and_krr_pair_law_gives_the_true_table():
    """Fed the exact law of (cohort_x, y_x, y_y) (cohorts uniform and independent of the values), eq. J3's
    per-report least squares against the dictionary returns the true aggregated table: unbiased for every
    dictionary value, hidden ones included, whatever their association."""
    words = [f"w{i}" for i in range(6)]
    mx, my = ORR(k=8, epsilon=1.5, cohorts=4), KRR(5, 1.0)
    P = _random_joint(6, 5, 4)
    law_x = _symbol_law_by_cohort(mx, words)  # (C, k, M)
    Qy = my.channel()
    C, k, _ = law_x.shape
    # m[c, y_x, y_y] = (1/C) Σ_{v,v'} P[v, v'] law_x[c, y_x, v] Qy[v', y_y]
    m = np.einsum("ab,cxa,by->cxy", P, law_x, Qy) / C
    cx, yx, yy = (g.ravel() for g in np.meshgrid(np.arange(C), np.arange(k), np.arange(5), indexing="ij"))
    zeros = np.zeros(len(cx), dtype=np.int64)
    ax = joint_direct.dictionary_category_estimates(mx, ["w3", "w0"], words, cx, yx, m.ravel())
    ay = joint_direct.dictionary_category_estimates(my, [2], None, zeros, yy, m.ravel())
    got = joint_direct.direct_joint_table(ax, ay, m.ravel())
    truth = _aggregation(6, [3, 0], True) @ P @ _aggregation(5, [2], True).T
    np.testing.assert_allclose(got.table, truth, atol=1e-10)
    assert joint_direct.applies_hashed(mx, ["w3", "w0"], True, words, my, [2], True, None)
    assert not joint_direct.applies_hashed(mx, ["w3", "w0"], True, None, my, [2], True, None)  # no dictionary
    assert not joint_direct.applies_hashed(mx, ["w3", "w0"], True, words, my, [2], False, None)  # one Other


def test_rappor_with_a_dictionary_pair_law_enumerated_gives_the_true_table():
    """The same for bits: RAPPOR, 6 bits, 2 hashes, 3 cohorts (18 cells for 5 values and the "other"
    regressor), the report law of every bit pattern enumerated; the per-report estimates against a plain
    ``np.linalg.lstsq`` of the stacked, share-weighted design."""
    from ldpstream.estimators.joint.likelihood import candidate_truth, other_regressor
    from ldpstream.mechanisms.rappor import Rappor

    words = [f"s{i}" for i in range(5)]
    mech = Rappor(k=6, hashes=2, cohorts=3, p=0.3, q=0.8, f=0.0)
    truth_bits = candidate_truth(mech, words).astype(np.float64)  # (C, k, M)
    C, k, M = truth_bits.shape
    qs, ps = mech.q_star, mech.p_star
    bits = np.array(list(itertools.product([0, 1], repeat=k)), dtype=np.uint8)  # (64, k)
    rate = ps + (qs - ps) * truth_bits  # (C, k, M)
    law = np.prod(np.where(bits[None, :, :, None] == 1, rate[:, None], 1.0 - rate[:, None]), axis=2)  # (C, 64, M)
    P = _random_joint(M, M, 5)
    m = np.einsum("ab,cua,dvb->cudv", P, law, law) / C**2  # independent uniform cohorts
    cx, ux, cy, uy = (g.ravel() for g in np.meshgrid(np.arange(C), np.arange(64), np.arange(C), np.arange(64),
                                                      indexing="ij"))
    w = m.ravel()
    ax = joint_direct.dictionary_category_estimates(mech, ["s1", "s4"], words, cx, bits[ux], w)
    ay = joint_direct.dictionary_category_estimates(mech, ["s0"], words, cy, bits[uy], w)
    got = joint_direct.direct_joint_table(ax, ay, w)
    A = _aggregation(M, [1, 4], True)
    np.testing.assert_allclose(got.table, A @ P @ _aggregation(M, [0], True).T, atol=1e-10)
    # Independent: θ̂ for one cohort-0 report by lstsq on the design scaled by √share (all shares 1/3 here).
    X = np.concatenate([truth_bits, np.full((C, k, 1), other_regressor(mech, truth_bits))], axis=2)
    x = bits[37].astype(np.float64)
    rhs = np.zeros(C * k)
    rhs[:k] = (x - ps) / (qs - ps) * C  # only cohort 0 holds the report: X_0ᵀ x / share_0
    theta = np.linalg.lstsq(X.reshape(C * k, M + 1), rhs.reshape(C * k), rcond=None)[0]
    row = np.flatnonzero((cx == 0) & (ux == 37))[0]
    np.testing.assert_allclose(ax[row, :2], theta[[1, 4]], atol=1e-10)
