"""The service configuration: one object from which every Kafka and Redis client of every process is built.

Each setting is taken from the first source that has it: command-line flags, then the environment, then a
configuration file (``--config FILE`` or ``LDPSTREAM_CONFIG``), then the default (the local stack's address), and
validated when built, with an error that names the setting and its source. Secrets come from files or the
environment, never from a flag, and are :class:`Secret` objects that print as ``'***'``. Every variable, file key
and flag: docs/operations.md#configuration.
"""

from __future__ import annotations

import argparse
import os
import time
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

from ldpstream.errors import ConfigError, ServiceError

if TYPE_CHECKING:
    import redis
    import redis.cluster

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


class Secret:
    """A password: its ``repr`` and ``str`` are ``'***'``, so that it never shows in a log, a traceback's locals
    or a configuration's ``repr``; :meth:`reveal` gives the value to the one client that needs it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


#: librdkafka settings that hold secrets: never taken from a flag, never shown.
SECRET_KAFKA_SETTINGS = frozenset({"sasl.password", "ssl.key.password", "ssl.keystore.password",
                                   "ssl.truststore.password", "sasl.oauthbearer.client.secret",
                                   "ssl.key.pem", "ssl_key"})
KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def redact_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with every secret value replaced by ``'***'`` (for display)."""
    return {k: ("***" if k in SECRET_KAFKA_SETTINGS else v) for k, v in settings.items()}


@dataclass(frozen=True)
class KafkaSecurity:
    """How every Kafka client authenticates and encrypts: librdkafka's ``security.protocol``, SASL and TLS."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    user: str | None = None
    password: Secret | None = None
    #: PEM files: the CA that signed the brokers' certificates; a client certificate and key (mutual TLS).
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in KAFKA_PROTOCOLS:
            raise ConfigError(f"Kafka security protocol {self.protocol!r} is not one of {', '.join(KAFKA_PROTOCOLS)}")
        sasl = self.protocol.startswith("SASL_")
        if sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError(f"Kafka security {self.protocol} needs a SASL mechanism, one of "
                                  f"{', '.join(SASL_MECHANISMS)} (got {self.sasl_mechanism!r})")
            if not self.user or self.password is None:
                raise ConfigError(f"Kafka security {self.protocol} needs a user and a password (LDPSTREAM_KAFKA_USER "
                                  "and LDPSTREAM_KAFKA_PASSWORD_FILE or LDPSTREAM_KAFKA_PASSWORD)")
        elif self.sasl_mechanism or self.user or self.password is not None:
            raise ConfigError(f"a Kafka SASL mechanism, user or password needs security SASL_SSL or SASL_PLAINTEXT, "
                              f"not {self.protocol}")
        if not self.protocol.endswith("SSL") and (self.ca or self.cert or self.key):
            raise ConfigError(f"Kafka TLS files need security SSL or SASL_SSL, not {self.protocol}")
        if bool(self.cert) != bool(self.key):
            raise ConfigError("a Kafka client certificate needs its key and a key its certificate")
        _check_files("Kafka", ca=self.ca, cert=self.cert, key=self.key)

    def settings(self) -> dict[str, str]:
        """The librdkafka settings (with the password revealed: give them only to a client)."""
        if self.protocol == "PLAINTEXT":
            return {}
        out = {"security.protocol": self.protocol}
        if self.sasl_mechanism:
            out["sasl.mechanism"] = self.sasl_mechanism
        if self.user:
            out["sasl.username"] = self.user
        if self.password is not None:
            out["sasl.password"] = self.password.reveal()
        for setting, path in (("ssl.ca.location", self.ca), ("ssl.certificate.location", self.cert),
                              ("ssl.key.location", self.key)):
            if path:
                out[setting] = path
        return out


def _check_files(service: str, **files: str | None) -> None:
    for what, path in files.items():
        if path and not Path(path).is_file():
            raise ConfigError(f"{service} TLS {what} file {path} does not exist")
    if files.get("key"):
        check_private(str(files["key"]), f"{service} TLS key")


def check_private(path: str | Path, what: str) -> None:
    """Refuse a secret file that others may read or write (``mode & 0o007``). Its group may read it, as
    Kubernetes mounts secrets 0440 for the pod's group; symbolic links are followed."""
    try:
        mode = Path(path).stat().st_mode
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    if mode & 0o007:
        raise ConfigError(f"the {what} file {path} may be read by others (mode {mode & 0o777:o}); "
                          f"allow its owner (and group) alone: chmod o-rwx {path}")


