"""The decoder service (:class:`ldpstream.decoder.service.DecoderService`) against the in-memory store: no
Redis, no Kafka. Window selection, publishing with a bounded history, retraction of windows that became
empty, top-N gauges, the record of the last pass, and a failing metric that does not stop the others."""

from __future__ import annotations

import json

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from ldpstream.consumers.fold import fold_messages
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.published import PublishedEstimate, decode_sketch
from ldpstream.decoder.service import DecoderService
from ldpstream.decoder.workers import assign
from ldpstream.device import privatize_population
from ldpstream.errors import ConfigError
from ldpstream.registry import Registry
from ldpstream.store import InMemorySketchStore, PartitionBatch
from ldpstream.store.contract import MetricSnapshot
from ldpstream.wire import encode_records, payloads_from_reports

LABELS = ["en", "es", "zh", "hi", "ar", "pt", "bn", "ru"]
BUCKET = 600
NOW = 1_750_000_200 // BUCKET * BUCKET
OLD_TIME = NOW - 3 * 3600 + 100   # three hours before NOW
RECENT_TIME = NOW - 120           # two minutes before NOW
OLD, RECENT, FLAGS = 3000, 2000, 1000
TOP_N = 3


def make_registry() -> Registry:
    return Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all", "1h"]},
        "metrics": {
            "lang": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 8.0, "labels": LABELS,
                     "estimator": "unbiased"},
            "flags": {"id": 2, "mechanism": "krappor", "k": 4, "epsilon": 3.0},
        }})


def concentrated(n: int, on: list[int], k: int, seed: int) -> np.ndarray:
    """n values in 0..k-1: 90% on ``on`` (decreasing weights), 10% uniform."""
    rng = np.random.default_rng(seed)
    p = np.full(k, 0.1 / k)
    weights = np.arange(len(on), 0, -1, dtype=float)
    p[on] += 0.9 * weights / weights.sum()
    return rng.choice(k, size=n, p=p)


class Feeder:
    """Privatizes values, folds them as a consumer does, and applies them to the store (partition 0)."""

    def __init__(self, registry: Registry, store: InMemorySketchStore) -> None:
        self.registry, self.store, self.offset = registry, store, None

    def add(self, metric_name: str, values: np.ndarray, event_time: int, seed: int) -> None:
        metric = self.registry[metric_name]
        cohorts, reports = privatize_population(metric, values, np.random.default_rng(seed))
        rows = encode_records(metric.id, metric.fingerprint, cohorts,
                              payloads_from_reports(metric.mechanism, reports), event_time=event_time)
        folded = fold_messages([rows.tobytes()], np.zeros(1, dtype=np.int64), self.registry, now=NOW)
        assert folded.applied == {metric_name: len(values)}
        next_offset = (self.offset or 0) + 1
        assert self.store.apply(PartitionBatch("reports", 0, self.offset, next_offset, folded.increments,
                                               expire_at=folded.expire_at)).applied
        self.offset = next_offset


@pytest.fixture
def registry() -> Registry:
    return make_registry()


@pytest.fixture
def store(registry) -> InMemorySketchStore:
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = Feeder(registry, store)
    feed.add("lang", concentrated(OLD, [0, 1, 2], 8, seed=1), OLD_TIME, seed=11)
    feed.add("lang", concentrated(RECENT, [5, 6, 7], 8, seed=2), RECENT_TIME, seed=12)
    feed.add("flags", concentrated(FLAGS, [3], 4, seed=3), OLD_TIME, seed=13)
    return store


@pytest.fixture
def prometheus() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def service(registry, store, prometheus) -> DecoderService:
    return DecoderService(registry, store, metrics=DecoderMetrics(prometheus), history=2, top_n=TOP_N)


def shown_values(prometheus: CollectorRegistry, metric: str, window: str) -> set[str]:
    """The ``value`` labels of the frequency gauge's series of one metric and window."""
    return {s.labels["value"] for family in prometheus.collect() if family.name == "ldpstream_estimate_ratio"
            for s in family.samples if s.labels["metric"] == metric and s.labels["window"] == window}


