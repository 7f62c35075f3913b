"""The decoder's worker processes (``DecoderService(workers=2)``) on real Redis: they publish what one process
publishes from the same store contents, pass after pass (cold, then warm), marginals and joint tables (decoded in
the parent from the marginals the workers send back); a killed worker fails its metrics for one pass (counted,
named) and is replaced, whose metrics are published again (decoded cold) the next pass."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from ldpstream.config import KafkaConfig, RedisConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.decoder.workers import assign
from ldpstream.producers.loadgen import simulate_association_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store.contract import ALL_TIME, PartitionBatch, SketchKey

pytestmark = pytest.mark.integration

BUCKET = 3600
NOW_BUCKET = 500_000
NOW = NOW_BUCKET * BUCKET + 1800.0


def _registry() -> Registry:
    names = [f"v{i}" for i in range(40)]
    return Registry.from_dict({
        "defaults": {"bucket_seconds": BUCKET, "windows": ["all", "1h"]},
        "metrics": {
            "a_krr": {"id": 1, "mechanism": "krr", "k": 16, "epsilon": 2.0, "estimator": "project"},
            "b_krappor": {"id": 2, "mechanism": "krappor", "k": 8, "epsilon": 2.0, "estimator": "mle"},
            "c_orr": {"id": 3, "mechanism": "orr", "k": 32, "epsilon": 2.0, "cohorts": 16, "candidates": names,
                      "estimator": "nnls"},
            "d_rappor": {"id": 4, "mechanism": "rappor", "k": 64, "hashes": 2, "cohorts": 8, "p": 0.25,
                         "q": 0.75, "f": 0.5, "candidates": names, "estimator": "mle"},
            "e_orappor": {"id": 5, "mechanism": "orappor", "k": 64, "epsilon": 2.0, "cohorts": 8, "hashes": 1,
                          "candidates": names, "estimator": "nnls"},
            "f_detect": {"id": 6, "mechanism": "rappor", "k": 64, "hashes": 2, "cohorts": 8, "p": 0.25,
                         "q": 0.75, "f": 0.5, "candidates": names, "estimator": "detect"},
            "g_ls": {"id": 7, "mechanism": "orr", "k": 32, "epsilon": 2.0, "cohorts": 16, "candidates": names,
                     "estimator": "ls"},
        }})


def _fill(registry: Registry, config: RedisConfig, offset: int, buckets: range, reports: int, seed: int) -> int:
    """Simulated sketches of ``reports`` Zipf-distributed reports per metric and bucket, applied as one batch per
    metric; the next offset."""
    store = config.store()
    rng = np.random.default_rng(seed)
    for name, metric in registry.metrics.items():
        mech = metric.mechanism
        size = len(metric.candidates) if metric.candidates is not None else mech.k
        table = mech.value_table(list(metric.candidates)) if metric.candidates is not None else None
        p = 1.0 / np.arange(1, size + 1) ** 1.1
        increments: dict[SketchKey, Any] = {}
        for b in buckets:
            counts = rng.multinomial(reports, p / p.sum())
            sketch = np.asarray(mech.simulate_sketch(counts, rng, table=table), dtype=np.int64)
            for bucket in (b, ALL_TIME):
                key = SketchKey(name, metric.fingerprint, bucket)
                increments[key] = increments.get(key, 0) + sketch
        store.apply(PartitionBatch("workers-test", 0, None if offset == 0 else offset, offset + 1, increments))
        offset += 1
    return offset


def _bodies(published: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each published estimate's JSON without its decode time (the one field that differs between runs)."""
    out = {}
    for p in published:
        body = json.loads(p.body())
        del body["decode_seconds"]
        out[(p.metric, p.window)] = body
    return out


