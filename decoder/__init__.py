"""The periodic decoder: snapshots of the sketches in, estimates out (the store, a Kafka topic, Prometheus).

:class:`~ldpstream.decoder.service.DecoderService` runs the passes; :mod:`~ldpstream.decoder.published`
defines what one published estimate holds; :mod:`~ldpstream.decoder.watch` is the terminal view.
"""

from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.published import (
    PublishedEstimate,
    PublishedJoint,
    decode_sketch,
    decode_window,
    window_buckets,
)
from ldpstream.decoder.service import DEFAULT_ESTIMATES_TOPIC, DecoderService
from ldpstream.decoder.watch import render, render_joint, watch

__all__ = [
    "DEFAULT_ESTIMATES_TOPIC",
    "DecoderMetrics",
    "DecoderService",
    "PublishedEstimate",
    "PublishedJoint",
    "decode_sketch",
    "decode_window",
    "render",
    "render_joint",
    "watch",
    "window_buckets",
]
