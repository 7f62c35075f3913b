"""How an association's pair statistic is stored: the consumers' side (report tuples → increments) and the
decoder's side (stored form → :class:`~ldpstream.estimators.pairs.PairPatterns`). Pure numpy.

Two forms, chosen from the members' mechanisms (:func:`layout_of`):

- **cells**, when every member reports a symbol (k-RR, O-RR) and the product table of shape
  ``(C_1, k_1, …, C_N, k_N)`` has at most :data:`MAX_HASH_CELLS` cells: the tuple ``(cohort_1, y_1, …,
  cohort_N, y_N)`` is one cell, numbered in C order (``numpy.ravel_multi_index``). Only the cells seen are kept,
  with their counts (a Redis hash cell → count), so a bucket's statistic never exceeds the table, whatever the
  number of reports: ≈ 50 bytes a cell seen in Redis, at most ≈ 3 MiB at 2^16 cells (a 16 × 16 k-RR pair: 256
  cells, about 12 KiB).
- **rows** otherwise: each report tuple is a packed row ``cohort_1 (u16 BE), payload_1, …, cohort_N,
  payload_N`` (the wire payloads: u32 symbols, bits packed 8 a byte), appended to one string per bucket; the
  distinct rows and their counts are found when the statistic is read (``numpy.unique`` over the rows as
  opaque bytes). For RAPPOR-family members almost every report pair is distinct (the instantaneous noise), so
  no smaller sufficient statistic exists: a 128-bit × 128-bit pair is 2 + 16 + 2 + 16 = 36 bytes. For symbol
  pairs over a large table (O-RR × O-RR with 64 cohorts and k = 32: 4·10^6 cells) most cells are seen once per
  bucket, where a hash costs ≈ 50 bytes a cell and a row 12 bytes a pair; a hash would pay off only past
  ≈ 4 reports per cell, hence the threshold.

``bench/joint_memory.py`` measures both forms (memory per million pairs, fold and read times).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.estimators.pairs import PairPatterns
from ldpstream.registry import AssociationConfig
from ldpstream.store.contract import MAX_PAIR_CELL, PairIncrement
from ldpstream.wire import payload_size, reports_from_payloads, symbols_from_payloads

#: Bytes of a member's cohort in a packed row.
COHORT_BYTES = 2
#: The largest product table kept as a hash of the cells seen (symbol members); larger ones are kept as rows.
MAX_HASH_CELLS = 2**16


@dataclass(frozen=True)
class PairLayout:
    """The stored form of one association's report tuples."""

    association: AssociationConfig
    #: ``"cells"`` or ``"rows"`` (see the module docstring).
    kind: str
    #: The product table's shape ``(C_1, k_1, …, C_N, k_N)`` (cells form).
    dims: tuple[int, ...]
    #: Bytes of one packed row (rows form).
    row_size: int


def layout_of(association: AssociationConfig) -> PairLayout:
    mechanisms = [m.mechanism for m in association.metrics]
    dims = tuple(d for m in mechanisms for d in (m.cohorts, m.k))
    row_size = sum(COHORT_BYTES + payload_size(m) for m in mechanisms)
    symbols = all(m.report_kind == "symbol" for m in mechanisms)
    small = float(np.prod(np.asarray(dims, dtype=np.float64))) <= min(MAX_HASH_CELLS, MAX_PAIR_CELL + 1)
    return PairLayout(association, "cells" if symbols and small else "rows", dims, row_size)


def pair_increment(layout: PairLayout, cohorts: np.ndarray, payloads: Sequence[np.ndarray],
                   expire_at: int = 0) -> PairIncrement:
    """The increment of ``n`` report tuples (``cohorts`` ``(n, N)``, ``payloads[j]`` member j's ``(n, L_j)`` wire
    payloads, all already validated): distinct cells with counts (``numpy.unique``), or the packed rows."""
    if layout.kind == "rows":
        return PairIncrement(rows=pack_rows(cohorts, payloads), expire_at=expire_at)
    index = []
    for j, block in enumerate(payloads):
        index += [np.asarray(cohorts[:, j], dtype=np.int64), symbols_from_payloads(block)]
    cells = np.ravel_multi_index(tuple(index), layout.dims)
    distinct, counts = np.unique(cells, return_counts=True)
    return PairIncrement(cells=distinct.astype(np.int64), counts=counts.astype(np.int64), expire_at=expire_at)


def pack_rows(cohorts: np.ndarray, payloads: Sequence[np.ndarray]) -> np.ndarray:
    """``(n, R)`` uint8: per member its cohort (u16 BE) then its payload bytes."""
    parts = []
    for j, block in enumerate(payloads):
        parts += [np.asarray(cohorts[:, j]).astype(">u2").reshape(-1, 1).view(np.uint8),
                  np.asarray(block, dtype=np.uint8)]
    return np.ascontiguousarray(np.hstack(parts))


