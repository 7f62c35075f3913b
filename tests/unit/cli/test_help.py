"""Every subcommand's ``--help`` is plain text (no reStructuredText markup, no doubled ``%``) and every option
whose default is something (not None, False or empty) says it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from ldpstream.cli.main import build_parser


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(build_parser()))


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "ldpstream")
def test_help_is_plain_and_shows_every_default(path):
    parser = COMMANDS[path]
    text = parser.format_help()
    for markup in ("``", ":mod:", ":func:", ":class:", ":meth:", "%%"):
        assert markup not in text, f"{' '.join(path)} --help shows {markup!r}"
    formatter = parser._get_formatter()
    for action in parser._actions:
        default = action.default
        if (not action.option_strings or action.help is argparse.SUPPRESS or default in (None, False, [], ())
                or default is argparse.SUPPRESS or isinstance(action, argparse._HelpAction | argparse._VersionAction)):
            continue
        assert action.help, f"{' '.join(path)} {action.option_strings[0]} has no help line to show its default"
        shown = formatter._expand_help(action)
        assert "default" in shown.lower(), f"{' '.join(path)} {action.option_strings[0]}: {shown!r}"


def test_discover_help_does_not_call_simulate_required():
    text = COMMANDS[("discover",)].format_help()
    assert "required for now" not in text and "--reports" in text
