"""A private Docker engine for tests and image builds: Debian's ``dockerd`` with folders of its own. Development
tooling, run from a checkout (``python -m tools.engine up|down|status``), not installed with ldpstream.

``up`` starts ``dockerd`` (Debian's ``docker.io`` package, installed with apt-get when
missing and we are root) so that it shares nothing with a system Docker and leaves the host's firewall alone:

- its own socket, pid file and ``--exec-root`` under the stack folder (``LDPSTREAM_STACK_DIR``/``engine``);
- its own ``--data-root`` (images, containers, volumes) under the cache folder (``LDPSTREAM_CACHE_DIR``/``engine``,
  or ``LDPSTREAM_ENGINE_DATA_ROOT``): images are a cache, kept between runs where the machine is kept;
- ``--storage-driver``: ``overlay2`` when an overlay mount works in the data root, else ``vfs`` (works in any
  sandbox, but copies the whole image for every build step and every container: with the classic builder a
  ten-step Dockerfile on a 250 MB base took over three minutes here, against seconds with overlay2);
  ``LDPSTREAM_ENGINE_STORAGE_DRIVER`` chooses one;
- ``--iptables=false --ip6tables=false``: no NAT and no firewall rules; containers reach one another on the
  default bridge and the host reaches them through ports published on ``--ip 127.0.0.1`` (docker-proxy);
  builds that install packages run with host networking.

``up`` is idempotent (an engine that answers on the socket is left alone); ``down`` sends SIGTERM, which makes
dockerd stop its containers and its containerd, and waits for it to exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ldpstream.deploy import daemons
from ldpstream.deploy.containers import PRIVATE_ENGINE_DIR, PRIVATE_ENGINE_SOCKET, socket_answers
from ldpstream.deploy.stack import StackConfig
from ldpstream.errors import ServiceError

#: Unix socket paths longer than this do not fit ``sockaddr_un`` (108 bytes with the terminating NUL).
MAX_SOCKET_PATH = 107


@dataclass(frozen=True)
class EngineConfig:
    """Where the private engine keeps its socket, state and images."""

    run_dir: Path
    data_root: Path

    @classmethod
    def from_env(cls) -> EngineConfig:
        stack_cfg = StackConfig.from_env()
        data_root = os.environ.get("LDPSTREAM_ENGINE_DATA_ROOT")
        return cls(run_dir=stack_cfg.state_dir / PRIVATE_ENGINE_DIR,
                   data_root=Path(data_root) if data_root else stack_cfg.cache_dir / "engine")

    @property
    def socket(self) -> Path:
        return self.run_dir / PRIVATE_ENGINE_SOCKET

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def exec_root(self) -> Path:
        return self.run_dir / "exec"

    @property
    def pid_file(self) -> Path:
        """Written by dockerd itself."""
        return self.run_dir / "dockerd.pid"

    @property
    def spawn_pid_file(self) -> Path:
        """Written by :func:`up` (dockerd refuses a pid file that names a live process, even its own)."""
        return self.run_dir / "engine.pid"

    @property
    def log(self) -> Path:
        return self.run_dir / "dockerd.log"


def dockerd_binary() -> str:
    """Path of ``dockerd``; installs Debian's ``docker.io`` when missing and we may."""
    return daemons.installed_binary("dockerd", "docker.io",
                                    "dockerd is not installed; install Debian's package: apt-get install docker.io")


