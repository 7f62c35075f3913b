"""The local stack: a single-node Apache Kafka broker (KRaft) and a Redis server on 127.0.0.1, no Docker.

- Kafka's broker jars come from Maven Central through Maven (``deploy/kafka/pom.xml``, versions pinned
  there) into a cache folder, the storage is formatted with ``kafka.tools.StorageTool`` and the broker
  runs as ``java -cp 'libs/*' kafka.Kafka server.properties``.
- Redis is Debian's ``redis-server`` (installed with apt-get when missing and we are root), with its own
  port, data folder and append-only file.

Everything the stack writes lives under one folder (``LDPSTREAM_STACK_DIR``, default
``~/.local/state/ldpstream/stack``): ``kafka/`` (data, ``server.properties``, ``kafka.log``, pid) and
``redis/`` (data, ``redis.log``, pid). ``up`` is idempotent: a service that already answers is left alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldpstream.config import LOCAL_CONTROLLER_PORT, LOCAL_KAFKA_PORT, LOCAL_REDIS_PORT, local_stack_ports
from ldpstream.deploy import daemons
from ldpstream.errors import ServiceError

KAFKA_VERSION = "4.1.1"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
#: The broker's files shipped with the package: its pom.xml, server.properties template and log4j2 settings.
KAFKA_FILES = Path(__file__).resolve().parent / "kafka"
#: Seconds a broker may take from its start to answering metadata.
START_TIMEOUT = 120.0


@dataclass(frozen=True)
class StackConfig:
    """Where the local stack lives and listens."""

    state_dir: Path
    cache_dir: Path
    kafka_port: int = LOCAL_KAFKA_PORT
    controller_port: int = LOCAL_CONTROLLER_PORT
    redis_port: int = LOCAL_REDIS_PORT
    kafka_heap: str = "768m"
    #: Seconds a broker that answers may take to commit, acknowledge a write and let a group join
    #: (:func:`check_kafka_serves_groups`).
    ready_timeout: float = 60.0

    @classmethod
    def from_env(cls) -> StackConfig:
        env = os.environ
        kafka_port, controller_port, redis_port = local_stack_ports(env)
        return cls(
            state_dir=Path(env.get("LDPSTREAM_STACK_DIR", Path.home() / ".local/state/ldpstream/stack")),
            cache_dir=Path(env.get("LDPSTREAM_CACHE_DIR", Path.home() / ".cache/ldpstream")),
            kafka_port=kafka_port,
            controller_port=controller_port,
            redis_port=redis_port,
        )

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def redis_dir(self) -> Path:
        return self.state_dir / "redis"

    @property
    def kafka_log(self) -> Path:
        return self.kafka_dir / "kafka.log"

    @property
    def redis_log(self) -> Path:
        return self.redis_dir / "redis.log"

    @property
    def kafka_libs(self) -> Path:
        return self.cache_dir / f"kafka-{KAFKA_VERSION}" / "libs"


# ----------------------------------------------------------------------------------------------- Redis


def redis_server_binary() -> str:
    """Path of ``redis-server``; installs Debian's package when missing and we may."""
    return daemons.installed_binary(
        "redis-server", "redis-server",
        "redis-server is not installed; install Debian's package: apt-get install redis-server", recommends=True)


