"""The decoder's Prometheus metrics. Per-value gauges exist only for each metric's current top-N values, and
per-cell gauges of a joint table only for its current top-N cells (series that leave the top N are removed),
so label cardinality stays bounded."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ldpstream.decoder.published import PublishedEstimate, PublishedJoint


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
        #: (metric, window, value) → its frequency, low and high series while the value is shown.
        self._value_series: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}
        # Joint estimates of associations (one table per association and window).
        cell = ["association", "window", "x", "y"]
        self.joint_cell = Gauge("ldpstream_joint_cell_ratio", "Estimated joint frequency of a top cell (x, y)",
                                cell, registry=registry)
        self.joint_cell_low = Gauge("ldpstream_joint_cell_low_95_ratio",
                                    "Lower end of the 95% interval of a top joint cell", cell, registry=registry)
        self.joint_cell_high = Gauge("ldpstream_joint_cell_high_95_ratio",
                                     "Upper end of the 95% interval of a top joint cell", cell, registry=registry)
        table = ["association", "window"]
        self.joint_reports = Gauge("ldpstream_joint_reports", "Report pairs the latest joint estimate rests on",
                                   table, registry=registry)
        self.joint_statistic = Gauge("ldpstream_joint_independence_statistic",
                                     "Statistic of the test of independence of the association's two metrics",
                                     table, registry=registry)
        self.joint_p_value = Gauge("ldpstream_joint_independence_p_value",
                                   "p-value of the test of independence (small: the metrics are associated)",
                                   table, registry=registry)
        self.joint_em_iterations = Gauge("ldpstream_joint_em_iterations", "EM iterations of the latest joint decode",
                                         table, registry=registry)
        self.joint_em_seconds = Gauge("ldpstream_joint_em_seconds",
                                      "Time of the latest joint decode's EM iterations, seconds", table,
                                      registry=registry)
        self.joint_decode_seconds = Histogram(
            "ldpstream_joint_decode_seconds", "Time to decode one association and window (pairs read, EM)",
            ["association"], registry=registry, buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
        self.joint_failures = Counter("ldpstream_joint_decode_failures_total",
                                      "Joint decodes or publications of an association that raised",
                                      ["association"], registry=registry)
        self._shown_cells: dict[tuple[str, str], set[tuple[str, str]]] = {}
        # Discovery metrics (strings without a dictionary): the names agreed in docs/monitoring.md, apart from the
        # marginals' (a dictionary's values are strings found, not a fixed list), plus the retirements and stages.
        string = ["metric", "window", "string"]
        self.dictionary_string = Gauge("ldpstream_dictionary_string_ratio",
                                       "Estimated frequency of a discovered string (top N)", string, registry=registry)
        self.dictionary_string_low = Gauge("ldpstream_dictionary_string_low_95_ratio",
                                           "Lower end of the 95% interval of a discovered string", string,
                                           registry=registry)
        self.dictionary_string_high = Gauge("ldpstream_dictionary_string_high_95_ratio",
                                            "Upper end of the 95% interval of a discovered string", string,
                                            registry=registry)
        self.dictionary_strings = Gauge("ldpstream_dictionary_strings",
                                        "Strings in a discovery metric's published dictionary", ["metric", "window"],
                                        registry=registry)
        self.dictionary_reports = Gauge("ldpstream_dictionary_reports", "Reports (clients) the discovery rests on",
                                        ["metric", "window"], registry=registry)
        self.dictionary_decode_seconds = Histogram(
            "ldpstream_dictionary_decode_seconds", "Time of one discovery (n-gram decode, pair EM, cliques, final)",
            ["metric"], registry=registry, buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
        self.dictionary_decode_failures = Counter("ldpstream_dictionary_decode_failures_total",
                                                  "Discoveries (or their publication) that raised", ["metric"],
                                                  registry=registry)
        self.dictionary_retired = Counter("ldpstream_dictionary_retired_total",
                                          "Strings retired from a discovery metric's dictionary",
                                          ["metric", "window"], registry=registry)
        self.dictionary_stage_seconds = Gauge("ldpstream_dictionary_stage_seconds",
                                              "Time of a stage of the latest discovery (ngrams, pairs, cliques, final)",
                                              ["metric", "window", "stage"], registry=registry)
        self._shown_strings: dict[tuple[str, str], set[str]] = {}

    def declare(self, metrics: Iterable[str], associations: Iterable[str], dictionaries: Iterable[str] = ()
                ) -> None:
        """Export the failure counters at 0 (and no withheld estimates) before the first pass, each under the name
        its decode counts failures in: ``metrics`` decoded as marginals (``ldpstream_decode_failures_total``),
        ``associations`` decoded as joint tables, ``dictionaries`` the discovery metrics
        (``ldpstream_dictionary_decode_failures_total``; their n-gram metrics and slot pairs are decoded with
        them and have no counter of their own). A counter series that appears only at its first increment hides
        that increment from ``increase()``, so an alert on failures would miss the first ones."""
        for metric in metrics:
            self.decode_failures.labels(metric)
            self.withheld.labels(metric).set(0)
        for association in associations:
            self.joint_failures.labels(association)
        for metric in dictionaries:
            self.dictionary_decode_failures.labels(metric)
            self.withheld.labels(metric).set(0)

    def observe(self, result: PublishedEstimate, top_n: int) -> None:
        est = result.estimate
        order = np.argsort(-est.frequencies, kind="stable")[:top_n]
        shown = {result.names[i] for i in order}
        ci = est.ci(0.95, clip=True) if est.std_errors is not None or est.interval is not None else None
        for i in order.tolist():
            labels = (result.metric, result.window, result.names[i])
            # the three series of one value, looked up once while it stays shown (prometheus_client's labels()
            # validates and locks on every call: 9,000 calls a refresh of 100 metrics)
            series = self._value_series.get(labels)
            if series is None:
                series = (self.frequency.labels(*labels), self.low.labels(*labels), self.high.labels(*labels))
                self._value_series[labels] = series
            series[0].set(float(est.frequencies[i]))
            if ci is not None:
                series[1].set(float(ci.low[i]))
                series[2].set(float(ci.high[i]))
        previous = self._shown.get((result.metric, result.window), set())
        self._remove_values(result.metric, result.window, previous - shown)
        self._shown[(result.metric, result.window)] = shown
        self.reports.labels(result.metric, result.window).set(est.n_reports)
        if est.residual is not None:
            self.residual.labels(result.metric, result.window).set(est.residual)
        self.decode_seconds.labels(result.metric).observe(result.decode_seconds)

    def observe_dictionary(self, result: PublishedEstimate, discovery: Mapping[str, Any], top_n: int) -> None:
        """A discovery metric's dictionary: its ``top_n`` strings with their intervals, its size and reports, and
        for a decode that ran (not a republished one) its time, stages and retirements."""
        est = result.estimate
        order = np.argsort(-est.frequencies, kind="stable")[:top_n]
        ci = est.ci(0.95, clip=True) if est.std_errors is not None or est.interval is not None else None
        shown = set()
        for i in order.tolist():
            labels = (result.metric, result.window, result.names[i])
            shown.add(result.names[i])
            self.dictionary_string.labels(*labels).set(float(est.frequencies[i]))
            if ci is not None:
                self.dictionary_string_low.labels(*labels).set(float(ci.low[i]))
                self.dictionary_string_high.labels(*labels).set(float(ci.high[i]))
        key = (result.metric, result.window)
        self._remove_strings(*key, self._shown_strings.get(key, set()) - shown)
        self._shown_strings[key] = shown
        self.dictionary_strings.labels(*key).set(len(result.names))
        self.dictionary_reports.labels(*key).set(int(est.n_reports))
        if result.reused:
            return
        self.dictionary_decode_seconds.labels(result.metric).observe(result.decode_seconds)
        # at 0 from the window's first decode, so that increase() sees the first retirement
        self.dictionary_retired.labels(*key).inc(len(discovery.get("retired", [])))
        for stage, seconds in discovery.get("seconds", {}).items():
            self.dictionary_stage_seconds.labels(*key, stage).set(float(seconds))

    def clear_dictionary(self, metric: str, window: str) -> None:
        """Remove every series of a discovery window that no longer has a dictionary."""
        self._remove_strings(metric, window, self._shown_strings.pop((metric, window), set()))
        for gauge in (self.dictionary_strings, self.dictionary_reports):
            with contextlib.suppress(KeyError):
                gauge.remove(metric, window)

    def _remove_strings(self, metric: str, window: str, strings: set[str]) -> None:
        for text in strings:
            for gauge in (self.dictionary_string, self.dictionary_string_low, self.dictionary_string_high):
                with contextlib.suppress(KeyError):
                    gauge.remove(metric, window, text)

    def clear(self, metric: str, window: str) -> None:
        """Remove every series of a window that no longer has an estimate."""
        self._remove_values(metric, window, self._shown.pop((metric, window), set()))
        for gauge in (self.reports, self.residual):
            with contextlib.suppress(KeyError):
                gauge.remove(metric, window)

    def observe_joint(self, result: PublishedJoint, top_n: int) -> None:
        """The ``top_n`` largest cells of the table (with their intervals), the test and the EM's figures."""
        est = result.estimate
        table = np.asarray(est.table, dtype=np.float64)
        flat = np.argsort(-table, axis=None, kind="stable")[:top_n]
        rows, columns = np.unravel_index(flat, table.shape)
        shown: set[tuple[str, str]] = set()
        for i, j in zip(rows.tolist(), columns.tolist(), strict=True):
            x, y = str(est.row_labels[i]), str(est.column_labels[j])
            labels = (result.association, result.window, x, y)
            self.joint_cell.labels(*labels).set(float(table[i, j]))
            self.joint_cell_low.labels(*labels).set(float(est.low[i, j]))
            self.joint_cell_high.labels(*labels).set(float(est.high[i, j]))
            shown.add((x, y))
        key = (result.association, result.window)
        self._remove_cells(*key, self._shown_cells.get(key, set()) - shown)
        self._shown_cells[key] = shown
        self.joint_reports.labels(*key).set(int(est.n))
        self.joint_statistic.labels(*key).set(float(est.independence.statistic))
        self.joint_p_value.labels(*key).set(float(est.independence.p_value))
        self.joint_em_iterations.labels(*key).set(int(est.iterations))
        self.joint_em_seconds.labels(*key).set(float(est.em_seconds))
        self.joint_decode_seconds.labels(result.association).observe(result.decode_seconds)

    def clear_joint(self, association: str, window: str) -> None:
        """Remove every series of a joint window that no longer has an estimate."""
        self._remove_cells(association, window, self._shown_cells.pop((association, window), set()))
        for gauge in (self.joint_reports, self.joint_statistic, self.joint_p_value, self.joint_em_iterations,
                      self.joint_em_seconds):
            with contextlib.suppress(KeyError):
                gauge.remove(association, window)

    def _remove_cells(self, association: str, window: str, cells: set[tuple[str, str]]) -> None:
        for x, y in cells:
            for gauge in (self.joint_cell, self.joint_cell_low, self.joint_cell_high):
                with contextlib.suppress(KeyError):
                    gauge.remove(association, window, x, y)

    def _remove_values(self, metric: str, window: str, values: set[str]) -> None:
        for value in values:
            self._value_series.pop((metric, window, value), None)
            for gauge in (self.frequency, self.low, self.high):
                with contextlib.suppress(KeyError):
                    gauge.remove(metric, window, value)


@functools.cache
def default_metrics() -> DecoderMetrics:
    """The process-wide instance on Prometheus' default registry (metrics may be registered only once)."""
    return DecoderMetrics()
