"""Shared pieces of the integration tests: registries, producing, waiting for counts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
