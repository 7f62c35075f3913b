"""Kafka and Redis as containers through testcontainers, from the pinned images the deployment names.

- Redis: testcontainers' ``RedisContainer`` on :data:`REDIS_IMAGE`.
- Kafka: testcontainers' generic ``DockerContainer`` on :data:`KAFKA_IMAGE` (the official ``apache/kafka``
  image's interface: configuration from ``KAFKA_*`` variables; testcontainers' ``KafkaContainer`` supports
  Confluent's images only). Its client listener must advertise the address the host dials, which is known before
  the start only for a fixed port: a free port ``P`` of 127.0.0.1 is chosen, the broker listens on ``P`` inside
  the container too, and ``P`` is published as ``P``. Ready when a topic can be created and a consumer group can
  join it (the local stack's readiness check).

On the private engine of a checkout's development tooling (``tools/engine.py``; ``DOCKER_HOST`` is its socket,
:func:`private_engine_socket`) testcontainers is set up for a machine without a registry: Ryuk (its reaper, an
image pulled from Docker Hub) is disabled and the containers' host is 127.0.0.1, dialled on the published ports
(connection mode ``docker_host``), unless ``TESTCONTAINERS_RYUK_DISABLED`` / ``TESTCONTAINERS_HOST_OVERRIDE`` /
``TESTCONTAINERS_CONNECTION_MODE`` say otherwise. Elsewhere testcontainers' own defaults apply.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ldpstream.deploy.stack import KAFKA_VERSION, StackConfig, check_kafka_serves_groups
from ldpstream.errors import ServiceError

LOOPBACK = "127.0.0.1"
#: The pinned images, by the names a user pulls from Docker Hub (the compose file uses the same); where no
#: registry is reachable, a checkout's ``python -m tools.images`` builds them under these names.
REDIS_IMAGE = "redis:7.0.15-bookworm"
KAFKA_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
#: The private engine's folder under the stack folder, and its socket there.
PRIVATE_ENGINE_DIR = "engine"
PRIVATE_ENGINE_SOCKET = "docker.sock"


def ldpstream_image() -> str:
    """The tag of this version's own image (``deploy/Dockerfile``)."""
    from ldpstream import __version__

    return f"ldpstream:{__version__}"


def private_engine_socket() -> Path:
    """Where the private Docker engine of ``tools/engine.py`` listens (under ``LDPSTREAM_STACK_DIR``)."""
    return StackConfig.from_env().state_dir / PRIVATE_ENGINE_DIR / PRIVATE_ENGINE_SOCKET


def on_private_engine() -> bool:
    return os.environ.get("DOCKER_HOST") == f"unix://{private_engine_socket()}"


def socket_answers(path: Path | str, timeout: float = 3.0) -> bool:
    """True when a Docker engine answers ``GET /_ping`` on the unix socket ``path``."""
    path = str(path)
    if not os.path.exists(path):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(256)
        except OSError:
            return False


def configure_testcontainers() -> None:
    """Ryuk off and host 127.0.0.1 on the private engine (no registry, ports published on loopback)."""
    if not on_private_engine():
        return
    from testcontainers.core.config import ConnectionMode, testcontainers_config

    if "TESTCONTAINERS_RYUK_DISABLED" not in os.environ:
        testcontainers_config.ryuk_disabled = True
    if not testcontainers_config.tc_host_override:
        testcontainers_config.tc_host_override = LOOPBACK
    # Inside a sandbox testcontainers would dial the bridge gateway (its "inside a container" mode): the
    # private engine publishes on 127.0.0.1 only, so dial the published ports there.
    if "TESTCONTAINERS_CONNECTION_MODE" not in os.environ:
        testcontainers_config.connection_mode_override = ConnectionMode.docker_host


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def kafka_environment(advertised_host: str, port: int) -> dict[str, str]:
    """The official image's variables for one KRaft node (broker and controller) with test settings."""
    return {
        "CLUSTER_ID": "bGRwc3RyZWFtLXRlc3RzLTE",
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_LISTENERS": f"PLAINTEXT://0.0.0.0:{port},CONTROLLER://localhost:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{advertised_host}:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_NUM_PARTITIONS": "4",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_HEAP_OPTS": "-Xmx512m -Xms256m",
    }


def _container_logs(container: object, lines: int = 30) -> str:
    try:
        out, err = container.get_logs()  # type: ignore[attr-defined]
        text = (out or b"").decode(errors="replace") + (err or b"").decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])
    except Exception as exc:  # the container may be gone
        return f"(no logs: {exc})"


def wait_for_kafka(bootstrap: str, container: object, timeout: float = 180.0) -> None:
    """Metadata answers, then a topic can be created and a group can join; fails early if the container exits."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    # log_level 3: no line per refused connection while docker-proxy answers before the broker does
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    while True:
        try:
            admin.list_topics(timeout=2)
            break
        except Exception:
            wrapped = container.get_wrapped_container()  # type: ignore[attr-defined]
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                raise ServiceError(
                    f"the Kafka container exited during startup:\n{_container_logs(container)}") from None
            if time.monotonic() > deadline:
                raise ServiceError(f"Kafka at {bootstrap} did not answer within {timeout:.0f} s:\n"
                                   f"{_container_logs(container)}") from None
            time.sleep(0.5)
    check_kafka_serves_groups(bootstrap, "see the container's logs", timeout=max(10.0, deadline - time.monotonic()))


@contextlib.contextmanager
def kafka_container(image: str = KAFKA_IMAGE) -> Iterator[str]:
    """A single-node Kafka container; yields its bootstrap address (host:port), removed afterwards."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.docker_client import DockerClient

    configure_testcontainers()
    host = DockerClient().host()
    loopback = host in (LOOPBACK, "localhost")
    port = free_port() if loopback else free_port("0.0.0.0")
    container = DockerContainer(image)
    for key, value in kafka_environment(host, port).items():
        container.with_env(key, value)
    # docker-py takes (host ip, host port) for a binding; testcontainers' annotation knows only the port.
    ports: dict[Any, Any] = container.ports
    ports[f"{port}/tcp"] = (LOOPBACK, port) if loopback else port
    with container:
        bootstrap = f"{host}:{port}"
        wait_for_kafka(bootstrap, container)
        yield bootstrap


@contextlib.contextmanager
def redis_container(image: str = REDIS_IMAGE) -> Iterator[str]:
    """A Redis container (testcontainers' RedisContainer); yields its URL, removed afterwards."""
    from testcontainers.community.redis import RedisContainer

    configure_testcontainers()
    with RedisContainer(image=image) as container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(6379)
        yield f"redis://{host}:{port}/0"


@contextlib.contextmanager
def kafka_and_redis() -> Iterator[tuple[str, str]]:
    """Both containers: yields (Kafka bootstrap, Redis URL)."""
    with redis_container() as redis_url, kafka_container() as bootstrap:
        yield bootstrap, redis_url
