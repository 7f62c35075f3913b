"""The metric registry: one TOML file that producers, consumers and the decoder all read.

:class:`Registry` loads and validates it: ``[defaults]``, ``[metrics.NAME]`` (a mechanism and its parameters, or
a ``discovery`` table for strings without a dictionary, which expands into n-gram slot metrics and slot-pair
associations), ``[associations.NAME]`` (metrics one client reports together). Names follow ``NAME_RULE``; an
unknown setting or table is refused with the closest known one. Each metric's fingerprint is the first 4 bytes
(u32, big-endian) of SHA-256 over the canonical JSON of its id and mechanism parameters; every report carries
it, so counts made under other parameters never mix. Every field: docs/metrics.md#the-registry-file-field-by-field
(``deploy/metrics.toml`` is a complete example).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldpstream.errors import ConfigError, ParameterError
from ldpstream.mechanisms import MECHANISMS, Mechanism, make_mechanism
from ldpstream.mechanisms.base import DECODER_METHODS
from ldpstream.mechanisms.factory import DEFAULT_DISCOVERY_MECHANISM
from ldpstream.mechanisms.prefix_olh import DEFAULT_ALPHABET, PREFIX_HASHES, PrefixOLH

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

#: The names a registry may give its metrics and associations: they become parts of Redis keys, Prometheus
#: label values, file names of reports and arguments of every command, so they are kept plain (a discovery
#: metric's derived names add ``.ngram<j>`` and ``.pair<a>-<b>`` to its declared name).
NAME_RULE = "^[a-z][a-z0-9_]{0,63}$"
_NAME = re.compile("[a-z][a-z0-9_]{0,63}")
#: The tables a registry file may hold.
_TOP_KEYS = ("defaults", "metrics", "associations")

DEFAULT_TOPIC = "ldp-reports"
DEFAULT_BUCKET_SECONDS = 3600
DEFAULT_WINDOWS = ("all",)
_SETTING_KEYS = {"id", "topic", "bucket_seconds", "windows", "labels", "candidates", "estimator", "description",
                 "retention"}
_ASSOCIATION_KEYS = {"id", "metrics", "windows", "candidates", "retention", "description"}
_DISCOVERY_METRIC_KEYS = {"id", "topic", "bucket_seconds", "windows", "description", "retention", "discovery"}
#: Most n-grams per slot a discovery metric may have (|Σ|^n): the decoder tests every one at every slot.
MAX_DISCOVERY_NGRAMS = 2**16
#: Most members of one association (the report format carries the member count in a byte).
MAX_ASSOCIATION_MEMBERS = 8
#: Mechanisms the joint decoder's channels model (docs/math/joint.md): those whose class says it may be a member
#: (:attr:`~ldpstream.mechanisms.base.Mechanism.joint_member`); the others are refused as association members until
#: it models theirs.
JOINT_MECHANISMS: tuple[str, ...] = tuple(name for name, cls in MECHANISMS.items() if cls.joint_member)
#: Mechanisms that can carry a discovery metric's reports (docs/math/dictionary.md, "Which mechanisms"): the
#: hashed bit-vector families of :data:`JOINT_MECHANISMS`, whose reports the n-gram detection and the final
#: decode test against any candidate list and whose pairs the joint EM decodes
#: (:attr:`~ldpstream.mechanisms.base.Mechanism.discovery_carrier`).
DISCOVERY_MECHANISMS: tuple[str, ...] = tuple(name for name, cls in MECHANISMS.items() if cls.discovery_carrier)
#: Discovery settings that are options of the carrier's reports (its
#: :attr:`~ldpstream.mechanisms.base.Mechanism.discovery_options`).
_DISCOVERY_REPORT_OPTIONS: tuple[str, ...] = tuple(sorted(
    {option for name in DISCOVERY_MECHANISMS for option in MECHANISMS[name].discovery_options}))
_DISCOVERY_KEYS = {"epsilon", "length", "ngram", "alphabet", "pad", "positions", "full_share", "mechanism",
                   "full_bits", "ngram_bits", "hashes", "cohorts", "retire_after", "alpha", "pattern",
                   "max_candidates", "method", "step", "first", *_DISCOVERY_REPORT_OPTIONS}
#: Most extensions of one prefix the decoder tests at a step (|alphabet|^max(first, step)).
MAX_PREFIX_EXTENSIONS = 2**21
#: The settings of a prefix discovery metric (``method = "prefix"``): ``cohorts`` is its hash functions per group.
_PREFIX_KEYS = {"method", "epsilon", "length", "step", "first", "alphabet", "pad", "cohorts", "retire_after", "alpha",
                "pattern", "max_candidates"}


def discovery_mechanism_error(name: str) -> str | None:
    """``None`` when mechanism ``name`` can carry a discovery metric's reports, else why not."""
    if name in DISCOVERY_MECHANISMS:
        return None
    cls = MECHANISMS.get(name)
    why = (cls.discovery_refusal if cls is not None else None) or \
        f"{name!r} is not one of the joint decoder's bit-vector mechanisms"
    return (f"mechanism {name!r} cannot carry n-gram and full-string reports: {why}; use one of "
            f"{', '.join(DISCOVERY_MECHANISMS)}")
