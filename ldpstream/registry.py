"""The metric registry: one TOML file that producers, consumers and the decoder all read.

Example (``deploy/metrics.toml`` is a complete one)::

    [defaults]
    topic = "ldp-reports"        # Kafka topic of reports
    bucket_seconds = 3600        # width of a time bucket of the count sketches
    windows = ["all", "1h", "1d"]
    retention = "30d"            # bucket sketches expire this long after their bucket ends (default: never);
                                 # the all-time rollup is kept regardless

    [metrics.fruit]
    id = 1                       # u16, unique, carried by every report
    mechanism = "krr"            # krr | krappor | orr | orappor | rappor
    k = 8
    epsilon = 2.0
    labels = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "honeydew"]
    estimator = "project"        # unbiased | truncate | project | ls | nnls | mle

    [metrics.homepage]
    id = 2
    mechanism = "rappor"
    k = 128
    hashes = 2
    cohorts = 64
    p = 0.5
    q = 0.75
    f = 0.5
    candidates = "homepage-candidates.txt"   # one string a line, relative to this file; or a list

Each metric's *fingerprint* is the first 4 bytes (u32, big-endian) of SHA-256 over the canonical JSON of its
id and mechanism parameters. Every report carries it, and a consumer refuses reports whose fingerprint does
not match, so counts made under different parameters never mix. Labels, candidates, topic, windows and the
estimator are not part of it: they change how counts are read, not what they mean.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldpstream.errors import ConfigError, ParameterError
from ldpstream.mechanisms import Mechanism, make_mechanism

DEFAULT_TOPIC = "ldp-reports"
DEFAULT_BUCKET_SECONDS = 3600
DEFAULT_WINDOWS = ("all",)
_SETTING_KEYS = {"id", "topic", "bucket_seconds", "windows", "labels", "candidates", "estimator", "description",
                 "retention"}
_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Window:
    """A time window over the buckets: ``all`` (every bucket) or the last ``seconds`` (e.g. ``1h``)."""

    name: str
    seconds: int | None

    @classmethod
    def parse(cls, text: str) -> Window:
        if text == "all":
            return cls("all", None)
        match = _DURATION.match(text)
        if not match:
            raise ConfigError(f"window {text!r} is neither 'all' nor a duration like '15m', '1h', '7d'")
        return cls(text, int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


@dataclass(frozen=True)
class MetricConfig:
    """One metric: what clients privatize, how, where reports go, and how they are decoded."""

    name: str
    id: int
    mechanism: Mechanism
    topic: str = DEFAULT_TOPIC
    bucket_seconds: int = DEFAULT_BUCKET_SECONDS
    windows: tuple[Window, ...] = tuple(Window.parse(w) for w in DEFAULT_WINDOWS)
    estimator: str = "project"
    labels: tuple[str, ...] | None = None
    candidates: tuple[str, ...] | None = None
    description: str = ""
    #: Seconds a bucket sketch is kept after its bucket ends (None: forever).
    retention_seconds: int | None = None
    fingerprint: int = field(init=False)

    def __post_init__(self) -> None:
        if not 0 <= self.id <= 0xFFFF:
            raise ConfigError(f"metric {self.name!r}: id must be in 0..65535")
        if self.bucket_seconds <= 0:
            raise ConfigError(f"metric {self.name!r}: bucket_seconds must be positive")
        longest = max((w.seconds for w in self.windows if w.seconds is not None), default=0)
        if self.retention_seconds is not None and self.retention_seconds < longest:
            raise ConfigError(f"metric {self.name!r}: retention is shorter than its longest window")
        object.__setattr__(self, "fingerprint", fingerprint(self.id, self.mechanism.parameters()))

    def value_names(self) -> tuple[str, ...]:
        """Names of the estimated values: candidates, labels, or the symbols' numbers."""
        if self.candidates is not None:
            return self.candidates
        if self.labels is not None:
            return self.labels
        support = getattr(self.mechanism, "support", None) or self.mechanism.k
        return tuple(str(i) for i in range(support))


