"""Hash constructions: Google RAPPOR compatibility (independent hashlib code) and pinned outputs."""

import hashlib
import struct

import numpy as np
import pytest

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import ORR, ORappor, bloom_bits, bloom_table, closed_permutation, orr_hash
from ldpstream.mechanisms.hashing import orr_table, permutation_table


def google_bloom_bits(word: bytes, cohort: int, num_hashes: int, num_bloombits: int) -> list[int]:
    """Written out from Google's rappor.get_bloom_bits: MD5(to_big_endian(cohort) + word), byte i mod k."""
    digest = hashlib.md5(struct.pack(">L", cohort) + word).digest()
    return [digest[i] % num_bloombits for i in range(num_hashes)]


@pytest.mark.parametrize("word", ["abc", "foo", "v1", "https://example.com/x?y=1", "héllo", ""])
@pytest.mark.parametrize(("cohort", "h", "k"), [(0, 2, 16), (5, 4, 256), (63, 1, 32), (2**32 - 1, 16, 100)])
def test_bloom_bits_match_google_scheme(word, cohort, h, k):
    assert bloom_bits(word, cohort, h, k) == google_bloom_bits(word.encode("utf-8"), cohort, h, k)


def test_bloom_bits_bytes_and_str_agree():
    assert bloom_bits(b"abc", 3, 2, 16) == bloom_bits("abc", 3, 2, 16)
    assert bloom_bits("é", 0, 2, 256) == google_bloom_bits(b"\xc3\xa9", 0, 2, 256)


def test_bloom_bits_extension_matches_documented_construction():
    # k > 256: E = SHA-256(be32(0) ‖ be32(c) ‖ v) ‖ SHA-256(be32(1) ‖ ...); hash i = uint32_be(E[4i:4i+4]) mod k
    def ext(word: bytes, cohort: int, h: int, k: int) -> list[int]:
        blocks = -(-4 * h // 32)
        e = b"".join(
            hashlib.sha256(struct.pack(">I", j) + struct.pack(">I", cohort) + word).digest() for j in range(blocks)
        )
        return [int.from_bytes(e[4 * i : 4 * i + 4], "big") % k for i in range(h)]

    for word in ["abc", "foo", "x" * 100]:
        assert bloom_bits(word, 3, 3, 4096) == ext(word.encode(), 3, 3, 4096)
        assert bloom_bits(word, 1, 17, 64) == ext(word.encode(), 1, 17, 64)  # h > 16: needs 3 blocks


def test_bloom_bits_pinned():
    # Literal outputs: a change in any construction must be deliberate (and breaks old data).
    assert bloom_bits("abc", 0, 2, 16) == [6, 13]
    assert bloom_bits("foo", 0, 2, 16) == [6, 6]
    assert bloom_bits("abc", 5, 4, 256) == [189, 183, 248, 161]
    assert bloom_bits("héllo", 5, 4, 256) == [187, 24, 180, 50]
    assert bloom_bits("abc", 3, 3, 4096) == [3233, 3819, 3795]
    assert bloom_bits(b"\x00\xff", 3, 3, 4096) == [515, 4006, 133]


def test_orr_hash_documented_and_pinned():
    for word, cohort, k in [("abc", 0, 2**31), ("foo", 7, 1000), ("héllo", 2, 17)]:
        d = hashlib.sha256(b"ldpstream/orr/v1" + struct.pack(">I", cohort) + word.encode()).digest()
        assert orr_hash(word, cohort, k) == int.from_bytes(d[:8], "big") % k
    assert orr_hash("abc", 0, 2**31) == 280772222
    assert orr_hash("foo", 0, 2**31) == 1138107522
    assert orr_hash("abc", 7, 1000) == 31
    assert orr_hash("héllo", 7, 1000) == 863
    assert orr_hash(b"\x00\xff", 7, 1000) == 248


def test_orr_table_matches_scalar_hash():
    cands = ["a", "b", b"c", "dd"]
    table = orr_table(cands, 5, 13)
    assert table.shape == (5, 4)
    for c in range(5):
        for s, v in enumerate(cands):
            assert table[c, s] == orr_hash(v, c, 13)


def test_permutation_documented_and_pinned():
    def perm(support: int, cohort: int, j: int) -> list[int]:
        keys = [
            int.from_bytes(
                hashlib.sha256(
                    b"ldpstream/perm/v1" + struct.pack(">I", cohort) + struct.pack(">I", j) + struct.pack(">Q", i)
                ).digest()[:8],
                "big",
            )
            for i in range(support)
        ]
        order = sorted(range(support), key=lambda i: (keys[i], i))
        out = [0] * support
        for rank, i in enumerate(order):
            out[i] = rank
        return out

    assert closed_permutation(10, 0).tolist() == [4, 0, 2, 1, 5, 7, 9, 6, 3, 8]
    assert closed_permutation(10, 3, 1).tolist() == [6, 5, 0, 1, 7, 4, 3, 8, 9, 2]
    for s, c, j in [(10, 0, 0), (37, 4, 2), (1, 9, 0)]:
        assert closed_permutation(s, c, j).tolist() == perm(s, c, j)
    p = closed_permutation(1000, 5)
    assert sorted(p.tolist()) == list(range(1000))
    assert not p.flags.writeable


def test_closed_tables_use_permutations():
    orr = ORR(k=7, epsilon=1.0, cohorts=3, support=20)
    table = orr.symbol_table()
    for c in range(3):
        np.testing.assert_array_equal(table[c], closed_permutation(20, c) % 7)
    orappor = ORappor(k=8, epsilon=1.0, cohorts=3, hashes=2, support=20)
    bloom = orappor.bloom_table()
    np.testing.assert_array_equal(bloom, permutation_table(20, 3, 2) % 8)
    for c in range(3):
        np.testing.assert_array_equal(bloom[c, :, 0], closed_permutation(20, c, 0) % 8)  # same π_c as O-RR
    np.testing.assert_array_equal(orappor.bloom_table([3, 1])[:, 1], bloom[:, 1])


def test_bloom_table_shape_and_consistency():
    cands = ["a", "b", "c"]
    t = bloom_table(cands, 4, 2, 16)
    assert t.shape == (4, 3, 2) and t.dtype == np.int64
    assert t[2, 1].tolist() == bloom_bits("b", 2, 2, 16)
    assert bloom_table([], 4, 2, 16).shape == (4, 0, 2)


def test_bad_values_rejected():
    with pytest.raises(ParameterError):
        bloom_bits(3, 0, 2, 16)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        bloom_bits("a", -1, 2, 16)
    with pytest.raises(ParameterError):
        closed_permutation(0, 0)
