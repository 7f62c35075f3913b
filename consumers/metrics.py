"""The consumer's Prometheus metrics (prefix ``ldpstream_``; labels stay bounded: metric and association names come
from the registry, reasons from :data:`ldpstream.consumers.fold.REJECTION_REASONS`, partitions from the topic)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram


class ConsumerMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.messages_consumed = Counter(
            "ldpstream_messages_consumed_total", "Kafka messages read by the consumer", registry=registry)
        self.reports_consumed = Counter(
            "ldpstream_reports_consumed_total", "Report records decoded from Kafka messages, valid or not",
            registry=registry)
        self.reports_applied = Counter(
            "ldpstream_reports_applied_total", "Reports folded into the count sketches in Redis", ["metric"],
            registry=registry)
        self.tuples_applied = Counter(
            "ldpstream_report_tuples_applied_total",
            "Associated records (one report of each member) folded into an association's pair statistic; each also "
            "counts once per member in ldpstream_reports_applied_total", ["association"], registry=registry)
        self.messages_rejected = Counter(
            "ldpstream_messages_rejected_total",
            "Messages refused and sent to the dead-letter topic, by reason", ["reason"], registry=registry)
        self.dead_letters_lost = Counter(
            "ldpstream_dead_letters_lost_total",
            "Refused messages whose dead letter could not be written even bounded (they stay in their source "
            "topic only)", registry=registry)
        self.batches_refused = Counter(
            "ldpstream_batches_refused_total",
            "Partition batches refused by Redis because their offsets were already applied (replays, "
            "fenced consumers)", registry=registry)
        self.store_unavailable = Counter(
            "ldpstream_store_unavailable_total",
            "Store calls that failed because Redis could not be reached (each is retried)", registry=registry)
        self.store_rebuilds = Counter(
            "ldpstream_store_rebuilds_total",
            "Partitions found to have lost applied counts in the store (rolled back or emptied) and re-applied "
            "from Kafka", registry=registry)
        self.batch_seconds = Histogram(
            "ldpstream_batch_seconds", "Time to decode, fold and apply one consume() batch",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry)
        self.lag = Gauge(
            "ldpstream_consumer_lag_messages", "Messages in the partition after the consumer's position",
            ["topic", "partition"], registry=registry)

    def declare(self, metrics: Iterable[str], associations: Iterable[str], reasons: Iterable[str]) -> None:
        """Export the labelled counters at 0 for every metric, association and rejection reason before the
        first report: a counter series that appears only at its first increment hides that increment from
        ``rate()`` and ``increase()``, and a dashboard or alert has no series to show until then."""
        for metric in metrics:
            self.reports_applied.labels(metric)
        for association in associations:
            self.tuples_applied.labels(association)
        for reason in reasons:
            self.messages_rejected.labels(reason)


@functools.cache
def default_metrics() -> ConsumerMetrics:
    """The process-wide instance on Prometheus' default registry (metrics may be registered only once)."""
    return ConsumerMetrics()
