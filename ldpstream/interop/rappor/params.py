"""``params.csv``: the parameters of a Google RAPPOR collection (docs/math/estimators.md, "Google RAPPOR files").

Header ``k,h,m,p,q,f`` (quoted or not, in that order) and one row: Bloom bits k, hashes h, cohorts m, and
the probabilities p, q, f of the randomized responses (docs/math/mechanisms.md, "RAPPOR").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.interop.rappor.csvio import PathOrFile, csv_rows, format_r_number, int_cell, open_text_write, source_name
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.registry import MAX_SKETCH_CELLS

PARAMS_HEADER: tuple[str, ...] = ("k", "h", "m", "p", "q", "f")
#: What the tools accept: a report's bits fit the report format's payload (65,535 bytes), its cohort the
#: format's u16 field, and the hashes Google's MD5 Bloom filter can give (16 bytes, one per hash).
MAX_BITS = 8 * 0xFFFF
MAX_COHORTS = 0xFFFF + 1
MAX_HASHES = 16


@dataclass(frozen=True)
class ParamsFile:
    """The content of Google's ``params.csv``: Bloom bits k, hashes h, cohorts m, and p, q, f.

    The file's view of a RAPPOR collection; :meth:`mechanism` gives the
    :class:`~ldpstream.mechanisms.rappor.Rappor` it defines.

    ``p``, ``q`` are the instantaneous probabilities P(S_i = 1 | B'_i = 0 / 1) and ``f`` the permanent
    randomization (docs/math/mechanisms.md, "RAPPOR").
    """

    k: int
    h: int
    m: int
    p: float
    q: float
    f: float

    def __post_init__(self) -> None:
        for name, top in (("k", MAX_BITS), ("h", MAX_HASHES), ("m", MAX_COHORTS)):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or not 1 <= v <= top:
                raise ParameterError(f"params: {name} must be an integer in 1..{top:,}, got {v!r}")
            object.__setattr__(self, name, int(v))
        for name in ("p", "q", "f"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.m * (self.k + 1) > MAX_SKETCH_CELLS:
            raise ParameterError(f"params: m × (k + 1) = {self.m * (self.k + 1):,} count cells; at most "
                                 f"{MAX_SKETCH_CELLS:,} (as a metric's sketch in the registry)")
        self.mechanism()  # the mechanism's own checks (probabilities, h <= k, ...), once

    def mechanism(self) -> Rappor:
        """The :class:`~ldpstream.mechanisms.rappor.Rappor` these parameters define."""
        return Rappor(k=self.k, hashes=self.h, cohorts=self.m, p=self.p, q=self.q, f=self.f)

    @property
    def q_star(self) -> float:
        """P(S_i = 1 | B_i = 1), from the mechanism (docs/math/mechanisms.md, "RAPPOR")."""
        return self.mechanism().q_star

    @property
    def p_star(self) -> float:
        """P(S_i = 1 | B_i = 0), from the mechanism (docs/math/mechanisms.md, "RAPPOR")."""
        return self.mechanism().p_star

    def as_row(self) -> list[str]:
        return [str(self.k), str(self.h), str(self.m), format_r_number(self.p), format_r_number(self.q),
                format_r_number(self.f)]


def read_params(source: PathOrFile) -> ParamsFile:
    """Read ``params.csv`` (header ``k,h,m,p,q,f``, quoted or not, in that order; one data row)."""
    name = source_name(source)
    rows = csv_rows(source)
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
    ints = [int_cell(c, name, line, h) for c, h in zip(cells[:3], PARAMS_HEADER[:3], strict=True)]
    try:
        floats = [float(c) for c in cells[3:]]
    except ValueError:
        raise ReportFormatError(f"{name}:{line}: p, q, f must be numbers, got {cells[3:]}") from None
    return ParamsFile(*ints, *floats)


def write_params(target: PathOrFile, params: ParamsFile) -> None:
    """Write ``params.csv`` as Google's tools do: ``k,h,m,p,q,f`` then one row."""
    with open_text_write(target) as f:
        f.write(",".join(PARAMS_HEADER) + "\n")
        f.write(",".join(params.as_row()) + "\n")


def params_path(params_dir: str | Path, name: str) -> Path:
    """Where ``decode_assoc.R`` looks for the parameters a schema row names: ``<params_dir>/<name>.csv``."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ParameterError(f"params name {name!r} is not a file name")
    return Path(params_dir) / f"{name}.csv"


def read_params_dir(params_dir: str | Path, name: str) -> ParamsFile:
    """Read the parameters file ``name`` of a schema from ``params_dir`` (:func:`params_path`)."""
    if not Path(params_dir).is_dir():
        raise ParameterError(f"params dir {str(params_dir)!r} is not a directory")
    return read_params(params_path(params_dir, name))
