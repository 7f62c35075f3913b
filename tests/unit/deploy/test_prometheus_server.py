"""The local Prometheus helper (:mod:`ldpstream.deploy.prometheus_server`) without a server: the PromQL names
it reads against a plain regular expression on every query of the dashboard and the alert rules, the
configuration it writes checked by ``promtool``, and its command line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ldpstream.deploy.prometheus_server import main, port_free, promql_metric_names, scrape_config

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[3]


def _exprs() -> list[str]:
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "ldpstream.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    return exprs + [r["expr"] for g in rules["groups"] for r in g["rules"]]


def test_names_agree_with_a_plain_pattern_on_every_project_query():
    exprs = _exprs()
    assert len(exprs) > 40
    for expr in exprs:
        names = promql_metric_names(expr)
        expected = set(re.findall(r"\bldpstream_[a-z0-9_]+", expr)) | ({"up"} if re.search(r"\bup\{", expr) else set())
        assert names == expected, expr


@pytest.mark.parametrize(("expr", "names"), [
    ('rate(a_total{x="by (y)", z=~"up|down"}[5m] offset 1h)', {"a_total"}),
    ("sum without (instance) (b) and on (job) c unless ignoring (le) d", {"b", "c", "d"}),
    ('{__name__="e_seconds", job="j"} > bool 1e3', {"e_seconds"}),
    ("histogram_quantile(0.9, sum by (le) (rate(f_bucket[1m]))) * 2 - g:recorded:rate5m", {"f_bucket",
                                                                                           "g:recorded:rate5m"}),
    ("vector(1) + scalar(time())", set()),
])
def test_names_of_tricky_expressions(expr, names):
    assert promql_metric_names(expr) == names


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not on PATH (Debian package prometheus)")
def test_the_generated_configuration_passes_promtool(tmp_path):
    rules = ROOT / "deploy" / "prometheus" / "alerts.yml"
    config = scrape_config({"ldpstream-consume": ["127.0.0.1:9464", "127.0.0.1:9474"],
                            "ldpstream-decode": ["127.0.0.1:9465"]}, 0.5, [rules])
    assert config["global"]["scrape_interval"] == "500ms"
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(config))
    result = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_command_line_refuses_a_bad_target_and_a_busy_port(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--target", "no-equals-sign"])
    assert exc.value.code == 2 and "JOB=HOST:PORT" in capsys.readouterr().err
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not port_free(port)
        if shutil.which("prometheus"):
            assert main(["--port", str(port)]) == 1
            assert "in use" in capsys.readouterr().err
