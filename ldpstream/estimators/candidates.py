"""Decoding hashed mechanisms (O-RR, O-RAPPOR, RAPPOR) against a list of S candidate strings
(docs/math/estimators.md#candidate-decoders).

Inputs are plain arrays: the ``(C, width)`` count sketch (layout of :mod:`ldpstream.mechanisms.base`), the
sparse 0/1 design matrix ``X`` of shape ``(C·k, S)`` with cohort-major rows (``X[c·k + y, s] = 1`` when
candidate ``s`` maps to symbol or bit ``y`` in cohort ``c``; never densified), and the channel parameters
(ε for O-RR; q*, p* for bit mechanisms). Responses per cohort ``c`` of ``N_c`` reports, ``E z = X p``: O-RR
``z_cy = ((e^ε + k − 1) n_cy / N_c − 1)/(e^ε − 1)``, bits ``z_cj = (c_cj / N_c − p*)/(q* − p*)``
(docs/math/estimators.md#design-matrix-and-responses).

An optional "other" regressor (every string outside the list, hashing uniformly: ``1/k`` per O-RR response,
``h̄/k`` per bit response) has the ``residual`` (unexplained mass) as its coefficient. Methods:

- ``"ls"``: weighted least squares, weights ``1/Var z`` at a pilot fit, sandwich covariance
  (:mod:`ldpstream.estimators.numerics.sandwich`), Wald intervals;
- ``"nnls"``: the same constrained to ``p >= 0``, ``Σ p <= 1`` (with "other": the simplex), by FISTA, warm
  started from ``start`` by a face solve;
- ``"project"``: least squares then Euclidean projection onto the simplex (Kairouz et al.'s decoder);
- ``"mle"``: maximum likelihood over the candidates plus "other" (O-RR exact, bits composite) by
  :func:`ldpstream.estimators.numerics.newton_mle.newton_multinomial`; standard errors from the information
  restricted to the simplex (O-RR) or the least-squares sandwich (bits).

The constrained decoders publish the least-squares interval ``β̂_LS ± 1.96 SE_LS`` clipped to [0, 1]
(``interval_method = "ls-sandwich"``; docs/math/estimators.md#intervals-of-the-constrained-candidate-decoders)
and its sandwich standard errors (O-RR "mle": the information ones). Gram matrices go through
:class:`ldpstream.estimators.numerics.gram.WeightedGram` (exact up to ``exact_se_max`` candidates, the cavity
approximation beyond); a ``factor_cache`` reuses an earlier decode's factors
(:mod:`ldpstream.estimators.factor_cache`). The detection floor is ``Φ⁻¹(1 − 0.05/S)`` times the median
candidate standard error.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import check_epsilon
from ldpstream.mechanisms.base import CANDIDATE_METHODS

from .channels import AffineChannel, compressed_affine_channel
from .estimate import ConfidenceInterval, Estimate, detection_floor
from .factor_cache import CachedLeastSquares, FactorCache
from .misfit import pearson_misfit
from .numerics.least_squares import WeightedLeastSquares, face_solve_constrained_ls, fista_constrained_ls
from .numerics.newton_mle import newton_multinomial
from .numerics.sandwich import bits_meat, orr_meat
from .numerics.simplex import project_capped_simplex, project_simplex
from .numerics.variance import affine_constrained_variances, bit_variance, krr_variance

__all__ = [
    "CandidateMethod",
    "decode_bits",
    "decode_orappor",
    "decode_orr",
    "decode_rappor",
    "family_variance",
]

CandidateMethod = Literal["ls", "nnls", "project", "mle"]
_METHODS = CANDIDATE_METHODS
_Z95 = 1.959963984540054  # Φ⁻¹(0.975)


def _design(design: Any, rows: int) -> sp.csr_matrix:
    X = sp.csr_matrix(design, dtype=np.float64)
    if X.shape[0] != rows:
        raise ParameterError(f"design matrix has {X.shape[0]} rows, the sketch implies {rows} (C·k)")
    return X


def _top(values: np.ndarray, S: int, n_top: int) -> np.ndarray:
    """Indices of the ``n_top`` largest of the first ``S`` values."""
    n_top = min(int(n_top), S)
    if n_top <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.argpartition(-values[:S], n_top - 1)[:n_top]


def _warm_start(start: ArrayLike | None, size: int) -> np.ndarray | None:
    """``start`` as the float vector of the ``size`` parameters (candidates, then "other" when decoded), or
    None; a start of another size is refused (it belongs to another candidate list or "other" setting)."""
    if start is None:
        return None
    x0 = np.asarray(start, dtype=np.float64).ravel()
    if x0.size != size or not np.all(np.isfinite(x0)):
        raise ParameterError(f"a warm start needs {size} finite values (candidates, then other), got {x0.size}")
    return x0


def _held_bytes(held: Sequence[Any] | None) -> int:
    """Bytes of what a decoder keeps in the factor cache between decodes (Newton's informations, nnls faces)."""
    return 0 if held is None else sum(int(h.nbytes) for h in held)


def _count_growth(cache: FactorCache | None, before: int, after: int) -> None:
    """Tell the factor cache that what it holds grew from ``before`` to ``after`` bytes (its bound check)."""
    if cache is not None and after > before:
        cache.grown(after - before)


def _on_simplex(x: np.ndarray) -> np.ndarray:
    """``x`` clipped at 0 and scaled to sum to one (uniform if nothing is positive)."""
    pos = np.maximum(x, 0.0)
    total = float(pos.sum())
    return pos / total if total > 0 else np.full(x.size, 1.0 / x.size)


def _decode(
    *,
    kind: str,
    z: np.ndarray,
    X: sp.csr_matrix,
    other_col: np.ndarray,
    var_fn: Callable[[np.ndarray], np.ndarray],
    meat_fn: Callable[[WeightedLeastSquares | CachedLeastSquares], Callable[[np.ndarray], np.ndarray]],
    channel_fn: Callable[[bool], tuple[AffineChannel, np.ndarray, float]],
    n_reports: int,
    method: str,
    other: bool,
    labels: Sequence[Any] | None,
    tol: float,
    max_iter: int,
    exact_se_max: int,
    se_top: int,
    factor_cache: FactorCache | None,
    cache_key: Hashable | None,
    start: ArrayLike | None = None,
    counts: np.ndarray | None = None,
    cohort_reports: np.ndarray | None = None,
    cells_per_value: float = 1.0,
    fixed_cohort_sums: bool = False,
    pearson_var_fn: Callable[[np.ndarray], np.ndarray] | None = None,
    slope_fn: Callable[[np.ndarray], np.ndarray] | None = None,
    inflate: bool = True,
    family_fn: Callable[[np.ndarray, np.ndarray], float] | None = None,
) -> Estimate:
    if method not in _METHODS:
        raise ParameterError(f"unknown method {method!r}; use one of {_METHODS}")
    S = X.shape[1]
    if labels is not None and len(labels) != S:
        raise ParameterError(f"{len(labels)} labels for {S} candidates")
    info: dict[str, Any] = {"candidates": S, "other": bool(other)}
    residual_se: float | None = None
    wls: WeightedLeastSquares | CachedLeastSquares
    if factor_cache is not None and factor_cache.enabled and cache_key is not None and exact_se_max >= S:
        wls = CachedLeastSquares(z, X, other_col if other else None, var_fn, cache=factor_cache,
                                 key=(cache_key, kind, bool(other), X.shape), exact_max=exact_se_max,
                                 counts=counts, cohort_reports=cohort_reports)
    else:
        wls = WeightedLeastSquares(z, X, other_col if other else None, var_fn, exact_max=exact_se_max)
    beta = wls.beta
    x0 = _warm_start(start, beta.size) if method in ("mle", "nnls") else None
    if x0 is not None:
        info["warm_start"] = True
    if method == "mle":
        ch, counts, ll_shift = channel_fn(other)
        # Uniform start for the EM by default. Starting it from the projected least-squares fit (mixed with 1-30%
        # uniform) was measured at S = 256 (k = 4096, ε = 1) and S = 4096 (k = 128, ε = 4): 421-665 SQUAREM
        # iterations against 309-578 from uniform, no consistent gain, so it is not used.
        # EM (SQUAREM) from the uniform distribution, then projected Newton steps on the information until the
        # duality-gap certificate is below 5e-7 nats (every coordinate within 1e-3 model-based standard errors of
        # the maximizer); from a previous solution (``start``), Newton alone, which moves coordinates away
        # from 0 as well (docs/math/estimators.md#maximum-likelihood-by-projected-newton).
        held = (factor_cache.newton_held((cache_key, kind, "newton", bool(other), X.shape))
                if isinstance(wls, CachedLeastSquares) and factor_cache is not None else None)
        before = _held_bytes(held)
        res = newton_multinomial(counts, ch, p0=None if x0 is None else _on_simplex(x0), em_tol=tol,
                                 em_max_iter=max_iter, held=held)
        _count_growth(factor_cache, before, _held_bytes(held))
        est = res.p
        # converged: the gap certificate (Newton), or else EM's own rule, as before Newton
        info.update(n_iter=res.n_iter, em_iter=res.em_iter, converged=res.converged or res.em_converged,
                    certified=res.converged, gap=res.gap, log_likelihood=res.log_likelihood + ll_shift)
    elif method == "ls":
        est = beta
    elif method == "project":
        est = project_simplex(beta)
    else:  # nnls
        face = None
        if x0 is not None:
            # from a previous solution: the KKT system on its face, certified, else FISTA
            # (docs/math/estimators.md#non-negative-least-squares)
            Ga = wls.dense_gram()
            if Ga is not None:
                # the face factorizations are kept with the reference (its Ga): the next refresh's face is found
                factors = wls.ref.face_factors if isinstance(wls, CachedLeastSquares) else None
                before = _held_bytes(None if factors is None else list(factors.values()))
                face = face_solve_constrained_ls(wls.matvec, lambda F: Ga[np.ix_(F, F)], wls.b, x0, simplex=other,
                                                 factors=factors)
                _count_growth(factor_cache, before, _held_bytes(None if factors is None else list(factors.values())))
        if face is not None:
            est = face
            info.update(n_iter=0, nnls_solver="face-kkt")
        else:
            proj = project_simplex if other else project_capped_simplex
            est, n_iter = fista_constrained_ls(wls.matvec, wls.b, proj, beta if x0 is None else x0,
                                               max_iter=max_iter, lipschitz=wls.lipschitz())
            info.update(n_iter=n_iter, nnls_solver="fista")
    top = _top(est, S, se_top)
    # a grown window's sandwich variances from an earlier exact computation (factor_cache module docstring), else
    # computed
    held_var = wls.reused_variances() if isinstance(wls, CachedLeastSquares) else None
    se_ls = np.sqrt(held_var if held_var is not None else wls.variances(top, meat_fn(wls)))
    info.update(wls.info if isinstance(wls, CachedLeastSquares) else wls.gram.info)
    family = 0.0 if family_fn is None else family_fn(beta[:S], se_ls[:S] ** 2)
    if family_fn is not None:
        info["family_variance"] = family
    misfit = None
    if cohort_reports is not None:
        fitted = wls.fitted()
        width = X.shape[0] // max(len(cohort_reports), 1)
        variance = wls.cell_variances() if pearson_var_fn is None else pearson_var_fn(fitted)
        misfit = pearson_misfit(z, fitted, variance, beta.size, width=width,
                                reports=np.repeat(cohort_reports, width), cells_per_value=cells_per_value,
                                fixed_cohort_sums=fixed_cohort_sums)
    # quasi-likelihood: when the fit is rejected, every standard error times sqrt(φ̂) (docs/math/misfit.md)
    factor = misfit.inflation if misfit is not None and inflate else 1.0
    # a finite hash family (OLH): the unlisted values' collisions with each candidate as a variance over families,
    # the larger of it and the measured dispersion (both account for the same excess; docs/math/mechanisms.md#olh)
    se_ls = _with_family(se_ls, factor, family)
    se = se_ls
    if method == "mle" and kind == "orr":
        # the multinomial likelihood of O-RR is exact: its observed information gives the model-based SEs, from an
        # earlier decode's when its weights n/m² are close enough for a stated bound (factor_cache module docstring)
        m = np.maximum(ch.forward(est), 1e-300)
        d = counts / m**2
        info_key = (cache_key, "orr-information", bool(other), X.shape)
        reused = (factor_cache.information_variances(info_key, d)
                  if isinstance(wls, CachedLeastSquares) and factor_cache is not None else None)
        if reused is not None:
            var_info, bound = reused
            info.update(information_variances="reused", information_se_bound=bound)
        else:
            var_info = affine_constrained_variances(ch, d, exact_max=exact_se_max, top=top, info=info)
            if isinstance(wls, CachedLeastSquares) and factor_cache is not None:
                factor_cache.add_information(info_key, d, var_info)
                info["information_variances"] = "exact"
        se = _with_family(np.sqrt(var_info), factor, family)
    freq = est[:S]
    if other:
        residual, residual_se = float(est[S]), float(se[S])
    else:
        residual = float(1.0 - est[:S].sum()) if method == "mle" else float(1.0 - beta.sum())
    se = se[:S]
    interval = unclipped = None
    slopes = None
    interval_method = "wald"
    if method != "ls":
        # the least-squares estimate's interval (sandwich SE; its coverage is nominal) beside the constrained
        # point, clipped to [0, 1] (docs/math/estimators.md#intervals-of-the-constrained-candidate-decoders);
        # the bounds before clipping are kept for a window's widening (they hold β̂ where both are clipped)
        # the score form where the sandwich's slope in f_s is known: the interval {f : (β̂ − f)² ≤ z²(v + b(f − β̂))},
        # centred z²b/2 above β̂ (docs/math/estimators.md#small-counts-of-the-candidate-decoders)
        slopes = None if slope_fn is None else wls.variance_slopes(slope_fn(wls.fitted()))
        shift = np.zeros(S) if slopes is None else 0.5 * _Z95**2 * slopes[:S] * factor**2
        half = np.sqrt(shift**2 + (_Z95 * se_ls[:S]) ** 2)
        unclipped = ConfidenceInterval(beta[:S] + shift - half, beta[:S] + shift + half)
        interval = ConfidenceInterval(np.clip(unclipped.low, 0.0, 1.0), np.clip(unclipped.high, 0.0, 1.0))
        interval_method = "ls-sandwich"
    floor = detection_floor(float(np.median(se)), S) if S else None
    return Estimate(frequencies=freq, std_errors=se, n_reports=n_reports, method=f"{kind}/{method}", labels=labels,
                    residual=residual, residual_std_error=residual_se, detection_floor=floor, info=info,
                    interval=interval, interval_method=interval_method, unclipped_interval=unclipped,
                    misfit=misfit, interval_shift=None if interval is None or slopes is None else shift)


def decode_orr(
    sketch: ArrayLike,
    design: Any,
    epsilon: float,
    method: CandidateMethod = "project",
    *,
    other: bool = True,
    labels: Sequence[Any] | None = None,
    tol: float = 1e-8,
    max_iter: int = 5000,
    exact_se_max: int = 1024,
    se_top: int = 16,
    factor_cache: FactorCache | None = None,
    cache_key: Hashable | None = None,
    start: ArrayLike | None = None,
    inflate: bool = True,
    finite_family: bool = False,
) -> Estimate:
    """Decode an O-RR ``(C, k)`` symbol sketch against the candidates of ``design`` (C·k × S, sparse).

    See the module docstring for the estimators; ``other`` adds the unexplained-mass term. ``factor_cache``
    and ``cache_key`` (a hashable name of the design, e.g. the mechanism and its candidate list): reuse the
    weighted Gram factors of earlier decodes of the same design (:mod:`ldpstream.estimators.factor_cache`).
    ``start``: a previous solution of the same design (the candidates' frequencies, then "other" when
    ``other``), from which ``"nnls"`` and ``"mle"`` iterate instead of their default start (they converge to the
    same optimum: docs/math/estimators.md#warm-starts-of-the-iterative-decoders); ignored by ``"ls"`` and
    ``"project"`` (closed form). ``inflate``: standard errors times the fit's
    :attr:`~ldpstream.estimators.misfit.Misfit.inflation` (False: the model's alone; the misfit is measured either way).
    ``finite_family``: every variance plus the collisions of the values outside the list with each candidate over
    the C hash functions, :func:`family_variance` (OLH; docs/math/mechanisms.md#olh).
    """
    counts = np.asarray(sketch, dtype=np.float64)
    if counts.ndim != 2:
        raise ParameterError("O-RR sketch must be (C, k)")
    eps = check_epsilon(epsilon)
    C, k = counts.shape
    X = _design(design, C * k)
    Nc = counts.sum(axis=1)
    N = float(Nc.sum())
    if N <= 0:
        raise ParameterError("no reports to decode")
    e = np.exp(eps)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = ((e + k - 1) * counts / Nc[:, None] - 1) / (e - 1)
    z = np.where(np.isfinite(z), z, 0.0).ravel()
    Nrow = np.repeat(Nc, k)

    def var_fn(fit: np.ndarray) -> np.ndarray:
        var = krr_variance(np.clip(fit, 0.0, 1.0), np.where(Nrow > 0, Nrow, 1.0), eps, k)
        return np.where(Nrow > 0, var, np.inf)

    def slope_fn(fit: np.ndarray) -> np.ndarray:
        # d var_fn / d fit, unclipped: ((e + k − 1)/(e − 1)) (1 − 2m)/N (the score form's b, _decode)
        m = ((e - 1) * np.clip(fit, 0.0, 1.0) + 1) / (e + k - 1)
        return np.where(Nrow > 0, (e + k - 1) / (e - 1) * (1 - 2 * m) / np.where(Nrow > 0, Nrow, 1.0), 0.0)

    def pearson_var_fn(fit: np.ndarray) -> np.ndarray:
        # a cohort's cells are multinomial: Pearson's statistic divides by N m, not N m (1 − m) (docs/math/misfit.md)
        m = ((e - 1) * np.clip(fit, 0.0, 1.0) + 1) / (e + k - 1)
        out: np.ndarray = var_fn(fit) / (1 - m)
        return out

    def channel_fn(with_other: bool) -> tuple[AffineChannel, np.ndarray, float]:
        extra = [1.0 / (C * k)] if with_other else None
        return compressed_affine_channel(X, [(e - 1) / (C * (e + k - 1))], [1 / (C * (e + k - 1))], extra,
                                   [counts.ravel()])

    return _decode(
        kind="orr", z=z, X=X, other_col=np.full(C * k, 1.0 / k), var_fn=var_fn,
        meat_fn=lambda wls: orr_meat(X, wls.o, wls.w, wls.fitted(), Nc, eps),
        channel_fn=channel_fn, n_reports=round(N), method=method, other=other, labels=labels,
        tol=tol, max_iter=max_iter, exact_se_max=exact_se_max, se_top=se_top, factor_cache=factor_cache,
        cache_key=cache_key, start=start, counts=counts, cohort_reports=Nc, fixed_cohort_sums=True,
        pearson_var_fn=pearson_var_fn, slope_fn=slope_fn, inflate=inflate,
        family_fn=(lambda f, v: family_variance(counts, eps, f, v)) if finite_family else None,
    )


def _with_family(se: np.ndarray, factor: float, family: float) -> np.ndarray:
    """``sqrt(max(se² φ, se² + family))`` with ``φ = factor²`` (``family`` 0: ``se · factor``)."""
    if family <= 0:
        return se * factor
    out: np.ndarray = np.sqrt(np.maximum(se**2 * factor**2, se**2 + family))
    return out


def family_variance(counts: np.ndarray, epsilon: float, listed: np.ndarray, listed_var: np.ndarray) -> float:
    """Eq. OLH3 of docs/math/mechanisms.md#olh: ``F₂' / (C (k − 1))``, the variance over hash families of a
    candidate's collisions with the values outside the list, where ``F₂' = F₂ − Σ_s (f̂_s² − v_s)⁺`` and
    ``F₂ = Σ_v f_v²`` is estimated from the sketch alone (eq. OLH2: each cohort's unbiased sum of squared symbol
    shares, ``n_cy(n_cy − 1) / (n_c(n_c − 1))``, inverted through k-RR)."""
    C, k = counts.shape
    nc = counts.sum(axis=1)
    ok = nc >= 2
    if not np.any(ok):
        return 0.0
    e = float(np.exp(epsilon))
    p, q = e / (e + k - 1), 1.0 / (e + k - 1)
    u = (counts[ok] * (counts[ok] - 1)).sum(axis=1) / (nc[ok] * (nc[ok] - 1))
    pi2 = (u - k * q * q - 2 * q * (p - q)) / (p - q) ** 2
    f2 = (float(np.average(pi2, weights=nc[ok])) - 1.0 / k) / (1.0 - 1.0 / k)
    outside = f2 - float(np.sum(np.maximum(np.asarray(listed) ** 2 - np.asarray(listed_var), 0.0)))
    return float(min(max(outside, 0.0), 1.0) / (C * (k - 1)))


def decode_bits(
    sketch: ArrayLike,
    design: Any,
    q_star: float,
    p_star: float,
    method: CandidateMethod = "project",
    *,
    other: bool = True,
    bits_per_string: float | None = None,
    labels: Sequence[Any] | None = None,
    tol: float = 1e-8,
    max_iter: int = 5000,
    exact_se_max: int = 1024,
    se_top: int = 16,
    factor_cache: FactorCache | None = None,
    cache_key: Hashable | None = None,
    start: ArrayLike | None = None,
    inflate: bool = True,
) -> Estimate:
    """Decode an O-RAPPOR / RAPPOR ``(C, k + 1)`` bit sketch against the candidates of ``design``.

    ``bits_per_string`` (h̄, for the "other" term) defaults to ``nnz(X)/(S·C)``, the mean number of bits a
    candidate sets per cohort (≈ h, less Bloom collisions). ``factor_cache``, ``cache_key``, ``start``,
    ``inflate``: as :func:`decode_orr`.
    """
    arr = np.asarray(sketch, dtype=np.float64)
    if arr.ndim != 2:
        raise ParameterError("bit sketch must be (C, k + 1)")
    q_star, p_star = float(q_star), float(p_star)
    if not (0 <= p_star <= 1 and 0 <= q_star <= 1) or q_star == p_star:
        raise ParameterError(f"need distinct rates in [0, 1], got q*={q_star}, p*={p_star}")
    C, k = arr.shape[0], arr.shape[1] - 1
    X = _design(design, C * k)
    S = X.shape[1]
    Nc = arr[:, 0]
    bits = arr[:, 1:]
    N = float(Nc.sum())
    if N <= 0:
        raise ParameterError("no reports to decode")
    delta = q_star - p_star
    hbar = float(bits_per_string) if bits_per_string is not None else float(X.sum()) / max(S * C, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (bits / Nc[:, None] - p_star) / delta
    z = np.where(np.isfinite(z), z, 0.0).ravel()
    Nrow = np.repeat(Nc, k)

    def var_fn(fit: np.ndarray) -> np.ndarray:
        var = bit_variance(np.clip(fit, 0.0, 1.0), np.where(Nrow > 0, Nrow, 1.0), q_star, p_star)
        return np.where(Nrow > 0, var, np.inf)

    def slope_fn(fit: np.ndarray) -> np.ndarray:
        # d var_fn / d fit, unclipped: (1 − 2r)/(N δ) (the score form's b, _decode)
        r = p_star + delta * np.clip(fit, 0.0, 1.0)
        return np.where(Nrow > 0, (1 - 2 * r) / (np.where(Nrow > 0, Nrow, 1.0) * delta), 0.0)

    def channel_fn(with_other: bool) -> tuple[AffineChannel, np.ndarray, float]:
        R = C * k
        extra = None
        if with_other:
            r_other = p_star + delta * hbar / k
            extra = [r_other / R, (1 - r_other) / R]
        return compressed_affine_channel(X, [delta / R, -delta / R], [p_star / R, (1 - p_star) / R], extra,
                                   [bits.ravel(), (Nc[:, None] - bits).ravel()])

    return _decode(
        kind="bits", z=z, X=X, other_col=np.full(C * k, hbar / k), var_fn=var_fn,
        meat_fn=lambda wls: bits_meat(X, wls.o, wls.w, wls.beta, Nc, q_star, p_star, hbar),
        channel_fn=channel_fn, n_reports=round(N), method=method, other=other, labels=labels,
        tol=tol, max_iter=max_iter, exact_se_max=exact_se_max, se_top=se_top, factor_cache=factor_cache,
        # h̄ shapes the "other" column, so a given bits_per_string is part of the design's name
        cache_key=cache_key if bits_per_string is None or cache_key is None else (cache_key, hbar), start=start,
        counts=arr, cohort_reports=Nc, cells_per_value=hbar, slope_fn=slope_fn, inflate=inflate,
    )


decode_orappor = decode_bits
"""O-RAPPOR decoding (alias of :func:`decode_bits`)."""
decode_rappor = decode_bits
"""RAPPOR decoding (alias of :func:`decode_bits`); pass the effective rates q*, p*."""
