"""Per-process cache of the hash tables of hashed mechanisms and their design matrices.

A hashed mechanism (O-RR, O-RAPPOR) maps every candidate to cells per cohort: O-RR through
``HASH_c(s) mod k`` on an open alphabet or a per-cohort permutation ``π_c(s) mod k`` on a closed one,
O-RAPPOR through Google's Bloom bits (docs/math/mechanisms.md, "O-RR", "O-RAPPOR", "Closed alphabets:
permutations", "Hash constructions"). The table depends on ``(mechanism, k, C, h, S, alphabet)`` only,
not on ε, so the tuner, which evaluates many ε-independent grid points, hashes each table once.

Cohort c's hash (or permutation) does not depend on the number of cohorts C: the table of C cohorts is the
first C rows of any table with more cohorts, so a cached larger table is sliced instead of hashing again.
On a closed alphabet the table is ``π_c(s) mod k`` with π_c independent of k: the table at k = S is cached and
reduced mod k. The tables come from the mechanism itself (:meth:`~ldpstream.mechanisms.base.Mechanism.value_table`).
The SHA-256 O-RR tables dominate a cold start of the tuner (n = 10^6, S = 256).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ldpstream.mechanisms.base import Mechanism
from ldpstream.mechanisms.factory import make_mechanism

#: The table cache is emptied when it holds more than this many tables.
TABLE_CACHE_LIMIT = 256

TableKey = tuple[str, int, int, int | None, int, bool]

_TABLE_CACHE: dict[TableKey, tuple[np.ndarray, sp.csr_matrix]] = {}
_CLOSED_CACHE: dict[tuple[str, int | None, int], np.ndarray] = {}


def closed_base_table(mechanism: Mechanism, support: int) -> np.ndarray:
    """The :meth:`~ldpstream.mechanisms.base.Mechanism.value_table` of a closed-alphabet ``mechanism`` rebuilt
    with k = S: the per-cohort permutations π_c(s) themselves, whose ``% k`` is the table at any k.

    Cached per (mechanism, h, S) (the largest C computed; fewer cohorts are its first rows)."""
    hashes = mechanism.parameters().get("hashes")
    key = (mechanism.name, None if hashes is None else int(hashes), support)
    base = _CLOSED_CACHE.get(key)
    if base is None or base.shape[0] < mechanism.cohorts:
        wide = make_mechanism({**mechanism.parameters(), "k": support})
        base = _CLOSED_CACHE[key] = np.asarray(wide.value_table(None), dtype=np.int64)
    return base[: mechanism.cohorts]


def cached_table(
    mechanism: Mechanism,
    *,
    hashes: int | None,
    support: int,
    candidates: list[str] | None,
) -> tuple[np.ndarray, sp.csr_matrix]:
    """The value table of the hashed ``mechanism`` (:meth:`~ldpstream.mechanisms.base.Mechanism.value_table`,
    ``hashes`` its h if it has one) and its ``(C·k, S)`` design matrix, from the cache when possible.

    ``candidates`` are the strings hashed on an open alphabet (``None`` when the mechanism is closed)."""
    k, cohorts, closed = mechanism.k, mechanism.cohorts, mechanism.closed
    key: TableKey = (mechanism.name, k, cohorts, hashes, support, closed)
    if key not in _TABLE_CACHE:
        if len(_TABLE_CACHE) > TABLE_CACHE_LIMIT:
            _TABLE_CACHE.clear()
        larger = [
            value[0] for other, value in _TABLE_CACHE.items()
            if other[:2] == key[:2] and other[3:] == key[3:] and other[2] > cohorts
        ]
        table: np.ndarray
        if larger:
            table = np.ascontiguousarray(larger[0][:cohorts])
        elif closed:
            # the closed table is π_c(s) mod k, with π_c independent of k
            table = closed_base_table(mechanism, support) % k
        else:
            table = np.asarray(mechanism.value_table(candidates))
        _TABLE_CACHE[key] = (table, mechanism.design_matrix(table))
    return _TABLE_CACHE[key]


def cached_table_count() -> int:
    """How many hash tables the cache holds."""
    return len(_TABLE_CACHE)
