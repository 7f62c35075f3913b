"""Where the services are, for every command: flags first, then the environment, then the local stack.

=====================  ==========================================  ===============================
environment variable   meaning                                     default
=====================  ==========================================  ===============================
``LDPSTREAM_KAFKA``    Kafka bootstrap servers                     the local stack's broker
``LDPSTREAM_REDIS``    Redis URL                                   the local stack's Redis
``LDPSTREAM_REGISTRY`` metric registry file                        ``metrics.toml``
``LDPSTREAM_PREFIX``   key prefix of everything in Redis           ``ldp``
=====================  ==========================================  ===============================
"""

from __future__ import annotations

import argparse
import os

from deploy.stack import StackConfig

DEFAULT_PREFIX = "ldp"


def kafka_bootstrap() -> str:
    return os.environ.get("LDPSTREAM_KAFKA") or StackConfig.from_env().kafka_bootstrap


def redis_url() -> str:
    return os.environ.get("LDPSTREAM_REDIS") or StackConfig.from_env().redis_url


def registry_path() -> str:
    return os.environ.get("LDPSTREAM_REGISTRY", "metrics.toml")


def key_prefix() -> str:
    return os.environ.get("LDPSTREAM_PREFIX", DEFAULT_PREFIX)


def add_service_arguments(parser: argparse.ArgumentParser, *, kafka: bool = True, redis: bool = True,
                          registry: bool = True) -> None:
    """The flags every service command shares; defaults resolve when the command runs."""
    if kafka:
        parser.add_argument("--kafka", metavar="BOOTSTRAP", default=None,
                            help="Kafka bootstrap servers (default: $LDPSTREAM_KAFKA, else the local stack)")
    if redis:
        parser.add_argument("--redis", metavar="URL", default=None,
                            help="Redis URL (default: $LDPSTREAM_REDIS, else the local stack)")
        parser.add_argument("--prefix", default=None, help="key prefix in Redis (default: $LDPSTREAM_PREFIX or ldp)")
    if registry:
        parser.add_argument("--registry", metavar="FILE", default=None,
                            help="metric registry TOML (default: $LDPSTREAM_REGISTRY or metrics.toml)")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the shared flags' defaults in place and return ``args``."""
    if hasattr(args, "kafka") and args.kafka is None:
        args.kafka = kafka_bootstrap()
    if hasattr(args, "redis") and args.redis is None:
        args.redis = redis_url()
    if hasattr(args, "prefix") and args.prefix is None:
        args.prefix = key_prefix()
    if hasattr(args, "registry") and args.registry is None:
        args.registry = registry_path()
    return args
