"""The stacked sandwich of the joint table (ldpstream/estimators/joint/sandwich.py;
docs/math/joint.md#the-other-categorys-uncertainty).

References, independent of the formulas under test:

- without an Other law the sandwich is the observed-information covariance (``covariance_from_information``);
- the influence function ``I_θ⁻¹ Jᵀ s_u`` is the derivative of the whole estimator (EM, Other law, candidate
  frequencies, refitted from scratch by ``estimate_joint``) with respect to the count of pattern u: checked by
  central finite differences (± a few reports on one pattern, EM converged to 1e-12);
- the frequencies' Jacobian is the derivative of ``candidate_frequencies`` (the package's least squares) with
  respect to the cohort means: checked by finite differences of the sketch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.estimators.joint.em import PairChannel
from ldpstream.estimators.joint.inference import covariance_from_information, free_jacobian
from ldpstream.estimators.joint.likelihood import (
    candidate_frequencies,
    candidate_truth,
    frequency_jacobian,
    pattern_sketch,
    variable_likelihood,
    variable_model,
)
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.estimators.joint.sandwich import nuisance_terms, sandwich_covariance
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import sample_pairs, value_names, zipf_association

NAMES = value_names(8)


def _patterns(mech: Any, n: int, seed: int) -> PairPatterns:
    joint = zipf_association(8, 1.0, 0.5)
    table = mech.value_table(NAMES)
    return sample_pairs(joint, mech, mech, n, np.random.default_rng(seed), table, table)


def _with_counts(p: PairPatterns, counts: np.ndarray) -> PairPatterns:
    return PairPatterns(p.cohort_x, p.reports_x, p.cohort_y, p.reports_y, counts)


def _estimate(p: PairPatterns, var: JointVariable, self_consistent: bool) -> Any:
    # The EM's influence (inversion=False: two hashed members with a dictionary are otherwise inverted).
    return estimate_joint(p, var, var, tolerance=1e-12, max_iterations=20000, self_consistent=self_consistent,
                          frequency_tolerance=1e-11, max_refits=2000, inversion=False)


def _influence(p: PairPatterns, var: JointVariable, self_consistent: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(p̂, IF)``: IF[u] = J B⁻¹ Jᵀ s_u (rows: patterns), B = I_θ (least-squares frequencies) or
    I_θ + Jᵀ Σ_V F_V G_V/(1 − Σf_V) J (self-consistent frequencies)."""
    est = _estimate(p, var, self_consistent)
    fx = np.array(est.info["candidate_frequencies_x"])
    fy = np.array(est.info["candidate_frequencies_y"])
    refined = est.info["frequencies_x"] == "self-consistent"
    assert refined == (self_consistent and str(var.mechanism.report_kind) == "bits" and var.dictionary is None)
    assert (est.info["frequencies_x"] == "dictionary") == (var.dictionary is not None)
    mx = variable_model(var.mechanism, var.values, p.cohort_x, p.reports_x, p.counts, dictionary=var.dictionary)
    my = variable_model(var.mechanism, var.values, p.cohort_y, p.reports_y, p.counts, dictionary=var.dictionary)
    lx = mx.likelihood(None if var.dictionary else fx, self_consistent=refined)
    ly = my.likelihood(None if var.dictionary else fy, self_consistent=refined)
    ch = PairChannel(lx.matrix, ly.matrix)
    table = est.table.ravel()
    counts = p.counts.astype(np.float64)
    m = ch.forward(table)
    info = ch.information(counts / (m * m))
    corr, shift = nuisance_terms(ch, table, counts, [(lx.other_law, p.cohort_x, p.reports_x),
                                                     (ly.other_law, p.cohort_y, p.reports_y)])
    assert corr is not None and (shift is not None) == refined
    s = (lx.matrix[:, :, None] * ly.matrix[:, None, :]).reshape(len(counts), -1) / m[:, None] + corr
    J = free_jacobian(table.size)
    bread = J.T @ info @ J + (0.0 if shift is None else J.T @ shift @ J)
    return table, (J @ np.linalg.inv(bread) @ J.T @ s.T).T


