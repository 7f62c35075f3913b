"""``counts.csv``: the cohort bit counts of a RAPPOR collection, and ``sum-bits`` that computes them
(docs/math/estimators.md, "Google RAPPOR files").

No header; m rows, row c = cohort c (0-based): the reports in the cohort, then for j = 0..k−1 the reports
with bit j set. Exactly the ``(C, k+1)`` bit sketch of :class:`~ldpstream.mechanisms.base.BitMechanism`
(docs/math/mechanisms.md, "Count sketches").
"""

from __future__ import annotations

import numpy as np

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.interop.rappor.csvio import PathOrFile, csv_rows, is_number, open_text_write, source_name
from ldpstream.interop.rappor.params import ParamsFile
from ldpstream.mechanisms.base import sum_bits as sum_bits  # the `sum-bits` tool: BitMechanism.sketch's own


def read_counts(source: PathOrFile, params: ParamsFile | None = None) -> np.ndarray:
    """Read ``counts.csv`` into an ``(m, k+1)`` int64 sketch (column 0 = reports, column 1+j = bit j).

    With ``params`` the shape is checked (m rows, k + 1 columns), as Google's ``ReadCountsFile`` does.
    """
    name = source_name(source)
    rows = csv_rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: no rows")
    width = len(rows[0][1])
    for line, cells in rows:
        if len(cells) != width:
            raise ReportFormatError(f"{name}:{line}: expected {width} columns, got {len(cells)}")
    try:
        arr = np.array([cells for _, cells in rows], dtype=np.float64)
    except ValueError:
        bad = next(
            (line, c) for line, cells in rows for c in cells if not is_number(c)
        )
        raise ReportFormatError(f"{name}:{bad[0]}: counts must be integers, got {bad[1]!r}") from None
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)) or np.any(arr < 0):
        raise ReportFormatError(f"{name}: counts must be non-negative integers")
    counts = arr.astype(np.int64)
    if params is not None:
        if counts.shape[0] != params.m:
            raise ReportFormatError(f"{name}: {counts.shape[0]} rows, expected m = {params.m} (one per cohort)")
        if counts.shape[1] != params.k + 1:
            raise ReportFormatError(f"{name}: {counts.shape[1]} columns, expected k + 1 = {params.k + 1}")
    if np.any(counts[:, 1:] > counts[:, :1]):
        raise ReportFormatError(f"{name}: a bit count exceeds its cohort's number of reports")
    return counts


def write_counts(target: PathOrFile, counts: np.ndarray) -> None:
    """Write an ``(m, k+1)`` sketch as ``counts.csv`` (no header, integers)."""
    counts = np.asarray(counts)
    if counts.ndim != 2 or counts.shape[1] < 2:
        raise ParameterError(f"counts must be (m, k+1), got shape {counts.shape}")
    with open_text_write(target) as f:
        np.savetxt(f, counts.astype(np.int64), fmt="%d", delimiter=",")
