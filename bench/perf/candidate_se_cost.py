"""Decode time of the candidate decoders before/after a change, in one run (default: ``main`` against the
working tree): the cost of the exact sandwich standard errors.

Each source tree runs in its own subprocess (the ``before`` tree is exported with ``git archive`` to a
temporary directory); each decodes the same simulated sketches (the O-RAPPOR / O-RR set-ups of
bench/perf/orappor_decode.py: C = 64, k = 128, ε = 4, n = 10⁶, Zipf(1.1), h = 1) and reports the fastest of
``--repeat`` wall times (``perf_counter``, no tracemalloc) per method and S, side by side.

Usage: python -m bench.perf.candidate_se_cost [--before main] [--supports 256,1024,4096] [--methods ls,project]
                                                [--mechanisms orappor,orr] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.harness import ROOT, before_after, before_tree, command_line, print_beside, run_worker, stamp

#: The worker program run in each tree (by path: it imports that tree's ldpstream).
WORKER = Path(__file__).with_name("candidate_se_worker.py")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="main", help="git ref of the 'before' tree")
    ap.add_argument("--supports", default="256,1024,4096")
    ap.add_argument("--methods", default="ls,project")
    ap.add_argument("--mechanisms", default="orappor,orr")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    cfg = {"supports": [int(s) for s in args.supports.split(",")], "methods": args.methods.split(","),
           "mechanisms": args.mechanisms.split(","), "repeat": args.repeat}
    print("# " + command_line("bench.perf.candidate_se_cost", argv))
    print(f"# {before_after(args.before)}; single-threaded BLAS; fastest of {args.repeat}; {stamp()}")
    with before_tree(args.before) as tree:
        before = run_worker(tree, WORKER, cfg)
    after = run_worker(ROOT, WORKER, cfg)
    print_beside(before, after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