def top(estimate: dict, n: int = TOP_N) -> set[str]:
    ordered = sorted(estimate["values"], key=lambda v: -v["frequency"])
    return {v["value"] for v in ordered[:n]}


# ------------------------------------------------------------------------------------------ windows


def test_window_all_sums_every_bucket_and_1h_only_the_buckets_it_overlaps(service, registry):
    results = {r.window: r for r in service.decode_metric(registry["lang"], now=NOW)}
    assert set(results) == {"all", "1h"}
    every, hour = results["all"], results["1h"]
    assert every.estimate.n_reports == OLD + RECENT and every.buckets == 2
    assert hour.estimate.n_reports == RECENT and hour.buckets == 1
    recent_bucket = RECENT_TIME // BUCKET
    assert hour.covers == (recent_bucket * BUCKET, (recent_bucket + 1) * BUCKET)
    assert every.covers == (OLD_TIME // BUCKET * BUCKET, (recent_bucket + 1) * BUCKET)
    assert top(hour.to_json()) == {"pt", "bn", "ru"}
    assert every.names == tuple(LABELS)


def test_an_earlier_1h_window_sees_only_the_reports_of_its_hour(service, registry):
    results = {r.window: r for r in service.decode_metric(registry["lang"], now=OLD_TIME + 300)}
    assert results["1h"].estimate.n_reports == OLD
    assert top(results["1h"].to_json()) == {"en", "es", "zh"}


def test_a_window_without_reports_is_not_decoded(service, registry):
    assert [r.window for r in service.decode_metric(registry["flags"], now=NOW)] == ["all"]


# ------------------------------------------------------------------------------------------ publishing


def test_run_once_publishes_the_latest_estimate_and_a_bounded_history(service, store):
    for i in range(3):
        published = service.run_once(now=NOW + i)
        assert {(p.metric, p.window) for p in published} == {("lang", "all"), ("lang", "1h"), ("flags", "all")}
    latest = store.latest_estimate("lang", "all")
    assert latest is not None
    assert latest["metric"] == "lang" and latest["window"] == "all" and latest["snapshot_time"] == NOW + 2
    assert latest["n_reports"] == OLD + RECENT
    assert [v["value"] for v in latest["values"]] == LABELS
    assert abs(sum(v["frequency"] for v in latest["values"]) - 1) < 1e-6
    assert [e["snapshot_time"] for e in store.estimate_history("lang", "all")] == [NOW + 2, NOW + 1]
    assert store.latest_estimate("lang", "1h")["n_reports"] == RECENT
    assert store.latest_estimate("flags", "all")["n_reports"] == FLAGS
    assert store.latest_estimate("flags", "1h") is None


def test_a_window_that_became_empty_is_retracted_and_its_gauges_removed(service, store, prometheus):
    service.run_once(now=NOW)
    assert store.latest_estimate("lang", "1h") is not None
    assert shown_values(prometheus, "lang", "1h")
    assert prometheus.get_sample_value("ldpstream_estimate_reports", {"metric": "lang", "window": "1h"}) == RECENT

    later = NOW + 5 * 3600  # no report in the last hour any more
    published = service.run_once(now=later)
    assert ("lang", "1h") not in {(p.metric, p.window) for p in published}
    assert store.latest_estimate("lang", "1h") is None
    assert len(store.estimate_history("lang", "1h")) == 1  # the history stays
    assert shown_values(prometheus, "lang", "1h") == set()
    assert prometheus.get_sample_value("ldpstream_estimate_reports", {"metric": "lang", "window": "1h"}) is None
    assert store.latest_estimate("lang", "all")["n_reports"] == OLD + RECENT  # all-time keeps everything
    assert len(shown_values(prometheus, "lang", "all")) == TOP_N


# ------------------------------------------------------------------------------------------ gauges


def test_gauges_exist_for_the_top_n_values_only_and_leave_with_them(service, store, prometheus):
    service.run_once(now=OLD_TIME + 300)
    assert shown_values(prometheus, "lang", "1h") == {"en", "es", "zh"}
    first = store.latest_estimate("lang", "1h")
    for value in first["values"]:
        sample = prometheus.get_sample_value("ldpstream_estimate_ratio",
                                             {"metric": "lang", "window": "1h", "value": value["value"]})
        if value["value"] in {"en", "es", "zh"}:
            assert sample == pytest.approx(value["frequency"])
            low = prometheus.get_sample_value("ldpstream_estimate_low_95_ratio",
                                              {"metric": "lang", "window": "1h", "value": value["value"]})
            assert low == pytest.approx(value["low_95"])
        else:
            assert sample is None

    service.run_once(now=NOW)  # the last hour now holds other values: the old series are removed
    assert shown_values(prometheus, "lang", "1h") == {"pt", "bn", "ru"}
    for family in prometheus.collect():
        if family.name in ("ldpstream_estimate_low_95_ratio", "ldpstream_estimate_high_95_ratio"):
            assert {s.labels["value"] for s in family.samples if s.labels["window"] == "1h"
                    and s.labels["metric"] == "lang"} == {"pt", "bn", "ru"}
    assert len(shown_values(prometheus, "flags", "all")) == TOP_N


# ------------------------------------------------------------------------------------------ last pass


def test_the_last_decode_is_recorded(service, store, prometheus):
    assert store.last_decode() is None
    service.run_once(now=NOW)
    last = store.last_decode()
    assert last is not None and last["failed"] == []
    assert prometheus.get_sample_value("ldpstream_decoder_last_run_timestamp_seconds") > 0


class FailingStore(InMemorySketchStore):
    """The in-memory store whose snapshot of some metrics raises."""

    def __init__(self, failing: set[str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.failing = failing

    def snapshot(self, metric, fingerprint, shape, expired_before=None):
        if metric in self.failing:
            raise RuntimeError(f"snapshot of {metric} failed")
        return super().snapshot(metric, fingerprint, shape, expired_before)


def failing_service(registry, prometheus, failing: set[str]) -> tuple[DecoderService, FailingStore]:
    store = FailingStore(failing, clock=lambda: NOW)
    feed = Feeder(registry, store)
    feed.add("lang", concentrated(RECENT, [5, 6, 7], 8, seed=2), RECENT_TIME, seed=12)
    feed.add("flags", concentrated(FLAGS, [3], 4, seed=3), OLD_TIME, seed=13)
    return DecoderService(registry, store, metrics=DecoderMetrics(prometheus), top_n=TOP_N), store


def test_a_failing_metric_is_counted_and_does_not_stop_the_others(registry, prometheus, caplog):
    service, store = failing_service(registry, prometheus, {"flags"})
    published = service.run_once(now=NOW)
    assert {(p.metric, p.window) for p in published} == {("lang", "all"), ("lang", "1h")}
    assert prometheus.get_sample_value("ldpstream_decode_failures_total", {"metric": "flags"}) == 1
    # Declared at 0 from the start, never incremented.
    assert prometheus.get_sample_value("ldpstream_decode_failures_total", {"metric": "lang"}) == 0
    assert store.latest_estimate("lang", "all") is not None and store.latest_estimate("flags", "all") is None
    assert store.last_decode()["failed"] == ["flags"]
    assert "decoding metric flags failed" in caplog.text


def test_a_pass_where_every_metric_failed_is_not_recorded_as_a_decode(registry, prometheus):
    service, store = failing_service(registry, prometheus, {"flags", "lang"})
    assert service.run_once(now=NOW) == []
    assert store.last_decode() is None
    assert prometheus.get_sample_value("ldpstream_decoder_last_run_timestamp_seconds") == 0
    assert prometheus.get_sample_value("ldpstream_decode_failures_total", {"metric": "lang"}) == 1


def test_estimates_are_withheld_while_a_partition_is_rebuilt_from_kafka():
    """After the store lost counts, consumers re-apply them from Kafka and mark the partitions; until the
    rebuild reaches its offset the decoder publishes nothing for the metric (no partial estimate, no
    retraction), and says so in a gauge."""
    registry = Registry.from_dict({"defaults": {"topic": "t"},
                                   "metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}})
    metric = registry["m"]
    store = InMemorySketchStore()
    folded = fold_messages([encode_records(metric.id, metric.fingerprint, [0, 0], payloads_from_reports(
        metric.mechanism, np.array([1, 2])), event_time=100).tobytes()], np.zeros(1, dtype=np.int64), registry,
        now=200)
    prometheus = CollectorRegistry()
    service = DecoderService(registry, store, metrics=DecoderMetrics(registry=prometheus))
    store.mark_rebuild("t", 0, 10)
    assert store.apply(PartitionBatch("t", 0, None, 5, folded.increments, folded.stats())).applied
    assert service.run_once(now=200) == [] and service.last_withheld == ["m"]
    assert store.latest_estimate("m") is None
    assert prometheus.get_sample_value("ldpstream_estimates_withheld", {"metric": "m"}) == 1
    assert store.apply(PartitionBatch("t", 0, 5, 10)).applied  # the rebuild reaches its offset
    assert [p.metric for p in service.run_once(now=200)] == ["m"] and service.last_withheld == []
    assert store.latest_estimate("m")["n_reports"] == 2
    assert prometheus.get_sample_value("ldpstream_estimates_withheld", {"metric": "m"}) == 0


# ------------------------------------------------------------------------------------------ repeated reports


def test_a_window_of_buckets_that_repeat_identical_reports_carries_their_design_effect(prometheus):
    """Clients that report in every bucket with memoized (identical) reports: the window's intervals are
    those of one bucket's reports, and the JSON says so
    (docs/math/estimators.md#windows-of-several-buckets-repeated-reports)."""
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all", "1d"]},
        "metrics": {"lang": {"id": 1, "mechanism": "krr", "k": 32, "epsilon": 2.0}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = Feeder(registry, store)
    values = concentrated(2000, [0, 1, 2], 32, seed=5)
    for b in range(6):  # the same clients, the same reports, in six buckets
        feed.add("lang", values, NOW - 120 - b * BUCKET, seed=21)
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    results = {r.window: r for r in service.decode_metric(registry["lang"], now=NOW)}
    day = results["1d"].to_json()
    assert day["n_reports"] == 12_000 and day["design_effect"] == pytest.approx(6.0)
    assert day["repetition"]["rule"] == "estimated" and day["repetition"]["overlap"] == pytest.approx(1.0)
    assert "memoized permanent responses" in day["interval_assumes"]
    assert all(v["design_effect"] == pytest.approx(6.0) for v in day["values"])
    assert results["all"].to_json()["design_effect"] == pytest.approx(6.0)
    # Six copies of 2000 reports hold no more information than 2000: the intervals of one bucket's reports.
    metric = registry["lang"]
    snapshot = store.snapshot("lang", metric.fingerprint, (1, 32), None)
    one = PublishedEstimate("lang", "one", NOW, 0.0, 1, decode_sketch(metric, next(iter(snapshot.buckets.values()))),
                            metric.value_names()).to_json()
    assert one["design_effect"] is None and one["interval_assumes"] == "independent reports"
    for d, h in zip(day["values"], one["values"], strict=True):
        assert d["frequency"] == pytest.approx(h["frequency"])
        assert d["low_95"] == pytest.approx(h["low_95"]) and d["high_95"] == pytest.approx(h["high_95"])


def test_watch_shows_the_interval_method_design_effects_and_assumption(prometheus):
    """``ldpstream watch`` renders what the published JSON says about its intervals: the method, the largest
    design effect with the repetition rule, the assumption in words, and each value's design effect."""
    from ldpstream.decoder.watch import render

    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all", "1d"]},
        "metrics": {"lang": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 2.0, "labels": LABELS}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = Feeder(registry, store)
    values = concentrated(2000, [0, 1, 2], 8, seed=5)
    for b in range(6):
        feed.add("lang", values, NOW - 120 - b * BUCKET, seed=21)
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    day = {r.window: r for r in service.decode_metric(registry["lang"], now=NOW)}["1d"].to_json()
    screen = render(day, now=NOW).splitlines()
    assert screen[1] == (f"intervals: {day['interval_method']}, widened by design effects up to "
                         f"{day['design_effect']:.2f} (repetition rule estimated, overlap "
                         f"{day['repetition']['overlap']:.2f})")
    assert screen[2] == f"assumes: {day['interval_assumes']}"
    assert screen[3].split() == ["value", "estimate", "95%", "interval", "deff"]
    by_value = {v["value"]: v for v in day["values"]}
    for line in screen[4:]:
        name, freq, low, high, deff = line.replace("[", " ").replace("]", " ").replace(",", " ").split()[:5]
        entry = by_value[name]
        assert float(deff) == pytest.approx(entry["design_effect"], abs=0.005)
        assert float(freq) == pytest.approx(entry["frequency"], abs=5e-5)
        assert float(low) == pytest.approx(entry["low_95"], abs=5e-5)
        assert float(high) == pytest.approx(entry["high_95"], abs=5e-5)
    # an estimate published without design effects (an older decoder) renders without the column
    bare = {key: val for key, val in day.items() if key not in ("design_effect", "repetition", "interval_assumes")}
    bare["values"] = [{k: v for k, v in entry.items() if k != "design_effect"} for entry in day["values"]]
    plain = render(bare, now=NOW).splitlines()
    assert plain[1] == f"intervals: {day['interval_method']}" and "deff" not in plain[2]


def test_independent_buckets_keep_design_effects_near_one(prometheus):
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["1d"]},
        "metrics": {"lang": {"id": 1, "mechanism": "krr", "k": 32, "epsilon": 2.0}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = Feeder(registry, store)
    for b in range(6):  # new clients in every bucket
        feed.add("lang", concentrated(2000, [0, 1, 2], 32, seed=30 + b), NOW - 120 - b * BUCKET, seed=40 + b)
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    day = service.decode_metric(registry["lang"], now=NOW)[0].to_json()
    assert day["repetition"]["rule"] == "estimated"
    assert day["design_effect"] < 1 + 5 * 0.4


def test_the_all_window_applies_the_held_buckets_overlap_over_the_rollups_span(prometheus):
    """Buckets that expired are gone from the snapshot but counted in the all-time rollup: the overlap
    measured on the held buckets is applied over as many buckets as the rollup's reports fill."""

    class ExpiringStore(InMemorySketchStore):
        def snapshot(self, *args, **kwargs):  # keep the newest 6 buckets, the rollup counts all 12
            full = super().snapshot(*args, **kwargs)
            newest = sorted(full.buckets)[-6:]
            total = sum(full.buckets.values())
            return MetricSnapshot({b: full.buckets[b] for b in newest}, total)

    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all", "1h"]},
        "metrics": {"lang": {"id": 1, "mechanism": "krr", "k": 32, "epsilon": 2.0}}})
    store = ExpiringStore(clock=lambda: NOW)
    feed = Feeder(registry, store)
    values = concentrated(1000, [0, 1, 2], 32, seed=6)
    for b in range(12):  # two hours of the same clients' identical reports
        feed.add("lang", values, NOW - 120 - b * BUCKET, seed=22)
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    results = {r.window: r.to_json() for r in service.decode_metric(registry["lang"], now=NOW)}
    every, hour = results["all"], results["1h"]
    assert every["n_reports"] == 12_000 and every["buckets"] == 6
    assert every["repetition"]["span"] == pytest.approx(12.0)
    assert every["design_effect"] == pytest.approx(12.0)
    assert hour["design_effect"] == pytest.approx(hour["repetition"]["span"])
    for a, h in zip(every["values"], hour["values"], strict=True):  # both: one bucket's 1000 reports
        assert a["low_95"] == pytest.approx(h["low_95"]) and a["high_95"] == pytest.approx(h["high_95"])


# ------------------------------------------------------------------------------------------ reuse of the last decode


def count_decodes(monkeypatch) -> list[str]:
    """Patch the service's window decoder to record the metric of every decode it makes."""
    import ldpstream.decoder.service as service_module

    calls: list[str] = []
    real = service_module.decode_window

    def counted(metric, *args, **kwargs):
        calls.append(metric.name)
        return real(metric, *args, **kwargs)

    monkeypatch.setattr(service_module, "decode_window", counted)
    return calls


def test_an_unchanged_window_is_republished_without_decoding(service, registry, store, monkeypatch):
    calls = count_decodes(monkeypatch)
    first = {(p.metric, p.window): p for p in service.run_once(now=NOW)}
    assert len(calls) == 3 and not any(p.reused for p in first.values())
    second = {(p.metric, p.window): p for p in service.run_once(now=NOW + 5)}
    assert len(calls) == 3, "no window changed: nothing is decoded again"
    assert set(second) == set(first)
    for key, again in second.items():
        assert again.reused and again.snapshot_time == NOW + 5
        assert again.estimate is first[key].estimate and again.covers == first[key].covers
    latest = store.latest_estimate("lang", "all")
    assert latest is not None and latest["reused"] is True and latest["snapshot_time"] == NOW + 5
    assert latest["values"] == first[("lang", "all")].to_json()["values"]


def test_new_reports_are_decoded_and_unchanged_metrics_are_not(registry, store, prometheus, monkeypatch):
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    calls = count_decodes(monkeypatch)
    service.run_once(now=NOW)
    metric = registry["lang"]
    cohorts, reports = privatize_population(metric, concentrated(50, [5], 8, seed=4), np.random.default_rng(14))
    rows = encode_records(metric.id, metric.fingerprint, cohorts, payloads_from_reports(metric.mechanism, reports),
                          event_time=RECENT_TIME)
    folded = fold_messages([rows.tobytes()], np.zeros(1, dtype=np.int64), registry, now=NOW)
    assert store.apply(PartitionBatch("reports", 1, None, 1, folded.increments, expire_at=folded.expire_at)).applied
    calls.clear()
    again = {(p.metric, p.window): p for p in service.run_once(now=NOW + 5)}
    assert sorted(calls) == ["lang", "lang"]
    assert not again[("lang", "all")].reused and not again[("lang", "1h")].reused
    assert again[("flags", "all")].reused
    assert again[("lang", "all")].estimate.n_reports == OLD + RECENT + 50


def test_reuse_disabled_decodes_every_window_every_pass(registry, store, prometheus, monkeypatch):
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus), reuse=False)
    calls = count_decodes(monkeypatch)
    service.run_once(now=NOW)
    published = service.run_once(now=NOW + 5)
    assert len(calls) == 6 and not any(p.reused for p in published)


def test_a_reconfigured_metric_is_decoded_afresh(registry, store, prometheus, monkeypatch):
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    calls = count_decodes(monkeypatch)
    service.run_once(now=NOW)
    tables = make_registry()
    service.registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all", "1h"]},
        "metrics": {"lang": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 8.0, "labels": LABELS,
                             "estimator": "mle"},
                    "flags": {"id": 2, "mechanism": "krappor", "k": 4, "epsilon": 3.0}}})
    assert tables["lang"].estimator != service.registry["lang"].estimator
    calls.clear()
    published = {(p.metric, p.window): p for p in service.run_once(now=NOW + 5)}
    assert sorted(calls) == ["lang", "lang"]
    assert published[("lang", "all")].estimate.method.endswith("mle") and published[("flags", "all")].reused


