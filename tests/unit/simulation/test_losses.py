"""Tests for ldpstream.simulation.losses."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.simulation.losses import LOSSES, all_losses, hellinger, l1, l2sq, linf, tv


def test_hand_values():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.5])
    assert l1(p, q) == pytest.approx(1.0)
    assert l2sq(p, q) == pytest.approx(0.0625 * 2 + 0.25)
    assert linf(p, q) == pytest.approx(0.5)
    assert tv(p, q) == pytest.approx(0.5)
    expected_h = np.sqrt(0.5 * (2 * (np.sqrt(0.5) - 0.5) ** 2 + 0.5))
    assert hellinger(p, q) == pytest.approx(expected_h)


def test_zero_and_maximal_distances():
    p = np.array([1.0, 0.0])
    q = np.array([0.0, 1.0])
    for name, fn in LOSSES.items():
        assert fn(p, p) == pytest.approx(0.0), name
    assert l1(p, q) == 2 and tv(p, q) == 1 and hellinger(p, q) == pytest.approx(1.0) and linf(p, q) == 1


def test_vectorized_over_leading_axes():
    rng = np.random.default_rng(0)
    est = rng.dirichlet(np.ones(6), size=(4, 3))
    truth = rng.dirichlet(np.ones(6))
    for name, fn in LOSSES.items():
        out = fn(est, truth)
        assert out.shape == (4, 3), name
        np.testing.assert_allclose(out[2, 1], fn(est[2, 1], truth))


def test_negative_estimates():
    est = np.array([-0.1, 0.6, 0.5])
    truth = np.array([0.0, 0.5, 0.5])
    assert l1(est, truth) == pytest.approx(0.2)
    # Hellinger clips negatives to zero
    assert hellinger(est, truth) == pytest.approx(hellinger(np.array([0.0, 0.6, 0.5]), truth))


def test_all_losses_keys():
    out = all_losses(np.array([0.5, 0.5]), np.array([1.0, 0.0]))
    assert list(out) == ["l1", "l2sq", "linf", "tv", "hellinger"]
    assert out["tv"] == pytest.approx(0.5 * out["l1"])
