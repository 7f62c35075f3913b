"""The truth a simulation keeps beside the estimates (:mod:`ldpstream.store.truth`), run on both stores: the
in-memory twin and Redis (real, integration). It is not part of the production store contract."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from ldpstream.store import EstimateStore, InMemorySketchStore, RedisSketchStore, SketchStore, StatusStore, TruthStore


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def truth_store(request) -> Iterator[TruthStore]:
    if request.param == "memory":
        yield InMemorySketchStore()
    else:
        redis_config = request.getfixturevalue("redis_config")
        key_prefix = request.getfixturevalue("key_prefix")
        yield RedisSketchStore(redis_config.client(), key_prefix)


def members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_the_production_contract_holds_no_simulation_truth():
    truth = members(TruthStore)
    assert truth == {"add_truth", "truth", "add_string_truth", "string_truth"}
    for contract in (SketchStore, EstimateStore, StatusStore):
        assert not truth & members(contract), contract


def test_a_simulations_truth_adds_up_and_a_new_shape_replaces_it(truth_store):
    assert truth_store.truth("m") is None
    truth_store.add_truth("m", np.array([3, 0, 2]))
    truth_store.add_truth("m", np.array([1, 4, 0]))
    assert truth_store.truth("m").tolist() == [4, 4, 2]
    table = np.array([[1, 0], [0, 5], [2, 2]])
    truth_store.add_truth("pair", table)
    truth_store.add_truth("pair", table)
    assert truth_store.truth("pair").tolist() == (2 * table).tolist()
    truth_store.add_truth("m", np.array([7, 1]))  # the registry changed: the old counts no longer mean anything
    assert truth_store.truth("m").tolist() == [7, 1]


def test_the_strings_a_simulation_drew_add_up(truth_store):
    assert truth_store.string_truth("word") is None
    truth_store.add_string_truth("word", {"ab": 3, "ba": 0})
    truth_store.add_string_truth("word", {"ab": 2, "b a:1": 4})
    assert truth_store.string_truth("word") == {"ab": 5, "b a:1": 4}
