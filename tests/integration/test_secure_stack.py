"""Kafka over TLS with SASL/SCRAM and Redis over TLS with an ACL user, on the secured local stack
(``ldpstream stack up --secure``: a KRaft broker from the same jars, ``redis-server`` with ``tls-port``, a CA and
certificates made by :mod:`ldpstream.deploy.secure`): the whole pipeline through the CLI with the service
configuration that stack writes; refused clients (no credentials, wrong ones, an unknown CA) end in one line
and a non-zero exit; no password ever reaches an output.

The stack is started when it does not answer (about 10 s); ``LDPSTREAM_STACK_DIR`` and
``LDPSTREAM_STACK_SECURE_*_PORT`` move it, as for ``ldpstream stack``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ldpstream.config import KafkaConfig, RedisConfig, ServiceConfig
from ldpstream.deploy import secure
from ldpstream.errors import ServiceError
from ldpstream.kafka import ensure_topics
from ldpstream.testing import start_local, unavailable
from tests.integration.helpers import write_registry

pytestmark = [pytest.mark.integration, pytest.mark.secure]

METRICS = {"app_language": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 2.0,
                            "labels": ["en", "es", "zh", "hi"], "windows": ["all"]}}
CLIENTS = 4_000


@pytest.fixture(scope="module")
def stack() -> secure.SecureStackConfig:
    cfg = secure.SecureStackConfig.from_env()
    try:
        start_local(f"the secured stack ({cfg.kafka_bootstrap}, {cfg.redis_url})",
                    lambda: secure.status(cfg).kafka and secure.status(cfg).redis, lambda: secure.up(cfg),
                    lambda: secure.down(cfg))
        return secure.status(cfg).cfg
    except Exception as exc:
        unavailable(f"secured local stack: {exc}")
        raise


@pytest.fixture(scope="module")
def passwords(stack: secure.SecureStackConfig) -> list[str]:
    return [(stack.secrets_dir / name).read_text().strip()
            for name in ("kafka-password", "kafka-admin-password", "redis-password")]


@pytest.fixture
def secured(stack: secure.SecureStackConfig, tmp_path: Path) -> tuple[ServiceConfig, Path]:
    """The stack's configuration with a prefix and a topic of this test's own, and its registry file."""
    config = stack.service_config(prefix=f"test:{uuid.uuid4().hex[:10]}")
    topic = f"test-secure-{uuid.uuid4().hex[:10]}"
    ensure_topics(config.kafka, [topic, "ldp-dead-letters"], partitions=2)
    return config, write_registry(tmp_path / "metrics.toml", topic, METRICS)


def run(stack: secure.SecureStackConfig, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``ldpstream ARGV`` as a separate process, configured by the stack's file (and ``env``) only."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("LDPSTREAM_") or k.startswith(("LDPSTREAM_STACK_", "LDPSTREAM_CACHE_DIR"))}
    clean.update({"LDPSTREAM_CONFIG": str(stack.config_file), "OPENBLAS_NUM_THREADS": "1", **env})
    return subprocess.run([sys.executable, "-m", "ldpstream", *argv], capture_output=True, text=True, env=clean,
                          timeout=120, check=False)


def assert_refused(result: subprocess.CompletedProcess[str], command: str, *words: str) -> str:
    """Non-zero exit, one line on stderr naming the problem."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result
    assert len(lines) == 1 and lines[0].startswith(f"ldpstream {command}: error: "), result.stderr
    assert all(word in lines[0] for word in words), lines[0]
    return lines[0]


def test_the_pipeline_runs_over_tls_with_sasl_and_an_acl_user_and_shows_no_password(stack, secured, passwords):
    config, registry = secured
    assert config.kafka.security.protocol == "SASL_SSL" and config.redis.tls and config.redis.user
    common = ["--registry", str(registry), "--prefix", config.redis.prefix]
    outputs = []
    produced = run(stack, "produce", "app_language", "--registry", str(registry), "--clients", str(CLIENTS),
                   "--seed", "1", "--per-message", "10", "--json", "--no-progress")
    outputs.append(produced)
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout)["reports_acked"] == CLIENTS
    for argv in (["consume", *common, "--group", f"g-{config.redis.prefix}", "--idle-exit", "3",
                  "--metrics-port", "0"],
                 ["decode", *common, "--once", "--metrics-port", "0"],
                 ["status", *common, "--json"]):
        result = run(stack, *argv, LDPSTREAM_DEBUG="1")
        outputs.append(result)
        assert result.returncode == 0, (argv, result.stderr)
    status = json.loads(outputs[-1].stdout)
    assert status["metrics"]["app_language"]["reports"] == CLIENTS
    assert all(p["lag"] == 0 for p in status["partitions"])
    assert config.redis.store().latest_estimate("app_language") is not None
    for result in outputs:
        for password in passwords:
            assert password not in result.stdout and password not in result.stderr


def test_a_wrong_kafka_password_is_refused_in_one_line(stack, secured, passwords):
    _, registry = secured
    result = run(stack, "produce", "app_language", "--registry", str(registry), "--clients", "10",
                 LDPSTREAM_KAFKA_PASSWORD="not-the-password")
    line = assert_refused(result, "produce", "refused the client", "SASL_SSL", "invalid credentials")
    assert "not-the-password" not in line and passwords[0] not in result.stderr


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
    config, registry = secured
    anonymous = RedisConfig(config.redis.url, ca=config.redis.ca)
    with pytest.raises(ServiceError, match=r"refused the client.*(NOAUTH|[Aa]uthenticat)"):
        anonymous.check_access()
    result = run(stack, "status", "--registry", str(registry), LDPSTREAM_REDIS_PASSWORD="wrong-password")
    line = assert_refused(result, "status", f"Redis at {stack.redis_url} refused the client (user ldpstream)")
    assert "wrong-password" not in line and passwords[2] not in result.stderr
    plaintext = RedisConfig(f"redis://127.0.0.1:{stack.redis_port}/0")
    with pytest.raises(ServiceError, match="did not answer"):
        plaintext.check_access()


def test_stack_status_shows_the_secured_services_and_the_configuration_to_export(stack):
    result = run(stack, "stack", "status", "--secure")
    assert f"{stack.kafka_bootstrap} (SASL_SSL, SCRAM-SHA-512)" in result.stdout
    assert f"LDPSTREAM_CONFIG={stack.config_file}" in result.stdout
    assert oct(stack.secrets_dir.stat().st_mode & 0o777) == "0o700"
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in stack.secrets_dir.iterdir())
