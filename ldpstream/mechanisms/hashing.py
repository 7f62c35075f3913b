"""Stable hashing of values to symbols, Bloom bits and per-cohort permutations
(docs/math/mechanisms.md#hash-constructions).

Every construction is a pure function of its documented inputs (digests from :mod:`hashlib`, fixed byte
encodings), so every client and server computes the same result on any machine, process or Python version.
Python's :func:`hash` and numpy's random streams are never used. A ``str`` value is hashed as its UTF-8 bytes,
a ``bytes`` value as is; a cohort ``c`` (``0 <= c < 2**32``) as ``be32(c)``, 4 bytes big-endian; ``‖`` is
concatenation.

RAPPOR / O-RAPPOR Bloom filter
    * **Google's scheme**, whenever ``k <= 256`` and ``h <= 16``: ``d = MD5(be32(c) ‖ v)``; hash ``i`` sets
      bit ``d[i] mod k`` (``d[i]`` the i-th digest byte), bit-identical to Google's ``get_bloom_bits``.
    * **Extension** for ``k > 256`` or ``h > 16``: the byte stream ``E = SHA-256(be32(0) ‖ be32(c) ‖ v) ‖
      SHA-256(be32(1) ‖ be32(c) ‖ v) ‖ ...`` (as many 32-byte blocks as needed); hash ``i`` sets bit
      ``uint32_be(E[4i : 4i+4]) mod k`` (modulo bias at most ``k / 2**32``).

O-RR hash ``HASH_c(s) mod k``
    ``uint64_be(SHA-256(b"ldpstream/orr/v1" ‖ be32(c) ‖ v)[0:8]) mod k`` (modulo bias at most
    ``k / 2**64``).

OLH hash ``h_c(s)`` (docs/math/mechanisms.md#olh)
    ``mix(x ⊕ mix(c + 1)) mod k``, ``x = uint64_be(SHA-256(b"ldpstream/olh/v1" ‖ v)[0:8])`` (a closed symbol ``i``:
    ``v = uint64_be(i)``), ``mix`` SplitMix64's finalizer in wrapping 64-bit arithmetic.

Closed-alphabet permutations ("minimal perfect hash", Kairouz et al. 2016 §5.4)
    For cohort ``c`` and hash index ``j`` (``j = 0`` for O-RR and for O-RAPPOR's first hash), symbol ``i`` in
    ``0..S-1`` gets the key ``uint64_be(SHA-256(b"ldpstream/perm/v1" ‖ be32(c) ‖ be32(j) ‖
    uint64_be(i))[0:8])``; ``π_{c,j}(i)`` is the rank of ``i``'s key among the S keys (ascending, ties broken
    by ``i``).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms._common import MAX_COHORTS, as_index_array

Value = str | bytes

#: Google's MD5 scheme reads one digest byte per hash: it covers k <= 256 and h <= 16.
GOOGLE_MAX_BITS = 256
GOOGLE_MAX_HASHES = 16

_ORR_PREFIX = b"ldpstream/orr/v1"
_PERM_PREFIX = b"ldpstream/perm/v1"
_OLH_PREFIX = b"ldpstream/olh/v1"
_MIX_GAMMA, _MIX_1, _MIX_2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def value_bytes(value: Value) -> bytes:
    """The bytes a value is hashed as: UTF-8 for ``str``, unchanged for ``bytes``."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise ParameterError(f"values must be str or bytes, got {type(value).__name__}")


def value_index(values: Sequence[Any], support: int | None) -> tuple[np.ndarray, list[bytes] | None]:
    """The index of each value into the table an encoder reads, and the values that table is of.

    Closed alphabet (``support`` given): the values are the indices ``0..support-1`` themselves (checked), and
    None (the table of the whole alphabet). Open: each value's index among the distinct values (told apart by
    :func:`value_bytes`), and the distinct values' bytes in first-seen order, so each is hashed once.
    """
    if support is not None:
        return as_index_array("values", np.asarray(values), support), None
    distinct: dict[bytes, int] = {}
    index = np.fromiter(
        (distinct.setdefault(value_bytes(v), len(distinct)) for v in values),
        dtype=np.int64,
        count=len(values),
    )
    return index, list(distinct)


