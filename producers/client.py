"""The client SDK: what an application embeds to report values under local differential privacy.

>>> client = LdpClient(Registry.load("metrics.toml"), "127.0.0.1:39092",               # doctest: +SKIP
...                    secret_file="~/.local/share/myapp/ldp-secret")
>>> client.report("fruit", "banana")                                                   # doctest: +SKIP
>>> client.flush()                                                                     # doctest: +SKIP

Each value is privatized on the device with secure randomness (:class:`ldpstream.device.ClientPrivatizer`)
and only the noisy report leaves it, published with an idempotent producer (``acks=all``).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.config import KafkaConfig
from ldpstream.device import ClientPrivatizer
from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.producers.publisher import DeliveryStats, ReportPublisher
from ldpstream.registry import Registry
from ldpstream.wire import encode_records, payloads_from_reports


def load_or_create_secret(path: Path) -> bytes:
    """The device secret kept in ``path`` (32 random bytes from the OS, written once, mode 0600)."""
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_bytes(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(secret)
    if len(secret) < 16:
        raise ParameterError(f"device secret {path} holds {len(secret)} bytes; at least 16 are needed")
    return secret


class LdpClient:
    """A device's reporter: holds the registry, its secret (RAPPOR PRR memo, cohort) and a producer."""

    def __init__(self, registry: Registry, kafka: KafkaConfig | str, *, secret: bytes | None = None,
                 secret_file: str | Path | None = None, delivery_timeout: float = 30.0,
                 producer_config: Mapping[str, Any] | None = None) -> None:
        """``secret`` (or ``secret_file``, created with 32 random bytes on first use and read afterwards)
        must persist for the life of the device when a metric uses RAPPOR: a new secret means a new
        permanent randomized response, and averaging those undoes RAPPOR's long-run guarantee (ε_∞).
        ``kafka`` is the service configuration's :class:`~ldpstream.config.KafkaConfig` (or bootstrap
        servers); ``producer_config`` adds librdkafka settings of this client's producer."""
        self.registry = registry
        if secret is None and secret_file is not None:
            secret = load_or_create_secret(Path(secret_file).expanduser())
        self.privatizer = ClientPrivatizer(secret)
        self.publisher = ReportPublisher(kafka, delivery_timeout=delivery_timeout, config=producer_config)

    def report(self, metric_name: str, value: Any, event_time: float | None = None) -> None:
        """Privatize ``value`` for the metric and queue its report (see :meth:`flush`)."""
        metric = self.registry[metric_name]
        cohort, report = self.privatizer.privatize(metric, value)
        payload = payloads_from_reports(metric.mechanism, np.asarray(report)[None, ...])
        when = int(event_time if event_time is not None else time.time())
        if not 0 <= when <= 0xFFFFFFFF:
            # The format's event time is a u32 of seconds since the epoch (0: use the Kafka timestamp).
            raise ReportFormatError(f"event_time {event_time!r} is outside the report format's 0..2**32-1 s")
        rows = encode_records(metric.id, metric.fingerprint, [cohort], payload, event_time=when)
        self.publisher.publish(metric.topic, rows)

    def flush(self, timeout: float | None = None) -> DeliveryStats:
        """Block until Kafka acknowledged every queued report; raises ServiceError when it cannot."""
        return self.publisher.flush(timeout)
