"""``watch`` on names and windows: an unknown one is refused in one line, a known one with nothing yet is waited
for (:func:`ldpstream.decoder.watch.watch`, on the in-memory store)."""

from __future__ import annotations

import json

import pytest

from ldpstream.decoder.watch import watch
from ldpstream.errors import ConfigError
from ldpstream.registry import Registry
from ldpstream.store.memory_store import InMemorySketchStore

KRR = {"mechanism": "krr", "k": 4, "epsilon": 1.0}
PUBLISHED = {"metric": "gone", "window": "all", "method": "project", "n_reports": 10, "snapshot_time": 0,
             "values": [{"value": "a", "frequency": 1.0}]}
REGISTRY = Registry.from_dict({"metrics": {"fruit": {"id": 1, **KRR, "windows": ["all", "1h"], "retention": "1d"},
                                           "veg": {"id": 2, **KRR, "retention": "1d"}},
                               "associations": {"fruit_by_veg": {"id": 1, "metrics": ["fruit", "veg"]}}})


@pytest.mark.parametrize(("name", "window", "message"), [
    ("frut", "all", "no metric or association named 'frut' in the registry (did you mean 'fruit'?) (known: fruit, "
                    "fruit_by_veg, veg)"),
    ("fruit", "1d", "metric 'fruit' has no window '1d' (its windows: all, 1h)"),
    ("fruit_by_veg", "1h", "association 'fruit_by_veg' has no window '1h'"),
])
def test_an_unknown_name_or_window_is_refused(name, window, message, capsys):
    with pytest.raises(ConfigError) as caught:
        watch(InMemorySketchStore(), name, window, interval=0, iterations=3, registry=lambda: REGISTRY)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("name", "window"), [("fruit", "1h"), ("fruit_by_veg", "all")])
def test_a_known_name_with_nothing_published_is_waited_for(name, window, capsys):
    loads = []
    watch(InMemorySketchStore(), name, window, interval=0, iterations=2,
          registry=lambda: loads.append(1) or REGISTRY)
    assert capsys.readouterr().out.count(f"no estimate of {name!r} ({window}) published yet") == 2
    assert loads == [1]  # the registry is read once


def test_a_published_name_needs_no_registry(capsys):
    store = InMemorySketchStore()
    store.publish_estimate("gone", "all", json.dumps(PUBLISHED), 1)
    watch(store, "gone", "all", interval=0, iterations=1, registry=lambda: {}[0])  # not read: it is published
    assert "metric gone  window all" in capsys.readouterr().out
    store.publish_dictionary("urls", json.dumps(PUBLISHED), 1)
    with pytest.raises(ConfigError, match="dictionary 'urls' has no window '1h'"):
        watch(store, "urls", "1h", interval=0, iterations=1, registry=lambda: REGISTRY)
