"""``ldpstream discover``: find the frequent strings of a population without a dictionary (docs/math/dictionary.md).

``--simulate``
    Draws ``--n`` clients whose strings come from ``--strings FILE`` (one per line, in rank order) with the
    popularity ``--dist`` by rank (``zipf:A``, ``geometric``, ``step:K``, ``file:PATH``, ...), padded or cut to
    ``--length`` M over ``--alphabet`` (lower-case letters, digits, ``.-/``; the pad ``$`` is added and removed
    from published strings), at ``--epsilon`` (4.39) per client, and decodes.

    ``--method prefix`` (default): the clients split uniformly into groups, group t reporting the prefix of
    length ``--first`` + t·``--step`` through OLH at the full ε (``--cohorts`` hash functions a group, default
    1024); each step keeps the extensions Benjamini–Hochberg selects at ``--alpha-step`` (default ``--alpha``),
    the dictionary is Benjamini–Yekutieli's at ``--alpha``. ``--method ngram``: every client reports two
    ``--ngram``-grams and the full string at ε/3 each (``--mechanism`` rappor or orappor, 128-bit reports, 2 hashes,
    32 cohorts); n-grams per slot, pair joints, cliques, ``--pattern REGEX``, the final decode.

    ``--json`` prints one object: ``discovered`` [{string, estimate, std_error}], ``true_positives``,
    ``false_positives``, ``seconds`` (wall) and, for prefix, ``cpu_seconds`` and ``steps``, per stage and
    ``decode``; ``--compare`` adds ``perfect_dictionary`` (every client reporting its whole string through the
    same reports, decoded against the true list).

``--reports FILE`` (without ``--simulate``; ngram)
    Decodes a report file: a numpy ``.npz`` archive of the scheme's parameters (JSON) and every client's slots,
    cohorts and packed report bits (:mod:`ldpstream.simulation.discovery`); ``--simulate --save-reports FILE``
    writes one. With ``--strings`` the result is scored; ``seconds.read`` holds reading and folding.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.config import ServiceConfig, add_service_arguments
from ldpstream.distributions import parse_distribution
from ldpstream.errors import ParameterError
from ldpstream.mechanisms.factory import DEFAULT_DISCOVERY_MECHANISM
from ldpstream.progress import Progress

#: Published dictionaries kept in the history of ``--publish NAME`` (as the decoder's default).
PUBLISH_HISTORY = 100


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``discover`` subcommand."""
    from ldpstream.estimators.discovery import DEFAULT_ALPHABET
    from ldpstream.registry import DISCOVERY_MECHANISMS

    cmd = subparsers.add_parser(
        "discover",
        help="discover frequent strings without a dictionary, from n-gram reports",
        description=(__doc__ or "").split("\n\n", 1)[1].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("--method", default="prefix", choices=("prefix", "ngram"),
                     help="prefix (default: the users split into groups, each reporting one prefix at the full ε "
                     "through OLH, extended --step characters a group; docs/math/dictionary.md#prefix-extension) or "
                     "ngram (every user reports n-grams and the full string at ε/3 each)")
    cmd.add_argument("--step", type=int, default=2, help="prefix: characters added per group (default 2)")
    cmd.add_argument("--first", type=int, default=2, help="prefix: the first group's prefix length (default 2)")
    cmd.add_argument("--alpha-step", type=float, default=None,
                     help="prefix: BH level of the steps before the last (default: --alpha)")
    cmd.add_argument("--simulate", action="store_true",
                     help="draw and encode the clients here (else give --reports FILE)")
    cmd.add_argument("--strings", type=Path, help="one string per line, in rank order")
    cmd.add_argument("--dist", default="zipf:1", help="popularity by rank: zipf:A, geometric, step:K, file:PATH, ...")
    cmd.add_argument("--n", type=int, default=1_000_000, help="clients")
    cmd.add_argument("--epsilon", type=float, default=4.39,
                     help="ε of one client (prefix: its one report; ngram: its three reports together)")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--length", type=int, default=8, help="string length M (padded or truncated)")
    cmd.add_argument("--ngram", type=int, default=2, help="n-gram size n (M must be a multiple)")
    cmd.add_argument("--alphabet", default=DEFAULT_ALPHABET, help="characters Σ (the pad '$' is added)")
    cmd.add_argument("--mechanism", default=None,
                     help=f"with --simulate: mechanism of every report, one of {', '.join(DISCOVERY_MECHANISMS)} "
                     f"(default {DEFAULT_DISCOVERY_MECHANISM}; hashed Bloom bits, the others are refused)")
    cmd.add_argument("--full-bits", type=int, default=128, help="Bloom bits of the full-string report")
    cmd.add_argument("--ngram-bits", type=int, default=128, help="Bloom bits of an n-gram report")
    cmd.add_argument("--hashes", type=int, default=2)
    cmd.add_argument("--cohorts", type=int, default=None,
                     help="hash functions of each report (default: 1024 a group for prefix, 32 for ngram)")
    cmd.add_argument("--alpha", type=float, default=0.10,
                     help="the dictionary's false discovery rate (ngram: BH; prefix: Benjamini–Yekutieli)")
    cmd.add_argument("--alpha-edge", type=float, default=None,
                     help="per-cell level of the pair threshold (default: one expected clique of absent pairs)")
    cmd.add_argument("--pattern", help="semantic filter: a regular expression the unpadded string must match")
    cmd.add_argument("--compare", action="store_true", help="also decode with the perfect dictionary")
    cmd.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cmd.add_argument("--reports", type=Path, help="decode this report file (.npz) instead of simulating")
    cmd.add_argument("--save-reports", type=Path, help="with --simulate: also write the reports to this file")
    cmd.add_argument("--publish", metavar="NAME",
                     help="also store the discovered dictionary in Redis as the estimate of NAME, window all "
                     "(docs/schema/dictionary.v2, where the decoder publishes live ones; shown by `ldpstream serve`, "
                     "`watch`, `report`); --redis and --prefix say where")
    add_service_arguments(cmd, kafka=False, registry=False)
    cmd.set_defaults(func=run_discover)


def _read_strings(path: Path) -> list[str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    strings = [s for s in lines if s and not s.startswith("#")]
    if not strings:
        raise ParameterError(f"{path}: no strings")
    return strings


def run_discover(args: argparse.Namespace) -> int:
    from ldpstream.estimators.discovery import StringShape, bit_scheme
    from ldpstream.simulation.discovery import run_discovery

    if not args.simulate:
        if args.mechanism is not None:
            raise ParameterError("--mechanism applies to --simulate; a report file names its own mechanisms")
        if args.reports is None:
            raise ParameterError("give --simulate or --reports FILE")
        return _decode_file(args)
    if args.strings is None:
        raise ParameterError("--simulate needs --strings FILE")
    strings = _read_strings(args.strings)
    if args.method == "prefix":
        return _discover_prefixes(args, strings)
    if args.cohorts is None:
        args.cohorts = 32
    shape = StringShape(length=args.length, ngram=args.ngram, alphabet=args.alphabet)
    for s in strings:
        shape.padded(s)  # every string must be over the alphabet
    probabilities = parse_distribution(args.dist, len(strings), np.random.default_rng(args.seed))
    scheme = bit_scheme(args.epsilon, shape, mechanism=args.mechanism or DEFAULT_DISCOVERY_MECHANISM,
                        full_bits=args.full_bits, ngram_bits=args.ngram_bits, hashes=args.hashes, cohorts=args.cohorts)
    if args.save_reports is not None:
        from ldpstream.distributions import sample_values
        from ldpstream.estimators.discovery import encode_population
        from ldpstream.simulation.discovery import save_reports

        rng = np.random.default_rng(args.seed)
        values = sample_values(probabilities, args.n, rng)
        save_reports(args.save_reports, scheme, encode_population(scheme, strings, values, rng))
        print(f"wrote the reports of {args.n} clients to {args.save_reports}", file=sys.stderr)
    with Progress("discover") as progress:
        progress.update(note=f"simulating and encoding {args.n:,} clients", force=True)

        def log(line: str) -> None:
            progress.clear()
            print(line, file=sys.stderr, flush=True)
            if line.startswith("simulate:"):
                progress.update(note="decoding: n-grams, pairs, cliques, final", force=True)

        run = run_discovery(scheme, strings, probabilities, args.n, args.seed, compare=args.compare,
                            log=log, alpha=args.alpha, alpha_edge=args.alpha_edge, pattern=args.pattern)
    out = run.to_dict()
    out["parameters"] = {**scheme.parameters(), "n": args.n, "seed": args.seed, "dist": args.dist,
                         "strings": len(strings)}
    _publish(args, out, args.n)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"discovered {len(run.result.discovered)} strings "
          f"({run.true_positives} true, {run.false_positives} false) from {len(run.result.candidates)} candidates")
    for d in run.result.discovered:
        print(f"  {d.string:<{shape.length}}  {d.estimate:.4f} ± {1.96 * d.std_error:.4f}")
    if "perfect_dictionary" in out:
        pd = out["perfect_dictionary"]
        print(f"perfect dictionary: {len(pd['discovered'])} strings; "
              f"recall {pd['recall']}, precision {pd['precision']}")
    return 0


def _discover_prefixes(args: argparse.Namespace, strings: list[str]) -> int:
    """``--method prefix``: simulate the groups, discover, score (docs/math/dictionary.md#prefix-extension)."""
    from ldpstream.estimators.discovery.prefixes import PrefixScheme
    from ldpstream.mechanisms.prefix_olh import PREFIX_HASHES
    from ldpstream.simulation.prefix_discovery import run_prefix_discovery

    for flag in ("mechanism", "save_reports", "pattern", "alpha_edge"):
        if getattr(args, flag) is not None:
            raise ParameterError(f"--{flag.replace('_', '-')} applies to --method ngram")
    scheme = PrefixScheme(epsilon=args.epsilon, length=args.length, step=args.step, first=args.first,
                          cohorts=args.cohorts or PREFIX_HASHES, alphabet=args.alphabet)
    for s in strings:
        scheme.shape.padded(s)  # every string must be over the alphabet
    probabilities = parse_distribution(args.dist, len(strings), np.random.default_rng(args.seed))
    with Progress("discover") as progress:
        progress.update(note=f"simulating {args.n:,} clients in {scheme.groups} groups, decoding", force=True)
        run = run_prefix_discovery(scheme, strings, probabilities, args.n, args.seed, alpha=args.alpha,
                                   alpha_step=args.alpha_step, compare=args.compare)
    out = run.to_dict()
    out["parameters"] = {**scheme.parameters(), "n": args.n, "seed": args.seed, "dist": args.dist,
                         "strings": len(strings), "alpha": args.alpha, "alpha_step": args.alpha_step}
    out["candidates"] = run.result.steps[-1].candidates if run.result.steps else 0
    _publish(args, out, args.n)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"discovered {len(run.result.discovered)} strings ({run.true_positives} true, {run.false_positives} "
          f"false) in {scheme.groups} groups of prefixes {', '.join(map(str, scheme.lengths))}")
    for d in run.result.discovered:
        print(f"  {d.string:<{args.length}}  {d.estimate:.4f} ± {1.96 * d.std_error:.4f}")
    if run.perfect is not None:
        print(f"perfect dictionary: {len(run.perfect)} strings")
    return 0


