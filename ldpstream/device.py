"""Privatizing values for one metric, whatever its mechanism: the adapter between the registry and the
mechanisms' own encoders, through the hooks of :class:`~ldpstream.mechanisms.Mechanism` (no type dispatch).
Real clients use :class:`ClientPrivatizer` (secure randomness, memoized permanent responses); simulations use
:func:`privatize_population` (a seeded generator, vectorized over the population)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.estimators.discovery.client import SLOT_DOMAIN
from ldpstream.estimators.discovery.reports import draw_slots
from ldpstream.mechanisms.base import ReportEncoder
from ldpstream.mechanisms.randomness import KeyedRandomness
from ldpstream.registry import AssociationConfig, MetricConfig, Registry, discovery_pair_name, discovery_slot_name


def value_table(metric: MetricConfig) -> np.ndarray | None:
    """The per-cohort table of the metric's value list (candidates, or the closed alphabet), or None
    for mechanisms that need none (:attr:`~ldpstream.mechanisms.Mechanism.needs_value_table`)."""
    mechanism = metric.mechanism
    if not mechanism.needs_value_table:
        return None
    try:
        return mechanism.value_table(metric.candidates)
    except ParameterError as exc:
        raise ParameterError(f"metric {metric.name!r}: {exc}") from None


def privatize_population(metric: MetricConfig, value_index: np.ndarray, rng: np.random.Generator,
                         table: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One report from each simulated client holding value ``value_index[i]`` (an index into
    :meth:`MetricConfig.value_names`). Returns ``(cohorts, reports)``; vectorized."""
    if table is None:
        table = value_table(metric)
    return metric.mechanism.encode_clients(value_index, rng, table=table)


class ClientPrivatizer:
    """What one device runs: privatizes its own values with secure randomness.

    Every metric gets one encoder (:meth:`~ldpstream.mechanisms.Mechanism.client_encoder`) built from a
    per-metric secret and a cohort, both derived from the device secret: the cohort is stable for the device,
    and a memoizing mechanism's permanent responses (RAPPOR's PRR; k-RR, k-RAPPOR, O-RR and O-RAPPOR unless
    ``memoize = false``) make repeated reports of a value reveal no more than ε_∞. Those
    (:attr:`~ldpstream.mechanisms.Mechanism.stateful_client`) need a secret that persists across restarts.
    """

    def __init__(self, secret: bytes | None = None) -> None:
        #: Whether the secret was given (so it can persist across restarts) or drawn for this process only.
        self.persistent = secret is not None
        self.secret = secret if secret is not None else secrets.token_bytes(32)
        #: One encoder per metric and channel (a registry reloaded with new parameters gets new encoders).
        self._encoders: dict[tuple[str, int], ReportEncoder] = {}

    def privatize(self, metric: MetricConfig, value: Any) -> tuple[int, np.ndarray]:
        """Returns ``(cohort, report)``: a symbol, or a ``(k,)`` bit vector."""
        mechanism = metric.mechanism
        if mechanism.closed:
            value = self._closed_index(metric, value)
        encoder = self._encoders.get((metric.name, metric.fingerprint))
        if encoder is None:
            if mechanism.stateful_client and not self.persistent:
                raise ParameterError(
                    f"metric {metric.name!r} uses {mechanism.name} with a memoized permanent response, which must "
                    "survive restarts: give the client a persistent secret (LdpClient(..., secret_file=PATH))"
                    f"{' or set memoize = false for the metric' if hasattr(mechanism, 'memoize') else ''}")
            encoder = mechanism.client_encoder(self._metric_secret(metric), self._cohort(metric))
            self._encoders[metric.name, metric.fingerprint] = encoder
        cohort, report = encoder.encode_report(value)
        return cohort, np.asarray(report)

    def discovery_record(self, registry: Registry, metric: MetricConfig, value: str
                         ) -> tuple[AssociationConfig, dict[str, str]]:
        """What the device sends for discovery metric ``metric`` (docs/math/dictionary.md, "Collection"): the
        association of its two slots and the value of every metric the record carries (the n-grams of ``value``
        padded or truncated to the metric's length at those slots, and the padded string).

        The slots are drawn once from a keyed stream of the device secret (HMAC of ``discovery-slots:<metric>``,
        message :data:`~ldpstream.estimators.discovery.client.SLOT_DOMAIN`, the simulation's rule
        :func:`~ldpstream.estimators.discovery.reports.draw_slots`): the same device always reports the same two
        slots, so its repeated reports reveal no more n-grams of its string than two."""
        config = metric.discovery
        if config is None or metric.part_of is not None:
            raise ParameterError(f"metric {metric.name!r} is not a discovery metric")
        if not isinstance(value, str):
            raise ParameterError(f"metric {metric.name!r} takes a string, not a {type(value).__name__}")
        if self.persistent is False:
            raise ParameterError(f"metric {metric.name!r} derives its n-gram positions from the device secret, which "
                                 "must survive restarts: give the client a persistent secret "
                                 "(LdpClient(..., secret_file=PATH))")
        bad = set(value) - set(config.alphabet)
        if bad:  # the value is private: the error names neither it nor its characters
            raise ParameterError(f"a value given to metric {metric.name!r} has {len(bad)} character(s) outside its "
                                 "alphabet")
        padded = value[: config.length].ljust(config.length, config.pad)
        key = hmac.new(self.secret, f"discovery-slots:{metric.name}".encode(), hashlib.sha256).digest()
        first, second = (int(s) for s in draw_slots(1, config.slots, KeyedRandomness(key, SLOT_DOMAIN))[0])
        low, high = min(first, second), max(first, second)
        n = config.ngram
        association = registry.association(discovery_pair_name(metric.name, low, high))
        return association, {discovery_slot_name(metric.name, low): padded[low * n:(low + 1) * n],
                             discovery_slot_name(metric.name, high): padded[high * n:(high + 1) * n],
                             metric.name: padded}

    def _metric_secret(self, metric: MetricConfig) -> bytes:
        # The label predates the other mechanisms' permanent responses; changing it would change RAPPOR PRRs.
        return hmac.new(self.secret, f"rappor-prr:{metric.name}".encode(), hashlib.sha256).digest()

    def _cohort(self, metric: MetricConfig) -> int:
        digest = hmac.new(self.secret, f"cohort:{metric.name}".encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big") % metric.mechanism.cohorts

    @staticmethod
    def _closed_index(metric: MetricConfig, value: Any) -> int:
        """Closed alphabets accept the symbol's index or, when the metric has labels, its label."""
        # The value is what the device must keep private: errors name its type, never the value itself.
        if isinstance(value, str) and metric.labels is not None:
            try:
                return metric.labels.index(value)
            except ValueError:
                raise ParameterError(f"a value given to metric {metric.name!r} is not one of its labels") from None
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ParameterError(f"metric {metric.name!r} takes a symbol number"
                                 f"{' or one of its labels' if metric.labels is not None else ''}, "
                                 f"not a {type(value).__name__}")
        return int(value)
