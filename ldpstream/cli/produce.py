"""``ldpstream produce``: the load generator."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ldpstream.cli.interrupts import Interrupts
from ldpstream.config import ServiceConfig, add_service_arguments
from ldpstream.logs import add_log_arguments, configure_from_args, log_start

if TYPE_CHECKING:
    import numpy as np

    from ldpstream.registry import Registry


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = subparsers.add_parser(
        "produce", help="simulate a population of clients publishing privatized reports to Kafka",
        description="Draws --clients values from --dist over METRIC's values, privatizes them in batches with a "
        "seeded generator (simulation only: the client SDK uses secure randomness), and publishes the reports "
        "with an idempotent producer (acks=all). Prints the reports Kafka acknowledged.")
    add_service_arguments(produce)
    produce.add_argument("metric", help="metric name in the registry, or an association's: then every client reports "
                         "all its members together (values drawn with --dist and --dependence)")
    produce.add_argument("--clients", type=int, default=100_000, help="number of simulated clients (one report each)")
    produce.add_argument("--dist", default="geometric",
                         help="uniform | geometric | zipf:A | binomial:P | dirichlet:A | file:PATH (default geometric)")
    produce.add_argument("--dependence", type=float, default=0.5,
                         help="associations: probability that the other members take the first's value rank "
                         "(0 = independent, 1 = functions of the first; default 0.5)")
    produce.add_argument("--strings", default=None, metavar="FILE",
                         help="discovery metrics (no dictionary): the strings clients draw from, one a line in rank "
                         "order (--dist gives their popularity)")
    produce.add_argument("--seed", type=int, default=None, help="seed of the simulation's generator")
    produce.add_argument("--rate", type=float, default=None, help="reports per second (default: as fast as possible)")
    produce.add_argument("--per-message", type=int, default=1,
                         help="reports per Kafka message: 1 = a device, more = a gateway batching clients")
    produce.add_argument("--no-progress", action="store_true")
    produce.add_argument("--json", action="store_true", help="print the result as JSON (with the true counts)")
    produce.add_argument("--no-truth", action="store_true",
                         help="do not publish the values drawn to Redis as the truth beside the estimates "
                         "(shown, marked as truth, by `ldpstream serve`)")
    add_log_arguments(produce)
    produce.set_defaults(func=_produce)


def _produce(args: argparse.Namespace) -> int:
    from ldpstream.kafka import ensure_topics
    from ldpstream.producers.loadgen import simulate_and_publish
    from ldpstream.producers.publisher import ReportPublisher
    from ldpstream.registry import Registry

    configure_from_args(args)
    config = ServiceConfig.from_args(args)
    registry = Registry.load(config.registry)
    config.check_access(redis=False)
    log_start(logging.getLogger("ldpstream.produce"), "produce", args, config,
              {"metric": args.metric, "clients": args.clients, "rate": args.rate or "unlimited"})
    if args.metric in registry.associations and args.metric not in registry.metrics:
        return _produce_association(args, config, registry)
    metric = registry[args.metric]
    if metric.discovers:
        return _produce_discovery(args, config, registry)
    ensure_topics(config.kafka, [metric.topic])
    with Interrupts() as interrupts:
        result = simulate_and_publish(metric, ReportPublisher(config.kafka), clients=args.clients,
                                      distribution=args.dist, seed=args.seed, per_message=args.per_message,
                                      rate=args.rate, progress=not args.no_progress and not args.json,
                                      on_drawn=_truth(args, config, metric.name),
                                      should_stop=interrupts.requested.is_set)
    if args.json:
        print(json.dumps({"metric": metric.name, "reports_acked": result.records_acked,
                          "messages": result.messages, "seconds": result.seconds, "rate": result.rate,
                          "true_counts": result.true_counts.tolist(), **_stopped(interrupts, result.interrupted)}))
    else:
        print(f"{_said(interrupts, result.interrupted)}{result.records_acked:,} reports acknowledged by Kafka in "
              f"{result.messages:,} messages, {result.seconds:.2f} s ({result.rate:,.0f} reports/s)")
    return _code(interrupts, result.interrupted)


def _stopped(interrupts: Interrupts, interrupted: bool) -> dict[str, object]:
    """The JSON result's ``interrupted`` field (the signal's name), only when the run was interrupted."""
    if interrupts.signal is None and not interrupted:
        return {}
    return {"interrupted": interrupts.name or "SIGINT"}


def _said(interrupts: Interrupts, interrupted: bool) -> str:
    """The start of the totals line of an interrupted run ("" otherwise)."""
    if interrupts.signal is None and not interrupted:
        return ""
    return f"interrupted ({interrupts.name or 'SIGINT'}): "


def _code(interrupts: Interrupts, interrupted: bool) -> int:
    """0, or 128 + the signal that interrupted the run (130 for Ctrl-C, 143 for SIGTERM)."""
    return interrupts.exit_code or (130 if interrupted else 0)


def _produce_association(args: argparse.Namespace, config: ServiceConfig, registry: Registry) -> int:
    from ldpstream.kafka import ensure_topics
    from ldpstream.producers.loadgen import simulate_association_and_publish
    from ldpstream.producers.publisher import ReportPublisher

    association = registry.association(args.metric)
    ensure_topics(config.kafka, [association.topic])
    with Interrupts() as interrupts:
        result = simulate_association_and_publish(
            association, ReportPublisher(config.kafka), clients=args.clients, distribution=args.dist,
            dependence=args.dependence, seed=args.seed, per_message=args.per_message, rate=args.rate,
            progress=not args.no_progress and not args.json, should_stop=interrupts.requested.is_set,
            on_drawn=_truth(args, config, association.name, association.members))
    if args.json:
        print(json.dumps({"association": association.name, "members": list(association.members),
                          "records_acked": result.records_acked, "messages": result.messages,
                          "seconds": result.seconds, "rate": result.rate,
                          "true_counts": result.true_counts.tolist(), **_stopped(interrupts, result.interrupted)}))
    else:
        print(f"{_said(interrupts, result.interrupted)}{result.records_acked:,} associated records "
              f"({' + '.join(association.members)}) acknowledged by Kafka in {result.messages:,} messages, "
              f"{result.seconds:.2f} s ({result.rate:,.0f} records/s)")
    return _code(interrupts, result.interrupted)


def _truth(args: argparse.Namespace, config: ServiceConfig, name: str,
           members: tuple[str, ...] = ()) -> Callable[[np.ndarray], None] | None:
    """The callback that publishes the values drawn as the truth in Redis (None with ``--no-truth``, or when
    Redis does not answer: the reports are what ``produce`` is for, so it says so and goes on without)."""
    if args.no_truth:
        return None
    import redis

    from ldpstream.producers.loadgen import truth_recorder

    store = config.redis.store()
    try:
        store.client.ping()
    except redis.RedisError as exc:
        print(f"ldpstream produce: the truth is not published (Redis: {exc}); "
              "--redis says where, --no-truth silences this", file=sys.stderr)
        return None
    return truth_recorder(store, name, members)


def _produce_discovery(args: argparse.Namespace, config: ServiceConfig, registry: Registry) -> int:
    from pathlib import Path

    from ldpstream.errors import ParameterError
    from ldpstream.kafka import ensure_topics
    from ldpstream.producers.loadgen import simulate_discovery_and_publish
    from ldpstream.producers.publisher import ReportPublisher

    metric = registry[args.metric]
    if args.strings is None:
        raise ParameterError(f"metric {metric.name!r} has no dictionary: give the strings its simulated clients "
                             "draw from with --strings FILE (one a line, in rank order)")
    try:
        strings = [line for line in Path(args.strings).read_text(encoding="utf-8").splitlines() if line]
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError(f"--strings {args.strings}: cannot be read ({exc})") from None
    ensure_topics(config.kafka, [metric.topic])
    with Interrupts() as interrupts:
        result = simulate_discovery_and_publish(
            registry, metric, ReportPublisher(config.kafka), clients=args.clients, strings=strings,
            distribution=args.dist, seed=args.seed, per_message=args.per_message, rate=args.rate,
            progress=not args.no_progress and not args.json, should_stop=interrupts.requested.is_set)
    _publish_string_truth(args, config, registry, metric.name, strings, result.true_counts)
    if args.json:
        print(json.dumps({"metric": metric.name, "records_acked": result.records_acked, "messages": result.messages,
                          "seconds": result.seconds, "rate": result.rate, "strings": strings,
                          "true_counts": result.true_counts.tolist(), **_stopped(interrupts, result.interrupted)}))
    else:
        what = ("prefix reports (one each)" if metric.discovery is not None and metric.discovery.method == "prefix"
                else "discovery records (two n-grams and the full string each)")
        print(f"{_said(interrupts, result.interrupted)}{result.records_acked:,} {what} acknowledged by Kafka in "
              f"{result.messages:,} messages, {result.seconds:.2f} s ({result.rate:,.0f} records/s)")
    return _code(interrupts, result.interrupted)


def _publish_string_truth(args: argparse.Namespace, config: ServiceConfig, registry: Registry, name: str,
                          strings: list[str], counts: np.ndarray) -> None:
    """The strings a discovery metric's simulated clients drew, as the decoder publishes them (truncated to the
    metric's length, unpadded), with how many drew each: the truth ``serve`` shows beside the live dictionary
    (nothing with ``--no-truth``; a Redis that does not answer is said and skipped, as for the other metrics)."""
    if args.no_truth:
        return
    import redis
    from numpy import asarray

    from ldpstream.estimators.discovery import scheme_of
    from ldpstream.mechanisms.prefix_olh import PrefixOLH

    mechanism = registry[name].mechanism
    if isinstance(mechanism, PrefixOLH):
        def published_as(text: str) -> str:
            return mechanism.padded(text).rstrip(mechanism.pad)
    else:
        shape = scheme_of(registry, registry[name]).shape

        def published_as(text: str) -> str:
            return shape.unpadded(shape.padded(text))
    drawn: dict[str, int] = {}
    for text, count in zip(strings, asarray(counts).tolist(), strict=True):
        published = published_as(text)
        drawn[published] = drawn.get(published, 0) + int(count)
    try:
        with config.redis.store() as store:
            store.add_string_truth(name, drawn)
    except redis.RedisError as exc:
        print(f"ldpstream produce: the truth is not published (Redis: {exc}); --redis says where, --no-truth "
              "silences this", file=sys.stderr)
