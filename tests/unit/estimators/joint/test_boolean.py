"""The joint EM with a boolean variable (one RAPPOR bit, :class:`RapporBoolean`): a per-variable "Other"
(:attr:`JointVariable.other`) and the boolean's likelihoods against the channel's formula."""

from __future__ import annotations

import numpy as np

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.estimators.joint.likelihood import variable_likelihood
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.mechanisms.rappor_boolean import RapporBoolean


def test_boolean_likelihood_is_the_one_bit_channel():
    m = RapporBoolean(cohorts=3, p=0.25, q=0.75, f=0.5)
    bits = np.array([[0], [1], [1], [0]], dtype=np.uint8)
    lik = variable_likelihood(m, [0, 1], np.array([0, 1, 2, 2]), bits, np.ones(4), other=False)
    full = lik.matrix * np.exp(lik.log_scale)[:, None]
    s = bits[:, 0]
    # P(S | FALSE) = p*^S (1 - p*)^(1 - S), P(S | TRUE) = q*^S (1 - q*)^(1 - S)
    want = np.column_stack([np.where(s, m.p_star, 1 - m.p_star), np.where(s, m.q_star, 1 - m.q_star)])
    assert np.allclose(full, want)


def test_other_per_variable():
    """A string X with Other beside a boolean Y without: (S + 1) × 2 table; the truth within 4 standard errors
    per cell (4σ: 12 cells, a family-wise level of about 1e-3 under normality)."""
    rng = np.random.default_rng(8)
    x_mech = Rappor(k=16, hashes=2, cohorts=8, p=0.25, q=0.75, f=0.5)
    y_mech = RapporBoolean(cohorts=8, p=0.25, q=0.75, f=0.5)
    words = ["a", "b", "c", "d", "e", "zz"]  # zz is outside the candidates
    joint = np.array([[0.20, 0.05], [0.05, 0.20], [0.10, 0.10], [0.05, 0.05], [0.05, 0.05], [0.05, 0.05]])
    n = 40_000
    cell = rng.choice(joint.size, size=n, p=joint.ravel())
    xi, yi = np.divmod(cell, 2)
    cohorts, x_bits = x_mech.encode_batch(xi, rng, table=x_mech.bloom_table(words))
    _, y_bits = y_mech.encode_batch(yi, rng, cohorts=cohorts)
    patterns = PairPatterns.from_pairs(cohorts, x_bits.astype(np.uint8), cohorts, y_bits.astype(np.uint8))
    est = estimate_joint(patterns, JointVariable(x_mech, words[:5]),
                         JointVariable(y_mech, [0, 1], ["FALSE", "TRUE"], other=False))
    assert est.row_labels == ("a", "b", "c", "d", "e", "Other") and est.column_labels == ("FALSE", "TRUE")
    truth = np.zeros((6, 2))
    np.add.at(truth, (xi, yi), 1.0 / n)
    assert np.all(np.abs(est.table - truth) <= 4 * est.std_error), (est.table - truth) / est.std_error
    both = estimate_joint(patterns, JointVariable(x_mech, words[:5]), JointVariable(y_mech, [0, 1]), other=False)
    assert both.table.shape == (5, 2)
