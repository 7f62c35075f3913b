"""The deployment files under deploy/ (compose, Kubernetes, Prometheus, Grafana) agree with the code.

They parse; every metric name that a dashboard panel or an alert rule queries is one the consumer or the decoder
declares (a quick check of the sources; ``tests/integration/test_prometheus_in_the_loop.py`` checks the same
names against what a real Prometheus scrapes from running processes); every command they run is a valid
``ldpstream`` command line; ports agree (consume 9464, decode 9465); the Kubernetes copies of the registry and
of the alert rules are up to date. With ``promtool`` on PATH, the alert rules, their unit tests, the scrape config
and the dashboard's queries are checked by it too.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from ldpstream.cli import build_parser

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "ldpstream.json"
METRICS_SOURCES = (ROOT / "consumers" / "metrics.py", ROOT / "decoder" / "metrics.py")
PORTS = {"consume": 9464, "decode": 9465}
REPORT_PARTITIONS = 12
METRIC_NAME = re.compile(r"\bldpstream_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


# ------------------------------------------------------------------------------------------------ helpers


def _yaml_files() -> list[Path]:
    return sorted(p for ext in ("*.yml", "*.yaml") for p in DEPLOY.rglob(ext))


def _load_all(path: Path) -> list:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _load(path: Path):
    docs = _load_all(path)
    assert len(docs) == 1, f"{path}: expected one YAML document"
    return docs[0]


def _exported_metric_names() -> set[str]:
    """Metric names as string literals in the metrics modules (the names prometheus_client exports)."""
    names: set[str] = set()
    for source in METRICS_SOURCES:
        names.update(re.findall(r"[\"'](ldpstream_[a-z0-9_]+)[\"']", source.read_text()))
    return names


def _base_name(name: str, exported: set[str]) -> str:
    if name in exported:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in exported:
            return name.removesuffix(suffix)
    return name


def _alert_rules() -> list[dict]:
    return [rule for group in _load(PROMETHEUS / "alerts.yml")["groups"] for rule in group["rules"]]


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _dashboard_panels() -> list[dict]:
    panels = []
    for panel in _dashboard()["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def _dashboard_exprs() -> list[str]:
    exprs = [t["expr"] for p in _dashboard_panels() for t in p.get("targets", []) if t.get("expr")]
    for var in _dashboard()["templating"]["list"]:
        query = var.get("query")
        if var["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def _parse_command(argv: list[str]):
    """Parse a command line with the real CLI parser; argparse's exit becomes a test failure."""
    parser = build_parser()
    try:
        args = parser.parse_args([str(a) for a in argv])
    except SystemExit as exc:
        pytest.fail(f"`ldpstream {shlex.join(map(str, argv))}` is not a valid command line (exit {exc.code})")
    assert getattr(args, "func", None) is not None, f"`ldpstream {shlex.join(argv)}` names no subcommand"
    return args


def _compose() -> dict:
    return _load(DEPLOY / "compose.yaml")


def _compose_ldpstream_services() -> dict[str, dict]:
    services = _compose()["services"]
    return {name: svc for name, svc in services.items() if str(svc.get("image", "")).startswith("ldpstream")}


def _k8s_docs(folder: Path = K8S) -> list[dict]:
    kustomization = _load(folder / "kustomization.yaml")
    docs = []
    for resource in kustomization["resources"]:
        docs.extend(_load_all(folder / resource))
    return docs


def _k8s_deployments() -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in _k8s_docs() if d["kind"] == "Deployment"}


