"""Exactly once on real Kafka and Redis: replays refused, rebalances and SIGKILLs count nothing twice.

The services come from the fixtures' ``kafka_config``/``redis_config``, so these tests also run against a
secured stack (``LDPSTREAM_CONFIG=<stack dir>/secure/ldpstream.toml``: TLS, SASL/SCRAM, an ACL user) or a
Redis Cluster."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.producers.loadgen import simulate_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.store import PartitionBatch, RedisSketchStore, SketchKey
from tests.integration.helpers import applied_reports, registry_for, wait_for, write_registry

pytestmark = pytest.mark.integration

METRIC = {"m": {"id": 9, "mechanism": "krr", "k": 8, "epsilon": 1.0}}
PARTITIONS = 4


def total_counted(store: RedisSketchStore, registry) -> int:
    metric = registry["m"]
    snapshot = store.snapshot("m", metric.fingerprint, (1, 8))
    return int(sum(int(s.sum()) for s in snapshot.buckets.values()))


def test_redis_applies_a_batch_only_where_the_consumer_expects_the_partition_to_be(redis_config, key_prefix):
    store = RedisSketchStore(redis_config.client(), key_prefix)
    key = SketchKey("m", 1, 0)
    counts = np.arange(8).reshape(1, 8)

    def batch(expected, next_offset):
        return PartitionBatch("t", 0, expected, next_offset, {key: counts}, {"reports_applied": 28})

    assert store.apply(batch(None, 100)).applied
    replay = store.apply(batch(None, 150))  # a replay from the start, or a consumer fenced by a rebalance
    assert not replay.applied and replay.next_offset == 100
    stale = store.apply(batch(50, 150))
    assert not stale.applied and stale.next_offset == 100
    assert store.apply(batch(100, 120)).applied
    assert store.apply(batch(120, 130)).applied  # the batch may start past 120: offsets can have gaps
    snapshot = store.snapshot("m", 1, (1, 8))
    np.testing.assert_array_equal(snapshot.buckets[0], 3 * counts)
    assert store.next_offsets("t", [0, 1]) == {0: 130, 1: None}
    assert store.stats("t", [0])["reports_applied"] == 84

    # Redis rolls back (a restart that lost its last second, counts and offset together): a consumer that
    # expects 130 is refused and told to re-read from 120, so the lost batch is counted again, not skipped.
    store.client.set(f"{key_prefix}:{{t:0}}:offset", 120)
    rolled_back = store.apply(batch(130, 140))
    assert not rolled_back.applied and rolled_back.next_offset == 120


@pytest.mark.faults
def test_two_consumers_with_rebalances_mid_stream_count_exactly_what_was_produced(
        kafka_config, redis_config, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=PARTITIONS)
    registry = registry_for(topic, METRIC)
    store = RedisSketchStore(redis_config.client(), key_prefix)
    kafka = dataclasses.replace(kafka_config, consumer_settings={"session.timeout.ms": "6000",
                                                                 "heartbeat.interval.ms": "500"})
    settings = ConsumerSettings(kafka, group_id=f"g-{key_prefix}", batch_size=500)
    # Random partitioning per message, so every partition (hence both consumers) gets reports.
    publisher = ReportPublisher(kafka_config, config={"sticky.partitioning.linger.ms": 0})
    first = simulate_and_publish(registry["m"], publisher, clients=60_000, distribution="uniform", seed=1)

    stop_a, stop_b = threading.Event(), threading.Event()
    consumer_a = SketchConsumer(registry, store, settings)
    consumer_b = SketchConsumer(registry, store, settings)
    thread_a = threading.Thread(target=consumer_a.run, args=(stop_a,), daemon=True)
    thread_b = threading.Thread(target=consumer_b.run, args=(stop_b,), daemon=True)
    second: dict[str, int] = {}

    def produce_while_rebalancing() -> None:
        result = simulate_and_publish(registry["m"], publisher, clients=120_000, distribution="uniform",
                                      seed=2, rate=6_000, chunk=1_000)
        second["acked"] = result.records_acked

    producer = threading.Thread(target=produce_while_rebalancing, daemon=True)
    thread_a.start()
    wait_for(lambda: applied_reports(store, topic, PARTITIONS) > 5_000, 60, "consumer A to start applying")
    producer.start()
    thread_b.start()  # B joins: the group rebalances while A is mid-stream
    wait_for(lambda: consumer_b.reports_applied > 0, 60, "consumer B to apply reports")
    assert producer.is_alive(), "the stream ended before the rebalance"
    stop_a.set()  # A leaves mid-stream: a second rebalance hands its partitions to B
    thread_a.join(60)
    assert not thread_a.is_alive()
    producer.join(60)
    produced = first.records_acked + second["acked"]
    assert produced == 180_000
    wait_for(lambda: applied_reports(store, topic, PARTITIONS) >= produced, 90, "all reports to be applied")
    time.sleep(2)  # anything counted twice would show up now
    stop_b.set()
    thread_b.join(30)
    assert applied_reports(store, topic, PARTITIONS) == produced
    assert total_counted(store, registry) == produced
    assert consumer_a.reports_applied + consumer_b.reports_applied == produced
    assert consumer_a.reports_applied > 0 and consumer_b.reports_applied > 0


def _consumer_process(registry_path, kafka_bootstrap, redis_url, prefix, group) -> subprocess.Popen:
    """``ldpstream consume``; security, if any, from the same ``LDPSTREAM_CONFIG`` as the fixtures'."""
    env = {**os.environ, "LDPSTREAM_KAFKA": kafka_bootstrap, "LDPSTREAM_REDIS": redis_url}
    return subprocess.Popen(
        [sys.executable, "-m", "ldpstream.cli", "consume", "--registry", str(registry_path), "--prefix", prefix,
         "--group", group, "--batch-size", "300", "--metrics-port", "0",
         "--consumer-config", "session.timeout.ms=6000", "--consumer-config", "heartbeat.interval.ms=500"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.faults
def test_consumers_killed_with_sigkill_mid_stream_and_restarted_count_exactly_once(
        kafka_bootstrap, redis_url, kafka_config, redis_config, fresh_topic, key_prefix, tmp_path):
    topic = fresh_topic(partitions=PARTITIONS)
    registry = registry_for(topic, METRIC)
    registry_path = write_registry(tmp_path / "metrics.toml", topic, METRIC)
    store = RedisSketchStore(redis_config.client(), key_prefix)
    produced = simulate_and_publish(registry["m"], ReportPublisher(kafka_config), clients=400_000,
                                    distribution="geometric", seed=3).records_acked
    group = f"g-{key_prefix}"
    rng = np.random.default_rng(4)
    kills = 0
    while kills < 3:
        before = applied_reports(store, topic, PARTITIONS)
        proc = _consumer_process(registry_path, kafka_bootstrap, redis_url, key_prefix, group)
        try:
            wait_for(lambda b=before: applied_reports(store, topic, PARTITIONS) > b, 60, "the consumer to apply",
                     interval=0.005)
            time.sleep(float(rng.uniform(0.0, 0.05)))  # somewhere inside the stream of batches
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        kills += 1
        assert applied_reports(store, topic, PARTITIONS) < produced, "killed too late to test anything"
    proc = _consumer_process(registry_path, kafka_bootstrap, redis_url, key_prefix, group)
    try:
        wait_for(lambda: applied_reports(store, topic, PARTITIONS) >= produced, 120, "all reports to be applied")
        time.sleep(2)
    finally:
        proc.terminate()
        proc.wait(30)
    assert applied_reports(store, topic, PARTITIONS) == produced
    assert total_counted(store, registry) == produced


def test_bucket_sketches_expire_in_redis_and_the_all_time_rollup_stays(redis_config, key_prefix):
    from ldpstream.store import ALL_TIME

    store = RedisSketchStore(redis_config.client(), key_prefix)
    now = int(time.time())
    old, recent, rollup = SketchKey("m", 1, 5), SketchKey("m", 1, 7), SketchKey("m", 1, ALL_TIME)
    ones = np.ones((1, 8), dtype=np.int64)
    batch = PartitionBatch("t", 0, None, 10, {old: ones, recent: 2 * ones, rollup: 3 * ones},
                           expire_at={old: now - 1, recent: now + 3600})
    assert store.apply(batch).applied
    assert not store.client.exists(f"{key_prefix}:{{t:0}}:sk:m:00000001:5")  # expired on arrival
    assert 0 < store.client.ttl(f"{key_prefix}:{{t:0}}:sk:m:00000001:7") <= 3600
    assert store.client.ttl(f"{key_prefix}:{{t:0}}:sk:m:00000001:all") == -1  # never expires
    snapshot = store.snapshot("m", 1, (1, 8), expired_before=6)
    assert list(snapshot.buckets) == [7]
    np.testing.assert_array_equal(snapshot.all_time((1, 8)), 3 * ones)
    assert not store.client.sismember(f"{key_prefix}:index:m:00000001", f"{key_prefix}:{{t:0}}:sk:m:00000001:5")
