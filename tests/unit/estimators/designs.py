"""Helpers the candidate-decoder tests share: a random hashed design, and the covariance of the weighted least
squares from the per-report covariance enumerated over values (the independent reference of the sandwich)."""

from __future__ import annotations

from typing import Any

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


def enumerated_covariance(kind: str, X: sp.csr_matrix, p: np.ndarray, Nc: np.ndarray, k: int, rates: Any,
                          w: np.ndarray | None, other: bool) -> np.ndarray:
    """``Cov β`` of the least squares with the row weights ``w``: ``Ga⁻¹ Xaᵀ W Σ W Xa Ga⁻¹`` with ``Σ`` the
    per-report covariance enumerated over values (multinomial for O-RR, whose ``rates`` is ε; Bloom bits set
    together for bit sketches, whose ``rates`` is (q*, p*)). ``w`` None: the decoder's own weights at the truth,
    the inverse variances of the cells."""
    C = Nc.size
    blocks, natural = [], []
    for c in range(C):
        Xc = X[c * k:(c + 1) * k].toarray()
        if kind == "orr":
            e = np.exp(rates)
            cc = (e + k - 1) / (e - 1)
            m = (1 + (e - 1) * Xc @ p) / (e + k - 1)
            blocks.append(cc**2 * (np.diag(m) - np.outer(m, m)) / Nc[c])
            natural.append(Nc[c] / (cc**2 * m * (1 - m)))
        else:
            qs, ps = rates
            d = qs - ps
            r_v = ps + d * Xc.T  # (S, k): per-value bit rates
            r = p @ r_v
            cov = np.diag(p @ (r_v * (1 - r_v))) + (r_v - r).T @ ((r_v - r) * p[:, None])
            blocks.append(cov / d**2 / Nc[c])
            natural.append(Nc[c] * d**2 / (r * (1 - r)))
    Sigma = sp.block_diag(blocks).toarray()
    W = np.diag(np.concatenate(natural) if w is None else w)
    Xa = X.toarray()
    if other:
        Xa = np.column_stack([Xa, np.full(C * k, (1.0 if kind == "orr" else X.sum() / (X.shape[1] * C)) / k)])
    Gi = np.linalg.inv(Xa.T @ W @ Xa)
    return Gi @ Xa.T @ W @ Sigma @ W @ Xa @ Gi
