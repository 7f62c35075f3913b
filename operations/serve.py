"""``ldpstream serve``: the live web view and its JSON API, on the standard library's threading HTTP server.

What it serves: ``GET /api/estimates`` (every metric's, association's and dictionary's published object, by
window, with the simulation's truth where one was drawn), ``GET /api/metrics/<name>`` (one of them),
``GET /api/status`` (``ldpstream status --json`` plus the ingest rate and lag), ``GET /healthz`` and
``GET /readyz`` (without the token), and the page (``/``, ``/app.js``, ``/style.css``, shipped in the package).
The API and its objects: ``docs/web-view.md#the-api`` and ``docs/schema/``.

Access: the server binds 127.0.0.1 unless told otherwise. With a bearer token (read from a file or from the
environment by the command, never from its command line) every ``/api/`` request must carry
``Authorization: Bearer <token>``; the page itself holds no data and is served to anyone, and it reads the token
from the address's fragment (``http://host:port/#token=...``, which browsers never send to the server).

Connections (``LiveViewServer``): one loop accepts them and watches them without a thread until a request
arrives; at most ``max_connections`` requests are served at once, each by a thread. A connection's first head
must be in within ``head_timeout`` seconds of its accept (a later one within as many of its first byte), an
answer be taken within as many, and an idle keep-alive connection is closed after ``idle_timeout`` seconds; a
request refused (no or a wrong token, an unknown Host) is answered at once and its connection closed.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import math
import selectors
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import numpy as np

from ldpstream.config import KafkaConfig
from ldpstream.errors import ParameterError
from ldpstream.registry import Registry
from ldpstream.store.contract import StatusStore
from ldpstream.store.truth import TruthStore

log = logging.getLogger(__name__)

#: librdkafka's own lines of the readiness probe, dropped (a Kafka that does not answer is logged once per probe).
_QUIET = logging.getLogger(__name__ + ".kafka")
_QUIET.propagate = False
_QUIET.addHandler(logging.NullHandler())

#: The page's files, served from the package (``ldpstream/operations/web``), by path.
STATIC_FILES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}

#: Addresses that only this machine reaches: a server bound there answers requests for its own names only.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

#: Seconds over which the ingest rate is measured (the status samples kept).
RATE_SECONDS = 10.0

#: Requests served at once, each by a thread; connections waiting for a request hold none.
MAX_CONNECTIONS = 64
#: Connections open at once (waiting or served); more wait in the kernel's listen queue.
MAX_OPEN = 512
#: Seconds a client has to send a request's head (from its connection, or from the first byte of a later
#: request on it), and to take the answer.
HEAD_TIMEOUT = 10.0
#: Seconds an idle keep-alive connection is kept open.
IDLE_TIMEOUT = 10.0
#: Connections the kernel queues before the server takes them (Linux caps it at ``net.core.somaxconn``).
LISTEN_QUEUE = 1024
#: The shortest bearer token taken, in bytes.
MIN_TOKEN_BYTES = 16
#: Seconds the readiness check waits for Kafka's metadata.
KAFKA_PROBE_SECONDS = 2.0
#: How many decode intervals the last decode may be old before the page calls the estimates stale.
STALE_INTERVALS = 3


class ViewedStore(StatusStore, TruthStore, Protocol):
    """What the view reads: the sketches' stats and the published estimates (:class:`StatusStore`), and the
    truth a simulation drew beside them (:class:`TruthStore`), as both stores keep them."""


class LiveView:
    """What the API returns, read from the store (and, for the status, Kafka) at each request.

    ``kafka``: where ``status`` reads the partitions' end offsets and ``readiness`` probes Kafka (None: the
    status has no partitions and no lag, and readiness asks Redis only). ``status_every``: a status or a
    readiness younger than this many seconds is served again (both probe Kafka). ``decode_interval``: the
    decoder's seconds between passes; the status calls the last decode stale when it is older than
    ``STALE_INTERVALS`` of them."""

    def __init__(self, registry: Registry, store: ViewedStore, kafka: KafkaConfig | str | None = None, *,
                 status_every: float = 1.0, decode_interval: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.store = store
        self.kafka = None if kafka is None else KafkaConfig.of(kafka)
        self.status_every = status_every
        self.decode_interval = decode_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._status: dict[str, Any] | None = None
        self._status_time = -math.inf
        self._ready_lock = threading.Lock()
        self._ready: tuple[bool, dict[str, Any]] | None = None
        self._ready_time = -math.inf
        self._admin: Any = None
        #: (time, reports per metric) of recent status samples, oldest first.
        self._samples: deque[tuple[float, dict[str, int]]] = deque()

    @property
    def names(self) -> list[str]:
        """Every metric, then every association, in the registry's order; not the n-gram slots of a discovery
        metric nor its slot-pair associations, which have no estimate of their own (they feed its dictionary)."""
        return [*(m.name for m in self.registry.metrics.values() if m.part_of is None),
                *(a.name for a in self.registry.associations.values() if a.part_of is None)]

    def knows(self, name: str) -> bool:
        """Whether ``name`` is a metric, an association or a published dictionary."""
        return name in self.names or name in self.store.dictionaries()

    def estimates(self, names: list[str] | None = None) -> dict[str, Any]:
        """``{"metrics": {name: {window: published}}, "truth": {name: truth}, "time": now}``; the published
        dictionaries come last, under their own names, window ``all``."""
        metrics: dict[str, dict[str, Any]] = {}
        truth: dict[str, Any] = {}
        for name in self.names if names is None else [n for n in names if n in self.names]:
            windows: dict[str, Any] = {}
            if name in self.registry.metrics:
                for window in self.registry.metrics[name].windows:
                    published = self.store.latest_estimate(name, window.name)
                    if published is not None:
                        windows[window.name] = published
            else:
                for window in self.registry.associations[name].windows:
                    joint = self.store.latest_joint(name, window.name)
                    if joint is not None:
                        windows[window.name] = joint
            metrics[name] = windows
            drawn = self.truth(name)
            if drawn is not None:
                truth[name] = drawn
        for name, dictionary in self.store.dictionaries().items():
            if (names is None or name in names) and name not in self.registry.metrics:
                metrics[name] = {"all": dictionary}  # a registry metric's own estimate is under its name

        return {"metrics": metrics, "truth": truth, "time": self._clock()}

    def truth(self, name: str) -> dict[str, Any] | None:
        """What simulations drew for ``name`` as frequencies over its values (a metric) or a table over its
        members' values (an association of two), marked ``"kind": "truth"``; None when there is none or its
        shape no longer matches the registry."""
        metric = self.registry.metrics.get(name)
        if metric is not None and metric.discovers:
            return self._string_truth(name)
        counts = self.store.truth(name)
        if counts is None or counts.sum() <= 0:
            return None
        total = int(counts.sum())
        shares = counts / total
        base = {"kind": "truth", "source": "simulation", "n": total}
        if name in self.registry.metrics:
            names = self.registry.metrics[name].value_names()
            if counts.shape != (len(names),):
                return None
            return {**base, "metric": name, "values": [
                {"value": value, "frequency": float(f), "count": int(c)}
                for value, f, c in zip(names, shares.tolist(), counts.tolist(), strict=True)]}
        association = self.registry.associations[name]
        if len(association.metrics) != 2:
            return None
        x, y = association.metrics
        if counts.shape != (len(x.value_names()), len(y.value_names())):
            return None
        return {**base, "association": name, "x": x.name, "y": y.name, "x_values": list(x.value_names()),
                "y_values": list(y.value_names()), "table": np.asarray(shares).tolist()}

    def _string_truth(self, name: str) -> dict[str, Any] | None:
        """What simulations drew for the discovery metric ``name``: each string's share, most drawn first."""
        counts = self.store.string_truth(name)
        total = sum(counts.values()) if counts else 0
        if not counts or total <= 0:
            return None
        drawn = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return {"kind": "truth", "source": "simulation", "n": total, "metric": name, "values": [
            {"value": text, "frequency": count / total, "count": count} for text, count in drawn]}

    def status(self) -> dict[str, Any]:
        """What ``ldpstream status`` shows, plus ``ingest`` (rates and lag); at most one probe a
        ``status_every`` seconds, whatever the number of pages polling."""
        with self._lock:
            now = self._clock()
            if self._status is not None and now - self._status_time < self.status_every:
                return self._status
            report = self._collect()
            counts = {name: int(entry["reports"]) for name, entry in report["metrics"].items()}
            self._samples.append((now, counts))
            while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_SECONDS:
                self._samples.popleft()
            report["ingest"] = _ingest(self._samples, report)
            report["time"] = now
            report["decode"] = self._freshness(report.get("last_decode"), now)
            self._status, self._status_time = report, now
            return report

    def _freshness(self, last: dict[str, Any] | None, now: float) -> dict[str, Any]:
        """The decoder's interval, the age past which its last decode is stale, and whether it is."""
        stale_after = STALE_INTERVALS * self.decode_interval
        age = None if last is None else max(now - float(last["time"]), 0.0)
        return {"interval": self.decode_interval, "stale_after": stale_after, "seconds_ago": age,
                "stale": age is None or age > stale_after}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether Redis (a read of the store) and Kafka (its metadata, within ``KAFKA_PROBE_SECONDS``) answer,
        and a body saying so: ``{"ready": bool, "redis": "ok" | what failed, "kafka": ...}`` (no ``kafka``
        without Kafka). One probe at a time, at most one a ``status_every`` seconds."""
        with self._ready_lock:
            now = self._clock()
            if self._ready is not None and now - self._ready_time < self.status_every:
                return self._ready
            body: dict[str, Any] = {"redis": self._probe(self.store.last_decode, "Redis")}
            if self.kafka is not None:
                body["kafka"] = self._probe(self._kafka_metadata, "Kafka")
            ready = all(value == "ok" for value in body.values())
            self._ready, self._ready_time = (ready, {"ready": ready, **body}), now
            return self._ready

    @staticmethod
    def _probe(check: Callable[[], Any], what: str) -> str:
        """``"ok"`` when ``check`` returns, else ``"unreachable (<error type>)"`` (the details go to the log,
        not to an answer anyone may read)."""
        try:
            check()
        except Exception as exc:  # whatever the client raises: the service does not answer
            log.warning("readiness: %s does not answer: %s: %s", what, type(exc).__name__, exc)
            return f"unreachable ({type(exc).__name__})"
        return "ok"

    def _kafka_metadata(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        assert self.kafka is not None
        if self._admin is None:
            settings: dict[str, Any] = {**self.kafka.admin(), "logger": _QUIET}
            self._admin = AdminClient(settings)
        try:
            self._admin.list_topics(timeout=KAFKA_PROBE_SECONDS)
        except KafkaException as exc:
            raise ConnectionError(f"no metadata within {KAFKA_PROBE_SECONDS:g} s: {exc}") from None

    def _collect(self) -> dict[str, Any]:
        if self.kafka is not None:
            from ldpstream.operations.status import collect_status

            return collect_status(self.registry, self.kafka, self.store)
        # Without Kafka: the counts and the last decode only.
        from ldpstream.operations.status import privacy_of

        out: dict[str, Any] = {"metrics": {}, "associations": {}, "partitions": [], "dead_letters": {},
                               "last_decode": None}
        for metric in self.registry.metrics.values():
            shape = (metric.mechanism.cohorts, metric.mechanism.sketch_width)
            snapshot = self.store.snapshot(metric.name, metric.fingerprint, shape)
            out["metrics"][metric.name] = {
                "reports": int(metric.mechanism.reports_per_cohort(snapshot.all_time(shape)).sum()),
                "bucket_seconds": metric.bucket_seconds, "fingerprint": f"{metric.fingerprint:08x}",
                "privacy": privacy_of(metric.mechanism)}
        last = self.store.last_decode()
        if last is not None:
            out["last_decode"] = {"time": last["time"], "seconds_ago": round(time.time() - last["time"], 1)}
        return out


def _ingest(samples: deque[tuple[float, dict[str, int]]], report: dict[str, Any]) -> dict[str, Any]:
    """Reports counted per second between the oldest and newest samples (None from a single sample), and the
    summed lag of every partition."""
    lag = sum(int(p["lag"]) for p in report.get("partitions", []))
    first_time, first = samples[0]
    last_time, last = samples[-1]
    span = last_time - first_time
    if span <= 0:
        return {"reports_per_second": None, "per_metric": {}, "seconds": 0.0, "lag": lag}
    per_metric = {name: max(count - first.get(name, 0), 0) / span for name, count in last.items()}
    return {"reports_per_second": sum(per_metric.values()), "per_metric": per_metric, "seconds": span, "lag": lag}


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None: JSON has no NaN or infinity, and browsers'
    ``JSON.parse`` refuses Python's ``NaN``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


class _Reader:
    """A connection's bytes for the request handler (``readline``, ``read``), each read refused with
    ``TimeoutError`` past ``deadline`` (``time.monotonic()``): a head that trickles in byte by byte is cut at the
    deadline all the same. ``pending``: bytes received and not read yet (a pipelined next request)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buffer = bytearray()
        self.closed = False

    @property
    def pending(self) -> int:
        return len(self.buffer)

    def _fill(self) -> bool:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the client took too long")
        self.sock.settimeout(remaining)
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def readline(self, limit: int = -1) -> bytes:
        while True:
            end = self.buffer.find(b"\n")
            size: int | None = end + 1 if end >= 0 else None
            if 0 <= limit <= len(self.buffer) and (size is None or size > limit):
                size = limit
            if size is not None or not self._fill():
                break
        return self._take(len(self.buffer) if size is None else size)

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self.buffer) < size) and self._fill():
            pass
        return self._take(len(self.buffer) if size < 0 else min(size, len(self.buffer)))

    def _take(self, size: int) -> bytes:
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out

    def close(self) -> None:
        self.closed = True