@pytest.mark.parametrize(("mech", "self_consistent", "dictionary"), [
    (Rappor(k=16, hashes=1, cohorts=4, p=0.25, q=0.75, f=0.0), True, None),
    (Rappor(k=16, hashes=1, cohorts=4, p=0.25, q=0.75, f=0.0), False, None),
    (Rappor(k=16, hashes=1, cohorts=4, p=0.25, q=0.75, f=0.0), False, NAMES),
    (ORR(k=8, epsilon=2.0, cohorts=4), False, NAMES),
    (ORR(k=8, epsilon=2.0, cohorts=4), True, None)],
    ids=["rappor-self-consistent", "rappor-least-squares", "rappor-dictionary", "orr-dictionary", "orr"])
def test_influence_is_the_derivative_of_the_whole_estimator(mech: Any, self_consistent: bool,
                                                            dictionary: list[str] | None) -> None:
    p = _patterns(mech, 20_000, 3)
    var = JointVariable(mech, NAMES[:2], dictionary=dictionary)
    table, infl = _influence(p, var, self_consistent)
    interior = table > 1e-3  # the first-order expansion holds at interior cells (a cell on the boundary stays there)
    order = np.argsort(-p.counts)
    for u in order[[0, 5, 20]]:
        h = 1.0
        plus, minus = p.counts.astype(np.float64).copy(), p.counts.astype(np.float64).copy()
        plus[u] += h
        minus[u] -= h
        fp = _estimate(_with_counts(p, plus), var, self_consistent).table.ravel()
        fm = _estimate(_with_counts(p, minus), var, self_consistent).table.ravel()
        numeric = (fp - fm) / (2 * h)
        # Adding a report also rescales every share by N/(N+1): the influence is the change of the M-estimator
        # with the pattern's weight, whose numeric counterpart is the change of the table itself.
        scale = np.abs(numeric).max()
        gap = np.abs(infl[u] - numeric)[interior]
        # 10%: the frequencies' Jacobian holds the least-squares weights fixed; the information alone is off by 60% here
        assert gap.max() <= 0.10 * scale, (u, infl[u], numeric)


def test_without_other_the_sandwich_is_the_information_covariance() -> None:
    mech = Rappor(k=16, hashes=1, cohorts=4, p=0.25, q=0.75, f=0.0)
    p = _patterns(mech, 5_000, 4)
    var = JointVariable(mech, NAMES[:2])
    est = estimate_joint(p, var, var, other=False)
    assert est.interval_method == "wald-clipped"
    lx = variable_likelihood(mech, NAMES[:2], p.cohort_x, p.reports_x, p.counts, other=False)
    ly = variable_likelihood(mech, NAMES[:2], p.cohort_y, p.reports_y, p.counts, other=False)
    ch = PairChannel(lx.matrix, ly.matrix)
    m = ch.forward(est.table.ravel())
    info = ch.information(p.counts / (m * m))
    np.testing.assert_allclose(sandwich_covariance(ch, est.table.ravel(), p.counts, info, None),
                               covariance_from_information(info), atol=1e-15)
    zero = np.zeros((len(p.counts), est.table.size))
    np.testing.assert_allclose(sandwich_covariance(ch, est.table.ravel(), p.counts, info, zero),
                               covariance_from_information(info), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("mech", [Rappor(k=16, hashes=2, cohorts=4, p=0.25, q=0.75, f=0.0),
                                  ORR(k=8, epsilon=2.0, cohorts=4)], ids=["rappor", "orr"])
def test_frequency_jacobian_is_the_least_squares_derivative(mech: Any) -> None:
    p = _patterns(mech, 20_000, 5)
    values = NAMES[:2]
    sketch = pattern_sketch(mech, p.cohort_x, p.reports_x, p.counts).astype(np.float64)
    truth = candidate_truth(mech, values)
    f = candidate_frequencies(mech, values, sketch)
    bits = str(mech.report_kind) == "bits"
    n_c = sketch[:, 0] if bits else sketch.sum(axis=1)
    M = frequency_jacobian(mech, values, truth, f, n_c)
    rng = np.random.default_rng(0)
    for _ in range(3):
        direction = rng.normal(size=M.shape[1:]) * 0.01  # a change of the cohort means
        moved = sketch.copy()
        if bits:
            moved[:, 1:] += direction * n_c[:, None]
        else:
            direction -= direction.mean(axis=1, keepdims=True)  # symbol means sum to 1
            moved += direction * n_c[:, None]
        numeric = candidate_frequencies(mech, values, moved) - f
        predicted = np.einsum("sck,ck->s", M, direction)
        assert np.abs(numeric - predicted).max() <= 0.05 * np.abs(numeric).max() + 1e-6, (numeric, predicted)
