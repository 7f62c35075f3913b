"""Where consumers keep count sketches with their Kafka offsets, exactly once, and where the decoder
publishes estimates: the contract (:mod:`.contract`), the key schema (:mod:`.keys`), Redis
(:mod:`.redis_store`) and the in-memory twin (:mod:`.memory_store`); beside it, a simulation's truth
(:mod:`.truth`), which both stores also keep."""

from ldpstream.store.contract import (
    ALL_TIME,
    ApplyResult,
    EstimateStore,
    MetricSnapshot,
    PartitionBatch,
    SketchKey,
    SketchStore,
    StatusStore,
    sum_buckets,
)
from ldpstream.store.memory_store import InMemorySketchStore
from ldpstream.store.redis_store import APPLY_SCRIPT, RedisSketchStore
from ldpstream.store.truth import TruthStore

__all__ = [
    "ALL_TIME",
    "APPLY_SCRIPT",
    "ApplyResult",
    "EstimateStore",
    "InMemorySketchStore",
    "MetricSnapshot",
    "PartitionBatch",
    "RedisSketchStore",
    "SketchKey",
    "SketchStore",
    "StatusStore",
    "TruthStore",
    "sum_buckets",
]
