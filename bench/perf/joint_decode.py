"""The decoder's cost per association and window, on real Redis, beside the marginals' (the baseline: what a
pass cost before associations).

For each pair of members (k-RR × k-RR, whose pair statistic is a sparse table of cells; RAPPOR with 24
candidates × k-RAPPOR, whose statistic is the packed report pairs), ``--n`` simulated clients' version-2
records are folded as a consumer folds them and applied to Redis (one compare-and-set per chunk; no Kafka:
the consumer's cost is ``bench/perf/consumer_throughput.py``'s). Then two decoder passes (``DecoderService.run_once``,
window ``all``): the first starts the joint EM from a uniform table, the second warm from the first's. Printed
per pass: each member's marginal decode (snapshot, estimate, design effect), and the association's joint
decode split into reading the pairs from Redis, building the likelihoods, the EM (iterations) and the rest
(covariance, conditionals, test, design effect), as the published JSON reports them.

Wall time (``perf_counter``) on the shared 2-core machine: with other jobs running, numpy's threaded BLAS can
be several times slower than one thread (set ``OPENBLAS_NUM_THREADS=1`` to compare).

Usage: LDPSTREAM_REDIS=redis://127.0.0.1:36379/5 python -m bench.perf.joint_decode [--n 200000] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from ldpstream.consumers.fold import fold_messages
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.device import privatize_population, value_table
from ldpstream.producers.loadgen import association_joint
from ldpstream.registry import Registry
from ldpstream.store import PartitionBatch, RedisSketchStore
from ldpstream.wire import encode_association_records, payloads_from_reports

CHUNK = 50_000
PAGES = [f"https://example.org/page/{i}" for i in range(24)]
PAIRS: dict[str, dict[str, Any]] = {
    "krr x krr (cells)": {
        "x": {"id": 1, "mechanism": "krr", "k": 16, "epsilon": 3.0, "estimator": "project"},
        "y": {"id": 2, "mechanism": "krr", "k": 8, "epsilon": 3.0, "estimator": "project"},
    },
    "rappor x krappor (rows)": {
        "x": {"id": 1, "mechanism": "rappor", "k": 64, "hashes": 2, "cohorts": 16, "p": 0.25, "q": 0.75,
              "f": 0.25, "estimator": "ls", "candidates": PAGES},
        "y": {"id": 2, "mechanism": "krappor", "k": 8, "epsilon": 3.0, "estimator": "project"},
    },
}


def registry_of(metrics: dict[str, Any]) -> Registry:
    return Registry.from_dict({
        "defaults": {"topic": "bench", "bucket_seconds": 3600, "windows": ["all"], "retention": "2d"},
        "metrics": metrics,
        "associations": {"pair": {"id": 1, "metrics": ["x", "y"], "candidates": 5, "windows": ["all"]}}})


def fill(store: RedisSketchStore, registry: Registry, n: int, rng: np.random.Generator, now: int) -> float:
    """Fold and apply n clients' associated records; returns the seconds it took."""
    association = registry.associations["pair"]
    joint = association_joint(association, ["zipf:1.1", "geometric"], 0.5, rng)
    tables = [value_table(m) for m in association.metrics]
    offset: int | None = None
    began = time.perf_counter()
    for start in range(0, n, CHUNK):
        size = min(CHUNK, n - start)
        values = np.unravel_index(rng.choice(joint.size, size=size, p=joint.ravel()), joint.shape)
        privatized = [privatize_population(m, v, rng, t)
                      for m, v, t in zip(association.metrics, values, tables, strict=True)]
        cohorts = np.column_stack([np.broadcast_to(c, (size,)) for c, _ in privatized])
        payloads = [payloads_from_reports(m.mechanism, r)
                    for m, (_, r) in zip(association.metrics, privatized, strict=True)]
        rows = encode_association_records(association.id, association.fingerprint, cohorts, payloads,
                                          event_time=now - 60)
        folded = fold_messages([rows.tobytes()], np.zeros(1, dtype=np.int64), registry, now=now)
        next_offset = (offset or 0) + 1
        batch = PartitionBatch("bench", 0, offset, next_offset, folded.increments, folded.stats(), folded.expire_at,
                               folded.pairs)
        assert store.apply(batch).applied
        offset = next_offset
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    url = os.environ.get("LDPSTREAM_REDIS", "redis://127.0.0.1:6379/0")
    now = int(time.time())
    print(f"# n={args.n:,} clients, window all, candidates 5 + Other; Redis {url}; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; {os.cpu_count()} CPUs")
    header = (f"{'pair':<24} {'pass':<5} {'marginal x':>10} {'marginal y':>10} {'joint':>8} {'read':>7} "
              f"{'likel.':>7} {'EM':>7} {'iters':>5} {'rest':>7} {'patterns':>9}")
    print(header)
    for name, metrics in PAIRS.items():
        registry = registry_of(metrics)
        prefix = f"bench-joint-{uuid.uuid4().hex[:8]}"
        store = RedisSketchStore.from_url(url, prefix)
        try:
            seconds = fill(store, registry, args.n, np.random.default_rng(args.seed), now)
            print(f"{name:<24} fill  {seconds:8.2f} s (fold + apply)")
            service = DecoderService(registry, store, metrics=DecoderMetrics(CollectorRegistry()))
            for label in ("cold", "warm"):
                marginals = {r.metric: r.decode_seconds for r in service.run_once(now=now)}
                joint = store.latest_joint("pair", "all")
                assert joint is not None and joint["n_reports"] == args.n
                em = joint["em"]
                read = joint["decode_seconds"] - em["estimate_seconds"]
                rest = em["estimate_seconds"] - em["likelihood_seconds"] - em["seconds"]
                print(f"{name:<24} {label:<5} {marginals['x']:9.3f}s {marginals['y']:9.3f}s "
                      f"{joint['decode_seconds']:7.3f}s {read:6.3f}s {em['likelihood_seconds']:6.3f}s "
                      f"{em['seconds']:6.3f}s {em['iterations']:>5} {rest:6.3f}s {em['patterns']:>9,}")
        finally:
            client = store.client
            for key in client.scan_iter(f"{prefix}*", count=1000):
                client.delete(key)


if __name__ == "__main__":
    main()
