"""Writing refused messages to the dead-letter topic: always writable, never a reason to stop.

A refused message goes to the dead-letter topic whole, with its key and the headers ``reason``, ``detail``,
``source`` (``<topic>/<partition>/<offset>``) and ``timestamp`` (its Kafka timestamp, ms). One that would not
fit (its value, key and headers above :data:`WHOLE_LIMIT`, or refused as too large by the producer or the
broker) goes as a *bounded* dead letter instead: the first :data:`PREFIX_BYTES` bytes of its value, with the
headers ``truncated`` (``1``), ``size`` (the original's bytes) and ``sha256`` (its digest) besides the others;
``ldpstream dlq replay`` reads the original from its source. A dead letter that even bounded cannot be written is
counted and logged with its source, and the consumer moves on: the source topic still holds it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from ldpstream.consumers.fold import Rejection
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.errors import ServiceError
from ldpstream.kafka import produce

log = logging.getLogger(__name__)

#: A dead letter sent whole is at most this many bytes (value, key and headers): under librdkafka's default
#: ``message.max.bytes`` (1,000,000) and the broker's default ``max.message.bytes`` (1,048,588), with room for the
#: record's own framing.
WHOLE_LIMIT = 900_000
#: Bytes of the value a bounded dead letter keeps.
PREFIX_BYTES = 64 * 1024
#: Delivery errors that no retry of the same bytes cures: the record is too large for the producer or the broker.
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError.RECORD_LIST_TOO_LARGE,
                       KafkaError.INVALID_RECORD})

Headers = list[tuple[str, bytes]]


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter: the bytes and headers sent, and the refused message's source."""

    value: bytes
    key: bytes | None
    headers: Headers
    source: str


def whole(message: Message, topic: str, rejection: Rejection) -> DeadLetter:
    """The refused ``message`` (consumed from ``topic``) as a dead letter, byte for byte."""
    source = f"{topic}/{message.partition()}/{message.offset()}"
    headers = [("reason", rejection.reason.encode()), ("detail", rejection.detail.encode()),
               ("source", source.encode()), ("timestamp", str(message.timestamp()[1]).encode())]
    return DeadLetter(message.value() or b"", message.key(), headers, source)


def bounded(letter: DeadLetter) -> DeadLetter:
    """``letter`` cut to :data:`PREFIX_BYTES` of its value, with ``truncated``, ``size`` and ``sha256`` headers."""
    value = letter.value
    headers = [*letter.headers, ("truncated", b"1"), ("size", str(len(value)).encode()),
               ("sha256", hashlib.sha256(value).hexdigest().encode())]
    return DeadLetter(value[:PREFIX_BYTES], (letter.key or b"")[:1024] or None, headers, letter.source)


def size(letter: DeadLetter) -> int:
    return len(letter.value) + len(letter.key or b"") + sum(len(k) + len(v) for k, v in letter.headers)


class DeadLetterWriter:
    """Sends dead letters through ``producer`` (idempotent, ``acks=all``) to ``topic`` and waits for them."""

    def __init__(self, producer: Producer, topic: str, metrics: ConsumerMetrics) -> None:
        self._producer = producer
        self.topic = topic
        self._metrics = metrics

    def write(self, letters: Sequence[DeadLetter], timeout: float = 30.0) -> None:
        """Send ``letters`` and wait until Kafka acknowledged each. One that is too large goes bounded
        (:func:`bounded`); one that cannot be written even so is counted (``ldpstream_dead_letters_lost_total``)
        and logged with its source. A :class:`ServiceError` when Kafka acknowledged not all of them for another
        reason (unreachable, refused credentials): the batch is not applied and is read again."""
        first = [bounded(letter) if size(letter) > WHOLE_LIMIT else letter for letter in letters]
        failed = self._send(first, timeout)
        retry = [bounded(first[i]) for i, code in failed.items()
                 if code in TOO_LARGE and not _is_bounded(first[i])]
        lost = [first[i] for i, code in failed.items() if code in TOO_LARGE and _is_bounded(first[i])]
        others = {i: code for i, code in failed.items() if code not in TOO_LARGE}
        if retry:
            again = self._send(retry, timeout)
            lost += [retry[i] for i, code in again.items() if code in TOO_LARGE]
            others.update({len(first) + i: code for i, code in again.items() if code not in TOO_LARGE})
        for letter in lost:
            self._metrics.dead_letters_lost.inc()
            log.error("dead letter of %s (%d bytes) could not be written even bounded; it stays in its source "
                      "topic only", letter.source, size(letter))
        if others:
            codes = sorted({str(KafkaError(code)) if code is not None else "not acknowledged"
                            for code in others.values()})
            raise ServiceError(f"dead-letter topic {self.topic!r} did not acknowledge {len(others)} of "
                               f"{len(letters)} dead letter(s): {codes[:3]}")

    def close(self, timeout: float = 10.0) -> None:
        self._producer.flush(timeout)

    def _send(self, letters: Sequence[DeadLetter], timeout: float) -> dict[int, int | None]:
        """Produce each letter and flush; the failed ones by index, with their error code (None: no answer)."""
        outcome: dict[int, int | None] = {}

        def delivered(index: int) -> Callable[[KafkaError | None, Message], None]:
            def callback(err: KafkaError | None, _msg: Message) -> None:
                outcome[index] = -1 if err is None else err.code()
            return callback

        for index, letter in enumerate(letters):
            try:
                produce(self._producer, self.topic, letter.value, key=letter.key, headers=letter.headers,
                        on_delivery=delivered(index), wait=0.1)
            except KafkaException as exc:  # refused at once (e.g. larger than message.max.bytes)
                outcome[index] = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
        self._producer.flush(timeout)
        return {i: outcome.get(i) for i in range(len(letters)) if outcome.get(i) != -1}


def _is_bounded(letter: DeadLetter) -> bool:
    return any(name == "truncated" for name, _ in letter.headers)
