"""End to end for every mechanism on real Kafka and Redis: 200,000 simulated clients each.

The Redis totals must equal the reports Kafka acknowledged, and every estimate must lie within its stated
standard errors of the truth (the sample's empirical distribution): |p̂_i − p_i| ≤ z·se_i with z the
two-sided Bonferroni quantile at family-wise level 0.001 over the metric's values.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ldpstream.config import KafkaConfig
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.service import DecoderService
from ldpstream.producers.loadgen import simulate_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.store import RedisSketchStore
from tests.integration.helpers import registry_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.pipelines]

CLIENTS = 200_000
CANDIDATES = [f"https://example.org/page/{i}" for i in range(40)]
METRICS = {
    "krr": {"id": 11, "mechanism": "krr", "k": 16, "epsilon": 2.0, "estimator": "project"},
    "krappor": {"id": 12, "mechanism": "krappor", "k": 32, "epsilon": 2.0, "estimator": "project"},
    "orr_closed": {"id": 13, "mechanism": "orr", "k": 16, "epsilon": 3.0, "cohorts": 8, "support": 48,
                   "estimator": "ls"},
    "orappor_open": {"id": 14, "mechanism": "orappor", "k": 64, "epsilon": 3.0, "cohorts": 8, "hashes": 1,
                     "estimator": "ls", "candidates": CANDIDATES},
    "rappor": {"id": 15, "mechanism": "rappor", "k": 64, "hashes": 2, "cohorts": 16, "p": 0.25, "q": 0.75,
               "f": 0.25, "estimator": "ls", "candidates": CANDIDATES},
    # the optimal mechanisms (docs/math/mechanisms.md, "Optimal mechanisms")
    "oue": {"id": 16, "mechanism": "oue", "k": 32, "epsilon": 2.0, "estimator": "project"},
    "ss": {"id": 17, "mechanism": "ss", "k": 32, "epsilon": 2.0, "estimator": "mle"},
    "hr": {"id": 18, "mechanism": "hr", "k": 32, "epsilon": 2.0, "estimator": "project"},
    "ooue_open": {"id": 19, "mechanism": "ooue", "k": 64, "epsilon": 3.0, "cohorts": 8, "estimator": "ls",
                  "candidates": CANDIDATES},
    "cms_open": {"id": 20, "mechanism": "cms", "k": 64, "epsilon": 3.0, "cohorts": 8, "estimator": "ls",
                 "candidates": CANDIDATES},
    "hcms_closed": {"id": 21, "mechanism": "hcms", "k": 64, "epsilon": 3.0, "cohorts": 8, "support": 48,
                    "estimator": "project"},
    # many hash functions, k = round(e^ε) + 1 (docs/math/mechanisms.md#olh)
    "olh_open": {"id": 22, "mechanism": "olh", "k": 8, "epsilon": 2.0, "cohorts": 4096, "estimator": "ls",
                 "candidates": CANDIDATES},
}


@pytest.mark.parametrize("name", list(METRICS))
def test_mechanism_end_to_end(name, kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=4)
    registry = registry_for(topic, {name: METRICS[name]})
    metric = registry[name]
    produced = simulate_and_publish(metric, ReportPublisher(kafka_bootstrap), clients=CLIENTS,
                                    distribution="zipf:1.1", seed=21, per_message=1 if name == "krr" else 50)
    assert produced.records_acked == CLIENTS

    store = RedisSketchStore.from_url(redis_url, key_prefix)
    consumer = SketchConsumer(registry, store,
                              ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}"))
    consumer.run(idle_exit=4.0)
    assert consumer.reports_applied == CLIENTS
    shape = (metric.mechanism.cohorts, metric.mechanism.sketch_width)
    snapshot = store.snapshot(name, metric.fingerprint, shape)
    counted = sum(int(metric.mechanism.reports_per_cohort(s).sum()) for s in snapshot.buckets.values())
    assert counted == CLIENTS

    DecoderService(registry, store).run_once()
    published = store.latest_estimate(name)
    assert published["n_reports"] == CLIENTS
    estimate = np.array([v["frequency"] for v in published["values"]])
    std_error = np.array([v["std_error"] for v in published["values"]])
    truth = produced.true_counts / CLIENTS
    z = stats.norm.isf(0.001 / (2 * truth.size))
    deviation = np.abs(estimate - truth)
    assert np.all(deviation <= z * std_error), np.round(deviation / std_error, 2)
    # and the estimate is informative: the heaviest value is found
    assert int(np.argmax(estimate)) == int(np.argmax(truth))
