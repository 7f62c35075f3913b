"""``ldpstream rappor decode-assoc`` end to end on association files made by our Google-compatible encoder
(:mod:`ldpstream.interop.rappor.assoc_simulation`): string × boolean and string × string, checked against
the truth and for Google's output form; plus the encoder's channel and the command's errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from ldpstream.cli import main
from ldpstream.interop.rappor.assoc_reports import read_assoc_reports
from ldpstream.interop.rappor.assoc_results import read_assoc_results
from ldpstream.interop.rappor.assoc_simulation import (
    AssocVariableSpec,
    assoc_client_secret,
    simulate_association,
    write_association_files,
)
from ldpstream.interop.rappor.params import ParamsFile
from ldpstream.mechanisms import hashing
from ldpstream.mechanisms.rappor import RapporClient

MASTER = bytes(range(32))
PARAMS = ParamsFile(k=32, h=2, m=32, p=0.25, q=0.75, f=0.5)
DOMAINS = ["google.com", "yahoo.com", "bing.com", "duck.com", "rare.org"]  # rare.org is not a candidate
CANDIDATES = [*DOMAINS[:4], 'q"q']  # q"q (Google's quoting test) is a candidate nobody holds
# [domain, (FALSE, TRUE)]: the share of TRUE differs by domain
JOINT_BOOL = np.array([[0.06, 0.30], [0.10, 0.10], [0.15, 0.05], [0.02, 0.10], [0.06, 0.06]])
COLORS = ["red", "green", "blue", "grey"]  # grey is not a candidate
JOINT_STRINGS = np.array([  # [domain, color]
    [0.20, 0.05, 0.04, 0.03],
    [0.03, 0.12, 0.02, 0.02],
    [0.02, 0.02, 0.14, 0.02],
    [0.04, 0.04, 0.04, 0.02],
    [0.06, 0.04, 0.03, 0.02],
])


def run(*argv: str) -> int:
    return main(["rappor", *argv])


def make_files(tmp_path, kind: str, n: int, seed: int):
    """Association files of ``n`` clients (``kind`` = "bool" or "strings") and the true value indices."""
    rng = np.random.default_rng(seed)
    domain = AssocVariableSpec("domain", "string", "m_params", PARAMS)
    if kind == "bool":
        second = AssocVariableSpec("flag..HTTPS", "boolean", "m_params", PARAMS)
        labels2, joint, cands = ["FALSE", "TRUE"], JOINT_BOOL, {"domain": CANDIDATES}
    else:
        color_params = ParamsFile(k=16, h=1, m=16, p=0.2, q=0.8, f=0.25)
        second = AssocVariableSpec("color", "string", "color_params", color_params)
        labels2, joint, cands = COLORS, JOINT_STRINGS, {"domain": CANDIDATES, "color": COLORS[:3]}
    sim = simulate_association(domain, DOMAINS, second, labels2, joint, n, rng, MASTER)
    paths = write_association_files(tmp_path, "m", [domain, second], sim.reports, cands)
    return paths, sim, second


def decode_args(paths, var2: str, out_dir, *extra: str) -> list[str]:
    args = ["decode-assoc", "--metric-name", "m", "--schema", str(paths["schema"]), "--reports",
            str(paths["reports"]), "--params-dir", str(paths["params_dir"]), "--var1", "domain", "--var2", var2,
            "--map1", str(paths["map:domain"]), "--output-dir", str(out_dir)]
    if var2 == "flag..HTTPS":
        args.append("--create-bool-map")
    else:
        args += ["--map2", str(paths[f"map:{var2}"])]
    return args + list(extra)


# --- the encoder --------------------------------------------------------------------------------------------


def test_encoder_channel_is_raports(tmp_path):
    """Each reported bit is 1 w.p. q* where the value's Bloom filter (a boolean: the value) sets it and p*
    elsewhere; checked on all reports against binomial bands of 4 standard errors."""
    n = 20_000
    paths, sim, _ = make_files(tmp_path, "bool", n, seed=1)
    r = read_assoc_reports(paths["reports"], {"domain": 32, "flag..HTTPS": 1})
    assert r.cohorts.max() < PARAMS.m and len(r) == n
    qs, ps = PARAMS.q_star, PARAMS.p_star
    flag = r.variables["flag..HTTPS"][:, 0]
    for v, rate in ((0, ps), (1, qs)):
        sel = sim.index2 == v
        assert abs(flag[sel].mean() - rate) < 4 * np.sqrt(rate * (1 - rate) / sel.sum())
    table = hashing.bloom_table(DOMAINS, PARAMS.m, PARAMS.h, PARAMS.k)  # (C, S, h)
    true = np.zeros((n, PARAMS.k), dtype=bool)
    true[np.arange(n)[:, None], table[r.cohorts, sim.index1]] = True
    bits = r.variables["domain"].astype(bool)
    for mask, rate in ((true, qs), (~true, ps)):
        count = mask.sum()
        assert abs(bits[mask].mean() - rate) < 4 * np.sqrt(rate * (1 - rate) / count)


def test_encoder_prr_is_the_clients_permanent_response():
    """A client's PRR is Google's HMAC construction under its per-variable secret: the same whatever row."""
    spec = AssocVariableSpec("domain", "string", "m_params", ParamsFile(8, 1, 4, 0.0, 1.0, 0.5))
    from ldpstream.interop.rappor.assoc_simulation import encode_variable

    cohorts = np.array([2, 2, 2])
    got = encode_variable(spec, ["c0", "c0", "c1"], cohorts, ["x", "x", "x"], MASTER, np.random.default_rng(0))
    agent = RapporClient(spec.encoder_params(), assoc_client_secret(MASTER, "domain", "c0"), 2)
    want = agent.prr(agent.bloom("x"))  # p = 0, q = 1: the IRR is the PRR
    assert int(sum(int(b) << i for i, b in enumerate(got[0]))) == want
    assert np.array_equal(got[0], got[1])
    assert assoc_client_secret(MASTER, "domain", "c0") != assoc_client_secret(MASTER, "flag", "c0")


# --- decode-assoc ------------------------------------------------------------------------------------------


def truth_table(sim, labels1, labels2, names1, names2) -> np.ndarray:
    """The true joint shares of the output's cells; values outside the candidates count as Other."""
    def index(values, names, labels):
        pos = {x: i for i, x in enumerate(labels)}
        other = pos.get("Other", -1)
        return np.array([pos.get(names[v], other) for v in values.tolist()])

    i1, i2 = index(sim.index1, names1, labels1), index(sim.index2, names2, labels2)
    table = np.zeros((len(labels1), len(labels2)))
    np.add.at(table, (i1, i2), 1.0)
    return table / len(sim.index1)


