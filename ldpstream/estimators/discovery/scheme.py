"""What a discovery client sends and with which budget (Fanti, Pihur, Erlingsson 2016 §5; docs/math/dictionary.md).

Each client sends three reports of one string: the full (padded) string, and the n-grams of two distinct
slots drawn uniformly among the ``k = M/n`` slots. The slots travel in the clear: they are drawn independently
of the string, so they carry no information about it. The three reports are independent given the string, so
by basic composition the client's privacy loss is the sum of the three reports' ε (the budget ``split``, ε/3
each by default). Each report is a hashed bit-vector report of one of
:data:`~ldpstream.registry.DISCOVERY_MECHANISMS` (what the detection, the final decode and the joint EM all
decode against any candidate list): RAPPOR, calibrated by :func:`rappor_for_epsilon` as one-report RAPPOR
(f = 0, ``q = e^{ε_r/(2h)}/(1 + e^{ε_r/(2h)})``, ``p = 1 − q``: exactly ε_r-LDP per report,
ε_1 = 2h ln(q/(1 − q))), or O-RAPPOR at ε_r (the same per-bit rates, its report memoized by a real client).
"""

from __future__ import annotations

from dataclasses import dataclass

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.base import BitMechanism
from ldpstream.mechanisms.factory import DEFAULT_DISCOVERY_MECHANISM, MECHANISMS
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.registry import MetricConfig, Registry, discovery_mechanism_error, discovery_slot_name

from .strings import StringShape

__all__ = [
    "NGRAM_REPORTS",
    "BitReports",
    "DiscoveryScheme",
    "bit_scheme",
    "carrier_error",
    "rappor_for_epsilon",
    "rappor_scheme",
    "report_for_epsilon",
    "scheme_of",
]

#: n-gram reports per client (two distinct slots: one pair of slots per client for the joint estimation).
NGRAM_REPORTS = 2

#: A discovery report's mechanism: a bit mechanism whose class is a
#: :attr:`~ldpstream.mechanisms.base.Mechanism.discovery_carrier` (:data:`~ldpstream.registry.DISCOVERY_MECHANISMS`).
BitReports = BitMechanism


@dataclass(frozen=True)
class DiscoveryScheme:
    """The string shape and the mechanisms of the full-string and the n-gram reports."""

    shape: StringShape
    full: BitReports
    ngram: BitReports

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
    """One-report RAPPOR with ε_1 = ``epsilon`` exactly (:meth:`Rappor.discovery_report` at f = 0)."""
    return Rappor.discovery_report(epsilon, k, hashes, cohorts)


def report_for_epsilon(mechanism: str, epsilon: float, k: int, hashes: int, cohorts: int) -> BitReports:
    """One report of ``mechanism`` (one of :data:`~ldpstream.registry.DISCOVERY_MECHANISMS`) with ε = ``epsilon``
    exactly (its :meth:`~ldpstream.mechanisms.base.Mechanism.discovery_report`). Any other mechanism is a
    ParameterError saying why it cannot carry discovery reports."""
    refusal = discovery_mechanism_error(mechanism)
    if refusal is not None:
        raise ParameterError(refusal)
    return MECHANISMS[mechanism].discovery_report(epsilon, k, hashes, cohorts)


def carrier_error(mechanism: object) -> str | None:
    """``None`` when ``mechanism`` can carry discovery reports, else why not."""
    if isinstance(mechanism, BitMechanism) and type(mechanism).discovery_carrier:
        return None
    name = getattr(mechanism, "name", type(mechanism).__name__)
    return discovery_mechanism_error(str(name)) or f"{name!r} cannot carry discovery reports"


def bit_scheme(
    total_epsilon: float,
    shape: StringShape | None = None,
    *,
    mechanism: str = DEFAULT_DISCOVERY_MECHANISM,
    full_share: float = 1.0 / 3.0,
    full_bits: int = 128,
    ngram_bits: int = 128,
    hashes: int = 2,
    cohorts: int = 32,
) -> DiscoveryScheme:
    """The scheme of the paper with ``mechanism`` reports (:func:`report_for_epsilon`): the full report gets
    ``full_share`` of ``total_epsilon`` and each of the two n-gram reports half of the rest (default ε/3 each).
    Defaults: 128-bit full and n-gram reports, two hashes, 32 cohorts."""
    if not 0 < full_share < 1:
        raise ParameterError(f"full_share must lie in (0, 1), got {full_share}")
    shape = shape or StringShape()
    full = report_for_epsilon(mechanism, total_epsilon * full_share, full_bits, hashes, cohorts)
    ngram = report_for_epsilon(mechanism, total_epsilon * (1 - full_share) / NGRAM_REPORTS, ngram_bits, hashes,
                               cohorts)
    return DiscoveryScheme(shape, full, ngram)


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
    """:func:`bit_scheme` with RAPPOR reports (the paper's)."""
    return bit_scheme(total_epsilon, shape, mechanism=Rappor.name, full_share=full_share, full_bits=full_bits,
                      ngram_bits=ngram_bits, hashes=hashes, cohorts=cohorts)


def scheme_of(registry: Registry, metric: MetricConfig) -> DiscoveryScheme:
    """The scheme of a registry's discovery metric (its full-string metric ``metric``): the shape of its
    :class:`~ldpstream.registry.DiscoveryConfig`, its own mechanism for the full reports, its n-gram metrics'
    (one mechanism for every slot) for the n-gram reports."""
    config = metric.discovery
    if config is None or metric.part_of is not None:
        raise ParameterError(f"metric {metric.name!r} is not a discovery metric's full-string metric")
    full, ngram = metric.mechanism, registry[discovery_slot_name(metric.name, 0)].mechanism
    for mechanism in (full, ngram):
        refusal = carrier_error(mechanism)
        if refusal is not None:
            raise ParameterError(f"metric {metric.name!r}: {refusal}")
    assert isinstance(full, BitMechanism) and isinstance(ngram, BitMechanism)  # checked above
    return DiscoveryScheme(StringShape(config.length, config.ngram, config.alphabet, config.pad), full, ngram)
