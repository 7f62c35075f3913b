"""The optimal mechanisms on the grid k ∈ {2, 8, 64, 256, 4096} × ε ∈ {0.5, 1, 2, 4, 8}, with
pure-LDP's and multi-freq-ldpy's implementations in the same run.

Accuracy. For each (k, ε): the measured n·ℓ2² (mean over trials ± its standard error, n·‖p̂ − p‖² against the
true p, a geometric distribution with mean ≈ k/5) of the *unbiased* estimate of k-RR, k-RAPPOR, OUE, subset
selection (its risk-minimizing d) and Hadamard response, sketches drawn exactly in law by ``simulate_sketch``
(n = 100,000 per trial; trials = clip(40,000/k, 10, 4,000), so the relative noise of each mean is 2–3 %); the
subset-selection risk formula ``unary_risk − Σp²`` (docs/math/estimators.md#the-risk-of-the-unary-family);
``tune(..., loss="l2sq", decoder="unbiased")``'s choice among the closed-alphabet mechanisms (the grids of O-RR,
O-RAPPOR, O-OUE, CMS and HCMS too where k ≤ 256; at k = 4096 their model would invert 4096² Gram matrices per grid
point), measured the same way; and the two ratios the issue asks for: chosen / best measured and chosen / SS
formula.

Same settings, other implementations (installed packages, per-item APIs, so on n_ext = 2,000 items × 3
trials: a noisier mean, its ± printed): pure-LDP's DE (k-RR), UE (symmetric = k-RAPPOR, and OUE) and Hadamard
response (``HadamardResponseServer``: Acharya et al.'s high-privacy HR at ε ≤ 1, their general HR above);
multi-freq-ldpy's GRR, OUE and SS clients, decoded with their own (q, p) by the unclipped inversion (their
``MI`` truncates and renormalizes, which is not the unbiased estimate).

Speed. At k = 4096, ε = 1: ldpstream's batch encode (seeded generator, chunks) + sketch + unbiased estimate per
item, against pure-LDP's OUE and HR and multi-freq-ldpy's SS (numba; compiled before timing) per item; each
side run ``--repeats`` times, alternating, medians reported with the range of the paired ratios (the machine
is shared: a median of alternating runs is what a change in load disturbs least).

Usage: python -m bench.accuracy.optimal_grid [--ks 2 8 64 256 4096] [--epsilons 0.5 1 2 4 8] [--no-external]
       [--speed-only]
       [--repeats 7]
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import time
import types
from typing import Any

import numpy as np

from ldpstream.estimators.dispatch import estimate
from ldpstream.mechanisms import KRR, OUE, HadamardResponse, KRappor, SubsetSelection
from ldpstream.mechanisms.base import Mechanism
from ldpstream.mechanisms.rates import unary_risk
from ldpstream.simulation.recommend import tune
from ldpstream.simulation.scenarios import build_setup

DIRECT = ("krr", "krappor", "oue", "ss", "hr")
HASHED = ("orr", "orappor", "ooue", "cms", "hcms")


def distribution(k: int) -> np.ndarray:
    theta = 1 / (1 + k / 5)
    p = theta * (1 - theta) ** np.arange(k)
    normalized: np.ndarray = p / p.sum()
    return normalized


def mechanism(name: str, k: int, eps: float) -> Mechanism:
    cls = {"krr": KRR, "krappor": KRappor, "oue": OUE, "ss": SubsetSelection, "hr": HadamardResponse}[name]
    mech: Mechanism = cls(k, eps)
    return mech


def measure(decode: Any, simulate: Any, p: np.ndarray, n: int, trials: int, rng: np.random.Generator
            ) -> tuple[float, float]:
    """Mean and standard error of n·‖p̂ − p‖² over ``trials`` sketches of n clients."""
    vals = []
    for _ in range(trials):
        counts = rng.multinomial(n, p)
        vals.append(n * float(np.sum((decode(simulate(counts)) - p) ** 2)))
    arr = np.asarray(vals)
    return float(arr.mean()), float(arr.std(ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan


def ours(name: str, k: int, eps: float, p: np.ndarray, n: int, trials: int, seed: int) -> tuple[float, float]:
    m = mechanism(name, k, eps)
    rng = np.random.default_rng([seed, k, int(eps * 10), DIRECT.index(name)])
    return measure(lambda sk: estimate(sk, m, "unbiased").frequencies, lambda c: m.simulate_sketch(c, rng),
                   p, n, trials, rng)


def tuned(k: int, eps: float, p: np.ndarray, n: int, trials: int,
          seed: int) -> tuple[str, dict[str, Any], float, float]:
    fams = (*DIRECT, *HASHED) if k <= 256 else DIRECT
    res = tune(eps, k, n, p, closed=True, decoder="unbiased", trials=0, loss="l2sq", mechanisms=fams)
    rec = res.recommended
    if rec.mechanism in DIRECT:
        mean, se = ours(rec.mechanism, k, eps, p, n, trials, seed)
        return rec.mechanism, rec.params, mean, se
    setup = build_setup(rec.mechanism, eps, k, closed=True, k=rec.params["k"], cohorts=rec.params["cohorts"],
                        hashes=rec.params.get("hashes"))
    rng = np.random.default_rng([seed, k, int(eps * 10), 99])
    mean, se = measure(lambda sk: setup.decode(sk, "unbiased"), lambda c: setup.simulate_sketch(c, rng),
                       p, n, trials, rng)
    return rec.mechanism, rec.params, mean, se


# ------------------------------------------------------------------------------------ other implementations
def _pure_ldp() -> dict[str, Any]:
    """pure-LDP's oracles without its package ``__init__`` (which imports its RAPPOR server and scikit-learn)."""
    import pure_ldp

    name = "pure_ldp.frequency_oracles"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.__path__ = [os.path.join(os.path.dirname(pure_ldp.__file__), "frequency_oracles")]
        sys.modules[name] = stub
    return {sub: importlib.import_module(f"{name}.{sub}")
            for sub in ("direct_encoding", "unary_encoding", "hadamard_response")}


