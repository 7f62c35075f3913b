"""Joint EM speed: 10^6 RAPPOR report pairs on a 6 × 6 table (target: EM under 2 s), and k-RR / O-RR pair tables.

The paper's setting (Fanti, Pihur, Erlingsson 2016 §4.E) scaled to ``--n`` clients: two variables of 100
categories with Zipf marginals and an association (``zipf_association``, ρ = 0.5), the top 5 of each plus
"Other". Reports are simulated in chunks through the mechanisms' ``encode_clients`` and collapsed to distinct
patterns (``PairPatterns.from_pairs``). Then, on the same patterns, ``estimate_joint`` with plain EM and with
SQUAREM (default), stopping rule: no cell moves by ``--tolerance`` (1e-6, the paper's) in one iteration, at most
1000 iterations. Printed per run: likelihood build time, EM time and iterations (a SQUAREM iteration costs about
three EM steps), the rest (information, covariance, test), total, and the largest difference between the two
tables. The baseline quoted by issue 10: google/rappor's C++ EM, about 2 s for 50,000 reports.

Symbol mechanisms: the same with k-RR (k = 100, ε = 4) and O-RR (k = 32, 8 cohorts, ε = 3), whose distinct
patterns are at most C·k_x·k_y cells of a pair table, so the EM runs over that table, not over reports.

Before/after in one run: ``before`` is the EM step as it was (``ReferenceChannel`` below: float64, whole
``(c × D)`` intermediates written and read back each step), ``after`` the shipped ``PairChannel.em_step`` (one
pass in cache-sized blocks, float32 factors and products, float64 accumulation); the same SQUAREM loop and
stopping rule drive both, so the iteration counts and the largest difference between the two tables are printed
beside the times. ``estimate_joint`` then includes the self-consistent candidate frequencies (refits) and the
sandwich.

Wall time (``perf_counter``) and process CPU time are both printed: on the shared 2-core machine wall ≫ CPU
means load from other jobs, not cost.

Usage: python -m bench.perf.joint_em [--n 1000000] [--bits 128] [--cohorts 64] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from bench import harness
from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.estimators.joint.em import PairChannel, fit_joint
from ldpstream.estimators.joint.likelihood import variable_likelihood
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import collapse, value_names, zipf_association

CHUNK = 100_000


class ReferenceChannel(PairChannel):
    """The EM step before the blocked float32 one (the baseline): float64, ``(c × D)`` work arrays."""

    def __init__(self, lx: np.ndarray, ly: np.ndarray) -> None:
        super().__init__(lx, ly)
        self.lx_t, self.ly_t = self.transposed(np.float64)
        d = self.n_outputs
        self.work = (np.empty((self.c, d)), np.empty((self.c, d)), np.empty(d))

    def em_step(self, p: np.ndarray, n: np.ndarray, total: float, with_ll: bool,
                dtype: Any = np.float64) -> tuple[np.ndarray, float]:
        pm, lw, m = self.work
        np.matmul(np.ascontiguousarray(p.reshape(self.r, self.c).T), self.lx_t, out=pm)
        np.einsum("ju,ju->u", pm, self.ly_t, out=m)
        np.maximum(m, 1e-300, out=m)
        ll = float(n @ np.log(m)) if with_ll else float("nan")
        np.divide(n, m, out=m)
        np.multiply(self.ly_t, m, out=lw)
        g = lw @ self.lx
        new = p * g.T.ravel() / total
        out: np.ndarray = new / new.sum()
        return out, ll


def simulate(joint: np.ndarray, mx: Any, my: Any, n: int, rng: np.random.Generator, tx: Any, ty: Any
             ) -> tuple[PairPatterns, float]:
    began = time.perf_counter()
    S, T = joint.shape
    parts: list[tuple[np.ndarray, ...]] = []
    for start in range(0, n, CHUNK):
        size = min(CHUNK, n - start)
        cells = rng.choice(S * T, size=size, p=joint.ravel())
        cx, rx = mx.encode_clients(cells // T, rng, tx)
        cy, ry = my.encode_clients(cells % T, rng, ty)
        rx, ry = np.asarray(rx), np.asarray(ry)
        parts.append((cx, rx.astype(np.uint8) if rx.ndim == 2 else rx, cy, ry.astype(np.uint8) if ry.ndim == 2 else ry))
    cols = [np.concatenate([p[i] for p in parts]) for i in range(4)]
    patterns = PairPatterns.from_pairs(*cols)
    return patterns, time.perf_counter() - began


def timed(fn: Any) -> tuple[Any, float, float]:
    with harness.timed() as clock:
        out = fn()
    return out, clock.wall, clock.cpu


def run(name: str, patterns: PairPatterns, vx: JointVariable, vy: JointVariable, truth: np.ndarray,
        tolerance: float) -> None:
    """The stages of ``estimate_joint`` timed one by one (wall and CPU), plain EM beside SQUAREM on the same
    likelihoods, then one full ``estimate_joint`` call."""
    (lx, ly), w_lik, c_lik = timed(lambda: (
        variable_likelihood(vx.mechanism, vx.values, patterns.cohort_x, patterns.reports_x, patterns.counts),
        variable_likelihood(vy.mechanism, vy.values, patterns.cohort_y, patterns.reports_y, patterns.counts)))
    counts = patterns.counts.astype(np.float64)
    print(f"  {name:<8} likelihoods (both variables, with Other): wall {w_lik:6.3f} s, CPU {c_lik:6.3f} s")
    fits = {}
    for accelerate in (False, True):
        for version, channel_type in (("before", ReferenceChannel), ("after", PairChannel)):
            channel = channel_type(lx.matrix, ly.matrix)
            fit, w_em, c_em = timed(lambda acc=accelerate, ch=channel: fit_joint(
                ch, counts, lx.log_scale + ly.log_scale, start=None, tolerance=tolerance, max_iterations=1000,
                accelerate=acc))
            label = ("SQUAREM" if accelerate else "plain EM") + f" {version}"
            err = np.abs(fit.p.reshape(truth.shape) - truth).max()
            print(f"  {name:<8} {label:<15} EM: wall {w_em:6.3f} s, CPU {c_em:6.3f} s, {fit.iterations:4d} "
                  f"iterations, converged={fit.converged}, log-likelihood {fit.log_likelihood:.3f}, "
                  f"max |p̂ − p| {err:.4f}")
            fits[accelerate, version] = fit
        ref, new = fits[accelerate, "before"], fits[accelerate, "after"]
        print(f"  {name:<8} {'SQUAREM' if accelerate else 'plain EM'}: max |after − before| = "
              f"{np.abs(new.p - ref.p).max():.2e}, log-likelihood after − before = "
              f"{new.log_likelihood - ref.log_likelihood:+.3f}")
    diff = np.abs(fits[True, "after"].p - fits[False, "after"].p).max()
    est, w_all, c_all = timed(lambda: estimate_joint(patterns, vx, vy, tolerance=tolerance))
    print(f"  {name:<8} max |SQUAREM − plain| = {diff:.2e}; estimate_joint total wall {w_all:.3f} s, CPU {c_all:.3f} s "
          f"(information + intervals + test: {est.seconds - est.likelihood_seconds - est.em_seconds:.3f} s wall); "
          f"stopping rule: {est.stopping_rule}; T = {est.independence.statistic:.1f} (df {est.independence.df}); "
          f"frequencies {est.info['frequencies_x']}, {est.info['frequency_refits']} refits "
          f"(gap {est.info['frequency_change']:.1e}), EM + refits {est.em_seconds:.3f} s wall")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--bits", type=int, default=128)
    ap.add_argument("--cohorts", type=int, default=64)
    ap.add_argument("--tolerance", type=float, default=1e-6)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    support, top = 100, list(range(5))
    joint = zipf_association(support, 1.0, 0.5)
    truth = collapse(joint, top, top)
    names = value_names(support)

    rappor = Rappor(k=args.bits, hashes=2, cohorts=args.cohorts, p=0.25, q=0.75, f=0.0)
    table = rappor.value_table(names)
    patterns, sim = simulate(joint, rappor, rappor, args.n, rng, table, table)
    print(f"RAPPOR k={args.bits} h=2 m={args.cohorts} p=.25 q=.75 f=0: {args.n:,} report pairs, "
          f"{len(patterns):,} distinct patterns (simulated + collapsed in {sim:.1f} s)")
    vx = JointVariable(rappor, names[:5])
    run("rappor", patterns, vx, vx, truth, args.tolerance)

    for name, mech, tab, values in (
        ("k-RR", KRR(100, 4.0), None, top),
        ("O-RR", ORR(k=32, epsilon=3.0, cohorts=8), "names", names[:5]),
    ):
        t = None if tab is None else mech.value_table(names)
        patterns, sim = simulate(joint, mech, mech, args.n, rng, t, t)
        print(f"{name}: {args.n:,} report pairs, {len(patterns):,} distinct pair-table cells "
              f"(simulated + collapsed in {sim:.1f} s)")
        v = JointVariable(mech, values)
        run(name, patterns, v, v, truth, args.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main())
