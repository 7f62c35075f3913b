"""The local stack's own life: a broker SIGKILLed and restarted twice comes back each time, and ``ldpstream stack
down`` then leaves no process on any of the stack's ports (plain, secured and cluster) and no zombie of ours;
a process that is not the stack's but holds one of its ports is named, with a non-zero exit.

Each test runs a stack of its own (its own state folder and free ports), never the session's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from ldpstream.deploy import cluster, daemons, secure, stack
from ldpstream.testing import unavailable
from tests.integration.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free_block(size: int) -> int:
    """A first port whose next ``size - 1`` and their cluster-bus ports (+10000) are free."""
    while True:
        first = _free_port()
        ports = [first + i for i in range(size)] + [first + 10000 + i for i in range(size)]
        if all(p < 65536 for p in ports) and not daemons.holders(ports):
            return first


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a stack of this test's own (``LDPSTREAM_STACK_*``), stopped afterwards whatever
    happened."""
    base = stack.StackConfig.from_env()
    env = {"LDPSTREAM_STACK_DIR": str(tmp_path / "stack"), "LDPSTREAM_CACHE_DIR": str(base.cache_dir),
           "LDPSTREAM_STACK_KAFKA_PORT": str(_free_port()), "LDPSTREAM_STACK_CONTROLLER_PORT": str(_free_port()),
           "LDPSTREAM_STACK_REDIS_PORT": str(_free_port()),
           "LDPSTREAM_STACK_SECURE_KAFKA_PORT": str(_free_port()),
           "LDPSTREAM_STACK_SECURE_CONTROLLER_PORT": str(_free_port()),
           "LDPSTREAM_STACK_SECURE_REDIS_PORT": str(_free_port()),
           "LDPSTREAM_STACK_CLUSTER_PORT": str(_free_block(3))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        try:
            stack.down()
            secure.down()
            cluster.down()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _stack_ports(env: dict[str, str]) -> list[int]:
    ports = [int(v) for k, v in env.items() if k.endswith("_PORT") and k != "LDPSTREAM_STACK_CLUSTER_PORT"]
    first = int(env["LDPSTREAM_STACK_CLUSTER_PORT"])
    return ports + [first + i for i in range(3)] + [first + 10000 + i for i in range(3)]


def _ours(state_dir: Path) -> list[psutil.Process]:
    """Our processes (zombies included) whose working folder lies in ``state_dir``."""
    found = []
    for process in psutil.process_iter(["cwd", "status"]):
        cwd = process.info["cwd"]
        if cwd and Path(cwd).is_relative_to(state_dir):
            found.append(process)
    return found


def _zombie_children() -> list[psutil.Process]:
    return [child for child in psutil.Process().children(recursive=True)
            if child.status() == psutil.STATUS_ZOMBIE]


def _down(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ldpstream", "stack", "down"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=180, check=False)


def test_a_broker_killed_and_restarted_twice_comes_back_and_stack_down_leaves_nothing(own_stack):
    cfg = stack.StackConfig.from_env()
    try:
        stack.up(cfg)
        secure.up()
        cluster.up()
    except Exception as exc:
        unavailable(f"a local stack of the test's own: {exc}")
    for _ in range(2):
        pid = int((cfg.kafka_dir / "kafka.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not daemons.port_open(cfg.kafka_port), 60, "the killed broker's port to close")
        started = time.monotonic()
        stack.up(cfg)
        assert stack.kafka_answers(cfg), f"not up {time.monotonic() - started:.0f} s after the restart"
    assert not _zombie_children(), "a killed broker was left a zombie"
    done = _down(own_stack)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stack stopped" in done.stdout
    assert daemons.holders(_stack_ports(own_stack)) == []
    assert _ours(cfg.state_dir) == []
    daemons.reap()  # the services stopped by that other process were this one's children: collected here
    assert not _zombie_children()


def test_stack_down_names_a_process_it_may_not_stop_and_exits_non_zero(own_stack, tmp_path):
    cfg = stack.StackConfig.from_env()
    try:
        stack.start_redis(cfg)
    except Exception as exc:
        unavailable(f"a local Redis of the test's own: {exc}")
    squatter_port = int(own_stack["LDPSTREAM_STACK_KAFKA_PORT"])
    squatter = subprocess.Popen(  # not the stack's: it runs outside the stack's folder
        [sys.executable, "-c", "import socket, time\n"
         f"s = socket.socket(); s.bind(('127.0.0.1', {squatter_port})); s.listen(); time.sleep(120)"],
        cwd=tmp_path)
    try:
        wait_for(lambda: daemons.port_open(squatter_port), 30, "the other process to listen")
        done = _down(own_stack)
        assert done.returncode == 1
        assert f"port {squatter_port}: pid {squatter.pid}" in done.stderr
        assert squatter.poll() is None  # left alone
        assert not daemons.port_open(cfg.redis_port)  # the stack's own Redis was stopped all the same
    finally:
        squatter.kill()
        squatter.wait(10)


def test_a_start_that_fails_leaves_no_process_behind(own_stack, tmp_path):
    cfg = replace(stack.StackConfig.from_env(), state_dir=tmp_path / "broken")
    redis_dir = cfg.redis_dir / "data"
    redis_dir.mkdir(parents=True)
    pid_file = cfg.redis_dir / "redis.pid"
    never = [sys.executable, "-c", "import time; time.sleep(300)"]  # runs, never answers
    with pytest.raises(Exception, match="did not become ready"):
        daemons.launch(never, cwd=redis_dir, pid_file=pid_file, log=cfg.redis_log, ready=lambda: False,
                       timeout=2, what="a service that never answers")
    assert not pid_file.exists()
    assert _ours(cfg.state_dir) == []


BROKER = """process.roles=broker
node.id=1
controller.quorum.voters=2@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{broker}
advertised.listeners=PLAINTEXT://127.0.0.1:{broker}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""
CONTROLLER = """process.roles=controller
node.id=2
controller.quorum.voters=2@127.0.0.1:{controller}
listeners=CONTROLLER://127.0.0.1:{controller}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT
log.dirs={data}
"""


def test_stack_up_refuses_a_broker_that_answers_but_whose_controller_does_not_commit(tmp_path):
    """A broker and its controller as two processes; the controller frozen (SIGSTOP): the broker still answers
    metadata, and its heartbeats time out, as a broker whose combined controller spins. ``stack up`` must not
    call it up: it fails in one line naming the log."""
    base = stack.StackConfig.from_env()
    cfg = stack.StackConfig(tmp_path / "stack", base.cache_dir, kafka_port=_free_port(),
                            controller_port=_free_port(), redis_port=_free_port(), ready_timeout=15.0)
    try:
        libs = stack.ensure_kafka_jars(cfg)
    except Exception as exc:
        unavailable(f"the Kafka jars: {exc}")
    java, cluster_id = stack.java_binary(), "ldpstreamReadinessTst"
    processes = {}
    for role, template in (("controller", CONTROLLER), ("broker", BROKER)):
        folder = cfg.kafka_dir / role
        folder.mkdir(parents=True)
        properties = folder / "server.properties"
        properties.write_text(template.format(broker=cfg.kafka_port, controller=cfg.controller_port,
                                              data=folder / "data"))
        subprocess.run([java, "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                        str(properties)], check=True, capture_output=True, timeout=120)
        log = cfg.kafka_log if role == "broker" else folder / "kafka.log"
        processes[role] = daemons.spawn(
            [java, "-Xmx384m", f"-Dlog4j2.configurationFile={stack.KAFKA_FILES / 'log4j2.properties'}",
             f"-Dldpstream.kafka.log={log}", "-cp", f"{libs}/*", "kafka.Kafka", str(properties)],
            folder / "kafka.out", folder / "kafka.pid", folder)
    try:
        wait_for(lambda: stack.kafka_answers(cfg), 120, "the broker to answer")
        stack.check_kafka_serves_groups(cfg.kafka_bootstrap, "the broker of two processes", timeout=120)
        os.kill(processes["controller"].pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(Exception) as refused:
            stack.start_kafka(cfg)
        message = str(refused.value)
        assert "\n" not in message and str(cfg.kafka_log) in message and "cannot heartbeat" in message, message
        assert time.monotonic() - started < 60
        assert stack.kafka_answers(cfg)  # what the old readiness took for "up"
    finally:
        for process in processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


USER_TEST = """
def test_needs_kafka(kafka_bootstrap):
    pass
"""


def _user_session(tmp_path: Path, env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    """A user's own test session (outside the checkout, so only the installed plugin applies)."""
    (tmp_path / "user").mkdir(exist_ok=True)
    (tmp_path / "user" / "test_user.py").write_text(USER_TEST)
    environ = {k: v for k, v in os.environ.items()
               if k not in ("LDPSTREAM_SERVICES", "LDPSTREAM_KAFKA", "LDPSTREAM_REDIS", "LDPSTREAM_CONFIG", "CI")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "test_user.py"],
                          cwd=tmp_path / "user", env={**environ, **env, **extra}, capture_output=True, text=True,
                          timeout=600, check=False)


def test_the_plugin_starts_nothing_unless_asked_and_stops_what_it_started(own_stack, tmp_path):
    ports = _stack_ports(own_stack)
    quiet = _user_session(tmp_path, own_stack)
    assert quiet.returncode == 0 and "1 skipped" in quiet.stdout, quiet.stdout + quiet.stderr
    assert "LDPSTREAM_SERVICES=local" in quiet.stdout  # the skip says how to get services
    assert daemons.holders(ports) == []
    asked = _user_session(tmp_path, own_stack, LDPSTREAM_SERVICES="local")
    assert asked.returncode == 0 and "1 passed" in asked.stdout, asked.stdout + asked.stderr
    assert "ldpstream: stopped what this session started: Redis on" in asked.stdout
    daemons.reap()
    assert daemons.holders(ports) == []
    kept = _user_session(tmp_path, own_stack, LDPSTREAM_SERVICES="local", LDPSTREAM_KEEP_STACK="1")
    assert "left running (LDPSTREAM_KEEP_STACK=1)" in kept.stdout and "ldpstream stack down" in kept.stdout
    assert daemons.port_open(int(own_stack["LDPSTREAM_STACK_KAFKA_PORT"]))  # the fixture's teardown stops it
