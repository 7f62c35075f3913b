"""Smoke and consistency tests of ``ldpstream simulate`` and ``ldpstream tune`` through ``cli.main``."""

from __future__ import annotations

import json
import math

import pytest

from ldpstream.cli import main


def test_simulate_json_smoke(capsys):
    rc = main([
        "simulate", "--mechanism", "orr", "--epsilon", "2", "--k", "8", "--cohorts", "16", "--support", "32",
        "--n", "100000", "--dist", "geometric", "--decoder", "project", "--trials", "4", "--seed", "3", "--json",
    ])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object on one line
    data = json.loads(out)
    params = data["parameters"]
    assert params["mechanism"] == "orr" and params["k"] == 8 and params["cohorts"] == 16
    assert params["epsilon"] == 2.0 and params["support"] == 32 and params["closed"] is False
    assert params["n"] == 100000 and params["trials"] == 4 and params["decoder"] == "project"
    for ref in ("empirical", "true"):
        for loss in ("l1", "l2sq", "linf", "tv", "hellinger"):
            stats = data["losses"][ref][loss]
            assert set(stats) == {"mean", "median"}
            assert 0 <= stats["median"] < math.inf
        assert data["losses"][ref]["tv"]["mean"] == pytest.approx(data["losses"][ref]["l1"]["mean"] / 2)
    # a projected estimate is a distribution: ℓ1 at most 2
    assert data["losses"]["empirical"]["l1"]["median"] <= 2
    assert data["seconds"] > 0
    # the coverage of the published intervals: fractions, the worst heavy value at most the average
    assert 0 <= data["coverage_min"] <= 1 and 0 <= data["coverage"] <= 1
    assert data["coverage"] * 4 == pytest.approx(round(data["coverage"] * 4 * 32) / 32)  # whole (trial, value) pairs


def test_simulate_is_reproducible(capsys):
    argv = ["simulate", "--mechanism", "krappor", "--epsilon", "1", "--support", "16", "--n", "5000",
            "--trials", "3", "--seed", "11", "--json", "--closed"]
    main(argv)
    a = json.loads(capsys.readouterr().out)
    main(argv)
    b = json.loads(capsys.readouterr().out)
    assert a["losses"] == b["losses"]


