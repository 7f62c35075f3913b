"""OLH beside pure-LDP's on the same clients (docs/math/mechanisms.md#olh).

Each trial draws n clients' values from Zipf(1) over the 100 strings of ``bench/data/urls100.txt`` and runs, on
those values: ours (``OLH.optimal(ε)``: k = round(e^ε) + 1, 4096 hash functions as cohorts; encode, fold, decode
``ls`` and ``project`` against the list), pure-LDP's OLH (``LHClient``/``LHServer`` with ``use_olh``: a fresh
xxhash seed per user, the support counted per report and candidate) and pure-LDP's fast OLH (``FastLHClient`` /
``FastLHServer``: 4096 hash functions, as ours). Printed per ε: n·ℓ2²/d of the frequencies (mean over trials, its
SE) beside the formula 4e^ε/(e^ε − 1)² (Wang et al. 2017's variance at g = e^ε + 1, the f terms left out), the CPU
seconds of each side (client encodes and server fold+decode together), and with the 10 most
frequent strings off the candidate list: ours' error and interval coverage of the 90 listed (pure-LDP's support
counts are per candidate, so its figure is the complete list's).

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.accuracy.olh`` (≈ 6 min; ``pip install -e '.[bench]'``)
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.estimators.dispatch import estimate
from ldpstream.mechanisms import OLH

DATA = Path(__file__).resolve().parents[1] / "data" / "urls100.txt"


def _local_hashing() -> Any:
    """pure-LDP's local hashing module without its package ``__init__`` (which imports scikit-learn)."""
    import pure_ldp

    name = "pure_ldp.frequency_oracles"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.__path__ = [os.path.join(os.path.dirname(pure_ldp.__file__), "frequency_oracles")]
        sys.modules[name] = stub
    module = importlib.import_module(f"{name}.local_hashing")
    import xxhash

    # pure-LDP hashes str(index); xxhash >= 3 takes bytes only: the same digest of the UTF-8 bytes
    shim = types.SimpleNamespace(xxh32=lambda data, seed=0: xxhash.xxh32(
        data.encode() if isinstance(data, str) else data, seed=seed))
    for sub in ("lh_client", "lh_server", "fast_lh_client", "fast_lh_server"):
        importlib.import_module(f"{name}.local_hashing.{sub}").xxhash = shim  # type: ignore[attr-defined]
    return module


def pure_ldp_run(eps: float, d: int, values: np.ndarray, fast_hashes: int | None) -> tuple[np.ndarray, float]:
    """pure-LDP's estimate of the d frequencies and its CPU seconds (client and server)."""
    lh = _local_hashing()
    ident = lambda x: x  # noqa: E731
    start = time.process_time()
    if fast_hashes is None:
        client, server = lh.LHClient(eps, d, use_olh=True, index_mapper=ident), lh.LHServer(eps, d, use_olh=True,
                                                                                           index_mapper=ident)
    else:
        server = lh.FastLHServer(eps, d, fast_hashes, use_olh=True, index_mapper=ident)
        client = lh.FastLHClient(eps, d, fast_hashes, use_olh=True, index_mapper=ident)
    for v in values.tolist():
        server.aggregate(client.privatise(v))
    est = np.array([server.estimate(i, suppress_warnings=True) for i in range(d)]) / len(values)
    return est, time.process_time() - start


def ours_run(mech: OLH, strings: list[str], values: np.ndarray, listed: list[int], rng: np.random.Generator,
             method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Our estimate of the listed strings, its 95% interval and the CPU seconds (encode, fold, decode)."""
    start = time.process_time()
    cohorts, symbols = mech.encode_values([strings[i] for i in values.tolist()], rng)
    sketch = mech.sketch(cohorts, symbols)
    est = estimate(sketch, mech, method, candidates=[strings[i] for i in listed])
    low, high = est.ci(0.95, clip=True)
    return np.asarray(est.frequencies), low, high, time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--epsilons", default="1,2,4.39")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--hashes", type=int, default=4096)
    ap.add_argument("--unlisted", type=int, default=10)
    args = ap.parse_args()
    strings = DATA.read_text().split()
    d = len(strings)
    f = 1.0 / np.arange(1, d + 1)
    f /= f.sum()
    print(f"python -m bench.accuracy.olh --n {args.n} --epsilons {args.epsilons} --trials {args.trials} "
          f"--hashes {args.hashes} --unlisted {args.unlisted}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'ε':>5} {'decoder':<34} {'n·ℓ2²/d':>9} {'± se':>7} {'formula':>8} {'cover95':>8} {'CPU s':>7}")
    for eps in (float(e) for e in args.epsilons.split(",")):
        mech = OLH.optimal(eps, cohorts=args.hashes)
        e = math.exp(eps)
        formula = 4 * e / (e - 1) ** 2
        listed_all = list(range(d))
        listed_part = listed_all[args.unlisted:]
        rows: dict[str, list[tuple[float, float, float]]] = {}
        for trial in range(args.trials):
            rng = np.random.default_rng([trial, int(eps * 100)])
            values = rng.choice(d, size=args.n, p=f)
            truth = np.bincount(values, minlength=d) / args.n
            cases = [(f"ours ls (C = {args.hashes})", "ls", listed_all),
                     (f"ours project (C = {args.hashes})", "project", listed_all),
                     (f"ours ls, top {args.unlisted} unlisted", "ls", listed_part),
                     ("pure-LDP OLH (seed per user)", None, listed_all),
                     (f"pure-LDP fast OLH ({args.hashes} hashes)", "fast", listed_all)]
            for name, method, idx in cases:
                if method in ("ls", "project"):
                    est, low, high, seconds = ours_run(mech, strings, values, idx, rng, str(method))
                    cover = float(np.mean((low <= truth[idx]) & (truth[idx] <= high)))
                else:
                    est, seconds = pure_ldp_run(eps, d, values, args.hashes if method == "fast" else None)
                    cover = math.nan
                err = float(args.n * np.mean((est - truth[idx]) ** 2))
                rows.setdefault(name, []).append((err, cover, seconds))
        for name, vals in rows.items():
            arr = np.array(vals)
            se = arr[:, 0].std(ddof=1) / math.sqrt(len(arr)) if len(arr) > 1 else math.nan
            shown = "" if math.isnan(arr[0, 1]) else f"{arr[:, 1].mean():.3f}"
            print(f"{eps:>5} {name:<34} {arr[:, 0].mean():>9.4f} {se:>7.4f} {formula:>8.4f} {shown:>8} "
                  f"{arr[:, 2].mean():>7.2f}", flush=True)


if __name__ == "__main__":
    main()
