"""The store the contract suites run on: both implementations, the in-memory twin and Redis (real,
integration)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ldpstream.store import InMemorySketchStore, RedisSketchStore


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def store(request) -> Iterator[InMemorySketchStore | RedisSketchStore]:
    if request.param == "memory":
        yield InMemorySketchStore()
    else:
        yield RedisSketchStore(request.getfixturevalue("redis_config").client(), request.getfixturevalue("key_prefix"))
