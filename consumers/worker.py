"""The consumer-group process: Kafka partition batches in, count sketches in Redis, exactly once.

One loop iteration (:meth:`SketchConsumer.poll_once`):

1. ``consume`` up to ``batch_size`` messages;
2. group them by partition and, per partition, fold them into sketch increments (vectorized,
   :mod:`ldpstream.consumers.fold`);
3. publish refused messages to the dead-letter topic and wait for Kafka to acknowledge them (at least once:
   a crash here may dead-letter a message twice, never lose it);
4. apply the increments, stats and next offset of the partition in one atomic Redis call; if Redis refuses
   because those offsets are already applied, seek the partition to the offset Redis holds.

Offsets live in Redis with the counts; on assignment every partition resumes from there. Kafka's own
committed offsets are written too, after the fact and only for operators' lag tools: they are never read.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from ldpstream.config import KafkaConfig
from ldpstream.consumers.dead_letters import DeadLetterWriter, whole
from ldpstream.consumers.fold import REJECTION_REASONS, Rejection, fold_messages
from ldpstream.consumers.metrics import ConsumerMetrics, default_metrics
from ldpstream.errors import ServiceError, StoreUnavailableError
from ldpstream.health import Check
from ldpstream.registry import Registry
from ldpstream.store import PartitionBatch, SketchStore

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_GROUP = "ldpstream-consumers"
DEFAULT_DEAD_LETTER_TOPIC = "ldp-dead-letters"
#: Seconds ``run(idle_exit=...)`` waits for a first partition assignment on top of ``idle_exit``.
JOIN_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class ConsumerSettings:
    kafka: KafkaConfig
    group_id: str = DEFAULT_GROUP
    topics: tuple[str, ...] = ()
    dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC
    batch_size: int = 20_000
    poll_timeout: float = 0.5
    lag_interval: float = 5.0
    #: Longest wait between two tries of a store that is unavailable (the consumer retries until it answers).
    max_store_backoff: float = 5.0
    #: Seconds between checks, while no message arrives, that the store still holds the offsets this consumer
    #: applied (a store that lost them is otherwise noticed only at a partition's next message).
    store_check_interval: float = 2.0


class SketchConsumer:
    """A member of the consumer group that folds reports into a :class:`SketchStore`."""

    def __init__(self, registry: Registry, store: SketchStore, settings: ConsumerSettings,
                 metrics: ConsumerMetrics | None = None) -> None:
        self.registry = registry
        self.store = store
        self.settings = settings
        self.metrics = metrics or default_metrics()
        self.metrics.declare(registry.metrics, registry.associations, REJECTION_REASONS)
        self.topics = settings.topics or registry.topics
        self._consumer = Consumer(settings.kafka.consumer(
            settings.group_id, **{
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.min.bytes": 1,
            "queued.max.messages.kbytes": 65536}))
        self._dead_letters = DeadLetterWriter(
            Producer(settings.kafka.producer(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5})),
            settings.dead_letter_topic, self.metrics)
        #: Per owned partition, the next offset this consumer expects the store to hold (compare-and-set).
        self._expected: dict[tuple[str, int], int | None] = {}
        self._last_lag = 0.0
        self._last_store_check = 0.0
        config = {**settings.kafka.settings, **settings.kafka.consumer_settings}
        #: Cooperative assignors and the KIP-848 protocol hand out partitions incrementally.
        self._incremental = ("cooperative" in str(config.get("partition.assignment.strategy", ""))
                             or str(config.get("group.protocol", "classic")) == "consumer")
        self.reports_applied = 0
        self.messages_seen = 0
        self._stop: threading.Event | None = None
        #: When the group last assigned this consumer partitions (``time.monotonic()``; None before the first).
        self._assigned_at: float | None = None
        #: Whether the consumer is a member of its group: an assignment (maybe of no partition: a member of a
        #: group with more members than partitions) arrived since it subscribed, and its membership was not lost.
        self.joined = False

    # ------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self.store.check_safe()
        self.joined = False
        self._consumer.subscribe(list(self.topics), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)

    def readiness_checks(self) -> dict[str, Check]:
        """The consumer's part of ``/readyz`` (:class:`ldpstream.health.Readiness`): it is a member of its group
        (one assigned no partition is one: it takes over when another leaves). The caller adds Kafka and Redis
        (:func:`ldpstream.health.service_checks`)."""
        def group() -> str | None:
            return None if self.joined else (f"not yet a member of consumer group {self.settings.group_id} (no "
                                             "partition assignment received)")
        return {"group": group}

    def close(self) -> None:
        self._consumer.close()
        self._dead_letters.close()

    def run(self, stop: threading.Event | None = None, idle_exit: float | None = None) -> None:
        """Consume until ``stop`` is set, or until no message arrived for ``idle_exit`` seconds.

        The idle time counts from the latest partition assignment (or message): joining the group (a TLS and
        SASL handshake, a rebalance, a loaded broker) can take longer than ``idle_exit``, and a consumer that gave
        up before it was given its partitions would have read nothing. One that is never assigned any gives up
        after :data:`JOIN_GRACE_SECONDS` more."""
        self._stop = stop
        self.start()
        started = time.monotonic()
        self._assigned_at = None
        last_message = started
        try:
            while stop is None or not stop.is_set():
                if self.poll_once():
                    last_message = time.monotonic()
                elif idle_exit is not None:
                    assigned = self._assigned_at
                    since = max(last_message, assigned) if assigned is not None else started + JOIN_GRACE_SECONDS
                    if time.monotonic() - since > idle_exit:
                        break
        finally:
            self.close()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Start every newly assigned partition at the offset stored in Redis (the beginning if none)."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        stored = {topic: self._with_store(functools.partial(self.store.next_offsets, topic, ps))
                  for topic, ps in by_topic.items()}
        unknown = [TopicPartition(tp.topic, tp.partition) for tp in partitions
                   if stored[tp.topic][tp.partition] is None]
        if unknown:
            self._mark_lost_partitions(consumer, unknown)
        for tp in partitions:
            offset = stored[tp.topic][tp.partition]
            if offset is not None:
                self._check_stored_offset(consumer, tp, offset)
            self._expected[(tp.topic, tp.partition)] = offset
            tp.offset = OFFSET_BEGINNING if offset is None else offset
        log.info("assigned %s", [(tp.topic, tp.partition, tp.offset) for tp in partitions])
        self._assigned_at = time.monotonic()
        if self._incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        self.joined = True

    def _mark_lost_partitions(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions with no offset in the store but one committed to Kafka by this group were counted before
        and lost from the store (Redis restarted without its data, or its keys were deleted): they are rebuilt
        from Kafka from the start, and marked so until they reach the committed offset again, so the decoder
        does not publish their partial counts as an estimate. (The Kafka commit is informational, written after
        each applied batch; the store's offset stays the source of truth.)"""
        try:
            committed = consumer.committed(partitions, timeout=10)
        except KafkaException as exc:
            log.warning("cannot read the group's committed offsets (%s): a lost store goes unnoticed", exc)
            return
        for tp in committed:
            if tp.error is None and tp.offset is not None and tp.offset > 0:
                _low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
                if tp.offset > high:
                    continue  # the topic was recreated since that commit: nothing of it can be rebuilt
                log.warning("%s[%d]: the store holds no offset but the group had applied up to %d: the store lost "
                            "its state; rebuilding from Kafka", tp.topic, tp.partition, tp.offset)
                self._with_store(functools.partial(self.store.mark_rebuild, tp.topic, tp.partition, tp.offset))
                self.metrics.store_rebuilds.inc()

    def _check_stored_offset(self, consumer: Consumer, tp: TopicPartition, offset: int) -> None:
        """An offset past the partition's end means the topic was recreated or truncated: resuming there
        would silently skip every report up to it, so refuse; one below the start means retention deleted
        reports that were never counted: say so."""
        low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
        if offset > high:
            raise ServiceError(
                f"Redis holds next offset {offset} for {tp.topic}[{tp.partition}], past the partition's end "
                f"({high}): the topic was recreated or truncated. Delete the partition's keys under the prefix "
                "(or use a new prefix) to count it again from the start.")
        if offset < low:
            log.error("%s[%d]: offsets %d..%d were deleted by retention before being counted",
                      tp.topic, tp.partition, offset, low - 1)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Nothing to commit (offsets live in Redis); forget the partitions and their lag series."""
        for tp in partitions:
            self._expected.pop((tp.topic, tp.partition), None)
            with contextlib.suppress(KeyError):
                self.metrics.lag.remove(tp.topic, str(tp.partition))
        log.info("revoked %s", [(tp.topic, tp.partition) for tp in partitions])
        if self._incremental:
            consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The group took the partitions without a rebalance (this member's session expired): no longer a member
        until the next assignment; then as a revocation."""
        self.joined = False
        log.warning("membership of group %s lost with partitions %s", self.settings.group_id,
                    [(tp.topic, tp.partition) for tp in partitions])
        self._on_revoke(consumer, partitions)

    # ---------------------------------------------------------------------------------------- a batch

    def poll_once(self) -> int:
        """Consume and apply one batch; returns the number of messages read."""
        messages = self._consumer.consume(self.settings.batch_size, self.settings.poll_timeout)
        if not messages:
            self._maybe_update_lag()
            self._maybe_check_store()
            return 0
        started = time.perf_counter()
        failed = [m for m in messages if m.error() is not None]
        if failed:
            for message in failed:
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer error: %s", error)
            messages = [m for m in messages if m.error() is None]
        deferred = 0
        for (topic, partition), batch in _by_partition(messages, self.topics):
            deferred += self._apply_partition_batch(topic, partition, batch)
        self.metrics.batch_seconds.observe(time.perf_counter() - started)
        self.metrics.messages_consumed.inc(len(messages) - deferred)
        self.messages_seen += len(messages) - deferred
        self._maybe_update_lag()
        return len(messages)

    def _apply_partition_batch(self, topic: str, partition: int, messages: list[Message]) -> int:
        """Fold and apply one partition's messages; returns how many were left for the next batch (the batch
        crossed a metric's bucket limit: :attr:`FoldResult.deferred_from`), which are read again from there."""
        values = [m.value() or b"" for m in messages]

        def timestamps(indices: np.ndarray) -> np.ndarray:
            """Kafka timestamps (s) of the messages whose records carry no event time (once per message)."""
            owners, inverse = np.unique(indices, return_inverse=True)
            stamps = np.array([messages[i].timestamp()[1] for i in owners.tolist()], dtype=np.int64) // 1000
            stamps = np.where(stamps > 0, stamps, int(time.time()))  # -1: the broker gave no timestamp
            return stamps[inverse]

        folded = fold_messages(values, timestamps, self.registry)
        deferred = 0
        if folded.deferred_from is not None:
            assert folded.deferred_from > 0, "a message of its own never crosses the bucket limit: it is refused"
            deferred = len(messages) - folded.deferred_from
            resume_at = _offset(messages[folded.deferred_from])
            messages = messages[:folded.deferred_from]
        self.metrics.reports_consumed.inc(folded.records_decoded)
        first, last = _offset(messages[0]), _offset(messages[-1])
        if folded.rejections:
            self._dead_letter(topic, messages, folded.rejections)
        where = (topic, partition)
        if where not in self._expected:
            return deferred  # revoked while this batch was in flight: its new owner reads it again
        batch = PartitionBatch(topic=topic, partition=partition, expected_offset=self._expected[where],
                               next_offset=last + 1, increments=folded.increments, stats=folded.stats(),
                               expire_at=folded.expire_at, pairs=folded.pairs)
        result = self._with_store(lambda: self.store.apply(batch))
        if not result.applied:
            self._resume_from_store(topic, partition, first, last, result.next_offset)
            return deferred
        self._expected[where] = last + 1
        if deferred:
            self._seek(topic, partition, resume_at)
        for metric, count in folded.applied.items():
            self.metrics.reports_applied.labels(metric).inc(count)
        for association, count in folded.associated.items():
            self.metrics.tuples_applied.labels(association).inc(count)
        for rejection in folded.rejections:
            self.metrics.messages_rejected.labels(rejection.reason).inc()
        self.reports_applied += folded.reports_applied
        self._consumer.commit(offsets=[TopicPartition(topic, partition, last + 1)], asynchronous=True)
        return deferred

    def _with_store(self, call: Callable[[], T]) -> T:
        """``call()``, retried with exponential backoff (up to ``settings.max_store_backoff`` s between tries)
        while the store is unavailable, until it answers or the consumer is stopped. Retrying an apply is safe:
        if the lost attempt did land, the retry is refused by the compare-and-set and the consumer seeks past
        it. While it waits the consumer reads nothing, so Kafka keeps the rest."""
        delay = 0.1
        while True:
            try:
                return call()
            except StoreUnavailableError as exc:
                self.metrics.store_unavailable.inc()
                if self._stop is not None and self._stop.is_set():
                    raise
                log.warning("the sketch store is unavailable (%s); retrying in %.1f s", exc, delay)
                time.sleep(delay)
                delay = min(2 * delay, self.settings.max_store_backoff)

    def _maybe_check_store(self) -> None:
        """While no message arrives, every ``store_check_interval`` s: the stored next offset of each partition this
        consumer has applied batches of. Where the store went back (a Redis restart without persistence, a
        FLUSHALL), the partition is rebuilt from Kafka as when an apply is refused (:meth:`_follow_store`): a
        partition that receives no more messages would otherwise keep its loss unnoticed, and its counts lost."""
        now = time.monotonic()
        if now - self._last_store_check < self.settings.store_check_interval:
            return
        self._last_store_check = now
        held: dict[str, list[int]] = defaultdict(list)
        for (topic, partition), expected in list(self._expected.items()):
            if expected is not None:
                held[topic].append(partition)
        for topic, partitions in held.items():
            stored = self._with_store(functools.partial(self.store.next_offsets, topic, partitions))
            for partition in partitions:
                expected = self._expected.get((topic, partition))
                now_stored = stored.get(partition)
                if expected is not None and (now_stored is None or now_stored < expected):
                    self._follow_store(topic, partition, now_stored)

    def _resume_from_store(self, topic: str, partition: int, first: int, last: int, stored: int | None) -> None:
        """Redis holds another next offset than we expected (another consumer applied batches, or Redis
        rolled back): continue from what Redis holds, forwards or backwards."""
        self.metrics.batches_refused.inc()
        log.info("partition %s-%d: batch %d..%d refused, Redis holds next offset %s; resuming there",
                 topic, partition, first, last, stored)
        self._follow_store(topic, partition, stored)

    def _follow_store(self, topic: str, partition: int, stored: int | None) -> None:
        """Continue the partition from the next offset the store holds, ``stored``; when that is behind what this
        consumer applied, mark the partition as being rebuilt until it is back there."""
        expected = self._expected.get((topic, partition))
        if expected is not None and (stored is None or stored < expected):
            # The store went back (a restart that lost its last writes, or all of its state): the counts of
            # the offsets in between are re-applied from Kafka; until then the decoder withholds estimates.
            log.warning("partition %s-%d: the store went back from offset %d to %s; rebuilding from Kafka",
                        topic, partition, expected, stored)
            self._with_store(lambda: self.store.mark_rebuild(topic, partition, expected))
            self.metrics.store_rebuilds.inc()
        self._expected[(topic, partition)] = stored
        self._seek(topic, partition, OFFSET_BEGINNING if stored is None else stored)

    def _seek(self, topic: str, partition: int, offset: int) -> None:
        """Read the partition again from ``offset`` (what was fetched beyond is dropped)."""
        try:
            self._consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as exc:  # the partition was taken from us meanwhile: its new owner carries on
            log.info("partition %s-%d: cannot seek (%s); no longer ours", topic, partition, exc)
            self._expected.pop((topic, partition), None)

    def _dead_letter(self, topic: str, messages: list[Message], rejections: list[Rejection]) -> None:
        # ``timestamp`` (a header): the original Kafka timestamp (ms), at which records without an event time count
        # when the message is replayed; the dead-letter topic may refuse it as a message timestamp (Kafka 4 refuses
        # one more than an hour ahead by default, and producers choose them).
        self._dead_letters.write([whole(messages[r.message_index], topic, r) for r in rejections])

    def _maybe_update_lag(self) -> None:
        now = time.monotonic()
        if now - self._last_lag < self.settings.lag_interval:
            return
        self._last_lag = now
        try:
            positions = self._consumer.position(self._consumer.assignment())
            for tp in positions:
                # The high watermark that arrived with the last fetch: a local read, no broker round trip.
                _low, high = self._consumer.get_watermark_offsets(tp, cached=True)
                if tp.offset >= 0 and high >= 0:
                    self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(high - tp.offset, 0))
        except Exception as exc:  # lag is informational; never let it stop the consumer
            log.debug("lag update failed: %s", exc)


def _offset(message: Message) -> int:
    """The offset of a consumed (not an error) message, which always has one."""
    offset = message.offset()
    assert offset is not None, "a consumed message has an offset"
    return offset


def _partition(message: Message) -> int:
    partition = message.partition()
    assert partition is not None, "a consumed message has a partition"
    return partition


def _by_partition(messages: list[Message], topics: tuple[str, ...]) -> list[tuple[tuple[str, int], list[Message]]]:
    """Messages grouped by (topic, partition), each group in consumption (offset) order."""
    if not messages:
        return []
    # One topic (the usual case): group by the partition number alone, cheaper than (topic, partition) tuples.
    keys: list[Any] = [_partition(m) for m in messages] if len(topics) == 1 else [
        (str(m.topic()), _partition(m)) for m in messages]
    first = keys[0]
    groups: dict[Any, list[Message]]
    if keys.count(first) == len(keys):
        groups = {first: messages}
    else:
        groups = defaultdict(list)
        for key, message in zip(keys, messages, strict=True):
            groups[key].append(message)
    if len(topics) == 1:
        return [((topics[0], partition), batch) for partition, batch in groups.items()]
    return list(groups.items())
