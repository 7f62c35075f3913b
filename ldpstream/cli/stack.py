"""``ldpstream stack up|down|status``: the local Kafka + Redis stack (see :mod:`ldpstream.deploy.stack`)."""

from __future__ import annotations

import argparse

from ldpstream.deploy import stack


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stack",
        help="start, stop or inspect the local Kafka (KRaft) and Redis services",
        description="Runs a single-node Apache Kafka broker (KRaft mode, jars from Maven Central) and a "
        "Redis server on 127.0.0.1 as local processes, without Docker. Ports and folders come from "
        "LDPSTREAM_STACK_DIR, LDPSTREAM_CACHE_DIR, LDPSTREAM_STACK_KAFKA_PORT, LDPSTREAM_STACK_REDIS_PORT.",
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.action == "up":
        print(stack.up().describe())
    elif args.action == "down":
        stack.down()
        print("stack stopped")
    else:
        current = stack.status()
        print(current.describe())
        return 0 if current.kafka and current.redis else 3
    return 0
