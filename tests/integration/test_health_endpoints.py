"""/healthz and /readyz of ``consume`` and ``decode`` on real Kafka and Redis: a consumer is ready once it is a
member of its group (also one assigned no partition), the decoder once its first pass is done; and the commands'
logs: JSON lines with the start line and one line per decoder pass, ``--log-level warning`` without them."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ldpstream import __version__
from ldpstream.cli import main
from ldpstream.config import ServiceConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.deploy.prometheus_server import free_port
from ldpstream.health import HealthServer, Readiness, service_checks
from tests.integration.helpers import registry_for, wait_for, write_registry

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
METRICS = {"app_language": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 2.0, "labels": ["a", "b", "c", "d"]}}


def get(url: str) -> tuple[int, dict[str, Any] | str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, body


class RunningConsumer:
    """A consumer-group member in a thread, with its metrics port on a free port (as ``consume`` wires it)."""

    def __init__(self, config: ServiceConfig, topic: str, group: str) -> None:
        self.consumer = SketchConsumer(registry_for(topic, METRICS), config.redis.store(),
                                       ConsumerSettings(config.kafka, group_id=group, topics=(topic,),
                                                        poll_timeout=0.2),
                                       metrics=ConsumerMetrics(CollectorRegistry()))
        readiness = Readiness({**service_checks(config, topic=topic), **self.consumer.readiness_checks()})
        self.server = HealthServer(0, "127.0.0.1", readiness, CollectorRegistry())
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.consumer.run, args=(self.stop,), daemon=True)

    def ready(self) -> bool:
        return get(f"{self.server.url}/readyz")[0] == 200

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(30)
        self.server.close()


@pytest.fixture
def consumers(service_config: ServiceConfig) -> Iterator[list[RunningConsumer]]:
    made: list[RunningConsumer] = []
    yield made
    for member in made:
        member.close()


def test_a_consumer_is_ready_once_it_is_a_member_of_its_group(service_config, fresh_topic, key_prefix, consumers):
    topic = fresh_topic(partitions=2)
    member = RunningConsumer(service_config, topic, f"g-{key_prefix}")
    consumers.append(member)
    status, body = get(f"{member.server.url}/readyz")
    assert status == 503, body
    assert isinstance(body, dict) and body["missing"] == ["group"]
    assert body["checks"]["kafka"] == "ok" and body["checks"]["redis"] == "ok"
    assert body["checks"]["group"].startswith(f"not yet a member of consumer group g-{key_prefix}")
    assert get(f"{member.server.url}/healthz") == (200, {"alive": True})

    member.thread.start()
    wait_for(member.ready, 60, "the consumer ready after joining its group", interval=0.2)
    status, body = get(f"{member.server.url}/readyz")
    assert status == 200 and body == {"ready": True, "checks": {"redis": "ok", "kafka": "ok", "group": "ok"},
                                      "missing": []}
    status, metrics = get(f"{member.server.url}/metrics")
    assert status == 200 and f'version="{__version__}"' in str(metrics) and "ldpstream_build_info{" in str(metrics)


def test_a_member_assigned_no_partition_is_ready(service_config, fresh_topic, key_prefix, consumers):
    topic = fresh_topic(partitions=1)
    for _ in range(2):
        consumers.append(RunningConsumer(service_config, topic, f"g-{key_prefix}"))
    for member in consumers:
        member.thread.start()

    def settled() -> bool:  # one member holds the only partition, the other none
        return sorted(len(m.consumer._expected) for m in consumers) == [0, 1] and all(m.consumer.joined
                                                                                       for m in consumers)

    wait_for(settled, 90, "one member with the partition, one without", interval=0.2)
    idle = next(m for m in consumers if not m.consumer._expected)
    status, body = get(f"{idle.server.url}/readyz")
    assert status == 200, body
    assert all(m.ready() for m in consumers)


def test_the_decoder_is_ready_after_its_first_pass(service_config, key_prefix):
    registry = registry_for("unused", METRICS)
    service = DecoderService(registry, service_config.redis.store(), metrics=DecoderMetrics(CollectorRegistry()))
    readiness = Readiness({**service_checks(service_config, kafka=False), **service.readiness_checks()})
    server = HealthServer(0, "127.0.0.1", readiness, CollectorRegistry())
    try:
        status, body = get(f"{server.url}/readyz")
        assert status == 503 and isinstance(body, dict) and body["missing"] == ["pass"], body
        assert body["checks"]["redis"] == "ok"
        service.run_once()
        status, body = get(f"{server.url}/readyz")
        assert status == 200 and body == {"ready": True, "checks": {"redis": "ok", "pass": "ok"}, "missing": []}
        assert get(f"{server.url}/healthz")[0] == 200
    finally:
        server.close()


def test_decode_serves_its_endpoints_and_logs_json_lines(kafka_bootstrap, redis_url, key_prefix, tmp_path):
    registry = str(write_registry(tmp_path / "metrics.toml", "unused", METRICS))
    port = free_port()
    log = tmp_path / "decode.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "ldpstream", "decode", "--kafka", kafka_bootstrap, "--redis", redis_url, "--prefix",
             key_prefix, "--registry", registry, "--interval", "0.5", "--no-kafka", "--metrics-port", str(port),
             "--log-format", "json"], stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"

    def answers(path: str) -> int:
        assert process.poll() is None, log.read_text()
        try:
            return get(url + path)[0]
        except OSError:
            return 0

    try:
        wait_for(lambda: answers("/readyz") == 200, 60, "decode ready", interval=0.2)
        assert answers("/healthz") == 200
        assert "ldpstream_build_info{" in str(get(url + "/metrics")[1])
        wait_for(lambda: log.read_text().count('"event": "pass"') >= 2, 30, "two passes logged", interval=0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    start = next(r for r in records if r.get("event") == "start")
    assert start["command"] == "decode" and start["version"] == __version__
    assert start["config"].startswith("flags (--kafka, --redis, --prefix, --registry)")
    assert start["metrics"] == f"{url}/metrics, /healthz, /readyz" and start["redis"] == redis_url
    passes = [r for r in records if r.get("event") == "pass"]
    assert passes[0]["pass"] == 1 and passes[0]["decoded"] == 1 and passes[0]["failed"] == 0
    assert all(isinstance(p["seconds"], float | int) for p in passes)


def test_log_level_warning_hides_the_start_line_and_the_passes(redis_url, key_prefix, tmp_path, capsys):
    registry = str(write_registry(tmp_path / "metrics.toml", "unused", METRICS))
    argv = ["decode", "--once", "--no-kafka", "--metrics-port", "0", "--registry", registry, "--redis", redis_url,
            "--prefix", key_prefix]
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        capsys.readouterr()
        assert main([*argv, "--log-level", "warning"]) == 0
        quiet = capsys.readouterr().err
        assert main(argv) == 0
        loud = capsys.readouterr().err
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)
    assert "started; configuration from" not in quiet and "pass 1:" not in quiet
    assert "ldpstream decode" in loud and "started; configuration from" in loud and "pass 1:" in loud
