"""Faults the pipeline must survive, on real Kafka and Redis, each ending in an exact count check against
what Kafka acknowledged and against a fold of the topic itself:

- Redis killed mid-stream and restarted from its append-only file (which may lose its last second: the
  consumers see the rollback and re-apply);
- Redis losing all its data mid-stream (consumers running, or restarted too): rebuilt from Kafka, with the
  decoder withholding estimates until the rebuild is complete;
- the Kafka broker killed and restarted mid-stream (local stack only): producers retry without duplicates;
- the decoder killed mid-decode, again and again: nothing is ever half-published.

Each test runs its own ``redis-server`` (Debian's, as the local stack) so it can kill it freely.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from ldpstream.config import KafkaConfig
from ldpstream.consumers import ConsumerMetrics, ConsumerSettings, SketchConsumer, fold_messages
from ldpstream.decoder import DecoderMetrics, DecoderService
from ldpstream.producers.loadgen import LoadResult, simulate_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import MetricConfig, Registry
from ldpstream.store import ALL_TIME, RedisSketchStore
from tests.integration.helpers import registry_for, wait_for, write_registry

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

PARTITIONS = 4
METRIC = {"m": {"id": 1, "mechanism": "krr", "k": 16, "epsilon": 2.0}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A ``redis-server`` of the test's own, with an append-only file (fsynced every second) unless
    ``persistent`` is false."""

    def __init__(self, directory: Path, persistent: bool = True) -> None:
        self.directory = directory
        self.port = _free_port()
        self.persistent = persistent
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
                "--appendonly", "yes" if self.persistent else "no", "--appendfsync", "everysec", "--save", "",
                "--maxmemory-policy", "noeviction"]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        wait_for(lambda: _answers(client), 20, "the private Redis to answer")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


