"""``ldpstream stack``: the local Kafka + Redis stack (:mod:`ldpstream.deploy.stack`), the private Docker engine
(:mod:`ldpstream.deploy.engine`) and the images built without a registry (:mod:`ldpstream.deploy.images`)."""

from __future__ import annotations

import argparse
import sys

from ldpstream.deploy import stack


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stack",
        help="the local Kafka (KRaft) and Redis services; a private Docker engine and its images",
        description="up|down|status: a single-node Apache Kafka broker (KRaft mode, jars from Maven Central) and "
        "a Redis server on 127.0.0.1 as local processes, without Docker. Ports and folders come from "
        "LDPSTREAM_STACK_DIR, LDPSTREAM_CACHE_DIR, LDPSTREAM_STACK_KAFKA_PORT, LDPSTREAM_STACK_REDIS_PORT. "
        "engine up|down|status: a private Docker engine (Debian's dockerd) for container tests. "
        "images: builds the container images without a registry.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="{up,down,status,secrets,engine,images}")
    for name, text in (("up", "start Kafka and Redis (idempotent)"),
                       ("down", "stop them and the extras below; exit 1 naming any process still on their ports"),
                       ("status", "show whether they answer (exit 3 if not)")):
        action = actions.add_parser(name, help=text)
        action.set_defaults(func=_run_stack)
        if name != "down":
            _add_extras(action)
    certs = actions.add_parser(
        "secrets", help="make a CA, a server certificate and passwords for a secured deployment",
        description="Writes into FOLDER (mode 700) ca.pem, ca.key, server.pem, server.key, server-keystore.pem "
        "(key and certificate, Kafka's PEM keystore) and kafka-broker-keystore.pem (the Kafka broker's own, for "
        "its controller listener) for --hosts, and random passwords kafka-USER-password "
        "(admin, producer, consumer, decoder) and redis-USER-password (the same users): what "
        "deploy/compose.secure.yaml and deploy/k8s-secure mount. Files are 0640 of the group 10001 (the image's) "
        "when it may be given, ca.key 0600. Existing files are kept. For production, use your own PKI and secret "
        "store.")
    certs.add_argument("folder", help="where to write them, e.g. deploy/secrets")
    certs.add_argument("--hosts", default="kafka,redis,localhost,127.0.0.1",
                       help="names and addresses the server certificates are valid for (comma-separated)")
    certs.set_defaults(func=_run_secrets)
    engine = actions.add_parser(
        "engine", help="a private Docker engine (Debian's dockerd) with its own data root and socket",
        description="Starts, stops or inspects a private dockerd (Debian's docker.io, installed if missing) with "
        "its own socket, exec root and pid file under LDPSTREAM_STACK_DIR/engine and its own data root under "
        "LDPSTREAM_CACHE_DIR/engine (or LDPSTREAM_ENGINE_DATA_ROOT); vfs storage, no iptables rules, ports "
        "published on 127.0.0.1. The last line 'up' prints is DOCKER_HOST=unix://...: "
        'export "$(ldpstream stack engine up | tail -n1)"')
    engine.add_argument("engine_action", choices=["up", "down", "status"])
    engine.set_defaults(func=_run_engine)
    images = actions.add_parser(
        "images", help="build the base, Redis, Kafka and ldpstream images without a registry (cached)",
        description="Builds on the engine of DOCKER_HOST (else the private engine): a Debian base from "
        "debootstrap, redis:7.0.15-bookworm, apache/kafka (the local stack's version) and ldpstream:VERSION. "
        "An image whose inputs are unchanged is kept. See deploy/images/README.md.")
    images.add_argument("--only", default="base,redis,kafka,ldpstream",
                        help="comma-separated subset of base,redis,kafka,ldpstream (the base is always ensured)")
    images.add_argument("--force", action="store_true", help="rebuild even when cached")
    images.set_defaults(func=_run_images)


def _add_extras(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--secure", action="store_true",
        help="also Kafka over TLS with SASL/SCRAM and Redis over TLS with an ACL user (deploy/secure.py; its own "
        "CA, certificates and passwords under LDPSTREAM_STACK_DIR/secure); prints LDPSTREAM_CONFIG=FILE, the "
        "service configuration that reaches them. Ports: LDPSTREAM_STACK_SECURE_{KAFKA,CONTROLLER,REDIS}_PORT "
        "(default 39192, 39193, 36479)")
    parser.add_argument(
        "--redis-cluster", action="store_true",
        help="also a Redis Cluster of three masters (deploy/cluster.py) on LDPSTREAM_STACK_CLUSTER_PORT and the "
        "next two (default 36501); prints its redis+cluster:// URL")


def _run_stack(args: argparse.Namespace) -> int:
    from ldpstream.deploy import cluster, secure

    if args.action == "down":
        done = stack.down()
        done += secure.down()
        done += cluster.down()
        if done.left:
            for holder in done.left:
                print(f"still listening: {holder.describe()}", file=sys.stderr)
            print(f"stack down: {len(done.left)} port(s) of the stack still held; stop those processes",
                  file=sys.stderr)
            return 1
        print(f"stack stopped ({len(done.pids)} process(es))" if done.pids else "stack stopped (nothing was running)")
        return 0
    if args.action == "up":
        print(stack.up().describe())
        if args.secure:
            print(secure.up().describe())
        if args.redis_cluster:
            print(cluster.describe(cluster.up()))
        return 0
    current = stack.status()
    print(current.describe())
    healthy = current.kafka and current.redis
    if args.secure or secure.started():
        extra = secure.status()
        print(extra.describe())
        healthy = healthy and extra.kafka and extra.redis
    if args.redis_cluster or cluster.started():
        cluster_cfg = cluster.ClusterStackConfig.from_env()
        print(cluster.describe(cluster_cfg))
        healthy = healthy and cluster.cluster_answers(cluster_cfg)
    return 0 if healthy else 3


def _run_secrets(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ldpstream.deploy import secure

    hosts = tuple(h.strip() for h in args.hosts.split(",") if h.strip())
    for path in secure.make_secrets(Path(args.folder), hosts):
        print(path)
    return 0


def _run_engine(args: argparse.Namespace) -> int:
    from ldpstream.deploy import engine

    if args.engine_action == "up":
        print(engine.up().describe(), flush=True)
    elif args.engine_action == "down":
        print("engine stopped" if engine.down() else "engine was not running")
    else:
        current = engine.status()
        print(current.describe())
        return 0 if current.running else 3
    return 0


def _run_images(args: argparse.Namespace) -> int:
    from ldpstream.deploy import images

    only = tuple(name.strip() for name in args.only.split(",") if name.strip())
    print(f"{'image':10} {'tag':32} {'state':6} {'time':>9}", flush=True)
    results = images.build_images(only, force=args.force, report=images.main_report)
    print(f"{len(results)} images ready ({sum(r.built for r in results)} built) in "
          f"{sum(r.seconds for r in results):.1f} s", file=sys.stdout)
    return 0
