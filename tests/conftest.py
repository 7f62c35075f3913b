"""The integration fixtures (``services``, ``kafka_bootstrap``, ``redis_url``, ``key_prefix``,
``fresh_topic``, ``service_config``) come from the :mod:`ldpstream.testing` plugin, which the package
registers with pytest; see docs/development.md, "Tests".

ldpstream's own tests start the local stack when nothing else is configured (``LDPSTREAM_SERVICES=local``) and
stop at the end what the session started, unless ``LDPSTREAM_KEEP_STACK=1``."""

from __future__ import annotations

import os

import pytest

_DEFAULTED = not (os.environ.get("LDPSTREAM_SERVICES") or os.environ.get("LDPSTREAM_CONFIG")
                  or (os.environ.get("LDPSTREAM_KAFKA") and os.environ.get("LDPSTREAM_REDIS")))
if _DEFAULTED:
    os.environ["LDPSTREAM_SERVICES"] = "local"


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    if _DEFAULTED:
        lines.append("ldpstream: LDPSTREAM_SERVICES=local: integration tests use the local stack, started if it is "
                     "not running and then stopped at the end (LDPSTREAM_KEEP_STACK=1 keeps it)")
    if _default_run(config):
        lines.append(f"ldpstream: the default run; the tiers {', '.join(TIERS)} run with `python -m pytest -m TIER`")
    return lines


def _default_run(config: pytest.Config) -> bool:
    return not config.option.markexpr and config.args_source == pytest.Config.ArgsSource.TESTPATHS


#: The tiers a default run leaves out (markers declared in pyproject.toml; the README has a line for each).
TIERS = ("statistical", "faults", "pipelines", "cluster", "secure", "browser", "containers")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A run with no ``-m`` and no paths of its own (``python -m pytest``) leaves the tiers out."""
    if not _default_run(config):
        return
    kept, tiered = [], []
    for item in items:
        (tiered if any(item.get_closest_marker(tier) for tier in TIERS) else kept).append(item)
    if tiered:
        config.hook.pytest_deselected(items=tiered)
        items[:] = kept
