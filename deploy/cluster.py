"""A small Redis Cluster for the local stack (``ldpstream stack up --redis-cluster``): three ``redis-server``
processes in cluster mode, each a master of a third of the 16384 slots, no replicas, beside the standalone
Redis.

Each node lives under ``<stack dir>/redis-cluster/node-<port>`` (data with its append-only file,
``nodes.conf``, log, pid) and listens on 127.0.0.1 on ``LDPSTREAM_STACK_CLUSTER_PORT`` (default 36501) and the
next two ports (cluster bus: each port + 10000). Its URL is ``redis+cluster://127.0.0.1:36501,...``, the
project's convention (:mod:`ldpstream.config`), accepted by every command as ``--redis`` or ``LDPSTREAM_REDIS``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ldpstream.deploy import daemons
from ldpstream.deploy.stack import StackConfig, redis_server_argv
from ldpstream.errors import ConfigError, ServiceError

CLUSTER_FIRST_PORT = 36501
SLOTS = 16384


@dataclass(frozen=True)
class ClusterStackConfig:
    state_dir: Path
    first_port: int = CLUSTER_FIRST_PORT
    nodes: int = 3

    @classmethod
    def from_env(cls, base: StackConfig | None = None) -> ClusterStackConfig:
        base = base or StackConfig.from_env()
        try:
            port = int(os.environ.get("LDPSTREAM_STACK_CLUSTER_PORT", CLUSTER_FIRST_PORT))
        except ValueError as exc:
            raise ConfigError(f"LDPSTREAM_STACK_CLUSTER_PORT must be a port number: {exc}") from exc
        return cls(base.state_dir / "redis-cluster", port)

    @property
    def ports(self) -> list[int]:
        return [self.first_port + i for i in range(self.nodes)]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def node_dir(self, port: int) -> Path:
        return self.state_dir / f"node-{port}"


def _info(port: int) -> dict[str, str]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, decode_responses=True)
    try:
        text = str(client.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
    finally:
        client.close()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def cluster_answers(cfg: ClusterStackConfig) -> bool:
    """Every node up, all slots assigned, every node knows the others, and the cluster says ``ok``."""
    import redis

    try:
        infos = [_info(port) for port in cfg.ports]
    except (redis.RedisError, OSError):
        return False
    return all(i.get("cluster_state") == "ok" and i.get("cluster_slots_assigned") == str(SLOTS)
               and i.get("cluster_known_nodes") == str(cfg.nodes) for i in infos)


def _start_node(cfg: ClusterStackConfig, port: int) -> None:
    import redis

    folder = cfg.node_dir(port)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "redis.log"

    def pings() -> bool:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    if daemons.port_open(port) and pings():
        return
    argv = redis_server_argv(port, folder, ("cluster-enabled", "yes"),
                             ("cluster-config-file", str(folder / "nodes.conf")), ("cluster-node-timeout", "5000"))
    pid_file, what = folder / "redis.pid", f"Redis Cluster node on port {port}"
    daemons.clear(pid_file, [port], folder, what)
    daemons.launch(argv, cwd=folder, pid_file=pid_file, log=log, ready=pings, timeout=30, what=what)


def _form(cfg: ClusterStackConfig) -> None:
    """Assign each node a third of the slots (those that have none) and introduce them to each other."""
    import redis

    clients = [redis.Redis(host="127.0.0.1", port=p, socket_timeout=5, decode_responses=True) for p in cfg.ports]
    try:
        bounds = [round(i * SLOTS / cfg.nodes) for i in range(cfg.nodes + 1)]
        for i, client in enumerate(clients):
            info = _info(cfg.ports[i])
            if info.get("cluster_slots_assigned") == "0" and info.get("cluster_known_nodes") == "1":
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)  # type: ignore[no-untyped-call]
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)  # type: ignore[no-untyped-call]
        for port in cfg.ports[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)  # type: ignore[no-untyped-call]
    finally:
        for client in clients:
            client.close()


def up(cfg: ClusterStackConfig | None = None) -> ClusterStackConfig:
    cfg = cfg or ClusterStackConfig.from_env()
    for port in cfg.ports:
        _start_node(cfg, port)
    if not cluster_answers(cfg):
        _form(cfg)
        deadline = time.monotonic() + 60
        while not cluster_answers(cfg):
            if time.monotonic() > deadline:
                raise ServiceError(f"the Redis Cluster on ports {cfg.ports} did not reach state ok within 60 s; "
                                   f"see the logs under {cfg.state_dir}")
            time.sleep(0.25)
    return cfg


def down(cfg: ClusterStackConfig | None = None) -> daemons.Stopped:
    """Stop every node and any process of ours on their ports (:func:`daemons.stop`)."""
    cfg = cfg or ClusterStackConfig.from_env()
    done = daemons.Stopped()
    for port in cfg.ports:
        done += daemons.stop(cfg.node_dir(port) / "redis.pid", (port,), cfg.node_dir(port))
    return done


def started(cfg: ClusterStackConfig | None = None) -> bool:
    cfg = cfg or ClusterStackConfig.from_env()
    return any((cfg.node_dir(port) / "redis.pid").exists() for port in cfg.ports)


def describe(cfg: ClusterStackConfig) -> str:
    return f"redis-cluster  {'up' if cluster_answers(cfg) else 'down':4}  {cfg.url}"
