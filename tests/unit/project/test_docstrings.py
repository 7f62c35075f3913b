"""Docstrings state contracts in a few lines: module docstrings are short, none narrates history."""

from __future__ import annotations

import ast
import os
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import ldpstream

MAX_MODULE_DOCSTRING_LINES = 30

# Format contracts: the byte table and the key schema stay whole in their modules.
# The file tables of Google RAPPOR's tools (ldpstream.interop.rappor) are a format contract too.
FORMAT_CONTRACTS = frozenset({"ldpstream.wire", "ldpstream.store.keys", "ldpstream.interop.rappor"})

# Modules whose docstrings are still over the limit. Shrink a module's docstring (moving the reasons to docs/)
# and take it off this list; the test fails on a listed module that is already short, so the list only shrinks.
NOT_YET_SHORT: frozenset[str] = frozenset()

# Modules whose every docstring (module, class, function) is kept free of history wording.
NO_HISTORY_PREFIXES = (
    "ldpstream.estimators",
    "ldpstream.mechanisms",
    "ldpstream.store",
    "ldpstream.distributions",
    "ldpstream.device",
    "ldpstream.consumers.fold",
    "ldpstream.consumers.dead_letter_replay",
    "ldpstream.consumers.dead_letters",
    "ldpstream.decoder.published",
    "ldpstream.decoder.discovery",
    "ldpstream.decoder.workers",
    "ldpstream.decoder.report",
)
HISTORY_WORDING = re.compile(r"previous release|used to|no longer|issue \d", re.IGNORECASE)

REPO = Path(__file__).resolve().parents[3]
DOCS_LINK = re.compile(r"(docs/[\w/.-]+\.md)#([\w-]+)")


def _modules(path: str, prefix: str) -> Iterator[tuple[str, Path]]:
    """Every module under ``path`` (following the symlinked role packages) and its source file."""
    for info in pkgutil.iter_modules([path]):
        target = os.path.join(path, info.name)
        if info.ispkg:
            yield prefix + info.name, Path(target, "__init__.py")
            yield from _modules(target, prefix + info.name + ".")
        else:
            yield prefix + info.name, Path(target + ".py")


MODULES = dict(_modules(ldpstream.__path__[0], "ldpstream."))


def _module_docstring(name: str) -> str | None:
    return ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8")), clean=False)


def test_the_walk_reaches_the_role_packages() -> None:
    for name in ("ldpstream.estimators.detection", "ldpstream.consumers.fold", "ldpstream.decoder.service",
                 "ldpstream.producers.client", "ldpstream.operations.serve"):
        assert name in MODULES


def test_listed_modules_exist() -> None:
    assert MODULES.keys() >= FORMAT_CONTRACTS | NOT_YET_SHORT


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_docstring_is_short(name: str) -> None:
    doc = _module_docstring(name)
    assert doc, f"{name} has no module docstring"
    lines = len(doc.splitlines())
    if name in FORMAT_CONTRACTS:
        return
    if name in NOT_YET_SHORT:
        assert lines > MAX_MODULE_DOCSTRING_LINES, (
            f"{name}'s docstring is {lines} lines: take it off NOT_YET_SHORT")
        return
    assert lines <= MAX_MODULE_DOCSTRING_LINES, (
        f"{name}'s module docstring is {lines} lines (at most {MAX_MODULE_DOCSTRING_LINES}): keep the contract "
        "and a link into docs/, move the reasons and measurements there")


def _docstrings(tree: ast.Module) -> Iterator[tuple[str, str]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "name", "<module>"), doc


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(NO_HISTORY_PREFIXES)))
def test_no_docstring_narrates_history(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = [f"{where}: {match.group(0)!r}" for where, doc in _docstrings(tree)
             for match in HISTORY_WORDING.finditer(doc)]
    assert not found, f"{name}: docstrings state what a thing does, not its history: {found}"


def _github_anchors(markdown: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (lower case, punctuation dropped, spaces to
    hyphens, ``-1``, ``-2``, ... for repeats), fenced code skipped."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            repeat = seen.get(slug, 0)
            seen[slug] = repeat + 1
            anchors.add(slug if repeat == 0 else f"{slug}-{repeat}")
    return anchors


def test_docs_links_in_docstrings_point_to_headings() -> None:
    anchors: dict[str, set[str]] = {}
    broken = []
    for name, path in sorted(MODULES.items()):
        for where, doc in _docstrings(ast.parse(path.read_text(encoding="utf-8"))):
            for link in DOCS_LINK.finditer(doc):
                target = REPO / link.group(1)
                if link.group(1) not in anchors:
                    anchors[link.group(1)] = _github_anchors(target) if target.is_file() else set()
                if link.group(2) not in anchors[link.group(1)]:
                    broken.append(f"{name}.{where}: {link.group(0)}")
    assert not broken, f"links to headings that do not exist: {broken}"


def test_github_anchors() -> None:
    assert "detection-which-candidates-are-there" in _github_anchors(REPO / "docs/math/estimators.md")
    assert "decoding-decodediscover" in _github_anchors(REPO / "docs/math/dictionary.md")