def read_secret(path: str | Path, what: str) -> Secret:
    """The content of a secret file (one trailing newline stripped), refused when others may read it
    (:func:`check_private`) or when it is empty."""
    check_private(path, what)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    value = text[:-1] if text.endswith("\n") else text
    if not value:
        raise ConfigError(f"the {what} file {path} is empty")
    return Secret(value)


def url_password(url: str) -> str | None:
    """The password a URL carries, in its user part (``redis://user:PASS@host``) or its query
    (``?password=PASS``, as redis-py reads it); None when it carries none."""
    parts = urlsplit(url)
    if parts.password is not None:
        return parts.password
    values = parse_qs(parts.query, keep_blank_values=True).get("password")
    return values[-1] if values else None


def without_password(url: str, mark: str | None = None) -> str:
    """``url`` without its password (both forms of :func:`url_password`), or with ``mark`` in its place."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user, host = netloc.rsplit("@", 1)[0].split(":", 1)[0], netloc.rsplit("@", 1)[1]
        netloc = f"{user}:{mark}@{host}" if mark is not None else (f"{user}@{host}" if user else host)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(name == "password" for name, _ in query):
        kept = [(name, mark if name == "password" else value) for name, value in query
                if name != "password" or mark is not None]
        rebuilt = urlencode(kept, safe="*")
    else:
        rebuilt = parts.query
    return (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{rebuilt}" if rebuilt else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for messages)."""
    return url if url_password(url) is None else without_password(url, "***")


@dataclass(frozen=True, repr=False)
class KafkaConfig:
    """Where Kafka is and the librdkafka settings every client gets; builds each client's configuration."""

    bootstrap: str
    #: librdkafka settings of every client (consumers, producers, the admin client).
    settings: Mapping[str, str] = field(default_factory=dict)
    #: librdkafka settings of the group consumer only.
    consumer_settings: Mapping[str, str] = field(default_factory=dict)
    #: authentication and encryption of every client (its settings come before the user's own).
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    def __repr__(self) -> str:
        return (f"KafkaConfig(bootstrap={self.bootstrap!r}, settings={redact_settings(self.settings)!r}, "
                f"consumer_settings={redact_settings(self.consumer_settings)!r}, security={self.security!r})")

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
        return {"bootstrap.servers": self.bootstrap, **defaults, **self.security.settings(), **self.settings}

    def consumer(self, group_id: str, **defaults: Any) -> dict[str, Any]:
        """A consumer's configuration; the group consumer's own settings apply last."""
        return {"bootstrap.servers": self.bootstrap, **defaults, **self.security.settings(), **self.settings,
                **self.consumer_settings, "group.id": group_id}

    def probe(self, group_id: str = "_ldpstream_probe") -> dict[str, Any]:
        """A consumer that only reads metadata and watermarks (no group settings of the user's)."""
        return {"bootstrap.servers": self.bootstrap, **self.security.settings(), **self.settings,
                "group.id": group_id, "enable.auto.commit": False}

    def admin(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.security.settings(), **self.settings}

    def check_access(self, timeout: float = 10.0) -> None:
        """Connect once, before a process starts its work: a broker that refuses the credentials or the TLS
        handshake, or none that answers within ``timeout`` s, is a :class:`ServiceError` in one line (librdkafka
        would otherwise retry for ever, printing its own lines, while the process waits)."""
        import logging

        from confluent_kafka import KafkaError, KafkaException, Producer

        refused: list[str] = []
        seen: list[str] = []

        def on_error(error: KafkaError) -> None:
            seen.append(error.str())
            # a broker that requires client certificates sends a TLS alert, which librdkafka reports as a
            # transport error (and retries for ever)
            if error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL) or \
                    any(alert in error.str().lower() for alert in _CERTIFICATE_ALERTS):
                refused.append(error.str())

        quiet = logging.getLogger("ldpstream.kafka.check_access")
        quiet.propagate = False
        if not quiet.handlers:
            quiet.addHandler(logging.NullHandler())
        probe = Producer({**self.admin(), "error_cb": on_error, "logger": quiet})
        deadline = time.monotonic() + timeout
        try:
            while not refused:
                try:
                    probe.list_topics(timeout=1.0)
                    return
                except KafkaException:
                    probe.poll(0.1)
                if time.monotonic() > deadline:
                    last = f"; last error: {seen[-1]}" if seen else ""
                    raise ServiceError(f"Kafka at {self.bootstrap} did not answer within {timeout:.0f} s with "
                                       f"security {self.security.protocol} (a TLS or SASL listener does not answer "
                                       f"a client of another protocol){last}")
        finally:
            probe.flush(0)
        hint = ""
        if any(alert in refused[0].lower() for alert in _CERTIFICATE_ALERTS):
            hint = (f" (it requires client certificates: did its CA sign {self.security.cert}?)" if self.security.cert
                    else " (it requires client certificates (mutual TLS): give kafka.cert and kafka.key)")
        raise ServiceError(f"Kafka at {self.bootstrap} refused the client "
                           f"(security {self.security.protocol}): {refused[0]}{hint}")


