"""The whole Redis key schema, in one place: the store, the decoder's publishing and ``status`` read it.

Layout in Redis (``P`` is the key prefix, ``T`` the topic, ``N`` the partition; everything one consumer
batch touches carries the hash tag ``{T:N}``, so one script call stays in one slot on Redis Cluster)::

    P:{T:N}:offset                          string  next Kafka offset of partition N to apply
    P:{T:N}:rebuild                         string  while partition N is re-applied from Kafka after Redis lost
                                                    its state: the next offset the rebuild must reach
    P:partitions:<T>                        set     partition numbers of topic T that consumers were assigned
    P:dlq-replayed:<D>                      hash    ``ldpstream dlq replay`` of dead-letter topic D: field = a dead
                                                    letter's ``source`` header (``T/N/offset``), value =
                                                    ``pending <unix time>`` while its replay is unacknowledged,
                                                    then ``replayed <T>/<N>/<offset>`` (where it went)
    P:{T:N}:stats                           hash    reports_applied, applied:<metric>, rejected:<reason>,
                                                    associated:<assoc> (report tuples of an association)
    P:{T:N}:sk:<metric>:<fp>:<bucket>       string  the (C, W) count sketch of reports from partition N
                                                    with config fingerprint fp (8 hex digits) in time
                                                    bucket <bucket> (= event time // bucket_seconds), as
                                                    C·W signed 64-bit big-endian counters (BITFIELD i64),
                                                    cohort-major; missing trailing cells read as 0. With a
                                                    metric ``retention``, it expires that long after the
                                                    bucket's end.
    P:{T:N}:sk:<metric>:<fp>:all            string  the same for every report ever (the all-time rollup,
                                                    updated in the same call; never expires)
    P:{T:N}:skv                             hash    field = a sketch key of partition N, value = the number of
                                                    batches that wrote it (incremented in the same call): the
                                                    decoder re-reads a sketch only when this moved; fields of
                                                    expired buckets are removed with their index entries
    P:index:<metric>:<fp>                   set     every sketch key of the metric (the decoder's index)
    P:{T:N}:pr:<assoc>:<fp>:cells:<bucket>  hash    the pair statistic of association <assoc> (fingerprint fp)
                                                    from partition N in time bucket <bucket>, when every member
                                                    reports a symbol and their product table has at most 2^16
                                                    cells: field = cell number (decimal) of
                                                    (cohort_1, y_1, ..., cohort_N, y_N) in the product table,
                                                    value = count (only the cells seen);
    P:{T:N}:pr:<assoc>:<fp>:rows.<s>:<bucket>
                                            string  otherwise: the report tuples packed, one fixed-size row
                                                    each (cohort u16 BE + payload per member), APPENDed to
                                                    segment s = 0, 1, ...: each holds at most the whole rows
                                                    that fit MAX_PAIR_BYTES (or the store's cap); a batch
                                                    fills the last one and spills into the next.
                                                    Every one expires with the association's retention after
                                                    the bucket's end; there is no all-time pair statistic.
                                                    The form in the name keeps the two forms in separate keys.
                                                    (ldpstream.store.pair_layout)
    P:pairindex:<assoc>:<fp>                set     every pair-statistic key of the association
    P:estimate:<metric>:<window>            string  the last published estimate (JSON)
    P:history:<metric>:<window>             list    the last published estimates, newest first (bounded)
    P:joint:<association>:<window>          string  the last published joint estimate of an association of
                                                    two metrics (JSON: the table over the candidates and
                                                    "Other", intervals, conditionals, independence test)
    P:joint-history:<association>:<window>  list    the last published joint estimates, newest first (bounded)
    P:decoder:last_run                      string  JSON {"time": unix seconds, "failed": [metric, ...]}
    P:dictionaries                          set     the names ``discover --publish <name>`` stored a dictionary
                                                    under: P:estimate:<name>:all and P:history:<name>:all, in
                                                    the live decoder's form (docs/schema/dictionary.v2.schema.json;
                                                    a discovery metric of the registry is published there too,
                                                    one key per window, and is not listed)
    P:truth:<name>                          hash    simulations only (``produce``, ``demo``): the values they drew
                                                    for a metric or an association, field = flat cell number
                                                    (decimal) → count, plus ``shape`` ("k" or "k1,k2")
    P:truth-strings:<name>                  hash    simulations only: the strings drawn for a discovery metric,
                                                    field = string → count

``<bucket>`` is ``all`` for :data:`~ldpstream.store.contract.ALL_TIME`. Keys of one partition share the hash
tag ``{T:N}``; the index, estimate, joint and decoder keys are read by one client at a time and carry none.
"""

