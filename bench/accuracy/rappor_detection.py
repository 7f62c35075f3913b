"""Detection benchmark: :func:`ldpstream.estimators.detection.detect` against a re-implementation of Google's
RAPPOR decoder (``analysis/R/decode.R``) on the two regimes of the detection issue.

Regimes (one report per client, Google-compatible reports simulated exactly in distribution with
:meth:`Rappor.simulate_sketch`; true counts drawn multinomially, truth = their empirical proportions):

- ``zipf``: k = 128, h = 2, m = 64, p = .25, q = .75, f = .5, 10^6 clients, 200 true strings with Zipf(1)
  frequencies among 400 candidates.
- ``under``: k = 8, h = 2, m = 128, same p, q, f, 10^5 clients, 100 true strings with geometrically decaying
  frequencies (the top one 5%) among 1,100 candidates (candidates outnumber the C·k = 1,024 cells).

Google baseline (:func:`google_baseline`), step by step as in ``decode.R``/``alternative.R``:
``EstimateBloomCounts`` (per-cell proportion estimates and their sd, p̂ clamped to [0, 1]); five fits,
the first on the data and four on ``Resample`` copies (Gaussian noise with the cell sd added, sd × √2);
each fit is ``FitDistribution``: when S > 0.8·(rows) a non-negative lasso ``glmnet(X, Y, standardize =
FALSE, intercept = TRUE, lower.limits = 0, pmax = min(500, 0.8·rows))`` whose *last* path point gives the
support, then ``ConstrainedLinModel`` (unweighted least squares with ``b >= 0``, ``Σ b <= 1``);
reported = ``mean > 1e-6 + 2·sd`` over the five fits (``decode.R`` computes a Bonferroni α but does not
use it: ``PerformInference``'s tests are commented out). Differences from the R code: (1) the lasso path
is computed by FISTA on glmnet's objective ``(1/2n)‖y − a − Xb‖² + λ‖b‖₁`` over glmnet's default grid
(100 values, ``lambda.min.ratio`` 0.01 when rows < S, else 1e-4) with glmnet's stopping rules (more than
``pmax`` non-zero, deviance-ratio gain < 1e-5, ratio > 0.999), not glmnet's coordinate descent (solutions
agree to the solver tolerance); (2) ``lsei``'s extra constraint ``X b <= clamp(Y + 3 sd, .01, 1)`` per cell
is omitted (it binds only on cells 3 sd above their fit); (3) R's RNG is not reproduced (the resampling
noise comes from numpy).

Run (about 1-3 minutes per seed and regime on one core)::

    python -m bench.accuracy.rappor_detection --seeds 0 1 2 3 4 --files --out bench/results/rappor_detection.txt

``*`` marks detect's default (Benjamini–Hochberg at q = 0.10, adaptive to the share of absent candidates by
the two-stage procedure of Benjamini, Krieger and Yekutieli 2006, empirical-Bayes posterior means as points,
when the full design is well-determined). In the zipf regime three more rows: "storey" (BH at q/π̂0 with
Storey's π̂0: the default of the previous release, kept as ``detect(adaptive="storey")``), and two that
isolate the default's steps: "refit pt" (two-stage BH, refit values as points) and "plain" (plain BH at 0.10
and refit values: the default of two releases ago); in the under regime none of these steps runs (the full
design is underdetermined), so those rows would repeat ``*``. "no screen, LS z" (zipf only, where the
design is well-determined) is the evaluated alternative described in :mod:`ldpstream.estimators.detection`.
Also zipf only, on the same fit (``detect``'s ``full_fit``; docs/math/estimators.md, "Local false discovery
rates and the empirical null"): "lfdr NPMLE pi0" and "lfdr Storey pi0" (the largest set of smallest local
fdr's with mean <= 0.10, the null share from the NPMLE's atom at 0 or from Storey's estimate), "empirical
null" (adaptive BH at 0.10 under Efron's empirical null), and "frontier z > t" (fixed thresholds on the refit
z: the power frontier, not rules). Every one of these publishes the posterior means of its detected strings.
Each seed prints a line (true / false / TV / time of Google's re-implementation, the default, "storey" and "plain").

Writes a table per regime: per decoder, mean (min-max over seeds) of true and false detections, total
variation to the truth of the reported estimate (detected strings only, the rest 0) and time; with
``--files`` one extra run of the zipf regime goes through Google-format files (encode → sum-bits →
hash-candidates → decode) with 10^5 clients.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy import optimize, stats

from ldpstream.estimators.candidates import decode_bits
from ldpstream.estimators.detection import detect, storey_null_fraction
from ldpstream.estimators.empirical_bayes import posterior_mean
from ldpstream.estimators.estimate import Estimate
from ldpstream.estimators.numerics.least_squares import fista_constrained_ls
from ldpstream.estimators.numerics.simplex import project_capped_simplex
from ldpstream.mechanisms.rappor import Rappor

REGIMES: dict[str, dict[str, Any]] = {
    "zipf": {"k": 128, "h": 2, "m": 64, "n": 1_000_000, "true": 200, "cands": 400},
    "under": {"k": 8, "h": 2, "m": 128, "n": 100_000, "true": 100, "cands": 1100},
}


def true_distribution(regime: str, n_true: int) -> np.ndarray:
    if regime == "zipf":
        w = 1.0 / np.arange(1, n_true + 1)
        zipf: np.ndarray = w / w.sum()
        return zipf
    r = optimize.brentq(lambda r: 0.05 * (1 - r**n_true) / (1 - r) - 1, 0.5, 0.999999)
    return np.asarray(0.05 * r ** np.arange(n_true))


def simulate(regime: str, seed: int) -> tuple[Rappor, np.ndarray, sp.csr_matrix, np.ndarray, list[str]]:
    cfg = REGIMES[regime]
    mech = Rappor(cfg["k"], cfg["h"], cfg["m"], 0.25, 0.75, 0.5)
    cands = [f"true-{i}" for i in range(cfg["true"])] + [f"absent-{i}" for i in range(cfg["cands"] - cfg["true"])]
    table = mech.bloom_table(cands)
    rng = np.random.default_rng(seed)
    counts = np.zeros(len(cands), dtype=np.int64)
    counts[: cfg["true"]] = rng.multinomial(cfg["n"], true_distribution(regime, cfg["true"]))
    sketch = mech.simulate_sketch(counts, rng, table)
    return mech, sketch, mech.design_matrix(table), counts / counts.sum(), cands


# --- Google's decode.R, re-implemented -----------------------------------------------------------------


def _glmnet_nonneg_last(X: np.ndarray, y: np.ndarray, pmax: int) -> np.ndarray:
    """Coefficients at the last point of glmnet's non-negative lasso path (see module docstring)."""
    n, S = X.shape
    xm, ym = X.mean(axis=0), y.mean()
    Xc = X - xm
    yc = y - ym
    G = Xc.T @ Xc / n
    g = Xc.T @ yc / n
    lam_max = float(max(np.max(g), 1e-300))
    ratio = 0.01 if n < S else 1e-4
    lams = lam_max * ratio ** (np.arange(100) / 99)
    L = float(np.linalg.eigvalsh(G)[-1]) * 1.01
    tss = float(yc @ yc) / n
    b = np.zeros(S)
    last = b.copy()
    rsq_prev = 0.0
    for i, lam in enumerate(lams):
        x, yk, t = b.copy(), b.copy(), 1.0
        for _ in range(1000):
            x_new = np.maximum(yk - (G @ yk - g + lam) / L, 0.0)
            t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
            yk = x_new + ((t - 1) / t_new) * (x_new - x)
            done = float(np.max(np.abs(x_new - x))) <= 1e-7 * max(1e-12, float(np.max(x_new)))
            x, t = x_new, t_new
            if done:
                break
        if np.count_nonzero(x) > pmax:
            break
        b = x
        last = b
        rss = float(b @ G @ b - 2 * g @ b) + tss
        rsq = 1 - rss / tss if tss > 0 else 1.0
        if i > 0 and (rsq - rsq_prev < 1e-5 * rsq or rsq > 0.999):
            break
        rsq_prev = rsq
    return last


