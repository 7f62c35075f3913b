"""The bit-string codec of Google's RAPPOR files: ``'0'``/``'1'`` strings, most significant bit first
(docs/math/estimators.md, "Google RAPPOR files").

Character 0 of a k-character string is bit k−1; bit i has value 2^i. Strings are converted with numpy in
one pass: the n strings of k characters are joined into one ``(n, k)`` byte array, checked to be all
``'0'``/``'1'``, and reversed along the bit axis.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ldpstream.errors import ReportFormatError


def bits_from_strings(strings: Sequence[str], k: int, what: str = "bit string") -> np.ndarray:
    """``n`` strings of ``k`` '0'/'1' characters, most significant bit first → ``(n, k)`` uint8, column i = bit i.

    Vectorized: one join, one ``frombuffer``, one validity check, one reversal.
    """
    n = len(strings)
    if n == 0:
        return np.zeros((0, k), dtype=np.uint8)
    lengths = np.fromiter((len(s) for s in strings), dtype=np.int64, count=n)
    if np.any(lengths != k):
        i = int(np.flatnonzero(lengths != k)[0])
        raise ReportFormatError(f"{what} {i}: expected {k} bits, got {strings[i]!r}")
    try:
        raw = "".join(strings).encode("ascii")
    except UnicodeEncodeError:
        raise ReportFormatError(f"{what}s must hold only '0' and '1'") from None
    chars = np.frombuffer(raw, dtype=np.uint8).reshape(n, k) - ord("0")
    if np.any(chars > 1):
        i = int(np.flatnonzero((chars > 1).any(axis=1))[0])
        raise ReportFormatError(f"{what} {i}: digits must be 0 or 1, got {strings[i]!r}")
    return np.ascontiguousarray(chars[:, ::-1])


def strings_from_bits(bits: np.ndarray) -> list[str]:
    """Inverse of :func:`bits_from_strings`: ``(n, k)`` 0/1 (column i = bit i) → strings, MSB first."""
    bits = np.asarray(bits)
    n, k = bits.shape
    if n == 0:
        return []
    chars = (bits[:, ::-1].astype(np.uint8) != 0).astype(np.uint8) + ord("0")
    text = np.ascontiguousarray(chars).tobytes().decode("ascii")
    return [text[i * k : (i + 1) * k] for i in range(n)]
