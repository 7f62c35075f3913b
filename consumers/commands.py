"""``ldpstream consume`` and ``ldpstream status``."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading

from ldpstream import settings
from ldpstream.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    consume = subparsers.add_parser(
        "consume", help="run a consumer-group member that folds reports into Redis, exactly once",
        description="Joins the consumer group, decodes report batches, folds them into per-cohort count "
        "sketches in Redis and stores each partition's next offset in the same atomic write. Malformed, "
        "unknown-metric and wrong-fingerprint reports go to the dead-letter topic.")
    settings.add_service_arguments(consume)
    consume.add_argument("--group", default="ldpstream-consumers", help="consumer group id")
    consume.add_argument("--dead-letter-topic", default="ldp-dead-letters")
    consume.add_argument("--batch-size", type=int, default=20_000, help="messages per consume() call")
    consume.add_argument("--idle-exit", type=float, default=None,
                         help="exit after this many seconds without a message (default: run until stopped)")
    consume.add_argument("--kafka-config", metavar="KEY=VALUE", action="append", default=[],
                         help="extra librdkafka consumer setting, e.g. session.timeout.ms=6000 or "
                         "group.instance.id=consumer-1 (static membership); repeatable")
    consume.add_argument("--metrics-port", type=int, default=9464, help="Prometheus port (0: none; default 9464)")
    consume.add_argument("--metrics-addr", default="127.0.0.1")
    consume.set_defaults(func=_consume)

    status = subparsers.add_parser(
        "status", help="what an operator checks first: counts, offsets and lag, dead letters, last decode",
        description="Per metric: reports counted in Redis (total and per time bucket); per partition: the "
        "offset stored in Redis against the topic's end offset (lag); dead-lettered messages by reason; and "
        "the time of the last published decode.")
    settings.add_service_arguments(status)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_status)


def _consume(args: argparse.Namespace) -> int:
    from prometheus_client import start_http_server

    from consumers.sketch_store import RedisSketchStore
    from consumers.worker import ConsumerSettings, SketchConsumer
    from ldpstream.registry import Registry
    from ldpstream.topics import ensure_topics

    settings.resolve(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registry = Registry.load(args.registry)
    ensure_topics(args.kafka, [*registry.topics, args.dead_letter_topic])
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_addr)
    consumer = SketchConsumer(
        registry, RedisSketchStore.from_url(args.redis, args.prefix),
        ConsumerSettings(bootstrap=args.kafka, group_id=args.group, dead_letter_topic=args.dead_letter_topic,
                         batch_size=args.batch_size, kafka_config=_key_values(args.kafka_config)))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer.run(stop, idle_exit=args.idle_exit)
    print(f"applied {consumer.reports_applied:,} reports from {consumer.messages_seen:,} messages")
    return 0


def _key_values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--kafka-config expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _status(args: argparse.Namespace) -> int:
    from consumers.status import collect_status, format_status
    from ldpstream.registry import Registry

    settings.resolve(args)
    report = collect_status(Registry.load(args.registry), args.kafka, args.redis, args.prefix)
    print(json.dumps(report, indent=2) if args.json else format_status(report))
    return 0
