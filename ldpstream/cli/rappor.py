"""``ldpstream rappor``: Google-RAPPOR-compatible file tools (formats: :mod:`ldpstream.interop.rappor`).

Sub-commands, in pipeline order: ``encode`` (Google's ``rappor_sim.py``: each ``client,cohort,value`` row becomes
one report through :class:`ldpstream.mechanisms.rappor.RapporClient`, the IRR from the operating system's CSPRNG),
``sum-bits``, ``hash-candidates``, ``decode`` (Google's ``decode_dist.R``: detection by
:func:`ldpstream.estimators.detection.detect`, or a plain candidate decoder with ``--method``) and
``decode-assoc`` (Google's ``decode_assoc.R``). What each reads and writes: docs/cli.md#google-rappor-files.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.interop.rappor import (
    ParamsFile,
    Reports,
    read_candidates,
    read_counts,
    read_map,
    read_params,
    read_reports,
    read_values,
    sum_bits,
    write_counts,
    write_map,
    write_reports,
    write_results,
)

CLIENT_SECRET_PREFIX = b"ldpstream/rappor-client/v1"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rappor`` and its sub-subcommands."""
    parser = subparsers.add_parser(
        "rappor",
        help="Google RAPPOR file tools: encode, sum-bits, hash-candidates, decode, decode-assoc",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="rappor_command", metavar="STEP")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--params", required=True, help="params.csv (header k,h,m,p,q,f)")
        return p

    enc = add("encode", "client,cohort,value rows → reports.csv (client,cohort,bloom,prr,irr)")
    enc.add_argument("--values", required=True, help="values CSV with header client,cohort,value ('-' = stdin)")
    enc.add_argument("--secret-file", help="master secret (raw bytes); per-client secrets are derived from it")
    enc.add_argument("--insecure-seed", type=int, help="seeded IRR instead of the CSPRNG: for tests only")
    enc.add_argument("--out", default="-", help="reports.csv path ('-' = stdout)")
    enc.set_defaults(func=run_encode)

    sb = add("sum-bits", "reports.csv → counts.csv (per cohort: reports, then reports with bit j set)")
    sb.add_argument("--reports", required=True, help="reports.csv ('-' = stdin)")
    sb.add_argument("--out", default="-", help="counts.csv path ('-' = stdout)")
    sb.set_defaults(func=run_sum_bits)

    hc = add("hash-candidates", "candidate strings (one per line) → map.csv")
    hc.add_argument("--candidates", default="-", help="candidates file ('-' = stdin)")
    hc.add_argument("--out", default="-", help="map.csv path ('-' = stdout)")
    hc.set_defaults(func=run_hash_candidates)

    dec = add("decode", "counts.csv + map.csv → results.csv (estimates, standard errors, 95%% intervals)")
    dec.add_argument("--counts", required=True)
    dec.add_argument("--map", required=True)
    dec.add_argument("--method", default="detect", choices=("detect", "ls", "nnls", "project", "mle"),
                     help="detect (default: screen, refit, test) or a plain candidate decoder")
    dec.add_argument("--correction", default="bh", choices=("bonferroni", "bh"),
                     help="multiple-testing correction over all candidates (default bh: false discovery rate; "
                          "with detect and a well-determined design, Benjamini-Hochberg adapted to the share of "
                          "absent candidates by the two-stage procedure of Benjamini, Krieger and Yekutieli 2006)")
    dec.add_argument("--alpha", type=float, default=0.10,
                     help="false discovery rate (bh, default 0.10) or family-wise error (bonferroni)")
    dec.add_argument("--no-other", action="store_true", help="no 'other' term for strings outside the map")
    rows = dec.add_mutually_exclusive_group()
    rows.add_argument("--significant", action="store_true",
                      help="only the detected candidates (the default; accepted for compatibility)")
    rows.add_argument("--all", action="store_true", help="every candidate with its estimate and interval")
    dec.add_argument("--out", default="-", help="results.csv path ('-' = stdout)")
    dec.set_defaults(func=run_decode)

    da = sub.add_parser(
        "decode-assoc",
        help="association reports → assoc-results.csv (joint table of two variables, intervals)",
        description=DECODE_ASSOC_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    da.add_argument("--metric-name", required=True, help="the metric whose variables are decoded (schema's metric)")
    da.add_argument("--schema", required=True, help="rappor-vars.csv (metric, var, var_type, params)")
    da.add_argument("--reports", required=True, help="reports CSV: client,cohort,<one column per variable>")
    da.add_argument("--params-dir", required=True, help="directory holding <params>.csv for the schema's params")
    da.add_argument("--var1", required=True, help="first variable (a string)")
    da.add_argument("--var2", required=True, help="second variable (a boolean, or a string with --map2)")
    da.add_argument("--map1", default="", help="map.csv of var1's candidates")
    da.add_argument("--map2", default="", help="map.csv of var2's candidates, when var2 is a string (extension)")
    da.add_argument("--create-bool-map", action="store_true", help="decode a boolean var2 (required for one)")
    da.add_argument("--remove-bad-rows", action="store_true", help="drop rows with an empty value (else an error)")
    da.add_argument("--max-em-iters", type=int, default=1000, help="at most this many EM iterations (default 1000)")
    da.add_argument("--reports-sample-size", type=int, default=-1,
                    help="decode a uniform sample of this many reports (default -1: all)")
    da.add_argument("--output-dir", default=".", help="where assoc-results.csv and assoc-metrics.json go")
    da.add_argument("--all-candidates", action="store_true",
                    help="every map string is a candidate (default: those detected in the marginal, as Google)")
    da.add_argument("--keep-other", action="store_true",
                    help="always publish a string variable's \"Other\" category (default: only when the test of "
                         "no mass outside its candidates rejects at 5%%)")
    da.add_argument("--em", default="plain", choices=("plain", "squarem"),
                    help="plain (default: EM from the uniform table until no cell moves by 1e-6 or "
                         "--max-em-iters, Google's association.R) or squarem (accelerated to the maximum)")
    da.add_argument("--top", type=int, help="at most this many candidates of a string variable (largest first)")
    da.add_argument("--correction", default="bh", choices=("bonferroni", "bh"),
                    help="multiple-testing rule of the marginal detection (default bh)")
    da.add_argument("--alpha", type=float, default=0.10, help="level of the marginal detection (default 0.10)")
    da.add_argument("--seed", type=int, help="seed of --reports-sample-size's sample")
    for flag in ("--num-cores", "--em-executable", "--tmp-dir"):
        da.add_argument(flag, help="accepted for compatibility with decode_assoc.R; ignored")
    da.set_defaults(func=run_decode_assoc)

    def usage(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)


def client_secret(master: bytes, client: str) -> bytes:
    """``HMAC-SHA256(master, "ldpstream/rappor-client/v1" ‖ utf8(client))``: one secret per client id."""
    return hmac.new(master, CLIENT_SECRET_PREFIX + client.encode("utf-8"), hashlib.sha256).digest()


def _master_secret(path: str | None) -> bytes:
    if path is None:
        return os.urandom(32)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ParameterError(f"cannot read secret file {path!r}: {exc}") from None
    if len(data) < 16:
        raise ParameterError(f"secret file {path!r} holds {len(data)} bytes; use at least 16 random bytes")
    return data


def encode_values(
    params: ParamsFile,
    clients: list[str],
    cohorts: np.ndarray,
    values: list[str],
    master: bytes,
    rng: Any = None,
) -> Reports:
    """Encode one report per row (module docstring): Bloom, PRR per client and value, vectorized IRR.

    ``rng`` defaults to the CSPRNG (:data:`ldpstream.mechanisms.randomness.SECURE`).
    """
    from ldpstream.mechanisms.base import unpack_bits
    from ldpstream.mechanisms.randomness import SECURE
    from ldpstream.mechanisms.rappor import RapporClient

    mech = params.mechanism()
    n, k = len(values), params.k
    if np.any(cohorts >= params.m) or np.any(cohorts < 0):
        raise ParameterError(f"cohorts must lie in 0..{params.m - 1}")
    nbytes = -(-k // 8)
    bloom_bytes = bytearray()
    prr_bytes = bytearray()
    agents: dict[tuple[str, int], Any] = {}
    for client, cohort, value in zip(clients, cohorts.tolist(), values, strict=True):
        agent = agents.get((client, cohort))
        if agent is None:
            agent = RapporClient(mech, client_secret(master, client), cohort)
            agents[(client, cohort)] = agent
        bloom = agent.bloom(value)
        bloom_bytes += bloom.to_bytes(nbytes, "little")
        prr_bytes += agent.prr(bloom).to_bytes(nbytes, "little")
    bloom_bits = unpack_bits(np.frombuffer(bytes(bloom_bytes), dtype=np.uint8).reshape(n, nbytes), k)
    prr_bits = unpack_bits(np.frombuffer(bytes(prr_bytes), dtype=np.uint8).reshape(n, nbytes), k)
    irr = mech.irr_batch(prr_bits.astype(bool), SECURE if rng is None else rng)
    return Reports(list(clients), np.asarray(cohorts, dtype=np.int64), irr.astype(np.uint8), bloom_bits, prr_bits)


def run_encode(args: argparse.Namespace) -> int:
    params = read_params(args.params)
    vals = read_values(args.values, cohorts=params.m)
    rng = None if args.insecure_seed is None else np.random.default_rng(args.insecure_seed)
    if rng is not None:
        print("ldpstream rappor encode: warning: --insecure-seed makes the IRR predictable", file=sys.stderr)
    reports = encode_values(params, vals.clients, vals.cohorts, vals.values, _master_secret(args.secret_file), rng)
    write_reports(args.out, reports)
    return 0


def run_sum_bits(args: argparse.Namespace) -> int:
    params = read_params(args.params)
    reports = read_reports(args.reports, params.k, cohorts=params.m)
    write_counts(args.out, sum_bits(reports.cohorts, reports.irr, params.m))
    return 0


def run_hash_candidates(args: argparse.Namespace) -> int:
    from ldpstream.mechanisms import hashing

    params = read_params(args.params)
    candidates = read_candidates(args.candidates)
    if not candidates:
        raise ParameterError("no candidate strings")
    table = hashing.bloom_table(candidates, params.m, params.h, params.k)
    write_map(args.out, candidates, table, params.k)
    return 0


def decode_counts(
    params: ParamsFile, counts: np.ndarray, strings: list[str], design: Any, method: str = "detect",
    other: bool = True, correction: str = "bh", alpha: float = 0.10,
) -> Any:
    """Run :func:`~ldpstream.estimators.detection.detect` (``method="detect"``) or the candidate decoder on a
    counts sketch; returns the :class:`Estimate`."""
    from ldpstream.estimators.candidates import decode_rappor
    from ldpstream.estimators.detection import detect

    if counts.shape != (params.m, params.k + 1):
        raise ParameterError(f"counts have shape {counts.shape}, params say ({params.m}, {params.k + 1})")
    if method == "detect":
        return detect(counts, design, params.q_star, params.p_star, correction, alpha,  # type: ignore[arg-type]
                      other=other, labels=strings)
    return decode_rappor(counts, design, params.q_star, params.p_star, method, other=other, labels=strings)  # type: ignore[arg-type]


def results_table(
    est: Any, significant_only: bool = False, correction: str = "bh", alpha: float = 0.10
) -> dict[str, list[Any]]:
    """Google's ``results.csv`` columns from an Estimate (module docstring), sorted by estimate."""
    n = float(est.n_reports)
    freq = np.asarray(est.frequencies)
    se = np.asarray(est.std_errors) if est.std_errors is not None else np.full(freq.shape, np.nan)
    low, high = (np.clip(freq - 1.959963984540054 * se, 0, 1), np.clip(freq + 1.959963984540054 * se, 0, 1))
    if est.std_errors is not None:
        low, high = est.ci(0.95, clip=True)
    keep = np.ones(freq.shape, dtype=bool)
    if significant_only:
        keep = est.significant(alpha, correction)
    order = [i for i in np.argsort(-freq, kind="stable") if keep[i]]
    labels = list(est.labels) if est.labels is not None else [str(i) for i in range(freq.size)]
    return {
        "string": [labels[i] for i in order],
        "estimate": [freq[i] * n for i in order],
        "std_error": [se[i] * n for i in order],
        "proportion": [freq[i] for i in order],
        "prop_std_error": [se[i] for i in order],
        "prop_low_95": [low[i] for i in order],
        "prop_high_95": [high[i] for i in order],
    }


def run_decode(args: argparse.Namespace) -> int:
    params = read_params(args.params)
    counts = read_counts(args.counts, params)
    cmap = read_map(args.map, params)
    est = decode_counts(params, counts, cmap.strings, cmap.matrix, args.method, other=not args.no_other,
                        correction=args.correction, alpha=args.alpha)
    table = results_table(est, not args.all, args.correction, args.alpha)
    write_results(args.out, table)
    detected = int(np.count_nonzero(est.significant(args.alpha, args.correction)))
    detail = ""
    if args.method == "detect":
        adaptive = est.info["adaptive"]
        detail = (f", {est.info['selected']} selected by the screen (lambda {est.info['lambda']:.3g})"
                  + (f", adaptive BH ({adaptive}), estimated share of absent candidates "
                     f"{est.null_share(args.alpha):.3g}" if adaptive != "none" else "")
                  + f", point {est.info['point']}; the detected strings hold {est.info['detected_mass']:.3f}"
                  " of the reports")
    print(f"ldpstream rappor decode: {args.method}, rule {args.correction} at alpha {args.alpha} over "
          f"{len(cmap.strings)} candidates: {detected} detected{detail}"
          + ("; --all: every candidate written" if args.all else ""), file=sys.stderr)
    return 0


DECODE_ASSOC_HELP = """\
Google's decode_assoc.R: the joint distribution of two variables of one metric, each client having
reported both (one row of the reports file). var1 is a string variable (--map1); var2 is a boolean
(--create-bool-map) or, our extension, a second string variable (--map2). Each string variable's
candidates are the map strings detected in its marginal (as Google's decoder; --all-candidates: every
map string; --top N: the N largest), plus an "Other" category for every string outside them, kept only when
the one-sided test of "no mass outside the candidates" rejects at 5% (--keep-other: always); a
boolean's are FALSE and TRUE. The joint EM runs over the distinct report pairs: plain EM from the
uniform table until no cell moves by 1e-6 or --max-em-iters, as association.R (--em squarem: accelerated
to the maximum-likelihood table); assoc-metrics.json's "point" says which was reached.

Writes into --output-dir:
  assoc-results.csv   "<var2>","<var1>","proportion","std_error","low_95","high_95": one row per cell,
                      var2 varying fastest (Google's form; booleans "TRUE" then "FALSE"; "Other" rows
                      included); std_error and the 95% interval are ours.
  assoc-metrics.json  num_reports, estimate_dimensions, sum_estimates, em_elapsed_time, num_em_iters,
                      total_elapsed_time (Google's keys), and the EM's convergence, the candidates and
                      the independence test.
"""


def run_decode_assoc(args: argparse.Namespace) -> int:
    import time

    from ldpstream.interop.rappor.assoc_results import write_assoc_metrics, write_assoc_results
    from ldpstream.interop.rappor.association import decode_association, load_association

    start = time.perf_counter()
    ignored = [f for f in ("num_cores", "em_executable", "tmp_dir") if getattr(args, f) is not None]
    if ignored:
        print(f"ldpstream rappor decode-assoc: ignoring {['--' + f.replace('_', '-') for f in ignored]} "
              "(decode_assoc.R's speed-ups; the EM here is vectorized)", file=sys.stderr)
    if args.max_em_iters < 1:
        raise ParameterError(f"--max-em-iters must be >= 1, got {args.max_em_iters}")
    out_dir = Path(args.output_dir)
    if not out_dir.is_dir():
        raise ParameterError(f"--output-dir {args.output_dir!r} is not a directory")
    rng = np.random.default_rng(args.seed)
    inputs = load_association(
        schema=args.schema, reports=args.reports, params_dir=args.params_dir, metric=args.metric_name,
        var1=args.var1, var2=args.var2, map1=args.map1, map2=args.map2, create_bool_map_flag=args.create_bool_map,
        remove_bad_rows=args.remove_bad_rows, sample_size=args.reports_sample_size, rng=rng,
    )
    result = decode_association(
        inputs, rule="all" if args.all_candidates else "detected", top=args.top, correction=args.correction,
        alpha=args.alpha, max_iterations=args.max_em_iters, test_other=not args.keep_other,
        accelerate=args.em == "squarem",
    )
    joint = result.joint
    rows, cols = list(joint.row_labels), list(joint.column_labels)
    order = list(range(len(cols)))
    if inputs.var2.var_type == "boolean":
        order = [cols.index("TRUE"), cols.index("FALSE")]  # Google's row order for a boolean
    columns = {
        "proportion": np.asarray(joint.table)[:, order],
        "std_error": np.asarray(joint.std_error)[:, order],
        "low_95": np.asarray(joint.low)[:, order],
        "high_95": np.asarray(joint.high)[:, order],
    }
    write_assoc_results(out_dir / "assoc-results.csv", args.var1, args.var2, rows, [cols[j] for j in order], columns)
    total = time.perf_counter() - start
    metrics: dict[str, Any] = {
        "num_reports": inputs.num_reports,
        "reports_sample_size": args.reports_sample_size,
        "estimate_dimensions": [len(cols), len(rows)],
        "sum_estimates": float(np.sum(joint.table)),
        "total_elapsed_time": total,
        "em_elapsed_time": float(joint.em_seconds),
        "num_em_iters": int(joint.iterations),
        "converged": bool(joint.converged),
        "stopping_rule": joint.stopping_rule,
        "point": joint.point,
        "likelihood_elapsed_time": float(joint.likelihood_seconds),
        "joint_elapsed_time": result.joint_seconds,
        "removed_rows": inputs.removed_rows,
        "read_elapsed_time": inputs.seconds,
        "marginal_elapsed_time": result.marginal_seconds,
        "distinct_report_pairs": int(joint.patterns),
        "var1": {"name": args.var1, "type": "string", "candidates": rows, **result.candidates1.info},
        "var2": {"name": args.var2, "type": inputs.var2.var_type, "candidates": cols, **result.candidates2.info},
        "interval_method": joint.interval_method,
        "other_test": {name: None if t is None else t.to_dict()
                       for name, t in ((args.var1, result.other_test1), (args.var2, result.other_test2))},
        "independence": joint.independence.to_dict(),
    }
    write_assoc_metrics(out_dir / "assoc-metrics.json", metrics)
    print(f"ldpstream rappor decode-assoc: {inputs.num_reports} reports, {len(rows)} × {len(cols)} table, "
          f"{joint.iterations} EM iterations ({'converged' if joint.converged else 'NOT converged'}), joint "
          f"estimate in {result.joint_seconds:.2f} s; wrote {out_dir / 'assoc-results.csv'}", file=sys.stderr)
    return 0

