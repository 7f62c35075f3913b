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
from ldpstream.mechanisms.base import DECODER_METHODS

#: The largest ε of one report a registry accepts. Privacy is void well before: at ε = 10 a k-RR report
#: tells the true value 22,026 times more often than any other. The papers' range (ε up to 10) stays usable;
#: beyond it a "private" metric would only look like one. (See docs/math/privacy-accounting.md.)
MAX_EPSILON = 10.0
#: The largest count sketch (cohorts × columns) of a metric: 2^21 cells, 16 MiB per sketch key. Wider
#: sketches would make every consumer batch allocate and send hundreds of megabytes.
MAX_SKETCH_CELLS = 2**21
#: The largest cohort number the report format carries (a u16).
MAX_COHORTS = 0xFFFF + 1
#: The largest payload the report format carries (a u16 length), hence at most 8 × 65,535 bits a report.
MAX_PAYLOAD_BYTES = 0xFFFF
#: The longest bucket a metric may use (a week): buckets are the unit of windows and retention.
MAX_BUCKET_SECONDS = 7 * 86400
#: The longest retention (10 years): bucket sketches then expire before the report format's u32 time ends.
MAX_RETENTION_SECONDS = 3650 * 86400

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
        if not 0 < self.bucket_seconds <= MAX_BUCKET_SECONDS:
            raise ConfigError(f"metric {self.name!r}: bucket_seconds must be in 1..{MAX_BUCKET_SECONDS} (a week)")
        if self.retention_seconds is not None and not 0 < self.retention_seconds <= MAX_RETENTION_SECONDS:
            raise ConfigError(f"metric {self.name!r}: retention must be positive and at most 3650d")
        _check_mechanism_fits(self.name, self.mechanism)
        methods = DECODER_METHODS[self.mechanism.decoder_family]
        if self.estimator not in methods:
            raise ConfigError(f"metric {self.name!r}: estimator {self.estimator!r} is not one of {', '.join(methods)} "
                              f"(the {self.mechanism.name} decoders)")
        if self.labels is not None:
            if not all(isinstance(label, str) for label in self.labels):
                raise ConfigError(f"metric {self.name!r}: labels must be a list of strings")
            if len(set(self.labels)) != len(self.labels):
                raise ConfigError(f"metric {self.name!r}: labels must be distinct")
        if self.candidates is not None and (not all(isinstance(c, str) for c in self.candidates)
                                            or len(set(self.candidates)) != len(self.candidates)):
            raise ConfigError(f"metric {self.name!r}: candidates must be distinct strings")
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
            data = tomllib.loads(_read_text(path, "metric registry"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"metric registry {path} is not valid TOML: {exc}") from exc
        return cls.from_dict(data, base_dir=path.parent, source=path)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: Path | None = None,
                  source: Path | None = None) -> Registry:
        defaults = data.get("defaults", {})
        if not isinstance(defaults, Mapping):
            raise ConfigError("the registry's [defaults] must be a table")
        metrics_table = data.get("metrics")
        if not isinstance(metrics_table, Mapping) or not metrics_table:
            raise ConfigError("the registry defines no [metrics.NAME] table")
        bad = [name for name, table in metrics_table.items() if not isinstance(table, Mapping)]
        if bad:
            raise ConfigError(f"metrics.{bad[0]} must be a table")
        metrics = {name: _metric_from_table(name, {**defaults, **table}, base_dir)
                   for name, table in metrics_table.items()}
        return cls(metrics=metrics, source=source)


