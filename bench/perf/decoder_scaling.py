"""One decoder refresh (``DecoderService.run_once``: snapshot, decode every window with its intervals and design
effects, publish) against the number of metrics: 1, 10, 100 and 1,000 metrics of mixed mechanisms, S = 256
values or candidates, C = 64 cohorts; CPU and wall seconds per refresh and the bytes read from Redis, ours
beside the decoder of another commit (default ``main``), in one run.

The metrics cycle over k-RR (k = 256), k-RAPPOR (k = 256), O-RR (k = 32), O-RAPPOR (k = 128, one hash) and
RAPPOR (k = 128 bits, two hashes, Google's p, q, f), the hashed ones with 64 cohorts and 256 candidates
(Zipf(1.1)), ε from 0.5 to 4 for the ε mechanisms; estimators cycle over each family's methods (direct: project,
mle, unbiased, truncate; candidates: project, nnls, mle, ls). Each metric has the windows ``all``, ``1d`` and
``1h`` over hourly buckets: 26 buckets of ``--reports`` reports each, then ``--fresh`` reports in the current
bucket before each timed refresh, so that every window changes (nothing can be republished unchanged).

Per tree and store, in a subprocess of its own (the ``before`` tree exported with ``git archive``;
single-threaded BLAS): the first refresh (cold: empty factor cache, no previous decode), ``--warm`` refreshes
after fresh reports (warm), and, where the tree has it, one refresh with no report since the last (every window
unchanged). Bytes read from Redis: every byte the decoder's Redis connections received during the refresh
(a counting wrapper around the client's socket), replies to its writes included; the memory store reads none.

Usage: python bench/decoder_scaling.py [--sizes 1,10,100,1000] [--stores memory,redis] [--before main]
                                       [--reports 5000] [--fresh 100] [--warm 2] [--redis URL]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

WORKER = r"""
import json, sys, time
import numpy as np
from ldpstream.registry import Registry
from ldpstream.store.contract import ALL_TIME, PartitionBatch, SketchKey
from ldpstream.distributions import parse_distribution, sample_counts
from ldpstream.decoder.service import DecoderService

cfg = json.loads(sys.argv[1])
try:
    from ldpstream.estimators.dispatch import factor_cache
except ImportError:
    factor_cache = None

S, C = 256, 64
DIRECT = ["project", "mle", "unbiased", "truncate"]
CANDIDATE = ["project", "nnls", "mle", "ls"]
EPS = [0.5, 1.0, 2.0, 4.0]
metrics = {}
for i in range(cfg["metrics"]):
    family = ["krr", "krappor", "orr", "orappor", "rappor"][i % 5]
    j = i // 5
    table = {"id": i + 1, "mechanism": family, "windows": ["all", "1d", "1h"], "bucket_seconds": 3600}
    if family in ("krr", "krappor"):
        table.update(k=S, epsilon=EPS[j % 4], estimator=DIRECT[j % 4])
    else:
        table["candidates"] = [f"m{i}-value-{s}" for s in range(S)]
        table["estimator"] = CANDIDATE[j % 4]
        if family == "orr":
            table.update(k=32, epsilon=2.0, cohorts=C)
        elif family == "orappor":
            table.update(k=128, epsilon=2.0, cohorts=C, hashes=1)
        else:
            table.update(k=128, hashes=2, cohorts=C, p=0.25, q=0.75, f=0.5)
    metrics[f"m{i:04d}_{family}"] = table
registry = Registry.from_dict({"metrics": metrics})

