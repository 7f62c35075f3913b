"""``results.csv``: the decoded frequencies of the candidates, as Google's ``decode_dist.R`` writes them
(docs/math/estimators.md, "Google RAPPOR files").

Header ``"string","estimate","std_error","proportion","prop_std_error","prop_low_95","prop_high_95"``, as
R's ``write.csv(row.names = FALSE)``: strings quoted, numbers bare (15 significant digits), ``NA`` for
missing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.interop.rappor.csvio import (
    PathOrFile,
    csv_rows,
    format_r_number,
    header_index,
    open_text_write,
    quote_r_string,
    source_name,
)

RESULTS_HEADER: tuple[str, ...] = (
    "string",
    "estimate",
    "std_error",
    "proportion",
    "prop_std_error",
    "prop_low_95",
    "prop_high_95",
)


def write_results(target: PathOrFile, table: dict[str, Sequence[Any]] | Iterable[Sequence[Any]]) -> None:
    """Write ``results.csv`` like R's ``write.csv(row.names = FALSE)``.

    ``table`` is either a dict of the seven :data:`RESULTS_HEADER` columns or an iterable of 7-tuples.
    """
    if isinstance(table, dict):
        missing = [c for c in RESULTS_HEADER if c not in table]
        if missing:
            raise ParameterError(f"results table lacks column(s) {missing}")
        rows: Iterable[Sequence[Any]] = zip(*(table[c] for c in RESULTS_HEADER), strict=True)
    else:
        rows = table
    with open_text_write(target) as f:
        f.write(",".join(quote_r_string(c) for c in RESULTS_HEADER) + "\n")
        for row in rows:
            s, *nums = row
            f.write(",".join([quote_r_string(s), *(format_r_number(float(x)) for x in nums)]) + "\n")


def read_results(source: PathOrFile) -> dict[str, Any]:
    """Read ``results.csv``: ``{"string": [...], "estimate": float array, ...}`` (``NA`` → NaN).

    Extra columns (R may add row names) are ignored; the seven named columns are required.
    """
    name = source_name(source)
    rows = csv_rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty results file")
    idx = header_index(rows[0][1], RESULTS_HEADER, name)
    out: dict[str, Any] = {"string": [cells[idx["string"]] for _, cells in rows[1:]]}
    for col in RESULTS_HEADER[1:]:
        vals = []
        for line, cells in rows[1:]:
            c = cells[idx[col]]
            if c in ("NA", "NaN", ""):
                vals.append(math.nan)
                continue
            try:
                vals.append(float(c))
            except ValueError:
                raise ReportFormatError(f"{name}:{line}: {col} must be a number, got {c!r}") from None
        out[col] = np.asarray(vals, dtype=np.float64)
    return out
