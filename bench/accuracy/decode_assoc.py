"""``ldpstream rappor decode-assoc`` on generated Google-format association files, beside a numpy
re-implementation of Google's association EM (``analysis/R/association.R``) on the same reports.

Files: ``n`` clients (default 100,000) from a known joint table, written by
:mod:`ldpstream.interop.rappor.assoc_simulation` (our Google-compatible RAPPOR encoder): ``bool`` = a domain
(k = 32, h = 2, m = 32, p = .25, q = .75, f = .5; 4 candidates + one value outside the map) × a boolean
(one bit, same p, q, f); ``strings`` = the domain × a colour (k = 16, h = 1, m = 16, p = .2, q = .8,
f = .25; 3 candidates + one outside).

Ours: the command end to end (read, marginal detection, pattern collapse, likelihoods, SQUAREM EM, observed
information), its wall time and the EM's. Google's algorithm (baseline): per report, ``GetCondProb`` with
``GetOtherProbs`` (candidates' proportions from least squares on the bit sketch, the role of Google's
``Decode``; Other's per-bit rates clipped to [0, 1]), plain EM from uniform until no cell moves by 1e-6
(at most 1000 iterations), on the same candidates as ours; numpy, single process (Google's R is slower:
``mclapply`` over reports and an R loop; its C++ EM takes about 2 s for 50,000 reports).

Printed per case: times, EM iterations, the largest absolute error and the total variation to the true
shares (values outside the candidates count as Other), and for ours the largest |error|/std_error and the
share of cells whose 95% interval holds the truth.

BLAS threads: set to 1 unless OPENBLAS_NUM_THREADS / OMP_NUM_THREADS are set (on the shared 2-core machine,
multi-threaded OpenBLAS made the EM's (patterns × r)·(r × c) products about 20 times slower: 10.5 s → 0.56 s
for the strings case at 100,000 clients).

Run::

    python -m bench.accuracy.decode_assoc --clients 100000 --seed 1 --coverage-seeds 20

``--coverage-seeds S`` adds, per case, the coverage of ours' 95% cell intervals over S seeds of
``--coverage-clients`` clients (default 40,000), with the mean and sd of the cells' z-scores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from ldpstream.cli import main  # noqa: E402
from ldpstream.interop.rappor.assoc_reports import read_assoc_reports  # noqa: E402
from ldpstream.interop.rappor.assoc_results import read_assoc_results  # noqa: E402
from ldpstream.interop.rappor.assoc_simulation import AssocVariableSpec, simulate_association, write_association_files  # noqa: E402
from ldpstream.interop.rappor.maps import create_bool_map, read_map  # noqa: E402
from ldpstream.interop.rappor.params import ParamsFile  # noqa: E402
from ldpstream.mechanisms.base import sum_bits  # noqa: E402

PARAMS = ParamsFile(k=32, h=2, m=32, p=0.25, q=0.75, f=0.5)
COLOR_PARAMS = ParamsFile(k=16, h=1, m=16, p=0.2, q=0.8, f=0.25)
DOMAINS = ["google.com", "yahoo.com", "bing.com", "duck.com", "rare.org"]
COLORS = ["red", "green", "blue", "grey"]
JOINT_BOOL = np.array([[0.06, 0.30], [0.10, 0.10], [0.15, 0.05], [0.02, 0.10], [0.06, 0.06]])
JOINT_STRINGS = np.array([[0.20, 0.05, 0.04, 0.03], [0.03, 0.12, 0.02, 0.02], [0.02, 0.02, 0.14, 0.02],
                          [0.04, 0.04, 0.04, 0.02], [0.06, 0.04, 0.03, 0.02]])


def google_other_probs(counts: np.ndarray, design: np.ndarray, proportion: np.ndarray, qs: float,
                       ps: float) -> np.ndarray:
    """association.R GetOtherProbs."""
    m, k = counts.shape[0], counts.shape[1] - 1
    top = np.ceil(proportion * counts[:, 0].sum() / m)
    set_by_top = design.reshape(m, k, -1) @ top
    expected = (top.sum() - set_by_top) * ps + set_by_top * qs
    reduced = np.maximum(counts - np.column_stack([np.full(m, top.sum()), expected]), 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        props = reduced[:, 1:] / reduced[:, :1]
    out: np.ndarray = np.nan_to_num(np.clip(props, 0, 1), nan=0.0, posinf=0.0)
    return out


def google_cond_prob(bits: np.ndarray, cohorts: np.ndarray, design: np.ndarray, qs: float, ps: float,
                     other: np.ndarray | None) -> np.ndarray:
    """association.R GetCondProb for every report."""
    k = bits.shape[1]
    d = design.reshape(-1, k, design.shape[1])[cohorts] > 0
    rate = np.where(d, qs, ps)
    out = np.prod(np.where(bits[:, :, None] > 0, rate, 1 - rate), axis=1)
    if other is not None:
        o = other[cohorts]
        out = np.column_stack([out, np.prod(np.where(bits > 0, o, 1 - o), axis=1)])
    result: np.ndarray = out
    return result


def google_em(c1: np.ndarray, c2: np.ndarray, max_iter: int = 1000, eps: float = 1e-6) -> tuple[np.ndarray, int]:
    """association.R EM (UpdatePij until max |Δ| < eps)."""
    p = np.full((c1.shape[1], c2.shape[1]), 1.0 / (c1.shape[1] * c2.shape[1]))
    for it in range(1, max_iter + 1):
        w = np.einsum("ui,uj,ij->uij", c1, c2, p)
        w /= w.sum(axis=(1, 2), keepdims=True)
        new = w.mean(axis=0)
        done = np.max(np.abs(new - p)) < eps
        p = new
        if done:
            return p, it
    return p, max_iter


def google_baseline(paths: dict[str, Path], var2: str, params2: ParamsFile, labels1: list[str],
                    labels2: list[str]) -> tuple[np.ndarray, int]:
    boolean = var2 == "flag..HTTPS"
    r = read_assoc_reports(paths["reports"], {"domain": PARAMS.k, var2: 1 if boolean else params2.k})
    cond = []
    for var, params, labels in (("domain", PARAMS, labels1), (var2, params2, labels2)):
        bits, cohorts = r.variables[var], r.cohorts % params.m
        if boolean and var == var2:
            cmap = create_bool_map(params)
            design = cmap.matrix.toarray()[:, [cmap.strings.index(x) for x in labels]]
            cond.append(google_cond_prob(bits, cohorts, design, params.q_star, params.p_star, None))
            continue
        cmap = read_map(paths[f"map:{var}"], params)
        known = [x for x in labels if x != "Other"]
        design = cmap.matrix.toarray()[:, [cmap.strings.index(x) for x in known]]
        counts = sum_bits(cohorts, bits, params.m)
        z = ((counts[:, 1:] / counts[:, :1] - params.p_star) / (params.q_star - params.p_star)).ravel()
        prop = np.clip(np.linalg.lstsq(design, z, rcond=None)[0], 0, None)
        other = google_other_probs(counts, design, prop, params.q_star, params.p_star)
        cond.append(google_cond_prob(bits, cohorts, design, params.q_star, params.p_star,
                                     other if "Other" in labels else None))
    return google_em(cond[0], cond[1])


def truth(index1: np.ndarray, index2: np.ndarray, names1: list[str], names2: list[str], labels1: list[str],
          labels2: list[str]) -> np.ndarray:
    def map_to(index: np.ndarray, names: list[str], labels: list[str]) -> np.ndarray:
        pos = {x: i for i, x in enumerate(labels)}
        return np.array([pos.get(names[v], pos.get("Other", -1)) for v in index.tolist()])

    table = np.zeros((len(labels1), len(labels2)))
    np.add.at(table, (map_to(index1, names1, labels1), map_to(index2, names2, labels2)), 1.0)
    return table / len(index1)


def simulate_case(kind: str, n: int, rng: np.random.Generator, workdir: Path) -> tuple[Any, dict[str, Path],
                                                                                    AssocVariableSpec, list[str],
                                                                                    list[str]]:
    """A case's ``n`` clients (``bool``: the domain and a boolean, else the domain and a color) simulated and
    written to ``workdir``: the simulation, its files, the second variable, its value names and the
    ``rappor decode-assoc`` arguments that decode the files."""
    domain = AssocVariableSpec("domain", "string", "m_params", PARAMS)
    cands: dict[str, Sequence[str]]
    names1 = DOMAINS
    if kind == "bool":
        second = AssocVariableSpec("flag..HTTPS", "boolean", "m_params", PARAMS)
        names2, joint, cands = ["FALSE", "TRUE"], JOINT_BOOL, {"domain": DOMAINS[:4]}
    elif kind == "bool-complete":  # Google's association test's shape: every domain in the map, no true Other
        second = AssocVariableSpec("flag..HTTPS", "boolean", "m_params", PARAMS)
        names1, names2, joint, cands = DOMAINS[:4], ["FALSE", "TRUE"], JOINT_BOOL[:4] / JOINT_BOOL[:4].sum(), {
            "domain": DOMAINS[:4]}
    else:
        second = AssocVariableSpec("color", "string", "color_params", COLOR_PARAMS)
        names2, joint, cands = COLORS, JOINT_STRINGS, {"domain": DOMAINS[:4], "color": COLORS[:3]}
    sim = simulate_association(domain, names1, second, names2, joint, n, rng, bytes(32))
    paths = write_association_files(workdir, "m", [domain, second], sim.reports, cands)
    args = ["rappor", "decode-assoc", "--metric-name", "m", "--schema", str(paths["schema"]), "--reports",
            str(paths["reports"]), "--params-dir", str(workdir), "--var1", "domain", "--var2", second.var,
            "--map1", str(paths["map:domain"]), "--output-dir", str(workdir)]
    args += ["--create-bool-map"] if kind.startswith("bool") else ["--map2", str(paths["map:color"])]
    return sim, paths, second, names2, args


def run_case(kind: str, n: int, seed: int, workdir: Path) -> None:
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    sim, paths, second, names2, args = simulate_case(kind, n, rng, workdir)
    t_files = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert main(args) == 0
    t_ours = time.perf_counter() - t0
    res = read_assoc_results(workdir / "assoc-results.csv")
    import json

    metrics = json.loads((workdir / "assoc-metrics.json").read_text())
    labels1 = list(dict.fromkeys(res["var1_values"]))
    labels2 = list(dict.fromkeys(res["var2_values"]))
    shape = (len(labels1), len(labels2))
    ours = res["proportion"].reshape(shape)
    se = res["std_error"].reshape(shape)
    low, high = res["low_95"].reshape(shape), res["high_95"].reshape(shape)
    true = truth(sim.index1, sim.index2, DOMAINS, names2, labels1, labels2)
    t0 = time.perf_counter()
    base, base_iters = google_baseline(paths, second.var, second.params, labels1, labels2)
    t_base = time.perf_counter() - t0
    print(f"\n== {kind}: {n:,} clients, {shape[0]} x {shape[1]} table (files written in {t_files:.1f} s)")
    print(f"ours: read {metrics['read_elapsed_time']:.2f} s, marginals {metrics['marginal_elapsed_time']:.2f} s, "
          f"joint {metrics['joint_elapsed_time']:.2f} s (likelihoods {metrics['likelihood_elapsed_time']:.2f} s, "
          f"EM {metrics['em_elapsed_time']:.2f} s), {metrics['distinct_report_pairs']:,} distinct report pairs; "
          f"{metrics['stopping_rule']}")
    print(f"{'decoder':<34}{'wall s':>8}{'EM s':>8}{'iters':>7}{'max|err|':>10}{'TV':>8}{'max|z|':>8}{'cover95':>9}")
    print(f"{'ldpstream decode-assoc (command)':<34}{t_ours:>8.2f}{metrics['em_elapsed_time']:>8.2f}"
          f"{metrics['num_em_iters']:>7}{np.abs(ours - true).max():>10.4f}{0.5 * np.abs(ours - true).sum():>8.4f}"
          f"{np.max(np.abs(ours - true) / se):>8.2f}{np.mean((low <= true) & (true <= high)):>9.2f}")
    print(f"{'Google association.R (numpy)':<34}{t_base:>8.2f}{'':>8}{base_iters:>7}"
          f"{np.abs(base - true).max():>10.4f}{0.5 * np.abs(base - true).sum():>8.4f}")
    print("truth:\n", np.round(true, 4), "\nours:\n", np.round(ours, 4), "\nGoogle's algorithm:\n", np.round(base, 4))


def coverage(kind: str, n: int, seeds: range, workdir: Path) -> None:
    """The share of cells whose published 95% interval holds the truth, over ``seeds`` (ours only), with its
    binomial standard error at the nominal 0.95 (sqrt(0.95 · 0.05 / cells))."""
    import contextlib
    import io

    hits, cells, zs = 0, 0, []
    for seed in seeds:
        sim, _paths, _second, names2, args = simulate_case(kind, n, np.random.default_rng(seed), workdir)
        with contextlib.redirect_stderr(io.StringIO()):
            assert main(args) == 0
        res = read_assoc_results(workdir / "assoc-results.csv")
        labels1 = list(dict.fromkeys(res["var1_values"]))
        labels2 = list(dict.fromkeys(res["var2_values"]))
        shape = (len(labels1), len(labels2))
        true = truth(sim.index1, sim.index2, DOMAINS, names2, labels1, labels2)
        low, high = res["low_95"].reshape(shape), res["high_95"].reshape(shape)
        hits += int(np.sum((low <= true) & (true <= high)))
        cells += true.size
        zs.append(((res["proportion"].reshape(shape) - true) / res["std_error"].reshape(shape)).ravel())
    z = np.concatenate(zs)
    print(f"coverage {kind}: {n:,} clients x {len(seeds)} seeds: {hits}/{cells} = {hits / cells:.3f} "
          f"(nominal 0.95 ± {np.sqrt(0.95 * 0.05 / cells):.3f}); z: mean {z.mean():+.3f}, sd {z.std():.3f}")


def total_variation(kind: str, n: int, seeds: range, workdir: Path) -> None:
    """Mean (sd) over ``seeds`` of the total variation to the truth of ours (with the Other test), ours always
    with Other (``--keep-other``) and Google's association EM on the same reports (with Other exactly when ours
    has it; on ``bool-complete`` none, as Google's decode-assoc on its own association test)."""
    import contextlib
    import io

    tv: dict[str, list[float]] = {"ours": [], "ours --keep-other": [], "Google association.R (numpy)": []}
    kept = 0
    for seed in seeds:
        sim, paths, second, names2, args = simulate_case(kind, n, np.random.default_rng(seed), workdir)
        for name, extra in (("ours --keep-other", ["--keep-other"]), ("ours", [])):
            with contextlib.redirect_stderr(io.StringIO()):
                assert main([*args, *extra]) == 0
            res = read_assoc_results(workdir / "assoc-results.csv")
            labels1 = list(dict.fromkeys(res["var1_values"]))
            labels2 = list(dict.fromkeys(res["var2_values"]))
            true = truth(sim.index1, sim.index2, DOMAINS, names2, labels1, labels2)
            tv[name].append(0.5 * float(np.abs(res["proportion"].reshape(true.shape) - true).sum()))
        kept += "Other" in labels1
        base, _ = google_baseline(paths, second.var, second.params, labels1, labels2)
        tv["Google association.R (numpy)"].append(0.5 * float(np.abs(base - true).sum()))
    print(f"total variation {kind}: {n:,} clients x {len(seeds)} seeds (ours kept Other in {kept})")
    for name, values in tv.items():
        print(f"  {name:<32} mean {np.mean(values):.4f}  sd {np.std(values):.4f}")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", default="bool,strings")
    ap.add_argument("--coverage-seeds", type=int, default=0,
                    help="also the 95%% intervals' coverage over this many seeds (ours only)")
    ap.add_argument("--coverage-clients", type=int, default=40_000)
    ap.add_argument("--tv-seeds", type=int, default=0,
                    help="also the mean total variation of ours, ours --keep-other and Google's EM over this many "
                         "seeds")
    ap.add_argument("--tv-clients", type=int, default=50_000)
    ap.add_argument("--domain-params", default="32,2,32",
                    help="the domain's (and the boolean's) k,h,m (p = .25, q = .75, f = .5); e.g. 8,1,128 for "
                         "the setup of Google's association smoke test")
    return ap.parse_args()


if __name__ == "__main__":
    opts = parse()
    _k, _h, _m = (int(v) for v in opts.domain_params.split(","))
    PARAMS = ParamsFile(k=_k, h=_h, m=_m, p=0.25, q=0.75, f=0.5)
    print(f"python -m bench.accuracy.decode_assoc --clients {opts.clients} --seed {opts.seed} --cases {opts.cases} "
          f"--coverage-seeds {opts.coverage_seeds} --coverage-clients {opts.coverage_clients} "
          f"--tv-seeds {opts.tv_seeds} --tv-clients {opts.tv_clients} "
          f"--domain-params {opts.domain_params}; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}")
    for case in opts.cases.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            run_case(case, opts.clients, opts.seed, Path(tmp))
    for case in opts.cases.split(",") if opts.coverage_seeds else []:
        with tempfile.TemporaryDirectory() as tmp:
            coverage(case, opts.coverage_clients, range(100, 100 + opts.coverage_seeds), Path(tmp))
    for case in opts.cases.split(",") if opts.tv_seeds else []:
        with tempfile.TemporaryDirectory() as tmp:
            total_variation(case, opts.tv_clients, range(200, 200 + opts.tv_seeds), Path(tmp))
