"""The secured local stack (``ldpstream stack up --secure``): Kafka over TLS with SASL/SCRAM and ACLs, Redis
over TLS with ACL users, one credential per role, beside the plain stack, from the same jars and the same
``redis-server``.

Everything lives under ``<stack dir>/secure`` (mode 700):

- ``tls/``: a certificate authority made here (``ca.pem``; its key never leaves the folder), the servers'
  certificate for ``127.0.0.1`` and ``localhost``, and the Kafka broker's certificate for its controller
  listener (:data:`BROKER_KEYSTORE`), signed by it (``openssl``, Debian's package);
- ``secrets/``: random passwords (mode 600), ``kafka-<user>-password`` for the SCRAM users of
  :data:`KAFKA_USERS` and ``redis-<user>-password`` for the Redis ACL users of :data:`REDIS_USERS`;
- ``kafka/``: a KRaft broker whose client listener is ``SASL_SSL`` with ``SCRAM-SHA-512`` only, under the
  ``StandardAuthorizer`` (no ACL, no access; ``admin`` is the super user, the broker's own identity): the
  ``admin`` user is created when the storage is formatted (its password through a Java argument file, never
  on a command line), the role users and :data:`KAFKA_ACLS` through the Admin API at every start; its
  controller listener, on 127.0.0.1, is SSL and admits only the broker's own certificate
  (:func:`controller_listener_properties`);
- ``redis/``: ``redis-server`` with ``port 0`` (no plaintext port) and ``tls-port``, ``user default off`` (no
  anonymous access) and the ACL users of :func:`redis_acl_rules`;
- ``ldpstream.toml``: the operator's configuration (Kafka ``admin``, Redis ``admin``), and ``producer.toml``,
  ``consumer.toml``, ``decoder.toml``: each role's own (passwords by file), so that
  ``export LDPSTREAM_CONFIG=<stack dir>/secure/<role>.toml`` runs that role with its credential alone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldpstream.config import ServiceConfig, read_secret
from ldpstream.deploy import daemons
from ldpstream.deploy.stack import (
    KAFKA_FILES,
    StackConfig,
    check_kafka_serves_groups,
    ensure_kafka_jars,
    java_binary,
    redis_server_argv,
    run_kafka_broker,
)
from ldpstream.errors import ConfigError, ServiceError

SECURE_KAFKA_PORT = 39192
SECURE_CONTROLLER_PORT = 39193
SECURE_REDIS_PORT = 36479
SASL_MECHANISM = "SCRAM-SHA-512"

#: The roles that run with a credential of their own; the operator (``ldpstream.toml``) is ``admin``.
ROLES = ("producer", "consumer", "decoder")
ADMIN = "admin"
#: Kafka SCRAM users: the super user (the broker's inter-broker identity and the operator) and the roles.
KAFKA_USERS = (ADMIN, *ROLES)
#: Redis ACL users (the producer's writes only the truth of ``ldpstream produce``'s simulations).
REDIS_USERS = (ADMIN, *ROLES)
#: What the ACLs name: every topic whose name starts with :data:`REPORTS_TOPIC`, every group whose name starts
#: with :data:`CONSUMER_GROUP`, and the dead-letter and estimates topics by name; the Redis keys of the prefix
#: :data:`PREFIX` (another prefix needs rules of its own: :func:`redis_acl_rules`).
REPORTS_TOPIC = "ldp-reports"
CONSUMER_GROUP = "ldpstream-consumers"
DEAD_LETTER_TOPIC = "ldp-dead-letters"
ESTIMATES_TOPIC = "ldp-estimates"
PREFIX = "ldp"


@dataclass(frozen=True)
class KafkaAcl:
    """One ALLOW rule of the authorizer: ``User:<user>`` may ``operation`` the ``resource`` named ``name``
    (``pattern``: ``literal``, the name itself, or ``prefixed``, every name that starts with it), from any
    host. READ and WRITE imply DESCRIBE; WRITE on a topic allows an idempotent producer (KIP-679)."""

    user: str
    operation: str
    resource: str
    name: str
    pattern: str

    def describe(self) -> str:
        return f"User:{self.user} {self.operation} {self.resource} {self.name} ({self.pattern})"


#: Every ACL the secured deployments ship (the local stack, compose.secure.yaml, deploy/k8s-secure): the
#: producer writes reports; the consumer reads them in its group and writes dead letters; the decoder writes
#: estimates. Nobody but ``admin`` reads estimates or dead letters, creates topics or alters the cluster.
KAFKA_ACLS = (
    KafkaAcl("producer", "WRITE", "TOPIC", REPORTS_TOPIC, "PREFIXED"),
    KafkaAcl("consumer", "READ", "TOPIC", REPORTS_TOPIC, "PREFIXED"),
    KafkaAcl("consumer", "READ", "GROUP", CONSUMER_GROUP, "PREFIXED"),
    KafkaAcl("consumer", "WRITE", "TOPIC", DEAD_LETTER_TOPIC, "LITERAL"),
    KafkaAcl("decoder", "WRITE", "TOPIC", ESTIMATES_TOPIC, "LITERAL"),
)

#: Redis commands each role sends (``ldpstream/store/redis_store.py``, the consumer's Lua scripts included: a
#: script's own calls are checked against the user too). CONFIG GET (the consumer's check of
#: ``maxmemory-policy``) is not among them: it reads every setting, so the consumer warns and trusts the server.
_SCRIPTS = ("evalsha", "script|load", "script|exists")
_TRANSACTIONS = ("multi", "exec", "discard", "watch", "unwatch")
REDIS_COMMANDS: dict[str, tuple[str, ...]] = {
    "consumer": ("ping", *_SCRIPTS, *_TRANSACTIONS, "get", "set", "append", "bitfield", "strlen", "exists",
                 "type", "del", "expireat", "hget", "hset", "hsetnx", "hmget", "hgetall", "hincrby", "hdel",
                 "sadd", "srem", "smembers"),
    "decoder": ("ping", *_SCRIPTS, *_TRANSACTIONS, "get", "set", "strlen", "exists", "del", "hget", "hmget",
                "hgetall", "hdel", "smembers", "srem", "lpush", "ltrim", "lrange"),
    "producer": ("ping", "multi", "exec", "discard", "hget", "hset", "hincrby", "del"),
}
#: The keys the decoder writes (beside reading every key under the prefix): estimates and their histories, its
#: last pass, and the index entries and version fields of expired buckets it removes. Not the sketches,
#: offsets, statistics or rebuild marks.
DECODER_WRITES = ("estimate:*", "history:*", "joint:*", "joint-history:*", "decoder:*", "index:*",
                  "pairindex:*", "*:skv")
PRODUCER_KEYS = ("truth:*", "truth-strings:*")


def redis_acl_rules(prefix: str = PREFIX) -> dict[str, str]:
    """Each Redis user's ACL rules (without its password), no pub/sub channel: ``admin`` (the operator, not a
    service) every key and all but the dangerous commands (``@dangerous``: CONFIG, ACL, KEYS, FLUSHALL, ...);
    each role its commands (:data:`REDIS_COMMANDS`) on its keys under ``<prefix>:`` (the consumer all of them,
    the decoder reads them all and writes :data:`DECODER_WRITES`, the producer :data:`PRODUCER_KEYS`)."""
    def commands(role: str) -> str:
        return "-@all " + " ".join(f"+{c}" for c in REDIS_COMMANDS[role])

    return {
        ADMIN: "resetkeys ~* resetchannels +@all -@dangerous",
        "consumer": f"resetkeys ~{prefix}:* resetchannels {commands('consumer')}",
        "decoder": (f"resetkeys %R~{prefix}:* " + " ".join(f"%RW~{prefix}:{k}" for k in DECODER_WRITES)
                    + f" resetchannels {commands('decoder')}"),
        "producer": ("resetkeys " + " ".join(f"~{prefix}:{k}" for k in PRODUCER_KEYS)
                     + f" resetchannels {commands('producer')}"),
    }


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
        """The operator's configuration (Kafka and Redis ``admin``)."""
        return self.state_dir / "ldpstream.toml"

    def role_config_file(self, role: str) -> Path:
        """The configuration of ``role`` (one of :data:`ROLES`), with its credentials alone."""
        if role not in ROLES:
            raise ConfigError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
        return self.state_dir / f"{role}.toml"

    def password_file(self, service: str, user: str) -> Path:
        """The password of ``user`` for ``service`` (``kafka`` or ``redis``)."""
        return self.secrets_dir / f"{service}-{user}-password"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"rediss://127.0.0.1:{self.redis_port}/0"

    def service_config(self, prefix: str = PREFIX, role: str | None = None) -> ServiceConfig:
        """The configuration that reaches the secured services as ``role`` (its file), or as the operator."""
        path = self.config_file if role is None else self.role_config_file(role)
        return ServiceConfig.load({"config": str(path), "prefix": prefix}, environ={})


