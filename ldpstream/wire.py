"""The report wire format (versions 1 and 2): what a client publishes and a consumer decodes.

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

A version-2 record carries the reports of one client for the N metrics of an *association* (the values it
reports together, for joint estimation)::

    0       1     version            u8, = 2
    1       1     flags              u8, reserved, = 0
    2       2     association id     u16 big-endian, the association's ``id`` in the registry
    4       4     fingerprint        u32 big-endian, the association's fingerprint (covers its members' ones)
    8       1     payload count N    u8, 2..8, = the association's number of members
    9       1     reserved           u8, = 0
    10      2     body length B      u16 big-endian, bytes after the header (the same place as version 1's L,
                                     so both versions are walked alike)
    12      4     event time         u32 big-endian, as in version 1
    16      B     N entries          each: cohort u16 BE, payload length L_j u16 BE, L_j payload bytes
                                     (the member's version-1 payload), in the association's member order

A 128-bit RAPPOR report is 16 + 16 = 32 bytes; a k-RR report 20 bytes; a k-RR × k-RR pair 16 + 2 × 8 = 32.
The byte layout, versions and worked
examples are in ``docs/report-format.md``.

Decoding is vectorized: messages are grouped by length, and a message whose records all have the same size
(the one-record message, and the homogeneous gateway batch) is viewed as rows of a numpy array, so no
Python code runs per record. Only messages mixing record sizes take a per-record path. A record that
breaks the format is returned with its reason instead of raising, so a consumer can dead-letter it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from ldpstream.errors import ReportFormatError
from ldpstream.mechanisms.base import Mechanism, pack_bits, unpack_bits

VERSION = 1
#: The version of records that carry the reports of an association's members together.
ASSOCIATION_VERSION = 2
#: Every version this module reads.
VERSIONS = (VERSION, ASSOCIATION_VERSION)
HEADER_SIZE = 16
#: Bytes before each payload of a version-2 record: cohort (u16) and payload length (u16).
ENTRY_HEADER_SIZE = 4
#: Payloads one version-2 record may carry.
MAX_ASSOCIATION_PAYLOADS = 8
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

ASSOCIATION_HEADER_DTYPE = np.dtype(
    [
        ("version", "u1"),
        ("flags", "u1"),
        ("association_id", ">u2"),
        ("fingerprint", ">u4"),
        ("count", "u1"),
        ("reserved", "u1"),
        ("body_length", ">u2"),
        ("event_time", ">u4"),
    ]
)
assert ASSOCIATION_HEADER_DTYPE.itemsize == HEADER_SIZE


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
class AssociationBatch:
    """Version-2 records of one layout (the same payload lengths), decoded column-wise: ``cohorts`` is
    ``(n, N)``, ``payloads[j]`` the ``(n, L_j)`` uint8 payloads of member ``j``."""

    association_id: np.ndarray
    fingerprint: np.ndarray
    event_time: np.ndarray
    cohorts: np.ndarray
    payloads: tuple[np.ndarray, ...]
    message_index: np.ndarray

    def __len__(self) -> int:
        return len(self.association_id)

    def take(self, index: np.ndarray | slice) -> AssociationBatch:
        return AssociationBatch(self.association_id[index], self.fingerprint[index], self.event_time[index],
                                self.cohorts[index], tuple(p[index] for p in self.payloads),
                                self.message_index[index])

    def with_event_time(self, event_time: np.ndarray) -> AssociationBatch:
        return AssociationBatch(self.association_id, self.fingerprint, event_time, self.cohorts, self.payloads,
                                self.message_index)

    def member(self, j: int, metric_id: int, fingerprint: int) -> RecordBatch:
        """Member ``j``'s reports as a version-1 batch of that metric (for its marginal sketches)."""
        n = len(self)
        return RecordBatch(np.full(n, metric_id, dtype=np.int64), np.full(n, fingerprint, dtype=np.uint32),
                           self.cohorts[:, j], self.event_time, self.payloads[j], self.message_index)


@dataclass(frozen=True)
class Malformed:
    """A message (or part of one) that does not follow the format, and why."""

    message_index: int
    reason: str


