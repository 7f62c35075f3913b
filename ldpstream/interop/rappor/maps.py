"""``map.csv``: the Bloom bits of every candidate string, and the candidate list ``hash-candidates`` reads
(docs/math/estimators.md, "Google RAPPOR files").

No header; per candidate: the string, then m·h integers; for cohort c and hash i (cohort-major) the value
``c·k + bit + 1`` (the 1-based row of the design matrix, docs/math/estimators.md, "Design matrix and
responses"). Files written by R may leave cells empty (NA, e.g. after removing a duplicate bit); they are
skipped.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.interop.rappor.csvio import PathOrFile, csv_rows, open_text_read, open_text_write, source_name
from ldpstream.interop.rappor.params import ParamsFile


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
    with open_text_write(target) as f:
        writer = csv.writer(f, lineterminator="\n")
        text_rows = rows.astype(str)
        for s, r in zip(candidates, text_rows, strict=True):
            writer.writerow([s, *r])


@dataclass(frozen=True)
class CandidateMap:
    """A parsed ``map.csv``: candidate strings and their ``(m·k, S)`` 0/1 design matrix (csr)."""

    strings: list[str]
    matrix: sp.csr_matrix


def read_map(source: PathOrFile, params: ParamsFile) -> CandidateMap:
    """Read ``map.csv`` into strings and the ``(m·k, S)`` design matrix X (X[c·k + bit, s] = 1).

    Like Google's ``ReadMapFile``: duplicate strings keep their first row; empty cells (R's NA) are
    skipped; a bit set by two hashes counts once (the matrix is 0/1). Each row must have ``m·h`` cells
    after the string, every non-empty one an integer in ``1..m·k``.
    """
    name = source_name(source)
    rows = csv_rows(source)
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
    with open_text_read(source) as f:
        text = f.read()
    out: list[str] = []
    seen: set[str] = set()
    for line in text.lstrip("\ufeff").splitlines():
        word = line.strip()
        if word and word not in seen:
            seen.add(word)
            out.append(word)
    return out


def create_bool_map(params: ParamsFile) -> CandidateMap:
    """The map ``decode_assoc.R --create-bool-map`` makes for a boolean variable: candidates ``FALSE`` and
    ``TRUE``; in every cohort ``TRUE`` sets the one bit and ``FALSE`` none (a ``(m, 2)`` design, k = 1)."""
    from ldpstream.mechanisms.rappor_boolean import BOOLEAN_LABELS, RapporBoolean

    mechanism = RapporBoolean(cohorts=params.m, p=params.p, q=params.q, f=params.f)
    return CandidateMap(list(BOOLEAN_LABELS), mechanism.design_matrix())

