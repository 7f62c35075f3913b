"""docs/cli.md's command reference names every command the CLI has (nested ones on their parent's row); the
README's registry example is a valid registry entry, its Tests section has a line for every test tier, it stays a
front door (at most 15 KB) and its links resolve."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

from ldpstream.cli import build_parser
from ldpstream.registry import Registry

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "cli.md"


def _section(title: str, page: Path = README) -> str:
    text = page.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((*prefix, name))
                found.extend(_commands(sub, (*prefix, name)))
    return found


def test_every_command_is_in_the_reference():
    rows = [line for line in _section("Command reference", CLI_DOC).splitlines() if line.startswith("| `ldpstream ")]
    names = [re.match(r"\| `ldpstream ([^`]*)`", row).group(1).replace("\\|", "|").split() for row in rows]
    commands = _commands(build_parser())
    assert len(commands) > 20
    for command in commands:
        # A row whose words spell the command, a nested name possibly among alternatives (``up|down|status``).
        ok = any(len(words) >= len(command) and all(
            part in words[i].split("|") for i, part in enumerate(command)) for words in names)
        has_children = any(c[:len(command)] == command and len(c) > len(command) for c in commands)
        assert ok or has_children, f"`ldpstream {' '.join(command)}` is missing from docs/cli.md's command reference"


def test_the_registry_example_of_adding_a_metric_is_valid():
    block = _section("Adding a metric").split("```toml")[1].split("```")[0]
    table = tomllib.loads("\n".join(line.removeprefix("   ") for line in block.splitlines()))
    registry = Registry.from_dict({"defaults": {"topic": "ldp-reports"}, **table})
    assert registry["checkout_step"].mechanism.k == 12


def test_every_test_tier_is_a_declared_marker_with_a_line_in_the_readme():
    from tests.conftest import TIERS

    declared = {m.split(":")[0] for m in tomllib.loads((README.parent / "pyproject.toml").read_text())[
        "tool"]["pytest"]["ini_options"]["markers"]}
    block = _section("Tests").split("```bash")[1].split("```")[0]
    assert "python -m pytest   " in block  # the default run comes first
    for tier in TIERS:
        assert tier in declared, f"the tier {tier} is not a declared marker"
        assert f"python -m pytest -m {tier} " in block, f"the README's Tests section has no line for {tier}"


def test_the_readme_is_a_front_door_whose_links_resolve():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) <= 15_000
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"the README links to {target}, which does not exist"
