"""A string metric without a dictionary, end to end on real Kafka and Redis: simulated clients (and a few real
SDK clients) send their discovery records (two n-grams at the slots their secret picks, paired, and the full
string riding, one version-2 record each), consumers fold them exactly once, and the live decoder discovers the
frequent strings and publishes them with estimates and intervals to Redis, the estimates topic and Prometheus.

Counts must be exact: the full-string metric counts every client once, the n-gram metrics twice in all, the
slot pairs' statistics once; a second consumer group replaying the topic adds nothing. The published dictionary
must hold the true top strings (at ε = 6 and 60,000 clients they stand far above the pair noise:
docs/math/dictionary.md, "Where recovery stops").
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from ldpstream.config import KafkaConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.decoder.watch import render
from ldpstream.producers.client import LdpClient
from ldpstream.producers.loadgen import simulate_discovery_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry, discovery_slot_name
from ldpstream.store import RedisSketchStore
from tests.integration.helpers import read_estimates

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.pipelines]

CLIENTS = 60_000
SDK_CLIENTS = 12
PARTITIONS = 4
STRINGS = ["news.io", "mail.io", "shop.io", "maps.io", "blog.io", "wiki.io", "chat.io", "docs.io", "play.io",
           "talk.io", "bank.io", "game.io"]
#: Zipf(1) over 12 strings: shares .32, .16, .107, ...; the top three stand well above the pair noise.
TOP = STRINGS[:3]


def discovery_registry(topic: str, mechanism: str = "rappor") -> Registry:
    return Registry.from_dict({
        "defaults": {"topic": topic, "bucket_seconds": 3600},
        "metrics": {"site": {"id": 50, "retention": "2d", "windows": ["all", "1h"], "discovery": {
            "epsilon": 6.0, "length": 8, "ngram": 2, "alphabet": "abcdefghijklmnopqrstuvwxyz.",
            "full_bits": 64, "ngram_bits": 64, "cohorts": 16, "retire_after": 2, "mechanism": mechanism}}}})


def _total(store: RedisSketchStore, registry: Registry, name: str) -> int:
    metric = registry[name]
    shape = (metric.mechanism.cohorts, metric.mechanism.sketch_width)
    snapshot = store.snapshot(name, metric.fingerprint, shape)
    return int(metric.mechanism.reports_per_cohort(snapshot.all_time(shape)).sum())


@pytest.mark.parametrize("mechanism", ["rappor", "orappor"])
def test_a_metric_without_a_dictionary_is_discovered_live_and_counted_exactly_once(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path, mechanism):
    topic = fresh_topic(partitions=PARTITIONS)
    estimates_topic = fresh_topic(partitions=1, stem="estimates")
    registry = discovery_registry(topic, mechanism)
    metric = registry["site"]
    config = metric.discovery
    assert config is not None and config.slots == 4

    publisher = ReportPublisher(kafka_bootstrap)
    produced = simulate_discovery_and_publish(registry, metric, publisher, clients=CLIENTS, strings=STRINGS,
                                              distribution="zipf:1", seed=7, per_message=50)
    assert produced.records_acked == CLIENTS
    # Real devices through the SDK: each sends one record (its slots from its own secret), once per bucket.
    for i in range(SDK_CLIENTS):
        client = LdpClient(registry, publisher, secret_file=tmp_path / f"device-{i}")
        assert client.report("site", "news.io")
        assert not client.report("site", "news.io")  # the same bucket: nothing more
    publisher.flush()
    clients = CLIENTS + SDK_CLIENTS

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    prometheus = CollectorRegistry()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True})
    service = DecoderService(registry, store, producer=producer, estimates_topic=estimates_topic,
                             metrics=DecoderMetrics(registry=prometheus))
    settings = ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}")
    consumer = SketchConsumer(registry, store, settings, metrics=ConsumerMetrics(registry=CollectorRegistry()))
    stop = threading.Event()  # the decoder passes live while the consumer folds
    live = threading.Thread(target=service.run, args=(0.5, stop))
    live.start()
    try:
        consumer.run(idle_exit=4.0)
    finally:
        stop.set()
        live.join(timeout=120)

    # Exactly once: every client counted once in the full-string metric and its slot pair, twice in the n-grams.
    assert consumer.reports_applied == 3 * clients
    assert _total(store, registry, "site") == clients
    assert sum(_total(store, registry, discovery_slot_name("site", j)) for j in range(config.slots)) == 2 * clients
    stats = store.stats(topic, range(PARTITIONS))
    pairs = [registry.associations[name] for name in registry.associations]
    assert sum(stats.get(f"associated:{a.name}", 0) for a in pairs) == clients
    for association in pairs:
        held = store.pair_patterns(association, store.pair_buckets(association)).total
        assert held == stats.get(f"associated:{association.name}", 0) > 0
    # A second group replaying the whole topic finds every offset applied: nothing is counted again.
    replay = SketchConsumer(registry, store, replace(settings, group_id=f"r-{key_prefix}"),
                            metrics=ConsumerMetrics(registry=CollectorRegistry()))
    replay.run(idle_exit=3.0)
    assert replay.reports_applied == 0
    assert _total(store, registry, "site") == clients

    service.run_once()
    assert service.last_failed == []
    published = store.latest_estimate("site", "all")
    assert published is not None and published["n_reports"] == clients
    found = [v["value"] for v in published["values"]]
    assert set(TOP) <= set(found), found
    for value in published["values"]:
        assert 0 <= value["low_95"] <= value["frequency"] <= value["high_95"] <= 1
    truth = produced.true_counts / produced.true_counts.sum()
    top = {v["value"]: v for v in published["values"]}["news.io"]
    assert abs(top["frequency"] - truth[0]) < 4 * top["std_error"] + 1e-3  # within its noise (+ SDK clients)
    block = published["discovery"]
    assert block["retire_after"] == 2 and "retire" in block["rule"]
    assert [e["value"] for e in block["dictionary"]] == found
    assert set(block["seconds"]) == {"ngrams", "pairs", "cliques", "final", "decode"}
    assert store.latest_estimate("site", "1h")["n_reports"] == clients  # the reports are from now
    # Nothing new: the next pass republishes without decoding.
    service.run_once()
    assert store.latest_estimate("site", "all")["reused"] is True
    # The n-gram slots and the slot pairs are read by the discovery decoder, never published on their own.
    assert store.latest_estimate(discovery_slot_name("site", 0), "all") is None
    assert all(store.latest_joint(a.name, "all") is None for a in pairs)

    # The estimates topic and Prometheus carry the dictionary like any marginal.
    messages = read_estimates(kafka_bootstrap, estimates_topic, "site:all")
    assert messages and [v["value"] for v in messages[-1]["values"]] == found
    labels = {"metric": "site", "window": "all"}
    # (the names docs/monitoring.md agreed for dictionaries)
    assert prometheus.get_sample_value("ldpstream_dictionary_string_ratio", {**labels, "string": "news.io"}) > 0.2
    assert prometheus.get_sample_value("ldpstream_dictionary_string_low_95_ratio", {**labels, "string": "news.io"}) > 0
    assert prometheus.get_sample_value("ldpstream_dictionary_strings", labels) == len(found)
    assert prometheus.get_sample_value("ldpstream_dictionary_reports", labels) == clients
    assert prometheus.get_sample_value("ldpstream_dictionary_stage_seconds", {**labels, "stage": "pairs"}) >= 0
    assert prometheus.get_sample_value("ldpstream_dictionary_decode_seconds_count", {"metric": "site"}) >= 1
    assert prometheus.get_sample_value("ldpstream_dictionary_decode_failures_total", {"metric": "site"}) in (None, 0)
    assert prometheus.get_sample_value("ldpstream_estimate_ratio", {**labels, "value": "news.io"}) is None
    text = render(published)
    assert "discovered dictionary" in text and "news.io" in text
    rows = [f"{s}: {c / produced.true_counts.sum():.3f}" for s, c in zip(STRINGS, produced.true_counts, strict=True)]
    print(f"\ntruth: {', '.join(rows)}\n{text}\n{len(store.estimate_history('site', 'all'))} dictionaries published")

