"""``assoc-results.csv`` and ``assoc-metrics.json``: what ``decode-assoc`` writes, in the form of Google's
``decode_assoc.R`` (docs/math/estimators.md, "Google RAPPOR association files").

``assoc-results.csv`` is R's ``write.csv(as.data.frame(as.table(fit)), row.names = FALSE)`` of the joint
table with ``var2`` on the rows and ``var1`` on the columns: header ``"<var2>","<var1>","proportion"``, one
row per cell with the ``var2`` value varying fastest, values quoted (booleans ``"TRUE"``/``"FALSE"``, the
"Other" category ``"Other"``), numbers bare. We add the columns ``std_error``, ``low_95`` and ``high_95``
(the cell's standard error and 95% interval); Google's readers see the first three columns unchanged.

``assoc-metrics.json`` holds Google's keys (``num_reports``, ``reports_sample_size``,
``estimate_dimensions``, ``sum_estimates``, ``total_elapsed_time``, ``em_elapsed_time``,
``num_em_iters``: here ``em_elapsed_time`` is the EM's iterations alone) and ours (``converged``,
``stopping_rule``, ``likelihood_elapsed_time``, ``joint_elapsed_time`` (pattern collapse, likelihoods, EM and
information), ``read_elapsed_time``, ``marginal_elapsed_time``, ``distinct_report_pairs``, ``removed_rows``,
``interval_method``, the independence test, and each variable's candidates).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.interop.rappor.csvio import (
    PathOrFile,
    csv_rows,
    format_r_number,
    open_text_write,
    quote_r_string,
    source_name,
)

#: The value columns after the two variable columns (Google writes the first only).
ASSOC_VALUE_COLUMNS: tuple[str, ...] = ("proportion", "std_error", "low_95", "high_95")


def assoc_results_rows(
    var1_labels: Sequence[str], var2_labels: Sequence[str], columns: Mapping[str, np.ndarray]
) -> list[tuple[str, str, list[float]]]:
    """Rows ``(var2 value, var1 value, [proportion, std_error, low_95, high_95])`` of ``(r, c)`` tables
    indexed ``[var1, var2]``, in R's ``as.table`` order (``var2`` fastest)."""
    r, c = len(var1_labels), len(var2_labels)
    for col in ASSOC_VALUE_COLUMNS:
        if col not in columns:
            raise ParameterError(f"association results lack column {col!r}")
        if np.shape(columns[col]) != (r, c):
            raise ParameterError(f"column {col!r} has shape {np.shape(columns[col])}, expected ({r}, {c})")
    return [
        (var2_labels[j], var1_labels[i], [float(columns[col][i, j]) for col in ASSOC_VALUE_COLUMNS])
        for i in range(r)
        for j in range(c)
    ]


def write_assoc_results(
    target: PathOrFile, var1: str, var2: str, var1_labels: Sequence[str], var2_labels: Sequence[str],
    columns: Mapping[str, np.ndarray],
) -> None:
    """Write ``assoc-results.csv`` (module docstring) from ``(r, c)`` arrays indexed ``[var1, var2]``."""
    rows = assoc_results_rows(var1_labels, var2_labels, columns)
    with open_text_write(target) as f:
        f.write(",".join(quote_r_string(h) for h in (var2, var1, *ASSOC_VALUE_COLUMNS)) + "\n")
        for v2, v1, nums in rows:
            f.write(",".join([quote_r_string(v2), quote_r_string(v1), *(format_r_number(x) for x in nums)]) + "\n")


def read_assoc_results(source: PathOrFile) -> dict[str, Any]:
    """Read ``assoc-results.csv`` (ours or Google's three columns): ``{"var2": name, "var1": name,
    "var2_values": [...], "var1_values": [...], "proportion": array, ...}`` (the value columns present)."""
    name = source_name(source)
    rows = csv_rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty association results file")
    header = rows[0][1]
    if len(header) < 3 or header[2].lower() != "proportion":
        raise ReportFormatError(f"{name}: header must be \"<var2>\",\"<var1>\",\"proportion\",..., got {header}")
    present = [h.lower() for h in header[2:]]
    unknown = [h for h in present if h not in ASSOC_VALUE_COLUMNS]
    if unknown:
        raise ReportFormatError(f"{name}: unknown column(s) {unknown}")
    out: dict[str, Any] = {"var2": header[0], "var1": header[1], "var2_values": [], "var1_values": []}
    values: dict[str, list[float]] = {h: [] for h in present}
    for line, cells in rows[1:]:
        if len(cells) != len(header):
            raise ReportFormatError(f"{name}:{line}: expected {len(header)} columns, got {len(cells)}")
        out["var2_values"].append(cells[0])
        out["var1_values"].append(cells[1])
        for h, cell in zip(present, cells[2:], strict=True):
            try:
                values[h].append(math.nan if cell in ("NA", "NaN") else float(cell))
            except ValueError:
                raise ReportFormatError(f"{name}:{line}: {h} must be a number, got {cell!r}") from None
    out.update({h: np.asarray(v, dtype=np.float64) for h, v in values.items()})
    return out


def write_assoc_metrics(target: PathOrFile, metrics: Mapping[str, Any]) -> None:
    """Write ``assoc-metrics.json`` (one JSON object; non-finite numbers as ``null``)."""
    def clean(x: Any) -> Any:
        if isinstance(x, float | np.floating) and not math.isfinite(float(x)):
            return None
        if isinstance(x, np.generic):
            return x.item()
        if isinstance(x, Mapping):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    with open_text_write(target) as f:
        f.write(json.dumps(clean(dict(metrics)), indent=2, sort_keys=False) + "\n")