def merge_increments(a: PairIncrement, b: PairIncrement) -> PairIncrement:
    """Two increments of one statistic as one (cells summed; rows concatenated)."""
    expire_at = max(a.expire_at, b.expire_at)
    if a.rows is not None and b.rows is not None:
        return PairIncrement(rows=np.vstack([a.rows, b.rows]), expire_at=expire_at)
    cells, counts = sum_cells([a.cells, b.cells], [a.counts, b.counts])  # type: ignore[list-item]
    return PairIncrement(cells=cells, counts=counts, expire_at=expire_at)


def sum_cells(cells: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Cell counts of several statistics summed: distinct cells (sorted) and their totals."""
    if not cells:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    every = np.concatenate([np.asarray(c, dtype=np.int64) for c in cells])
    weights = np.concatenate([np.asarray(c, dtype=np.int64) for c in counts])
    distinct, inverse = np.unique(every, return_inverse=True)
    return distinct, np.bincount(inverse.reshape(-1), weights=weights, minlength=distinct.size).astype(np.int64)


def patterns_from_cells(layout: PairLayout, cells: np.ndarray, counts: np.ndarray) -> PairPatterns:
    """The report pairs of a two-member association from its cell counts (several statistics' cells may repeat:
    they are summed)."""
    _check_pair(layout)
    distinct, totals = sum_cells([cells], [counts])
    keep = totals > 0
    return _patterns_of_distinct_cells(layout, distinct[keep], totals[keep])


def _patterns_of_distinct_cells(layout: PairLayout, cells: np.ndarray, counts: np.ndarray) -> PairPatterns:
    cohort_x, y_x, cohort_y, y_y = np.unravel_index(cells, layout.dims)
    return PairPatterns(cohort_x.astype(np.int64), y_x.astype(np.int64), cohort_y.astype(np.int64),
                        y_y.astype(np.int64), counts)


def patterns_from_rows(layout: PairLayout, packed: bytes | np.ndarray) -> PairPatterns:
    """The report pairs of a two-member association from its packed rows (the concatenated strings of any
    number of statistics): the distinct rows counted (``numpy.unique`` over the rows as opaque bytes)."""
    _check_pair(layout)
    flat = np.frombuffer(packed, dtype=np.uint8) if isinstance(packed, bytes | bytearray) else packed.reshape(-1)
    if flat.size % layout.row_size:
        raise ParameterError(f"association {layout.association.name!r}: a packed pair statistic of {flat.size} "
                             f"bytes is not a whole number of {layout.row_size}-byte rows")
    rows = np.ascontiguousarray(flat).reshape(-1, layout.row_size)
    if _numbered(layout):  # symbol rows: count cell numbers (a 1-D unique, much faster than one over bytes)
        numbers: list[np.ndarray] = []
        at = 0
        for _member in layout.association.metrics:
            numbers += [(rows[:, at].astype(np.int64) << 8) | rows[:, at + 1],
                        symbols_from_payloads(np.ascontiguousarray(rows[:, at + COHORT_BYTES:at + COHORT_BYTES + 4]))]
            at += COHORT_BYTES + 4
        distinct, counts = np.unique(np.ravel_multi_index(tuple(numbers), layout.dims), return_counts=True)
        return _patterns_of_distinct_cells(layout, distinct, counts.astype(np.int64))
    opaque = rows.view(np.dtype((np.void, layout.row_size))).reshape(-1)
    distinct, counts = np.unique(opaque, return_counts=True)
    unique_rows = distinct.view(np.uint8).reshape(-1, layout.row_size)
    columns: list[np.ndarray] = []
    at = 0
    for member in layout.association.metrics:
        size = payload_size(member.mechanism)
        columns.append((unique_rows[:, at].astype(np.int64) << 8) | unique_rows[:, at + 1])
        columns.append(reports_from_payloads(member.mechanism,
                                             np.ascontiguousarray(unique_rows[:, at + COHORT_BYTES:at + COHORT_BYTES
                                                                              + size])))
        at += COHORT_BYTES + size
    return PairPatterns(columns[0], columns[1], columns[2], columns[3], counts.astype(np.int64))


def _numbered(layout: PairLayout) -> bool:
    """Whether every member reports a symbol and the product table's cells fit an int64."""
    symbols = all(m.mechanism.report_kind == "symbol" for m in layout.association.metrics)
    return symbols and float(np.prod(np.asarray(layout.dims, dtype=np.float64))) < 2**62


def empty_patterns(layout: PairLayout) -> PairPatterns:
    """No report pair, with the columns' shapes of the association's members."""
    _check_pair(layout)
    if layout.kind == "cells":
        return patterns_from_cells(layout, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return patterns_from_rows(layout, b"")


def _check_pair(layout: PairLayout) -> None:
    if len(layout.association.metrics) != 2:
        raise ParameterError(f"association {layout.association.name!r} has {len(layout.association.metrics)} "
                             "members; pair patterns exist for two")
