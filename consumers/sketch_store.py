"""Count sketches with their Kafka offsets: the consumer's exactly-once state, in Redis (or in memory).

Layout in Redis (``P`` is the key prefix, ``T`` the topic, ``N`` the partition; everything one consumer
batch touches carries the hash tag ``{T:N}``, so one script call stays in one slot on Redis Cluster)::

    P:{T:N}:offset                          string  next Kafka offset of partition N to apply
    P:{T:N}:stats                           hash    reports_applied, applied:<metric>, rejected:<reason>
    P:{T:N}:sk:<metric>:<fp>:<bucket>       string  the (C, W) count sketch of reports from partition N
                                                    with config fingerprint fp (8 hex digits) in time
                                                    bucket <bucket> (= event time // bucket_seconds), as
                                                    C·W signed 64-bit big-endian counters (BITFIELD i64),
                                                    cohort-major; missing trailing cells read as 0. With a
                                                    metric ``retention``, it expires that long after the
                                                    bucket's end.
    P:{T:N}:sk:<metric>:<fp>:all            string  the same for every report ever (the all-time rollup,
                                                    updated in the same call; never expires)
    P:index:<metric>:<fp>                   set     every sketch key of the metric (the decoder's index)

A consumer applies one Kafka partition batch with one Lua script call (:data:`APPLY_SCRIPT`), a
compare-and-set: the batch carries the next offset the consumer believes Redis holds for the partition (read
at assignment, then the one its own last batch stored). If Redis holds anything else, someone else applied
batches since (a rebalance, a fenced consumer, a replay) or Redis rolled back (a restart that lost its last
writes), and the call is refused whole, returning what Redis holds, from where the consumer re-reads.
Otherwise every counter increment, the stats and the new next offset are written together. Redis runs a
script atomically, so counts and offsets never disagree; that is the exactly-once guarantee (see the
README). The decoder sums a metric's sketches over partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

#: KEYS[1] offset key, KEYS[2] stats hash, KEYS[3..] sketch keys.
#: ARGV[1] the next offset the consumer expects Redis to hold ('' for none), ARGV[2] the next offset after
#: the batch, ARGV[3] number of stats pairs S, then S (field, increment) pairs, then for each sketch key:
#: cell count M, expiry (Unix seconds, 0 for none) and M (cell, increment) pairs.
#: Returns {1, new next offset} or {0, stored next offset or ''}.
APPLY_SCRIPT = """
local stored = redis.call('GET', KEYS[1]) or ''
if stored ~= ARGV[1] then
  return {0, stored}
end
local a = 4
local nstats = tonumber(ARGV[3])
for s = 1, nstats do
  redis.call('HINCRBY', KEYS[2], ARGV[a], ARGV[a + 1])
  a = a + 2