def pure_ldp_run(kind: str, k: int, eps: float, values: np.ndarray) -> np.ndarray:
    mods = _pure_ldp()
    ident = lambda x: x  # noqa: E731
    if kind == "krr":
        de = mods["direct_encoding"]
        client, server = de.DEClient(eps, k, index_mapper=ident), de.DEServer(eps, k, index_mapper=ident)
    elif kind in ("krappor", "oue"):
        ue = mods["unary_encoding"]
        client = ue.UEClient(eps, k, use_oue=kind == "oue", index_mapper=ident)
        server = ue.UEServer(eps, k, use_oue=kind == "oue", index_mapper=ident)
    else:
        hr = mods["hadamard_response"]
        server = hr.HadamardResponseServer(eps, k, index_mapper=ident)
        client = hr.HadamardResponseClient(eps, k, server.get_hash_funcs(), index_mapper=ident)
    for v in values.tolist():
        server.aggregate(client.privatise(v))
    return np.asarray(server.estimate_all(range(k), suppress_warnings=True), dtype=float) / len(values)


def mfl_run(kind: str, k: int, eps: float, values: np.ndarray) -> np.ndarray:
    """multi-freq-ldpy's client per item; the unclipped inversion with its own (p, q) (read from its source)."""
    if kind == "krr":
        from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Client
        e = math.exp(eps)
        p, q = e / (e + k - 1), 1 / (e + k - 1)
        counts = np.bincount([GRR_Client(int(v), k, eps) for v in values], minlength=k)
    elif kind == "oue":
        from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Client
        p, q = 0.5, 1 / (math.exp(eps) + 1)
        counts = np.sum([UE_Client(int(v), k, eps, True) for v in values], axis=0)
    else:
        from multi_freq_ldpy.pure_frequency_oracles.SS import SS_Client
        e = math.exp(eps)
        d = int(max(1, np.rint(k / (e + 1))))
        p = d * e / (d * e + k - d)
        q = ((d - 1) * d * e + (k - d) * d) / ((k - 1) * (d * e + k - d))
        counts = np.bincount(np.concatenate([SS_Client(int(v), k, eps) for v in values]), minlength=k)
    return (counts / len(values) - q) / (p - q)


def external(run: Any, kind: str, k: int, eps: float, p: np.ndarray, n: int, trials: int, seed: int
             ) -> tuple[float, float]:
    import random

    rng = np.random.default_rng([seed, k, int(eps * 10), 7])
    random.seed(seed)
    np.random.seed(seed)
    vals = []
    for _ in range(trials):
        values = rng.choice(k, size=n, p=p)
        vals.append(n * float(np.sum((run(kind, k, eps, values) - p) ** 2)))
    arr = np.asarray(vals)
    return float(arr.mean()), float(arr.std(ddof=1) / math.sqrt(trials))


