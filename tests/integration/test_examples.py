"""Every example of ``examples/`` runs, as a user runs it: in a subprocess, against the test's Kafka and Redis
(passed as ``LDPSTREAM_KAFKA``/``LDPSTREAM_REDIS``) with a fresh topic and key prefix."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from ldpstream.config import KafkaConfig, RedisConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(args: list[str], kafka_bootstrap: str, redis_url: str, timeout: float = 180,
                **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "LDPSTREAM_KAFKA": kafka_bootstrap, "LDPSTREAM_REDIS": redis_url, **env}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def load_example(name: str) -> ModuleType:
    """An example as a module (examples/ is no package: users copy its files)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.mark.pipelines
def test_the_client_app_reports_and_read_estimates_reads_them_back(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path):
    client_app = load_example("client_app")
    topic = fresh_topic(partitions=2)
    estimates_topic = fresh_topic(partitions=1, stem="estimates")
    done = run_example([str(EXAMPLES / "client_app.py"), "--topic", topic, "--count", "300", "--seed", "1",
                        "--secret-file", str(tmp_path / "secret")], kafka_bootstrap, redis_url)
    assert json_lines(done.stdout) == [{"topic": topic, "reports": 300, "acked": 300, "errors": []}]
    assert (tmp_path / "secret").stat().st_size == 32

    # The reports are valid: a consumer counts all of them, and the decoder publishes an estimate.
    registry = client_app.app_registry(topic)  # the app's own registry, as its consumers would load it
    store = RedisConfig(redis_url, key_prefix).store()
    consumer = SketchConsumer(registry, store,
                              ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}"),
                              metrics=ConsumerMetrics(registry=CollectorRegistry()))
    consumer.run(idle_exit=5.0)
    assert store.stats(topic, range(2)) == {"reports_applied": 300, "applied:app_language": 300}
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    DecoderService(registry, store, producer=producer, estimates_topic=estimates_topic,
                   metrics=DecoderMetrics(CollectorRegistry())).run_once()

    done = run_example([str(EXAMPLES / "read_estimates.py"), "--metric", "app_language", "--window", "all",
                        "--window", "1h", "--estimates-topic", estimates_topic, "--idle", "3"],
                       kafka_bootstrap, redis_url, LDPSTREAM_PREFIX=key_prefix)
    lines = json_lines(done.stdout)
    assert {(line["source"], line["window"]) for line in lines} == {
        ("redis", "all"), ("redis", "1h"), ("kafka", "all"), ("kafka", "1h")}, done.stdout
    for line in lines:
        assert line["metric"] == "app_language" and line["n_reports"] == 300 and len(line["top"]) == 3


@pytest.mark.slow
def test_the_users_pipeline_test_passes_with_the_plugins_fixtures(kafka_bootstrap, redis_url):
    done = run_example(["-m", "pytest", "-p", "no:cacheprovider", "-q", "examples/test_my_pipeline.py"],
                       kafka_bootstrap, redis_url, timeout=300)
    assert "1 passed" in done.stdout, done.stdout
