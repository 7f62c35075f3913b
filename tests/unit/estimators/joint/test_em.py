"""The joint EM and its inference (ldpstream.estimators.joint) against independent references.

- EM's fixed point vs scipy's SLSQP maximizing the observed log-likelihood on the simplex, with the
  likelihoods recomputed report by report (no code shared with the estimator).
- The covariance vs the inverse of a central-difference Hessian of that log-likelihood on the free parameters.
- The conditional tables' delta-method SEs vs a finite-difference Jacobian; the interaction Wald statistic vs a
  second parametrization of the same hypothesis; the published T vs its formula with the brute-force information.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from scipy import optimize

from ldpstream.estimators.estimate import Estimate
from ldpstream.estimators.joint import JointVariable, estimate_joint, top_values
from ldpstream.estimators.joint.likelihood import variable_likelihood
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import sample_pairs, value_names, zipf_association

from .test_likelihood import brute_probability


def brute_cells(patterns: PairPatterns, x: Any, xs: list[Any], y: Any, ys: list[Any]) -> np.ndarray:
    """``(D, r·c)`` c^u_ij = P(R_x | x_i) P(R_y | y_j), one pattern and value at a time."""
    rows = []
    for cx, rx, cy, ry in zip(patterns.cohort_x, patterns.reports_x, patterns.cohort_y, patterns.reports_y,
                              strict=True):
        px = np.array([brute_probability(x, v, int(cx), rx) for v in xs])
        py = np.array([brute_probability(y, v, int(cy), ry) for v in ys])
        rows.append(np.outer(px, py).ravel())
    return np.array(rows)


def loglik(cells: np.ndarray, counts: np.ndarray, p: np.ndarray) -> float:
    return float(counts @ np.log(cells @ p))


def slsqp_mle(cells: np.ndarray, counts: np.ndarray) -> np.ndarray:
    size = cells.shape[1]
    res = optimize.minimize(
        lambda p: -loglik(cells, counts, np.maximum(p, 1e-12)) / counts.sum(),
        np.full(size, 1.0 / size),
        jac=lambda p: -(cells.T @ (counts / (cells @ np.maximum(p, 1e-12)))) / counts.sum(),
        method="SLSQP", bounds=[(0.0, 1.0)] * size,
        constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0}],
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    out: np.ndarray = res.x
    return out


@pytest.fixture(scope="module")
def krr_orr_case() -> tuple[PairPatterns, Any, list[int], Any, list[str]]:
    """Full alphabets (no Other): k-RR over 3 symbols × O-RR over 4 strings, associated."""
    x, y = KRR(3, 2.0), ORR(k=4, epsilon=2.5, cohorts=2)
    ys = value_names(4)
    joint = np.array([[0.20, 0.05, 0.05, 0.02], [0.03, 0.25, 0.04, 0.03], [0.05, 0.05, 0.08, 0.15]])
    patterns = sample_pairs(joint, x, y, 20_000, np.random.default_rng(7), None, y.value_table(ys))
    return patterns, x, [0, 1, 2], y, ys


def test_em_fixed_point_matches_scipy_optimizer(krr_orr_case: Any) -> None:
    patterns, x, xs, y, ys = krr_orr_case
    est = estimate_joint(patterns, JointVariable(x, xs), JointVariable(y, ys), other=False, tolerance=1e-11,
                         max_iterations=20_000)
    assert est.converged
    cells = brute_cells(patterns, x, xs, y, ys)
    counts = patterns.counts.astype(float)
    ref = slsqp_mle(cells, counts)
    ours = est.table.ravel()
    assert loglik(cells, counts, ours) >= loglik(cells, counts, np.maximum(ref, 1e-15)) - 1e-6
    np.testing.assert_allclose(ours, ref, atol=2e-4)
    assert est.log_likelihood == pytest.approx(loglik(cells, counts, ours), rel=1e-10)
    np.testing.assert_allclose(est.table.sum(), 1.0)


def test_plain_and_accelerated_em_reach_the_same_point_and_warm_start_helps(krr_orr_case: Any) -> None:
    patterns, x, xs, y, ys = krr_orr_case
    vx, vy = JointVariable(x, xs), JointVariable(y, ys)
    fast = estimate_joint(patterns, vx, vy, other=False, tolerance=1e-10, max_iterations=100_000)
    plain = estimate_joint(patterns, vx, vy, other=False, tolerance=1e-10, max_iterations=100_000,
                           accelerate=False)
    np.testing.assert_allclose(fast.table, plain.table, atol=1e-6)
    assert fast.iterations < plain.iterations
    warm = estimate_joint(patterns, vx, vy, other=False, tolerance=1e-10, max_iterations=100_000,
                          accelerate=False, start=plain.table)
    assert warm.iterations < plain.iterations / 2
    np.testing.assert_allclose(warm.table, plain.table, atol=1e-6)
    capped = estimate_joint(patterns, vx, vy, other=False, tolerance=1e-12, max_iterations=3, accelerate=False)
    assert not capped.converged and capped.iterations == 3


def numerical_hessian(f: Any, theta: np.ndarray, h: float) -> np.ndarray:
    size = len(theta)
    hess = np.zeros((size, size))
    for a in range(size):
        for b in range(a, size):
            ea, eb = np.eye(size)[a] * h, np.eye(size)[b] * h
            val = (f(theta + ea + eb) - f(theta + ea - eb) - f(theta - ea + eb) + f(theta - ea - eb)) / (4 * h * h)
            hess[a, b] = hess[b, a] = val
    return hess


def test_covariance_is_the_inverse_numerical_hessian_on_free_parameters(krr_orr_case: Any) -> None:
    patterns, x, xs, y, ys = krr_orr_case
    est = estimate_joint(patterns, JointVariable(x, xs), JointVariable(y, ys), other=False, tolerance=1e-11,
                         max_iterations=20_000)
    cells = brute_cells(patterns, x, xs, y, ys)
    counts = patterns.counts.astype(float)
    p = est.table.ravel()
    # free parameters: drop the FIRST cell (the estimator drops the last: the covariance must not depend on it)
    def f(theta: np.ndarray) -> float:
        return loglik(cells, counts, np.concatenate([[1.0 - theta.sum()], theta]))
    hess = numerical_hessian(f, p[1:], 1e-5)
    J = np.vstack([-np.ones((1, len(p) - 1)), np.eye(len(p) - 1)])
    ref = J @ np.linalg.inv(-hess) @ J.T
    np.testing.assert_allclose(est.covariance, ref, rtol=2e-3, atol=1e-9)
    np.testing.assert_allclose(est.std_error.ravel(), np.sqrt(np.diag(ref)), rtol=1e-3)
    # the paper's T: dᵀ I_p d with the brute-force information
    m = cells @ p
    info = (cells * (counts / m**2)[:, None]).T @ cells
    d = (est.table - np.outer(est.table.sum(1), est.table.sum(0))).ravel()
    assert est.independence.statistic == pytest.approx(d @ info @ d, rel=1e-6)


def test_conditional_standard_errors_match_a_numerical_delta_method(krr_orr_case: Any) -> None:
    patterns, x, xs, y, ys = krr_orr_case
    est = estimate_joint(patterns, JointVariable(x, xs), JointVariable(y, ys), other=False, tolerance=1e-11)
    p = est.table.ravel()
    r, c = est.table.shape

    def y_given_x(q: np.ndarray) -> np.ndarray:
        t = q.reshape(r, c)
        return (t / t.sum(axis=1, keepdims=True)).ravel()

    def x_given_y(q: np.ndarray) -> np.ndarray:
        t = q.reshape(r, c)
        return (t / t.sum(axis=0, keepdims=True)).ravel()

    for fn, table in ((y_given_x, est.y_given_x), (x_given_y, est.x_given_y)):
        h = 1e-6
        jac = np.array([(fn(p + h * e) - fn(p - h * e)) / (2 * h) for e in np.eye(len(p))]).T
        se = np.sqrt(np.diag(jac @ est.covariance @ jac.T)).reshape(r, c)
        np.testing.assert_allclose(table.std_error, se, rtol=1e-4)
        np.testing.assert_allclose(table.table.ravel(), fn(p), rtol=1e-12)
        assert np.all(table.low <= table.table) and np.all(table.table <= table.high)
        assert np.all(table.low >= 0) and np.all(table.high <= 1)
    np.testing.assert_allclose(est.y_given_x.table.sum(axis=1), 1.0)
    np.testing.assert_allclose(est.x_given_y.table.sum(axis=0), 1.0)


def test_interaction_wald_statistic_does_not_depend_on_the_contrasts_chosen(krr_orr_case: Any) -> None:
    """Second implementation: the contrasts of the FIRST (r−1)(c−1) cells dropped differently (rows/columns
    1.., numerical Jacobian) test the same hypothesis; the deviations from independence are a linear image of
    each other, so the Wald statistics agree."""
    patterns, x, xs, y, ys = krr_orr_case
    est = estimate_joint(patterns, JointVariable(x, xs), JointVariable(y, ys), other=False, tolerance=1e-11)
    r, c = est.table.shape

    def contrasts(q: np.ndarray) -> np.ndarray:
        t = q.reshape(r, c)
        return (t - np.outer(t.sum(1), t.sum(0)))[1:, 1:].ravel()

    p = est.table.ravel()
    jac = np.array([(contrasts(p + 1e-6 * e) - contrasts(p - 1e-6 * e)) / 2e-6 for e in np.eye(len(p))]).T
    h = contrasts(p)
    w = h @ np.linalg.solve(jac @ est.covariance @ jac.T, h)
    assert est.independence.wald_statistic == pytest.approx(w, rel=1e-5)
    assert est.independence.df == (r - 1) * (c - 1)
    assert est.independence.p_value < 1e-6 and est.independence.wald_p_value < 1e-6  # strongly associated
    assert est.independence.method == "information-quadratic-form"


def test_rappor_with_other_matches_scipy_on_the_same_likelihoods() -> None:
    """RAPPOR × RAPPOR with Other: the EM's point is the optimizer's on the estimator's (brute-force-checked)
    likelihood matrices, built with the candidate frequencies the estimator settled on; asked for self-consistent
    ones (docs/math/joint.md, the experiment), they are the fitted table's candidate margins."""
    mech = Rappor(k=16, hashes=2, cohorts=4, p=0.25, q=0.75, f=0.0)
    names = value_names(12)
    joint = zipf_association(12, 1.0, 0.6)
    patterns = sample_pairs(joint, mech, mech, 20_000, np.random.default_rng(11), mech.value_table(names),
                            mech.value_table(names))
    vx = JointVariable(mech, names[:3], labels=["a", "b", "c"])
    est = estimate_joint(patterns, vx, vx, tolerance=1e-11, max_iterations=20_000, self_consistent=True,
                         frequency_tolerance=1e-9)
    assert est.info["frequencies_x"] == est.info["frequencies_y"] == "self-consistent"
    fx, fy = np.array(est.info["candidate_frequencies_x"]), np.array(est.info["candidate_frequencies_y"])
    np.testing.assert_allclose(est.table[:3].sum(axis=1), fx, atol=1e-8)
    np.testing.assert_allclose(est.table[:, :3].sum(axis=0), fy, atol=1e-8)
    lx = variable_likelihood(mech, names[:3], patterns.cohort_x, patterns.reports_x, patterns.counts, frequencies=fx)
    ly = variable_likelihood(mech, names[:3], patterns.cohort_y, patterns.reports_y, patterns.counts, frequencies=fy)
    cells = (lx.matrix[:, :, None] * ly.matrix[:, None, :]).reshape(len(patterns), -1)
    ref = slsqp_mle(cells, patterns.counts.astype(float))
    np.testing.assert_allclose(est.table.ravel(), ref, atol=3e-4)
    assert est.row_labels == ("a", "b", "c", "Other") and est.column_labels == est.row_labels
    assert np.all(est.low >= 0) and np.all(est.high <= 1)
    assert np.all((est.low <= est.table) & (est.table <= est.high))
    assert est.n == 20_000 and est.patterns == len(patterns)
    assert est.seconds >= est.likelihood_seconds > 0
    json.dumps(est.to_dict())