def make_handler(view: LiveView, token: str | None = None) -> type[BaseHTTPRequestHandler]:
    """The request handler class of a server over ``view``; ``token``: the bearer token every ``/api/``
    request must carry (None: none needed). Its limits (``head_timeout``, ``idle_timeout``) are the server's."""
    web = files("ldpstream.operations") / "web"

    class Handler(BaseHTTPRequestHandler):
        server_version = "ldpstream-serve"
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # reads go through the deadline instead
            deadline = getattr(self.server, "head_deadline", lambda _: math.inf)(self.request)
            self._reader = _Reader(self.connection, deadline)
            self.rfile = self._reader  # type: ignore[assignment]

        def handle(self) -> None:
            """One request, and those the client already sent behind it (each head within ``head_timeout``);
            the server waits for the next one without a thread (``close_connection`` says whether to)."""
            self.close_connection = True
            self.handle_one_request()
            while not self.close_connection and self._reader.pending:
                self._reader.deadline = time.monotonic() + getattr(self.server, "head_timeout", HEAD_TIMEOUT)
                self.handle_one_request()

        def do_HEAD(self) -> None:
            self._respond(head=True)

        def do_GET(self) -> None:
            self._respond(head=False)

        def _respond(self, head: bool) -> None:
            # The answer must be taken within head_timeout too (a client that never reads holds no thread).
            self.connection.settimeout(getattr(self.server, "head_timeout", HEAD_TIMEOUT))
            path = unquote(urlsplit(self.path).path)
            allowed: frozenset[str] | None = getattr(self.server, "allowed_hosts", None)
            if allowed is not None and self.headers.get("Host", "").lower() not in allowed:
                # A loopback server answers its own names only: a page elsewhere whose name was made to point
                # at 127.0.0.1 (DNS rebinding) would otherwise read the estimates from a local browser.
                self._refuse({"error": "unknown Host"}, HTTPStatus.MISDIRECTED_REQUEST, head)
                return
            try:
                if path == "/healthz":
                    self._send_json({"alive": True}, HTTPStatus.OK, head)
                elif path == "/readyz":
                    ready, body = view.readiness()
                    self._send_json(body, HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, head)
                elif path.startswith("/api/"):
                    if not self._authorized():
                        self._refuse({"error": "a bearer token is required (Authorization: Bearer ...)"},
                                     HTTPStatus.UNAUTHORIZED, head, {"WWW-Authenticate": "Bearer"})
                        return
                    self._api(path, head)
                elif path in STATIC_FILES:
                    name, kind = STATIC_FILES[path]
                    self._send(HTTPStatus.OK, (web / name).read_bytes(), kind, head,
                               {"Cache-Control": "no-cache"})
                else:
                    self._send_json({"error": f"no such page: {path}"}, HTTPStatus.NOT_FOUND, head)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                self.close_connection = True  # the client went away or does not read: nothing to answer
            except Exception as exc:  # a store or Kafka that does not answer: say so, keep serving
                log.exception("serving %s failed", path)
                self._send_json({"error": f"{type(exc).__name__}: {exc}"}, HTTPStatus.SERVICE_UNAVAILABLE, head)

        def _refuse(self, body: Any, status: HTTPStatus, head: bool, headers: dict[str, str] | None = None) -> None:
            """Answer ``status`` and close the connection: a refused client holds no thread."""
            with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
                self._send_json(body, status, head, {**(headers or {}), "Connection": "close"})
            self.close_connection = True

        def _api(self, path: str, head: bool) -> None:
            if path == "/api/estimates":
                self._send_json(view.estimates(), HTTPStatus.OK, head)
            elif path == "/api/status":
                self._send_json(view.status(), HTTPStatus.OK, head)
            elif path.startswith("/api/metrics/"):
                name = path.removeprefix("/api/metrics/")
                if not view.knows(name):
                    self._send_json({"error": f"no metric or association named {name!r}"},
                                    HTTPStatus.NOT_FOUND, head)
                else:
                    self._send_json(view.estimates([name]), HTTPStatus.OK, head)
            else:
                self._send_json({"error": f"no such endpoint: {path}"}, HTTPStatus.NOT_FOUND, head)

        def _authorized(self) -> bool:
            if token is None:
                return True
            given = self.headers.get("Authorization", "")
            return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

        def _send_json(self, body: Any, status: HTTPStatus, head: bool,
                       headers: dict[str, str] | None = None) -> None:
            data = json.dumps(finite(body), allow_nan=False).encode()
            self._send(status, data, "application/json", head, {"Cache-Control": "no-store", **(headers or {})})

        def _send(self, status: HTTPStatus, data: bytes, kind: str, head: bool, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if not head:
                self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


class LiveViewServer(ThreadingHTTPServer):
    """An HTTP server whose connections wait without a thread: one loop (``serve_forever``) accepts them and
    watches them with a selector until a request arrives, then a thread serves it, at most
    ``max_connections`` at once (ready requests beyond wait their turn); a connection kept alive goes back to
    the loop. A connection whose first request's head is not in ``head_timeout`` seconds after it was
    accepted, or idle ``idle_timeout`` seconds between requests, is closed; at most ``max_open`` are open
    (more wait in the kernel's listen queue, ``LISTEN_QUEUE``)."""

    daemon_threads = True
    request_queue_size = LISTEN_QUEUE

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 max_connections: int = MAX_CONNECTIONS, head_timeout: float = HEAD_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT, max_open: int = MAX_OPEN) -> None:
        if max_connections < 1 or max_open < max_connections or head_timeout <= 0 or idle_timeout <= 0:
            raise ParameterError("max_connections must be at least 1, max_open at least as many and the timeouts "
                                 f"positive, got {max_connections}, {max_open}, {head_timeout}, {idle_timeout}")
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.max_connections = max_connections
        self.max_open = max_open
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._busy = 0  # connections being served by a thread
        self._deadlines: dict[socket.socket, float] = {}  # the head deadline of each connection being served
        self._returned: deque[tuple[socket.socket, Any, bool]] = deque()  # (connection, address, keep it)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        super().__init__(address, handler)
        self.socket.setblocking(False)

    def head_deadline(self, request: socket.socket) -> float:
        """When the head of the request about to be read on ``request`` must be in (``time.monotonic()``)."""
        with self._lock:
            return self._deadlines.get(request, time.monotonic() + self.head_timeout)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept, watch and dispatch connections until :meth:`shutdown`."""
        self._stopping.clear()
        self._stopped.clear()
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        #: connections waiting for a request: (address, when they are closed, their head deadline or None)
        waiting: dict[socket.socket, tuple[Any, float, float | None]] = {}
        ready: deque[tuple[socket.socket, Any, float]] = deque()
        listening = False
        try:
            while not self._stopping.is_set():
                with self._lock:
                    busy = self._busy
                if (len(waiting) + len(ready) + busy < self.max_open) != listening:
                    listening = not listening
                    if listening:
                        selector.register(self.socket, selectors.EVENT_READ, "listen")
                    else:
                        selector.unregister(self.socket)
                now = time.monotonic()
                timeout = min([poll_interval, *(max(close_at - now, 0.0) for _, close_at, _ in waiting.values())])
                for key, _ in selector.select(timeout):
                    if key.data == "listen":
                        self._accept(selector, waiting, len(ready) + busy)
                    elif key.data == "wake":
                        with contextlib.suppress(BlockingIOError):
                            while self._wake_r.recv(4096):
                                pass
                    else:
                        connection = key.fileobj
                        assert isinstance(connection, socket.socket)
                        selector.unregister(connection)
                        address, _, head_by = waiting.pop(connection)
                        ready.append((connection, address, time.monotonic() + self.head_timeout
                                      if head_by is None else head_by))
                while True:
                    with self._lock:
                        if not self._returned:
                            break
                        connection, address, keep = self._returned.popleft()
                    if keep and not self._stopping.is_set():
                        waiting[connection] = (address, time.monotonic() + self.idle_timeout, None)
                        selector.register(connection, selectors.EVENT_READ, "connection")
                    else:
                        self.shutdown_request(connection)
                now = time.monotonic()
                for connection in [c for c, (_, close_at, _) in waiting.items() if close_at <= now]:
                    selector.unregister(connection)
                    del waiting[connection]
                    self.shutdown_request(connection)  # no request in time: closed, it cost no thread
                while ready:
                    with self._lock:
                        if self._busy >= self.max_connections:
                            break
                        self._busy += 1
                        connection, address, head_by = ready.popleft()
                        self._deadlines[connection] = head_by
                    threading.Thread(target=self._serve_connection, args=(connection, address), daemon=True,
                                     name="serve-request").start()
        finally:
            with self._lock:  # connections served from now on are closed by their threads
                self._stopped.set()
                returned = [c for c, _, _ in self._returned]
                self._returned.clear()
            for connection in [*waiting, *(c for c, _, _ in ready), *returned]:
                self.shutdown_request(connection)
            selector.close()

    def _accept(self, selector: selectors.BaseSelector,
                waiting: dict[socket.socket, tuple[Any, float, float | None]], others: int) -> None:
        while len(waiting) + others < self.max_open:
            try:
                connection, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: try again at the next turn
                log.warning("accepting a connection failed: %s", exc)
                return
            deadline = time.monotonic() + self.head_timeout
            waiting[connection] = (address, deadline, deadline)
            selector.register(connection, selectors.EVENT_READ, "connection")

    def _serve_connection(self, connection: socket.socket, address: Any) -> None:
        keep = False
        try:
            handler = self.RequestHandlerClass(connection, address, self)  # type: ignore[arg-type]
            keep = not getattr(handler, "close_connection", True)
        except Exception:
            self.handle_error(connection, address)
        finally:
            with self._lock:
                self._busy -= 1
                self._deadlines.pop(connection, None)
                stopped = self._stopped.is_set()
                if not stopped:
                    self._returned.append((connection, address, keep))
            if stopped:
                self.shutdown_request(connection)
            else:
                with contextlib.suppress(OSError):
                    self._wake_w.send(b"x")

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait until it has (the requests being served finish on their own)."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        self._wake_r.close()
        self._wake_w.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is no error of the server's: logged at debug level; anything else with its
        traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            log.debug("connection from %s: %s: %s", client_address, type(error).__name__, error)
        else:
            log.exception("serving %s failed", client_address)


def make_server(view: LiveView, addr: str = "127.0.0.1", port: int = 8765, token: str | None = None, *,
                max_connections: int = MAX_CONNECTIONS, head_timeout: float = HEAD_TIMEOUT,
                idle_timeout: float = IDLE_TIMEOUT, max_open: int = MAX_OPEN) -> LiveViewServer:
    """A bound server (port 0: any free port; ``server.server_address`` says which). A token shorter than
    ``MIN_TOKEN_BYTES`` is refused (``ParameterError``)."""
    if token is not None and len(token.encode()) < MIN_TOKEN_BYTES:
        raise ParameterError(f"the bearer token has {len(token.encode())} bytes; it needs at least "
                             f"{MIN_TOKEN_BYTES} (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    server = LiveViewServer((addr, port), make_handler(view, token), max_connections=max_connections,
                            head_timeout=head_timeout, idle_timeout=idle_timeout, max_open=max_open)
    if addr in LOOPBACK:
        bound = server.server_address[1]
        server.allowed_hosts = frozenset(  # type: ignore[attr-defined]
            f"{name}:{bound}" for name in ("127.0.0.1", "localhost", "[::1]"))
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    """The page's address (``[::1]`` style for IPv6)."""
    host, port = server.server_address[:2]
    host = str(host)
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    """Run ``server`` in a daemon thread (``server.shutdown()`` stops it)."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="serve",
                              daemon=True)
    thread.start()
    return thread