def overlay_works(where: Path) -> bool:
    """True when this kernel, as this user, mounts an overlay file system on top of ``where`` (needs root)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=where))
    try:
        for name in ("lower", "upper", "work", "merged"):
            (probe / name).mkdir()
        options = f"lowerdir={probe / 'lower'},upperdir={probe / 'upper'},workdir={probe / 'work'}"
        mounted = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(probe / "merged")],
                                 capture_output=True, check=False).returncode == 0
        if mounted:
            subprocess.run(["umount", str(probe / "merged")], capture_output=True, check=False)
        return mounted
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def storage_driver(cfg: EngineConfig) -> str:
    chosen = os.environ.get("LDPSTREAM_ENGINE_STORAGE_DRIVER")
    if chosen:
        return chosen
    return "overlay2" if overlay_works(cfg.data_root) else "vfs"


def dockerd_argv(cfg: EngineConfig, binary: str, driver: str = "vfs") -> list[str]:
    return [
        binary,
        "--host", cfg.docker_host,
        "--data-root", str(cfg.data_root),
        "--exec-root", str(cfg.exec_root),
        "--pidfile", str(cfg.pid_file),
        f"--storage-driver={driver}",
        "--iptables=false", "--ip6tables=false",
        "--ip", "127.0.0.1",
        "--shutdown-timeout", "10",
    ]


@dataclass(frozen=True)
class EngineStatus:
    running: bool
    docker_host: str
    data_root: Path
    log: Path

    def describe(self) -> str:
        return (f"engine     {'up' if self.running else 'down'}\n"
                f"data root  {self.data_root}\n"
                f"log        {self.log}\n"
                f"DOCKER_HOST={self.docker_host}")


def status(cfg: EngineConfig | None = None) -> EngineStatus:
    cfg = cfg or EngineConfig.from_env()
    return EngineStatus(socket_answers(cfg.socket), cfg.docker_host, cfg.data_root, cfg.log)


def up(cfg: EngineConfig | None = None, timeout: float = 90.0) -> EngineStatus:
    """Start the engine unless it already answers; returns once it answers ``/_ping``."""
    cfg = cfg or EngineConfig.from_env()
    if socket_answers(cfg.socket):
        return status(cfg)
    if len(str(cfg.socket)) > MAX_SOCKET_PATH:
        raise ServiceError(f"the engine's socket path is too long for a unix socket ({len(str(cfg.socket))} > "
                           f"{MAX_SOCKET_PATH} bytes): {cfg.socket}; set a shorter LDPSTREAM_STACK_DIR")
    binary = dockerd_binary()
    daemons.stop(cfg.spawn_pid_file, (), cfg.run_dir)  # a dockerd of ours that does not answer: restart it
    for stale in (cfg.socket, cfg.pid_file):
        stale.unlink(missing_ok=True)
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    cfg.data_root.mkdir(parents=True, exist_ok=True)
    daemons.launch(dockerd_argv(cfg, binary, storage_driver(cfg)), cwd=cfg.run_dir, pid_file=cfg.spawn_pid_file,
                   log=cfg.log, ready=lambda: socket_answers(cfg.socket), timeout=timeout, what="the Docker engine")
    return status(cfg)


def down(cfg: EngineConfig | None = None) -> bool:
    """Stop the engine (SIGTERM: dockerd stops its containers, then exits); True if one was running."""
    cfg = cfg or EngineConfig.from_env()
    stopped = bool(daemons.stop(cfg.spawn_pid_file, (), cfg.run_dir, timeout=60.0).pids)
    if not stopped and daemons.read_pid(cfg.pid_file) is not None:  # started by an earlier process of ours
        stopped = bool(daemons.stop(cfg.pid_file, (), cfg.run_dir, timeout=60.0).pids)
    cfg.socket.unlink(missing_ok=True)
    _unmount_below(cfg.exec_root)
    return stopped


def _unmount_below(root: Path) -> None:
    """Lazily unmount what dockerd left mounted below ``root`` (the network namespace file of its default
    bridge, ``netns/default``): else the stack folder cannot be removed (``rm``: device busy)."""
    if not root.exists():
        return
    resolved = str(root.resolve())
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts if len(line.split()) > 1]
    for point in sorted((p for p in points if p == resolved or p.startswith(resolved + "/")), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def log_tail(cfg: EngineConfig | None = None) -> str:
    cfg = cfg or EngineConfig.from_env()
    return daemons.tail(cfg.log)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.engine``."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.engine",
        description="Starts, stops or inspects a private dockerd (Debian's docker.io, installed if missing) with "
        "its own socket, exec root and pid file under LDPSTREAM_STACK_DIR/engine and its own data root under "
        "LDPSTREAM_CACHE_DIR/engine (or LDPSTREAM_ENGINE_DATA_ROOT); overlay2 storage where it mounts, else vfs; "
        "no iptables rules, ports published on 127.0.0.1. The last line 'up' prints is DOCKER_HOST=unix://...: "
        'export "$(python -m tools.engine up | tail -n1)"')
    parser.add_argument("action", choices=["up", "down", "status"])
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.engine up|down|status``; ``up`` prints ``DOCKER_HOST=unix://...`` last, ``status`` exits 3
    when the engine does not answer."""
    args = build_parser().parse_args(argv)
    try:
        if args.action == "up":
            print(up().describe(), flush=True)
        elif args.action == "down":
            print("engine stopped" if down() else "engine was not running")
        else:
            current = status()
            print(current.describe())
            return 0 if current.running else 3
    except ServiceError as exc:
        print(f"python -m tools.engine: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
