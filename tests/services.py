"""Where integration tests get Kafka and Redis, in this order:

1. the environment: ``LDPSTREAM_KAFKA`` (bootstrap servers) and ``LDPSTREAM_REDIS`` (URL), when set;
2. testcontainers (``testcontainers.community.kafka`` / ``.redis``), when a Docker engine answers a ping;
3. the local stack (``deploy.stack``: Kafka from Maven Central jars in KRaft mode, Debian's redis-server),
   started as local processes.

Under CI (``CI`` set) a test that cannot reach its service fails; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Services:
    kafka_bootstrap: str
    redis_url: str
    source: str


def _docker_answers() -> bool:
    """True when a Docker engine answers ``GET /_ping`` (a docker client on PATH is not an engine)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        path = host.removeprefix("unix://")
        if not os.path.exists(path):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(3)
            try:
                sock.connect(path)
                sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
                return b" 200 " in sock.recv(256)
            except OSError:
                return False
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere: an integration test never passes silently without its service."""
    if os.environ.get("CI"):
        pytest.fail(f"integration services unavailable under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def provide_services() -> Iterator[Services]:
    kafka = os.environ.get("LDPSTREAM_KAFKA")
    redis_url = os.environ.get("LDPSTREAM_REDIS")
    if kafka and redis_url:
        yield Services(kafka, redis_url, "environment")
        return
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer
        from testcontainers.community.redis import RedisContainer

        with KafkaContainer().with_kraft() as kafka_container, RedisContainer() as redis_container:
            host = redis_container.get_container_host_ip()
            port = redis_container.get_exposed_port(6379)
            yield Services(kafka or kafka_container.get_bootstrap_server(),
                           redis_url or f"redis://{host}:{port}/0", "testcontainers")
        return
    from deploy import stack

    status = stack.up()
    yield Services(kafka or status.kafka_bootstrap, redis_url or status.redis_url, "local stack")
