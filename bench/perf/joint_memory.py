"""Associations: Redis memory of the pair statistic per million report pairs, fold throughput of pair records
against single records, and the time to read the statistic back as PairPatterns.

For each association (k-RR × k-RR, O-RR × O-RR, RAPPOR 128-bit × 128-bit), ``--pairs`` simulated clients report
a pair drawn from a dependent joint distribution (seeded; simulation only). The records are folded
(:func:`ldpstream.consumers.fold.fold_messages`) in consumer-sized batches of one-record messages and applied
to the real Redis (one partition, one time bucket, a fresh key prefix) exactly as a consumer does: one Lua
compare-and-set per batch, members' sketches and the pair statistic together. Then:

- memory: ``MEMORY USAGE`` (``SAMPLES 0``: every element counted) of the pair-statistic key and of the
  members' sketch keys, scaled to one million pairs; beside it, the alternatives not chosen (a dense table of
  every cell for symbol pairs; a hash of distinct patterns for bit pairs, measured on a sample);
- fold: records per second of :func:`fold_messages` on the pair records, beside the same number of single
  (version-1) records of the first member, and beside both members' single records (what reporting the two
  metrics apart would cost);
- read: seconds of ``store.pair_patterns`` (Redis read + conversion) and of the conversion alone.

Run on the local stack (``ldpstream stack up``), or point ``LDPSTREAM_REDIS`` elsewhere (use a database of
your own: the script deletes only the keys under its fresh prefix)::

    python -m bench.perf.joint_memory --pairs 1000000
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

import numpy as np
import redis

from ldpstream.consumers.fold import fold_messages
from ldpstream.device import privatize_population, value_table
from ldpstream.producers.loadgen import association_joint
from ldpstream.registry import AssociationConfig, Registry
from ldpstream.store import PartitionBatch, RedisSketchStore
from ldpstream.store import keys as key_schema
from ldpstream.store.contract import MAX_PAIR_BYTES
from ldpstream.store.pair_layout import layout_of, patterns_from_cells, patterns_from_rows
from ldpstream.wire import encode_association_records, encode_records, payloads_from_reports

RAPPOR = {"mechanism": "rappor", "k": 128, "hashes": 2, "cohorts": 64, "p": 0.25, "q": 0.75, "f": 0.5,
          "candidates": [f"value-{i}" for i in range(100)]}
REGISTRY = Registry.from_dict({
    "defaults": {"retention": "30d", "bucket_seconds": 86400},
    "metrics": {
        "krr_a": {"id": 1, "mechanism": "krr", "k": 16, "epsilon": 2.0},
        "krr_b": {"id": 2, "mechanism": "krr", "k": 16, "epsilon": 2.0},
        "orr_a": {"id": 3, "mechanism": "orr", "k": 32, "cohorts": 64, "support": 256, "epsilon": 2.0},
        "orr_b": {"id": 4, "mechanism": "orr", "k": 32, "cohorts": 64, "support": 256, "epsilon": 2.0},
        "rappor_a": {"id": 5, **RAPPOR},
        "rappor_b": {"id": 6, **RAPPOR},
    },
    "associations": {
        "krr_x_krr": {"id": 1, "metrics": ["krr_a", "krr_b"]},
        "orr_x_orr": {"id": 2, "metrics": ["orr_a", "orr_b"]},
        "rappor_x_rappor": {"id": 3, "metrics": ["rappor_a", "rappor_b"]},
    },
})


def records(association: AssociationConfig, pairs: int, seed: int, now: int
            ) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """One-record messages: the pairs (version 2), and the same reports as single records of each member."""
    rng = np.random.default_rng(seed)
    joint = association_joint(association, "zipf:1.1", 0.5, rng)
    drawn = np.unravel_index(rng.choice(joint.size, size=pairs, p=joint.reshape(-1)), joint.shape)
    cohorts, payloads, singles = [], [], []
    for member, values in zip(association.metrics, drawn, strict=True):
        c, r = privatize_population(member, values, rng, value_table(member))
        c = np.broadcast_to(np.asarray(c), (pairs,))
        p = payloads_from_reports(member.mechanism, r)
        cohorts.append(c)
        payloads.append(p)
        rows = encode_records(member.id, member.fingerprint, c, p, event_time=now)
        singles.append([row.tobytes() for row in rows])
    paired = encode_association_records(association.id, association.fingerprint, np.column_stack(cohorts),
                                        payloads, event_time=now)
    return [row.tobytes() for row in paired], singles[0], singles[1]


def fold_rate(messages: list[bytes], now: int, batch: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(messages), batch):
        chunk = messages[start:start + batch]
        fold_messages(chunk, np.full(len(chunk), now), REGISTRY, now=now)
    return len(messages) / (time.perf_counter() - started)


def memory(client: Any, key: bytes | str) -> int:
    return int(client.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0") or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=20_000, help="messages per consumer batch (the default's)")
    parser.add_argument("--redis", default=os.environ.get("LDPSTREAM_REDIS", "redis://127.0.0.1:36379/2"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-pair-bytes", type=int, default=MAX_PAIR_BYTES,
                        help="the most one rows segment holds (smaller: see the cost of spilling into segments)")
    args = parser.parse_args()
    client: Any = redis.Redis.from_url(args.redis)
    now = int(time.time())
    scale = 1_000_000 / args.pairs
    print(f"{args.pairs:,} pairs per association, consumer batches of {args.batch:,} one-record messages, rows "
          f"segments of at most {args.max_pair_bytes:,} bytes; "
          f"Redis {args.redis}; memory scaled to 10^6 pairs")
    for name, association in REGISTRY.associations.items():
        prefix = f"bench-joint-{uuid.uuid4().hex[:8]}"
        store = RedisSketchStore(client, prefix, max_pair_bytes=args.max_pair_bytes)
        layout = layout_of(association)
        paired, single_a, single_b = records(association, args.pairs, args.seed, now)
        try:
            applied = without_pairs = 0.0
            offset = None
            for start in range(0, len(paired), args.batch):
                chunk = paired[start:start + args.batch]
                folded = fold_messages(chunk, np.full(len(chunk), now), REGISTRY, now=now)
                assert not folded.rejections
                batch = PartitionBatch("bench", 0, offset, start + len(chunk), folded.increments, folded.stats(),
                                       folded.expire_at, folded.pairs)
                started = time.perf_counter()
                assert store.apply(batch).applied
                applied += time.perf_counter() - started
                # The baseline: the same batch's member sketches alone (what the two metrics cost anyway).
                batch.topic, batch.pairs = "bench-without-pairs", {}
                started = time.perf_counter()
                assert store.apply(batch).applied
                without_pairs += time.perf_counter() - started
                offset = start + len(chunk)
            buckets = store.pair_buckets(association)
            # The statistic's keys that exist (a rows statistic also lists the next segment, before it is needed).
            pair_keys = sorted(k for k in client.smembers(key_schema.pair_index_key(prefix, name,
                                                                                     association.fingerprint))
                               if client.exists(k))
            pair_bytes = sum(memory(client, k) for k in pair_keys)
            segments = f", {len(pair_keys)} segment(s)" if layout.kind == "rows" else ""
            sketch_bytes = sum(memory(client, k) for m in association.metrics
                               for k in client.smembers(key_schema.index_key(prefix, m.name, m.fingerprint))
                               if b"bench-without-pairs" not in k)
            started = time.perf_counter()
            patterns = store.pair_patterns(association, buckets)
            read_seconds = time.perf_counter() - started
            assert patterns.total == args.pairs
            if layout.kind == "cells":
                (pair_key,) = pair_keys
                raw = client.hgetall(pair_key)
                started = time.perf_counter()
                patterns_from_cells(layout, np.array(list(raw)).astype(np.int64),
                                    np.array(list(raw.values())).astype(np.int64))
                convert_seconds = time.perf_counter() - started
                cells = len(raw)
                alternative = (f"dense table of all {int(np.prod(layout.dims)):,} cells (i64): "
                               f"{8 * np.prod(layout.dims) / 2**20:,.1f} MiB whatever n")
            else:
                raw_rows = b"".join(client.get(k) or b"" for k in pair_keys)
                started = time.perf_counter()
                patterns_from_rows(layout, raw_rows)
                convert_seconds = time.perf_counter() - started
                cells = args.pairs
                sample = min(args.pairs, 100_000)
                hash_key = f"{prefix}:alternative-hash"
                rows = np.frombuffer(raw_rows, dtype=np.uint8).reshape(-1, layout.row_size)[:sample]
                pipe = client.pipeline(transaction=False)
                for i, row in enumerate(rows):
                    pipe.hincrby(hash_key, row.tobytes(), 1)
                    if i % 10_000 == 9_999:
                        pipe.execute()
                pipe.execute()
                alternative = (f"hash of distinct patterns (measured on {sample:,} pairs): "
                               f"{memory(client, hash_key) * 1_000_000 / sample / 2**20:,.1f} MiB per 10^6")
                client.delete(hash_key)
            form = ("a hash of the cells seen" if layout.kind == "cells"
                    else f"APPENDed rows of {layout.row_size} bytes")
            print(f"\n{name} ({layout.kind}: {form})")
            if layout.kind == "cells":
                print(f"  pair statistic: {pair_bytes / 2**10:,.1f} KiB for {args.pairs:,} pairs, bounded by the "
                      f"table's {int(np.prod(layout.dims)):,} cells whatever n ({cells:,} cells seen)")
            else:
                print(f"  pair statistic: {pair_bytes * scale / 2**20:8.2f} MiB per 10^6 pairs "
                      f"({pair_bytes / args.pairs:.1f} B/pair; {len(patterns):,} distinct patterns{segments})")
            print(f"  members' marginal sketches (bucket + all-time, both): {sketch_bytes / 2**10:,.1f} KiB")
            print(f"  alternative: {alternative}")
            print(f"  Redis apply (one compare-and-set a batch): {args.pairs / applied:,.0f} pairs/s with the pair "
                  f"statistic, {args.pairs / without_pairs:,.0f}/s the members' sketches alone")
            rate_pairs = fold_rate(paired, now, args.batch)
            rate_single = fold_rate(single_a, now, args.batch)
            rate_both = 1 / (1 / rate_single + 1 / fold_rate(single_b, now, args.batch))
            print(f"  fold alone: pair records {rate_pairs:,.0f}/s; single records {rate_single:,.0f}/s; both members "
                  f"as single records {rate_both:,.0f} pairs/s (pair records: {rate_pairs / rate_both:.2f}× that)")
            print(f"  PairPatterns: {1000 * read_seconds:,.1f} ms (Redis read + conversion), "
                  f"{1000 * convert_seconds:,.1f} ms conversion alone")
        finally:
            doomed = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if doomed:
                client.delete(*doomed)


if __name__ == "__main__":
    main()
