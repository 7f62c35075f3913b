"""``python -m tools.images``: every image the container tests and the deployment need, built without a registry.
Development tooling, run from a checkout, not installed with ldpstream.

No image can be pulled where CI runs, so each one is built from Debian's archive, Maven Central and PyPI (the
registries this machine reaches), in this order, by the Docker engine of ``DOCKER_HOST`` (normally the private
one of :mod:`tools.engine`):

1. :data:`BASE_IMAGE`: a Debian bookworm root filesystem made by ``debootstrap --variant=minbase`` with Python 3
   (``python3``, ``python3-venv``, ``python-is-python3``), imported with ``docker import``; local only. It
   trusts the CA certificates the machine adds in ``/usr/local/share/ca-certificates`` (where egress goes
   through a TLS-inspecting proxy, pip inside a build needs them), and pip uses the system bundle (``PIP_CERT``).
2. :data:`REDIS_IMAGE`: Debian's ``redis-server`` (7.0.15) on the base (``tools/images/redis``).
3. :data:`KAFKA_IMAGE`: OpenJDK 17 and the Kafka jars from Maven Central on the base (``tools/images/kafka``).
4. ``ldpstream:<version>``: ``deploy/Dockerfile`` with ``PYTHON_IMAGE`` set to the base.

Images 2–4 carry the names a user pulls from Docker Hub (pinned), with the same interface
(``tools/images/README.md``), so the fixtures and the compose file use one set of names with or without a
registry. Builds that install packages use host networking (the engine has no NAT). Each image is labelled with
a digest of its inputs (files, versions, parent image id) and skipped when an image with that label exists.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ldpstream.deploy.containers import KAFKA_IMAGE, REDIS_IMAGE, ldpstream_image
from ldpstream.deploy.daemons import installed_binary
from ldpstream.deploy.stack import DEPENDENCY_PLUGIN, KAFKA_VERSION, StackConfig
from ldpstream.errors import ServiceError

DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
BASE_IMAGE = f"ldpstream-base:{DEBIAN_SUITE}"
INPUTS_LABEL = "io.ldpstream.inputs"
#: CA certificates this machine adds to Debian's (``update-ca-certificates``); the base image trusts them too.
LOCAL_CA_DIR = Path("/usr/local/share/ca-certificates")
#: Bump when the way an image is made changes without its input files changing.
RECIPE = "1"

_TOOLS = Path(__file__).resolve().parent
_REPO = _TOOLS.parent
_DEPLOY = _REPO / "deploy"
IMAGE_NAMES = ("base", "redis", "kafka", "ldpstream")
__all__ = ["BASE_IMAGE", "IMAGE_NAMES", "KAFKA_IMAGE", "REDIS_IMAGE", "build_images", "ldpstream_image"]


@dataclass(frozen=True)
class BuildResult:
    name: str
    tag: str
    built: bool
    seconds: float

    def describe(self) -> str:
        return f"{self.name:10} {self.tag:32} {'built' if self.built else 'cached':6} {self.seconds:7.1f} s"


# ------------------------------------------------------------------------------------------- inputs


def _digest(*parts: object) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(json.dumps(part, sort_keys=True, default=str).encode())
        sha.update(b"\0")
    return sha.hexdigest()


def _files_digest(root: Path, relative: list[str]) -> str:
    """Digest of the names, modes and contents of files (not their times: a fresh clone hits the cache)."""
    sha = hashlib.sha256()
    for rel in sorted(relative):
        path = root / rel
        sha.update(rel.encode() + b"\0")
        if path.is_symlink():
            sha.update(b"link:" + os.readlink(path).encode())
        elif path.is_file():
            sha.update(b"x" if os.access(path, os.X_OK) else b"-")
            sha.update(path.read_bytes())
        sha.update(b"\0")
    return sha.hexdigest()


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def debian_mirror() -> str:
    """``LDPSTREAM_DEBIAN_MIRROR``, else the first Debian archive in the machine's apt sources."""
    mirror = os.environ.get("LDPSTREAM_DEBIAN_MIRROR")
    if mirror:
        return mirror
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        with contextlib.suppress(OSError):
            for word in source.read_text().split():
                if word.startswith("http") and word.rstrip("/").endswith("/debian"):
                    return word.rstrip("/")
    return "http://deb.debian.org/debian"


