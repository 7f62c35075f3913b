"""The metric registry: loading, validation, fingerprints."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpstream.errors import ConfigError
from ldpstream.registry import Registry, Window, fingerprint

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_shipped_registry_loads_every_mechanism():
    registry = Registry.load(DEPLOY / "metrics.toml")
    kinds = {m.mechanism.parameters()["mechanism"] for m in registry.metrics.values()}
    assert kinds == {"krr", "krappor", "orr", "orappor", "rappor"}
    assert len(registry["homepage_rappor"].candidates) == 100
    assert registry["app_language"].value_names()[0] == "en"
    assert [w.name for w in registry["app_language"].windows] == ["all", "1h", "1d"]


def test_fingerprint_depends_on_id_and_mechanism_parameters_only():
    base = {"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}}
    same = {"defaults": {"topic": "other", "bucket_seconds": 60},
            "metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0, "estimator": "mle"}}}
    other_eps = {"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.5}}}
    fp = Registry.from_dict(base)["m"].fingerprint
    assert Registry.from_dict(same)["m"].fingerprint == fp
    assert Registry.from_dict(other_eps)["m"].fingerprint != fp
    assert fp == fingerprint(1, {"mechanism": "krr", "k": 4, "epsilon": 1.0})
    assert 0 <= fp < 2**32


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"metrics": {}}, r"no \[metrics"),
        ({"metrics": {"m": {"mechanism": "krr", "k": 4, "epsilon": 1.0}}}, "has no id"),
        ({"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 1, "epsilon": 1.0}}}, "metric 'm'"),
        ({"metrics": {"m": {"id": 1, "mechanism": "nope", "k": 4}}}, "metric 'm'"),
        ({"metrics": {"a": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0},
                      "b": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}}, "share id 1"),
        ({"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0, "labels": ["a"]}}}, "labels"),
        ({"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0, "windows": ["2x"]}}}, "window"),
    ],
)
def test_invalid_registries_fail_with_a_clear_error(table, message):
    with pytest.raises(ConfigError, match=message):
        Registry.from_dict(table)


def test_unknown_metric_name_lists_the_known_ones():
    registry = Registry.from_dict({"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}})
    with pytest.raises(ConfigError, match="known: m"):
        registry["x"]


def test_windows_parse_durations():
    assert Window.parse("all").seconds is None
    assert Window.parse("15m").seconds == 900
    assert Window.parse("7d").seconds == 7 * 86400


def test_retention_is_a_duration_no_shorter_than_the_longest_window():
    base = {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0, "windows": ["all", "1d"]}
    assert Registry.from_dict({"metrics": {"m": {**base, "retention": "7d"}}})["m"].retention_seconds == 7 * 86400
    assert Registry.from_dict({"metrics": {"m": base}})["m"].retention_seconds is None
    with pytest.raises(ConfigError, match="shorter than its longest window"):
        Registry.from_dict({"metrics": {"m": {**base, "retention": "1h"}}})
    with pytest.raises(ConfigError, match="must be a duration"):
        Registry.from_dict({"metrics": {"m": {**base, "retention": "all"}}})
