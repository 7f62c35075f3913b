"""pytest plugin: real Kafka and Redis for integration tests, yours and ldpstream's own.

Installed with ldpstream and registered through the ``pytest11`` entry point, so its fixtures are there in any
test session. Where the services are (``services``, session): ``LDPSTREAM_KAFKA`` and ``LDPSTREAM_REDIS`` when
set (with ``LDPSTREAM_CONFIG``: that service configuration, security included), else a local stack that already
answers. Nothing is started unless asked: ``LDPSTREAM_SERVICES=local`` starts the local stack,
``testcontainers`` runs Kafka and Redis containers on ``DOCKER_HOST`` for the session, ``environment`` insists
on the variables. What a session starts (:func:`start_local`) is stopped when it ends, unless
``LDPSTREAM_KEEP_STACK=1``. Under CI (``CI`` set) a test that cannot reach its services fails; elsewhere it is
skipped with the reason. docs/development.md#tests says more.

The fixtures:

- ``kafka_bootstrap``, ``redis_url`` (session): the two addresses;
- ``kafka_config``, ``redis_config`` (session): how to reach them (:class:`~ldpstream.config.KafkaConfig`,
  :class:`~ldpstream.config.RedisConfig`, with the configuration's security);
- ``key_prefix``: a Redis key prefix of the test's own, whose keys are deleted afterwards;
- ``fresh_topic``: a factory of new uniquely named Kafka topics, deleted afterwards;
- ``service_config``: a :class:`~ldpstream.config.ServiceConfig` for those services and that prefix;
- ``ldp_pipeline``: a factory of ready pipelines (:class:`Pipeline`): your metrics on a fresh topic and key
  prefix, devices to report with, a consumer run until every acknowledged report is counted, and a decode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import secrets
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ldpstream.config import KafkaConfig, RedisConfig, ServiceConfig
from ldpstream.errors import ServiceError
from ldpstream.kafka import ensure_topics
from ldpstream.registry import Registry

if TYPE_CHECKING:
    from ldpstream.producers import LdpClient, ReportPublisher
    from ldpstream.store.redis_store import RedisSketchStore


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
    from ldpstream.deploy.containers import socket_answers

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
    if forced == "testcontainers":
        if not _docker_answers():
            raise ServiceError(f"LDPSTREAM_SERVICES=testcontainers but no Docker engine answers at "
                               f"{os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}")
        from ldpstream.deploy.containers import kafka_and_redis

        with kafka_and_redis() as (kafka_bootstrap, container_redis):
            yield Services(kafka_bootstrap, container_redis, "testcontainers")
        return
    from ldpstream.deploy import stack

    cfg = stack.StackConfig.from_env()
    if forced == "local":
        start_local(f"Redis on {cfg.redis_url}", lambda: stack.redis_answers(cfg), lambda: stack.start_redis(cfg),
                    lambda: stack.stop_redis(cfg))
        start_local(f"Kafka on {cfg.kafka_bootstrap}", lambda: stack.kafka_answers(cfg),
                    lambda: stack.start_kafka(cfg), lambda: stack.stop_kafka(cfg))
    elif not (stack.redis_answers(cfg) and stack.kafka_answers(cfg)):
        raise ServiceError("no Kafka and Redis to test against: set LDPSTREAM_SERVICES=local to start the local "
                           "stack (or run `ldpstream stack up`), LDPSTREAM_SERVICES=testcontainers, or "
                           "LDPSTREAM_KAFKA and LDPSTREAM_REDIS")
    yield Services(kafka or cfg.kafka_bootstrap, redis_url or cfg.redis_url, "local stack")


@dataclass(frozen=True)
class Started:
    """A service this test session started, and how to stop it."""

    what: str
    stop: Callable[[], object]


#: What this session started, in order (stopped in reverse at its end unless ``LDPSTREAM_KEEP_STACK=1``).
STARTED: list[Started] = []


def start_local(what: str, answers: Callable[[], bool], start: Callable[[], object],
                stop: Callable[[], object]) -> None:
    """``start()`` unless ``answers()``; what was started is stopped when the session ends (:data:`STARTED`)."""
    if answers():
        return
    STARTED.append(Started(what, stop))
    start()


def keep_stack() -> bool:
    return os.environ.get("LDPSTREAM_KEEP_STACK", "").strip().lower() in ("1", "true", "yes")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop what this session started (:func:`start_local`), unless ``LDPSTREAM_KEEP_STACK=1``."""
    if keep_stack():
        return
    for started in reversed(STARTED):
        try:
            started.stop()
        except Exception as exc:  # reported, never a reason to lose the session's own result
            session.config.stash[_STOP_ERRORS] = [*session.config.stash.get(_STOP_ERRORS, []),
                                                  f"{started.what}: {exc}"]


_STOP_ERRORS = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not STARTED:
        return
    names = ", ".join(s.what for s in STARTED)
    if keep_stack():
        terminalreporter.write_line(f"ldpstream: left running (LDPSTREAM_KEEP_STACK=1): {names}; "
                                    "stop them with `ldpstream stack down`")
        return
    terminalreporter.write_line(f"ldpstream: stopped what this session started: {names}")
    for error in terminalreporter.config.stash.get(_STOP_ERRORS, []):
        terminalreporter.write_line(f"ldpstream: could not stop {error}; try `ldpstream stack down`", red=True)


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


