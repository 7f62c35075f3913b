"""The package's shape, checked: one installed namespace, no import cycles between modules, and the layer
rule (the import-linter contract in pyproject.toml, run by ``lint-imports`` in ``.ci/run``)."""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("ldpstream")


def test_the_design_folders_are_installed_under_the_ldpstream_namespace(graph):
    for role in ("producers", "consumers", "decoder", "deploy", "operations"):
        link = ROOT / "ldpstream" / role
        assert link.is_symlink() and link.resolve() == (ROOT / role).resolve()
        assert f"ldpstream.{role}" in graph.modules


def test_no_module_imports_a_top_level_role_package(graph):
    outside = {"producers", "consumers", "decoder", "deploy", "operations"}
    offenders = sorted((m, i) for m in graph.modules for i in graph.find_modules_directly_imported_by(m)
                       if i.split(".")[0] in outside)
    assert offenders == []


def test_the_development_tooling_stays_outside_the_package(graph):
    """The private engine and the image builder (tools/) run from a checkout: nothing installed imports them."""
    assert (ROOT / "tools" / "engine.py").is_file() and (ROOT / "tools" / "images.py").is_file()
    assert not (ROOT / "ldpstream" / "tools").exists()
    assert not {"ldpstream.deploy.engine", "ldpstream.deploy.images"} & graph.modules
    importers = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "ldpstream").rglob("*.py")
                       if re.search(r"^\s*(from|import) tools\b", path.read_text(), re.MULTILINE))
    assert importers == []


def test_no_import_cycles_between_modules(graph):
    modules = sorted(m for m in graph.modules if m.startswith("ldpstream."))
    cycles = []
    for importer in modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported.startswith("ldpstream.") and graph.chain_exists(importer=imported, imported=importer):
                cycles.append((importer, imported))
    # A package's __init__ re-exporting its modules is not a cycle of concepts.
    cycles = [(a, b) for a, b in cycles if not (b.startswith(a + ".") or a.startswith(b + "."))]
    assert cycles == []
