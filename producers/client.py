"""The client SDK: what an application embeds to report values under local differential privacy.

>>> client = LdpClient(Registry.load("metrics.toml"), bootstrap="127.0.0.1:39092")   # doctest: +SKIP
>>> client.report("fruit", "banana")                                                   # doctest: +SKIP
>>> client.flush()                                                                     # doctest: +SKIP

Each value is privatized on the device with secure randomness (:class:`producers.privatize.ClientPrivatizer`)
and only the noisy report leaves it, published with an idempotent producer (``acks=all``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ldpstream.errors import ReportFormatError
from ldpstream.mechanisms.base import pack_bits
from ldpstream.registry import Registry
from ldpstream.report import encode_records, symbol_payloads
from producers.privatize import ClientPrivatizer
from producers.publisher import DeliveryStats, ReportPublisher


def payloads_of(kind: str, reports: np.ndarray) -> np.ndarray:
    """Mechanism reports (symbols, or ``(n, k)`` bits) → wire payloads ``(n, L)``."""
    return symbol_payloads(reports) if kind == "symbol" else pack_bits(reports)


class LdpClient:
    """A device's reporter: holds the registry, its secret (RAPPOR PRR memo, cohort) and a producer."""

    def __init__(self, registry: Registry, bootstrap: str, *, secret: bytes | None = None,
                 delivery_timeout: float = 30.0, producer_config: Mapping[str, Any] | None = None) -> None:
        self.registry = registry
        self.privatizer = ClientPrivatizer(secret)
        self.publisher = ReportPublisher(bootstrap, delivery_timeout=delivery_timeout, config=producer_config)

    def report(self, metric_name: str, value: Any, event_time: float | None = None) -> None:
        """Privatize ``value`` for the metric and queue its report (see :meth:`flush`)."""
        metric = self.registry[metric_name]
        cohort, report = self.privatizer.privatize(metric, value)
        payload = payloads_of(metric.mechanism.report_kind, np.asarray(report)[None, ...])
        when = int(event_time if event_time is not None else time.time())
        if not 0 <= when <= 0xFFFFFFFF:
            # The format's event time is a u32 of seconds since the epoch (0: use the Kafka timestamp).
            raise ReportFormatError(f"event_time {event_time!r} is outside the report format's 0..2**32-1 s")
        rows = encode_records(metric.id, metric.fingerprint, [cohort], payload, event_time=when)
        self.publisher.publish(metric.topic, rows)

    def flush(self, timeout: float | None = None) -> DeliveryStats:
        """Block until Kafka acknowledged every queued report; raises ServiceError when it cannot."""
        return self.publisher.flush(timeout)
