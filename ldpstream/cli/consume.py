"""``ldpstream consume``: a consumer-group member."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from ldpstream.config import ServiceConfig, add_service_arguments


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    consume = subparsers.add_parser(
        "consume", help="run a consumer-group member that folds reports into Redis, exactly once",
        description="Joins the consumer group, decodes report batches, folds them into per-cohort count "
        "sketches in Redis and stores each partition's next offset in the same atomic write. Malformed, "
        "unknown-metric and wrong-fingerprint reports go to the dead-letter topic.")
    add_service_arguments(consume, consumer=True)
    consume.add_argument("--group", default="ldpstream-consumers", help="consumer group id")
    consume.add_argument("--dead-letter-topic", default="ldp-dead-letters")
    consume.add_argument("--batch-size", type=int, default=20_000, help="messages per consume() call")
    consume.add_argument("--idle-exit", type=float, default=None,
                         help="exit after this many seconds without a message (default: run until stopped)")
    consume.add_argument("--metrics-port", type=int, default=9464, help="Prometheus port (0: none; default 9464)")
    consume.add_argument("--metrics-addr", default="127.0.0.1")
    consume.set_defaults(func=_consume)


def _consume(args: argparse.Namespace) -> int:
    from prometheus_client import start_http_server

    from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
    from ldpstream.kafka import ensure_topics
    from ldpstream.registry import Registry

    config = ServiceConfig.from_args(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registry = Registry.load(config.registry)
    config.check_access()
    ensure_topics(config.kafka, [*registry.topics, args.dead_letter_topic])
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_addr)
    consumer = SketchConsumer(
        registry, config.redis.store(),
        ConsumerSettings(config.kafka, group_id=args.group, dead_letter_topic=args.dead_letter_topic,
                         batch_size=args.batch_size))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer.run(stop, idle_exit=args.idle_exit)
    print(f"applied {consumer.reports_applied:,} reports from {consumer.messages_seen:,} messages")
    return 0
