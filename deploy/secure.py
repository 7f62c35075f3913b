"""The secured local stack (``ldpstream stack up --secure``): Kafka over TLS with SASL/SCRAM and Redis over TLS
with an ACL user, beside the plain stack, from the same jars and the same ``redis-server``.

Everything lives under ``<stack dir>/secure`` (mode 700):

- ``tls/``: a certificate authority made here (``ca.pem``; its key never leaves the folder) and the servers'
  certificate for ``127.0.0.1`` and ``localhost``, signed by it (``openssl``, Debian's package);
- ``secrets/``: random passwords (mode 600): ``kafka-password`` (SCRAM user ``ldpstream``),
  ``redis-password`` (ACL user ``ldpstream``), ``kafka-admin-password`` (the broker's own inter-broker user);
- ``kafka/``: a KRaft broker whose client listener is ``SASL_SSL`` with ``SCRAM-SHA-512`` only (the users are
  created when the storage is formatted, ``--add-scram``); its controller listener is plaintext on 127.0.0.1,
  inside the one process;
- ``redis/``: ``redis-server`` with ``port 0`` (no plaintext port) and ``tls-port``, ``user default off`` (no
  anonymous access) and the ACL user ``ldpstream``;
- ``ldpstream.toml``: the service configuration that reaches both (passwords by file), so that
  ``export LDPSTREAM_CONFIG=<stack dir>/secure/ldpstream.toml`` points every command at them.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldpstream.config import ServiceConfig, read_secret
from ldpstream.deploy import daemons
from ldpstream.deploy.stack import (
    StackConfig,
    _run_kafka_broker,
    check_kafka_serves_groups,
    ensure_kafka_jars,
    redis_server_binary,
)
from ldpstream.errors import ConfigError, ServiceError

SECURE_KAFKA_PORT = 39192
SECURE_CONTROLLER_PORT = 39193
SECURE_REDIS_PORT = 36479
USER = "ldpstream"
SASL_MECHANISM = "SCRAM-SHA-512"
_KAFKA_FILES = Path(__file__).resolve().parent / "kafka"


@dataclass(frozen=True)
class SecureStackConfig:
    """Where the secured stack lives and listens (``LDPSTREAM_STACK_SECURE_*_PORT`` move its ports)."""

    state_dir: Path
    cache_dir: Path
    kafka_port: int = SECURE_KAFKA_PORT
    controller_port: int = SECURE_CONTROLLER_PORT
    redis_port: int = SECURE_REDIS_PORT
    kafka_heap: str = "512m"
    #: Mutual TLS: Kafka ``ssl.client.auth=required`` and Redis ``tls-auth-clients yes`` (clients need a
    #: certificate of the CA: :func:`make_client_certificate`; its ``client.pem``/``client.key`` are in the
    #: configuration file then).
    client_auth: bool = False

    @classmethod
    def from_env(cls, base: StackConfig | None = None) -> SecureStackConfig:
        base = base or StackConfig.from_env()
        env = os.environ
        try:
            ports = [int(env.get(f"LDPSTREAM_STACK_SECURE_{name}_PORT", default)) for name, default in
                     (("KAFKA", SECURE_KAFKA_PORT), ("CONTROLLER", SECURE_CONTROLLER_PORT),
                      ("REDIS", SECURE_REDIS_PORT))]
        except ValueError as exc:
            raise ConfigError(f"LDPSTREAM_STACK_SECURE_*_PORT must be port numbers: {exc}") from exc
        return cls(base.state_dir / "secure", base.cache_dir, kafka_port=ports[0], controller_port=ports[1],
                   redis_port=ports[2])

    @property
    def tls_dir(self) -> Path:
        return self.state_dir / "tls"

    @property
    def secrets_dir(self) -> Path:
        return self.state_dir / "secrets"

    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def redis_dir(self) -> Path:
        return self.state_dir / "redis"

    @property
    def ca(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def config_file(self) -> Path:
        return self.state_dir / "ldpstream.toml"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"rediss://127.0.0.1:{self.redis_port}/0"

    def service_config(self, prefix: str = "ldp") -> ServiceConfig:
        """The configuration that reaches the secured services (what ``ldpstream.toml`` says)."""
        return ServiceConfig.load({"config": str(self.config_file), "prefix": prefix}, environ={})


# ----------------------------------------------------------------------------------- TLS material, secrets


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServiceError(f"openssl {args[0]} failed: {result.stderr.strip()[-500:]}")


def make_certificates(tls_dir: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> None:
    """A CA (``ca.pem``, ``ca.key``) and a server certificate for ``hosts`` signed by it (``server.pem``,
    ``server.key``; ``server-keystore.pem`` is both, the form Kafka's PEM keystore reads). Kept when present."""
    tls_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(tls_dir, 0o700)
    if (tls_dir / "server-keystore.pem").exists():
        return
    ca_key, ca = tls_dir / "ca.key", tls_dir / "ca.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
             "-days", "3650", "-subj", "/CN=ldpstream local CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    key, csr, cert = tls_dir / "server.key", tls_dir / "server.csr", tls_dir / "server.pem"
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", f"/CN={hosts[-1]}")
    names = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
    extensions = tls_dir / "server.ext"
    extensions.write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth,clientAuth\n"
                          "keyUsage=critical,digitalSignature,keyEncipherment\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(cert), "-days", "825", "-sha256", "-extfile", str(extensions))
    (tls_dir / "server-keystore.pem").write_text(key.read_text() + cert.read_text())
    for path in tls_dir.iterdir():
        os.chmod(path, 0o600)
    os.chmod(ca, 0o644)


def make_client_certificate(tls_dir: Path, name: str) -> tuple[Path, Path]:
    """A client certificate for mutual TLS (``<name>.pem``, ``<name>.key``, common name ``name``), signed by the
    CA of :func:`make_certificates` in ``tls_dir``: what a client gives as ``cert``/``key`` to a Redis with
    ``tls-auth-clients yes`` or a Kafka listener with ``ssl.client.auth=required``."""
    if not name.replace("-", "").isalnum():
        raise ConfigError(f"client certificate name {name!r}: letters, digits and '-' only")
    key, csr, cert = tls_dir / f"{name}.key", tls_dir / f"{name}.csr", tls_dir / f"{name}.pem"
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", f"/CN={name}")
    extensions = tls_dir / f"{name}.ext"
    extensions.write_text("extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(tls_dir / "ca.pem"), "-CAkey", str(tls_dir / "ca.key"),
             "-CAcreateserial", "-out", str(cert), "-days", "825", "-sha256", "-extfile", str(extensions))
    os.chmod(key, 0o600)
    return cert, key


def _password(path: Path) -> str:
    """The password in ``path``, made (random, mode 600) when missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(24) + "\n")
    return read_secret(path, "password").reveal()


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def write_config_file(cfg: SecureStackConfig) -> Path:
    cfg.config_file.write_text(
        "# The secured local stack (ldpstream stack up --secure): export LDPSTREAM_CONFIG=<this file>\n"
        "[kafka]\n"
        f'bootstrap = "{cfg.kafka_bootstrap}"\n'
        'security = "SASL_SSL"\n'
        f'sasl_mechanism = "{SASL_MECHANISM}"\n'
        f'user = "{USER}"\n'
        'password_file = "secrets/kafka-password"\n'
        'ca = "tls/ca.pem"\n'
        + ('cert = "tls/client.pem"\nkey = "tls/client.key"\n' if cfg.client_auth else "") + "\n"
        "[redis]\n"
        f'url = "{cfg.redis_url}"\n'
        f'user = "{USER}"\n'
        'password_file = "secrets/redis-password"\n'
        'ca = "tls/ca.pem"\n'
        + ('cert = "tls/client.pem"\nkey = "tls/client.key"\n' if cfg.client_auth else ""))
    return cfg.config_file


def make_secrets(folder: Path, hosts: tuple[str, ...]) -> list[Path]:
    """What a secured deployment mounts (``deploy/compose.secure.yaml``, ``deploy/k8s-secure``): a CA, a server
    certificate for ``hosts`` and random passwords, in ``folder`` (mode 700; files 600, ``ca.pem`` 644). Files
    already there are kept."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    make_certificates(folder, hosts)
    for name in ("kafka-password", "kafka-admin-password", "redis-password"):
        _password(folder / name)
    for path in folder.iterdir():  # the containers run as other users: readable, in a folder only we can list
        os.chmod(path, 0o600 if path.name == "ca.key" else 0o644)
    return sorted(folder.iterdir())


def prepare(cfg: SecureStackConfig) -> None:
    """Folders, certificates, passwords and the configuration file (idempotent)."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.state_dir, 0o700)
    make_certificates(cfg.tls_dir)
    if cfg.client_auth and not (cfg.tls_dir / "client.pem").exists():
        make_client_certificate(cfg.tls_dir, "client")
    for name in ("kafka-password", "kafka-admin-password", "redis-password"):
        _password(cfg.secrets_dir / name)
    write_config_file(cfg)


# ----------------------------------------------------------------------------------------------- Redis


def redis_answers(cfg: SecureStackConfig) -> bool:
    import redis

    if not daemons.port_open(cfg.redis_port) or not cfg.config_file.exists():
        return False
    try:
        return bool(cfg.service_config().redis.client().ping())
    except (redis.RedisError, ConfigError, OSError):
        return False


def start_redis(cfg: SecureStackConfig) -> None:
    if redis_answers(cfg):
        return
    data = cfg.redis_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    tls = cfg.tls_dir
    conf = cfg.redis_dir / "redis.conf"
    _write_private(conf, "\n".join([
        "port 0", f"tls-port {cfg.redis_port}", "bind 127.0.0.1", "protected-mode yes",
        f"tls-cert-file {tls / 'server.pem'}", f"tls-key-file {tls / 'server.key'}",
        f"tls-ca-cert-file {tls / 'ca.pem'}", f"tls-auth-clients {'yes' if cfg.client_auth else 'no'}",
        f"dir {data}", "appendonly yes", "appendfsync everysec", 'save ""', "daemonize no", 'logfile ""',
        "user default off",
        f"user {USER} on >{_password(cfg.secrets_dir / 'redis-password')} ~* &* +@all", ""]))
    pid_file, what = cfg.redis_dir / "redis.pid", f"Redis (TLS) on port {cfg.redis_port}"
    daemons.clear(pid_file, [cfg.redis_port], cfg.redis_dir, what)
    daemons.launch([redis_server_binary(), str(conf)], cwd=data, pid_file=pid_file, log=cfg.redis_dir / "redis.log",
                   ready=lambda: redis_answers(cfg), timeout=30, what=what)


# ----------------------------------------------------------------------------------------------- Kafka


def _client_settings(cfg: SecureStackConfig) -> dict[str, Any]:
    return cfg.service_config().kafka.admin()


def kafka_answers(cfg: SecureStackConfig, timeout: float = 3.0) -> bool:
    from confluent_kafka.admin import AdminClient

    if not daemons.port_open(cfg.kafka_port) or not cfg.config_file.exists():
        return False
    try:
        AdminClient(_client_settings(cfg)).list_topics(timeout=timeout)
        return True
    except Exception:  # KafkaException: not ready yet
        return False


def _scram(name: str, password: str) -> str:
    return f"{SASL_MECHANISM}=[name={name},password={password}]"


def start_kafka(cfg: SecureStackConfig, base: StackConfig) -> None:
    """Start the secured broker unless it answers; return once it is ready (as :func:`stack.start_kafka`)."""
    if kafka_answers(cfg):
        check_kafka_serves_groups(_client_settings(cfg), f"see its log: {cfg.kafka_dir / 'kafka.log'}")
        return
    libs = ensure_kafka_jars(base)
    cfg.kafka_dir.mkdir(parents=True, exist_ok=True)
    data = cfg.kafka_dir / "data"
    properties = cfg.kafka_dir / "server.properties"
    admin_password = _password(cfg.secrets_dir / "kafka-admin-password")
    plain = (_KAFKA_FILES / "server.properties.template").read_text().format(
        broker_port=cfg.kafka_port, controller_port=cfg.controller_port, data_dir=data)
    overridden = ("listeners=", "advertised.listeners=", "listener.security.protocol.map=",
                  "inter.broker.listener.name=")
    kept = [line for line in plain.splitlines() if not line.startswith(overridden)]
    tls = cfg.tls_dir
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
            f'password="{admin_password}";')
    _write_private(properties, "\n".join([
        *kept,
        "# secured: clients and the broker itself speak SASL_SSL with SCRAM-SHA-512",
        f"listeners=SASL_SSL://127.0.0.1:{cfg.kafka_port},CONTROLLER://127.0.0.1:{cfg.controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{cfg.kafka_port}",
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=SASL_SSL",
        f"sasl.enabled.mechanisms={SASL_MECHANISM}",
        f"sasl.mechanism.inter.broker.protocol={SASL_MECHANISM}",
        f"listener.name.sasl_ssl.{SASL_MECHANISM.lower()}.sasl.jaas.config={jaas}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={tls / 'server-keystore.pem'}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={tls / 'ca.pem'}",
        # a SASL_SSL listener ignores the broker-wide ssl.client.auth: only the listener's own setting counts
        # (KIP-684)
        f"listener.name.sasl_ssl.ssl.client.auth={'required' if cfg.client_auth else 'none'}", ""]))
    # the SCRAM users are created when the storage is formatted (the first start)
    users = ("--add-scram", _scram("admin", admin_password),
             "--add-scram", _scram(USER, _password(cfg.secrets_dir / "kafka-password")))
    _run_kafka_broker(libs, cfg.kafka_dir, heap=cfg.kafka_heap, min_heap="128m", ready=lambda: kafka_answers(cfg),
                      check=lambda hint: check_kafka_serves_groups(_client_settings(cfg), hint),
                      what=f"Kafka broker (SASL_SSL) on port {cfg.kafka_port}",
                      ports=(cfg.kafka_port, cfg.controller_port), format_args=users)


# ------------------------------------------------------------------------------------------ the stack


@dataclass(frozen=True)
class SecureStatus:
    kafka: bool
    redis: bool
    cfg: SecureStackConfig

    def describe(self) -> str:
        def word(up: bool) -> str:
            return "up" if up else "down"

        return (f"kafka  {word(self.kafka):4}  {self.cfg.kafka_bootstrap} (SASL_SSL, {SASL_MECHANISM})\n"
                f"redis  {word(self.redis):4}  {self.cfg.redis_url} (TLS, ACL user {USER})\n"
                f"config {self.cfg.config_file}\n"
                f"LDPSTREAM_CONFIG={self.cfg.config_file}")


def up(cfg: SecureStackConfig | None = None, base: StackConfig | None = None) -> SecureStatus:
    """Make the certificates and passwords, start the secured Redis and Kafka unless they answer."""
    base = base or StackConfig.from_env()
    cfg = cfg or SecureStackConfig.from_env(base)
    prepare(cfg)
    start_redis(cfg)
    start_kafka(cfg, base)
    return status(cfg)


def down(cfg: SecureStackConfig | None = None) -> daemons.Stopped:
    """Stop the secured Kafka and Redis and any process of ours on their ports (:func:`daemons.stop`)."""
    cfg = cfg or SecureStackConfig.from_env()
    done = daemons.stop(cfg.kafka_dir / "kafka.pid", (cfg.kafka_port, cfg.controller_port), cfg.kafka_dir)
    done += daemons.stop(cfg.redis_dir / "redis.pid", (cfg.redis_port,), cfg.redis_dir)
    return done


def status(cfg: SecureStackConfig | None = None) -> SecureStatus:
    cfg = cfg or SecureStackConfig.from_env()
    return SecureStatus(kafka_answers(cfg), redis_answers(cfg), cfg)


def started(cfg: SecureStackConfig | None = None) -> bool:
    """Whether the secured stack was started (a pid file of a live process)."""
    cfg = cfg or SecureStackConfig.from_env()
    return any(daemons.read_pid(d / name) is not None for d, name in ((cfg.kafka_dir, "kafka.pid"),
                                                                 (cfg.redis_dir, "redis.pid")))

