"""The deployment of ``deploy/compose.yaml``, started for real with Docker Compose.

Kafka, Redis, the topic job, two ``consume`` members and ``decode`` run as containers of the images that
``python -m tools.images`` builds (the names the compose file uses); a producer on the host publishes reports
through the Kafka EXTERNAL listener; the estimates must appear in Redis and on the ``ldp-estimates`` topic, and
the consumers' and decoder's Prometheus metrics are scraped from their published ports.

Debian's Docker Compose is v1 (1.29), which refuses the compose file's top-level ``name`` and ignores its
file-based ``configs``. So the test runs the compose file through a derived copy (written next to the test's
temporary folder) that changes only what v1 or the test needs: no ``name`` (``-p`` gives the project), the
configs as read-only bind mounts at the same paths, ports published on ephemeral 127.0.0.1 ports (the Kafka
EXTERNAL listener on a free one, advertised accordingly), the decoder's interval 2 s, health checks every 3 s, and
no Prometheus/Grafana (not started; their images exist on no Debian archive). Everything else — images, commands,
environment, health checks, dependencies, volumes — is the compose file's own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from ldpstream.deploy import containers
from ldpstream.deploy.containers import free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERVICES = ("kafka", "redis", "topics", "consume", "decode")
METRIC = "app_language"

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.containers]


def derived_compose(kafka_port: int) -> dict[str, Any]:
    """``deploy/compose.yaml`` as Compose v1 can run it here (see the module docstring)."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    compose.pop("name", None)
    configs = {name: str((DEPLOY / spec["file"]).resolve()) for name, spec in compose.pop("configs").items()}
    services = {name: spec for name, spec in compose["services"].items() if name in SERVICES}
    for spec in services.values():
        for mount in spec.pop("configs", []):
            spec.setdefault("volumes", []).append(f"{configs[mount['source']]}:{mount['target']}:ro")
        spec.pop("deploy", None)
        spec.pop("build", None)
        spec["restart"] = "no"
        if "healthcheck" in spec:
            spec["healthcheck"].update(interval="3s", start_period="5s", retries=60)
    kafka = services["kafka"]
    kafka["ports"] = [f"127.0.0.1:{kafka_port}:29092"]
    env = kafka["environment"]
    env["KAFKA_ADVERTISED_LISTENERS"] = env["KAFKA_ADVERTISED_LISTENERS"].replace(
        "EXTERNAL://127.0.0.1:29092", f"EXTERNAL://127.0.0.1:{kafka_port}")
    env["KAFKA_HEAP_OPTS"] = "-Xmx512m -Xms256m"
    services["redis"]["ports"] = ["127.0.0.1::6379"]
    services["consume"]["ports"] = ["127.0.0.1::9464"]
    services["decode"]["ports"] = ["127.0.0.1::9465"]
    command = services["decode"]["command"]
    command[command.index("--interval") + 1] = "2"
    compose["services"] = services
    compose["volumes"] = {name: spec for name, spec in compose["volumes"].items()
                          if name in ("kafka-data", "redis-data")}
    return compose


class Compose:
    def __init__(self, file: Path, project: str, env: dict[str, str]) -> None:
        self.base = ["docker-compose", "--no-ansi", "-p", project, "-f", str(file)]
        self.env = env

    def run(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout, env=self.env,
                              check=False)
        if done.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} failed ({done.returncode}):\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done.stdout

    def port(self, service: str, port: int, index: int = 1) -> int:
        return int(self.run("port", f"--index={index}", service, str(port)).strip().rsplit(":", 1)[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def sample_sum(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def wait_for(check: Any, timeout: float, what: str, compose: Compose) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    logs = compose.run("logs", "--tail=40", "consume", "decode")
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs[-6000:]}")


def test_compose_deployment_end_to_end(docker_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import redis
    from confluent_kafka import Consumer, TopicPartition

    from ldpstream.store import RedisSketchStore

    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is not installed (Debian's docker-compose package)", pytrace=False)
    kafka_port = free_port()
    compose_dict = derived_compose(kafka_port)
    for name in ("consume", "decode"):
        compose_dict["services"][name]["image"] = containers.ldpstream_image()
    file = tmp_path / "compose.yaml"
    file.write_text(yaml.safe_dump(compose_dict, sort_keys=False))
    compose = Compose(file, f"ldpci{uuid.uuid4().hex[:8]}", dict(os.environ))
    try:
        started = time.monotonic()
        compose.run("up", "-d", "--scale", "consume=2", *SERVICES, timeout=420)
        print(f"compose up (kafka, redis, topics, consume x2, decode) took {time.monotonic() - started:.1f} s")

        bootstrap = f"127.0.0.1:{kafka_port}"
        produce = subprocess.run(
            ["ldpstream", "produce", METRIC, "--clients", "20000", "--seed", "7", "--no-progress", "--json",
             "--kafka", bootstrap, "--registry", str(DEPLOY / "metrics.toml")],
            capture_output=True, text=True, timeout=180, check=False)
        assert produce.returncode == 0, produce.stderr[-3000:]

        redis_url = f"redis://127.0.0.1:{compose.port('redis', 6379)}/0"
        store = RedisSketchStore(redis.Redis.from_url(redis_url), prefix="ldp")

        def estimate_of_all_reports() -> dict[str, Any] | None:
            latest = store.latest_estimate(METRIC, "all")
            return latest if latest and int(latest.get("n_reports", 0)) >= 20000 else None

        latest = wait_for(estimate_of_all_reports, 120, "an estimate of all 20000 reports in Redis", compose)
        assert int(latest["n_reports"]) == 20000

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("ldp-estimates", 0, 0)])
            published: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not published:
                for message in consumer.consume(100, timeout=1):
                    if message.error() is None and (message.key() or b"").decode().startswith(f"{METRIC}:"):
                        published.append(json.loads(message.value()))
            assert published, "no estimate of the metric on the ldp-estimates topic"
        finally:
            consumer.close()

        applied = sum(sample_sum(scrape(compose.port("consume", 9464, index)), "ldpstream_reports_applied_total",
                                 metric=METRIC) for index in (1, 2))
        assert applied == 20000, f"the two consumers applied {applied} reports, expected 20000"
        decoder_metrics = scrape(compose.port("decode", 9465))
        assert sample_sum(decoder_metrics, "ldpstream_decoder_last_run_timestamp_seconds") > 0
        assert sample_sum(decoder_metrics, "ldpstream_estimate_reports", metric=METRIC) >= 20000
    finally:
        compose.run("down", "-v", "--remove-orphans", "--timeout", "20", timeout=180)