def _generate_module():
    spec = importlib.util.spec_from_file_location("deploy_k8s_generate", K8S / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------- parsing


def test_every_yaml_and_json_file_under_deploy_parses():
    yaml_files = _yaml_files()
    json_files = sorted(DEPLOY.rglob("*.json"))
    assert len(yaml_files) >= 15 and json_files
    for path in yaml_files:
        assert _load_all(path), f"{path} is empty"
    for path in json_files:
        json.loads(path.read_text())


# ------------------------------------------------------------------------------------------- metric names


def test_metric_names_in_dashboard_and_alerts_are_exported():
    exported = _exported_metric_names()
    assert "ldpstream_consumer_lag_messages" in exported and "ldpstream_estimate_ratio" in exported
    sources = {
        "dashboard": _dashboard_exprs(),
        "alerts.yml": [r["expr"] for r in _alert_rules()],
        "prometheusrule.yaml": [
            r["expr"] for g in _load(K8S / "monitoring" / "prometheusrule.yaml")["spec"]["groups"] for r in g["rules"]
        ],
    }
    for where, exprs in sources.items():
        used = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
        assert used, f"{where} queries no ldpstream metric"
        unknown = {name for name in used if _base_name(name, exported) not in exported}
        assert not unknown, (f"{where} queries metrics that consumers/metrics.py and decoder/metrics.py do not "
                             f"export: {sorted(unknown)}")


def test_dashboard_shows_what_operators_need():
    exported = _exported_metric_names()
    used = {_base_name(n, exported) for expr in _dashboard_exprs() for n in METRIC_NAME.findall(expr)}
    for name in ("ldpstream_reports_applied_total", "ldpstream_messages_rejected_total", "ldpstream_batch_seconds",
                 "ldpstream_consumer_lag_messages", "ldpstream_decode_seconds", "ldpstream_estimate_ratio",
                 "ldpstream_estimate_low_95_ratio", "ldpstream_estimate_high_95_ratio", "ldpstream_estimate_reports",
                 "ldpstream_estimate_residual_ratio", "ldpstream_decoder_last_run_timestamp_seconds"):
        assert name in used, f"the dashboard does not show {name}"
    for name in ("ldpstream_joint_cell_ratio", "ldpstream_joint_cell_low_95_ratio",
                 "ldpstream_joint_cell_high_95_ratio", "ldpstream_joint_independence_p_value",
                 "ldpstream_joint_em_iterations", "ldpstream_joint_em_seconds",
                 "ldpstream_joint_decode_failures_total", "ldpstream_joint_independence_statistic",
                 "ldpstream_joint_decode_seconds", "ldpstream_report_tuples_applied_total"):
        assert name in used, f"the dashboard does not show the joint estimates' {name}"
    for name in ("ldpstream_dictionary_string_ratio", "ldpstream_dictionary_string_low_95_ratio",
                 "ldpstream_dictionary_string_high_95_ratio", "ldpstream_dictionary_strings",
                 "ldpstream_dictionary_reports", "ldpstream_dictionary_stage_seconds",
                 "ldpstream_dictionary_decode_seconds", "ldpstream_dictionary_decode_failures_total",
                 "ldpstream_dictionary_retired_total"):
        assert name in used, f"the dashboard does not show the discovered dictionaries' {name}"
    dashboard = _dashboard()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"metric", "window", "association", "dictionary"} <= variables
    ids = [p["id"] for p in _dashboard_panels()]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    datasource_uid = _load(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"][0]["uid"]
    for panel in _dashboard_panels():
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] in ("${datasource}", datasource_uid)


def test_alert_rules_cover_the_pipeline():
    exprs = " ".join(r["expr"] for r in _alert_rules())
    for name in ("ldpstream_consumer_lag_messages", "ldpstream_messages_rejected_total",
                 "ldpstream_decoder_last_run_timestamp_seconds", "ldpstream_decode_failures_total",
                 "ldpstream_joint_decode_failures_total", "ldpstream_joint_decode_seconds_bucket",
                 "ldpstream_dictionary_decode_failures_total", "ldpstream_batches_refused_total"):
        assert name in exprs, f"no alert rule watches {name}"
    for rule in _alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
    # The rules select jobs by the names the scrape config (compose) and the Services (Kubernetes) give them.
    jobs = {job["job_name"] for job in _load(PROMETHEUS / "prometheus.yml")["scrape_configs"]}
    services = {d["metadata"]["name"] for d in _k8s_docs() if d["kind"] == "Service"}
    for job in re.findall(r'job="([^"]+)"', exprs):
        assert job in jobs and job in services, f"alert rules select job {job!r}, unknown to compose or k8s"


# ------------------------------------------------------------------------------------------------ commands


def test_compose_commands_are_valid_ldpstream_commands_and_ports_agree():
    services = _compose_ldpstream_services()
    assert set(services) == {"consume", "decode"}
    for name, svc in services.items():
        args = _parse_command(svc["command"])
        assert args.command == name
        assert args.metrics_addr == "0.0.0.0", f"{name} must bind its metrics on 0.0.0.0 in a container"
        assert args.metrics_port == PORTS[name]
        assert str(PORTS[name]) in json.dumps(svc["healthcheck"]["test"])
        assert [str(p) for p in svc.get("expose", [])] == [str(PORTS[name])]
        assert svc["environment"]["LDPSTREAM_REGISTRY"] == "/etc/ldpstream/metrics.toml"
        assert "/etc/ldpstream/metrics.toml" in {c["target"] for c in svc["configs"]}
    assert services["consume"]["deploy"]["replicas"] == 2
    assert services["decode"]["deploy"]["replicas"] == 1


def test_default_ports_of_the_commands():
    assert _parse_command(["consume"]).metrics_port == PORTS["consume"]
    assert _parse_command(["decode"]).metrics_port == PORTS["decode"]


def test_prometheus_scrapes_both_services_on_their_ports():
    jobs = {job["job_name"]: job for job in _load(PROMETHEUS / "prometheus.yml")["scrape_configs"]}
    for name, port in PORTS.items():
        sd = jobs[f"ldpstream-{name}"]["dns_sd_configs"][0]
        assert sd["names"] == [name] and sd["port"] == port