@dataclass(frozen=True)
class DecodedMessages:
    batches: list[RecordBatch]
    malformed: list[Malformed]
    #: Version-2 records (reports of an association's members together).
    association_batches: list[AssociationBatch] = field(default_factory=list)

    @property
    def record_count(self) -> int:
        return sum(len(b) for b in self.batches) + sum(len(b) for b in self.association_batches)


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
    event_time = _checked_header_fields(cohorts, "metric id", metric_id, event_time, n, "payload")
    out = _rows_with_header(HEADER_DTYPE, n, length, version=VERSION, metric_id=metric_id, fingerprint=fingerprint,
                            cohort=cohorts, payload_length=length, event_time=event_time)
    out[:, HEADER_SIZE:] = payloads
    return out


def _rows_with_header(dtype: np.dtype[Any], n: int, body: int, **fields: Any) -> np.ndarray:
    """An ``(n, 16 + body)`` uint8 array whose first 16 bytes of each row are the header ``dtype`` with ``fields``
    (a scalar or one value per row each); the body bytes are left for the caller to write."""
    header = np.zeros(n, dtype=dtype)
    for name, value in fields.items():
        header[name] = value
    out = np.empty((n, HEADER_SIZE + body), dtype=np.uint8)
    out[:, :HEADER_SIZE] = header.view(np.uint8).reshape(n, HEADER_SIZE)
    return out


def _checked_header_fields(cohorts: np.ndarray, id_name: str, ident: int, event_time: int | np.ndarray, n: int,
                           unit: str) -> np.ndarray:
    """Check the header fields both record versions share (u16 cohorts and id, u32 event times, scalar or one
    per ``unit``); returns the event times as an array."""
    if np.any(cohorts < 0) or np.any(cohorts > 0xFFFF):
        raise ReportFormatError("cohort must be in 0..65535")
    if not 0 <= ident <= 0xFFFF:
        raise ReportFormatError(f"{id_name} must be in 0..65535")
    times = np.asarray(event_time)
    if times.shape not in ((n,), ()) or np.any(times < 0) or np.any(times > 0xFFFFFFFF):
        raise ReportFormatError(f"event time must be seconds since the epoch in 0..2**32-1, scalar or one per {unit}")
    return times


def encode_association_records(
    association_id: int,
    fingerprint: int,
    cohorts: np.ndarray | Sequence[Sequence[int]],
    payloads: Sequence[np.ndarray],
    event_time: int | np.ndarray = 0,
) -> np.ndarray:
    """Encode n version-2 records, each carrying one client's reports of an association's N members, as an
    ``(n, 16 + Σ(4 + L_j))`` uint8 array (vectorized).

    ``cohorts`` is ``(n, N)`` (member j's cohort in column j); ``payloads[j]`` is member j's ``(n, L_j)`` uint8
    payloads, as for :func:`encode_records`.
    """
    blocks = [np.asarray(p, dtype=np.uint8) for p in payloads]
    count = len(blocks)
    if not 1 <= count <= MAX_ASSOCIATION_PAYLOADS:
        raise ReportFormatError(f"a version-2 record carries 1..{MAX_ASSOCIATION_PAYLOADS} payloads, got {count}")
    if any(b.ndim != 2 for b in blocks) or len({b.shape[0] for b in blocks}) != 1:
        raise ReportFormatError("payloads must be 2-D (n, L_j) uint8 arrays with the same n")
    n = blocks[0].shape[0]
    cohorts = np.asarray(cohorts)
    if cohorts.shape != (n, count):
        raise ReportFormatError(f"cohorts must be (n, N) = ({n}, {count}), got {cohorts.shape}")
    event_time = _checked_header_fields(cohorts, "association id", association_id, event_time, n, "record")
    body = sum(ENTRY_HEADER_SIZE + b.shape[1] for b in blocks)
    if body > MAX_PAYLOAD_SIZE:
        raise ReportFormatError(f"record body of {body} bytes exceeds the format's {MAX_PAYLOAD_SIZE}")
    out = _rows_with_header(ASSOCIATION_HEADER_DTYPE, n, body, version=ASSOCIATION_VERSION,
                            association_id=association_id, fingerprint=fingerprint, count=count, body_length=body,
                            event_time=event_time)
    at = HEADER_SIZE
    for j, block in enumerate(blocks):
        out[:, at:at + 2] = cohorts[:, j].astype(">u2").reshape(-1, 1).view(np.uint8)
        out[:, at + 2:at + 4] = np.array([block.shape[1]], dtype=">u2").view(np.uint8)
        out[:, at + 4:at + 4 + block.shape[1]] = block
        at += ENTRY_HEADER_SIZE + block.shape[1]
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
    association_batches: list[AssociationBatch] = []
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
            version = header["version"]
            bad = (~np.isin(version, VERSIONS) | (header["flags"] != 0)
                   | (header["payload_length"].astype(np.int64) != size - HEADER_SIZE))
            paired = version == ASSOCIATION_VERSION
            associated: list[AssociationBatch] = []
            if paired.any():
                chosen_pairs = np.flatnonzero(paired & ~bad)
                associated, broken = _association_batches(rows[chosen_pairs], owner[chosen_pairs])
                bad[chosen_pairs[broken]] = True
            if bad.any():
                # A message with a bad record, or one mixing record sizes (its later headers then
                # disagree with its first), is retried record by record to find the reason.
                bad_messages = np.unique(owner[bad])
                slow.extend(bad_messages.tolist())
                keep = ~np.isin(owner, bad_messages)
                rows, owner, header = rows[keep], owner[keep], header[keep]
                associated = [b.take(~np.isin(b.message_index, bad_messages)) for b in associated]
                paired = paired[keep]
            association_batches.extend(b for b in associated if len(b))
            if paired.any():
                rows, owner, header = rows[~paired], owner[~paired], header[~paired]
            if len(rows):
                batches.append(_batch(header, rows[:, HEADER_SIZE:], owner))
    for i in sorted(slow):
        sub, sub_associated, reason = _decode_mixed(values[i], i)
        if reason is not None:
            malformed.append(Malformed(i, reason))
        else:
            batches.extend(sub)
            association_batches.extend(sub_associated)
    return DecodedMessages(batches, malformed, association_batches)


