"""``ldpstream report`` on real Redis: the published history of a metric, and of an association's joint
table, become a figure; a name with nothing published is a clear error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldpstream.cli import main
from ldpstream.store import RedisSketchStore

pytest.importorskip("matplotlib")

from ldpstream.decoder.report import TRUTH_LABEL, published_form

pytestmark = pytest.mark.integration

NAMES = ["en", "es", "zh", "hi"]
P = np.array([0.4, 0.3, 0.2, 0.1])


def test_report_plots_the_published_history_and_the_joint_table(redis_url, key_prefix, tmp_path, capsys):
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    rng = np.random.default_rng(4)
    for step, n in enumerate((2_000, 8_000, 32_000)):
        se = np.sqrt(P * (1 - P) / n) * 3
        freq = P + rng.normal(0, se)
        body = published_form(freq, freq - 1.96 * se, freq + 1.96 * se, NAMES, n, snapshot_time=1.7e9 + 10 * step,
                              metric="app_language")
        store.publish_estimate("app_language", "all", json.dumps(body), history=100)
    table = np.array([[0.3, 0.1], [0.2, 0.4]])
    joint = {"association": "lang_by_os", "x": "app_language", "y": "os", "window": "all", "n_reports": 5000,
             "rows": ["en", "Other"], "columns": ["ios", "Other"], "table": table.tolist(),
             "low_95": (table - 0.02).tolist(), "high_95": (table + 0.02).tolist(),
             "independence": {"method": "likelihood-ratio", "statistic": 812.5, "df": 1, "p_value": 1e-12}}
    store.publish_joint("lang_by_os", "all", json.dumps(joint), history=100)
    has_truth = hasattr(store, "add_truth")
    if has_truth:  # simulations publish the values they drew beside the estimates
        store.add_truth("app_language", np.array([400, 300, 200, 100]))

    redis = ["--redis", redis_url, "--prefix", key_prefix]
    assert main(["report", "app_language", *redis, "--out", str(tmp_path / "m.svg")]) == 0
    assert "32,000 reports" in capsys.readouterr().out
    text = (tmp_path / "m.svg").read_text()
    assert all(name in text for name in NAMES) and "mean 95% interval width" in text
    assert (TRUTH_LABEL in text) == has_truth

    assert main(["report", "lang_by_os", *redis, "--out", str(tmp_path / "j.png")]) == 0
    assert "joint table of lang_by_os" in capsys.readouterr().out
    assert (tmp_path / "j.png").read_bytes()[:4] == b"\x89PNG"

    assert main(["report", "nothing_here", *redis, "--out", str(tmp_path / "x.png")]) == 1
    assert "no estimate of 'nothing_here' (all) is published" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
