"""``ldpstream demo``: the whole pipeline on the local stack with a simulated population.

Brings up the local stack (unless --kafka/--redis or LDPSTREAM_KAFKA/LDPSTREAM_REDIS point elsewhere), then
runs, in one process, a producer simulating clients, a consumer-group member folding reports into Redis,
and the decoder publishing estimates every second, while the terminal shows the live estimate beside the
true distribution. Each run uses its own topic and Redis prefix, so runs never mix.

Ctrl-C or SIGTERM ends it cleanly: the producer stops, the reports Kafka acknowledged are counted (waiting up to
15 s for the consumer) and both figures printed; then, as at every end, its topic, its consumer group and its
Redis keys are deleted. It exits 130 (Ctrl-C) or 143 (SIGTERM), 0 when it ran to the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import re
import sys
import threading
import time
import tomllib
import uuid
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpstream.cli.interrupts import Interrupts
from ldpstream.config import KafkaConfig, ServiceConfig, add_service_arguments
from ldpstream.logs import add_log_arguments, configure_from_args, log_start

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    from ldpstream.decoder.service import DecoderService
    from ldpstream.operations.serve import ViewedStore
    from ldpstream.registry import Registry
    from ldpstream.store.redis_store import RedisSketchStore

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
    add_log_arguments(demo, level="warning")  # the terminal view owns the screen unless asked
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; Ctrl-C and SIGTERM end it cleanly (module docstring): 130 or 143, else 0."""
    with Interrupts() as interrupts:
        return _run(args, interrupts)


#: Seconds an interrupted demo waits for the consumer to count the reports Kafka acknowledged.
CATCH_UP_SECONDS = 15.0


def _run(args: argparse.Namespace, interrupts: Interrupts) -> int:
    from prometheus_client import start_http_server

    from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
    from ldpstream.decoder.service import DecoderService
    from ldpstream.deploy import stack
    from ldpstream.distributions import parse_distribution
    from ldpstream.kafka import ensure_topics
    from ldpstream.producers.loadgen import simulate_and_publish, truth_recorder
    from ldpstream.producers.publisher import ReportPublisher
    from ldpstream.registry import Registry

    configure_from_args(args)
    run_id = uuid.uuid4().hex[:8]
    topic, group = f"ldp-demo-{run_id}", f"ldp-demo-{run_id}"
    config = ServiceConfig.from_args(args)
    log_start(logging.getLogger("ldpstream.demo"), "demo", args, config,
              {"metric": args.metric, "clients": args.clients, "topic": topic, "metrics_port": args.metrics_port,
               "serve_port": args.serve_port})
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
    store = dataclasses.replace(config.redis, prefix=f"{config.redis.prefix}demo:{run_id}").store()
    ensure_topics(kafka, [topic, "ldp-dead-letters"])
    stop = threading.Event()
    page: tuple[ThreadingHTTPServer, str] | None = None
    threads: list[threading.Thread] = []
    try:
        if args.metrics_port:
            try:
                start_http_server(args.metrics_port, addr="127.0.0.1")
                print(f"Prometheus metrics on http://127.0.0.1:{args.metrics_port}/metrics")
            except OSError as exc:
                print(f"(no Prometheus endpoint: port {args.metrics_port} is taken: {exc})")
        consumer = SketchConsumer(registry, store, ConsumerSettings(kafka, group_id=group))
        decoder = DecoderService(registry, store)
        produced: dict[str, object] = {}
        page = _serve(registry, store, kafka, args.serve_port)

        def produce() -> None:
            rate = args.clients / args.duration if args.duration > 0 else None
            chunk = max(1000, min(50_000, int((rate or 50_000) / 10)))
            produced["result"] = simulate_and_publish(
                metric, ReportPublisher(kafka), clients=args.clients, distribution=args.dist, seed=args.seed,
                rate=rate, chunk=chunk, should_stop=lambda: interrupts.requested.is_set() or stop.is_set(),
                on_drawn=truth_recorder(store, metric.name))

        threads = [threading.Thread(target=consumer.run, args=(stop,), name="consumer", daemon=True),
                   threading.Thread(target=decoder.run, args=(1.0, stop), name="decoder", daemon=True),
                   threading.Thread(target=produce, name="producer", daemon=True)]
        for thread in threads:
            thread.start()
        print(f"demo {run_id}: {args.clients:,} simulated clients report metric {metric.name!r} "
              f"({metric.mechanism.parameters()}) over ~{args.duration:.0f} s", flush=True)
        page_note = "" if page is None else f"live web view: {page[1]}"
        while threads[2].is_alive() or consumer.reports_applied < _acked(produced):
            if interrupts.requested.is_set():
                break
            _show(store.latest_estimate(metric.name), truth, args.no_screen, page_note)
            interrupts.requested.wait(1.0)
            if not threads[2].is_alive() and "result" not in produced:
                break  # the producer failed; its error was printed by the thread
            if not threads[0].is_alive() or not threads[1].is_alive():
                print("the consumer or decoder stopped (its error is above): ending the demo", file=sys.stderr)
                break
        if interrupts.requested.is_set():
            print(f"\ninterrupted ({interrupts.name}): stopping the producer, counting what Kafka acknowledged",
                  flush=True)
            try:
                threads[2].join()  # it stops between chunks and waits for the acknowledgements of what it sent
                deadline = time.monotonic() + CATCH_UP_SECONDS
                while consumer.reports_applied < _acked(produced) and time.monotonic() < deadline \
                        and threads[0].is_alive():
                    time.sleep(0.2)
            except KeyboardInterrupt:  # a second signal: no more waiting
                pass
        _final(decoder, store, metric.name, truth, produced, consumer.reports_applied)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        if page is not None:
            page[0].shutdown()
            page[0].server_close()
        _clean_up(kafka, topic, group, store)
    return interrupts.exit_code


