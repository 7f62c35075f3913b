"""Decode time of the direct decoders with their published intervals, against the previous (Wald-only) decoder.

For k-RR and k-RAPPOR, k in {8, 32, 64, 128, 256}, ε = 1, n = 10^5, every method: the time of one decode plus
what the live decoder does with it (the clipped 95% interval and the Bonferroni flags). "previous" is the
decoder at commit 81108f7 (Wald intervals from the unbiased estimator's SE; MLE by EM), loaded from git in
the same process so both run on the same sketches under the same load. The last column is the time of a
refresh of 100 metrics at that k (100 × ours).

    python -m bench.perf.intervals_direct [--repeats 30]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.harness import ROOT
from ldpstream.estimators import estimate_krappor, estimate_krr
from ldpstream.estimators.direct import krr_channel
from ldpstream.mechanisms.rates import bit_rates

PREVIOUS = "81108f7"
METHODS = ("unbiased", "truncate", "project", "mle")


def previous_module() -> Any:
    """The direct-decoder module as it was at commit PREVIOUS, imported inside ldpstream.estimators."""
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{PREVIOUS}:ldpstream/estimators/direct.py"],
        check=True, capture_output=True, text=True,
    ).stdout
    mod = types.ModuleType("ldpstream.estimators._direct_previous")
    mod.__package__ = "ldpstream.estimators"
    exec(compile(src, f"{PREVIOUS}:direct.py", "exec"), mod.__dict__)  # our own file, from git
    return mod


def per_call(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args(argv)
    prev = previous_module()
    rng = np.random.default_rng(0)
    eps, n = args.epsilon, args.n
    print(f"# python -m bench.perf.intervals_direct --repeats {args.repeats} --epsilon {eps} --n {n}")
    print(f"{'decoder':8} {'k':>4} {'method':9} {'ours ms':>9} {'previous ms':>12} {'100 metrics s':>14}")
    for dec in ("krr", "krappor"):
        for k in (8, 32, 64, 128, 256):
            theta = 1 / (1 + k / 5)
            p = theta * (1 - theta) ** np.arange(k)
            p[k // 2 :] = 0
            p /= p.sum()
            if dec == "krr":
                sketch = rng.multinomial(n, p @ krr_channel(k, eps)).astype(float)
                ours_fn, prev_fn = estimate_krr, prev.estimate_krr
            else:
                q, ps = bit_rates(eps / 2)
                true = rng.multinomial(n, p)
                sketch = np.r_[n, rng.binomial(true, q) + rng.binomial(n - true, ps)].astype(float)
                ours_fn, prev_fn = estimate_krappor, prev.estimate_krappor
            for method in METHODS:
                def run(f: Callable[..., Any] = ours_fn, m: str = method, s: np.ndarray = sketch) -> None:
                    e = f(s, eps, m)
                    e.ci(0.95, clip=True)
                    e.significant(0.05, "bonferroni")

                def run_prev(f: Callable[..., Any] = prev_fn, m: str = method, s: np.ndarray = sketch) -> None:
                    e = f(s, eps, m)
                    e.ci(0.95, clip=True)
                    e.significant(0.05, "bonferroni")

                ours = per_call(run, args.repeats)
                before = per_call(run_prev, max(3, args.repeats // 10) if method == "mle" else args.repeats)
                print(f"{dec:8} {k:4d} {method:9} {ours * 1e3:9.3f} {before * 1e3:12.3f} {100 * ours:14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
