"""CSV input and output as Google's RAPPOR tools read and write it.

Formats: docs/math/estimators.md, "Google RAPPOR files".

Reading is tolerant of what Google's tools produce: Python 2's ``csv`` writes CRLF line ends, R quotes
headers and strings, files may end with or without a newline and may start with a UTF-8 BOM. Writing
follows the tools' own output (CSV with ``\\n`` line ends, R-style quoting and numbers for ``results.csv``,
as R's ``write.csv``). ``"-"`` as a path is stdin / stdout. Malformed input raises
:class:`~ldpstream.errors.ReportFormatError` (a ``ValueError``) naming the file and line.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TextIO

import numpy as np

from ldpstream.errors import ParameterError, ReportFormatError

#: A path (``"-"`` = stdin / stdout) or an open text stream.
PathOrFile = str | Path | IO[str]


def source_name(source: PathOrFile) -> str:
    """The name error messages give ``source``: its path, or the stream's ``name``."""
    if isinstance(source, str | Path):
        return str(source)
    return getattr(source, "name", "<stream>")


@contextmanager
def open_text_read(source: PathOrFile) -> Iterator[IO[str]]:
    """Text stream over ``source``; ``"-"`` is stdin. ``newline=""`` lets csv handle CRLF and quoted newlines."""
    if isinstance(source, str | Path):
        if str(source) == "-":
            yield sys.stdin
            return
        try:
            f = open(source, encoding="utf-8-sig", newline="")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            raise ParameterError(f"file {str(source)!r} does not exist") from None
        try:
            yield f
        finally:
            f.close()
    else:
        yield source


@contextmanager
def open_text_write(target: PathOrFile) -> Iterator[IO[str]]:
    """Text stream writing to ``target`` with ``\\n`` line ends; ``"-"`` is stdout (flushed at the end)."""
    if isinstance(target, str | Path):
        if str(target) == "-":
            yield sys.stdout
            sys.stdout.flush()
            return
        with open(target, "w", encoding="utf-8", newline="") as f:
            yield f
    else:
        yield target


def csv_rows(source: PathOrFile) -> list[tuple[int, list[str]]]:
    """Non-blank CSV rows with their 1-based line numbers (cells stripped of surrounding spaces)."""
    with open_text_read(source) as f:
        text = f.read()
    if text.startswith("\ufeff"):
        text = text[1:]
    out: list[tuple[int, list[str]]] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    for row in reader:
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        out.append((reader.line_num, cells))
    return out


def header_index(header: list[str], wanted: Sequence[str], name: str) -> dict[str, int]:
    """Column index of every ``wanted`` name in ``header`` (case-insensitive); all must be present."""
    lowered = [h.strip().lower() for h in header]
    missing = [w for w in wanted if w not in lowered]
    if missing:
        raise ReportFormatError(f"{name}: header {header} lacks column(s) {missing}")
    return {w: lowered.index(w) for w in wanted}


def int_cell(text: str, name: str, line: int, what: str) -> int:
    """The integer in a cell (``"3"`` or ``"3.0"``, as R may print it); ``what`` names it in errors."""
    try:
        value = float(text)
    except ValueError:
        raise ReportFormatError(f"{name}:{line}: {what} must be an integer, got {text!r}") from None
    if not math.isfinite(value) or value != int(value):
        raise ReportFormatError(f"{name}:{line}: {what} must be an integer, got {text!r}")
    return int(value)


def format_r_number(x: float | None) -> str:
    """A number as R's ``write.csv`` prints it: 15 significant digits, ``NA`` for NaN, ``Inf``/``-Inf``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "NA"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    if float(x) == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{float(x):.15g}"


def quote_r_string(s: str) -> str:
    """A string quoted as R's ``write.csv`` quotes it (double quotes, inner quotes doubled)."""
    return '"' + str(s).replace('"', '""') + '"'


def is_number(text: str) -> bool:
    """Whether ``float(text)`` succeeds."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_cohort_range(
    cohorts: np.ndarray, limit: int | None, name: str, body: Sequence[tuple[int, list[str]]]
) -> None:
    """Raise if a row's cohort is negative or, with ``limit``, at least ``limit``; ``body`` are the rows
    (line number, cells) the cohorts were read from, to name the line."""
    if cohorts.size and (cohorts.min() < 0 or (limit is not None and cohorts.max() >= limit)):
        bad = int(np.flatnonzero((cohorts < 0) | (cohorts >= (limit or 2**62)))[0])
        raise ReportFormatError(f"{name}:{body[bad][0]}: cohort {cohorts[bad]} outside 0..{(limit or 0) - 1}")


def write_lines(target: PathOrFile | TextIO, lines: Iterable[str]) -> None:
    """Write text lines (``\\n``-terminated) to a path, ``-`` or a stream."""
    with open_text_write(target) as f:
        for line in lines:
            f.write(line + "\n")
