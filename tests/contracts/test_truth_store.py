"""The truth a simulation keeps beside the estimates (:mod:`ldpstream.store.truth`), run on both stores: the
in-memory twin and Redis (real, integration; the ``store`` fixture of ``conftest.py``). It is not part of the
production store contract."""

from __future__ import annotations

import numpy as np

from ldpstream.store import EstimateStore, SketchStore, StatusStore, TruthStore


def members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_the_production_contract_holds_no_simulation_truth():
    truth = members(TruthStore)
    assert truth == {"add_truth", "truth", "add_string_truth", "string_truth"}
    for contract in (SketchStore, EstimateStore, StatusStore):
        assert not truth & members(contract), contract


def test_a_simulations_truth_adds_up_and_a_new_shape_replaces_it(store):
    assert store.truth("m") is None
    store.add_truth("m", np.array([3, 0, 2]))
    store.add_truth("m", np.array([1, 4, 0]))
    assert store.truth("m").tolist() == [4, 4, 2]
    table = np.array([[1, 0], [0, 5], [2, 2]])
    store.add_truth("pair", table)
    store.add_truth("pair", table)
    assert store.truth("pair").tolist() == (2 * table).tolist()
    store.add_truth("m", np.array([7, 1]))  # the registry changed: the old counts no longer mean anything
    assert store.truth("m").tolist() == [7, 1]


def test_the_strings_a_simulation_drew_add_up(store):
    assert store.string_truth("word") is None
    store.add_string_truth("word", {"ab": 3, "ba": 0})
    store.add_string_truth("word", {"ab": 2, "b a:1": 4})
    assert store.string_truth("word") == {"ab": 5, "b a:1": 4}
