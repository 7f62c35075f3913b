"""One real discovery client: its slots and reports derived from its secret (docs/math/dictionary.md,
"Collection"; Fanti, Pihur, Erlingsson 2016 §5).

The two n-gram slots are drawn once from :class:`~ldpstream.mechanisms.randomness.KeyedRandomness` keyed by the
client's secret (:data:`SLOT_DOMAIN` as the message), with the same rule as the simulation
(:func:`~ldpstream.estimators.discovery.reports.draw_slots`): a restarted client reports the same slots, so
repeated reports never reveal more n-grams of its string than two. The reports come from the mechanisms' own
client encoders (:meth:`~ldpstream.mechanisms.base.Mechanism.client_encoder`, e.g. RAPPOR's memoized permanent
response), each keyed by the secret and the report's role, so the three reports draw independent streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.randomness import KeyedRandomness

from .reports import draw_slots
from .scheme import DiscoveryScheme

__all__ = ["SLOT_DOMAIN", "ClientTriple", "DiscoveryClient"]

#: The message of the keyed stream the slots are drawn from.
SLOT_DOMAIN = b"ldpstream/discovery/slots/v1"


@dataclass(frozen=True)
class ClientTriple:
    """The three reports of one client: its two slots, their n-gram reports and the full-string report."""

    slots: tuple[int, int]
    ngram_cohort: int
    ngram_bits: tuple[np.ndarray, np.ndarray]
    full_cohort: int
    full_bits: np.ndarray


class DiscoveryClient:
    """A device's discovery encoder for one string metric (``secret``: its per-metric secret)."""

    def __init__(self, scheme: DiscoveryScheme, secret: bytes, cohort: int) -> None:
        if not isinstance(secret, bytes | bytearray) or not secret:
            raise ParameterError("secret must be non-empty bytes")
        self.scheme = scheme
        drawn = draw_slots(1, scheme.shape.slots, KeyedRandomness(bytes(secret), SLOT_DOMAIN))[0]
        self.slots = (int(drawn[0]), int(drawn[1]))
        self._full = scheme.full.client_encoder(bytes(secret) + b"/full", cohort)
        self._ngram = scheme.ngram.client_encoder(bytes(secret) + b"/ngram", cohort)

    def report(self, value: str) -> ClientTriple:
        """The reports of ``value`` (padded or truncated to the scheme's length; characters outside the
        alphabet are an error)."""
        shape = self.scheme.shape
        padded = shape.padded(value)
        grams = [padded[j * shape.ngram:(j + 1) * shape.ngram] for j in self.slots]
        c1, b1 = self._ngram.encode_report(grams[0])
        _c2, b2 = self._ngram.encode_report(grams[1])
        cf, bf = self._full.encode_report(padded)
        return ClientTriple(self.slots, int(c1), (np.asarray(b1), np.asarray(b2)), int(cf), np.asarray(bf))
