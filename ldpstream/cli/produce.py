"""``ldpstream produce``: the load generator."""

from __future__ import annotations

import argparse
import json

from ldpstream.config import ServiceConfig, add_service_arguments


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = subparsers.add_parser(
        "produce", help="simulate a population of clients publishing privatized reports to Kafka",
        description="Draws --clients values from --dist over METRIC's values, privatizes them in batches with a "
        "seeded generator (simulation only: the client SDK uses secure randomness), and publishes the reports "
        "with an idempotent producer (acks=all). Prints the reports Kafka acknowledged.")
    add_service_arguments(produce, redis=False)
    produce.add_argument("metric", help="metric name in the registry")
    produce.add_argument("--clients", type=int, default=100_000, help="number of simulated clients (one report each)")
    produce.add_argument("--dist", default="geometric",
                         help="uniform | geometric | zipf:A | binomial:P | dirichlet:A | file:PATH (default geometric)")
    produce.add_argument("--seed", type=int, default=None, help="seed of the simulation's generator")
    produce.add_argument("--rate", type=float, default=None, help="reports per second (default: as fast as possible)")
    produce.add_argument("--per-message", type=int, default=1,
                         help="reports per Kafka message: 1 = a device, more = a gateway batching clients")
    produce.add_argument("--no-progress", action="store_true")
    produce.add_argument("--json", action="store_true", help="print the result as JSON (with the true counts)")
    produce.set_defaults(func=_produce)


def _produce(args: argparse.Namespace) -> int:
    from ldpstream.kafka import ensure_topics
    from ldpstream.producers.loadgen import simulate_and_publish
    from ldpstream.producers.publisher import ReportPublisher
    from ldpstream.registry import Registry

    config = ServiceConfig.from_args(args)
    metric = Registry.load(config.registry)[args.metric]
    ensure_topics(config.kafka, [metric.topic])
    result = simulate_and_publish(metric, ReportPublisher(config.kafka), clients=args.clients,
                                  distribution=args.dist, seed=args.seed, per_message=args.per_message,
                                  rate=args.rate, progress=not args.no_progress and not args.json)
    if args.json:
        print(json.dumps({"metric": metric.name, "reports_acked": result.records_acked,
                          "messages": result.messages, "seconds": result.seconds, "rate": result.rate,
                          "true_counts": result.true_counts.tolist()}))
    else:
        print(f"{result.records_acked:,} reports acknowledged by Kafka in {result.messages:,} messages, "
              f"{result.seconds:.2f} s ({result.rate:,.0f} reports/s)")
    return 0