@pytest.mark.faults
def test_workers_publish_what_one_process_publishes_and_recover_a_killed_worker(
        redis_config: RedisConfig, key_prefix: str) -> None:
    registry = _registry()
    config = dataclasses.replace(redis_config, prefix=key_prefix)
    offset = _fill(registry, config, 0, range(NOW_BUCKET - 3, NOW_BUCKET + 1), 5_000, seed=1)
    single = DecoderService(registry, config.store(), metrics=DecoderMetrics(CollectorRegistry()))
    metrics = DecoderMetrics(CollectorRegistry())
    parallel = DecoderService(registry, config.store(), metrics=metrics, workers=2, store_factory=config.store)
    try:
        for round_ in range(2):  # cold, then warm (fresh reports: every window decoded again, warm-started)
            if round_:
                offset = _fill(registry, config, offset, range(NOW_BUCKET, NOW_BUCKET + 1), 300, seed=2)
            expected = _bodies(single.run_once(NOW))
            got = _bodies(parallel.run_once(NOW))
            assert parallel.last_failed == [] and single.last_failed == []
            assert len(expected) == 2 * len(registry.metrics)
            assert got == expected
        # Unchanged counts: both republish their last estimates without decoding.
        got = _bodies(parallel.run_once(NOW))
        assert got == _bodies(single.run_once(NOW))
        assert all(body["reused"] for body in got.values())

        pool = parallel._pool
        assert pool is not None
        victim = pool.pids[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        published = parallel.run_once(NOW)
        lost = assign(registry, 2)[0]
        assert sorted(parallel.last_failed) == sorted(lost)
        assert {p.metric for p in published} == set(registry.metrics) - set(lost)
        for name in lost:
            assert metrics.decode_failures.labels(name)._value.get() == 1
        assert pool.restarts == 1 and pool.pids[0] != victim
        # The new worker decodes its metrics cold: as the first worker of a new pool does (a new process: no
        # previous estimate, an empty factor cache); the other worker decodes its own warm, as one process does.
        offset = _fill(registry, config, offset, range(NOW_BUCKET, NOW_BUCKET + 1), 300, seed=3)
        warm = _bodies(single.run_once(NOW))
        fresh = DecoderService(registry, config.store(), metrics=DecoderMetrics(CollectorRegistry()), workers=2,
                               store_factory=config.store)
        try:
            cold = _bodies(fresh.run_once(NOW))
        finally:
            fresh.close()
        got = _bodies(parallel.run_once(NOW))
        assert parallel.last_failed == []
        assert got == {key: (cold if key[0] in lost else warm)[key] for key in warm}
        assert not any(got[key]["reused"] for key in got if key[0] in lost)
    finally:
        parallel.close()
    assert parallel._pool is None


def test_workers_and_one_process_publish_the_same_joint_table(
        kafka_bootstrap: str, redis_config: RedisConfig, key_prefix: str, fresh_topic: Any) -> None:
    """An association is decoded in the parent from the marginals its members' workers sent back: the same
    joint table as one process's (two k-RR members: decoded in closed form, so equal to the last digit)."""
    topic = fresh_topic(partitions=2)
    registry = Registry.from_dict({
        "defaults": {"topic": topic, "bucket_seconds": 3600, "windows": ["all"], "retention": "2d"},
        "metrics": {
            "x": {"id": 21, "mechanism": "krr", "k": 8, "epsilon": 3.0, "estimator": "project"},
            "y": {"id": 22, "mechanism": "krr", "k": 6, "epsilon": 3.0, "estimator": "project"},
            "z": {"id": 23, "mechanism": "krr", "k": 4, "epsilon": 3.0, "estimator": "unbiased"},
        },
        "associations": {"pair": {"id": 1, "metrics": ["x", "y"], "candidates": 3, "windows": ["all"]}}})
    clients = 5_000
    produced = simulate_association_and_publish(registry.associations["pair"], ReportPublisher(kafka_bootstrap),
                                                clients=clients, distribution=["zipf:1.1", "geometric"],
                                                dependence=0.5, seed=3, per_message=50)
    assert produced.records_acked == clients
    config = dataclasses.replace(redis_config, prefix=key_prefix)
    store = config.store()
    consumer = SketchConsumer(registry, store,
                              ConsumerSettings(KafkaConfig(kafka_bootstrap), group_id=f"g-{key_prefix}"),
                              metrics=ConsumerMetrics(registry=CollectorRegistry()))
    consumer.run(idle_exit=3.0)
    now = time.time()
    single = DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()))
    single.run_once(now)
    expected = store.latest_joint("pair", "all")
    parallel = DecoderService(registry, config.store(), metrics=DecoderMetrics(CollectorRegistry()), workers=2,
                              store_factory=config.store)
    try:
        parallel.run_once(now)
    finally:
        parallel.close()
    got = store.latest_joint("pair", "all")
    assert parallel.last_failed == [] and expected is not None and got is not None
    assert expected["n_reports"] == clients
    timings = {"decode_seconds", "em"}
    assert {k: v for k, v in got.items() if k not in timings} == {k: v for k, v in expected.items() if k not in timings}
