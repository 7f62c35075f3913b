"""The two pieces the memoized permanent response is built from: the keyed deterministic randomness it is drawn
with, and the instantaneous ε that makes permanent ∘ instantaneous exactly the one-report ε channel
(docs/math/privacy-accounting.md#composing-the-two-layers). Exact checks by matrix composition; the uniformity
check has its false-alarm rate stated."""

from __future__ import annotations

import hashlib
import hmac
import math

import numpy as np
import pytest
from scipy import stats

from ldpstream.mechanisms.randomness import KeyedRandomness
from ldpstream.mechanisms.rates import bit_irr_epsilon, bit_rates, krr_channel, krr_irr_epsilon
from tests.unit.mechanisms.channels import flip_matrix, max_log_ratio


@pytest.mark.parametrize("k", [2, 3, 16, 1000])
@pytest.mark.parametrize(("epsilon", "permanent"), [(0.1, 0.2), (1.0, 3.0), (2.0, 2.0 + 1e-6), (0.5, 10.0)])
def test_krr_layers_compose_to_the_epsilon_channel(k, epsilon, permanent):
    e2 = krr_irr_epsilon(k, epsilon, permanent)
    assert e2 > 0
    composed = krr_channel(k, permanent) @ krr_channel(k, e2)
    np.testing.assert_allclose(composed, krr_channel(k, epsilon), rtol=1e-9, atol=1e-15)
    assert max_log_ratio(composed) == pytest.approx(epsilon, rel=1e-7)
    # the keep probabilities satisfy the brief's equation a = a1 a2 + (1 − a1)(1 − a2)/(k − 1)
    a1, a2, a = krr_channel(k, permanent)[0, 0], krr_channel(k, e2)[0, 0], krr_channel(k, epsilon)[0, 0]
    assert a1 * a2 + (1 - a1) * (1 - a2) / (k - 1) == pytest.approx(a, rel=1e-12)


@pytest.mark.parametrize(("epsilon_bit", "permanent_bit"), [(0.05, 0.1), (0.75, 1.75), (1.0, 1.0 + 1e-6), (0.25, 5.0)])
def test_bit_layers_compose_to_the_epsilon_flip(epsilon_bit, permanent_bit):
    e2 = bit_irr_epsilon(epsilon_bit, permanent_bit)
    composed = flip_matrix(permanent_bit) @ flip_matrix(e2)
    np.testing.assert_allclose(composed, flip_matrix(epsilon_bit), rtol=1e-9)
    b1, b2, b = bit_rates(permanent_bit)[0], bit_rates(e2)[0], bit_rates(epsilon_bit)[0]
    assert b1 * b2 + (1 - b1) * (1 - b2) == pytest.approx(b, rel=1e-12)


def test_keyed_randomness_replays_by_key_and_message_and_its_bytes_are_uniform():
    a, b = KeyedRandomness(b"key", b"msg"), KeyedRandomness(b"key", b"msg")
    assert a.bytes(5) + a.bytes(40) == b.bytes(45)  # a stream: reads split anywhere give the same bytes
    blocks = [hmac.new(b"key", b"msg" + j.to_bytes(4, "big"), hashlib.sha256).digest() for j in (0, 1)]
    assert KeyedRandomness(b"key", b"msg").bytes(64) == b"".join(blocks)
    assert KeyedRandomness(b"key", b"msh").bytes(32) != KeyedRandomness(b"key", b"msg").bytes(32)
    assert KeyedRandomness(b"kez", b"msg").bytes(32) != KeyedRandomness(b"key", b"msg").bytes(32)
    # Uniform bytes: Pearson's chi-square over 256 cells, df = 255; fails with probability 1e-6 if uniform.
    counts = np.bincount(np.frombuffer(KeyedRandomness(b"k", b"m").bytes(256 * 400), dtype=np.uint8), minlength=256)
    chi2 = ((counts - 400) ** 2 / 400).sum()
    assert chi2 < stats.chi2.isf(1e-6, 255)
    u = KeyedRandomness(b"k", b"floats").random(10_000)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < stats.norm.isf(1e-6 / 2) * math.sqrt(1 / 12 / u.size)
