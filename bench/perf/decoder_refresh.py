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

Usage: python -m bench.perf.decoder_refresh [--before main] [--before-reuse] [--reports 20000] [--fresh 200] [--warm 3]
                                              [--redis redis://127.0.0.1:36379/4] [--stores memory,redis]
                                              [--candidate-methods project,nnls,mle,ls] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.harness import ROOT, before_after, before_tree, command_line, git_short, run_worker, stamp

#: The worker program run in each tree (by path: it imports that tree's ldpstream); its ``refresh_mix`` is the
#: registry of 100 metrics.
WORKER = Path(__file__).with_name("decoder_worker.py")


def compare_workers(args: argparse.Namespace, counts: list[int]) -> int:
    """Ours (reuse on) with each number of decoder worker processes, each in its own subprocess, one after the
    other on the same simulated store contents (same seed)."""
    print("# " + command_line("bench.perf.decoder_refresh"))
    print(f"# working tree (HEAD {git_short()}); single-threaded BLAS; {args.reports} reports per metric and bucket, "
          f"{args.fresh} fresh before each refresh; {os.cpu_count()} cores; {stamp()}")
    for store in args.stores.split(","):
        runs = {}
        for n in counts:
            if n > 1 and store != "redis":
                print(f"# store {store}: workers {n} skipped (worker processes need a store each can open: redis)")
                continue
            cfg = {"store": store, "redis": args.redis, "prefix": f"bench-refresh-{os.getpid()}-{n}-",
                   "seed": args.seed, "reports": args.reports, "fresh": args.fresh, "warm": args.warm,
                   "candidate_methods": args.candidate_methods.split(","), "mix": "refresh", "reuse": True,
                   "workers": n, "workers_only": True}
            runs[n] = run_worker(ROOT, WORKER, cfg)
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
    print("# " + command_line("bench.perf.decoder_refresh", argv))
    print(f"# {before_after(args.before)}; single-threaded BLAS; "
          f"{args.reports} reports per metric and bucket, {args.fresh} fresh before each refresh; {stamp()}")
    with before_tree(args.before) as tree:
        for store in args.stores.split(","):
            cfg = {"store": store, "redis": args.redis, "prefix": f"bench-refresh-{os.getpid()}-", "seed": args.seed,
                   "reports": args.reports, "fresh": args.fresh, "warm": args.warm,
                   "candidate_methods": args.candidate_methods.split(","), "mix": "refresh", "reuse": False}
            before = run_worker(tree, WORKER, {**cfg, "reuse": bool(args.before_reuse)})
            after = run_worker(ROOT, WORKER, {**cfg, "reuse": True})
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
