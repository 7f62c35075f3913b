"""Exact Bernoulli draws from random bytes (ldpstream.mechanisms._common.bernoulli)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ldpstream.mechanisms._common import base256_digits, bernoulli
from ldpstream.mechanisms.randomness import SECURE


@pytest.mark.parametrize("p", [0.0, 1.0, 0.5, 1 / 3, 0.2689414213699951, 1e-9, 1 - 2**-40])
def test_base256_digits_are_the_exact_expansion(p):
    digits = base256_digits(p)
    assert sum(Fraction(d, 256 ** (i + 1)) for i, d in enumerate(digits)) == Fraction(p)


@pytest.mark.parametrize("p", [0.5, 1 / 3, 0.2689414213699951, 0.7310585786300049, 0.01])
@pytest.mark.parametrize("source", ["seeded", "secure"])
def test_bernoulli_frequency_matches_p(p, source):
    rng = np.random.default_rng(5) if source == "seeded" else SECURE
    n = 2_000_000
    hits = int(bernoulli(p, n, rng).sum())
    assert stats.binomtest(hits, n, p).pvalue > 1e-4


def test_bernoulli_resolves_ties_beyond_the_first_byte():
    # p = 1/256 + 1/65536: a first byte of 1 ties and needs the second byte; P = 257/65536 exactly.
    p = 1 / 256 + 1 / 65536
    n = 4_000_000
    hits = int(bernoulli(p, n, np.random.default_rng(9)).sum())
    assert stats.binomtest(hits, n, p).pvalue > 1e-4
    assert bernoulli(0.0, 10, SECURE).sum() == 0 and bernoulli(1.0, 10, SECURE).all()
