"""Per-process cache of the hash tables of hashed mechanisms and their design matrices.

A hashed mechanism (O-RR, O-RAPPOR) maps every candidate to cells per cohort: O-RR through
``HASH_c(s) mod k`` on an open alphabet or a per-cohort permutation ``π_c(s) mod k`` on a closed one,
O-RAPPOR through Google's Bloom bits (docs/math/mechanisms.md, "O-RR", "O-RAPPOR", "Closed alphabets:
permutations", "Hash constructions"). The table depends on ``(mechanism, k, C, h, S, alphabet)`` only,
not on ε, so the tuner, which evaluates many ε-independent grid points, hashes each table once.

Cohort c's hash (or permutation) does not depend on the number of cohorts C: the table of C cohorts is the
first C rows of any table with more cohorts, so a cached larger table is sliced instead of hashing again.
The SHA-256 O-RR tables dominate a cold start of the tuner (n = 10^6, S = 256).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ldpstream.mechanisms.factory import make_mechanism

#: The table cache is emptied when it holds more than this many tables.
TABLE_CACHE_LIMIT = 256

TableKey = tuple[str, int, int, int | None, int, bool]

_TABLE_CACHE: dict[TableKey, tuple[np.ndarray, sp.csr_matrix]] = {}
_PERMUTATION_CACHE: dict[int, np.ndarray] = {}


def closed_permutations(support: int, cohorts: int) -> np.ndarray:
    """``(C, S)`` per-cohort permutations π_c of a closed O-RR: its symbol table with k = S (π_c mod S = π_c).

    Cached per S (the largest C computed; fewer cohorts are its first rows)."""
    base = _PERMUTATION_CACHE.get(support)
    if base is None or base.shape[0] < cohorts:
        mech: Any = make_mechanism(
            {"mechanism": "orr", "k": support, "epsilon": 1.0, "cohorts": cohorts, "support": support}
        )
        base = _PERMUTATION_CACHE[support] = np.asarray(mech.symbol_table(), dtype=np.int64)
    return base[:cohorts]


def cached_table(
    name: str,
    mechanism: Any,
    *,
    k: int,
    cohorts: int,
    hashes: int | None,
    support: int,
    closed: bool,
    candidates: list[str] | None,
) -> tuple[np.ndarray, sp.csr_matrix]:
    """The hash table of ``mechanism`` (an ``orr`` or ``orappor`` built with these parameters) and its
    ``(C·k, S)`` design matrix, from the cache when possible.

    ``candidates`` are the strings hashed on an open alphabet (``None`` when ``closed``)."""
    key: TableKey = (name, k, cohorts, hashes, support, closed)
    if key not in _TABLE_CACHE:
        if len(_TABLE_CACHE) > TABLE_CACHE_LIMIT:
            _TABLE_CACHE.clear()
        larger = [
            value[0] for other, value in _TABLE_CACHE.items()
            if other[0] == name and other[1] == k and other[3:] == key[3:] and other[2] > cohorts
        ]
        table: np.ndarray
        if larger:
            table = np.ascontiguousarray(larger[0][:cohorts])
        elif name == "orr" and closed:
            # the closed table is π_c(s) mod k, with π_c independent of k
            table = closed_permutations(support, cohorts) % k
        elif name == "orr":
            table = mechanism.symbol_table(candidates)
        else:
            table = mechanism.bloom_table(candidates)
        _TABLE_CACHE[key] = (table, mechanism.design_matrix(table))
    return _TABLE_CACHE[key]


def cached_table_count() -> int:
    """How many hash tables the cache holds."""
    return len(_TABLE_CACHE)
