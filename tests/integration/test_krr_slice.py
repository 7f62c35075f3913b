"""The walking skeleton on real Kafka and Redis: k-RR from simulated clients to a published estimate."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ldpstream.config import KafkaConfig
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.service import DecoderService
from ldpstream.estimators.numerics.variance import krr_variance
from ldpstream.producers.loadgen import simulate_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore

pytestmark = pytest.mark.integration

CLIENTS = 100_000
K = 16
EPSILON = 2.0


def krr_registry(topic: str) -> Registry:
    return Registry.from_dict({"defaults": {"topic": topic},
                               "metrics": {"lang": {"id": 1, "mechanism": "krr", "k": K, "epsilon": EPSILON,
                                                    "estimator": "unbiased"}}})


def test_krr_slice_counts_every_report_and_estimates_within_the_analytic_bound(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=4)
    registry = krr_registry(topic)
    metric = registry["lang"]

    produced = simulate_and_publish(metric, ReportPublisher(kafka_bootstrap), clients=CLIENTS,
                                    distribution="geometric", seed=11, per_message=1)
    assert produced.records_acked == CLIENTS

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    consumer = SketchConsumer(registry, store, ConsumerSettings(KafkaConfig(kafka_bootstrap),
                                                                group_id=f"g-{key_prefix}"))
    consumer.run(idle_exit=5.0)
    assert consumer.reports_applied == CLIENTS

    published = DecoderService(registry, store).run_once()
    assert len(published) == 1
    result = store.latest_estimate("lang")
    assert result["n_reports"] == CLIENTS
    snapshot = store.snapshot("lang", metric.fingerprint, (1, K))
    assert int(sum(s.sum() for s in snapshot.buckets.values())) == CLIENTS

    # Unbiased k-RR: given the sample, p̂_i − p̂_emp,i has sd sqrt(Var_i)
    # (docs/math/estimators.md#k-rr-unbiased-estimator). Every coordinate must lie within the
    # Bonferroni-corrected two-sided 99.9% band around the sample's truth.
    estimate = np.array([v["frequency"] for v in result["values"]])
    empirical = produced.true_counts / CLIENTS
    sd = np.sqrt(krr_variance(empirical, CLIENTS, EPSILON))
    z = stats.norm.isf(0.001 / (2 * K))
    assert np.all(np.abs(estimate - empirical) <= z * sd), (estimate - empirical) / sd
