"""The joint table of two direct members (k-RR, k-RAPPOR) by unbiased inversion of the full alphabets'
channels, aggregated to the published candidates + "Other" (docs/math/joint.md#direct-members-the-full-alphabet).

A direct mechanism's alphabet is closed and known, so its Other holds known values (the alphabet minus the
candidates) and the full ``k_X × k_Y`` joint is identified: the channel is invertible. Per report ``R`` of a
direct member, the cell indicator ``x_R[v]`` (k-RR: the report is symbol ``v``; k-RAPPOR: bit ``v`` is set) has
``E[x_R[v] | value w] = lo + Δ·[w = v]`` (k-RR ``lo = 1/(e^ε + k − 1)``, ``Δ = hi − lo``; k-RAPPOR ``lo = p*``,
``Δ = q* − p*``), so

``a_R[s] = (x_R[v_s] − lo)/Δ`` for the candidates ``v_s`` and ``a_R[last] = 1 − Σ_{s<last} a_R[s]``

(the last category: "Other", or the last candidate when the candidates are the whole alphabet) has
``E[a_R | w] = A e_w``, the one-hot of ``w``'s published category (``A``: the aggregation of the alphabet into
the categories). The two reports of a client are independent given its pair of values, so the outer product
``t_u = a_{R_X} ⊗ a_{R_Y}`` has ``E[t_u | w, w'] = A_X e_w ⊗ A_Y e_{w'}`` and the pattern average

``T̂ = Σ_u n_u t_u / N``  (eq. J1)

is unbiased for the published table ``A_X P A_Yᵀ`` whatever the full joint ``P``, without any model of what
Other hides (Fanti, Pihur, Erlingsson 2016 §4.B's Other law, and the product of two such laws for Other ×
Other, are not used). For k-RR it is the aggregation of the linear inversion ``Q_X⁻ᵀ (N_pairs/N) Q_Y⁻¹``. The
``t_u`` are i.i.d. over clients, so its covariance is estimated by

``Cov(T̂) = (Σ_u n_u t_u t_uᵀ / N − T̂ T̂ᵀ) / N``  (eq. J2),

which for k-RR is the multinomial covariance ``(K diag(m̂) Kᵀ − T̂T̂ᵀ)/N`` of the linearly aggregated
inversion at the observed report-pair shares ``m̂``. Every cell sums over patterns, in blocks: no loop over
reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.base import Mechanism

from ..dispatch import DesignCache
from .likelihood import dictionary_design, other_regressor, star_rates

__all__ = [
    "DirectTable",
    "applies",
    "applies_hashed",
    "category_estimates",
    "dictionary_category_estimates",
    "direct_joint_table",
    "hidden_values",
]

#: Patterns per block of the covariance's accumulation (bounds memory to a block × (rc)).
BLOCK = 65_536


def _is_direct(mechanism: Mechanism) -> bool:
    return not bool(getattr(mechanism, "needs_value_table", True))


def hidden_values(mechanism: Mechanism, values: Sequence[Any], other: bool) -> int | None:
    """How many alphabet values Other holds for a direct member (``0`` without Other); ``None``: not direct."""
    if not _is_direct(mechanism):
        return None
    return int(mechanism.k) - len(set(int(v) for v in values)) if other else 0


def _partitions(mechanism: Mechanism, values: Sequence[Any], other: bool) -> bool:
    """The member's categories partition its alphabet: it has Other, or its candidates are every value."""
    return other or len(set(int(v) for v in values)) == int(mechanism.k)


def applies(mx: Mechanism, values_x: Sequence[Any], other_x: bool, my: Mechanism, values_y: Sequence[Any],
            other_y: bool) -> bool:
    """Whether :func:`direct_joint_table` decodes this pair: both members direct, each one's categories
    partitioning its alphabet, and at least one Other holding two values or more (an Other of one value, or
    none, has an exact law, and the EM's maximum likelihood, which stays on the simplex, is kept there)."""
    if not (_is_direct(mx) and _is_direct(my)):
        return False
    if not (_partitions(mx, values_x, other_x) and _partitions(my, values_y, other_y)):
        return False
    hx, hy = hidden_values(mx, values_x, other_x), hidden_values(my, values_y, other_y)
    return (hx or 0) >= 2 or (hy or 0) >= 2


