"""What a discovery client sends and with which budget (Fanti, Pihur, Erlingsson 2016 §5; docs/math/dictionary.md).

Each client sends three reports of one string: the full (padded) string, and the n-grams of two distinct
slots drawn uniformly among the ``k = M/n`` slots. The slots travel in the clear: they are drawn independently
of the string, so they carry no information about it. The three reports are independent given the string, so
by basic composition the client's privacy loss is the sum of the three reports' ε (the budget ``split``, ε/3
each by default). Each report is a RAPPOR report (any bit mechanism the detection and the joint EM decode
would do); :func:`rappor_scheme` calibrates one-report RAPPOR (f = 0, ``q = e^{ε_r/(2h)}/(1 + e^{ε_r/(2h)})``,
``p = 1 − q``: exactly ε_r-LDP per report, ε_1 = 2h ln(q/(1 − q))).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.registry import MetricConfig, Registry, discovery_slot_name

from .strings import StringShape

__all__ = ["NGRAM_REPORTS", "DiscoveryScheme", "rappor_for_epsilon", "rappor_scheme", "scheme_of"]

#: n-gram reports per client (two distinct slots: one pair of slots per client for the joint estimation).
NGRAM_REPORTS = 2


@dataclass(frozen=True)
class DiscoveryScheme:
    """The string shape and the mechanisms of the full-string and the n-gram reports."""

    shape: StringShape
    full: Rappor
    ngram: Rappor

    @property
    def epsilon(self) -> float:
        """The client's total ε: the full report's plus two n-gram reports' (basic composition)."""
        return float(self.full.epsilon + NGRAM_REPORTS * self.ngram.epsilon)

    def parameters(self) -> dict[str, object]:
        return {
            "length": self.shape.length, "ngram": self.shape.ngram, "alphabet": self.shape.alphabet,
            "pad": self.shape.pad, "epsilon": self.epsilon,
            "full": self.full.parameters(), "ngram_report": self.ngram.parameters(),
        }


def rappor_for_epsilon(epsilon: float, k: int, hashes: int, cohorts: int) -> Rappor:
    """One-report RAPPOR with ε_1 = ``epsilon`` exactly: f = 0, q = e^{ε/(2h)}/(1 + e^{ε/(2h)}), p = 1 − q."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ParameterError(f"epsilon must be positive and finite, got {epsilon}")
    q = 1.0 / (1.0 + math.exp(-epsilon / (2.0 * hashes)))
    return Rappor(k=k, hashes=hashes, cohorts=cohorts, p=1.0 - q, q=q, f=0.0)


def rappor_scheme(
    total_epsilon: float,
    shape: StringShape | None = None,
    *,
    full_share: float = 1.0 / 3.0,
    full_bits: int = 128,
    ngram_bits: int = 128,
    hashes: int = 2,
    cohorts: int = 32,
) -> DiscoveryScheme:
    """The scheme of the paper: the full report gets ``full_share`` of ``total_epsilon`` and each of the two
    n-gram reports half of the rest (default ε/3 each). Defaults: 128-bit full and n-gram reports,
    two hashes, 32 cohorts."""
    if not 0 < full_share < 1:
        raise ParameterError(f"full_share must lie in (0, 1), got {full_share}")
    shape = shape or StringShape()
    full = rappor_for_epsilon(total_epsilon * full_share, full_bits, hashes, cohorts)
    ngram = rappor_for_epsilon(total_epsilon * (1 - full_share) / NGRAM_REPORTS, ngram_bits, hashes, cohorts)
    return DiscoveryScheme(shape, full, ngram)


def scheme_of(registry: Registry, metric: MetricConfig) -> DiscoveryScheme:
    """The scheme of a registry's discovery metric (its full-string metric ``metric``): the shape of its
    :class:`~ldpstream.registry.DiscoveryConfig`, its own mechanism for the full reports, its n-gram metrics'
    (one mechanism for every slot) for the n-gram reports."""
    config = metric.discovery
    if config is None or metric.part_of is not None:
        raise ParameterError(f"metric {metric.name!r} is not a discovery metric's full-string metric")
    full, ngram = metric.mechanism, registry[discovery_slot_name(metric.name, 0)].mechanism
    if not isinstance(full, Rappor) or not isinstance(ngram, Rappor):
        raise ParameterError(f"metric {metric.name!r}: discovery reports must be RAPPOR")
    return DiscoveryScheme(StringShape(config.length, config.ngram, config.alphabet, config.pad), full, ngram)
