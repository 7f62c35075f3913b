"""``ldpstream demo``: the whole pipeline on the local stack with a simulated population.

Brings up the local stack (unless --kafka/--redis or LDPSTREAM_KAFKA/LDPSTREAM_REDIS point elsewhere), then
runs, in one process, a producer simulating clients, a consumer-group member folding reports into Redis,
and the decoder publishing estimates every second, while the terminal shows the live estimate beside the
true distribution. Each run uses its own topic and Redis prefix, so runs never mix.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import threading
import time
import tomllib
import uuid
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpstream.config import KafkaConfig, ServiceConfig, add_service_arguments

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    from ldpstream.registry import Registry
    from ldpstream.store.contract import StatusStore

#: The example registry shipped with the package (``deploy/metrics.toml`` in the repository).
DEMO_REGISTRY = Path(str(files("ldpstream.deploy") / "metrics.toml"))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo", help="run the whole pipeline on the local stack and show live estimates",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--metric", default="app_language", help="metric of deploy/metrics.toml to simulate")
    demo.add_argument("--clients", type=int, default=200_000, help="simulated clients (default 200,000)")
    demo.add_argument("--duration", type=float, default=20.0, help="seconds over which clients report (default 20)")
    demo.add_argument("--dist", default="geometric", help="true distribution of the population")
    demo.add_argument("--seed", type=int, default=7)
    add_service_arguments(demo, registry=False)
    demo.add_argument("--metrics-port", type=int, default=9466, help="Prometheus port while the demo runs (0: none)")
    demo.add_argument("--no-screen", action="store_true", help="print updates as lines instead of redrawing")
    demo.add_argument("--serve-port", type=int, default=8765,
                      help="port of the live web view on 127.0.0.1 while the demo runs (0: any free port; -1: none)")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient
    from prometheus_client import start_http_server

    from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
    from ldpstream.decoder.service import DecoderService
    from ldpstream.deploy import stack
    from ldpstream.distributions import parse_distribution
    from ldpstream.kafka import ensure_topics
    from ldpstream.producers.loadgen import simulate_and_publish, truth_recorder
    from ldpstream.producers.publisher import ReportPublisher
    from ldpstream.registry import Registry

    logging.basicConfig(level=logging.WARNING)
    run_id = uuid.uuid4().hex[:8]
    topic = f"ldp-demo-{run_id}"
    config = ServiceConfig.from_args(args)
    if config.uses_local_stack():
        print("starting the local stack (Kafka in KRaft mode and Redis) ...", flush=True)
        started = time.monotonic()
        status = stack.up()
        print(status.describe(), f"\n(up in {time.monotonic() - started:.1f} s)", flush=True)
    kafka = config.kafka
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

    store = dataclasses.replace(config.redis, prefix=f"{config.redis.prefix}demo:{run_id}").store()
    stop = threading.Event()
    consumer = SketchConsumer(registry, store, ConsumerSettings(kafka, group_id=f"ldp-demo-{run_id}"))
    decoder = DecoderService(registry, store)
    produced: dict[str, object] = {}
    page = _serve(registry, store, kafka, args.serve_port)

    def produce() -> None:
        rate = args.clients / args.duration if args.duration > 0 else None
        chunk = max(1000, min(50_000, int((rate or 50_000) / 10)))
        produced["result"] = simulate_and_publish(
            metric, ReportPublisher(kafka), clients=args.clients, distribution=args.dist, seed=args.seed,
            rate=rate, chunk=chunk, should_stop=stop.is_set, on_drawn=truth_recorder(store, metric.name))

    threads = [threading.Thread(target=consumer.run, args=(stop,), name="consumer", daemon=True),
               threading.Thread(target=decoder.run, args=(1.0, stop), name="decoder", daemon=True),
               threading.Thread(target=produce, name="producer", daemon=True)]
    for thread in threads:
        thread.start()
    print(f"demo {run_id}: {args.clients:,} simulated clients report metric {metric.name!r} "
          f"({metric.mechanism.parameters()}) over ~{args.duration:.0f} s", flush=True)
    page_note = "" if page is None else f"live web view: {page[1]}"
    interrupted = False
    try:
        while threads[2].is_alive() or consumer.reports_applied < _acked(produced):
            _show(store.latest_estimate(metric.name), truth, args.no_screen, page_note)
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
        published = store.latest_estimate(metric.name)
        _show(published, truth, True)
        result = produced.get("result")
        if result is not None and published is not None:
            estimate = np.array([v["frequency"] for v in published["values"]])
            empirical = result.true_counts / result.true_counts.sum()  # type: ignore[attr-defined]
            print(f"\nreports acknowledged by Kafka: {result.records_acked:,}; counted in Redis: "  # type: ignore[attr-defined]
                  f"{published['n_reports']:,}; L1(estimate, sample) = {np.abs(estimate - empirical).sum():.4f}")
    if page is not None:
        page[0].shutdown()
        page[0].server_close()
    AdminClient(kafka.admin()).delete_topics([topic])
    return 130 if interrupted else 0


def _serve(registry: Registry, store: StatusStore, kafka: KafkaConfig,
           port: int) -> tuple[ThreadingHTTPServer, str] | None:
    """The live web view of the demo's estimates on 127.0.0.1 (None when ``port`` is -1 or taken)."""
    from ldpstream.deploy.serve import LiveView, make_server, serve_in_thread, url_of

    if port < 0:
        return None
    try:
        server = make_server(LiveView(registry, store, kafka, decode_interval=1.0), "127.0.0.1", port)
    except OSError as exc:
        print(f"(no live web view: port {port} is taken: {exc}; --serve-port 0 picks a free one)")
        return None
    serve_in_thread(server)
    print(f"live web view on {url_of(server)}", flush=True)
    return server, url_of(server)


def _acked(produced: dict[str, object]) -> int:
    result = produced.get("result")
    return int(result.records_acked) if result is not None else 1 << 62  # type: ignore[attr-defined]


def _show(published: dict[str, Any] | None, truth: np.ndarray, plain: bool, note: str = "") -> None:
    from ldpstream.decoder.watch import render

    text = "waiting for the first estimate ..." if published is None else render(published, truth=truth)
    sys.stdout.write(("\n" if plain else "\x1b[2J\x1b[H") + (note + "\n" if note else "") + text + "\n")
    sys.stdout.flush()
