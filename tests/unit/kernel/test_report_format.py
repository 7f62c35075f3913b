"""The report wire format: byte layout, round trips, batching, and refusal of bad bytes."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.errors import ReportFormatError
from ldpstream.mechanisms.base import pack_bits, unpack_bits
from ldpstream.wire import (
    HEADER_SIZE,
    decode_messages,
    encode_records,
    symbol_payloads,
    symbols_from_payloads,
)


def test_byte_layout_of_a_symbol_record_matches_the_documented_table():
    rows = encode_records(0x0102, 0xA1B2C3D4, [0x0304], symbol_payloads([0x05060708]), event_time=0x090A0B0C)
    assert rows.shape == (1, 20)
    assert rows[0].tobytes() == bytes([1, 0, 0x01, 0x02, 0xA1, 0xB2, 0xC3, 0xD4, 0x03, 0x04, 0x00, 0x04,
                                       0x09, 0x0A, 0x0B, 0x0C, 0x05, 0x06, 0x07, 0x08])


def test_a_128_bit_rappor_report_is_32_bytes():
    bits = np.zeros((1, 128), dtype=np.uint8)
    bits[0, [0, 9, 127]] = 1
    rows = encode_records(5, 1, [3], pack_bits(bits))
    assert rows.shape[1] == HEADER_SIZE + 16 == 32
    decoded = decode_messages([rows[0].tobytes()])
    (batch,) = decoded.batches
    np.testing.assert_array_equal(unpack_bits(batch.payloads, 128), bits)
    # little-endian bit order: bit 0 is the lowest bit of byte 0, bit 127 the highest of byte 15
    assert batch.payloads[0, 0] == 0b1 and batch.payloads[0, 1] == 0b10 and batch.payloads[0, 15] == 0x80


def test_one_record_per_message_and_gateway_batches_decode_to_the_same_records():
    rng = np.random.default_rng(1)
    symbols = rng.integers(0, 1000, 512)
    cohorts = rng.integers(0, 64, 512)
    rows = encode_records(7, 99, cohorts, symbol_payloads(symbols), event_time=1_700_000_000)
    singles = [row.tobytes() for row in rows]
    gateway = [rows[i:i + 64].tobytes() for i in range(0, 512, 64)]
    mixed = singles[:128] + gateway[2:]
    expected = sorted(zip(symbols.tolist(), cohorts.tolist(), strict=True))
    for values in (singles, gateway, mixed):
        decoded = decode_messages(values)
        assert not decoded.malformed
        got = np.concatenate([symbols_from_payloads(b.payloads) for b in decoded.batches])
        got_cohorts = np.concatenate([b.cohort for b in decoded.batches])
        assert sorted(zip(got.tolist(), got_cohorts.tolist(), strict=True)) == expected
        assert all((b.event_time == 1_700_000_000).all() for b in decoded.batches)


def test_gateway_batch_round_trip_is_exact_and_keeps_message_indices():
    rows = encode_records(7, 99, np.arange(10), symbol_payloads(np.arange(10) * 3))
    decoded = decode_messages([rows[:4].tobytes(), rows[4:].tobytes()])
    # messages of different lengths decode as separate batches; records keep their message's index
    owner = np.concatenate([b.message_index for b in decoded.batches])
    cohort = np.concatenate([b.cohort for b in decoded.batches])
    symbol = np.concatenate([symbols_from_payloads(b.payloads) for b in decoded.batches])
    order = np.argsort(cohort)
    np.testing.assert_array_equal(owner[order], [0] * 4 + [1] * 6)
    np.testing.assert_array_equal(symbol[order], np.arange(10) * 3)


def test_messages_mixing_record_sizes_are_decoded_record_by_record():
    small = encode_records(1, 5, [0], symbol_payloads([4]))
    large = encode_records(2, 6, [1], pack_bits(np.ones((1, 64), dtype=np.uint8)))
    decoded = decode_messages([small.tobytes() + large.tobytes()])
    assert not decoded.malformed
    sizes = sorted(b.payloads.shape[1] for b in decoded.batches)
    assert sizes == [4, 8]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "shorter than a record header"),
        (b"\x01" * 5, "shorter than a record header"),
        (bytes([3]) + bytes(19), "unsupported format version 3"),
        (bytes([2]) + bytes(9) + bytes([0, 4]) + bytes(8), "carries 0 payloads"),
        (bytes([1, 1]) + bytes(18), "reserved flags"),
    ],
)
def test_malformed_messages_are_reported_not_raised(value, reason):
    decoded = decode_messages([value])
    assert decoded.record_count == 0
    (bad,) = decoded.malformed
    assert reason in bad.reason


def test_a_bad_record_refuses_its_whole_message_but_not_the_others():
    rows = encode_records(1, 5, [0, 0, 0], symbol_payloads([1, 2, 3]))
    corrupt = rows.copy()
    corrupt[1, 0] = 9  # version of the second record
    truncated = rows[0].tobytes()[:-1]
    decoded = decode_messages([corrupt.tobytes(), rows[2].tobytes(), truncated])
    assert [m.message_index for m in decoded.malformed] == [0, 2]
    assert decoded.record_count == 1
    assert symbols_from_payloads(decoded.batches[0].payloads).tolist() == [3]


def test_encoding_rejects_out_of_range_fields():
    with pytest.raises(ReportFormatError):
        encode_records(70_000, 1, [0], symbol_payloads([1]))
    with pytest.raises(ReportFormatError):
        encode_records(1, 1, [70_000], symbol_payloads([1]))
    with pytest.raises(ReportFormatError):
        encode_records(1, 1, [0], np.zeros(4, dtype=np.uint8))
