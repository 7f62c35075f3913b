"""Kafka over TLS with SASL/SCRAM under ACLs and Redis over TLS with ACL users, on the secured local stack
(``ldpstream stack up --secure``: a KRaft broker from the same jars, ``redis-server`` with ``tls-port``, a CA and
certificates made by :mod:`ldpstream.deploy.secure`): the whole pipeline through the CLI, each role with its
own configuration file and credentials; what a role may not do is refused (a producer reads no estimates and no
sketches, writes no estimates; a consumer writes no estimates; a decoder writes no sketches); refused clients
(no credentials, wrong ones, an unknown CA) end in one line and a non-zero exit; no password ever reaches an
output or a command line; the KRaft controller listener serves its admin APIs to the broker's certificate
alone.

The stack is started when it does not answer (about 10 s); ``LDPSTREAM_STACK_DIR`` and
``LDPSTREAM_STACK_SECURE_*_PORT`` move it, as for ``ldpstream stack``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from ldpstream.config import KafkaConfig, RedisConfig, ServiceConfig
from ldpstream.deploy import secure
from ldpstream.deploy.stack import StackConfig, ensure_kafka_jars
from ldpstream.errors import ServiceError
from ldpstream.kafka import ensure_topics
from ldpstream.testing import start_local, unavailable
from tests.integration.helpers import write_registry

pytestmark = [pytest.mark.integration, pytest.mark.secure]

METRIC = {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 2.0, "labels": ["en", "es", "zh", "hi"],
          "windows": ["all"]}
CLIENTS = 4_000


@pytest.fixture(scope="module")
def stack() -> secure.SecureStackConfig:
    cfg = secure.SecureStackConfig.from_env()
    try:
        start_local(f"the secured stack ({cfg.kafka_bootstrap}, {cfg.redis_url})",
                    lambda: secure.status(cfg).kafka and secure.status(cfg).redis, lambda: secure.up(cfg),
                    lambda: secure.down(cfg))
        secure.ensure_users_topics_and_acls(cfg)  # a stack started before: the users, topics and ACLs of now
        return secure.status(cfg).cfg
    except Exception as exc:
        unavailable(f"secured local stack: {exc}")
        raise


@pytest.fixture(scope="module")
def passwords(stack: secure.SecureStackConfig) -> list[str]:
    return [(stack.secrets_dir / name).read_text().strip() for name in secure.secret_names()]


@dataclasses.dataclass(frozen=True)
class Secured:
    """A test's operator configuration (prefix ``ldp``, as the Redis ACLs name it), its reports topic and
    metric (names of its own, under the names the ACLs allow) and its registry file."""

    config: ServiceConfig
    topic: str
    metric: str
    registry: Path


@pytest.fixture
def secured(stack: secure.SecureStackConfig, tmp_path: Path) -> Iterator[Secured]:
    config = stack.service_config()
    run_id = uuid.uuid4().hex[:10]
    topic, metric = f"{secure.REPORTS_TOPIC}-test-{run_id}", f"app_language_{run_id}"
    ensure_topics(config.kafka, [topic], partitions=2)
    yield Secured(config, topic, metric, write_registry(tmp_path / "metrics.toml", topic, {metric: METRIC}))
    client = config.redis.client()
    for pattern in (f"{secure.PREFIX}:*{metric}*", f"{secure.PREFIX}:*{topic}*"):
        names = list(client.scan_iter(pattern, count=1000))
        if names:
            client.delete(*names)


def run(stack: secure.SecureStackConfig, role: str | None, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``ldpstream ARGV`` as a separate process, configured by the file of ``role`` (None: the operator's) and
    ``env`` only."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("LDPSTREAM_") or k.startswith(("LDPSTREAM_STACK_", "LDPSTREAM_CACHE_DIR"))}
    config = stack.config_file if role is None else stack.role_config_file(role)
    clean.update({"LDPSTREAM_CONFIG": str(config), "OPENBLAS_NUM_THREADS": "1", **env})
    return subprocess.run([sys.executable, "-m", "ldpstream", *argv], capture_output=True, text=True, env=clean,
                          timeout=120, check=False)


def assert_refused(result: subprocess.CompletedProcess[str], command: str, *words: str) -> str:
    """Non-zero exit, one line on stderr naming the problem."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result
    assert len(lines) == 1 and lines[0].startswith(f"ldpstream {command}: error: "), result.stderr
    assert all(word in lines[0] for word in words), lines[0]
    return lines[0]


