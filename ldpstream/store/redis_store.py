"""The sketch store on Redis: one Lua compare-and-set per partition batch (the key schema is
:mod:`ldpstream.store.keys`).

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

import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import redis
import redis.cluster
from redis.crc import key_slot

from ldpstream.errors import ServiceError, StoreUnavailableError
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.registry import AssociationConfig
from ldpstream.store import keys
from ldpstream.store.contract import (
    ALL_TIME,
    MAX_CELLS,
    MAX_EXPIRE_AT,
    MAX_PAIR_BYTES,
    MAX_PAIR_CELL,
    ApplyResult,
    MetricSnapshot,
    PairKey,
    PartitionBatch,
    check_batch,
)
from ldpstream.store.pair_layout import CELLS_FORM, layout_of, parse_form, read_patterns, rows_form, segment_bytes

log = logging.getLogger(__name__)

#: KEYS[1] offset key, KEYS[2] stats hash, KEYS[3] rebuild marker, KEYS[4] sketch versions hash, KEYS[5..4+K] sketch
#: keys, then pair keys.
#: ARGV[1] the next offset the consumer expects Redis to hold ('' for none), ARGV[2] the next offset after
#: the batch, ARGV[3] number of stats pairs S, then S (field, increment) pairs, then the number K of sketch
#: keys, then for each sketch key: cell count M, expiry (Unix seconds, 0 for none) and M (cell, increment)
#: pairs; then for each pair statistic: its form and expiry, then
#:
#: - 'h' (a hash of cell counts, one key): the cell count M and M (cell, increment) pairs;
#: - 'a' (packed rows appended to numbered segments, G ≥ 2 keys: the segment the consumer believes is the last,
#:   t, and the G − 1 after it): the segment capacity in bytes (a whole number of rows), the row size, G, t,
#:   and the bytes to append. The rows fill segment t up to its capacity, then spill into t + 1, t + 2, …
#:   (each key written gets the expiry). Segment t must exist unless t = 0 and segment t + 1 must not: else the
#:   consumer's idea of the last segment is stale and the script returns {-2, ...} without writing (the
#:   consumer looks the segments up again and retries).
#:
#: A rebuild marker (the offset up to which the partition is being re-applied after Redis lost data) is
#: deleted by the batch whose next offset reaches it.
#: Returns {1, new next offset, last segment written of each 'a' statistic...}, {0, stored next offset or ''}
#: (refused: another offset is stored), {-1, reason} (refused: the batch is invalid) or {-2, reason} (refused:
#: the segments changed since the consumer looked).
#:
#: Redis does not roll back a script that fails after its first write, so the script checks everything that
#: could make a write fail (the offset, every key's type, every number, every expiry and cell index, the room
#: of the segments) before it writes anything; the writes that follow cannot fail on their arguments.
#: :func:`check_batch` makes the same checks in Python first, with a clearer message.
APPLY_SCRIPT = """
local stored = redis.call('GET', KEYS[1]) or ''
if stored ~= ARGV[1] then
  return {0, stored}
end
local function is_int(text, low, high)
  local n = tonumber(text)
  return n ~= nil and n == math.floor(n) and n >= low and n <= high
end
if not is_int(ARGV[2], 0, 9007199254740991) then
  return {-1, 'next offset is not a non-negative integer'}
end
local t = redis.call('TYPE', KEYS[2]).ok
if t ~= 'none' and t ~= 'hash' then
  return {-1, 'stats key holds a ' .. t}
end
t = redis.call('TYPE', KEYS[3]).ok
if t ~= 'none' and t ~= 'string' then
  return {-1, 'rebuild marker holds a ' .. t}
end
t = redis.call('TYPE', KEYS[4]).ok
if t ~= 'none' and t ~= 'hash' then
  return {-1, 'sketch versions key holds a ' .. t}
end
local a = 4
local nstats = tonumber(ARGV[3])
if nstats == nil then
  return {-1, 'stats count is not a number'}
end
for s = 1, nstats do
  if not is_int(ARGV[a + 1], -9007199254740991, 9007199254740991) then
    return {-1, 'stats increment is not an integer'}
  end
  a = a + 2
