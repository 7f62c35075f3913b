"""How an association's pair statistic is stored: the consumers' side (report tuples → increments) and the
decoder's side (stored form → :class:`~ldpstream.estimators.joint.pairs.PairPatterns`). Pure numpy.
The layout, its figures and the choice of threshold: docs/redis-layout.md#pair-statistics-associations.

Two forms, chosen from the members' mechanisms (:func:`layout_of`):

- **cells**, when every member reports a symbol (k-RR, O-RR) and the product table of shape
  ``(C_1, k_1, …, C_N, k_N)`` has at most :data:`MAX_HASH_CELLS` cells: the tuple ``(cohort_1, y_1, …,
  cohort_N, y_N)`` is one cell, numbered in C order (``numpy.ravel_multi_index``); only the cells seen are
  kept, with their counts (a Redis hash cell → count).
- **rows** otherwise: each report tuple is a packed row ``cohort_1 (u16 BE), payload_1, …, cohort_N,
  payload_N`` (the wire payloads: u32 symbols, bits packed 8 a byte), appended per bucket to segments; the
  distinct rows and their counts are found when the statistic is read (``numpy.unique`` over the rows as
  opaque bytes).

Where they live (:mod:`ldpstream.store.keys`): the form is part of the key's name, so one key never holds two
forms, and readers sum both. The cells of a bucket are one key (``cells``); its rows are numbered segments
(``rows.0``, ``rows.1``, …), each at most ``max_pair_bytes`` (:data:`MAX_PAIR_BYTES` by default, a whole
number of rows): a batch fills the last segment and spills the rest into the next ones, in the same atomic
apply.

Associations of more than two members store whole tuples; the statistic of any two members ``(i, j)`` is read
from them (:func:`read_patterns` projects each cell or row onto those members, exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.registry import AssociationConfig
from ldpstream.store.contract import MAX_PAIR_BYTES, MAX_PAIR_CELL, PairIncrement
from ldpstream.wire import payload_size, reports_from_payloads, symbols_from_payloads

#: Bytes of a member's cohort in a packed row.
COHORT_BYTES = 2
#: The largest product table kept as a hash of the cells seen (symbol members); larger ones are kept as rows.
MAX_HASH_CELLS = 2**16
#: The form part of a cells key's name; rows segments are ``rows.<segment>``.
CELLS_FORM = "cells"
ROWS_FORM = "rows"


@dataclass(frozen=True)
class PairLayout:
    """The stored form of one association's report tuples."""

    association: AssociationConfig
    #: ``"cells"`` or ``"rows"`` (see the module docstring): the form consumers write now.
    kind: str
    #: The product table's shape ``(C_1, k_1, …, C_N, k_N)`` (cells form).
    dims: tuple[int, ...]
    #: Bytes of one packed row (rows form).
    row_size: int

    def member_offsets(self) -> tuple[int, ...]:
        """Byte offset of each member's cohort in a packed row."""
        sizes = [COHORT_BYTES + payload_size(m.mechanism) for m in self.association.metrics]
        return tuple(int(x) for x in np.cumsum([0, *sizes[:-1]]))


def layout_of(association: AssociationConfig, max_hash_cells: int | None = None) -> PairLayout:
    """The form consumers write: cells when every member reports a symbol and the product table has at most
    ``max_hash_cells`` (:data:`MAX_HASH_CELLS`) cells, rows otherwise."""
    limit = MAX_HASH_CELLS if max_hash_cells is None else max_hash_cells
    mechanisms = [m.mechanism for m in association.metrics]
    dims = tuple(d for m in mechanisms for d in (m.cohorts, m.k))
    row_size = sum(COHORT_BYTES + payload_size(m) for m in mechanisms)
    symbols = all(m.report_kind == "symbol" for m in mechanisms)
    small = float(np.prod(np.asarray(dims, dtype=np.float64))) <= min(limit, MAX_PAIR_CELL + 1)
    return PairLayout(association, CELLS_FORM if symbols and small else ROWS_FORM, dims, row_size)


def rows_form(segment: int) -> str:
    """The form part of the name of rows segment ``segment`` (``rows.0``, ``rows.1``, …)."""
    return f"{ROWS_FORM}.{segment}"


