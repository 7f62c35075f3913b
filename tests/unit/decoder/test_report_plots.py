"""``ldpstream report``'s figures (:mod:`ldpstream.decoder.report`) and ``simulate --plot`` / ``tune --plot``:
files in the format their suffix names, with the panels' contents (SVG text stays text, so the labels can be
read back), and the error/width summary checked against a direct computation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldpstream.cli import main
from ldpstream.errors import ParameterError

pytest.importorskip("matplotlib")

from ldpstream.decoder.report import (
    TRUTH_LABEL,
    error_and_width,
    plot_joint,
    plot_metric,
    published_form,
    truth_frequencies,
)

NAMES = ["en", "es", "zh", "hi"]
TRUTH = np.array([0.4, 0.3, 0.2, 0.1])


def _history(rng: np.random.Generator) -> list[dict]:
    """Estimates at growing n (newest first, as published), each frequency within its interval."""
    out = []
    for step, n in enumerate((1_000, 4_000, 16_000)):
        se = np.sqrt(TRUTH * (1 - TRUTH) / n) * 3
        freq = TRUTH + rng.normal(0, se)
        out.append(published_form(freq, freq - 1.96 * se, freq + 1.96 * se, NAMES, n, snapshot_time=1.7e9 + 60 * step,
                                   metric="app_language"))
    return out[::-1]


def test_error_and_width_against_a_direct_computation():
    history = _history(np.random.default_rng(1))
    truth = dict(zip(NAMES, TRUTH.tolist(), strict=True))
    ns, widths, errors = error_and_width([*history, history[0]], truth, ["en", "es"])  # a repeated n counts once
    assert ns.tolist() == [1_000, 4_000, 16_000]
    for n, width, error in zip(ns, widths, errors, strict=True):
        (entry,) = [h for h in history if h["n_reports"] == n]
        rows = {v["value"]: v for v in entry["values"]}
        assert width == pytest.approx(np.mean([rows[v]["high_95"] - rows[v]["low_95"] for v in ("en", "es")]))
        assert error == pytest.approx(max(abs(rows[v]["frequency"] - truth[v]) for v in NAMES))
    assert error_and_width(history, None, NAMES)[2] is None


def test_truth_frequencies_normalize_counts_in_the_published_order():
    assert truth_frequencies(np.array([2, 1, 1, 0]), NAMES) == {"en": 0.5, "es": 0.25, "zh": 0.25, "hi": 0.0}
    assert truth_frequencies(None, NAMES) is None
    assert truth_frequencies(np.array([1, 2]), NAMES) is None  # another shape: the registry changed


def test_metric_figure_as_svg_and_png(tmp_path):
    history = _history(np.random.default_rng(2))
    truth = dict(zip(NAMES, TRUTH.tolist(), strict=True))
    svg = plot_metric(tmp_path / "m.svg", history[0], history[1:], truth)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    for label in (TRUTH_LABEL, "estimate, 95% interval", "mean 95% interval width", "largest error", "1/√n",
                  "error and interval width against n", *NAMES):
        assert label in text, label
    png = plot_metric(tmp_path / "m.png", history[0], [], None)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plain = plot_metric(tmp_path / "plain.svg", history[0], history[1:], None).read_text()
    assert TRUTH_LABEL not in plain and "largest error" not in plain


def test_joint_figure_shows_the_table_with_intervals_and_the_test(tmp_path):
    table = np.array([[0.3, 0.1], [0.2, 0.4]])
    joint = {"association": "lang_by_os", "x": "lang", "y": "os", "window": "all", "n_reports": 5000,
             "rows": ["en", "Other"], "columns": ["ios", "Other"], "table": table.tolist(),
             "low_95": (table - 0.02).tolist(), "high_95": (table + 0.02).tolist(),
             "independence": {"method": "likelihood-ratio", "statistic": 812.5, "df": 1, "p_value": 1e-12}}
    older = {**joint, "n_reports": 1000, "low_95": (table - 0.05).tolist(), "high_95": (table + 0.05).tolist()}
    text = plot_joint(tmp_path / "j.svg", joint, [older]).read_text()
    for label in ("0.400", "[0.380, 0.420]", "812", "p = 1e-12", "lang_by_os", "ios", "Other",
                  "mean cell 95% interval width"):
        assert label in text, label


def test_the_joint_figure_marks_the_cells_not_identified_as_watch_does(tmp_path):
    from ldpstream.decoder.watch import render_joint

    table = np.array([[0.3, 0.1], [0.2, 0.4]])
    joint = {"association": "lang_by_os", "x": "lang", "y": "os", "window": "all", "n_reports": 5000,
             "snapshot_time": 0.0, "interval_method": "wald", "rows": ["en", "Other"], "columns": ["ios", "Other"],
             "table": table.tolist(), "low_95": (table - 0.02).tolist(), "high_95": (table + 0.02).tolist(),
             "identified": [[True, True], [True, False]], "identification": ["Other x Other rests on a model"],
             "independence": {"method": "likelihood-ratio", "statistic": 812.5, "df": 1, "p_value": 1e-12}}
    text = plot_joint(tmp_path / "j.svg", joint, []).read_text()
    assert "[0.380, 0.420]?" in text and "[0.280, 0.320]?" not in text  # only the Other x Other cell
    note = "? not identified, the interval is no promise: Other x Other rests on a model"
    assert note in text and note in render_joint(joint, now=0.0)
    assert "]?" not in plot_joint(tmp_path / "k.svg", {**joint, "identified": [[True] * 2] * 2}, []).read_text()


def test_other_formats_are_refused(tmp_path):
    history = _history(np.random.default_rng(3))
    with pytest.raises(ParameterError, match=r"\.png or \.svg"):
        plot_metric(tmp_path / "m.pdf", history[0], history[1:])


def test_simulate_and_tune_write_the_figure(tmp_path, capsys):
    out = tmp_path / "simulate.svg"
    assert main(["simulate", "--mechanism", "krr", "--epsilon", "2", "--support", "8", "--n", "20000",
                 "--trials", "1", "--json", "--plot", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["plot"] == str(out)
    text = out.read_text()
    assert TRUTH_LABEL in text and "largest error" in text and "s0" in text
    out = tmp_path / "tune.png"
    assert main(["tune", "--epsilon", "2", "--support", "16", "--n", "20000", "--trials", "0", "--closed",
                 "--plot", str(out)]) == 0
    assert f"figure: {out}" in capsys.readouterr().out
    assert out.read_bytes()[:4] == b"\x89PNG"
    # A wrong format is refused before any simulation runs.
    assert main(["simulate", "--mechanism", "krr", "--epsilon", "2", "--support", "8", "--n", "100",
                 "--plot", str(tmp_path / "x.jpg")]) == 1
    assert ".png or .svg" in capsys.readouterr().err
