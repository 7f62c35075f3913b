"""The report wire format (version 1): what a client publishes and a consumer decodes.

A Kafka message value holds one or more *records* back to back: one record when a device publishes its own
report, many when a gateway batches its clients. Every record is self-describing::

    offset  size  field              type / meaning
    ------  ----  -----------------  -------------------------------------------------------------------
    0       1     version            u8, = 1
    1       1     flags              u8, reserved, = 0 in version 1
    2       2     metric id          u16 big-endian, the metric's ``id`` in the registry
    4       4     config fingerprint u32 big-endian, first 4 bytes of SHA-256 of the metric's parameters
    8       2     cohort             u16 big-endian, 0-based (0 for mechanisms without cohorts)
    10      2     payload length L   u16 big-endian, bytes of payload that follow the header
    12      4     event time         u32 big-endian, seconds since the Unix epoch; 0 = not given
                                     (the consumer then uses the Kafka message timestamp)
    16      L     payload            symbol mechanisms: the symbol as u32 big-endian (L = 4);
                                     bit mechanisms: the k bits packed little-endian (L = ceil(k/8))

A 128-bit RAPPOR report is 16 + 16 = 32 bytes; a k-RR report 20 bytes. The byte layout, versions and worked
examples are in ``docs/report-format.md``.

Decoding is vectorized: messages are grouped by length, and a message whose records all have the same size
(the one-record message, and the homogeneous gateway batch) is viewed as rows of a numpy array, so no
Python code runs per record. Only messages mixing record sizes take a per-record path. A record that
breaks the format is returned with its reason instead of raising, so a consumer can dead-letter it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from ldpstream.errors import ReportFormatError
from ldpstream.mechanisms.base import Mechanism, pack_bits, unpack_bits

VERSION = 1
HEADER_SIZE = 16
SYMBOL_PAYLOAD_SIZE = 4
MAX_PAYLOAD_SIZE = 0xFFFF

HEADER_DTYPE = np.dtype(
    [
        ("version", "u1"),
        ("flags", "u1"),
        ("metric_id", ">u2"),
        ("fingerprint", ">u4"),
        ("cohort", ">u2"),
        ("payload_length", ">u2"),
        ("event_time", ">u4"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_SIZE


@dataclass(frozen=True)
class RecordBatch:
    """Records of one size, decoded column-wise. ``payloads`` is ``(n, L)`` uint8."""

    metric_id: np.ndarray
    fingerprint: np.ndarray
    cohort: np.ndarray
    event_time: np.ndarray
    payloads: np.ndarray
    #: Index into the input message list of the message each record came from.
    message_index: np.ndarray

    def __len__(self) -> int:
        return len(self.metric_id)

    def take(self, index: np.ndarray | slice) -> RecordBatch:
        """The records at ``index`` (integer indices, a boolean mask, or a slice: then views), as a batch."""
        return RecordBatch(self.metric_id[index], self.fingerprint[index], self.cohort[index],
                           self.event_time[index], self.payloads[index], self.message_index[index])


@dataclass(frozen=True)
class Malformed:
    """A message (or part of one) that does not follow the format, and why."""

    message_index: int
    reason: str


@dataclass(frozen=True)
class DecodedMessages:
    batches: list[RecordBatch]
    malformed: list[Malformed]

    @property
    def record_count(self) -> int:
        return sum(len(b) for b in self.batches)


# ------------------------------------------------------------------------------------------- encoding


def encode_records(
    metric_id: int,
    fingerprint: int,
    cohorts: np.ndarray | Sequence[int],
    payloads: np.ndarray,
    event_time: int | np.ndarray = 0,
) -> np.ndarray:
    """Encode n records of one metric as an ``(n, 16 + L)`` uint8 array (vectorized).

    ``payloads`` is ``(n, L)`` uint8 (see :func:`symbol_payloads` and :func:`bit_payloads`). Each row is
    one record; ``rows.tobytes()`` is a gateway batch and ``rows[i].tobytes()`` a one-record message.
    """
    payloads = np.asarray(payloads, dtype=np.uint8)
    if payloads.ndim != 2:
        raise ReportFormatError("payloads must be a 2-D (n, L) uint8 array")
    n, length = payloads.shape
    if length > MAX_PAYLOAD_SIZE:
        raise ReportFormatError(f"payload of {length} bytes exceeds the format's {MAX_PAYLOAD_SIZE}")
    cohorts = np.asarray(cohorts)
    if cohorts.shape not in ((n,), ()):
        raise ReportFormatError("cohorts must be a scalar or have one entry per payload")
    if np.any(cohorts < 0) or np.any(cohorts > 0xFFFF):
        raise ReportFormatError("cohort must be in 0..65535")
    if not 0 <= metric_id <= 0xFFFF:
        raise ReportFormatError("metric id must be in 0..65535")
    event_time = np.asarray(event_time)
    if event_time.shape not in ((n,), ()) or np.any(event_time < 0) or np.any(event_time > 0xFFFFFFFF):
        raise ReportFormatError("event time must be seconds since the epoch in 0..2**32-1, scalar or one per payload")
    header = np.zeros(n, dtype=HEADER_DTYPE)
    header["version"] = VERSION
    header["metric_id"] = metric_id
    header["fingerprint"] = fingerprint
    header["cohort"] = cohorts
    header["payload_length"] = length
    header["event_time"] = event_time
    out = np.empty((n, HEADER_SIZE + length), dtype=np.uint8)
    out[:, :HEADER_SIZE] = header.view(np.uint8).reshape(n, HEADER_SIZE)
    out[:, HEADER_SIZE:] = payloads
    return out


def symbol_payloads(symbols: np.ndarray) -> np.ndarray:
    """Symbols → ``(n, 4)`` uint8, each a u32 big-endian."""
    symbols = np.asarray(symbols)
    if symbols.size and (symbols.min() < 0 or symbols.max() > 0xFFFFFFFF):
        raise ReportFormatError("symbols must be in 0..2**32-1")
    return symbols.astype(">u4").reshape(-1, 1).view(np.uint8)


def symbols_from_payloads(payloads: np.ndarray) -> np.ndarray:
    """Inverse of :func:`symbol_payloads`."""
    return np.ascontiguousarray(payloads).view(">u4").reshape(-1).astype(np.int64)


def payload_size(mechanism: Mechanism) -> int:
    """Bytes of one report's payload: 4 for a symbol, ``ceil(k / 8)`` for ``k`` bits.

    >>> from ldpstream.mechanisms import KRR, KRappor
    >>> payload_size(KRR(k=16, epsilon=1.0)), payload_size(KRappor(k=20, epsilon=1.0))
    (4, 3)
    """
    return SYMBOL_PAYLOAD_SIZE if mechanism.report_kind == "symbol" else -(-mechanism.k // 8)


def payloads_from_reports(mechanism: Mechanism, reports: np.ndarray) -> np.ndarray:
    """The mechanism's reports (symbols, or ``(n, k)`` bits) → wire payloads ``(n, L)`` uint8.

    >>> import numpy as np
    >>> from ldpstream.mechanisms import KRappor
    >>> mechanism = KRappor(k=10, epsilon=1.0)
    >>> bits = np.array([[1, 0, 0, 0, 0, 0, 0, 0, 0, 1]])
    >>> payloads_from_reports(mechanism, bits)
    array([[1, 2]], dtype=uint8)
    >>> reports_from_payloads(mechanism, payloads_from_reports(mechanism, bits)).tolist() == bits.tolist()
    True
    """
    return symbol_payloads(reports) if mechanism.report_kind == "symbol" else pack_bits(reports)


def reports_from_payloads(mechanism: Mechanism, payloads: np.ndarray) -> np.ndarray:
    """Inverse of :func:`payloads_from_reports`: ``(n, L)`` payloads → symbols, or ``(n, k)`` bits."""
    if mechanism.report_kind == "symbol":
        return symbols_from_payloads(payloads)
    return unpack_bits(payloads, mechanism.k)


# ------------------------------------------------------------------------------------------- decoding


def decode_messages(values: Sequence[bytes]) -> DecodedMessages:
    """Decode Kafka message values into record batches, one batch per (message length, record size).

    Never raises on bad input: a message that breaks the format is listed in ``malformed`` with the
    reason, and contributes no record at all (a message is accepted or refused whole).
    """
    batches: list[RecordBatch] = []
    malformed: list[Malformed] = []
    slow: list[int] = []
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    for length in np.unique(lengths):
        members = np.flatnonzero(lengths == length)
        if length < HEADER_SIZE:
            malformed.extend(Malformed(int(i), f"message of {length} bytes is shorter than a record header")
                             for i in members)
            continue
        picked = itemgetter(*members)(values) if len(members) > 1 else (values[members[0]],)
        block = np.frombuffer(b"".join(picked), dtype=np.uint8).reshape(len(members), int(length))
        record_size = ((block[:, 10].astype(np.int64) << 8) | block[:, 11]) + HEADER_SIZE
        divides = length % record_size == 0
        slow.extend(members[~divides].tolist())
        for size in np.unique(record_size[divides]):
            chosen = divides & (record_size == size)
            owner = np.repeat(members[chosen], length // size)
            rows = block[chosen].reshape(-1, int(size))
            header = np.ascontiguousarray(rows[:, :HEADER_SIZE]).view(HEADER_DTYPE).reshape(-1)
            bad = ((header["version"] != VERSION) | (header["flags"] != 0)
                   | (header["payload_length"].astype(np.int64) != size - HEADER_SIZE))
            if bad.any():
                # A message with a bad record, or one mixing record sizes (its later headers then
                # disagree with its first), is retried record by record to find the reason.
                bad_messages = np.unique(owner[bad])
                slow.extend(bad_messages.tolist())
                keep = ~np.isin(owner, bad_messages)
                rows, owner, header = rows[keep], owner[keep], header[keep]
            if len(rows):
                batches.append(_batch(header, rows[:, HEADER_SIZE:], owner))
    for i in sorted(slow):
        sub, reason = _decode_mixed(values[i], i)
        if reason is not None:
            malformed.append(Malformed(i, reason))
        else:
            batches.extend(sub)
    return DecodedMessages(batches, malformed)


def _batch(header: np.ndarray, payloads: np.ndarray, owner: np.ndarray) -> RecordBatch:
    return RecordBatch(
        metric_id=header["metric_id"].astype(np.int64),
        fingerprint=header["fingerprint"],
        cohort=header["cohort"].astype(np.int64),
        event_time=header["event_time"],
        payloads=payloads,
        message_index=owner,
    )


def _decode_mixed(value: bytes, message_index: int) -> tuple[list[RecordBatch], str | None]:
    """Walk a message record by record (messages that mix record sizes, or that failed the fast path)."""
    pos = 0
    rows_by_size: dict[int, list[np.ndarray]] = {}
    data = np.frombuffer(value, dtype=np.uint8)
    while pos < len(value):
        if len(value) - pos < HEADER_SIZE:
            return [], f"truncated record header at byte {pos}"
        header = data[pos:pos + HEADER_SIZE].copy().view(HEADER_DTYPE)[0]
        if header["version"] != VERSION:
            return [], f"unsupported format version {int(header['version'])} at byte {pos}"
        if header["flags"] != 0:
            return [], f"reserved flags set ({int(header['flags'])}) at byte {pos}"
        size = HEADER_SIZE + int(header["payload_length"])
        if pos + size > len(value):
            return [], f"record at byte {pos} declares {size} bytes but only {len(value) - pos} remain"
        rows_by_size.setdefault(size, []).append(data[pos:pos + size])
        pos += size
    batches = []
    for rows in rows_by_size.values():
        stacked = np.stack(rows)
        header = stacked[:, :HEADER_SIZE].copy().view(HEADER_DTYPE).reshape(-1)
        batches.append(_batch(header, stacked[:, HEADER_SIZE:],
                              np.full(len(rows), message_index, dtype=np.int64)))
    return batches, None
