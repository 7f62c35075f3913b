"""The decoder's joint path (:meth:`ldpstream.decoder.service.DecoderService.run_once` over associations)
against the in-memory store: no Redis, no Kafka. Candidates taken from the members' marginals of the same
window, the joint JSON (labels with "Other", intervals, conditionals, the test) with a bounded history, the
estimates-topic messages, warm starts, retraction of a window that became empty, top-N cell gauges, the
terminal view, and a failing association that stops neither the marginals nor the other associations."""

from __future__ import annotations

import json

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from ldpstream.decoder import service as service_module
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.published import OTHER
from ldpstream.decoder.service import DecoderService
from ldpstream.decoder.watch import render_joint, watch
from ldpstream.registry import Registry
from ldpstream.store import InMemorySketchStore
from tests.unit.decoder.joint_feed import JointFeeder, associated_values

LANGS = ["en", "es", "zh", "hi", "ar", "pt"]
OSES = ["android", "ios", "web", "tv"]
BUCKET = 600
NOW = 1_750_000_200 // BUCKET * BUCKET
OLD_TIME = NOW - 3 * 3600 + 100   # three hours before NOW
RECENT_TIME = NOW - 120           # two minutes before NOW
OLD, RECENT = 6000, 4000
CANDIDATES = 2
TOP_N = 3


def make_registry(drop: str | None = None, candidates: int = CANDIDATES) -> Registry:
    """The test registry, without the association ``drop`` when one is named. Its members are direct (k-RR,
    k-RAPPOR): with ``CANDIDATES`` their Others hold several known values and the table is the closed-form
    inversion of the full alphabets (no EM); with ``candidates`` ≥ 5 each Other holds one value and the EM runs."""
    spec = {
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all", "1h"], "retention": "1d"},
        "metrics": {
            "lang": {"id": 1, "mechanism": "krr", "k": 6, "epsilon": 4.0, "labels": LANGS},
            "os": {"id": 2, "mechanism": "krr", "k": 4, "epsilon": 4.0, "labels": OSES},
            "flags": {"id": 3, "mechanism": "krappor", "k": 4, "epsilon": 4.0},
        },
        "associations": {
            "lang_os": {"id": 1, "metrics": ["lang", "os"], "candidates": candidates, "windows": ["all", "1h"]},
            "lang_flags": {"id": 2, "metrics": ["lang", "flags"], "candidates": candidates, "windows": ["all"]},
        }}
    spec["associations"].pop(drop or "", None)
    return Registry.from_dict(spec)


