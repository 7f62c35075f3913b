"""``values.csv``: the true values fed to a RAPPOR encoder (``rappor_sim.py``'s input, ``encode``'s input)
(docs/math/estimators.md, "Google RAPPOR files").

Header ``client,cohort,value``; columns are found by name.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ReportFormatError
from ldpstream.interop.rappor.csvio import (
    PathOrFile,
    check_cohort_range,
    csv_rows,
    header_index,
    open_text_write,
    source_name,
)

VALUES_HEADER: tuple[str, ...] = ("client", "cohort", "value")


@dataclass(frozen=True)
class Values:
    """The rows of a ``values.csv``: client ids, cohorts, true values (strings)."""

    clients: list[str]
    cohorts: np.ndarray
    values: list[str]


def read_values(source: PathOrFile, cohorts: int | None = None) -> Values:
    """Read ``values.csv`` (header ``client,cohort,value``; columns found by name)."""
    name = source_name(source)
    rows = csv_rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty values file")
    idx = header_index(rows[0][1], VALUES_HEADER, name)
    body = rows[1:]
    try:
        cohort_arr = np.array([cells[idx["cohort"]] for _, cells in body], dtype=np.int64)
    except (ValueError, IndexError):
        raise ReportFormatError(f"{name}: every row needs an integer cohort") from None
    check_cohort_range(cohort_arr, cohorts, name, body)
    try:
        clients = [cells[idx["client"]] for _, cells in body]
        values = [cells[idx["value"]] for _, cells in body]
    except IndexError:
        raise ReportFormatError(f"{name}: a row has fewer than 3 columns") from None
    return Values(clients, cohort_arr, values)


def write_values(target: PathOrFile, values: Values) -> None:
    """Write ``values.csv`` with header ``client,cohort,value``."""
    with open_text_write(target) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(VALUES_HEADER)
        writer.writerows(zip(values.clients, values.cohorts.tolist(), values.values, strict=True))