CANDIDATES = [f"site-{i}" for i in range(48)]


@pytest.mark.parametrize("mechanism,estimator", [("orr", "mle"), ("orr", "nnls"), ("orappor", "mle"),
                                                 ("orappor", "nnls"), ("rappor", "nnls"), ("rappor", "mle")])
def test_the_iterative_decoders_start_from_the_windows_previous_estimate(mechanism, estimator, prometheus):
    params = {"orr": {"k": 16, "epsilon": 2.0, "cohorts": 8},
              "orappor": {"k": 32, "epsilon": 2.0, "cohorts": 8, "hashes": 1},
              "rappor": {"k": 32, "hashes": 2, "cohorts": 8, "p": 0.25, "q": 0.75, "f": 0.5}}[mechanism]
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all"]},
        "metrics": {"site": {"id": 3, "mechanism": mechanism, "candidates": CANDIDATES, "estimator": estimator,
                             **params}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = Feeder(registry, store)
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(len(CANDIDATES), 0.3))
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    feed.add("site", rng.choice(len(CANDIDATES), size=20_000, p=p), OLD_TIME, seed=21)
    first = service.run_once(now=NOW)[0]
    assert "warm_start" not in first.estimate.info
    feed.add("site", rng.choice(len(CANDIDATES), size=500, p=p), RECENT_TIME, seed=22)
    warm = service.run_once(now=NOW + 5)[0]
    assert warm.estimate.info["warm_start"] is True and not warm.reused
    # a decoder without the last decode, on the same caches: only the start differs
    cold = DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()),
                          design_cache=service.design_cache, factor_cache=service.factor_cache).run_once(now=NOW + 5)[0]
    assert "warm_start" not in cold.estimate.info
    # The same optimum (docs/math/estimators.md#warm-starts-of-the-iterative-decoders): within WARM_TOLERANCE
    # standard errors of the cold decode. The intervals are the least-squares ones, which no start changes;
    # O-RR's "mle" standard errors come from the information at the point, and the design effects of a window's
    # cohort mix from the point too, so they move with it (by less).
    se = cold.estimate.std_errors
    assert np.max(np.abs(warm.estimate.frequencies - cold.estimate.frequencies) / se) < WARM_TOLERANCE
    if estimator == "mle":
        # both end on the gap certificate (≤ 5e-7 nats: within 1e-3 model-based SE of the maximizer, each)
        assert warm.estimate.info["certified"] and cold.estimate.info["certified"]
        assert warm.estimate.info["em_iter"] == 0 and cold.estimate.info["em_iter"] > 0
        assert np.max(np.abs(warm.estimate.frequencies - cold.estimate.frequencies) / se) < 2e-3
    if estimator == "nnls":
        # from its previous estimate, the KKT system on that estimate's face, certified (no FISTA iteration)
        assert warm.estimate.info["nnls_solver"] == "face-kkt" and cold.estimate.info["nnls_solver"] == "fista"
    np.testing.assert_allclose(warm.estimate.std_errors, se, rtol=WARM_TOLERANCE)
    for bound in ("low", "high"):
        moved = np.abs(getattr(warm.estimate.interval, bound) - getattr(cold.estimate.interval, bound))
        assert np.max(moved / se) < WARM_TOLERANCE