def _rates(mechanism: Mechanism) -> tuple[float, float]:
    """``(lo, Δ)`` of a direct mechanism's cell indicator."""
    if str(mechanism.report_kind) == "bits":
        hi, lo = star_rates(mechanism)
    else:
        hi, lo = (float(r) for r in mechanism.response_rates)
    if not hi > lo:
        raise ParameterError(f"{mechanism.name}: the channel is not invertible (hi ≤ lo)")
    return lo, hi - lo


def category_estimates(mechanism: Mechanism, values: Sequence[Any], reports: np.ndarray, other: bool) -> np.ndarray:
    """``(D, S[+1])``: each pattern's ``a_R`` of the module docstring, the unbiased estimate of the one-hot of
    its value's category (candidates ``values`` in order, then Other when ``other``)."""
    index = np.asarray([int(v) for v in values], dtype=np.int64)
    k = int(mechanism.k)
    if index.size == 0 or index.min() < 0 or index.max() >= k:
        raise ParameterError(f"{mechanism.name}: values must be alphabet indices in 0..{k - 1}")
    lo, delta = _rates(mechanism)
    rep = np.asarray(reports)
    if rep.ndim == 2:
        if rep.shape[1] != k:
            raise ParameterError(f"{mechanism.name}: bit reports must be (D, {k})")
        hits = rep[:, index].astype(np.float64)
    else:
        hits = (rep.astype(np.int64)[:, None] == index[None, :]).astype(np.float64)
    est = (hits - lo) / delta
    if other:
        out: np.ndarray = np.column_stack([est, 1.0 - est.sum(axis=1)])
        return out
    est[:, -1] = 1.0 - est[:, :-1].sum(axis=1)
    return est


@dataclass(frozen=True)
class DirectTable:
    """The unbiased table (eq. J1; it sums to 1, cells may be negative) and its covariance (eq. J2)."""

    table: np.ndarray
    covariance: np.ndarray


def direct_joint_table(ax: np.ndarray, ay: np.ndarray, counts: np.ndarray) -> DirectTable:
    """Eqs. J1 and J2 from the patterns' ``(D, r)`` and ``(D, c)`` category estimates and their counts."""
    if ax.shape[0] != ay.shape[0] or ax.shape[0] != len(counts):
        raise ParameterError("direct joint table: one row of estimates per pattern")
    w = np.asarray(counts, dtype=np.float64)
    total = float(w.sum())
    if total <= 0:
        raise ParameterError("no report pairs to decode")
    r, c = ax.shape[1], ay.shape[1]
    table = (ax * (w / total)[:, None]).T @ ay  # Σ_u n_u a_X a_Yᵀ / N
    second = np.zeros((r * c, r * c))
    for start in range(0, len(w), BLOCK):
        stop = start + BLOCK
        t = (ax[start:stop, :, None] * ay[start:stop, None, :]).reshape(-1, r * c)
        second += (t * (w[start:stop] / total)[:, None]).T @ t
    flat = table.ravel()
    cov = (second - np.outer(flat, flat)) / total
    return DirectTable(table, (cov + cov.T) / 2.0)


#: A member's dictionary design for :func:`dictionary_category_estimates`: ``(truth (C, k, M), positions)``, or
#: ``None`` for a direct member.
Design = tuple[np.ndarray, np.ndarray] | None


def hashed_designs(mx: Mechanism, values_x: Sequence[Any], other_x: bool, dictionary_x: Sequence[Any] | None,
                   my: Mechanism, values_y: Sequence[Any], other_y: bool, dictionary_y: Sequence[Any] | None,
                   design_cache: DesignCache | None = None) -> tuple[Design, Design] | None:
    """The two members' designs when :func:`dictionary_category_estimates` decodes this pair
    (docs/math/joint.md#hashed-members-with-a-well-determined-dictionary): both members have Other (the pairs
    rule 2 flags) and at least one is hashed, each either direct (design ``None``) or hashed with a well-determined
    dictionary holding its candidates; else ``None``. Each design is computed once (its well-determined check
    costs an eigendecomposition of the dictionary's Gram matrix; the designs come from ``design_cache`` when
    given)."""
    if not (other_x and other_y) or (_is_direct(mx) and _is_direct(my)):
        return None
    designs: list[Design] = []
    for m, v, d in ((mx, values_x, dictionary_x), (my, values_y, dictionary_y)):
        if _is_direct(m):
            designs.append(None)
            continue
        design = dictionary_design(m, v, d, design_cache)
        if design is None:
            return None
        designs.append(design)
    return designs[0], designs[1]