def cohort_bytes(cohort: int) -> bytes:
    """``be32(cohort)``: the cohort as 4 bytes big-endian (Google's ``to_big_endian``)."""
    if not 0 <= int(cohort) < MAX_COHORTS:
        raise ParameterError(f"cohort must be in 0..2**32-1, got {cohort}")
    return struct.pack(">I", int(cohort))


def uses_google_bloom(k: int, hashes: int) -> bool:
    """Whether ``(k, h)`` is inside Google's MD5 Bloom scheme (else the documented extension)."""
    return k <= GOOGLE_MAX_BITS and hashes <= GOOGLE_MAX_HASHES


def _bloom_digest_bytes(data: bytes, k: int, hashes: int) -> tuple[bytes, int]:
    """Digest material for one (cohort, value) and the bytes per hash (1 Google, 4 extension)."""
    if uses_google_bloom(k, hashes):
        return hashlib.md5(data).digest(), 1
    blocks = -(-4 * hashes // 32)
    return b"".join(hashlib.sha256(struct.pack(">I", j) + data).digest() for j in range(blocks)), 4


def bloom_bits(value: Value, cohort: int, hashes: int, k: int) -> list[int]:
    """The ``h`` Bloom bit indices (with repeats, in hash order) of ``value`` in ``cohort``.

    Google's ``get_bloom_bits(word, cohort, num_hashes, num_bloombits)`` when k <= 256 and h <= 16;
    see the module docstring for the extension.
    """
    bits: list[int] = bloom_table([value], range(cohort, cohort + 1), hashes, k)[0, 0].tolist()
    return bits


def bloom_table(candidates: Sequence[Value], cohorts: int | range, hashes: int, k: int) -> np.ndarray:
    """``(C, S, h)`` int64 Bloom bit indices of every candidate in every cohort.

    ``cohorts`` is a count C (cohorts 0..C-1) or a range of cohort numbers. One digest per
    (cohort, candidate); the reduction to bit indices is vectorized.
    """
    cohort_range = range(cohorts) if isinstance(cohorts, int) else cohorts
    encoded = [value_bytes(v) for v in candidates]
    per_hash = 1 if uses_google_bloom(k, hashes) else 4
    chunks: list[bytes] = []
    width = 0
    for c in cohort_range:
        prefix = cohort_bytes(c)
        for v in encoded:
            digest, _ = _bloom_digest_bytes(prefix + v, k, hashes)
            width = len(digest)
            chunks.append(digest)
    C, S = len(cohort_range), len(encoded)
    if C * S == 0:
        return np.zeros((C, S, hashes), dtype=np.int64)
    raw = np.frombuffer(b"".join(chunks), dtype=np.uint8).reshape(C, S, width)
    if per_hash == 1:
        words = raw[:, :, :hashes].astype(np.int64)
    else:
        be = raw[:, :, : 4 * hashes].reshape(C, S, hashes, 4).astype(np.int64)
        words = (be[..., 0] << 24) | (be[..., 1] << 16) | (be[..., 2] << 8) | be[..., 3]
    return words % k


def orr_hash(value: Value, cohort: int, k: int) -> int:
    """O-RR's ``HASH_c(value) mod k`` (see the module docstring for the exact construction)."""
    digest = hashlib.sha256(_ORR_PREFIX + cohort_bytes(cohort) + value_bytes(value)).digest()
    return int.from_bytes(digest[:8], "big") % k


def orr_table(candidates: Sequence[Value], cohorts: int, k: int) -> np.ndarray:
    """``(C, S)`` int64 table of :func:`orr_hash` for every candidate in every cohort 0..C-1."""
    encoded = [value_bytes(v) for v in candidates]
    out = np.empty((cohorts, len(encoded)), dtype=np.int64)
    for c in range(cohorts):
        prefix = _ORR_PREFIX + cohort_bytes(c)
        raw = b"".join(hashlib.sha256(prefix + v).digest()[:8] for v in encoded)
        out[c] = np.frombuffer(raw, dtype=">u8") % np.uint64(k) if encoded else []
    return out


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function of uint64 ``x`` (elementwise, wrapping): a bijection of 64-bit words whose
    output bits each depend on every input bit."""
    z = np.asarray(x, dtype=np.uint64) + _MIX_GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    out: np.ndarray = z ^ (z >> np.uint64(31))
    return out


def olh_keys(values: Sequence[Value] | np.ndarray, closed: bool = False) -> np.ndarray:
    """``(S,)`` uint64: each value's OLH key (module docstring); ``closed``: the values are symbol indices."""
    if closed:
        encoded = [struct.pack(">Q", int(i)) for i in np.asarray(values, dtype=np.int64).ravel()]
    else:
        encoded = [value_bytes(v) for v in values]
    raw = b"".join(hashlib.sha256(_OLH_PREFIX + v).digest()[:8] for v in encoded)
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64)


