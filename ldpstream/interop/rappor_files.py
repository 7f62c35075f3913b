"""Read and write the files of Google's RAPPOR tools (formula sheet, "Google RAPPOR file formats").

=================  ======  =====================================================================================
file               header  rows
=================  ======  =====================================================================================
``params.csv``     yes     ``k,h,m,p,q,f``, one row: Bloom bits k, hashes h, cohorts m, and the probabilities
``counts.csv``     no      m rows, row c = cohort c (0-based): reports in the cohort, then for j = 0..k−1 the
                           reports with bit j set. Exactly the ``(C, k+1)`` bit sketch of
                           :class:`~ldpstream.mechanisms.base.BitMechanism`.
``map.csv``        no      per candidate: the string, then m·h integers; for cohort c and hash i (cohort-major)
                           the value ``c·k + bit + 1`` (1-based row of the design matrix). Files written by R
                           may leave cells empty (NA, e.g. after removing a duplicate bit); they are skipped.
``results.csv``    yes     ``"string","estimate","std_error","proportion","prop_std_error","prop_low_95",
                           "prop_high_95"``, as R's ``write.csv(row.names = FALSE)``: strings quoted, numbers
                           bare (15 significant digits), ``NA`` for missing.
``reports.csv``    yes     ``client,cohort,bloom,prr,irr`` (Google's ``rappor_sim.py``); the bit strings print
                           the most significant bit first (character 0 is bit k−1, bit i has value 2^i). The
                           3-column form ``client,cohort,irr`` (older ``sum_bits.py``) is read too.
``values.csv``     yes     ``client,cohort,value``: the true values fed to an encoder (``rappor_sim.py``'s input).
=================  ======  =====================================================================================

Reading is tolerant of what Google's tools produce: Python 2's ``csv`` writes CRLF line ends, R quotes
headers and strings, files may end with or without a newline and may start with a UTF-8 BOM. Writing
follows the tools' own output (CSV with ``\\n`` line ends, R-style quoting for ``results.csv``), and
every file we write is read back by Google's readers (``read.csv`` in R, ``csv.reader`` in Python).

Bit strings are converted with numpy in one pass: the n strings of k characters are joined into one
``(n, k)`` byte array, checked to be all ``'0'``/``'1'``, and reversed along the bit axis.
All malformed input raises :class:`~ldpstream.errors.ReportFormatError` (a ``ValueError``) naming the file
and line, or :class:`~ldpstream.errors.ParameterError` for inconsistent parameters.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

import numpy as np
import scipy.sparse as sp

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.mechanisms.base import sum_bits as sum_bits  # re-exported: the `sum-bits` tool
from ldpstream.mechanisms.rappor import Rappor

PathOrFile = str | Path | IO[str]

PARAMS_HEADER: tuple[str, ...] = ("k", "h", "m", "p", "q", "f")
RESULTS_HEADER: tuple[str, ...] = (
    "string",
    "estimate",
    "std_error",
    "proportion",
    "prop_std_error",
    "prop_low_95",
    "prop_high_95",
)
REPORTS_HEADER: tuple[str, ...] = ("client", "cohort", "bloom", "prr", "irr")
VALUES_HEADER: tuple[str, ...] = ("client", "cohort", "value")


# ---------------------------------------------------------------------------------------------------------
# Low-level CSV helpers
# ---------------------------------------------------------------------------------------------------------


def _name(source: PathOrFile) -> str:
    if isinstance(source, str | Path):
        return str(source)
    return getattr(source, "name", "<stream>")


@contextmanager
def _open_read(source: PathOrFile) -> Any:
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
def _open_write(target: PathOrFile) -> Any:
    if isinstance(target, str | Path):
        if str(target) == "-":
            yield sys.stdout
            sys.stdout.flush()
            return
        with open(target, "w", encoding="utf-8", newline="") as f:
            yield f
    else:
        yield target


def _rows(source: PathOrFile) -> list[tuple[int, list[str]]]:
    """Non-blank CSV rows with their 1-based line numbers (cells stripped of surrounding spaces)."""
    with _open_read(source) as f:
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


def _header_index(header: list[str], wanted: Sequence[str], name: str) -> dict[str, int]:
    lowered = [h.strip().lower() for h in header]
    missing = [w for w in wanted if w not in lowered]
    if missing:
        raise ReportFormatError(f"{name}: header {header} lacks column(s) {missing}")
    return {w: lowered.index(w) for w in wanted}


def _int_cell(text: str, name: str, line: int, what: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ReportFormatError(f"{name}:{line}: {what} must be an integer, got {text!r}") from None
    if not math.isfinite(value) or value != int(value):
        raise ReportFormatError(f"{name}:{line}: {what} must be an integer, got {text!r}")
    return int(value)


def _format_number(x: float) -> str:
    """A number as R's ``write.csv`` prints it: 15 significant digits, ``NA`` for NaN, ``Inf``/``-Inf``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "NA"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    if float(x) == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{float(x):.15g}"


