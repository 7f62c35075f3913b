"""The consumer's lag gauge: messages after its position, per partition, from fetched watermarks."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from ldpstream.config import KafkaConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.producers.loadgen import simulate_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.store import RedisSketchStore
from tests.integration.helpers import registry_for

pytestmark = pytest.mark.integration


def test_lag_is_reported_per_partition_and_reaches_zero(kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=2)
    registry = registry_for(topic, {"m": {"id": 41, "mechanism": "krr", "k": 4, "epsilon": 1.0}})
    simulate_and_publish(registry["m"], ReportPublisher(kafka_bootstrap, config={"sticky.partitioning.linger.ms": 0}),
                         clients=20_000, distribution="uniform", seed=1)
    prometheus = CollectorRegistry()
    consumer = SketchConsumer(registry, RedisSketchStore.from_url(redis_url, key_prefix),
                              ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}", batch_size=500,
                                               lag_interval=0.0),
                              metrics=ConsumerMetrics(prometheus))
    consumer.start()
    seen_backlog = False
    try:
        while consumer.reports_applied < 20_000:
            consumer.poll_once()
            lags = [prometheus.get_sample_value("ldpstream_consumer_lag_messages",
                                                {"topic": topic, "partition": str(p)}) for p in (0, 1)]
            seen_backlog |= any(lag is not None and lag > 0 for lag in lags)
        for _ in range(3):
            consumer.poll_once()
        assert seen_backlog
        for partition in (0, 1):
            assert prometheus.get_sample_value("ldpstream_consumer_lag_messages",
                                               {"topic": topic, "partition": str(partition)}) == 0
    finally:
        consumer.close()
    # a partition the consumer no longer owns has no lag series
    assert prometheus.get_sample_value("ldpstream_consumer_lag_messages", {"topic": topic, "partition": "0"}) is None