end
for i = 3, #KEYS do
  local cells = tonumber(ARGV[a])
  local expire_at = tonumber(ARGV[a + 1])
  a = a + 2
  local done = 0
  while done < cells do
    local chunk = math.min(cells - done, 1000)
    local args = {}
    for c = 1, chunk do
      args[#args + 1] = 'INCRBY'
      args[#args + 1] = 'i64'
      args[#args + 1] = '#' .. ARGV[a]
      args[#args + 1] = ARGV[a + 1]
      a = a + 2
    end
    redis.call('BITFIELD', KEYS[i], unpack(args))
    done = done + chunk
  end
  if expire_at > 0 then
    redis.call('EXPIREAT', KEYS[i], expire_at)
  end
end
redis.call('SET', KEYS[1], ARGV[2])
return {1, ARGV[2]}
"""


#: The bucket number of the all-time rollup sketch (real buckets are ≥ 0).
ALL_TIME = -1


@dataclass(frozen=True)
class SketchKey:
    """Which sketch an increment goes to (``bucket`` = :data:`ALL_TIME` for the all-time rollup)."""

    metric: str
    fingerprint: int
    bucket: int


@dataclass
class PartitionBatch:
    """Everything one Kafka partition batch changes: sketch increments, stats, and its offsets."""

    topic: str
    partition: int
    #: The partition's next offset the consumer expects the store to hold (None: nothing stored yet).
    expected_offset: int | None
    #: The next offset after the batch's last message.
    next_offset: int
    increments: dict[SketchKey, np.ndarray] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    #: Unix time at which a sketch key expires (keys absent here never do).
    expire_at: dict[SketchKey, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ApplyResult:
    applied: bool
    #: The partition's next offset after the call: ``batch.next_offset`` when applied; what the store holds
    #: (where the consumer must seek; None: nothing, start from the beginning) when refused.
    next_offset: int | None


@dataclass(frozen=True)
class MetricSnapshot:
    """All sketches of one metric and fingerprint, read at one instant: bucket → summed (C, W) counts, and
    the all-time rollup (None where no consumer has written one)."""

    buckets: dict[int, np.ndarray]
    total: np.ndarray | None = None

    def all_time(self, shape: tuple[int, int]) -> np.ndarray:
        """Every report ever: the rollup, or the sum of the buckets where there is none."""
        return self.total if self.total is not None else sum_buckets(self, None, shape)


class SketchStore(Protocol):
    def apply(self, batch: PartitionBatch) -> ApplyResult: ...

    def next_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int | None]: ...

    def snapshot(self, metric: str, fingerprint: int, shape: tuple[int, int],
                 expired_before: int | None = None) -> MetricSnapshot: ...

    def stats(self, topic: str, partitions: Iterable[int]) -> dict[str, int]: ...


def _tag(prefix: str, topic: str, partition: int) -> str:
    return f"{prefix}:{{{topic}:{partition}}}"


def sketch_key(prefix: str, topic: str, partition: int, key: SketchKey) -> str:
    bucket = "all" if key.bucket == ALL_TIME else str(key.bucket)
    return f"{_tag(prefix, topic, partition)}:sk:{key.metric}:{key.fingerprint:08x}:{bucket}"


def index_key(prefix: str, metric: str, fingerprint: int) -> str:
    return f"{prefix}:index:{metric}:{fingerprint:08x}"


def _bucket_of(key: str) -> int:
    suffix = key.rsplit(":", 1)[1]
    return ALL_TIME if suffix == "all" else int(suffix)


class RedisSketchStore:
    """:class:`SketchStore` on Redis (standalone; the key layout also fits Redis Cluster)."""

    def __init__(self, client: object, prefix: str = "ldp") -> None:
        import redis

        if not isinstance(client, redis.Redis):
            raise TypeError("RedisSketchStore needs a redis.Redis client")
        self._redis = client
        self.prefix = prefix
        self._apply = client.register_script(APPLY_SCRIPT)

    @classmethod
    def from_url(cls, url: str, prefix: str = "ldp") -> RedisSketchStore:
        import redis

        return cls(redis.Redis.from_url(url), prefix)

    @property
    def client(self) -> object:
        return self._redis

    def apply(self, batch: PartitionBatch) -> ApplyResult:
        tag = _tag(self.prefix, batch.topic, batch.partition)
        keys = [f"{tag}:offset", f"{tag}:stats"]
        expected = "" if batch.expected_offset is None else str(batch.expected_offset)
        args: list[int | str] = [expected, batch.next_offset, len(batch.stats)]
        for name, value in batch.stats.items():
            args += [name, int(value)]
        new_index: dict[str, list[str]] = {}
        for key, counts in batch.increments.items():
            flat = np.asarray(counts, dtype=np.int64).reshape(-1)
            cells = np.flatnonzero(flat)
            if cells.size == 0:
                continue
            name = sketch_key(self.prefix, batch.topic, batch.partition, key)
            keys.append(name)
            new_index.setdefault(index_key(self.prefix, key.metric, key.fingerprint), []).append(name)
            pairs = np.empty(2 * cells.size, dtype=np.int64)
            pairs[0::2] = cells
            pairs[1::2] = flat[cells]
            args += [int(cells.size), int(batch.expire_at.get(key, 0))]
            args.extend(pairs.tolist())
        if new_index:
            # The index is idempotent and written first: a sketch key is always findable once it exists.
            pipe = self._redis.pipeline(transaction=False)
            for index, members in new_index.items():
                pipe.sadd(index, *members)
            pipe.execute()
        applied, next_offset = self._apply(keys=keys, args=args)
        return ApplyResult(bool(applied), int(next_offset) if next_offset not in (b"", "") else None)

    def next_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int | None]:
        partitions = list(partitions)
        values = self._redis.mget([f"{_tag(self.prefix, topic, p)}:offset" for p in partitions]) if partitions else []
        return {p: (int(v) if v is not None else None) for p, v in zip(partitions, values, strict=True)}

    def snapshot(self, metric: str, fingerprint: int, shape: tuple[int, int],
                 expired_before: int | None = None) -> MetricSnapshot:
        """``expired_before``: buckets below it have expired; their index entries are removed."""
        index = index_key(self.prefix, metric, fingerprint)
        keys, raws = self._read_indexed(index)
        if expired_before is not None:
            gone = [k for k in keys if 0 <= _bucket_of(k) < expired_before]
            if gone:
                self._redis.srem(index, *gone)
        size = shape[0] * shape[1]
        buckets: dict[int, np.ndarray] = {}
        total: np.ndarray | None = None
        for key, raw in zip(keys, raws, strict=True):
            if raw is None:
                continue
            cells = np.frombuffer(raw, dtype=">i8")[:size]
            counts = np.zeros(size, dtype=np.int64)
            counts[: cells.size] = cells
            bucket = _bucket_of(key)
            if bucket == ALL_TIME:
                total = counts.reshape(shape) if total is None else total + counts.reshape(shape)
            elif expired_before is None or bucket >= expired_before:
                buckets[bucket] = buckets.get(bucket, 0) + counts.reshape(shape)
        return MetricSnapshot(buckets, total)

    def _read_indexed(self, index: str) -> tuple[list[str], list[bytes | None]]:
        """Every key listed in ``index`` and its value, as of one instant.

        The index is WATCHed while it is read and the values are read in one MULTI/EXEC: a consumer batch
        that adds a new sketch key in between (it SADDs the index before applying) aborts the EXEC, and the
        read starts over, so a batch is never seen half applied.
        """
        import redis

        with self._redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(index)
                    keys = sorted(k.decode() if isinstance(k, bytes) else k for k in pipe.smembers(index))
                    pipe.multi()
                    for key in keys:
                        pipe.get(key)
                    return keys, pipe.execute() if keys else []
                except redis.WatchError:
                    continue

    def stats(self, topic: str, partitions: Iterable[int]) -> dict[str, int]:
        total: dict[str, int] = {}
        pipe = self._redis.pipeline(transaction=False)
        partitions = list(partitions)
        for p in partitions:
            pipe.hgetall(f"{_tag(self.prefix, topic, p)}:stats")
        for entry in pipe.execute():
            for name, value in entry.items():
                name = name.decode() if isinstance(name, bytes) else name
                total[name] = total.get(name, 0) + int(value)
        return total


class InMemorySketchStore:
    """The same contract in process memory: the twin unit tests use instead of Redis."""

    def __init__(self) -> None:
        self._offsets: dict[tuple[str, int], int] = {}
        self._stats: dict[tuple[str, int], dict[str, int]] = {}
        self._sketches: dict[tuple[str, int], dict[int, np.ndarray]] = {}

    def apply(self, batch: PartitionBatch) -> ApplyResult:
        where = (batch.topic, batch.partition)
        stored = self._offsets.get(where)
        if stored != batch.expected_offset:
            return ApplyResult(False, stored)
        stats = self._stats.setdefault(where, {})
        for name, value in batch.stats.items():
            stats[name] = stats.get(name, 0) + int(value)
        for key, counts in batch.increments.items():
            per_bucket = self._sketches.setdefault((key.metric, key.fingerprint), {})
            current = per_bucket.get(key.bucket)
            per_bucket[key.bucket] = counts.astype(np.int64) if current is None else current + counts
        self._offsets[where] = batch.next_offset
        return ApplyResult(True, batch.next_offset)

    def next_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int | None]:
        return {p: self._offsets.get((topic, p)) for p in partitions}

    def snapshot(self, metric: str, fingerprint: int, shape: tuple[int, int],
                 expired_before: int | None = None) -> MetricSnapshot:
        stored = self._sketches.get((metric, fingerprint), {})
        buckets = {b: c.reshape(shape).copy() for b, c in stored.items()
                   if b != ALL_TIME and (expired_before is None or b >= expired_before)}
        total = stored.get(ALL_TIME)
        return MetricSnapshot(buckets, None if total is None else total.reshape(shape).copy())

    def stats(self, topic: str, partitions: Iterable[int]) -> dict[str, int]:
        total: dict[str, int] = {}
        for p in partitions:
            for name, value in self._stats.get((topic, p), {}).items():
                total[name] = total.get(name, 0) + value
        return total


def sum_buckets(snapshot: MetricSnapshot, buckets: Iterable[int] | None = None,
                shape: tuple[int, int] | None = None) -> np.ndarray:
    """Sum the sketches of the given buckets (all when None); sketches are additive."""
    chosen: Mapping[int, np.ndarray] = snapshot.buckets if buckets is None else {
        b: snapshot.buckets[b] for b in buckets if b in snapshot.buckets}
    if not chosen:
        if shape is None:
            raise ValueError("no buckets to sum and no shape given")
        return np.zeros(shape, dtype=np.int64)
    return np.sum(list(chosen.values()), axis=0)
