"""The paper's joint simulation with and without the "Other" category, side by side.

Fanti, Pihur, Erlingsson 2016 §4.E (``simulation/joint_trials.py``): two variables of 100 Zipf(1) categories,
ρ = 0.5 (Y copies X half the time), 100,000 report pairs, the top 5 of each. With Other the decoder fits a
6 × 6 table; without it, a 5 × 5 table of the candidates alone, which can at best recover the candidates' block
renormalized to 1 (``collapse(..., other=False)``). Printed per mechanism: the truth, the mean estimate over
``--trials`` draws and the mean error, for both fits, with the largest absolute mean error and its Monte Carlo
standard error. The statistical test ``tests/statistical/test_joint_em.py`` asserts the same contrast.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.accuracy.joint_without_other --trials 5``
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import collapse, sample_pairs, value_names, zipf_association

SUPPORT = 100
TOP = list(range(5))


def show(label: str, table: np.ndarray) -> None:
    print(f"  {label}")
    for row in table:
        print("    " + " ".join(f"{x:+.4f}" if label.startswith("mean error") else f"{x:.4f}" for x in row))


def compare(name: str, mechanism: Any, values: list[Any], n: int, trials: int, seed: int) -> None:
    joint = zipf_association(SUPPORT, 1.0, 0.5)
    names = value_names(SUPPORT)
    table = mechanism.value_table(names) if mechanism.needs_value_table else None
    var = JointVariable(mechanism, values)
    rng = np.random.default_rng(seed)
    with_other, without_other = [], []
    t0 = time.process_time()
    for _ in range(trials):
        patterns = sample_pairs(joint, mechanism, mechanism, n, rng, table, table)
        with_other.append(estimate_joint(patterns, var, var).table)
        without_other.append(estimate_joint(patterns, var, var, other=False).table)
    print(f"== {name}: n = {n:,} pairs, {trials} trials ({time.process_time() - t0:.1f} CPU s)")
    for label, fits, truth in (("with Other (6 x 6)", with_other, collapse(joint, TOP, TOP)),
                               ("without Other (5 x 5)", without_other, collapse(joint, TOP, TOP, other=False))):
        est = np.asarray(fits)
        error = est - truth
        mean_error = error.mean(axis=0)
        mcse = error.std(axis=0, ddof=1) / np.sqrt(trials) if trials > 1 else np.full(truth.shape, np.nan)
        worst = np.unravel_index(np.argmax(np.abs(mean_error)), mean_error.shape)
        print(f" {label}: largest |mean error| {abs(mean_error[worst]):.4f} at cell {tuple(map(int, worst))} "
              f"(MC SE {mcse[worst]:.4f}); top cell {mean_error[0, 0]:+.4f}")
        show("truth", truth)
        show("mean estimate", est.mean(axis=0))
        show("mean error", mean_error)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=2016)
    args = parser.parse_args()
    compare("RAPPOR 128 bits, h = 2, 8 cohorts, p = .25, q = .75, f = 0",
            Rappor(k=128, hashes=2, cohorts=8, p=0.25, q=0.75, f=0.0), value_names(SUPPORT)[:5],
            args.n, args.trials, args.seed)
    compare("k-RR, k = 100, eps = 4", KRR(SUPPORT, 4.0), TOP, args.n, args.trials, args.seed + 1)


if __name__ == "__main__":
    main()
