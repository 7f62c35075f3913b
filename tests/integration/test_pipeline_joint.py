"""Joint estimates end to end on real Kafka and Redis: 200,000 simulated clients report an associated pair
(one version-2 record each), consumers fold the pairs and the marginals in one atomic write, the decoder
publishes the joint table live.

The joint totals must equal the records Kafka acknowledged (and the marginals' totals), and every cell of the
published table must lie within its standard errors of the truth (the clients' empirical joint distribution
over the published candidates and "Other"): |p̂_ij − p_ij| ≤ z·se_ij with z the two-sided Bonferroni quantile
at family-wise level 0.001 over the table's cells. The estimate is published to Redis, the estimates topic
and Prometheus, and `ldpstream watch` renders it.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry
from scipy import stats

from ldpstream.config import KafkaConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.published import OTHER
from ldpstream.decoder.service import DecoderService
from ldpstream.decoder.watch import render_joint
from ldpstream.producers.loadgen import simulate_association_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore
from ldpstream.store import keys as key_schema
from ldpstream.store.contract import PairKey
from tests.integration.helpers import read_estimates

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENTS = 200_000
CANDIDATES = 5
LANGS = ["en", "es", "zh", "hi", "ar", "pt", "bn", "ru", "ja", "de", "fr", "ko", "it", "tr", "vi", "pl"]
OSES = ["android", "ios", "web", "tv", "car", "watch", "console", "other"]
PAGES = [f"https://example.org/page/{i}" for i in range(24)]
#: Family-wise level of the cell-by-cell check (two-sided, Bonferroni over the cells).
ALPHA = 0.001
#: Pairs of members: symbols × symbols (the store keeps sparse cells) and Bloom bits decoded against a
#: candidate list × one-hot bits (the store keeps packed report rows). The second has as many distinct report
#: pairs as clients, and its EM runs over all of them: it decodes one window, once.
PAIRS = {
    "krr_krr": {
        "x": {"id": 21, "mechanism": "krr", "k": 16, "epsilon": 3.0, "labels": LANGS, "estimator": "project"},
        "y": {"id": 22, "mechanism": "krr", "k": 8, "epsilon": 3.0, "labels": OSES, "estimator": "project"},
    },
    "rappor_krappor": {
        "x": {"id": 23, "mechanism": "rappor", "k": 64, "hashes": 2, "cohorts": 16, "p": 0.25, "q": 0.75,
              "f": 0.25, "estimator": "ls", "candidates": PAGES},
        "y": {"id": 24, "mechanism": "krappor", "k": 8, "epsilon": 3.0, "labels": OSES, "estimator": "project"},
    },
}


def joint_registry(topic: str, pair: str) -> Registry:
    windows = ["all", "1h"] if pair == "krr_krr" else ["all"]
    return Registry.from_dict({
        "defaults": {"topic": topic, "bucket_seconds": 3600, "windows": ["all"], "retention": "2d"},
        "metrics": PAIRS[pair],
        "associations": {
            "pair": {"id": 1, "metrics": ["x", "y"], "candidates": CANDIDATES, "windows": windows},
        }})


def true_table(counts: np.ndarray, names_x: tuple[str, ...], names_y: tuple[str, ...], rows: list[str],
               columns: list[str]) -> np.ndarray:
    """The clients' shares of (row, column) from their true joint counts (an array over the members' value
    names), every value outside the published candidates counted as "Other"."""
    assert rows[-1] == OTHER and columns[-1] == OTHER
    row_of = np.full(len(names_x), len(rows) - 1)
    row_of[[names_x.index(r) for r in rows[:-1]]] = np.arange(len(rows) - 1)
    column_of = np.full(len(names_y), len(columns) - 1)
    column_of[[names_y.index(c) for c in columns[:-1]]] = np.arange(len(columns) - 1)
    table = np.zeros((len(rows), len(columns)))
    np.add.at(table, (row_of[:, None], column_of[None, :]), counts)
    return table / counts.sum()


@pytest.mark.parametrize("pair", [pytest.param(name, marks=pytest.mark.pipelines) if name != "krr_krr" else name
                                  for name in PAIRS])
def test_an_associated_pair_is_decoded_live_and_its_table_is_within_its_errors_of_the_truth(
        pair, kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=4)
    estimates_topic = fresh_topic(partitions=1, stem="estimates")
    registry = joint_registry(topic, pair)
    association = registry.associations["pair"]
    names_x, names_y = registry["x"].value_names(), registry["y"].value_names()

    # x Zipf-distributed; y the rank of x (mod its size) for half the clients, geometric for the others.
    produced = simulate_association_and_publish(association, ReportPublisher(kafka_bootstrap), clients=CLIENTS,
                                                distribution=["zipf:1.1", "geometric"], dependence=0.5, seed=7,
                                                per_message=50)
    assert produced.records_acked == CLIENTS

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    prometheus = CollectorRegistry()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True})
    service = DecoderService(registry, store, producer=producer, estimates_topic=estimates_topic,
                             metrics=DecoderMetrics(registry=prometheus))
    consumer = SketchConsumer(registry, store,
                              ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}"),
                              metrics=ConsumerMetrics(registry=CollectorRegistry()))
    # Live: the decoder passes every 0.2 s while the consumer folds (the k-RR pair; the RAPPOR pair's decode
    # takes seconds, it is decoded once at the end).
    stop = threading.Event()
    live = threading.Thread(target=service.run, args=(0.2, stop)) if pair == "krr_krr" else None
    if live is not None:
        live.start()
    try:
        consumer.run(idle_exit=4.0)
    finally:
        stop.set()
        if live is not None:
            live.join(timeout=120)
    assert consumer.reports_applied == 2 * CLIENTS  # one report of each member per record
    assert store.pair_patterns(association, store.pair_buckets(association)).total == CLIENTS
    failures = "ldpstream_joint_decode_failures_total"
    assert prometheus.get_sample_value(failures, {"association": "pair"}) in (None, 0.0)
    service.run_once()
    assert service.last_failed == []
    history = [e["n_reports"] for e in store.joint_history("pair", "all")]
    assert history == sorted(history, reverse=True)  # newest first: the counts only grew

    # Totals: the joint table, both marginals and Kafka's acknowledgements agree.
    joint = store.latest_joint("pair", "all")
    assert joint is not None
    assert joint["n_reports"] == CLIENTS
    assert store.latest_estimate("x", "all")["n_reports"] == CLIENTS
    assert store.latest_estimate("y", "all")["n_reports"] == CLIENTS
    if pair == "krr_krr":
        assert store.latest_joint("pair", "1h")["n_reports"] == CLIENTS  # the reports are from now

    # The candidates: the top values of each marginal, plus "Other".
    assert len(joint["rows"]) == len(joint["columns"]) == CANDIDATES + 1
    table, se = np.array(joint["table"]), np.array(joint["std_error"])
    low, high = np.array(joint["low_95"]), np.array(joint["high_95"])
    truth = true_table(produced.true_counts, names_x, names_y, joint["rows"], joint["columns"])
    z = stats.norm.isf(ALPHA / (2 * table.size))
    deviation = np.abs(table - truth)
    assert np.all(deviation <= z * se), np.round(deviation / se, 2)
    assert np.all((low <= table + 1e-12) & (table <= high + 1e-12))
    inside = (low <= truth) & (truth <= high)
    # Each interval covers with probability 0.95: over 36 cells, fewer than 28 inside has probability 5e-5 if
    # they were independent (binomial(36, 0.95)); correlated cells widen that spread, hence the margin.
    assert inside.sum() >= 28, inside
    assert np.abs(table - truth).max() < 0.02
    # The pair is associated: the test says so.
    assert joint["independence"]["df"] == CANDIDATES * CANDIDATES
    assert joint["independence"]["p_value"] < 1e-6

    # The estimates topic got the same JSON, under the association's key.
    messages = read_estimates(kafka_bootstrap, estimates_topic, "joint:pair:all")
    assert len(messages) == len(history) and messages[-1] == joint

    # Prometheus: the test, the EM and the top cells.
    labels = {"association": "pair", "window": "all"}
    assert prometheus.get_sample_value("ldpstream_joint_reports", labels) == CLIENTS
    assert prometheus.get_sample_value("ldpstream_joint_independence_p_value", labels) < 1e-6
    # Two direct members (and a hashed one with a well-determined candidate list) are decoded in closed form,
    # the inversion of docs/math/joint.md: no EM iterations, every cell identified.
    closed_form = joint["interval_method"] == "wald-clipped-inversion"
    iterations = prometheus.get_sample_value("ldpstream_joint_em_iterations", labels)
    assert iterations == 0 if closed_form else iterations >= 1
    assert prometheus.get_sample_value("ldpstream_joint_em_seconds", labels) >= 0
    if closed_form:
        assert all(all(row) for row in joint["identified"]) and joint["identification"] == []

    if pair == "krr_krr":  # two k-RR members: closed form, so a second pass has nothing to start warm
        assert closed_form
        service.run_once()
        again = store.latest_joint("pair", "all")
        assert again["em"]["warm_start"] is False and again["table"] == joint["table"]

    text = render_joint(joint)
    assert "independence" in text and f"report pairs {CLIENTS:,}" in text
    em = joint["em"]
    print(f"\n{len(history)} joint estimates published; the last decode of {pair} (all), n = {CLIENTS:,}, "
          f"{em['patterns']:,} distinct pairs: "
          f"{joint['decode_seconds']:.3f} s (likelihoods {em['likelihood_seconds']:.3f} s, EM {em['iterations']} "
          f"iterations {em['seconds']:.3f} s, estimate with covariance {em['estimate_seconds']:.3f} s)\n{text}")


def test_a_pair_key_indexed_but_not_yet_written_stays_in_the_index(redis_url, key_prefix):
    """A consumer adds a pair key to the index before its script creates the key; a decoder that reads in
    between must not drop the entry (the bucket's pairs would never be read again). Entries of buckets past
    the retention whose keys are gone are dropped."""
    registry = joint_registry("t", "krr_krr")
    association = registry.associations["pair"]
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    index = key_schema.pair_index_key(key_prefix, association.name, association.fingerprint)
    current = int(time.time()) // association.bucket_seconds
    expired = current - association.retention_seconds // association.bucket_seconds - 2
    fresh, old = (key_schema.pair_key(key_prefix, "t", 0, PairKey(association.name, association.fingerprint, b),
                                      "cells") for b in (current, expired))
    store.client.sadd(index, fresh, old)  # neither key exists (yet)
    assert store.pair_buckets(association) == []
    assert store.client.smembers(index) == {fresh.encode()}