def _decode_file(args: argparse.Namespace) -> int:
    import time

    from ldpstream.estimators.discovery import DiscoveryCollection, discover
    from ldpstream.simulation.discovery import load_reports

    began = time.perf_counter()
    with Progress("discover") as progress:
        progress.update(note=f"reading {args.reports}", force=True)
        scheme, reports = load_reports(args.reports)
        collection = DiscoveryCollection.fold(scheme, reports)
        read = time.perf_counter() - began
        progress.clear()
        print(f"read: {read:.2f} s ({collection.clients} clients)", file=sys.stderr)
        progress.update(note="decoding: n-grams, pairs, cliques, final", force=True)
        result = discover(collection, scheme, alpha=args.alpha, alpha_edge=args.alpha_edge, pattern=args.pattern)
    for stage in ("ngrams", "pairs", "cliques", "final", "decode"):
        print(f"{stage}: {result.seconds[stage]:.2f} s", file=sys.stderr)
    out = result.to_dict()
    out["seconds"] = {"read": read, "simulate": 0.0, **result.seconds}
    out["parameters"] = {**scheme.parameters(), "n": collection.clients}
    if args.strings is not None:
        shape = scheme.shape
        truth = {shape.unpadded(shape.padded(s)) for s in _read_strings(args.strings)}
        found = {d.string for d in result.discovered}
        out["true_positives"], out["false_positives"] = len(found & truth), len(found - truth)
    _publish(args, out, collection.clients)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"discovered {len(result.discovered)} strings from {len(result.candidates)} candidates")
    for d in result.discovered:
        print(f"  {d.string:<{scheme.shape.length}}  {d.estimate:.4f} ± {1.96 * d.std_error:.4f}")
    return 0