def test_each_decoder_owns_its_caches_and_reuses_them_from_pass_to_pass(prometheus):
    """The design and factor caches are the service's own (the estimators hold none): its second pass reuses
    the design and the Gram factors its first made; another service (a worker process's, a restarted
    decoder's) starts with empty ones."""
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all"]},
        "metrics": {"site": {"id": 3, "mechanism": "orappor", "k": 32, "epsilon": 2.0, "cohorts": 8, "hashes": 1,
                             "candidates": CANDIDATES, "estimator": "project"}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = Feeder(registry, store)
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(len(CANDIDATES), 0.3))
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    feed.add("site", rng.choice(len(CANDIDATES), size=20_000, p=p), OLD_TIME, seed=21)
    first = service.run_once(now=NOW)[0]
    assert first.estimate.info["factor_cache"] == "miss"
    assert service.design_cache.misses >= 1 and service.factor_cache.misses == 1
    feed.add("site", rng.choice(len(CANDIDATES), size=500, p=p), RECENT_TIME, seed=22)
    second = service.run_once(now=NOW + 5)[0]
    assert second.estimate.info["factor_cache"] == "hit" and not second.reused
    assert service.design_cache.hits >= 1 and service.factor_cache.hits == 1
    other = DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()))
    assert other.design_cache is not service.design_cache and other.factor_cache is not service.factor_cache
    assert other.run_once(now=NOW + 5)[0].estimate.info["factor_cache"] == "miss"
    assert other.dictionaries.factor_cache is other.factor_cache


