"""The client SDK: what an application embeds to report values under local differential privacy.

>>> with LdpClient.open("metrics.toml") as client:                                     # doctest: +SKIP
...     client.report("fruit", "banana")
...     client.report_together("fruit_by_homepage", {"fruit": "fig", "homepage": "example.com"})

Each value is privatized on the device with secure randomness (:class:`ldpstream.device.ClientPrivatizer`)
and only the noisy report leaves it, published with an idempotent producer (``acks=all``).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import numpy as np

from ldpstream.config import KafkaConfig, ServiceConfig
from ldpstream.device import ClientPrivatizer
from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.producers.publisher import DeliveryStats, ReportPublisher
from ldpstream.registry import AssociationConfig, MetricConfig, Registry
from ldpstream.wire import encode_association_records, encode_records, payloads_from_reports

#: Fewest bytes of a device secret: the secret keys the HMACs that derive the client's cohort and its
#: permanent (memoized) responses, so a short one would let anyone recompute them.
MIN_SECRET_BYTES = 16


def check_secret(secret: bytes, where: str = "the device secret") -> bytes:
    """``secret`` if it is bytes of at least :data:`MIN_SECRET_BYTES`; else a ParameterError."""
    if not isinstance(secret, bytes | bytearray) or len(secret) < MIN_SECRET_BYTES:
        size = len(secret) if isinstance(secret, bytes | bytearray) else type(secret).__name__
        raise ParameterError(f"{where} must be at least {MIN_SECRET_BYTES} random bytes (got {size})")
    return bytes(secret)


def default_secret_file() -> Path:
    """Where :meth:`LdpClient.open` keeps the device secret: ``$XDG_DATA_HOME/ldpstream/device-secret``
    (``~/.local/share`` when unset)."""
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "ldpstream" / "device-secret"


def load_or_create_secret(path: Path) -> bytes:
    """The device secret kept in ``path``: 32 random bytes from the OS, written once, mode 0600.

    The file is created whole or not at all: the bytes go to a temporary file in the same folder, which is
    fsynced and then linked to ``path`` (``link`` fails if ``path`` exists), and the folder is fsynced. Two
    processes creating it at once therefore agree on one secret: the loser reads the winner's. A file that
    its group or others may read, or that is too short, is refused.
    """
    path = Path(path)
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(32))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        else:
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    finally:
        temporary.unlink(missing_ok=True)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
        secret = path.read_bytes()
    except IsADirectoryError:
        raise ParameterError(f"device secret {path} is a directory") from None
    if mode & 0o077:
        raise ParameterError(f"device secret {path} may be read by others (mode {mode & 0o777:o}); "
                             f"allow its owner alone: chmod 600 {path}")
    return check_secret(secret, f"device secret {path}")


class ReportedBuckets:
    """The last time bucket each metric was reported in, kept in a small JSON file (written whole: a temporary
    file renamed into place) or, without a file, in memory."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._last: dict[str, int] = {}
        if path is not None and path.exists():
            try:
                loaded = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise ParameterError(f"the reported-buckets file {path} is unreadable ({exc}); delete it to "
                                     "start afresh") from None
            self._last = {str(k): int(v) for k, v in loaded.items()}

    def get(self, key: str) -> int | None:
        return self._last.get(key)

    def set(self, key: str, bucket: int) -> None:
        self._last[key] = bucket
        if self.path is not None:
            temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(self._last, out)
            os.replace(temporary, self.path)