# ----------------------------------------------------------------------------------- TLS material, secrets


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServiceError(f"openssl {args[0]} failed: {result.stderr.strip()[-500:]}")


#: The broker's identity on its KRaft controller listener (SSL, ``ssl.client.auth=required``): the common name
#: of its certificate (:func:`make_broker_certificate`), mapped to the principal ``User:kafka-broker``, a super
#: user (the broker registers with its own controller through that listener).
BROKER_PRINCIPAL = "kafka-broker"
BROKER_KEYSTORE = f"{BROKER_PRINCIPAL}-keystore.pem"


def _sign(tls_dir: Path, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
    """A new key ``<name>.key`` and certificate ``<name>.pem`` of ``subject`` with ``extensions`` (an openssl
    extension file's text), signed by the CA in ``tls_dir``; the key is 0600."""
    key, csr, cert = tls_dir / f"{name}.key", tls_dir / f"{name}.csr", tls_dir / f"{name}.pem"
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", subject)
    ext = tls_dir / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(tls_dir / "ca.pem"), "-CAkey", str(tls_dir / "ca.key"),
             "-CAcreateserial", "-out", str(cert), "-days", "825", "-sha256", "-extfile", str(ext))
    os.chmod(key, 0o600)
    return cert, key


def _server_extensions(hosts: tuple[str, ...]) -> str:
    names = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
    return (f"subjectAltName={names}\nextendedKeyUsage=serverAuth,clientAuth\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n")