def published_dictionary(name: str, out: dict[str, Any], n_reports: int, when: float) -> dict[str, Any]:
    """The dictionary object stored by ``--publish`` from the discovery's JSON: the live decoder's form
    (``docs/schema/dictionary.v2.schema.json``, :func:`ldpstream.decoder.discovery.offline_dictionary`)."""
    from ldpstream.decoder.discovery import offline_dictionary

    body = offline_dictionary(name, out["discovered"], n_reports, when, int(out["candidates"]),
                              [len(part) for part in out.get("ngrams", [])], out.get("seconds", {}),
                              out.get("parameters")).to_json()
    if out.get("method") == "prefix":
        body["discovery"].update(method="prefix", steps=out.get("steps", []))
    return body


def _publish(args: argparse.Namespace, out: dict[str, Any], n_reports: int) -> None:
    """``--publish NAME``: the dictionary to Redis (nothing without the flag), where the decoder publishes a
    live dictionary (``P:estimate:NAME:all``). A name whose key holds something else (a registry metric's
    estimate, a live dictionary) is refused: the decoder would overwrite it, or it would overwrite the decoder's."""
    if not args.publish:
        return
    import time

    with ServiceConfig.from_args(args).redis.store() as store:
        held = store.latest_estimate(args.publish, "all")
        if held is not None and (held.get("discovery") or {}).get("source") != "offline":
            raise ParameterError(f"--publish {args.publish!r}: the decoder publishes an estimate under that name "
                                 f"({held.get('schema')}); choose another name")
        body = published_dictionary(args.publish, out, n_reports, time.time())
        store.publish_dictionary(args.publish, json.dumps(body), PUBLISH_HISTORY)
    print(f"published dictionary {args.publish!r} ({len(out['discovered'])} strings) to Redis", file=sys.stderr)
