"""Exact Bernoulli draws from random bytes (ldpstream.mechanisms._common.bernoulli), the byte sources, and the
byte-block column sums of bit reports."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ldpstream.mechanisms._common import base256_digits, bernoulli
from ldpstream.mechanisms.base import sum_bits
from ldpstream.mechanisms.randomness import SECURE, KeyedRandomness, uniform_bytes


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


def test_seeded_bytes_are_uniform_and_other_sources_are_read_through_bytes():
    """A seeded generator's bytes (its raw 64-bit words) are uniform: chi-square over the 256 values."""
    drawn = uniform_bytes(np.random.default_rng(3), 2_560_001)
    assert drawn.dtype == np.uint8 and drawn.shape == (2_560_001,)
    assert stats.chisquare(np.bincount(drawn, minlength=256)).pvalue > 1e-4
    keyed = uniform_bytes(KeyedRandomness(b"k", b"m"), 100)
    assert keyed.tobytes() == KeyedRandomness(b"k", b"m").bytes(100)


def test_a_keyed_stream_is_consumed_in_one_pass_so_memoized_responses_replay():
    """Slicing large counts must not change a keyed (memoized) draw: it is compared with the one-pass rule
    written out independently (first bytes for all draws, then the ties' next bytes in order)."""
    p, count = 0.2689414213699951, (1 << 18) + 1000  # more than one slice
    got = bernoulli(p, count, KeyedRandomness(b"secret", b"value"))
    stream = KeyedRandomness(b"secret", b"value")
    digits = [int(Fraction(p) * 256**(i + 1)) % 256 for i in range(8)]
    u = np.frombuffer(stream.bytes(count), dtype=np.uint8)
    want = u < digits[0]
    pending = np.flatnonzero(u == digits[0])
    for digit in digits[1:]:
        nxt = np.frombuffer(stream.bytes(pending.size), dtype=np.uint8)
        want[pending[nxt < digit]] = True
        pending = pending[nxt == digit]
        if pending.size == 0:
            break
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [0, 1, 254, 255, 256, 1_000, 70_000])
def test_single_cohort_bit_sums_in_byte_blocks_equal_the_plain_sum(n):
    bits = np.random.default_rng(n).random((n, 37)) < 0.9
    sketch = sum_bits(np.zeros(n, dtype=np.int64), bits, 1)
    assert sketch[0, 0] == n
    np.testing.assert_array_equal(sketch[0, 1:], bits.sum(axis=0, dtype=np.int64))
