"""``ldpstream report``: a metric's (or an association's) published estimates as a figure."""

from __future__ import annotations

import argparse

from ldpstream.config import ServiceConfig, add_service_arguments


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = subparsers.add_parser(
        "report", help="plot a metric's published estimates (PNG or SVG)",
        description="Reads the latest published estimate of NAME and its history from Redis and writes a figure "
        "(matplotlib; the format follows --out's suffix, .png or .svg): the top values with 95% intervals, the "
        "true frequencies when a simulation (demo, produce) published them, the mean interval width (and with a "
        "truth the largest error) against the number of reports from the history, and the top values over time. "
        "Given an association, its joint table as a heat map with intervals (a cell marked ? is not identified: "
        "its interval is no promise) and the independence test.")
    add_service_arguments(report, kafka=False, registry=False)
    report.add_argument("name", metavar="NAME", help="a metric, or an association of two metrics")
    report.add_argument("--out", required=True, metavar="FILE", help="the figure: FILE.png or FILE.svg (required)")
    report.add_argument("--window", default="all", help="the window of the estimate (default all)")
    report.add_argument("--top", type=int, default=20, help="values shown (default 20)")
    report.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from ldpstream.decoder.report import (
        UNIDENTIFIED_NOTE,
        check_output,
        plot_joint,
        plot_metric,
        truth_frequencies,
        unidentified_cells,
    )
    from ldpstream.errors import ParameterError

    out = check_output(args.out)
    with ServiceConfig.from_args(args).redis.store() as store:
        joint = store.latest_joint(args.name, args.window)
        if joint is not None:
            plot_joint(out, joint, store.joint_history(args.name, args.window))
            print(f"wrote {out}: joint table of {args.name} ({args.window}), {joint['n_reports']:,} report pairs")
            unidentified = unidentified_cells(joint)
            if unidentified:
                reasons = "; ".join(str(r) for r in joint.get("identification") or [])
                print(f"{len(unidentified)} cells marked ?: {UNIDENTIFIED_NOTE[2:]}"
                      + (f": {reasons}" if reasons else ""))
            return 0
        latest = store.latest_estimate(args.name, args.window)
        if latest is None:
            raise ParameterError(f"no estimate of {args.name!r} ({args.window}) is published under prefix "
                                 f"{store.prefix!r}: is the decoder running, with this --redis and --prefix?")
        # A simulation's truth, where one was published (values in the order the decoder publishes them).
        truth = truth_frequencies(store.truth(args.name), [v["value"] for v in latest["values"]])
        drawn = store.string_truth(args.name) if "discovery" in latest else None
        if drawn:  # a discovery metric's: the strings its simulated clients drew
            total = sum(drawn.values())
            truth = {text: count / total for text, count in drawn.items()}
        plot_metric(out, latest, store.estimate_history(args.name, args.window), truth, top=args.top)
        print(f"wrote {out}: {args.name} ({args.window}), {latest['n_reports']:,} reports"
              + (", with the simulation's truth" if truth else ""))
        if isinstance(latest.get("fit"), dict):
            from ldpstream.decoder.watch import fit_line

            print(fit_line(latest["fit"]))
        return 0
