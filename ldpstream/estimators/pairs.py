"""The sufficient statistic of an associated pair of metrics: distinct report pairs with their counts.

Two metrics X and Y are *associated* when each client reports both together (one wire record with two
payloads). The joint likelihood of the pair depends on the reports only through the distinct
``(cohort_x, report_x, cohort_y, report_y)`` tuples and how often each occurred, so that is what the
consumers keep (exactly once, per time bucket) and what the joint EM reads
(:mod:`ldpstream.estimators.joint`). Each metric keeps its own cohort for a client, so both cohorts are
carried. A report is a symbol (``int64``) for symbol mechanisms and a row of ``k`` bits (``uint8``) for bit
mechanisms.

This module is pure numpy: the store turns its Redis representation into :class:`PairPatterns`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ParameterError


@dataclass(frozen=True)
class PairPatterns:
    """Distinct report pairs of an associated (X, Y) and their counts (``D`` rows)."""

    #: ``(D,)`` int64: the cohort of X's report.
    cohort_x: np.ndarray
    #: ``(D,)`` int64 symbols, or ``(D, k_x)`` uint8 bits.
    reports_x: np.ndarray
    #: ``(D,)`` int64: the cohort of Y's report.
    cohort_y: np.ndarray
    #: ``(D,)`` int64 symbols, or ``(D, k_y)`` uint8 bits.
    reports_y: np.ndarray
    #: ``(D,)`` int64, every entry ≥ 1.
    counts: np.ndarray

    def __post_init__(self) -> None:
        d = len(self.counts)
        if not (len(self.cohort_x) == len(self.reports_x) == len(self.cohort_y) == len(self.reports_y) == d):
            raise ParameterError("pair patterns: every column needs one entry per distinct pattern")

    def __len__(self) -> int:
        return len(self.counts)

    @property
    def total(self) -> int:
        """Number of report pairs the patterns stand for."""
        return int(self.counts.sum())

    @classmethod
    def from_pairs(cls, cohort_x: np.ndarray, reports_x: np.ndarray, cohort_y: np.ndarray,
                   reports_y: np.ndarray, counts: np.ndarray | None = None) -> PairPatterns:
        """Collapse report pairs (one row each, or rows with ``counts``) into distinct patterns (vectorized)."""
        cx = np.asarray(cohort_x, dtype=np.int64).reshape(-1, 1)
        cy = np.asarray(cohort_y, dtype=np.int64).reshape(-1, 1)
        rx = np.asarray(reports_x)
        ry = np.asarray(reports_y)
        rx2 = rx.reshape(len(cx), -1).astype(np.int64)
        ry2 = ry.reshape(len(cy), -1).astype(np.int64)
        rows = np.hstack([cx, rx2, cy, ry2])
        weights = np.ones(len(rows), dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        if len(rows) == 0:
            return cls(cx[:, 0], rx, cy[:, 0], ry, weights[:0])
        unique, inverse = np.unique(rows, axis=0, return_inverse=True)
        summed = np.bincount(inverse.reshape(-1), weights=weights, minlength=len(unique)).astype(np.int64)
        keep = summed > 0
        unique, summed = unique[keep], summed[keep]
        wx = rx2.shape[1]
        ux = unique[:, 1:1 + wx]
        uy = unique[:, 2 + wx:]
        reports_x_out = ux[:, 0] if rx.ndim == 1 else ux.astype(rx.dtype)
        reports_y_out = uy[:, 0] if ry.ndim == 1 else uy.astype(ry.dtype)
        return cls(unique[:, 0], reports_x_out, unique[:, 1 + wx], reports_y_out, summed)