def fingerprint(metric_id: int, parameters: Mapping[str, Any]) -> int:
    """u32 fingerprint of a metric: SHA-256 of canonical JSON ``{"id": ..., "parameters": ...}``."""
    canonical = json.dumps({"id": metric_id, "parameters": dict(parameters)}, sort_keys=True,
                           separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:4], "big")


@dataclass(frozen=True)
class Registry:
    """All metrics, by name and by id."""

    metrics: Mapping[str, MetricConfig]
    source: Path | None = None

    def __post_init__(self) -> None:
        ids: dict[int, str] = {}
        for name, metric in self.metrics.items():
            if metric.id in ids:
                raise ConfigError(f"metrics {ids[metric.id]!r} and {name!r} share id {metric.id}")
            ids[metric.id] = name

    @property
    def by_id(self) -> dict[int, MetricConfig]:
        return {m.id: m for m in self.metrics.values()}

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({m.topic for m in self.metrics.values()}))

    def __getitem__(self, name: str) -> MetricConfig:
        try:
            return self.metrics[name]
        except KeyError:
            known = ", ".join(sorted(self.metrics)) or "none"
            raise ConfigError(f"no metric named {name!r} in the registry (known: {known})") from None

    @classmethod
    def load(cls, path: str | Path) -> Registry:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"metric registry {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"metric registry {path} is not valid TOML: {exc}") from exc
        return cls.from_dict(data, base_dir=path.parent, source=path)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: Path | None = None,
                  source: Path | None = None) -> Registry:
        defaults = dict(data.get("defaults", {}))
        metrics_table = data.get("metrics")
        if not isinstance(metrics_table, Mapping) or not metrics_table:
            raise ConfigError("the registry defines no [metrics.NAME] table")
        metrics = {name: _metric_from_table(name, {**defaults, **table}, base_dir)
                   for name, table in metrics_table.items()}
        return cls(metrics=metrics, source=source)


def _metric_from_table(name: str, table: Mapping[str, Any], base_dir: Path | None) -> MetricConfig:
    if "id" not in table:
        raise ConfigError(f"metric {name!r} has no id")
    spec = {key: value for key, value in table.items() if key not in _SETTING_KEYS}
    try:
        mechanism = make_mechanism(spec)
    except (ParameterError, TypeError, KeyError) as exc:
        raise ConfigError(f"metric {name!r}: {exc}") from exc
    candidates = table.get("candidates")
    if isinstance(candidates, str):
        candidate_path = (base_dir or Path.cwd()) / candidates
        try:
            candidates = [line for line in candidate_path.read_text().splitlines() if line]
        except FileNotFoundError:
            raise ConfigError(f"metric {name!r}: candidates file {candidate_path} does not exist") from None
    labels = table.get("labels")
    if labels is not None and len(labels) != (getattr(mechanism, "support", None) or mechanism.k):
        raise ConfigError(f"metric {name!r}: {len(labels)} labels for an alphabet of another size")
    return MetricConfig(
        name=name,
        id=int(table["id"]),
        mechanism=mechanism,
        topic=str(table.get("topic", DEFAULT_TOPIC)),
        bucket_seconds=int(table.get("bucket_seconds", DEFAULT_BUCKET_SECONDS)),
        windows=tuple(Window.parse(w) for w in table.get("windows", DEFAULT_WINDOWS)),
        estimator=str(table.get("estimator", "project")),
        labels=tuple(labels) if labels is not None else None,
        candidates=tuple(candidates) if candidates is not None else None,
        description=str(table.get("description", "")),
        retention_seconds=None if table.get("retention") is None else _duration(name, str(table["retention"])),
    )


def _duration(metric: str, text: str) -> int:
    seconds = Window.parse(text).seconds
    if seconds is None:
        raise ConfigError(f"metric {metric!r}: retention must be a duration like '30d', not {text!r}")
    return seconds