class LdpClient:
    """A device's reporter: holds the registry, its secret (cohorts, memoized permanent responses) and a producer."""

    def __init__(self, registry: Registry, kafka: KafkaConfig | str | ReportPublisher, *, secret: bytes | None = None,
                 secret_file: str | Path | None = None, delivery_timeout: float = 30.0,
                 producer_config: Mapping[str, Any] | None = None, once_per_bucket: bool = True) -> None:
        """``secret`` (or ``secret_file``, created with 32 random bytes on first use and read afterwards)
        must persist for the life of the device when a metric memoizes a permanent response (RAPPOR, and k-RR,
        k-RAPPOR, O-RR, O-RAPPOR unless ``memoize = false``): a new secret means a new permanent response, and
        averaging those undoes the long-run guarantee (ε_∞). Without either, such metrics refuse to report.
        ``kafka`` is the service configuration's :class:`~ldpstream.config.KafkaConfig` (or bootstrap
        servers), or a :class:`ReportPublisher` to share (a gateway or a simulation holding many clients: one
        Kafka producer for all); ``producer_config`` adds librdkafka settings of this client's own producer.

        ``once_per_bucket`` (the default): a metric is reported at most once per time bucket
        (``bucket_seconds``); further calls in the same bucket send nothing and return False. Estimates of a
        window then rest on at most one report per client and bucket. With ``secret_file`` the buckets already
        reported are kept beside it (``<secret_file>.reported``), so a restart does not report again."""
        self.registry = registry
        if secret is None and secret_file is not None:
            secret = load_or_create_secret(Path(secret_file).expanduser())
        elif secret is not None:
            secret = check_secret(secret)
        self.privatizer = ClientPrivatizer(secret)
        self.publisher = kafka if isinstance(kafka, ReportPublisher) else ReportPublisher(
            kafka, delivery_timeout=delivery_timeout, config=producer_config)
        self.once_per_bucket = once_per_bucket
        self._reported = ReportedBuckets(None if secret_file is None else
                                         Path(f"{Path(secret_file).expanduser()}.reported"))

    @classmethod
    def open(cls, registry: Registry | str | Path, kafka: KafkaConfig | str | ReportPublisher | None = None, *,
             secret_file: str | Path | None = None, **options: Any) -> LdpClient:
        """A client from a registry file (or :class:`Registry`) and the service configuration every command
        reads (``$LDPSTREAM_CONFIG``, ``$LDPSTREAM_KAFKA``, else the local stack) unless ``kafka`` is given. The
        device secret is kept in ``secret_file`` (default :func:`default_secret_file`). Used as a context
        manager, the client flushes its reports on leaving the block."""
        if not isinstance(registry, Registry):
            registry = Registry.load(Path(registry).expanduser())
        return cls(registry, ServiceConfig.load().kafka if kafka is None else kafka,
                   secret_file=default_secret_file() if secret_file is None else secret_file, **options)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """Flush the queued reports (:meth:`flush`) unless the block raised."""
        if kind is None:
            self.flush()

    def report(self, metric_name: str, value: Any, event_time: float | None = None) -> bool:
        """Privatize ``value`` for the metric and queue its report (see :meth:`flush`). Returns False, and sends
        nothing, when the metric was already reported in this time bucket (see ``once_per_bucket``).

        A discovery metric (a string metric without a dictionary) takes a string over its alphabet: one record
        carries the n-grams of the string (padded or truncated to the metric's length) at the two slots the
        device secret picks, and the full string (:meth:`ldpstream.device.ClientPrivatizer.discovery_record`;
        docs/math/dictionary.md, "Live"); it costs the metric's total ε. A prefix discovery metric (``method =
        "prefix"``) is reported like any metric: its device's cohort (memoized) sets the group and so the prefix."""
        metric = self.registry[metric_name]
        if metric.part_of is not None:
            raise ParameterError(f"metric {metric.name!r} is an n-gram slot of discovery metric {metric.part_of!r}: "
                                 f"report the string to {metric.part_of!r}")
        if metric.discovery is not None and metric.discovery.method == "ngram":
            # A string without a dictionary: its n-grams at the device's two slots and the full string, one record.
            association, values = self.privatizer.discovery_record(self.registry, metric, value)
            return self._send_record(association, values, self._event_time(event_time))
        when = self._event_time(event_time)
        bucket = when // metric.bucket_seconds
        key = _reported_key(metric)
        if self.once_per_bucket and self._reported.get(key) == bucket:
            return False
        cohort, report = self.privatizer.privatize(metric, value)
        payload = payloads_from_reports(metric.mechanism, np.asarray(report)[None, ...])
        rows = encode_records(metric.id, metric.fingerprint, [cohort], payload, event_time=when)
        self.publisher.publish(metric.topic, rows)
        if self.once_per_bucket:
            self._reported.set(key, bucket)
        return True

    def report_together(self, association_name: str, values: Mapping[str, Any],
                        event_time: float | None = None) -> bool:
        """Privatize one value of each member of an association and queue them as one record (format version 2),
        so that the decoder can estimate their joint distribution. ``values`` maps every member's name to its
        value. Each value is privatized exactly as :meth:`report` would (the member's own encoder: the same
        cohort, memoized permanent response and secure randomness), and the record also counts in each member's
        marginal estimates. The privacy cost is the members' ε summed (``Registry.association(name).epsilon``).

        Returns False, and sends nothing, when ``once_per_bucket`` holds and the association or any of its members
        was already reported in this time bucket (a member's marginal rests on one report per client and bucket,
        whether sent alone or together); otherwise marks the association and every member as reported."""
        association = self.registry.association(association_name)
        if association.part_of is not None:
            raise ParameterError(f"association {association.name!r} is a slot pair of discovery metric "
                                 f"{association.part_of!r}: report the string with report({association.part_of!r}, "
                                 "value)")
        if not isinstance(values, Mapping) or set(values) != set(association.members):
            given = sorted(values) if isinstance(values, Mapping) else type(values).__name__
            raise ParameterError(f"association {association.name!r} takes one value for each of its members "
                                 f"{list(association.members)}, got {given}")
        when = self._event_time(event_time)
        return self._send_record(association, {**values}, when)

    def _send_record(self, association: AssociationConfig, values: Mapping[str, Any], when: int) -> bool:
        """One version-2 record of ``values`` (every carried metric's), unless ``once_per_bucket`` holds and the
        association or a carried metric was already reported in ``when``'s bucket."""
        bucket = when // association.bucket_seconds
        keys = [f"association:{association.name}:{association.fingerprint:08x}",
                *(_reported_key(member) for member in association.carried)]
        if self.once_per_bucket and any(self._reported.get(key) == bucket for key in keys):
            return False
        cohorts, payloads = [], []
        for member in association.carried:
            cohort, report = self.privatizer.privatize(member, values[member.name])
            cohorts.append(cohort)
            payloads.append(payloads_from_reports(member.mechanism, np.asarray(report)[None, ...]))
        rows = encode_association_records(association.id, association.fingerprint, [cohorts], payloads,
                                          event_time=when)
        self.publisher.publish(association.topic, rows)
        if self.once_per_bucket:
            for key in keys:
                self._reported.set(key, bucket)
        return True

    @staticmethod
    def _event_time(event_time: float | None) -> int:
        when = int(event_time if event_time is not None else time.time())
        if not 0 <= when <= 0xFFFFFFFF:
            # The format's event time is a u32 of seconds since the epoch (0: use the Kafka timestamp).
            raise ReportFormatError(f"event_time {event_time!r} is outside the report format's 0..2**32-1 s")
        return when

    def flush(self, timeout: float | None = None) -> DeliveryStats:
        """Block until Kafka acknowledged every queued report; raises ServiceError when it cannot."""
        return self.publisher.flush(timeout)


def _reported_key(metric: MetricConfig) -> str:
    """The key of a metric in the reported-buckets file."""
    return f"{metric.name}:{metric.fingerprint:08x}"
