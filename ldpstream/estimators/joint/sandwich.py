"""The joint table's covariance with the "Other" nuisance's uncertainty: a stacked M-estimation sandwich
(docs/math/joint.md#the-other-categorys-uncertainty).

The table ``p̂`` solves the EM's score equations ``Σ_u n_u J^T c^u/m_u(p, η) = 0`` (``J``: the free
coordinates), where ``η`` is each variable's Other law per cohort, itself estimated from the same reports:
``η̃_c = (ȳ_c − R_c f)/(1 − Σf)`` (then clipped), with ``f`` the candidates' frequencies, a linear function of
the cohort means ``ȳ`` (:func:`~ldpstream.estimators.joint.likelihood.frequency_jacobian`). Linearizing the
stacked equations (the nuisance equations do not involve ``p``, so the bread is block triangular) gives each
distinct pattern ``u`` the influence

``IF_u = I_θ⁻¹ Jᵀ s_u``, ``s_u = c^u/m_u + Σ_V K^V_{c_u} (x^V_u − ȳ^V_{c_u})``,

with ``K_c = (H_c − F M_c) / (N_c (1 − Σf))``, ``H_c = Σ_{u∈c} n_u a_u z_uᵀ`` (``a_u = ∂(c^u/m_u)/∂ log L_O``,
``z_u = ∂ log L_O(u)/∂η̃_c``), ``F = Σ_c H_c (R_c − η̃_c 1ᵀ)`` and ``M_c = ∂f/∂ȳ_c``; and
``Cov(p̂) = J I_θ⁻¹ Jᵀ (Σ_u n_u s_u s_uᵀ) J I_θ⁻¹ Jᵀ``. Without an Other law ``s_u = c^u/m_u`` and the meat
is the observed information (``Σ n_u c c^T/m²``), so the sandwich reduces to ``J I_θ⁻¹ Jᵀ``.

Every ``H_c`` is one ``(rc × n_c)(n_c × k)`` product over cohort c's patterns (the Other law of a cohort
depends on that cohort's counts only), every correction one ``(n_c × k)(k × rc)`` product.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas

from .em import INFORMATION_CHUNK, PairChannel
from .inference import free_information_inverse
from .likelihood import CHUNK_ROWS, OtherLaw, _cohort_groups

__all__ = ["frequency_score_jacobian", "margin_matrix", "nuisance_corrections", "nuisance_terms",
           "sandwich_covariance"]


def _reports(reports: np.ndarray, idx: np.ndarray, law: OtherLaw) -> np.ndarray:
    """``(n, k)`` float32 report vectors: the bits, or one-hot symbols (exact: 0/1)."""
    if law.bits:
        out: np.ndarray = np.asarray(reports[idx]).astype(np.float32)
        return out
    k = law.law.shape[1]
    onehot: np.ndarray = np.eye(k, dtype=np.float32)[np.asarray(reports[idx], dtype=np.int64)]
    return onehot


def _score_weights(law: OtherLaw, c: int) -> tuple[np.ndarray, np.ndarray]:
    """``(w1, w0)`` with ``z_u = ∂ log L_O(u)/∂η̃_c = w1 ∘ x_u − w0``: bits ``(x − t)/(t(1 − t))``; symbols
    ``x/ĝ − 1/s`` (ĝ = the clipped raw law, s its sum); zero where the law is clipped."""
    t, free = law.law[c], law.free[c].astype(np.float64)
    if law.bits:
        w1 = free / (t * (1.0 - t))
        return w1, w1 * t
    s = float(law.clipped_sum[c])
    return free / (t * s), free / s


def _dscore_dlog_other(lx: np.ndarray, ly: np.ndarray, table: np.ndarray, m: np.ndarray, axis: int) -> np.ndarray:
    """``a_u = ∂(c^u/m_u)/∂ log L_O`` for X's Other (``axis = 0``, last row) or Y's (``axis = 1``, last column),
    ``(n, r·c)`` row-major: ``L_O (∂c/∂L_O)/m − L_O c (∂m/∂L_O)/m²``."""
    n = lx.shape[0]
    r, c = table.shape
    cu = lx[:, :, None] * ly[:, None, :]
    out = np.zeros((n, r, c))
    if axis == 0:
        lo = lx[:, -1]
        out[:, -1, :] = ly * (lo / m)[:, None]
        dm = lo * (ly @ table[-1, :])
    else:
        lo = ly[:, -1]
        out[:, :, -1] = lx * (lo / m)[:, None]
        dm = lo * (lx @ table[:, -1])
    out -= cu * (dm / (m * m))[:, None, None]
    res: np.ndarray = out.reshape(n, r * c)
    return res


def nuisance_corrections(channel: PairChannel, p: np.ndarray, counts: np.ndarray,
                         variables: list[tuple[OtherLaw | None, np.ndarray, np.ndarray]]) -> np.ndarray | None:
    """``(D, r·c)``: ``Σ_V K^V_{c_u} (x^V_u − ȳ^V_{c_u})`` (module docstring); ``variables`` = ``[(law, cohorts,
    reports)]`` of X then Y (``law`` ``None`` without Other). ``None`` when neither variable has an Other law."""
    return nuisance_terms(channel, p, counts, variables)[0]


def margin_matrix(r: int, c: int, axis: int, count: int) -> np.ndarray:
    """``G`` (``count × r·c``): the first ``count`` row sums (``axis = 0``, X's candidates) or column sums
    (``axis = 1``, Y's) of the row-major table."""
    grid = np.zeros((count, r, c))
    for s in range(count):
        if axis == 0:
            grid[s, s, :] = 1.0
        else:
            grid[s, :, s] = 1.0
    out: np.ndarray = grid.reshape(count, r * c)
    return out


def nuisance_terms(channel: PairChannel, p: np.ndarray, counts: np.ndarray,
                   variables: list[tuple[OtherLaw | None, np.ndarray, np.ndarray]]
                   ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(corrections, bread_shift)``: the ``(D, r·c)`` corrections of :func:`nuisance_corrections` and, when a
    variable's frequencies are self-consistent (``law.self_consistent``: ``f = G p̂``, the fitted margins), the
    ``(r·c, r·c)`` term ``Σ_V F_V G_V / (1 − Σf_V)`` that ``f``'s dependence on ``p̂`` adds to the bread
    (docs/math/joint.md#self-consistent-candidate-frequencies-an-experiment-off-by-default);
    ``None`` when no variable is self-consistent."""
    if all(law is None for law, _, _ in variables):
        return None, None
    table = p.reshape(channel.r, channel.c)
    shift_total: np.ndarray | None = None
    rc = channel.r * channel.c
    n = np.asarray(counts, dtype=np.float64)
    out = np.zeros((channel.n_outputs, rc))
    for axis, (law, cohorts, reports) in enumerate(variables):
        if law is None:
            continue
        C, k = law.law.shape
        groups = _cohort_groups(np.asarray(cohorts, dtype=np.int64), C)
        H = np.zeros((C, rc, k))
        sums = np.zeros((C, rc))
        for c, group in enumerate(groups):
            for start in range(0, len(group), CHUNK_ROWS):
                idx = group[start:start + CHUNK_ROWS]
                lx, ly = channel.lx[idx], channel.ly[idx]
                m = np.maximum(((lx @ table) * ly).sum(axis=1), 1e-300)
                a = _dscore_dlog_other(lx, ly, table, m, axis) * n[idx, None]
                H[c] += (a.T.astype(np.float32) @ _reports(reports, idx, law)).astype(np.float64)
                sums[c] += a.sum(axis=0)
            w1, w0 = _score_weights(law, c)
            H[c] = H[c] * w1[None, :] - np.outer(sums[c], w0)
        # F = Σ_c H_c (R_c − η̃_c 1ᵀ): how the table's score moves with f through every cohort's law.
        shift = law.rates - law.raw[:, :, None]  # (C, k, S)
        F = np.einsum("crk,cks->rs", H, shift)
        left = max(1.0 - float(law.frequencies.sum()), 1e-12)
        if law.self_consistent:
            G = margin_matrix(channel.r, channel.c, axis, len(law.frequencies))
            term = F @ G / left
            shift_total = term if shift_total is None else shift_total + term
        M = np.transpose(law.freq_jacobian, (1, 0, 2))  # (C, S, k)
        K = (H - np.einsum("rs,csk->crk", F, M)) / (np.maximum(law.n_c, 1.0)[:, None, None] * left)
        K32 = K.astype(np.float32)
        for c, group in enumerate(groups):
            centre = law.means[c] @ K[c].T
            for start in range(0, len(group), CHUNK_ROWS):
                idx = group[start:start + CHUNK_ROWS]
                out[idx] += (_reports(reports, idx, law) @ K32[c].T).astype(np.float64) - centre
    return out, shift_total


def frequency_score_jacobian(channel: PairChannel, p: np.ndarray, counts: np.ndarray, law: OtherLaw,
                             cohorts: np.ndarray, reports: np.ndarray, axis: int) -> np.ndarray:
    """``(r·c, S)``: ``F = Σ_c H_c (R_c − η̃_c 1ᵀ) = Σ_u n_u a_u Z_uᵀ`` with ``Z_u = (R_c − η̃_c 1ᵀ)ᵀ z_u`` (module
    docstring), i.e. ``−(1 − Σf)`` times the derivative of the table's total score with respect to the candidate
    frequencies ``f`` of the variable on ``axis`` (0: X, 1: Y), through its Other law. Computed without the
    ``(r·c × k)`` matrices ``H_c``: one ``(n_c × k)(k × S)`` product per cohort, then one ``(r·c × n)(n × S)``.
    It gives the Newton step of the self-consistent frequencies (``joint._self_consistent_fit``)."""
    table = p.reshape(channel.r, channel.c)
    n = np.asarray(counts, dtype=np.float64)
    C = law.law.shape[0]
    S = law.rates.shape[2]
    shift = law.rates - law.raw[:, :, None]  # (C, k, S)
    out = np.zeros((channel.r * channel.c, S))
    for c, group in enumerate(_cohort_groups(np.asarray(cohorts, dtype=np.int64), C)):
        w1, w0 = _score_weights(law, c)
        weights = (w1[:, None] * shift[c]).astype(np.float32)
        offset = w0 @ shift[c]
        for start in range(0, len(group), CHUNK_ROWS):
            idx = group[start:start + CHUNK_ROWS]
            lx, ly = channel.lx[idx], channel.ly[idx]
            m = np.maximum(((lx @ table) * ly).sum(axis=1), 1e-300)
            z = (_reports(reports, idx, law) @ weights).astype(np.float64) - offset
            out += _dscore_dlog_other(lx, ly, table, m, axis).T @ (z * n[idx, None])
    return out


def sandwich_covariance(channel: PairChannel, p: np.ndarray, counts: np.ndarray, information: np.ndarray,
                        corrections: np.ndarray | None, bread_shift: np.ndarray | None = None) -> np.ndarray:
    """``J B⁻¹ Jᵀ (Σ_u n_u s_u s_uᵀ) J B⁻ᵀ Jᵀ`` with ``s_u = c^u/m_u + corrections_u`` (module docstring) and the
    bread ``B = I_θ + Jᵀ bread_shift J`` (``I_θ`` without self-consistent frequencies); without corrections,
    ``J I_θ⁻¹ Jᵀ``."""
    size = information.shape[0]
    J, info_free, inv = free_information_inverse(information)
    if bread_shift is not None:
        inv = np.linalg.pinv(info_free + J.T @ bread_shift @ J)
    if corrections is None:
        meat_free = info_free
    else:
        n = np.asarray(counts, dtype=np.float64)
        table = p.reshape(channel.r, channel.c)
        upper = np.zeros((size, size))
        for start in range(0, channel.n_outputs, INFORMATION_CHUNK):
            sl = slice(start, start + INFORMATION_CHUNK)
            lx, ly = channel.lx[sl], channel.ly[sl]
            m = np.maximum(((lx @ table) * ly).sum(axis=1), 1e-300)
            s = (lx[:, :, None] * ly[:, None, :]).reshape(-1, size) / m[:, None] + corrections[sl]
            s *= np.sqrt(n[sl])[:, None]
            upper += blas.dsyrk(1.0, s.T, trans=0)
        meat = np.triu(upper) + np.triu(upper, 1).T
        meat_free = J.T @ meat @ J
    cov_free = inv @ meat_free @ inv.T
    cov: np.ndarray = J @ cov_free @ J.T
    sym: np.ndarray = (cov + cov.T) / 2.0
    return sym
