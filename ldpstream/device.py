"""Privatizing values for one metric, whatever its mechanism: the adapter between the registry and the
mechanisms' own encoders. Real clients use :class:`ClientPrivatizer` (secure randomness, RAPPOR's PRR memo);
simulations use :func:`privatize_population` (a seeded generator, vectorized over the population)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import KRR, ORR, KRappor, ORappor, Rappor, RapporClient
from ldpstream.registry import MetricConfig


def value_table(metric: MetricConfig) -> np.ndarray | None:
    """The per-cohort table of the metric's value list (candidates, or the closed alphabet), or None
    for mechanisms that need none (k-RR, k-RAPPOR)."""
    mechanism = metric.mechanism
    if isinstance(mechanism, KRR | KRappor):
        return None
    if isinstance(mechanism, ORR):
        return mechanism.symbol_table(None if mechanism.closed else metric.candidates)
    if isinstance(mechanism, ORappor):
        return mechanism.bloom_table(None if mechanism.closed else metric.candidates)
    if isinstance(mechanism, Rappor):
        if metric.candidates is None:
            raise ParameterError(f"metric {metric.name!r}: simulating RAPPOR needs a candidate list")
        return mechanism.bloom_table(metric.candidates)
    raise ParameterError(f"unsupported mechanism {type(mechanism).__name__}")


def privatize_population(metric: MetricConfig, value_index: np.ndarray, rng: np.random.Generator,
                         table: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One report from each simulated client holding value ``value_index[i]`` (an index into
    :meth:`MetricConfig.value_names`). Returns ``(cohorts, reports)``; vectorized."""
    mechanism = metric.mechanism
    if isinstance(mechanism, KRR | KRappor):
        return np.zeros(len(value_index), dtype=np.int64), mechanism.encode_batch(value_index, rng)
    if table is None:
        table = value_table(metric)
    return mechanism.encode_batch(value_index, rng, table=table)


class ClientPrivatizer:
    """What one device runs: privatizes its own values with secure randomness.

    For RAPPOR the client keeps one :class:`RapporClient` per metric (its cohort is derived from the
    client secret, so it is stable for the device, and its PRR memo makes repeated reports of a value
    reveal no more than ε_∞).
    """

    def __init__(self, secret: bytes | None = None) -> None:
        #: Whether the secret was given (so it can persist across restarts) or drawn for this process only.
        self.persistent = secret is not None
        self.secret = secret if secret is not None else secrets.token_bytes(32)
        self._rappor: dict[str, RapporClient] = {}

    def privatize(self, metric: MetricConfig, value: Any) -> tuple[int, np.ndarray]:
        """Returns ``(cohort, report)``: a symbol, or a ``(k,)`` bit vector."""
        mechanism = metric.mechanism
        if isinstance(mechanism, KRR | KRappor):
            return 0, np.asarray(mechanism.encode(self._closed_index(metric, value)))
        if isinstance(mechanism, ORR | ORappor):
            if mechanism.closed:
                value = self._closed_index(metric, value)
            cohort, report = mechanism.encode(value)
            return cohort, np.asarray(report)
        if isinstance(mechanism, Rappor):
            if not self.persistent:
                raise ParameterError(
                    f"metric {metric.name!r} uses RAPPOR, whose permanent randomized response must survive "
                    "restarts: give the client a persistent secret (LdpClient(..., secret_file=PATH))")
            client = self._rappor.get(metric.name)
            if client is None:
                client = RapporClient(mechanism, self._metric_secret(metric), self._cohort(metric))
                self._rappor[metric.name] = client
            return client.cohort, client.encode(value)
        raise ParameterError(f"unsupported mechanism {type(mechanism).__name__}")

    def _metric_secret(self, metric: MetricConfig) -> bytes:
        return hmac.new(self.secret, f"rappor-prr:{metric.name}".encode(), hashlib.sha256).digest()

    def _cohort(self, metric: MetricConfig) -> int:
        digest = hmac.new(self.secret, f"cohort:{metric.name}".encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big") % metric.mechanism.cohorts

    @staticmethod
    def _closed_index(metric: MetricConfig, value: Any) -> int:
        """Closed alphabets accept the symbol's index or, when the metric has labels, its label."""
        if isinstance(value, str) and metric.labels is not None:
            try:
                return metric.labels.index(value)
            except ValueError:
                raise ParameterError(f"{value!r} is not one of metric {metric.name!r}'s labels") from None
        return int(value)
