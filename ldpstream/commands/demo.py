"""``ldpstream demo``: the whole pipeline on the local stack with a simulated population.

Brings up the local stack (unless --kafka/--redis or LDPSTREAM_KAFKA/LDPSTREAM_REDIS point elsewhere), then
runs, in one process, a producer simulating clients, a consumer-group member folding reports into Redis,
and the decoder publishing estimates every second, while the terminal shows the live estimate beside the
true distribution. Each run uses its own topic and Redis prefix, so runs never mix.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
import tomllib
import uuid
from pathlib import Path

import numpy as np

DEMO_REGISTRY = Path(__file__).resolve().parents[2] / "deploy" / "metrics.toml"


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="run the whole pipeline on the local stack and show live estimates",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--metric", default="app_language", help="metric of deploy/metrics.toml to simulate")
    demo.add_argument("--clients", type=int, default=200_000, help="simulated clients (default 200,000)")
    demo.add_argument("--duration", type=float, default=20.0, help="seconds over which clients report (default 20)")
    demo.add_argument("--dist", default="geometric", help="true distribution of the population")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--kafka", default=None, help="Kafka bootstrap servers (default: the local stack)")
    demo.add_argument("--redis", default=None, help="Redis URL (default: the local stack)")
    demo.add_argument("--metrics-port", type=int, default=9466, help="Prometheus port while the demo runs (0: none)")
    demo.add_argument("--no-screen", action="store_true", help="print updates as lines instead of redrawing")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import redis
    from confluent_kafka.admin import AdminClient
    from prometheus_client import start_http_server

    from consumers.sketch_store import RedisSketchStore
    from consumers.worker import ConsumerSettings, SketchConsumer
    from decoder.service import DecoderService, latest_estimate
    from deploy import stack
    from ldpstream.distributions import parse_distribution
    from ldpstream.registry import Registry
    from ldpstream.topics import ensure_topics
    from producers.loadgen import simulate_and_publish
    from producers.publisher import ReportPublisher

    logging.basicConfig(level=logging.WARNING)
    kafka = args.kafka or os.environ.get("LDPSTREAM_KAFKA")
    redis_url = args.redis or os.environ.get("LDPSTREAM_REDIS")
    if not (kafka and redis_url):
        print("starting the local stack (Kafka in KRaft mode and Redis) ...", flush=True)
        started = time.monotonic()
        status = stack.up()
        print(status.describe(), f"\n(up in {time.monotonic() - started:.1f} s)", flush=True)
        kafka, redis_url = kafka or status.kafka_bootstrap, redis_url or status.redis_url

    run_id = uuid.uuid4().hex[:8]
    topic, prefix = f"ldp-demo-{run_id}", f"ldpdemo:{run_id}"
    table = tomllib.loads(DEMO_REGISTRY.read_text())
    table["defaults"] = {**table.get("defaults", {}), "topic": topic, "windows": ["all"], "bucket_seconds": 60}
    registry = Registry.from_dict(table, base_dir=DEMO_REGISTRY.parent)
    metric = registry[args.metric]
    names = metric.value_names()
    truth = parse_distribution(args.dist, len(names), np.random.default_rng(args.seed))
    ensure_topics(kafka, [topic, "ldp-dead-letters"])
    if args.metrics_port:
        try:
            start_http_server(args.metrics_port, addr="127.0.0.1")
            print(f"Prometheus metrics on http://127.0.0.1:{args.metrics_port}/metrics")
        except OSError as exc:
            print(f"(no Prometheus endpoint: port {args.metrics_port} is taken: {exc})")

    client = redis.Redis.from_url(redis_url)
    store = RedisSketchStore(client, prefix)
    stop = threading.Event()
    consumer = SketchConsumer(registry, store, ConsumerSettings(bootstrap=kafka, group_id=f"ldp-demo-{run_id}"))
    decoder = DecoderService(registry, store)
    produced: dict[str, object] = {}

    def produce() -> None:
        rate = args.clients / args.duration if args.duration > 0 else None
        chunk = max(1000, min(50_000, int((rate or 50_000) / 10)))
        produced["result"] = simulate_and_publish(
            metric, ReportPublisher(kafka), clients=args.clients, distribution=args.dist, seed=args.seed,
            rate=rate, chunk=chunk, should_stop=stop.is_set)

    threads = [threading.Thread(target=consumer.run, args=(stop,), name="consumer", daemon=True),
               threading.Thread(target=decoder.run, args=(1.0, stop), name="decoder", daemon=True),
               threading.Thread(target=produce, name="producer", daemon=True)]
    for thread in threads:
        thread.start()
    print(f"demo {run_id}: {args.clients:,} simulated clients report metric {metric.name!r} "
          f"({metric.mechanism.parameters()}) over ~{args.duration:.0f} s", flush=True)
    interrupted = False
    try:
        while threads[2].is_alive() or consumer.reports_applied < _acked(produced):
            _show(latest_estimate(client, prefix, metric.name), truth, args.no_screen)
            time.sleep(1.0)
            if not threads[2].is_alive() and "result" not in produced:
                break  # the producer failed; its error was printed by the thread
            if not threads[0].is_alive() or not threads[1].is_alive():
                print("the consumer or decoder stopped (its error is above): ending the demo", file=sys.stderr)
                break
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: stopping", flush=True)
    final = decoder.run_once() if not interrupted else []
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    if final:
        published = latest_estimate(client, prefix, metric.name)
        _show(published, truth, True)
        result = produced.get("result")
        if result is not None and published is not None:
            estimate = np.array([v["frequency"] for v in published["values"]])
            empirical = result.true_counts / result.true_counts.sum()  # type: ignore[attr-defined]
            print(f"\nreports acknowledged by Kafka: {result.records_acked:,}; counted in Redis: "  # type: ignore[attr-defined]
                  f"{published['n_reports']:,}; L1(estimate, sample) = {np.abs(estimate - empirical).sum():.4f}")
    AdminClient({"bootstrap.servers": kafka}).delete_topics([topic])
    return 130 if interrupted else 0


def _acked(produced: dict[str, object]) -> int:
    result = produced.get("result")
    return int(result.records_acked) if result is not None else 1 << 62  # type: ignore[attr-defined]


def _show(published: dict | None, truth: np.ndarray, plain: bool) -> None:
    from decoder.watch import render

    text = "waiting for the first estimate ..." if published is None else render(published, truth=truth)
    sys.stdout.write(("\n" if plain else "\x1b[2J\x1b[H") + text + "\n")
    sys.stdout.flush()
