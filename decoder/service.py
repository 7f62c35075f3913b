"""The periodic decoder: snapshot the sketches, estimate, publish (Redis, Kafka, Prometheus).

Every ``interval`` seconds, for each metric: read its sketches as one consistent snapshot
(:meth:`ldpstream.store.RedisSketchStore.snapshot`); for each window, sum the buckets it covers and decode them
(:func:`ldpstream.estimators.estimate`, intervals widened by the design effect of repeated reports,
:func:`ldpstream.decoder.published.decode_window`), republishing a window whose counts did not change and
warm-starting the iterative decoders; publish the estimate as JSON to Redis (latest and a bounded history), to
the estimates topic (key ``<metric>:<window>``) and as Prometheus gauges of the top values. Then, for each
two-member association and window: candidates from the members' marginals of the same window, the pair
statistic over the window's buckets, the joint EM (:func:`ldpstream.estimators.joint.estimate_joint`),
published likewise (key ``joint:<association>:<window>``). A discovery metric is decoded by
:mod:`ldpstream.decoder.discovery` and published as its dictionary. The service owns the estimators' caches
(:class:`~ldpstream.estimators.DesignCache`, :class:`~ldpstream.estimators.FactorCache`) and passes them in. A
metric or association whose decode or publication fails is logged, counted and named in the pass's record; the
others are published all the same. Keys: docs/redis-layout.md; what is published: docs/schema/.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ldpstream.decoder.discovery import DictionaryDecoder, PublishedDictionary
from ldpstream.decoder.metrics import DecoderMetrics, default_metrics
from ldpstream.decoder.published import (
    RETRACTION_SCHEMA,
    PublishedEstimate,
    PublishedJoint,
    decode_window,
    joint_variable,
    json_text,
    window_buckets,
)
from ldpstream.decoder.workers import PASS_TIMEOUT_SECONDS, DecoderWorkers, MetricOutcome
from ldpstream.errors import ConfigError
from ldpstream.estimators import DesignCache, FactorCache
from ldpstream.estimators.joint import OTHER_LABEL, estimate_joint
from ldpstream.estimators.windows import joint_design_effect, widen_joint
from ldpstream.health import Check
from ldpstream.kafka import produce
from ldpstream.registry import AssociationConfig, MetricConfig, Registry, Window
from ldpstream.store.contract import MetricSnapshot, StatusStore, sum_buckets

log = logging.getLogger(__name__)

DEFAULT_ESTIMATES_TOPIC = "ldp-estimates"

#: Estimators whose decode iterates from a starting point (the candidate decoders' "nnls" and "mle"): they start
#: from the window's previous estimate (docs/math/estimators.md#warm-starts-of-the-iterative-decoders).
ITERATIVE = frozenset({"nnls", "mle"})


@dataclass(frozen=True)
class LastDecode:
    """The last decode of one metric's window: the metric as configured then, the digest of everything the
    decode read (the window's buckets with each one's counts, and the all-time rollup for ``all``), and what was
    published."""

    metric: MetricConfig
    digest: bytes
    published: PublishedEstimate


def _bucket_digests(snapshot: MetricSnapshot) -> dict[int, bytes]:
    """A BLAKE2b digest of each bucket's counts (shape, dtype and bytes), computed once per snapshot."""
    return {b: _digest_array(arr) for b, arr in snapshot.buckets.items()}


def _digest_array(arr: np.ndarray) -> bytes:
    a = np.ascontiguousarray(arr)
    h = hashlib.blake2b(f"{a.shape}{a.dtype.str}".encode(), digest_size=16)
    h.update(a.data)
    return h.digest()


def _window_digest(rollup: np.ndarray | None, buckets: list[int], digests: dict[int, bytes]) -> bytes:
    """The digest of a window's input: each of its buckets with that bucket's counts (their sum is the window's
    sketch, and they decide the window design), and the all-time ``rollup`` when that is the sketch decoded (it
    may hold expired buckets)."""
    h = hashlib.blake2b(b"-" if rollup is None else _digest_array(rollup), digest_size=16)
    for b in buckets:
        h.update(b.to_bytes(8, "big", signed=True))
        h.update(digests.get(b, b"-"))
    return h.digest()


