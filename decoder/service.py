"""The periodic decoder: snapshot the sketches, estimate, publish (Redis, Kafka, Prometheus).

Every ``interval`` seconds, for each metric of the registry:

1. read all of the metric's sketches as one consistent snapshot (one MULTI/EXEC, see
   :meth:`ldpstream.store.RedisSketchStore.snapshot`);
2. for each configured window (``all``, or the last ``1h``, ``1d``, ...), sum the sketches of the time
   buckets it covers and decode them with the metric's estimator (:func:`ldpstream.estimators.estimate`),
   widening the intervals by the design effect of the reports that its buckets repeat
   (:mod:`ldpstream.estimators.windows`, :func:`ldpstream.decoder.published.decode_window`);
3. publish the estimate: as JSON to Redis (``P:estimate:<metric>:<window>``, plus a bounded history list
   ``P:history:<metric>:<window>``), to the Kafka topic of estimates (key ``<metric>:<window>``), and as
   Prometheus gauges for the top values only (see :mod:`ldpstream.decoder.metrics`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from ldpstream.decoder.metrics import DecoderMetrics, default_metrics
from ldpstream.decoder.published import PublishedEstimate, decode_window, window_buckets
from ldpstream.kafka import produce
from ldpstream.registry import MetricConfig, Registry
from ldpstream.store.contract import StatusStore, sum_buckets

log = logging.getLogger(__name__)

DEFAULT_ESTIMATES_TOPIC = "ldp-estimates"


class DecoderService:
    def __init__(self, registry: Registry, store: StatusStore, *, producer: Any = None,
                 estimates_topic: str = DEFAULT_ESTIMATES_TOPIC, metrics: DecoderMetrics | None = None,
                 history: int = 100, top_n: int = 10) -> None:
        self.registry = registry
        self.store = store
        self.producer = producer
        self.estimates_topic = estimates_topic
        self.metrics = metrics or default_metrics()
        self.history = history
        self.top_n = top_n
        self.last_failed: list[str] = []
        self.last_withheld: list[str] = []

    def decode_metric(self, metric: MetricConfig, now: float | None = None) -> list[PublishedEstimate]:
        """Estimates of the metric's windows that hold reports (see :meth:`empty_windows` for the others)."""
        return self._decode_windows(metric, now)[0]

    def _decode_windows(self, metric: MetricConfig, now: float | None) -> tuple[list[PublishedEstimate], list[str]]:
        now = time.time() if now is None else now
        mechanism = metric.mechanism
        shape = (mechanism.cohorts, mechanism.sketch_width)
        expired_before = None
        if metric.retention_seconds is not None:  # buckets whose sketches have expired (or are about to)
            expired_before = int((now - metric.retention_seconds) // metric.bucket_seconds)
        snapshot = self.store.snapshot(metric.name, metric.fingerprint, shape, expired_before)
        out = []
        empty = []
        for window in metric.windows:
            buckets = window_buckets(snapshot, window, metric.bucket_seconds, now)
            sketch = snapshot.all_time(shape) if window.seconds is None else sum_buckets(snapshot, buckets, shape)
            if mechanism.reports_per_cohort(sketch).sum() == 0:
                empty.append(window.name)  # nothing to estimate in this window (yet, or any more)
                continue
            started = time.perf_counter()
            # The window's buckets repeat reports of the same clients: its intervals carry a design effect
            # measured from the buckets still held (the all-time rollup may hold expired ones too).
            held = [snapshot.buckets[b] for b in buckets if b in snapshot.buckets]
            result, design, deff = decode_window(metric, sketch, held, rollup=window.seconds is None)
            seconds = time.perf_counter() - started
            covers = ((min(buckets) * metric.bucket_seconds, (max(buckets) + 1) * metric.bucket_seconds)
                      if buckets else None)
            out.append(PublishedEstimate(metric.name, window.name, now, seconds, len(buckets), result,
                                         metric.value_names(), covers, design, deff))
        return out, empty

    def run_once(self, now: float | None = None) -> list[PublishedEstimate]:
        """Decode and publish every metric once."""
        published: list[PublishedEstimate] = []
        failed: list[str] = []
        withheld: list[str] = []
        for metric in self.registry.metrics.values():
            try:
                # A partition being rebuilt from Kafka (the store lost counts) holds partial counts: publishing
                # them would present a part as the whole. Checked before and after the snapshot.
                rebuilding = self.store.rebuilding(metric.topic)
                results, empty = self._decode_windows(metric, now)
                rebuilding = rebuilding or self.store.rebuilding(metric.topic)
            except Exception:
                self.metrics.decode_failures.labels(metric.name).inc()
                log.exception("decoding metric %s failed", metric.name)
                failed.append(metric.name)
                continue
            self.metrics.withheld.labels(metric.name).set(1 if rebuilding else 0)
            if rebuilding:
                log.warning("metric %s: partitions %s of %s are being rebuilt from Kafka (up to offsets %s); its "
                            "estimates are withheld until they are complete", metric.name, sorted(rebuilding),
                            metric.topic, rebuilding)
                withheld.append(metric.name)
                continue
            try:
                for result in results:
                    self.publish(result)
                for window in empty:
                    self.retract(metric.name, window)
            except Exception:  # Redis or Kafka failed mid-publish: try again next pass, keep serving
                self.metrics.decode_failures.labels(metric.name).inc()
                log.exception("publishing metric %s failed", metric.name)
                failed.append(metric.name)
                continue
            published.extend(results)
        if self.producer is not None:
            unsent = self.producer.flush(10)
            if unsent:
                self.metrics.estimates_unpublished.inc(unsent)
                log.error("%d estimate(s) were not acknowledged by Kafka topic %s", unsent, self.estimates_topic)
        #: The metrics whose decode or publication failed in the last pass, and those withheld (rebuilding).
        self.last_failed = failed
        self.last_withheld = withheld
        if len(failed) < len(self.registry.metrics):
            try:
                self.store.record_decode(failed)
            except Exception:  # the store went away after the pass: the estimates stand, the record is next time's
                log.exception("recording the decoder pass failed")
            self.metrics.last_run.set_to_current_time()
        return published

    def retract(self, metric: str, window: str) -> None:
        """A window that holds no report (any more) has no estimate: drop the last one from Redis and its
        gauges, and tell the estimates topic with a ``{"retracted": true}`` record (history stays)."""
        if not self.store.retract_estimate(metric, window):
            return  # nothing was published for it: nothing to retract
        self.metrics.clear(metric, window)
        if self.producer is not None:
            body = json.dumps({"metric": metric, "window": window, "retracted": True, "time": time.time()})
            self._produce(f"{metric}:{window}", body)

    def publish(self, result: PublishedEstimate) -> None:
        body = json.dumps(result.to_json())
        self.store.publish_estimate(result.metric, result.window, body, self.history)
        if self.producer is not None:
            self._produce(f"{result.metric}:{result.window}", body)
        self.metrics.observe(result, self.top_n)

    def _produce(self, key: str, body: str) -> None:
        produce(self.producer, self.estimates_topic, body.encode(), key=key.encode(), wait=0.1)
        self.producer.poll(0)

    def run(self, interval: float, stop: threading.Event | None = None, iterations: int | None = None) -> None:
        self.store.check_safe()
        done = 0
        stop = stop or threading.Event()
        while not stop.is_set():
            started = time.monotonic()
            self.run_once()
            done += 1
            if iterations is not None and done >= iterations:
                return
            stop.wait(max(interval - (time.monotonic() - started), 0.0))

