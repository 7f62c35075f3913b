"""The monitoring path end to end: a real Prometheus server (Debian's ``prometheus``, a local process with a
generated configuration, :mod:`ldpstream.deploy.prometheus_server`) scrapes a running ``ldpstream consume``
and ``ldpstream decode`` every second, with the project's alert rules loaded.

Checked through Prometheus's HTTP API, against what Redis holds:

- the applied-reports counter equals the reports Redis counted, exactly;
- the ingest rate ``rate(ldpstream_reports_applied_total[w])`` over a window that holds every report: Prometheus
  extrapolates a counter's increase past its first and last samples (at most 1.1 average scrape intervals at
  each end, never below the counter's zero, which the consumer exports before its first report), so
  ``N ≤ rate·w ≤ N·(t_last − t_first + 1.1·Δ)/(t_last − t_first)`` with Δ the average interval between the
  window's samples, all read from the raw samples Prometheus holds;
- the estimate gauges of every value (frequency, 95% interval, reports) equal the estimate the decoder
  published to Redis;
- a discovery metric (strings without a dictionary, tiny, so the live discovery takes a fraction of a second)
  exports its dictionary under the ``ldpstream_dictionary_*`` names, its failure counter at 0 from the start and
  no marginal failure counter for it or its internal n-gram metrics;
- every metric name that the Grafana dashboard and the alert rules query (parsed from their PromQL) is one
  Prometheus scraped from the two processes, every dashboard query evaluates on the live data to a non-empty
  result, and every alert rule evaluates without error and is not firing on a healthy pipeline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from ldpstream.cli import main
from ldpstream.deploy.prometheus_server import PrometheusServer, free_port, names_in
from ldpstream.store import RedisSketchStore
from tests.integration.helpers import wait_for, write_registry

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.pipelines,
              pytest.mark.skipif(shutil.which("prometheus") is None and not os.environ.get("CI"),
                                 reason="Debian's prometheus is not installed (.ci/run installs it)")]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "ldpstream.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
LABELS = ["en", "es", "zh", "hi", "ar", "pt", "bn", "ru"]
OSES = ["android", "ios", "web", "tv"]
PAGES = [f"https://example.org/page/{i}" for i in range(12)]
METRICS = {
    "app_language": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 2.0, "labels": LABELS, "windows": ["all"]},
    "home_page": {"id": 2, "mechanism": "orr", "k": 8, "cohorts": 8, "epsilon": 2.0, "estimator": "ls",
                  "candidates": PAGES, "windows": ["all"]},
    "os_name": {"id": 3, "mechanism": "krr", "k": 4, "epsilon": 3.0, "labels": OSES, "windows": ["all"]},
    "font_size": {"id": 4, "mechanism": "krr", "k": 4, "epsilon": 3.0, "windows": ["all"]},
}
#: A small discovery metric: the dashboard's dictionary panels and the dictionary alert query its series.
DISCOVERY = {"word": {"id": 40, "windows": ["all"], "retention": "2d", "discovery": {
    "epsilon": 12.0, "length": 4, "ngram": 2, "alphabet": "ab", "full_bits": 32, "ngram_bits": 32, "cohorts": 8}}}
WORDS = ["ab", "ba", "abab"]
ASSOCIATIONS = {"os_by_font": {"id": 1, "metrics": ["os_name", "font_size"], "windows": ["all"], "candidates": 2,
                              "retention": "30d"}}
CLIENTS = 20_000
SCRAPE = 1.0


def _dashboard_exprs(substitutions: dict[str, str]) -> list[tuple[str, str]]:
    """(where, expression) of every dashboard panel target and template variable, variables substituted."""
    dashboard = json.loads(DASHBOARD.read_text())
    found: list[tuple[str, str]] = []
    panels = [p for top in dashboard["panels"] for p in (top, *top.get("panels", []))]
    for panel in panels:
        for target in panel.get("targets", []):
            if target.get("expr"):
                found.append((f"panel {panel['title']!r}", target["expr"]))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found.append((f"variable {var['name']}", query.removeprefix("label_values(").rsplit(",", 1)[0]))
    out = []
    for where, expr in found:
        for name, value in substitutions.items():
            expr = expr.replace(name, value)
        assert "$" not in expr, f"{where}: unresolved variable in {expr}"
        out.append((where, expr))
    return out


def _alert_rules() -> list[dict]:
    yaml = pytest.importorskip("yaml")
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "ldpstream", *argv], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"})


def test_a_real_prometheus_scrapes_the_consumer_and_the_decoder(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path, capsys):
    topic = fresh_topic(partitions=2)
    dead_letter_topic = fresh_topic(partitions=1, stem="dlq")
    registry = str(write_registry(tmp_path / "metrics.toml", topic, {**METRICS, **DISCOVERY}, ASSOCIATIONS))
    words = tmp_path / "words.txt"
    words.write_text("\n".join(WORDS) + "\n")
    services = ["--kafka", kafka_bootstrap, "--redis", redis_url, "--prefix", key_prefix, "--registry", registry]
    consume_port, decode_port = free_port(), free_port()
    processes = [
        _spawn(["consume", *services, "--group", f"g-{key_prefix}", "--dead-letter-topic", dead_letter_topic,
                "--metrics-port", str(consume_port)], tmp_path / "consume.log"),
        _spawn(["decode", *services, "--interval", "1", "--no-kafka", "--metrics-port", str(decode_port)],
               tmp_path / "decode.log"),
    ]
    store = RedisSketchStore(redis.Redis.from_url(redis_url), prefix=key_prefix)
    jobs = {"ldpstream-consume": [f"127.0.0.1:{consume_port}"], "ldpstream-decode": [f"127.0.0.1:{decode_port}"]}
    try:
        with PrometheusServer(tmp_path / "prometheus", jobs, scrape_interval=SCRAPE, rule_files=[ALERTS]) as prom:
            applied = 'sum(ldpstream_reports_applied_total{metric="app_language"})'

            def up() -> bool:
                exited = [p.args for p in processes if p.poll() is not None]
                assert not exited, f"exited: {exited}"
                return prom.targets_up() == {"ldpstream-consume": True, "ldpstream-decode": True}

            # Both processes up and scraped; the counter exported at 0 before the first report.
            wait_for(up, 60,
                     "both targets up in Prometheus", interval=0.5)
            wait_for(lambda: prom.value(applied) == 0.0, 30, "the applied counter at 0", interval=0.5)
            # The failure counters at 0 before any pass, each under the name its decode counts in.
            failures = prom.query("ldpstream_dictionary_decode_failures_total")
            assert [(s["metric"]["metric"], s["value"][1]) for s in failures] == [("word", "0")]
            marginal = {s["metric"]["metric"] for s in prom.query("ldpstream_decode_failures_total")}
            assert marginal == set(METRICS)  # not word, nor word.ngram0/1 (decoded with it, never as marginals)
            before = time.time()

            def produce(name: str, *extra: str) -> int:
                capsys.readouterr()
                assert main(["produce", name, "--kafka", kafka_bootstrap, "--registry", registry, "--clients",
                             str(CLIENTS), "--seed", "5", "--per-message", "10", "--json", "--no-truth",
                             *extra]) == 0
                out = json.loads(capsys.readouterr().out)
                return int(out.get("reports_acked", out.get("records_acked")))

            produced = {name: produce(name) for name in ("app_language", "home_page", "os_by_font")}
            produced["word"] = produce("word", "--strings", str(words))
            assert produced == dict.fromkeys(produced, CLIENTS)

            def redis_applied(metric: str) -> int:
                return store.stats(topic, range(2)).get(f"applied:{metric}", 0)

            wait_for(lambda: all(redis_applied(m) == CLIENTS for m in [*METRICS, *DISCOVERY]), 120,
                     "Redis to count every report", interval=0.5)
            counted = redis_applied("app_language")
            # The counter Prometheus scraped equals Redis's count, exactly.
            wait_for(lambda: prom.value(applied) == counted, 30, "Prometheus to scrape the final counter")
            time.sleep(3 * SCRAPE)  # samples after the last report: the window's end is flat

            # The ingest rate over a window that holds every report, within the extrapolation bounds.
            # Both queries are evaluated at the last sample already ingested: a scrape stamped before ``at`` but
            # ingested between the two queries would otherwise give the rate fewer samples than the bound reads.
            now = time.time()
            window = int(now - before) + 3
            raw = f'ldpstream_reports_applied_total{{metric="app_language"}}[{window}s]'
            (series,) = prom.query(raw, now)
            at = float(series["values"][-1][0])
            rate = prom.value(f'sum(rate(ldpstream_reports_applied_total{{metric="app_language"}}[{window}s]))', at)
            (series,) = prom.query(raw, at)
            samples = [(float(t), float(v)) for t, v in series["values"]]
            assert samples[0][1] == 0.0 and samples[-1][1] == counted
            sampled = samples[-1][0] - samples[0][0]
            step = sampled / (len(samples) - 1)
            assert rate is not None
            assert counted <= rate * window <= counted * (sampled + 1.1 * step) / sampled + 1e-6, (
                rate * window, counted, sampled, step)

            # The estimate gauges equal the estimate published to Redis.
            def published_in_prometheus() -> bool:
                latest = store.latest_estimate("app_language", "all")
                reports = prom.value('ldpstream_estimate_reports{metric="app_language", window="all"}')
                return latest is not None and latest["n_reports"] == counted and reports == counted

            wait_for(published_in_prometheus, 60, "the final estimate in Prometheus", interval=0.5)
            latest = store.latest_estimate("app_language", "all")
            assert latest is not None
            for row in latest["values"]:
                for gauge, field in (("ldpstream_estimate_ratio", "frequency"),
                                     ("ldpstream_estimate_low_95_ratio", "low_95"),
                                     ("ldpstream_estimate_high_95_ratio", "high_95")):
                    got = prom.value(f'{gauge}{{metric="app_language", window="all", value="{row["value"]}"}}')
                    assert got == pytest.approx(row[field], rel=1e-12, abs=1e-15), (gauge, row)

            # Every metric the dashboard and the alert rules query is scraped from the two processes.
            wait_for(lambda: store.latest_joint("os_by_font", "all") is not None
                     and prom.value('ldpstream_joint_reports{association="os_by_font", window="all"}') == CLIENTS,
                     60, "the joint estimate in Prometheus", interval=0.5)
            wait_for(lambda: prom.value('ldpstream_dictionary_reports{metric="word", window="all"}') == CLIENTS,
                     60, "the live dictionary in Prometheus", interval=0.5)
            time.sleep(3 * SCRAPE)  # rates and histograms need two samples after the joint's first decode
            dashboard = _dashboard_exprs({"$__rate_interval": "10s", "$__interval": "1s", "$metric": "home_page",
                                          "$window": "all", "$association": "os_by_font", "$dictionary": "word"})
            rules = _alert_rules()
            wanted = names_in([expr for _, expr in dashboard] + [rule["expr"] for rule in rules])
            assert {"up", "ldpstream_estimate_ratio", "ldpstream_joint_cell_ratio", "ldpstream_dictionary_string_ratio",
                    "ldpstream_dictionary_decode_failures_total"} <= wanted
            scraped = prom.metric_names()
            missing = sorted(wanted - scraped)
            assert not missing, f"the dashboard or the alert rules query metrics no running process exports: {missing}"
            empty = [f"{where}: {expr}" for where, expr in dashboard if not prom.query(expr)]
            assert not empty, "dashboard queries with no data on a live pipeline:\n" + "\n".join(empty)

            # The alert rules, as loaded by this server: each evaluated without error, none firing.
            def evaluated() -> list[dict]:
                loaded = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
                return loaded if all(r.get("lastEvaluation", "").startswith("20") for r in loaded) else []

            wait_for(lambda: bool(evaluated()), 30, "the alert rules to be evaluated")
            loaded = evaluated()
            assert sorted(r["name"] for r in loaded) == sorted(r["alert"] for r in rules)
            for rule in loaded:
                assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
                assert rule["state"] == "inactive", (rule["name"], rule["state"], rule.get("alerts"))
    except AssertionError:
        for log in sorted(tmp_path.rglob("*.log")):
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
