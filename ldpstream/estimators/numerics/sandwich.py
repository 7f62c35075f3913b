"""Exact covariance ("meat") of the weighted least-squares score of the candidate decoders.

The weighted least-squares estimate ``β = Ga⁻¹ Xaᵀ W z`` (``Xa`` = design with the optional "other" column,
``Ga = Xaᵀ W Xa``) has covariance ``Ga⁻¹ M Ga⁻¹`` with the meat ``M = Xaᵀ W Σ_z W Xa`` and ``Σ_z`` the exact
covariance of the responses. The sketch of a cohort is a sum of ``N_c`` independent reports, so
``Σ_z`` is block diagonal over cohorts with block ``Σ_c / N_c``, ``Σ_c`` the covariance of one report's
response vector (docs/math/estimators.md#sandwich-covariance-of-the-least-squares-estimate):

- O-RR (one symbol per report, multinomial): ``Σ_c = c² (diag(m_c) − m_c m_cᵀ)``,
  ``c = (e^ε + k − 1)/(e^ε − 1)``, ``m = (1 + (e^ε − 1) Xp)/(e^ε + k − 1)``.
- bits (O-RAPPOR, RAPPOR; bits randomized independently given the value): with ``x(v)`` the Bloom bits of
  value ``v`` and ``π = E x = X_c p`` (plus ``p_o h̄/k`` from "other"), ``Cov(b) = diag(E r(v)(1 − r(v)))
  + δ² Cov x`` where ``δ = q* − p*``; divided by δ²:
  ``Σ_c = diag(r(1 − r))/δ² − diag(P2) + diag(π²) + P2 − π πᵀ``, ``P2 = E x xᵀ = X_c D_p X_cᵀ +
  p_o (h̄/k I + κ (11ᵀ − I))``, ``κ = h̄(h̄ − 1)/(k(k − 1))`` (a string outside the list sets h̄ random bits),
  ``r = p* + δ π``. The diagonal is the usual ``r(1 − r)/δ²``; off the diagonal two bits set by one
  value (h ≥ 2) covary positively, and the one-hot part ``−π πᵀ`` is negative (h = 1 too).

``M`` is applied as an operator on a block ``Y`` (``P × m``) in O((nnz(Xa) + R)·m + C·P·m): a diagonal
part ``Xaᵀ diag(α) Xa``, rank-``C`` parts ``Σ_c γ_c V_c V_cᵀ`` with ``V_c = Xa_cᵀ v_c`` (one vector per
cohort), and for bits the "pair" part ``Σ_c N_c⁻¹ Xa_cᵀ W_c X_c D_p X_cᵀ W_c Xa_c`` (two sparse products
through a cohort-split copy of the design; ``p`` of "other" set to 0 there). ``p`` and ``π`` are plugged
in from the fit (negative coordinates set to 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from .linalg import weighted_gram

__all__ = ["SandwichMeat", "bits_meat", "cohort_split", "orr_meat", "per_cohort_sums"]


def cohort_split(A: Any, k: int, C: int) -> sp.csr_matrix:
    """The (R × C·P) matrix whose row ``r`` of cohort ``c = r // k`` holds row ``r`` of ``A`` in columns
    ``c·P .. c·P + P − 1``: ``splitᵀ u`` stacks the per-cohort sums ``A_cᵀ u_c``."""
    A = sp.csr_matrix(A)
    P = A.shape[1]
    row_cohort = np.repeat(np.arange(A.shape[0], dtype=np.int64) // k, np.diff(A.indptr))
    cols = row_cohort * P + A.indices
    return sp.csr_matrix((A.data, cols, A.indptr), shape=(A.shape[0], C * P))


class SandwichMeat:
    """The meat ``M = Xaᵀ W Σ_z W Xa`` (module docstring), ``Xa = [X, o]`` (``o``: the "other" column or None).

    Args:
        X: candidate design (R × S), cohort-major rows, ``k`` rows a cohort.
        o: the "other" column (length R) or None.
        alpha: the diagonal part's row weights (length R).
        low_rank: pairs ``(V, γ)``, ``V`` of shape (C, P) (row c: ``Xa_cᵀ v_c``), ``γ`` of length C.
        pair: ``(p, 1/N_c, w)`` for the bit mechanisms' pair part (``p`` over the candidates), or None.
        low_rank_cells: the cell vectors ``v`` (length R) of ``low_rank``, in its order; needed by
            :meth:`sandwich_diagonal` only.
    """

    def __init__(
        self,
        X: sp.csr_matrix,
        o: np.ndarray | None,
        k: int,
        alpha: np.ndarray,
        low_rank: Sequence[tuple[np.ndarray, np.ndarray]],
        pair: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        low_rank_cells: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.X = sp.csr_matrix(X)
        self.o = o
        self.k = int(k)
        self.alpha = alpha
        self.low_rank = [(np.asarray(V), np.asarray(g)) for V, g in low_rank]
        self.pair = pair
        self.low_rank_cells = None if low_rank_cells is None else [np.asarray(v) for v in low_rank_cells]
        self.max_block = 1 << 19
        self.P = self.X.shape[1] + (o is not None)
        self._Xa: sp.csr_matrix | None = None
        self._split: sp.csr_matrix | None = None

    @property
    def augmented(self) -> sp.csr_matrix:
        """``Xa = [X, o]`` (sparse)."""
        if self._Xa is None:
            self._Xa = self.X if self.o is None else sp.csr_matrix(sp.hstack([self.X, sp.csr_matrix(self.o[:, None])]))
        return self._Xa

    @property
    def split(self) -> sp.csr_matrix:
        """:func:`cohort_split` of ``X`` (candidates only)."""
        if self._split is None:
            self._split = cohort_split(self.X, self.k, self.X.shape[0] // self.k)
        return self._split

    def __call__(self, Y: np.ndarray) -> np.ndarray:
        """``M Y``, in blocks of columns so that no temporary exceeds ``max_block`` elements (the (R × m)
        products with the design and the (C·S × m) per-cohort sums of the pair part)."""
        Y2 = Y.reshape(Y.shape[0], -1)
        R = self.X.shape[0]
        width = max(R, self.split.shape[1] if self.pair is not None else 0, 1)
        step = max(1, self.max_block // width)
        out = np.empty_like(Y2, dtype=np.float64)
        for j in range(0, Y2.shape[1], step):
            out[:, j:j + step] = self._apply(Y2[:, j:j + step])
        return out.reshape(Y.shape)

    def dense(self) -> np.ndarray:
        """``M`` as a dense (P × P) matrix from sparse products: the diagonal part by
        :func:`~ldpstream.estimators.numerics.linalg.weighted_gram` (plus the "other" row), the rank-C parts, and the
        pair part ``Hᵀ diag(p_t/N_c) H`` with ``H`` the rows ``(c, t)``, ``p_t > 0``, of the stacked
        per-cohort ``X_cᵀ W_c Xa_c``."""
        X, o, S = self.X, self.o, self.X.shape[1]
        M = np.zeros((self.P, self.P))
        M[:S, :S] = weighted_gram(X, self.alpha)
        if o is not None:
            cross = np.asarray(X.T @ (self.alpha * o))
            M[:S, S] = cross
            M[S, :S] = cross
            M[S, S] = float(np.dot(o * self.alpha, o))
        for V, g in self.low_rank:
            M += V.T @ (g[:, None] * V)
        if self.pair is not None:
            p, inv_n, w = self.pair
            d = (inv_n[:, None] * p[None, :]).ravel()
            keep = np.flatnonzero(d > 0)
            H = sp.csr_matrix(self.split.T @ (sp.diags(w) @ self.augmented))[keep]
            M += np.asarray((H.T @ sp.diags(d[keep]) @ H).toarray())
        return M

    def sandwich_diagonal(self, B: np.ndarray, structure: dict[str, Any] | None = None) -> np.ndarray:
        """``diag(A M A)`` for a symmetric ``A`` (P × P) given ``B = Xa A`` (R × P): the sandwich variances when
        ``A = Ga⁻¹`` (docs/math/estimators.md#the-sandwich-from-cached-factors). Every part of ``M`` is a sum of
        squares of cell combinations, so with ``B`` at hand no P × P product is needed:

        - diagonal part: ``Σ_i α_i B_is²``;
        - rank-C parts: ``Σ_c γ_c (Σ_{i∈c} v_i B_is)²`` (``V_c A e_s = v_cᵀ B_c e_s``);
        - pair part (bits): ``Σ_{c,t} (p_t/N_c) (Σ_{i∈c} x_it w_i B_is)²``: the squares of single cells fold into
          the diagonal part, and the products of two cells set by one value in one cohort (h ≥ 2) are
          ``2 Σ_{i<j} K_ij B_is B_js`` with the sparse upper-triangular ``K``.

        ``structure``: a dict kept by the caller between calls with the same design (the factor cache keeps one
        per reference): the sparsity pattern of ``K`` and the pairs of nonzeros it comes from, which depend on
        the design only, are stored there on the first call and reused (only ``K``'s values change).

        O((R + nnz(K))·P) per call (nnz(K) ≤ C·S·h(h − 1)/2), against O(P³) for :meth:`dense` and the product
        with ``A``."""
        R = self.X.shape[0]
        k = self.k
        C = R // k
        diag = self.alpha.astype(np.float64, copy=True)
        K: sp.csr_matrix | None = None
        if self.pair is not None:
            p, inv_n, w = self.pair
            held = structure if structure is not None else {}
            if "rows" not in held:
                held.update(_pair_structure(self.X, k))
            rows, cols, data = held["rows"], held["cols"], held["data"]
            d = p[cols] * inv_n[rows // k]  # p_t / N_c of each nonzero (cell i, value t)
            a = data * w[rows]
            diag += np.bincount(rows, weights=d * a * a, minlength=R)
            first, second = held["first"], held["second"]
            if first.size:
                values = (d[first] * a[first] * a[second])[held["order"]]
                K = sp.csr_matrix((values, held["indices"], held["indptr"]), shape=(R, R))
        # In blocks of whole cohorts (K and the rank-C parts never mix cohorts), in float64 whatever B holds;
        # blocks of at most max_block/4 elements stay in the L2 cache through the passes over them.
        P = B.shape[1]
        step = max(1, (self.max_block // 4) // max(k * P, 1))
        out = np.zeros(P)
        if self.low_rank and self.low_rank_cells is None:
            raise ValueError("sandwich_diagonal needs the low-rank parts' cell vectors (low_rank_cells)")
        for c0 in range(0, C, step):
            c1 = min(C, c0 + step)
            r0, r1 = c0 * k, c1 * k
            Bb = np.array(B[r0:r1], dtype=np.float64)
            if K is not None:
                out += 2.0 * np.einsum("is,is->s", Bb, np.asarray(K[r0:r1, r0:r1] @ Bb))
            if self.low_rank_cells is not None:
                Bc = Bb.reshape(c1 - c0, k, P)
                for (_, g), v in zip(self.low_rank, self.low_rank_cells, strict=True):
                    T = np.matmul(v[r0:r1].reshape(c1 - c0, 1, k), Bc).reshape(c1 - c0, P)
                    T *= T
                    out += g[c0:c1] @ T
            np.multiply(Bb, Bb, out=Bb)
            out += diag[r0:r1] @ Bb
        return out

    def _apply(self, Y2: np.ndarray) -> np.ndarray:
        Xa = self.augmented
        XY = Xa @ Y2
        out = cast(np.ndarray, Xa.T @ (self.alpha[:, None] * XY))
        for V, g in self.low_rank:
            out = out + V.T @ (g[:, None] * (V @ Y2))
        if self.pair is not None:
            p, inv_n, w = self.pair
            C, S = inv_n.size, p.size
            T = cast(np.ndarray, self.split.T @ (w[:, None] * XY)).reshape(C, S, -1)
            T *= p[None, :, None] * inv_n[:, None, None]
            back = cast(np.ndarray, self.split @ T.reshape(C * S, -1))
            out = out + Xa.T @ (w[:, None] * back)
        return out


def _pair_structure(X: sp.csr_matrix, k: int) -> dict[str, np.ndarray]:
    """The design-only part of the pair part of :meth:`SandwichMeat.sandwich_diagonal`: the nonzeros of ``X``
    (``rows``, ``cols``, ``data``), the pairs ``(first, second)`` of nonzeros of one value in one cohort
    (``rows[first] < rows[second]``), and the CSR pattern of ``K`` with ``order`` mapping pairs to its entries
    (duplicates kept: scipy sums them in products)."""
    coo = sp.coo_matrix(X)
    rows, cols = coo.row.astype(np.int64), coo.col.astype(np.int64)
    group = (rows // k) * X.shape[1] + cols
    order = np.lexsort((rows, group))
    group_sorted = group[order]
    starts = np.flatnonzero(np.r_[True, group_sorted[1:] != group_sorted[:-1]])
    sizes = np.diff(np.r_[starts, group_sorted.size])
    end = np.repeat(starts + sizes, sizes)
    first_all = np.arange(group_sorted.size)
    firsts, seconds = [], []
    for gap in range(1, int(sizes.max(initial=1))):
        f = first_all[first_all + gap < end]
        firsts.append(order[f])
        seconds.append(order[f + gap])
    first = np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)
    second = np.concatenate(seconds) if seconds else np.zeros(0, dtype=np.int64)
    pi, pj = rows[first], rows[second]
    csr_order = np.lexsort((pj, pi))
    R = X.shape[0]
    indptr = np.zeros(R + 1, dtype=np.int64)
    np.cumsum(np.bincount(pi, minlength=R), out=indptr[1:])
    return {"rows": rows, "cols": cols, "data": coo.data.astype(np.float64), "first": first, "second": second,
            "order": csr_order, "indices": pj[csr_order].astype(np.int32), "indptr": indptr.astype(np.int32)}


def per_cohort_sums(X: sp.csr_matrix, o: np.ndarray | None, u: np.ndarray, k: int) -> np.ndarray:
    """``(C, P)``: row ``c`` is ``Xa_cᵀ u_c`` (``Xa = [X, o]``)."""
    C = X.shape[0] // k
    V = np.asarray(cohort_split(X, k, C).T @ u).reshape(C, X.shape[1])
    if o is not None:
        V = np.column_stack([V, (o * u).reshape(C, k).sum(axis=1)])
    return V


def _inv(n: np.ndarray) -> np.ndarray:
    return np.where(n > 0, 1.0 / np.where(n > 0, n, 1.0), 0.0)


def orr_meat(
    X: sp.csr_matrix, o: np.ndarray | None, w: np.ndarray, fit: np.ndarray, Nc: np.ndarray, epsilon: float
) -> SandwichMeat:
    """Meat of the O-RR least squares: ``α = w² c² m / N_c``, ``γ_c = −c²/N_c``, ``v_c = w_c m_c``."""
    C = Nc.size
    k = X.shape[0] // C
    e = np.exp(epsilon)
    cc = (e + k - 1) / (e - 1)
    m = (1 + (e - 1) * np.clip(fit, 0.0, 1.0)) / (e + k - 1)
    alpha = w * w * cc * cc * m * np.repeat(_inv(Nc), k)
    v = w * m
    return SandwichMeat(X, o, k, alpha, [(per_cohort_sums(X, o, v, k), -cc * cc * _inv(Nc))], low_rank_cells=[v])


def bits_meat(
    X: sp.csr_matrix,
    o: np.ndarray | None,
    w: np.ndarray,
    beta: np.ndarray,
    Nc: np.ndarray,
    q_star: float,
    p_star: float,
    hbar: float,
) -> SandwichMeat:
    """Meat of the bit least squares (module docstring), ``p = max(β, 0)``."""
    C = Nc.size
    k = X.shape[0] // C
    S = X.shape[1]
    p = np.maximum(beta, 0.0)
    p_o = float(p[S]) if o is not None else 0.0
    delta = q_star - p_star
    xp = X @ p[:S]
    pi = xp + (p_o * hbar / k)
    r = np.clip(p_star + delta * pi, 0.0, 1.0)
    kappa = hbar * (hbar - 1) / (k * (k - 1)) if k > 1 else 0.0
    inv_n = _inv(Nc)
    alpha = w * w * (r * (1 - r) / delta**2 + pi * pi - xp - p_o * kappa) * np.repeat(inv_n, k)
    cells = [w * pi]
    low = [(per_cohort_sums(X, o, cells[0], k), -inv_n)]
    if p_o * kappa > 0:
        cells.append(w)
        low.append((per_cohort_sums(X, o, w, k), p_o * kappa * inv_n))
    return SandwichMeat(X, o, k, alpha, low, (p[:S], inv_n, w), low_rank_cells=cells)
