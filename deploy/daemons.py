"""The local services' processes: started in a session of their own with a pid file, found by pid file and by the
ports they listen on, stopped with their whole process group, and reaped.

A process is *ours* when its pid file says so or when its working directory lies under the stack's state folder
(every service of the stack is started there; Redis rewrites its command line, so that is not a mark). A process
that listens on a stack port and is not ours is never signalled: :func:`stop` names it instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ldpstream.errors import ServiceError

#: The services this process started: they outlive the call that started them (``down`` stops them), so their
#: handles are kept for the life of the process, and polled so that a child that died is reaped, not a zombie.
_CHILDREN: list[subprocess.Popen[bytes]] = []


@dataclass(frozen=True)
class Holder:
    """A process listening on one of the stack's ports."""

    port: int
    pid: int | None
    command: str

    def describe(self) -> str:
        who = "an unknown process" if self.pid is None else f"pid {self.pid} ({self.command})"
        return f"port {self.port}: {who}"


@dataclass
class Stopped:
    """What :func:`stop` did: the pids it ended, and what it could not stop or may not touch."""

    pids: list[int] = field(default_factory=list)
    left: list[Holder] = field(default_factory=list)

    def __iadd__(self, other: Stopped) -> Stopped:
        self.pids += other.pids
        self.left += [h for h in other.left if h not in self.left]
        return self


def reap() -> None:
    """Collect every child of ours that has exited (a SIGKILLed broker stays a zombie until its parent waits)."""
    for child in list(_CHILDREN):
        if child.poll() is not None:
            _CHILDREN.remove(child)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    reap()
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def read_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` when that process runs, else None."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) else None


def age(pid_file: Path) -> float | None:
    """Seconds since the process of ``pid_file`` started, when it runs; else None."""
    pid = read_pid(pid_file)
    if pid is None:
        return None
    try:
        return max(0.0, time.time() - psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def holders(ports: Iterable[int]) -> list[Holder]:
    """The processes listening on ``ports`` (TCP, any address), by port."""
    wanted = set(ports)
    found: list[Holder] = []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port not in wanted:
            continue
        found.append(Holder(conn.laddr.port, conn.pid, _command(conn.pid)))
    return sorted(set(found), key=lambda h: (h.port, h.pid or 0))


def _command(pid: int | None) -> str:
    if pid is None:
        return "?"
    try:
        words = psutil.Process(pid).cmdline()
    except psutil.Error:
        return "?"
    text = " ".join(words)
    return text if len(text) <= 160 else text[:157] + "..."


def ours(pid: int, state_dir: Path) -> bool:
    """Whether ``pid`` was started by the stack of ``state_dir`` (its working directory lies under it)."""
    try:
        return Path(psutil.Process(pid).cwd()).resolve().is_relative_to(state_dir.resolve())
    except (psutil.Error, OSError):
        return False


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


def wait_until(check: Callable[[], bool], timeout: float, what: str, log: Path,
               running: Callable[[], bool] | None = None) -> None:
    """Poll ``check`` until it holds; a :class:`ServiceError` with the tail of ``log`` when ``running()`` turns
    false or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if running is not None and not running():
            raise ServiceError(f"{what} exited during startup; see its log: {log}\n{tail(log)}")
        time.sleep(0.25)
    raise ServiceError(f"{what} did not become ready within {timeout:.0f} s; see its log: {log}\n{tail(log)}")


def spawn(argv: list[str], log: Path, pid_file: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own (its process group is its pid), output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, start_new_session=True)
    pid_file.write_text(str(proc.pid))
    _CHILDREN.append(proc)
    return proc


def launch(argv: list[str], *, cwd: Path, pid_file: Path, log: Path, ready: Callable[[], bool], timeout: float,
           what: str, output: Path | None = None) -> None:
    """:func:`spawn` (stdout and stderr to ``output``, default ``log``), then :func:`wait_until` ``ready()``.
    A service that does not become ready is stopped before the error is raised: never left running unowned."""
    proc = spawn(argv, log if output is None else output, pid_file, cwd)
    try:
        wait_until(ready, timeout, what, log, running=lambda: proc.poll() is None)
    except ServiceError:
        stop(pid_file, (), cwd)
        raise


def stop(pid_file: Path, ports: Iterable[int], state_dir: Path, timeout: float = 30.0) -> Stopped:
    """Stop the service of ``pid_file`` and every process of ours (:func:`ours`) listening on ``ports``: SIGTERM
    to each one's process group, SIGKILL after ``timeout`` s, then reap. Returns what was stopped and what still
    listens on ``ports`` (not ours, or not stoppable)."""
    ports = list(ports)
    targets = {pid for pid in (read_pid(pid_file),) if pid is not None}
    targets |= {h.pid for h in holders(ports) if h.pid is not None and ours(h.pid, state_dir)}
    processes = []
    for pid in targets:
        with contextlib.suppress(psutil.NoSuchProcess):
            processes.append(psutil.Process(pid))
    _signal_all(processes, signal.SIGTERM)
    remaining = _wait_gone(processes, timeout)
    if remaining:
        _signal_all(remaining, signal.SIGKILL)
        _wait_gone(remaining, 10.0)
    pid_file.unlink(missing_ok=True)
    return Stopped(sorted(targets), holders(ports))


def _wait_gone(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until each of ``processes`` has exited (a zombie has: its parent, maybe not us, reaps it); those
    still running after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    remaining = processes
    while remaining:
        remaining = [p for p in remaining if alive(p.pid)]
        if not remaining or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return remaining


def _signal_all(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(process.pid) == process.pid:  # a session leader of ours: its children too
                os.killpg(process.pid, sig)
            else:
                os.kill(process.pid, sig)


def clear(pid_file: Path, ports: Iterable[int], state_dir: Path, what: str) -> None:
    """Before a start: stop a process of ours that holds ``pid_file`` or ``ports`` without answering (stuck, or
    left behind by a killed parent); a :class:`ServiceError` naming any other process that holds them."""
    left = stop(pid_file, ports, state_dir).left
    if left:
        raise ServiceError(f"cannot start {what}: its ports are taken by another process: "
                           + "; ".join(h.describe() for h in left))


def installed_binary(name: str, package: str, missing: str, *, announce: bool = True, update: bool = True,
                     recommends: bool = False) -> str:
    """Path of the executable ``name``. When it is not on PATH and we are root with apt-get, installs Debian's
    ``package`` first (saying so on stderr when ``announce``; ``apt-get update`` before when ``update``; with
    ``--no-install-recommends`` unless ``recommends``); ``missing`` is the error when it is still not there."""
    found = shutil.which(name)
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        if announce:
            print(f"{name} not found: installing Debian's {package} package", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if update:
            subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        options = [] if recommends else ["--no-install-recommends"]
        subprocess.run(["apt-get", "install", "-y", "-qq", *options, package], check=False, env=env)
        found = shutil.which(name)
        if found:
            return found
    raise ServiceError(missing)
