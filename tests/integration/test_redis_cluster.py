"""The store on a real Redis Cluster (three masters, ``ldpstream stack up --redis-cluster``, started here when it
does not answer; ``LDPSTREAM_STACK_CLUSTER_PORT`` moves it): partitions land on several shards, snapshots read
per slot never see a batch half applied while consumers write, and the CLI takes the ``redis+cluster://`` URL.

The whole store contract and the exactly-once tests also run on the cluster with
``LDPSTREAM_REDIS=redis+cluster://127.0.0.1:36501`` (CI does; docs/scaling.md).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from redis.crc import key_slot

from ldpstream.cli import main
from ldpstream.config import RedisConfig
from ldpstream.deploy import cluster
from ldpstream.store import ALL_TIME, PartitionBatch, RedisSketchStore, SketchKey
from ldpstream.store import keys as key_schema
from ldpstream.testing import start_local, unavailable

DEPLOY_REGISTRY = Path(__file__).resolve().parents[2] / "deploy" / "metrics.toml"

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

FP = 0x1234ABCD
PARTITIONS = 8


@pytest.fixture(scope="module")
def cluster_url() -> str:
    cfg = cluster.ClusterStackConfig.from_env()
    try:
        start_local(f"the Redis Cluster ({cfg.url})", lambda: cluster.cluster_answers(cfg), lambda: cluster.up(cfg),
                    lambda: cluster.down(cfg))
        return cfg.url
    except Exception as exc:
        unavailable(f"local Redis Cluster: {exc}")
        raise


@pytest.fixture
def store(cluster_url: str) -> Iterator[RedisSketchStore]:
    config = RedisConfig(cluster_url, f"test:{uuid.uuid4().hex[:10]}")
    store = config.store()
    yield store
    pipe = store.client.pipeline(transaction=False)
    for key in store.client.scan_iter(f"{config.prefix}:*", count=1000):
        pipe.delete(key)
    pipe.execute()
    store.client.close()  # a cluster client collected open warns (an error under the test settings)


def test_the_url_builds_a_cluster_client_and_partitions_spread_over_the_shards(store, cluster_url):
    assert store.cluster and cluster_url.startswith("redis+cluster://127.0.0.1:")
    shards = {key_slot(key_schema.offset_key(store.prefix, "t", p).encode()) * 3 // 16384 for p in range(PARTITIONS)}
    assert len(shards) > 1  # the test below really spans shards


def test_a_snapshot_read_per_slot_sees_whole_batches_only_while_consumers_write(store):
    """Each batch adds one report to its bucket (a new one every fifth batch: a new key, indexed just before its
    script) and to the all-time rollup of its partition: in any snapshot made of whole batches, the buckets sum
    to the rollup. (Without the second index read of a per-slot snapshot, this fails at once.)"""
    topic, shape, snapshots = "t", (1, 4), 15
    stop = threading.Event()
    applied = [0] * PARTITIONS

    def consumer(partition: int) -> None:
        one = np.array([[1, 0, 0, 0]], dtype=np.int64)
        for i in range(1000):
            if stop.is_set():
                return
            increments = {SketchKey("m", FP, 1000 + i // 5): one, SketchKey("m", FP, ALL_TIME): one}
            assert store.apply(PartitionBatch(topic, partition, i or None, i + 1, increments)).applied
            applied[partition] += 1

    writers = [threading.Thread(target=consumer, args=(p,)) for p in range(PARTITIONS)]
    for writer in writers:
        writer.start()
    try:
        for _ in range(snapshots):
            snapshot = store.snapshot("m", FP, shape)
            in_buckets = int(sum(int(c.sum()) for c in snapshot.buckets.values()))
            in_rollup = 0 if snapshot.total is None else int(snapshot.total.sum())
            assert in_buckets == in_rollup, "a batch was seen half applied"
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    assert all(applied), "every writer ran while the snapshots were read"
    final = store.snapshot("m", FP, shape)
    assert final.total is not None and int(final.total.sum()) == sum(applied)
    assert store.next_offsets(topic, range(PARTITIONS)) == dict(enumerate(applied))


def test_estimates_publish_and_read_back_on_the_cluster(store):
    for version in range(3):
        store.publish_estimate("m", "all", f'{{"v": {version}}}', history=2)
    assert store.latest_estimate("m") == {"v": 2}
    assert store.estimate_history("m") == [{"v": 2}, {"v": 1}]
    store.check_safe()


def test_stack_status_prints_the_cluster_url_and_watch_takes_it(cluster_url, capsys):
    assert main(["stack", "status", "--redis-cluster"]) in (0, 3)  # 3 when the plain stack is not running
    assert f"redis-cluster  up    {cluster_url}" in capsys.readouterr().out
    assert main(["watch", "app_language", "--redis", cluster_url, "--prefix", "test:none", "--iterations", "1",
                 "--registry", str(DEPLOY_REGISTRY)]) == 0
    assert "no estimate of 'app_language'" in capsys.readouterr().out
