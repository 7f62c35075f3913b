"""A small discovery end to end through the CLI (``ldpstream discover --simulate --json``): 10^5 clients, eight
strings of which four are strongly frequent, length 8, bigrams, total ε = 4.39 (fixed seed).

What must hold and why it is not hand-tuned: at n = 10^5 and ε/3 = 1.46 per report, the full-string
decode's standard error is ≈ 0.006 (printed in the JSON and checked below to be under 0.008), so the four
strings of frequency ≥ 0.15 sit ≥ 18 standard errors above 0 and every stage finds them with overwhelming
probability; the final test is Benjamini–Hochberg at 0.10 over the few candidates, so at most one false
string is the issue's acceptance rule."""

from __future__ import annotations

import json

import pytest

from ldpstream.cli import main

pytestmark = pytest.mark.statistical

STRINGS = ["google", "mail.com", "news", "wiki.org", "shop.io", "x-y/z", "tube", "a.b"]
WEIGHTS = [0.30, 0.25, 0.20, 0.15, 0.04, 0.03, 0.02, 0.01]


def test_small_population_recovers_the_frequent_strings(tmp_path, capsys):
    strings = tmp_path / "strings.txt"
    strings.write_text("\n".join(STRINGS) + "\n")
    weights = tmp_path / "weights.txt"
    weights.write_text("\n".join(map(str, WEIGHTS)) + "\n")
    rc = main(["discover", "--simulate", "--method", "ngram", "--strings", str(strings), "--dist", f"file:{weights}",
               "--n", "100000",
               "--epsilon", "4.39", "--seed", "11", "--length", "8", "--ngram", "2", "--json"])
    assert rc == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    for stage in ("ngrams", "pairs", "cliques", "final"):
        assert f"{stage}:" in captured.err  # per-stage times on stderr
    assert set(data["seconds"]) >= {"simulate", "ngrams", "pairs", "cliques", "final", "decode"}
    assert data["seconds"]["decode"] == pytest.approx(
        sum(data["seconds"][s] for s in ("ngrams", "pairs", "cliques", "final")))
    found = {d["string"]: d for d in data["discovered"]}
    assert set(STRINGS[:4]) <= set(found)
    assert data["false_positives"] <= 1
    assert data["true_positives"] == len(set(found) & set(STRINGS))
    for s, w in zip(STRINGS[:4], WEIGHTS[:4], strict=True):
        se = found[s]["std_error"]
        assert 0 < se < 0.008
        assert abs(found[s]["estimate"] - w) < 4 * se  # a 4-σ band: fails with probability < 1e-4 per string


def test_report_file_round_trip_decodes_like_the_simulation(tmp_path, capsys):
    strings = tmp_path / "strings.txt"
    strings.write_text("ab\nba\nabab\nbb\n")
    reports = tmp_path / "reports.npz"
    common = ["--method", "ngram", "--strings", str(strings), "--alphabet", "ab", "--length", "4", "--epsilon", "12",
              "--json"]
    assert main(["discover", "--simulate", "--n", "40000", "--seed", "3", "--save-reports", str(reports),
                 *common]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert main(["discover", "--reports", str(reports), *common]) == 0
    decoded = json.loads(capsys.readouterr().out)
    # the same draws (one batch, same seed) folded from the file: the same strings and estimates
    assert decoded["discovered"] == simulated["discovered"]
    assert decoded["true_positives"] == 4 and decoded["false_positives"] == 0
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    assert main(["discover", "--reports", str(bad)]) == 1
    assert "not a discovery report file" in capsys.readouterr().err
