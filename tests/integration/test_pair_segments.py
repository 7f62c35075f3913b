"""A consumer on real Kafka and Redis whose pair statistic passes the segment cap keeps consuming: the rows
spill into numbered segments in the same compare-and-set as the marginals (no refused batch, no crash loop),
and the pair statistic read back is exactly the report pairs that were sent.

The cap is a few hundred bytes here (the store's ``max_pair_bytes``), so a bucket of each partition fills
about a hundred segments; in production it is ``MAX_PAIR_BYTES`` (511 MiB, ≈ 14.9 million RAPPOR-128 pairs)."""

from __future__ import annotations

import threading
import time

import pytest

from ldpstream.config import KafkaConfig
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.producers.loadgen import simulate_association_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.store import RedisSketchStore
from ldpstream.store import keys as key_schema
from ldpstream.store.contract import PairKey
from ldpstream.store.pair_layout import layout_of
from tests.integration.helpers import registry_for, wait_for
from tests.integration.test_associations_exactly_once import BITS, associated, check_counts

pytestmark = pytest.mark.integration

PARTITIONS = 2
ROWS_PER_SEGMENT = 50


def test_a_consumer_keeps_consuming_past_the_segment_cap_and_counts_stay_exact(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix):
    topic = fresh_topic(partitions=PARTITIONS)
    registry = registry_for(topic, BITS, {"lp": {"id": 9, "metrics": ["lang", "page"]}})
    association = registry.association("lp")
    row = layout_of(association).row_size
    store = RedisSketchStore.from_url(redis_url, key_prefix, max_pair_bytes=ROWS_PER_SEGMENT * row)
    kafka = KafkaConfig(kafka_bootstrap)
    publisher = ReportPublisher(kafka_bootstrap)
    first = simulate_association_and_publish(association, publisher, clients=6_000, dependence=0.7, seed=11,
                                             keep_sent=True)
    stop = threading.Event()
    failure: list[BaseException] = []
    consumer = SketchConsumer(registry, store, ConsumerSettings(kafka, group_id=f"g-{key_prefix}", batch_size=300))

    def run() -> None:
        try:
            consumer.run(stop)
        except BaseException as exc:  # the test reports it
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: associated(store, topic, "lp") >= first.records_acked or not thread.is_alive(), 90,
             "the first wave to be applied")
    # Past the cap already (6,000 pairs over 2 partitions, 50 a segment); a second wave while it runs.
    second = simulate_association_and_publish(association, publisher, clients=4_000, dependence=0.7, seed=12,
                                              keep_sent=True)
    produced = first.records_acked + second.records_acked
    wait_for(lambda: associated(store, topic, "lp") >= produced or not thread.is_alive(), 90,
             "every pair to be applied")
    time.sleep(1)  # anything counted twice would show up now
    assert thread.is_alive() and not failure, f"the consumer stopped: {failure}"
    stop.set()
    thread.join(30)
    assert not failure
    assert produced == 10_000
    assert first.sent is not None and second.sent is not None
    check_counts(store, registry, topic, "lp", produced, [first.sent, second.sent])
    segments = {(p, b): store.pair_segments(association, topic, p, b)
                for p in range(PARTITIONS) for b in store.pair_buckets(association)}
    sizes = [s for per_statistic in segments.values() for s in per_statistic]
    assert sum(sizes) == produced * row
    assert max(sizes) == ROWS_PER_SEGMENT * row and len(sizes) >= produced // ROWS_PER_SEGMENT
    for (partition, bucket), per_statistic in segments.items():
        assert all(s == ROWS_PER_SEGMENT * row for s in per_statistic[:-1])  # all full but the last
        for segment in range(len(per_statistic)):  # every one expires with the association's retention
            name = key_schema.pair_key(key_prefix, topic, partition,
                                       PairKey(association.name, association.fingerprint, bucket), f"rows.{segment}")
            assert 0 < store.client.ttl(name) <= association.retention_seconds + association.bucket_seconds
