"""The result object every decoder returns, shaped like scipy.stats results.

Significance (docs/math/estimators.md#intervals-and-significance): one-sided z-tests of ``frequency > 0`` with
``z_s = frequency_s / std_error_s``; Bonferroni flags ``z_s > Φ⁻¹(1 − α/S)``, Benjamini–Hochberg flags the
``r`` smallest p-values where ``r = max{i : p_(i) <= i α / S}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np
from scipy import special, stats

from ldpstream.errors import ParameterError

from .misfit import Misfit

__all__ = ["ConfidenceInterval", "Estimate", "bonferroni_z", "detection_floor"]


class ConfidenceInterval(NamedTuple):
    """Element-wise lower and upper bounds."""

    low: np.ndarray
    high: np.ndarray


def bonferroni_z(n_tests: int, alpha: float = 0.05) -> float:
    """``Φ⁻¹(1 − α/S)``: the one-sided Bonferroni critical value over ``S = n_tests`` tests."""
    if not 0 < alpha < 1:
        raise ParameterError(f"alpha must be in (0, 1), got {alpha}")
    # −Φ⁻¹(α/S) is scipy.stats.norm.isf's own formula, without its per-call argument checking (≈ 0.25 ms, which
    # the live decoder paid for every window of every metric)
    return float(-special.ndtri(alpha / max(int(n_tests), 1)))


def detection_floor(zero_sd: float, n_tests: int, alpha: float = 0.05) -> float:
    """Smallest frequency a Bonferroni test at level α over ``n_tests`` flags on average:
    ``Φ⁻¹(1 − α/S) · sd``, with ``sd`` the standard deviation of the estimate of a zero frequency."""
    return bonferroni_z(n_tests, alpha) * float(zero_sd)


@dataclass(frozen=True, eq=False, kw_only=True)
class Estimate:
    """A decoded frequency vector with its uncertainty.

    Attributes:
        frequencies: estimated frequencies (proportions of all reports), one per symbol or candidate.
        std_errors: standard error of each frequency, or ``None`` when unavailable.
        n_reports: number of reports decoded.
        method: the decoder that produced the estimate (e.g. ``"krr/project"``).
        labels: optional names of the symbols or candidates.
        residual: estimated mass outside the candidate list (candidate decoders), else ``None``.
        residual_std_error: standard error of ``residual`` when known.
        detection_floor: smallest frequency detectable at this n and ε with a Bonferroni test at
            α = 0.05 over all coordinates (``Φ⁻¹(1 − 0.05/S)`` times the sd of a zero-frequency estimate).
        info: decoder diagnostics (iterations, convergence, ...), JSON-friendly.
        interval: the decoder's own 95% interval (``low``, ``high``), when it computes one (for example a
            profile-likelihood interval of a maximum-likelihood estimate); ``None``: :meth:`ci` gives Wald
            intervals from ``std_errors``.
        interval_method: how the published 95% interval is made (``"wald"`` when :attr:`interval` is None).
        unclipped_interval: for an interval ``centre ± half`` that :attr:`interval` holds clipped to [0, 1] (the
            candidate decoders' ``"ls-sandwich"``, detect's), the same bounds before clipping; ``None`` when not
            kept. Not published: a window widens the interval from it (its centre is lost where both bounds were
            clipped, :func:`ldpstream.estimators.windows.widen_estimate`).
        misfit: the goodness of fit of the candidate model (candidate decoders, detection), whose inflation the
            standard errors and intervals include; ``None`` when not measured.
        interval_shift: for an unclipped interval in the score form (the candidate decoders'), how far its centre
            sits from the least-squares estimate (``z²b/2``), so that a window rescales it with the variance;
            ``None``: the interval is centred on that estimate. Not published.
    """

    frequencies: np.ndarray
    std_errors: np.ndarray | None
    n_reports: int
    method: str
    labels: Sequence[Any] | None = None
    residual: float | None = None
    residual_std_error: float | None = None
    detection_floor: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    interval: ConfidenceInterval | None = None
    interval_method: str = "wald"
    unclipped_interval: ConfidenceInterval | None = None
    misfit: Misfit | None = None
    interval_shift: np.ndarray | None = None

    def __post_init__(self) -> None:
        freq = np.asarray(self.frequencies, dtype=np.float64)
        object.__setattr__(self, "frequencies", freq)
        if self.std_errors is not None:
            se = np.asarray(self.std_errors, dtype=np.float64)
            if se.shape != freq.shape:
                raise ParameterError(f"std_errors shape {se.shape} != frequencies shape {freq.shape}")
            object.__setattr__(self, "std_errors", se)
        if self.labels is not None and len(self.labels) != freq.shape[0]:
            raise ParameterError(f"{len(self.labels)} labels for {freq.shape[0]} frequencies")
        if self.interval is not None:
            low, high = (np.asarray(b, dtype=np.float64) for b in self.interval)
            if low.shape != freq.shape or high.shape != freq.shape:
                raise ParameterError("interval bounds must have the frequencies' shape")
            object.__setattr__(self, "interval", ConfidenceInterval(low, high))
        if self.unclipped_interval is not None:
            if self.interval is None:
                raise ParameterError("an unclipped interval without the published interval")
            low, high = (np.asarray(b, dtype=np.float64) for b in self.unclipped_interval)
            if low.shape != freq.shape or high.shape != freq.shape:
                raise ParameterError("unclipped interval bounds must have the frequencies' shape")
            object.__setattr__(self, "unclipped_interval", ConfidenceInterval(low, high))

    # ----------------------------------------------------------------------------------------------
    @property
    def counts(self) -> np.ndarray:
        """Estimated number of reports of each symbol/candidate (``frequencies · n_reports``)."""
        return self.frequencies * self.n_reports

    def _se(self) -> np.ndarray:
        if self.std_errors is None:
            raise ParameterError(f"{self.method}: no standard errors available")
        return self.std_errors

    def z_scores(self) -> np.ndarray:
        """``frequency / std_error`` (``inf`` where the standard error is zero and the frequency positive)."""
        se = self._se()
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, self.frequencies / np.where(se > 0, se, 1.0),
                         np.where(self.frequencies > 0, np.inf, 0.0))
        return z

    def p_values(self) -> np.ndarray:
        """One-sided p-values of ``H0: frequency = 0`` against ``frequency > 0``."""
        return np.asarray(stats.norm.sf(self.z_scores()))

    def ci(self, level: float = 0.95, clip: bool = False) -> ConfidenceInterval:
        """The decoder's own interval (:attr:`interval`) at level 0.95 when it has one; otherwise normal (Wald)
        intervals ``frequency ± Φ⁻¹((1 + level)/2) · std_error``. ``clip`` intersects with [0, 1]."""
        if not 0 < level < 1:
            raise ParameterError(f"level must be in (0, 1), got {level}")
        if self.interval is not None and abs(level - 0.95) < 1e-12:
            low, high = self.interval
        else:
            half = -special.ndtri((1 - level) / 2) * self._se()
            low, high = self.frequencies - half, self.frequencies + half
        if clip:
            low, high = np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)
        return ConfidenceInterval(low, high)

    def significant(
        self, alpha: float = 0.05, correction: Literal["bonferroni", "bh", "none"] = "bonferroni"
    ) -> np.ndarray:
        """Boolean mask of coordinates whose frequency is significantly positive.

        ``"bonferroni"`` controls the family-wise error rate, ``"bh"`` (Benjamini–Hochberg) the false
        discovery rate, ``"none"`` tests each coordinate at level α.
        """
        if not 0 < alpha < 1:
            raise ParameterError(f"alpha must be in (0, 1), got {alpha}")
        pv = self.p_values()
        s = pv.size
        if correction == "bonferroni":
            return pv <= alpha / s
        if correction == "none":
            return pv <= alpha
        if correction == "bh":
            order = np.argsort(pv, kind="stable")
            passed = pv[order] <= alpha * np.arange(1, s + 1) / s
            mask = np.zeros(s, dtype=bool)
            if passed.any():
                r = int(np.flatnonzero(passed)[-1]) + 1
                mask[order[:r]] = True
            return mask
        raise ParameterError(f"unknown correction {correction!r}; use 'bonferroni', 'bh' or 'none'")

    def top(self, n: int = 10) -> list[tuple[Any, float]]:
        """The ``n`` largest frequencies as ``(label or index, frequency)``, largest first."""
        order = np.argsort(-self.frequencies, kind="stable")[: max(int(n), 0)]
        names = self.labels if self.labels is not None else range(self.frequencies.size)
        return [(_plain(names[i]), float(self.frequencies[i])) for i in order]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dictionary."""
        return {
            "method": self.method,
            "n_reports": int(self.n_reports),
            "frequencies": self.frequencies.tolist(),
            "std_errors": None if self.std_errors is None else self.std_errors.tolist(),
            "labels": None if self.labels is None else [_plain(x) for x in self.labels],
            "residual": None if self.residual is None else float(self.residual),
            "residual_std_error": None if self.residual_std_error is None else float(self.residual_std_error),
            "detection_floor": None if self.detection_floor is None else float(self.detection_floor),
            "info": {key: _plain(val) for key, val in self.info.items()},
            "interval_method": self.interval_method,
            "misfit": None if self.misfit is None else self.misfit.to_json(),
            "interval_95": None if self.interval is None else {"low": self.interval.low.tolist(),
                                                               "high": self.interval.high.tolist()},
        }


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    return x