def olh_seeds(cohorts: np.ndarray | int) -> np.ndarray:
    """``mix(c + 1)`` for each cohort ``c`` (``cohorts``: a count C for 0..C-1, or cohort numbers)."""
    c = np.arange(cohorts, dtype=np.uint64) if isinstance(cohorts, int) else np.asarray(cohorts, dtype=np.uint64)
    return mix64(c + np.uint64(1))


def olh_table_from_keys(keys: np.ndarray, cohorts: np.ndarray | int, k: int) -> np.ndarray:
    """``(C, S)`` int64: ``h_c(s)`` for keys ``keys`` (:func:`olh_keys`) in ``cohorts``."""
    mixed = mix64(olh_seeds(cohorts)[:, None] ^ np.asarray(keys, dtype=np.uint64)[None, :])
    out: np.ndarray = (mixed % np.uint64(k)).astype(np.int64)
    return out


def olh_table(values: Sequence[Value] | np.ndarray, cohorts: int, k: int, closed: bool = False) -> np.ndarray:
    """``(C, S)`` int64 table of the OLH hash of every value in every cohort 0..C-1."""
    return olh_table_from_keys(olh_keys(values, closed), cohorts, k)


@lru_cache(maxsize=256)
def _permutation_cached(support: int, cohort: int, hash_index: int) -> np.ndarray:
    prefix = _PERM_PREFIX + cohort_bytes(cohort) + struct.pack(">I", hash_index)
    raw = b"".join(hashlib.sha256(prefix + struct.pack(">Q", i)).digest()[:8] for i in range(support))
    keys = np.frombuffer(raw, dtype=">u8").astype(np.uint64)
    order = np.argsort(keys, kind="stable")
    perm = np.empty(support, dtype=np.int64)
    perm[order] = np.arange(support, dtype=np.int64)
    perm.setflags(write=False)
    return perm


def closed_permutation(support: int, cohort: int, hash_index: int = 0) -> np.ndarray:
    """``π_{c,j}`` as a read-only int64 array: ``perm[i]`` is the image of symbol ``i`` in 0..S-1.

    Deterministic from (support, cohort, hash_index) only (module docstring); cached per process.
    """
    if support < 1:
        raise ParameterError(f"support must be >= 1, got {support}")
    if not 0 <= hash_index < MAX_COHORTS:
        raise ParameterError(f"hash_index must be in 0..2**32-1, got {hash_index}")
    return _permutation_cached(int(support), int(cohort), int(hash_index))


def permutation_table(support: int, cohorts: int, hashes: int = 1) -> np.ndarray:
    """``(C, S, h)`` int64 array ``π_{c,j}(s)`` for cohorts 0..C-1 and hash indices 0..h-1."""
    out = np.empty((cohorts, support, hashes), dtype=np.int64)
    for c in range(cohorts):
        for j in range(hashes):
            out[c, :, j] = closed_permutation(support, c, j)
    return out
