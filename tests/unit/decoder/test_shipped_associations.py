"""The associations ``deploy/metrics.toml`` ships, decoded as the decoder does (the in-memory store): one whose
every cell is identified, and one whose cells are all flagged, for the reason its comment gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpstream.decoder.service import DecoderService
from ldpstream.registry import Registry
from ldpstream.store import InMemorySketchStore
from tests.unit.decoder.joint_feed import JointFeeder

NOW = 1_750_000_000 // 3600 * 3600
N = 40_000


@pytest.fixture(scope="module")
def published() -> dict[str, dict]:
    registry = Registry.load("deploy/metrics.toml")
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = JointFeeder(registry, store, now=NOW)
    rng = np.random.default_rng(7)
    for seed, name in enumerate(("language_by_screen", "language_by_font")):
        x_metric, y_metric = registry.association(name).metrics
        x = rng.choice(x_metric.mechanism.k, size=N, p=np.linspace(2, 1, x_metric.mechanism.k) /
                       np.linspace(2, 1, x_metric.mechanism.k).sum())
        y_size = getattr(y_metric.mechanism, "support", None) or y_metric.mechanism.k
        y = np.where(rng.random(N) < 0.7, x % y_size, rng.integers(0, y_size, N))
        feed.add(name, x, y, NOW - 60, seed=seed)
    DecoderService(registry, store).run_once(now=NOW)
    return {name: store.latest_joint(name, "all") for name in ("language_by_screen", "language_by_font")}


def test_language_by_screen_identifies_every_cell(published):
    joint = published["language_by_screen"]
    assert joint["n_reports"] == N
    assert np.array(joint["identified"]).all() and joint["identification"] == []
    assert joint["interval_method"] == "wald-clipped-inversion"


def test_language_by_font_flags_every_cell_for_its_hashed_members_other(published):
    joint = published["language_by_font"]
    assert not np.array(joint["identified"]).any()
    least_squares, product = joint["identification"]
    assert least_squares.startswith("Y: candidate frequencies by least squares on the candidates alone")
    assert product.startswith("both members' Other holds several values")
    shipped = Path("deploy/metrics.toml").read_text(encoding="utf-8")
    assert "least squares on the" in shipped and "both members' Others hold" in shipped
