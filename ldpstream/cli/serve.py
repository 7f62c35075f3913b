"""``ldpstream serve``: the live web view of the published estimates and its JSON API
(ldpstream.operations.serve)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from ldpstream.config import ServiceConfig, add_service_arguments, check_private
from ldpstream.errors import ParameterError
from ldpstream.logs import add_log_arguments, configure_from_args, log_start

#: The limits of ldpstream.operations.serve (repeated here: the command's help needs them without importing it).
MIN_TOKEN_BYTES = 16
MAX_CONNECTIONS = 64
HEAD_TIMEOUT = 10.0
IDLE_TIMEOUT = 10.0
STALE_INTERVALS = 3

#: The environment variable that may hold the bearer token (never a command-line flag: other users of the
#: machine can read a process's arguments).
TOKEN_ENV = "LDPSTREAM_SERVE_TOKEN"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser(
        "serve", allow_abbrev=False,
        help="live web view of the estimates (bars with intervals, joint heat maps) and a JSON API",
        description="Serves a page that updates every second (per metric: the estimates with their 95% "
        "intervals, and the truth when a simulation published it; per association: the joint table as a heat "
        "map with the independence test; the ingest rate and the lag) and its JSON API: /api/estimates, "
        "/api/metrics/NAME, /api/status. Binds 127.0.0.1 unless --addr says otherwise. With a bearer token "
        f"(--token-file FILE or ${TOKEN_ENV}, at least {MIN_TOKEN_BYTES} bytes) the API asks for it; open the page "
        "as http://HOST:PORT/#token=... /healthz (alive) and /readyz (Redis and Kafka answer: 200, else 503) "
        f"need no token. At most {MAX_CONNECTIONS} connections are served at once; a request head must arrive "
        f"within {HEAD_TIMEOUT:g} s and an idle keep-alive connection is closed after {IDLE_TIMEOUT:g} s.")
    add_service_arguments(serve)
    serve.add_argument("--addr", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free port)")
    serve.add_argument("--token-file", type=Path, default=None, metavar="FILE",
                       help="file holding the bearer token the API requires; others may not read it (chmod "
                       f"o-rwx) (default: ${TOKEN_ENV}, else none)")
    serve.add_argument("--decode-interval", type=float, default=10.0, metavar="SECONDS",
                       help="the decoder's --interval: the page calls the estimates stale when the last decode is "
                       f"older than {STALE_INTERVALS} of them (default 10, decode's default)")
    add_log_arguments(serve)
    serve.set_defaults(func=run)


def read_token(token_file: Path | None) -> str | None:
    """The bearer token: the file's content (stripped), else ``$LDPSTREAM_SERVE_TOKEN``, else None. A file
    that others may read (``ConfigError``), and a token under ``MIN_TOKEN_BYTES`` bytes (``ParameterError``)
    are refused."""
    if token_file is not None:
        check_private(token_file, "serve token")
        token = token_file.read_text(encoding="utf-8").strip()
        if not token:
            raise ParameterError(f"{token_file}: the token file is empty")
        source = str(token_file)
    else:
        token = os.environ.get(TOKEN_ENV, "")
        if not token:
            return None
        source = f"${TOKEN_ENV}"
    if len(token.encode()) < MIN_TOKEN_BYTES:
        raise ParameterError(f"{source}: the bearer token has {len(token.encode())} bytes, it needs at least "
                             f"{MIN_TOKEN_BYTES} (make one: python -c 'import secrets; "
                             "print(secrets.token_urlsafe(32))')")
    return token


def run(args: argparse.Namespace) -> int:
    from ldpstream.operations.serve import LiveView, make_server, serve_in_thread, url_of
    from ldpstream.registry import Registry

    if not 0 <= args.port <= 65535:
        raise ParameterError(f"--port must be in 0..65535, got {args.port}")
    if not args.decode_interval > 0:
        raise ParameterError(f"--decode-interval must be positive, got {args.decode_interval}")
    configure_from_args(args)
    token = read_token(args.token_file)
    config = ServiceConfig.from_args(args)
    view = LiveView(Registry.load(config.registry), config.redis.store(), config.kafka,
                    decode_interval=args.decode_interval)
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