def _final(decoder: DecoderService, store: RedisSketchStore, metric: str, truth: np.ndarray,
           produced: dict[str, object], applied: int) -> None:
    """Decode once more and print the estimate and the reports acknowledged by Kafka against those counted."""
    result = produced.get("result")
    acked = result.records_acked if result is not None else None  # type: ignore[attr-defined]
    published = store.latest_estimate(metric) if decoder.run_once() else None
    counted = int(published["n_reports"]) if published is not None else applied
    if published is not None:
        _show(published, truth, True)
    line = f"\nreports acknowledged by Kafka: {'unknown' if acked is None else f'{acked:,}'}; counted in Redis: " \
        f"{counted:,}"
    if result is not None and published is not None and counted:
        estimate = np.array([v["frequency"] for v in published["values"]])
        empirical = result.true_counts / max(result.true_counts.sum(), 1)  # type: ignore[attr-defined]
        line += f"; L1(estimate, sample) = {np.abs(estimate - empirical).sum():.4f}"
    print(line, flush=True)


def _clean_up(kafka: KafkaConfig, topic: str, group: str, store: RedisSketchStore) -> None:
    """Delete the demo's topic (waiting for the deletion), its consumer group and every Redis key under its
    prefix; what fails is said in one line and does not stop the rest."""
    import redis
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.admin())
    said = []
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
        said.append(f"topic {topic}")
    except (KafkaException, TimeoutError) as exc:
        print(f"(the demo's topic {topic} was not deleted: {exc})", file=sys.stderr)
    with contextlib.suppress(KafkaException, TimeoutError):  # a group that never committed does not exist
        admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
    pattern = re.sub(r"([*?\[\]\\])", r"\\\1", store.prefix) + ":*"
    try:
        client = store.client
        deleted = 0
        for key in client.scan_iter(match=pattern, count=1000):
            deleted += int(client.delete(key))  # one at a time: on a cluster the keys lie in many slots
        said.append(f"{deleted} Redis keys under {store.prefix}:")
    except redis.RedisError as exc:
        print(f"(the demo's Redis keys under {store.prefix}: were not deleted: {exc})", file=sys.stderr)
    if said:
        print(f"removed {' and '.join(said)}", flush=True)


def _serve(registry: Registry, store: ViewedStore, kafka: KafkaConfig,
           port: int) -> tuple[ThreadingHTTPServer, str] | None:
    """The live web view of the demo's estimates on 127.0.0.1 (None when ``port`` is -1 or taken)."""
    from ldpstream.operations.serve import LiveView, make_server, serve_in_thread, url_of

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