@pytest.mark.parametrize(
    "extra",
    [
        ["--mechanism", "krr", "--epsilon", "3"],
        ["--mechanism", "orappor", "--epsilon", "3", "--k", "32", "--cohorts", "2", "--hashes", "2", "--closed"],
        ["--mechanism", "rappor", "--p", "0.25", "--q", "0.75", "--f", "0.5", "--k", "32", "--cohorts", "4"],
        ["--mechanism", "orr", "--epsilon", "3", "--closed", "--decoder", "mle", "--k", "8", "--cohorts", "4"],
    ],
)
def test_simulate_table_output(capsys, extra):
    rc = main(["simulate", *extra, "--support", "20", "--n", "20000", "--trials", "2", "--dist", "zipf:1.1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "l1" in out and "hellinger" in out and "per trial" in out


def test_simulate_parameter_errors(capsys):
    assert main(["simulate", "--mechanism", "krr", "--epsilon", "1", "--k", "8", "--support", "16", "--n", "10"]) == 1
    assert "k must equal the support" in capsys.readouterr().err
    argv = ["simulate", "--mechanism", "rappor", "--epsilon", "1", "--closed", "--support", "16", "--n", "10"]
    assert main(argv) == 1
    assert "no closed alphabet" in capsys.readouterr().err
    assert main(["simulate", "--mechanism", "krr", "--epsilon", "1", "--support", "16", "--n", "10",
                 "--dist", "nope"]) == 1
    assert "unknown distribution" in capsys.readouterr().err
    assert main(["simulate", "--mechanism", "krr", "--support", "16", "--n", "10"]) == 1
    assert "--epsilon is required" in capsys.readouterr().err


def test_tune_smoke(capsys):
    rc = main(["tune", "--epsilon", "2", "--support", "32", "--n", "100000", "--closed", "--trials", "2",
               "--keep", "2"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "recommended (*)" in out and "model ℓ1" in out and "projected estimate" in out
    marked = [line for line in out.splitlines() if line.startswith("* ")]
    assert len(marked) == 1
    for name in ("krr", "krappor", "orr", "orappor"):
        assert f" {name} " in out


def test_tune_json(capsys):
    assert main(["tune", "--epsilon", "4", "--support", "16", "--n", "50000", "--trials", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    alts = data["alternatives"]
    assert {a["mechanism"] for a in alts} == {"orr", "orappor", "ooue", "cms", "hcms", "olh"}  # open: hashed only
    assert sum(a["recommended"] for a in alts) == 1
    assert data["criterion"] == "l1_projected" and data["reference"] == "empirical"
    rec = next(a for a in alts if a["recommended"])
    assert data["recommended"] == rec
    # model first: the recommendation is within 1% of the best prediction unless simulation clearly won
    best_pred = min(a["predicted"] for a in alts)
    if rec["predicted"] > best_pred * 1.01:
        assert rec["simulated_mean"] < min(a["simulated_mean"] for a in alts if a["predicted"] <= best_pred * 1.01)
    for a in alts:
        assert a["simulated_se"] > 0 and a["predicted_l1_projected"] <= a["predicted_l1"] + 1e-12


def test_tune_model_only_and_reference(capsys):
    argv = ["tune", "--epsilon", "1", "--support", "16", "--n", "50000", "--closed", "--trials", "0",
            "--reference", "true", "--decoder", "ls", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["criterion"] == "l1" and data["reference"] == "true" and data["trials"] == 0
    assert all(a["simulated_l1"] is None for a in data["alternatives"])
    assert all(a["predicted"] == a["predicted_l1"] for a in data["alternatives"])
    assert main(["tune", "--epsilon", "1", "--support", "16", "--n", "100", "--trials", "-1"]) == 1
    assert "--trials must be in 0..100,000" in capsys.readouterr().err


def test_simulate_measures_the_detect_decoder_of_hashed_bit_mechanisms_only(capsys):
    """``--decoder detect`` runs the live decoder's detection (screen, refit, tests) and reports the coverage
    of the intervals it publishes; a mechanism it cannot decode is refused with the reason."""
    argv = ["simulate", "--mechanism", "orappor", "--epsilon", "2", "--k", "32", "--hashes", "2", "--cohorts", "8",
            "--support", "16", "--n", "20000", "--trials", "2", "--decoder", "detect", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parameters"]["decoder"] == "detect" and 0 <= data["coverage"] <= 1
    assert main(["simulate", "--mechanism", "krr", "--epsilon", "1", "--support", "16", "--n", "100",
                 "--decoder", "detect"]) == 1
    assert "decoder 'detect' decodes hashed bit sketches" in capsys.readouterr().err


def test_simulate_with_heavy_strings_unlisted_and_decoys_listed(capsys):
    """``--unlisted K --decoys N``: the K most frequent strings off the list and N absent ones on it; the JSON
    gives coverage of the listed candidates and detect's detections, the false ones among them (the decoys
    are the only candidates no client holds), and the options. Checked against the decodes it implies."""
    args = ["simulate", "--mechanism", "rappor", "--p", "0.25", "--q", "0.75", "--f", "0.5", "--k", "64",
            "--hashes", "2", "--cohorts", "16", "--support", "40", "--dist", "zipf:1.2", "--n", "200000",
            "--trials", "3", "--seed", "4", "--json"]
    assert main([*args, "--decoder", "detect", "--unlisted", "3", "--decoys", "40"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parameters"]["unlisted"] == 3 and data["parameters"]["decoys"] == 40
    assert data["parameters"]["support"] == 80  # the strings clients hold and the decoys: one hash table
    assert 0 <= data["false_detections"] <= data["detections"] <= 77
    # coverage over the 77 listed candidates of 3 trials: whole (trial, candidate) pairs
    assert data["coverage"] * 3 * 77 == pytest.approx(round(data["coverage"] * 3 * 77))
    assert main([*args, "--decoder", "ls"]) == 0
    complete = json.loads(capsys.readouterr().out)
    assert complete["detections"] is None and complete["parameters"]["unlisted"] == 0


def test_simulate_refuses_a_wrong_list_where_there_is_no_list(capsys):
    base = ["simulate", "--epsilon", "2", "--support", "16", "--n", "1000", "--trials", "1"]
    assert main([*base, "--mechanism", "krr", "--unlisted", "2"]) == 1
    assert "hashed mechanism on an open alphabet" in capsys.readouterr().err
    assert main([*base, "--mechanism", "orr", "--k", "8", "--cohorts", "4", "--unlisted", "16"]) == 1
    assert "--unlisted must be in 0..15" in capsys.readouterr().err


def test_simulate_a_window_over_a_panel_whose_values_change_halfway(capsys):
    """``--buckets B --change X``: windows of B buckets over one memoized panel, a share X changing value halfway;
    the JSON keeps the options and the coverage of the window's distribution (whole (trial, value) pairs)."""
    args = ["simulate", "--mechanism", "krr", "--k", "16", "--epsilon", "2", "--support", "16", "--n", "5000",
            "--trials", "4", "--seed", "3", "--json", "--buckets", "8", "--change", "0.3"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parameters"]["buckets"] == 8 and data["parameters"]["change"] == 0.3
    assert data["coverage"] * 4 * 16 == pytest.approx(round(data["coverage"] * 4 * 16))
    assert data["detections"] is None
    assert main(["simulate", "--mechanism", "rappor", "--p", "0.25", "--q", "0.75", "--f", "0.5", "--k", "32",
                 "--hashes", "2", "--cohorts", "8", "--support", "16", "--n", "5000", "--trials", "2", "--json",
                 "--buckets", "4", "--change", "0.5", "--decoder", "detect"]) == 0
    assert json.loads(capsys.readouterr().out)["coverage"] is not None
    assert main([*args[:-4], "--buckets", "8", "--unlisted", "2"]) == 1
    assert "without --unlisted" in capsys.readouterr().err
    assert main([*args[:-4], "--buckets", "2", "--change", "1.5"]) == 1
    assert "--change in 0..1" in capsys.readouterr().err