def test_the_pipeline_runs_with_a_credential_per_role_and_shows_no_password(stack, secured, passwords):
    common = ["--registry", str(secured.registry)]
    outputs = []
    produced = run(stack, "producer", "produce", secured.metric, *common, "--clients", str(CLIENTS),
                   "--seed", "1", "--per-message", "10", "--json", "--no-progress")
    outputs.append(produced)
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout)["reports_acked"] == CLIENTS
    assert "truth is not published" not in produced.stderr  # the producer's Redis user writes the truth
    group = f"{secure.CONSUMER_GROUP}-test-{uuid.uuid4().hex[:8]}"
    for role, argv in (("consumer", ["consume", *common, "--group", group, "--idle-exit", "3",
                                     "--metrics-port", "0"]),
                       ("decoder", ["decode", *common, "--once", "--metrics-port", "0"]),
                       (None, ["status", *common, "--json"])):
        result = run(stack, role, *argv, LDPSTREAM_DEBUG="1")
        outputs.append(result)
        assert result.returncode == 0, (argv, result.stderr)
    status = json.loads(outputs[-1].stdout)
    assert status["metrics"][secured.metric]["reports"] == CLIENTS
    assert all(p["lag"] == 0 for p in status["partitions"])
    assert secured.config.redis.store().latest_estimate(secured.metric) is not None
    for result in outputs:
        for password in passwords:
            assert password not in result.stdout and password not in result.stderr