class FakeProducer:
    """Collects what the decoder produces to the estimates topic."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str, dict]] = []

    def produce(self, topic, value, key=None, **_):
        self.messages.append((topic, key.decode(), json.loads(value)))

    def poll(self, _timeout=0):
        return 0

    def flush(self, _timeout=None):
        return 0


@pytest.fixture
def registry() -> Registry:
    return make_registry()


#: The clients' true values: old ones favour en and es (with android and ios), recent ones hi and ar.
OLD_VALUES = associated_values(OLD, 6, 4, on=[0, 1], seed=1)
RECENT_VALUES = associated_values(RECENT, 6, 4, on=[3, 4], seed=2)
FLAG_VALUES = associated_values(2000, 6, 4, on=[2, 5], seed=3)


@pytest.fixture
def store(registry) -> InMemorySketchStore:
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = JointFeeder(registry, store, now=NOW)
    feed.add("lang_os", *OLD_VALUES, OLD_TIME, seed=11)
    feed.add("lang_os", *RECENT_VALUES, RECENT_TIME, seed=12)
    feed.add("lang_flags", *FLAG_VALUES, OLD_TIME, seed=13)
    return store


@pytest.fixture
def prometheus() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def producer() -> FakeProducer:
    return FakeProducer()


@pytest.fixture
def service(registry, store, prometheus, producer) -> DecoderService:
    return DecoderService(registry, store, producer=producer, metrics=DecoderMetrics(prometheus), history=2,
                          top_n=TOP_N)


def top_labels(marginal: dict, n: int) -> list[str]:
    ordered = sorted(marginal["values"], key=lambda v: -v["frequency"])
    return [v["value"] for v in ordered[:n]]


def shown_cells(prometheus: CollectorRegistry, association: str, window: str) -> set[tuple[str, str]]:
    return {(s.labels["x"], s.labels["y"]) for family in prometheus.collect()
            if family.name == "ldpstream_joint_cell_ratio" for s in family.samples
            if s.labels["association"] == association and s.labels["window"] == window}


# ------------------------------------------------------------------------------------------ what is published


def test_each_window_of_each_association_is_published_with_its_candidates_and_other(service, store):
    service.run_once(now=NOW)
    for window, n in (("all", OLD + RECENT), ("1h", RECENT)):
        joint = store.latest_joint("lang_os", window)
        assert joint is not None
        assert joint["association"] == "lang_os" and (joint["x"], joint["y"]) == ("lang", "os")
        assert joint["window"] == window and joint["snapshot_time"] == NOW
        assert joint["n_reports"] == n
        # The candidates are the top values of each member's marginal of the same window, then "Other".
        assert joint["rows"] == [*top_labels(store.latest_estimate("lang", window), CANDIDATES), OTHER]
        assert joint["columns"] == [*top_labels(store.latest_estimate("os", window), CANDIDATES), OTHER]
        table, low, high = (np.array(joint[k]) for k in ("table", "low_95", "high_95"))
        assert table.shape == (CANDIDATES + 1, CANDIDATES + 1)
        assert table.sum() == pytest.approx(1.0, abs=1e-6)
        assert np.all(low <= table + 1e-12) and np.all(table <= high + 1e-12)
        assert np.all(low >= 0) and np.all(high <= 1)
        assert np.array(joint["std_error"]).shape == table.shape
        assert isinstance(joint["interval_method"], str) and joint["interval_method"]
        assert joint["design_effect"] >= 1 and set(joint["repetition"]) == {"lang", "os"}
        # Two k-RR members whose Other holds 4 and 2 known values: the inversion of the full alphabets identifies
        # every cell (docs/math/joint.md#direct-members-the-full-alphabet).
        assert joint["identified"] == [[True] * (CANDIDATES + 1)] * (CANDIDATES + 1)
        assert joint["identification"] == [] and joint["interval_method"] == "wald-clipped-inversion"
        if window == "1h":
            assert joint["interval_assumes"] == "one report pair per client (a single bucket)"
            assert joint["design_effect"] == 1.0
        for name in ("x_given_y", "y_given_x"):
            conditional = joint[name]
            assert set(conditional) == {"table", "std_error", "low_95", "high_95"}
            assert np.array(conditional["table"]).shape == table.shape
        np.testing.assert_allclose(np.array(joint["x_given_y"]["table"]).sum(axis=0), 1.0, atol=1e-6)
        np.testing.assert_allclose(np.array(joint["y_given_x"]["table"]).sum(axis=1), 1.0, atol=1e-6)
        test = joint["independence"]
        assert test["df"] == CANDIDATES * CANDIDATES and test["statistic"] >= 0 and 0 <= test["p_value"] <= 1
        assert test["p_value"] < 1e-6  # the simulated pair is strongly associated
        em = joint["em"]
        assert em["iterations"] == 0 and em["converged"] and em["stopping_rule"] and em["patterns"] >= 1
        assert 0 <= em["seconds"] <= em["estimate_seconds"] <= joint["decode_seconds"]
    assert store.latest_joint("lang_os", "1h")["rows"][:CANDIDATES] == ["hi", "ar"]
    # lang_flags declares only "all"; flags' values are named by their numbers.
    assert store.latest_joint("lang_flags", "1h") is None
    assert store.latest_joint("lang_flags", "all")["n_reports"] == 2000


def test_the_joint_estimate_is_close_to_the_simulated_truth(service, store, registry):
    """Every cell of the published table within a Bonferroni-adjusted 4-sigma band of the truth (the table's
    own standard errors), over the cells of both windows."""
    service.run_once(now=NOW)
    truth = {"all": tuple(np.concatenate(v) for v in zip(OLD_VALUES, RECENT_VALUES, strict=True)),
             "1h": RECENT_VALUES}
    for window in ("all", "1h"):
        joint = store.latest_joint("lang_os", window)
        x, y = truth[window]
        expected = true_table(x, y, joint, registry)
        table, se = np.array(joint["table"]), np.array(joint["std_error"])
        assert np.all(np.abs(table - expected) <= 4.0 * se + 1e-9), (window, table - expected, se)


def true_table(x: np.ndarray, y: np.ndarray, joint: dict, registry: Registry) -> np.ndarray:
    """The true shares of (row, column) among the clients, with every value outside the candidates "Other"."""
    names_x, names_y = registry[joint["x"]].value_names(), registry[joint["y"]].value_names()
    rows = [names_x.index(r) for r in joint["rows"][:-1]]
    columns = [names_y.index(c) for c in joint["columns"][:-1]]
    row_of = np.full(len(names_x), len(rows))
    row_of[rows] = np.arange(len(rows))
    column_of = np.full(len(names_y), len(columns))
    column_of[columns] = np.arange(len(columns))
    counts = np.zeros((len(rows) + 1, len(columns) + 1))
    np.add.at(counts, (row_of[x], column_of[y]), 1)
    return counts / len(x)


def test_joint_estimates_keep_a_bounded_history_and_go_to_the_estimates_topic(service, store, producer):
    for i in range(3):
        service.run_once(now=NOW + i)
    assert [e["snapshot_time"] for e in store.joint_history("lang_os", "all")] == [NOW + 2, NOW + 1]
    keys = [key for _, key, _ in producer.messages]
    assert keys.count("joint:lang_os:all") == 3 and keys.count("joint:lang_os:1h") == 3
    assert keys.count("joint:lang_flags:all") == 3 and keys.count("lang:all") == 3  # marginals as before
    last = [body for _, key, body in producer.messages if key == "joint:lang_os:all"][-1]
    assert last == store.latest_joint("lang_os", "all")


def em_service(prometheus: CollectorRegistry | None = None) -> tuple[DecoderService, InMemorySketchStore, Registry]:
    """A decoder whose joint tables run the EM (every Other holds one value), over the same clients."""
    registry = make_registry(candidates=5)
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = JointFeeder(registry, store, now=NOW)
    feed.add("lang_os", *OLD_VALUES, OLD_TIME, seed=11)
    feed.add("lang_os", *RECENT_VALUES, RECENT_TIME, seed=12)
    feed.add("lang_flags", *FLAG_VALUES, OLD_TIME, seed=13)
    return (DecoderService(registry, store, metrics=DecoderMetrics(prometheus or CollectorRegistry())), store,
            registry)


def test_the_em_starts_warm_from_the_previous_table_while_the_candidates_stay():
    service, store, _ = em_service()
    service.run_once(now=NOW)
    first = store.latest_joint("lang_os", "all")
    assert first["em"]["warm_start"] is False and first["interval_method"] != "wald-clipped-inversion"
    service.run_once(now=NOW + 1)
    second = store.latest_joint("lang_os", "all")
    assert second["em"]["warm_start"] is True
    assert second["em"]["iterations"] <= first["em"]["iterations"]
    np.testing.assert_allclose(second["table"], first["table"], atol=1e-4)


def test_two_direct_members_with_several_hidden_values_are_decoded_in_closed_form(service, store):
    """No EM, so nothing starts warm; the same pairs give the same table; every cell is identified."""
    service.run_once(now=NOW)
    service.run_once(now=NOW + 1)
    second = store.latest_joint("lang_os", "all")
    assert second["interval_method"] == "wald-clipped-inversion"
    assert second["em"]["warm_start"] is False and second["em"]["iterations"] == 0
    assert np.all(second["identified"]) and second["identification"] == []
    assert second["independence"]["method"] == "wald-interaction-contrasts"


def test_an_association_dropped_from_the_registry_leaves_no_warm_start_behind(service):
    service.run_once(now=NOW)
    assert {key[0] for key in service._joint_start} == {"lang_os", "lang_flags"}
    service.registry = make_registry(drop="lang_flags")
    service.run_once(now=NOW + 1)
    assert {key[0] for key in service._joint_start} == {"lang_os"}


def test_the_em_starts_cold_when_the_candidates_change():
    service, store, _ = em_service()
    service.run_once(now=OLD_TIME + 300)  # the last hour then: en and es lead
    assert store.latest_joint("lang_os", "1h")["rows"][:2] == ["en", "es"]
    service.run_once(now=NOW)  # the last hour now: hi and ar
    now = store.latest_joint("lang_os", "1h")
    assert now["rows"][:2] == ["hi", "ar"] and now["em"]["warm_start"] is False


def test_a_restarted_decoder_starts_warm_from_the_published_table():
    service, store, registry = em_service()
    service.run_once(now=NOW)
    restarted = DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()))
    restarted.run_once(now=NOW + 1)
    assert store.latest_joint("lang_os", "all")["em"]["warm_start"] is True


def test_a_window_that_became_empty_is_retracted_with_its_gauges(service, store, prometheus, producer):
    service.run_once(now=NOW)
    assert store.latest_joint("lang_os", "1h") is not None and shown_cells(prometheus, "lang_os", "1h")
    later = NOW + 5 * 3600  # no report pair in the last hour any more
    service.run_once(now=later)
    assert store.latest_joint("lang_os", "1h") is None
    assert len(store.joint_history("lang_os", "1h")) == 1
    assert shown_cells(prometheus, "lang_os", "1h") == set()
    labels = {"association": "lang_os", "window": "1h"}
    assert prometheus.get_sample_value("ldpstream_joint_independence_p_value", labels) is None
    assert any(key == "joint:lang_os:1h" and body.get("retracted") for _, key, body in producer.messages)
    assert store.latest_joint("lang_os", "all")["n_reports"] == OLD + RECENT


# ------------------------------------------------------------------------------------------ Prometheus


def test_gauges_show_the_top_cells_the_test_and_the_em(service, store, prometheus):
    service.run_once(now=NOW)
    joint = store.latest_joint("lang_os", "all")
    table = np.array(joint["table"])
    order = np.argsort(-table, axis=None, kind="stable")[:TOP_N]
    rows, columns = np.unravel_index(order, table.shape)
    expected = {(joint["rows"][i], joint["columns"][j]) for i, j in zip(rows, columns, strict=True)}
    assert shown_cells(prometheus, "lang_os", "all") == expected
    for x, y in expected:
        i, j = joint["rows"].index(x), joint["columns"].index(y)
        labels = {"association": "lang_os", "window": "all", "x": x, "y": y}
        assert prometheus.get_sample_value("ldpstream_joint_cell_ratio", labels) == pytest.approx(table[i, j])
        assert prometheus.get_sample_value("ldpstream_joint_cell_low_95_ratio", labels) == pytest.approx(
            joint["low_95"][i][j])
        assert prometheus.get_sample_value("ldpstream_joint_cell_high_95_ratio", labels) == pytest.approx(
            joint["high_95"][i][j])
    labels = {"association": "lang_os", "window": "all"}
    get = prometheus.get_sample_value
    assert get("ldpstream_joint_independence_statistic", labels) == pytest.approx(joint["independence"]["statistic"])
    assert get("ldpstream_joint_independence_p_value", labels) == pytest.approx(joint["independence"]["p_value"])
    assert get("ldpstream_joint_em_iterations", labels) == joint["em"]["iterations"]
    assert get("ldpstream_joint_em_seconds", labels) == pytest.approx(joint["em"]["seconds"])
    assert get("ldpstream_joint_reports", labels) == OLD + RECENT
    assert get("ldpstream_joint_decode_seconds_count", {"association": "lang_os"}) == 2  # two windows


# ------------------------------------------------------------------------------------------ failures


def test_a_failing_association_stops_neither_the_marginals_nor_the_other_associations(
        service, store, prometheus, monkeypatch, caplog):
    real = service_module.estimate_joint

    def failing(patterns, x, y, **kwargs):
        if set(y.names()) <= set(OSES):  # only lang_os (its Y is os)
            raise FloatingPointError("EM diverged")
        return real(patterns, x, y, **kwargs)

    monkeypatch.setattr(service_module, "estimate_joint", failing)
    published = service.run_once(now=NOW)
    assert {(p.metric, p.window) for p in published} >= {("lang", "all"), ("os", "all"), ("flags", "all")}
    assert store.latest_joint("lang_os", "all") is None
    assert store.latest_joint("lang_flags", "all") is not None
    assert service.last_failed == ["lang_os"] and store.last_decode()["failed"] == ["lang_os"]
    assert prometheus.get_sample_value("ldpstream_joint_decode_failures_total", {"association": "lang_os"}) == 1
    # Declared at 0 from the start, never incremented.
    assert prometheus.get_sample_value("ldpstream_decode_failures_total", {"metric": "lang"}) == 0
    assert "decoding association lang_os failed" in caplog.text


def test_an_association_whose_member_failed_is_skipped_and_keeps_its_last_estimate(
        registry, prometheus, monkeypatch, caplog):
    store = InMemorySketchStore(clock=lambda: NOW)
    JointFeeder(registry, store, now=NOW).add("lang_os", *OLD_VALUES, OLD_TIME, seed=11)
    service = DecoderService(registry, store, metrics=DecoderMetrics(prometheus), top_n=TOP_N)
    service.run_once(now=NOW)
    before = store.latest_joint("lang_os", "all")
    assert before is not None

    real = store.snapshot

    def snapshot(metric, *args, **kwargs):
        if metric == "os":
            raise RuntimeError("snapshot of os failed")
        return real(metric, *args, **kwargs)

    monkeypatch.setattr(store, "snapshot", snapshot)
    service.run_once(now=NOW + 1)
    assert service.last_failed == ["os"]  # the member, not the association, failed
    assert store.latest_joint("lang_os", "all") == before
    assert store.latest_estimate("lang", "all")["snapshot_time"] == NOW + 1
    assert "association lang_os: not decoded this pass" in caplog.text


# ------------------------------------------------------------------------------------------ the terminal view


def test_watch_shows_the_table_with_intervals_and_the_test(service, store, capsys):
    service.run_once(now=NOW)
    joint = store.latest_joint("lang_os", "all")
    text = render_joint(joint, now=NOW + 2)
    assert "association lang_os (lang × os)" in text and "report pairs 10,000" in text
    for label in joint["rows"] + joint["columns"]:
        assert label in text
    assert f"{joint['table'][0][0]:6.4f}" in text
    assert f"df {joint['independence']['df']}" in text and "p-value" in text
    assert joint["interval_method"] in text
    # `ldpstream watch NAME` shows the association's table when no metric of that name has an estimate.
    watch(store, "lang_os", "all", iterations=1)
    shown = capsys.readouterr().out
    assert "association lang_os" in shown and "independence" in shown


# ------------------------------------------------------------------------------------------ windows


def test_pairs_read_before_their_marginals_wait_for_the_next_pass(service, registry):
    """The marginals are read before the pairs: the first reports of a window may show in the pairs only.
    Such a window is neither published nor retracted this pass, and it is no failure."""
    results, empty = service.decode_association(registry.associations["lang_os"], NOW, marginals={})
    assert results == [] and empty == []


def test_an_association_window_that_is_no_window_of_its_members_decodes_their_marginals_itself(prometheus):
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all"], "retention": "1d"},
        "metrics": {
            "lang": {"id": 1, "mechanism": "krr", "k": 6, "epsilon": 4.0, "labels": LANGS},
            "os": {"id": 2, "mechanism": "krr", "k": 4, "epsilon": 4.0, "labels": OSES},
        },
        "associations": {"lang_os": {"id": 1, "metrics": ["lang", "os"], "candidates": CANDIDATES,
                                     "windows": ["1h"]}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = JointFeeder(registry, store, now=NOW)
    feed.add("lang_os", *OLD_VALUES, OLD_TIME, seed=11)
    feed.add("lang_os", *RECENT_VALUES, RECENT_TIME, seed=12)
    DecoderService(registry, store, metrics=DecoderMetrics(prometheus)).run_once(now=NOW)
    assert store.latest_estimate("lang", "1h") is None  # not one of lang's windows: not published
    joint = store.latest_joint("lang_os", "1h")
    assert joint["n_reports"] == RECENT
    assert joint["rows"] == ["hi", "ar", OTHER]  # the top of lang over the last hour, not over all time


# ------------------------------------------------------------------------------------------ repeated pairs


def test_a_window_of_buckets_that_repeat_identical_pairs_has_the_intervals_of_one_bucket(prometheus):
    """The same clients send the same (memoized) report pairs in four buckets: the window's table, intervals,
    conditionals and test are those of one bucket's pairs (design effect 4 = the span, overlap 1), not those
    of four times as many clients (docs/math/estimators.md#windows-of-several-buckets-repeated-reports)."""
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all", "1d"], "retention": "2d"},
        "metrics": {
            "lang": {"id": 1, "mechanism": "krr", "k": 16, "epsilon": 3.0},
            "os": {"id": 2, "mechanism": "krr", "k": 8, "epsilon": 3.0},
        },
        "associations": {"lang_os": {"id": 1, "metrics": ["lang", "os"], "candidates": 3, "windows": ["1d"]}}})
    x, y = associated_values(3000, 16, 8, on=[0, 1, 2], seed=7)

    def decoded(buckets: int) -> dict:
        store = InMemorySketchStore(clock=lambda: NOW)
        feed = JointFeeder(registry, store, now=NOW)
        for b in range(buckets):
            feed.add("lang_os", x, y, NOW - 120 - b * BUCKET, seed=31)  # the same reports in every bucket
        DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry())).run_once(now=NOW)
        return store.latest_joint("lang_os", "1d")

    one, four = decoded(1), decoded(4)
    assert four["n_reports"] == 4 * one["n_reports"] and four["buckets"] == 4
    assert one["design_effect"] == 1.0 and four["design_effect"] == pytest.approx(4.0)
    assert four["repetition"]["lang"]["overlap"] == pytest.approx(1.0)
    assert "repeated report pairs" in four["interval_assumes"]
    assert four["rows"] == one["rows"] and four["columns"] == one["columns"]
    for key in ("table", "std_error", "low_95", "high_95"):
        np.testing.assert_allclose(four[key], one[key], atol=2e-6, err_msg=key)
    for key in ("x_given_y", "y_given_x"):
        for part in ("table", "std_error", "low_95", "high_95"):
            np.testing.assert_allclose(four[key][part], one[key][part], atol=2e-5, err_msg=f"{key} {part}")
    for part in ("statistic", "wald_statistic", "p_value", "wald_p_value"):
        assert four["independence"][part] == pytest.approx(one["independence"][part], rel=1e-4)


