"""The consumer group: Kafka report batches folded into per-cohort count sketches, exactly once.

:func:`~ldpstream.consumers.fold.fold_messages` is the pure fold (validation, dead-letter reasons, time
buckets); :class:`~ldpstream.consumers.worker.SketchConsumer` is a group member that applies each partition
batch to a :class:`~ldpstream.store.SketchStore` with its next offset, as one compare-and-set.
"""

from ldpstream.consumers.fold import REJECTION_REASONS, FoldResult, Rejection, fold_messages
from ldpstream.consumers.metrics import ConsumerMetrics
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer

__all__ = [
    "REJECTION_REASONS",
    "ConsumerMetrics",
    "ConsumerSettings",
    "FoldResult",
    "Rejection",
    "SketchConsumer",
    "fold_messages",
]
