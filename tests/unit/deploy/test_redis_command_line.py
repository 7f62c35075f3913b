"""Every Redis the local stack runs (plain, secured, a cluster's node) gets its command line from one builder,
:func:`ldpstream.deploy.stack.redis_server_argv`, and is started by :func:`ldpstream.deploy.daemons.launch`.

The starts are run up to the launch, which is recorded instead of run; the real processes are started by the
integration, secure and cluster tiers."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from ldpstream.deploy import cluster, daemons, secure, stack


def settings(argv: list[str]) -> dict[str, str]:
    """The ``--name value`` pairs of a command line."""
    return {name[2:]: value for name, value in itertools.pairwise(argv) if name.startswith("--")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


COMMON = {"bind": "127.0.0.1", "protected-mode": "yes", "appendonly": "yes", "appendfsync": "everysec",
          "save": "", "daemonize": "no", "logfile": ""}


def test_the_builder_writes_the_common_settings_then_the_more_ones(tmp_path):
    argv = stack.redis_server_argv(6390, tmp_path, ("maxmemory-policy", "noeviction"))
    assert argv[0].endswith("redis-server")
    assert settings(argv) == {"port": "6390", "dir": str(tmp_path), **COMMON, "maxmemory-policy": "noeviction"}
    assert argv[-2:] == ["--maxmemory-policy", "noeviction"]
    with_file = stack.redis_server_argv(0, tmp_path, config_file=tmp_path / "redis.conf")
    assert with_file[1] == str(tmp_path / "redis.conf")  # a configuration file comes first, before any option
    assert settings(with_file)["port"] == "0"


@pytest.fixture
def launched(monkeypatch) -> list[list[str]]:
    """The command lines given to :func:`daemons.launch` (nothing is started)."""
    argvs: list[list[str]] = []
    monkeypatch.setattr(daemons, "clear", lambda *args, **kwargs: None)
    monkeypatch.setattr(daemons, "launch", lambda argv, **kwargs: argvs.append(argv))
    return argvs


def test_the_plain_stack_starts_redis_from_the_builder(launched, monkeypatch, tmp_path):
    monkeypatch.setattr(stack, "redis_answers", lambda cfg: False)
    cfg = stack.StackConfig(state_dir=tmp_path, cache_dir=tmp_path / "cache", redis_port=free_port())
    stack.start_redis(cfg)
    assert launched == [stack.redis_server_argv(cfg.redis_port, cfg.redis_dir / "data")]


def test_a_cluster_node_starts_from_the_builder(launched, tmp_path):
    port = free_port()
    cfg = cluster.ClusterStackConfig(state_dir=tmp_path, first_port=port)
    cluster._start_node(cfg, port)
    folder = cfg.node_dir(port)
    assert launched == [stack.redis_server_argv(port, folder, ("cluster-enabled", "yes"),
                                                ("cluster-config-file", str(folder / "nodes.conf")),
                                                ("cluster-node-timeout", "5000"))]


def test_the_secured_redis_starts_from_the_builder_with_its_passwords_in_a_file_only(launched, monkeypatch,
                                                                                     tmp_path):
    monkeypatch.setattr(secure, "redis_answers", lambda cfg: False)
    cfg = secure.SecureStackConfig(state_dir=tmp_path, cache_dir=tmp_path / "cache", redis_port=free_port())
    secure.start_redis(cfg)
    [argv] = launched
    conf = cfg.redis_dir / "redis.conf"
    assert argv[:2] == [stack.redis_server_binary(), str(conf)]
    assert settings(argv) == {"port": "0", "dir": str(cfg.redis_dir / "data"), **COMMON,
                              "tls-port": str(cfg.redis_port), "tls-cert-file": str(cfg.tls_dir / "server.pem"),
                              "tls-key-file": str(cfg.tls_dir / "server.key"),
                              "tls-ca-cert-file": str(cfg.tls_dir / "ca.pem"), "tls-auth-clients": "no",
                              "maxmemory-policy": "noeviction"}
    passwords = [Path(cfg.password_file("redis", user)).read_text().strip() for user in secure.REDIS_USERS]
    assert all(password in conf.read_text() for password in passwords)
    assert not any(password in word for password in passwords for word in argv)
    assert conf.stat().st_mode & 0o077 == 0
