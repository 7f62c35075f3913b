"""OLH (docs/math/mechanisms.md#olh): its hash against a pure-Python SplitMix64 written from the construction, its
range, its encoder against its table, and what the registry and the decoder make of it. The privacy ratio, the
channel and the sketch's law are the conformance suite's (tests/unit/mechanisms/test_conformance.py)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from ldpstream.errors import ParameterError
from ldpstream.estimators.candidates import family_variance
from ldpstream.estimators.dispatch import estimate
from ldpstream.mechanisms import OLH, make_mechanism
from ldpstream.mechanisms.hashing import olh_table
from ldpstream.mechanisms.olh import DEFAULT_HASHES, optimal_range

MASK = (1 << 64) - 1


def splitmix(z: int) -> int:
    """SplitMix64's finalizer on Python integers (the construction's reference, no numpy)."""
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def reference_hash(value: bytes, cohort: int, k: int) -> int:
    key = int.from_bytes(hashlib.sha256(b"ldpstream/olh/v1" + value).digest()[:8], "big")
    return splitmix(key ^ splitmix(cohort + 1)) % k


def test_the_hash_is_the_documented_construction():
    values = ["", "a", "https://example.org/", "é", "x" * 300]
    table = olh_table(values, 37, 82)
    for c in (0, 1, 17, 36):
        for s, v in enumerate(values):
            assert table[c, s] == reference_hash(v.encode("utf-8"), c, 82)
    closed = olh_table(np.arange(6), 5, 7, closed=True)
    assert closed[3, 4] == reference_hash((4).to_bytes(8, "big"), 3, 7)
    assert olh_table([b"a"], 4, 82).tolist() == olh_table(["a"], 4, 82).tolist()  # str as its UTF-8 bytes


def test_the_range_is_wang_et_als_and_optimal_builds_it():
    assert [optimal_range(e) for e in (0.1, 0.5, 1.0, 2.0, 4.39)] == [2, 3, 4, 8, 82]
    for eps in (0.5, 1.0, 2.0, 4.39):
        e = math.exp(eps)
        var = {g: (e - 1 + g) ** 2 / ((e - 1) ** 2 * (g - 1)) for g in range(2, 200)}
        assert var[optimal_range(eps)] <= min(var.values()) * 1.01  # within 1% of the integer optimum
    m = OLH.optimal(4.39)
    assert (m.k, m.cohorts) == (82, DEFAULT_HASHES)
    assert make_mechanism(m.parameters()) == m and m.parameters()["mechanism"] == "olh"


def test_the_encoder_reports_through_the_table():
    m = OLH(k=8, epsilon=30.0, cohorts=64)  # ε so large that k-RR keeps every symbol
    values = [f"v{i}" for i in range(10)] * 50
    cohorts, symbols = m.encode_values(values, np.random.default_rng(3))
    table = m.symbol_table([f"v{i}" for i in range(10)])
    assert np.array_equal(symbols, table[cohorts, np.arange(500) % 10])
    assert all(m.channel_input(f"v{i}", c) == table[c, i] for i in range(10) for c in (0, 63))
    with pytest.raises(ParameterError, match="candidate list"):
        m.symbol_table()


def test_family_variance_reads_the_square_sum_off_the_sketch():
    """An exact (expected) sketch of 3 values: F₂ by eq. OLH2 is Σ f² up to the family's collisions (≈ 1/C),
    none outside a complete list, all of it with the list empty."""
    m = OLH(k=5, epsilon=1.5, cohorts=4096)
    f = np.array([0.5, 0.3, 0.2])
    table = m.symbol_table(["a", "b", "c"])
    e = math.exp(1.5)
    p, q = e / (e + 4), 1 / (e + 4)
    n_c = 10**6
    shares = np.zeros((m.cohorts, m.k))
    np.add.at(shares, (np.repeat(np.arange(m.cohorts), 3), table.ravel()), np.tile(f, m.cohorts))
    counts = n_c * (q + (p - q) * shares)
    f2 = float(f @ f)
    outside = family_variance(counts, 1.5, np.zeros(0), np.zeros(0)) * m.cohorts * (m.k - 1)
    assert outside == pytest.approx(f2, abs=0.01)
    assert family_variance(counts, 1.5, f, np.zeros(3)) * m.cohorts * (m.k - 1) == pytest.approx(0.0, abs=0.01)


def test_the_decoder_adds_the_family_term_and_says_so():
    m = OLH(k=8, epsilon=2.0, cohorts=1024)
    values = [f"s{i}" for i in range(20)]
    f = 1 / np.arange(1, 21)
    f /= f.sum()
    rng = np.random.default_rng(5)
    sketch = m.simulate_sketch(rng.multinomial(200_000, f), rng, table=m.symbol_table(values))
    listed = values[3:]
    est = estimate(sketch, m, "ls", candidates=listed)
    assert est.info["family_variance"] > 0
    plain = estimate(sketch, m, "ls", candidates=listed, finite_family=False)
    assert "family_variance" not in plain.info
    assert np.all(est.std_errors >= plain.std_errors - 1e-15)