def parse_form(form: str) -> tuple[str, int]:
    """``(kind, segment)`` of a key's form part: ``("cells", 0)`` or ``("rows", s)``; ParameterError otherwise."""
    if form == CELLS_FORM:
        return CELLS_FORM, 0
    kind, _, segment = form.partition(".")
    if kind == ROWS_FORM and segment.isdigit():
        return ROWS_FORM, int(segment)
    raise ParameterError(f"{form!r} is not a pair statistic form (cells, rows.<segment>)")


def segment_bytes(row_size: int, max_pair_bytes: int = MAX_PAIR_BYTES) -> int:
    """Bytes one rows segment holds at most: the whole rows that fit ``max_pair_bytes``."""
    if not 0 < row_size <= max_pair_bytes <= MAX_PAIR_BYTES:
        raise ParameterError(f"a pair segment of at most {max_pair_bytes} bytes cannot hold a {row_size}-byte row "
                             f"(the cap must be in {row_size}..{MAX_PAIR_BYTES})")
    return (max_pair_bytes // row_size) * row_size


def pair_increment(layout: PairLayout, cohorts: np.ndarray, payloads: Sequence[np.ndarray],
                   expire_at: int = 0) -> PairIncrement:
    """The increment of ``n`` report tuples (``cohorts`` ``(n, N)``, ``payloads[j]`` member j's ``(n, L_j)`` wire
    payloads, all already validated): distinct cells with counts (``numpy.unique``), or the packed rows."""
    if layout.kind == ROWS_FORM:
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


def pair_members(layout: PairLayout, members: tuple[int, int] | None = None) -> tuple[int, int]:
    """The two members ``(i, j)`` whose pair statistic is read (X = member i, Y = member j): ``(0, 1)`` by default
    for a two-member association; an association of more members must name them."""
    n = len(layout.association.metrics)
    if members is None:
        if n != 2:
            raise ParameterError(f"association {layout.association.name!r} has {n} members: name the two whose pair "
                                 "statistic to read (members=(i, j))")
        return 0, 1
    i, j = (int(m) for m in members)
    if not (0 <= i < n and 0 <= j < n and i != j):
        raise ParameterError(f"association {layout.association.name!r}: members {members} are not two distinct "
                             f"member positions in 0..{n - 1}")
    return i, j


def _pair_dims(layout: PairLayout, members: tuple[int, int]) -> tuple[int, int, int, int]:
    i, j = members
    return layout.dims[2 * i], layout.dims[2 * i + 1], layout.dims[2 * j], layout.dims[2 * j + 1]


def _project_cells(layout: PairLayout, cells: np.ndarray, members: tuple[int, int]) -> np.ndarray:
    """Cell numbers of the whole tuples' table → cell numbers of members ``(i, j)``'s table."""
    if len(layout.association.metrics) == 2 and members == (0, 1):
        return cells
    index = np.unravel_index(cells, layout.dims)
    i, j = members
    return np.asarray(np.ravel_multi_index((index[2 * i], index[2 * i + 1], index[2 * j], index[2 * j + 1]),
                                           _pair_dims(layout, members)), dtype=np.int64)


def patterns_from_cells(layout: PairLayout, cells: np.ndarray, counts: np.ndarray,
                        members: tuple[int, int] | None = None) -> PairPatterns:
    """The report pairs of members ``(i, j)`` (:func:`pair_members`) from the tuples' cell counts (several
    statistics' cells may repeat: they are summed)."""
    return read_patterns(layout, [(cells, counts)], [], members)


def patterns_from_rows(layout: PairLayout, packed: bytes | np.ndarray,
                       members: tuple[int, int] | None = None) -> PairPatterns:
    """The report pairs of members ``(i, j)`` from packed rows (the concatenated strings of any number of
    statistics): the distinct rows counted (``numpy.unique`` over the rows as opaque bytes)."""
    return read_patterns(layout, [], [packed], members)


def read_patterns(layout: PairLayout, cells: Sequence[tuple[np.ndarray, np.ndarray]],
                  rows: Sequence[bytes | np.ndarray], members: tuple[int, int] | None = None) -> PairPatterns:
    """The distinct report pairs of members ``(i, j)`` and their counts, from every stored statistic of a window:
    ``cells`` (cell numbers and counts, of keys in the cells form) and ``rows`` (packed rows, of rows segments),
    in any mix (a change of :data:`MAX_HASH_CELLS` leaves both forms in one window; both are exact).

    Each tuple is projected onto the two members (the other members' reports are marginalized out by summing),
    then the distinct pairs counted: cell numbers of the pair's table (``numpy.unique`` on int64) when both
    members report symbols, opaque byte rows otherwise.
    """
    pair = pair_members(layout, members)
    numbered = _numbered(layout, pair)
    cell_parts = [_project_cells(layout, np.asarray(c, dtype=np.int64), pair) for c, _ in cells]
    count_parts = [np.asarray(n, dtype=np.int64) for _, n in cells]
    packed = _pair_rows(layout, rows, pair)
    if numbered:
        if packed.shape[0]:
            numbers = []
            at = 0
            for _ in range(2):
                numbers += [(packed[:, at].astype(np.int64) << 8) | packed[:, at + 1],
                            symbols_from_payloads(np.ascontiguousarray(packed[:, at + COHORT_BYTES:
                                                                              at + COHORT_BYTES + 4]))]
                at += COHORT_BYTES + 4
            cell_parts.append(np.ravel_multi_index(tuple(numbers), _pair_dims(layout, pair)).astype(np.int64))
            count_parts.append(np.ones(packed.shape[0], dtype=np.int64))
        distinct, totals = sum_cells(cell_parts, count_parts)
        keep = totals > 0
        cohort_x, y_x, cohort_y, y_y = np.unravel_index(distinct[keep], _pair_dims(layout, pair))
        return PairPatterns(cohort_x.astype(np.int64), y_x.astype(np.int64), cohort_y.astype(np.int64),
                            y_y.astype(np.int64), totals[keep])
    if any(c.size for c in cell_parts):  # cells exist only for symbol members, whose pairs are numbered
        raise ParameterError(f"association {layout.association.name!r}: cell counts for members that are not "
                             "symbol members")
    width = packed.shape[1]
    opaque = np.ascontiguousarray(packed).view(np.dtype((np.void, width))).reshape(-1)
    distinct_rows, counts = np.unique(opaque, return_counts=True)
    unique_rows = distinct_rows.view(np.uint8).reshape(-1, width)
    columns: list[np.ndarray] = []
    at = 0
    for member in pair:
        mechanism = layout.association.metrics[member].mechanism
        size = payload_size(mechanism)
        columns.append((unique_rows[:, at].astype(np.int64) << 8) | unique_rows[:, at + 1])
        columns.append(reports_from_payloads(mechanism, np.ascontiguousarray(
            unique_rows[:, at + COHORT_BYTES:at + COHORT_BYTES + size])))
        at += COHORT_BYTES + size
    return PairPatterns(columns[0], columns[1], columns[2], columns[3], counts.astype(np.int64))


def _pair_rows(layout: PairLayout, rows: Sequence[bytes | np.ndarray], pair: tuple[int, int]) -> np.ndarray:
    """The packed rows of every statistic, cut to the two members' bytes: ``(n, R_i + R_j)`` uint8."""
    parts = [np.frombuffer(r, dtype=np.uint8) if isinstance(r, bytes | bytearray) else np.asarray(r).reshape(-1)
             for r in rows]
    flat = parts[0] if len(parts) == 1 else np.concatenate([np.zeros(0, dtype=np.uint8), *parts])
    if flat.size % layout.row_size:
        raise ParameterError(f"association {layout.association.name!r}: a packed pair statistic of {flat.size} "
                             f"bytes is not a whole number of {layout.row_size}-byte rows")
    whole = np.ascontiguousarray(flat, dtype=np.uint8).reshape(-1, layout.row_size)
    if len(layout.association.metrics) == 2 and pair == (0, 1):
        return whole
    offsets = layout.member_offsets()
    cut = []
    for member in pair:
        size = COHORT_BYTES + payload_size(layout.association.metrics[member].mechanism)
        cut.append(whole[:, offsets[member]:offsets[member] + size])
    return np.ascontiguousarray(np.hstack(cut))


def _numbered(layout: PairLayout, pair: tuple[int, int]) -> bool:
    """Whether both members report a symbol and their pair table's cells fit an int64."""
    members = [layout.association.metrics[m].mechanism for m in pair]
    symbols = all(m.report_kind == "symbol" for m in members)
    return symbols and float(np.prod(np.asarray(_pair_dims(layout, pair), dtype=np.float64))) < 2**62


def empty_patterns(layout: PairLayout, members: tuple[int, int] | None = None) -> PairPatterns:
    """No report pair, with the columns' shapes of the two members."""
    return read_patterns(layout, [], [], members)
