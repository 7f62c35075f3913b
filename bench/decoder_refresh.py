"""One decoder refresh of 100 metrics (``DecoderService.run_once``: snapshot, decode every window with its
intervals and design effects, publish), from an in-memory store and from real Redis, with the candidate
decoders' factor cache cold, warm and disabled, beside the decoder of another commit (default ``main``), in
one run.

The registry: 100 metrics, 20 of each mechanism, every one with the windows ``all``, ``1d`` and ``1h`` over
hourly buckets (26 buckets of ``--reports`` reports each, so ``all`` holds 26, ``1d`` 24 and ``1h`` 1–2):

- k-RR, k = 8…256; k-RAPPOR, k = 8…128 (ε from 0.5 to 4);
- O-RR (k = 32, 64 cohorts), O-RAPPOR (k = 128, 16 cohorts, one hash), RAPPOR (k = 128 bits, two hashes,
  32 cohorts, Google's p, q, f): 64, 128, 256, 512, 1024 candidates (Zipf(1.1) over them);
- estimators cycling over each family's methods (direct: project, mle, unbiased, truncate; candidates:
  ``--candidate-methods``, default project, nnls, mle, ls).

A refresh is timed after adding ``--fresh`` reports to the current bucket of every metric, so that every
window's counts change between refreshes (the factor cache must not be helped by identical sketches). Each
tree runs in its own subprocess (the ``before`` tree exported with ``git archive``); single-threaded BLAS.
Ours runs with the decoder service's reuse of its last decode (``DecoderService(reuse=True)``: warm starts of
``nnls`` / ``mle`` from the window's previous estimate, unchanged windows republished without decoding) and, on
the same warm factor cache, with ``reuse=False`` (every window decoded from scratch); then one refresh with no
report added since the previous one (every window unchanged: nothing is decoded). The baseline tree runs as it
is (a tree without ``reuse`` decodes from scratch), with ``reuse=False`` unless ``--before-reuse`` (then its warm
refreshes are the ones to compare with ours, warm cache and reuse).
Then, in ours, three more warm refreshes in which every decode that reused the sandwich variances of a grown
window (``FactorCache.variance_growth``, docs/math/estimators.md#sandwich-variances-of-a-grown-window) is decoded
again with the sandwich computed: the largest and median relative error of the reused standard errors is printed.
Printed: the wall and CPU time of each refresh (the machine is shared: CPU time is the figure to compare when
it is loaded) and, per family and candidate count, the summed decode wall seconds (``decode_seconds`` of the
published estimates) of the last refresh of each kind.

With ``--workers 1,2``: instead, ours only (reuse on), with each number of decoder worker processes
(``DecoderService(workers=N)``, ``ldpstream decode --workers N``; more than one needs the redis store), a cold
refresh then the warm ones, wall and CPU time including the worker processes' (their ``process_time`` over the
pass).

Usage: python bench/decoder_refresh.py [--before main] [--before-reuse] [--reports 20000] [--fresh 200] [--warm 3]
                                       [--redis redis://127.0.0.1:36379/4] [--stores memory,redis]
                                       [--candidate-methods project,nnls,mle,ls] [--workers 1,2]
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

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time, statistics
import numpy as np
from ldpstream.registry import Registry
from ldpstream.store.contract import ALL_TIME, PartitionBatch, SketchKey
from ldpstream.distributions import parse_distribution, sample_counts
from ldpstream.decoder.service import DecoderService

cfg = json.loads(sys.argv[1])
try:
    from ldpstream.estimators.dispatch import factor_cache
except ImportError:  # a tree without the factor cache
    factor_cache = None

SIZES = [64, 128, 256, 512, 1024]
DIRECT = ["project", "mle", "unbiased", "truncate"]
CANDIDATE = cfg["candidate_methods"]
EPS = [0.5, 1.0, 2.0, 4.0]
metrics = {}
for i in range(100):
    family = ["krr", "krappor", "orr", "orappor", "rappor"][i % 5]
    j = i // 5
    table = {"id": i + 1, "mechanism": family, "windows": ["all", "1d", "1h"], "bucket_seconds": 3600}
    if family == "krr":
        table.update(k=[8, 16, 32, 64, 256][j % 5], epsilon=EPS[j % 4], estimator=DIRECT[j % 4])
    elif family == "krappor":
        table.update(k=[8, 16, 32, 64, 128][j % 5], epsilon=EPS[j % 4], estimator=DIRECT[j % 4])
    else:
        S = SIZES[j % 5]
        table["candidates"] = [f"m{i}-value-{s}" for s in range(S)]
        table["estimator"] = CANDIDATE[(j // 5) % len(CANDIDATE)]
        if family == "orr":
            table.update(k=32, epsilon=2.0, cohorts=64)
        elif family == "orappor":
            table.update(k=128, epsilon=2.0, cohorts=16, hashes=1)
        else:
            table.update(k=128, hashes=2, cohorts=32, p=0.25, q=0.75, f=0.5)
    metrics[f"m{i:03d}_{family}"] = table
registry = Registry.from_dict({"metrics": metrics})

if cfg["store"] == "redis":
    import redis
    from ldpstream.store.redis_store import RedisSketchStore
    client = redis.Redis.from_url(cfg["redis"])
    prefix = cfg["prefix"]
    store = RedisSketchStore(client, prefix)
else:
    from ldpstream.store.memory_store import InMemorySketchStore
    store = InMemorySketchStore()

rng = np.random.default_rng(cfg["seed"])
NOW_BUCKET = 500_000
now = NOW_BUCKET * 3600 + 1800.0
tables = {}
dists = {}
for name, m in registry.metrics.items():
    mech = m.mechanism
    values = m.candidates if m.candidates is not None else None
    tables[name] = mech.value_table(list(values)) if values is not None else None
    size = len(values) if values is not None else (getattr(mech, "support", None) or mech.k)
    dists[name] = parse_distribution("zipf:1.1", size)
offset = {"next": 0}

def add(reports, buckets):
    # one partition batch per metric (as consumers write: a batch holds a bounded number of sketches)
    for name, m in registry.metrics.items():
        increments = {}
        for b in buckets:
            counts = sample_counts(dists[name], reports, rng)
            sketch = np.asarray(m.mechanism.simulate_sketch(counts, rng, table=tables[name]), dtype=np.int64)
            for bucket in (b, ALL_TIME):
                key = SketchKey(name, m.fingerprint, bucket)
                increments[key] = increments.get(key, 0) + sketch
        start = offset["next"]
        store.apply(PartitionBatch("bench-refresh", 0, None if start == 0 else start, start + 1, increments))
        offset["next"] = start + 1

t0 = time.perf_counter()
add(cfg["reports"], range(NOW_BUCKET - 25, NOW_BUCKET + 1))
setup = time.perf_counter() - t0
if cfg.get("workers", 1) > 1:  # worker processes, each with its own connection to the same Redis
    from ldpstream.config import RedisConfig
    service = DecoderService(registry, store, reuse=cfg["reuse"], workers=cfg["workers"],
                             store_factory=RedisConfig(cfg["redis"], prefix=prefix).store)
else:
    try:
        service = DecoderService(registry, store, reuse=cfg["reuse"])
    except TypeError:  # a tree without reuse (warm starts, unchanged windows republished)
        service = DecoderService(registry, store)
if hasattr(service, "factor_cache"):  # a tree whose decoder service owns its factor cache
    factor_cache = lambda: service.factor_cache

split = {}  # the last refresh's CPU seconds: the parent's, and each worker process's

def refresh():
    if cfg["fresh"]:
        add(cfg["fresh"], [NOW_BUCKET])
    t, c = time.perf_counter(), time.process_time()
    published = service.run_once(now)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    pool = getattr(service, "_pool", None)
    split["parent"], split["workers"] = cpu, ([] if pool is None else list(pool.last_cpu))
    split["wall"] = [] if pool is None else [*pool.last_wall, pool.last_pass_seconds]
    cpu += getattr(service, "last_worker_cpu_seconds", 0.0)  # the worker processes' CPU, if any
    assert not service.last_failed, service.last_failed
    parts = {}
    for p in published:
        m = registry.metrics[p.metric]
        S = len(m.candidates) if m.candidates is not None else 0
        key = f"{m.mechanism.name}" + (f" S={S}" if S else "")
        parts[key] = parts.get(key, 0.0) + p.decode_seconds
        meth = f"method {m.estimator}"
        parts[meth] = parts.get(meth, 0.0) + p.decode_seconds
    return (wall, cpu), parts, len(published)

out = {"setup": setup}
if factor_cache is not None:
    factor_cache().clear()
cold, parts_cold, n = refresh()
out.update(cold=cold, parts_cold=parts_cold, estimates=n)
warm = [refresh() for _ in range(cfg["warm"])]
out["warm"] = [w[0] for w in warm]
out["parts_warm"] = warm[-1][1]
if cfg.get("workers_only"):  # the --workers comparison: cold and warm refreshes only
    out["split"] = split
    if hasattr(service, "close"):
        service.close()
    if cfg["store"] == "redis":
        for key in client.scan_iter(match=prefix + "*", count=1000):
            client.delete(key)
    print(json.dumps(out))
    sys.exit(0)
if factor_cache is not None:
    out["cache_mb"] = factor_cache().nbytes / 2**20
    out["cache_hits"], out["cache_misses"] = factor_cache().hits, factor_cache().misses
    out["information_hits"] = getattr(factor_cache(), "information_hits", 0)
    out["information_misses"] = getattr(factor_cache(), "information_misses", 0)
    if cfg["reuse"]:
        service.reuse = False  # the same warm cache, every window decoded from scratch
        norep = [refresh() for _ in range(cfg["warm"])]
        out["noreuse"] = [w[0] for w in norep]
        out["parts_noreuse"] = norep[-1][1]
        # a refresh with no fresh report: every window's input is unchanged
        service.reuse = True
        refresh()
        cfg_fresh, cfg["fresh"] = cfg["fresh"], 0
        out["unchanged"] = refresh()[0]
        cfg["fresh"] = cfg_fresh
        service.reuse = False
    if hasattr(factor_cache(), "variance_growth"):
        # sandwich variances of grown windows reused (factor_cache): each against the exact sandwich on the same
        # reference, over three more warm refreshes
        import ldpstream.estimators.candidates as candidates_module
        real, errors, decodes = candidates_module._decode, [], [0]
        cache = factor_cache()

        def compared(**kw):
            est = real(**kw)
            decodes[0] += 1
            if est.info.get("se_sandwich") == "reused":
                held, cache.variance_growth = cache.variance_growth, 0.0
                exact = real(**kw)
                cache.variance_growth = held
                se, ref = np.asarray(est.std_errors), np.asarray(exact.std_errors)
                ok = ref > 0
                errors.append(float(np.max(np.abs(se[ok] / ref[ok] - 1.0))))
            return est

        service.reuse = cfg["reuse"]
        candidates_module._decode = compared
        for _ in range(3):
            refresh()
        candidates_module._decode = real
        service.reuse = False
        out["variance_reuse"] = [len(errors), decodes[0], max(errors, default=0.0), float(np.median(errors or [0.0]))]
    factor_cache().resize(0)
    off = [refresh() for _ in range(cfg["warm"])]
    out["off"] = [w[0] for w in off]
    out["parts_off"] = off[-1][1]
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


def compare_workers(args: argparse.Namespace, counts: list[int]) -> int:
    """Ours (reuse on) with each number of decoder worker processes, each in its own subprocess, one after the
    other on the same simulated store contents (same seed)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    print("# " + " ".join(["python", "bench/decoder_refresh.py", *sys.argv[1:]]))
    print(f"# working tree (HEAD {head}); single-threaded BLAS; {args.reports} reports per metric and bucket, "
          f"{args.fresh} fresh before each refresh; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M:%S')}; "
          f"load {os.getloadavg()[0]:.2f}")
    for store in args.stores.split(","):
        runs = {}
        for n in counts:
            if n > 1 and store != "redis":
                print(f"# store {store}: workers {n} skipped (worker processes need a store each can open: redis)")
                continue
            cfg = {"store": store, "redis": args.redis, "prefix": f"bench-refresh-{os.getpid()}-{n}-",
                   "seed": args.seed, "reports": args.reports, "fresh": args.fresh, "warm": args.warm,
                   "candidate_methods": args.candidate_methods.split(","), "reuse": True, "workers": n,
                   "workers_only": True}
            runs[n] = run(ROOT, cfg)
        print(f"\n## store: {store}; refresh of 100 metrics, wall s and CPU s (parent and workers), each refresh")
        print(f"{'':<26} {'cold':>13}  " + "  ".join(f"{'warm ' + str(i + 1):>13}" for i in range(args.warm)))
        for n, out in runs.items():
            label = f"ours, workers {n}" + (" (in process)" if n == 1 else "")
            cells = "  ".join(f"{w:6.2f} {c:6.2f}" for w, c in [out["cold"], *out["warm"]])
            print(f"{label:<26} {cells}")
        for n, out in runs.items():
            split = out["split"]
            print(f"# workers {n}, last warm refresh: CPU s of the parent {split['parent']:.2f}"
                  + (", of each worker " + ", ".join(f"{c:.2f}" for c in split["workers"]) if split["workers"] else "")
                  + ("; wall s of each worker's decode " + ", ".join(f"{c:.2f}" for c in split["wall"][:-1])
                     + f", of the parallel phase (sending, decoding, receiving) {split['wall'][-1]:.2f}"
                     if split["wall"] else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="main", help="git ref of the baseline tree")
    ap.add_argument("--reports", type=int, default=20_000, help="reports per metric and bucket")
    ap.add_argument("--fresh", type=int, default=200, help="reports added to the current bucket before a refresh")
    ap.add_argument("--warm", type=int, default=2, help="warm refreshes (and refreshes with the cache disabled)")
    ap.add_argument("--stores", default="memory,redis")
    ap.add_argument("--redis", default=os.environ.get("LDPSTREAM_REDIS", "redis://127.0.0.1:36379/4"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--candidate-methods", default="project,nnls,mle,ls",
                    help="estimators the candidate metrics cycle through")
    ap.add_argument("--before-reuse", action="store_true",
                    help="run the baseline tree with its own reuse of the last decode too (when it has one), so that "
                         "its warm refreshes compare with ours")
    ap.add_argument("--workers", default="",
                    help="instead: ours with these numbers of decoder worker processes side by side (e.g. 1,2; "
                         "more than 1 needs the redis store), cold then warm refreshes, wall and CPU including the "
                         "workers'")
    args = ap.parse_args(argv)
    if args.workers:
        return compare_workers(args, [int(n) for n in args.workers.split(",")])
    rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    print("# " + " ".join(["python", "bench/decoder_refresh.py", *(argv if argv is not None else sys.argv[1:])]))
    print(f"# before = {args.before} ({rev}), after = working tree (HEAD {head}); single-threaded BLAS; "
          f"{args.reports} reports per metric and bucket, {args.fresh} fresh before each refresh; "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')}; load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "before.tar"
        with archive.open("wb") as fh:
            subprocess.run(["git", "archive", args.before], cwd=ROOT, check=True, stdout=fh)
        tree = Path(tmp) / "before"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        for store in args.stores.split(","):
            cfg = {"store": store, "redis": args.redis, "prefix": f"bench-refresh-{os.getpid()}-", "seed": args.seed,
                   "reports": args.reports, "fresh": args.fresh, "warm": args.warm,
                   "candidate_methods": args.candidate_methods.split(","), "reuse": False}
            before = run(tree, {**cfg, "reuse": bool(args.before_reuse)})
            after = run(ROOT, {**cfg, "reuse": True})
            print(f"\n## store: {store} ({after['estimates']} estimates a refresh; setup {after['setup']:.1f} s)")
            def fmt(runs: list[list[float]]) -> str:
                return "  ".join(f"{w:6.2f} {c:6.2f}" for w, c in runs)

            print(f"{'refresh of 100 metrics':<34} wall s  CPU s (each refresh)")
            label = args.before + (", reuse" if args.before_reuse else "") + " (cold, then warm)"
            print(f"{label:<34} {fmt([before['cold'], *before['warm']])}")
            print(f"{'ours, cache and reuse disabled':<34} {fmt(after['off'])}")
            print(f"{'ours, cold cache (first refresh)':<34} {fmt([after['cold']])}")
            print(f"{'ours, warm cache, reuse disabled':<34} {fmt(after['noreuse'])}")
            print(f"{'ours, warm cache and reuse':<34} {fmt(after['warm'])}")
            print(f"{'ours, reuse, no report since':<34} {fmt([after['unchanged']])}")
            print(f"# cache: {after['cache_mb']:.0f} MB held, {after['cache_hits']} hits, "
                  f"{after['cache_misses']} misses; O-RR mle information variances reused "
                  f"{after['information_hits']}, computed {after['information_misses']}")
            if "variance_reuse" in after:
                used, decodes, worst, median = after["variance_reuse"]
                print(f"# sandwich variances of grown windows reused in {used} of {decodes} candidate decodes (3 warm "
                      f"refreshes); relative error of their standard errors against the exact sandwich: largest "
                      f"{worst:.2e}, median {median:.2e}")
            print(f"\n{'decode seconds by part':<22} {args.before:>8} {'off':>8} {'cold':>8} {'noreuse':>8} "
                  f"{'warm':>8}")
            parts = after["parts_warm"]
            assert isinstance(parts, dict)
            for key in sorted(parts, key=lambda x: (x.startswith("method"), x.split(" S=")[0],
                                                    int(x.split("S=")[1]) if "S=" in x else 0)):
                row = [before["parts_warm"], after["parts_off"], after["parts_cold"], after["parts_noreuse"], parts]
                print(f"{key:<22} " + " ".join(f"{r.get(key, 0.0):8.3f}" for r in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