#: Largest disagreement, in standard errors, between a warm-started and a cold decode that both stop by the
#: decoders' rule (docs/math/estimators.md#warm-starts-of-the-iterative-decoders).
WARM_TOLERANCE = 0.01


def test_detect_publishes_its_rule_and_which_values_it_detected(prometheus):
    """A metric decoded by ``detect`` publishes how it decided (rule, level, the adaptive BH's procedure and
    estimated absent share, the point, screened and detected counts) and each value's ``detected``, which is
    the estimate's own test; the JSON is valid against marginal-estimate/1, and ``watch`` shows the rule and
    marks the values."""
    from ldpstream.decoder.watch import render
    from tests.published_schema import validator

    candidates = [f"site-{i}" for i in range(40)]
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all"]},
        "metrics": {"site": {"id": 7, "mechanism": "orappor", "k": 64, "hashes": 2, "epsilon": 4.0, "cohorts": 8,
                             "estimator": "detect", "candidates": candidates}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    Feeder(registry, store).add("site", concentrated(20_000, [0, 1, 2, 3], 10, seed=7), RECENT_TIME, seed=17)
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus))
    published = {r.window: r for r in service.decode_metric(registry["site"], now=NOW)}["all"]
    body = published.to_json()
    assert validator("marginal-estimate/1").is_valid(body)
    est = published.estimate
    detected = est.significant(est.info["alpha"], est.info["rule"])
    assert [v["detected"] for v in body["values"]] == detected.tolist()
    assert {"site-0", "site-1", "site-2", "site-3"} <= {v["value"] for v in body["values"] if v["detected"]}
    info = body["detection"]
    assert (info["rule"], info["alpha"], info["detected"]) == ("bh", 0.1, int(detected.sum()))
    assert info["point"] == est.info["point"] and info["screened"] == est.info["selected"]
    # 41 columns, 512 rows: the full design is well-determined, so the default two-stage BH ran, and the share
    # it published is 1 − r1/m of its first stage on the published tests
    assert info["adaptive"] == "two-stage" == est.info["adaptive"]
    assert info["null_fraction"] == est.null_share(0.1) < 1
    assert json.loads(published.body()) == body
    screen = render(body, now=NOW)
    assert f"detection: {info['detected']} detected (*) by bh at 0.1 (two-stage) / estimated absent share" in screen
    assert "site-0                 *" in screen
    # the other decoders publish neither
    other, plain_store = make_registry(), InMemorySketchStore(clock=lambda: NOW)
    Feeder(other, plain_store).add("lang", concentrated(2000, [0, 1], 8, seed=8), RECENT_TIME, seed=18)
    plain = DecoderService(other, plain_store, metrics=DecoderMetrics(CollectorRegistry())).decode_metric(
        other["lang"], now=NOW)
    assert plain and all("detection" not in r.to_json() and "detected" not in r.to_json()["values"][0]
                         for r in plain)


def test_worker_processes_need_a_store_each_can_open() -> None:
    """``workers`` > 1 decodes in other processes, which cannot share an in-memory store: a store factory is
    required (and at least one worker)."""
    registry = Registry.from_dict({"metrics": {
        f"m{i}": {"id": i + 1, "mechanism": "krr", "k": 4, "epsilon": 1.0} for i in range(5)}})
    store = InMemorySketchStore()
    with pytest.raises(ConfigError, match="store_factory"):
        DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()), workers=2)
    with pytest.raises(ConfigError, match="at least 1 worker"):
        DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()), workers=0)
    # A fixed share each, round robin over the registry's order.
    assert assign(registry, 2) == [["m0", "m2", "m4"], ["m1", "m3"]]


def test_an_outcome_a_worker_cannot_send_back_fails_its_metric_not_the_worker() -> None:
    from ldpstream.decoder.workers import MetricOutcome, _sendable

    sendable = MetricOutcome("a", empty=["1h"])
    assert _sendable(sendable) is sendable
    failed = _sendable(MetricOutcome("b", results=[lambda: None]))  # type: ignore[list-item]
    assert failed.metric == "b" and failed.results == [] and failed.error is not None
    assert "could not send the estimates back" in failed.error