def test_independent_buckets_keep_the_joint_design_effect_near_one():
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["1d"], "retention": "2d"},
        "metrics": {
            "lang": {"id": 1, "mechanism": "krr", "k": 16, "epsilon": 3.0},
            "os": {"id": 2, "mechanism": "krr", "k": 8, "epsilon": 3.0},
        },
        "associations": {"lang_os": {"id": 1, "metrics": ["lang", "os"], "candidates": 3, "windows": ["1d"]}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = JointFeeder(registry, store, now=NOW)
    for b in range(6):  # new clients in every bucket
        feed.add("lang_os", *associated_values(2000, 16, 8, on=[0, 1, 2], seed=40 + b), NOW - 120 - b * BUCKET,
                 seed=50 + b)
    DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry())).run_once(now=NOW)
    joint = store.latest_joint("lang_os", "1d")
    assert joint["repetition"]["lang"]["rule"] == "estimated"
    # Without repetition φ̂ is 0 ± sd(φ̂) clamped at 0; for lang (16 cells, 5 degrees of freedom each, ρ = 1)
    # sd(φ̂) = √160 / 80 ≈ 0.16 (os: √80 / 40 ≈ 0.22), so φ̂ < 0.4 is a bound at about 2.5 and 1.8 sd.
    assert joint["design_effect"] < 1 + 5 * 0.4, joint["repetition"]