class ConsumerThread:
    """A consumer-group member running in a thread; its exception, if any, is kept for the test."""

    def __init__(self, registry: Registry, store: RedisSketchStore, kafka: str, group: str) -> None:
        self.prometheus = CollectorRegistry()
        self.consumer = SketchConsumer(registry, store, ConsumerSettings(
            KafkaConfig(kafka, consumer_settings={"session.timeout.ms": "6000"}), group_id=group, batch_size=200,
            max_store_backoff=0.5), metrics=ConsumerMetrics(registry=self.prometheus))
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.consumer.run(self.stop)
        except BaseException as exc:
            self.errors.append(exc)

    def join(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and not self.errors, self.errors


def _publish_in_background(metric: MetricConfig, kafka: str, clients: int, rate: float) -> tuple[
        threading.Thread, dict[str, LoadResult]]:
    out: dict[str, LoadResult] = {}

    def run() -> None:
        # Each message to a random partition: librdkafka's default sticky partitioner sends keyless messages to one
        # partition for ``sticky.partitioning.linger.ms`` at a time, so a partition of the topic can get no message.
        publisher = ReportPublisher(kafka, delivery_timeout=180.0, config={"sticky.partitioning.linger.ms": 0})
        out["result"] = simulate_and_publish(metric, publisher,
                                             clients=clients, distribution="zipf:1.1", seed=5, per_message=10,
                                             rate=rate, chunk=5000, progress=False)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _topic_sketch(kafka: str, topic: str, registry: Registry, expected_messages: int) -> np.ndarray:
    """The all-time sketch of everything in the topic, folded directly from Kafka (the reference)."""
    reader = Consumer({"bootstrap.servers": kafka, "group.id": f"ref-{uuid.uuid4().hex[:8]}",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.subscribe([topic])
    values: list[bytes] = []
    stamps: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < expected_messages and time.monotonic() < deadline:
            for message in reader.consume(5000, 0.5):
                if message.error() is None:
                    values.append(message.value() or b"")
                    stamps.append(message.timestamp()[1] // 1000)
    finally:
        reader.close()
    assert len(values) == expected_messages, "the topic holds another number of messages than were acknowledged"
    folded = fold_messages(values, np.array(stamps, dtype=np.int64), registry)
    assert not folded.rejections
    return sum(v for k, v in folded.increments.items() if k.bucket == ALL_TIME)


def _store_total(store: RedisSketchStore, metric: MetricConfig) -> np.ndarray | None:
    shape = (metric.mechanism.cohorts, metric.mechanism.sketch_width)
    return store.snapshot(metric.name, metric.fingerprint, shape).total


def _messages_per_partition(kafka: str, topic: str) -> list[int]:
    reader = Consumer({"bootstrap.servers": kafka, "group.id": f"ref-{uuid.uuid4().hex[:8]}"})
    try:
        return [reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
    finally:
        reader.close()


def _counted(store: RedisSketchStore, metric: MetricConfig) -> int:
    try:
        total = _store_total(store, metric)
    except redis.RedisError:
        return -1
    return -1 if total is None else int(total.sum())


def _assert_exact(store: RedisSketchStore, metric: MetricConfig, kafka: str, topic: str, registry: Registry,
                  produced: LoadResult) -> None:
    wait_for(lambda: _counted(store, metric) == produced.records_acked, 90,
             f"{produced.records_acked} reports counted (now {_counted(store, metric)})")
    reference = _topic_sketch(kafka, topic, registry, produced.messages)
    np.testing.assert_array_equal(_store_total(store, metric), reference)
    assert store.rebuilding(topic) == {}


def test_redis_killed_mid_stream_and_restarted_from_its_append_only_file(
        kafka_bootstrap, fresh_topic, private_redis):
    topic = fresh_topic(partitions=PARTITIONS)
    registry = registry_for(topic, METRIC)
    metric = registry["m"]
    store = RedisSketchStore.from_url(private_redis.url, "ldp")
    producer, produced = _publish_in_background(metric, kafka_bootstrap, clients=300_000, rate=60_000)
    consumer = ConsumerThread(registry, store, kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}")
    wait_for(lambda: consumer.consumer.reports_applied > 60_000, 60, "the consumer to apply reports")
    private_redis.kill()  # appendfsync everysec: up to a second of applied batches (counts and offsets) is lost
    time.sleep(1.0)
    private_redis.start()
    producer.join(120)
    _assert_exact(store, metric, kafka_bootstrap, topic, registry, produced["result"])
    consumer.join()
    assert produced["result"].records_acked == 300_000
    assert consumer.prometheus.get_sample_value("ldpstream_store_unavailable_total") > 0  # the outage was met


def test_redis_losing_all_its_data_is_rebuilt_from_kafka_while_estimates_are_withheld(
        kafka_bootstrap, fresh_topic, private_redis):
    topic = fresh_topic(partitions=PARTITIONS)
    registry = registry_for(topic, METRIC)
    metric = registry["m"]
    store = RedisSketchStore.from_url(private_redis.url, "ldp")
    group = f"g-{uuid.uuid4().hex[:8]}"
    # The rebuild of a partition can finish within a few hundred milliseconds, before the test would see its
    # marker: while the test holds it, an apply to a partition under rebuild waits (on the real store).
    released = threading.Event()
    apply = store.apply

    def held_apply(batch):
        if not released.is_set() and store.rebuilding(batch.topic):
            released.wait(300)
        return apply(batch)

    store.apply = held_apply
    producer, produced = _publish_in_background(metric, kafka_bootstrap, clients=200_000, rate=80_000)
    consumer = ConsumerThread(registry, store, kafka_bootstrap, group)
    decoder = DecoderService(registry, store, metrics=DecoderMetrics(registry=CollectorRegistry()))
    wait_for(lambda: consumer.consumer.reports_applied > 50_000, 60, "the consumer to apply reports")
    decoder.run_once()
    assert store.latest_estimate("m") is not None
    # Every key gone while the consumer runs (a restart without persistence, or a FLUSHALL).
    store.client.flushall()
    wait_for(lambda: store.rebuilding(topic) != {}, 30, "the consumer to notice the loss")
    decoder.run_once()
    assert decoder.last_withheld == ["m"] and store.latest_estimate("m") is None
    released.set()
    producer.join(120)
    _assert_exact(store, metric, kafka_bootstrap, topic, registry, produced["result"])
    decoder.run_once()
    assert decoder.last_withheld == [] and store.latest_estimate("m")["n_reports"] == 200_000
    consumer.join()

    # Again with the consumers down when the data goes: a new member learns the loss from the group's
    # committed offsets in Kafka, marks the partitions, and rebuilds them.
    store.client.flushall()
    restarted = ConsumerThread(registry, store, kafka_bootstrap, group)
    wait_for(lambda: _counted(store, metric) == 200_000, 90, "the rebuild after a restart")
    assert store.rebuilding(topic) == {}
    restarted.join()
    assert restarted.prometheus.get_sample_value("ldpstream_store_rebuilds_total") == PARTITIONS


def test_redis_losing_all_its_data_while_the_consumer_is_idle_is_rebuilt_from_kafka(
        kafka_bootstrap, fresh_topic, private_redis):
    """Every message counted, then every key gone: no partition receives another message, so nothing is refused
    at an apply; the consumer's idle check of the stored offsets notices, and every partition is rebuilt from Kafka
    to the exact counts."""
    topic = fresh_topic(partitions=PARTITIONS)
    registry = registry_for(topic, METRIC)
    metric = registry["m"]
    store = RedisSketchStore.from_url(private_redis.url, "ldp")
    producer, produced = _publish_in_background(metric, kafka_bootstrap, clients=40_000, rate=80_000)
    producer.join(120)
    consumer = ConsumerThread(registry, store, kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}")
    acked = produced["result"].records_acked
    # A partition that holds no message has nothing to lose and nothing to rebuild: every one must hold some.
    assert all(n > 0 for n in _messages_per_partition(kafka_bootstrap, topic)), "a partition got no message"
    wait_for(lambda: _counted(store, metric) == acked, 60, "every report counted")
    store.client.flushall()
    wait_for(lambda: consumer.prometheus.get_sample_value("ldpstream_store_rebuilds_total") == PARTITIONS, 30,
             "the consumer to notice the loss on every partition")
    _assert_exact(store, metric, kafka_bootstrap, topic, registry, produced["result"])
    consumer.join()


def test_the_kafka_broker_killed_and_restarted_mid_stream(services, kafka_bootstrap, fresh_topic, redis_url,
                                                            key_prefix):
    if services.source != "local stack":
        pytest.skip("restarting the broker needs the local stack")
    from ldpstream.deploy import stack

    config = stack.StackConfig.from_env()
    pid_file = config.kafka_dir / "kafka.pid"
    if not pid_file.exists():
        pytest.skip(f"the broker was not started from {config.state_dir} (another stack's process serves it)")
    topic = fresh_topic(partitions=PARTITIONS)
    registry = registry_for(topic, METRIC)
    metric = registry["m"]
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    producer, produced = _publish_in_background(metric, kafka_bootstrap, clients=300_000, rate=50_000)
    consumer = ConsumerThread(registry, store, kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}")
    wait_for(lambda: consumer.consumer.reports_applied > 40_000, 60, "the consumer to apply reports")
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not stack.status(config).kafka, 30, "the broker to go down")
    time.sleep(2.0)
    stack.up(config)
    producer.join(240)
    assert produced["result"].records_acked == 300_000  # the idempotent producer retried through the outage
    _assert_exact(store, metric, kafka_bootstrap, topic, registry, produced["result"])  # ... without duplicates
    consumer.join()


def test_the_decoder_killed_mid_decode_never_leaves_a_half_published_estimate(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path):
    topic = fresh_topic(partitions=2)
    metrics = {f"m{i}": {"id": i + 1, "mechanism": "orappor", "k": 64, "hashes": 2, "cohorts": 16, "epsilon": 2.0,
                         "support": 256, "windows": ["all", "1h", "1d"], "estimator": "mle"} for i in range(3)}
    registry_path = write_registry(tmp_path / "metrics.toml", topic, metrics)
    registry = Registry.load(registry_path)
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    for name in metrics:
        simulate_and_publish(registry[name], ReportPublisher(kafka_bootstrap), clients=20_000, distribution="zipf:1.1",
                             seed=1, per_message=100, progress=False)
    consumer = ConsumerThread(registry, store, kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}")
    wait_for(lambda: consumer.consumer.reports_applied == 60_000, 60, "every report applied")
    consumer.join()
    argv = [sys.executable, "-m", "ldpstream", "decode", "--interval", "0", "--no-kafka", "--metrics-port", "0",
            "--registry", str(registry_path), "--redis", redis_url, "--prefix", key_prefix]
    rng = np.random.default_rng(3)
    for _ in range(6):
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(float(rng.uniform(1.5, 3.0)))  # start-up, then somewhere inside a pass
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        for name in metrics:
            for window in ("all", "1h", "1d"):
                latest = store.latest_estimate(name, window)
                if latest is None:
                    continue
                history = store.estimate_history(name, window)
                assert history and history[0] == latest  # the estimate and its history move together
                assert latest["n_reports"] == 20_000 and len(latest["values"]) == 256
    assert subprocess.run([*argv[:4], "--once", *argv[6:]], capture_output=True, timeout=120).returncode == 0
    for name in metrics:
        assert json.dumps(store.latest_estimate(name)) and store.latest_estimate(name)["n_reports"] == 20_000
