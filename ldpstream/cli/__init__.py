"""The ``ldpstream`` console command: :mod:`.main` builds the parser, one module per command."""

from ldpstream.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
