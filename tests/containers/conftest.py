"""The container tests need a Docker engine with the images of ``python -m tools.images``.

They run in CI's container phase (``LDPSTREAM_SERVICES=testcontainers``, the private engine of ``python -m
tools.engine up``), where a missing engine or image fails them; elsewhere they run when an engine answers and the
images are there, and are skipped otherwise (the main test run has no engine)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ldpstream.testing import _docker_answers, forced_source


@pytest.fixture(scope="session")
def docker_client() -> Any:
    forced = forced_source() == "testcontainers"
    if not _docker_answers():
        reason = f"no Docker engine answers at {os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}"
        if forced:
            pytest.fail(reason, pytrace=False)
        pytest.skip(f"{reason} (CI's container phase runs these tests)")
    import docker

    from ldpstream.deploy import containers

    client = docker.from_env(timeout=300)
    missing = [tag for tag in (containers.KAFKA_IMAGE, containers.REDIS_IMAGE, containers.ldpstream_image())
               if not client.images.list(name=tag)]
    if missing:
        reason = f"images {missing} are missing: build them with `python -m tools.images`"
        if forced:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    yield client
    client.close()