def _check_mechanism_fits(name: str, mechanism: Mechanism) -> None:
    """Refuse mechanisms the report format, the consumers' memory or privacy cannot carry."""
    if not mechanism.epsilon <= MAX_EPSILON:  # also refuses NaN and infinity (RAPPOR with p = 0, q = 1, f = 0)
        raise ConfigError(f"metric {name!r}: ε of one report is {mechanism.epsilon:g}; at most {MAX_EPSILON:g} "
                          "is accepted (beyond it a report all but reveals the value)")
    permanent = getattr(mechanism, "epsilon_permanent", None)  # k-RR, k-RAPPOR, O-RR, O-RAPPOR (> ε: constructors)
    if permanent is not None and not permanent <= MAX_EPSILON:
        raise ConfigError(f"metric {name!r}: epsilon_permanent (ε of all reports of one value) is {permanent:g}; at "
                          f"most {MAX_EPSILON:g} is accepted (beyond it the permanent response all but reveals the "
                          "value)")
    if mechanism.cohorts > MAX_COHORTS:
        raise ConfigError(f"metric {name!r}: {mechanism.cohorts} cohorts; the report format carries at most "
                          f"{MAX_COHORTS}")
    if mechanism.report_kind == "bits" and -(-mechanism.k // 8) > MAX_PAYLOAD_BYTES:
        raise ConfigError(f"metric {name!r}: {mechanism.k} bits exceed the report format's payload")
    try:  # every device must be able to build its encoder (RAPPOR's PRR realizes f with 7 bits, for one)
        mechanism.client_encoder(bytes(32), 0)
    except ParameterError as exc:
        raise ConfigError(f"metric {name!r}: clients could not encode its reports: {exc}") from None
    cells = mechanism.cohorts * mechanism.sketch_width
    if cells > MAX_SKETCH_CELLS:
        raise ConfigError(f"metric {name!r}: its count sketch would have {cells:,} cells (cohorts × width); "
                          f"at most {MAX_SKETCH_CELLS:,} are accepted")


def _read_text(path: Path, what: str) -> str:
    """A UTF-8 text file's contents, or a ConfigError that names the file and the problem."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path} is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from None


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
        candidates = [line for line in _read_text(candidate_path, f"metric {name!r}: candidates file").splitlines()
                      if line]
    elif candidates is not None and not isinstance(candidates, list):
        raise ConfigError(f"metric {name!r}: candidates must be a list of strings or a file name")
    labels = table.get("labels")
    if labels is not None:
        if not isinstance(labels, list):
            raise ConfigError(f"metric {name!r}: labels must be a list of strings")
        if len(labels) != (getattr(mechanism, "support", None) or mechanism.k):
            raise ConfigError(f"metric {name!r}: {len(labels)} labels for an alphabet of another size")
    windows = table.get("windows", DEFAULT_WINDOWS)
    if not isinstance(windows, list | tuple) or not all(isinstance(w, str) for w in windows):
        raise ConfigError(f"metric {name!r}: windows must be a list like [\"all\", \"1h\"]")
    return MetricConfig(
        name=name,
        id=_integer(name, "id", table["id"]),
        mechanism=mechanism,
        topic=_string(name, "topic", table.get("topic", DEFAULT_TOPIC)),
        bucket_seconds=_integer(name, "bucket_seconds", table.get("bucket_seconds", DEFAULT_BUCKET_SECONDS)),
        windows=tuple(Window.parse(w) for w in windows),
        estimator=_string(name, "estimator", table.get("estimator", "project")),
        labels=tuple(labels) if labels is not None else None,
        candidates=tuple(candidates) if candidates is not None else None,
        description=_string(name, "description", table.get("description", "")),
        retention_seconds=None if table.get("retention") is None else _duration(name, str(table["retention"])),
    )


def _integer(metric: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"metric {metric!r}: {key} must be an integer, got {value!r}")
    return value


def _string(metric: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or (key == "topic" and not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", value)):
        raise ConfigError(f"metric {metric!r}: {key} must be a{' Kafka topic name' if key == 'topic' else ' string'}"
                          f", got {value!r}")
    return value


def _duration(metric: str, text: str) -> int:
    seconds = Window.parse(text).seconds
    if seconds is None:
        raise ConfigError(f"metric {metric!r}: retention must be a duration like '30d', not {text!r}")
    return seconds
