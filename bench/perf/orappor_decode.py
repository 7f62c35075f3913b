"""O-RAPPOR decoding at scale: S = 4096 candidates, C = 64 cohorts, k = 128 bits (target < 2 s).

Builds the open-alphabet O-RAPPOR of ldpstream (Google MD5 Bloom bits, h hashes), its sparse
(C·k × S) design matrix, one simulated sketch of n reports from a Zipf(1.1) population over the
candidates, then times each candidate decoder of :mod:`ldpstream.estimators.candidates` and records its
peak traced memory (``tracemalloc``, numpy allocations included) and the process's peak RSS.
Also prints the ℓ1 error against the sample's empirical distribution, the ground truth.

Wall time (``perf_counter``) and CPU time of the process (``process_time``, all threads: with a
multi-threaded BLAS it can exceed wall time) are both reported, so that load from other jobs on a
shared machine (wall ≫ CPU/threads) can be told apart from cost. ``--mechanism orr`` benchmarks O-RR
(k symbols) on the same population instead.

Usage: python -m bench.perf.orappor_decode [--methods project,nnls,ls,mle] [--epsilon 4] [--n 1000000]
                                      [--mechanism orappor|orr] [--repeat 1]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc

import numpy as np

from bench.harness import command_line, timed
from ldpstream.distributions import empirical_distribution, parse_distribution, sample_counts
from ldpstream.estimators.candidates import decode_orappor, decode_orr
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.orr import ORR
from ldpstream.simulation.losses import l1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--support", type=int, default=4096)
    ap.add_argument("--cohorts", type=int, default=64)
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--hashes", type=int, default=1)
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="project,nnls,ls,mle")
    ap.add_argument("--other", action="store_true", help="add the decoder's 'other' term")
    ap.add_argument("--mechanism", choices=("orappor", "orr"), default="orappor")
    ap.add_argument("--repeat", type=int, default=1, help="decode this many times, report the fastest")
    args = ap.parse_args(argv)
    print("# " + command_line("bench.perf.orappor_decode", argv))
    S, C, k = args.support, args.cohorts, args.k
    mech: ORappor | ORR
    if args.mechanism == "orr":
        mech = ORR(k=k, epsilon=args.epsilon, cohorts=C)
    else:
        mech = ORappor(k=k, epsilon=args.epsilon, cohorts=C, hashes=args.hashes)
    cands = [f"s{i}" for i in range(S)]
    t0 = time.perf_counter()
    table = mech.value_table(cands)
    t_hash = time.perf_counter() - t0
    t0 = time.perf_counter()
    X = mech.design_matrix(table)
    t_design = time.perf_counter() - t0
    rng = np.random.default_rng(args.seed)
    p = parse_distribution("zipf:1.1", S)
    counts = sample_counts(p, args.n, rng)
    emp = empirical_distribution(counts)
    sketch = mech.simulate_sketch(counts, rng, table=table)
    print(f"# {args.mechanism} S={S} C={C} k={k} h={args.hashes} ε={args.epsilon} n={args.n}; "
          f"design {X.shape[0]}x{X.shape[1]} "
          f"sparse, nnz={X.nnz} ({X.data.nbytes + X.indices.nbytes + X.indptr.nbytes:,} bytes); "
          f"hashing {t_hash:.2f} s, design {t_design:.3f} s (not counted below)")
    head = (f"{'method':<8} {'wall s':>8} {'cpu s':>8} {'< 2 s':>6} {'peak traced MB':>15} {'ℓ1 vs empirical':>16} "
            f"{'iters':>6}")
    print(head)
    print("-" * len(head))
    for method in args.methods.split(","):
        secs = cpu = peak = float("inf")
        for _ in range(max(args.repeat, 1)):
            tracemalloc.start()
            with timed() as clock:
                if mech.decoder_family == "candidates_symbol":
                    est = decode_orr(sketch, X, mech.epsilon, method, other=args.other)
                else:
                    est = decode_orappor(sketch, X, mech.q_star, mech.p_star, method,  # type: ignore[union-attr]
                                         other=args.other)
            secs = min(secs, clock.wall)
            cpu = min(cpu, clock.cpu)
            _, pk = tracemalloc.get_traced_memory()
            peak = min(peak, pk)
            tracemalloc.stop()
        err = float(l1(est.frequencies, emp))
        iters = est.info.get("n_iter", "-")
        ok = "yes" if secs < 2 else "NO"
        print(f"{method:<8} {secs:>8.3f} {cpu:>8.3f} {ok:>6} {peak / 2**20:>15.1f} {err:>16.4f} {iters!s:>6}",
              flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process peak RSS {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
