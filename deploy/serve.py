"""``ldpstream serve``: the live web view and its JSON API, on the standard library's threading HTTP server.

What it serves (``docs/web-view.md`` says more; the estimate objects follow ``docs/schema/``):

``GET /api/estimates``
    ``{"metrics": {"<name>": {"<window>": <the object the decoder publishes>}}, "truth": {...}, "time": ...}``
    for every metric (the marginal estimate), every association (the joint estimate) and every window that has
    one now (a discovery metric's: its live dictionary, schema ``dictionary/2``), then every dictionary
    ``ldpstream discover --publish NAME`` stored (the same form, window ``all``). ``truth``, keyed by metric or
    association, holds what a simulation (``ldpstream produce``, ``ldpstream demo``) drew, marked
    ``"kind": "truth"``; it is absent for real clients, whose values nobody knows.
``GET /api/metrics/<name>``
    The same shape for one metric, association or dictionary (404 for any other name).
``GET /api/status``
    What ``ldpstream status --json`` prints, plus ``ingest``: the reports counted per second over the last
    seconds (per metric and in all) and the summed lag of the partitions.
``GET /`` (and ``/app.js``, ``/style.css``)
    The page: static files shipped in the package (``ldpstream/deploy/web``), no build step. It polls the API
    every second.

Access: the server binds 127.0.0.1 unless told otherwise. With a bearer token (read from a file or from the
environment by the command, never from its command line) every ``/api/`` request must carry
``Authorization: Bearer <token>``; the page itself holds no data and is served to anyone, and it reads the token
from the address's fragment (``http://host:port/#token=...``, which browsers never send to the server).
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np

from ldpstream.config import KafkaConfig
from ldpstream.registry import Registry
from ldpstream.store.contract import StatusStore

log = logging.getLogger(__name__)

#: The page's files, served from the package (``ldpstream/deploy/web``), by path.
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


class LiveView:
    """What the API returns, read from the store (and, for the status, Kafka) at each request.

    ``kafka``: where ``status`` reads the partitions' end offsets (None: the status has no partitions and no
    lag). ``status_every``: a status younger than this many seconds is served again (it probes Kafka)."""

    def __init__(self, registry: Registry, store: StatusStore, kafka: KafkaConfig | str | None = None, *,
                 status_every: float = 1.0, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.store = store
        self.kafka = None if kafka is None else KafkaConfig.of(kafka)
        self.status_every = status_every
        self._clock = clock
        self._lock = threading.Lock()
        self._status: dict[str, Any] | None = None
        self._status_time = -math.inf
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
            self._status, self._status_time = report, now
            return report

    def _collect(self) -> dict[str, Any]:
        if self.kafka is not None:
            from ldpstream.deploy.status import collect_status

            return collect_status(self.registry, self.kafka, self.store)
        # Without Kafka: the counts and the last decode only.
        from ldpstream.deploy.status import privacy_of

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


def make_handler(view: LiveView, token: str | None = None) -> type[BaseHTTPRequestHandler]:
    """The request handler class of a server over ``view``; ``token``: the bearer token every ``/api/``
    request must carry (None: none needed)."""
    web = files("ldpstream.deploy") / "web"

    class Handler(BaseHTTPRequestHandler):
        server_version = "ldpstream-serve"
        protocol_version = "HTTP/1.1"

        def do_HEAD(self) -> None:
            self._respond(head=True)

        def do_GET(self) -> None:
            self._respond(head=False)

        def _respond(self, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            allowed: frozenset[str] | None = getattr(self.server, "allowed_hosts", None)
            if allowed is not None and self.headers.get("Host", "").lower() not in allowed:
                # A loopback server answers its own names only: a page elsewhere whose name was made to point
                # at 127.0.0.1 (DNS rebinding) would otherwise read the estimates from a local browser.
                self._send_json({"error": "unknown Host"}, HTTPStatus.MISDIRECTED_REQUEST, head)
                return
            try:
                if path.startswith("/api/"):
                    if not self._authorized():
                        self._send_json({"error": "a bearer token is required (Authorization: Bearer ...)"},
                                        HTTPStatus.UNAUTHORIZED, head, {"WWW-Authenticate": "Bearer"})
                        return
                    self._api(path, head)
                elif path in STATIC_FILES:
                    name, kind = STATIC_FILES[path]
                    self._send(HTTPStatus.OK, (web / name).read_bytes(), kind, head,
                               {"Cache-Control": "no-cache"})
                else:
                    self._send_json({"error": f"no such page: {path}"}, HTTPStatus.NOT_FOUND, head)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (a page closed mid-request): nothing to answer
            except Exception as exc:  # a store or Kafka that does not answer: say so, keep serving
                log.exception("serving %s failed", path)
                self._send_json({"error": f"{type(exc).__name__}: {exc}"}, HTTPStatus.SERVICE_UNAVAILABLE, head)

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


def make_server(view: LiveView, addr: str = "127.0.0.1", port: int = 8765,
                token: str | None = None) -> ThreadingHTTPServer:
    """A bound server (port 0: any free port; ``server.server_address`` says which)."""
    server_class = _IPv6Server if ":" in addr else ThreadingHTTPServer
    server = server_class((addr, port), make_handler(view, token))
    server.daemon_threads = True
    if addr in LOOPBACK:
        bound = server.server_address[1]
        server.allowed_hosts = frozenset(  # type: ignore[attr-defined]
            f"{name}:{bound}" for name in ("127.0.0.1", "localhost", "[::1]"))
    return server


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


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
