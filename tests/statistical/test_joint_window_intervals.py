"""Coverage of a joint table's published intervals over a window whose buckets repeat report pairs of the
same clients (docs/math/estimators.md, "Joint tables of an association"; :func:`ldpstream.estimators.windows.
joint_design_effect`, :func:`~ldpstream.estimators.windows.widen_joint`).

Two k-RR members (k = 16 and 8, ε = 3, memoized without an instantaneous layer: a client's report pair is
drawn once and repeated unchanged). A window of 8 buckets: 1,000 clients report in every bucket, and 1,000 new
clients in each bucket report once (overlap φ = 1/2, design effect 1 + 7/2 = 4.5). The new clients of every
bucket hold the same values (the model's stationary population; new values in every bucket add
between-bucket dispersion, which the overlap estimate reads as less repetition: docs/math/estimators.md).
Each member's window design is estimated from its own bucket sketches
(:func:`~ldpstream.estimators.windows.window_design`, the decoder's path); the joint table (the top 3 × top 2
values of the true distribution, plus "Other") is estimated from the window's report pairs and widened by
the larger of the members' design effects. The interval checked is the published one (clipped Wald) against
the table of the window's reports.

What is checked is the widening, not the estimator's own calibration (joint-math's statistical tests): the
widened intervals must cover as often as the same estimator's intervals do for independent clients as many
as the window's reports are worth (n / 4.5), within 0.02; both against their samples' own tables, which the
estimator's intervals (made for the population's table) cover a little more often than 95%.

Trial count: the difference of the two coverages must be resolved to 0.02 with at least 3 standard errors;
the cells of one trial are dependent, so each coverage's standard error is the cluster one (sd of the
per-trial coverage over sqrt(T)), and the SE of the difference is asserted ≤ 0.02/3 (about 0.004 at T = 300).
Control: the same intervals not widened cover far less (about 70% for a promised 95%).
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.estimators.windows import joint_design_effect, widen_joint, window_design
from ldpstream.mechanisms.krr import KRR

pytestmark = pytest.mark.statistical

BUCKETS = 8
STAYING, NEW = 1_000, 1_000
TRIALS = 300
MX, MY = KRR(16, 3.0), KRR(8, 3.0)
ROWS, COLUMNS = [0, 1, 2], [0, 1]
#: The model's design effect: 1 + (B − 1) φ with φ = 1/2.
DEFF = 1 + (BUCKETS - 1) * STAYING / (STAYING + NEW)


def population(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n clients' (x, y): x from a decreasing distribution over 16 values; y = x mod 8 for 40% of them."""
    px = np.r_[0.25, 0.18, 0.12, np.full(13, 0.45 / 13)]
    x = rng.choice(16, size=n, p=px)
    py = np.r_[0.3, 0.25, np.full(6, 0.45 / 6)]
    y = np.where(rng.random(n) < 0.4, x % 8, rng.choice(8, size=n, p=py))
    return x, y


def collapsed(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The share of each (row, column) cell among the given pairs, values outside the candidates as Other."""
    row_of = np.full(16, len(ROWS))
    row_of[ROWS] = np.arange(len(ROWS))
    column_of = np.full(8, len(COLUMNS))
    column_of[COLUMNS] = np.arange(len(COLUMNS))
    table = np.zeros((len(ROWS) + 1, len(COLUMNS) + 1))
    np.add.at(table, (row_of[x], column_of[y]), 1.0)
    return table / len(x)


def trial(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """(covered by the widened intervals, covered by the raw ones, the design effect), one per cell."""
    sx, sy = population(rng, STAYING)
    _, rx_staying = MX.encode_clients(sx, rng)  # the permanent responses, drawn once
    _, ry_staying = MY.encode_clients(sy, rng)
    nx, ny = population(rng, NEW)  # each bucket's new clients hold these values (a stationary population)
    xs, ys, rxs, rys, sketches_x, sketches_y = [], [], [], [], [], []
    for _ in range(BUCKETS):
        _, rx_new = MX.encode_clients(nx, rng)
        _, ry_new = MY.encode_clients(ny, rng)
        bx, by = np.r_[sx, nx], np.r_[sy, ny]
        brx, bry = np.r_[rx_staying, rx_new], np.r_[ry_staying, ry_new]
        zeros = np.zeros(len(bx), dtype=np.int64)
        sketches_x.append(MX.sketch(zeros, brx))
        sketches_y.append(MY.sketch(zeros, bry))
        xs.append(bx), ys.append(by), rxs.append(brx), rys.append(bry)
    x, y, rx, ry = (np.concatenate(v) for v in (xs, ys, rxs, rys))
    zeros = np.zeros(len(x), dtype=np.int64)
    patterns = PairPatterns.from_pairs(zeros, rx, zeros, ry)
    raw = estimate_joint(patterns, JointVariable(MX, ROWS), JointVariable(MY, COLUMNS))
    deff = joint_design_effect([window_design(MX, sketches_x), window_design(MY, sketches_y)])
    widened = widen_joint(raw, deff)
    truth = collapsed(x, y)
    inside = ((widened.low <= truth) & (truth <= widened.high)).ravel()
    raw_inside = ((raw.low <= truth) & (truth <= raw.high)).ravel()
    return inside, raw_inside, deff


def base_trial(rng: np.random.Generator, clients: int) -> np.ndarray:
    """Covered, per cell, by the estimator's own intervals for ``clients`` independent clients reporting once."""
    x, y = population(rng, clients)
    _, rx = MX.encode_clients(x, rng)
    _, ry = MY.encode_clients(y, rng)
    zeros = np.zeros(clients, dtype=np.int64)
    est = estimate_joint(PairPatterns.from_pairs(zeros, rx, zeros, ry), JointVariable(MX, ROWS),
                         JointVariable(MY, COLUMNS))
    truth = collapsed(x, y)
    covered: np.ndarray = ((est.low <= truth) & (truth <= est.high)).ravel()
    return covered


def test_widened_joint_intervals_cover_as_the_estimators_own_at_the_windows_effective_size():
    rng = np.random.default_rng(2026)
    runs = [trial(rng) for _ in range(TRIALS)]
    inside = np.array([r[0] for r in runs], dtype=float)
    raw_inside = np.array([r[1] for r in runs], dtype=float)
    deffs = np.array([r[2] for r in runs])
    # The same estimator on independent clients, as many as the window's reports are worth (n / 4.5).
    effective = round(BUCKETS * (STAYING + NEW) / DEFF)
    base = np.array([base_trial(rng, effective) for _ in range(TRIALS)], dtype=float)
    per_trial, base_per_trial = inside.mean(axis=1), base.mean(axis=1)
    coverage, base_coverage = per_trial.mean(), base_per_trial.mean()
    se = np.hypot(per_trial.std(ddof=1), base_per_trial.std(ddof=1)) / np.sqrt(TRIALS)
    print(f"\njoint window coverage {coverage:.3f}, the estimator's own at n = {effective:,} {base_coverage:.3f} "
          f"(SE of the difference {se:.4f}); not widened {raw_inside.mean():.3f}; design effect mean "
          f"{deffs.mean():.2f} (model {DEFF}); per cell {np.round(inside.mean(axis=0), 3).tolist()}")
    assert se <= 0.02 / 3
    assert abs(coverage - base_coverage) <= 0.02
    assert 0.93 <= coverage <= 0.99 and 0.93 <= base_coverage <= 0.99
    assert abs(deffs.mean() - DEFF) < 0.5
    assert raw_inside.mean() < 0.8
