"""A client application that reports values under local differential privacy with the ldpstream SDK.

Each value is privatized on the device (only the noisy report leaves it) and published to Kafka::

    python examples/client_app.py --kafka 127.0.0.1:39092 --topic ldp-reports --count 1000

Kafka's address comes from ``--kafka``, else ``$LDPSTREAM_KAFKA``, else the local stack (``ldpstream stack up``).
It prints one JSON line: how many reports Kafka acknowledged.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import tempfile
from pathlib import Path

from ldpstream.config import ServiceConfig, add_service_arguments
from ldpstream.producers import LdpClient, ReportPublisher
from ldpstream.registry import Registry

LANGUAGES = ["en", "es", "zh", "hi", "ar", "pt", "bn", "ru"]


def app_registry(topic: str) -> Registry:
    """The metrics this app reports. A real deployment shares one registry file with its consumers and
    decoder: ``Registry.load("metrics.toml")``."""
    return Registry.from_dict({"defaults": {"topic": topic, "windows": ["all", "1h"]}, "metrics": {
        "app_language": {"id": 1, "mechanism": "krr", "k": len(LANGUAGES), "epsilon": 2.0, "labels": LANGUAGES},
    }})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_service_arguments(parser, redis=False, registry=False)
    parser.add_argument("--topic", default="ldp-reports", help="Kafka topic of reports (default: ldp-reports)")
    parser.add_argument("--count", type=int, default=1000, help="reports to send (one per simulated user)")
    parser.add_argument("--secret-file", type=Path, default=Path(tempfile.gettempdir()) / "ldpstream-example-secret",
                        help="the device secret, created on first use; keep it for the device's life")
    parser.add_argument("--seed", type=int, default=None, help="seed of the simulated users' true values")
    args = parser.parse_args(argv)
    config = ServiceConfig.from_args(args)

    registry = app_registry(args.topic)
    publisher = ReportPublisher(config.kafka, delivery_timeout=20.0)
    # This device: its secret persists in a file (its cohorts and memoized responses depend on it).
    device = LdpClient(registry, publisher, secret_file=args.secret_file)
    device.report("app_language", LANGUAGES[0])
    # The other simulated users, each a device of its own (an in-memory secret stands in for each one's
    # file), sharing this process's Kafka producer. Most speak the first languages; every report is
    # randomized before it leaves its device.
    users = random.Random(args.seed)
    for _ in range(args.count - 1):
        language = users.choices(LANGUAGES, weights=range(len(LANGUAGES), 0, -1))[0]
        LdpClient(registry, publisher, secret=secrets.token_bytes(32)).report("app_language", language)
    stats = publisher.flush()  # raises ldpstream.errors.ServiceError if Kafka cannot be reached
    print(json.dumps({"topic": args.topic, "reports": args.count, "acked": stats.records_acked,
                      "errors": stats.errors}))


if __name__ == "__main__":
    main()
