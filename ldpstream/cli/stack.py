"""``ldpstream stack``: the local Kafka + Redis stack (:mod:`ldpstream.deploy.stack`), the secured stack and the
Redis Cluster beside it, and the secrets of a secured deployment."""

from __future__ import annotations

import argparse
import sys

from ldpstream.deploy import stack


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stack",
        help="the local Kafka (KRaft) and Redis services",
        description="up|down|status: a single-node Apache Kafka broker (KRaft mode, jars from Maven Central) and "
        "a Redis server on 127.0.0.1 as local processes, without Docker. Ports and folders come from "
        "LDPSTREAM_STACK_DIR, LDPSTREAM_CACHE_DIR, LDPSTREAM_STACK_KAFKA_PORT, LDPSTREAM_STACK_REDIS_PORT. "
        "secrets: the CA, certificates and passwords of a secured deployment.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="{up,down,status,secrets}")
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