# ------------------------------------------------------------------------------------------- docker


def docker_client() -> Any:
    """A client of the engine of ``DOCKER_HOST``, else of the private engine; an error if none answers."""
    import docker

    from tools.engine import EngineConfig

    host = os.environ.get("DOCKER_HOST") or EngineConfig.from_env().docker_host
    try:
        client = docker.DockerClient(base_url=host, timeout=600)
        client.ping()
    except Exception as exc:
        raise ServiceError(f"no Docker engine answers at {host} ({exc}); start one: "
                           "export \"$(python -m tools.engine up | tail -n1)\"") from exc
    return client


def _existing_digest(client: Any, tag: str) -> str | None:
    import docker

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    labels = image.labels or {}
    return str(labels.get(INPUTS_LABEL)) if INPUTS_LABEL in labels else None


def _image_id(client: Any, tag: str) -> str:
    return str(client.images.get(tag).id)


def _build(client: Any, tag: str, context: IO[bytes], dockerfile: str, digest: str,
           buildargs: dict[str, str], log: Path) -> None:
    """``docker build`` of a tar context (the engine's classic builder, host network), output to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    error = None
    with open(log, "w") as out:
        for chunk in client.api.build(fileobj=context, custom_context=True, dockerfile=dockerfile, tag=tag,
                                      buildargs=buildargs, labels={INPUTS_LABEL: digest}, network_mode="host",
                                      rm=True, forcerm=True, decode=True, pull=False):
            if "stream" in chunk:
                out.write(chunk["stream"])
            if "error" in chunk:
                error = chunk["error"]
                out.write(f"ERROR: {error}\n")
    if error is not None:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise ServiceError(f"building {tag} failed: {error}\n{tail}\n(full log: {log})")


@contextlib.contextmanager
def _tar_of(entries: list[tuple[Path, str]]) -> Iterator[IO[bytes]]:
    """A build context holding each (source, name): files and whole folders, symbolic links kept."""
    with tempfile.TemporaryFile() as handle:
        with tarfile.open(fileobj=handle, mode="w") as archive:
            for source, name in entries:
                archive.add(str(source), arcname=name)
        handle.seek(0)
        yield handle


# ------------------------------------------------------------------------------------------- images


def _debootstrap() -> str:
    return installed_binary("debootstrap", "debootstrap",
                            "debootstrap is needed to build the base image; install Debian's debootstrap (as root)",
                            announce=False, update=False)


def build_base(client: Any, work: Path, log: Path) -> str:
    mirror = debian_mirror()
    local_cas = sorted(LOCAL_CA_DIR.glob("*.crt"))
    digest = _digest(RECIPE, "base", DEBIAN_SUITE, "minbase", BASE_PACKAGES, mirror,
                     [(ca.name, hashlib.sha256(ca.read_bytes()).hexdigest()) for ca in local_cas])
    if _existing_digest(client, BASE_IMAGE) == digest:
        return ""
    if os.geteuid() != 0:
        raise ServiceError("debootstrap needs root to build the base image")
    root = work / "rootfs"
    stamp = work / "rootfs.inputs"  # a finished debootstrap of these inputs, kept until its import succeeds
    if not (stamp.exists() and stamp.read_text() == digest and root.is_dir()):
        stamp.unlink(missing_ok=True)
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as out:
            result = subprocess.run(
                [_debootstrap(), "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", DEBIAN_SUITE,
                 str(root), mirror], stdout=out, stderr=subprocess.STDOUT, check=False)
        if result.returncode != 0:
            raise ServiceError(f"debootstrap failed (exit {result.returncode}); log: {log}")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        if local_cas:  # the machine's own CAs (a TLS-inspecting egress proxy): builds reach PyPI through it
            target = root / "usr/local/share/ca-certificates"
            target.mkdir(parents=True, exist_ok=True)
            for ca in local_cas:
                shutil.copyfile(ca, target / ca.name)
            with open(log, "a") as out:
                subprocess.run(["chroot", str(root), "update-ca-certificates"], stdout=out,
                               stderr=subprocess.STDOUT, check=True)
        stamp.write_text(digest)
    changes = ['CMD ["bash"]', "ENV LANG=C.UTF-8", "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
               f"LABEL {INPUTS_LABEL}={digest}"]
    repository, tag = BASE_IMAGE.split(":")
    tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    assert tar.stdout is not None and tar.stderr is not None
    try:
        answer = client.api.import_image(src=tar.stdout, repository=repository, tag=tag, changes=changes,
                                         stream_src=True)
    finally:
        tar.stdout.close()
        tar_errors = tar.stderr.read().decode(errors="replace")
        tar.wait()
    if tar.returncode != 0 or "error" in str(answer).lower() or client.images.get(BASE_IMAGE).attrs["Size"] < 2**20:
        with contextlib.suppress(Exception):
            client.images.remove(BASE_IMAGE, force=True)
        raise ServiceError(f"docker import of the base root filesystem failed: {answer} {tar_errors}")
    stamp.unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    return digest


def build_redis(client: Any, log: Path) -> str:
    folder = _TOOLS / "images" / "redis"
    digest = _digest(RECIPE, "redis", _files_digest(folder, _tree(folder)), _image_id(client, BASE_IMAGE))
    if _existing_digest(client, REDIS_IMAGE) == digest:
        return ""
    with _tar_of([(folder / name, name) for name in _tree(folder)]) as context:
        _build(client, REDIS_IMAGE, context, "Dockerfile", digest, {"BASE_IMAGE": BASE_IMAGE}, log)
    return digest


def kafka_image_jars(cache_dir: Path) -> Path:
    """The image's jars (broker, tools, log4j2) from Maven Central, copied once into the cache."""
    libs = cache_dir / f"kafka-image-{KAFKA_VERSION}" / "libs"
    pom = _TOOLS / "images" / "kafka" / "pom.xml"
    stamp = libs.parent / "pom.sha256"
    pom_digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    if libs.is_dir() and stamp.exists() and stamp.read_text() == pom_digest:
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError("Maven (mvn) is needed to fetch Kafka's jars from Maven Central; install Debian's maven")
    tmp = libs.with_name("libs.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(pom), f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
         f"-DoutputDirectory={tmp}", f"-Dkafka.version={KAFKA_VERSION}"],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServiceError(f"Maven could not fetch the Kafka jars:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    stamp.write_text(pom_digest)
    return libs


def build_kafka(client: Any, cache_dir: Path, log: Path) -> str:
    folder = _TOOLS / "images" / "kafka"
    libs = kafka_image_jars(cache_dir)
    jars = sorted(p.name for p in libs.glob("*.jar"))
    digest = _digest(RECIPE, "kafka", KAFKA_VERSION, _files_digest(folder, _tree(folder)), jars,
                     _image_id(client, BASE_IMAGE))
    if _existing_digest(client, KAFKA_IMAGE) == digest:
        return ""
    entries = [(folder / name, name) for name in _tree(folder)] + [(libs, "libs")]
    with _tar_of(entries) as context:
        _build(client, KAFKA_IMAGE, context, "Dockerfile", digest, {"BASE_IMAGE": BASE_IMAGE}, log)
    return digest


def ldpstream_context_files() -> list[str]:
    """The files of ``deploy/Dockerfile``'s context: the repository filtered by ``Dockerfile.dockerignore``."""
    from docker.utils.build import exclude_paths

    patterns = [line.strip() for line in (_DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
                if line.strip() and not line.strip().startswith("#")]
    files = exclude_paths(str(_REPO), patterns, dockerfile="deploy/Dockerfile")
    return sorted(str(f) for f in files)


def build_ldpstream(client: Any, log: Path) -> str:
    tag = ldpstream_image()
    files = ldpstream_context_files()
    digest = _digest(RECIPE, "ldpstream", tag, _files_digest(_REPO, files), _image_id(client, BASE_IMAGE))
    if _existing_digest(client, tag) == digest:
        return ""
    with _tar_of([(_REPO / name, name) for name in files if not (_REPO / name).is_dir()
                  or (_REPO / name).is_symlink()]) as context:
        _build(client, tag, context, "deploy/Dockerfile", digest, {"PYTHON_IMAGE": BASE_IMAGE}, log)
    return digest


def build_images(only: tuple[str, ...] = IMAGE_NAMES, force: bool = False,
                 report: Callable[[BuildResult], None] | None = None) -> list[BuildResult]:
    """Build (or find cached) each image of ``only`` in dependency order; the base is always ensured first."""
    unknown = set(only) - set(IMAGE_NAMES)
    if unknown:
        raise ServiceError(f"unknown image(s) {sorted(unknown)}; choose from {list(IMAGE_NAMES)}")
    client = docker_client()
    stack_cfg = StackConfig.from_env()
    work = stack_cfg.cache_dir / "images"
    logs = stack_cfg.state_dir / "engine" / "build-logs"
    logs.mkdir(parents=True, exist_ok=True)
    if force:
        for tag in (BASE_IMAGE, REDIS_IMAGE, KAFKA_IMAGE, ldpstream_image()):
            with contextlib.suppress(Exception):
                client.images.remove(tag, force=True)
    steps: dict[str, tuple[str, Callable[[], str]]] = {
        "base": (BASE_IMAGE, lambda: build_base(client, work, logs / "base.log")),
        "redis": (REDIS_IMAGE, lambda: build_redis(client, logs / "redis.log")),
        "kafka": (KAFKA_IMAGE, lambda: build_kafka(client, stack_cfg.cache_dir, logs / "kafka.log")),
        "ldpstream": (ldpstream_image(), lambda: build_ldpstream(client, logs / "ldpstream.log")),
    }
    results = []
    for name in IMAGE_NAMES:
        if name != "base" and name not in only:
            continue
        tag, step = steps[name]
        start = time.monotonic()
        built = bool(step())
        result = BuildResult(name, tag, built, time.monotonic() - start)
        results.append(result)
        if report is not None:
            report(result)
    with contextlib.suppress(Exception):
        client.images.prune(filters={"dangling": True})
    return results


def main_report(result: BuildResult) -> None:
    print(result.describe(), file=sys.stdout, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.images``."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.images",
        description="Builds on the engine of DOCKER_HOST (else the private engine of tools.engine): a Debian base "
        "from debootstrap, redis:7.0.15-bookworm, apache/kafka (the local stack's version) and ldpstream:VERSION. "
        "An image whose inputs are unchanged is kept. See tools/images/README.md.")
    parser.add_argument("--only", default=",".join(IMAGE_NAMES),
                        help="comma-separated subset of base,redis,kafka,ldpstream (the base is always ensured)")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.images [--only NAMES] [--force]``: one line per image, then a total."""
    args = build_parser().parse_args(argv)
    only = tuple(name.strip() for name in args.only.split(",") if name.strip())
    print(f"{'image':10} {'tag':32} {'state':6} {'time':>9}", flush=True)
    try:
        results = build_images(only, force=args.force, report=main_report)
    except ServiceError as exc:
        print(f"python -m tools.images: {exc}", file=sys.stderr)
        return 1
    print(f"{len(results)} images ready ({sum(r.built for r in results)} built) in "
          f"{sum(r.seconds for r in results):.1f} s", file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
