"""pytest plugin: real Kafka and Redis for integration tests, yours and ldpstream's own.

Installed with ldpstream and registered through the ``pytest11`` entry point, so its fixtures are there in
any test session:

- ``services`` (session): where Kafka and Redis are, found in this order:

  1. the environment: ``LDPSTREAM_KAFKA`` (bootstrap servers) and ``LDPSTREAM_REDIS`` (URL), when set;
  2. testcontainers, when a Docker engine answers a ping (:mod:`ldpstream.deploy.containers`: the pinned images
     ``apache/kafka`` and ``redis``, which ``ldpstream stack images`` builds where no registry is reachable);
  3. the local stack (:mod:`ldpstream.deploy.stack`: Kafka from Maven Central jars in KRaft mode, Debian's
     redis-server), started as local processes.

  ``LDPSTREAM_SERVICES`` (``environment``, ``testcontainers`` or ``local``) forces one of them; a forced source
  that is not there fails every test that needs it (``testcontainers``: no Docker engine answers).

  With ``LDPSTREAM_CONFIG`` set (a service configuration file: TLS, SASL, an ACL user, e.g. the one ``ldpstream
  stack up --secure`` writes), the environment source is that configuration, resolved as every command
  resolves it (:meth:`ServiceConfig.load`: ``LDPSTREAM_KAFKA``/``LDPSTREAM_REDIS`` still override its addresses),
  and the fixtures below carry its security;

- ``kafka_bootstrap``, ``redis_url`` (session): the two addresses;
- ``kafka_config``, ``redis_config`` (session): how to reach them (:class:`~ldpstream.config.KafkaConfig`,
  :class:`~ldpstream.config.RedisConfig`, with the configuration's security; plain ones otherwise);
- ``key_prefix``: a Redis key prefix of the test's own, whose keys are deleted afterwards;
- ``fresh_topic``: a factory of new uniquely named Kafka topics, deleted afterwards;
- ``service_config``: a :class:`~ldpstream.config.ServiceConfig` for those services and that prefix.

Under CI (``CI`` set) a test that cannot reach its services fails; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ldpstream.config import KafkaConfig, RedisConfig, ServiceConfig
from ldpstream.errors import ServiceError
from ldpstream.kafka import ensure_topics


@dataclass(frozen=True)
class Services:
    kafka_bootstrap: str
    redis_url: str
    source: str
    #: The service configuration the addresses come from (``LDPSTREAM_CONFIG``), with its security; None for
    #: plain services.
    config: ServiceConfig | None = None

    @property
    def kafka(self) -> KafkaConfig:
        return self.config.kafka if self.config is not None else KafkaConfig(self.kafka_bootstrap)

    @property
    def redis(self) -> RedisConfig:
        plain = self.config.redis if self.config is not None else RedisConfig(self.redis_url)
        return ClosedAfterTestsRedisConfig(**{f.name: getattr(plain, f.name) for f in dataclasses.fields(plain)})


#: Clients made by the fixtures' Redis configuration and not closed yet (oldest first).
_OPEN_CLIENTS: list[Any] = []


@dataclass(frozen=True)
class ClosedAfterTestsRedisConfig(RedisConfig):
    """A :class:`RedisConfig` whose clients the fixtures close: after the test that made them (``key_prefix``),
    else at the end of the session. A client left to the garbage collector closes its sockets there with a
    ``ResourceWarning``, which the test settings turn into an error, in whatever test happens to be running."""

    def client(self) -> Any:
        made = super().client()
        _OPEN_CLIENTS.append(made)
        return made


def close_clients_made_since(mark: int) -> None:
    """Close the fixtures' Redis clients made after the first ``mark`` (see :class:`ClosedAfterTestsRedisConfig`)."""
    while len(_OPEN_CLIENTS) > mark:
        _OPEN_CLIENTS.pop().close()


SOURCES = ("environment", "testcontainers", "local")


def forced_source() -> str | None:
    """``LDPSTREAM_SERVICES``, checked: one of :data:`SOURCES`, or None when unset (the usual order)."""
    value = os.environ.get("LDPSTREAM_SERVICES", "").strip().lower()
    if not value:
        return None
    if value not in SOURCES:
        raise ValueError(f"LDPSTREAM_SERVICES={value!r}: choose one of {', '.join(SOURCES)}")
    return value


