"""The wheel is what users install: one top-level package ``ldpstream`` holding the roles as real files (the
checkout reaches producers/, consumers/, decoder/, deploy/ and operations/ through symbolic links), its package
data, and entry points that work from a fresh virtual environment, away from the checkout."""

from __future__ import annotations

import configparser
import email.parser
import importlib.util
import os
import shutil
import site
import stat
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("producers", "consumers", "decoder", "deploy", "operations")
PACKAGE_DATA = ("ldpstream/deploy/kafka/pom.xml", "ldpstream/deploy/metrics.toml", "ldpstream/py.typed",
                "ldpstream/operations/web/index.html", "ldpstream/operations/web/app.js",
                "ldpstream/operations/web/style.css")
#: Left out of the copy that is built: VCS, caches, build output, the local stack's state.
IGNORED = shutil.ignore_patterns(".git", ".stack*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
                                 ".venv", "*.pyc")


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel built from a copy of the checkout (symbolic links kept), so the checkout stays clean."""
    if importlib.util.find_spec("build") is None and importlib.util.find_spec("wheel") is None:
        message = "building a wheel needs the 'wheel' or 'build' package (pip install -e '.[test]')"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    source = tmp_path_factory.mktemp("source") / "ldpstream"
    shutil.copytree(ROOT, source, symlinks=True, ignore=IGNORED)
    out = tmp_path_factory.mktemp("wheelhouse")
    if importlib.util.find_spec("build") is not None:
        run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(source)], source)
    else:
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
             str(source)], source)
    wheels = list(out.glob("ldpstream-*.whl"))
    assert len(wheels) == 1, wheels
    yield wheels[0]


@pytest.fixture(scope="module")
def names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_every_top_level_name_is_ldpstream_or_its_dist_info(names):
    tops = {name.split("/")[0] for name in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert len(dist_info) == 1 and next(iter(dist_info)).startswith("ldpstream-")
    assert tops - dist_info == {"ldpstream"}


@pytest.mark.parametrize("role", ROLES)
def test_the_roles_are_real_files_with_the_checkouts_content(wheel, names, role):
    sources = sorted(p.relative_to(ROOT / role).as_posix() for p in (ROOT / role).rglob("*.py")
                     if "__pycache__" not in p.parts)
    assert sources, f"no Python file under {role}/"
    with zipfile.ZipFile(wheel) as archive:
        for relative in sources:
            name = f"ldpstream/{role}/{relative}"
            assert name in names, f"{name} is missing from the wheel"
            info = archive.getinfo(name)
            assert not stat.S_ISLNK(info.external_attr >> 16), f"{name} is a symbolic link in the wheel"
            assert archive.read(name) == (ROOT / role / relative).read_bytes(), f"{name} differs from {role}/"


def test_the_package_data_is_in_the_wheel(names):
    for name in PACKAGE_DATA:
        assert name in names, f"{name} is missing from the wheel"


def test_the_entry_points_are_declared(wheel, names):
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    parser = configparser.ConfigParser()
    with zipfile.ZipFile(wheel) as archive:
        parser.read_string(archive.read(entry_points).decode())
    assert parser["console_scripts"]["ldpstream"] == "ldpstream.cli.main:main"
    assert parser["pytest11"]["ldpstream"] == "ldpstream.testing"


def test_the_metadata_names_its_authors_urls_and_classifiers(wheel, names):
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    with zipfile.ZipFile(wheel) as archive:
        headers = email.parser.HeaderParser().parsestr(archive.read(metadata).decode())
    assert headers["Author-email"]
    urls = dict(value.split(", ", 1) for value in headers.get_all("Project-URL", []))
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls), urls
    classifiers = headers.get_all("Classifier", [])
    assert "Programming Language :: Python :: 3.11" in classifiers and "Typing :: Typed" in classifiers
    assert any(c.startswith("License :: ") for c in classifiers)


def test_the_installed_wheel_imports_and_runs_from_a_fresh_venv(wheel, tmp_path_factory):
    # Outside the checkout. The dependencies come from the running interpreter's own site directories (a
    # virtualenv's or the system's), listed in a .pth file after the new environment's: the wheel installed there
    # shadows the editable ldpstream, whose own .pth hook is not run from a plain path line.
    home = tmp_path_factory.mktemp("venv")
    env_dir = home / "env"
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    own = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], home, environ)
    running = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    (Path(own.stdout.strip()) / "running-interpreter.pth").write_text(
        "".join(f"{path}\n" for path in running if Path(path).is_dir()))
    workdir = home / "work"
    workdir.mkdir()
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
         str(wheel)], workdir, environ)

    check = (
        "import pathlib, sys\n"
        "import ldpstream, ldpstream.producers, ldpstream.consumers.worker, ldpstream.decoder.service\n"
        "import ldpstream.deploy.stack, ldpstream.operations.serve, ldpstream.testing\n"
        "from ldpstream.producers import LdpClient, ReportPublisher, DeliveryStats, load_or_create_secret\n"
        "root = pathlib.Path(ldpstream.__file__).resolve().parent\n"
        "assert root.is_relative_to(pathlib.Path(sys.prefix).resolve()), (root, sys.prefix)\n"
        "for role in ('producers', 'consumers', 'decoder', 'deploy'):\n"
        "    assert not (root / role).is_symlink(), role\n"
        "assert (root / 'deploy' / 'metrics.toml').is_file()\n"
        "from importlib.resources import files\n"
        "assert b'app.js' in (files('ldpstream.operations') / 'web' / 'index.html').read_bytes()\n"
        "print(root)\n")
    done = run([str(python), "-c", check], workdir, environ)
    installed = Path(done.stdout.strip())
    assert installed.is_relative_to(env_dir.resolve()), installed
    assert not installed.is_relative_to(ROOT)

    done = run([str(env_dir / "bin" / "ldpstream"), "--help"], workdir, environ)
    assert "usage: ldpstream" in done.stdout
