"""ε-LDP of OUE, O-OUE, subset selection, Hadamard response, CMS and HCMS by enumeration of their whole output
spaces (docs/math/mechanisms.md): every channel is built here from its definition (products of bit flips, subsets
weighted e^ε, scipy's Hadamard matrix), independently of the mechanisms' sampling code; the worst-case likelihood
ratio over every pair of inputs and every output is e^ε exactly. Then the mechanisms' reports are checked to follow
those channels (chi-square per input, level 1e-4 Bonferroni over the inputs)."""

import itertools
import math

import numpy as np
import pytest
from scipy import linalg, stats

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import (
    OUE,
    CountMeanSketch,
    HadamardCountMeanSketch,
    HadamardResponse,
    HashedOUE,
    SubsetSelection,
    fwht,
)
from ldpstream.mechanisms.base import pack_bits
from ldpstream.mechanisms.rates import optimal_subset_size
from tests.unit.mechanisms.channels import max_log_ratio

EPSILONS = [0.1, 0.5, 1.0, math.log(3), 2.0, 5.0, 8.0]
RTOL = 1e-9


def bit_vector_channel(true_bits: np.ndarray, q: float, p: float) -> np.ndarray:
    """``(inputs, 2^k)``: P(output bits | true bits) = Π_j (q or 1 − q where true, p or 1 − p where not)."""
    k = true_bits.shape[1]
    outs = np.array(list(itertools.product([0, 1], repeat=k)), dtype=bool)[:, ::-1]  # output o has bit j = (o>>j)&1
    t = true_bits[:, None, :]
    o = outs[None, :, :]
    per_bit = np.where(t, np.where(o, q, 1 - q), np.where(o, p, 1 - p))
    return per_bit.prod(axis=2)


def output_index(bits: np.ndarray) -> np.ndarray:
    """Little-endian integer of each ``(n, k)`` bit row (k ≤ 16): the column of :func:`bit_vector_channel`."""
    return np.asarray(pack_bits(bits), dtype=np.int64) @ (256 ** np.arange(-(-bits.shape[1] // 8)))


def assert_follows(channel_row: np.ndarray, outputs: np.ndarray, tests: int) -> None:
    observed = np.bincount(outputs, minlength=channel_row.size)
    expected = channel_row * outputs.size
    keep = expected > 0
    assert observed[~keep].sum() == 0
    _, pvalue = stats.chisquare(observed[keep], expected[keep])
    assert pvalue > 1e-4 / tests, pvalue


# --------------------------------------------------------------------------------------------------- OUE
@pytest.mark.parametrize("k", [2, 3, 6])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_oue_channel_is_tight_epsilon_ldp(k, epsilon):
    channel = bit_vector_channel(np.eye(k, dtype=bool), 0.5, 1 / (math.exp(epsilon) + 1))
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, rtol=1e-12)
    assert max_log_ratio(channel) == pytest.approx(epsilon, rel=RTOL)
    m = OUE(k, epsilon)
    assert (m.q_star, m.p_star) == pytest.approx((0.5, 1 / (math.exp(epsilon) + 1)), rel=1e-15)
    np.testing.assert_allclose(m.report_channel(), channel, rtol=1e-12)  # what the conformance suite reads


def test_oue_reports_follow_that_channel():
    m = OUE(4, 1.3)
    channel = bit_vector_channel(np.eye(4, dtype=bool), m.q_star, m.p_star)
    rng = np.random.default_rng(3)
    for x in range(4):
        assert_follows(channel[x], output_index(m.encode_batch(np.full(40_000, x), rng)), 4)


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 6.0])
def test_hashed_oue_report_channel_is_tight_epsilon_ldp(epsilon):
    """O-OUE's whole report (cohort, bits) over a closed alphabet: (1/C)·bit_vector_channel of each cohort's
    Bloom filter; ratio e^ε (two values hash apart in some cohort)."""
    m = HashedOUE(k=4, epsilon=epsilon, cohorts=3, hashes=1, support=6)
    table = m.bloom_table()
    rows = [bit_vector_channel(np.eye(4, dtype=bool)[table[c, :, 0]], m.q_star, m.p_star) / 3 for c in range(3)]
    channel = np.concatenate(rows, axis=1)
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(m.report_channel(m.value_table(None)), channel, rtol=1e-12)
    assert max_log_ratio(channel) == pytest.approx(epsilon, rel=RTOL)


def test_cms_is_one_hash_orappor_and_tight():
    m = CountMeanSketch(k=4, epsilon=1.7, cohorts=2, support=5)
    assert m.hashes == 1 and "hashes" not in m.parameters()
    table = m.bloom_table()
    rows = [bit_vector_channel(np.eye(4, dtype=bool)[table[c, :, 0]], m.q_star, m.p_star) / 2 for c in range(2)]
    assert max_log_ratio(np.concatenate(rows, axis=1)) == pytest.approx(1.7, rel=RTOL)
    with pytest.raises(ParameterError):
        CountMeanSketch(k=4, epsilon=1.0, cohorts=2, hashes=2)


# ------------------------------------------------------------------------------------------ subset selection
def subset_channel(k: int, d: int, epsilon: float) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """``(k, C(k, d))``: P(S | x) ∝ e^ε if x ∈ S else 1, normalized per row."""
    subsets = list(itertools.combinations(range(k), d))
    w = np.array([[math.exp(epsilon) if x in s else 1.0 for s in subsets] for x in range(k)])
    return w / w.sum(axis=1, keepdims=True), subsets


