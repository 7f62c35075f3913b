"""Randomness sources for the mechanisms.

Every mechanism encodes through one vectorized code path that draws from a ``Randomness`` source:

- :data:`SECURE` draws from the operating system's CSPRNG (``os.urandom``); this is what a real client
  runs, because the privacy guarantee assumes the adversary cannot predict the noise.
- A seeded :class:`numpy.random.Generator` (``np.random.default_rng(seed)``) is for simulation, load
  generation and tests only: it is fast and reproducible, and predictable.
- :class:`KeyedRandomness` is a deterministic stream keyed by a client secret (HMAC-SHA256 in counter
  mode): what a client's memoized permanent response is drawn with, so that the same secret and input
  give the same response after a restart, and an adversary without the secret cannot predict it
  (docs/math/privacy-accounting.md#longitudinal-privacy-memoized-permanent-response).

All expose the same three methods, ``random(size)`` (uniform floats in [0, 1)),
``integers(low, high, size)`` and ``bytes(length)``, so mechanism code never needs to know which one it has.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from abc import ABC, abstractmethod
from typing import Protocol

import numpy as np

_TWO_POW_MINUS_53 = 2.0**-53


class Randomness(Protocol):
    """The subset of :class:`numpy.random.Generator` the mechanisms use."""

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray: ...

    def integers(
        self, low: int, high: int | None = None, size: int | tuple[int, ...] | None = None
    ) -> np.ndarray: ...

    def bytes(self, length: int) -> bytes: ...


class ByteRandomness(ABC):
    """Uniform variates built from a source of uniform random bytes (:meth:`bytes`), vectorized with numpy.

    Floats use the top 53 bits of a 64-bit draw (exactly representable, uniform on the 2^-53 grid);
    integers use rejection sampling, so they carry no modulo bias. Exact whenever the bytes are uniform.
    """

    @abstractmethod
    def bytes(self, length: int) -> bytes:
        """``length`` uniform random bytes."""

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray:
        count = 1 if size is None else int(np.prod(size))
        words = np.frombuffer(self.bytes(8 * count), dtype=np.uint64)
        out = (words >> np.uint64(11)).astype(np.float64) * _TWO_POW_MINUS_53
        return out.reshape(() if size is None else size)

    def integers(
        self, low: int, high: int | None = None, size: int | tuple[int, ...] | None = None
    ) -> np.ndarray:
        if high is None:
            low, high = 0, low
        span = int(high) - int(low)
        if span <= 0:
            raise ValueError(f"integers: high ({high}) must exceed low ({low})")
        count = 1 if size is None else int(np.prod(size))
        # Largest multiple of span representable in 64 bits: draws at or above it are rejected.
        limit = (2**64 // span) * span
        out = np.empty(0, dtype=np.uint64)
        while out.size < count:
            need = count - out.size
            words = np.frombuffer(self.bytes(8 * (need + need // 8 + 1)), dtype=np.uint64)
            if limit < 2**64:
                words = words[words < np.uint64(limit)]
            out = np.concatenate([out, words[:need]])
        values = (out % np.uint64(span)).astype(np.int64) + int(low)
        return values.reshape(() if size is None else size)


class SecureRandomness(ByteRandomness):
    """Uniform variates from ``os.urandom`` (see :class:`ByteRandomness` for how floats and integers are made)."""

    def bytes(self, length: int) -> bytes:
        return os.urandom(length)


class KeyedRandomness(ByteRandomness):
    """A deterministic byte stream: block ``j`` (j = 0, 1, ...) is ``HMAC-SHA256(key, message ‖ be32(j))``,
    the blocks concatenated in order and consumed front to back by :meth:`bytes`.

    HMAC-SHA256 is a pseudo-random function of the message under a secret key, so to anyone without
    ``key`` the stream is indistinguishable from uniform bytes, and every :class:`ByteRandomness` draw
    made from it has the exact law it has with uniform bytes (up to that indistinguishability). The same
    ``(key, message)`` always yields the same stream: a fresh instance replays the same draws, which is
    what makes a permanent response permanent across restarts. Different messages give independent
    streams. Not thread-safe (it holds a read position); make one per draw sequence.
    """

    __slots__ = ("_block", "_buffer", "_key", "_message")

    def __init__(self, key: bytes, message: bytes) -> None:
        if not isinstance(key, bytes | bytearray) or not key:
            raise ValueError("KeyedRandomness needs a non-empty key")
        self._key = bytes(key)
        self._message = bytes(message)
        self._block = 0
        self._buffer = b""

    def bytes(self, length: int) -> bytes:
        while len(self._buffer) < length:
            block = hmac.new(self._key, self._message + struct.pack(">I", self._block), hashlib.sha256).digest()
            self._buffer += block
            self._block += 1
        out, self._buffer = self._buffer[:length], self._buffer[length:]
        return out


SECURE = SecureRandomness()
"""The process-wide secure source; stateless, so sharing it is safe."""


def uniform_bytes(rng: Randomness, count: int) -> np.ndarray:
    """``count`` uniform random bytes from ``rng`` as a ``(count,)`` uint8 array.

    A seeded :class:`numpy.random.Generator` (simulation only) yields them as the raw 64-bit words of its bit
    generator viewed as bytes: every output bit of PCG64 (and numpy's other bit generators) is uniform, and
    this is about five times faster than ``Generator.bytes``. Any other source (:data:`SECURE`,
    :class:`KeyedRandomness`) is read through its ``bytes`` method, unchanged.
    """
    if isinstance(rng, np.random.Generator):
        words = np.asarray(rng.bit_generator.random_raw(-(-count // 8)), dtype=np.uint64)
        return words.view(np.uint8)[:count]
    return np.frombuffer(rng.bytes(count), dtype=np.uint8)
