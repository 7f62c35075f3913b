"""``ldpstream serve``: the live web view of the published estimates and its JSON API
(:mod:`ldpstream.deploy.serve`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from ldpstream.config import ServiceConfig, add_service_arguments
from ldpstream.errors import ParameterError
from ldpstream.logs import add_log_arguments, configure_from_args, log_start

#: The environment variable that may hold the bearer token (never a command-line flag: other users of the
#: machine can read a process's arguments).
TOKEN_ENV = "LDPSTREAM_SERVE_TOKEN"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser(
        "serve", allow_abbrev=False,
        help="live web view of the estimates (bars with intervals, joint heat maps) and a JSON API",
        description="Serves a page that updates every second (per metric: the estimates with their 95%% "
        "intervals, and the truth when a simulation published it; per association: the joint table as a heat "
        "map with the independence test; the ingest rate and the lag) and its JSON API: /api/estimates, "
        "/api/metrics/NAME, /api/status. Binds 127.0.0.1 unless --addr says otherwise. With a bearer token "
        f"(--token-file FILE or ${TOKEN_ENV}) the API asks for it; open the page as http://HOST:PORT/#token=...")
    add_service_arguments(serve)
    serve.add_argument("--addr", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free port)")
    serve.add_argument("--token-file", type=Path, default=None,
                       help=f"file holding the bearer token the API requires (default: ${TOKEN_ENV}, else none)")
    add_log_arguments(serve)
    serve.set_defaults(func=run)


def read_token(token_file: Path | None) -> str | None:
    """The bearer token: the file's content (stripped), else ``$LDPSTREAM_SERVE_TOKEN``, else None."""
    if token_file is not None:
        token = token_file.read_text(encoding="utf-8").strip()
        if not token:
            raise ParameterError(f"{token_file}: the token file is empty")
        return token
    return os.environ.get(TOKEN_ENV) or None


def run(args: argparse.Namespace) -> int:
    from ldpstream.deploy.serve import LiveView, make_server, serve_in_thread, url_of
    from ldpstream.registry import Registry

    if not 0 <= args.port <= 65535:
        raise ParameterError(f"--port must be in 0..65535, got {args.port}")
    configure_from_args(args)
    token = read_token(args.token_file)
    config = ServiceConfig.from_args(args)
    view = LiveView(Registry.load(config.registry), config.redis.store(), config.kafka)
    server = make_server(view, args.addr, args.port, token)
    print(f"serving the live view on {url_of(server)}" + (" (API behind a bearer token)" if token else ""),
          flush=True)
    log_start(logging.getLogger("ldpstream.serve"), "serve", args, config,
              {"view": url_of(server), "api_token": "required" if token else "none"})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # a service manager's stop: shut down cleanly
    serve_in_thread(server)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
    return 0
