"""The logging of every long-running command: ``--log-level``, ``--log-format text|json`` and the start line.

``json`` writes one object a line on standard error, with ``time`` (UTC, ISO 8601), ``level``, ``logger``,
``message``, the record's extra fields (the start line's ``event``, ``version``, ``config``, ...; a decoder
pass's ``decoded``, ``failed``, ``seconds``, ...) and ``exception`` (its traceback) when there is one. ``text``
writes ``TIME LEVEL LOGGER: MESSAGE``. Neither shows a password: the start line names where the configuration
came from (file, environment variables, flags: names, never values) and the Redis URL without its password.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Mapping
from typing import Any

from ldpstream import __version__
from ldpstream.config import SECURITY_FLAGS, ServiceConfig

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: The environment variables :meth:`ServiceConfig.load` reads (named in the start line when set; values never).
CONFIG_VARIABLES = (
    "LDPSTREAM_KAFKA", "LDPSTREAM_KAFKA_CONFIG", "LDPSTREAM_REDIS", "LDPSTREAM_PREFIX", "LDPSTREAM_REGISTRY",
    "LDPSTREAM_KAFKA_SECURITY", "LDPSTREAM_KAFKA_SASL_MECHANISM", "LDPSTREAM_KAFKA_USER", "LDPSTREAM_KAFKA_PASSWORD",
    "LDPSTREAM_KAFKA_PASSWORD_FILE", "LDPSTREAM_KAFKA_CA", "LDPSTREAM_KAFKA_CERT", "LDPSTREAM_KAFKA_KEY",
    "LDPSTREAM_REDIS_USER", "LDPSTREAM_REDIS_PASSWORD", "LDPSTREAM_REDIS_PASSWORD_FILE", "LDPSTREAM_REDIS_CA",
    "LDPSTREAM_REDIS_CERT", "LDPSTREAM_REDIS_KEY", "LDPSTREAM_STACK_KAFKA_PORT", "LDPSTREAM_STACK_REDIS_PORT",
)
#: The service flags :meth:`ServiceConfig.from_args` reads.
CONFIG_FLAGS = ("kafka", "kafka_config", "consumer_config", "redis", "prefix", "registry", *SECURITY_FLAGS)

#: The attributes every LogRecord has: anything else on a record came from ``extra=`` and goes to the JSON.
_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def add_log_arguments(parser: argparse.ArgumentParser, level: str = "info") -> None:
    """``--log-level`` (default ``level``) and ``--log-format`` (default text); :func:`configure_from_args`
    applies them."""
    parser.add_argument("--log-level", choices=LEVELS, type=str.lower, default=level,
                        help=f"least severe level logged (default {level}; warning hides the start line)")
    parser.add_argument("--log-format", choices=FORMATS, default="text",
                        help="text (default) or json: one object a line with time, level, logger, message and "
                        "the record's fields")


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the record's extra fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (tests replace it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


_handler: logging.Handler | None = None


def configure(level: str = "info", fmt: str = "text") -> None:
    """Log records of ``level`` and above to standard error in ``fmt`` (``text`` or ``json``). Replaces the
    handler an earlier call installed; handlers installed by others (a test runner's) stay."""
    global _handler
    if level not in LEVELS or fmt not in FORMATS:
        raise ValueError(f"log level {level!r} / format {fmt!r}: expected one of {LEVELS} / {FORMATS}")
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(level.upper())
    _handler = handler


def configure_from_args(args: argparse.Namespace) -> None:
    """:func:`configure` with the flags of :func:`add_log_arguments`."""
    configure(getattr(args, "log_level", "info"), getattr(args, "log_format", "text"))


def config_source(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str:
    """Where the service configuration came from, in :meth:`ServiceConfig.load`'s order of precedence: the
    flags given, the environment variables set, the configuration file, else the defaults (names only)."""
    env = os.environ if environ is None else environ
    parts = []
    flags = [f"--{name.replace('_', '-')}" for name in CONFIG_FLAGS if getattr(args, name, None) not in (None, [], ())]
    if flags:
        parts.append(f"flags ({', '.join(flags)})")
    variables = [name for name in CONFIG_VARIABLES if env.get(name)]
    if variables:
        parts.append(f"environment ({', '.join(variables)})")
    path = getattr(args, "config", None) or env.get("LDPSTREAM_CONFIG")
    if path:
        parts.append(f"file {path}")
    return " + ".join(parts) + " + defaults" if parts else "defaults (the local stack)"


def log_start(logger: logging.Logger, command: str, args: argparse.Namespace, config: ServiceConfig | None,
              serves: Mapping[str, Any], *, kafka: bool = True) -> None:
    """The INFO line a long-running command logs once started: its version, where its configuration came from,
    the Kafka (unless ``kafka`` is false) and Redis it uses (the URL without its password) and ``serves``
    (field → value, shown in order; also fields of the JSON record)."""
    fields: dict[str, Any] = {"event": "start", "command": command, "version": __version__,
                              "python": platform.python_version(), "config": config_source(args)}
    if config is not None:
        if kafka:
            fields["kafka"] = config.kafka.bootstrap
        fields.update(redis=config.redis.safe_url, prefix=config.redis.prefix, registry=config.registry)
    shown = {k: v for k, v in fields.items() if k not in ("event", "command", "version", "python", "config")}
    shown.update(serves)
    logger.info("ldpstream %s %s started; configuration from %s; %s", command, __version__, fields["config"],
                ", ".join(f"{k} {v}" for k, v in shown.items()), extra={**fields, **serves})