def test_top_values_and_bad_inputs() -> None:
    marginal = Estimate(frequencies=np.array([0.1, 0.4, 0.05, 0.4, 0.05]), std_errors=None, n_reports=100,
                        method="test")
    assert top_values(marginal, 3) == [1, 3, 0]
    assert top_values(marginal, 0) == []
    mech = KRR(3, 1.0)
    patterns = PairPatterns.from_pairs(np.zeros(4), np.array([0, 1, 2, 0]), np.zeros(4), np.array([1, 1, 2, 0]))
    with pytest.raises(Exception, match="labels"):
        estimate_joint(patterns, JointVariable(mech, [0, 1], labels=["a"]), JointVariable(mech, [0]))
    with pytest.raises(Exception, match="at least one"):
        estimate_joint(patterns, JointVariable(mech, []), JointVariable(mech, [0]))
    empty = PairPatterns.from_pairs(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0))
    with pytest.raises(Exception, match="no report pairs"):
        estimate_joint(empty, JointVariable(mech, [0]), JointVariable(mech, [0]))
    with pytest.raises(Exception, match="alphabet indices"):
        estimate_joint(patterns, JointVariable(mech, [0, 7]), JointVariable(mech, [0]))


def test_specialized_squarem_matches_the_generic_multinomial_em(krr_orr_case: Any) -> None:
    """fit_joint's loop against em_multinomial (the package's generic EM) on the same pair channel: in float64
    step for step; with the default float32 steps (then float64 below 1e-6) the same log-likelihood, and the same
    point up to the likelihood's flat direction here (4 strings in 2 cohorts of 4 symbols: 1e-4 apart at equal
    likelihood)."""
    from ldpstream.estimators.em import em_multinomial
    from ldpstream.estimators.joint.em import PairChannel, fit_joint

    patterns, x, xs, y, ys = krr_orr_case
    lx = variable_likelihood(x, xs, patterns.cohort_x, patterns.reports_x, patterns.counts)
    ly = variable_likelihood(y, ys, patterns.cohort_y, patterns.reports_y, patterns.counts)
    channel = PairChannel(lx.matrix, ly.matrix)
    counts = patterns.counts.astype(float)
    for accelerate in (True, False):
        generic = em_multinomial(counts, channel, tol=1e-12, max_iter=50_000, accelerate=accelerate)
        assert generic.converged
        for precision, atol in (("float64", 1e-6), ("auto", 2e-4)):
            ours = fit_joint(channel, counts, lx.log_scale + ly.log_scale, start=None, tolerance=1e-12,
                             max_iterations=50_000, accelerate=accelerate, precision=precision)
            assert ours.converged
            np.testing.assert_allclose(ours.p, generic.p, atol=atol)  # both stop on a step below 1e-12, not at p*
            assert ours.log_likelihood == pytest.approx(
                generic.log_likelihood + counts @ (lx.log_scale + ly.log_scale), rel=1e-12)


