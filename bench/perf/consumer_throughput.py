"""Consumer throughput: our exactly-once consumer against a bare confluent-kafka loop, same messages.

For each layout (one report per message, and gateway batches of ``--per-message`` reports), the script
publishes ``--reports`` k-RR reports to a fresh topic (printing the producer's rate), then reads the topic
from the beginning twice, each time with a fresh consumer group:

- bare: ``Consumer.consume(batch)`` in a loop that touches each message's value and nothing else;
- ours: :class:`ldpstream.consumers.worker.SketchConsumer`: decode, validate, fold, and one atomic Redis call per
  partition batch (counts + offsets), into a fresh key prefix.

Both are timed from the end of their first non-empty batch to the last report, and the first batch's
reports are left out of the count, so group-join and fetch warm-up are excluded from both alike. Each
``consume()`` call asks for at most ``--batch`` messages, and at most 1/50 of the topic's messages, so every
run spans many batches.
Run on the local stack (``ldpstream stack up``) or point ``LDPSTREAM_KAFKA``/``LDPSTREAM_REDIS`` elsewhere::

    python -m bench.perf.consumer_throughput --reports 1000000 --per-message 100

``--also-redis URL`` runs ours a second time, on the same messages, into another Redis (e.g. the local stack's
Redis Cluster, ``--also-redis redis+cluster://127.0.0.1:36501``), and prints its rate beside the first::

    python -m bench.perf.consumer_throughput --reports 300000 --also-redis redis+cluster://127.0.0.1:36501

``--no-index-cache`` adds, beside each of ours, the same consumer whose store adds every index entry with
every batch (``RedisSketchStore(remember_index=False)``, the behaviour before the store remembered the entries
it wrote), on the same messages: the before/after of that change side by side.
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Consumer

from ldpstream.config import KafkaConfig, ServiceConfig
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.kafka import ensure_topics
from ldpstream.producers.loadgen import simulate_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore


def bare_loop(bootstrap: str, topic: str, messages: int, batch: int) -> tuple[int, float]:
    """Messages read after the first batch, and the seconds they took."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-bare-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": False, "queued.max.messages.kbytes": 65536})
    consumer.subscribe([topic])
    seen = 0
    started, first = 0.0, 0
    nbytes = 0
    while seen < messages:
        got = consumer.consume(batch, 1.0)
        for message in got:
            nbytes += len(message.value() or b"")
        seen += len(got)
        if got and not first:
            started, first = time.perf_counter(), seen
    elapsed = time.perf_counter() - started
    consumer.close()
    return seen - first, elapsed


def our_consumer(registry: Registry, bootstrap: str, redis_url: str, reports: int, batch: int,
                 remember_index: bool = True) -> tuple[int, float]:
    """Reports applied after the first batch, and the seconds they took."""
    from prometheus_client import CollectorRegistry

    store = RedisSketchStore.from_url(redis_url, f"bench:{uuid.uuid4().hex[:8]}", remember_index=remember_index)
    consumer = SketchConsumer(registry, store, ConsumerSettings(
        KafkaConfig(bootstrap), group_id=f"bench-ours-{uuid.uuid4().hex[:8]}", batch_size=batch),
        metrics=ConsumerMetrics(CollectorRegistry()))
    consumer.start()
    started, first = 0.0, 0
    while consumer.reports_applied < reports:
        if consumer.poll_once() and not first:
            started, first = time.perf_counter(), consumer.reports_applied
    elapsed = time.perf_counter() - started
    consumer.close()
    pipe = store.client.pipeline(transaction=False)
    for key in store.client.scan_iter(f"{store.prefix}:*", count=1000):
        pipe.delete(key)  # one by one: on a cluster the keys lie in many slots
    pipe.execute()
    return consumer.reports_applied - first, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=1_000_000)
    parser.add_argument("--per-message", type=int, default=100, help="reports per message in the batched layout")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=20_000, help="messages per consume() call (both loops)")
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--also-redis", metavar="URL", default=None,
                        help="run ours again into this Redis (e.g. redis+cluster://127.0.0.1:36501)")
    parser.add_argument("--no-index-cache", action="store_true",
                        help="also run each of ours with a store that adds every index entry with every batch")
    args = parser.parse_args()
    config = ServiceConfig.load()
    bootstrap, redis_url = config.kafka.bootstrap, config.redis.url

    print(f"# python -m bench.perf.consumer_throughput --reports {args.reports} --per-message {args.per_message} "
          f"--partitions {args.partitions} --batch {args.batch} --k {args.k}"
          + (f" --also-redis {args.also_redis}" if args.also_redis else "")
          + (" --no-index-cache" if args.no_index_cache else ""))
    print(f"# ours into {redis_url}" + (f"; 'also' into {args.also_redis}" if args.also_redis else ""))
    print(f"{'layout':<18} {'producer rep/s':>15} {'bare msg/s':>12} {'bare rep/s':>12} {'ours rep/s':>12} "
          f"{'ours/bare':>10}" + (f" {'no-cache':>12} {'cache gain':>10}" if args.no_index_cache else "")
          + (f" {'also rep/s':>12} {'also/ours':>10}" if args.also_redis else "")
          + (f" {'no-cache':>12} {'cache gain':>10}" if args.also_redis and args.no_index_cache else ""))
    for per_message in (1, args.per_message):
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, [topic], partitions=args.partitions)
        registry = Registry.from_dict({"defaults": {"topic": topic}, "metrics": {
            "bench": {"id": 1, "mechanism": "krr", "k": args.k, "epsilon": 1.0}}})
        produced = simulate_and_publish(registry["bench"], ReportPublisher(bootstrap), clients=args.reports,
                                        distribution="geometric", seed=1, per_message=per_message,
                                        chunk=100_000)
        messages = produced.messages
        batch = max(1, min(args.batch, messages // 50))
        bare_messages, bare_seconds = bare_loop(bootstrap, topic, messages, batch)
        our_reports, our_seconds = our_consumer(registry, bootstrap, redis_url, args.reports, batch)
        bare_msg_rate = bare_messages / bare_seconds
        bare_rate = bare_msg_rate * per_message
        our_rate = our_reports / our_seconds
        layout = "1 per message" if per_message == 1 else f"{per_message} per message"

        def without_cache(url: str, rate: float, registry: Registry = registry, batch: int = batch) -> str:
            """The same consumer with a store that adds the index entries with every batch, and the gain."""
            if not args.no_index_cache:
                return ""
            plain_reports, plain_seconds = our_consumer(registry, bootstrap, url, args.reports, batch, False)
            plain_rate = plain_reports / plain_seconds
            return f" {plain_rate:>12,.0f} {rate / plain_rate - 1:>+10.0%}"

        ours = without_cache(redis_url, our_rate)
        also = ""
        if args.also_redis:
            also_reports, also_seconds = our_consumer(registry, bootstrap, args.also_redis, args.reports, batch)
            also_rate = also_reports / also_seconds
            also = f" {also_rate:>12,.0f} {also_rate / our_rate:>9.0%}" + without_cache(args.also_redis, also_rate)
        print(f"{layout:<18} {produced.rate:>15,.0f} {bare_msg_rate:>12,.0f} {bare_rate:>12,.0f} "
              f"{our_rate:>12,.0f} {our_rate / bare_rate:>9.0%}{ours}{also}", flush=True)
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic])


if __name__ == "__main__":
    main()