def _docker_answers() -> bool:
    """True when a Docker engine answers ``GET /_ping`` (a docker client on PATH is not an engine)."""
    from ldpstream.deploy.engine import socket_answers

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        return socket_answers(host.removeprefix("unix://"))
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
    forced = forced_source()
    kafka = os.environ.get("LDPSTREAM_KAFKA")
    redis_url = os.environ.get("LDPSTREAM_REDIS")
    if forced in (None, "environment") and os.environ.get("LDPSTREAM_CONFIG"):
        config = ServiceConfig.load()
        config.kafka.check_access()
        config.redis.check_access()
        yield Services(config.kafka.bootstrap, config.redis.url, "configuration", config)
        return
    if forced == "environment" and not (kafka and redis_url):
        raise ServiceError("LDPSTREAM_SERVICES=environment needs LDPSTREAM_KAFKA and LDPSTREAM_REDIS")
    if forced == "environment" or (forced is None and kafka and redis_url):
        assert kafka and redis_url
        yield Services(kafka, redis_url, "environment")
        return
    if forced == "testcontainers" and not _docker_answers():
        raise ServiceError(f"LDPSTREAM_SERVICES=testcontainers but no Docker engine answers at "
                           f"{os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}")
    if forced == "testcontainers" or (forced is None and _docker_answers()):
        from ldpstream.deploy.containers import kafka_and_redis

        with kafka_and_redis() as (kafka_bootstrap, container_redis):
            yield Services(kafka_bootstrap, container_redis, "testcontainers")
        return
    from ldpstream.deploy import stack

    status = stack.up()
    if forced == "local":
        yield Services(status.kafka_bootstrap, status.redis_url, "local stack")
    else:
        yield Services(kafka or status.kafka_bootstrap, redis_url or status.redis_url, "local stack")


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    try:
        forced = forced_source()
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        with provide_services() as found:
            yield found
    except Exception as exc:  # no environment, no Docker, and the local stack would not start
        if forced is not None:  # asked for by name: never a skip
            pytest.fail(f"Kafka/Redis from LDPSTREAM_SERVICES={forced}: {exc}", pytrace=False)
        unavailable(f"Kafka/Redis: {exc}")


@pytest.fixture(scope="session")
def kafka_bootstrap(services: Services) -> str:
    return services.kafka_bootstrap


@pytest.fixture(scope="session")
def redis_url(services: Services) -> str:
    return services.redis_url


@pytest.fixture(scope="session")
def kafka_config(services: Services) -> KafkaConfig:
    return services.kafka


@pytest.fixture(scope="session")
def redis_config(services: Services) -> Iterator[RedisConfig]:
    yield services.redis
    close_clients_made_since(0)


@pytest.fixture
def key_prefix(redis_config: RedisConfig) -> Iterator[str]:
    """A Redis key prefix of this test's own; its keys are deleted afterwards (on every node of a cluster)."""
    prefix = f"test:{uuid.uuid4().hex[:10]}"
    mark = len(_OPEN_CLIENTS)
    yield prefix
    client = redis_config.client()
    pipe = client.pipeline(transaction=False)
    for key in client.scan_iter(f"{prefix}:*", count=1000):
        pipe.delete(key)  # one command each: on a cluster the keys lie in many slots
    pipe.execute()
    close_clients_made_since(mark)


@pytest.fixture
def fresh_topic(kafka_config: KafkaConfig) -> Iterator[Callable[..., str]]:
    """Factory of new uniquely named topics (deleted after the test)."""
    from confluent_kafka.admin import AdminClient

    created: list[str] = []

    def make(partitions: int = 4, stem: str = "t") -> str:
        name = f"test-{stem}-{uuid.uuid4().hex[:10]}"
        ensure_topics(kafka_config, [name], partitions=partitions)
        created.append(name)
        return name

    yield make
    if created:
        AdminClient(kafka_config.admin()).delete_topics(created)


@pytest.fixture
def service_config(kafka_config: KafkaConfig, redis_config: RedisConfig, key_prefix: str) -> ServiceConfig:
    """The services' configuration (with its security), with this test's own key prefix."""
    return ServiceConfig(kafka_config, dataclasses.replace(redis_config, prefix=key_prefix))