# ------------------------------------------------------------------------------------------------- speed
def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def speed(k: int, eps: float, n_ours: int, n_ext: int, repeats: int
          ) -> list[tuple[str, list[float], list[float]]]:
    """Seconds per item of ours and theirs for each mechanism, ``repeats`` runs each, alternating ours and
    theirs so that a change in the machine's load falls on both sides alike."""
    rng = np.random.default_rng(0)
    p = distribution(k)
    out: list[tuple[str, list[float], list[float]]] = []
    values = rng.choice(k, size=n_ours, p=p)
    small = values[:n_ext]
    ext: dict[str, Any] = {}
    try:
        from multi_freq_ldpy.pure_frequency_oracles.SS import SS_Client
        SS_Client(0, k, eps)  # numba compiles on the first call: not timed
        ext["ss"] = lambda: [SS_Client(int(v), k, eps) for v in small]
    except ImportError:
        pass
    try:
        _pure_ldp()
        ext["oue"] = lambda: pure_ldp_run("oue", k, eps, small)
        ext["hr"] = lambda: pure_ldp_run("hr", k, eps, small)
    except ImportError:
        pass
    for name in ("oue", "ss", "hr"):
        m = mechanism(name, k, eps)
        chunk = max(1, (1 << 22) // (k if m.report_kind == "bits" else 1))

        def run_ours(m: Mechanism = m, chunk: int = chunk) -> None:
            sk = np.zeros((1, m.sketch_width), dtype=np.int64)
            for i in range(0, n_ours, chunk):
                v = values[i:i + chunk]
                sk += m.sketch(np.zeros(len(v), dtype=np.int64), m.encode_batch(v, rng))  # type: ignore[attr-defined]
            estimate(sk, m, "unbiased")

        ours_runs, theirs_runs = [], []
        for _ in range(repeats):
            ours_runs.append(_timed(run_ours) / n_ours)
            if name in ext:
                theirs_runs.append(_timed(ext[name]) / n_ext)
        out.append((name, ours_runs, theirs_runs))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 8, 64, 256, 4096])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--n-ext", type=int, default=2_000)
    ap.add_argument("--trials-ext", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-external", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--repeats", type=int, default=7, help="speed runs of each side (alternating)")
    args = ap.parse_args(argv)
    if args.speed_only:
        args.ks, args.no_external = [], True
    print(f"n·ℓ2² of the unbiased estimate (mean ± se over trials), n = {args.n}; geometric p, mean ≈ k/5")
    print(f"{'k':>5} {'ε':>4} " + " ".join(f"{m:>16}" for m in DIRECT)
          + f" {'SS formula':>10}  {'tune (l2sq)':<26} {'measured':>16} {'/best':>6} {'/SS f.':>6}")
    worst_best, worst_formula = 0.0, 0.0
    ext_rows = []
    for k in args.ks:
        p = distribution(k)
        trials = int(np.clip(40_000 // k, 10, 4_000))
        for eps in args.epsilons:
            res = {name: ours(name, k, eps, p, args.n, trials, args.seed) for name in DIRECT}
            ss = SubsetSelection(k, eps)
            formula = unary_risk(k, ss.q_star, ss.p_star) - float(np.sum(p * p))
            chosen, params, mean, se = tuned(k, eps, p, args.n, trials, args.seed)
            best = min(min(v[0] for v in res.values()), mean)
            r_best, r_formula = mean / best, mean / formula
            worst_best, worst_formula = max(worst_best, r_best), max(worst_formula, r_formula)
            label = chosen + " " + " ".join(f"{a}={b}" for a, b in params.items()
                                            if a != "k" or chosen in ("orr", "orappor"))
            print(f"{k:>5} {eps:>4g} " + " ".join(f"{res[m][0]:>9.4g} ±{res[m][1]:<6.2g}" for m in DIRECT)
                  + f" {formula:>10.4g}  {label:<26} {mean:>9.4g} ±{se:<6.2g} {r_best:>6.3f} {r_formula:>6.3f}",
                  flush=True)
            if not args.no_external:
                row: dict[str, tuple[float, float]] = {}
                try:
                    for kind in ("krr", "krappor", "oue", "hr"):
                        row[f"pure-LDP {kind}"] = external(pure_ldp_run, kind, k, eps, p, args.n_ext,
                                                           args.trials_ext, args.seed)
                except ImportError:
                    pass
                try:
                    for kind in ("krr", "oue", "ss"):
                        row[f"mfl {kind}"] = external(mfl_run, kind, k, eps, p, args.n_ext, args.trials_ext,
                                                      args.seed)
                except ImportError:
                    pass
                ext_rows.append((k, eps, row))
    if args.ks:
        print(f"worst tune choice / best measured: {worst_best:.3f}; worst tune choice / SS formula: "
              f"{worst_formula:.3f}")
    if ext_rows:
        print(f"\nsame settings, other implementations: n·ℓ2² (mean ± se over {args.trials_ext} trials of "
              f"{args.n_ext} items; mfl = multi-freq-ldpy, unclipped inversion)")
        names = list(ext_rows[0][2])
        print(f"{'k':>5} {'ε':>4} " + " ".join(f"{m:>18}" for m in names))
        for k, eps, row in ext_rows:
            print(f"{k:>5} {eps:>4g} " + " ".join(f"{row[m][0]:>10.4g} ±{row[m][1]:<7.2g}" for m in names))
    if not args.no_speed:
        print(f"\nspeed at k = 4096, ε = 1: seconds per item (encode + sketch + unbiased estimate); {args.repeats} runs"
              " each, ours and theirs alternating; medians, and the ratio's range over the paired runs")
        for name, ours_runs, theirs_runs in speed(4096, 1.0, 50_000, 500, args.repeats):
            other = {"oue": "pure-LDP OUE", "ss": "multi-freq-ldpy SS", "hr": "pure-LDP HR"}[name]
            ours_med = float(np.median(ours_runs))
            if theirs_runs:
                theirs_med = float(np.median(theirs_runs))
                pairs = np.asarray(theirs_runs) / np.asarray(ours_runs)
                ratio = f"{theirs_med / ours_med:.1f}× faster (paired runs {pairs.min():.1f}–{pairs.max():.1f}×)"
                theirs = f"{theirs_med:.3g}"
            else:
                ratio, theirs = "-", "-"
            print(f"  {name:<4} ldpstream {ours_med:.3g} s   {other} {theirs} s   {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
