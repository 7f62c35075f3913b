"""What connections cost `ldpstream serve`: the working tree's operations/serve.py beside another commit's.

Each version runs in its own process (an in-memory store, one k-RR metric, a bearer token); this process
plays the clients, on real sockets:

- stalls: 200 GET /api/estimates, 20 at a time, each on a new connection; how many took 1 s or more;
- holds: how long the server keeps a connection after a 401 (a wrong token, keep-alive client), after a good
  answer on an idle keep-alive connection, and while a request head trickles in one byte a second;
- idle sockets: 300 connections that send nothing, then 300 that send a request line and nothing more; the
  server process's threads 1.5 s after they connect, how long one more request then waits, the most threads
  and how many of the 300 the server has closed within 15 s.

    python -m bench.perf.serve_connections                 # the working tree beside main
    python -m bench.perf.serve_connections --before HEAD~1

Results: bench/results/serve_connections.txt.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.harness import ROOT, before_after, command_line, stamp

TOKEN = "bench-token-0123456789abcdef"
CAP = 15.0  # seconds a hold is watched before it is called "held"


def serve(module_file: str) -> None:
    """The server side: load ``module_file`` as the serve module, print its address, serve until killed."""
    spec = importlib.util.spec_from_file_location("serve_under_test", module_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from ldpstream.registry import Registry
    from ldpstream.store import InMemorySketchStore

    registry = Registry.from_dict({"defaults": {"topic": "bench"}, "metrics": {
        "lang": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 2.0}}})
    server = module.make_server(module.LiveView(registry, InMemorySketchStore(), None), "127.0.0.1", 0, TOKEN)
    print(module.url_of(server), flush=True)
    server.serve_forever()


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError("no Threads line")


def timed_get(url: str, token: str = TOKEN) -> float:
    start = time.monotonic()
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
    except urllib.error.HTTPError as error:
        error.close()
    return time.monotonic() - start


def held_for(sock: socket.socket, trickle: bytes = b"") -> float:
    """Seconds until the server closes ``sock`` (CAP: still open), sending ``trickle`` one byte a second."""
    start = time.monotonic()
    sock.settimeout(1.0)
    sent = 0
    while time.monotonic() - start < CAP:
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except TimeoutError:
            if sent < len(trickle):
                try:
                    sock.sendall(trickle[sent:sent + 1])
                except OSError:
                    return time.monotonic() - start
                sent += 1
        except OSError:
            return time.monotonic() - start
    return CAP


def request_then_hold(host: str, port: int, token: str) -> float:
    """A keep-alive GET /api/status with ``token``: seconds the server keeps the connection after answering."""
    sock = socket.create_connection((host, port))
    sock.sendall(f"GET /api/status HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n\r\n"
                 .encode())
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        buffer += sock.recv(65536)
    head, _, body = buffer.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    try:
        return held_for(sock)
    finally:
        sock.close()


def idle_sockets(pid: int, host: str, port: int, url: str, flavour: str, first: bytes) -> dict[str, object]:
    """300 connections that send ``first`` and then nothing: the server's threads, one more request's wait,
    the most threads and the connections closed by the server within CAP seconds."""
    out: dict[str, object] = {}
    idle = []
    for _ in range(300):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex((host, port))
        idle.append(sock)
    pending = list(idle)
    deadline = time.monotonic() + 20
    while pending and time.monotonic() < deadline:  # a full listen queue drops SYNs: the kernel retries
        _, ready, _ = select.select([], pending, [], 0.5)
        pending = [s for s in pending if s not in ready]
    for sock in idle:
        if first and sock not in pending:
            sock.sendall(first)
    out["connected"] = len(idle) - len(pending)
    time.sleep(1.5)
    out["threads"] = threads_of(pid)
    with ThreadPoolExecutor(1) as pool:
        out["a request meanwhile: answered in s"] = round(pool.submit(timed_get, url + "api/status").result(), 2)
    deadline = time.monotonic() + CAP
    closed: set[int] = set()
    most = threads_of(pid)
    while time.monotonic() < deadline and len(closed) < len(idle):
        most = max(most, threads_of(pid))
        for i, sock in enumerate(idle):
            if i in closed:
                continue
            try:
                if sock.recv(1) == b"":
                    closed.add(i)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(i)
        time.sleep(0.2)
    out[f"most threads within {CAP:.0f} s"] = most
    out[f"closed by the server within {CAP:.0f} s"] = len(closed)
    for sock in idle:
        sock.close()
    return {f"300 {flavour} sockets: {key}": value for key, value in out.items()}


def measure(label: str, module_file: Path) -> dict[str, object]:
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(module_file)], stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        out: dict[str, object] = {"version": label, "threads at rest": threads_of(process.pid)}

        with ThreadPoolExecutor(20) as pool:
            times = sorted(pool.map(lambda _: timed_get(url + "api/estimates"), range(200)))
        out["stalled >= 1 s of 200 (20-way)"] = sum(t >= 1.0 for t in times)
        out["slowest request s"] = round(times[-1], 2)

        with ThreadPoolExecutor(3) as pool:
            bad = pool.submit(request_then_hold, host, int(port), "wrong")
            good = pool.submit(request_then_hold, host, int(port), TOKEN)
            slow = socket.create_connection((host, int(port)))
            trickled = pool.submit(held_for, slow, f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nX: {'y' * 40}".encode())
            out["bad token: connection held s"] = round(bad.result(), 2)
            out["idle keep-alive: connection held s"] = round(good.result(), 2)
            out["head trickled 1 byte/s: connection held s"] = round(trickled.result(), 2)
        slow.close()
        time.sleep(0.5)

        for flavour, first in (("idle", b""), ("partial-head", b"GET / HTTP/1.1\r\n")):
            out.update(idle_sockets(process.pid, host, int(port), url, flavour, first))
        return out
    finally:
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="the commit to compare with (default main)")
    parser.add_argument("--serve", metavar="MODULE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "serve_before.py"
        shown = [subprocess.run(["git", "-C", str(ROOT), "show", f"{args.before}:{path}"], capture_output=True,
                                text=True, check=False) for path in ("operations/serve.py", "deploy/serve.py")]
        before.write_text(next(s.stdout for s in shown if s.returncode == 0))  # deploy/: commits before operations/
        rows = [measure(args.before, before), measure("working tree", ROOT / "operations" / "serve.py")]
    print(command_line("bench.perf.serve_connections"))
    print(f"{before_after(args.before)}; {stamp()}")
    width = max(len(k) for k in rows[0])
    print(f"{'':<{width}}  " + "  ".join(f"{r['version']!s:>14}" for r in rows))
    for key in rows[0]:
        if key != "version":
            print(f"{key:<{width}}  " + "  ".join(f"{r[key]!s:>14}" for r in rows))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
