"""Tests for ldpstream.distributions (named distributions and population sampling)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpstream.distributions import (
    candidate_strings,
    empirical_distribution,
    parse_distribution,
    sample_counts,
    sample_values,
    values_from_counts,
)
from ldpstream.errors import ParameterError
from ldpstream.simulation.losses import l1

SPECS = ["uniform", "geometric", "geometric:0.3", "zipf:1.2", "zipf", "binomial:0.3", "dirichlet:0.5"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("support", [1, 2, 17, 256])
def test_every_spec_is_a_probability_vector(spec, support):
    p = parse_distribution(spec, support, np.random.default_rng(0))
    assert p.shape == (support,)
    assert np.all(p >= 0)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_uniform():
    np.testing.assert_allclose(parse_distribution("uniform", 5), np.full(5, 0.2))


def test_geometric_matches_the_papers_form():
    S = 256
    theta = 1 / (1 + S / 5)
    w = theta * (1 - theta) ** np.arange(S)
    np.testing.assert_allclose(parse_distribution("geometric", S), w / w.sum(), rtol=1e-12)
    # ratio of consecutive probabilities is 1 − θ
    p = parse_distribution("geometric:0.25", 10)
    np.testing.assert_allclose(p[1:] / p[:-1], 0.75)


def test_geometric_figure3_baseline():
    """docs/math/tuning.md#the-figure-3-setting: non-private ℓ1 ≈ 0.0105 and uniform guess ≈ 0.962 at
    n = 10^6, S = 256."""
    S, n = 256, 10**6
    p = parse_distribution("geometric", S)
    assert l1(np.full(S, 1 / S), p) == pytest.approx(0.962, abs=0.005)
    # E|p̂_i − p_i| ≈ sqrt(2 p_i (1 − p_i) / (π n)) for the empirical distribution
    expected = np.sum(np.sqrt(2 * p * (1 - p) / (math.pi * n)))
    assert expected == pytest.approx(0.0105, rel=0.03)


def test_zipf_and_binomial():
    p = parse_distribution("zipf:2", 4)
    w = 1 / np.arange(1, 5) ** 2
    np.testing.assert_allclose(p, w / w.sum())
    np.testing.assert_allclose(parse_distribution("binomial:0.3", 11), stats.binom.pmf(np.arange(11), 10, 0.3))
    np.testing.assert_allclose(parse_distribution("zipf:0", 3), np.full(3, 1 / 3))


def test_dirichlet_is_seeded_and_needs_rng():
    a = parse_distribution("dirichlet:1", 8, np.random.default_rng(5))
    b = parse_distribution("dirichlet:1", 8, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ParameterError, match="random generator"):
        parse_distribution("dirichlet:1", 8)


def test_file_distribution(tmp_path):
    f = tmp_path / "w.txt"
    f.write_text("# weights\n1\n\n2.5\r\n0\n1.5  # trailing comment\n")
    np.testing.assert_allclose(parse_distribution(f"file:{f}", 4), np.array([1, 2.5, 0, 1.5]) / 5)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1\nabc\n", r"w\.txt:2: expected one number"),
        ("1\n-2\n", r"w\.txt:2: weights must be finite and >= 0"),
        ("1\ninf\n", "finite"),
        ("0\n0\n", "all zero"),
        ("1\n2\n3\n", "holds 3 weights, support is 2"),
        ("# nothing\n", "holds no weights"),
    ],
)
def test_file_distribution_errors(tmp_path, content, message):
    f = tmp_path / "w.txt"
    f.write_text(content)
    with pytest.raises(ParameterError, match=message):
        parse_distribution(f"file:{f}", 2)


def test_file_missing(tmp_path):
    with pytest.raises(ParameterError, match="does not exist"):
        parse_distribution(f"file:{tmp_path / 'nope.txt'}", 2)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("poisson", "unknown distribution"),
        ("zipf:x", "must be a number"),
        ("zipf:-1", "exponent"),
        ("binomial", "binomial:P"),
        ("binomial:1.5", r"\[0, 1\]"),
        ("geometric:1", r"\(0, 1\)"),
        ("dirichlet:0", "alpha"),
        ("uniform:3", "no parameter"),
        ("", "non-empty"),
        ("file:", "needs a path"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(ParameterError, match=message):
        parse_distribution(spec, 4, np.random.default_rng(0))


def test_bad_support():
    with pytest.raises(ParameterError):
        parse_distribution("uniform", 0)


def test_sample_counts_and_empirical():
    rng = np.random.default_rng(1)
    p = parse_distribution("geometric", 64)
    n = 200_000
    counts = sample_counts(p, n, rng)
    assert counts.dtype == np.int64 and counts.sum() == n
    emp = empirical_distribution(counts)
    # each coordinate within 5 multinomial standard deviations (Bonferroni-safe for 64 coordinates)
    sd = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(emp - p) <= 5 * sd + 1e-12)


def test_sample_values_matches_p():
    rng = np.random.default_rng(2)
    p = np.array([0.5, 0.25, 0.125, 0.125])
    n = 100_000
    v = sample_values(p, n, rng)
    assert v.min() >= 0 and v.max() <= 3
    freq = np.bincount(v, minlength=4) / n
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n))
    # chi-square goodness of fit at a tiny level (fixed seed; not a hand-tuned tolerance)
    assert stats.chisquare(np.bincount(v, minlength=4), p * n).pvalue > 1e-4


def test_values_from_counts_and_candidates():
    v = values_from_counts(np.array([2, 0, 3]), np.random.default_rng(0))
    np.testing.assert_array_equal(np.bincount(v, minlength=3), [2, 0, 3])
    assert candidate_strings(3) == ["s0", "s1", "s2"]
    np.testing.assert_array_equal(empirical_distribution(np.zeros(3)), np.zeros(3))


def test_step_distribution_is_a_staircase_of_flat_steps():
    p = parse_distribution("step:4", 10)
    # independent: blocks floor(i·4/10) = 0,0,0,1,1,2,2,2,3,3 with weights 4,3,2,1, normalized by their sum
    weights = np.array([4, 4, 4, 3, 3, 2, 2, 2, 1, 1], dtype=float)
    assert np.allclose(p, weights / weights.sum())
    assert np.allclose(parse_distribution("step:1", 5), 0.2)
    for bad in ("step", "step:0", "step:11", "step:2.5"):
        with pytest.raises(ParameterError):
            parse_distribution(bad, 10)
