"""The package's shape, checked: one installed namespace, no import cycles between modules, and the layer
rule (the import-linter contract in pyproject.toml, run by ``lint-imports`` in ``.ci/run``)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("ldpstream")


def test_the_design_folders_are_installed_under_the_ldpstream_namespace(graph):
    for role in ("producers", "consumers", "decoder", "deploy", "operations"):
        link = ROOT / "ldpstream" / role
        assert link.is_symlink() and link.resolve() == (ROOT / role).resolve()
        assert f"ldpstream.{role}" in graph.modules


def test_no_module_imports_a_top_level_role_package(graph):
    outside = {"producers", "consumers", "decoder", "deploy", "operations", "tools"}
    offenders = sorted((m, i) for m in graph.modules for i in graph.find_modules_directly_imported_by(m)
                       if i.split(".")[0] in outside)
    assert offenders == []


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
