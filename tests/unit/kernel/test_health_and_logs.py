"""The metrics port's /healthz and /readyz (:mod:`ldpstream.health`), ``ldpstream_build_info``, and the logging
of the long-running commands (:mod:`ldpstream.logs`): JSON lines, levels, the start line without secrets, the
decoder's line per pass. No Kafka, no Redis (tests/integration/test_health_endpoints.py has them)."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ldpstream import __version__
from ldpstream.cli.main import build_parser
from ldpstream.config import ServiceConfig
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.health import CHECK_TIMEOUT_SECONDS, HealthServer, Readiness, declare_build_info
from ldpstream.logs import JsonFormatter, config_source, configure, log_start
from ldpstream.registry import Registry
from ldpstream.store import InMemorySketchStore

PASSWORD = "s3cret-Pa55word"
ROOT = Path(__file__).resolve().parents[3]


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Restore the root logger's handlers and level after a test that calls :func:`configure`."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


# ------------------------------------------------------------------------------------------- health


def test_readiness_reports_each_check_and_what_is_missing():
    gate = threading.Event()
    readiness = Readiness({"fine": lambda: None, "group": lambda: "not joined yet",
                           "broken": lambda: 1 / 0, "slow": lambda: None if gate.wait(5) else "?"}, timeout=0.2)
    ready, body = readiness.report()
    gate.set()
    assert not ready
    assert body["checks"]["fine"] == "ok" and body["checks"]["group"] == "not joined yet"
    assert body["checks"]["broken"].startswith("ZeroDivisionError")
    assert body["checks"]["slow"] == "no answer within 0.2 s"
    assert body["missing"] == ["group", "broken", "slow"] and body["ready"] is False
    assert Readiness({"fine": lambda: None}).report() == (True, {"ready": True, "checks": {"fine": "ok"},
                                                                 "missing": []})


def test_checks_stuck_on_a_dead_peer_are_bounded_and_do_not_keep_the_process_alive():
    gate = threading.Event()
    readiness = Readiness({"stuck": lambda: None if gate.wait(30) else "?"}, timeout=0.05)
    outcomes = [readiness.evaluate()["stuck"] for _ in range(Readiness.MAX_WAITING + 1)]
    assert outcomes[:-1] == ["no answer within 0.05 s"] * Readiness.MAX_WAITING
    assert outcomes[-1] == "too many earlier checks still waiting for an answer"
    gate.set()
    for _ in range(100):  # the stuck ones return and give their slots back
        if readiness.evaluate()["stuck"] is None:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the checks' slots were not given back")
    script = ("import time; from ldpstream.health import Readiness; "
              "print(Readiness({'stuck': lambda: time.sleep(3600)}, timeout=0.1).evaluate())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "no answer within 0.1 s" in done.stdout, done.stderr


def test_the_metrics_port_serves_healthz_readyz_metrics_and_build_info():
    registry = CollectorRegistry()
    state: dict[str, Any] = {"joined": False}
    readiness = Readiness({"group": lambda: None if state["joined"] else "not a member yet"})
    server = HealthServer(0, "127.0.0.1", readiness, registry)
    try:
        assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}"
        status, body = get(f"{server.url}/healthz")
        assert status == 200 and json.loads(body) == {"alive": True}
        status, body = get(f"{server.url}/readyz")
        assert status == 503 and json.loads(body) == {"ready": False, "checks": {"group": "not a member yet"},
                                                      "missing": ["group"]}
        state["joined"] = True
        status, body = get(f"{server.url}/readyz")
        assert status == 200 and json.loads(body)["ready"] is True
        status, body = get(f"{server.url}/metrics")
        line = f'ldpstream_build_info{{python="{platform.python_version()}",version="{__version__}"}} 1.0'
        assert status == 200 and line in body.decode()
    finally:
        server.close()


def test_build_info_is_declared_once_per_registry():
    registry = CollectorRegistry()
    assert declare_build_info(registry) is declare_build_info(registry)
    assert registry.get_sample_value("ldpstream_build_info", {"version": __version__,
                                                              "python": platform.python_version()}) == 1


# --------------------------------------------------------------------------------------------- logs


def test_json_lines_carry_time_level_logger_message_and_the_extra_fields():
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ldpstream.test.json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        logger.info("pass %d done", 3, extra={"event": "pass", "seconds": 0.25})
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    first, second = (json.loads(line) for line in handler.stream.getvalue().splitlines())
    assert set(first) == {"time", "level", "logger", "message", "event", "seconds"}
    assert first["level"] == "INFO" and first["logger"] == "ldpstream.test.json"
    assert first["message"] == "pass 3 done" and first["event"] == "pass" and first["seconds"] == 0.25
    assert first["time"].endswith("Z") and first["time"][10] == "T"
    assert second["level"] == "ERROR" and "RuntimeError: boom" in second["exception"]


def test_configure_sets_the_level_and_format_and_replaces_its_own_handler(root_logging, capsys):
    configure("warning", "json")
    logging.getLogger("ldpstream.test").info("hidden")
    logging.getLogger("ldpstream.test").warning("shown")
    configure("info", "text")
    logging.getLogger("ldpstream.test").info("as text")
    lines = capsys.readouterr().err.splitlines()
    assert json.loads(lines[0])["message"] == "shown"
    assert lines[1].endswith("INFO ldpstream.test: as text") and len(lines) == 2
    with pytest.raises(ValueError):
        configure("loud", "text")


def test_config_source_names_flags_variables_and_file_never_values(tmp_path):
    args = argparse.Namespace(kafka="k:1", redis=None, kafka_config=[], config=str(tmp_path / "c.toml"))
    source = config_source(args, {"LDPSTREAM_REDIS_PASSWORD": PASSWORD, "LDPSTREAM_PREFIX": "p", "HOME": "/"})
    assert source == (f"flags (--kafka) + environment (LDPSTREAM_PREFIX, LDPSTREAM_REDIS_PASSWORD) + file "
                      f"{tmp_path / 'c.toml'} + defaults")
    assert config_source(argparse.Namespace(), {}) == "defaults (the local stack)"
    assert config_source(argparse.Namespace(), {"LDPSTREAM_CONFIG": "/etc/l.toml"}) == "file /etc/l.toml + defaults"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_start_line_shows_no_password(root_logging, capsys, monkeypatch, fmt):
    environ = {"LDPSTREAM_REDIS": f"redis://ldp:{PASSWORD}@redis:6379/0",
               "LDPSTREAM_KAFKA_SECURITY": "SASL_SSL", "LDPSTREAM_KAFKA_SASL_MECHANISM": "PLAIN",
               "LDPSTREAM_KAFKA_USER": "ldp", "LDPSTREAM_KAFKA_PASSWORD": PASSWORD}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    config = ServiceConfig.load({}, environ)
    configure("info", fmt)
    log_start(logging.getLogger("ldpstream.test"), "consume", argparse.Namespace(), config,
              {"group": "g", "metrics": "http://0.0.0.0:9464/metrics"})
    err = capsys.readouterr().err
    assert PASSWORD not in err
    assert "redis://ldp:***@redis:6379/0" in err and f"consume {__version__} started" in err
    if fmt == "json":
        (record,) = (json.loads(line) for line in err.splitlines())
        assert record["event"] == "start" and record["version"] == __version__ and record["group"] == "g"
        assert "LDPSTREAM_REDIS," in record["config"] and "LDPSTREAM_KAFKA_PASSWORD" in record["config"]
        assert record["redis"] == "redis://ldp:***@redis:6379/0" and record["kafka"] == config.kafka.bootstrap


@pytest.mark.parametrize("command", ["consume", "decode", "serve", "produce"])
def test_every_long_running_command_takes_log_level_and_log_format(command):
    extra = ["m"] if command == "produce" else []
    args = build_parser().parse_args([command, *extra, "--log-level", "WARNING", "--log-format", "json"])
    assert (args.log_level, args.log_format) == ("warning", "json")
    defaults = build_parser().parse_args([command, *extra])
    assert (defaults.log_level, defaults.log_format) == ("info", "text")


def test_the_decoder_logs_one_line_per_pass_and_its_readiness_waits_for_the_first(caplog):
    registry = Registry.from_dict({"defaults": {"topic": "reports"}, "metrics": {
        "lang": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 2.0, "labels": ["a", "b", "c", "d"]}}})
    service = DecoderService(registry, InMemorySketchStore(), metrics=DecoderMetrics(CollectorRegistry()))
    readiness = Readiness(service.readiness_checks())
    assert readiness.report()[1]["checks"] == {"pass": "the decoder has not completed its first pass yet"}
    caplog.set_level(logging.INFO, logger="ldpstream.decoder.service")
    service.run_once()
    service.run_once()
    passes = [r for r in caplog.records if getattr(r, "event", None) == "pass"]
    assert [r.__dict__["pass"] for r in passes] == [1, 2]
    record = passes[-1]
    assert (record.__dict__["decoded"], record.__dict__["failed"], record.__dict__["withheld"]) == (1, 0, 0)
    assert record.__dict__["seconds"] >= 0
    assert record.getMessage().startswith("pass 2: 1 metric(s) and association(s) decoded, 0 failed, 0 withheld")
    assert readiness.report()[0]


# ------------------------------------------------------------------------------------------- deploy


def test_kubernetes_and_compose_probe_healthz_and_readyz_on_the_metrics_port():
    yaml = pytest.importorskip("yaml")
    deploy = ROOT / "deploy"
    for name in ("consume", "decode"):
        deployment = yaml.safe_load((deploy / "k8s" / f"{name}-deployment.yaml").read_text())
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        probes = {kind: container[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
        assert probes == {"startupProbe": {"path": "/healthz", "port": "metrics"},
                          "livenessProbe": {"path": "/healthz", "port": "metrics"},
                          "readinessProbe": {"path": "/readyz", "port": "metrics"}}, name
        # longer than a check's own timeout, so a slow check answers 503 rather than the probe timing out
        assert container["readinessProbe"]["timeoutSeconds"] > CHECK_TIMEOUT_SECONDS
        service = yaml.safe_load((deploy / "k8s" / f"{name}-service.yaml").read_text())
        assert service["spec"]["publishNotReadyAddresses"] is True  # scraped while not ready
        compose = yaml.safe_load((deploy / "compose.yaml").read_text())["services"][name]
        assert "/readyz" in " ".join(compose["healthcheck"]["test"])
