"""Associated reports on real Kafka and Redis: pairs produced by simulated clients, consumed by two consumers
with rebalances, or by consumers killed with SIGKILL mid-stream, are counted exactly once: the association's
tuple total equals Kafka's acknowledged count, both members' marginal sketches count the same n, and the pair
statistic read back is exactly the report pairs that were sent."""

from __future__ import annotations

import json
import signal
import threading
import time

import numpy as np
import pytest

from ldpstream.config import KafkaConfig
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.operations.status import collect_status, format_status
from ldpstream.producers.loadgen import simulate_association_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore
from tests.integration.helpers import registry_for, wait_for, write_registry
from tests.integration.test_exactly_once import _consumer_process

pytestmark = pytest.mark.integration

PARTITIONS = 4
#: k-RR × O-RR: the pair statistic is a hash of the cells seen.
SYMBOLS = {"lang": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 1.0, "retention": "2d"},
           "font": {"id": 2, "mechanism": "orr", "k": 8, "cohorts": 4, "support": 24, "epsilon": 1.0,
                    "retention": "2d"}}
#: k-RR × RAPPOR: the pair statistic is the packed report pairs.
BITS = {"lang": SYMBOLS["lang"],
        "page": {"id": 3, "mechanism": "rappor", "k": 32, "hashes": 2, "cohorts": 4, "p": 0.25, "q": 0.75,
                 "f": 0.5, "retention": "2d", "candidates": [f"page-{i}" for i in range(12)]}}


def associated(store: RedisSketchStore, topic: str, name: str) -> int:
    return store.stats(topic, range(PARTITIONS)).get(f"associated:{name}", 0)


def marginal_total(store: RedisSketchStore, registry: Registry, metric: str) -> int:
    mechanism = registry[metric].mechanism
    shape = (mechanism.cohorts, mechanism.sketch_width)
    snapshot = store.snapshot(metric, registry[metric].fingerprint, shape)
    return int(mechanism.reports_per_cohort(snapshot.all_time(shape)).sum())


def canonical(*parts: PairPatterns) -> PairPatterns:
    return PairPatterns.from_pairs(*(np.concatenate([getattr(p, c) for p in parts])
                                     for c in ("cohort_x", "reports_x", "cohort_y", "reports_y", "counts")))


def check_counts(store: RedisSketchStore, registry: Registry, topic: str, name: str, produced: int,
                 sent: list[PairPatterns]) -> None:
    association = registry.association(name)
    assert associated(store, topic, name) == produced
    for member in association.members:
        assert marginal_total(store, registry, member) == produced, member
    stored = store.pair_patterns(association, store.pair_buckets(association))
    assert stored.total == produced
    got, want = canonical(stored), canonical(*sent)
    for column in ("cohort_x", "reports_x", "cohort_y", "reports_y", "counts"):
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column), err_msg=column)


@pytest.mark.faults
def test_associated_pairs_with_two_consumers_and_rebalances_count_exactly_once(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=PARTITIONS)
    registry = registry_for(topic, SYMBOLS, {"lf": {"id": 7, "metrics": ["lang", "font"]}})
    association = registry.association("lf")
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    kafka = KafkaConfig(kafka_bootstrap, consumer_settings={"session.timeout.ms": "6000",
                                                            "heartbeat.interval.ms": "500"})
    settings = ConsumerSettings(kafka, group_id=f"g-{key_prefix}", batch_size=400)
    publisher = ReportPublisher(kafka_bootstrap, config={"sticky.partitioning.linger.ms": 0})
    first = simulate_association_and_publish(association, publisher, clients=20_000, dependence=0.6, seed=1,
                                             keep_sent=True)
    stop_a, stop_b = threading.Event(), threading.Event()
    consumer_a, consumer_b = SketchConsumer(registry, store, settings), SketchConsumer(registry, store, settings)
    thread_a = threading.Thread(target=consumer_a.run, args=(stop_a,), daemon=True)
    thread_b = threading.Thread(target=consumer_b.run, args=(stop_b,), daemon=True)
    second: dict[str, object] = {}

    def produce_while_rebalancing() -> None:
        second["result"] = simulate_association_and_publish(association, publisher, clients=40_000, dependence=0.6,
                                                            seed=2, rate=4_000, chunk=500, keep_sent=True)

    producer = threading.Thread(target=produce_while_rebalancing, daemon=True)
    thread_a.start()
    wait_for(lambda: associated(store, topic, "lf") > 2_000, 60, "consumer A to start applying")
    producer.start()
    thread_b.start()  # B joins mid-stream: a rebalance
    wait_for(lambda: consumer_b.reports_applied > 0, 60, "consumer B to apply reports")
    assert producer.is_alive(), "the stream ended before the rebalance"
    stop_a.set()  # A leaves mid-stream: a second rebalance
    thread_a.join(60)
    producer.join(60)
    result = second["result"]
    produced = first.records_acked + result.records_acked  # type: ignore[attr-defined]
    assert produced == 60_000
    wait_for(lambda: associated(store, topic, "lf") >= produced, 90, "every pair to be applied")
    time.sleep(2)  # anything counted twice would show up now
    stop_b.set()
    thread_b.join(30)
    assert consumer_a.reports_applied > 0 and consumer_b.reports_applied > 0
    check_counts(store, registry, topic, "lf", produced, [first.sent, result.sent])  # type: ignore[attr-defined]


