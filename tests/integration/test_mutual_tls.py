"""Mutual TLS: a Redis that requires client certificates (``tls-auth-clients yes``) refuses a client without
one, and one whose certificate another CA signed, each in one clear line naming the server; it accepts the
client configured with a certificate its CA signed (``RedisConfig(cert=..., key=...)``, what ``--redis-cert``,
``LDPSTREAM_REDIS_CERT`` and ``redis.cert`` set), and the store counts through it. The same for a Kafka
listener with ``ssl.client.auth=required`` (SASL_SSL, SCRAM): without a certificate refused, with one the
client creates a topic and publishes.

The tests make their own CAs and certificates (:mod:`ldpstream.deploy.secure`) and start their own
``redis-server`` (TLS only, on a free port, in a temporary folder), and for Kafka a secured stack of their own
with ``client_auth`` (``SecureStackConfig``, free ports, a temporary folder; stopped afterwards).
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Producer

from ldpstream.config import RedisConfig
from ldpstream.deploy import secure
from ldpstream.deploy.stack import StackConfig
from ldpstream.errors import ServiceError
from ldpstream.kafka import ensure_topics
from ldpstream.store import PartitionBatch, SketchKey
from ldpstream.testing import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.secure]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The server's CA with a server and a client certificate, and a client certificate of another CA."""
    if shutil.which("openssl") is None:
        unavailable("openssl is not installed")
    ours, other = tmp_path_factory.mktemp("tls"), tmp_path_factory.mktemp("other-ca")
    secure.make_certificates(ours)
    secure.make_certificates(other)
    cert, key = secure.make_client_certificate(ours, "consumer")
    rogue_cert, rogue_key = secure.make_client_certificate(other, "rogue")
    return {"dir": ours, "ca": ours / "ca.pem", "cert": cert, "key": key, "rogue_cert": rogue_cert,
            "rogue_key": rogue_key}


@pytest.fixture(scope="module")
def redis_url(tls: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A TLS-only redis-server that requires a client certificate signed by the CA; stopped afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is not installed")
    folder = tmp_path_factory.mktemp("redis-mtls")
    port = _free_port()
    conf = folder / "redis.conf"
    conf.write_text("\n".join([
        "port 0", f"tls-port {port}", "bind 127.0.0.1", f"dir {folder}", 'save ""', "appendonly no",
        f"tls-cert-file {tls['dir'] / 'server.pem'}", f"tls-key-file {tls['dir'] / 'server.key'}",
        f"tls-ca-cert-file {tls['ca']}", "tls-auth-clients yes", ""]))
    with open(folder / "redis.log", "wb") as log:
        server = subprocess.Popen([str(binary), str(conf)], stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
    url = f"rediss://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                RedisConfig(url, ca=str(tls["ca"]), cert=str(tls["cert"]), key=str(tls["key"])).check_access()
                break
            except ServiceError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"redis-server with TLS did not start: {(folder / 'redis.log').read_text()}")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_client_without_a_certificate_is_refused_in_one_line(redis_url, tls):
    config = RedisConfig(redis_url, ca=str(tls["ca"]))
    with pytest.raises(ServiceError) as refused:
        config.check_access()
    message = str(refused.value)
    # the server's alert, or (TLS 1.3, when the client writes first) a closed connection with a hint
    assert message.startswith(f"Redis at {redis_url} ") and "\n" not in message
    assert "requires a client certificate" in message or "give redis.cert and redis.key" in message


def test_a_client_whose_certificate_another_ca_signed_is_refused(redis_url, tls):
    config = RedisConfig(redis_url, ca=str(tls["ca"]), cert=str(tls["rogue_cert"]), key=str(tls["rogue_key"]))
    with pytest.raises(ServiceError) as refused:
        config.check_access()
    message = str(refused.value)  # the server's alert, or (TLS 1.3) a closed connection with a hint
    assert message.startswith(f"Redis at {redis_url} ") and "\n" not in message and "rogue.pem" in message
    assert "refused the client certificate" in message or "did its CA sign" in message


def test_a_client_with_a_certificate_of_the_ca_is_accepted_and_counts(redis_url, tls):
    config = RedisConfig(redis_url, "test-mtls", ca=str(tls["ca"]), cert=str(tls["cert"]), key=str(tls["key"]))
    config.check_access()
    store = config.store()
    key = SketchKey("m", 1, -1)
    assert store.apply(PartitionBatch("t", 0, None, 5, increments={key: np.array([[2, 3]])})).applied
    assert store.snapshot("m", 1, (1, 2)).total.tolist() == [[2, 3]]


@pytest.fixture(scope="module")
def kafka_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[secure.SecureStackConfig]:
    """A secured stack of this module's own whose Kafka listener requires client certificates."""
    base = StackConfig.from_env()
    cfg = secure.SecureStackConfig(tmp_path_factory.mktemp("stack") / "secure", base.cache_dir,
                                   kafka_port=_free_port(), controller_port=_free_port(),
                                   redis_port=_free_port(), client_auth=True)
    try:
        try:
            secure.up(cfg, base)
        except Exception as exc:
            unavailable(f"secured stack with client certificates: {exc}")
        yield cfg
    finally:
        secure.down(cfg)


@pytest.mark.slow
def test_kafka_requiring_client_certificates_refuses_a_client_without_one_and_accepts_one_with(kafka_stack):
    config = kafka_stack.service_config()
    assert config.kafka.security.cert  # the stack's configuration file names the client certificate
    without = dataclasses.replace(config.kafka,
                                  security=dataclasses.replace(config.kafka.security, cert=None, key=None))
    with pytest.raises(ServiceError) as refused:
        without.check_access(timeout=30)
    message = str(refused.value)
    assert message.startswith(f"Kafka at {kafka_stack.kafka_bootstrap} refused the client")
    assert "give kafka.cert and kafka.key" in message and "\n" not in message
    config.kafka.check_access()
    topic = f"test-mtls-{time.monotonic_ns()}"
    ensure_topics(config.kafka, [topic], partitions=1)
    producer = Producer(config.kafka.producer())
    delivered: list[bool] = []
    producer.produce(topic, b"a message", on_delivery=lambda err, _msg: delivered.append(err is None))
    producer.flush(30)
    assert delivered == [True]
