"""Creating the Kafka topics the pipeline uses (reports, dead letters, estimates) when missing."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ldpstream.errors import ServiceError

DEFAULT_PARTITIONS = 4


def ensure_topics(bootstrap: str, topics: Iterable[str], partitions: int = DEFAULT_PARTITIONS,
                  timeout: float = 30.0) -> None:
    """Create each topic that does not exist yet (replication factor 1 unless the broker default is set)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
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


def partitions_of(bootstrap: str, topic: str, timeout: float = 10.0) -> list[int]:
    """The partition numbers of ``topic`` (empty when it does not exist)."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=timeout)
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None:
        return []
    return sorted(entry.partitions)
