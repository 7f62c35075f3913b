"""The decoder on real Kafka and Redis: estimates with intervals as JSON in Redis, a bounded history, one
Kafka message per metric and window and pass, Prometheus gauges for the top values only, and sliding
windows over time buckets taken from the reports' event times."""

from __future__ import annotations

import json
import time
from collections import Counter

import numpy as np
import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ldpstream.config import KafkaConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.device import privatize_population
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore
from ldpstream.wire import encode_records, payloads_from_reports
from tests.integration.helpers import read_messages

pytestmark = pytest.mark.integration

LABELS = ["en", "es", "zh", "hi", "ar", "pt", "bn", "ru", "ja", "de", "fr", "ko", "it", "tr", "vi", "pl"]
BUCKET = 600
NOW = int(time.time()) // BUCKET * BUCKET  # a multiple of BUCKET (event times must be near the clock)
OLD_TIME = NOW - 3 * 3600 + 100          # three hours before NOW
RECENT_TIME = NOW - 120                  # two minutes before NOW
NOW_THEN = OLD_TIME + 300                # a decode shortly after the old reports: its 1h sees only them
OLD, RECENT, FLAGS = 20_000, 10_000, 5_000
TOP_N = 3
HISTORY = 3


def decoder_registry(topic: str) -> Registry:
    return Registry.from_dict({
        "defaults": {"topic": topic, "bucket_seconds": BUCKET, "windows": ["all", "1h"]},
        "metrics": {
            "lang": {"id": 1, "mechanism": "krr", "k": 16, "epsilon": 4.0, "labels": LABELS,
                     "estimator": "unbiased"},
            "flags": {"id": 2, "mechanism": "krappor", "k": 8, "epsilon": 3.0},
        }})


