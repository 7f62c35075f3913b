"""Read the decoder's live estimates: the latest one from Redis, and the stream of them from Kafka.

The decoder (``ldpstream decoder``) publishes each metric's estimate per window as JSON to Redis
(``<prefix>:estimate:<metric>:<window>``) and to the Kafka topic of estimates (``ldp-estimates``, key
``<metric>:<window>``)::

    python examples/read_estimates.py --metric app_language --window all

Kafka and Redis come from ``--kafka``/``--redis``/``--prefix``, else ``$LDPSTREAM_KAFKA``/``$LDPSTREAM_REDIS``/
``$LDPSTREAM_PREFIX``, else the local stack. Prints one JSON line per estimate found.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

from confluent_kafka import Consumer

from ldpstream.config import ServiceConfig, add_service_arguments


def summary(source: str, estimate: dict[str, Any], top: int) -> dict[str, Any]:
    values = sorted(estimate["values"], key=lambda v: -v["frequency"])[:top]
    return {"source": source, "metric": estimate["metric"], "window": estimate["window"],
            "n_reports": estimate["n_reports"], "snapshot_time": estimate["snapshot_time"],
            "top": [{"value": v["value"], "frequency": round(v["frequency"], 4)} for v in values]}


def from_redis(config: ServiceConfig, metrics: list[str], windows: list[str], top: int) -> list[dict[str, Any]]:
    """The latest estimate of each metric and window, as stored in Redis."""
    store = config.redis.store()
    found = []
    for metric in metrics:
        for window in windows:
            estimate = store.latest_estimate(metric, window)
            if estimate is not None:
                found.append(summary("redis", estimate, top))
    return found


def from_kafka(config: ServiceConfig, topic: str, metrics: list[str], windows: list[str], top: int,
               idle: float) -> list[dict[str, Any]]:
    """The last record of each metric and window on the estimates topic, read from its beginning until no
    record arrived for ``idle`` seconds. A ``{"retracted": true}`` record means the window has no estimate."""
    consumer = Consumer(config.kafka.consumer(f"read-estimates-{uuid.uuid4().hex[:8]}", **{
        "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    consumer.subscribe([topic])
    latest: dict[str, dict[str, Any]] = {}
    last_record = time.monotonic()
    try:
        while time.monotonic() - last_record < idle:
            for message in consumer.consume(100, 0.2):
                if message.error() is not None:
                    continue
                last_record = time.monotonic()
                latest[message.key().decode()] = json.loads(message.value())
    finally:
        consumer.close()
    found = []
    for metric in metrics:
        for window in windows:
            record = latest.get(f"{metric}:{window}")
            if record is not None and not record.get("retracted"):
                found.append(summary("kafka", record, top))
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_service_arguments(parser, registry=False)
    parser.add_argument("--metric", action="append", required=True, help="metric name; repeatable")
    parser.add_argument("--window", action="append", help="window name (default: all); repeatable")
    parser.add_argument("--estimates-topic", default="ldp-estimates", help="default: ldp-estimates")
    parser.add_argument("--top", type=int, default=3, help="values shown per estimate (default: 3)")
    parser.add_argument("--idle", type=float, default=3.0,
                        help="stop reading Kafka after this many seconds without a record (default: 3)")
    args = parser.parse_args(argv)
    config = ServiceConfig.from_args(args)
    windows = args.window or ["all"]
    for line in from_redis(config, args.metric, windows, args.top):
        print(json.dumps(line))
    for line in from_kafka(config, args.estimates_topic, args.metric, windows, args.top, args.idle):
        print(json.dumps(line))


if __name__ == "__main__":
    main()