from __future__ import annotations

from ldpstream.store.contract import ALL_TIME, PairKey, SketchKey


def partition_tag(prefix: str, topic: str, partition: int) -> str:
    """``P:{T:N}``: the prefix of every key one partition batch touches."""
    return f"{prefix}:{{{topic}:{partition}}}"


def offset_key(prefix: str, topic: str, partition: int) -> str:
    return f"{partition_tag(prefix, topic, partition)}:offset"


def rebuild_key(prefix: str, topic: str, partition: int) -> str:
    return f"{partition_tag(prefix, topic, partition)}:rebuild"


def partitions_key(prefix: str, topic: str) -> str:
    return f"{prefix}:partitions:{topic}"


def dlq_replayed_key(prefix: str, dead_letter_topic: str) -> str:
    """The dedupe state of ``ldpstream dlq replay`` (:mod:`ldpstream.consumers.dead_letter_replay`)."""
    return f"{prefix}:dlq-replayed:{dead_letter_topic}"


def stats_key(prefix: str, topic: str, partition: int) -> str:
    return f"{partition_tag(prefix, topic, partition)}:stats"


def sketch_versions_key(prefix: str, topic: str, partition: int) -> str:
    """The hash of the partition's sketch keys → how many batches have written each (the decoder re-reads a
    sketch only when its count moved)."""
    return f"{partition_tag(prefix, topic, partition)}:skv"


def versions_key_of(sketch_key_name: str) -> str:
    """The :func:`sketch_versions_key` of the partition a sketch key belongs to."""
    return sketch_key_name.split(":sk:", 1)[0] + ":skv"


def sketch_key(prefix: str, topic: str, partition: int, key: SketchKey) -> str:
    bucket = "all" if key.bucket == ALL_TIME else str(key.bucket)
    return f"{partition_tag(prefix, topic, partition)}:sk:{key.metric}:{key.fingerprint:08x}:{bucket}"


def bucket_of(sketch_key_name: str) -> int:
    """The bucket number of a sketch key (:data:`ALL_TIME` for the rollup)."""
    suffix = sketch_key_name.rsplit(":", 1)[1]
    return ALL_TIME if suffix == "all" else int(suffix)


def pair_key(prefix: str, topic: str, partition: int, key: PairKey, form: str) -> str:
    """The key of one form of a pair statistic: ``form`` is ``cells`` or ``rows.<segment>``
    (:mod:`ldpstream.store.pair_layout`)."""
    return (f"{partition_tag(prefix, topic, partition)}:pr:{key.association}:{key.fingerprint:08x}:{form}:"
            f"{key.bucket}")


def pair_form_of(pair_key_name: str) -> str | None:
    """The form part of a pair-statistic key's name (``cells``, ``rows.<segment>``), or None for a key named
    before the form was part of the name (``...:pr:<assoc>:<fp>:<bucket>``, whose form is the layout's)."""
    form = pair_key_name.rsplit(":", 2)[-2]
    return form if form == "cells" or form.startswith("rows.") else None


def pair_index_key(prefix: str, association: str, fingerprint: int) -> str:
    return f"{prefix}:pairindex:{association}:{fingerprint:08x}"


def index_key(prefix: str, metric: str, fingerprint: int) -> str:
    return f"{prefix}:index:{metric}:{fingerprint:08x}"


def estimate_key(prefix: str, metric: str, window: str) -> str:
    return f"{prefix}:estimate:{metric}:{window}"


def history_key(prefix: str, metric: str, window: str) -> str:
    return f"{prefix}:history:{metric}:{window}"


def joint_key(prefix: str, association: str, window: str) -> str:
    return f"{prefix}:joint:{association}:{window}"


def joint_history_key(prefix: str, association: str, window: str) -> str:
    return f"{prefix}:joint-history:{association}:{window}"


def last_decode_key(prefix: str) -> str:
    return f"{prefix}:decoder:last_run"


def truth_key(prefix: str, name: str) -> str:
    return f"{prefix}:truth:{name}"


def string_truth_key(prefix: str, name: str) -> str:
    return f"{prefix}:truth-strings:{name}"


def dictionaries_key(prefix: str) -> str:
    return f"{prefix}:dictionaries"