end
if not is_int(ARGV[a], 0, #KEYS - 4) then
  return {-1, 'sketch key count out of range'}
end
local last_sketch = 4 + tonumber(ARGV[a])
a = a + 1
local first_arg = a
for i = 5, last_sketch do
  t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= 'string' then
    return {-1, 'sketch key holds a ' .. t}
  end
  if not is_int(ARGV[a], 0, MAX_CELLS) or not is_int(ARGV[a + 1], 0, MAX_EXPIRE_AT) then
    return {-1, 'sketch cell count or expiry out of range'}
  end
  local cells = tonumber(ARGV[a])
  a = a + 2
  for c = 1, cells do
    if not is_int(ARGV[a], 0, MAX_CELLS - 1) or not is_int(ARGV[a + 1], -9007199254740991, 9007199254740991) then
      return {-1, 'sketch cell index or increment out of range'}
    end
    a = a + 2
  end
end
local i = last_sketch + 1
while i <= #KEYS do
  t = redis.call('TYPE', KEYS[i]).ok
  local form = ARGV[a]
  if not is_int(ARGV[a + 1], 0, MAX_EXPIRE_AT) then
    return {-1, 'pair statistic expiry out of range'}
  end
  if form == 'h' then
    if t ~= 'none' and t ~= 'hash' then
      return {-1, 'pair statistic key holds a ' .. t}
    end
    if not is_int(ARGV[a + 2], 0, 9007199254740991) then
      return {-1, 'pair cell count out of range'}
    end
    local cells = tonumber(ARGV[a + 2])
    a = a + 3
    for c = 1, cells do
      if not is_int(ARGV[a], 0, MAX_PAIR_CELL) or not is_int(ARGV[a + 1], 1, 9007199254740991) then
        return {-1, 'pair cell or count out of range'}
      end
      a = a + 2
    end
    i = i + 1
  elseif form == 'a' then
    if not is_int(ARGV[a + 2], 1, MAX_PAIR_BYTES) or not is_int(ARGV[a + 3], 1, MAX_PAIR_BYTES)
        or not is_int(ARGV[a + 4], 2, #KEYS - i + 1) or not is_int(ARGV[a + 5], 0, 9007199254740991) then
      return {-1, 'pair segment capacity, row size, key count or segment out of range'}
    end
    local capacity, row = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local count, first = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
    local data = #ARGV[a + 6]
    if capacity % row ~= 0 or data % row ~= 0 then
      return {-1, 'pair rows are not whole rows of the segment capacity'}
    end
    for g = i, i + count - 1 do
      local kind = redis.call('TYPE', KEYS[g]).ok
      if kind ~= 'none' and kind ~= 'string' then
        return {-1, 'pair statistic key holds a ' .. kind}
      end
    end
    if (first > 0 and redis.call('EXISTS', KEYS[i]) == 0) or redis.call('EXISTS', KEYS[i + 1]) == 1 then
      return {-2, 'the last pair segment moved'}
    end
    local held = redis.call('STRLEN', KEYS[i])
    if held % row ~= 0 then
      return {-1, 'pair statistic segment is not a whole number of rows'}
    end
    if math.max(capacity - held, 0) + (count - 1) * capacity < data then
      return {-1, 'pair segments given cannot hold the rows'}
    end
    a = a + 7
    i = i + count
  else
    return {-1, 'unknown pair statistic form'}
  end
end
a = 4
for s = 1, nstats do
  redis.call('HINCRBY', KEYS[2], ARGV[a], ARGV[a + 1])
  a = a + 2
end
a = first_arg
for i = 5, last_sketch do
  redis.call('HINCRBY', KEYS[4], KEYS[i], 1)
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
local tails = {}
i = last_sketch + 1
while i <= #KEYS do
  local form = ARGV[a]
  local expire_at = tonumber(ARGV[a + 1])
  if form == 'h' then
    local cells = tonumber(ARGV[a + 2])
    a = a + 3
    for c = 1, cells do
      redis.call('HINCRBY', KEYS[i], ARGV[a], ARGV[a + 1])
      a = a + 2
    end
    if expire_at > 0 then
      redis.call('EXPIREAT', KEYS[i], expire_at)
    end
    i = i + 1
  else
    local capacity, count, first = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
    local data = ARGV[a + 6]
    local at, g = 1, 0
    local last = first
    while at <= #data do
      local room = capacity - redis.call('STRLEN', KEYS[i + g])
      if room > 0 then
        local take = math.min(room, #data - at + 1)
        redis.call('APPEND', KEYS[i + g], string.sub(data, at, at + take - 1))
        if expire_at > 0 then
          redis.call('EXPIREAT', KEYS[i + g], expire_at)
        end
        at = at + take
        last = first + g
      end
      g = g + 1
    end
    tails[#tails + 1] = last
    a = a + 7
    i = i + count
  end
end
redis.call('SET', KEYS[1], ARGV[2])
local rebuild_until = tonumber(redis.call('GET', KEYS[3]) or '')
if rebuild_until ~= nil and tonumber(ARGV[2]) >= rebuild_until then
  redis.call('DEL', KEYS[3])
end
return {1, ARGV[2], unpack(tails)}
""".replace("MAX_CELLS", str(MAX_CELLS)).replace("MAX_EXPIRE_AT", str(MAX_EXPIRE_AT)).replace(
    "MAX_PAIR_CELL", str(MAX_PAIR_CELL)).replace("MAX_PAIR_BYTES", str(MAX_PAIR_BYTES))


@contextlib.contextmanager
def _unavailable_as_store_error() -> Iterator[None]:
    """Redis connection failures and timeouts as :class:`StoreUnavailableError` (which callers may retry)."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
        raise StoreUnavailableError(f"Redis: {exc}") from exc


#: KEYS[1] a partition's rebuild marker; ARGV[1] the offset the rebuild must reach. Keeps the larger target.
MARK_REBUILD_SCRIPT = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
"""


#: KEYS: keys of one slot; ARGV[i] 'get' or 'hgetall', the command that reads KEYS[i]. Their values as of one
#: instant (a script is atomic).
READ_SLOT_SCRIPT = """
local out = {}
for i, key in ipairs(KEYS) do
  if ARGV[i] == 'hgetall' then
    out[i] = redis.call('HGETALL', key)
  else
    out[i] = redis.call('GET', key) or false
  end
end
return out
"""

#: Default bound of :attr:`RedisSketchStore.sketch_cache_bytes` (100 metrics of ``bench/perf/decoder_scaling.py``, 27
#: buckets each, hold 80 MB).
DEFAULT_SKETCH_CACHE_BYTES = 256 * 2**20


def _group(names: Iterable[str], key_of: Callable[[str], str]) -> dict[str, list[str]]:
    """``names`` grouped by ``key_of(name)``, in order."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(key_of(name), []).append(name)
    return groups


#: URL schemes of Redis Cluster (this project's convention; see :mod:`ldpstream.config`) and their plain twins.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

RedisClient = redis.Redis | redis.cluster.RedisCluster


#: Seconds an index entry this store wrote stays remembered as written (then the next batch that touches its key
#: adds it again): bounds how long an entry removed behind the store's back (an index lost by its Redis Cluster
#: shard in a failover while the partition's shard kept the batch) stays missing.
INDEX_REFRESH_SECONDS = 60.0
#: Index entries remembered before the memory is cleared.
_INDEX_REMEMBERED = 262_144

#: Attempts of one batch whose rows segments changed under it (each re-reads them first).
_SEGMENT_ATTEMPTS = 4
#: Segments looked up per round trip, and last segments remembered before the memory is cleared.
_SEGMENT_PROBE = 16
_SEGMENTS_REMEMBERED = 65_536


class RedisSketchStore:
    """:class:`SketchStore` on Redis, standalone or Redis Cluster.

    On a cluster every script call already stays in one slot (its keys share the partition's hash tag). What
    differs: reads that span partitions (a snapshot, the pair statistics) are made per slot, each slot's keys
    in one atomic script, and checked against the index (:meth:`_read_indexed`); multi-key reads are pipelined
    per key; a published estimate and its history are written one after the other (two slots).
    """

    def __init__(self, client: RedisClient, prefix: str = "ldp", max_pair_bytes: int = MAX_PAIR_BYTES,
                 remember_index: bool = True) -> None:
        """``max_pair_bytes``: the most one rows segment of a pair statistic holds (:data:`MAX_PAIR_BYTES`, under
        Redis' 512 MiB string limit; tests give a tiny one to see the spill). ``remember_index``: skip the SADD
        of index entries this store already wrote (:meth:`_unindexed`); False adds them with every batch (the
        benchmark's baseline)."""
        if not isinstance(client, redis.Redis | redis.cluster.RedisCluster):
            raise TypeError("RedisSketchStore needs a redis.Redis or redis.cluster.RedisCluster client")
        if not 0 < max_pair_bytes <= MAX_PAIR_BYTES:
            raise ValueError(f"max_pair_bytes must be in 1..{MAX_PAIR_BYTES}, got {max_pair_bytes}")
        self._redis = client
        self.cluster = isinstance(client, redis.cluster.RedisCluster)
        self.prefix = prefix
        self.max_pair_bytes = max_pair_bytes
        self._apply = client.register_script(APPLY_SCRIPT)
        self._mark_rebuild = client.register_script(MARK_REBUILD_SCRIPT)
        self._read_slot = client.register_script(READ_SLOT_SCRIPT)
        #: The last rows segment this store wrote of each pair statistic ((topic, partition, key) → segment):
        #: where the next batch starts. A guess the script checks (another consumer may have written since, or
        #: the bucket expired); a wrong one costs a look-up and a retry.
        self._last_segment: dict[tuple[str, int, PairKey], int] = {}
        #: Bytes of sketch values :meth:`snapshot` keeps to read again only what changed (0: read everything).
        self.sketch_cache_bytes = DEFAULT_SKETCH_CACHE_BYTES
        #: index key → {sketch key: (version, value)}, least recently read first.
        self._sketch_cache: OrderedDict[str, dict[str, tuple[bytes, bytes]]] = OrderedDict()
        self._cache_bytes = 0
        self.remember_index = remember_index
        #: Index entries this store added, by partition ((topic, partition) → {(index, key name): until}): the
        #: monotonic time until which the entry is taken as written (:meth:`_unindexed`).
        self._indexed: dict[tuple[str, int], dict[tuple[str, str], float]] = {}

    @classmethod
    def from_url(cls, url: str, prefix: str = "ldp", max_pair_bytes: int = MAX_PAIR_BYTES,
                 remember_index: bool = True) -> RedisSketchStore:
        """A store on ``url``: ``redis://``, ``rediss://``, ``unix://``, or ``redis+cluster://host:port`` (one
        node; the client finds the others). Credentials and TLS files: :class:`ldpstream.config.RedisConfig`."""
        scheme, sep, rest = url.partition("://")
        if sep and scheme in CLUSTER_SCHEMES:
            # ``host:port[,host:port...]`` as ``stack status`` prints it: the first node, the client finds the rest
            # (:meth:`ldpstream.config.RedisConfig.client` gives every node as a startup node)
            netloc, slash, path = rest.partition("/")
            auth, at, hosts = netloc.rpartition("@")
            first = f"{auth}{at}{hosts.split(',')[0]}{slash}{path}"
            client: RedisClient = redis.cluster.RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{first}")
        else:
            client = redis.Redis.from_url(url)
        return cls(client, prefix, max_pair_bytes, remember_index)

    @property
    def client(self) -> RedisClient:
        return self._redis

    def close(self) -> None:
        """Close the client's connections (every node's, on a cluster)."""
        self._redis.close()

    def __enter__(self) -> RedisSketchStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get_many(self, names: list[str]) -> list[Any]:
        """GET of each name (one round trip per node; names may lie in different slots)."""
        if not names:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
        return list(pipe.execute())

    def check_safe(self) -> None:
        """Refuse a Redis whose ``maxmemory-policy`` may evict keys: eviction drops keys one by one, so it could
        drop a partition's offset and keep its counts (the batches after the stored offset are then applied
        again: double counts), or drop counts and keep the offset (lost counts). Only ``noeviction`` keeps the
        counts and offsets consistent; a Redis that forbids ``CONFIG GET`` is trusted with a warning."""
        try:
            policy = self._redis.config_get("maxmemory-policy").get("maxmemory-policy")
        except redis.ResponseError as exc:
            log.warning("cannot read Redis maxmemory-policy (%s); make sure it is noeviction", exc)
            return
        if policy is not None and policy != "noeviction":
            raise ServiceError(f"Redis maxmemory-policy is {policy!r}: it may evict count or offset keys and break "
                               "exactly-once counting; set it to 'noeviction' (and give Redis enough memory)")

    def apply(self, batch: PartitionBatch) -> ApplyResult:
        check_batch(batch)
        try:
            with _unavailable_as_store_error():
                for _attempt in range(_SEGMENT_ATTEMPTS):
                    result = self._apply_batch(batch)
                    if result is not None:
                        return result
        except StoreUnavailableError:
            self._indexed.clear()  # Redis may have restarted without its data: add every entry again
            raise
        raise ServiceError(f"the pair segments of {batch.topic}[{batch.partition}] kept changing while the "
                           f"batch was applied ({_SEGMENT_ATTEMPTS} attempts); nothing was written")

    def _apply_batch(self, batch: PartitionBatch) -> ApplyResult | None:
        """One attempt; None when the script found a rows segment other than the one this store expected (nothing
        was written, and the segments of that batch are looked up again)."""
        script_keys = [keys.offset_key(self.prefix, batch.topic, batch.partition),
                       keys.stats_key(self.prefix, batch.topic, batch.partition),
                       keys.rebuild_key(self.prefix, batch.topic, batch.partition),
                       keys.sketch_versions_key(self.prefix, batch.topic, batch.partition)]
        expected = "" if batch.expected_offset is None else str(batch.expected_offset)
        args: list[int | str | bytes] = [expected, batch.next_offset, len(batch.stats)]
        for name, value in batch.stats.items():
            args += [name, int(value)]
        new_index: dict[str, list[str]] = {}
        expiry: dict[str, int] = {}  # key name → its expiry (Unix seconds, 0 for none)
        sketch_args: list[int | str] = []
        for key, counts in batch.increments.items():
            flat = np.asarray(counts, dtype=np.int64).reshape(-1)
            cells = np.flatnonzero(flat)
            if cells.size == 0:
                continue
            name = keys.sketch_key(self.prefix, batch.topic, batch.partition, key)
            script_keys.append(name)
            new_index.setdefault(keys.index_key(self.prefix, key.metric, key.fingerprint), []).append(name)
            expiry[name] = int(batch.expire_at.get(key, 0))
            pairs = np.empty(2 * cells.size, dtype=np.int64)
            pairs[0::2] = cells
            pairs[1::2] = flat[cells]
            sketch_args += [int(cells.size), int(batch.expire_at.get(key, 0))]
            sketch_args.extend(pairs.tolist())
        args.append(len(script_keys) - 4)
        args += sketch_args
        segmented: list[tuple[str, int, PairKey]] = []  # each rows statistic, in script order
        for pair_key, increment in batch.pairs.items():
            index = keys.pair_index_key(self.prefix, pair_key.association, pair_key.fingerprint)
            if increment.rows is not None:
                if not increment.rows.size:
                    continue
                row_size = int(increment.rows.shape[1])
                capacity = segment_bytes(row_size, self.max_pair_bytes)
                statistic = (batch.topic, batch.partition, pair_key)
                first = self._last_segment.get(statistic, 0)
                # Segment `first` may be full: the rows may need every one of the segments after it.
                count = 1 + -(-int(increment.rows.size) // capacity)
                names = [keys.pair_key(self.prefix, batch.topic, batch.partition, pair_key, rows_form(first + g))
                         for g in range(count)]
                args += ["a", int(increment.expire_at), capacity, row_size, count, first, increment.rows.tobytes()]
                script_keys += names
                new_index.setdefault(index, []).extend(names)
                expiry.update(dict.fromkeys(names, int(increment.expire_at)))
                segmented.append(statistic)
                continue
            assert increment.cells is not None and increment.counts is not None  # check_batch
            if not increment.cells.size:
                continue
            cell_pairs = np.empty(2 * increment.cells.size, dtype=np.int64)
            cell_pairs[0::2] = increment.cells
            cell_pairs[1::2] = increment.counts
            args += ["h", int(increment.expire_at), int(increment.cells.size)]
            args.extend(cell_pairs.tolist())
            name = keys.pair_key(self.prefix, batch.topic, batch.partition, pair_key, CELLS_FORM)
            script_keys.append(name)
            new_index.setdefault(index, []).append(name)
            expiry[name] = int(increment.expire_at)
        partition = (batch.topic, batch.partition)
        unindexed = self._unindexed(partition, new_index)
        if unindexed:
            # The index is idempotent and written first: a key is always findable once it exists (a segment
            # the batch may not need stays listed, without a key, until its bucket's retention passes).
            pipe = self._redis.pipeline(transaction=False)
            for index_name, members in unindexed.items():
                pipe.sadd(index_name, *members)
            pipe.execute()
            self._remember_indexed(partition, unindexed, expiry)
        applied, next_offset, *tails = self._apply(keys=script_keys, args=args)
        if applied == 0:  # another writer moved the partition (a rebalance) or Redis rolled back: forget it
            self._indexed.pop(partition, None)
        if applied == -2:  # nothing was written: look the segments up, then try again
            for statistic in segmented:
                self._last_segment[statistic] = self._find_last_segment(*statistic)
            return None
        if applied == -1:  # nothing was written
            reason = next_offset.decode() if isinstance(next_offset, bytes) else str(next_offset)
            raise ServiceError(f"Redis refused the batch of {batch.topic}[{batch.partition}]: {reason}")
        if applied == 1:
            if len(self._last_segment) > _SEGMENTS_REMEMBERED:
                self._last_segment.clear()
            self._last_segment.update(zip(segmented, (int(t) for t in tails), strict=True))
        return ApplyResult(bool(applied), int(next_offset) if next_offset not in (b"", "") else None)

    def _unindexed(self, partition: tuple[str, int], new_index: dict[str, list[str]]) -> dict[str, list[str]]:
        """The index entries of ``new_index`` (index → key names) that this store does not know to be written.

        An entry, once added, stays in its index until its bucket's retention has passed (the decoder removes
        it then: :meth:`snapshot`, :meth:`pair_buckets`), and a consumer writes no bucket past its retention
        (:func:`ldpstream.consumers.fold.oldest_accepted`); so an entry added once need not be added again.
        Remembered entries are forgotten, so that the next batch adds them again, when: the key's expiry time
        comes (``EXPIREAT``, the same clock as the decoder's), :data:`INDEX_REFRESH_SECONDS` pass, the
        partition's offset is read (an assignment: :meth:`next_offsets`) or marked for rebuild, a batch is
        refused (someone else wrote the partition, or Redis rolled back), or Redis is unreachable (it may have
        restarted without its data). A new store (a restarted consumer) remembers nothing.
        """
        if not self.remember_index:
            return new_index
        known = self._indexed.get(partition)
        if not known:
            return new_index
        now = time.monotonic()
        out: dict[str, list[str]] = {}
        for index_name, members in new_index.items():
            missing = [m for m in members if known.get((index_name, m), 0.0) <= now]
            if missing:
                out[index_name] = missing
        return out

    def _remember_indexed(self, partition: tuple[str, int], added: dict[str, list[str]],
                          expiry: dict[str, int]) -> None:
        """Remember the entries just added to their indexes (see :meth:`_unindexed`) until the sooner of
        :data:`INDEX_REFRESH_SECONDS` from now and their key's expiry (``expiry``: key name → Unix time, 0 or
        absent for none)."""
        if not self.remember_index:
            return
        if sum(len(known) for known in self._indexed.values()) > _INDEX_REMEMBERED:
            self._indexed.clear()
        mono, wall = time.monotonic(), time.time()
        refresh = mono + INDEX_REFRESH_SECONDS
        known = self._indexed.setdefault(partition, {})
        for index_name, members in added.items():
            for name in members:
                when = expiry.get(name, 0)
                known[(index_name, name)] = refresh if not when else min(refresh, mono + (when - wall))

    def _find_last_segment(self, topic: str, partition: int, pair_key: PairKey) -> int:
        """The number of the last rows segment of one partition's pair statistic that exists (0 when none)."""
        found = 0
        while True:
            pipe = self._redis.pipeline(transaction=False)
            for g in range(found + 1, found + 1 + _SEGMENT_PROBE):
                pipe.exists(keys.pair_key(self.prefix, topic, partition, pair_key, rows_form(g)))
            present = pipe.execute()
            ahead = next((g for g, there in enumerate(present) if not there), len(present))
            found += ahead
            if ahead < len(present):
                return found

    def pair_segments(self, association: AssociationConfig, topic: str, partition: int, bucket: int) -> list[int]:
        """Bytes of each rows segment of one partition's pair statistic in one bucket, in segment order."""
        pair_key = PairKey(association.name, association.fingerprint, bucket)
        with _unavailable_as_store_error():
            if not self._redis.exists(keys.pair_key(self.prefix, topic, partition, pair_key, rows_form(0))):
                return []
            last = self._find_last_segment(topic, partition, pair_key)
            pipe = self._redis.pipeline(transaction=False)
            for g in range(last + 1):
                pipe.strlen(keys.pair_key(self.prefix, topic, partition, pair_key, rows_form(g)))
            return [int(n) for n in pipe.execute()]

    def next_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int | None]:
        partitions = list(partitions)
        for p in partitions:  # an assignment: whatever happened to the partition meanwhile, add its entries again
            self._indexed.pop((topic, p), None)
        with _unavailable_as_store_error():
            values = self._get_many([keys.offset_key(self.prefix, topic, p) for p in partitions])
        return {p: (int(v) if v is not None else None) for p, v in zip(partitions, values, strict=True)}

    def mark_rebuild(self, topic: str, partition: int, until_offset: int) -> None:
        self._indexed.pop((topic, partition), None)
        with _unavailable_as_store_error():
            self._mark_rebuild(keys=[keys.rebuild_key(self.prefix, topic, partition)], args=[int(until_offset)])
            self._redis.sadd(keys.partitions_key(self.prefix, topic), partition)

    def rebuilding(self, topic: str) -> dict[int, int]:
        with _unavailable_as_store_error():
            partitions = sorted(int(p) for p in self._redis.smembers(keys.partitions_key(self.prefix, topic)))
            if not partitions:
                return {}
            values = self._get_many([keys.rebuild_key(self.prefix, topic, p) for p in partitions])
        return {p: int(v) for p, v in zip(partitions, values, strict=True) if v is not None}

    def snapshot(self, metric: str, fingerprint: int, shape: tuple[int, int],
                 expired_before: int | None = None) -> MetricSnapshot:
        """``expired_before``: buckets below it have expired; their index entries (and version fields) are
        removed. Sketches whose version (``P:{T:N}:skv``) has not moved since this store last read them are
        taken from its cache (:meth:`_read_sketches`)."""
        index = keys.index_key(self.prefix, metric, fingerprint)
        with _unavailable_as_store_error():
            names, raws = self._read_sketches(index)
            if expired_before is not None:
                gone = [k for k in names if 0 <= keys.bucket_of(k) < expired_before]
                if gone:
                    pipe = self._redis.pipeline(transaction=False)
                    pipe.srem(index, *gone)
                    for versions, fields in _group(gone, keys.versions_key_of).items():
                        pipe.hdel(versions, *fields)
                    pipe.execute()
                    cached = self._sketch_cache.get(index)
                    for name in gone:
                        if cached is not None and name in cached:
                            self._cache_bytes -= len(cached.pop(name)[1])
        size = shape[0] * shape[1]
        buckets: dict[int, np.ndarray] = {}
        total: np.ndarray | None = None
        for key, raw in zip(names, raws, strict=True):
            if raw is None:
                continue
            cells = np.frombuffer(raw, dtype=">i8")[:size]
            counts = np.zeros(size, dtype=np.int64)
            counts[: cells.size] = cells
            bucket = keys.bucket_of(key)
            if bucket == ALL_TIME:
                total = counts.reshape(shape) if total is None else total + counts.reshape(shape)
            elif expired_before is None or bucket >= expired_before:
                buckets[bucket] = buckets.get(bucket, 0) + counts.reshape(shape)
        return MetricSnapshot(buckets, total)

    def _read_sketches(self, index: str) -> tuple[list[str], list[bytes | None]]:
        """Every sketch key listed in ``index`` and its value, as of one instant, reading again only the sketches
        whose version moved since this store last read them.

        Each batch's script increments, in the same atomic call, the version of every sketch key it writes
        (``P:{T:N}:skv``). One MULTI/EXEC reads the versions of every key of the index, whether each cached key
        still exists (a key can expire), and the values of the keys whose version a first, plain read found
        moved (or missing: a key no consumer has versioned is always read). A cached value whose version at
        the EXEC is still the cached one is the key's value at that instant (every write moves the version);
        if a batch moved one in between the two reads, the read starts over. The index is WATCHed as in
        :meth:`_read_indexed`. The cache keeps at most ``sketch_cache_bytes`` (least recently read metrics
        leave first); 0 reads every sketch every time.
        """
        if self.sketch_cache_bytes <= 0 or getattr(self, "cluster", False):
            # (on Redis Cluster one transaction cannot span the partitions' slots: every sketch is read, per slot)
            names, all_raws = self._read_indexed(index)
            return names, list(all_raws)
        assert isinstance(self._redis, redis.Redis)  # a standalone server (a cluster client reads above)
        cached = self._sketch_cache.pop(index, {})
        self._cache_bytes -= sum(len(v[1]) for v in cached.values())
        with self._redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(index)  # type: ignore[no-untyped-call]
                    names = sorted(k.decode() if isinstance(k, bytes) else k for k in pipe.smembers(index))
                    groups = _group(names, keys.versions_key_of)
                    seen: dict[str, Any] = {}
                    for versions, fields in groups.items():
                        seen.update(zip(fields, pipe.hmget(versions, fields), strict=True))
                    fresh = [n for n in names if n not in cached or seen[n] is None or cached[n][0] != seen[n]]
                    fresh_set = set(fresh)
                    kept = [n for n in names if n not in fresh_set]
                    pipe.multi()
                    for versions, fields in groups.items():
                        pipe.hmget(versions, fields)
                    for name in kept:
                        pipe.exists(name)
                    for name in fresh:
                        pipe.get(name)
                    replies = pipe.execute() if names else []
                except redis.WatchError:
                    continue
                now_versions: dict[str, bytes | None] = {}
                for (_, fields), values in zip(groups.items(), replies[:len(groups)], strict=True):
                    now_versions.update(zip(fields, values, strict=True))
                exists = replies[len(groups):len(groups) + len(kept)]
                values = replies[len(groups) + len(kept):]
                if any(now_versions[n] != cached[n][0] for n in kept):
                    continue  # a batch wrote a cached key between the two reads
                break
        out: dict[str, tuple[bytes, bytes]] = {}
        raws: dict[str, bytes | None] = {}
        for name, there in zip(kept, exists, strict=True):
            raws[name] = cached[name][1] if there else None
            if there:
                out[name] = cached[name]
        for name, raw in zip(fresh, values, strict=True):
            raws[name] = raw
            version = now_versions[name]
            if raw is not None and version is not None:
                out[name] = (version, raw)
        self._sketch_cache[index] = out
        self._cache_bytes += sum(len(v[1]) for v in out.values())
        while self._cache_bytes > self.sketch_cache_bytes and self._sketch_cache:
            _, evicted = self._sketch_cache.popitem(last=False)
            self._cache_bytes -= sum(len(v[1]) for v in evicted.values())
        return names, [raws[n] for n in names]

    def _read_indexed(self, index: str, chosen: Callable[[str], bool] | None = None,
                      read: Callable[[str], str] = lambda _name: "get") -> tuple[list[str], list[Any]]:
        """Every key listed in ``index`` and its value, as of one instant.

        ``read`` names the command that reads a key (``get``, ``hgetall``). The index is WATCHed while it is
        read and the values are read in one MULTI/EXEC: a consumer batch that adds a new key in between (it SADDs
        the index before applying) aborts the EXEC, and the read starts over, so a batch is never seen half
        applied (a batch that spills into a new pair segment among them). On Redis Cluster:
        :meth:`_read_per_slot`.
        """
        if self.cluster:
            return self._read_per_slot(index, chosen, read)
        assert isinstance(self._redis, redis.Redis)
        with self._redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(index)  # type: ignore[no-untyped-call]
                    keys = sorted(k.decode() if isinstance(k, bytes) else k for k in pipe.smembers(index))
                    if chosen is not None:
                        keys = [k for k in keys if chosen(k)]
                    pipe.multi()
                    for key in keys:
                        getattr(pipe, read(key))(key)
                    return keys, pipe.execute() if keys else []
                except redis.WatchError:
                    continue

    def _read_per_slot(self, index: str, chosen: Callable[[str], bool] | None,
                       read: Callable[[str], str]) -> tuple[list[str], list[Any]]:
        """:meth:`_read_indexed` on Redis Cluster, where one transaction cannot span slots (nor WATCH a key of
        another slot): the keys of each slot (one partition's, by their hash tag) are read in one atomic script,
        then the index is read again, and the whole read starts over if it changed.

        Why no batch is seen half applied: a batch touches one partition's keys only (one slot, one atomic
        script), so each slot's read sees it whole or not at all, except for a key the batch creates and the
        first index read missed. The batch adds that key to the index before its script runs; so if the slot's
        read saw the batch, the second index read lists the new key, differs from the first, and the read is
        made again. Partitions are not read at one common instant (nor are they on a single Redis, where the
        consumers of different partitions are independent anyway): the snapshot is a set of whole batches.
        """
        while True:
            before = sorted(k.decode() if isinstance(k, bytes) else k for k in self._redis.smembers(index))
            names = [k for k in before if chosen is None or chosen(k)]
            by_slot: dict[int, list[str]] = {}
            for name in names:
                by_slot.setdefault(key_slot(name.encode()), []).append(name)
            values: dict[str, Any] = {}
            for members in by_slot.values():
                commands = [read(name) for name in members]
                raw = self._read_slot(keys=members, args=commands)
                for name, command, value in zip(members, commands, raw, strict=True):
                    if command == "hgetall":
                        flat = list(value or [])
                        values[name] = dict(zip(flat[0::2], flat[1::2], strict=True))
                    else:
                        values[name] = value
            after = sorted(k.decode() if isinstance(k, bytes) else k for k in self._redis.smembers(index))
            if after == before:
                return names, [values[name] for name in names]

    def stats(self, topic: str, partitions: Iterable[int]) -> dict[str, int]:
        total: dict[str, int] = {}
        pipe = self._redis.pipeline(transaction=False)
        partitions = list(partitions)
        for p in partitions:
            pipe.hgetall(keys.stats_key(self.prefix, topic, p))
        for entry in pipe.execute():
            for name, value in entry.items():
                name = name.decode() if isinstance(name, bytes) else name
                total[name] = total.get(name, 0) + int(value)
        return total

    # ------------------------------------------------------------------ pair statistics

    def pair_buckets(self, association: AssociationConfig) -> list[int]:
        """Buckets whose pair statistic exists. Index entries of buckets past their retention are removed (by the
        clock, not because the key is missing: a consumer adds a key's index entry just before its script creates
        the key, and that entry must stay)."""
        index = keys.pair_index_key(self.prefix, association.name, association.fingerprint)
        with _unavailable_as_store_error():
            names = sorted(k.decode() if isinstance(k, bytes) else k for k in self._redis.smembers(index))
            if not names:
                return []
            pipe = self._redis.pipeline(transaction=False)
            for name in names:
                pipe.exists(name)
            present = pipe.execute()
            now = time.time()
            expired = [n for n, there in zip(names, present, strict=True) if not there and
                       (keys.bucket_of(n) + 1) * association.bucket_seconds + association.retention_seconds <= now]
            if expired:
                self._redis.srem(index, *expired)
        return sorted({keys.bucket_of(n) for n, there in zip(names, present, strict=True) if there})

    def pair_patterns(self, association: AssociationConfig, buckets: Iterable[int],
                      members: tuple[int, int] | None = None) -> PairPatterns:
        layout = layout_of(association)
        wanted = set(buckets)
        index = keys.pair_index_key(self.prefix, association.name, association.fingerprint)

        def form_of(name: str) -> str:  # a key named before the form was in the name has the layout's form
            form = keys.pair_form_of(name)
            return layout.kind if form is None else parse_form(form)[0]

        with _unavailable_as_store_error():
            names, values = self._read_indexed(
                index, (lambda name: keys.bucket_of(name) in wanted),
                lambda name: "hgetall" if form_of(name) == CELLS_FORM else "get")
        cells: list[tuple[np.ndarray, np.ndarray]] = []
        rows: list[bytes] = []
        for name, value in zip(names, values, strict=True):
            if form_of(name) == CELLS_FORM:
                if value:
                    cells.append((np.array(list(value)).astype(np.int64),
                                  np.array(list(value.values())).astype(np.int64)))
            elif value:
                rows.append(value)
        return read_patterns(layout, cells, rows, members)

    # ------------------------------------------------------------------ published estimates

    def publish_estimate(self, metric: str, window: str, body: str, history: int) -> None:
        self._publish(keys.estimate_key(self.prefix, metric, window), keys.history_key(self.prefix, metric, window),
                      body, history)

    def retract_estimate(self, metric: str, window: str) -> bool:
        return bool(self._redis.delete(keys.estimate_key(self.prefix, metric, window)))

    def latest_estimate(self, metric: str, window: str = "all") -> dict[str, Any] | None:
        return self._latest(keys.estimate_key(self.prefix, metric, window))

    def estimate_history(self, metric: str, window: str = "all") -> list[dict[str, Any]]:
        return self._history(keys.history_key(self.prefix, metric, window))

    def publish_joint(self, association: str, window: str, body: str, history: int) -> None:
        self._publish(keys.joint_key(self.prefix, association, window),
                      keys.joint_history_key(self.prefix, association, window), body, history)

    def retract_joint(self, association: str, window: str) -> bool:
        return bool(self._redis.delete(keys.joint_key(self.prefix, association, window)))

    def latest_joint(self, association: str, window: str = "all") -> dict[str, Any] | None:
        return self._latest(keys.joint_key(self.prefix, association, window))

    def joint_history(self, association: str, window: str = "all") -> list[dict[str, Any]]:
        return self._history(keys.joint_history_key(self.prefix, association, window))

    def _publish(self, latest_key: str, history_key: str, body: str, history: int) -> None:
        """``body`` as the latest under ``latest_key`` and pushed on ``history_key``, in one transaction."""
        if history < 1:  # LTRIM 0 -1 would keep the whole history
            raise ValueError(f"history must keep at least one estimate, got {history}")
        # On Redis Cluster the two keys lie in different slots: the latest first, then the history (a reader may
        # see the new latest a moment before its history entry).
        pipe = self._redis.pipeline(transaction=not self.cluster)
        pipe.set(latest_key, body)
        pipe.lpush(history_key, body)
        pipe.ltrim(history_key, 0, history - 1)
        pipe.execute()

    def _latest(self, key: str) -> dict[str, Any] | None:
        raw = self._redis.get(key)
        return None if raw is None else dict(json.loads(raw))

    def _history(self, key: str) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self._redis.lrange(key, 0, -1)]

    def record_decode(self, failed: Iterable[str], when: float | None = None) -> None:
        body = {"time": time.time() if when is None else when, "failed": list(failed)}
        self._redis.set(keys.last_decode_key(self.prefix), json.dumps(body))

    def last_decode(self) -> dict[str, Any] | None:
        raw = self._redis.get(keys.last_decode_key(self.prefix))
        return None if raw is None else dict(json.loads(raw))

    def publish_dictionary(self, name: str, body: str, history: int) -> None:
        json.loads(body)  # Redis would take anything; reading it back would fail
        self._publish(keys.estimate_key(self.prefix, name, "all"), keys.history_key(self.prefix, name, "all"),
                      body, history)
        self._redis.sadd(keys.dictionaries_key(self.prefix), name)

    def dictionaries(self) -> dict[str, dict[str, Any]]:
        names = sorted(_text(n) for n in self._redis.smembers(keys.dictionaries_key(self.prefix)))
        if not names:
            return {}
        bodies = self._get_many([keys.estimate_key(self.prefix, n, "all") for n in names])
        return {n: dict(json.loads(b)) for n, b in zip(names, bodies, strict=True) if b is not None}

    def add_truth(self, name: str, counts: np.ndarray) -> None:
        counts = np.asarray(counts, dtype=np.int64)
        key = keys.truth_key(self.prefix, name)
        shape = ",".join(str(size) for size in counts.shape)
        held = self._redis.hget(key, "shape")
        cells = np.flatnonzero(counts)
        pipe = self._redis.pipeline(transaction=not self.cluster)  # (a cluster pipeline has no MULTI)
        if held is not None and _text(held) != shape:
            pipe.delete(key)
        pipe.hset(key, "shape", shape)
        for cell, count in zip(cells.tolist(), counts.ravel()[cells].tolist(), strict=True):
            pipe.hincrby(key, str(cell), count)
        pipe.execute()

    def truth(self, name: str) -> np.ndarray | None:
        held = self._redis.hgetall(keys.truth_key(self.prefix, name))
        return _truth_of({_text(k): _text(v) for k, v in held.items()}) if held else None

    def add_string_truth(self, name: str, counts: Mapping[str, int]) -> None:
        key = keys.string_truth_key(self.prefix, name)
        pipe = self._redis.pipeline(transaction=not self.cluster)  # (a cluster pipeline has no MULTI)
        for text, count in counts.items():
            if count:
                pipe.hincrby(key, text, int(count))
        pipe.execute()

    def string_truth(self, name: str) -> dict[str, int] | None:
        held = self._redis.hgetall(keys.string_truth_key(self.prefix, name))
        return {_text(k): int(v) for k, v in held.items()} if held else None


def _truth_of(fields: dict[str, str]) -> np.ndarray | None:
    """The count table of a truth hash (``shape`` and cell number → count); None without a valid shape."""
    try:
        shape = tuple(int(size) for size in fields["shape"].split(","))
    except (KeyError, ValueError):
        return None
    counts = np.zeros(int(np.prod(shape)), dtype=np.int64)
    for cell, count in fields.items():
        if cell != "shape" and cell.isdigit() and int(cell) < counts.size:
            counts[int(cell)] = int(count)
    return counts.reshape(shape)


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
