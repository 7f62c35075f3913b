"""The service configuration: one object from which every Kafka and Redis client of every process is built.

Each setting is taken from the first source that has it: command-line flags, then the environment, then a
configuration file (``--config FILE`` or ``LDPSTREAM_CONFIG``), then the default (the local stack's address).
It is validated when it is built, with an error that names the setting and its source.

=============================  ========================================  ==========================  ===========
environment variable           meaning                                   file key                    flag
=============================  ========================================  ==========================  ===========
``LDPSTREAM_KAFKA``            Kafka bootstrap servers                   ``kafka.bootstrap``         ``--kafka``
``LDPSTREAM_KAFKA_CONFIG``     librdkafka settings of every Kafka        ``kafka.config`` (table)    ``--kafka-config``
                               client, ``key=value,key=value``
``LDPSTREAM_REDIS``            Redis URL                                 ``redis.url``               ``--redis``
``LDPSTREAM_PREFIX``           key prefix of everything in Redis         ``redis.prefix``            ``--prefix``
``LDPSTREAM_REGISTRY``         metric registry file                      ``registry``                ``--registry``
=============================  ========================================  ==========================  ===========

The group consumer also takes ``--consumer-config KEY=VALUE`` (file: ``kafka.consumer`` table) for settings
that concern it alone (``session.timeout.ms``, ``group.instance.id``, ...).

A configuration file::

    registry = "deploy/metrics.toml"

    [kafka]
    bootstrap = "kafka-0:9092,kafka-1:9092"
    config = { "client.id" = "ldpstream" }
    consumer = { "session.timeout.ms" = "6000" }

    [redis]
    url = "redis://redis:6379/0"
    prefix = "ldp"
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ldpstream.errors import ConfigError

if TYPE_CHECKING:
    import redis

    from ldpstream.store.redis_store import RedisSketchStore

DEFAULT_PREFIX = "ldp"
DEFAULT_REGISTRY = "metrics.toml"

#: Where the local stack (``ldpstream stack up``) listens unless its ports are moved by these variables.
LOCAL_KAFKA_PORT = 39092
LOCAL_CONTROLLER_PORT = 39093
LOCAL_REDIS_PORT = 36379


def local_stack_ports(environ: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """The local stack's (Kafka, KRaft controller, Redis) ports: ``LDPSTREAM_STACK_*_PORT`` or the defaults."""
    env = os.environ if environ is None else environ
    try:
        return (int(env.get("LDPSTREAM_STACK_KAFKA_PORT", LOCAL_KAFKA_PORT)),
                int(env.get("LDPSTREAM_STACK_CONTROLLER_PORT", LOCAL_CONTROLLER_PORT)),
                int(env.get("LDPSTREAM_STACK_REDIS_PORT", LOCAL_REDIS_PORT)))
    except ValueError as exc:
        raise ConfigError(f"LDPSTREAM_STACK_*_PORT must be port numbers: {exc}") from exc


