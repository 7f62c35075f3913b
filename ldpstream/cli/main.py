"""The ``ldpstream`` console command.

Each subcommand lives in the module that owns its concept and exposes
``register(subparsers) -> None``, which adds its parser and sets ``func`` (a callable taking the parsed
``argparse.Namespace`` and returning an exit code). Modules are imported only when listed here, so
``ldpstream --help`` stays fast: heavy imports happen inside each command's ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ldpstream import __version__
from ldpstream.errors import LdpStreamError

#: Modules that contribute subcommands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "ldpstream.cli.demo",
    "ldpstream.cli.produce",
    "ldpstream.cli.consume",
    "ldpstream.cli.decode",
    "ldpstream.cli.status",
    "ldpstream.cli.serve",
    "ldpstream.cli.dlq",
    "ldpstream.cli.report",
    "ldpstream.cli.stack",
    "ldpstream.cli.simulate",
    "ldpstream.cli.discover",
    "ldpstream.cli.rappor",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ldpstream",
        description="Collect statistics under local differential privacy: privatized reports flow from "
        "clients through Kafka into count sketches in Redis, and a decoder publishes estimates.",
    )
    parser.add_argument("--version", action="version", version=f"ldpstream {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # answered before the subcommands' modules are imported
        print(f"ldpstream {__version__}")
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = describe_error(exc)
        if message is None or os.environ.get("LDPSTREAM_DEBUG"):
            raise
        print(f"ldpstream {args.command}: error: {message}", file=sys.stderr)
        return 1


def describe_error(exc: BaseException) -> str | None:
    """One line naming what went wrong, for the errors a user can cause or meet (bad input, a file that is
    not one, a service that does not answer); None for anything else (a bug: its traceback is shown).
    ``LDPSTREAM_DEBUG=1`` shows the traceback in every case."""
    if isinstance(exc, LdpStreamError):
        return str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return f"an input file is not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or exc}: {exc.filename}"
    module = type(exc).__module__.split(".")[0]
    if module == "redis":
        return f"Redis: {exc}"
    if module in ("confluent_kafka", "cimpl"):
        return f"Kafka: {exc}"
    if isinstance(exc, OSError | MemoryError):
        return f"{type(exc).__name__}: {exc}"
    return None
