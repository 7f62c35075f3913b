"""The decoder's Prometheus metrics. Per-value gauges exist only for each metric's current top-N values
(series of values that leave the top N are removed), so label cardinality stays bounded."""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ldpstream.decoder.published import PublishedEstimate


class DecoderMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.frequency = Gauge("ldpstream_estimate_ratio", "Estimated frequency of a top value",
                               ["metric", "window", "value"], registry=registry)
        self.low = Gauge("ldpstream_estimate_low_95_ratio", "Lower end of the 95% interval of a top value",
                         ["metric", "window", "value"], registry=registry)
        self.high = Gauge("ldpstream_estimate_high_95_ratio", "Upper end of the 95% interval of a top value",
                          ["metric", "window", "value"], registry=registry)
        self.reports = Gauge("ldpstream_estimate_reports", "Reports the latest estimate rests on",
                             ["metric", "window"], registry=registry)
        self.residual = Gauge("ldpstream_estimate_residual_ratio",
                              "Estimated mass outside the candidate list (candidate decoders)",
                              ["metric", "window"], registry=registry)
        self.decode_seconds = Histogram("ldpstream_decode_seconds", "Time to decode one metric and window",
                                        ["metric"], registry=registry,
                                        buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
        self.decode_failures = Counter("ldpstream_decode_failures_total", "Decodes that raised", ["metric"],
                                       registry=registry)
        self.estimates_unpublished = Counter(
            "ldpstream_estimates_unpublished_total", "Estimates the Kafka topic of estimates did not acknowledge",
            registry=registry)
        self.withheld = Gauge("ldpstream_estimates_withheld",
                              "1 while a metric's estimates are withheld because the store is rebuilding its counts "
                              "from Kafka", ["metric"], registry=registry)
        self.last_run = Gauge("ldpstream_decoder_last_run_timestamp_seconds",
                              "Unix time of the decoder's last completed pass", registry=registry)
        self._shown: dict[tuple[str, str], set[str]] = {}

    def observe(self, result: PublishedEstimate, top_n: int) -> None:
        est = result.estimate
        order = np.argsort(-est.frequencies, kind="stable")[:top_n]
        shown = {result.names[i] for i in order}
        ci = est.ci(0.95, clip=True) if est.std_errors is not None or est.interval is not None else None
        for i in order:
            labels = (result.metric, result.window, result.names[i])
            self.frequency.labels(*labels).set(float(est.frequencies[i]))
            if ci is not None:
                self.low.labels(*labels).set(float(ci.low[i]))
                self.high.labels(*labels).set(float(ci.high[i]))
        previous = self._shown.get((result.metric, result.window), set())
        self._remove_values(result.metric, result.window, previous - shown)
        self._shown[(result.metric, result.window)] = shown
        self.reports.labels(result.metric, result.window).set(est.n_reports)
        if est.residual is not None:
            self.residual.labels(result.metric, result.window).set(est.residual)
        self.decode_seconds.labels(result.metric).observe(result.decode_seconds)

    def clear(self, metric: str, window: str) -> None:
        """Remove every series of a window that no longer has an estimate."""
        self._remove_values(metric, window, self._shown.pop((metric, window), set()))
        for gauge in (self.reports, self.residual):
            with contextlib.suppress(KeyError):
                gauge.remove(metric, window)

    def _remove_values(self, metric: str, window: str, values: set[str]) -> None:
        for value in values:
            for gauge in (self.frequency, self.low, self.high):
                with contextlib.suppress(KeyError):
                    gauge.remove(metric, window, value)


@functools.cache
def default_metrics() -> DecoderMetrics:
    """The process-wide instance on Prometheus' default registry (metrics may be registered only once)."""
    return DecoderMetrics()
