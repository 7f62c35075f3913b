"""Per-pattern likelihoods and the "Other" rule (ldpstream.estimators.joint.likelihood) against brute force.

Reference: each (pattern, candidate) probability recomputed report by report from the mechanism's own
``channel_input`` / ``bloom_bits`` (the true report of one value in one cohort) and its rates, with Python
loops; the Other rule recomputed by loops and checked to recover a hidden value's exact rates from an exact
(expected) sketch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ldpstream.estimators.joint.likelihood import (
    candidate_truth,
    other_bit_rates,
    other_symbol_rates,
    pattern_sketch,
    variable_likelihood,
)
from ldpstream.mechanisms.krappor import KRappor
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.rappor import Rappor

NAMES = [f"s{i}" for i in range(9)]

MECHANISMS: list[tuple[str, Any, list[Any], list[Any]]] = [
    # (id, mechanism, all values (for simulation), candidates)
    ("krr", KRR(6, 1.5), list(range(6)), [0, 2, 3]),
    ("krappor", KRappor(6, 2.0), list(range(6)), [1, 4]),
    ("orr-open", ORR(k=5, epsilon=2.0, cohorts=3), NAMES, NAMES[:3]),
    ("orr-closed", ORR(k=4, epsilon=2.0, cohorts=3, support=9), list(range(9)), [0, 5, 7]),
    ("orappor-open", ORappor(k=8, epsilon=2.0, cohorts=3, hashes=2), NAMES, NAMES[:4]),
    ("orappor-closed", ORappor(k=8, epsilon=2.0, cohorts=2, hashes=1, support=9), list(range(9)), [2, 3]),
    ("rappor", Rappor(k=8, hashes=2, cohorts=3, p=0.25, q=0.75, f=0.5), NAMES, NAMES[:3]),
]


def true_report(mechanism: Any, value: Any, cohort: int) -> np.ndarray | int:
    """The pre-noise report of one value: a symbol, or a (k,) bool Bloom filter."""
    if isinstance(mechanism, Rappor):
        bits = np.zeros(mechanism.k, dtype=bool)
        bits[mechanism.bloom_bits(value, cohort)] = True
        return bits
    return mechanism.channel_input(value, cohort)  # type: ignore[no-any-return]


def brute_probability(mechanism: Any, value: Any, cohort: int, report: Any) -> float:
    """P(report | value, cohort), one report at a time."""
    truth = true_report(mechanism, value, cohort)
    if mechanism.report_kind == "symbol":
        hi, lo = mechanism.response_rates
        return float(hi if int(report) == int(truth) else lo)
    qs, ps = mechanism.q_star, mechanism.p_star
    prob = 1.0
    for j in range(mechanism.k):
        t = qs if truth[j] else ps  # type: ignore[index]
        prob *= t if report[j] else 1.0 - t
    return prob


def simulate(mechanism: Any, values: list[Any], n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    table = mechanism.value_table(values) if mechanism.needs_value_table else None
    cohorts, reports = mechanism.encode_clients(rng.integers(0, len(values), n), rng, table)
    reports = np.asarray(reports)
    if reports.ndim == 2:
        reports = reports.astype(np.uint8)
    # distinct (cohort, report) with counts, by brute force
    seen: dict[tuple[int, bytes], int] = {}
    rows: list[tuple[int, Any]] = []
    for c, r in zip(cohorts.tolist(), reports, strict=True):
        key = (c, np.asarray(r).tobytes())
        if key not in seen:
            seen[key] = 0
            rows.append((c, r))
        seen[key] += 1
    uc = np.array([c for c, _ in rows], dtype=np.int64)
    ur = np.array([r for _, r in rows])
    counts = np.array([seen[(c, np.asarray(r).tobytes())] for c, r in rows], dtype=np.int64)
    return uc, ur, counts


@pytest.mark.parametrize(("name", "mechanism", "values", "candidates"), MECHANISMS, ids=[m[0] for m in MECHANISMS])
def test_candidate_likelihoods_match_brute_force(name: str, mechanism: Any, values: list[Any],
                                                 candidates: list[Any]) -> None:
    cohorts, reports, counts = simulate(mechanism, values, 400, seed=3)
    lik = variable_likelihood(mechanism, candidates, cohorts, reports, counts, other=False)
    got = lik.matrix * np.exp(lik.log_scale)[:, None]
    want = np.array([[brute_probability(mechanism, v, int(c), r) for v in candidates]
                     for c, r in zip(cohorts, reports, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    assert np.allclose(lik.matrix.max(axis=1), 1.0)


@pytest.mark.parametrize(("name", "mechanism", "values", "candidates"), MECHANISMS, ids=[m[0] for m in MECHANISMS])
def test_other_likelihood_matches_the_rule_computed_by_loops(name: str, mechanism: Any, values: list[Any],
                                                             candidates: list[Any]) -> None:
    cohorts, reports, counts = simulate(mechanism, values, 3000, seed=4)
    freq = np.full(len(candidates), 0.8 / len(values))
    lik = variable_likelihood(mechanism, candidates, cohorts, reports, counts, frequencies=freq)
    other_col = lik.matrix[:, -1] * np.exp(lik.log_scale)
    C, k = mechanism.cohorts, mechanism.k
    bits = mechanism.report_kind == "bits"
    hi, lo = mechanism.response_rates
    want = []
    for c, r in zip(cohorts, reports, strict=True):
        mask = cohorts == c
        n_c = counts[mask].sum()
        left = n_c * (1 - freq.sum())
        if bits:
            observed = (reports[mask] * counts[mask, None]).sum(axis=0)
        else:
            observed = np.bincount(reports[mask], weights=counts[mask], minlength=k)
        expected = np.zeros(k)
        for s, v in enumerate(candidates):
            truth = true_report(mechanism, v, int(c))
            cell = np.asarray(truth, dtype=bool) if bits else (np.arange(k) == truth)
            expected += n_c * freq[s] * np.where(cell, hi, lo)
        rate = np.clip((observed - expected) / left, lo, hi)
        if bits:
            want.append(float(np.prod(np.where(r == 1, rate, 1 - rate))))
        else:
            want.append(float(rate[int(r)] / rate.sum()))
    del C
    np.testing.assert_allclose(other_col, want, rtol=1e-9)


def test_other_rule_recovers_a_hidden_value_from_an_exact_sketch() -> None:
    """With the expected sketch (no noise) and one hidden value, Other's rates are that value's."""
    mech = Rappor(k=16, hashes=2, cohorts=4, p=0.25, q=0.75, f=0.0)
    truth = candidate_truth(mech, NAMES[:4])  # 3 candidates + 1 hidden
    freq = np.array([0.4, 0.25, 0.15, 0.2])
    n_c = np.array([1000.0, 2000.0, 500.0, 4000.0])
    rates = mech.p_star + (mech.q_star - mech.p_star) * truth
    sketch = np.hstack([n_c[:, None], n_c[:, None] * (rates @ freq)])
    got = other_bit_rates(truth[:, :, :3], freq[:3], sketch, mech.q_star, mech.p_star, mech.hashes)
    np.testing.assert_allclose(got, rates[:, :, 3], atol=1e-12)

    orr = ORR(k=6, epsilon=1.0, cohorts=3)
    truth = candidate_truth(orr, NAMES[:5])
    freq = np.array([0.3, 0.3, 0.1, 0.2, 0.1])
    hi, lo = orr.response_rates
    n_c = np.array([300.0, 900.0, 1200.0])
    rates = lo + (hi - lo) * truth
    sketch = n_c[:, None] * (rates @ freq)
    hidden = rates[:, :, 3:] @ (freq[3:] / freq[3:].sum())  # a mixture of two hidden values: exact too
    got = other_symbol_rates(truth[:, :, :3], freq[:3], sketch, hi, lo)
    np.testing.assert_allclose(got, hidden, atol=1e-12)


def test_other_falls_back_when_candidates_explain_everything() -> None:
    mech = KRR(4, 1.0)
    cohorts, reports, counts = simulate(mech, [0, 1, 2, 3], 500, seed=5)
    lik = variable_likelihood(mech, [0, 1, 2, 3], cohorts, reports, counts, frequencies=np.full(4, 0.25))
    np.testing.assert_allclose(lik.matrix[:, -1] * np.exp(lik.log_scale), 0.25)


def test_pattern_sketch_counts_reports_with_multiplicity() -> None:
    mech = Rappor(k=8, hashes=2, cohorts=3, p=0.25, q=0.75, f=0.5)
    rng = np.random.default_rng(0)
    cohorts, bits = mech.encode_clients(rng.integers(0, 9, 300), rng, mech.value_table(NAMES))
    counts = rng.integers(1, 4, 300)
    want = mech.sketch(np.repeat(cohorts, counts), np.repeat(bits, counts, axis=0))
    np.testing.assert_array_equal(pattern_sketch(mech, cohorts, bits.astype(np.uint8), counts), want)
    orr = ORR(k=5, epsilon=1.0, cohorts=3)
    c2, y2 = orr.encode_clients(rng.integers(0, 9, 300), rng, orr.value_table(NAMES))
    np.testing.assert_array_equal(pattern_sketch(orr, c2, y2, counts), orr.sketch(np.repeat(c2, counts),
                                                                                   np.repeat(y2, counts)))
