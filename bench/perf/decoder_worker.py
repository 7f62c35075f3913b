"""The worker of bench/perf/decoder_refresh.py and bench/perf/decoder_scaling.py: one process that fills a sketch
store with a mix of metrics and times decoder refreshes (``DecoderService.run_once``) in the tree it runs against.

Run by path (bench.harness.run_worker: ``PYTHONPATH=TREE python -P bench/perf/decoder_worker.py CONFIG``), so it
imports only the standard library, numpy, redis and that tree's ldpstream, and copes with a tree without the
factor cache or the service's reuse. CONFIG is a JSON object; its ``mix`` chooses the run:

- ``refresh`` (decoder_refresh.py): :func:`refresh_mix`, 100 metrics; cold, warm, no-reuse, unchanged and
  cache-disabled refreshes, or with ``workers_only`` cold and warm refreshes with ``workers`` decoder processes;
- ``scaling`` (decoder_scaling.py): :func:`scaling_mix` of ``metrics`` metrics; cold, warm and unchanged
  refreshes with the bytes read from Redis.

Printed: one JSON object, the timings the calling script formats.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ldpstream.decoder.service import DecoderService
from ldpstream.distributions import parse_distribution, sample_counts
from ldpstream.registry import Registry
from ldpstream.store.contract import ALL_TIME, PartitionBatch, SketchKey

FactorCacheGetter = Callable[[], Any]
#: A tree whose estimators keep one process-wide factor cache exposes it here; a newer tree's decoder service
#: owns its cache (read below), an older tree has none.
factor_cache: FactorCacheGetter | None = getattr(importlib.import_module("ldpstream.estimators.dispatch"),
                                                 "factor_cache", None)

FAMILIES = ["krr", "krappor", "orr", "orappor", "rappor"]
DIRECT = ["project", "mle", "unbiased", "truncate"]
CANDIDATE = ["project", "nnls", "mle", "ls"]
EPS = [0.5, 1.0, 2.0, 4.0]
#: The hour bucket of "now": the store holds the 26 buckets up to it.
NOW_BUCKET = 500_000


def _hashed(table: dict[str, Any], family: str, cohorts: int, orappor_cohorts: int, rappor_cohorts: int) -> None:
    """The parameters of an O-RR (k = 32), O-RAPPOR (k = 128, one hash) or RAPPOR (k = 128, two hashes, Google's
    p, q, f) metric, set in its registry ``table``."""
    if family == "orr":
        table.update(k=32, epsilon=2.0, cohorts=cohorts)
    elif family == "orappor":
        table.update(k=128, epsilon=2.0, cohorts=orappor_cohorts, hashes=1)
    else:
        table.update(k=128, hashes=2, cohorts=rappor_cohorts, p=0.25, q=0.75, f=0.5)


def _base(i: int, family: str) -> dict[str, Any]:
    """A metric's registry table before its mechanism's parameters: id, windows all/1d/1h over hourly buckets."""
    return {"id": i + 1, "mechanism": family, "windows": ["all", "1d", "1h"], "bucket_seconds": 3600}


def refresh_mix(candidate_methods: list[str]) -> dict[str, dict[str, Any]]:
    """decoder_refresh.py's 100 metrics, 20 of each family: k-RR k = 8…256 and k-RAPPOR k = 8…128 (ε 0.5…4,
    the direct methods in turn); O-RR (64 cohorts), O-RAPPOR (16), RAPPOR (32) with 64…1024 candidates, cycling
    over ``candidate_methods``."""
    metrics: dict[str, dict[str, Any]] = {}
    for i in range(100):
        family = FAMILIES[i % 5]
        j = i // 5
        table = _base(i, family)
        if family == "krr":
            table.update(k=[8, 16, 32, 64, 256][j % 5], epsilon=EPS[j % 4], estimator=DIRECT[j % 4])
        elif family == "krappor":
            table.update(k=[8, 16, 32, 64, 128][j % 5], epsilon=EPS[j % 4], estimator=DIRECT[j % 4])
        else:
            S = [64, 128, 256, 512, 1024][j % 5]
            table["candidates"] = [f"m{i}-value-{s}" for s in range(S)]
            table["estimator"] = candidate_methods[(j // 5) % len(candidate_methods)]
            _hashed(table, family, 64, 16, 32)
        metrics[f"m{i:03d}_{family}"] = table
    return metrics


def scaling_mix(count: int, S: int = 256, C: int = 64) -> dict[str, dict[str, Any]]:
    """decoder_scaling.py's ``count`` metrics cycling over the five families: k-RR and k-RAPPOR with k = S (ε 0.5…4,
    the direct methods in turn), the hashed ones with C cohorts and S candidates (the candidate methods in turn)."""
    metrics: dict[str, dict[str, Any]] = {}
    for i in range(count):
        family = FAMILIES[i % 5]
        j = i // 5
        table = _base(i, family)
        if family in ("krr", "krappor"):
            table.update(k=S, epsilon=EPS[j % 4], estimator=DIRECT[j % 4])
        else:
            table["candidates"] = [f"m{i}-value-{s}" for s in range(S)]
            table["estimator"] = CANDIDATE[j % 4]
            _hashed(table, family, C, C, C)
        metrics[f"m{i:04d}_{family}"] = table
    return metrics


class CountingSocket:
    """A socket that adds the bytes it receives to ``received[0]``."""

    def __init__(self, sock: Any, received: list[int]) -> None:
        self._sock = sock
        self._received = received

    def recv_into(self, buf: Any, *args: Any) -> int:
        n: int = self._sock.recv_into(buf, *args)
        self._received[0] += n
        return n

    def recv(self, size: int, *args: Any) -> bytes:
        data: bytes = self._sock.recv(size, *args)
        if not args:  # MSG_PEEK reads nothing off the socket
            self._received[0] += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class Bench:
    """A registry, its store filled with 26 hourly buckets of simulated sketches, and a decoder service on it."""

    def __init__(self, cfg: dict[str, Any], metrics: dict[str, dict[str, Any]], topic: str,
                 count_bytes: bool = False) -> None:
        self.cfg = cfg
        self.topic = topic
        self.registry = Registry.from_dict({"metrics": metrics})
        self.received = [0]
        self.client: Any = None
        self.prefix = str(cfg.get("prefix", ""))
        if cfg["store"] == "redis":
            import redis

            from ldpstream.store.redis_store import RedisSketchStore

            if count_bytes:
                received = self.received

                class CountingConnection(redis.connection.Connection):
                    def _connect(self) -> Any:
                        connect: Callable[[], Any] = super()._connect  # redis-py's, untyped
                        return CountingSocket(connect(), received)

                pool = redis.ConnectionPool.from_url(cfg["redis"], connection_class=CountingConnection)
                self.client = redis.Redis(connection_pool=pool)
            else:
                self.client = redis.Redis.from_url(cfg["redis"])
            self.store: Any = RedisSketchStore(self.client, self.prefix)
        else:
            from ldpstream.store.memory_store import InMemorySketchStore

            self.store = InMemorySketchStore()
        self.rng = np.random.default_rng(cfg["seed"])
        self.now = NOW_BUCKET * 3600 + 1800.0
        self.tables: dict[str, Any] = {}
        self.dists: dict[str, Any] = {}
        for name, m in self.registry.metrics.items():
            mech = m.mechanism
            values = m.candidates
            self.tables[name] = mech.value_table(list(values)) if values is not None else None
            size = len(values) if values is not None else (getattr(mech, "support", None) or mech.k)
            self.dists[name] = parse_distribution("zipf:1.1", size)
        self.next_offset = 0
        t0 = time.perf_counter()
        self.add(cfg["reports"], range(NOW_BUCKET - 25, NOW_BUCKET + 1))
        self.setup = time.perf_counter() - t0
        self.service: Any = None

    def add(self, reports: int, buckets: Iterable[int]) -> None:
        """``reports`` simulated reports per metric into each of ``buckets`` (and all time), one partition batch
        per metric, as consumers write (a batch holds a bounded number of sketches)."""
        for name, m in self.registry.metrics.items():
            increments: dict[SketchKey, Any] = {}
            for b in buckets:
                counts = sample_counts(self.dists[name], reports, self.rng)
                sketch = np.asarray(m.mechanism.simulate_sketch(counts, self.rng, table=self.tables[name]),
                                    dtype=np.int64)
                for bucket in (b, ALL_TIME):
                    key = SketchKey(name, m.fingerprint, bucket)
                    increments[key] = increments.get(key, 0) + sketch
            start = self.next_offset
            self.store.apply(PartitionBatch(self.topic, 0, None if start == 0 else start, start + 1, increments))
            self.next_offset = start + 1

    def refresh(self, fresh: int) -> dict[str, Any]:
        """One timed refresh after ``fresh`` reports per metric in the current bucket: wall and CPU seconds (the
        worker processes' CPU included), bytes received from Redis, estimates published, decode seconds per family
        and candidate count and per method, the parent's and each worker's CPU and wall seconds."""
        if fresh:
            self.add(fresh, [NOW_BUCKET])
        self.received[0] = 0
        t, c = time.perf_counter(), time.process_time()
        published = self.service.run_once(self.now)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        pool = getattr(self.service, "_pool", None)
        split = {"parent": cpu, "workers": [] if pool is None else list(pool.last_cpu),
                 "wall": [] if pool is None else [*pool.last_wall, pool.last_pass_seconds]}
        cpu += getattr(self.service, "last_worker_cpu_seconds", 0.0)  # the worker processes' CPU, if any
        assert not self.service.last_failed, self.service.last_failed
        parts: dict[str, float] = {}
        for p in published:
            m = self.registry.metrics[p.metric]
            S = len(m.candidates) if m.candidates is not None else 0
            key = f"{m.mechanism.name}" + (f" S={S}" if S else "")
            parts[key] = parts.get(key, 0.0) + p.decode_seconds
            meth = f"method {m.estimator}"
            parts[meth] = parts.get(meth, 0.0) + p.decode_seconds
        return {"wall": wall, "cpu": cpu, "bytes": self.received[0], "estimates": len(published), "parts": parts,
                "split": split}

    def clean(self) -> None:
        """Delete the run's keys from Redis (nothing for the memory store)."""
        if self.client is not None:
            for key in self.client.scan_iter(match=self.prefix + "*", count=1000):
                self.client.delete(key)


def _pair(r: dict[str, Any]) -> list[float]:
    return [r["wall"], r["cpu"]]


def run_refresh(cfg: dict[str, Any]) -> dict[str, Any]:
    """decoder_refresh.py's refreshes of :func:`refresh_mix` (its docstring says which)."""
    bench = Bench(cfg, refresh_mix(cfg["candidate_methods"]), "bench-refresh")
    if cfg.get("workers", 1) > 1:  # worker processes, each with its own connection to the same Redis
        from ldpstream.config import RedisConfig

        bench.service = DecoderService(bench.registry, bench.store, reuse=cfg["reuse"], workers=cfg["workers"],
                                       store_factory=RedisConfig(cfg["redis"], prefix=bench.prefix).store)
    else:
        try:
            bench.service = DecoderService(bench.registry, bench.store, reuse=cfg["reuse"])
        except TypeError:  # a tree without reuse (warm starts, unchanged windows republished)
            bench.service = DecoderService(bench.registry, bench.store)
    service = bench.service
    global factor_cache
    if hasattr(service, "factor_cache"):  # a tree whose decoder service owns its factor cache
        factor_cache = lambda: service.factor_cache  # noqa: E731
    out: dict[str, Any] = {"setup": bench.setup}
    if factor_cache is not None:
        factor_cache().clear()
    cold = bench.refresh(cfg["fresh"])
    out.update(cold=_pair(cold), parts_cold=cold["parts"], estimates=cold["estimates"])
    warm = [bench.refresh(cfg["fresh"]) for _ in range(cfg["warm"])]
    out["warm"] = [_pair(w) for w in warm]
    out["parts_warm"] = warm[-1]["parts"]
    if cfg.get("workers_only"):  # the --workers comparison: cold and warm refreshes only
        out["split"] = warm[-1]["split"]
        if hasattr(service, "close"):
            service.close()
        bench.clean()
        return out
    if factor_cache is not None:
        cache = factor_cache()
        out["cache_mb"] = cache.nbytes / 2**20
        out["cache_hits"], out["cache_misses"] = cache.hits, cache.misses
        out["information_hits"] = getattr(cache, "information_hits", 0)
        out["information_misses"] = getattr(cache, "information_misses", 0)
        if cfg["reuse"]:
            service.reuse = False  # the same warm cache, every window decoded from scratch
            norep = [bench.refresh(cfg["fresh"]) for _ in range(cfg["warm"])]
            out["noreuse"] = [_pair(w) for w in norep]
            out["parts_noreuse"] = norep[-1]["parts"]
            # a refresh with no fresh report: every window's input is unchanged
            service.reuse = True
            bench.refresh(cfg["fresh"])
            out["unchanged"] = _pair(bench.refresh(0))
            service.reuse = False
        if hasattr(cache, "variance_growth"):
            out["variance_reuse"] = _variance_reuse(bench, cache)
        cache.resize(0)
        off = [bench.refresh(cfg["fresh"]) for _ in range(cfg["warm"])]
        out["off"] = [_pair(w) for w in off]
        out["parts_off"] = off[-1]["parts"]
    bench.clean()
    return out


def _variance_reuse(bench: Bench, cache: Any) -> list[float]:
    """Three more warm refreshes in which every candidate decode that reused the sandwich variances of a grown
    window is decoded again with the exact sandwich: [decodes that reused, decodes, largest and median relative
    error of the reused standard errors]."""
    import ldpstream.estimators.candidates as candidates_module

    real = candidates_module._decode
    errors: list[float] = []
    decodes = [0]

    def compared(**kw: Any) -> Any:
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

    bench.service.reuse = bench.cfg["reuse"]
    setattr(candidates_module, "_decode", compared)  # noqa: B010 (a patch mypy would refuse as an assignment)
    for _ in range(3):
        bench.refresh(bench.cfg["fresh"])
    setattr(candidates_module, "_decode", real)  # noqa: B010
    bench.service.reuse = False
    return [len(errors), decodes[0], max(errors, default=0.0), float(np.median(errors or [0.0]))]


def run_scaling(cfg: dict[str, Any]) -> dict[str, Any]:
    """decoder_scaling.py's refreshes of :func:`scaling_mix`: cold, ``warm`` warm, and (a tree with reuse) one with
    no report since the last; each with wall and CPU seconds, bytes read from Redis and estimates."""
    bench = Bench(cfg, scaling_mix(cfg["metrics"]), "bench-scaling", count_bytes=True)
    try:
        bench.service = DecoderService(bench.registry, bench.store, reuse=True)
        has_reuse = True
    except TypeError:
        bench.service = DecoderService(bench.registry, bench.store)
        has_reuse = False

    def measured(fresh: int) -> dict[str, Any]:
        r = bench.refresh(fresh)
        return {key: r[key] for key in ("wall", "cpu", "bytes", "estimates")}

    if factor_cache is not None:
        factor_cache().clear()
    out: dict[str, Any] = {"setup": bench.setup, "cold": measured(0)}
    out["warm"] = [measured(cfg["fresh"]) for _ in range(cfg["warm"])]
    if has_reuse:
        out["unchanged"] = measured(0)
    bench.clean()
    return out


def main(argv: list[str]) -> int:
    """Run the refreshes CONFIG (``argv[0]``, JSON) asks for and print their timings as one JSON line."""
    cfg = json.loads(argv[0])
    out = run_scaling(cfg) if cfg.get("mix") == "scaling" else run_refresh(cfg)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
