"""The metric registry: loading, validation, fingerprints."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpstream.errors import ConfigError
from ldpstream.registry import Registry, Window, fingerprint

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


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


_KRR = {"mechanism": "krr", "k": 4, "epsilon": 1.0}


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 5000, "*", "<b>fruit</b>", "Fruit", "1st", "a:b", "a.b",
                                  "a-b", "café", "a b", "x" * 65])
def test_a_metric_name_outside_the_rule_is_refused_in_one_line(name):
    with pytest.raises(ConfigError) as caught:
        Registry.from_dict({"metrics": {name: {"id": 1, **_KRR}}})
    message = str(caught.value)
    assert "\n" not in message and len(message) < 250
    assert "metric name" in message and "^[a-z][a-z0-9_]{0,63}$" in message
    assert repr(name[:40]) in message


def test_an_association_name_outside_the_rule_is_refused():
    table = {"metrics": {"a": {"id": 1, **_KRR, "retention": "1d"}, "b": {"id": 2, **_KRR, "retention": "1d"}},
             "associations": {"a:b": {"id": 1, "metrics": ["a", "b"]}}}
    with pytest.raises(ConfigError, match=r"association name 'a:b' is not allowed"):
        Registry.from_dict(table)
    table["associations"] = {"a_by_b": {"id": 1, "metrics": ["a", "b"]}}
    assert Registry.from_dict(table).association("a_by_b").members == ("a", "b")


def test_names_inside_the_rule_are_accepted():
    for name in ("a", "app_language", "x" * 64, "m2_v3"):
        assert Registry.from_dict({"metrics": {name: {"id": 1, **_KRR}}})[name].name == name


def test_a_window_with_a_trailing_newline_is_refused():
    with pytest.raises(ConfigError, match="window"):
        Window.parse("1h\n")


@pytest.mark.parametrize(("table", "message"), [
    ({"metrics": {"m": {"id": 1, **_KRR, "epsilom": 2.0}}}, "unknown setting(s) epsilom (did you mean 'epsilon'?)"),
    ({"metrics": {"m": {"id": 1, **_KRR, "estimater": "mle"}}}, "estimater (did you mean 'estimator'?)"),
    ({"metric": {"m": {"id": 1, **_KRR}}}, "the registry: unknown setting(s) metric (did you mean 'metrics'?)"),
    ({"metrics": {"m": {"id": 1, **_KRR}}, "asociations": {}}, "(did you mean 'associations'?)"),
])
def test_an_unknown_key_is_refused_with_the_closest_valid_one(table, message):
    with pytest.raises(ConfigError) as caught:
        Registry.from_dict(table)
    assert message in str(caught.value)


def test_an_unknown_metric_name_suggests_the_closest():
    registry = Registry.from_dict({"metrics": {"fruit": {"id": 1, **_KRR}}})
    with pytest.raises(ConfigError, match=r"no metric named 'fruti' in the registry \(did you mean 'fruit'\?\)"):
        registry["fruti"]
