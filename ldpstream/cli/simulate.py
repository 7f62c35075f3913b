"""``ldpstream simulate`` and ``ldpstream tune``: Monte Carlo accuracy of the mechanisms and decoders.

``simulate``
    Draws ``--trials`` populations of ``--n`` clients whose values are the symbols 0..S−1 (``--support``)
    distributed as ``--dist`` (see :mod:`ldpstream.distributions`), privatizes each population through the
    mechanism's exact aggregate simulation (``simulate_sketch``: the sketch has exactly the law of the
    sketch of n individually encoded reports, at O(C·k) cost), decodes it with ``--decoder`` and reports
    the mean and median over trials of the ℓ1, ℓ2², ℓ∞, TV and Hellinger distances to the sample's
    empirical distribution and to the true distribution (:mod:`ldpstream.simulation.losses`).

    Open alphabet (default): symbol s is the string ``"s{s}"`` hashed per cohort. ``--closed``: the
    symbols are integers mapped through per-cohort permutations. k-RR and k-RAPPOR always encode the
    symbols directly (k = S). For O-RR/O-RAPPOR an unset ``--k``, ``--cohorts``, ``--hashes`` is chosen
    by the tuner's analytic prediction (the first of :func:`ldpstream.simulation.grid_search.ranked_predictions`).

    RAPPOR: ``--epsilon E`` sets f = 0 and q = e^{E/(2h)}/(1 + e^{E/(2h)}), p = 1 − q, so one report is
    exactly E-LDP (:func:`ldpstream.simulation.setups.rappor_rates_for_epsilon`); or give ``--p --q [--f]``
    explicitly (then ε is derived). Defaults: k = next power of two ≥ S, h = 2, C = 32.

    ``--buckets B [--change X]``: windows of B buckets over a memoized panel, X of it changing value halfway,
    decoded as the live decoder does (:mod:`ldpstream.simulation.panel`), measured against each window's values.

``tune``
    Recommends a mechanism and parameters for ``(ε, S, n, distribution)`` (:func:`ldpstream.simulation.recommend.tune`).
    The analytic variance model is the primary criterion: for decoders on the simplex (``project``,
    ``nnls``, ``mle``, ``truncate``) the predicted ℓ1 of the *projected* estimate
    (:func:`ldpstream.simulation.error_model.projected_l1`, within ±4% of simulation at n = 10^6, S = 256), for ``ls`` /
    ``unbiased`` that of the unprojected one. Each family's grid is searched (O-RR: k ∈ {2..6, 8, 16, …},
    C up to 4096), and its ``--keep`` best points of distinct k are simulated on ``--trials`` shared
    populations; simulation overrides the model only when the difference exceeds ``--z`` standard errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.decoder.published import decode_window
from ldpstream.distributions import parse_distribution
from ldpstream.errors import ParameterError
from ldpstream.estimators import DesignCache, Estimate, FactorCache
from ldpstream.progress import Progress
from ldpstream.registry import MetricConfig, Registry
from ldpstream.simulation.error_model import criterion
from ldpstream.simulation.losses import LOSSES
from ldpstream.simulation.panel import WindowDecoder, run_window_trials
from ldpstream.simulation.recommend import TUNE_LOSSES, tune
from ldpstream.simulation.scenarios import build_setup
from ldpstream.simulation.setups import DECODERS, MECHANISM_NAMES, SIMULATED_DECODERS, Setup, with_candidate_list
from ldpstream.simulation.trials import run_trials


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``simulate`` and ``tune`` subcommands."""
    sim = subparsers.add_parser(
        "simulate",
        help="Monte Carlo error of a mechanism and decoder on a simulated population",
        description=__doc__.split("``tune``")[0].split("``simulate``", 1)[1].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument("--mechanism", required=True, choices=MECHANISM_NAMES)
    sim.add_argument("--epsilon", type=float, help="privacy level ε of one report")
    sim.add_argument("--k", type=int, help="output symbols / Bloom bits / buckets (k-RR, k-RAPPOR, OUE, SS, HR: "
                     "must equal --support; hashed mechanisms: unset k, cohorts, hashes are chosen by the model)")
    sim.add_argument("--cohorts", type=int, help="hash cohorts C (O-RR, O-RAPPOR, RAPPOR, O-OUE, CMS, HCMS)")
    sim.add_argument("--hashes", type=int, help="Bloom hashes h (O-RAPPOR, O-OUE, RAPPOR)")
    sim.add_argument("--closed", action="store_true", help="closed alphabet: per-cohort permutations, no hashing")
    sim.add_argument("--p", type=float, help="RAPPOR: P(report 1 | PRR bit 0)")
    sim.add_argument("--q", type=float, help="RAPPOR: P(report 1 | PRR bit 1)")
    sim.add_argument("--f", type=float, help="RAPPOR: permanent randomization probability")
    sim.add_argument("--support", type=int, required=True, help="number of symbols S")
    sim.add_argument("--n", type=int, required=True, help="clients per trial")
    sim.add_argument(
        "--dist", default="geometric", help="uniform, geometric, zipf:A, binomial:P, dirichlet:A, file:PATH"
    )
    sim.add_argument("--decoder", default="project", choices=SIMULATED_DECODERS)
    sim.add_argument("--unlisted", type=int, default=0, metavar="K",
                     help="hashed mechanisms: the K most frequent strings left off the candidate list (decoded with "
                          "an 'other' term, as the live decoder does)")
    sim.add_argument("--decoys", type=int, default=0, metavar="N",
                     help="hashed mechanisms: N strings no client holds added to the candidate list")
    sim.add_argument("--buckets", type=int, default=1, metavar="B",
                     help="a window of B buckets over one panel of clients, every client reporting in each, "
                          "memoized as the SDK does by default, decoded as the live decoder decodes windows")
    sim.add_argument("--change", type=float, default=0.0, metavar="X",
                     help="with --buckets: the share X of clients that draw a new value halfway through the window "
                          "(coverage is of the distribution of the values over the window's reports)")
    sim.add_argument("--trials", type=int, default=10)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.add_argument("--plot", metavar="FILE", help="also write a figure (.png or .svg) of one simulated stream: "
                     "estimates with 95%% intervals beside the truth, error and interval width against n")
    sim.set_defaults(func=run_simulate)

    tn = subparsers.add_parser(
        "tune",
        help="recommend a mechanism and its parameters for ε, support and n",
        description="Predict (analytic variance model) and simulate the error of candidate mechanisms and "
        "parameters, and mark the recommendation. See ldpstream.simulation.error_model for the model.",
    )
    tn.add_argument("--epsilon", type=float, required=True)
    tn.add_argument("--support", type=int, required=True)
    tn.add_argument("--n", type=int, required=True)
    tn.add_argument("--dist", default="geometric")
    tn.add_argument("--closed", action="store_true", help="closed alphabet (also considers k-RR and k-RAPPOR)")
    tn.add_argument("--decoder", default="project", choices=DECODERS)
    tn.add_argument("--loss", default="l1", choices=TUNE_LOSSES,
                    help="the error to minimize: l1 (default) or l2sq (squared ℓ2)")
    tn.add_argument("--trials", type=int, default=4, help="simulated trials per alternative (0: model only)")
    tn.add_argument("--keep", type=int, default=2, help="best predicted points (distinct k) simulated per family")
    tn.add_argument("--z", type=float, default=2.5, help="standard errors by which simulation must beat the model")
    tn.add_argument("--rel-tol", type=float, default=0.01,
                    help="prefer the smallest sketch among predictions within this fraction of the best (0: off)")
    tn.add_argument("--reference", default="empirical", choices=("empirical", "true"),
                    help="measure errors against the sample's empirical distribution or the true one")
    tn.add_argument("--seed", type=int, default=0)
    tn.add_argument("--json", action="store_true")
    tn.add_argument("--plot", metavar="FILE", help="also write a figure (.png or .svg) of one simulated stream of "
                    "the recommended mechanism, as simulate --plot")
    tn.set_defaults(func=run_tune)


#: What an offline run on one machine can do: each bound is far beyond the papers' settings (S = 256,
#: n = 10^6, C = 64, ε up to 10), and an argument beyond it is refused instead of running out of memory or
#: time.
LIMITS: dict[str, tuple[float, float]] = {
    "support": (1, 2**20),
    "n": (1, 10**12),
    "trials": (1, 10**5),
    "k": (1, 2**16),
    "cohorts": (1, 2**16),
    "hashes": (1, 64),
    "keep": (1, 100),
    "epsilon": (1e-6, 50.0),
}


def _check_range(name: str, value: float | None, *, low: float | None = None) -> None:
    """Refuse ``--name value`` outside :data:`LIMITS` (``low`` overrides the lower bound), NaN included."""
    if value is None:
        return
    bottom, top = LIMITS[name]
    bottom = bottom if low is None else low
    if not bottom <= value <= top:
        raise ParameterError(f"--{name.replace('_', '-')} must be in {_number(bottom)}..{_number(top)}, got {value}")


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def run_simulate(args: argparse.Namespace) -> int:
    """Entry point of ``ldpstream simulate``."""
    for name in ("support", "n", "trials", "k", "cohorts", "hashes", "epsilon"):
        _check_range(name, getattr(args, name))
    _check_plot(args.plot)
    t0 = time.perf_counter()
    _check_range("support", args.decoys, low=0)
    rng = np.random.default_rng(args.seed)
    p = parse_distribution(args.dist, args.support, rng)
    wrong_list = bool(args.unlisted or args.decoys)
    if wrong_list and args.plot:
        raise ParameterError("--plot draws a complete candidate list: give it without --unlisted and --decoys")
    window = args.buckets > 1 or args.change > 0
    if not 1 <= args.buckets <= 1000 or not 0 <= args.change <= 1:
        raise ParameterError(f"--buckets must be in 1..1,000 and --change in 0..1, got {args.buckets} and "
                             f"{args.change}")
    if window and (wrong_list or args.plot or args.buckets < 2):
        raise ParameterError("--buckets B (B >= 2, with --change) simulates a complete list without --plot: give it "
                             "without --unlisted, --decoys and --plot")
    if wrong_list:
        p = np.concatenate([p, np.zeros(args.decoys)])  # the decoys: candidates no client holds
    with Progress("simulate", args.trials) as progress:
        progress.update(0, "choosing the parameters", force=True)
        setup = build_setup(
            args.mechanism, args.epsilon, p.size, closed=args.closed, k=args.k, cohorts=args.cohorts,
            hashes=args.hashes, p=args.p, q=args.q, f=args.f, n=args.n, dist=p, decoder=args.decoder,
        )
        if wrong_list:
            setup = with_candidate_list(setup, p, args.unlisted, args.decoys)
        progress.update(0, f"trials of {args.n:,} clients", force=True)
        if window:
            res = run_window_trials(window_metric(setup, args.decoder), p, args.n, args.buckets, args.change,
                                    args.trials, rng, _live_window_decoder(window_metric(setup, args.decoder)),
                                    on_trial=lambda done: progress.update(done, force=True))
        else:
            res = run_trials(setup, p, args.n, args.decoder, args.trials, rng,
                             on_trial=lambda done: progress.update(done, force=True))[args.decoder]
        if args.plot:
            progress.update(note="drawing the figure", force=True)
            figure = str(plot_stream(args.plot, setup, p, args.n, args.decoder, np.random.default_rng(args.seed),
                                     f"simulate: {args.mechanism} ε={args.epsilon} S={args.support} "
                                     f"dist={args.dist} decoder={args.decoder}"))
    elapsed = time.perf_counter() - t0
    out: dict[str, Any] = {
        "parameters": {
            **setup.parameters(),
            "n": args.n,
            "dist": args.dist,
            "decoder": args.decoder,
            "trials": args.trials,
            "seed": args.seed,
            "unlisted": args.unlisted,
            "decoys": args.decoys,
            "buckets": args.buckets,
            "change": args.change,
        },
        "losses": res.summary(),
        "coverage": res.coverage,
        "coverage_min": res.coverage_min,
        "detections": res.detections,
        "false_detections": res.false_detections,
        "seconds": elapsed,
        "seconds_per_trial": res.seconds / args.trials,
    }
    if args.plot:
        out["plot"] = figure
    if args.json:
        print(json.dumps(out, sort_keys=False))
        return 0
    params = out["parameters"]
    print("simulate: " + ", ".join(f"{k}={v}" for k, v in params.items()))
    print(f"{'loss':<10} {'mean (empirical)':>17} {'median (empirical)':>19} {'mean (true)':>12} {'median (true)':>14}")
    summ = out["losses"]
    for name in LOSSES:
        e, t = summ["empirical"][name], summ["true"][name]
        print(f"{name:<10} {e['mean']:>17.6g} {e['median']:>19.6g} {t['mean']:>12.6g} {t['median']:>14.6g}")
    if out["coverage"] is not None:
        worst = "" if out["coverage_min"] is None else f", lowest per value (p >= 1%) {out['coverage_min']:.3f}"
        listed = " of the listed candidates" if wrong_list else ""
        truth = "the window's distribution of values" if window else "the true probabilities"
        print(f"95% interval coverage of {truth}{listed}: {out['coverage']:.3f}{worst}")
    if out["detections"] is not None:
        print(f"detections per trial: {out['detections']:.1f}, of which no client holds {out['false_detections']:.1f}")
    print(f"{elapsed:.2f} s in all, {out['seconds_per_trial']:.3f} s per trial")
    if args.plot:
        print(f"figure: {out['plot']}")
    return 0


def window_metric(setup: Setup, decoder: str) -> MetricConfig:
    """The live metric of ``setup``'s mechanism (its values the symbols 0..S−1) decoded by ``decoder``."""
    spec: dict[str, Any] = {"id": 1, "bucket_seconds": 3600, **setup.mechanism.parameters(), "estimator": decoder}
    if setup.mechanism.name == "rappor":
        spec["candidates"] = list(setup.candidates or [f"s{i}" for i in range(setup.support)])
    elif not setup.closed:
        spec["support"] = setup.support
    return Registry.from_dict({"metrics": {"simulated": spec}})["simulated"]


def _live_window_decoder(metric: MetricConfig) -> WindowDecoder:
    """The live decoder's window decode of ``metric`` (its caches kept across the trials)."""
    designs, factors = DesignCache(), FactorCache()

    def decode(summed: np.ndarray, buckets: Sequence[np.ndarray]) -> Estimate:
        return decode_window(metric, summed, buckets, design_cache=designs, factor_cache=factors)[0]

    return decode


def _fmt_params(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={d[k]}" for k in ("k", "cohorts", "hashes") if k in d)


def run_tune(args: argparse.Namespace) -> int:
    """Entry point of ``ldpstream tune``."""
    for name in ("support", "n", "keep", "epsilon"):
        _check_range(name, getattr(args, name))
    _check_range("trials", args.trials, low=0)
    _check_plot(args.plot)
    rng = np.random.default_rng(args.seed)
    p = parse_distribution(args.dist, args.support, rng)
    with Progress("tune") as progress:

        def step(done: int, total: int, what: str) -> None:
            progress.total = total
            progress.update(done, what, force=True)

        result = tune(
            args.epsilon, args.support, args.n, p, closed=args.closed, decoder=args.decoder,
            trials=args.trials, keep=args.keep, seed=args.seed, reference=args.reference, z=args.z,
            rel_tol=args.rel_tol, loss=args.loss, on_step=step,
        )
        figure = None
        if args.plot:
            progress.update(note="drawing the figure", force=True)
            rec = result.recommended
            setup = build_setup(rec.mechanism, args.epsilon, args.support, closed=args.closed,
                                k=rec.params.get("k"), cohorts=rec.params.get("cohorts"),
                                hashes=rec.params.get("hashes"), n=args.n, dist=p, decoder=args.decoder)
            figure = str(plot_stream(args.plot, setup, p, args.n, args.decoder, np.random.default_rng(args.seed),
                                     f"tune: recommended {rec.mechanism} {_fmt_params(rec.params)} "
                                     f"ε={args.epsilon} S={args.support} dist={args.dist} decoder={args.decoder}"))
    if args.json:
        print(json.dumps({**result.to_dict(), "dist": args.dist, **({"plot": figure} if figure else {})}))
        return 0
    alphabet = "closed" if args.closed else "open"
    print(
        f"tune: epsilon={args.epsilon} support={args.support} n={args.n} dist={args.dist} alphabet={alphabet} "
        f"decoder={args.decoder} trials={args.trials} reference={args.reference}"
    )
    if args.loss == "l1":
        what = "projected" if criterion(args.decoder) == "l1_projected" else "unprojected"
        print(f"model: predicted ℓ1 of the {what} estimate (analytic variance model; 'unproj.' = before "
              "projection);")
    else:
        print("model: predicted ℓ2² of the unprojected estimate (analytic variance model; 'unproj.' = its ℓ1);")
    label = "ℓ1" if args.loss == "l1" else "ℓ2²"
    print(f"simulated: {label} vs the {args.reference} distribution over {args.trials} trials with decoder "
          f"{args.decoder}, median (ℓ1) and mean ({label}) ± pooled standard error")
    print(f"  {'mechanism':<9} {'parameters':<28} {'model ' + label:>9} {'unproj.':>8} {'sim. median':>11} "
          f"{'sim. mean ± se':>22}")
    for a in result.alternatives:
        mark = "*" if a.recommended else " "
        med = f"{a.simulated_l1:.4f}" if a.simulated_l1 is not None else "-"
        mean = (f"{a.simulated_mean:.4g} ± {a.simulated_se:.2g}"
                if a.simulated_mean is not None and a.simulated_se is not None else "-")
        print(f"{mark} {a.mechanism:<9} {_fmt_params(a.params):<28} {a.predicted:>9.4g} {a.predicted_l1:>8.4f} "
              f"{med:>11} {mean:>22}")
    rec = result.recommended
    print(f"recommended (*): {rec.mechanism} {_fmt_params(rec.params)}  ({result.seconds:.1f} s)")
    if figure:
        print(f"figure: {figure}")
    sys.stdout.flush()
    return 0


def _check_plot(path: str | None) -> None:
    """Refuse a --plot file of another format before any work is done."""
    if path:
        from ldpstream.decoder.report import check_output

        check_output(path)


#: Points of the simulated stream a --plot figure shows: n from n/STREAM_SPAN to n, geometrically spaced.
STREAM_POINTS, STREAM_SPAN = 8, 128


def plot_stream(out: str, setup: Setup, p: np.ndarray, n: int, decoder: str, rng: np.random.Generator,
                title: str) -> Path:
    """A figure of one simulated stream (:func:`ldpstream.decoder.report.plot_metric` over n): populations of
    geometrically growing size up to ``n`` from ``p``, each privatized and decoded as in :func:`run_trials`,
    published in the decoder's form; the truth is ``p``."""
    from ldpstream.decoder.report import plot_metric, published_form
    from ldpstream.distributions import sample_counts

    names = [f"s{i}" for i in range(len(p))]
    sizes = np.unique(np.geomspace(max(n / STREAM_SPAN, 1), n, STREAM_POINTS).round().astype(np.int64))
    published = []
    for size in sizes.tolist():
        sketch = setup.simulate_sketch(sample_counts(p, size, rng), rng)
        est = setup.decode_estimate(sketch, decoder)
        low = high = None
        if est.std_errors is not None or est.interval is not None:
            low, high = est.ci(0.95, clip=True)
        published.append(published_form(est.frequencies, low, high, names, size, metric=setup.name))
    truth = {name: float(x) for name, x in zip(names, p, strict=True)}
    return plot_metric(out, published[-1], published[-2::-1], truth, title=title, over="n")
