"""``ldpstream status --json`` on real Kafka and Redis, through the CLI entry point: per-metric totals and
per-bucket counts, stored offsets against end offsets (lag), dead letters by reason, and the last decode."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from ldpstream.cli import main
from ldpstream.config import KafkaConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.operations.status import privacy_of
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore
from ldpstream.wire import encode_records, symbol_payloads
from tests.integration.helpers import write_registry

pytestmark = pytest.mark.integration

PARTITIONS = 3
BUCKET = 3600
METRICS = {
    "lang": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 2.0, "bucket_seconds": BUCKET},
    "idle": {"id": 2, "mechanism": "krappor", "k": 16, "epsilon": 1.0},
}
T0 = (int(time.time()) // BUCKET - 2) * BUCKET + 2_800  # two buckets ago (event times must be near the clock)


def _status(capsys, bootstrap: str, redis_url: str, prefix: str, registry_path) -> dict:
    capsys.readouterr()
    code = main(["status", "--json", "--kafka", bootstrap, "--redis", redis_url, "--prefix", prefix,
                 "--registry", str(registry_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_status_json_reports_counts_per_bucket_offsets_and_lag_dead_letters_and_last_decode(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path, capsys):
    topic = fresh_topic(partitions=PARTITIONS)
    dead_letter_topic = fresh_topic(partitions=1, stem="dlq")
    registry_path = write_registry(tmp_path / "metrics.toml", topic, METRICS)
    registry = Registry.load(registry_path)
    lang = registry["lang"]

    # 700 reports in one hour bucket, 300 in the next; published as gateway messages of 10 records.
    event_times = np.repeat([T0, T0 + BUCKET], [700, 300])
    rows = encode_records(lang.id, lang.fingerprint, 0, symbol_payloads(np.arange(1000) % 8), event_time=event_times)
    publisher = ReportPublisher(kafka_bootstrap, config={"sticky.partitioning.linger.ms": 0})
    messages = publisher.publish(topic, rows, per_message=10)
    assert publisher.flush().records_acked == 1000
    bad = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    for value in (b"garbage", b"more garbage, still not a report",
                  encode_records(77, 1, 0, symbol_payloads([0])).tobytes()):
        bad.produce(topic, value)
    assert bad.flush(10) == 0
    messages += 3

    before = _status(capsys, kafka_bootstrap, redis_url, key_prefix, registry_path)
    assert before["metrics"]["lang"]["reports"] == 0 and before["metrics"]["lang"]["per_bucket"] == {}
    assert [p["partition"] for p in before["partitions"]] == list(range(PARTITIONS))
    assert all(p["stored_offset"] is None for p in before["partitions"])
    assert sum(p["lag"] for p in before["partitions"]) == sum(p["end_offset"] for p in before["partitions"]) == messages
    assert before["dead_letters"] == {} and before["last_decode"] is None

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    consumer = SketchConsumer(registry, store, ConsumerSettings(
        KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}", dead_letter_topic=dead_letter_topic),
        metrics=ConsumerMetrics(registry=CollectorRegistry()))
    consumer.run(idle_exit=3.0)
    assert consumer.reports_applied == 1000
    DecoderService(registry, store, metrics=DecoderMetrics(registry=CollectorRegistry())).run_once(now=T0 + BUCKET)
    decoded_at = time.time()

    after = _status(capsys, kafka_bootstrap, redis_url, key_prefix, registry_path)
    entry = after["metrics"]["lang"]
    assert entry["reports"] == 1000
    assert entry["per_bucket"] == {str(T0 // BUCKET): 700, str(T0 // BUCKET + 1): 300}
    assert entry["bucket_seconds"] == BUCKET and entry["fingerprint"] == f"{lang.fingerprint:08x}"
    idle = registry["idle"].mechanism
    assert after["metrics"]["idle"] == {"reports": 0, "per_bucket": {}, "bucket_seconds": 3600,
                                        "fingerprint": f"{registry['idle'].fingerprint:08x}",
                                        "privacy": privacy_of(idle), "rebuilding": {}}
    assert entry["privacy"]["epsilon"] == lang.mechanism.epsilon
    for partition in after["partitions"]:
        assert partition["topic"] == topic
        assert partition["stored_offset"] == partition["end_offset"] and partition["lag"] == 0, partition
    assert sum(p["end_offset"] for p in after["partitions"]) == messages
    assert after["dead_letters"] == {"malformed": 2, "unknown_metric": 1}
    assert after["last_decode"]["time"] == pytest.approx(decoded_at, abs=5)
    assert 0 <= after["last_decode"]["seconds_ago"] < 30

    # The human-readable form says the same.
    capsys.readouterr()
    assert main(["status", "--kafka", kafka_bootstrap, "--redis", redis_url, "--prefix", key_prefix,
                 "--registry", str(registry_path)]) == 0
    text = capsys.readouterr().out
    assert "1,000 reports in 2 bucket(s)" in text
    assert "dead letters: malformed 2, unknown_metric 1" in text
    assert "lag 0" in text and "last decode:" in text and "never" not in text
