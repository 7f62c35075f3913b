"""Dead letters end to end on real Kafka and Redis: a consumer fed a mix of valid and bad messages counts
exactly the valid ones, sends exactly the bad messages (whole) to the dead-letter topic with ``reason``,
``detail`` and ``source`` headers, counts them in Prometheus, and keeps running."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import Counter

import numpy as np
import pytest
import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from ldpstream.config import KafkaConfig
from ldpstream.consumers.dead_letter_replay import replay_dead_letters
from ldpstream.consumers.dead_letters import PREFIX_BYTES
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.mechanisms.base import pack_bits
from ldpstream.store import RedisSketchStore
from ldpstream.wire import encode_records, symbol_payloads
from tests.integration.helpers import read_messages, registry_for

pytestmark = pytest.mark.integration

METRICS = {
    "lang": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 1.0},
    "flags": {"id": 2, "mechanism": "krappor", "k": 12, "epsilon": 1.0},  # k % 8 != 0: padding bits exist
}
EVENT_TIME = int(time.time()) - 60


def _produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    """Publish (key, value) pairs and wait until Kafka acknowledged every one."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for key, value in messages:
        producer.produce(topic, value, key=key,
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
    assert producer.flush(15) == 0 and not errors, errors


def test_bad_messages_go_to_the_dead_letter_topic_whole_and_only_valid_reports_are_counted(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=2)
    dead_letter_topic = fresh_topic(partitions=1, stem="dlq")
    registry = registry_for(topic, METRICS)
    lang, flags = registry["lang"], registry["flags"]

    rng = np.random.default_rng(7)
    valid_symbols = rng.integers(0, 8, 300)
    valid_rows = encode_records(lang.id, lang.fingerprint, 0, symbol_payloads(valid_symbols), event_time=EVENT_TIME)
    valid_bits = rng.integers(0, 2, (50, 12))
    bit_rows = encode_records(flags.id, flags.fingerprint, 0, pack_bits(valid_bits), event_time=EVENT_TIME)

    good: list[tuple[bytes, bytes]] = [(b"ok-one-%d" % i, row.tobytes()) for i, row in enumerate(valid_rows[:200])]
    good += [(b"ok-gateway-%d" % i, valid_rows[200 + 20 * i:220 + 20 * i].tobytes()) for i in range(5)]
    good += [(b"ok-bits-%d" % i, row.tobytes()) for i, row in enumerate(bit_rows)]

    def krr(symbol: int, *, metric_id: int = lang.id, fp: int = lang.fingerprint) -> bytes:
        return encode_records(metric_id, fp, 0, symbol_payloads([symbol]), event_time=EVENT_TIME).tobytes()

    padded = pack_bits(np.ones((1, 12), dtype=np.uint8))
    padded[0, 1] |= 0x80  # bit 15: beyond k = 12
    bad_payload = encode_records(lang.id, lang.fingerprint, 0, np.zeros((1, 16), dtype=np.uint8)).tobytes()
    # A gateway message with one bad record among valid ones is refused whole: none of its records counts.
    poisoned_gateway = valid_rows[:3].tobytes() + krr(8)
    bad = {
        b"garbage": (b"definitely not an ldpstream report", "malformed"),
        b"short": (b"\x01\x00", "malformed"),
        b"version-2": (b"\x02" + krr(1)[1:], "malformed"),  # a version-1 record relabelled: no payload count
        b"version-3": (b"\x03" + krr(1)[1:], "malformed"),
        b"truncated": (krr(1)[:-1], "malformed"),
        b"unknown-metric": (krr(1, metric_id=999), "unknown_metric"),
        b"wrong-fingerprint": (krr(1, fp=lang.fingerprint ^ 0xFFFF), "fingerprint_mismatch"),
        b"symbol-out-of-range": (krr(8), "out_of_range"),
        b"padding-bit": (encode_records(flags.id, flags.fingerprint, 0, padded).tobytes(), "out_of_range"),
        b"payload-size": (bad_payload, "payload_size"),
        b"poisoned-gateway": (poisoned_gateway, "out_of_range"),
    }
    messages = good + [(key, value) for key, (value, _reason) in bad.items()]
    order = rng.permutation(len(messages))
    _produce(kafka_bootstrap, topic, [messages[i] for i in order])

    prometheus = CollectorRegistry()
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    consumer = SketchConsumer(registry, store, ConsumerSettings(
        KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}", dead_letter_topic=dead_letter_topic, batch_size=64),
        metrics=ConsumerMetrics(registry=prometheus))
    consumer.run(idle_exit=4.0)  # returns normally: the consumer never crashed on bad input

    # Counts: exactly the valid reports, symbol by symbol and bit by bit.
    assert consumer.messages_seen == len(messages)
    assert consumer.reports_applied == 300 + 50
    lang_snapshot = store.snapshot("lang", lang.fingerprint, (1, 8))
    assert list(lang_snapshot.buckets) == [EVENT_TIME // lang.bucket_seconds]
    np.testing.assert_array_equal(sum(lang_snapshot.buckets.values())[0], np.bincount(valid_symbols, minlength=8))
    flags_sketch = sum(store.snapshot("flags", flags.fingerprint, (1, 13)).buckets.values())[0]
    assert flags_sketch[0] == 50
    np.testing.assert_array_equal(flags_sketch[1:], valid_bits.sum(axis=0))
    stats = store.stats(topic, range(2))
    assert stats["reports_applied"] == 350 and stats["applied:lang"] == 300 and stats["applied:flags"] == 50
    expected_reasons = Counter(reason for _value, reason in bad.values())
    assert {k.split(":", 1)[1]: v for k, v in stats.items() if k.startswith("rejected:")} == expected_reasons

    # The dead-letter topic: exactly the bad messages, byte for byte, each with its reason and source.
    dead = read_messages(kafka_bootstrap, dead_letter_topic, expected=len(bad))
    assert sorted(m.key() for m in dead) == sorted(bad)
    offsets_of, timestamps_of = {}, {}
    for message in read_messages(kafka_bootstrap, topic, expected=len(messages)):
        offsets_of[message.key()] = f"{topic}/{message.partition()}/{message.offset()}"
        timestamps_of[message.key()] = str(message.timestamp()[1])
    for message in dead:
        value, reason = bad[message.key()]
        headers = {name: raw.decode() for name, raw in message.headers()}
        assert set(headers) == {"reason", "detail", "source", "timestamp"}
        assert message.value() == value
        assert headers["reason"] == reason, (message.key(), headers)
        assert headers["detail"]
        assert headers["source"] == offsets_of[message.key()]
        assert headers["timestamp"] == timestamps_of[message.key()]
    details = {m.key(): dict(m.headers())["detail"].decode() for m in dead}
    assert "version-2 record at byte 0 carries 0 payloads" in details[b"version-2"]
    assert "unsupported format version 3" in details[b"version-3"]
    assert "999" in details[b"unknown-metric"]
    assert f"{lang.fingerprint:08x}" in details[b"wrong-fingerprint"]

    # Prometheus: one increment per refused message, by reason; applied reports by metric.
    for reason, count in expected_reasons.items():
        assert prometheus.get_sample_value("ldpstream_messages_rejected_total", {"reason": reason}) == count
    assert prometheus.get_sample_value("ldpstream_reports_applied_total", {"metric": "lang"}) == 300
    assert prometheus.get_sample_value("ldpstream_reports_applied_total", {"metric": "flags"}) == 50
    assert prometheus.get_sample_value("ldpstream_messages_consumed_total") == len(messages)


def test_producer_chosen_kafka_timestamps_cannot_scatter_sketch_keys(kafka_bootstrap, redis_url, fresh_topic,
                                                                       key_prefix):
    """Regression: records without their own event time take the Kafka timestamp, which the producer picks.
    Scattered over the far future (once 5,000 such messages made 5,001 sketch keys that never expired),
    they are now refused with their reason, and the keys are those of the valid reports alone."""
    # Kafka 4 brokers refuse timestamps more than an hour ahead by default; a topic may allow any, and the
    # consumer must hold on its own. (Timestamps far in the past are accepted by default.)
    topic = f"test-ts-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"message.timestamp.after.max.ms": str(2**63 - 1)})])[
        topic].result(30)
    dead_letter_topic = fresh_topic(partitions=1, stem="dlq")
    registry = registry_for(topic, {"lang": METRICS["lang"]})
    lang = registry["lang"]
    row = encode_records(lang.id, lang.fingerprint, 0, symbol_payloads([3]), event_time=0).tobytes()
    now_ms = int(time.time() * 1000)
    hostile = [now_ms + (i + 2) * 86_400_000 for i in range(1000)]  # one per day, from tomorrow on
    hostile += [1000 + i * 3_600_000 for i in range(1000)]          # hourly, in 1970
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "acks": "all"})
    errors: list[str] = []

    def on_delivery(err: object, _message: object) -> None:
        if err is not None:
            errors.append(str(err))

    for stamp in [now_ms] * 10 + hostile:
        producer.produce(topic, row, timestamp=stamp, on_delivery=on_delivery)
    assert producer.flush(15) == 0 and not errors, errors[:3]

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    consumer = SketchConsumer(registry, store, ConsumerSettings(
        KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}", dead_letter_topic=dead_letter_topic),
        metrics=ConsumerMetrics(registry=CollectorRegistry()))
    consumer.run(idle_exit=4.0)
    assert consumer.reports_applied == 10
    assert store.stats(topic, [0])["rejected:event_time_out_of_range"] == len(hostile)
    sketch_keys = [k for k in store.client.scan_iter(f"{key_prefix}:*") if b":sk:" in k]
    assert len(sketch_keys) == 2  # the valid reports' bucket and the all-time rollup
    dead = read_messages(kafka_bootstrap, dead_letter_topic, expected=len(hostile))
    assert len(dead) == len(hostile)
    assert {dict(m.headers())["reason"] for m in dead} == {b"event_time_out_of_range"}
    admin.delete_topics([topic])


