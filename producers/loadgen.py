"""The load generator behind ``ldpstream produce``: simulates a population of clients for one metric.

Values are drawn from a named distribution over the metric's value list (candidates, labels or symbols),
privatized in batches with a seeded generator (simulation only: real clients use secure randomness), encoded
and published. Returns the true value counts, so tests and the demo can compare estimates with the truth.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ldpstream.device import privatize_population, value_table
from ldpstream.distributions import parse_distribution
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import MetricConfig
from ldpstream.wire import encode_records, payloads_from_reports


@dataclass(frozen=True)
class LoadResult:
    true_counts: np.ndarray
    records_acked: int
    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records_acked / self.seconds if self.seconds else float("nan")


def simulate_and_publish(metric: MetricConfig, publisher: ReportPublisher, *, clients: int, distribution: str,
                         seed: int | None = None, per_message: int = 1, chunk: int = 50_000,
                         rate: float | None = None, event_time: int | None = None, progress: bool = False,
                         should_stop: Callable[[], bool] | None = None) -> LoadResult:
    """Publish one report from each of ``clients`` simulated clients; waits for every acknowledgement.

    ``rate`` caps reports per second (None: as fast as Kafka takes them); ``per_message`` packs that many
    records per Kafka message (a gateway); ``event_time`` is the clients' clock (default: now, per chunk);
    ``should_stop`` ends the run early (between chunks).
    """
    rng = np.random.default_rng(seed)
    names = metric.value_names()
    p = parse_distribution(distribution, len(names), rng)
    table = value_table(metric)
    true_counts = np.zeros(len(names), dtype=np.int64)
    acked_before = publisher.stats.records_acked
    started = time.monotonic()
    messages = 0
    sent = 0
    while sent < clients and not (should_stop and should_stop()):
        n = min(chunk, clients - sent)
        values = rng.choice(len(names), size=n, p=p)
        true_counts += np.bincount(values, minlength=len(names))
        cohorts, reports = privatize_population(metric, values, rng, table)
        rows = encode_records(metric.id, metric.fingerprint, cohorts,
                              payloads_from_reports(metric.mechanism, reports),
                              event_time=int(time.time()) if event_time is None else event_time)
        messages += publisher.publish(metric.topic, rows, per_message=per_message)
        sent += n
        if rate:
            while (ahead := sent / rate - (time.monotonic() - started)) > 0:
                publisher.poll(min(ahead, 0.1))
        if progress:
            _progress(sent, clients, publisher.stats.records_acked - acked_before, time.monotonic() - started)
    acked = publisher.flush().records_acked - acked_before
    seconds = time.monotonic() - started
    if progress:
        _progress(sent, clients, acked, seconds, final=True)
    return LoadResult(true_counts, acked, messages, seconds)


def _progress(sent: int, total: int, acked: int, seconds: float, final: bool = False) -> None:
    width = 30
    filled = int(width * sent / total) if total else width
    bar = "#" * filled + "." * (width - filled)
    rate = sent / seconds if seconds else 0.0
    end = "\n" if final else "\r"
    print(f"[{bar}] {sent:>10,}/{total:,} sent  {acked:>10,} acked  {rate:>10,.0f}/s", end=end,
          file=sys.stderr, flush=True)
