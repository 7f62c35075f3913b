"""``ldpstream status``: what an operator checks first."""

from __future__ import annotations

import argparse
import json

from ldpstream.config import ServiceConfig, add_service_arguments


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = subparsers.add_parser(
        "status", help="what an operator checks first: counts, offsets and lag, dead letters, last decode",
        description="Per metric: reports counted in Redis (total and per time bucket); per partition: the "
        "offset stored in Redis against the topic's end offset (lag); dead-lettered messages by reason; and "
        "the time of the last published decode.")
    add_service_arguments(status)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    from ldpstream.operations.status import collect_status, format_status
    from ldpstream.registry import Registry

    config = ServiceConfig.from_args(args)
    registry = Registry.load(config.registry)
    config.check_access()
    with config.redis.store() as store:
        report = collect_status(registry, config.kafka, store)
    print(json.dumps(report, indent=2) if args.json else format_status(report))
    return 0