#: Redis Cluster URL schemes (this project's convention) and their plain twins; the store layer, which may not
#: import this module, keeps the same table (``ldpstream.store.redis_store.CLUSTER_SCHEMES``).
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


#: TLS alerts (as librdkafka words them, lower case) of a server that refuses the client's certificate or its
#: absence.
_CERTIFICATE_ALERTS = ("alert bad certificate", "certificate required", "alert unknown ca",
                       "alert certificate unknown")


@dataclass(frozen=True)
class RedisConfig:
    """Where Redis is, how to authenticate and encrypt, and the key prefix; builds the client and the store.

    ``url`` is ``redis://`` (``rediss://`` over TLS, ``unix://``), or ``redis+cluster://host:port[,host:port]``
    (``rediss+cluster://``) for Redis Cluster. A password in the URL is accepted from the environment or a
    file (:meth:`ServiceConfig.load` refuses it in ``--redis``); ``password`` overrides it.
    """

    url: str = field(repr=False)
    prefix: str = DEFAULT_PREFIX
    user: str | None = None
    password: Secret | None = None
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        scheme = urlsplit(self.url).scheme
        if scheme not in ("redis", "rediss", "unix", *CLUSTER_SCHEMES):
            raise ConfigError(f"Redis URL {redact_url(self.url)!r} must start with redis://, rediss://, unix://, "
                              "redis+cluster:// or rediss+cluster://")
        if not self.prefix or any(c in self.prefix for c in "{} \t\n"):
            raise ConfigError(f"Redis key prefix {self.prefix!r} must be non-empty, without braces or spaces")
        if not self.tls and (self.ca or self.cert or self.key):
            raise ConfigError("Redis TLS files need a rediss:// (or rediss+cluster://) URL")
        if bool(self.cert) != bool(self.key):
            raise ConfigError("a Redis client certificate needs its key and a key its certificate")
        if self.cluster:
            path = urlsplit(self.url).path.strip("/")
            if path not in ("", "0"):
                raise ConfigError(f"Redis Cluster has only database 0, not {path!r} ({redact_url(self.url)})")
        _check_files("Redis", ca=self.ca, cert=self.cert, key=self.key)

    @property
    def safe_url(self) -> str:
        """The URL without its password (for display)."""
        return redact_url(self.url)

    def __repr__(self) -> str:
        return (f"RedisConfig(url={self.safe_url!r}, prefix={self.prefix!r}, user={self.user!r}, "
                f"password={self.password!r}, ca={self.ca!r}, cert={self.cert!r}, key={self.key!r})")

    @property
    def cluster(self) -> bool:
        return urlsplit(self.url).scheme in CLUSTER_SCHEMES

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme in ("rediss", "rediss+cluster")

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.user:
            options["username"] = self.user
        if self.password is not None:
            options["password"] = self.password.reveal()
        if self.ca:
            options["ssl_ca_certs"] = self.ca
        if self.cert:
            options["ssl_certfile"] = self.cert
            options["ssl_keyfile"] = self.key
        return options

    def client(self) -> redis.Redis | redis.cluster.RedisCluster:
        """A client of the standalone Redis, or of the cluster (:class:`redis.cluster.RedisCluster`)."""
        import redis
        import redis.cluster

        if not self.cluster:
            # redis-py lets the URL's password win over its keyword: a password from a file must win instead.
            url = self.url if self.password is None else without_password(self.url)
            return redis.Redis.from_url(url, **self._options())
        parts = urlsplit(self.url)
        nodes = parts.netloc.rsplit("@", 1)[-1].split(",")
        options = self._options()
        if parts.username and "username" not in options:
            options["username"] = parts.username
        in_url = url_password(self.url)
        if in_url is not None and "password" not in options:
            options["password"] = in_url
        if self.tls:
            options["ssl"] = True
        startup = []
        for node in nodes:
            host, _, port = node.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"Redis Cluster node {node!r} is not 'host:port' ({self.safe_url})")
            startup.append(redis.cluster.ClusterNode(host.strip("[]"), int(port)))  # type: ignore[no-untyped-call]
        return redis.cluster.RedisCluster(startup_nodes=startup, **options)

    def check_access(self) -> None:
        """One PING before a process starts its work: refused credentials, a failed TLS handshake or no answer
        is a :class:`ServiceError` in one line, naming the server (not the password)."""
        import redis

        client = self.client()
        try:
            client.ping()
        except redis.AuthenticationError as exc:
            raise ServiceError(f"Redis at {self.safe_url} refused the client (user {self.user or 'default'}): "
                               f"{exc}") from None
        except redis.ResponseError as exc:
            raise ServiceError(f"Redis at {self.safe_url} refused the client: {exc}") from None
        except (redis.RedisError, OSError) as exc:
            text = str(exc).upper()
            if "CERTIFICATE_REQUIRED" in text:
                raise ServiceError(f"Redis at {self.safe_url} requires a client certificate (mutual TLS): give "
                                   f"redis.cert and redis.key signed by its CA: {exc}") from None
            if "ALERT_UNKNOWN_CA" in text or "ALERT_BAD_CERTIFICATE" in text:
                raise ServiceError(f"Redis at {self.safe_url} refused the client certificate "
                                   f"({self.cert}): {exc}") from None
            # TLS 1.3 servers refuse a client certificate after the handshake: the client may see only a closed
            # connection, so a refusal of a certificate (or of its absence) may end here too
            hint = ""
            if self.tls:
                hint = (f" (if it requires client certificates: did its CA sign {self.cert}?)" if self.cert else
                        " (if it requires client certificates (mutual TLS): give redis.cert and redis.key)")
            raise ServiceError(f"Redis at {self.safe_url} did not answer{' over TLS' if self.tls else ''}: "
                               f"{exc}{hint}") from None
        finally:
            client.close()

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
        _refuse_unknown_keys(table, str(path))
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
        _refuse_secrets_in_flags(flags)
        base = Path(path).parent if path else None
        kafka_security = KafkaSecurity(
            protocol=str(_setting(flags, env, kafka_table, "kafka_security", "LDPSTREAM_KAFKA_SECURITY", "security")
                         or "PLAINTEXT").upper(),
            sasl_mechanism=_upper(_setting(flags, env, kafka_table, "kafka_sasl_mechanism",
                                           "LDPSTREAM_KAFKA_SASL_MECHANISM", "sasl_mechanism")),
            user=_setting(flags, env, kafka_table, "kafka_user", "LDPSTREAM_KAFKA_USER", "user"),
            password=_secret(flags, env, kafka_table, "kafka", base),
            ca=_path(_setting(flags, env, kafka_table, "kafka_ca", "LDPSTREAM_KAFKA_CA", "ca"), base),
            cert=_path(_setting(flags, env, kafka_table, "kafka_cert", "LDPSTREAM_KAFKA_CERT", "cert"), base),
            key=_path(_setting(flags, env, kafka_table, "kafka_key", "LDPSTREAM_KAFKA_KEY", "key"), base),
        )
        redis_config = RedisConfig(
            str(url), str(prefix),
            user=_setting(flags, env, redis_table, "redis_user", "LDPSTREAM_REDIS_USER", "user"),
            password=_secret(flags, env, redis_table, "redis", base),
            ca=_path(_setting(flags, env, redis_table, "redis_ca", "LDPSTREAM_REDIS_CA", "ca"), base),
            cert=_path(_setting(flags, env, redis_table, "redis_cert", "LDPSTREAM_REDIS_CERT", "cert"), base),
            key=_path(_setting(flags, env, redis_table, "redis_key", "LDPSTREAM_REDIS_KEY", "key"), base),
        )
        return cls(KafkaConfig(str(bootstrap), settings, consumer, kafka_security), redis_config, str(registry))

    def check_access(self, kafka: bool = True, redis: bool = True) -> None:
        """:meth:`KafkaConfig.check_access` and :meth:`RedisConfig.check_access`: fail fast, in one line."""
        if redis:
            self.redis.check_access()
        if kafka:
            self.kafka.check_access()

    def uses_local_stack(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether Kafka or Redis is the local stack's (``ldpstream stack up`` must run first)."""
        kafka_port, _, redis_port = local_stack_ports(environ)
        return (self.kafka.bootstrap == f"127.0.0.1:{kafka_port}"
                or self.redis.url == f"redis://127.0.0.1:{redis_port}/0")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServiceConfig:
        """The configuration of a command whose parser has :func:`add_service_arguments`."""
        names = ("kafka", "kafka_config", "consumer_config", "redis", "prefix", "registry", "config",
                 *SECURITY_FLAGS)
        return cls.load({name: getattr(args, name, None) for name in names})


#: The security flags of :func:`add_service_arguments` (their ``argparse`` destinations). No secret is among
#: them: passwords come from files (``--kafka-password-file``) or the environment.
SECURITY_FLAGS = ("kafka_security", "kafka_sasl_mechanism", "kafka_user", "kafka_password_file", "kafka_ca",
                  "kafka_cert", "kafka_key", "redis_user", "redis_password_file", "redis_ca", "redis_cert",
                  "redis_key", "kafka_password", "redis_password")


def _refuse_secrets_in_flags(flags: Mapping[str, Any]) -> None:
    """A password given on the command line alone shows in ``ps`` and shell histories: refuse it."""
    for service in ("kafka", "redis"):
        if flags.get(f"{service}_password"):
            raise ConfigError(f"--{service}-password is not accepted (a password on the command line shows in ps "
                              f"and shell histories): use --{service}-password-file FILE or "
                              f"LDPSTREAM_{service.upper()}_PASSWORD(_FILE)")
    for name in ("kafka_config", "consumer_config"):
        given = parse_key_values(flags.get(name, []), f"--{name.replace('_', '-')}")
        secret = sorted(SECRET_KAFKA_SETTINGS & set(given))
        if secret:
            raise ConfigError(f"--{name.replace('_', '-')} must not carry the secret {secret[0]}: give it in a file "
                              "(--kafka-password-file, the configuration file) or the environment")
    url = flags.get("redis")
    if url and url_password(str(url)) is not None:
        raise ConfigError(f"--redis {redact_url(str(url))!r} must not carry a password: give it in a file "
                          "(--redis-password-file, the configuration file) or LDPSTREAM_REDIS_PASSWORD")


def _setting(flags: Mapping[str, Any], env: Mapping[str, str], table: Mapping[str, Any], flag: str, variable: str,
             key: str) -> str | None:
    value = flags.get(flag) or env.get(variable) or table.get(key)
    return None if value in (None, "") else str(value)


def _upper(value: str | None) -> str | None:
    return None if value is None else value.upper()


def _path(value: str | None, base: Path | None) -> str | None:
    """A file named in the configuration file is relative to that file."""
    if value is None or base is None or Path(value).is_absolute():
        return value
    return str(base / value)


def _secret(flags: Mapping[str, Any], env: Mapping[str, str], table: Mapping[str, Any], service: str,
            base: Path | None) -> Secret | None:
    """``service``'s password: a file (flag, environment, configuration file) or the value itself (environment,
    configuration file), in the usual order of sources."""
    upper = service.upper()
    for source, value, is_file in (
        (f"--{service}-password-file", flags.get(f"{service}_password_file"), True),
        (f"LDPSTREAM_{upper}_PASSWORD_FILE", env.get(f"LDPSTREAM_{upper}_PASSWORD_FILE"), True),
        (f"LDPSTREAM_{upper}_PASSWORD", env.get(f"LDPSTREAM_{upper}_PASSWORD"), False),
        (f"{service}.password_file", _path(table.get("password_file"), base), True),
        (f"{service}.password", table.get("password"), False),
    ):
        if value in (None, ""):
            continue
        if is_file:
            return read_secret(str(value), f"{service} password ({source})")
        return Secret(str(value))
    return None


def _split(text: str) -> list[str]:
    return [part for part in (p.strip() for p in text.split(",")) if part]


def _read_file(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {path} is not valid TOML: {exc}") from exc


#: The keys a configuration file may hold, by table ("" is the top level; module docstring).
FILE_KEYS: dict[str, frozenset[str]] = {
    "": frozenset({"registry", "kafka", "redis"}),
    "kafka": frozenset({"bootstrap", "config", "consumer", "security", "sasl_mechanism", "user", "password",
                        "password_file", "ca", "cert", "key"}),
    "redis": frozenset({"url", "prefix", "user", "password", "password_file", "ca", "cert", "key"}),
}


def _refuse_unknown_keys(table: Mapping[str, Any], path: str) -> None:
    """Refuse a key of the configuration file that no setting reads (a typo would silently fall back to a
    default: ``prefx`` showed another prefix's empty counts), in one line with the closest known key."""
    import difflib

    for section, known in FILE_KEYS.items():
        keys = table if not section else table.get(section, {})
        if not isinstance(keys, Mapping):
            continue  # _table says it must be a table
        for key in sorted(set(keys) - known):
            name = f"{section}.{key}" if section else key
            match = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {(section + '.' if section else '') + match[0]!r}?)" if match else ""
            raise ConfigError(f"configuration file {path}: unknown key {name!r}{hint}; known"
                              f"{' in [' + section + ']' if section else ''}: {', '.join(sorted(known))}")


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
    if kafka or redis:
        add_security_arguments(parser, kafka=kafka, redis=redis)


def add_security_arguments(parser: argparse.ArgumentParser, *, kafka: bool = True, redis: bool = True) -> None:
    """Authentication and TLS flags; passwords only as files (see the module's docstring)."""
    group = parser.add_argument_group(
        "security", "passwords come from files or the environment, never from a flag: see "
        "LDPSTREAM_KAFKA_PASSWORD(_FILE), LDPSTREAM_REDIS_PASSWORD(_FILE)")
    if kafka:
        group.add_argument("--kafka-security", metavar="PROTOCOL", choices=KAFKA_PROTOCOLS, type=str.upper,
                           default=None, help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL "
                           "(default: $LDPSTREAM_KAFKA_SECURITY or PLAINTEXT)")
        group.add_argument("--kafka-sasl-mechanism", metavar="MECHANISM", choices=SASL_MECHANISMS, type=str.upper,
                           default=None, help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        group.add_argument("--kafka-user", metavar="NAME", default=None, help="Kafka SASL user")
        group.add_argument("--kafka-password-file", metavar="FILE", default=None, help="file holding its password")
        # Present only to be refused (and so that argparse does not read it as an abbreviation of the above).
        group.add_argument("--kafka-password", default=None, help=argparse.SUPPRESS)
        group.add_argument("--kafka-ca", metavar="PEM", default=None, help="CA of the brokers' certificates")
        group.add_argument("--kafka-cert", metavar="PEM", default=None, help="client certificate (mutual TLS)")
        group.add_argument("--kafka-key", metavar="PEM", default=None, help="client key (mutual TLS)")
    if redis:
        group.add_argument("--redis-user", metavar="NAME", default=None, help="Redis ACL user")
        group.add_argument("--redis-password-file", metavar="FILE", default=None, help="file holding its password")
        group.add_argument("--redis-password", default=None, help=argparse.SUPPRESS)
        group.add_argument("--redis-ca", metavar="PEM", default=None, help="CA of Redis's certificate (rediss://)")
        group.add_argument("--redis-cert", metavar="PEM", default=None, help="client certificate (mutual TLS)")
        group.add_argument("--redis-key", metavar="PEM", default=None, help="client key (mutual TLS)")