def _association_batches(rows: np.ndarray, owner: np.ndarray) -> tuple[list[AssociationBatch], np.ndarray]:
    """Version-2 records of one size (``rows``, whose header's version, flags and body length are already
    checked) → batches of one layout each, and the indices of the rows whose body breaks the format.

    Vectorized: the rows are split by payload count, then payload by payload by the payload's length, so
    Python runs once per layout and payload position, never per record.
    """
    size = rows.shape[1]
    header = np.ascontiguousarray(rows[:, :HEADER_SIZE]).view(ASSOCIATION_HEADER_DTYPE).reshape(-1)
    count = header["count"].astype(np.int64)
    broken = [np.flatnonzero((count < 1) | (count > MAX_ASSOCIATION_PAYLOADS) | (header["reserved"] != 0))]
    out: list[AssociationBatch] = []
    valid = np.flatnonzero((count >= 1) & (count <= MAX_ASSOCIATION_PAYLOADS) & (header["reserved"] == 0))
    stack: list[tuple[np.ndarray, int, tuple[int, ...]]] = [
        (valid[count[valid] == c], HEADER_SIZE, ()) for c in _distinct(count[valid])]
    while stack:
        index, at, lengths = stack.pop()
        if not index.size:
            continue
        if len(lengths) == count[index[0]]:
            if at != size:  # entries end before the record does
                broken.append(index)
                continue
            picked = rows[index]
            cohorts = np.empty((len(index), len(lengths)), dtype=np.int64)
            payloads = []
            start = HEADER_SIZE
            for j, length in enumerate(lengths):
                cohorts[:, j] = (picked[:, start].astype(np.int64) << 8) | picked[:, start + 1]
                payloads.append(picked[:, start + ENTRY_HEADER_SIZE:start + ENTRY_HEADER_SIZE + length])
                start += ENTRY_HEADER_SIZE + length
            out.append(AssociationBatch(header["association_id"][index].astype(np.int64),
                                        header["fingerprint"][index], header["event_time"][index], cohorts,
                                        tuple(payloads), owner[index]))
            continue
        if at + ENTRY_HEADER_SIZE > size:
            broken.append(index)
            continue
        entry_length = (rows[index, at + 2].astype(np.int64) << 8) | rows[index, at + 3]
        for length in _distinct(entry_length).tolist():
            chosen = index[entry_length == length]
            if at + ENTRY_HEADER_SIZE + length > size:
                broken.append(chosen)
            else:
                stack.append((chosen, at + ENTRY_HEADER_SIZE + length, (*lengths, length)))
    return out, np.concatenate(broken) if broken else np.zeros(0, dtype=np.int64)


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique`` with a fast path for the common case of a single value."""
    if values.size and values.min() == values.max():
        return values[:1]
    return np.unique(values)


def _association_problem(data: np.ndarray, pos: int, size: int) -> str | None:
    """Why the version-2 record at byte ``pos`` (``size`` bytes, header included) breaks the format, or None."""
    header = data[pos:pos + HEADER_SIZE].copy().view(ASSOCIATION_HEADER_DTYPE)[0]
    count = int(header["count"])
    if not 1 <= count <= MAX_ASSOCIATION_PAYLOADS:
        return f"version-2 record at byte {pos} carries {count} payloads (1..{MAX_ASSOCIATION_PAYLOADS} allowed)"
    if header["reserved"] != 0:
        return f"version-2 record at byte {pos}: reserved byte 9 set ({int(header['reserved'])})"
    at = pos + HEADER_SIZE
    end = pos + size
    for j in range(count):
        if at + ENTRY_HEADER_SIZE > end:
            return f"version-2 record at byte {pos}: payload {j} starts beyond the record's end"
        length = (int(data[at + 2]) << 8) | int(data[at + 3])
        if at + ENTRY_HEADER_SIZE + length > end:
            return f"version-2 record at byte {pos}: payload {j} declares {length} bytes beyond the record's end"
        at += ENTRY_HEADER_SIZE + length
    if at != end:
        return (f"version-2 record at byte {pos}: its {count} payloads end at byte {at}, but the record declares "
                f"{size - HEADER_SIZE} body bytes (ends at byte {end})")
    return None


def _batch(header: np.ndarray, payloads: np.ndarray, owner: np.ndarray) -> RecordBatch:
    return RecordBatch(
        metric_id=header["metric_id"].astype(np.int64),
        fingerprint=header["fingerprint"],
        cohort=header["cohort"].astype(np.int64),
        event_time=header["event_time"],
        payloads=payloads,
        message_index=owner,
    )


def _decode_mixed(value: bytes, message_index: int
                  ) -> tuple[list[RecordBatch], list[AssociationBatch], str | None]:
    """Walk a message record by record (messages that mix record sizes, or that failed the fast path)."""
    pos = 0
    rows_by_size: dict[tuple[int, int], list[np.ndarray]] = {}
    data = np.frombuffer(value, dtype=np.uint8)
    while pos < len(value):
        if len(value) - pos < HEADER_SIZE:
            return [], [], f"truncated record header at byte {pos}"
        header = data[pos:pos + HEADER_SIZE].copy().view(HEADER_DTYPE)[0]
        version = int(header["version"])
        if version not in VERSIONS:
            return [], [], f"unsupported format version {version} at byte {pos}"
        if header["flags"] != 0:
            return [], [], f"reserved flags set ({int(header['flags'])}) at byte {pos}"
        size = HEADER_SIZE + int(header["payload_length"])
        if pos + size > len(value):
            return [], [], f"record at byte {pos} declares {size} bytes but only {len(value) - pos} remain"
        if version == ASSOCIATION_VERSION and (problem := _association_problem(data, pos, size)) is not None:
            return [], [], problem
        rows_by_size.setdefault((version, size), []).append(data[pos:pos + size])
        pos += size
    batches: list[RecordBatch] = []
    associated: list[AssociationBatch] = []
    for (version, _size), rows in rows_by_size.items():
        stacked = np.stack(rows)
        owner = np.full(len(rows), message_index, dtype=np.int64)
        if version == ASSOCIATION_VERSION:
            found, broken = _association_batches(stacked, owner)
            assert not broken.size, "records checked by _association_problem parse"
            associated.extend(found)
        else:
            header = stacked[:, :HEADER_SIZE].copy().view(HEADER_DTYPE).reshape(-1)
            batches.append(_batch(header, stacked[:, HEADER_SIZE:], owner))
    return batches, associated, None