def make_certificates(tls_dir: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> None:
    """A CA (``ca.pem``, ``ca.key``), a server certificate for ``hosts`` signed by it (``server.pem``,
    ``server.key``; ``server-keystore.pem`` is both, the form Kafka's PEM keystore reads), and the broker's
    controller certificate (:func:`make_broker_certificate`). Each kept when present."""
    tls_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(tls_dir, 0o700)
    ca = tls_dir / "ca.pem"
    if not (tls_dir / "server-keystore.pem").exists():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tls_dir / "ca.key"), "-out",
                 str(ca), "-days", "3650", "-subj", "/CN=ldpstream local CA", "-addext",
                 "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        cert, key = _sign(tls_dir, "server", f"/CN={hosts[-1]}", _server_extensions(hosts))
        (tls_dir / "server-keystore.pem").write_text(key.read_text() + cert.read_text())
    make_broker_certificate(tls_dir, hosts)
    for path in tls_dir.iterdir():
        os.chmod(path, 0o600)
    os.chmod(ca, 0o644)


def make_broker_certificate(tls_dir: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Path:
    """The Kafka broker's certificate for its controller listener, signed by the CA in ``tls_dir``: common name
    :data:`BROKER_PRINCIPAL`, for ``hosts`` (the listener's server side) and for client authentication (the
    broker's connection to its controller), as one PEM keystore (key and certificate), :data:`BROKER_KEYSTORE`.
    Its own key, which no other server holds (Redis has the server certificate's). Kept when present."""
    keystore = tls_dir / BROKER_KEYSTORE
    if not keystore.exists():
        cert, key = _sign(tls_dir, BROKER_PRINCIPAL, f"/CN={BROKER_PRINCIPAL}", _server_extensions(hosts))
        _write_private(keystore, key.read_text() + cert.read_text())
        for path in (key, cert, tls_dir / f"{BROKER_PRINCIPAL}.csr", tls_dir / f"{BROKER_PRINCIPAL}.ext"):
            path.unlink()
    return keystore


def make_client_certificate(tls_dir: Path, name: str) -> tuple[Path, Path]:
    """A client certificate for mutual TLS (``<name>.pem``, ``<name>.key``, common name ``name``), signed by the
    CA of :func:`make_certificates` in ``tls_dir``: what a client gives as ``cert``/``key`` to a Redis with
    ``tls-auth-clients yes`` or a Kafka listener with ``ssl.client.auth=required``."""
    if not name.replace("-", "").isalnum():
        raise ConfigError(f"client certificate name {name!r}: letters, digits and '-' only")
    if name == BROKER_PRINCIPAL:
        raise ConfigError(f"client certificate name {name!r}: the broker's own identity (a super user)")
    return _sign(tls_dir, name, f"/CN={name}",
                 "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n")


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


def _config_text(cfg: SecureStackConfig, user: str, what: str) -> str:
    client = 'cert = "tls/client.pem"\nkey = "tls/client.key"\n' if cfg.client_auth else ""
    return (f"# The secured local stack (ldpstream stack up --secure), {what}: export LDPSTREAM_CONFIG=<this file>\n"
            "[kafka]\n"
            f'bootstrap = "{cfg.kafka_bootstrap}"\n'
            'security = "SASL_SSL"\n'
            f'sasl_mechanism = "{SASL_MECHANISM}"\n'
            f'user = "{user}"\n'
            f'password_file = "secrets/kafka-{user}-password"\n'
            'ca = "tls/ca.pem"\n' + client + "\n"
            "[redis]\n"
            f'url = "{cfg.redis_url}"\n'
            f'user = "{user}"\n'
            f'password_file = "secrets/redis-{user}-password"\n'
            'ca = "tls/ca.pem"\n' + client)


def write_config_files(cfg: SecureStackConfig) -> list[Path]:
    """``ldpstream.toml`` (the operator: ``admin``) and one file per role (its own users)."""
    cfg.config_file.write_text(_config_text(cfg, ADMIN, "the operator (admin)"))
    for role in ROLES:
        cfg.role_config_file(role).write_text(_config_text(cfg, role, f"the {role}"))
    return [cfg.config_file, *(cfg.role_config_file(role) for role in ROLES)]


#: The group of a secured deployment's secret files (0640): the image's ``ldpstream`` group (deploy/Dockerfile);
#: compose.secure.yaml gives it to the Kafka and Redis containers as a supplementary group.
SECRETS_GID = 10001


def secret_names() -> list[str]:
    """The password files of a secured deployment (:func:`make_secrets`, the local stack's ``secrets/``)."""
    return [f"kafka-{user}-password" for user in KAFKA_USERS] + [f"redis-{user}-password" for user in REDIS_USERS]


def make_secrets(folder: Path, hosts: tuple[str, ...]) -> list[Path]:
    """What a secured deployment mounts (``deploy/compose.secure.yaml``, ``deploy/k8s-secure``): a CA, a server
    certificate for ``hosts`` and random passwords (:func:`secret_names`), in ``folder`` (mode 700). The files
    are 0640 and of the group :data:`SECRETS_GID` where this process may give it (as root, or as a member of
    that group; else their group stays, to change with ``chgrp``), ``ca.pem`` 0644, ``ca.key`` 0600 (no
    container reads it). Files already there are kept."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    make_certificates(folder, hosts)
    for name in secret_names():
        _password(folder / name)
    for path in folder.iterdir():
        if path.name == "ca.key":
            os.chmod(path, 0o600)
            continue
        with contextlib.suppress(PermissionError):
            os.chown(path, -1, SECRETS_GID)
        os.chmod(path, 0o644 if path.name == "ca.pem" else 0o640)
    return sorted(folder.iterdir())


def prepare(cfg: SecureStackConfig) -> None:
    """Folders, certificates, passwords and the configuration files (idempotent)."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.state_dir, 0o700)
    make_certificates(cfg.tls_dir)
    if cfg.client_auth and not (cfg.tls_dir / "client.pem").exists():
        make_client_certificate(cfg.tls_dir, "client")
    for name in secret_names():
        _password(cfg.secrets_dir / name)
    write_config_files(cfg)


# ----------------------------------------------------------------------------------------------- Redis


def redis_answers(cfg: SecureStackConfig) -> bool:
    import redis

    if not daemons.port_open(cfg.redis_port) or not cfg.config_file.exists():
        return False
    try:
        return bool(cfg.service_config().redis.client().ping())
    except (redis.RedisError, ConfigError, OSError):
        return False


def redis_acl_lines(passwords: dict[str, str], prefix: str = PREFIX) -> list[str]:
    """``redis.conf`` / ACL-file lines: no anonymous user, then each user of :func:`redis_acl_rules` with its
    password (``passwords``: user → password)."""
    return ["user default off", *(f"user {user} on >{passwords[user]} {rules}"
                                  for user, rules in redis_acl_rules(prefix).items())]


def start_redis(cfg: SecureStackConfig) -> None:
    if redis_answers(cfg):
        return
    data = cfg.redis_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    tls = cfg.tls_dir
    conf = cfg.redis_dir / "redis.conf"
    passwords = {user: _password(cfg.password_file("redis", user)) for user in REDIS_USERS}
    _write_private(conf, "\n".join([*redis_acl_lines(passwords), ""]))  # the passwords: never on a command line
    argv = redis_server_argv(
        0, data, ("tls-port", str(cfg.redis_port)), ("tls-cert-file", str(tls / "server.pem")),
        ("tls-key-file", str(tls / "server.key")), ("tls-ca-cert-file", str(tls / "ca.pem")),
        ("tls-auth-clients", "yes" if cfg.client_auth else "no"), ("maxmemory-policy", "noeviction"),
        config_file=conf)
    pid_file, what = cfg.redis_dir / "redis.pid", f"Redis (TLS) on port {cfg.redis_port}"
    daemons.clear(pid_file, [cfg.redis_port], cfg.redis_dir, what)
    daemons.launch(argv, cwd=data, pid_file=pid_file, log=cfg.redis_dir / "redis.log",
                   ready=lambda: redis_answers(cfg), timeout=30, what=what)


# ----------------------------------------------------------------------------------------------- Kafka


def _client_settings(cfg: SecureStackConfig) -> dict[str, Any]:
    """The ``admin`` client's settings (built from the password file, not from ``ldpstream.toml``)."""
    return {"bootstrap.servers": cfg.kafka_bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": SASL_MECHANISM, "sasl.username": ADMIN,
            "sasl.password": _password(cfg.password_file("kafka", ADMIN)), "ssl.ca.location": str(cfg.ca),
            **({"ssl.certificate.location": str(cfg.tls_dir / "client.pem"),
                "ssl.key.location": str(cfg.tls_dir / "client.key")} if cfg.client_auth else {})}


def kafka_answers(cfg: SecureStackConfig, timeout: float = 3.0) -> bool:
    from confluent_kafka.admin import AdminClient

    if not daemons.port_open(cfg.kafka_port) or not cfg.password_file("kafka", ADMIN).exists():
        return False
    try:
        AdminClient(_client_settings(cfg)).list_topics(timeout=timeout)
        return True
    except Exception:  # KafkaException: not ready yet
        return False


def authorizer_properties() -> list[str]:
    """The broker's authorizer: KRaft's ``StandardAuthorizer``, nothing allowed without an ACL; super users
    ``admin`` (the operator, and the broker's identity on its SASL_SSL listener) and :data:`BROKER_PRINCIPAL`
    (the broker's certificate on its controller listener: :func:`controller_listener_properties`)."""
    return ["authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            f"super.users=User:{ADMIN};User:{BROKER_PRINCIPAL}", "allow.everyone.if.no.acl.found=false"]


def controller_listener_properties(keystore: str, truststore: str) -> list[str]:
    """The KRaft controller listener ``CONTROLLER``: SSL that requires a certificate of the CA (``truststore``),
    the broker's own (``keystore``, :func:`make_broker_certificate`) on both sides (the combined broker's
    connection to its controller reads the listener's settings too). Its common name maps to the principal
    ``User:kafka-broker`` (:data:`BROKER_PRINCIPAL`); any other certificate keeps its whole DN (``User:CN=...``),
    which no ACL names. Without a certificate of the CA, no connection."""
    prefix = "listener.name.controller."
    return [f"{prefix}ssl.client.auth=required",
            f"{prefix}ssl.keystore.type=PEM", f"{prefix}ssl.keystore.location={keystore}",
            f"{prefix}ssl.truststore.type=PEM", f"{prefix}ssl.truststore.location={truststore}",
            f"{prefix}ssl.principal.mapping.rules=RULE:^CN={BROKER_PRINCIPAL}$/{BROKER_PRINCIPAL}/,DEFAULT"]


def _format_storage(cfg: SecureStackConfig, libs: Path, properties: Path) -> None:
    """Format the broker's storage once, with the SCRAM user ``admin``: its password goes to the StorageTool in
    a Java argument file (mode 600, removed after), never on a command line (``ps`` shows them to every user)."""
    if (cfg.kafka_dir / "data" / "meta.properties").exists():
        return
    password = _password(cfg.password_file("kafka", ADMIN))
    argfile = cfg.kafka_dir / "format.args"
    _write_private(argfile, "\n".join([
        "kafka.tools.StorageTool", "format", "-t", uuid.uuid4().hex[:22], "-c", f'"{properties}"',
        "--ignore-formatted", "--add-scram", f'"{SASL_MECHANISM}=[name={ADMIN},password={password}]"', ""]))
    try:
        fmt = subprocess.run([java_binary(), "-cp", f"{libs}/*", f"@{argfile}"], capture_output=True, text=True,
                             check=False)
    finally:
        argfile.unlink(missing_ok=True)
    if fmt.returncode != 0:
        raise ServiceError(f"kafka.tools.StorageTool format failed:\n{fmt.stdout}{fmt.stderr}"[:4000])


def start_kafka(cfg: SecureStackConfig, base: StackConfig) -> None:
    """Start the secured broker unless it answers; return once it is ready (as :func:`stack.start_kafka`)."""
    if kafka_answers(cfg):
        check_kafka_serves_groups(_client_settings(cfg), f"see its log: {cfg.kafka_dir / 'kafka.log'}")
        return
    libs = ensure_kafka_jars(base)
    cfg.kafka_dir.mkdir(parents=True, exist_ok=True)
    data = cfg.kafka_dir / "data"
    properties = cfg.kafka_dir / "server.properties"
    admin_password = _password(cfg.password_file("kafka", ADMIN))
    plain = (KAFKA_FILES / "server.properties.template").read_text().format(
        broker_port=cfg.kafka_port, controller_port=cfg.controller_port, data_dir=data)
    overridden = ("listeners=", "advertised.listeners=", "listener.security.protocol.map=",
                  "inter.broker.listener.name=")
    kept = [line for line in plain.splitlines() if not line.startswith(overridden)]
    tls = cfg.tls_dir
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" '
            f'password="{admin_password}";')
    _write_private(properties, "\n".join([
        *kept,
        "# secured: clients and the broker itself speak SASL_SSL with SCRAM-SHA-512, under ACLs; the controller",
        "# listener SSL with the broker's certificate only",
        f"listeners=SASL_SSL://127.0.0.1:{cfg.kafka_port},CONTROLLER://127.0.0.1:{cfg.controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{cfg.kafka_port}",
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "inter.broker.listener.name=SASL_SSL",
        f"sasl.enabled.mechanisms={SASL_MECHANISM}",
        f"sasl.mechanism.inter.broker.protocol={SASL_MECHANISM}",
        f"listener.name.sasl_ssl.{SASL_MECHANISM.lower()}.sasl.jaas.config={jaas}",
        *authorizer_properties(),
        *controller_listener_properties(str(tls / BROKER_KEYSTORE), str(tls / "ca.pem")),
        "ssl.keystore.type=PEM", f"ssl.keystore.location={tls / 'server-keystore.pem'}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={tls / 'ca.pem'}",
        # a SASL_SSL listener ignores the broker-wide ssl.client.auth: only the listener's own setting counts
        # (KIP-684)
        f"listener.name.sasl_ssl.ssl.client.auth={'required' if cfg.client_auth else 'none'}", ""]))
    _format_storage(cfg, libs, properties)
    run_kafka_broker(libs, cfg.kafka_dir, heap=cfg.kafka_heap, min_heap="128m", ready=lambda: kafka_answers(cfg),
                      check=lambda hint: check_kafka_serves_groups(_client_settings(cfg), hint),
                      what=f"Kafka broker (SASL_SSL) on port {cfg.kafka_port}",
                      ports=(cfg.kafka_port, cfg.controller_port))


def acl_bindings() -> list[Any]:
    """:data:`KAFKA_ACLS` as confluent_kafka ``AclBinding``\\ s."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return [AclBinding(ResourceType[acl.resource], acl.name, ResourcePatternType[acl.pattern], f"User:{acl.user}",
                       "*", AclOperation[acl.operation], AclPermissionType.ALLOW) for acl in KAFKA_ACLS]


def ensure_users_topics_and_acls(cfg: SecureStackConfig, timeout: float = 30.0) -> None:
    """As ``admin``: the role users' SCRAM credentials (set to their password files' content), the topics the
    ACLs name (:data:`REPORTS_TOPIC`, :data:`DEAD_LETTER_TOPIC`, :data:`ESTIMATES_TOPIC`), and
    :data:`KAFKA_ACLS`. Idempotent; passwords travel only inside the TLS connection."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialUpsertion,
    )

    from ldpstream.kafka import ensure_topics

    admin = AdminClient(_client_settings(cfg))
    mechanism = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(role, mechanism, _password(cfg.password_file("kafka", role)).encode())
        for role in ROLES]
    try:
        for future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
            future.result()
        for future in admin.create_acls(acl_bindings(), request_timeout=timeout).values():
            future.result()
    except KafkaException as exc:
        raise ServiceError(f"cannot create the secured stack's Kafka users or ACLs: {exc}") from None
    operator = cfg.service_config().kafka
    ensure_topics(operator, [REPORTS_TOPIC, DEAD_LETTER_TOPIC])
    ensure_topics(operator, [ESTIMATES_TOPIC], partitions=1)


