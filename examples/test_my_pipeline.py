"""A test of your own pipeline against real Kafka and Redis, with the fixtures of the ldpstream pytest plugin
(installed with ldpstream: nothing to import or register)::

    LDPSTREAM_KAFKA=127.0.0.1:39092 LDPSTREAM_REDIS=redis://127.0.0.1:36379/0 python -m pytest test_my_pipeline.py

Without those variables the plugin uses testcontainers (when Docker runs) or starts the local stack.
``fresh_topic`` makes a new Kafka topic and ``key_prefix`` a Redis key prefix of the test's own; both are
deleted afterwards.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from ldpstream.config import KafkaConfig, RedisConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.producers import LdpClient, ReportPublisher
from ldpstream.registry import Registry

PLANS = ["free", "pro", "team", "enterprise"]
TRUE_COUNTS = {"free": 600, "pro": 250, "team": 100, "enterprise": 50}


def my_registry(topic: str) -> Registry:
    # ε = 8: little noise, so that a small test can check the counts closely.
    return Registry.from_dict({"defaults": {"topic": topic, "windows": ["all"]}, "metrics": {
        "plan": {"id": 7, "mechanism": "krr", "k": 4, "epsilon": 8.0, "labels": PLANS},
    }})


def test_reports_from_the_sdk_are_counted_and_decoded(kafka_bootstrap: str, redis_url: str,
                                                       fresh_topic: Callable[..., str], key_prefix: str) -> None:
    topic = fresh_topic(partitions=2)
    registry = my_registry(topic)
    total = sum(TRUE_COUNTS.values())

    # 1. Devices report with the SDK.
    publisher = ReportPublisher(kafka_bootstrap)
    rng = random.Random(7)
    for plan, count in TRUE_COUNTS.items():
        for _ in range(count):  # each user is a device with its own secret; they share one Kafka producer
            LdpClient(registry, publisher, secret=rng.randbytes(32)).report("plan", plan)
    assert publisher.flush().records_acked == total

    # 2. A consumer folds the reports into sketches in Redis, exactly once.
    store = RedisConfig(redis_url, key_prefix).store()
    consumer = SketchConsumer(registry, store,
                              ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}"),
                              metrics=ConsumerMetrics(registry=CollectorRegistry()))
    consumer.start()
    deadline = time.monotonic() + 60
    try:
        while store.stats(topic, range(2)).get("reports_applied", 0) < total and time.monotonic() < deadline:
            consumer.poll_once()
    finally:
        consumer.close()
    assert store.stats(topic, range(2)) == {"reports_applied": total, "applied:plan": total}

    # 3. The decoder estimates and publishes (here to Redis only; give it a producer for Kafka too).
    decoder = DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()))
    decoder.run_once()
    estimate = store.latest_estimate("plan", "all")
    assert estimate is not None and estimate["n_reports"] == total
    counts = {v["value"]: v["frequency"] * total for v in estimate["values"]}
    for plan, count in TRUE_COUNTS.items():
        assert abs(counts[plan] - count) < 40, (plan, counts[plan], count)
