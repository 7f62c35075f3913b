"""``ldpstream consume``: a consumer-group member."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from ldpstream.config import ServiceConfig, add_service_arguments
from ldpstream.logs import add_log_arguments, configure_from_args, log_start

log = logging.getLogger("ldpstream.consume")


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
    consume.add_argument("--metrics-port", type=int, default=9464,
                         help="port of /metrics, /healthz and /readyz (0: none; default 9464)")
    consume.add_argument("--metrics-addr", default="127.0.0.1")
    add_log_arguments(consume)
    consume.set_defaults(func=_consume)


def _consume(args: argparse.Namespace) -> int:
    from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
    from ldpstream.health import HealthServer, Readiness, service_checks
    from ldpstream.kafka import ensure_topics
    from ldpstream.registry import Registry

    configure_from_args(args)
    config = ServiceConfig.from_args(args)
    registry = Registry.load(config.registry)
    config.check_access()
    ensure_topics(config.kafka, [*registry.topics, args.dead_letter_topic])
    consumer = SketchConsumer(
        registry, config.redis.store(),
        ConsumerSettings(config.kafka, group_id=args.group, dead_letter_topic=args.dead_letter_topic,
                         batch_size=args.batch_size))
    server = None
    if args.metrics_port:
        readiness = Readiness({**service_checks(config, topic=next(iter(consumer.topics), None)),
                               **consumer.readiness_checks()})
        server = HealthServer(args.metrics_port, args.metrics_addr, readiness)
    log_start(log, "consume", args, config, {
        "topics": ",".join(consumer.topics), "group": args.group, "dead_letters": args.dead_letter_topic,
        "metrics": f"{server.url}/metrics, /healthz, /readyz" if server else "none"})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        consumer.run(stop, idle_exit=args.idle_exit)
    finally:
        if server is not None:
            server.close()
    print(f"applied {consumer.reports_applied:,} reports from {consumer.messages_seen:,} messages")
    return 0
