"""``reports.csv``: the reports of RAPPOR clients, as Google's ``rappor_sim.py`` writes them
(docs/math/estimators.md, "Google RAPPOR files").

Header ``client,cohort,bloom,prr,irr``: per report the client id, its cohort, and the Bloom filter, the
permanent and the instantaneous randomized response as bit strings (:mod:`ldpstream.interop.rappor.bits`,
most significant bit first; docs/math/mechanisms.md, "Bloom filter, permanent and instantaneous randomized
response"). The 3-column form ``client,cohort,irr`` (older ``sum_bits.py``) is read too, and so are files whose
``bloom`` and ``prr`` columns are empty on every row (Google's C++ client writes only the irr bits).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ReportFormatError
from ldpstream.interop.rappor.bits import bits_from_strings, strings_from_bits
from ldpstream.interop.rappor.csvio import (
    PathOrFile,
    check_cohort_range,
    csv_rows,
    header_index,
    open_text_write,
    source_name,
)

REPORTS_HEADER: tuple[str, ...] = ("client", "cohort", "bloom", "prr", "irr")


@dataclass(frozen=True)
class Reports:
    """The rows of a ``reports.csv``: client ids, cohorts and ``(n, k)`` uint8 bit arrays (column i = bit i).

    ``bloom`` and ``prr`` are ``None`` when the file has only ``client,cohort,irr``.
    """

    clients: list[str]
    cohorts: np.ndarray
    irr: np.ndarray
    bloom: np.ndarray | None = None
    prr: np.ndarray | None = None


def read_reports(source: PathOrFile, k: int, cohorts: int | None = None) -> Reports:
    """Read ``reports.csv`` (``client,cohort,bloom,prr,irr`` or ``client,cohort,irr``, header required)."""
    name = source_name(source)
    rows = csv_rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty reports file")
    header = rows[0][1]
    idx = header_index(header, ("client", "cohort"), name)
    lowered = [h.lower() for h in header]
    irr_col = lowered.index("irr") if "irr" in lowered else (lowered.index("rappor") if "rappor" in lowered else -1)
    if irr_col < 0:
        raise ReportFormatError(f"{name}: header {header} lacks an 'irr' column")
    width = len(header)
    body = rows[1:]
    for line, cells in body:
        if len(cells) != width:
            raise ReportFormatError(f"{name}:{line}: expected {width} columns, got {len(cells)}")
    clients = [cells[idx["client"]] for _, cells in body]
    try:
        cohort_arr = np.array([cells[idx["cohort"]] for _, cells in body], dtype=np.int64)
    except ValueError:
        line, cells = next((ln, c) for ln, c in body if not c[idx["cohort"]].lstrip("-").isdigit())
        raise ReportFormatError(f"{name}:{line}: cohort must be an integer, got {cells[idx['cohort']]!r}") from None
    check_cohort_range(cohort_arr, cohorts, name, body)

    def column(col: int, what: str) -> np.ndarray:
        try:
            return bits_from_strings([cells[col] for _, cells in body], k, what)
        except ReportFormatError as exc:
            raise ReportFormatError(f"{name}: {exc}") from None

    def optional(what: str) -> np.ndarray | None:
        # Google's C++ client writes the bloom and prr columns empty (only the irr bits are known): such a
        # column, empty on every row, reads as absent, as Google's sum_bits reads it.
        if what not in lowered:
            return None
        col = lowered.index(what)
        if all(cells[col] == "" for _, cells in body):
            return None
        return column(col, what)

    bloom = optional("bloom")
    prr = optional("prr")
    return Reports(clients, cohort_arr, column(irr_col, "irr"), bloom, prr)


def write_reports(target: PathOrFile, reports: Reports) -> None:
    """Write ``reports.csv`` with header ``client,cohort,bloom,prr,irr`` (bit strings MSB first).

    When ``bloom``/``prr`` are ``None`` the 3-column form ``client,cohort,irr`` is written instead.
    """
    full = reports.bloom is not None and reports.prr is not None
    columns = [strings_from_bits(reports.bloom), strings_from_bits(reports.prr)] if full else []  # type: ignore[arg-type]
    columns.append(strings_from_bits(reports.irr))
    with open_text_write(target) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(REPORTS_HEADER if full else ("client", "cohort", "irr"))
        writer.writerows(zip(reports.clients, reports.cohorts.tolist(), *columns, strict=True))