def read_table(path):
    res = read_assoc_results(path)
    labels1 = list(dict.fromkeys(res["var1_values"]))
    labels2 = list(dict.fromkeys(res["var2_values"]))
    shape = (len(labels1), len(labels2))
    return res, labels1, labels2, {c: res[c].reshape(shape) for c in ("proportion", "std_error", "low_95", "high_95")}


@pytest.mark.parametrize("kind", ["bool", "strings"])
def test_decode_assoc_recovers_the_joint(tmp_path, capsys, kind):
    """40,000 clients: every cell's 95% interval, Bonferroni-widened over the cells (a family-wise level of
    5%: z = Φ⁻¹(1 − 0.025/cells)), holds the true share; the table sums to 1; the metrics say what ran."""
    paths, sim, second = make_files(tmp_path, kind, 40_000, seed=11)
    out = tmp_path / "out"
    out.mkdir()
    assert run(*decode_args(paths, second.var, out)) == 0
    res, labels1, labels2, t = read_table(out / "assoc-results.csv")
    assert res["var1"] == "domain" and res["var2"] == second.var
    assert labels1[-1] == "Other" and sorted(labels1[:-1]) == sorted(DOMAINS[:4])  # detected: not q"q
    if kind == "bool":
        assert labels2 == ["TRUE", "FALSE"]
        truth = truth_table(sim, labels1, labels2, DOMAINS, ["FALSE", "TRUE"])
    else:
        assert sorted(labels2[:-1]) == sorted(COLORS[:3]) and labels2[-1] == "Other"
        truth = truth_table(sim, labels1, labels2, DOMAINS, COLORS)
    assert t["proportion"].sum() == pytest.approx(1.0, abs=1e-6)
    z = stats.norm.ppf(1 - 0.025 / truth.size)
    se = t["std_error"]
    assert np.all(np.abs(t["proportion"] - truth) <= z * se), (t["proportion"] - truth) / se
    assert np.all((t["low_95"] <= t["proportion"]) & (t["proportion"] <= t["high_95"]))
    metrics = json.loads((out / "assoc-metrics.json").read_text())
    assert metrics["num_reports"] == 40_000 and metrics["num_em_iters"] >= 1
    assert metrics["estimate_dimensions"] == [len(labels2), len(labels1)]
    assert metrics["sum_estimates"] == pytest.approx(1.0, abs=1e-6)
    assert "EM iterations" in capsys.readouterr().err


