"""The shape of a string for discovery: alphabet, padding, truncation, n-gram slots (Fanti, Pihur, Erlingsson
2016 §5; docs/math/dictionary.md).

A string is padded with :attr:`StringShape.pad` (or truncated) to exactly ``length`` characters M over the
alphabet Σ (the pad character included). It is cut into ``slots = M / n`` non-overlapping n-grams, slot j
covering characters ``[j·n, (j + 1)·n)``. Every n-gram over Σ has an index in ``0..|Σ|^n − 1``: the base-|Σ|
number of its characters' alphabet positions (first character most significant), so the list of all n-grams
(:meth:`StringShape.all_ngrams`) is in index order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.prefix_olh import DEFAULT_ALPHABET, DEFAULT_PAD

__all__ = ["DEFAULT_ALPHABET", "DEFAULT_PAD", "StringShape"]



@dataclass(frozen=True)
class StringShape:
    """Length M, n-gram size n (M a multiple of n), alphabet Σ (the pad character is appended if missing)."""

    length: int = 8
    ngram: int = 2
    alphabet: str = DEFAULT_ALPHABET
    pad: str = DEFAULT_PAD

    def __post_init__(self) -> None:
        if len(self.pad) != 1:
            raise ParameterError(f"the pad must be one character, got {self.pad!r}")
        if self.pad not in self.alphabet:
            object.__setattr__(self, "alphabet", self.alphabet + self.pad)
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ParameterError("the alphabet repeats a character")
        if self.ngram < 1 or self.length < 2 * self.ngram or self.length % self.ngram:
            raise ParameterError(
                f"the length ({self.length}) must be a multiple of the n-gram size ({self.ngram}) with at "
                "least two slots")
        if len(self.alphabet) ** self.ngram > 2**20:
            raise ParameterError(f"|Σ|^n = {len(self.alphabet)}^{self.ngram} n-grams: too many to decode")

    @property
    def slots(self) -> int:
        """k = M / n n-gram positions."""
        return self.length // self.ngram

    @property
    def ngram_count(self) -> int:
        """|Σ|^n."""
        return int(len(self.alphabet) ** self.ngram)

    def padded(self, text: str) -> str:
        """``text`` truncated or right-padded to M characters; a character outside Σ is an error."""
        bad = sorted(set(text) - set(self.alphabet))
        if bad:
            raise ParameterError(f"{text!r}: characters outside the alphabet: {''.join(bad)!r}")
        return text[: self.length].ljust(self.length, self.pad)

    def unpadded(self, text: str) -> str:
        """``text`` with its trailing padding removed."""
        return text.rstrip(self.pad)

    def codes(self, strings: Sequence[str]) -> np.ndarray:
        """``(S, M)`` int64 alphabet positions of the padded strings."""
        lookup = {c: i for i, c in enumerate(self.alphabet)}
        out = np.empty((len(strings), self.length), dtype=np.int64)
        for row, text in enumerate(strings):
            out[row] = [lookup[c] for c in self.padded(text)]
        return out

    def ngram_indices(self, strings: Sequence[str]) -> np.ndarray:
        """``(S, k)`` int64: the index of each string's n-gram in each slot."""
        codes = self.codes(strings).reshape(len(strings), self.slots, self.ngram)
        weights = len(self.alphabet) ** np.arange(self.ngram - 1, -1, -1, dtype=np.int64)
        out: np.ndarray = codes @ weights
        return out

    def all_ngrams(self) -> list[str]:
        """Every n-gram over Σ, in index order."""
        grams = [""]
        for _ in range(self.ngram):
            grams = [g + c for g in grams for c in self.alphabet]
        return grams

    def assemble(self, ngrams: Sequence[str]) -> str:
        """The padded string whose slots hold ``ngrams`` (one per slot, in slot order)."""
        if len(ngrams) != self.slots or any(len(g) != self.ngram for g in ngrams):
            raise ParameterError(f"need {self.slots} n-grams of {self.ngram} characters")
        return "".join(ngrams)