def google_baseline(sketch: np.ndarray, design: sp.csr_matrix, params: Rappor,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``Decode`` of ``decode.R``: returns ``(estimate, reported mask)`` as proportions (module docstring)."""
    counts = np.asarray(sketch, dtype=np.float64)
    keep = counts[:, 0] > 0
    counts = counts[keep]
    k = params.k
    X = np.asarray(design.todense())[np.repeat(keep, k)]
    p11, p01 = params.q_star, params.p_star
    p2 = p11 - p01
    Nc = counts[:, :1]
    est = (counts[:, 1:] - p01 * Nc) / p2 / Nc
    ph = np.clip((counts[:, 1:] - p01 * Nc) / (Nc * p2), 0, 1)
    r = ph * p11 + (1 - ph) * p01
    std = np.sqrt(Nc * r * (1 - r) / p2**2) / Nc
    N = float(counts[:, 0].sum())
    rows, S = X.shape
    coefs_all = []
    e_est = est
    for rep in range(5):
        if rep > 0:
            e_est = est + rng.normal(0.0, std)
            # (Resample also doubles the sd's variance; the sd only feeds lsei's cap, omitted here)
        y = e_est.ravel()
        support = np.arange(S)
        if rows * 0.8 < S:
            lasso = _glmnet_nonneg_last(X, y, int(min(500, rows * 0.8)))
            support = np.flatnonzero(lasso > 0)
        coefs = np.zeros(S)
        if support.size:
            Xs = X[:, support]
            G = Xs.T @ Xs
            b, _ = fista_constrained_ls(G, Xs.T @ y, project_capped_simplex, np.zeros(support.size),
                                        tol=1e-9, max_iter=20000, lipschitz=float(np.linalg.eigvalsh(G)[-1]) * 1.01)
            coefs[support] = b
        coefs_all.append(coefs)
    arr = np.array(coefs_all)
    ave, ssd = N * arr.mean(axis=0), N * arr.std(axis=0, ddof=1)
    reported = ave > 1e-6 + 2 * ssd
    return np.where(reported, ave / N, 0.0), reported


# --- detection rules evaluated on detect's fit (zipf regime: the full design is well-determined) -----------


def mean_lfdr_selection(lfdr: np.ndarray, alpha: float) -> np.ndarray:
    """The largest set of smallest local fdr's whose mean is at most ``alpha``: its expected share of false
    detections given the data (the Bayesian FDR) is that mean (Efron 2008, Stat. Sci. 23; Sun and Cai
    2007, JASA 102: with the true lfdr's, the most powerful rule at that marginal FDR)."""
    order = np.argsort(lfdr, kind="stable")
    running = np.cumsum(lfdr[order]) / np.arange(1, lfdr.size + 1)
    n = int(np.max(np.flatnonzero(running <= alpha) + 1, initial=0))
    mask = np.zeros(lfdr.size, dtype=bool)
    mask[order[:n]] = True
    return mask


def local_fdr(est: Any, null_mass: str) -> np.ndarray:
    """Local fdr ``π0 φ(x_s/se_s)/se_s / f̂(x_s)`` of each candidate from the full weighted LS ``x = β̂`` and
    ``se`` (null N(0, se²), exact), ``f̂`` the NPMLE's marginal density ``Σ_j g_j φ((x − a_j)/se)/se``.
    ``null_mass``: ``"npmle"`` takes π0 = the NPMLE's atom at 0 (then lfdr = the posterior probability that
    ``f_s = 0``), ``"storey"`` the conservative Storey estimate from the full LS p-values. Capped at 1."""
    fit = est.full_fit
    x, se, grid, prior = fit.estimates, fit.std_errors, fit.grid, fit.prior
    dens = np.exp(-0.5 * ((x[None, :] - grid[:, None]) / se[None, :]) ** 2)
    marginal = prior @ dens
    pi0 = float(prior[0]) if null_mass == "npmle" else storey_null_fraction(stats.norm.sf(x / se))
    return np.asarray(np.minimum(1.0, pi0 * np.exp(-0.5 * (x / se) ** 2) / np.maximum(marginal, 1e-300)))


def empirical_null(z: np.ndarray, half_width: float = 1.5) -> tuple[float, float]:
    """Efron's empirical null (2004, JASA 99; 2010, *Large-Scale Inference*, ch. 6): ``N(δ0, σ0²)``
    fitted by maximum likelihood to the z-values in ``[−half_width, half_width]``, a normal truncated to
    that interval (there, in a one-sided problem, the z's are mostly null)."""
    zc = z[np.abs(z) <= half_width]
    a, b = -half_width, half_width

    def nll(theta: np.ndarray) -> float:
        m, sd = float(theta[0]), float(np.exp(theta[1]))
        mass = stats.norm.cdf(b, m, sd) - stats.norm.cdf(a, m, sd)
        return float(-(stats.norm.logpdf(zc, m, sd).sum() - zc.size * np.log(max(mass, 1e-300))))

    res = optimize.minimize(nll, np.zeros(2), method="Nelder-Mead")
    return float(res.x[0]), float(np.exp(res.x[1]))


def _points(est: Any, mask: np.ndarray) -> np.ndarray:
    """Published values for a rule's detected set: the posterior means of the full LS (as detect's default)."""
    fit = est.full_fit
    out = np.zeros(mask.size)
    out[mask] = posterior_mean(fit.estimates[mask], fit.std_errors[mask], fit.grid, fit.prior)
    return out


def _lfdr_rule(null_mass: str) -> Callable[[Any], tuple[np.ndarray, np.ndarray]]:
    def rule(est: Any) -> tuple[np.ndarray, np.ndarray]:
        mask = mean_lfdr_selection(local_fdr(est, null_mass), 0.10)
        return _points(est, mask), mask
    return rule


def _empirical_null_bh(est: Any) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive BH at 0.10 with p-values under Efron's empirical null fitted to the full LS z's."""
    fit = est.full_fit
    d0, s0 = empirical_null(fit.estimates / fit.std_errors)
    pi0 = storey_null_fraction(stats.norm.sf((fit.estimates / fit.std_errors - d0) / s0))
    z = est.z_scores()  # the refit's, as detect's default (0 for unselected candidates)
    mask = _bh(stats.norm.sf((z - d0) / s0), min(0.10 / pi0, 1 - 1e-12)) & (z > d0)
    return _points(est, mask), mask


def _bh(p: np.ndarray, q: float) -> np.ndarray:
    order = np.argsort(p, kind="stable")
    ok = np.flatnonzero(p[order] <= q * np.arange(1, p.size + 1) / p.size)
    mask = np.zeros(p.size, dtype=bool)
    if ok.size:
        mask[order[: ok[-1] + 1]] = True
    return mask


def _threshold(t: float) -> Callable[[Any], tuple[np.ndarray, np.ndarray]]:
    def rule(est: Any) -> tuple[np.ndarray, np.ndarray]:
        mask = est.z_scores() > t
        return _points(est, mask), mask
    return rule


#: zipf-regime rows beyond detect's own (docs/math/estimators.md, "Local false discovery rates"); the
#: fixed thresholds on the refit z are the power frontier, not rules (t is not known before the data)
EVALUATED_RULES: dict[str, Callable[[Any], tuple[np.ndarray, np.ndarray]]] = {
    "lfdr NPMLE pi0/mean .10": _lfdr_rule("npmle"),
    "lfdr Storey pi0/mean .10": _lfdr_rule("storey"),
    "empirical null/bh 0.10": _empirical_null_bh,
    "frontier z > 1.75": _threshold(1.75),
    "frontier z > 1.80": _threshold(1.80),
    "frontier z > 1.85": _threshold(1.85),
}


# --- the benchmark ---------------------------------------------------------------------------------------


def score(estimate: np.ndarray, mask: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    reported = np.where(mask, estimate, 0.0)
    return {
        "true": int(np.sum(mask & (truth > 0))),
        "false": int(np.sum(mask & (truth == 0))),
        "tv": 0.5 * float(np.abs(reported - truth).sum()),
        "tv_all": 0.5 * float(np.abs(estimate - truth).sum()),
    }


def run_one(regime: str, seed: int) -> dict[str, dict[str, float]]:
    mech, sketch, X, truth, _ = simulate(regime, seed)
    out: dict[str, dict[str, float]] = {}
    decoders: dict[str, Callable[[], tuple[np.ndarray, np.ndarray]]] = {
        "google (re-impl.)": lambda: google_baseline(sketch, X, mech, np.random.default_rng(1000 + seed)),
    }
    variants: tuple[tuple[str, float, str | bool, bool, str], ...] = (
        ("bonferroni", 0.05, "two-stage", True, ""), ("bh", 0.05, "two-stage", True, ""),
        ("bh", 0.10, "two-stage", True, " *"), ("bh", 0.10, "storey", True, " storey"),
        ("bh", 0.10, "two-stage", False, " refit pt"), ("bh", 0.10, False, False, " plain"))
    for corr, level, adaptive, shrink, tag in variants:
        def ours(corr: str = corr, level: float = level, adaptive: str | bool = adaptive,
                 shrink: bool = shrink) -> tuple[np.ndarray, np.ndarray]:
            est = detect(sketch, X, mech.q_star, mech.p_star, corr, level,  # type: ignore[arg-type]
                         adaptive=adaptive, shrink=shrink)  # type: ignore[arg-type]
            return est.frequencies, est.significant(level, corr)  # type: ignore[arg-type]
        # in "under" the full design is not determined: the adaptive and shrink steps do not run
        if regime == "zipf" or (adaptive == "two-stage" and shrink):
            decoders[f"detect/{corr} {level:.2f}{tag}"] = ours

    def no_screen() -> tuple[np.ndarray, np.ndarray]:
        # evaluated alternative: the unconstrained weighted LS of all candidates, exact SEs, clipped at 0
        ls = decode_bits(sketch, X, mech.q_star, mech.p_star, "ls", exact_se_max=max(1024, X.shape[1]))
        clipped = Estimate(frequencies=np.maximum(ls.frequencies, 0.0), std_errors=ls.std_errors,
                           n_reports=ls.n_reports, method="ls/clipped")
        return clipped.frequencies, clipped.significant(0.10, "bh")
    if regime == "zipf":  # well-determined design only
        decoders["no screen, LS z/bh 0.10"] = no_screen
        for name, rule in EVALUATED_RULES.items():
            decoders[name] = lambda rule=rule: rule(detect(sketch, X, mech.q_star, mech.p_star))  # type: ignore[misc]
    for name, fn in decoders.items():
        t0 = time.perf_counter()
        est, mask = fn()
        res = score(est, mask, truth)
        res["time"] = time.perf_counter() - t0
        out[name] = res
    return out


def file_run(seed: int, n: int = 100_000) -> str:
    """One zipf-regime run through Google-format files (encode → sum-bits → hash-candidates → decode)."""
    import tempfile
    from pathlib import Path

    from ldpstream.cli import main
    from ldpstream.interop.rappor import read_results

    cfg = REGIMES["zipf"]
    rng = np.random.default_rng(seed)
    cands = [f"true-{i}" for i in range(cfg["true"])] + [f"absent-{i}" for i in range(cfg["cands"] - cfg["true"])]
    p = true_distribution("zipf", cfg["true"])
    vals = rng.choice(cfg["true"], size=n, p=p)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "params.csv").write_text(f"k,h,m,p,q,f\n{cfg['k']},{cfg['h']},{cfg['m']},0.25,0.75,0.5\n")
        buf = io.StringIO()
        buf.write("client,cohort,value\n")
        cohorts = rng.integers(0, cfg["m"], size=n)
        for i, (v, c) in enumerate(zip(vals.tolist(), cohorts.tolist(), strict=True)):
            buf.write(f"c{i},{c},{cands[v]}\n")
        (d / "values.csv").write_text(buf.getvalue())
        (d / "cands.txt").write_text("\n".join(cands) + "\n")
        (d / "secret.bin").write_bytes(rng.bytes(32))
        P = str(d / "params.csv")
        t0 = time.perf_counter()
        steps = [
            ["encode", "--params", P, "--values", str(d / "values.csv"), "--secret-file", str(d / "secret.bin"),
             "--insecure-seed", str(seed), "--out", str(d / "reports.csv")],
            ["sum-bits", "--params", P, "--reports", str(d / "reports.csv"), "--out", str(d / "counts.csv")],
            ["hash-candidates", "--params", P, "--candidates", str(d / "cands.txt"), "--out", str(d / "map.csv")],
            ["decode", "--params", P, "--counts", str(d / "counts.csv"), "--map", str(d / "map.csv"),
             "--correction", "bh", "--alpha", "0.10", "--out", str(d / "results.csv")],
        ]
        times = []
        for argv in steps:
            t1 = time.perf_counter()
            assert main(["rappor", *argv]) == 0, argv
            times.append(time.perf_counter() - t1)
        res = read_results(d / "results.csv")
        truth = np.bincount(vals, minlength=len(cands)) / n
        found = [cands.index(s) for s in res["string"]]
        tp = sum(truth[i] > 0 for i in found)
        est = np.zeros(len(cands))
        est[found] = res["proportion"]
        tv = 0.5 * float(np.abs(est - truth).sum())
        # Google's procedure on the same counts.csv and map.csv
        from ldpstream.interop.rappor import read_counts, read_map, read_params

        params = read_params(P)
        cmap = read_map(d / "map.csv", params)
        g_est, g_mask = google_baseline(read_counts(d / "counts.csv", params), cmap.matrix, params.mechanism(),
                                        np.random.default_rng(seed))
        order = [cmap.strings.index(c) for c in cands]
        g = score(g_est[order], g_mask[order], truth)
        return (f"files (zipf regime, {n} clients, seed {seed}, decode --correction bh --alpha 0.10): "
                f"{len(found)} detected, {tp} true, {len(found) - tp} false, TV {tv:.3f}; "
                "times encode/sum-bits/hash/decode "
                + "/".join(f"{t:.1f}" for t in times) + f" s (total {time.perf_counter() - t0:.1f} s); "
                f"google (re-impl.) on the same files: {g['true'] + g['false']} detected, {g['true']} true, "
                f"{g['false']} false, TV {g['tv']:.3f}")


#: decoders printed seed by seed (all are in the table of means)
PER_SEED = ("google (re-impl.)", "detect/bh 0.10 *", "detect/bh 0.10 storey", "detect/bh 0.10 plain")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES))
    ap.add_argument("--files", action="store_true", help="also runs through Google-format files")
    ap.add_argument("--file-seeds", type=int, nargs="+", default=None,
                    help="seeds of the Google-format file runs (default: the first of --seeds)")
    ap.add_argument("--file-clients", type=int, default=100_000, help="clients of each file run")
    ap.add_argument("--out", help="also write the report here")
    args = ap.parse_args()
    lines = []
    t_start = time.perf_counter()
    for regime in args.regimes:
        runs = []
        lines.append(f"regime {regime} {REGIMES[regime]}, seeds {args.seeds}")
        lines.append("per seed: true / false / TV (reported) / time s")
        for seed in args.seeds:
            runs.append(run_one(regime, seed))
            lines.append(f"  seed {seed:>3}: " + " | ".join(
                f"{name.strip(' *')}{' *' if name.endswith('*') else ''} {r['true']:.0f} / {r['false']:.0f} / "
                f"{r['tv']:.3f} / {r['time']:.2f}"
                for name, r in runs[-1].items() if name in PER_SEED))
            print(lines[-1], flush=True)
        lines.append(f"{'decoder':<24} {'true det.':>16} {'false det.':>16} {'TV (reported)':>20} "
                     f"{'TV (all est.)':>20} {'time s':>14}")
        for name in runs[0]:
            cells = []
            for key, fmt in (("true", ".1f"), ("false", ".1f"), ("tv", ".3f"), ("tv_all", ".3f"), ("time", ".2f")):
                vals = [r[name][key] for r in runs]
                cells.append(f"{np.mean(vals):{fmt}} ({min(vals):{fmt}}-{max(vals):{fmt}})")
            lines.append(f"{name:<24} " + " ".join(f"{c:>16}" if i < 2 else f"{c:>20}" if i < 4 else f"{c:>14}"
                                                  for i, c in enumerate(cells)))
        lines.append("")
        print("\n".join(lines[-len(runs[0]) - 2:]), flush=True)
    if args.files:
        for seed in args.file_seeds or args.seeds[:1]:
            lines.append(file_run(seed, args.file_clients))
            print(lines[-1], flush=True)
    lines.append(f"wall time {time.perf_counter() - t_start:.0f} s")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write("$ python -m bench.accuracy.rappor_detection " + " ".join(
                ["--seeds", *map(str, args.seeds), "--regimes", *args.regimes]
                + (["--files", "--file-clients", str(args.file_clients), "--file-seeds",
                    *map(str, args.file_seeds or args.seeds[:1])] if args.files else []))
                + "\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