def test_float32_steps_reach_the_float64_point() -> None:
    """The default EM (float32 block products down to the 1e-6 tolerance) against every step in float64, on
    RAPPOR × RAPPOR with Other: the same stopping rule lands within a few tolerances of the same point (two
    stopping points of one rule; the step itself agrees to ~1e-8, plain EM below)."""
    from ldpstream.estimators.joint.em import PairChannel, fit_joint

    mech = Rappor(k=32, hashes=2, cohorts=4, p=0.25, q=0.75, f=0.0)
    names = value_names(20)
    table = mech.value_table(names)
    patterns = sample_pairs(zipf_association(20, 1.0, 0.5), mech, mech, 30_000, np.random.default_rng(12), table,
                            table)
    lx = variable_likelihood(mech, names[:4], patterns.cohort_x, patterns.reports_x, patterns.counts)
    ly = variable_likelihood(mech, names[:4], patterns.cohort_y, patterns.reports_y, patterns.counts)
    channel = PairChannel(lx.matrix, ly.matrix)
    counts = patterns.counts.astype(float)
    step32 = channel.em_step(np.full(25, 0.04), counts, counts.sum(), True, np.float32)
    step64 = channel.em_step(np.full(25, 0.04), counts, counts.sum(), True, np.float64)
    np.testing.assert_allclose(step32[0], step64[0], rtol=0, atol=1e-7)
    # each m_u is rounded to float32 (relative 6e-8) before its log is summed in float64
    assert step32[1] == pytest.approx(step64[1], rel=1e-7)
    # plain EM: a few tolerances (1.008e-6 was seen on one CPU's float32 kernels); accelerated EM stops farther
    for accelerate, atol in ((False, 3e-6), (True, 5e-5)):
        fits = [fit_joint(channel, counts, lx.log_scale + ly.log_scale, start=None, tolerance=1e-6,
                          max_iterations=5000, accelerate=accelerate, precision=precision)
                for precision in ("auto", "float64")]
        assert all(f.converged for f in fits)
        np.testing.assert_allclose(fits[0].p, fits[1].p, rtol=0, atol=atol)
        assert fits[0].log_likelihood == pytest.approx(fits[1].log_likelihood, abs=0.05)