def test_decode_assoc_google_output_form(tmp_path):
    """Header and cell order as decode_assoc.R writes them: "<var2>","<var1>","proportion" (+ ours), var2
    fastest, booleans "TRUE" then "FALSE", values quoted, numbers bare."""
    paths, _, second = make_files(tmp_path, "bool", 20_000, seed=5)
    assert run(*decode_args(paths, second.var, tmp_path, "--all-candidates")) == 0
    lines = (tmp_path / "assoc-results.csv").read_text().splitlines()
    assert lines[0] == '"flag..HTTPS","domain","proportion","std_error","low_95","high_95"'
    assert lines[1].startswith('"TRUE","') and lines[2].startswith('"FALSE","')
    assert lines[1].split(",")[1] == lines[2].split(",")[1]
    assert lines[-1].startswith('"FALSE","Other",')
    assert any('"q""q"' in line for line in lines)  # --all-candidates: every map string, quoted as R does
    assert len(lines) == 1 + 2 * (len(CANDIDATES) + 1)


def test_decode_assoc_bad_rows_and_sample(tmp_path):
    """--remove-bad-rows drops rows with an empty value (Google's bad rows) and says so in the metrics;
    --reports-sample-size decodes that many reports."""
    paths, _, second = make_files(tmp_path, "bool", 6_000, seed=3)
    with open(paths["reports"], "a") as f:
        f.write("c0,0,10101010101010101010101010101010,\nc0,0,,0\n")  # bin/test.sh's bad rows
    args = decode_args(paths, second.var, tmp_path, "--all-candidates", "--seed", "4")
    assert run(*args) == 1
    assert run(*args, "--remove-bad-rows", "--reports-sample-size", "5000") == 0
    metrics = json.loads((tmp_path / "assoc-metrics.json").read_text())
    assert metrics["removed_rows"] == 2 and metrics["num_reports"] == 5000
    assert metrics["reports_sample_size"] == 5000


# --- errors -------------------------------------------------------------------------------------------------


