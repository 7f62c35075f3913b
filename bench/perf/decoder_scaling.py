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

Usage: python -m bench.perf.decoder_scaling [--sizes 1,10,100,1000] [--stores memory,redis] [--before main]
                                              [--reports 5000] [--fresh 100] [--warm 2] [--redis URL]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.harness import ROOT, before_after, before_tree, command_line, run_worker, stamp

#: The worker program run in each tree (by path: it imports that tree's ldpstream); its ``scaling_mix`` is the
#: registry of the given number of metrics.
WORKER = Path(__file__).with_name("decoder_worker.py")


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
    print("# " + command_line("bench.perf.decoder_scaling", argv))
    print(f"# {before_after(args.before)}; single-threaded BLAS; "
          f"{args.reports} reports per metric and bucket, {args.fresh} fresh before each warm refresh; {stamp()}",
          flush=True)
    print("# CPU s and wall s per refresh (warm: the mean of the warm refreshes); MiB read from Redis per refresh")
    header = (f"{'metrics':>7} {'store':<6} {'tree':<6} {'cold CPU':>9} {'warm CPU':>9} {'warm wall':>9} "
              f"{'unch. CPU':>9} {'cold MiB':>8} {'warm MiB':>8} {'unch. MiB':>9}")
    print(header, flush=True)
    with before_tree(args.before) as tree:
        for size in [int(s) for s in args.sizes.split(",")]:
            for store in args.stores.split(","):
                cfg = {"store": store, "redis": args.redis, "prefix": f"bench-scaling-{os.getpid()}-",
                       "seed": args.seed, "reports": args.reports, "fresh": args.fresh, "warm": args.warm,
                       "metrics": size, "mix": "scaling"}
                for label, path in ((args.before, tree), ("ours", ROOT)):
                    out = run_worker(path, WORKER, cfg)
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