def _warm_start_of(previous: PublishedEstimate) -> np.ndarray:
    """The full parameter vector of a candidate decoder's estimate: the candidates' frequencies, then the
    "other" term when it was decoded."""
    est = previous.estimate
    if est.info.get("other") and est.residual is not None:
        return np.append(est.frequencies, est.residual)
    return np.asarray(est.frequencies, dtype=np.float64)


class DecoderService:
    def __init__(self, registry: Registry, store: StatusStore, *, producer: Any = None,
                 estimates_topic: str = DEFAULT_ESTIMATES_TOPIC, metrics: DecoderMetrics | None = None,
                 history: int = 100, top_n: int = 10, reuse: bool = True, workers: int = 1,
                 store_factory: Callable[[], StatusStore] | None = None,
                 worker_timeout: float = PASS_TIMEOUT_SECONDS, design_cache: DesignCache | None = None,
                 factor_cache: FactorCache | None = None) -> None:
        if workers < 1:
            raise ConfigError(f"the decoder needs at least 1 worker, not {workers}")
        if workers > 1 and store_factory is None:
            raise ConfigError("decoding with worker processes needs a store each of them can open (Redis): "
                              "a store_factory")
        self.registry = registry
        self.store = store
        self.producer = producer
        self.estimates_topic = estimates_topic
        self.metrics = metrics or default_metrics()
        self.history = history
        self.top_n = top_n
        self.last_failed: list[str] = []
        self.last_withheld: list[str] = []
        #: Passes completed (:meth:`run_once`).
        self.passes = 0
        #: (association, window) → (row labels, column labels, table) of the last joint decode (labels with
        #: "Other"): the EM's warm start while the candidates stay the same.
        self._joint_start: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...], np.ndarray]] = {}
        #: Whether a window's decode reuses its previous one: an unchanged input republishes the previous
        #: estimate (stamped with this pass's time) without decoding, and the iterative decoders (ITERATIVE)
        #: start from the previous estimate. ``False``: every window is decoded from scratch.
        self.reuse = reuse
        #: (metric, window) → the window's last decode (see :class:`LastDecode`).
        self._last: dict[tuple[str, str], LastDecode] = {}
        #: The caches this decoder's decodes share from one pass to the next (the estimators hold none): the
        #: design matrices of its metrics' candidate lists, and the candidate decoders' weighted Gram factors
        #: (:mod:`ldpstream.estimators.factor_cache`). New ones unless given; a worker process's decoder has its
        #: own.
        self.design_cache = DesignCache() if design_cache is None else design_cache
        self.factor_cache = FactorCache() if factor_cache is None else factor_cache
        #: The discovery metrics' decoder (it keeps each window's dictionary between passes).
        self.dictionaries = DictionaryDecoder(registry, store, reuse=reuse, design_cache=self.design_cache,
                                              factor_cache=self.factor_cache)
        #: Worker processes that decode the metrics of a pass (:mod:`ldpstream.decoder.workers`): 1 decodes
        #: them in this process, one after the other. They are started at the first pass and stopped by
        #: :meth:`close`; ``store_factory`` (picklable) opens each one's store.
        self.workers = workers
        self.store_factory = store_factory
        #: Seconds a worker process is given to answer a pass before it is killed and replaced.
        self.worker_timeout = worker_timeout
        self._pool: DecoderWorkers | None = None
        self.metrics.declare([m.name for m in registry.metrics.values() if m.part_of is None and not m.discovers],
                             [a.name for a in self.joint_associations()],
                             [m.name for m in registry.metrics.values() if m.discovers])

    def decode_metric(self, metric: MetricConfig, now: float | None = None) -> list[PublishedEstimate]:
        """Estimates of the metric's windows that hold reports (see :meth:`empty_windows` for the others)."""
        if metric.discovers:
            return list(self.dictionaries.decode(metric, now)[0])
        return self._decode_windows(metric, now)[0]

    def _decode_windows(self, metric: MetricConfig, now: float | None,
                        windows: tuple[Window, ...] | None = None) -> tuple[list[PublishedEstimate], list[str]]:
        now = time.time() if now is None else now
        mechanism = metric.mechanism
        shape = (mechanism.cohorts, mechanism.sketch_width)
        expired_before = None
        if metric.retention_seconds is not None:  # buckets whose sketches have expired (or are about to)
            expired_before = int((now - metric.retention_seconds) // metric.bucket_seconds)
        snapshot = self.store.snapshot(metric.name, metric.fingerprint, shape, expired_before)
        digests = _bucket_digests(snapshot) if self.reuse else {}
        out = []
        empty = []
        for window in metric.windows if windows is None else windows:
            buckets = window_buckets(snapshot, window, metric.bucket_seconds, now)
            sketch = snapshot.all_time(shape) if window.seconds is None else sum_buckets(snapshot, buckets, shape)
            if mechanism.reports_per_cohort(sketch).sum() == 0:
                empty.append(window.name)  # nothing to estimate in this window (yet, or any more)
                self._last.pop((metric.name, window.name), None)
                continue
            started = time.perf_counter()
            covers = ((min(buckets) * metric.bucket_seconds, (max(buckets) + 1) * metric.bucket_seconds)
                      if buckets else None)
            last = self._last.get((metric.name, window.name)) if self.reuse else None
            if last is not None and last.metric != metric:
                last = None  # reconfigured (estimator, candidates, ...): nothing of the last decode applies
            digest = (_window_digest(sketch if window.seconds is None else None, buckets, digests)
                      if self.reuse else b"")
            if last is not None and last.digest == digest:
                # The same counts in the same buckets: decoding again would give the same estimate.
                out.append(replace(last.published, snapshot_time=now, decode_seconds=time.perf_counter() - started,
                                   covers=covers, reused=True))
                continue
            # (a closed alphabet decodes against its own design, so it iterates too; the direct decoders'
            # "mle" is a closed form and ignores the start)
            start = _warm_start_of(last.published) if last is not None and metric.estimator in ITERATIVE else None
            # The window's buckets repeat reports of the same clients: its intervals carry a design effect
            # measured from the buckets still held (the all-time rollup may hold expired ones too).
            held = [snapshot.buckets[b] for b in buckets if b in snapshot.buckets]
            result, design, deff = decode_window(metric, sketch, held, rollup=window.seconds is None, start=start,
                                                 design_cache=self.design_cache, factor_cache=self.factor_cache)
            seconds = time.perf_counter() - started
            published = PublishedEstimate(metric.name, window.name, now, seconds, len(buckets), result,
                                          metric.value_names(), covers, design, deff)
            if self.reuse:
                self._last[(metric.name, window.name)] = LastDecode(metric, digest, published)
            out.append(published)
        return out, empty

    def decode_outcome(self, metric: MetricConfig, now: float | None) -> MetricOutcome:
        """Decode one metric for a pass: its estimates and empty windows, whether its partitions are being
        rebuilt, or the failure (never raised: the other metrics of the pass go on)."""
        try:
            # A partition being rebuilt from Kafka (the store lost counts) holds partial counts: publishing
            # them would present a part as the whole. Checked before and after the snapshot.
            rebuilding = self.store.rebuilding(metric.topic)
            results: list[PublishedEstimate]
            if metric.discovers:
                found, empty = self.dictionaries.decode(metric, now)
                results = list(found)
            else:
                results, empty = self._decode_windows(metric, now)
            rebuilding = rebuilding or self.store.rebuilding(metric.topic)
        except Exception:
            return MetricOutcome(metric.name, error=traceback.format_exc())
        return MetricOutcome(metric.name, results, empty, rebuilding)

    def _decode_pass(self, now: float | None,
                     on_ready: Callable[[list[MetricOutcome]], None] | None = None) -> dict[str, MetricOutcome]:
        """The outcomes of decoding the metrics by the worker processes (started at the first pass); ``on_ready``
        gets each worker's outcomes as they arrive (:meth:`DecoderWorkers.decode`)."""
        if self._pool is not None and self._pool.registry is not self.registry:
            self._pool.close()  # a new registry: new workers (and new shares of the metrics)
            self._pool = None
        if self._pool is None:
            assert self.store_factory is not None
            self._pool = DecoderWorkers(self.registry, self.store_factory, self.workers, self.reuse,
                                        make_decoder=worker_decoder, timeout=self.worker_timeout)
        return self._pool.decode(now, self.reuse, on_ready)

    @property
    def last_worker_cpu_seconds(self) -> float:
        """The CPU seconds the worker processes spent on the last pass (0 without worker processes)."""
        return 0.0 if self._pool is None else self._pool.last_cpu_seconds

    def close(self) -> None:
        """Stop the worker processes (if any)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def run_once(self, now: float | None = None) -> list[PublishedEstimate]:
        """Decode and publish every metric once; logs one INFO line for the pass (``event`` "pass")."""
        started = time.perf_counter()
        published: list[PublishedEstimate] = []
        failed: list[str] = []
        withheld: list[str] = []
        #: This pass's marginal estimates, which the joint decodes take their candidates from.
        marginals: dict[tuple[str, str], PublishedEstimate] = {}
        # (an n-gram slot of a discovery metric is decoded with it)
        decoded_metrics = [m for m in self.registry.metrics.values() if m.part_of is None]

        def publish_outcome(metric: MetricConfig, outcome: MetricOutcome) -> None:
            results, empty, rebuilding = outcome.results, outcome.empty, outcome.rebuilding
            if outcome.error is not None:
                failures = self.metrics.dictionary_decode_failures if metric.discovers else self.metrics.decode_failures
                failures.labels(metric.name).inc()
                log.error("decoding metric %s failed\n%s", metric.name, outcome.error.rstrip())
                failed.append(metric.name)
                return
            self.metrics.withheld.labels(metric.name).set(1 if rebuilding else 0)
            if rebuilding:
                log.warning("metric %s: partitions %s of %s are being rebuilt from Kafka (up to offsets %s); its "
                            "estimates are withheld until they are complete", metric.name, sorted(rebuilding),
                            metric.topic, rebuilding)
                withheld.append(metric.name)
                return
            try:
                for result in results:
                    self.publish(result)
                for window in empty:
                    self.retract(metric.name, window)
            except Exception:  # Redis or Kafka failed mid-publish: try again next pass, keep serving
                failures = self.metrics.dictionary_decode_failures if metric.discovers else self.metrics.decode_failures
                failures.labels(metric.name).inc()
                log.exception("publishing metric %s failed", metric.name)
                failed.append(metric.name)
                return
            published.extend(results)
            marginals.update(((metric.name, r.window), r) for r in results)

        if self.workers > 1:
            # Worker processes decode them all; each worker's metrics are published as soon as its outcomes
            # arrive (in the registry's order within a worker), while the others are still decoding.
            handled: set[str] = set()

            def on_ready(batch: list[MetricOutcome]) -> None:
                for outcome in batch:
                    if outcome.metric in self.registry.metrics and outcome.metric not in handled:
                        handled.add(outcome.metric)
                        publish_outcome(self.registry.metrics[outcome.metric], outcome)

            outcomes = self._decode_pass(now, on_ready)
            for metric in decoded_metrics:
                if metric.name not in handled:  # (every worker answers for all its metrics; kept as a guard)
                    publish_outcome(metric, outcomes.get(metric.name) or MetricOutcome(
                        metric.name, error="no decoder worker answered for this metric"))
        else:  # one metric decoded just before it is published
            for metric in decoded_metrics:
                publish_outcome(metric, self.decode_outcome(metric, now))
        for gone in [key for key in self._last if key[0] not in self.registry.metrics]:
            del self._last[gone]  # a metric no longer in the registry
        for gone in [key for key in self._joint_start if key[0] not in self.registry.associations]:
            del self._joint_start[gone]  # an association no longer in the registry: its warm start goes too
        for association in self.joint_associations():
            if not self._decode_association(association, marginals, failed + withheld, now):
                failed.append(association.name)
        if self.producer is not None:
            unsent = self.producer.flush(10)
            if unsent:
                self.metrics.estimates_unpublished.inc(unsent)
                log.error("%d estimate(s) were not acknowledged by Kafka topic %s", unsent, self.estimates_topic)
        #: The metrics and associations whose decode or publication failed in the last pass, and the metrics
        #: withheld (rebuilding).
        self.last_failed = failed
        self.last_withheld = withheld
        decoded = sum(1 for m in self.registry.metrics.values() if m.part_of is None)
        if len(failed) < decoded + len(self.joint_associations()):
            try:
                self.store.record_decode(failed)
            except Exception:  # the store went away after the pass: the estimates stand, the record is next time's
                log.exception("recording the decoder pass failed")
            self.metrics.last_run.set_to_current_time()
        self.passes += 1
        self._log_pass(len(decoded_metrics) + len(self.joint_associations()), failed, withheld, len(published),
                       time.perf_counter() - started)
        return published

    def _log_pass(self, total: int, failed: list[str], withheld: list[str], estimates: int, seconds: float) -> None:
        """The pass's line: metrics and associations decoded (published), failed and withheld, estimates
        published (one a window), seconds; the names of those that failed or are withheld."""
        decoded = total - len(failed) - len(withheld)
        names = "".join(f"; {what}: {', '.join(which)}" for what, which in (("failed", failed), ("withheld", withheld))
                        if which)
        log.info("pass %d: %d metric(s) and association(s) decoded, %d failed, %d withheld, %d estimate(s) "
                 "published in %.2f s%s", self.passes, decoded, len(failed), len(withheld), estimates, seconds,
                 names, extra={"event": "pass", "pass": self.passes, "decoded": decoded, "failed": len(failed),
                               "withheld": len(withheld), "estimates": estimates, "seconds": round(seconds, 3),
                               "failed_names": list(failed), "withheld_names": list(withheld)})

    def readiness_checks(self) -> dict[str, Check]:
        """The decoder's part of ``/readyz`` (:class:`ldpstream.health.Readiness`): its first pass is done. The
        caller adds Kafka and Redis (:func:`ldpstream.health.service_checks`)."""
        def first_pass() -> str | None:
            return None if self.passes else "the decoder has not completed its first pass yet"
        return {"pass": first_pass}

    def joint_associations(self) -> list[AssociationConfig]:
        """The associations the decoder estimates a joint table of: those of two metrics (an association of
        more members feeds other decoders; a discovery metric's slot pairs are read by its own decoder)."""
        return [a for a in self.registry.associations.values() if len(a.members) == 2 and a.part_of is None]

    def decode_association(self, association: AssociationConfig, now: float | None = None,
                           marginals: dict[tuple[str, str], PublishedEstimate] | None = None
                           ) -> tuple[list[PublishedJoint], list[str]]:
        """The joint estimates of the association's windows that hold report pairs, and the windows that hold
        none. ``marginals``: the members' estimates of this pass by (metric, window); a member's window missing
        there is decoded here (it is not one of the member's own windows)."""
        now = time.time() if now is None else now
        marginals = {} if marginals is None else marginals
        x, y = (self.registry[name] for name in association.members)
        out: list[PublishedJoint] = []
        empty: list[str] = []
        for window in association.windows:
            started = time.perf_counter()
            buckets = self._pair_buckets(association, window, now)
            patterns = self.store.pair_patterns(association, buckets)
            if patterns.total == 0:
                empty.append(window.name)
                continue
            marginal_x = self._marginal(x, window, now, marginals)
            marginal_y = self._marginal(y, window, now, marginals)
            if marginal_x is None or marginal_y is None:
                # The marginals were read before the pairs: the first reports of the window arrived in between.
                # Next pass has both; the window keeps what it had (nothing is published or retracted).
                log.info("association %s, window %s: report pairs but no marginal estimate of %s yet",
                         association.name, window.name, x.name if marginal_x is None else y.name)
                continue
            var_x = joint_variable(x, marginal_x.estimate, association.candidates)
            var_y = joint_variable(y, marginal_y.estimate, association.candidates)
            labels = ((*var_x.names(), OTHER_LABEL), (*var_y.names(), OTHER_LABEL))
            start = self._warm_start(association.name, window.name, labels)
            result = estimate_joint(patterns, var_x, var_y, start=start, design_cache=self.design_cache,
                                    factor_cache=self.factor_cache)
            self._joint_start[(association.name, window.name)] = (result.row_labels, result.column_labels,
                                                                  result.table)
            # The window's buckets repeat report pairs of the same clients, as they repeat the members' reports.
            designs = (marginal_x.design, marginal_y.design)
            deff = joint_design_effect(designs)
            result = widen_joint(result, deff)
            seconds = time.perf_counter() - started
            covers = ((min(buckets) * association.bucket_seconds, (max(buckets) + 1) * association.bucket_seconds)
                      if buckets else None)
            # Only the EM starts from a table (two direct members are decoded in closed form: nothing to warm).
            warm = start is not None and result.info.get("estimator") == "em"
            out.append(PublishedJoint(association.name, (x.name, y.name), window.name, now, seconds, len(buckets),
                                      result, warm, covers, deff, designs))
        return out, empty

    def _warm_start(self, association: str, window: str,
                    labels: tuple[tuple[str, ...], tuple[str, ...]]) -> np.ndarray | None:
        """The previous decode's table when it has the same row and column labels: this process's last one, else
        (after a restart) the one last published; None (the EM starts uniform) otherwise."""
        previous = self._joint_start.get((association, window))
        if previous is None:
            published = self.store.latest_joint(association, window)
            if published is not None and "table" in published:
                previous = (tuple(published["rows"]), tuple(published["columns"]), np.array(published["table"]))
        if previous is None or (previous[0], previous[1]) != labels:
            return None
        return previous[2]

    def _decode_association(self, association: AssociationConfig,
                            marginals: dict[tuple[str, str], PublishedEstimate], blocked: list[str],
                            now: float | None) -> bool:
        """Decode and publish one association; False when it failed (logged and counted). An association with
        a member that failed or is withheld this pass is skipped (its joint estimates stand as they were)."""
        stopped = [m for m in association.members if m in blocked]
        if stopped:
            log.warning("association %s: not decoded this pass, member metric(s) %s failed or are withheld",
                        association.name, ", ".join(stopped))
            return True
        try:
            results, empty = self.decode_association(association, now, marginals)
        except Exception:
            self.metrics.joint_failures.labels(association.name).inc()
            log.exception("decoding association %s failed", association.name)
            return False
        try:
            for result in results:
                self.publish_joint(result)
            for window in empty:
                self.retract_joint(association.name, window)
        except Exception:  # Redis or Kafka failed mid-publish: try again next pass, keep serving
            self.metrics.joint_failures.labels(association.name).inc()
            log.exception("publishing association %s failed", association.name)
            return False
        return True

    def _pair_buckets(self, association: AssociationConfig, window: Window, now: float) -> list[int]:
        """The buckets of the association's report pairs that the window covers (for ``all``, every bucket
        still retained: the pair statistic has no all-time rollup). Buckets whose retention has passed (or is
        about to) are left out, as the marginals' snapshot leaves them out."""
        bucket_seconds = association.bucket_seconds
        expired_before = int((now - association.retention_seconds) // bucket_seconds)
        held = [b for b in self.store.pair_buckets(association) if b >= expired_before]
        if window.seconds is None:
            return sorted(held)
        start = now - window.seconds
        return sorted(b for b in held if (b + 1) * bucket_seconds > start and b * bucket_seconds <= now)

    def _marginal(self, metric: MetricConfig, window: Window, now: float,
                  marginals: dict[tuple[str, str], PublishedEstimate]) -> PublishedEstimate | None:
        """The metric's estimate over ``window``: this pass's, else decoded now (not one of its windows)."""
        if (metric.name, window.name) in marginals:
            return marginals[(metric.name, window.name)]
        if window.name in {w.name for w in metric.windows}:
            return None  # one of its windows, without reports (or not decoded this pass)
        results, _ = self._decode_windows(metric, now, (window,))
        return results[0] if results else None

    def publish_joint(self, result: PublishedJoint) -> None:
        body = json_text(result.to_json())
        self.store.publish_joint(result.association, result.window, body, self.history)
        if self.producer is not None:
            self._produce(result.key, body)
        self.metrics.observe_joint(result, self.top_n)

    def retract_joint(self, association: str, window: str) -> None:
        """A window that holds no report pair (any more) has no joint estimate: drop it from Redis and its
        gauges, and tell the estimates topic (``{"retracted": true}``; history stays)."""
        self._joint_start.pop((association, window), None)
        if not self.store.retract_joint(association, window):
            return
        self.metrics.clear_joint(association, window)
        if self.producer is not None:
            body = json_text({"schema": RETRACTION_SCHEMA, "association": association, "window": window,
                               "retracted": True, "time": time.time()})
            self._produce(f"joint:{association}:{window}", body)

    def retract(self, metric: str, window: str) -> None:
        """A window that holds no report (any more) has no estimate: drop the last one from Redis and its
        gauges, and tell the estimates topic with a ``{"retracted": true}`` record (history stays)."""
        if not self.store.retract_estimate(metric, window):
            return  # nothing was published for it: nothing to retract
        self.metrics.clear(metric, window)
        self.metrics.clear_dictionary(metric, window)
        if self.producer is not None:
            body = json_text({"schema": RETRACTION_SCHEMA, "metric": metric, "window": window, "retracted": True,
                               "time": time.time()})
            self._produce(f"{metric}:{window}", body)

    def publish(self, result: PublishedEstimate) -> None:
        body = result.body()
        self.store.publish_estimate(result.metric, result.window, body, self.history)
        if self.producer is not None:
            self._produce(f"{result.metric}:{result.window}", body)
        if isinstance(result, PublishedDictionary):  # the dictionary names of docs/monitoring.md
            self.metrics.observe_dictionary(result, result.discovery, self.top_n)
        else:
            self.metrics.observe(result, self.top_n)

    def _produce(self, key: str, body: str) -> None:
        produce(self.producer, self.estimates_topic, body.encode(), key=key.encode(), wait=0.1)
        self.producer.poll(0)

    def run(self, interval: float, stop: threading.Event | None = None, iterations: int | None = None) -> None:
        """Decode every ``interval`` seconds until ``stop`` is set (or ``iterations`` passes); the worker
        processes, if any, are stopped on the way out."""
        self.store.check_safe()
        done = 0
        stop = stop or threading.Event()
        try:
            while not stop.is_set():
                started = time.monotonic()
                self.run_once()
                done += 1
                if iterations is not None and done >= iterations:
                    return
                stop.wait(max(interval - (time.monotonic() - started), 0.0))
        finally:
            self.close()



def worker_decoder(registry: Registry, store: StatusStore, reuse: bool) -> DecoderService:
    """The service a decoder worker process decodes its metrics with (:mod:`ldpstream.decoder.workers`), with
    gauges of its own that nothing serves: the parent observes what it publishes."""
    from prometheus_client import CollectorRegistry

    return DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()), reuse=reuse)
