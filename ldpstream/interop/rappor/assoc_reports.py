"""The reports file of an association, as Google's ``decode_assoc.R`` reads it
(docs/math/estimators.md, "Google RAPPOR association files").

Header ``client,cohort`` then one column per variable, named as in the schema (``rappor-vars.csv``); per
row one client's reports of every variable, all in the row's cohort. A string variable's cell is its IRR
as a bit string (:mod:`ldpstream.interop.rappor.bits`, most significant bit first, ``k`` characters); a
boolean's cell is its one reported bit, ``0`` or ``1`` (Google's ``rappor_sim.py --assoc-testdata``).

A row with an empty cell in a variable read is a *bad row*: like Google's ``--remove-bad-rows``, the
reader drops such rows when asked (and says how many), else it stops at the first one, naming its line.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ReportFormatError
from ldpstream.interop.rappor.bits import bits_from_strings, strings_from_bits
from ldpstream.interop.rappor.csvio import PathOrFile, csv_rows, header_index, open_text_write, source_name


@dataclass(frozen=True)
class AssocReports:
    """The rows of an association reports file: client ids, cohorts (as written: Google reduces them modulo
    m when decoding), and per variable an ``(n, k)`` uint8 bit array (column i = bit i; k = 1 for a
    boolean). ``removed`` counts the bad rows dropped."""

    clients: list[str]
    cohorts: np.ndarray
    variables: dict[str, np.ndarray]
    removed: int = 0

    def __len__(self) -> int:
        return len(self.clients)


def read_assoc_reports(source: PathOrFile, widths: Mapping[str, int], *, remove_bad_rows: bool = False) -> AssocReports:
    """Read the columns ``client``, ``cohort`` and each variable of ``widths`` (name → bits: the params'
    ``k`` for a string, 1 for a boolean) of an association reports file; other columns are ignored.

    Raises :class:`~ldpstream.errors.ReportFormatError` naming the file and line for a missing column, a
    row of the wrong width, a cohort that is not a non-negative integer, a cell of the wrong length or with
    a digit other than 0/1, or (without ``remove_bad_rows``) an empty cell.
    """
    name = source_name(source)
    rows = csv_rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty reports file (expected a header client,cohort,<vars>)")
    header = rows[0][1]
    variables = list(widths)
    idx = header_index(header, ("client", "cohort"), name)
    # Variable columns match exactly (names like 'flag..HTTPS' are case-sensitive in R's read.csv).
    missing = [v for v in variables if v not in header]
    if missing:
        raise ReportFormatError(f"{name}: header {header} lacks the variable column(s) {missing}")
    var_col = {v: header.index(v) for v in variables}
    width = len(header)
    body = rows[1:]
    for line, cells in body:
        if len(cells) != width:
            raise ReportFormatError(f"{name}:{line}: expected {width} columns, got {len(cells)}")
    bad = [i for i, (_, cells) in enumerate(body) if any(cells[var_col[v]] == "" for v in variables)]
    if bad and not remove_bad_rows:
        line, cells = body[bad[0]]
        empty = [v for v in variables if cells[var_col[v]] == ""]
        raise ReportFormatError(f"{name}:{line}: empty {empty} ({len(bad)} such bad row(s); "
                                "--remove-bad-rows drops them)")
    if bad:
        drop = set(bad)
        body = [row for i, row in enumerate(body) if i not in drop]
    cohort_text = [cells[idx["cohort"]] for _, cells in body]
    is_int = np.fromiter((t.isdigit() for t in cohort_text), dtype=bool, count=len(cohort_text))
    if not is_int.all():
        line = body[int(np.flatnonzero(~is_int)[0])][0]
        raise ReportFormatError(f"{name}:{line}: cohort must be a non-negative integer, "
                                f"got {cohort_text[int(np.flatnonzero(~is_int)[0])]!r}")
    cohorts = np.array(cohort_text, dtype=np.int64) if body else np.zeros(0, dtype=np.int64)
    out: dict[str, np.ndarray] = {}
    for v in variables:
        cells = [row[var_col[v]] for _, row in body]
        try:
            out[v] = bits_from_strings(cells, widths[v], v)
        except ReportFormatError as exc:
            # bits_from_strings names the row index (0-based among the rows read); give the file line.
            row = _row_of(exc, len(body))
            where = f"{name}:{body[row][0]}" if row is not None else name
            raise ReportFormatError(f"{where}: column {v!r}: {exc}") from None
    return AssocReports([cells[idx["client"]] for _, cells in body], cohorts, out, len(bad))


def _row_of(exc: ReportFormatError, n: int) -> int | None:
    """The row index ``bits_from_strings`` put after the column name in its message, if any."""
    parts = str(exc).split(":", 1)[0].split()
    if parts and parts[-1].isdigit() and int(parts[-1]) < n:
        return int(parts[-1])
    return None


def write_assoc_reports(target: PathOrFile, reports: AssocReports, order: Sequence[str] | None = None) -> None:
    """Write an association reports file: ``client,cohort,<var>...`` with bit strings (booleans as ``0``/``1``),
    as Google's ``rappor_sim.py --assoc-testdata`` does."""
    names = list(order) if order is not None else list(reports.variables)
    columns = [strings_from_bits(reports.variables[v]) for v in names]
    with open_text_write(target) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(("client", "cohort", *names))
        writer.writerows(zip(reports.clients, reports.cohorts.tolist(), *columns, strict=True))
