"""Batch encoding + estimation of 10^6 values with k = 256: ldpstream against pure-ldp, side by side.

ldpstream: ``KRR.encode_batch`` / ``KRappor.encode_batch`` with a seeded numpy Generator (in chunks of
``--chunk`` values, to bound the memory of the (chunk, k) bit matrix), ``sketch`` (bincount / bit sums)
and the unbiased decoders of :mod:`ldpstream.estimators.direct` (``estimate_krr``, ``estimate_krappor``).

pure-ldp (installed package, read from its source): ``DEClient``/``DEServer`` (direct encoding = k-RR:
keep w.p. e^ε/(e^ε + d − 1)) and ``UEClient``/``UEServer`` with ``use_oue=False`` (symmetric unary
encoding = k-RAPPOR: each bit kept w.p. e^{ε/2}/(e^{ε/2} + 1)); one ``privatise`` and one ``aggregate``
per value (its API is per item), then ``estimate_all``. pure-ldp is run on ``--pure-n`` values (default
10^5 for DE and 2·10^4 for UE, which draws 256 random numbers per item in Python); its time is
extrapolated per item to n, as printed.

Same computation check: both estimators are the unbiased inversion ``p̂ = (T/n − p*)/(q* − p*)``; the
script feeds the *same* ldpstream reports to pure-ldp's server and prints the largest difference of the two
estimates (≈ 1e-16), and prints the ℓ1 error of each pipeline to the empirical distribution of its own
sample (comparable magnitudes: the ℓ1 of pure-ldp on its subset is scaled by sqrt(n_sub/n) to n).

The closing summary puts k-RR and k-RAPPOR side by side, with ldpstream's time split into encoding
(``encode_batch``), sketching (``sketch``: bincount / bit sums) and estimation.

Usage: python -m bench.perf.vs_pure_ldp [--n 1000000] [--epsilon 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

from bench.harness import command_line
from ldpstream.distributions import empirical_distribution, parse_distribution, sample_values
from ldpstream.estimators.direct import estimate_krappor, estimate_krr
from ldpstream.mechanisms.krappor import KRappor
from ldpstream.mechanisms.krr import KRR
from ldpstream.simulation.losses import l1


def ours(kind: str, values: np.ndarray, k: int, eps: float, seed: int,
         chunk: int) -> tuple[np.ndarray, float, dict[str, float]]:
    """Encode + sketch + estimate; returns (estimate, total seconds, seconds per phase)."""
    rng = np.random.default_rng(seed)
    phases = {"encode": 0.0, "sketch": 0.0, "estimate": 0.0}
    t0 = time.perf_counter()
    mech = KRR(k, eps) if kind == "krr" else KRappor(k, eps)
    sk = np.zeros((1, k if kind == "krr" else k + 1), dtype=np.int64)
    for i in range(0, len(values), chunk):
        v = values[i : i + chunk]
        t1 = time.perf_counter()
        reports = mech.encode_batch(v, rng)
        t2 = time.perf_counter()
        sk += mech.sketch(np.zeros(len(v), dtype=np.int64), reports)
        t3 = time.perf_counter()
        phases["encode"] += t2 - t1
        phases["sketch"] += t3 - t2
    t4 = time.perf_counter()
    est = (estimate_krr(sk, eps, "unbiased") if kind == "krr" else estimate_krappor(sk, eps, "unbiased")).frequencies
    phases["estimate"] = time.perf_counter() - t4
    return est, time.perf_counter() - t0, phases


def _pure_ldp_oracles() -> tuple[type, type, type, type]:
    """pure-ldp's DE and UE client/server classes.

    ``pure_ldp.frequency_oracles/__init__.py`` imports every oracle, including its RAPPOR server, which needs
    scikit-learn (not a dependency here). The two sub-packages used are imported without running that
    ``__init__``: a namespace stand-in for ``pure_ldp.frequency_oracles`` pointing at the same directory.
    """
    import importlib
    import os
    import types

    import pure_ldp

    name = "pure_ldp.frequency_oracles"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.__path__ = [os.path.join(os.path.dirname(pure_ldp.__file__), "frequency_oracles")]
        sys.modules[name] = stub
    de = importlib.import_module(name + ".direct_encoding")
    ue = importlib.import_module(name + ".unary_encoding")
    return de.DEClient, de.DEServer, ue.UEClient, ue.UEServer


def pure(kind: str, values: np.ndarray, k: int, eps: float, seed: int) -> tuple[np.ndarray, float]:
    """pure-ldp per-item client + server; returns (estimate as frequencies, seconds)."""
    import random

    DEClient, DEServer, UEClient, UEServer = _pure_ldp_oracles()

    random.seed(seed)
    np.random.seed(seed)
    ident = lambda x: x  # noqa: E731 (values are already 0..k-1)
    if kind == "krr":
        client, server = DEClient(eps, k, index_mapper=ident), DEServer(eps, k, index_mapper=ident)
    else:
        client, server = (UEClient(eps, k, use_oue=False, index_mapper=ident),
                          UEServer(eps, k, use_oue=False, index_mapper=ident))
    t0 = time.perf_counter()
    for v in values.tolist():
        server.aggregate(client.privatise(v))
    est = np.asarray(server.estimate_all(range(k), suppress_warnings=True)) / len(values)
    return est, time.perf_counter() - t0


def same_estimator_check(kind: str, values: np.ndarray, k: int, eps: float, seed: int) -> float:
    """Feed identical ldpstream reports to both servers; the largest |difference| of the estimates."""
    _, DEServer, _, UEServer = _pure_ldp_oracles()

    rng = np.random.default_rng(seed)
    ident = lambda x: x  # noqa: E731
    if kind == "krr":
        mech = KRR(k, eps)
        reports = mech.encode_batch(values, rng)
        ours_est = estimate_krr(mech.sketch(np.zeros(len(values), dtype=np.int64), reports), eps, "unbiased")
        server = DEServer(eps, k, index_mapper=ident)
        for r in reports.tolist():
            server.aggregate(r)
    else:
        unary = KRappor(k, eps)
        bits = unary.encode_batch(values, rng)
        ours_est = estimate_krappor(unary.sketch(np.zeros(len(values), dtype=np.int64), bits), eps, "unbiased")
        server = UEServer(eps, k, use_oue=False, index_mapper=ident)
        for row in bits.astype(np.int64):
            server.aggregate(row)
    theirs = np.asarray(server.estimate_all(range(k), suppress_warnings=True)) / len(values)
    return float(np.max(np.abs(theirs - ours_est.frequencies)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--epsilon", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=100_000)
    ap.add_argument("--pure-n-krr", type=int, default=100_000)
    ap.add_argument("--pure-n-krappor", type=int, default=20_000)
    args = ap.parse_args(argv)
    print("# command: " + command_line("bench.perf.vs_pure_ldp", argv))
    print(f"# {os.cpu_count()} CPUs (shared); ldpstream single process, numpy Generator seeded")
    k, n, eps = args.k, args.n, args.epsilon
    p = parse_distribution("geometric", k)
    values = sample_values(p, n, np.random.default_rng(args.seed))
    print(f"# n={n} k={k} ε={eps} geometric values; ℓ1 to each run's own empirical distribution")
    head = (f"{'mechanism':<9} {'impl':<10} {'items run':>9} {'seconds':>9} {'s @ n':>9} {'items/s':>11}"
            f" {'ℓ1':>7} {'ℓ1 @ n':>7} {'speedup':>8}")
    print(head)
    print("-" * len(head))
    rows = []
    for kind, pure_n in (("krr", args.pure_n_krr), ("krappor", args.pure_n_krappor)):
        est, secs, phases = ours(kind, values, k, eps, args.seed, args.chunk)
        l1_ours = float(l1(est, empirical_distribution(np.bincount(values, minlength=k))))
        sub = values[:pure_n]
        pest, psecs = pure(kind, sub, k, eps, args.seed)
        l1_pure = float(l1(pest, empirical_distribution(np.bincount(sub, minlength=k))))
        psecs_n = psecs * n / pure_n
        print(f"{kind:<9} {'ldpstream':<10} {n:>9} {secs:>9.3f} {secs:>9.3f} {n / secs:>11.3g} {l1_ours:>7.4f}"
              f" {l1_ours:>7.4f}")
        print(f"{'':<9} {'pure-ldp':<10} {pure_n:>9} {psecs:>9.3f} {psecs_n:>9.1f} {pure_n / psecs:>11.3g}"
              f" {l1_pure:>7.4f} {l1_pure * math.sqrt(pure_n / n):>7.4f} {psecs_n / secs:>7.0f}x")
        print(f"{'':<9} ldpstream phases: " + ", ".join(f"{name} {t:.3f} s" for name, t in phases.items()))
        diff = same_estimator_check(kind, values[:5000], k, eps, args.seed)
        print(f"{'':<9} same reports → max |ours − pure-ldp| estimate = {diff:.2e}")
        rows.append((kind, secs, phases, psecs_n, l1_ours))
    print()
    print(f"summary: batch encoding + estimation of {n} values, k={k}, ε={eps}")
    print(f"{'mechanism':<9} {'ldpstream s':>11} {'encode':>7} {'sketch':>7} {'estim.':>7} {'pure-ldp s (extrap.)':>21}"
          f" {'speedup':>8} {'ℓ1':>7}")
    for kind, secs, ph, psecs_n, l1_ours in rows:
        print(f"{kind:<9} {secs:>11.3f} {ph['encode']:>7.3f} {ph['sketch']:>7.3f} {ph['estimate']:>7.3f}"
              f" {psecs_n:>21.1f} {psecs_n / secs:>7.0f}x {l1_ours:>7.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
