"""Shared pieces of the integration tests: registries, producing, waiting for counts, reading topics."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message

from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore


def write_registry(path: Path, topic: str, metrics: dict[str, dict[str, Any]],
                   associations: dict[str, dict[str, Any]] | None = None) -> Path:
    """A registry TOML file (for subprocess consumers) with every metric on ``topic``; a value that is a dict
    becomes a sub-table (a metric's ``discovery`` table)."""
    lines = ["[defaults]", f'topic = "{topic}"', ""]
    for kind, tables in (("metrics", metrics), ("associations", associations or {})):
        for name, table in tables.items():
            lines.append(f"[{kind}.{name}]")
            for key, value in table.items():
                if not isinstance(value, dict):
                    lines.append(f"{key} = {value!r}".replace("'", '"'))
            for key, value in table.items():
                if isinstance(value, dict):
                    lines.append(f"[{kind}.{name}.{key}]")
                    lines.extend(f"{k} = {v!r}".replace("'", '"') for k, v in value.items())
            lines.append("")
    path.write_text("\n".join(lines))
    return path


def registry_for(topic: str, metrics: dict[str, dict[str, Any]],
                 associations: dict[str, dict[str, Any]] | None = None) -> Registry:
    return Registry.from_dict({"defaults": {"topic": topic}, "metrics": metrics,
                               "associations": associations or {}})


def applied_reports(store: RedisSketchStore, topic: str, partitions: int) -> int:
    return store.stats(topic, range(partitions)).get("reports_applied", 0)


def topic_reader(bootstrap: str, topic: str) -> Consumer:
    """A consumer of ``topic`` from its beginning, in a group of its own that commits nothing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    return consumer


def read_messages(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list[Message]:
    """Read a topic from the beginning until ``expected`` messages arrived, then one more second."""
    consumer = topic_reader(bootstrap, topic)
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    settle = None
    try:
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            got.extend(m for m in consumer.consume(100, 0.2) if m.error() is None)
            if settle is None and len(got) >= expected:
                settle = time.monotonic() + 1.0  # anything beyond the expected would show up now
    finally:
        consumer.close()
    return got


def read_estimates(bootstrap: str, topic: str, key: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every message of ``topic`` under ``key``, JSON-decoded, in order (read until none came for 1.5 s)."""
    consumer = topic_reader(bootstrap, topic)
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    quiet = None
    try:
        while time.monotonic() < deadline and (quiet is None or time.monotonic() < quiet):
            batch = [m for m in consumer.consume(100, 0.5) if m.error() is None]
            got.extend(json.loads(m.value()) for m in batch if m.key() == key.encode())
            if batch or (got and quiet is None):
                quiet = time.monotonic() + 1.5
    finally:
        consumer.close()
    return got


#: Deadlines only bound a test that fails, so they are generous: ``timeout`` is what a quiet machine needs, and a
#: machine with a busy core (a CI runner) gets this many times as long.
PATIENCE = 3.0


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``condition`` until it holds; an AssertionError after ``PATIENCE * timeout`` s."""
    limit = PATIENCE * timeout
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {limit:.0f} s waiting for {what}")
