"""A discovery metric live: Redis memory per million clients and the live decoder's pass, on the URL experiment's
setting (``bench/accuracy/discover.py``: 100 URL-like strings, Zipf(1), M = 12 in bigrams, 6 slots and 15 slot pairs,
total ε = 4.39 split ε/3 per report, 128-bit RAPPOR, h = 2, 32 cohorts).

``--n`` simulated clients (seeded; simulation only) each produce the discovery record the SDK sends (two n-gram
reports paired, the full string riding: :func:`ldpstream.producers.loadgen.simulate_discovery_and_publish`);
the records are folded (:func:`ldpstream.consumers.fold.fold_messages`) in consumer-sized batches and applied to
the real Redis (one partition, one time bucket, a fresh key prefix) exactly as a consumer does. Then:

- memory: ``MEMORY USAGE`` (``SAMPLES 0``) of the pair-statistic keys (one per slot pair) and of the sketch keys
  (the full-string metric and every slot, bucket and all-time rollup), with the pairs scaled to one million
  clients (the sketches do not grow with n);
- the live decoder's pass (:class:`ldpstream.decoder.service.DecoderService` on that Redis): reading the
  snapshot and the pair statistics, then the discovery stages, the dictionary found against the true ranks.

Run on the local stack, with a Redis database of your own (the script deletes only the keys under its prefix)::

    LDPSTREAM_REDIS=redis://127.0.0.1:36379/4 python -m bench.perf.discover_live --n 1000000
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import time
import uuid

import numpy as np
import redis
from prometheus_client import CollectorRegistry

from bench.harness import DATA
from ldpstream.consumers.fold import fold_messages
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.producers.loadgen import simulate_discovery_and_publish
from ldpstream.producers.publisher import DeliveryStats, ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import PartitionBatch, RedisSketchStore

STRINGS = DATA / "urls100.txt"
#: Records per consumer batch (the consumer's default batch size).
BATCH = 20_000


class Collected(ReportPublisher):
    """Keeps the messages (the bench measures the store and the decoder, not Kafka)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.stats = DeliveryStats()

    def publish(self, topic: str, rows: np.ndarray, per_message: int = 1, key: bytes | None = None) -> int:
        rows = np.asarray(rows)
        self.sent.extend(rows[i:i + per_message].tobytes() for i in range(0, len(rows), per_message))
        self.stats.records_acked += len(rows)
        return -(-len(rows) // per_message)

    def flush(self, timeout: float | None = None) -> DeliveryStats:
        return self.stats

    def poll(self, timeout: float = 0.0) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-decode", action="store_true", help="measure the memory only")
    args = parser.parse_args()
    strings = [s for s in STRINGS.read_text().splitlines() if s]
    registry = Registry.from_dict({"metrics": {"url": {"id": 1, "retention": "7d", "bucket_seconds": 86400,
                                                       "discovery": {"epsilon": 4.39, "length": 12}}}})
    metric = registry["url"]
    url = os.environ.get("LDPSTREAM_REDIS", "redis://127.0.0.1:36379/4")
    prefix = f"bench-discover-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(url)
    store = RedisSketchStore(client, prefix)
    now = int(time.time())
    try:
        began = time.perf_counter()
        offset = 0
        true_counts = np.zeros(len(strings), dtype=np.int64)
        for start in range(0, args.n, 200_000):
            publisher = Collected()
            sent = simulate_discovery_and_publish(registry, metric, publisher, clients=min(200_000, args.n - start),
                                                  strings=strings, distribution="zipf:1", seed=args.seed + start,
                                                  event_time=now)
            true_counts += sent.true_counts
            for i in range(0, len(publisher.sent), BATCH):
                messages = publisher.sent[i:i + BATCH]
                folded = fold_messages(messages, np.full(len(messages), now), registry, now=now)
                assert not folded.rejections
                assert store.apply(PartitionBatch("bench", 0, offset or None, offset + len(messages),
                                                  folded.increments, folded.stats(), folded.expire_at,
                                                  folded.pairs)).applied
                offset += len(messages)
        print(f"{args.n:,} clients folded into Redis in {time.perf_counter() - began:.1f} s (simulation included)")
        pair_bytes = sketch_bytes = 0
        pair_keys = sketch_keys = 0
        for key in client.scan_iter(f"{prefix}:*", count=1000):
            size = int(client.memory_usage(key, samples=0) or 0)
            if b":pr:" in key:
                pair_bytes, pair_keys = pair_bytes + size, pair_keys + 1
            elif b":sk:" in key:
                sketch_bytes, sketch_keys = sketch_bytes + size, sketch_keys + 1
        per_million = pair_bytes * 1_000_000 / args.n
        print(f"Redis: pair statistics {pair_bytes / 2**20:.1f} MiB in {pair_keys} keys "
              f"({pair_bytes / args.n:.1f} bytes a client, {per_million / 2**20:.1f} MiB per million clients "
              f"and bucket); sketches {sketch_bytes / 2**20:.2f} MiB in {sketch_keys} keys (bucket + rollup of "
              f"the full string and {metric.discovery.slots if metric.discovery else 0} slots; fixed, not per client)")
        if args.no_decode:
            return
        service = DecoderService(registry, store, metrics=DecoderMetrics(registry=CollectorRegistry()))
        began = time.perf_counter()
        cpu = time.process_time()
        service.run_once(now=now + 1)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        published = store.latest_estimate("url", "all")
        assert published is not None and service.last_failed == []
        block = published["discovery"]
        rank = {s: i + 1 for i, s in enumerate(strings)}
        found = [v["value"] for v in published["values"]]
        true = [rank[s] for s in found if s in rank]
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in block["seconds"].items())
        print(f"live decode pass: {wall:.1f} s wall, {cpu:.1f} s CPU (discovery stages: {stages}; the rest reads "
              f"Redis and publishes)")
        print(f"dictionary: {len(found)} strings, {len(true)} true (ranks {sorted(true)}), "
              f"{len(found) - len(true)} false; n-grams kept per slot {block['ngrams']}")
    finally:
        keys = list(client.scan_iter(f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i:i + 1000])


if __name__ == "__main__":
    main()
