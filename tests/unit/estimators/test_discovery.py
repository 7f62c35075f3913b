"""Unit tests of the discovery stages (ldpstream/estimators/discovery; docs/math/dictionary.md), each against an
independent reference: string slicing for the n-grams, brute force over all combinations for the cliques,
exhaustive enumeration of the report channel for the budget split, direct counting for the aggregate."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.discovery import (
    CliqueLimitError,
    DiscoveryCollection,
    StringShape,
    bit_scheme,
    draw_slots,
    encode_population,
    k_partite_cliques,
    rappor_scheme,
)
from ldpstream.estimators.discovery.client import DiscoveryClient
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.rappor import Rappor

# -- strings and n-grams -------------------------------------------------------------------------------


def test_padding_truncation_and_ngrams_match_plain_slicing():
    shape = StringShape(length=6, ngram=2, alphabet="abc.")
    assert shape.alphabet == "abc.$" and shape.slots == 3 and shape.ngram_count == 25
    assert shape.padded("ab") == "ab$$$$" and shape.padded("abcabcab") == "abcabc"
    assert shape.unpadded("ab$$$$") == "ab"
    grams = shape.all_ngrams()
    assert len(grams) == 25 and len(set(grams)) == 25 and grams[0] == "aa" and grams[-1] == "$$"
    words = ["ab", "c.a", "abcabcab", "", "$"]
    got = shape.ngram_indices(words)
    for w, row in zip(words, got, strict=True):
        padded = shape.padded(w)
        expected = [grams.index(padded[2 * j:2 * j + 2]) for j in range(3)]  # independent: slicing + lookup
        assert row.tolist() == expected
        assert shape.assemble([grams[i] for i in row]) == padded


def test_shape_rejects_bad_input():
    with pytest.raises(ParameterError, match="outside the alphabet"):
        StringShape(alphabet="ab").padded("abc")
    with pytest.raises(ParameterError, match="multiple"):
        StringShape(length=7, ngram=2)
    with pytest.raises(ParameterError, match="repeats"):
        StringShape(alphabet="aab")


def test_slots_are_distinct_and_uniform_over_ordered_pairs():
    k, n = 5, 200_000
    slots = draw_slots(n, k, np.random.default_rng(7))
    assert np.all(slots[:, 0] != slots[:, 1]) and slots.min() == 0 and slots.max() == k - 1
    counts = np.bincount(slots[:, 0] * k + slots[:, 1], minlength=k * k).reshape(k, k)
    observed = counts[~np.eye(k, dtype=bool)]
    # Pearson χ² against uniform over the k(k−1) = 20 ordered pairs: under the null χ²(19); reject only
    # beyond its 0.999 quantile (a 1-in-1000 false alarm with this fixed seed)
    chi2 = float(((observed - n / 20) ** 2 / (n / 20)).sum())
    assert chi2 < stats.chi2.ppf(0.999, 19)


def test_client_slots_come_from_its_secret():
    scheme = rappor_scheme(4.39, StringShape(length=8, ngram=2))
    a = DiscoveryClient(scheme, b"secret-1", 3)
    assert a.slots == DiscoveryClient(scheme, b"secret-1", 5).slots  # a restarted client: same slots
    assert a.slots[0] != a.slots[1]
    seen = {DiscoveryClient(scheme, f"s{i}".encode(), 0).slots for i in range(200)}
    assert len(seen) == 12  # all 4·3 ordered pairs occur (each missed with probability (11/12)^200 < 1e-7)
    triple = a.report("google")
    assert triple.slots == a.slots and triple.full_bits.shape == (128,)
    assert all(b.shape == (128,) for b in triple.ngram_bits)


# -- the budget split ------------------------------------------------------------------------------------


def _report_law(mech: Rappor, value: str) -> np.ndarray:
    """P(report = y) for every y in {0,1}^k (cohort 0), enumerated bit by bit."""
    bloom = np.zeros(mech.k, dtype=bool)
    bloom[mech.bloom_bits(value, 0)] = True
    outputs = np.array(list(itertools.product([0, 1], repeat=mech.k)), dtype=bool)
    per_bit = np.where(outputs, np.where(bloom, mech.q, mech.p), np.where(bloom, 1 - mech.q, 1 - mech.p))
    law: np.ndarray = per_bit.prod(axis=1)
    return law


def test_budget_split_each_report_a_third_and_the_client_the_total():
    total = 4.39
    scheme = rappor_scheme(total, StringShape(length=4, ngram=2, alphabet="ab"), full_bits=4, ngram_bits=4,
                           hashes=1, cohorts=1)
    assert scheme.full.epsilon == pytest.approx(total / 3) and scheme.ngram.epsilon == pytest.approx(total / 3)
    assert scheme.epsilon == pytest.approx(total)
    # Exhaustive: the law of the client's whole output (two n-gram reports and the full report; the slots
    # are drawn independently of the string, so they cancel from every likelihood ratio) for two strings
    # that differ in both slots; the worst log-ratio over all 2^12 outputs is the client's ε.
    strings = ["aabb", "baab", "abba", "bbaa", "abab", "baba"]

    def joint(s: str) -> np.ndarray:
        g1, g2 = _report_law(scheme.ngram, s[:2]), _report_law(scheme.ngram, s[2:])
        full = _report_law(scheme.full, s)
        return np.einsum("i,j,k->ijk", g1, g2, full).ravel()

    def bloom(mech: Rappor, value: str) -> list[int]:
        return mech.bloom_bits(value, 0)

    attained = False
    for x, y in itertools.permutations(strings, 2):
        worst = float(np.max(np.log(joint(x) / joint(y))))
        assert worst <= total + 1e-9
        if (bloom(scheme.ngram, x[:2]) != bloom(scheme.ngram, y[:2]) and bloom(scheme.ngram, x[2:]) != bloom(
                scheme.ngram, y[2:]) and bloom(scheme.full, x) != bloom(scheme.full, y)):
            assert worst == pytest.approx(total, rel=1e-9)  # every report's bits differ: the bound is attained
            attained = True
    assert attained


# -- the aggregate ---------------------------------------------------------------------------------------


def test_collection_counts_every_report_once():
    scheme = rappor_scheme(3.0, StringShape(length=6, ngram=2, alphabet="abc"), full_bits=16, ngram_bits=16,
                           cohorts=4)
    rng = np.random.default_rng(3)
    strings = ["abc", "cab", "bbbb"]
    values = rng.integers(0, 3, size=3000)
    reps = encode_population(scheme, strings, values, rng)
    col = DiscoveryCollection.fold(scheme, reps)
    assert col.clients == 3000
    for j in range(3):  # slot j's sketch: the reports sent for slot j, counted directly
        direct = np.zeros((4, 17), dtype=np.int64)
        for i in range(3000):
            for r in range(2):
                if reps.slots[i, r] == j:
                    direct[reps.ngram_cohorts[i, r], 0] += 1
                    direct[reps.ngram_cohorts[i, r], 1:] += reps.ngram_bits[i, r]
        assert np.array_equal(col.ngram_sketches[j], direct)
    assert sum(p.total for p in col.pairs.values()) == 3000
    pair_of = {tuple(sorted(s)) for s in reps.slots.tolist()}
    assert set(col.pairs) == {(a, b) for a in range(3) for b in range(a + 1, 3)} and pair_of <= set(col.pairs)
    for (a, b), patterns in col.pairs.items():
        members = np.flatnonzero((reps.slots.min(axis=1) == a) & (reps.slots.max(axis=1) == b))
        assert patterns.total == members.size
        first = np.where(reps.slots[members, 0] == a, 0, 1)
        assert sorted(reps.ngram_cohorts[members, first].tolist()) == sorted(
            np.repeat(patterns.cohort_x, patterns.counts).tolist())
    halves = DiscoveryCollection.combine([
        DiscoveryCollection.fold(scheme, _subset(reps, slice(0, 1000))),
        DiscoveryCollection.fold(scheme, _subset(reps, slice(1000, 3000)))])
    assert np.array_equal(halves.full_sketch, col.full_sketch)
    assert np.array_equal(halves.ngram_sketches, col.ngram_sketches)
    for key in col.pairs:
        assert halves.pairs[key].total == col.pairs[key].total and len(halves.pairs[key]) == len(col.pairs[key])


def _subset(reps, rows):
    return type(reps)(reps.slots[rows], reps.ngram_cohorts[rows], reps.ngram_bits[rows], reps.full_cohorts[rows],
                      reps.full_bits[rows])


# -- cliques ---------------------------------------------------------------------------------------------


def _brute_force(sizes, edges):
    k = len(sizes)
    out = []
    for combo in itertools.product(*[range(s) for s in sizes]):
        if all(edges[(a, b)][combo[a], combo[b]] for a in range(k) for b in range(a + 1, k)):
            out.append(list(combo))
    return sorted(out)


@pytest.mark.parametrize("seed", range(12))
def test_cliques_match_brute_force_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 6))
    sizes = [int(s) for s in rng.integers(1, 7, size=k)]
    density = float(rng.uniform(0.3, 0.9))
    edges = {(a, b): rng.random((sizes[a], sizes[b])) < density for a in range(k) for b in range(a + 1, k)}
    got = k_partite_cliques(sizes, edges)
    assert got.shape[1] == k
    assert got.tolist() == _brute_force(sizes, edges)


def test_planted_cliques_in_a_large_sparse_graph_are_found_quickly():
    rng = np.random.default_rng(5)
    k, size = 6, 60
    sizes = [size] * k
    edges = {(a, b): rng.random((size, size)) < 0.05 for a in range(k) for b in range(a + 1, k)}
    planted = rng.integers(0, size, size=(20, k))
    for row in planted:
        for a in range(k):
            for b in range(a + 1, k):
                edges[(a, b)][row[a], row[b]] = True
    got = {tuple(r) for r in k_partite_cliques(sizes, edges).tolist()}
    assert {tuple(r) for r in planted.tolist()} <= got  # 60^6 = 4.7e10 combinations: brute force is out


def test_clique_limit_and_missing_parts():
    full = {(0, 1): np.ones((3, 3), bool), (0, 2): np.ones((3, 3), bool), (1, 2): np.ones((3, 3), bool)}
    assert len(k_partite_cliques([3, 3, 3], full)) == 27
    with pytest.raises(CliqueLimitError):
        k_partite_cliques([3, 3, 3], full, limit=10)
    assert k_partite_cliques([3, 0, 3], {(0, 2): np.ones((3, 3), bool)}).shape == (0, 3)
    assert math.prod([3, 3, 3]) == 27


def test_edge_level_makes_one_expected_clique_of_absent_pairs():
    from ldpstream.estimators.discovery.decode import edge_level

    sizes = [24, 14, 13, 11, 6, 1]
    alpha = edge_level(sizes)
    assert math.prod(sizes) * alpha ** 15 == pytest.approx(1.0)  # Π m_j · α^(k(k−1)/2) = 1
    assert edge_level(sizes, null_cliques=3) ** 15 * math.prod(sizes) == pytest.approx(3.0)
    assert edge_level([2, 2]) == pytest.approx(0.25) and edge_level([1, 1]) == 0.5  # capped at 1/2
    # Monte Carlo check of the premise: cliques of a graph whose edges pass independently with probability α
    rng = np.random.default_rng(0)
    small = [5, 4, 3]
    a = edge_level(small)
    counts = [len(k_partite_cliques(small, {(i, j): rng.random((small[i], small[j])) < a
                                           for i in range(3) for j in range(i + 1, 3)})) for _ in range(2000)]
    # the mean of 2000 independent counts with mean 1, within 4 of its standard errors (from the sample)
    assert abs(np.mean(counts) - 1.0) < 4 * np.std(counts) / np.sqrt(len(counts))


def test_discover_end_to_end_on_a_tiny_alphabet_with_semantic_filters():
    from ldpstream.estimators.discovery import discover

    shape = StringShape(length=4, ngram=2, alphabet="ab")  # 9 bigrams: every stage runs in well under a second
    scheme = rappor_scheme(12.0, shape, full_bits=32, ngram_bits=32, cohorts=8)
    rng = np.random.default_rng(4)
    strings = ["ab", "ba", "abab", "bb"]
    values = rng.choice(4, size=40_000, p=[0.4, 0.3, 0.2, 0.1])
    col = DiscoveryCollection.fold(scheme, encode_population(scheme, strings, values, rng))
    result = discover(col, scheme)
    # at ε = 12 every frequency (≥ 0.1) stands tens of standard errors above zero: all four are found
    assert {d.string for d in result.discovered} == set(strings)
    assert set(result.seconds) == {"ngrams", "pairs", "cliques", "final", "decode"}
    cpu = result.info["cpu_seconds"]  # process CPU per stage beside the wall times
    assert set(cpu) == set(result.seconds) and all(v >= 0 for v in cpu.values())
    assert cpu["decode"] == pytest.approx(sum(cpu[s] for s in ("ngrams", "pairs", "cliques", "final")))
    only_a = discover(col, scheme, pattern="a.*")
    assert {d.string for d in only_a.discovered} == {"ab", "abab"}
    short = discover(col, scheme, predicate=lambda s: len(s) <= 2)
    assert {d.string for d in short.discovered} == {"ab", "ba", "bb"}


# -- other bit-vector mechanisms --------------------------------------------------------------------------


def _orappor_report_law(mech: ORappor, value: str) -> np.ndarray:
    """P(report = y) for every y in {0,1}^k (cohort 0): per-bit rates q* on the Bloom bits, p* off them."""
    bloom = np.asarray(mech.channel_input(value, 0), dtype=bool)
    outputs = np.array(list(itertools.product([0, 1], repeat=mech.k)), dtype=bool)
    on = np.where(bloom, mech.q_star, mech.p_star)
    per_bit = np.where(outputs, on, 1 - on)
    law: np.ndarray = per_bit.prod(axis=1)
    return law


def test_orappor_budget_split_each_report_its_share_and_the_client_the_total():
    total = 4.39
    scheme = bit_scheme(total, StringShape(length=4, ngram=2, alphabet="ab"), mechanism="orappor", full_bits=4,
                        ngram_bits=4, hashes=1, cohorts=1)
    assert isinstance(scheme.full, ORappor) and isinstance(scheme.ngram, ORappor)
    assert scheme.full.epsilon == pytest.approx(total / 3) and scheme.ngram.epsilon == pytest.approx(total / 3)
    assert scheme.epsilon == pytest.approx(total)
    # O-RAPPOR's rates at ε_r: q* = e^{ε_r/2h}/(1 + e^{ε_r/2h}) (the formula, independently of the class)
    assert scheme.ngram.q_star == pytest.approx(math.exp(total / 6) / (1 + math.exp(total / 6)))
    # Exhaustive as for RAPPOR: the worst log-ratio of the whole output over all 2^12 outputs is at most the total
    strings = ["aabb", "baab", "abba", "bbaa", "abab", "baba"]

    def joint(s: str) -> np.ndarray:
        g1, g2 = _orappor_report_law(scheme.ngram, s[:2]), _orappor_report_law(scheme.ngram, s[2:])
        return np.einsum("i,j,k->ijk", g1, g2, _orappor_report_law(scheme.full, s)).ravel()

    worst = max(float(np.max(np.log(joint(x) / joint(y)))) for x, y in itertools.permutations(strings, 2))
    assert worst <= total + 1e-9
    assert worst > total / 3 - 1e-9  # some pair of strings differs in at least one report's encoding


@pytest.mark.parametrize(("mechanism", "why"), [
    ("krappor", "closed alphabet"), ("krr", "closed alphabet"), ("orr", "symbols"), ("oue", "bit-vector"),
])
def test_mechanisms_that_cannot_carry_discovery_reports_are_refused_with_the_reason(mechanism, why):
    with pytest.raises(ParameterError, match=why):
        bit_scheme(3.0, StringShape(length=4, ngram=2, alphabet="ab"), mechanism=mechanism)


def test_discover_with_orappor_finds_the_top_strings():
    from ldpstream.estimators.discovery import discover

    shape = StringShape(length=4, ngram=2, alphabet="ab")  # 9 bigrams: every stage runs in well under a second
    scheme = bit_scheme(12.0, shape, mechanism="orappor", full_bits=32, ngram_bits=32, cohorts=8)
    rng = np.random.default_rng(4)
    strings = ["ab", "ba", "abab", "bb"]
    p = np.array([0.4, 0.3, 0.2, 0.1])
    n = 40_000
    values = rng.choice(4, size=n, p=p)
    col = DiscoveryCollection.fold(scheme, encode_population(scheme, strings, values, rng))
    result = discover(col, scheme)
    # at ε = 12 (4 per report) every frequency (≥ 0.1) stands tens of standard errors above zero
    assert {d.string for d in result.discovered} == set(strings)
    truth = dict(zip(strings, np.bincount(values, minlength=4) / n, strict=True))
    for d in result.discovered:
        # the final refit's estimate within 4 of its own standard errors of the drawn share
        assert abs(d.estimate - truth[d.string]) < 4 * d.std_error, d


@pytest.mark.parametrize("mechanism", ["rappor", "orappor"])
def test_the_report_file_keeps_the_mechanism_and_every_report(tmp_path, mechanism):
    import json

    from ldpstream.simulation.discovery import load_reports, save_reports

    scheme = bit_scheme(6.0, StringShape(length=4, ngram=2, alphabet="ab"), mechanism=mechanism, full_bits=12,
                        ngram_bits=10, cohorts=4)
    rng = np.random.default_rng(5)
    reports = encode_population(scheme, ["ab", "ba"], rng.integers(0, 2, size=50), rng)
    path = tmp_path / "reports.npz"
    save_reports(path, scheme, reports)
    loaded, back = load_reports(path)
    assert loaded == scheme
    for field in ("slots", "ngram_cohorts", "ngram_bits", "full_cohorts", "full_bits"):
        assert np.array_equal(np.asarray(getattr(back, field), dtype=np.int64),
                              np.asarray(getattr(reports, field), dtype=np.int64)), field
    # a file whose reports name a mechanism that cannot carry them is refused with the reason
    with np.load(path) as archive:
        arrays = dict(archive)
    params = json.loads(str(arrays["scheme"]))
    params["full"] = {"mechanism": "krappor", "k": 12, "epsilon": 2.0}
    arrays["scheme"] = np.array(json.dumps(params))
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ParameterError, match="closed alphabet"):
        load_reports(tmp_path / "bad.npz")
