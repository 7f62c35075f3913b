"""A string metric without a dictionary discovered by prefix extension (``discovery.method = "prefix"``), end to
end on real Kafka and Redis: simulated clients and real SDK devices each send one OLH report of their string's
prefix at their cohort's group, consumers fold them exactly once into one sketch, and the live decoder publishes
the dictionary with estimates and intervals (from the whole-string group) to Redis, the estimates topic and
Prometheus, shown by ``watch`` (docs/math/dictionary.md#prefix-extension).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from ldpstream.config import KafkaConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.decoder.watch import render
from ldpstream.mechanisms import PrefixOLH
from ldpstream.producers.client import LdpClient
from ldpstream.producers.loadgen import simulate_discovery_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore
from tests.integration.helpers import read_estimates, write_registry

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.pipelines]

CLIENTS = 200_000
SDK_CLIENTS = 8
STRINGS = ["news.io", "mail.io", "shop.io", "maps.io", "blog.io", "wiki.io", "chat.io", "docs.io", "play.io",
           "talk.io", "bank.io", "game.io"]


def test_prefix_discovery_live(kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path):
    topic = fresh_topic(partitions=4)
    estimates_topic = fresh_topic(partitions=1, stem="estimates")
    registry = Registry.from_dict({
        "defaults": {"topic": topic, "bucket_seconds": 3600},
        "metrics": {"site": {"id": 60, "windows": ["all"], "discovery": {
            "method": "prefix", "epsilon": 4.0, "length": 8, "cohorts": 512,
            "alphabet": "abcdefghijklmnopqrstuvwxyz.", "alpha": 0.01, "retire_after": 2}}}})
    metric = registry["site"]
    assert isinstance(metric.mechanism, PrefixOLH) and metric.mechanism.groups == 4 and metric.discovers
    publisher = ReportPublisher(kafka_bootstrap)
    produced = simulate_discovery_and_publish(registry, metric, publisher, clients=CLIENTS, strings=STRINGS,
                                              distribution="zipf:1", seed=3, per_message=50)
    assert produced.records_acked == CLIENTS
    for i in range(SDK_CLIENTS):  # real devices: one report each, memoized per bucket
        client = LdpClient(registry, publisher, secret_file=tmp_path / f"device-{i}")
        assert client.report("site", "news.io")
        assert not client.report("site", "news.io")
    publisher.flush()
    clients = CLIENTS + SDK_CLIENTS

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    settings = ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}")
    consumer = SketchConsumer(registry, store, settings, metrics=ConsumerMetrics(registry=CollectorRegistry()))
    consumer.run(idle_exit=4.0)
    assert consumer.reports_applied == clients
    shape = (metric.mechanism.cohorts, metric.mechanism.sketch_width)
    assert int(store.snapshot("site", metric.fingerprint, shape).all_time(shape).sum()) == clients

    prometheus = CollectorRegistry()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True})
    service = DecoderService(registry, store, producer=producer, estimates_topic=estimates_topic,
                             metrics=DecoderMetrics(registry=prometheus))
    service.run_once()
    assert service.last_failed == []
    published = store.latest_estimate("site", "all")
    assert published is not None and published["n_reports"] == clients
    found = [v["value"] for v in published["values"]]
    # every true string stands above the step thresholds; BH at 0.01 lets a false one in about one run in six
    assert set(STRINGS[:4]) <= set(found) and len(set(found) - set(STRINGS)) <= 1, found
    for value in published["values"]:
        assert 0 <= value["low_95"] <= value["frequency"] <= value["high_95"] <= 1
    truth = dict(zip(STRINGS, produced.true_counts / CLIENTS, strict=True))
    top = {v["value"]: v for v in published["values"]}["news.io"]
    assert abs(top["frequency"] - truth["news.io"]) < 4 * top["std_error"]
    assert "fit" in published  # the last group's least squares against the dictionary: its misfit
    block = published["discovery"]
    assert block["method"] == "prefix" and [s["length"] for s in block["steps"]] == [2, 4, 6, 8]
    assert [e["value"] for e in block["dictionary"]] == found and block["alpha"] == 0.01
    service.run_once()  # nothing new: republished without decoding
    assert store.latest_estimate("site", "all")["reused"] is True
    messages = read_estimates(kafka_bootstrap, estimates_topic, "site:all")
    assert messages and [v["value"] for v in messages[-1]["values"]] == found
    labels = {"metric": "site", "window": "all"}
    assert prometheus.get_sample_value("ldpstream_dictionary_strings", labels) == len(found)
    assert prometheus.get_sample_value("ldpstream_dictionary_string_ratio", {**labels, "string": "news.io"}) > 0.2
    text = render(published)
    assert "discovered dictionary" in text and "news.io" in text


def test_produce_publishes_a_prefix_metric_and_its_truth(kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path,
                                                         capsys):
    """``ldpstream produce NAME --strings FILE`` on a prefix discovery metric: one report per client, and the
    strings drawn stored as the truth the live view shows beside the dictionary."""
    from ldpstream.cli import main

    topic = fresh_topic(partitions=1)
    path = str(write_registry(tmp_path / "metrics.toml", topic, {"site": {"id": 61, "discovery": {
        "method": "prefix", "epsilon": 4.0, "length": 8, "cohorts": 64, "alphabet": "abcdefghijklmnopqrstuvwxyz."}}}))
    words = tmp_path / "words.txt"
    words.write_text("\n".join(STRINGS[:3]) + "\n")
    capsys.readouterr()
    assert main(["produce", "site", "--registry", path, "--kafka", kafka_bootstrap, "--redis", redis_url, "--prefix",
                 key_prefix, "--clients", "2000", "--seed", "1", "--strings", str(words), "--json"]) == 0
    produced = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert produced["records_acked"] == 2000 and sum(produced["true_counts"]) == 2000
    truth = RedisSketchStore.from_url(redis_url, key_prefix).string_truth("site")
    assert truth is not None and set(truth) == set(STRINGS[:3]) and sum(truth.values()) == 2000