@pytest.mark.faults
def test_associated_pairs_with_consumers_killed_mid_stream_count_exactly_once(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path):
    topic = fresh_topic(partitions=PARTITIONS)
    associations = {"lp": {"id": 8, "metrics": ["lang", "page"]}}
    registry = registry_for(topic, BITS, associations)
    path = write_registry(tmp_path / "metrics.toml", topic, BITS, associations)
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    sent = simulate_association_and_publish(registry.association("lp"), ReportPublisher(kafka_bootstrap),
                                            clients=120_000, dependence=0.8, seed=3, per_message=3, keep_sent=True)
    produced = sent.records_acked
    group = f"g-{key_prefix}"
    rng = np.random.default_rng(4)
    for _ in range(3):
        before = associated(store, topic, "lp")
        proc = _consumer_process(path, kafka_bootstrap, redis_url, key_prefix, group)
        try:
            wait_for(lambda b=before: associated(store, topic, "lp") > b, 60, "the consumer to apply", interval=0.005)
            time.sleep(float(rng.uniform(0.0, 0.05)))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        assert associated(store, topic, "lp") < produced, "killed too late to test anything"
    proc = _consumer_process(path, kafka_bootstrap, redis_url, key_prefix, group)
    try:
        wait_for(lambda: associated(store, topic, "lp") >= produced, 120, "every pair to be applied")
        time.sleep(2)
    finally:
        proc.terminate()
        proc.wait(30)
    assert sent.sent is not None
    check_counts(store, registry, topic, "lp", produced, [sent.sent])
    status = collect_status(registry, kafka_bootstrap, store)
    entry = status["associations"]["lp"]
    assert entry["members"] == ["lang", "page"] and entry["reports"] == produced
    assert entry["privacy"]["epsilon"] == pytest.approx(registry["lang"].mechanism.epsilon
                                                        + registry["page"].mechanism.epsilon)
    assert entry["longest_window_seconds"] == 2 * 86400 and len(entry["buckets"]) >= 1
    assert status["metrics"]["lang"]["reports"] == status["metrics"]["page"]["reports"] == produced
    assert "longest joint window 2d (the retention" in format_status(status)


def test_produce_an_association_consume_and_status_through_the_cli(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path, capsys):
    from ldpstream.cli import main

    topic = fresh_topic(partitions=2)
    associations = {"lf": {"id": 7, "metrics": ["lang", "font"], "windows": ["all", "1d"]}}
    path = str(write_registry(tmp_path / "metrics.toml", topic, SYMBOLS, associations))
    service = ["--kafka", kafka_bootstrap, "--registry", path]
    capsys.readouterr()
    assert main(["produce", "lf", *service, "--clients", "5000", "--seed", "5", "--dependence", "1", "--per-message",
                 "50", "--json"]) == 0
    produced = json.loads(capsys.readouterr().out)
    assert produced["records_acked"] == 5000 and produced["members"] == ["lang", "font"]
    table = np.array(produced["true_counts"])
    assert table.shape == (8, 24) and table.sum() == 5000
    assert (table[np.arange(8)[:, None] % 24 != np.arange(24)[None, :]] == 0).all()  # dependence 1: y = x
    redis_args = ["--redis", redis_url, "--prefix", key_prefix]
    assert main(["consume", *service, *redis_args, "--idle-exit", "3", "--metrics-port", "0"]) == 0
    capsys.readouterr()
    assert main(["status", *service, *redis_args]) == 0
    out = capsys.readouterr().out
    assert "lf" in out and "5,000 report tuples of lang + font" in out and "longest joint window 2d" in out
