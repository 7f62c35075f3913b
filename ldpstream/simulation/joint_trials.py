"""Simulated associated pairs for the joint estimator's tests and benchmarks (docs/math/joint.md#simulation).

The paper's setting (Fanti, Pihur, Erlingsson 2016 §4.E): two variables of ``S`` categories with Zipf
marginals and a known association; clients report both through their mechanisms; the decoder keeps the top
categories of each plus "Other". :func:`zipf_association` gives such a joint law whose marginals are exactly
Zipf; :func:`sample_pairs` draws the reports of ``n`` clients (vectorized, through the mechanisms'
``encode_clients``) and collapses them into :class:`~ldpstream.estimators.joint.pairs.PairPatterns`;
:func:`collapse` is the true table the estimator targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ldpstream.distributions import zipf
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.mechanisms.base import Mechanism

__all__ = ["collapse", "sample_pairs", "value_names", "zipf_association"]


def zipf_association(support: int, a: float = 1.0, strength: float = 0.5) -> np.ndarray:
    """``(S, S)`` joint law ``(1 − ρ) z zᵀ + ρ diag(z)`` (``z`` = Zipf(a) over S, ``ρ = strength``): both
    marginals are exactly ``z``; ``ρ = 0`` is independence, and with probability ρ Y copies X."""
    z = zipf(support, a)
    joint: np.ndarray = (1.0 - strength) * np.outer(z, z) + strength * np.diag(z)
    return joint


def value_names(support: int, prefix: str = "v") -> list[str]:
    """``["v0", "v1", ...]``: open-alphabet strings for hashed mechanisms."""
    return [f"{prefix}{i}" for i in range(support)]


def collapse(joint: np.ndarray, rows: Sequence[int], columns: Sequence[int], other: bool = True) -> np.ndarray:
    """The true table over ``rows`` × ``columns`` (indices), plus the "Other" row/column holding the rest when
    ``other``; without it, the candidates' block renormalized to sum to 1 (what a fit without Other could at
    best recover if the rest were absent)."""
    r_idx, c_idx = np.asarray(rows, dtype=np.int64), np.asarray(columns, dtype=np.int64)
    if not other:
        block = joint[np.ix_(r_idx, c_idx)]
        out: np.ndarray = block / block.sum()
        return out
    S, T = joint.shape
    row_map = np.full(S, len(r_idx), dtype=np.int64)
    row_map[r_idx] = np.arange(len(r_idx))
    col_map = np.full(T, len(c_idx), dtype=np.int64)
    col_map[c_idx] = np.arange(len(c_idx))
    table = np.zeros((len(r_idx) + 1, len(c_idx) + 1))
    np.add.at(table, (row_map[:, None], col_map[None, :]), joint)
    return table


def sample_pairs(
    joint: np.ndarray,
    mechanism_x: Mechanism,
    mechanism_y: Mechanism,
    n: int,
    rng: np.random.Generator,
    table_x: Any = None,
    table_y: Any = None,
) -> PairPatterns:
    """Draw ``n`` clients' true pairs from ``joint`` (indices into the value tables ``table_x`` / ``table_y``,
    see :meth:`~ldpstream.mechanisms.base.Mechanism.value_table`; ``None`` for direct mechanisms), privatize
    each coordinate with its mechanism and return the distinct report pairs with counts."""
    S, T = joint.shape
    cells = rng.choice(S * T, size=n, p=(joint / joint.sum()).ravel())
    cx, rx = mechanism_x.encode_clients(cells // T, rng, table_x)
    cy, ry = mechanism_y.encode_clients(cells % T, rng, table_y)
    rx = np.asarray(rx)
    ry = np.asarray(ry)
    return PairPatterns.from_pairs(cx, rx.astype(np.uint8) if rx.ndim == 2 else rx, cy,
                                   ry.astype(np.uint8) if ry.ndim == 2 else ry)
