"""``simulate`` and ``tune`` with the optimal mechanisms: the same JSON as every mechanism, the error
model's prediction of their ℓ2², and ``tune --loss l2sq`` choosing among all closed-alphabet mechanisms."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldpstream.cli.main import main
from ldpstream.estimators.direct import unary_expected_l2sq
from ldpstream.simulation.error_model import predict
from ldpstream.simulation.grid_search import ranked_predictions
from ldpstream.simulation.recommend import tune
from ldpstream.simulation.scenarios import build_setup


@pytest.mark.parametrize("extra", [
    ["--mechanism", "oue"], ["--mechanism", "ss"], ["--mechanism", "hr"],
    ["--mechanism", "ooue", "--k", "32", "--cohorts", "4"], ["--mechanism", "cms", "--k", "32", "--cohorts", "4"],
    ["--mechanism", "hcms", "--k", "32", "--cohorts", "4", "--closed"],
])
def test_simulate_prints_the_same_json_for_the_new_mechanisms(capsys, extra):
    base = ["simulate", "--epsilon", "2", "--support", "24", "--n", "20000", "--trials", "2", "--json"]
    assert main([*base, "--mechanism", "krr"]) == 0
    reference = json.loads(capsys.readouterr().out)
    assert main([*base, *extra]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out.keys() == reference.keys()
    assert out["losses"].keys() == reference["losses"].keys()
    assert out["parameters"]["mechanism"] == extra[1]
    assert out["coverage"] is not None and out["losses"]["empirical"]["l1"]["mean"] < 0.5


@pytest.mark.parametrize("name", ["ooue", "cms", "hcms"])
def test_hashed_new_mechanisms_without_k_and_cohorts_take_the_models_first_grid_point(capsys, name):
    argv = ["simulate", "--mechanism", name, "--epsilon", "1", "--support", "16", "--n", "20000", "--trials", "2",
            "--dist", "uniform", "--json"]
    assert main(argv) == 0
    params = json.loads(capsys.readouterr().out)["parameters"]
    first = ranked_predictions(name, 1.0, 16, 20_000, np.full(16, 1 / 16), False)[0]
    assert (params["k"], params["cohorts"], params.get("hashes")) == (first["k"], first["cohorts"], first.get("hashes"))
    if name == "cms":
        assert main([*argv, "--hashes", "2"]) == 1
        assert "hashes = 1" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["oue", "ss", "hr"])
def test_error_model_predicts_the_unary_risk(name):
    p = np.linspace(1, 0, 40) / np.linspace(1, 0, 40).sum()
    setup = build_setup(name, 1.5, 40)
    q_star, p_star = setup.mechanism.response_rates
    pred = predict(setup, p, 10_000, reference="true")
    assert pred["l2sq"] == pytest.approx(unary_expected_l2sq(p, 10_000, q_star, p_star), rel=1e-9)


def test_tune_l2sq_chooses_among_all_mechanisms_and_the_default_is_unchanged():
    p = 0.8 ** np.arange(64)
    p /= p.sum()
    res = tune(1.0, 64, 100_000, p, closed=True, trials=2, keep=1, loss="l2sq", decoder="unbiased")
    assert {a.mechanism for a in res.alternatives} == {
        "krr", "krappor", "oue", "ss", "hr", "orr", "orappor", "ooue", "cms", "hcms", "olh"}
    assert res.to_dict()["loss"] == "l2sq" and res.to_dict()["criterion"] == "l2sq"
    best = min(a.predicted for a in res.alternatives)
    assert res.recommended.predicted <= 1.01 * best
    default = tune(1.0, 64, 100_000, p, closed=False, trials=0)
    assert default.loss == "l1" and default.to_dict()["criterion"] == "l1_projected"
    with pytest.raises(Exception, match="loss"):
        tune(1.0, 64, 1000, p, loss="linf")
