"""Shared fixtures. Integration fixtures (``services``, ``kafka_bootstrap``, ``redis_url``, ``fresh_topic``,
``key_prefix``) come from :mod:`tests.services`; see the README's "Tests" section."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.services import Services, provide_services, unavailable


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

    from ldpstream.topics import ensure_topics

    created: list[str] = []

    def make(partitions: int = 4, stem: str = "t") -> str:
        name = f"test-{stem}-{uuid.uuid4().hex[:10]}"
        ensure_topics(kafka_bootstrap, [name], partitions=partitions)
        created.append(name)
        return name

    yield make
    if created:
        AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics(created)