def applies_hashed(mx: Mechanism, values_x: Sequence[Any], other_x: bool, dictionary_x: Sequence[Any] | None,
                   my: Mechanism, values_y: Sequence[Any], other_y: bool, dictionary_y: Sequence[Any] | None) -> bool:
    """Whether :func:`hashed_designs` applies."""
    return hashed_designs(mx, values_x, other_x, dictionary_x, my, values_y, other_y, dictionary_y) is not None


def dictionary_category_estimates(mechanism: Mechanism, values: Sequence[Any], dictionary: Sequence[Any] | None,
                                  cohorts: np.ndarray, reports: np.ndarray, counts: np.ndarray,
                                  design: Design = None) -> np.ndarray:
    """``(D, S + 1)`` unbiased estimates of each pattern's category one-hot (candidates, then Other) for a member
    with Other: :func:`category_estimates` for a direct mechanism; for a hashed one, the per-report least squares
    against its dictionary's design with the "other" regressor (eq. J3 of docs/math/joint.md):
    ``θ̂_R = G⁻¹ X_cᵀ (x_R − lo)/Δ``, ``G = Σ_c π̂_c X_cᵀ X_c`` (``π̂_c`` the member's cohort shares in the patterns,
    ``X_c = [H_c, o]``; ``design``: :func:`hashed_designs`'s, else computed), whose candidates' rows are
    ``a_R[s]``; ``a_R[Other] = 1 − Σ_s a_R[s]``. Unbiased for every dictionary value (and for mass outside it that
    spreads as the "other" regressor assumes)."""
    if _is_direct(mechanism):
        return category_estimates(mechanism, values, reports, True)
    if design is None:
        design = dictionary_design(mechanism, values, dictionary)
    if design is None:
        raise ParameterError(f"{mechanism.name}: no well-determined dictionary holding the candidates")
    truth, positions = design
    C, k, M = truth.shape
    lo, delta = _rates(mechanism)
    X = np.concatenate([truth.astype(np.float64), np.full((C, k, 1), other_regressor(mechanism, truth))], axis=2)
    cohorts = np.asarray(cohorts, dtype=np.int64)
    w = np.asarray(counts, dtype=np.float64)
    share = np.bincount(cohorts, weights=w, minlength=C) / max(float(w.sum()), 1.0)
    gram = np.einsum("c,cjm,cjn->mn", share, X, X)
    # W_c = [G⁻¹ X_cᵀ]_{candidates} / Δ: (C, S, k); a_R = W_c x_R − lo W_c 1.
    solved = np.linalg.solve(gram, X.transpose(0, 2, 1).reshape(C, M + 1, k).transpose(1, 0, 2).reshape(M + 1, -1))
    W = solved.reshape(M + 1, C, k)[positions].transpose(1, 0, 2) / delta  # (C, S, k)
    offset = lo * W.sum(axis=2)  # (C, S)
    rep = np.asarray(reports)
    if rep.ndim == 2:
        est = np.empty((len(cohorts), len(positions)))
        order = np.argsort(cohorts, kind="stable")
        bounds = np.searchsorted(cohorts[order], np.arange(C + 1))
        for c in range(C):
            idx = order[bounds[c]:bounds[c + 1]]
            for start in range(0, len(idx), BLOCK):
                part = idx[start:start + BLOCK]
                est[part] = rep[part].astype(np.float64) @ W[c].T - offset[c]
    else:
        est = W[cohorts, :, rep.astype(np.int64)] - offset[cohorts]
    out: np.ndarray = np.column_stack([est, 1.0 - est.sum(axis=1)])
    return out