def test_decode_assoc_errors(tmp_path, capsys):
    paths, _, second = make_files(tmp_path, "bool", 200, seed=2)
    args = decode_args(paths, second.var, tmp_path)

    def fails(argv, message):
        assert run(*argv) == 1
        err = capsys.readouterr().err
        assert message in err, err

    fails([a for a in args if a != "--create-bool-map"], "pass --create-bool-map")
    swapped = [("flag..HTTPS" if a == "domain" else "domain" if a == "flag..HTTPS" else a) for a in args]
    fails(swapped, "variable 1 should be a string (flag..HTTPS is of type boolean)")
    fails([("nope" if a == "flag..HTTPS" else a) for a in args], "couldn't find metric 'm', var 'nope'")
    i = args.index("--map1")
    fails(args[:i] + args[i + 2:], "--map1 must be provided")
    fails([*args, "--top", "0"], "--top must be >= 1")
    (tmp_path / "other_map.csv").write_text((tmp_path / "domain_map.csv").read_text().replace("google.com", "Other"))
    fails([*args[:i + 1], str(tmp_path / "other_map.csv"), *args[i + 2:], "--all-candidates"],
          "a candidate is named 'Other'")
    (tmp_path / "rappor-vars.csv").write_text("metric, var, var_type, params\nm,domain,string,m_params\n"
                                            "m,flag..HTTPS,boolean,missing_params\n")
    fails(args, "missing_params.csv' does not exist")
    (tmp_path / "rappor-vars.csv").write_text("metric, var, var_type, params\nm,domain,string,m_params\n"
                                            "m,flag..HTTPS,bool,m_params\n")
    fails(args, "variable 2 should be a boolean or a string (flag..HTTPS is of type bool)")
    write_association_files(tmp_path, "m", [AssocVariableSpec("domain", "string", "m_params", PARAMS), second],
                            read_assoc_reports(paths["reports"], {"domain": 32, "flag..HTTPS": 1}),
                            {"domain": CANDIDATES})
    with open(paths["reports"], "a") as f:
        f.write("c9,3,0101,1\n")
    fails(args, "reports.csv:202: column 'domain'")
    fails([*args, "--max-em-iters", "0"], "--max-em-iters must be >= 1")
    j = args.index("--output-dir")
    fails([*args[:j + 1], str(tmp_path / "nope"), *args[j + 2:]], "is not a directory")


def complete_map_files(tmp_path, n: int, seed: int):
    """Domain × boolean files of ``n`` clients whose every domain is in the map (no true Other)."""
    rng = np.random.default_rng(seed)
    domain = AssocVariableSpec("domain", "string", "m_params", PARAMS)
    second = AssocVariableSpec("flag..HTTPS", "boolean", "m_params", PARAMS)
    joint = JOINT_BOOL[:4] / JOINT_BOOL[:4].sum()
    sim = simulate_association(domain, DOMAINS[:4], second, ["FALSE", "TRUE"], joint, n, rng, MASTER)
    paths = write_association_files(tmp_path, "m", [domain, second], sim.reports, {"domain": DOMAINS[:4]})
    return paths, sim, second


