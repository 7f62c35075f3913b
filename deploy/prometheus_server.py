"""A Prometheus server as a local process (Debian's ``prometheus`` package), like the stack's services: a
generated configuration that scrapes given targets, a data folder of its own, a free port on 127.0.0.1, and
a small client of its HTTP API (``/api/v1/query``, ``/api/v1/label/__name__/values``, ``/api/v1/rules``).

The integration test of the monitoring path runs one against a live consumer and decoder
(``tests/integration/test_prometheus_in_the_loop.py``). From a shell, ``python -m
ldpstream.deploy.prometheus_server --target JOB=HOST:PORT ...`` runs one in the foreground until Ctrl-C
(:func:`main`); from Python::

    with PrometheusServer(workdir, {"ldpstream-consume": ["127.0.0.1:9464"],
                                    "ldpstream-decode": ["127.0.0.1:9465"]}) as prometheus:
        prometheus.query("sum(rate(ldpstream_reports_applied_total[1m]))")

PromQL metric names are read from an expression by :func:`promql_metric_names` (a tokenizer of the
expression language: the names of the series an expression selects, not its functions, keywords, labels,
strings or durations).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ldpstream.errors import ServiceError


def prometheus_binary() -> str:
    """The ``prometheus`` executable on PATH (Debian: ``apt-get install prometheus``)."""
    found = shutil.which("prometheus")
    if found is None:
        raise ServiceError("the prometheus server is not on PATH (Debian package `prometheus`)")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on ``host:port`` (a bind succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def scrape_config(jobs: Mapping[str, Sequence[str]], scrape_interval: float = 1.0,
                  rule_files: Sequence[Path] = ()) -> dict[str, Any]:
    """A Prometheus configuration (as a dict; JSON is valid YAML) with one static job per entry of ``jobs``
    (job name → ``host:port`` targets), scraped every ``scrape_interval`` seconds, and the given rule files."""
    interval = f"{round(scrape_interval * 1000)}ms"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}
                           for job, targets in jobs.items()],
    }


class PrometheusServer:
    """``prometheus`` running on a free port of 127.0.0.1 with its configuration and TSDB under ``workdir``;
    a context manager that stops it (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, workdir: Path, jobs: Mapping[str, Sequence[str]], *, scrape_interval: float = 1.0,
                 rule_files: Sequence[Path] = (), port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.jobs = dict(jobs)
        self.scrape_interval = scrape_interval
        self.rule_files = list(rule_files)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.workdir / "prometheus.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        if not port_free(self.port):  # another server there would answer our readiness probe
            raise ServiceError(f"port {self.port} of 127.0.0.1 is in use: choose another")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(json.dumps(scrape_config(self.jobs, self.scrape_interval, self.rule_files), indent=2))
        argv = [prometheus_binary(), f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                             start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ServiceError(f"prometheus exited with {self._process.returncode}: {self._tail()}")
            if self._ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise ServiceError(f"prometheus did not become ready in {timeout} s: {self._tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------- the API

    def api(self, path: str, **params: str | float) -> Any:
        """``GET /api/v1/<path>?params``: the response's ``data`` (a :class:`ServiceError` on an error status,
        with Prometheus's own message, e.g. a PromQL parse error)."""
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise ServiceError(f"prometheus {path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector: ``[{"metric": labels, "value": [time, "value"]}, ...]``."""
        params: dict[str, str | float] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self.api("query", **params)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The single value an instant query gives (None when its vector is empty)."""
        result = self.query(expr, at)
        if not result:
            return None
        if len(result) > 1:
            raise ServiceError(f"{expr!r} gives {len(result)} series, expected one")
        return float(result[0]["value"][1])

    def metric_names(self) -> set[str]:
        """Every metric name Prometheus holds samples of (from its scrapes, plus ``up`` and the like)."""
        return set(self.api("label/__name__/values"))

    def targets_up(self) -> dict[str, bool]:
        """``job → whether every target of the job answered its last scrape``."""
        active = self.api("targets")["activeTargets"]
        up: dict[str, bool] = {}
        for target in active:
            job = target["labels"]["job"]
            up[job] = up.get(job, True) and target["health"] == "up"
        return up

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


# ----------------------------------------------------------------------------------------- PromQL names

#: Words of PromQL that are not series names: operators, modifiers and grouping keywords.
PROMQL_KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "atan2", "start", "end", "inf", "nan",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_LABEL_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE)
_IDENTIFIER = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")
_NAME_MATCHER = re.compile(r"__name__\s*=\s*\"([^\"]+)\"")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: every identifier that is not a function call (followed by
    ``(``), a keyword, a label (inside ``{}`` or a grouping clause), a string, a number or a duration; plus
    names matched exactly by ``{__name__="..."}``.

    >>> sorted(promql_metric_names('sum by (le) (rate(x_bucket{job="a"}[5m])) / on(job) group_left y'))
    ['x_bucket', 'y']
    >>> sorted(promql_metric_names('time() - max(ldpstream_decoder_last_run_timestamp_seconds) > 300'))
    ['ldpstream_decoder_last_run_timestamp_seconds']
    """
    names = set(_NAME_MATCHER.findall(expr))
    text = _STRING.sub('""', expr)
    text = _LABEL_MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    for match in _IDENTIFIER.finditer(text):
        word, call = match.group(1), match.group(2)
        if call is None and word.lower() not in PROMQL_KEYWORDS:
            names.add(word)
    return names


def names_in(exprs: Iterable[str]) -> set[str]:
    """The metric names of several expressions."""
    return {name for expr in exprs for name in promql_metric_names(expr)}


# ------------------------------------------------------------------------------------------ from a shell


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ldpstream.deploy.prometheus_server``: a Prometheus scraping the given targets (default: a
    consumer on 9464 and a decoder on 9465 of this machine), in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m ldpstream.deploy.prometheus_server",
        description="Run Debian's prometheus as a local process scraping ldpstream services, until Ctrl-C.")
    parser.add_argument("--target", action="append", default=[], metavar="JOB=HOST:PORT",
                        help="a scrape target (repeatable; default: ldpstream-consume=127.0.0.1:9464 and "
                        "ldpstream-decode=127.0.0.1:9465)")
    parser.add_argument("--port", type=int, default=9090, help="the HTTP API's port on 127.0.0.1 (default 9090)")
    parser.add_argument("--dir", default=None, help="configuration and data folder (default: a new temporary one)")
    parser.add_argument("--rules", action="append", default=[], metavar="FILE",
                        help="alert rule file to load, e.g. deploy/prometheus/alerts.yml (repeatable)")
    parser.add_argument("--scrape-interval", type=float, default=5.0, help="seconds (default 5)")
    args = parser.parse_args(argv)
    jobs: dict[str, list[str]] = {}
    for target in args.target or ["ldpstream-consume=127.0.0.1:9464", "ldpstream-decode=127.0.0.1:9465"]:
        job, sep, address = target.partition("=")
        if not sep or not job or ":" not in address:
            parser.error(f"--target must be JOB=HOST:PORT, got {target!r}")
        jobs.setdefault(job, []).append(address)
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ldpstream-prometheus-"))
    # SIGTERM as Ctrl-C: the server (its own session, so a terminal's signals miss it) is stopped on the way out.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with PrometheusServer(workdir, jobs, scrape_interval=args.scrape_interval,
                              rule_files=[Path(r).resolve() for r in args.rules], port=args.port) as server:
            print(f"prometheus on {server.url} (data in {workdir}) scraping "
                  + ", ".join(f"{job}={','.join(targets)}" for job, targets in jobs.items()), flush=True)
            print(f"try: curl -s {server.url}/api/v1/query --data-urlencode "
                  "'query=sum(rate(ldpstream_reports_applied_total[1m]))'", flush=True)
            while server.running():
                time.sleep(1)
            print(f"prometheus exited: {server._tail()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