def redis_answers(cfg: StackConfig) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(cfg.redis_url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def redis_server_argv(port: int, data: Path, *more: tuple[str, str], config_file: Path | None = None) -> list[str]:
    """The command line of every Redis the stack runs (plain, secured, a cluster's node): ``redis-server``, then
    ``config_file`` when given (settings that must not show on a command line, such as ACL users' passwords),
    then: ``port`` on 127.0.0.1 in protected mode (0: no plaintext port), the append-only file in ``data``
    (fsync every second, no RDB snapshots), in the foreground, logging to its output; then the ``more``
    settings, as (name, value)."""
    settings = [("port", str(port)), ("bind", "127.0.0.1"), ("protected-mode", "yes"), ("dir", str(data)),
                ("appendonly", "yes"), ("appendfsync", "everysec"), ("save", ""), ("daemonize", "no"),
                ("logfile", ""), *more]
    return [redis_server_binary(), *([] if config_file is None else [str(config_file)]),
            *(word for name, value in settings for word in (f"--{name}", value))]


def start_redis(cfg: StackConfig) -> None:
    if redis_answers(cfg):
        return
    data = cfg.redis_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    argv = redis_server_argv(cfg.redis_port, data)
    pid_file = cfg.redis_dir / "redis.pid"
    daemons.clear(pid_file, [cfg.redis_port], cfg.redis_dir, f"Redis on port {cfg.redis_port}")
    daemons.launch(argv, cwd=data, pid_file=pid_file, log=cfg.redis_log, ready=lambda: redis_answers(cfg),
                   timeout=30, what=f"Redis on port {cfg.redis_port}")


# ----------------------------------------------------------------------------------------------- Kafka


def ensure_kafka_jars(cfg: StackConfig) -> Path:
    """Copy the pinned broker jars and a log4j2 backend from Maven Central into the cache (once)."""
    libs = cfg.kafka_libs
    if libs.is_dir() and any(libs.glob(f"kafka_2.13-{KAFKA_VERSION}.jar")):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError("Maven (mvn) is needed to fetch Kafka's broker jars from Maven Central; "
                           "install Debian's maven package")
    tmp = libs.with_name("libs.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"fetching Apache Kafka {KAFKA_VERSION} broker jars from Maven Central into {libs}", file=sys.stderr)
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(KAFKA_FILES / "pom.xml"), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={tmp}", f"-Dkafka.version={KAFKA_VERSION}"],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise ServiceError(f"Maven could not fetch the Kafka jars:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    return libs


def kafka_answers(cfg: StackConfig, timeout: float = 2.0) -> bool:
    from confluent_kafka.admin import AdminClient

    if not daemons.port_open(cfg.kafka_port):
        return False
    try:
        AdminClient({"bootstrap.servers": cfg.kafka_bootstrap}).list_topics(timeout=timeout)
        return True
    except Exception:  # KafkaException: not ready yet
        return False


def java_binary() -> str:
    """Path of ``java`` (an error naming Debian's OpenJDK 17 package when missing)."""
    java = shutil.which("java")
    if java is None:
        raise ServiceError("java is needed to run the Kafka broker; install OpenJDK 17 (openjdk-17-jre-headless)")
    return java


def start_kafka(cfg: StackConfig) -> None:
    """Start the broker unless it answers, and return once it is ready (:func:`check_kafka_serves_groups`); a broker
    that answers metadata but does not get ready is stopped and started once more before the error."""
    if kafka_answers(cfg):
        check_kafka_serves_groups(cfg.kafka_bootstrap, f"see its log: {cfg.kafka_log}", cfg.ready_timeout)
        return
    libs = ensure_kafka_jars(cfg)
    cfg.kafka_dir.mkdir(parents=True, exist_ok=True)
    data = cfg.kafka_dir / "data"
    properties = cfg.kafka_dir / "server.properties"
    template = (KAFKA_FILES / "server.properties.template").read_text()
    properties.write_text(template.format(broker_port=cfg.kafka_port, controller_port=cfg.controller_port,
                                          data_dir=data))
    run_kafka_broker(libs, cfg.kafka_dir, heap=cfg.kafka_heap, min_heap="256m", ready=lambda: kafka_answers(cfg),
                      check=lambda hint: check_kafka_serves_groups(cfg.kafka_bootstrap, hint, cfg.ready_timeout),
                      what=f"Kafka broker on port {cfg.kafka_port}", ports=(cfg.kafka_port, cfg.controller_port))


def run_kafka_broker(libs: Path, kafka_dir: Path, *, heap: str, min_heap: str, ready: Callable[[], bool],
                      check: Callable[[str], None], what: str, ports: tuple[int, ...],
                      format_args: tuple[str, ...] = ()) -> None:
    """Run the KRaft broker of ``kafka_dir/server.properties`` (already written) from the jars in ``libs``: stop a
    broker of ours that still holds ``ports`` without answering (:func:`daemons.clear`), format its storage
    ``kafka_dir/data`` once (``kafka.tools.StorageTool``; ``format_args``: more of its arguments, such as SCRAM
    users), start ``kafka.Kafka`` (``-Xmx{heap} -Xms{min_heap}``; output ``kafka.out``, log ``kafka.log``, pid
    ``kafka.pid`` in ``kafka_dir``), wait up to :data:`START_TIMEOUT` s until ``ready()``, then ``check(log_hint)``
    (:func:`check_kafka_serves_groups`). A broker that another call is starting is waited for, not started twice.
    A broker that does not answer in time or fails the check is stopped and started once more, from logs its
    clean stop closed; failing again, it is stopped and the error raised."""
    properties, log, pid_file = kafka_dir / "server.properties", kafka_dir / "kafka.log", kafka_dir / "kafka.pid"
    classpath = f"{libs}/*"
    java = java_binary()
    argv = [
        java, f"-Xmx{heap}", f"-Xms{min_heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={KAFKA_FILES / 'log4j2.properties'}", f"-Dldpstream.kafka.log={log}",
        "-cp", classpath, "kafka.Kafka", str(properties),
    ]
    started = daemons.age(pid_file)
    if started is not None and started < START_TIMEOUT:  # another `up` is starting it: wait for that one
        with contextlib.suppress(ServiceError):
            daemons.wait_until(ready, START_TIMEOUT - started, what, log,
                               running=lambda: daemons.read_pid(pid_file) is not None)
    for attempt in (1, 2):
        if ready():
            check(f"see its log: {log}")
            return
        daemons.clear(pid_file, ports, kafka_dir, what)
        if not (kafka_dir / "data" / "meta.properties").exists():
            fmt = subprocess.run(
                [java, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", uuid.uuid4().hex[:22],
                 "-c", str(properties), "--ignore-formatted", *format_args],
                capture_output=True, text=True, check=False,
            )
            if fmt.returncode != 0:
                raise ServiceError(f"kafka.tools.StorageTool format failed:\n{fmt.stdout}{fmt.stderr}")
        try:
            daemons.launch(argv, cwd=kafka_dir, pid_file=pid_file, log=log, ready=ready, timeout=START_TIMEOUT,
                           what=what, output=kafka_dir / "kafka.out")
            check(f"see its log: {log}")
            return
        except ServiceError:
            daemons.stop(pid_file, ports, kafka_dir)
            if attempt == 2:
                raise


def check_kafka_serves_groups(client: str | Mapping[str, Any], log_hint: str, timeout: float = 60.0) -> None:
    """Readiness beyond metadata, in ``timeout`` s: the controller commits a new topic, an idempotent ``acks=all``
    write to it is acknowledged, and a consumer group joins it; the topic is deleted again.

    A broker answers ``list_topics`` (and ``describe_cluster``) from its metadata cache, so one whose KRaft
    controller cannot commit, its heartbeats timing out, passes both; creating a topic of our own needs that
    commit. ``client``: the bootstrap servers, or librdkafka settings with them (security included). A
    :class:`ServiceError` in one line, naming the step and ``log_hint``, when a step does not complete."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    settings: dict[str, Any] = {"bootstrap.servers": client} if isinstance(client, str) else dict(client)
    bootstrap = settings["bootstrap.servers"]
    topic = f"_ldpstream_ready_{uuid.uuid4().hex[:12]}"
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    def fail(step: str, detail: object) -> ServiceError:
        return ServiceError(f"Kafka at {bootstrap} answers, but {step} within {timeout:.0f} s ({detail}): a broker "
                            f"whose controller does not commit (it cannot heartbeat); {log_hint}")

    admin = AdminClient(settings)
    try:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=left(),
                                request_timeout=left())[topic].result(left() + 5)
        except Exception as exc:
            raise fail("its controller did not commit a new topic", exc) from exc
        delivered: list[object] = []
        producer = Producer({**settings, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": int(left() * 1000)})
        producer.produce(topic, b"ready", on_delivery=lambda err, _msg: delivered.append(err))
        if producer.flush(left() + 5) or not delivered or delivered[0] is not None:
            raise fail("a write was not acknowledged", delivered[0] if delivered else "no delivery report")
        consumer = Consumer({**settings, "group.id": topic, "session.timeout.ms": 6000,
                             "enable.auto.commit": False})
        try:
            consumer.subscribe([topic])
            while not consumer.assignment():
                if time.monotonic() > deadline:
                    raise fail("a consumer group could not join", "no assignment")
                consumer.poll(0.2)
        finally:
            consumer.close()
    finally:
        with contextlib.suppress(Exception):
            admin.delete_topics([topic], operation_timeout=10)[topic].result(15)


# ------------------------------------------------------------------------------------------ the stack


@dataclass(frozen=True)
class StackStatus:
    kafka: bool
    redis: bool
    kafka_bootstrap: str
    redis_url: str
    log_dir: Path

    def describe(self) -> str:
        def word(up: bool) -> str:
            return "up" if up else "down"

        return (f"kafka  {word(self.kafka):4}  {self.kafka_bootstrap}\n"
                f"redis  {word(self.redis):4}  {self.redis_url}\n"
                f"logs   {self.log_dir}")


def up(cfg: StackConfig | None = None) -> StackStatus:
    """Start Redis and Kafka unless they already answer; returns once both serve requests."""
    cfg = cfg or StackConfig.from_env()
    start_redis(cfg)
    start_kafka(cfg)
    return status(cfg)


def down(cfg: StackConfig | None = None) -> daemons.Stopped:
    """Stop both services and any process of ours on their ports (:func:`daemons.stop`); data stays for the next
    ``up``. Returns what was stopped and what still listens on the stack's ports."""
    cfg = cfg or StackConfig.from_env()
    done = stop_kafka(cfg)
    done += stop_redis(cfg)
    return done


def stop_kafka(cfg: StackConfig) -> daemons.Stopped:
    return daemons.stop(cfg.kafka_dir / "kafka.pid", (cfg.kafka_port, cfg.controller_port), cfg.kafka_dir)


def stop_redis(cfg: StackConfig) -> daemons.Stopped:
    return daemons.stop(cfg.redis_dir / "redis.pid", (cfg.redis_port,), cfg.redis_dir)


def status(cfg: StackConfig | None = None) -> StackStatus:
    cfg = cfg or StackConfig.from_env()
    return StackStatus(kafka=kafka_answers(cfg), redis=redis_answers(cfg), kafka_bootstrap=cfg.kafka_bootstrap,
                       redis_url=cfg.redis_url, log_dir=cfg.state_dir)
