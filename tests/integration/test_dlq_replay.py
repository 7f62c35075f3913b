"""``ldpstream dlq replay`` on real Kafka and Redis.

A consumer running a registry without the metric ``flags`` dead-letters its 20 messages (``unknown_metric``)
and one malformed message; the dead-letter topic also holds a duplicate of one of them (the topic is at least
once). With ``flags`` added to the registry, replays send each of the 20 sources back to the reports topic once
(two replays running at once included), leave the malformed message dead, and keep the original Kafka
timestamps (the ``flags`` records carry no event time, so they count in the hour their messages were first
sent, three hours ago). A later replay sends nothing: the consumers count every replayed report exactly once.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import numpy as np
import pytest
import redis
from confluent_kafka import Consumer, Producer, TopicPartition

from ldpstream.cli import main
from ldpstream.config import KafkaConfig
from ldpstream.consumers.dead_letter_replay import replay_dead_letters
from ldpstream.mechanisms.base import pack_bits
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore, keys
from ldpstream.wire import encode_records, symbol_payloads
from tests.integration.helpers import write_registry

pytestmark = [pytest.mark.integration, pytest.mark.pipelines]

LANG = {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 1.0, "bucket_seconds": 3600}
FLAGS = {"id": 2, "mechanism": "krappor", "k": 12, "epsilon": 1.0, "bucket_seconds": 3600}
NOW = int(time.time())
SENT_AT = NOW - 3 * 3600  # the flags messages' Kafka timestamp (their records carry no event time)


def _produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes, int | None, list | None]]) -> None:
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for key, value, timestamp, headers in messages:
        extra = {"timestamp": timestamp} if timestamp else {}
        producer.produce(topic, value, key=key, headers=headers,
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err else None, **extra)
    assert producer.flush(15) == 0 and not errors, errors


def _read(bootstrap: str, topic: str) -> list:
    """Every message of a one-partition topic, up to its end offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    _low, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < end and time.monotonic() < deadline:
        got += [m for m in consumer.consume(100, 0.5) if m.error() is None]
    consumer.close()
    assert len(got) == end
    return got


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets"})
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    consumer.close()
    return total


def test_replay_sends_each_dead_letter_once_and_leaves_the_malformed_one_dead(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path, capsys):
    topic = fresh_topic(partitions=2)
    dead_letter_topic = fresh_topic(partitions=1, stem="dlq")
    before = write_registry(tmp_path / "before.toml", topic, {"lang": LANG})
    after = write_registry(tmp_path / "after.toml", topic, {"lang": LANG, "flags": FLAGS})
    flags = Registry.load(after)["flags"]
    lang = Registry.load(after)["lang"]

    rng = np.random.default_rng(11)
    lang_rows = encode_records(lang.id, lang.fingerprint, 0, symbol_payloads(rng.integers(0, 8, 30)),
                               event_time=NOW - 60)
    flag_rows = encode_records(flags.id, flags.fingerprint, 0, pack_bits(rng.integers(0, 2, (20, 12))), event_time=0)
    messages = [(b"lang-%d" % i, row.tobytes(), None, None) for i, row in enumerate(lang_rows)]
    messages += [(b"flags-%d" % i, row.tobytes(), SENT_AT * 1000, None) for i, row in enumerate(flag_rows)]
    messages.append((b"malformed", b"\x01not a report", None, None))
    _produce(kafka_bootstrap, topic, messages)

    services = ["--kafka", kafka_bootstrap, "--redis", redis_url, "--prefix", key_prefix]

    def run(*argv: str) -> str:
        capsys.readouterr()
        assert main(list(argv)) == 0, argv
        return capsys.readouterr().out

    def consume(registry: str) -> None:
        run("consume", *services, "--registry", registry, "--group", f"g-{key_prefix}", "--dead-letter-topic",
            dead_letter_topic, "--idle-exit", "3", "--metrics-port", "0")

    def replay(*extra: str) -> dict:
        return json.loads(run("dlq", "replay", *services, "--registry", str(after), "--dead-letter-topic",
                              dead_letter_topic, "--json", *extra))

    consume(str(before))
    dead = _read(kafka_bootstrap, dead_letter_topic)
    reasons = sorted(dict(m.headers())["reason"].decode() for m in dead)
    assert reasons == ["malformed"] + ["unknown_metric"] * 20
    # The dead letters carry the original Kafka timestamps.
    assert {int(dict(m.headers())["timestamp"]) // 1000 for m in dead if m.key().startswith(b"flags")} == {SENT_AT}
    # At least once: one dead letter arrives twice (same source header).
    twice = next(m for m in dead if m.key() == b"flags-7")
    _produce(kafka_bootstrap, dead_letter_topic, [(twice.key(), twice.value(), twice.timestamp()[1], twice.headers())])

    dry = replay("--dry-run")
    assert (dry["read"], dry["would_replay"], dry["replayed"]) == (22, 20, 0)
    # Two replays at once: each source is claimed by one of them (HSETNX), so 20 messages are sent in all.
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(replay_dead_letters(
        Registry.load(after), KafkaConfig(kafka_bootstrap), redis.Redis.from_url(redis_url), key_prefix,
        dead_letter_topic))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    first, other = (r.to_json() for r in results)
    assert first["read"] == other["read"] == 22
    assert first["replayed"] + other["replayed"] == 20
    assert first["replayed"] + first["already_replayed"] + first["pending"] == 21  # 20 sources, one twice
    assert first["still_refused"] == other["still_refused"] == {"malformed": 1}
    assert first["failed"] == other["failed"] == 0
    store = RedisSketchStore(redis.Redis.from_url(redis_url), key_prefix)
    ledger = redis.Redis.from_url(redis_url).hgetall(keys.dlq_replayed_key(key_prefix, dead_letter_topic))
    assert len(ledger) == 20 and all(v.startswith(b"replayed " + topic.encode()) for v in ledger.values())

    second = replay()
    assert second["replayed"] == 0 and second["already_replayed"] == 21 and second["still_refused"] == {"malformed": 1}
    assert _end_offsets(kafka_bootstrap, topic, 2) == len(messages) + 20

    consume(str(after))
    consume(str(after))  # nothing new: every replayed message counted once
    stats = store.stats(topic, range(2))
    assert stats["applied:flags"] == 20 and stats["applied:lang"] == 30
    snapshot = store.snapshot("flags", flags.fingerprint, (flags.mechanism.cohorts, flags.mechanism.sketch_width))
    # Counted in the hour the messages were first sent (the replay kept their timestamps), once each.
    assert set(snapshot.buckets) == {SENT_AT // 3600}
    # The malformed message stayed dead: still one in the dead-letter topic, never sent back.
    dead_after = _read(kafka_bootstrap, dead_letter_topic)
    assert sum(dict(m.headers())["reason"] == b"malformed" for m in dead_after) == 1
    assert len(dead_after) == 22
    text = run("dlq", "replay", *services, "--registry", str(after), "--dead-letter-topic", dead_letter_topic)
    assert f"{dead_letter_topic}: read 22 dead letters; replayed 0" in text
    assert "already replayed: 21; still refused (stay dead): malformed 1" in text