def _publish(publisher: ReportPublisher, metric, values: np.ndarray, event_time: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    cohorts, reports = privatize_population(metric, values, rng)
    rows = encode_records(metric.id, metric.fingerprint, cohorts,
                          payloads_from_reports(metric.mechanism, reports), event_time=event_time)
    publisher.publish(metric.topic, rows, per_message=50)


def _concentrated(n: int, on: list[int], seed: int) -> np.ndarray:
    """n values: 80% spread over ``on`` (decreasing weights), 20% uniform over all 16."""
    rng = np.random.default_rng(seed)
    p = np.full(16, 0.2 / 16)
    weights = np.arange(len(on), 0, -1, dtype=float)
    p[on] += 0.8 * weights / weights.sum()
    return rng.choice(16, size=n, p=p)


def _gauge_values(prometheus: CollectorRegistry, name: str) -> dict[tuple[str, str], set[str]]:
    """(metric, window) → the ``value`` labels of the series a scrape shows for gauge ``name``."""
    shown: dict[tuple[str, str], set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(prometheus).decode()):
        if family.name == name:
            for sample in family.samples:
                shown.setdefault((sample.labels["metric"], sample.labels["window"]), set()).add(
                    sample.labels["value"])
    return shown


def test_decoder_publishes_estimates_history_kafka_messages_top_n_gauges_and_sliding_windows(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=2)
    estimates_topic = fresh_topic(partitions=1, stem="estimates")
    registry = decoder_registry(topic)
    lang, flags = registry["lang"], registry["flags"]

    publisher = ReportPublisher(kafka_bootstrap)
    _publish(publisher, lang, _concentrated(OLD, [0, 1, 2], seed=1), OLD_TIME, seed=11)
    _publish(publisher, lang, _concentrated(RECENT, [13, 14, 15], seed=2), RECENT_TIME, seed=12)
    _publish(publisher, flags, _concentrated(FLAGS, [5, 6, 7], seed=3) % 8, OLD_TIME, seed=13)
    assert publisher.flush().records_acked == OLD + RECENT + FLAGS

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    consumer = SketchConsumer(registry, store,
                              ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}"),
                              metrics=ConsumerMetrics(registry=CollectorRegistry()))
    consumer.run(idle_exit=3.0)
    assert consumer.reports_applied == OLD + RECENT + FLAGS

    prometheus = CollectorRegistry()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True})
    service = DecoderService(registry, store, producer=producer, estimates_topic=estimates_topic,
                             metrics=DecoderMetrics(registry=prometheus), history=HISTORY, top_n=TOP_N)

    # Sliding windows: 'all' counts every bucket; '1h' only the buckets overlapping the last hour.
    by_window = {e.window: e for e in service.decode_metric(lang, now=NOW)}
    assert by_window["all"].estimate.n_reports == OLD + RECENT and by_window["all"].buckets == 2
    assert by_window["1h"].estimate.n_reports == RECENT and by_window["1h"].buckets == 1
    top_recent = np.argsort(-by_window["1h"].estimate.frequencies)[:TOP_N]
    assert set(top_recent.tolist()) == {13, 14, 15}
    then = {e.window: e for e in service.decode_metric(lang, now=NOW_THEN)}
    assert then["1h"].estimate.n_reports == OLD  # the later bucket lies in that decode's future
    assert set(np.argsort(-then["1h"].estimate.frequencies)[:TOP_N].tolist()) == {0, 1, 2}
    # A window with no report is not estimated at all.
    assert [e.window for e in service.decode_metric(flags, now=NOW)] == ["all"]

    # One pass "back then", then four passes now.
    first = service.run_once(now=NOW_THEN)
    assert sorted((e.metric, e.window) for e in first) == [("flags", "1h"), ("flags", "all"),
                                                          ("lang", "1h"), ("lang", "all")]
    assert _gauge_values(prometheus, "ldpstream_estimate_ratio")[("lang", "1h")] == {"en", "es", "zh"}
    for _ in range(4):
        assert len(service.run_once(now=NOW)) == 3

    # Prometheus: per-value series for the current top N only; values that left the top are gone.
    for gauge in ("ldpstream_estimate_ratio", "ldpstream_estimate_low_95_ratio", "ldpstream_estimate_high_95_ratio"):
        shown = _gauge_values(prometheus, gauge)
        assert all(len(values) == TOP_N for values in shown.values()), (gauge, shown)
        assert shown[("lang", "1h")] == {"tr", "vi", "pl"}, (gauge, shown)
        assert shown[("lang", "all")] <= set(LABELS)
    reports = "ldpstream_estimate_reports"
    assert prometheus.get_sample_value(reports, {"metric": "lang", "window": "1h"}) == RECENT
    assert prometheus.get_sample_value(reports, {"metric": "lang", "window": "all"}) == OLD + RECENT
    last_run_gauge = prometheus.get_sample_value("ldpstream_decoder_last_run_timestamp_seconds")
    assert last_run_gauge == pytest.approx(time.time(), abs=60)

    # Redis: the latest estimate as JSON, with counts and 95% intervals, and a history trimmed to HISTORY.
    client = store.client
    published = store.latest_estimate("lang", "1h")
    assert published["metric"] == "lang" and published["window"] == "1h"
    assert published["n_reports"] == RECENT and published["buckets"] == 1 and published["snapshot_time"] == NOW
    assert [v["value"] for v in published["values"]] == LABELS
    for entry in published["values"]:
        assert entry["low_95"] <= entry["frequency"] <= entry["high_95"] and entry["std_error"] > 0
    assert store.latest_estimate("lang", "all")["n_reports"] == OLD + RECENT
    assert store.latest_estimate("flags", "all")["n_reports"] == FLAGS
    for where, length in (("lang:all", HISTORY), ("lang:1h", HISTORY), ("flags:all", HISTORY), ("flags:1h", 1)):
        history = client.lrange(f"{key_prefix}:history:{where}", 0, -1)
        assert len(history) == length, where
        if where != "flags:1h":
            assert json.loads(history[0]) == store.latest_estimate(*where.split(":"))
    # flags' 1h window has emptied since: its estimate is retracted, its history kept.
    assert store.latest_estimate("flags", "1h") is None
    assert [json.loads(h)["snapshot_time"] for h in client.lrange(f"{key_prefix}:history:lang:1h", 0, -1)] == [NOW] * 3
    last_run = json.loads(client.get(f"{key_prefix}:decoder:last_run"))
    assert abs(last_run["time"] - time.time()) < 60

    # Kafka: one message per metric and window and pass, keyed <metric>:<window>, the JSON published to Redis.
    # flags:1h: its estimate back then, and one retraction record when its window emptied.
    messages = read_messages(kafka_bootstrap, estimates_topic, expected=4 + 4 * 3 + 1)
    assert Counter(m.key().decode() for m in messages) == {"lang:all": 5, "lang:1h": 5, "flags:all": 5, "flags:1h": 2}
    last = {m.key().decode(): json.loads(m.value()) for m in messages}  # one partition: in order
    for where, body in last.items():
        if where != "flags:1h":
            assert body == store.latest_estimate(*where.split(":"))
    assert last["flags:1h"]["retracted"] is True


def test_a_window_that_has_emptied_leaves_no_stale_estimate_or_gauges(redis_url, key_prefix):
    from ldpstream.store import PartitionBatch, SketchKey

    registry = decoder_registry("unused")
    lang = registry["lang"]
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    counts = np.zeros((1, 16), dtype=np.int64)
    counts[0, :3] = [500, 300, 200]
    key = SketchKey("lang", lang.fingerprint, OLD_TIME // BUCKET)
    assert store.apply(PartitionBatch("unused", 0, None, 1, {key: counts}, {"reports_applied": 1000})).applied
    prometheus = CollectorRegistry()
    service = DecoderService(registry, store, metrics=DecoderMetrics(registry=prometheus), top_n=TOP_N)
    service.run_once(now=NOW_THEN)
    assert store.latest_estimate("lang", "1h")["n_reports"] == 1000
    service.run_once(now=NOW)  # three hours later: the 1h window holds no report any more
    stale = store.latest_estimate("lang", "1h")
    assert stale is None or stale["n_reports"] == 0
    assert ("lang", "1h") not in _gauge_values(prometheus, "ldpstream_estimate_ratio")
    assert not prometheus.get_sample_value("ldpstream_estimate_reports", {"metric": "lang", "window": "1h"})
