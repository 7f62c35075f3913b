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
        cx = np.asarray(cohort_x, dtype=np.int64).reshape(-1)
        cy = np.asarray(cohort_y, dtype=np.int64).reshape(-1)
        rx = np.asarray(reports_x)
        ry = np.asarray(reports_y)
        weights = np.ones(len(cx), dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        if not (len(cy) == len(rx) == len(ry) == len(weights) == len(cx)):
            raise ParameterError("pair patterns: every column needs one entry per report pair")
        if len(cx) == 0:
            return cls(cx, rx, cy, ry, weights[:0])
        # One fixed-width byte key per pair (cohorts as int64, bits packed 8 per byte, symbols as int64), so
        # np.unique sorts short opaque rows instead of k-column integer rows.
        key = np.ascontiguousarray(np.hstack([_key_bytes(cx), _key_bytes(rx), _key_bytes(cy), _key_bytes(ry)]))
        _, first, inverse = np.unique(key.view(np.dtype((np.void, key.shape[1]))).reshape(-1),
                                      return_index=True, return_inverse=True)
        summed = np.bincount(inverse.reshape(-1), weights=weights, minlength=len(first)).astype(np.int64)
        keep = summed > 0
        first, summed = first[keep], summed[keep]
        rx_out = rx[first] if rx.ndim == 2 else rx[first].astype(np.int64)
        ry_out = ry[first] if ry.ndim == 2 else ry[first].astype(np.int64)
        return cls(cx[first], rx_out, cy[first], ry_out, summed)


def _key_bytes(column: np.ndarray) -> np.ndarray:
    """``(n, w)`` uint8 bytes identifying each row: packed bits for 2-D 0/1 reports, int64 bytes otherwise."""
    if column.ndim == 2:
        return np.packbits(column.astype(bool), axis=1)
    return column.astype(np.int64).reshape(-1, 1).view(np.uint8)
