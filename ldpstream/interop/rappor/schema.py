"""``rappor-vars.csv``: the variables of Google RAPPOR metrics, as ``decode_assoc.R`` reads them
(docs/math/estimators.md, "Google RAPPOR association files").

Header ``metric, var, var_type, params`` (Google writes it with a space after each comma; cells are
stripped, names matched case-insensitively, in any order): per row a metric name, one of its variables,
the variable's type and the name of its parameters file (``<params>.csv`` in the ``--params-dir``
directory, :func:`~ldpstream.interop.rappor.params.read_params_dir`). Any type is read, as Google's
``read.csv`` does (a schema may describe variables of other tools); ``decode-assoc`` decodes the types of
:data:`VAR_TYPES` and says so for another.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.interop.rappor.csvio import PathOrFile, csv_rows, header_index, open_text_write, source_name

SCHEMA_HEADER: tuple[str, ...] = ("metric", "var", "var_type", "params")
#: The variable types an association can decode: a hashed string, a one-bit boolean.
VAR_TYPES: tuple[str, ...] = ("string", "boolean")


@dataclass(frozen=True)
class SchemaVariable:
    """One row of ``rappor-vars.csv``: ``var`` of ``metric``, its ``var_type`` and its ``params`` file name."""

    metric: str
    var: str
    var_type: str
    params: str


def read_schema(source: PathOrFile) -> list[SchemaVariable]:
    """Read ``rappor-vars.csv`` (types lowercased); an empty cell or a repeated (metric, var) pair is an error
    naming the line."""
    name = source_name(source)
    rows = csv_rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty schema file (expected header {', '.join(SCHEMA_HEADER)})")
    idx = header_index(rows[0][1], SCHEMA_HEADER, name)
    width = len(rows[0][1])
    out: list[SchemaVariable] = []
    seen: dict[tuple[str, str], int] = {}
    for line, cells in rows[1:]:
        if len(cells) != width:
            raise ReportFormatError(f"{name}:{line}: expected {width} columns, got {len(cells)}")
        metric, var, var_type, params = (cells[idx[c]] for c in SCHEMA_HEADER)
        for column, value in zip(SCHEMA_HEADER, (metric, var, var_type, params), strict=True):
            if not value:
                raise ReportFormatError(f"{name}:{line}: empty {column}")
        if (metric, var) in seen:
            raise ReportFormatError(f"{name}:{line}: metric {metric!r} var {var!r} repeats line {seen[(metric, var)]}")
        seen[(metric, var)] = line
        out.append(SchemaVariable(metric, var, var_type.lower(), params))
    return out


def find_variable(schema: Sequence[SchemaVariable], metric: str, var: str) -> SchemaVariable:
    """The schema row of ``var`` in ``metric`` (Google's ``schema[schema$metric == m & schema$var == v, ]``)."""
    for row in schema:
        if row.metric == metric and row.var == var:
            return row
    known = sorted({row.var for row in schema if row.metric == metric})
    raise ParameterError(f"couldn't find metric {metric!r}, var {var!r} in the schema"
                         + (f" (its vars: {known})" if known else " (no such metric)"))


def write_schema(target: PathOrFile, schema: Sequence[SchemaVariable]) -> None:
    """Write ``rappor-vars.csv`` with Google's header ``metric, var, var_type, params``."""
    with open_text_write(target) as f:
        f.write(", ".join(SCHEMA_HEADER) + "\n")
        writer = csv.writer(f, lineterminator="\n")
        writer.writerows((row.metric, row.var, row.var_type, row.params) for row in schema)
