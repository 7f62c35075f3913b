"""Randomness sources for the mechanisms.

Every mechanism encodes through one vectorized code path that draws from a ``Randomness`` source:

- :data:`SECURE` draws from the operating system's CSPRNG (``os.urandom``); this is what a real client
  runs, because the privacy guarantee assumes the adversary cannot predict the noise.
- A seeded :class:`numpy.random.Generator` (``np.random.default_rng(seed)``) is for simulation, load
  generation and tests only: it is fast and reproducible, and predictable.

Both expose the same three methods, ``random(size)`` (uniform floats in [0, 1)),
``integers(low, high, size)`` and ``bytes(length)``, so mechanism code never needs to know which one it has.
"""

from __future__ import annotations

import os
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


class SecureRandomness:
    """Uniform variates from ``os.urandom``, vectorized with numpy (and raw bytes).

    Floats use the top 53 bits of a 64-bit draw (exactly representable, uniform on the 2^-53 grid);
    integers use rejection sampling, so they carry no modulo bias.
    """

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray:
        count = 1 if size is None else int(np.prod(size))
        words = np.frombuffer(os.urandom(8 * count), dtype=np.uint64)
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
            words = np.frombuffer(os.urandom(8 * (need + need // 8 + 1)), dtype=np.uint64)
            if limit < 2**64:
                words = words[words < np.uint64(limit)]
            out = np.concatenate([out, words[:need]])
        values = (out % np.uint64(span)).astype(np.int64) + int(low)
        return values.reshape(() if size is None else size)


    def bytes(self, length: int) -> bytes:
        return os.urandom(length)


SECURE = SecureRandomness()
"""The process-wide secure source; stateless, so sharing it is safe."""
