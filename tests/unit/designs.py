"""Design-matrix helpers the candidate-decoder tests share."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def hashed_design(rng: np.random.Generator, C: int, k: int, S: int, h: int) -> sp.csr_matrix:
    """Random (C·k × S) 0/1 design: each candidate sets ``h`` distinct cells per cohort."""
    rows, cols = [], []
    for c in range(C):
        for s in range(S):
            cells = rng.choice(k, size=h, replace=False)
            rows.extend(c * k + cells)
            cols.extend([s] * h)
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(C * k, S))