def _quote(s: str) -> str:
    return '"' + str(s).replace('"', '""') + '"'


# ---------------------------------------------------------------------------------------------------------
# params.csv
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParamsCsv:
    """The parameters of Google's ``params.csv``: Bloom bits k, hashes h, cohorts m, and p, q, f.

    ``p``, ``q`` are the instantaneous probabilities P(S_i = 1 | B'_i = 0 / 1) and ``f`` the permanent
    randomization (formula sheet, "RAPPOR").
    """

    k: int
    h: int
    m: int
    p: float
    q: float
    f: float

    def __post_init__(self) -> None:
        for name in ("k", "h", "m"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ParameterError(f"params: {name} must be an integer >= 1, got {v!r}")
            object.__setattr__(self, name, int(v))
        for name in ("p", "q", "f"):
            v = float(getattr(self, name))
            if not 0.0 <= v <= 1.0:
                raise ParameterError(f"params: {name} must be in [0, 1], got {v}")
            object.__setattr__(self, name, v)

    def mechanism(self) -> Rappor:
        """The :class:`~ldpstream.mechanisms.rappor.Rappor` these parameters define."""
        return Rappor(k=self.k, hashes=self.h, cohorts=self.m, p=self.p, q=self.q, f=self.f)

    @property
    def q_star(self) -> float:
        """P(S_i = 1 | B_i = 1), from the mechanism (formula sheet, "RAPPOR")."""
        return self.mechanism().q_star

    @property
    def p_star(self) -> float:
        """P(S_i = 1 | B_i = 0), from the mechanism (formula sheet, "RAPPOR")."""
        return self.mechanism().p_star

    def as_row(self) -> list[str]:
        return [str(self.k), str(self.h), str(self.m), _format_number(self.p), _format_number(self.q),
                _format_number(self.f)]


def read_params(source: PathOrFile) -> ParamsCsv:
    """Read ``params.csv`` (header ``k,h,m,p,q,f``, quoted or not, in that order; one data row)."""
    name = _name(source)
    rows = _rows(source)
    if len(rows) < 2:
        raise ReportFormatError(f"{name}: expected a header k,h,m,p,q,f and one row of values")
    header = [h.lower() for h in rows[0][1]]
    if tuple(header) != PARAMS_HEADER:
        raise ReportFormatError(f"{name}: header must be k,h,m,p,q,f, got {','.join(rows[0][1])}")
    if len(rows) > 2:
        raise ReportFormatError(f"{name}:{rows[2][0]}: expected exactly one row of values")
    line, cells = rows[1]
    if len(cells) != 6:
        raise ReportFormatError(f"{name}:{line}: expected 6 values, got {len(cells)}")
    ints = [_int_cell(c, name, line, h) for c, h in zip(cells[:3], PARAMS_HEADER[:3], strict=True)]
    try:
        floats = [float(c) for c in cells[3:]]
    except ValueError:
        raise ReportFormatError(f"{name}:{line}: p, q, f must be numbers, got {cells[3:]}") from None
    return ParamsCsv(*ints, *floats)


def write_params(target: PathOrFile, params: ParamsCsv) -> None:
    """Write ``params.csv`` as Google's tools do: ``k,h,m,p,q,f`` then one row."""
    with _open_write(target) as f:
        f.write(",".join(PARAMS_HEADER) + "\n")
        f.write(",".join(params.as_row()) + "\n")


# ---------------------------------------------------------------------------------------------------------
# counts.csv
# ---------------------------------------------------------------------------------------------------------


def read_counts(source: PathOrFile, params: ParamsCsv | None = None) -> np.ndarray:
    """Read ``counts.csv`` into an ``(m, k+1)`` int64 sketch (column 0 = reports, column 1+j = bit j).

    With ``params`` the shape is checked (m rows, k + 1 columns), as Google's ``ReadCountsFile`` does.
    """
    name = _name(source)
    rows = _rows(source)
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
            (line, c) for line, cells in rows for c in cells if not _is_number(c)
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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def write_counts(target: PathOrFile, counts: np.ndarray) -> None:
    """Write an ``(m, k+1)`` sketch as ``counts.csv`` (no header, integers)."""
    counts = np.asarray(counts)
    if counts.ndim != 2 or counts.shape[1] < 2:
        raise ParameterError(f"counts must be (m, k+1), got shape {counts.shape}")
    with _open_write(target) as f:
        np.savetxt(f, counts.astype(np.int64), fmt="%d", delimiter=",")


# ---------------------------------------------------------------------------------------------------------
# map.csv
# ---------------------------------------------------------------------------------------------------------


def map_rows(bloom_table: np.ndarray, k: int) -> np.ndarray:
    """``(C, S, h)`` Bloom bit indices → ``(S, C·h)`` map.csv integers ``c·k + bit + 1`` (cohort-major)."""
    C, S, h = bloom_table.shape
    vals = np.arange(C, dtype=np.int64)[:, None, None] * k + bloom_table.astype(np.int64) + 1  # (C, S, h)
    return np.ascontiguousarray(vals.transpose(1, 0, 2).reshape(S, C * h))


def write_map(target: PathOrFile, candidates: Sequence[str], bloom_table: np.ndarray, k: int) -> None:
    """Write ``map.csv``: per candidate its string then the ``m·h`` 1-based rows (see :func:`map_rows`).

    Strings are quoted only when needed (Python ``csv`` minimal quoting, as Google's ``hash_candidates.py``).
    """
    rows = map_rows(np.asarray(bloom_table), k)
    if rows.shape[0] != len(candidates):
        raise ParameterError(f"{len(candidates)} candidates but a table for {rows.shape[0]}")
    with _open_write(target) as f:
        writer = csv.writer(f, lineterminator="\n")
        text_rows = rows.astype(str)
        for s, r in zip(candidates, text_rows, strict=True):
            writer.writerow([s, *r])


@dataclass(frozen=True)
class CandidateMap:
    """A parsed ``map.csv``: candidate strings and their ``(m·k, S)`` 0/1 design matrix (csr)."""

    strings: list[str]
    matrix: sp.csr_matrix


def read_map(source: PathOrFile, params: ParamsCsv) -> CandidateMap:
    """Read ``map.csv`` into strings and the ``(m·k, S)`` design matrix X (X[c·k + bit, s] = 1).

    Like Google's ``ReadMapFile``: duplicate strings keep their first row; empty cells (R's NA) are
    skipped; a bit set by two hashes counts once (the matrix is 0/1). Each row must have ``m·h`` cells
    after the string, every non-empty one an integer in ``1..m·k``.
    """
    name = _name(source)
    rows = _rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: no candidates")
    width = params.m * params.h
    seen: set[str] = set()
    strings: list[str] = []
    cells_all: list[list[str]] = []
    lines: list[int] = []
    for line, cells in rows:
        if len(cells) - 1 != width:
            raise ReportFormatError(
                f"{name}:{line}: expected the string and m·h = {width} integers, got {len(cells) - 1}"
            )
        if cells[0] in seen:
            continue
        seen.add(cells[0])
        strings.append(cells[0])
        cells_all.append([c if c not in ("", "NA") else "0" for c in cells[1:]])
        lines.append(line)
    try:
        vals = np.array(cells_all, dtype=np.int64)
    except ValueError:
        for line, cells in zip(lines, cells_all, strict=True):
            for c in cells:
                try:
                    int(c)
                except ValueError:
                    raise ReportFormatError(f"{name}:{line}: map entries must be integers, got {c!r}") from None
        raise
    upper = params.m * params.k
    present = vals > 0
    if np.any(vals < 0) or np.any(vals > upper):
        bad = int(np.flatnonzero(((vals < 0) | (vals > upper)).any(axis=1))[0])
        raise ReportFormatError(f"{name}:{lines[bad]}: map entries must be in 1..m·k = {upper}")
    S = len(strings)
    cols = np.broadcast_to(np.arange(S)[:, None], vals.shape)[present]
    matrix = sp.csr_matrix(
        (np.ones(cols.shape[0]), (vals[present] - 1, cols)), shape=(upper, S), dtype=np.float64
    )
    matrix.sum_duplicates()
    matrix.data[:] = 1.0
    return CandidateMap(strings, matrix)


def read_candidates(source: PathOrFile) -> list[str]:
    """Candidate strings, one per line (``-`` = stdin); surrounding whitespace stripped, blank lines skipped,
    duplicates dropped (first kept), as Google's ``hash_candidates.py`` reads its input."""
    with _open_read(source) as f:
        text = f.read()
    out: list[str] = []
    seen: set[str] = set()
    for line in text.lstrip("\ufeff").splitlines():
        word = line.strip()
        if word and word not in seen:
            seen.add(word)
            out.append(word)
    return out


# ---------------------------------------------------------------------------------------------------------
# results.csv
# ---------------------------------------------------------------------------------------------------------


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
    with _open_write(target) as f:
        f.write(",".join(_quote(c) for c in RESULTS_HEADER) + "\n")
        for row in rows:
            s, *nums = row
            f.write(",".join([_quote(s), *(_format_number(float(x)) for x in nums)]) + "\n")


def read_results(source: PathOrFile) -> dict[str, Any]:
    """Read ``results.csv``: ``{"string": [...], "estimate": float array, ...}`` (``NA`` → NaN).

    Extra columns (R may add row names) are ignored; the seven named columns are required.
    """
    name = _name(source)
    rows = _rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty results file")
    idx = _header_index(rows[0][1], RESULTS_HEADER, name)
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


# ---------------------------------------------------------------------------------------------------------
# reports.csv and values.csv
# ---------------------------------------------------------------------------------------------------------


def bits_from_strings(strings: Sequence[str], k: int, what: str = "bit string") -> np.ndarray:
    """``n`` strings of ``k`` '0'/'1' characters, most significant bit first → ``(n, k)`` uint8, column i = bit i.

    Vectorized: one join, one ``frombuffer``, one validity check, one reversal.
    """
    n = len(strings)
    if n == 0:
        return np.zeros((0, k), dtype=np.uint8)
    lengths = np.fromiter((len(s) for s in strings), dtype=np.int64, count=n)
    if np.any(lengths != k):
        i = int(np.flatnonzero(lengths != k)[0])
        raise ReportFormatError(f"{what} {i}: expected {k} bits, got {strings[i]!r}")
    try:
        raw = "".join(strings).encode("ascii")
    except UnicodeEncodeError:
        raise ReportFormatError(f"{what}s must hold only '0' and '1'") from None
    chars = np.frombuffer(raw, dtype=np.uint8).reshape(n, k) - ord("0")
    if np.any(chars > 1):
        i = int(np.flatnonzero((chars > 1).any(axis=1))[0])
        raise ReportFormatError(f"{what} {i}: digits must be 0 or 1, got {strings[i]!r}")
    return np.ascontiguousarray(chars[:, ::-1])


def strings_from_bits(bits: np.ndarray) -> list[str]:
    """Inverse of :func:`bits_from_strings`: ``(n, k)`` 0/1 (column i = bit i) → strings, MSB first."""
    bits = np.asarray(bits)
    n, k = bits.shape
    if n == 0:
        return []
    chars = (bits[:, ::-1].astype(np.uint8) != 0).astype(np.uint8) + ord("0")
    text = np.ascontiguousarray(chars).tobytes().decode("ascii")
    return [text[i * k : (i + 1) * k] for i in range(n)]


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
    name = _name(source)
    rows = _rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty reports file")
    header = rows[0][1]
    idx = _header_index(header, ("client", "cohort"), name)
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
    if cohort_arr.size and (cohort_arr.min() < 0 or (cohorts is not None and cohort_arr.max() >= cohorts)):
        bad = int(np.flatnonzero((cohort_arr < 0) | (cohort_arr >= (cohorts or 2**62)))[0])
        raise ReportFormatError(f"{name}:{body[bad][0]}: cohort {cohort_arr[bad]} outside 0..{(cohorts or 0) - 1}")

    def column(col: int, what: str) -> np.ndarray:
        try:
            return bits_from_strings([cells[col] for _, cells in body], k, what)
        except ReportFormatError as exc:
            raise ReportFormatError(f"{name}: {exc}") from None

    bloom = column(lowered.index("bloom"), "bloom") if "bloom" in lowered else None
    prr = column(lowered.index("prr"), "prr") if "prr" in lowered else None
    return Reports(clients, cohort_arr, column(irr_col, "irr"), bloom, prr)


def write_reports(target: PathOrFile, reports: Reports) -> None:
    """Write ``reports.csv`` with header ``client,cohort,bloom,prr,irr`` (bit strings MSB first).

    When ``bloom``/``prr`` are ``None`` the 3-column form ``client,cohort,irr`` is written instead.
    """
    full = reports.bloom is not None and reports.prr is not None
    columns = [strings_from_bits(reports.bloom), strings_from_bits(reports.prr)] if full else []  # type: ignore[arg-type]
    columns.append(strings_from_bits(reports.irr))
    with _open_write(target) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(REPORTS_HEADER if full else ("client", "cohort", "irr"))
        writer.writerows(zip(reports.clients, reports.cohorts.tolist(), *columns, strict=True))


@dataclass(frozen=True)
class Values:
    """The rows of a ``values.csv``: client ids, cohorts, true values (strings)."""

    clients: list[str]
    cohorts: np.ndarray
    values: list[str]


def read_values(source: PathOrFile, cohorts: int | None = None) -> Values:
    """Read ``values.csv`` (header ``client,cohort,value``; columns found by name)."""
    name = _name(source)
    rows = _rows(source)
    if not rows:
        raise ReportFormatError(f"{name}: empty values file")
    idx = _header_index(rows[0][1], VALUES_HEADER, name)
    body = rows[1:]
    try:
        cohort_arr = np.array([cells[idx["cohort"]] for _, cells in body], dtype=np.int64)
    except (ValueError, IndexError):
        raise ReportFormatError(f"{name}: every row needs an integer cohort") from None
    if cohort_arr.size and (cohort_arr.min() < 0 or (cohorts is not None and cohort_arr.max() >= cohorts)):
        bad = int(np.flatnonzero((cohort_arr < 0) | (cohort_arr >= (cohorts or 2**62)))[0])
        raise ReportFormatError(f"{name}:{body[bad][0]}: cohort {cohort_arr[bad]} outside 0..{(cohorts or 0) - 1}")
    try:
        clients = [cells[idx["client"]] for _, cells in body]
        values = [cells[idx["value"]] for _, cells in body]
    except IndexError:
        raise ReportFormatError(f"{name}: a row has fewer than 3 columns") from None
    return Values(clients, cohort_arr, values)


def write_values(target: PathOrFile, values: Values) -> None:
    """Write ``values.csv`` with header ``client,cohort,value``."""
    with _open_write(target) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(VALUES_HEADER)
        writer.writerows(zip(values.clients, values.cohorts.tolist(), values.values, strict=True))


def write_lines(target: PathOrFile | TextIO, lines: Iterable[str]) -> None:
    """Write text lines (``\\n``-terminated) to a path, ``-`` or a stream."""
    with _open_write(target) as f:
        for line in lines:
            f.write(line + "\n")
