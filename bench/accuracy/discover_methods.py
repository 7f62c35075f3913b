"""Discovery by splitting the users (``--method prefix``) beside the n-gram method (``--method ngram``) and the
perfect dictionary, on the same settings (docs/math/dictionary.md#prefix-extension).

For each string list (``bench/data/urls100.txt``, the paper-like URLs; ``bench/data/heldout100.txt``, 100 strings of
6–15 characters) and seed: ``ldpstream discover --simulate --strings FILE --dist zipf:1 --n N --epsilon 4.39
--length 16 --seed S --json`` with each method (both at ``--alpha 0.10``), run as a child process; printed:
true and false positives, the false share, the perfect dictionary's count (``--compare``, prefix), the child's
CPU seconds and wall seconds; then the range over seeds.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.accuracy.discover_methods --seeds 0 1 2 3 4`` (≈ 15 min)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from bench.harness import DATA

LISTS = {"urls100": DATA / "urls100.txt", "heldout100": DATA / "heldout100.txt"}
METHODS = {"prefix": ["--method", "prefix", "--compare"], "ngram": ["--method", "ngram"]}


def run(path: str, seed: int, n: int, extra: list[str]) -> tuple[dict[str, object], float, float]:
    """One ``ldpstream discover`` child: its JSON, CPU seconds (user + system) and wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "ldpstream", "discover", "--simulate", "--strings", path, "--dist",
                          "zipf:1", "--n", str(n), "--epsilon", "4.39", "--length", "16", "--seed", str(seed),
                          "--json", *extra], check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(out), cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--lists", nargs="+", default=list(LISTS))
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    args = ap.parse_args()
    print(f"python -m bench.accuracy.discover_methods --seeds {' '.join(map(str, args.seeds))} --n {args.n}; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'list':<11} {'method':<14} {'seed':>4} {'true':>5} {'false':>6} {'share':>6} {'perfect':>8} "
          f"{'CPU s':>7} {'wall s':>7}")
    summary: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
    for name in args.lists:
        for method in args.methods:
            for seed in args.seeds:
                data, cpu, wall = run(str(LISTS[name]), seed, args.n, METHODS[method])
                true, false = int(data["true_positives"]), int(data["false_positives"])  # type: ignore[call-overload]
                perfect = data.get("perfect_dictionary")
                count = "" if not isinstance(perfect, dict) else str(perfect.get("true_positives", ""))
                share = false / (true + false) if true + false else 0.0
                summary.setdefault((name, method), []).append((true, false, cpu))
                print(f"{name:<11} {method:<14} {seed:>4} {true:>5} {false:>6} {share:>6.3f} {count:>8} "
                      f"{cpu:>7.1f} {wall:>7.1f}", flush=True)
    print("\nranges over seeds: true, false, CPU s")
    for (name, method), rows in summary.items():
        t, f, c = zip(*rows, strict=True)
        print(f"{name:<11} {method:<14} true {min(t)}–{max(t)}  false {min(f)}–{max(f)}  "
              f"mean false share {sum(fi / max(ti + fi, 1) for ti, fi in zip(t, f, strict=True)) / len(t):.3f}  "
              f"CPU {min(c):.0f}–{max(c):.0f}")


if __name__ == "__main__":
    main()
