"""``ldpstream dlq replay``: dead letters back into the reports topic, each ``source`` at most once
(docs/math/exactly-once.md#the-dead-letter-topic-is-at-least-once).

A consumer refuses a message whole and sends it, byte for byte with its key, to the dead-letter topic with the
headers ``reason``, ``detail``, ``source`` (``<topic>/<partition>/<offset>`` of the refused message) and
``timestamp`` (its Kafka timestamp in milliseconds; ``docs/report-format.md``). A *bounded* dead letter
(header ``truncated``, its ``size`` and ``sha256``; :mod:`ldpstream.consumers.dead_letters`) is replayed from
its ``source``, checked against its digest; one that retention deleted or that differs is left dead
(``source_gone``). The dead-letter topic is at least once, so the replay dedupes on ``source``.

One replay reads the dead-letter topic from its start to the end offsets it finds at start, and for each
message:

1. without a ``source`` header, or with a source topic that is not a reports topic of the registry: left
   where it is (``unknown_source``);
2. filtered by ``reasons`` when given (others are left, ``skipped_reason``);
3. validated as a consumer of this registry would (:func:`ldpstream.consumers.fold.fold_messages`): a message
   it would refuse again stays dead, counted by the reason it would get;
4. claimed in Redis (``HSETNX`` on :func:`ldpstream.store.keys.dlq_replayed_key`, field = the source,
   value ``pending <time>``); a source already claimed is not sent again (``already_replayed``, or
   ``pending`` when an earlier replay's send was never acknowledged);
5. produced to its source topic (same key and value, the original ``timestamp`` as its Kafka timestamp;
   headers ``source`` and ``replayed-from``) by an idempotent producer (acks=all); on acknowledgement the claim
   becomes ``replayed <topic>/<partition>/<offset>``, on a delivery error it is released.

A replay killed between a claim and its acknowledgement leaves that source ``pending``; ``retry_pending`` sends
those again after an operator checked (``replayed-from`` header) that they did not arrive. The consumers must
run the registry given here: a message this registry accepts but theirs refuses is dead-lettered again under a
new source and would be replayed again.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from ldpstream.config import KafkaConfig
from ldpstream.consumers.fold import refusals
from ldpstream.errors import ServiceError
from ldpstream.kafka import partitions_of, produce
from ldpstream.registry import Registry
from ldpstream.store import keys

#: The header a replayed message carries: where it was in the dead-letter topic.
REPLAYED_FROM = "replayed-from"
#: The largest message the replay sends (librdkafka's ``message.max.bytes``); the broker may refuse less.
MAX_REPLAY_BYTES = 64 * 1024 * 1024


@dataclass
class ReplayResult:
    """What a replay did with each message of the dead-letter topic it read."""

    dead_letter_topic: str
    read: int = 0
    #: Sent to the reports topic and acknowledged in this run.
    replayed: int = 0
    #: Sent by an earlier replay (or a duplicate of a source sent in this run): not sent again.
    already_replayed: int = 0
    #: Claimed by a replay whose send was never acknowledged (not sent again unless ``retry_pending``).
    pending: int = 0
    #: Would be refused again by a consumer of this registry, by the reason it would get now: left dead.
    still_refused: Counter[str] = field(default_factory=Counter)
    #: Not of the ``reasons`` asked for.
    skipped_reason: int = 0
    #: No ``source`` header, or a source topic that is not a reports topic of the registry.
    unknown_source: int = 0
    #: Sent but not acknowledged (a delivery error): released for a later replay.
    failed: int = 0
    #: Bounded dead letters whose original is no longer in its source (retention) or differs from its digest.
    source_gone: int = 0
    #: Messages that would be sent (``dry_run``).
    would_replay: int = 0
    replayed_to: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {"dead_letter_topic": self.dead_letter_topic, "read": self.read, "replayed": self.replayed,
                "would_replay": self.would_replay, "already_replayed": self.already_replayed,
                "pending": self.pending, "still_refused": dict(self.still_refused),
                "skipped_reason": self.skipped_reason, "unknown_source": self.unknown_source,
                "failed": self.failed, "source_gone": self.source_gone,
                "replayed_to": dict(self.replayed_to)}


def replay_dead_letters(registry: Registry, kafka: KafkaConfig, client: Any, prefix: str,
                        dead_letter_topic: str, *, reasons: Collection[str] | None = None, dry_run: bool = False,
                        retry_pending: bool = False, batch_size: int = 1000, timeout: float = 30.0) -> ReplayResult:
    """Replay ``dead_letter_topic`` into the registry's reports topics (see the module docstring); ``client``
    is a ``redis.Redis`` holding the dedupe state under ``prefix``."""
    result = ReplayResult(dead_letter_topic)
    partitions = partitions_of(kafka, dead_letter_topic)
    if not partitions:
        raise ServiceError(f"the dead-letter topic {dead_letter_topic!r} does not exist")
    reader = Consumer(kafka.consumer(f"ldpstream-dlq-replay-{uuid.uuid4().hex[:8]}", **{
        "enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False}))
    # A refused message goes back whole, as large as its source topic took it: the broker, not this producer's
    # default 1,000,000 bytes, is the limit.
    producer = Producer(kafka.producer(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                          "message.max.bytes": MAX_REPLAY_BYTES}))
    ledger = keys.dlq_replayed_key(prefix, dead_letter_topic)
    try:
        ends = {p: reader.get_watermark_offsets(TopicPartition(dead_letter_topic, p), timeout=timeout)[1]
                for p in partitions}
        todo = {p for p, end in ends.items() if end > 0}
        reader.assign([TopicPartition(dead_letter_topic, p, OFFSET_BEGINNING) for p in sorted(todo)])
        deadline = time.monotonic() + timeout
        while todo:
            messages = reader.consume(batch_size, 1.0)
            if not messages:
                if time.monotonic() > deadline:
                    raise ServiceError(f"reading {dead_letter_topic!r} stalled before its end offsets {ends}")
                continue
            deadline = time.monotonic() + timeout
            batch = []
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise ServiceError(f"reading {dead_letter_topic!r}: {error}")
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                if partition in todo and offset < ends[partition]:
                    batch.append(message)
                if offset + 1 >= ends[partition]:
                    todo.discard(partition)
            _replay_batch(batch, registry, client, ledger, producer, result, reasons=reasons, dry_run=dry_run,
                          retry_pending=retry_pending, originals=lambda sources: _read_sources(kafka, sources, timeout))
    finally:
        reader.close()
        producer.flush(timeout)
    return result


def _headers(message: Message) -> dict[str, str]:
    out: dict[str, str] = {}
    for header in message.headers() or []:
        name, value = header[0], header[1]
        out[name] = value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")
    return out


Original = tuple[bytes, bytes | None]  # a refused message's value and key


def _read_sources(kafka: KafkaConfig, sources: Collection[str], timeout: float) -> dict[str, Original | None]:
    """The messages at ``sources`` (``<topic>/<partition>/<offset>``), read from Kafka; None for one that is gone."""
    found: dict[str, Original | None] = {}
    reader = Consumer(kafka.consumer(f"ldpstream-dlq-source-{uuid.uuid4().hex[:8]}", **{
        "enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": True,
        "auto.offset.reset": "error"}))
    try:
        for source in sources:
            topic, partition, offset = source.rsplit("/", 2)
            reader.assign([TopicPartition(topic, int(partition), int(offset))])
            found[source] = None
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                message = reader.poll(1.0)
                if message is None:
                    continue
                if message.error() is None and message.offset() == int(offset):
                    found[source] = (message.value() or b"", message.key())
                break
    finally:
        reader.close()
    return found


def _replay_batch(messages: list[Message], registry: Registry, client: Any, ledger: str, producer: Producer,
                  result: ReplayResult, *, reasons: Collection[str] | None, dry_run: bool,
                  retry_pending: bool, originals: Callable[[list[str]], dict[str, Original | None]]) -> None:
    result.read += len(messages)
    candidates: list[tuple[Message, str, str]] = []  # (message, source, target topic)
    topics = set(registry.topics)
    for message in messages:
        headers = _headers(message)
        source = headers.get("source", "")
        target = source.rsplit("/", 2)[0] if source.count("/") >= 2 else ""
        if target not in topics:
            result.unknown_source += 1
        elif reasons is not None and headers.get("reason") not in reasons:
            result.skipped_reason += 1
        else:
            candidates.append((message, source, target))
    if not candidates:
        return
    # A bounded dead letter (docs: ldpstream.consumers.dead_letters) is replayed from its source's bytes.
    content: dict[str, Original] = {}
    bounded = {source: _headers(m).get("sha256", "") for m, source, _ in candidates
               if _headers(m).get("truncated") == "1"}
    if bounded:
        for source, original in originals(sorted(bounded)).items():
            if original is not None and hashlib.sha256(original[0]).hexdigest() == bounded[source]:
                content[source] = original
        gone = [c for c in candidates if c[1] in bounded and c[1] not in content]
        result.source_gone += len(gone)
        candidates = [c for c in candidates if c not in gone]
    for message, source, _ in candidates:
        content.setdefault(source, (message.value() or b"", message.key()))
    if not candidates:
        return
    # Validated as a consumer of this registry would: one fold over the batch, refusals by message.
    stamps = np.array([_original_timestamp(m) for m, _, _ in candidates], dtype=np.int64) // 1000
    stamps = np.where(stamps > 0, stamps, int(time.time()))
    refused = {r.message_index: r.reason
               for r in refusals([content[source][0] for _, source, _ in candidates], stamps, registry)}
    result.still_refused.update(refused.values())
    accepted = [c for i, c in enumerate(candidates) if i not in refused]
    if not accepted:
        return
    # Claim each source (HSETNX): a source claimed before, or twice in this batch, is not sent again.
    now = f"pending {time.time():.0f}"
    pipe = client.pipeline(transaction=False)
    for _, source, _ in accepted:
        if dry_run:
            pipe.hget(ledger, source)
        else:
            pipe.hsetnx(ledger, source, now)
    claims = pipe.execute()
    held = client.hmget(ledger, [source for _, source, _ in accepted]) if not dry_run else claims
    to_send: list[tuple[Message, str, str]] = []
    claimed_here: set[str] = set()
    for (message, source, target), claim, state in zip(accepted, claims, held, strict=True):
        if dry_run:
            if state is None and source not in claimed_here:
                claimed_here.add(source)
                result.would_replay += 1
            else:
                _count_held(result, state, retry_pending)
            continue
        if source in claimed_here:  # a duplicate of a dead letter sent in this run
            result.already_replayed += 1
        elif claim or (retry_pending and state is not None and state.startswith(b"pending")):
            claimed_here.add(source)
            to_send.append((message, source, target))
        else:
            _count_held(result, state, retry_pending=False)
    if not to_send:
        return
    outcomes: dict[str, str | None] = {}

    def delivered(source: str) -> Any:
        def callback(err: KafkaError | None, sent: Message) -> None:
            outcomes[source] = None if err is not None else f"{sent.topic()}/{sent.partition()}/{sent.offset()}"
        return callback

    for message, source, target in to_send:
        where = f"{message.topic()}/{message.partition()}/{message.offset()}"
        value, key = content[source]
        try:
            produce(producer, target, value, key=key,
                    headers=[("source", source.encode()), (REPLAYED_FROM, where.encode())],
                    on_delivery=delivered(source), timestamp=_original_timestamp(message))
        except KafkaException:  # refused at once (larger than this producer takes): released, as a delivery error
            outcomes[source] = None
    producer.flush(30)
    pipe = client.pipeline(transaction=False)
    for _, source, target in to_send:
        if source not in outcomes:
            result.pending += 1  # no acknowledgement yet: the claim stays pending
        elif outcomes[source] is None:
            result.failed += 1
            pipe.hdel(ledger, source)
        else:
            result.replayed += 1
            result.replayed_to[target] += 1
            pipe.hset(ledger, source, f"replayed {outcomes[source]}")
    pipe.execute()


def _original_timestamp(message: Message) -> int:
    """The refused message's Kafka timestamp (ms): its ``timestamp`` header, else the dead letter's own."""
    header = _headers(message).get("timestamp", "")
    return int(header) if header.lstrip("-").isdigit() else int(message.timestamp()[1])


def _count_held(result: ReplayResult, state: bytes | None, retry_pending: bool) -> None:
    """A source another replay (or an earlier message of this run) claimed."""
    if state is not None and state.startswith(b"pending") and not retry_pending:
        result.pending += 1
    else:
        result.already_replayed += 1


def pending_sources(client: Any, prefix: str, dead_letter_topic: str) -> dict[str, str]:
    """Sources whose replay was claimed but never acknowledged (``source → "pending <unix time>"``)."""
    held = client.hgetall(keys.dlq_replayed_key(prefix, dead_letter_topic))
    return {k.decode(): v.decode() for k, v in held.items() if v.startswith(b"pending")}