def per_report_likelihoods(paths, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """association.R's GetCondProb written out per report for a domain × boolean table without Other: each
    report's probability under each domain ``(n, S)`` and under FALSE, TRUE ``(n, 2)``."""
    r = read_assoc_reports(paths["reports"], {"domain": PARAMS.k, "flag..HTTPS": 1})
    qs, ps = PARAMS.q_star, PARAMS.p_star
    bloom = hashing.bloom_table(labels, PARAMS.m, PARAMS.h, PARAMS.k)[r.cohorts]  # (n, S, h)
    sets = np.zeros((len(r), len(labels), PARAMS.k), dtype=bool)
    sets[np.arange(len(r))[:, None, None], np.arange(len(labels))[None, :, None], bloom] = True
    rate = np.where(sets, qs, ps)
    c1 = np.prod(np.where(r.variables["domain"].astype(bool)[:, None, :], rate, 1 - rate), axis=2)
    flag = r.variables["flag..HTTPS"][:, 0].astype(bool)[:, None]
    c2 = np.where(flag, np.array([ps, qs]), np.array([1 - ps, 1 - qs]))
    return c1, c2


def test_decode_assoc_default_is_googles_plain_em_and_squarem_its_maximum(tmp_path):
    """Every domain in the map, no true Other: the default ``--em plain`` is association.R's EM from the uniform
    table (the per-report reference after as many iterations agrees to 1e-6 per cell) and says whether it
    stopped short (``point`` ``early-stopped-em``); ``--em squarem`` reaches the maximum (a log-likelihood at least
    the plain iterate's under the same model, ``point`` ``maximum-likelihood``)."""
    paths, _sim, second = complete_map_files(tmp_path, 20_000, seed=23)
    tables = {}
    for em in ("plain", "squarem"):
        out = tmp_path / em
        out.mkdir()
        assert run(*decode_args(paths, second.var, out, "--em", em, "--max-em-iters", "300")) == 0
        _res, labels1, labels2, t = read_table(out / "assoc-results.csv")
        metrics = json.loads((out / "assoc-metrics.json").read_text())
        assert "Other" not in labels1 and labels2 == ["TRUE", "FALSE"]  # Google's column order
        tables[em] = (t["proportion"][:, ::-1], metrics)
    plain, squarem = tables["plain"], tables["squarem"]
    assert "plain EM" in plain[1]["stopping_rule"] and "SQUAREM" in squarem[1]["stopping_rule"]
    assert squarem[1]["converged"] and squarem[1]["point"] == "maximum-likelihood"
    assert plain[1]["point"] == ("maximum-likelihood" if plain[1]["converged"] else "early-stopped-em")
    c1, c2 = per_report_likelihoods(paths, list(labels1))
    p = np.full((len(labels1), 2), 1 / (2 * len(labels1)))
    for _ in range(plain[1]["num_em_iters"]):  # association.R's UpdatePij from the uniform table
        w = c1[:, :, None] * c2[:, None, :] * p
        p = (w / w.sum(axis=(1, 2), keepdims=True)).mean(axis=0)
    np.testing.assert_allclose(plain[0], p, atol=1e-6)

    def loglik(table: np.ndarray) -> float:
        return float(np.sum(np.log(np.einsum("ui,uj,ij->u", c1, c2, table))))

    assert loglik(squarem[0]) >= loglik(plain[0]) - 1e-6


def test_decode_assoc_keeps_other_only_when_the_data_ask_for_it(tmp_path):
    """Every domain in the map and held (no true Other, the shape of Google's association test): the one-sided
    test of mass outside the candidates does not reject, so the table has no Other row and covers the truth;
    --keep-other restores it. With rare.org held but off the map (6% of clients), Other is kept."""
    paths, sim, second = complete_map_files(tmp_path, 50_000, seed=21)
    out = tmp_path / "out"
    out.mkdir()
    assert run(*decode_args(paths, second.var, out)) == 0
    _res, labels1, labels2, t = read_table(out / "assoc-results.csv")
    metrics = json.loads((out / "assoc-metrics.json").read_text())
    test = metrics["other_test"]["domain"]
    assert "Other" not in labels1 and not test["kept"] and test["p_value"] >= 0.05
    assert metrics["other_test"]["flag..HTTPS"] is None  # a boolean has none
    truth = truth_table(sim, labels1, labels2, DOMAINS[:4], ["FALSE", "TRUE"])
    z = stats.norm.ppf(1 - 0.025 / truth.size)
    assert np.all(np.abs(t["proportion"] - truth) <= z * t["std_error"])
    assert run(*decode_args(paths, second.var, out, "--keep-other")) == 0
    _res, labels1, _labels2, _t = read_table(out / "assoc-results.csv")
    kept = json.loads((out / "assoc-metrics.json").read_text())["other_test"]["domain"]
    assert labels1[-1] == "Other" and kept is None
    (tmp_path / "held").mkdir()
    paths, _sim, second = make_files(tmp_path / "held", "bool", 50_000, seed=22)
    assert run(*decode_args(paths, second.var, out)) == 0
    metrics = json.loads((out / "assoc-metrics.json").read_text())
    assert metrics["other_test"]["domain"]["kept"] and metrics["other_test"]["domain"]["z"] > 3