# ------------------------------------------------------------------------------------------ the stack


@dataclass(frozen=True)
class SecureStatus:
    kafka: bool
    redis: bool
    cfg: SecureStackConfig

    def describe(self) -> str:
        def word(up: bool) -> str:
            return "up" if up else "down"

        roles = "\n".join(f"{role:9} LDPSTREAM_CONFIG={self.cfg.role_config_file(role)}" for role in ROLES)
        return (f"kafka  {word(self.kafka):4}  {self.cfg.kafka_bootstrap} (SASL_SSL, {SASL_MECHANISM}, ACLs; "
                f"users {', '.join(KAFKA_USERS)})\n"
                f"redis  {word(self.redis):4}  {self.cfg.redis_url} (TLS, ACL users {', '.join(REDIS_USERS)})\n"
                f"config {self.cfg.config_file} (the operator: admin)\n"
                f"{roles}\n"
                f"LDPSTREAM_CONFIG={self.cfg.config_file}")


def up(cfg: SecureStackConfig | None = None, base: StackConfig | None = None) -> SecureStatus:
    """Make the certificates, passwords and configuration files, start the secured Redis and Kafka unless they
    answer, and give Kafka its users, topics and ACLs."""
    base = base or StackConfig.from_env()
    cfg = cfg or SecureStackConfig.from_env(base)
    prepare(cfg)
    start_redis(cfg)
    start_kafka(cfg, base)
    ensure_users_topics_and_acls(cfg)
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

