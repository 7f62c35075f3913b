"""The metrics port of a long-running process: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process serves HTTP at all (liveness). ``/readyz`` runs the process's
readiness checks (:class:`Readiness`: Kafka and Redis reachable, the consumer joined to its group, the decoder's
first pass done) and answers 200 with a JSON body when every one is satisfied, else 503 with what is missing::

    {"ready": false, "checks": {"redis": "ok", "kafka": "ok", "group": "not yet joined ..."},
     "missing": ["group"]}

Every other path is the Prometheus exposition of the registry, which also holds ``ldpstream_build_info``
(:func:`declare_build_info`). docs/monitoring.md describes the endpoints.
"""

from __future__ import annotations

import json
import logging
import platform
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, Gauge, make_wsgi_app

from ldpstream import __version__
from ldpstream.config import ServiceConfig

#: A readiness check: None when satisfied, else a sentence saying what is missing. One that raises is not
#: satisfied (its exception is the reason); one that takes longer than the readiness timeout neither.
Check = Callable[[], str | None]

#: Seconds a check is given before it counts as unsatisfied (the probes' timeoutSeconds is longer).
CHECK_TIMEOUT_SECONDS = 2.0

_BUILD_INFO: weakref.WeakKeyDictionary[CollectorRegistry, Gauge] = weakref.WeakKeyDictionary()
_BUILD_INFO_LOCK = threading.Lock()


def declare_build_info(registry: CollectorRegistry = REGISTRY) -> Gauge:
    """``ldpstream_build_info{version, python} 1`` on ``registry`` (once per registry: later calls return it)."""
    with _BUILD_INFO_LOCK:
        gauge = _BUILD_INFO.get(registry)
        if gauge is None:
            gauge = Gauge("ldpstream_build_info", "Always 1; the labels say which ldpstream and Python run",
                          ["version", "python"], registry=registry)
            gauge.labels(__version__, platform.python_version()).set(1)
            _BUILD_INFO[registry] = gauge
        return gauge


class _Pingable(Protocol):
    def ping(self, **kwargs: Any) -> Any: ...


class _HasMetadata(Protocol):
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...


def redis_check(client: _Pingable) -> Check:
    """Redis answers a PING."""
    def check() -> str | None:
        client.ping()
        return None
    return check


def kafka_check(client: _HasMetadata, topic: str | None = None, timeout: float = CHECK_TIMEOUT_SECONDS) -> Check:
    """A broker answers a metadata request (of ``topic`` only, when given) through ``client``, a client of its
    own: a consumer's handle answers nothing while another thread is in its ``consume()``."""
    def check() -> str | None:
        client.list_topics(topic, timeout=timeout)
        return None
    return check


def service_checks(config: ServiceConfig, kafka: bool = True, topic: str | None = None,
                   timeout: float = CHECK_TIMEOUT_SECONDS) -> dict[str, Check]:
    """``redis`` and (when ``kafka``) ``kafka`` reachable, through clients of their own built from ``config``
    (the Kafka one a producer that sends nothing; its librdkafka log lines are dropped)."""
    checks = {"redis": redis_check(config.redis.client())}
    if kafka:
        from confluent_kafka import Producer

        quiet = logging.getLogger("ldpstream.health.kafka")
        quiet.propagate = False
        if not quiet.handlers:
            quiet.addHandler(logging.NullHandler())
        probe = Producer({**config.kafka.admin(), "logger": quiet})

        def reachable() -> str | None:
            probe.poll(0)  # serve its queued log lines and errors
            return kafka_check(probe, topic, timeout)()
        checks["kafka"] = reachable
    return checks


class Readiness:
    """Named checks run on every ``/readyz`` request, concurrently, each given ``timeout`` seconds."""

    #: Checks that may be waiting at once (a check stuck on a dead peer holds one until it returns; once all are
    #: held, further checks count as missing without running).
    MAX_WAITING = 8

    def __init__(self, checks: Mapping[str, Check] | None = None, timeout: float = CHECK_TIMEOUT_SECONDS) -> None:
        self._checks: dict[str, Check] = dict(checks or {})
        self.timeout = timeout
        self._slots = threading.BoundedSemaphore(self.MAX_WAITING)

    def add(self, name: str, check: Check) -> None:
        self._checks[name] = check

    def evaluate(self) -> dict[str, str | None]:
        """Each check's outcome by name: None when satisfied, else what is missing."""
        results: dict[str, str | None] = {}
        running: dict[str, threading.Thread] = {}
        for name, check in self._checks.items():
            if not self._slots.acquire(blocking=False):
                results[name] = "too many earlier checks still waiting for an answer"
                continue
            # a daemon thread: a check that never returns must not keep the process from exiting
            thread = threading.Thread(target=self._run, args=(name, check, results), name=f"readyz-{name}",
                                      daemon=True)
            thread.start()
            running[name] = thread
        deadline = time.monotonic() + self.timeout
        for thread in running.values():
            thread.join(max(deadline - time.monotonic(), 0.0))
        return {name: results.get(name, f"no answer within {self.timeout:g} s") for name in self._checks}

    def _run(self, name: str, check: Check, results: dict[str, str | None]) -> None:
        try:
            results[name] = check()
        except Exception as exc:
            results[name] = f"{type(exc).__name__}: {exc}"
        finally:
            self._slots.release()

    def report(self) -> tuple[bool, dict[str, Any]]:
        """Whether every check is satisfied, and the JSON body of ``/readyz``."""
        outcome = self.evaluate()
        missing = [name for name, reason in outcome.items() if reason is not None]
        body = {"ready": not missing, "checks": {n: "ok" if r is None else r for n, r in outcome.items()},
                "missing": missing}
        return not missing, body


def health_app(readiness: Readiness, registry: CollectorRegistry = REGISTRY) -> Callable[..., Iterable[bytes]]:
    """The WSGI application of the metrics port: ``/healthz``, ``/readyz``, else ``/metrics``."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _json(start_response, "200 OK", {"alive": True})
        if path == "/readyz":
            ready, body = readiness.report()
            return _json(start_response, "200 OK" if ready else "503 Service Unavailable", body)
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    return app


def _json(start_response: Callable[..., Any], status: str, body: Mapping[str, Any]) -> list[bytes]:
    data = (json.dumps(body) + "\n").encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                            ("Cache-Control", "no-store")])
    return [data]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: no access log
        pass


class HealthServer:
    """The metrics port served from a daemon thread; :attr:`port` is the bound one (useful with port 0)."""

    def __init__(self, port: int, addr: str, readiness: Readiness, registry: CollectorRegistry = REGISTRY) -> None:
        declare_build_info(registry)
        family, _, _, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM,
                                                       flags=socket.AI_PASSIVE)[0]

        class Server(_ThreadingServer):
            address_family = family

        self._server = make_server(str(sockaddr[0]), port, health_app(readiness, registry), Server,
                                   handler_class=_QuietHandler)
        self.addr = str(sockaddr[0])
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