def test_a_closed_alphabet_keeps_one_value_out_of_its_candidates_so_other_is_identified(prometheus):
    """os has 4 values and the association asks for 5 candidates: 3 are taken, "Other" holds the fourth. An
    "Other" with no value behind it cannot be told apart by the reports (a singular information: intervals
    of zero width or [0, 1])."""
    registry = Registry.from_dict({
        "defaults": {"topic": "reports", "bucket_seconds": BUCKET, "windows": ["all"], "retention": "2d"},
        "metrics": {
            "lang": {"id": 1, "mechanism": "krr", "k": 6, "epsilon": 3.0, "labels": LANGS},
            "os": {"id": 2, "mechanism": "krr", "k": 4, "epsilon": 3.0, "labels": OSES},
        },
        "associations": {"lang_os": {"id": 1, "metrics": ["lang", "os"], "candidates": 5, "windows": ["all"]}}})
    store = InMemorySketchStore(clock=lambda: NOW)
    JointFeeder(registry, store, now=NOW).add("lang_os", *OLD_VALUES, NOW - 100, seed=3)
    DecoderService(registry, store, metrics=DecoderMetrics(prometheus)).run_once(now=NOW)
    joint = store.latest_joint("lang_os", "all")
    assert len(joint["rows"]) == 6 and len(joint["columns"]) == 4  # 5 of 6 and 3 of 4, plus "Other"
    se, low, high = (np.array(joint[k]) for k in ("std_error", "low_95", "high_95"))
    assert np.all(se > 0) and np.all(high > low)