@dataclass
class Pipeline:
    """A pipeline of a test's own: ``registry`` reports to ``topic`` (``partitions`` partitions), counted under
    the Redis key ``prefix``. Devices report with :meth:`client`; :meth:`run` flushes their reports, consumes
    until every acknowledged one is counted, decodes once and returns the estimates."""

    registry: Registry
    topic: str
    partitions: int
    config: ServiceConfig
    _publisher: ReportPublisher | None = field(default=None, repr=False)

    @property
    def prefix(self) -> str:
        return self.config.redis.prefix

    @functools.cached_property
    def store(self) -> RedisSketchStore:
        """The sketch store (Redis, under :attr:`prefix`), one client for the pipeline's life."""
        return self.config.redis.store()

    def client(self, secret: bytes | None = None) -> LdpClient:
        """A device: an :class:`~ldpstream.producers.LdpClient` with its own secret (random unless given),
        sharing the pipeline's Kafka producer with every other device."""
        from ldpstream.producers import LdpClient, ReportPublisher

        if self._publisher is None:
            self._publisher = ReportPublisher(self.config.kafka)
        return LdpClient(self.registry, self._publisher, secret=secrets.token_bytes(32) if secret is None else secret)

    def flush(self) -> int:
        """Wait for Kafka to acknowledge every queued report; the records acknowledged so far."""
        return 0 if self._publisher is None else self._publisher.flush().records_acked

    def consume(self, timeout: float = 60.0) -> dict[str, int]:
        """Run a consumer until the store holds every partition up to its end; the store's stats counters."""
        from confluent_kafka import Consumer, TopicPartition
        from prometheus_client import CollectorRegistry

        from ldpstream.consumers.metrics import ConsumerMetrics
        from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer

        store = self.store
        probe = Consumer(self.config.kafka.consumer(f"{self.prefix}-probe"))
        try:
            ends = {p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                    for p in range(self.partitions)}
        finally:
            probe.close()
        consumer = SketchConsumer(self.registry, store, ConsumerSettings(self.config.kafka, group_id=self.prefix),
                                  metrics=ConsumerMetrics(registry=CollectorRegistry()))
        consumer.start()
        deadline = time.monotonic() + timeout
        try:
            while not self._counted(store, ends):
                if time.monotonic() > deadline:
                    raise AssertionError(f"the consumer did not reach the end of {self.topic} in {timeout} s: "
                                         f"stored {store.next_offsets(self.topic, ends)}, ends {ends}")
                consumer.poll_once()
        finally:
            consumer.close()
        return store.stats(self.topic, range(self.partitions))

    def _counted(self, store: RedisSketchStore, ends: Mapping[int, int]) -> bool:
        stored = store.next_offsets(self.topic, ends)
        return all(end == 0 or (stored[p] or 0) >= end for p, end in ends.items())

    def decode(self) -> None:
        """One decoder pass, published to Redis."""
        from prometheus_client import CollectorRegistry

        from ldpstream.decoder.metrics import DecoderMetrics
        from ldpstream.decoder.service import DecoderService

        DecoderService(self.registry, self.store, metrics=DecoderMetrics(CollectorRegistry())).run_once()

    def estimate(self, metric: str, window: str = "all") -> dict[str, Any] | None:
        """The latest published estimate of a metric (or table of an association) in a window, or None."""
        store = self.store
        if metric in self.registry.associations:
            return store.latest_joint(metric, window)
        return store.latest_estimate(metric, window)

    def run(self, window: str = "all", timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """:meth:`flush`, :meth:`consume`, :meth:`decode`; each metric's and association's published estimate of
        ``window`` (those with reports)."""
        self.flush()
        self.consume(timeout)
        self.decode()
        names = [*self.registry.metrics, *self.registry.associations]
        found = {name: self.estimate(name, window) for name in names}
        return {name: estimate for name, estimate in found.items() if estimate is not None}


def pipeline_registry(metrics: Mapping[str, Mapping[str, Any]] | str | os.PathLike[str], topic: str,
                      associations: Mapping[str, Mapping[str, Any]] | None = None, **defaults: Any) -> Registry:
    """A registry reporting to ``topic``: the metric tables ``metrics`` (ids given in order where missing) and
    ``associations``, or a registry file (``metrics`` a path) whose topics are replaced; ``defaults`` add to its
    ``[defaults]`` (windows ``["all"]`` unless given or the file sets them)."""
    if isinstance(metrics, Mapping):
        data: dict[str, Any] = {"defaults": {"windows": ["all"]}, "metrics": {
            name: {"id": number, **table} for number, (name, table) in enumerate(metrics.items(), start=1)}}
        base = None
    else:
        path = Path(metrics)
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        base = path.parent
    if associations:
        data["associations"] = {**data.get("associations", {}), **{
            name: {"id": number, **table} for number, (name, table) in enumerate(associations.items(), start=1)}}
    for kind in ("metrics", "associations"):
        data[kind] = {name: {k: v for k, v in table.items() if k != "topic"}
                      for name, table in data.get(kind, {}).items()}
    data["defaults"] = {**data.get("defaults", {}), **defaults, "topic": topic}
    return Registry.from_dict(data, base_dir=base)


@pytest.fixture
def ldp_pipeline(service_config: ServiceConfig, fresh_topic: Callable[..., str]) -> Callable[..., Pipeline]:
    """Factory: ``ldp_pipeline(metrics, partitions=2, associations=None, **defaults)`` makes a :class:`Pipeline`
    of :func:`pipeline_registry`'s registry on a fresh topic and this test's key prefix, both deleted afterwards."""

    def make(metrics: Mapping[str, Mapping[str, Any]] | str | os.PathLike[str], partitions: int = 2,
             associations: Mapping[str, Mapping[str, Any]] | None = None, **defaults: Any) -> Pipeline:
        topic = fresh_topic(partitions=partitions, stem="pipeline")
        registry = pipeline_registry(metrics, topic, associations, **defaults)
        return Pipeline(registry, topic, partitions, service_config)

    return make