#: Refused messages around the producer's default ``message.max.bytes`` (1,000,000) and the broker's default
#: ``max.message.bytes`` (1,048,588): their dead letters, with headers, exceed both unless bounded.
OVERSIZED = {b"near-whole-limit": 899_000, b"under-producer-limit": 999_936, b"at-producer-limit": 1_000_000,
             b"under-broker-limit": 1_048_480, b"well-over-both": 3_000_000}
LIMIT = 4 * 1024 * 1024  # the source topic's max.message.bytes, as a deployment with gateway batches would raise it


def test_a_refused_message_too_large_to_copy_is_dead_lettered_bounded_and_the_partition_moves_on(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    """Regression: a ~1 MB message that failed validation made a dead-letter copy larger than the producer's
    and the broker's limits, and the consumer exited on every restart with the valid reports behind it
    uncounted. Now each is dead-lettered bounded (prefix, size, digest, source), the reports behind it are
    counted, the partition's offset reaches its end, and a bounded dead letter replays from its source."""
    topic = f"test-big-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"max.message.bytes": str(LIMIT)})])[topic].result(30)
    dead_letter_topic = fresh_topic(partitions=1, stem="dlq")  # the broker's default limits
    registry = registry_for(topic, {"lang": METRICS["lang"]})
    lang = registry["lang"]
    later = {"id": 3, "mechanism": "krr", "k": 4, "epsilon": 1.0}  # a metric the consumers do not know yet
    with_later = registry_for(topic, {"lang": METRICS["lang"], "later": later})
    rng = np.random.default_rng(3)
    before = encode_records(lang.id, lang.fingerprint, 0, symbol_payloads(rng.integers(0, 8, 100)),
                            event_time=EVENT_TIME)
    after = encode_records(lang.id, lang.fingerprint, 0, symbol_payloads(rng.integers(0, 8, 100)),
                           event_time=EVENT_TIME)
    gateway_symbols = rng.integers(0, 4, 50_000)
    gateway = encode_records(3, with_later["later"].fingerprint, 0, symbol_payloads(gateway_symbols),
                             event_time=EVENT_TIME).tobytes()  # an honest gateway batch of about 1 MB
    bad = {key: bytes(rng.integers(0, 256, n, dtype=np.uint8)) for key, n in OVERSIZED.items()}
    bad[b"gateway-of-an-unknown-metric"] = gateway
    messages = [(b"before-%d" % i, row.tobytes()) for i, row in enumerate(before)] + list(bad.items())
    messages += [(b"after-%d" % i, row.tobytes()) for i, row in enumerate(after)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "acks": "all",
                         "message.max.bytes": LIMIT})
    errors: list[str] = []
    for key, value in messages:
        producer.produce(topic, value, key=key, on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    assert producer.flush(60) == 0 and not errors, errors

    def consume(with_registry):
        prometheus = CollectorRegistry()
        consumer = SketchConsumer(with_registry, RedisSketchStore.from_url(redis_url, key_prefix), ConsumerSettings(
            KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}", dead_letter_topic=dead_letter_topic),
            metrics=ConsumerMetrics(registry=prometheus))
        consumer.run(idle_exit=4.0)  # returns: a dead letter that does not fit is no reason to stop
        return consumer, prometheus

    consumer, prometheus = consume(registry)
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    assert consumer.reports_applied == 200  # the reports before and after every refused message
    assert store.next_offsets(topic, [0]) == {0: len(messages)}
    assert prometheus.get_sample_value("ldpstream_dead_letters_lost_total") == 0
    dead = {m.key(): m for m in read_messages(kafka_bootstrap, dead_letter_topic, expected=len(bad), timeout=60)}
    assert set(dead) == set(bad)
    offsets = {m.key(): m.offset() for m in read_messages(kafka_bootstrap, topic, expected=len(messages), timeout=60)}
    for key, value in bad.items():
        headers = {name: raw.decode() for name, raw in dead[key].headers()}
        assert headers["source"] == f"{topic}/0/{offsets[key]}"
        if len(value) < 900_000:
            assert dead[key].value() == value and "truncated" not in headers
            continue
        assert headers["truncated"] == "1" and headers["size"] == str(len(value)), (key, headers)
        assert headers["sha256"] == hashlib.sha256(value).hexdigest()
        assert dead[key].value() == value[:PREFIX_BYTES]

    # The unknown metric becomes known: its bounded dead letter is replayed from the source, whole, once.
    client = redis.Redis.from_url(redis_url)
    replay = replay_dead_letters(with_later, KafkaConfig(kafka_bootstrap), client, key_prefix, dead_letter_topic)
    client.close()
    assert replay.replayed == 1 and replay.source_gone == 0 and sum(replay.still_refused.values()) == len(OVERSIZED)
    consumer, _ = consume(with_later)
    assert consumer.reports_applied == 50_000
    later_sketch = sum(store.snapshot("later", with_later["later"].fingerprint, (1, 4)).buckets.values())[0]
    np.testing.assert_array_equal(later_sketch, np.bincount(gateway_symbols, minlength=4))
    admin.delete_topics([topic])


def test_messages_spanning_more_buckets_than_one_batch_takes_are_applied_over_several_batches_none_refused(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    """Regression: the messages of the oldest buckets beyond a batch's limit were dead-lettered as
    ``too_many_buckets`` although valid. Now the consumer applies them over several batches, each once."""
    from ldpstream.consumers.fold import MAX_BUCKETS_PER_BATCH

    topic = fresh_topic(partitions=1)
    dead_letter_topic = fresh_topic(partitions=1, stem="dlq")
    registry = registry_for(topic, {"lang": METRICS["lang"]})
    lang = registry["lang"]
    buckets = 2 * MAX_BUCKETS_PER_BATCH + 100
    now = int(time.time())
    times = now - lang.bucket_seconds * np.arange(buckets)
    symbols = np.random.default_rng(5).integers(0, 8, buckets)
    rows = [encode_records(lang.id, lang.fingerprint, 0, symbol_payloads([int(s)]), event_time=int(t)).tobytes()
            for s, t in zip(symbols, times, strict=True)]
    _produce(kafka_bootstrap, topic, [(b"m-%d" % i, row) for i, row in enumerate(rows)])
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    prometheus = CollectorRegistry()
    consumer = SketchConsumer(registry, store, ConsumerSettings(
        KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}", dead_letter_topic=dead_letter_topic,
        batch_size=5000), metrics=ConsumerMetrics(registry=prometheus))
    consumer.run(idle_exit=4.0)
    assert consumer.reports_applied == buckets and consumer.messages_seen == buckets
    assert store.next_offsets(topic, [0]) == {0: buckets}
    snapshot = store.snapshot("lang", lang.fingerprint, (1, 8))
    assert len(snapshot.buckets) == buckets
    np.testing.assert_array_equal(sum(snapshot.buckets.values())[0], np.bincount(symbols, minlength=8))
    assert prometheus.get_sample_value("ldpstream_messages_rejected_total", {"reason": "too_many_buckets"}) == 0
    assert read_messages(kafka_bootstrap, dead_letter_topic, expected=0, timeout=3) == []