def _kafka_error(stack: secure.SecureStackConfig, role: str, action: str, topic: str, timeout: float = 20) -> int:
    """The error code Kafka answers ``role`` that reads (``action`` "read", partition 0 from its start, in a
    group the consumer's ACLs name) or writes ("write", one message) ``topic``; 0 when it succeeds."""
    settings = stack.service_config(role=role).kafka
    if action == "write":
        errors: list[KafkaError] = []
        producer = Producer(settings.producer(**{"acks": "all", "message.timeout.ms": int(timeout * 1000)}))
        producer.produce(topic, b"{}", on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(timeout + 5)
        return errors[0].code() if errors and errors[0] is not None else 0
    consumer = Consumer(settings.consumer(f"{secure.CONSUMER_GROUP}-probe", **{"enable.auto.commit": False,
                                                                                "enable.partition.eof": True}))
    try:
        # a topic it may not even describe: librdkafka waits for it without a word, the metadata says why
        refused = consumer.list_topics(topic, timeout=timeout).topics[topic].error
        if refused is not None:
            return int(refused.code())
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            return 0 if error is None or error.code() == KafkaError._PARTITION_EOF else int(error.code())
        return 0
    finally:
        consumer.close()


def test_a_producer_credential_writes_reports_and_nothing_else(stack, secured):
    estimates, reports, prefix = secure.ESTIMATES_TOPIC, secured.topic, secure.PREFIX
    assert _kafka_error(stack, "decoder", "write", estimates) == 0  # something to read
    assert _kafka_error(stack, "producer", "write", reports) == 0
    refused = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)
    assert _kafka_error(stack, "producer", "read", estimates) in refused
    assert _kafka_error(stack, "producer", "read", reports) in refused
    assert _kafka_error(stack, "producer", "write", estimates) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _kafka_error(stack, "producer", "write", secure.DEAD_LETTER_TOPIC) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # the group's ACL lets a consumer past the group: the topic's ACL is what refuses it the estimates
    assert _kafka_error(stack, "consumer", "read", reports) == 0
    assert _kafka_error(stack, "consumer", "read", estimates) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    producer = stack.service_config(role="producer").redis.client()
    sketch = f"{prefix}:{{{reports}:0}}:sk:{secured.metric}:00000001:0"
    estimate = f"{prefix}:estimate:{secured.metric}:all"
    for command in (lambda: producer.get(sketch), lambda: producer.set(sketch, b"x"),
                    lambda: producer.get(estimate), lambda: producer.set(estimate, "{}"),
                    lambda: producer.hgetall(f"{prefix}:{{{reports}:0}}:offset")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            command()


def test_a_consumer_writes_no_estimates_and_a_decoder_no_sketches(stack, secured):
    prefix = secure.PREFIX
    assert _kafka_error(stack, "consumer", "write", secure.ESTIMATES_TOPIC) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _kafka_error(stack, "decoder", "write", secure.ESTIMATES_TOPIC) == 0
    assert _kafka_error(stack, "decoder", "write", secured.topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    decoder = stack.service_config(role="decoder").redis.client()
    sketch = f"{prefix}:{{{secured.topic}:0}}:sk:{secured.metric}:00000001:0"
    with pytest.raises(redis.exceptions.NoPermissionError):
        decoder.set(sketch, b"x")
    with pytest.raises(redis.exceptions.NoPermissionError):
        decoder.get(f"other:{uuid.uuid4().hex}")  # outside the prefix
    assert decoder.get(sketch) is None  # it reads everything under the prefix
    decoder.set(f"{prefix}:estimate:{secured.metric}:all", "{}")  # and writes estimates
    with pytest.raises(redis.exceptions.NoPermissionError):
        decoder.config_get("maxmemory-policy")


def test_a_wrong_kafka_password_is_refused_in_one_line(stack, secured, passwords):
    result = run(stack, "producer", "produce", secured.metric, "--registry", str(secured.registry), "--clients", "10",
                 LDPSTREAM_KAFKA_PASSWORD="not-the-password")
    line = assert_refused(result, "produce", "refused the client", "SASL_SSL", "invalid credentials")
    assert "not-the-password" not in line and not any(p in result.stderr for p in passwords)


def test_a_kafka_client_without_credentials_or_tls_is_refused(stack):
    with pytest.raises(ServiceError, match="did not answer within 3 s with security PLAINTEXT"):
        KafkaConfig(stack.kafka_bootstrap).check_access(timeout=3)


def test_a_kafka_client_that_does_not_trust_the_brokers_ca_is_refused(stack, tmp_path):
    secure.make_certificates(tmp_path / "other-ca")  # a CA of its own, which signed nothing of the broker's
    config = stack.service_config()
    other = KafkaConfig(config.kafka.bootstrap, security=dataclasses.replace(
        config.kafka.security, ca=str(tmp_path / "other-ca" / "ca.pem")))
    with pytest.raises(ServiceError, match=r"refused the client.*certificate verify failed"):
        other.check_access(timeout=10)


def test_redis_refuses_a_client_without_or_with_wrong_credentials(stack, secured, passwords):
    anonymous = RedisConfig(secured.config.redis.url, ca=secured.config.redis.ca)
    with pytest.raises(ServiceError, match=r"refused the client.*(NOAUTH|[Aa]uthenticat)"):
        anonymous.check_access()
    result = run(stack, "consumer", "status", "--registry", str(secured.registry),
                 LDPSTREAM_REDIS_PASSWORD="wrong-password")
    line = assert_refused(result, "status", f"Redis at {stack.redis_url} refused the client (user consumer)")
    assert "wrong-password" not in line and not any(p in result.stderr for p in passwords)
    plaintext = RedisConfig(f"redis://127.0.0.1:{stack.redis_port}/0")
    with pytest.raises(ServiceError, match="did not answer"):
        plaintext.check_access()


def test_stack_status_shows_the_secured_services_and_the_configuration_to_export(stack):
    result = run(stack, None, "stack", "status", "--secure")
    assert f"{stack.kafka_bootstrap} (SASL_SSL, SCRAM-SHA-512, ACLs" in result.stdout
    assert f"LDPSTREAM_CONFIG={stack.config_file}" in result.stdout
    for role in secure.ROLES:
        assert f"LDPSTREAM_CONFIG={stack.role_config_file(role)}" in result.stdout
    assert oct(stack.secrets_dir.stat().st_mode & 0o777) == "0o700"
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in stack.secrets_dir.iterdir())


#: A Java Admin client of the controller listener (``bootstrap.controllers``, KIP-919; librdkafka has none): for
#: each ``name=properties-file`` argument, one line ``name describe_cluster=R create_acls=R``, R ``ok`` or the
#: exception's class (an ACL it creates it deletes again).
_CONTROLLER_ADMIN = """
import java.io.FileReader;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.resource.*;

public class ControllerAdmin {
    static String outcome(Exception e) {
        return (e.getCause() != null ? e.getCause() : e).getClass().getSimpleName();
    }
    public static void main(String[] args) throws Exception {
        for (int i = 1; i < args.length; i++) {
            String[] named = args[i].split("=", 2);
            Properties props = new Properties();
            try (FileReader in = new FileReader(named[1])) { props.load(in); }
            props.put("bootstrap.controllers", args[0]);
            props.put("request.timeout.ms", "4000");
            props.put("default.api.timeout.ms", "6000");
            try (Admin admin = Admin.create(props)) {
                String describe, create;
                try { admin.describeCluster().clusterId().get(); describe = "ok"; }
                catch (Exception e) { describe = outcome(e); }
                AclBinding acl = new AclBinding(
                    new ResourcePattern(ResourceType.TOPIC, "controller-probe", PatternType.LITERAL),
                    new AccessControlEntry("User:controller-probe", "*", AclOperation.READ, AclPermissionType.ALLOW));
                try {
                    admin.createAcls(List.of(acl)).all().get();
                    admin.deleteAcls(List.of(acl.toFilter())).all().get();
                    create = "ok";
                } catch (Exception e) { create = outcome(e); }
                System.out.println(named[0] + " describe_cluster=" + describe + " create_acls=" + create);
            }
        }
    }
}
"""


def _controller_admin(stack: secure.SecureStackConfig, folder: Path,
                      clients: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """What each client (name: its Java client settings) gets from the controller listener: the outcomes of
    DescribeCluster and CreateAcls (``ok`` or the exception's class), from :data:`_CONTROLLER_ADMIN` run by
    Java's source launcher on the broker's jars."""
    java = shutil.which("java")
    listed = subprocess.run([java, "--list-modules"], capture_output=True, text=True, check=False).stdout \
        if java else ""
    if "jdk.compiler" not in listed:
        unavailable("a JDK (java with jdk.compiler) runs the controller's Java Admin client")
    source = folder / "ControllerAdmin.java"
    source.write_text(_CONTROLLER_ADMIN)
    argv = []
    for name, settings in clients.items():
        (folder / f"{name}.properties").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        argv.append(f"{name}={folder / f'{name}.properties'}")
    libs = ensure_kafka_jars(StackConfig.from_env())
    result = subprocess.run([str(java), "-cp", f"{libs}/*", str(source), f"127.0.0.1:{stack.controller_port}",
                             *argv], capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.findall(r"^(\S+) describe_cluster=(\w+) create_acls=(\w+)$", result.stdout, re.MULTILINE)
    return {name: (describe, create) for name, describe, create in found}


def test_the_controller_listener_serves_admin_apis_to_the_brokers_certificate_alone(stack, tmp_path):
    other_ca = tmp_path / "ca"  # the same CA, signing a certificate of another name
    other_ca.mkdir()
    for name in ("ca.pem", "ca.key"):
        shutil.copy(stack.tls_dir / name, other_ca / name)
    cert, key = secure.make_client_certificate(other_ca, "operator")
    (other_ca / "operator-keystore.pem").write_text(key.read_text() + cert.read_text())
    trust = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(stack.ca)}
    outcomes = _controller_admin(stack, tmp_path, {
        "plaintext": {},
        "tls-without-certificate": trust,
        "another-certificate-of-the-ca": {**trust, "ssl.keystore.type": "PEM",
                                          "ssl.keystore.location": str(other_ca / "operator-keystore.pem")},
        "the-brokers-certificate": {**trust, "ssl.keystore.type": "PEM",
                                    "ssl.keystore.location": str(stack.tls_dir / secure.BROKER_KEYSTORE)},
    })
    # no TLS: the listener does not answer; TLS without a certificate: the handshake is refused
    assert set(outcomes["plaintext"]) <= {"TimeoutException", "SslAuthenticationException"}, outcomes
    assert set(outcomes["tls-without-certificate"]) <= {"TimeoutException", "SslAuthenticationException"}, outcomes
    # a certificate of the CA connects as User:CN=operator, which may do nothing there
    assert outcomes["another-certificate-of-the-ca"] == ("ClusterAuthorizationException",) * 2, outcomes
    assert outcomes["the-brokers-certificate"] == ("ok", "ok"), outcomes


def _free_ports(count: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_no_password_reaches_a_command_line_while_a_new_secured_stack_starts(tmp_path):
    """A secured stack of its own (new storage: the SCRAM users are created), every process's command line
    sampled while it starts: no password in any."""
    import threading

    import psutil

    from ldpstream.deploy.stack import StackConfig

    base = StackConfig.from_env()
    kafka_port, controller_port, redis_port = _free_ports(3)
    cfg = secure.SecureStackConfig(tmp_path / "secure", base.cache_dir, kafka_port=kafka_port,
                                   controller_port=controller_port, redis_port=redis_port)
    secure.prepare(cfg)
    passwords = [p.read_text().strip() for p in cfg.secrets_dir.iterdir()]
    assert len(passwords) >= 3
    seen: list[str] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for process in psutil.process_iter(["cmdline"]):
                line = " ".join(process.info["cmdline"] or ())
                if any(password in line for password in passwords):
                    seen.append(line[:200])
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        secure.up(cfg, base)
    finally:
        done.set()
        sampler.join()
        secure.down(cfg)
    assert not seen, f"a password on a command line: {seen[0]}"
