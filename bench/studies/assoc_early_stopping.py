"""Is Google's decode-assoc ahead of ours on cases without a true Other by early stopping, and would a stopping
rule chosen from the data match it? (issue 25, "Joint points"; decode-assoc ships Google's fixed cap instead:
docs/math/joint.md#is-other-there).

On ``bool-complete`` of ``bench/accuracy/decode_assoc.py`` (domain × HTTPS boolean, 4 map strings, no Other,
50,000 reports) Google's association EM stops at its 1000-iteration cap unconverged, and is ahead of our
converged maximum likelihood (TV 0.0345 against 0.0365 over 20 seeds). This study runs plain EM from the uniform
table on Google's per-report conditional probabilities (the baseline's) and compares, per seed, the total
variation to the truth of the iterate at 1000 (Google's) and at the iteration count that maximizes the
``--folds``-fold held-out log-likelihood over ``--grid`` (EM fitted on the other folds).

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.studies.assoc_early_stopping --seeds 20`` (≈ 15 min)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from bench.accuracy import decode_assoc as case
from ldpstream.interop.rappor.assoc_reports import read_assoc_reports
from ldpstream.interop.rappor.maps import create_bool_map, read_map


def conditional_probabilities(paths: dict[str, Path], var2: str, labels1: list[str], labels2: list[str]
                              ) -> tuple[np.ndarray, np.ndarray]:
    """Each report's probability under each domain and each boolean value (Google's GetCondProb, no Other)."""
    reports = read_assoc_reports(paths["reports"], {"domain": case.PARAMS.k, var2: 1})
    out = []
    for var, labels in (("domain", labels1), (var2, labels2)):
        params = case.PARAMS
        cmap = create_bool_map(params) if var == var2 else read_map(paths["map:domain"], params)
        design = cmap.matrix.toarray()[:, [cmap.strings.index(x) for x in labels]]
        bits, cohorts = reports.variables[var], reports.cohorts % params.m
        out.append(case.google_cond_prob(bits, cohorts, design, params.q_star, params.p_star, None))
    return out[0], out[1]


def em_iterates(c1: np.ndarray, c2: np.ndarray, keep: set[int]) -> dict[int, np.ndarray]:
    """Plain EM from the uniform table: the iterates at the counts in ``keep``."""
    p = np.full((c1.shape[1], c2.shape[1]), 1.0 / (c1.shape[1] * c2.shape[1]))
    kept = {}
    for it in range(1, max(keep) + 1):
        w = np.einsum("ui,uj,ij->uij", c1, c2, p)
        w /= w.sum(axis=(1, 2), keepdims=True)
        p = w.mean(axis=0)
        if it in keep:
            kept[it] = p.copy()
    return kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=50_000)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--grid", default="50,100,200,400,700,1000,1500")
    args = ap.parse_args()
    grid = [int(g) for g in args.grid.split(",")]
    labels1, labels2 = case.DOMAINS[:4], ["FALSE", "TRUE"]
    tv: dict[str, list[float]] = {"Google's 1000 iterations": [], "held-out likelihood's choice": []}
    chosen = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(200, 200 + args.seeds):
            sim, paths, second, names2, _ = case.simulate_case("bool-complete", args.clients,
                                                               np.random.default_rng(seed), Path(tmp))
            truth = case.truth(sim.index1, sim.index2, case.DOMAINS, names2, labels1, labels2)
            c1, c2 = conditional_probabilities(paths, second.var, labels1, labels2)
            fold = np.random.default_rng(seed).integers(0, args.folds, c1.shape[0])
            score = dict.fromkeys(grid, 0.0)
            for f in range(args.folds):
                train, test = fold != f, fold == f
                for it, p in em_iterates(c1[train], c2[train], set(grid)).items():
                    score[it] += float(np.sum(np.log(np.einsum("ui,uj,ij->u", c1[test], c2[test], p))))
            best = max(grid, key=lambda it: score[it])
            chosen.append(best)
            full = em_iterates(c1, c2, {1000, best})
            tv["Google's 1000 iterations"].append(0.5 * float(np.abs(full[1000] - truth).sum()))
            tv["held-out likelihood's choice"].append(0.5 * float(np.abs(full[best] - truth).sum()))
            print(f"seed {seed}: chosen {best}; " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in tv.items()), flush=True)
    for name, values in tv.items():
        print(f"{name:<30} mean TV {np.mean(values):.4f}  sd {np.std(values):.4f}")
    print("iterations chosen:", chosen)


if __name__ == "__main__":
    main()
