"""`ldpstream rappor decode` (detection, the default) on Google-format files with 4,096 candidates: wall time,
CPU time and peak memory of the whole command (start-up included), ours beside another revision's in the same
run, and the detections of each (true and false, and whether the two trees detect the same strings).

Case (the shape of Google's large case): 128 bits, h = 2, 64 cohorts, p = .25, q = .75, f = .5, 10^6 clients
whose values follow Zipf(1) over 200 strings, 4,096 candidates (the 200 and 3,896 absent ones). The counts are
simulated exactly in distribution (:meth:`Rappor.simulate_sketch`) and written as Google's ``counts.csv``, with
``map.csv`` and ``params.csv``; each tree's command runs in its own process, timed by ``os.wait4``.

Usage: python -m bench.perf.rappor_decode_large --before 8a4b637 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from bench.harness import ROOT, before_after, before_tree, command_line, stamp
from ldpstream.interop.rappor.counts import write_counts
from ldpstream.interop.rappor.maps import write_map
from ldpstream.mechanisms import Rappor

K, HASHES, COHORTS, CLIENTS, TRUE_STRINGS = 128, 2, 64, 1_000_000, 200


def write_case(directory: Path, seed: int, candidates: int) -> None:
    """params.csv, counts.csv and map.csv of one simulated collection."""
    mech = Rappor(K, HASHES, COHORTS, 0.25, 0.75, 0.5)
    names = [f"true-{i}" for i in range(TRUE_STRINGS)] + [f"absent-{i}" for i in range(candidates - TRUE_STRINGS)]
    table = mech.bloom_table(names)
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, TRUE_STRINGS + 1)
    counts = np.zeros(candidates, dtype=np.int64)
    counts[:TRUE_STRINGS] = rng.multinomial(CLIENTS, zipf / zipf.sum())
    (directory / "params.csv").write_text(f"k,h,m,p,q,f\n{K},{HASHES},{COHORTS},0.25,0.75,0.5\n")
    write_counts(directory / "counts.csv", mech.simulate_sketch(counts, rng, table))
    write_map(directory / "map.csv", names, table, K)


def run_decode(tree: Path, case: Path, out: Path) -> dict[str, float]:
    """One ``python -m ldpstream rappor decode`` in ``tree``: wall s, CPU s (user + system) and peak RSS MB."""
    argv = [sys.executable, "-m", "ldpstream", "rappor", "decode", "--params", str(case / "params.csv"),
            "--counts", str(case / "counts.csv"), "--map", str(case / "map.csv"), "--out", str(out)]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"decode failed in {tree}:\n{stderr[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024}


def detect_cpu(case: Path) -> float:
    """CPU seconds of the working tree's :func:`detect` alone on the case's files (read beforehand)."""
    from ldpstream.estimators.detection import detect
    from ldpstream.interop.rappor.counts import read_counts
    from ldpstream.interop.rappor.maps import read_map
    from ldpstream.interop.rappor.params import read_params

    params = read_params(case / "params.csv")
    counts, design = read_counts(case / "counts.csv", params), read_map(case / "map.csv", params).matrix
    start = time.process_time()
    detect(counts, design, params.q_star, params.p_star)
    return time.process_time() - start


def detected(results: Path) -> list[str]:
    with results.open(newline="") as fh:
        return [row["string"] for row in csv.DictReader(fh)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default=None, help="revision to run beside the working tree")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--candidates", type=int, default=4096)
    args = ap.parse_args()
    print(f"# {command_line('bench.perf.rappor_decode_large')}")
    print(f"# {stamp()}; {before_after(args.before) if args.before else 'working tree only'}")
    print(f"# {K} bits, h = {HASHES}, {COHORTS} cohorts, {CLIENTS} clients, Zipf(1) over {TRUE_STRINGS} strings, "
          f"{args.candidates} candidates; whole command, default BLAS threads")
    print("# same: whether both trees detect the same strings; CPU s: user + system of the whole command")
    print(f"{'seed':>4} {'tree':<7} {'wall s':>7} {'CPU s':>7} {'RSS MB':>7} {'true':>5} {'false':>5} {'same':>5}")
    with tempfile.TemporaryDirectory() as tmp, (before_tree(args.before) if args.before else nullcontext()) as old:
        sums: dict[str, list[dict[str, float]]] = {"before": [], "ours": []}
        for seed in args.seeds:
            case = Path(tmp) / f"case{seed}"
            case.mkdir()
            write_case(case, seed, args.candidates)
            found: dict[str, list[str]] = {}
            trees = ([("before", old)] if old is not None else []) + [("ours", ROOT)]
            for name, tree in trees:
                out = case / f"results-{name}.csv"
                figures = run_decode(tree, case, out)
                found[name] = detected(out)
                n_true = sum(s.startswith("true-") for s in found[name])
                figures["true"], figures["false"] = n_true, len(found[name]) - n_true
                sums[name].append(figures)
                same = "" if name == "before" or "before" not in found else (
                    "yes" if set(found["before"]) == set(found["ours"]) else
                    f"{len(set(found['before']) ^ set(found['ours']))} diff")
                print(f"{seed:>4} {name:<7} {figures['wall']:>7.2f} {figures['cpu']:>7.2f} {figures['rss']:>7.0f} "
                      f"{n_true:>5} {figures['false']:>5} {same:>5}", flush=True)
            print(f"{seed:>4} ours: detect() alone {detect_cpu(case):.2f} CPU s (files read beforehand)")
        for name, runs in sums.items():
            if runs:
                mean = {key: float(np.mean([r[key] for r in runs])) for key in runs[0]}
                print(f"mean {name:<7} {mean['wall']:>7.2f} {mean['cpu']:>7.2f} {mean['rss']:>7.0f} "
                      f"{mean['true']:>5.1f} {mean['false']:>5.1f}")


if __name__ == "__main__":
    main()