def parse_key_values(pairs: Iterable[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` strings → a mapping; ``what`` names the source in errors.

    >>> parse_key_values(["session.timeout.ms=6000", " acks = all "], "--kafka-config")
    {'session.timeout.ms': '6000', 'acks': 'all'}
    >>> parse_key_values(["acks"], "--kafka-config")
    Traceback (most recent call last):
    ...
    ldpstream.errors.ConfigError: --kafka-config expects KEY=VALUE, got 'acks'
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class KafkaConfig:
    """Where Kafka is and the librdkafka settings every client gets; builds each client's configuration."""

    bootstrap: str
    #: librdkafka settings of every client (consumers, producers, the admin client).
    settings: Mapping[str, str] = field(default_factory=dict)
    #: librdkafka settings of the group consumer only.
    consumer_settings: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap, str) or not self.bootstrap.strip():
            raise ConfigError("Kafka bootstrap servers must be a non-empty 'host:port[,host:port...]'")
        for server in self.bootstrap.split(","):
            host, sep, port = server.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"Kafka bootstrap server {server.strip()!r} is not 'host:port'")
        reserved = {"bootstrap.servers", "group.id"} & (set(self.settings) | set(self.consumer_settings))
        if reserved:
            raise ConfigError(f"set {sorted(reserved)} with their own options, not as librdkafka settings")

    @classmethod
    def of(cls, kafka: KafkaConfig | str) -> KafkaConfig:
        """``kafka`` itself, or a configuration with bootstrap servers ``kafka`` and no other setting."""
        return kafka if isinstance(kafka, KafkaConfig) else cls(kafka)

    def producer(self, **defaults: Any) -> dict[str, Any]:
        """A producer's configuration: ``defaults`` (the caller's), overridden by the user's settings."""
        return {"bootstrap.servers": self.bootstrap, **defaults, **self.settings}

    def consumer(self, group_id: str, **defaults: Any) -> dict[str, Any]:
        """A consumer's configuration; the group consumer's own settings apply last."""
        return {"bootstrap.servers": self.bootstrap, **defaults, **self.settings, **self.consumer_settings,
                "group.id": group_id}

    def probe(self, group_id: str = "_ldpstream_probe") -> dict[str, Any]:
        """A consumer that only reads metadata and watermarks (no group settings of the user's)."""
        return {"bootstrap.servers": self.bootstrap, **self.settings, "group.id": group_id,
                "enable.auto.commit": False}

    def admin(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.settings}


@dataclass(frozen=True)
class RedisConfig:
    """Where Redis is and the key prefix; builds the Redis client and the sketch store."""

    url: str
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        scheme = urlsplit(self.url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(f"Redis URL {self.url!r} must start with redis://, rediss:// or unix://")
        if not self.prefix or any(c in self.prefix for c in "{} \t\n"):
            raise ConfigError(f"Redis key prefix {self.prefix!r} must be non-empty, without braces or spaces")

    def client(self) -> redis.Redis:
        import redis

        return redis.Redis.from_url(self.url)

    def store(self) -> RedisSketchStore:
        from ldpstream.store.redis_store import RedisSketchStore

        return RedisSketchStore(self.client(), self.prefix)


@dataclass(frozen=True)
class ServiceConfig:
    """Everything a process needs to reach its services, resolved and validated once at start."""

    kafka: KafkaConfig
    redis: RedisConfig
    registry: str = DEFAULT_REGISTRY

    @classmethod
    def load(cls, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
             file: str | Path | None = None) -> ServiceConfig:
        """Resolve flags (``kafka``, ``kafka_config``, ``consumer_config``, ``redis``, ``prefix``, ``registry``,
        ``config``; None means unset), then ``environ``, then the file, then the local stack's address."""
        flags = {k: v for k, v in (flags or {}).items() if v not in (None, [], ())}
        env = os.environ if environ is None else environ
        path = flags.get("config") or file or env.get("LDPSTREAM_CONFIG")
        table = _read_file(Path(path)) if path else {}
        kafka_table = _table(table, "kafka")
        redis_table = _table(table, "redis")
        kafka_port, _, redis_port = local_stack_ports(env)

        bootstrap = (flags.get("kafka") or env.get("LDPSTREAM_KAFKA") or kafka_table.get("bootstrap")
                     or f"127.0.0.1:{kafka_port}")
        settings = {str(k): str(v) for k, v in _table(kafka_table, "config").items()}
        settings.update(parse_key_values(_split(env.get("LDPSTREAM_KAFKA_CONFIG", "")), "LDPSTREAM_KAFKA_CONFIG"))
        settings.update(parse_key_values(flags.get("kafka_config", []), "--kafka-config"))
        consumer = {str(k): str(v) for k, v in _table(kafka_table, "consumer").items()}
        consumer.update(parse_key_values(flags.get("consumer_config", []), "--consumer-config"))
        url = flags.get("redis") or env.get("LDPSTREAM_REDIS") or redis_table.get("url") or \
            f"redis://127.0.0.1:{redis_port}/0"
        prefix = flags.get("prefix") or env.get("LDPSTREAM_PREFIX") or redis_table.get("prefix") or DEFAULT_PREFIX
        registry = flags.get("registry") or env.get("LDPSTREAM_REGISTRY") or table.get("registry") or \
            DEFAULT_REGISTRY
        if path and "registry" in table and not flags.get("registry") and not env.get("LDPSTREAM_REGISTRY"):
            registry = str(Path(path).parent / str(registry))
        return cls(KafkaConfig(str(bootstrap), settings, consumer), RedisConfig(str(url), str(prefix)), str(registry))

    def uses_local_stack(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether Kafka or Redis is the local stack's (``ldpstream stack up`` must run first)."""
        kafka_port, _, redis_port = local_stack_ports(environ)
        return (self.kafka.bootstrap == f"127.0.0.1:{kafka_port}"
                or self.redis.url == f"redis://127.0.0.1:{redis_port}/0")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServiceConfig:
        """The configuration of a command whose parser has :func:`add_service_arguments`."""
        names = ("kafka", "kafka_config", "consumer_config", "redis", "prefix", "registry", "config")
        return cls.load({name: getattr(args, name, None) for name in names})


def _split(text: str) -> list[str]:
    return [part for part in (p.strip() for p in text.split(",")) if part]


def _read_file(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {path} is not valid TOML: {exc}") from exc


def _table(table: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = table.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"configuration key {key!r} must be a table")
    return dict(value)


def add_service_arguments(parser: argparse.ArgumentParser, *, kafka: bool = True, redis: bool = True,
                          registry: bool = True, consumer: bool = False) -> None:
    """The flags every service command shares; :meth:`ServiceConfig.from_args` resolves them."""
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="service configuration file (TOML; default: $LDPSTREAM_CONFIG)")
    if kafka:
        parser.add_argument("--kafka", metavar="BOOTSTRAP", default=None,
                            help="Kafka bootstrap servers (default: $LDPSTREAM_KAFKA, else the local stack)")
        parser.add_argument("--kafka-config", metavar="KEY=VALUE", action="append", default=[],
                            help="librdkafka setting of every Kafka client of the process; repeatable")
    if consumer:
        parser.add_argument("--consumer-config", metavar="KEY=VALUE", action="append", default=[],
                            help="librdkafka setting of the group consumer only, e.g. session.timeout.ms=6000 "
                            "or group.instance.id=consumer-1 (static membership); repeatable")
    if redis:
        parser.add_argument("--redis", metavar="URL", default=None,
                            help="Redis URL (default: $LDPSTREAM_REDIS, else the local stack)")
        parser.add_argument("--prefix", default=None, help="key prefix in Redis (default: $LDPSTREAM_PREFIX or ldp)")
    if registry:
        parser.add_argument("--registry", metavar="FILE", default=None,
                            help="metric registry TOML (default: $LDPSTREAM_REGISTRY or metrics.toml)")
