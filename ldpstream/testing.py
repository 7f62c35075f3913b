"""pytest plugin: real Kafka and Redis for integration tests, yours and ldpstream's own.

Installed with ldpstream and registered through the ``pytest11`` entry point, so its fixtures are there in
any test session:

- ``services`` (session): where Kafka and Redis are, found in this order:

  1. the environment: ``LDPSTREAM_KAFKA`` (bootstrap servers) and ``LDPSTREAM_REDIS`` (URL), when set;
  2. testcontainers (``testcontainers.community.kafka`` / ``.redis``), when a Docker engine answers a ping;
  3. the local stack (:mod:`ldpstream.deploy.stack`: Kafka from Maven Central jars in KRaft mode, Debian's
     redis-server), started as local processes.

- ``kafka_bootstrap``, ``redis_url`` (session): the two addresses;
- ``key_prefix``: a Redis key prefix of the test's own, whose keys are deleted afterwards;
- ``fresh_topic``: a factory of new uniquely named Kafka topics, deleted afterwards;
- ``service_config``: a :class:`~ldpstream.config.ServiceConfig` for those services and that prefix.

Under CI (``CI`` set) a test that cannot reach its services fails; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from ldpstream.config import KafkaConfig, RedisConfig, ServiceConfig
from ldpstream.kafka import ensure_topics


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
    from ldpstream.deploy import stack

    status = stack.up()
    yield Services(kafka or status.kafka_bootstrap, redis_url or status.redis_url, "local stack")


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    try:
        with provide_services() as found:
            yield found
    except Exception as exc:  # no environment, no Docker, and the local stack would not start
        unavailable(f"Kafka/Redis: {exc}")


@pytest.fixture(scope="session")
def kafka_bootstrap(services: Services) -> str:
    return services.kafka_bootstrap


@pytest.fixture(scope="session")
def redis_url(services: Services) -> str:
    return services.redis_url


@pytest.fixture
def key_prefix(redis_url: str) -> Iterator[str]:
    """A Redis key prefix of this test's own; its keys are deleted afterwards."""
    import redis

    prefix = f"test:{uuid.uuid4().hex[:10]}"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def fresh_topic(kafka_bootstrap: str) -> Iterator[Callable[..., str]]:
    """Factory of new uniquely named topics (deleted after the test)."""
    from confluent_kafka.admin import AdminClient

    created: list[str] = []

    def make(partitions: int = 4, stem: str = "t") -> str:
        name = f"test-{stem}-{uuid.uuid4().hex[:10]}"
        ensure_topics(kafka_bootstrap, [name], partitions=partitions)
        created.append(name)
        return name

    yield make
    if created:
        AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics(created)


@pytest.fixture
def service_config(kafka_bootstrap: str, redis_url: str, key_prefix: str) -> ServiceConfig:
    """The services' configuration, with this test's own key prefix."""
    return ServiceConfig(KafkaConfig(kafka_bootstrap), RedisConfig(redis_url, key_prefix))