@pytest.mark.parametrize(("k", "d"), [(2, 1), (5, 1), (5, 2), (7, 3), (8, 6)])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_subset_selection_channel_is_tight_and_rates_are_its_margins(k, d, epsilon):
    channel, subsets = subset_channel(k, d, epsilon)
    assert max_log_ratio(channel) == pytest.approx(epsilon, rel=RTOL)
    member = np.array([[j in s for j in range(k)] for s in subsets], dtype=float)  # (subsets, k)
    margins = channel @ member  # P(j ∈ S | x)
    m = SubsetSelection(k, epsilon, subset_size=d)
    codes = [sum(1 << j for j in s) for s in subsets]  # the report channel's columns: bit j set iff j ∈ S
    np.testing.assert_allclose(m.report_channel()[:, codes], channel, rtol=1e-12)
    np.testing.assert_allclose(np.delete(m.report_channel(), codes, axis=1), 0.0)
    np.testing.assert_allclose(np.diag(margins), m.q_star, rtol=1e-12)
    np.testing.assert_allclose(margins[~np.eye(k, dtype=bool)], m.p_star, rtol=1e-12)


def test_subset_selection_reports_follow_that_channel():
    k, d, epsilon = 6, 2, 1.1
    channel, subsets = subset_channel(k, d, epsilon)
    index = {sum(1 << j for j in s): i for i, s in enumerate(subsets)}
    m = SubsetSelection(k, epsilon, subset_size=d)
    rng = np.random.default_rng(4)
    for x in range(k):
        bits = m.encode_batch(np.full(30_000, x), rng)
        assert np.all(bits.sum(axis=1) == d)
        assert_follows(channel[x], np.array([index[int(v)] for v in output_index(bits)]), k)


def test_optimal_subset_size_is_the_exhaustive_risk_minimizer_and_near_k_over_e_plus_one():
    for k in (3, 8, 64, 256, 4096):
        for epsilon in (0.5, 1.0, 2.0, 4.0, 8.0):
            d = optimal_subset_size(k, epsilon)
            ideal = k / (math.exp(epsilon) + 1)
            assert d in (max(1, math.floor(ideal)), max(1, math.ceil(ideal))), (k, epsilon, d)


# --------------------------------------------------------------------------------------------- Hadamard
def test_fwht_is_scipy_hadamard_times_the_vector():
    rng = np.random.default_rng(0)
    for K in (1, 2, 8, 64, 512):
        v = rng.integers(-100, 100, size=(3, K))
        np.testing.assert_array_equal(fwht(v), v @ linalg.hadamard(K).T)
    with pytest.raises(ParameterError):
        fwht(np.ones(6))


@pytest.mark.parametrize("k", [2, 3, 7, 8, 30])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_hadamard_response_channel_is_tight_epsilon_ldp(k, epsilon):
    K = 1 << k.bit_length()
    H = linalg.hadamard(K)
    e = math.exp(epsilon)
    channel = np.where(H[1:k + 1] == 1, 2 * e / (K * (e + 1)), 2 / (K * (e + 1)))
    m = HadamardResponse(k, epsilon)
    assert m.order == K and k + 1 <= K
    np.testing.assert_allclose(m.channel(), channel, rtol=1e-10)
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, rtol=1e-12)
    assert max_log_ratio(channel) == pytest.approx(epsilon, rel=RTOL)


def test_hadamard_response_reports_follow_that_channel():
    m = HadamardResponse(5, 1.4)
    rng = np.random.default_rng(6)
    for x in range(5):
        assert_follows(m.channel()[x], m.encode_batch(np.full(40_000, x), rng), 5)


def hcms_channel(m: HadamardCountMeanSketch) -> np.ndarray:
    """``(S, C·2k)``: P((c, 2l + b) | v) = (1/C)(1/k)(q if b is the sign of H[h_c(v), l] else 1 − q)."""
    H = linalg.hadamard(m.k)
    q = math.exp(m.epsilon) / (math.exp(m.epsilon) + 1)
    table = m.value_table(None)
    blocks = []
    for c in range(m.cohorts):
        plus = H[table[c]] == 1  # (S, k)
        block = np.empty((table.shape[1], m.k, 2))
        block[:, :, 1] = np.where(plus, q, 1 - q)
        block[:, :, 0] = np.where(plus, 1 - q, q)
        blocks.append(block.reshape(table.shape[1], 2 * m.k) / (m.cohorts * m.k))
    return np.concatenate(blocks, axis=1)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_hcms_report_channel_is_tight_epsilon_ldp(epsilon):
    m = HadamardCountMeanSketch(k=8, epsilon=epsilon, cohorts=3, support=10)
    channel = hcms_channel(m)
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(m.report_channel(), channel, rtol=1e-12)
    assert max_log_ratio(channel) == pytest.approx(epsilon, rel=RTOL)


def test_hcms_reports_follow_that_channel():
    m = HadamardCountMeanSketch(k=4, epsilon=0.9, cohorts=2, support=5)
    channel = hcms_channel(m)
    rng = np.random.default_rng(7)
    for v in range(5):
        cohorts, symbols = m.encode_clients(np.full(40_000, v), rng, m.value_table(None))
        assert_follows(channel[v], cohorts * 2 * m.k + symbols, 5)


def test_no_instantaneous_layer_for_the_new_mechanisms():
    for cls in (OUE, SubsetSelection, HadamardResponse):
        with pytest.raises(ParameterError, match="epsilon_permanent"):
            cls(k=8, epsilon=1.0, epsilon_permanent=2.0)
    with pytest.raises(ParameterError):
        HadamardCountMeanSketch(k=6, epsilon=1.0, cohorts=2)
