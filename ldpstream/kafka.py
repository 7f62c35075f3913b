"""Kafka at the edges, shared by every role: creating topics, reading partitions, and producing with
backpressure (librdkafka's queue is bounded; a full queue is drained by serving delivery callbacks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from ldpstream.config import KafkaConfig
from ldpstream.errors import ServiceError

DEFAULT_PARTITIONS = 4


def ensure_topics(kafka: KafkaConfig | str, topics: Iterable[str], partitions: int = DEFAULT_PARTITIONS,
                  timeout: float = 30.0) -> None:
    """Create each topic that does not exist yet (replication factor 1 unless the broker default is set)."""
    kafka = KafkaConfig.of(kafka)
    bootstrap = kafka.bootstrap
    admin = AdminClient(kafka.admin())
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise ServiceError(f"Kafka at {bootstrap} is unreachable: {exc}") from exc
    missing = [NewTopic(t, num_partitions=partitions) for t in dict.fromkeys(topics) if t not in existing]
    if not missing:
        return
    for topic, future in admin.create_topics(missing, operation_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() == 36:  # TOPIC_ALREADY_EXISTS
                continue
            raise ServiceError(f"cannot create Kafka topic {topic!r}: {exc}") from exc


def partitions_of(kafka: KafkaConfig | str, topic: str, timeout: float = 10.0) -> list[int]:
    """The partition numbers of ``topic`` (empty when it does not exist)."""
    metadata = AdminClient(KafkaConfig.of(kafka).admin()).list_topics(topic, timeout=timeout)
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None:
        return []
    return sorted(entry.partitions)


def produce(producer: Producer, topic: str, value: bytes, key: bytes | None = None,
            on_delivery: Callable[..., Any] | None = None, headers: Any = None, wait: float = 0.05,
            timestamp: int | None = None) -> None:
    """``producer.produce(...)``, waiting while librdkafka's local queue is full (``BufferError``): each wait
    serves delivery callbacks for ``wait`` seconds, which frees room. The one produce loop of the package.
    ``timestamp``: the message's Kafka timestamp in milliseconds (default: the producer's clock)."""
    kwargs: dict[str, Any] = {"key": key}
    if timestamp is not None and timestamp > 0:
        kwargs["timestamp"] = timestamp
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    if headers is not None:
        kwargs["headers"] = headers
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(wait)