def test_compose_infrastructure_settings():
    services = _compose()["services"]
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:4.")
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    for key in ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
                "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR",
                "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR"):
        assert str(env[key]) == "1", key
    assert str(env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"]) == "0"
    redis_cmd = " ".join(services["redis"]["command"])
    assert services["redis"]["image"].startswith("redis:7")
    assert "--appendonly yes" in redis_cmd and "--appendfsync everysec" in redis_cmd
    assert "--maxmemory-policy noeviction" in redis_cmd
    topics = services["topics"]["command"][0]
    assert re.search(rf"--topic ldp-reports \\\s*--partitions {REPORT_PARTITIONS}\b", topics)
    for topic in ("ldp-dead-letters", "ldp-estimates"):
        assert f"--topic {topic}" in topics
    for name in ("consume", "decode"):
        depends = services[name]["depends_on"]
        assert depends["topics"]["condition"] == "service_completed_successfully"
    for name, svc in services.items():
        if name != "topics":
            assert "healthcheck" in svc, f"compose service {name} has no healthcheck"
    config_files = {c["file"] for c in _compose()["configs"].values()}
    for file in config_files:
        assert (DEPLOY / file).is_file(), file


def test_k8s_commands_are_valid_ldpstream_commands_and_ports_agree():
    deployments = _k8s_deployments()
    assert set(deployments) == {"ldpstream-consume", "ldpstream-decode"}
    for name, deployment in deployments.items():
        short = name.removeprefix("ldpstream-")
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        args = _parse_command(container["args"])
        assert args.command == short
        assert args.metrics_addr == "0.0.0.0"
        assert args.metrics_port == PORTS[short]
        assert container["ports"] == [{"name": "metrics", "containerPort": PORTS[short], "protocol": "TCP"}]
        assert container["livenessProbe"]["httpGet"]["port"] == "metrics"
        assert container["resources"]["requests"] and container["resources"]["limits"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["terminationGracePeriodSeconds"] >= 30
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["LDPSTREAM_REGISTRY"] == "/etc/ldpstream/metrics.toml"
        assert container["envFrom"] == [{"secretRef": {"name": "ldpstream-services"}}]
    assert 1 <= deployments["ldpstream-consume"]["spec"]["replicas"] <= REPORT_PARTITIONS
    assert deployments["ldpstream-consume"]["spec"]["replicas"] == 3
    assert deployments["ldpstream-decode"]["spec"]["replicas"] == 1

    docs = _k8s_docs()
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for short, port in PORTS.items():
        (svc_port,) = services[f"ldpstream-{short}"]["spec"]["ports"]
        assert svc_port["port"] == port and svc_port["name"] == "metrics"
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert set(secret["stringData"]) == {"LDPSTREAM_KAFKA", "LDPSTREAM_REDIS"}
    assert any(d["kind"] == "PodDisruptionBudget" for d in docs)
    monitor = next(d for d in _k8s_docs(K8S / "monitoring") if d["kind"] == "ServiceMonitor")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]


def test_k8s_generated_files_are_up_to_date():
    generate = _generate_module()
    stale = [str(p.relative_to(ROOT)) for p, text in generate.expected().items() if p.read_text() != text]
    assert not stale, f"run `python deploy/k8s/generate.py`: out of date: {stale}"
    configmap = _load(K8S / "registry-configmap.yaml")
    assert configmap["data"]["metrics.toml"] == (DEPLOY / "metrics.toml").read_text()
    prometheus_rule = _load(K8S / "monitoring" / "prometheusrule.yaml")
    assert prometheus_rule["spec"] == _load(PROMETHEUS / "alerts.yml")


def test_dockerfile_builds_a_non_root_ldpstream_image():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim", text, re.MULTILINE)
    assert 'ENTRYPOINT ["ldpstream"]' in text
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and not users[-1].startswith(("root", "0")), "the image must run as a non-root user"
    assert re.search(r"pip install \.", text)
    for port in PORTS.values():
        assert str(port) in re.search(r"^EXPOSE (.*)$", text, re.MULTILINE).group(1)
    for package in ("ldpstream", "producers", "consumers", "decoder", "deploy", "operations"):
        assert f"COPY {package} " in text, f"the image does not get the {package} package"


# ------------------------------------------------------------------------------------------------ promtool

promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(promtool is None, reason="promtool not on PATH (Debian package prometheus)")


def _promtool(*args: str, cwd: Path = PROMETHEUS) -> str:
    result = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
    return result.stdout


@needs_promtool
def test_promtool_checks_the_rules_and_the_config():
    _promtool("check", "rules", "alerts.yml")
    _promtool("check", "config", "prometheus.yml")


@needs_promtool
def test_promtool_unit_tests_of_the_alert_rules():
    _promtool("test", "rules", "alerts_test.yml")


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path):
    substitutions = {"$__rate_interval": "1m", "$__interval": "1m", "$metric": "app_language", "$window": "all",
                     "$association": "language_by_os", "$dictionary": "site"}
    rules = []
    for i, expr in enumerate(_dashboard_exprs()):
        if expr.startswith("label_values("):
            expr = expr.removeprefix("label_values(").rsplit(",", 1)[0]
        for var, value in substitutions.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"unresolved variable in {expr}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    _promtool("check", "rules", str(path), cwd=tmp_path)
