"""Publishing encoded records to Kafka: an idempotent producer (``acks=all``) with delivery accounting.

Records are rows of :func:`ldpstream.wire.encode_records`. ``per_message=1`` sends each record as its own
message (a device); ``per_message=B`` packs B records per message (a gateway batching its clients).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, Message, Producer

from ldpstream.config import KafkaConfig
from ldpstream.errors import ServiceError
from ldpstream.kafka import produce


@dataclass
class DeliveryStats:
    """Records acknowledged by Kafka (all replicas) and delivery failures."""

    records_acked: int = 0
    messages_acked: int = 0
    errors: list[str] = field(default_factory=list)


class ReportPublisher:
    """Thin wrapper over ``confluent_kafka.Producer`` that counts acknowledged records.

    ``delivery_timeout`` bounds how long a message may wait for the broker (``delivery.timeout.ms``);
    when the broker stays unreachable longer, :meth:`flush` raises :class:`ServiceError` naming the
    bootstrap servers, instead of hanging.
    """

    def __init__(self, kafka: KafkaConfig | str, *, delivery_timeout: float = 30.0,
                 config: Mapping[str, Any] | None = None) -> None:
        """``kafka``: the service's Kafka configuration (or bootstrap servers); ``config``: librdkafka
        settings of this producer, over the configuration's."""
        kafka = KafkaConfig.of(kafka)
        self.bootstrap = kafka.bootstrap
        self.stats = DeliveryStats()
        self._producer = Producer({
            **kafka.producer(),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "delivery.timeout.ms": int(delivery_timeout * 1000),
            **kafka.settings,
            **(config or {}),
        })
        self._delivery_timeout = delivery_timeout
        #: How many of ``stats.errors`` a :meth:`flush` already raised about: each failure is reported
        #: once, so a client that lived through an outage can flush again once the broker is back.
        self._errors_reported = 0

    def publish(self, topic: str, rows: np.ndarray, per_message: int = 1, key: bytes | None = None) -> int:
        """Queue ``rows`` (``(n, record_size)`` uint8) for ``topic``; returns the number of messages."""
        if per_message < 1:
            raise ValueError("per_message must be at least 1")
        rows = np.ascontiguousarray(rows, dtype=np.uint8)
        if rows.ndim != 2 or rows.shape[1] == 0:
            raise ValueError(f"rows must be a 2-D (n, record_size) uint8 array, got shape {rows.shape}")
        data = rows.tobytes()
        record_size = rows.shape[1]
        step = record_size * per_message
        messages = 0
        for start in range(0, len(data), step):
            value = data[start:start + step]
            callback = self._callback(len(value) // record_size)
            produce(self._producer, topic, value, key=key, on_delivery=callback)
            messages += 1
            if messages % 10_000 == 0:
                self._producer.poll(0)
        self._producer.poll(0)
        return messages

    def _callback(self, records: int) -> Any:
        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                self.stats.records_acked += records
                self.stats.messages_acked += 1
            else:
                self.stats.errors.append(str(err))

        return on_delivery

    def poll(self, timeout: float = 0.0) -> None:
        self._producer.poll(timeout)

    def flush(self, timeout: float | None = None) -> DeliveryStats:
        """Wait until every queued message is acknowledged or failed; raise if any failed or remain.

        Raises :class:`ServiceError` naming the bootstrap servers when a message failed delivery since the
        previous flush (e.g. ``delivery_timeout`` passed with the broker unreachable), or when messages are
        still unacknowledged at ``timeout`` (default: ``delivery_timeout`` + 5 s). Each failure is reported
        by one flush only; ``stats.errors`` keeps them all.
        """
        started = time.monotonic()
        deadline = started + (timeout if timeout is not None else self._delivery_timeout + 5)
        remaining = len(self._producer)
        while remaining and time.monotonic() < deadline:
            remaining = self._producer.flush(min(1.0, max(deadline - time.monotonic(), 0.0)))
        errors = self.stats.errors[self._errors_reported:]
        self._errors_reported = len(self.stats.errors)
        if errors or remaining:
            problems = []
            if errors:
                problems.append(f"{len(errors)} message(s) failed delivery (first: {errors[0]})")
            if remaining:
                problems.append(f"{remaining} message(s) still unacknowledged after "
                                f"{time.monotonic() - started:.1f} s")
            raise ServiceError(f"Kafka at {self.bootstrap}: " + "; ".join(problems)
                               + " (is the broker reachable, and does the topic exist?)")
        return self.stats
