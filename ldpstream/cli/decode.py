"""``ldpstream decode`` and ``ldpstream watch``."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from ldpstream.config import ServiceConfig, add_service_arguments
from ldpstream.errors import ServiceError
from ldpstream.logs import add_log_arguments, configure_from_args, log_start

log = logging.getLogger("ldpstream.decode")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    decode = subparsers.add_parser(
        "decode", help="periodically decode the sketches and publish estimates",
        description="Every --interval seconds, reads each metric's count sketches from Redis as one snapshot, "
        "decodes every configured window and publishes the estimates to Redis, to a Kafka topic and as "
        "Prometheus gauges; then, for each association of two metrics, the joint table of each of its windows "
        "(the members' top values plus \"Other\", with intervals and a test of independence), published alike.")
    add_service_arguments(decode)
    decode.add_argument("--interval", type=float, default=10.0, help="seconds between passes (default 10)")
    decode.add_argument("--once", action="store_true", help="decode once and exit")
    decode.add_argument("--estimates-topic", default="ldp-estimates", help="Kafka topic of estimates")
    decode.add_argument("--no-kafka", action="store_true", help="do not publish estimates to Kafka")
    decode.add_argument("--metrics-port", type=int, default=9465,
                        help="port of /metrics, /healthz and /readyz (0: none; default 9465)")
    decode.add_argument("--metrics-addr", default="127.0.0.1", help="bind address of the metrics port")
    decode.add_argument("--workers", type=int, default=1,
                        help="processes that decode the metrics of a pass in parallel, each a fixed share of them "
                        "with its own Redis connection (default 1: all in this process; see docs/scaling.md)")
    # the default is ldpstream.decoder.workers.PASS_TIMEOUT_SECONDS (not imported here: the parser stays light)
    decode.add_argument("--worker-timeout", type=float, default=600.0,
                        help="seconds a worker process is given to answer a pass before it is killed and replaced "
                        "(its metrics fail that pass; default 600)")
    add_log_arguments(decode)
    decode.set_defaults(func=_decode)

    watch = subparsers.add_parser("watch", help="live terminal view of a metric's estimates (or an association's)",
                                  description="Shows the latest published estimate of METRIC with 95% intervals, "
                                  "report count and freshness, refreshed every --interval seconds. Given the name "
                                  "of an association instead, shows its joint table with 95% intervals and the "
                                  "test of independence (statistic, degrees of freedom, p-value).")
    add_service_arguments(watch, kafka=False)
    watch.add_argument("metric", help="a metric, or an association of two metrics")
    watch.add_argument("--window", default="all")
    watch.add_argument("--interval", type=float, default=1.0)
    watch.add_argument("--top", type=int, default=20)
    watch.add_argument("--iterations", type=int, default=None, help="refreshes before exiting (default: forever)")
    watch.set_defaults(func=_watch)


def _decode(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    from ldpstream.decoder.service import DecoderService
    from ldpstream.health import HealthServer, Readiness, service_checks
    from ldpstream.kafka import ensure_topics
    from ldpstream.registry import Registry

    configure_from_args(args)
    config = ServiceConfig.from_args(args)
    registry = Registry.load(config.registry)
    config.check_access(kafka=not args.no_kafka)
    producer = None
    if not args.no_kafka:
        ensure_topics(config.kafka, [args.estimates_topic], partitions=1)
        producer = Producer(config.kafka.producer(**{"acks": "all", "enable.idempotence": True}))
    store = config.redis.store()
    service = DecoderService(registry, store, producer=producer, estimates_topic=args.estimates_topic,
                             workers=args.workers, store_factory=config.redis.store,
                             worker_timeout=args.worker_timeout)
    server = None
    if args.metrics_port:
        readiness = Readiness({**service_checks(config, kafka=not args.no_kafka, topic=args.estimates_topic),
                               **service.readiness_checks()})
        server = HealthServer(args.metrics_port, args.metrics_addr, readiness)
    log_start(log, "decode", args, config, {
        "decodes": f"{sum(1 for m in registry.metrics.values() if m.part_of is None)} metric(s) and "
                   f"{len(service.joint_associations())} association(s)",
        "interval": "once" if args.once else f"{args.interval:g} s", "workers": args.workers,
        "estimates": "Redis only" if args.no_kafka else f"Redis and Kafka topic {args.estimates_topic}",
        "metrics": f"{server.url}/metrics, /healthz, /readyz" if server else "none"}, kafka=not args.no_kafka)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        service.run(args.interval, stop, iterations=1 if args.once else None)
    finally:
        if server is not None:
            server.close()
    if args.once and service.last_failed:
        total = len(registry.metrics) + len(service.joint_associations())
        raise ServiceError(f"{len(service.last_failed)} of {total} metric(s) and association(s) failed to decode "
                           f"or publish: {', '.join(service.last_failed)} (the log above says why)")
    return 0


def _watch(args: argparse.Namespace) -> int:
    from ldpstream.decoder.watch import watch

    config = ServiceConfig.from_args(args)
    config.check_access(kafka=False)
    from ldpstream.registry import Registry

    with config.redis.store() as store:
        watch(store, args.metric, args.window, args.interval, args.top, args.iterations,
              registry=lambda: Registry.load(config.registry))
    return 0