received = [0]
if cfg["store"] == "redis":
    import redis
    from ldpstream.store.redis_store import RedisSketchStore

    class CountingSocket:
        def __init__(self, sock):
            self._sock = sock
        def recv_into(self, buf, *args):
            n = self._sock.recv_into(buf, *args)
            received[0] += n
            return n
        def recv(self, size, *args):
            data = self._sock.recv(size, *args)
            if not args:  # MSG_PEEK reads nothing off the socket
                received[0] += len(data)
            return data
        def __getattr__(self, name):
            return getattr(self._sock, name)

    class CountingConnection(redis.connection.Connection):
        def _connect(self):
            return CountingSocket(super()._connect())

    pool = redis.ConnectionPool.from_url(cfg["redis"], connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    prefix = cfg["prefix"]
    store = RedisSketchStore(client, prefix)
else:
    from ldpstream.store.memory_store import InMemorySketchStore
    store = InMemorySketchStore()

rng = np.random.default_rng(cfg["seed"])
NOW_BUCKET = 500_000
now = NOW_BUCKET * 3600 + 1800.0
tables, dists = {}, {}
for name, m in registry.metrics.items():
    mech = m.mechanism
    tables[name] = mech.value_table(list(m.candidates)) if m.candidates is not None else None
    dists[name] = parse_distribution("zipf:1.1", S)
offset = {"next": 0}

def add(reports, buckets):
    for name, m in registry.metrics.items():
        increments = {}
        for b in buckets:
            counts = sample_counts(dists[name], reports, rng)
            sketch = np.asarray(m.mechanism.simulate_sketch(counts, rng, table=tables[name]), dtype=np.int64)
            for bucket in (b, ALL_TIME):
                key = SketchKey(name, m.fingerprint, bucket)
                increments[key] = increments.get(key, 0) + sketch
        start = offset["next"]
        store.apply(PartitionBatch("bench-scaling", 0, None if start == 0 else start, start + 1, increments))
        offset["next"] = start + 1

t0 = time.perf_counter()
add(cfg["reports"], range(NOW_BUCKET - 25, NOW_BUCKET + 1))
setup = time.perf_counter() - t0
try:
    service = DecoderService(registry, store, reuse=True)
    has_reuse = True
except TypeError:
    service = DecoderService(registry, store)
    has_reuse = False

def refresh(fresh):
    if fresh:
        add(fresh, [NOW_BUCKET])
    received[0] = 0
    t, c = time.perf_counter(), time.process_time()
    published = service.run_once(now)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    assert not service.last_failed, service.last_failed
    return {"wall": wall, "cpu": cpu, "bytes": received[0], "estimates": len(published)}

if factor_cache is not None:
    factor_cache().clear()
out = {"setup": setup, "cold": refresh(0)}
out["warm"] = [refresh(cfg["fresh"]) for _ in range(cfg["warm"])]
if has_reuse:
    out["unchanged"] = refresh(0)
if cfg["store"] == "redis":
    for key in client.scan_iter(match=prefix + "*", count=1000):
        client.delete(key)
print(json.dumps(out))
"""


def run(tree: Path, cfg: dict[str, object]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", WORKER, json.dumps(cfg)], env=env, cwd=tree, check=False,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"worker failed in {tree}:\n{res.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def _mb(n: float) -> str:
    return f"{n / 2**20:8.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10,100,1000", help="numbers of metrics")
    ap.add_argument("--stores", default="memory,redis")
    ap.add_argument("--before", default="main", help="git ref of the baseline tree")
    ap.add_argument("--reports", type=int, default=5000, help="reports per metric and bucket")
    ap.add_argument("--fresh", type=int, default=100, help="reports added to the current bucket before a refresh")
    ap.add_argument("--warm", type=int, default=2, help="warm refreshes")
    ap.add_argument("--redis", default=os.environ.get("LDPSTREAM_REDIS", "redis://127.0.0.1:36379/3"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    print("# " + " ".join(["python", "bench/decoder_scaling.py", *(argv if argv is not None else sys.argv[1:])]))
    print(f"# before = {args.before} ({rev}), after = working tree (HEAD {head}); single-threaded BLAS; "
          f"{args.reports} reports per metric and bucket, {args.fresh} fresh before each warm refresh; "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')}; load {os.getloadavg()[0]:.2f}", flush=True)
    print("# CPU s and wall s per refresh (warm: the mean of the warm refreshes); MiB read from Redis per refresh")
    header = (f"{'metrics':>7} {'store':<6} {'tree':<6} {'cold CPU':>9} {'warm CPU':>9} {'warm wall':>9} "
              f"{'unch. CPU':>9} {'cold MiB':>8} {'warm MiB':>8} {'unch. MiB':>9}")
    print(header, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "before.tar"
        with archive.open("wb") as fh:
            subprocess.run(["git", "archive", args.before], cwd=ROOT, check=True, stdout=fh)
        tree = Path(tmp) / "before"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        for size in [int(s) for s in args.sizes.split(",")]:
            for store in args.stores.split(","):
                cfg = {"store": store, "redis": args.redis, "prefix": f"bench-scaling-{os.getpid()}-",
                       "seed": args.seed, "reports": args.reports, "fresh": args.fresh, "warm": args.warm,
                       "metrics": size}
                for label, path in ((args.before, tree), ("ours", ROOT)):
                    out = run(path, cfg)
                    warm = out["warm"]
                    cpu = sum(w["cpu"] for w in warm) / len(warm)
                    wall = sum(w["wall"] for w in warm) / len(warm)
                    mib = sum(w["bytes"] for w in warm) / len(warm)
                    unch = out.get("unchanged")
                    unch_cpu = f"{unch['cpu']:9.2f}" if unch else f"{'-':>9}"
                    unch_mib = f"{unch['bytes'] / 2**20:9.2f}" if unch else f"{'-':>9}"
                    print(f"{size:>7} {store:<6} {label[:6]:<6} {out['cold']['cpu']:9.2f} {cpu:9.2f} {wall:9.2f} "
                          f"{unch_cpu} {_mb(out['cold']['bytes'])} {_mb(mib)} {unch_mib}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