def check_name(kind: str, name: object) -> str:
    """``name`` when it is an allowed metric or association name (:data:`NAME_RULE`), else a ConfigError of one
    line naming it (cut to 40 characters) and the rule; ``kind`` is "metric" or "association"."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return name
    text = repr(name) if not isinstance(name, str) or len(name) <= 40 else \
        f"{name[:40]!r}... ({len(name):,} characters)"
    raise ConfigError(f"{kind} name {text} is not allowed: a name is 1 to 64 characters of a-z, 0-9 and _, "
                      f"starting with a letter ({NAME_RULE})")


def closest(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the known word nearest to ``word``, or "" when none is near."""
    match = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def unknown_keys(where: str, unknown: Iterable[str], known: Iterable[str], what: str = "setting") -> str:
    """One line refusing the ``unknown`` settings (``what``) of ``where``, suggesting the closest known one of
    each and listing the known ones."""
    known = sorted(known)
    unknown = sorted(unknown)
    named = ", ".join(f"{key}{closest(key, known)}" for key in unknown)
    return f"{where}: unknown {what}(s) {named}; known: {', '.join(known)}"


DEFAULT_JOINT_CANDIDATES = 5
_DURATION = re.compile(r"(\d+)([smhd])")
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
        match = _DURATION.fullmatch(text) if isinstance(text, str) else None
        if not match:
            raise ConfigError(f"window {text!r} is neither 'all' nor a duration like '15m', '1h', '7d'")
        return cls(text, int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


@dataclass(frozen=True)
class DiscoveryConfig:
    """The string shape, budget and decoder settings of a metric without a dictionary (module docstring;
    docs/math/dictionary.md). The shape and budget are part of the fingerprints of every metric it expands to;
    ``retire_after``, ``alpha``, ``pattern`` and ``max_candidates`` only change how the decoder reads them."""

    length: int = 8
    ngram: int = 2
    alphabet: str = DEFAULT_ALPHABET
    pad: str = "$"
    #: The client's total ε over its reports (basic composition).
    epsilon: float = 4.0
    full_share: float = 1.0 / 3.0
    positions: int = 2
    retire_after: int = 3
    alpha: float = 0.10
    pattern: str | None = None
    max_candidates: int = 2_000
    #: ``ngram`` (n-grams and the full string, the budget split) or ``prefix`` (the clients split into groups, one
    #: prefix report each at the whole ε through :class:`~ldpstream.mechanisms.prefix_olh.PrefixOLH`; ``step`` and
    #: ``first`` its schedule; docs/math/dictionary.md#prefix-extension).
    method: str = "ngram"
    step: int = 2
    first: int = 2

    def __post_init__(self) -> None:
        if self.method not in ("ngram", "prefix"):
            raise ConfigError(f"discovery: method must be 'ngram' or 'prefix', got {self.method!r}")
        if not isinstance(self.pad, str) or len(self.pad) != 1:
            raise ConfigError(f"discovery: pad must be one character, got {self.pad!r}")
        if not isinstance(self.alphabet, str) or not self.alphabet:
            raise ConfigError("discovery: alphabet must be a non-empty string")
        if self.pad not in self.alphabet:
            object.__setattr__(self, "alphabet", self.alphabet + self.pad)
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ConfigError("discovery: the alphabet repeats a character")
        if self.method == "prefix":
            self._check_decoding()
            return
        if self.ngram < 1 or self.length < 2 * self.ngram or self.length % self.ngram:
            raise ConfigError(f"discovery: length ({self.length}) must be a multiple of ngram ({self.ngram}) with "
                              "at least two slots")
        if len(self.alphabet) ** self.ngram > MAX_DISCOVERY_NGRAMS:
            raise ConfigError(f"discovery: |alphabet|^ngram = {len(self.alphabet)}^{self.ngram} n-grams; at most "
                              f"{MAX_DISCOVERY_NGRAMS} are decoded per slot")
        if self.positions != 2:
            raise ConfigError("discovery: positions must be 2 (each client reports one pair of slots, the pair "
                              "the joint estimation reads)")
        if not 0 < self.full_share < 1:
            raise ConfigError(f"discovery: full_share must lie in (0, 1), got {self.full_share}")
        self._check_decoding()

    def _check_decoding(self) -> None:
        """The checks both methods share: the budget and the decoder's settings."""
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ConfigError(f"discovery: epsilon must be positive and finite, got {self.epsilon}")
        if self.retire_after < 1:
            raise ConfigError("discovery: retire_after must be at least 1 decode")
        if not 0 < self.alpha < 1:
            raise ConfigError(f"discovery: alpha must lie in (0, 1), got {self.alpha}")
        if self.max_candidates < 1:
            raise ConfigError("discovery: max_candidates must be positive")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ConfigError(f"discovery: pattern is not a regular expression: {exc}") from None

    @property
    def slots(self) -> int:
        """k = M / n n-gram positions."""
        return self.length // self.ngram

    @property
    def slot_pairs(self) -> list[tuple[int, int]]:
        """The unordered slot pairs (a < b), in the order their associations take ids."""
        return [(a, b) for a in range(self.slots) for b in range(a + 1, self.slots)]

    @property
    def ngram_epsilon(self) -> float:
        """ε of one n-gram report: the rest of the budget after the full-string report, split evenly."""
        return self.epsilon * (1.0 - self.full_share) / self.positions

    @property
    def full_epsilon(self) -> float:
        return self.epsilon * self.full_share

    def parameters(self) -> dict[str, Any]:
        """What the reports mean (in the fingerprints): the shape and the budget."""
        if self.method == "prefix":  # the mechanism's own parameters hold the schedule
            return {"method": "prefix"}
        return {"length": self.length, "ngram": self.ngram, "alphabet": self.alphabet, "pad": self.pad,
                "epsilon": self.epsilon, "full_share": self.full_share, "positions": self.positions}


def discovery_slot_name(metric: str, slot: int) -> str:
    """The name of the n-gram metric of ``slot`` of discovery metric ``metric``."""
    return f"{metric}.ngram{slot}"


def discovery_pair_name(metric: str, a: int, b: int) -> str:
    """The name of the association of slots ``a < b`` of discovery metric ``metric``."""
    return f"{metric}.pair{a}-{b}"


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
    #: A metric without a dictionary (its full-string reports), or one of its n-gram slots (``part_of``).
    discovery: DiscoveryConfig | None = None
    #: The discovery metric this n-gram metric belongs to (its slot is ``slot``); the decoder reads it there.
    part_of: str | None = None
    slot: int | None = None
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
        parameters: dict[str, Any] = dict(self.mechanism.parameters())
        if self.discovery is not None:  # the string shape and budget change what a report means
            parameters["discovery"] = self.discovery.parameters()
            if self.slot is not None:
                parameters["slot"] = self.slot
        object.__setattr__(self, "fingerprint", fingerprint(self.id, parameters))

    @property
    def discovers(self) -> bool:
        """Whether this is a discovery metric's full-string metric (the one its dictionary is published under)."""
        return self.discovery is not None and self.part_of is None

    def value_names(self) -> tuple[str, ...]:
        """Names of the estimated values: candidates, labels, or the symbols' numbers."""
        if self.candidates is not None:
            return self.candidates
        if self.labels is not None:
            return self.labels
        support = getattr(self.mechanism, "support", None) or self.mechanism.k
        return tuple(str(i) for i in range(support))


@dataclass(frozen=True)
class AssociationConfig:
    """Metrics one client reports together (one wire record, version 2), for their joint distribution.

    The members keep their own mechanisms, ε and marginal sketches; the consumers also keep the association's
    pair statistic per time bucket, which expires ``retention_seconds`` after its bucket ends (there is no
    all-time pair store: the longest joint window is the retention, and ``all`` means every retained bucket).
    """

    name: str
    #: u16, unique among associations (a separate id space from the metrics'), carried by every record.
    id: int
    #: The member metrics, in their order on the wire.
    metrics: tuple[MetricConfig, ...]
    #: Seconds a bucket's pair statistic is kept after the bucket ends (at most every member's retention).
    retention_seconds: int
    windows: tuple[Window, ...] = tuple(Window.parse(w) for w in DEFAULT_WINDOWS)
    #: How many top values of each member's marginal estimate the joint decoder keeps (plus "Other").
    candidates: int = DEFAULT_JOINT_CANDIDATES
    description: str = ""
    #: Metrics whose reports every record carries after the members' (``carried``): they count in their own
    #: sketches, as a member's report does, but stay out of the pair statistic (a discovery metric's full-string
    #: report riding with the n-gram pair of its slots).
    riders: tuple[MetricConfig, ...] = ()
    #: The discovery metric that declared this association (the decoder reads it there, not as a joint table).
    part_of: str | None = None
    fingerprint: int = field(init=False)

    def __post_init__(self) -> None:
        where = f"association {self.name!r}"
        if not 0 <= self.id <= 0xFFFF:
            raise ConfigError(f"{where}: id must be in 0..65535")
        if not 2 <= len(self.metrics) <= MAX_ASSOCIATION_MEMBERS:
            raise ConfigError(f"{where}: needs 2 to {MAX_ASSOCIATION_MEMBERS} member metrics, got {len(self.metrics)}")
        names = [m.name for m in self.carried]
        if len(self.carried) > MAX_ASSOCIATION_MEMBERS:
            raise ConfigError(f"{where}: a record carries at most {MAX_ASSOCIATION_MEMBERS} reports")
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: a metric may appear once among its members ({', '.join(names)})")
        for member in self.metrics:
            if member.mechanism.name not in JOINT_MECHANISMS:
                raise ConfigError(f"{where}: member {member.name!r} uses {member.mechanism.name}, which the joint "
                                  f"decoder does not model yet; members may use {', '.join(JOINT_MECHANISMS)}")
        first = self.metrics[0]
        for other in self.carried[1:]:
            if other.topic != first.topic:
                raise ConfigError(f"{where}: members {first.name!r} (topic {first.topic!r}) and {other.name!r} "
                                  f"(topic {other.topic!r}) must share one topic (a record goes to one topic)")
            if other.bucket_seconds != first.bucket_seconds:
                raise ConfigError(f"{where}: members {first.name!r} ({first.bucket_seconds} s) and {other.name!r} "
                                  f"({other.bucket_seconds} s) must share bucket_seconds (a pair is counted in "
                                  "one bucket)")
        if not 0 < self.retention_seconds <= MAX_RETENTION_SECONDS:
            raise ConfigError(f"{where}: retention must be positive and at most 3650d")
        for member in self.carried:
            if member.retention_seconds is not None and member.retention_seconds < self.retention_seconds:
                raise ConfigError(f"{where}: retention is longer than member {member.name!r}'s; pairs would outlive "
                                  "the marginal counts they must agree with")
        longest = max((w.seconds for w in self.windows if w.seconds is not None), default=0)
        if longest > self.retention_seconds:
            raise ConfigError(f"{where}: a window is longer than the association's retention "
                              f"({self.retention_seconds} s): joint state lives per bucket and expires with it")
        if isinstance(self.candidates, bool) or not isinstance(self.candidates, int) or self.candidates < 1:
            raise ConfigError(f"{where}: candidates must be a positive integer (the decoder's top count)")
        object.__setattr__(self, "fingerprint", association_fingerprint(
            self.id, [(m.id, m.fingerprint) for m in self.metrics], [(m.id, m.fingerprint) for m in self.riders]))

    @property
    def carried(self) -> tuple[MetricConfig, ...]:
        """Every metric a record carries a report of, in wire order: the members, then the riders."""
        return self.metrics + self.riders

    @property
    def members(self) -> tuple[str, ...]:
        """The member metrics' names, in their order on the wire."""
        return tuple(m.name for m in self.metrics)

    @property
    def topic(self) -> str:
        return self.metrics[0].topic

    @property
    def bucket_seconds(self) -> int:
        return self.metrics[0].bucket_seconds

    @property
    def longest_window_seconds(self) -> int:
        """The longest joint window: the retention (``all`` covers every bucket still retained)."""
        return self.retention_seconds

    @property
    def epsilon(self) -> float:
        """ε of one associated record: the carried reports' ε summed (sequential composition)."""
        return float(sum(m.mechanism.epsilon for m in self.carried))

    @property
    def epsilon_inf(self) -> float:
        """ε over any number of records of one tuple of values: the members' ε∞ summed (infinite when a member's
        is: each of its reports spends ε again)."""
        return float(sum(m.mechanism.epsilon_inf for m in self.carried))


def association_fingerprint(association_id: int, members: list[tuple[int, int]],
                            riders: list[tuple[int, int]] | None = None) -> int:
    """u32 fingerprint of an association: SHA-256 of canonical JSON of its id and its members' (id, fingerprint)
    in order (and its riders', when it has any), so a record made under other member parameters or another
    member order is refused."""
    body: dict[str, Any] = {"association": association_id, "members": [list(m) for m in members]}
    if riders:
        body["riders"] = [list(m) for m in riders]
    canonical = json.dumps(body, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:4], "big")


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
    #: Associations of metrics reported together, by name (see the module docstring).
    associations: Mapping[str, AssociationConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids: dict[int, str] = {}
        for name, metric in self.metrics.items():
            if metric.id in ids:
                raise ConfigError(f"metrics {ids[metric.id]!r} and {name!r} share id {metric.id}")
            ids[metric.id] = name
        association_ids: dict[int, str] = {}
        for name, association in self.associations.items():
            if association.id in association_ids:
                raise ConfigError(f"associations {association_ids[association.id]!r} and {name!r} share id "
                                  f"{association.id}")
            association_ids[association.id] = name
            for member in association.carried:
                mine = self.metrics.get(member.name)
                if mine is None or mine.fingerprint != member.fingerprint:
                    raise ConfigError(f"association {name!r}: member {member.name!r} is not this registry's metric "
                                      "(absent, or made under other parameters)")

    @property
    def associations_by_id(self) -> dict[int, AssociationConfig]:
        return {a.id: a for a in self.associations.values()}

    def association(self, name: str) -> AssociationConfig:
        """The association named ``name``, or a ConfigError listing the known ones."""
        try:
            return self.associations[name]
        except KeyError:
            known = ", ".join(sorted(self.associations)) or "none"
            raise ConfigError(f"no association named {name!r} in the registry{closest(name, self.associations)} "
                              f"(known: {known})") from None

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
            raise ConfigError(f"no metric named {name!r} in the registry{closest(name, self.metrics)} "
                              f"(known: {known})") from None

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
        unknown = sorted(set(data) - set(_TOP_KEYS))
        if unknown:
            raise ConfigError(unknown_keys("the registry", unknown, _TOP_KEYS))
        defaults = data.get("defaults", {})
        if not isinstance(defaults, Mapping):
            raise ConfigError("the registry's [defaults] must be a table")
        metrics_table = data.get("metrics")
        if not isinstance(metrics_table, Mapping) or not metrics_table:
            raise ConfigError("the registry defines no [metrics.NAME] table")
        for name in metrics_table:
            check_name("metric", name)
        bad = [name for name, table in metrics_table.items() if not isinstance(table, Mapping)]
        if bad:
            raise ConfigError(f"metrics.{bad[0]} must be a table")
        metrics: dict[str, MetricConfig] = {}
        derived: dict[str, AssociationConfig] = {}
        for name, table in metrics_table.items():
            if "discovery" in table:
                parts, pairs = _discovery_from_table(name, {**defaults, **table})
                clash = sorted((set(parts) - {name}) & set(metrics_table))
                if clash:
                    raise ConfigError(f"metric {name!r} (discovery) names its n-gram metric {clash[0]!r}, which the "
                                      "registry also declares")
                metrics.update(parts)
                derived.update(pairs)
            else:
                metrics[name] = _metric_from_table(name, {**defaults, **table}, base_dir)
        associations_table = data.get("associations", {})
        if not isinstance(associations_table, Mapping):
            raise ConfigError("the registry's [associations] must be a table of [associations.NAME] tables")
        for name in associations_table:
            check_name("association", name)
        associations = {name: _association_from_table(name, table, metrics)
                        for name, table in associations_table.items()}
        clash = sorted(set(associations) & set(derived))
        if clash:
            raise ConfigError(f"association {clash[0]!r} is also the name of a discovery metric's slot pair")
        associations.update(derived)
        return cls(metrics=metrics, source=source, associations=associations)


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
    kind = MECHANISMS.get(str(spec.get("mechanism", "")).lower())
    if kind is not None:  # unknown settings: named here with the closest known one (the factory lists them all)
        parameters = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
        unknown = sorted(set(spec) - parameters - {"mechanism"})
        if unknown:
            raise ConfigError(unknown_keys(f"metric {name!r} ({spec['mechanism']})", unknown,
                                           parameters | _SETTING_KEYS | {"mechanism"}))
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


def _discovery_from_table(name: str, table: Mapping[str, Any]
                          ) -> tuple[dict[str, MetricConfig], dict[str, AssociationConfig]]:
    """The metrics and associations a discovery metric expands to (module docstring)."""
    unknown = sorted(set(table) - _DISCOVERY_METRIC_KEYS)
    if unknown:
        raise ConfigError(unknown_keys(f"metric {name!r} (discovery)", unknown, _DISCOVERY_METRIC_KEYS)
                          + f" (the mechanism of its reports goes in its discovery table, known there: "
                          f"{', '.join(sorted(_DISCOVERY_KEYS))})")
    if "id" not in table:
        raise ConfigError(f"metric {name!r} has no id")
    spec = table["discovery"]
    if not isinstance(spec, Mapping):
        raise ConfigError(f"metric {name!r}: discovery must be a table ([metrics.{name}.discovery])")
    unknown = sorted(set(spec) - _DISCOVERY_KEYS)
    if unknown:
        raise ConfigError(unknown_keys(f"metric {name!r}", unknown, _DISCOVERY_KEYS, what="discovery setting"))
    where = f"metric {name!r}: discovery"
    method = spec.get("method", "ngram")
    if method not in ("ngram", "prefix"):
        raise ConfigError(f"{where}: method must be \"ngram\" or \"prefix\", got {method!r}")
    if method == "prefix":
        return _prefix_discovery(name, table, spec), {}
    numbers = {key: spec[key] for key in ("epsilon", "full_share", "alpha", *_DISCOVERY_REPORT_OPTIONS) if key in spec}
    for key, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    counts = {key: _integer(name, key, spec[key]) for key in
              ("length", "ngram", "positions", "full_bits", "ngram_bits", "hashes", "cohorts", "retire_after",
               "max_candidates") if key in spec}
    texts = {key: _string(name, key, spec[key]) for key in ("alphabet", "pad", "mechanism", "pattern") if key in spec}
    mechanism = texts.get("mechanism", DEFAULT_DISCOVERY_MECHANISM)
    refusal = discovery_mechanism_error(mechanism)
    if refusal is not None:
        raise ConfigError(f"{where}: {refusal}")
    carrier = MECHANISMS[mechanism]
    report_options = {key: float(numbers[key]) for key in _DISCOVERY_REPORT_OPTIONS if key in numbers}
    foreign = sorted(set(report_options) - set(carrier.discovery_options))
    if foreign:
        owners = [n for n in DISCOVERY_MECHANISMS if set(foreign) <= set(MECHANISMS[n].discovery_options)]
        raise ConfigError(f"{where}: {', '.join(foreign)} is not an option of {mechanism} reports (its options: "
                          f"{', '.join(carrier.discovery_options) or 'none'}; {', '.join(foreign)} is one of "
                          f"{', '.join(owners)}'s)")
    options: dict[str, Any] = {k: v for k, v in counts.items() if k in ("length", "ngram", "positions", "retire_after",
                                                                      "max_candidates")}
    options.update({k: v for k, v in texts.items() if k in ("alphabet", "pad", "pattern")})
    options.update({k: float(v) for k, v in numbers.items() if k not in _DISCOVERY_REPORT_OPTIONS})
    try:
        config = DiscoveryConfig(**options)
    except ConfigError as exc:
        raise ConfigError(f"metric {name!r}: {exc}") from None
    hashes = counts.get("hashes", 2)
    cohorts = counts.get("cohorts", 32)
    if hashes < 1:
        raise ConfigError(f"{where}: hashes must be at least 1")

    def report_mechanism(epsilon: float, bits: int) -> Mechanism:
        # ε per report is exactly ``epsilon`` (docs/math/dictionary.md, "The budget")
        try:
            return carrier.discovery_report(epsilon, bits, hashes, cohorts, **report_options)
        except (ParameterError, TypeError) as exc:
            raise ConfigError(f"{where}: {exc}") from None

    settings: dict[str, Any] = {
        "topic": _string(name, "topic", table.get("topic", DEFAULT_TOPIC)),
        "bucket_seconds": _integer(name, "bucket_seconds", table.get("bucket_seconds", DEFAULT_BUCKET_SECONDS)),
        "description": _string(name, "description", table.get("description", "")),
    }
    windows = table.get("windows", DEFAULT_WINDOWS)
    if not isinstance(windows, list | tuple) or not all(isinstance(w, str) for w in windows):
        raise ConfigError(f"metric {name!r}: windows must be a list like [\"all\", \"1h\"]")
    settings["windows"] = tuple(Window.parse(w) for w in windows)
    if table.get("retention") is None:
        raise ConfigError(f"metric {name!r} (discovery): give it a retention, e.g. retention = \"30d\": its pair "
                          "statistics live per bucket and must expire")
    settings["retention_seconds"] = _duration(name, str(table["retention"]))
    base = _integer(name, "id", table["id"])
    if base + max(config.slots, len(config.slot_pairs) - 1) > 0xFFFF:
        raise ConfigError(f"metric {name!r}: its n-gram metrics take ids {base + 1}..{base + config.slots} and its "
                          f"slot pairs association ids {base}..{base + len(config.slot_pairs) - 1}: past 65535")
    full_mechanism = report_mechanism(config.full_epsilon, counts.get("full_bits", 128))
    full = MetricConfig(name=name, id=base, mechanism=full_mechanism, estimator="ls", discovery=config, **settings)
    ngram_mechanism = report_mechanism(config.ngram_epsilon, counts.get("ngram_bits", 128))
    slots = [MetricConfig(name=discovery_slot_name(name, j), id=base + 1 + j, mechanism=ngram_mechanism,
                          estimator="ls", discovery=config, part_of=name, slot=j, **settings)
             for j in range(config.slots)]
    metrics = {full.name: full, **{m.name: m for m in slots}}
    associations = {}
    for rank, (a, b) in enumerate(config.slot_pairs):
        pair = discovery_pair_name(name, a, b)
        associations[pair] = AssociationConfig(
            name=pair, id=base + rank, metrics=(slots[a], slots[b]), riders=(full,),
            retention_seconds=settings["retention_seconds"], windows=settings["windows"], part_of=name,
            description=f"slots {a} and {b} of discovery metric {name!r}")
    return metrics, associations


def _prefix_discovery(name: str, table: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, MetricConfig]:
    """A prefix discovery metric: one metric of :class:`~ldpstream.mechanisms.prefix_olh.PrefixOLH` reports."""
    where = f"metric {name!r}: discovery"
    unknown = sorted(set(spec) - _PREFIX_KEYS)
    if unknown:
        raise ConfigError(unknown_keys(f"{where} (method prefix)", unknown, _PREFIX_KEYS, what="setting"))
    for key in ("epsilon", "alpha"):
        if key in spec and (isinstance(spec[key], bool) or not isinstance(spec[key], int | float)):
            raise ConfigError(f"{where}: {key} must be a number, got {spec[key]!r}")
    counts = {key: _integer(name, key, spec[key]) for key in ("length", "step", "first", "cohorts", "retire_after",
                                                             "max_candidates") if key in spec}
    texts = {key: _string(name, key, spec[key]) for key in ("alphabet", "pad", "pattern") if key in spec}
    options: dict[str, Any] = {"method": "prefix", "length": counts.get("length", 16),
                               **{k: v for k, v in counts.items() if k in ("step", "first", "retire_after",
                                                                          "max_candidates", "length")},
                               **texts, **{k: float(spec[k]) for k in ("epsilon", "alpha") if k in spec}}
    try:
        config = DiscoveryConfig(**options)
        mechanism = PrefixOLH.for_strings(config.epsilon, hashes=counts.get("cohorts", PREFIX_HASHES),
                                          length=config.length, step=config.step, first=config.first,
                                          characters=config.alphabet, pad=config.pad)
    except (ConfigError, ParameterError) as exc:
        raise ConfigError(f"metric {name!r}: {exc}") from None
    widest = max(mechanism.first, mechanism.step)
    if len(mechanism.characters) ** widest > MAX_PREFIX_EXTENSIONS:
        raise ConfigError(f"{where}: {len(mechanism.characters)}^{widest} candidates per prefix (first or step "
                          f"{widest}); at most {MAX_PREFIX_EXTENSIONS:,} are decoded: a shorter first or step")
    windows = table.get("windows", DEFAULT_WINDOWS)
    if not isinstance(windows, list | tuple) or not all(isinstance(w, str) for w in windows):
        raise ConfigError(f"metric {name!r}: windows must be a list like [\"all\", \"1h\"]")
    metric = MetricConfig(
        name=name, id=_integer(name, "id", table["id"]), mechanism=mechanism, estimator="ls", discovery=config,
        topic=_string(name, "topic", table.get("topic", DEFAULT_TOPIC)),
        bucket_seconds=_integer(name, "bucket_seconds", table.get("bucket_seconds", DEFAULT_BUCKET_SECONDS)),
        description=_string(name, "description", table.get("description", "")),
        windows=tuple(Window.parse(w) for w in windows),
        retention_seconds=None if table.get("retention") is None else _duration(name, str(table["retention"])))
    return {name: metric}


def _association_from_table(name: str, table: Any, metrics: Mapping[str, MetricConfig]) -> AssociationConfig:
    where = f"association {name!r}"
    if not isinstance(table, Mapping):
        raise ConfigError(f"associations.{name} must be a table")
    unknown = sorted(set(table) - _ASSOCIATION_KEYS)
    if unknown:
        raise ConfigError(unknown_keys(where, unknown, _ASSOCIATION_KEYS))
    if "id" not in table:
        raise ConfigError(f"{where} has no id")
    members = table.get("metrics")
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        raise ConfigError(f"{where}: metrics must be a list of metric names, like [\"x\", \"y\"]")
    missing = [m for m in members if m not in metrics]
    if missing:
        raise ConfigError(f"{where}: no metric named {missing[0]!r} in the registry")
    member_configs = tuple(metrics[m] for m in members)
    discovering = [m.name for m in member_configs if m.discovery is not None]
    if discovering:
        raise ConfigError(f"{where}: {discovering[0]!r} is a discovery metric: its reports are decoded as its "
                          "dictionary, not as an association member")
    if "retention" in table:
        retention = Window.parse(str(table["retention"])).seconds
        if retention is None:
            raise ConfigError(f"{where}: retention must be a duration like '30d', not {table['retention']!r}")
    else:
        kept = [m.retention_seconds for m in member_configs if m.retention_seconds is not None]
        if not kept:
            raise ConfigError(f"{where}: its members keep their buckets forever, but pair statistics live per bucket "
                              "and must expire: give the association (or its members) a retention, e.g. "
                              "retention = \"30d\"")
        retention = min(kept)
    windows = table.get("windows", list(DEFAULT_WINDOWS))
    if not isinstance(windows, list | tuple) or not all(isinstance(w, str) for w in windows):
        raise ConfigError(f"{where}: windows must be a list like [\"all\", \"1d\"]")
    return AssociationConfig(
        name=name,
        id=_integer(name, "id", table["id"], "association"),
        metrics=member_configs,
        retention_seconds=retention,
        windows=tuple(Window.parse(w) for w in windows),
        candidates=_integer(name, "candidates", table.get("candidates", DEFAULT_JOINT_CANDIDATES), "association"),
        description=_string(name, "description", table.get("description", ""), "association"),
    )


def _integer(metric: str, key: str, value: Any, what: str = "metric") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} {metric!r}: {key} must be an integer, got {value!r}")
    return value


def _string(metric: str, key: str, value: Any, what: str = "metric") -> str:
    if not isinstance(value, str) or (key == "topic" and not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", value)):
        raise ConfigError(f"{what} {metric!r}: {key} must be a{' Kafka topic name' if key == 'topic' else ' string'}"
                          f", got {value!r}")
    return value


def _duration(metric: str, text: str) -> int:
    seconds = Window.parse(text).seconds
    if seconds is None:
        raise ConfigError(f"metric {metric!r}: retention must be a duration like '30d', not {text!r}")
    return seconds
